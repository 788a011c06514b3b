//! The buffer pool: thread-local free lists of uniquely owned buffers, keyed by length.
//!
//! Every kernel output is taken from here ([`alloc`]) and every uniquely owned buffer is handed
//! back when its last [`crate::CpuTensor`] is dropped ([`recycle`], called by the tensor's `Drop`,
//! so `GradValue::drop`, the tape's release and plain Rust drops all feed it). A pooled entry is
//! a whole `Arc<Vec<T>>` (the `Arc` header, the `Vec` and its data), so reusing one costs neither `malloc` nor
//! page faults: glibc hands big freed blocks back to the OS and faults them in again on the next
//! step, and even small blocks cost two allocator round trips (header and data) per tensor.
//!
//! Lists are per thread (no locking; a buffer freed on another thread simply joins that thread's
//! pool) and bounded: at most [`MAX_POOLED_BYTES`] per thread and element type; beyond that a
//! freed buffer goes back to the allocator.
//!
//! Kernels' scratch (a convolution's padded image, patch matrix, transforms) has a list of its
//! own ([`alloc_scratch`], [`recycle_scratch`]): at most [`SCRATCH_BUFFERS`] buffers, and a
//! request takes the most recently returned one that is long enough (its first elements), so
//! consecutive kernels of different sizes keep working in the same, cache-warm memory. Taken by
//! exact length, the first convolution of each of ResNet-18's stages got buffers last touched a
//! whole forward earlier: 1.86 against 1.15 ms for the same layer warm, and the network's
//! forward 0.2–1.5 ms slower at one thread (three alternating rounds).

use crate::scalar::CpuScalar;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A tensor's storage: one flat, row-major buffer shared by reference counting. One pointer wide,
/// so a tensor is its shape plus 8 bytes.
pub type Buffer<T> = Arc<Vec<T>>;

/// Lengths below this have a directly indexed free list; longer ones live in a map.
const SMALL_LENS: usize = 1024;

/// Upper bound on the bytes one thread keeps pooled per element type.
pub const MAX_POOLED_BYTES: usize = 512 << 20;

/// Bookkeeping charge per pooled entry beyond its data (the `Arc` header, list slot).
const ENTRY_OVERHEAD: usize = 64;

/// Most scratch buffers one thread keeps per element type (beyond it the shortest is freed):
/// a convolution's backward holds five at once.
pub const SCRATCH_BUFFERS: usize = 8;

/// Free lists of one element type on one thread.
#[derive(Debug)]
pub struct BufferPool<T> {
    small: Vec<Vec<Buffer<T>>>,
    large: BTreeMap<usize, Vec<Buffer<T>>>,
    bytes: usize,
    /// Scratch buffers, most recently returned last.
    scratch: Vec<Buffer<T>>,
}

impl<T> BufferPool<T> {
    pub const fn new() -> Self {
        BufferPool {
            small: Vec::new(),
            large: BTreeMap::new(),
            bytes: 0,
            scratch: Vec::new(),
        }
    }

    fn cost(len: usize) -> usize {
        len.saturating_mul(std::mem::size_of::<T>())
            .saturating_add(ENTRY_OVERHEAD)
    }

    #[inline]
    fn take(&mut self, len: usize) -> Option<Buffer<T>> {
        let list = if len < SMALL_LENS {
            self.small.get_mut(len)?
        } else {
            self.large.get_mut(&len)?
        };
        let a = list.pop()?;
        self.bytes -= Self::cost(len);
        // entries are unique when stored (`recycle` takes the last handle), so no re-check;
        // were one shared, the first write through it would copy (`Arc::make_mut`)
        debug_assert!(Arc::strong_count(&a) == 1);
        Some(a)
    }

    #[inline]
    fn put(&mut self, a: Buffer<T>) {
        let len = a.len();
        let cost = Self::cost(len);
        if self.bytes.saturating_add(cost) > MAX_POOLED_BYTES {
            return;
        }
        let list = if len < SMALL_LENS {
            if self.small.len() <= len {
                self.small.resize_with(len + 1, Vec::new);
            }
            &mut self.small[len]
        } else {
            self.large.entry(len).or_default()
        };
        list.push(a);
        self.bytes += cost;
    }

    /// The most recently returned scratch buffer of at least `len` elements.
    fn take_scratch(&mut self, len: usize) -> Option<Buffer<T>> {
        let i = self.scratch.iter().rposition(|b| b.len() >= len)?;
        Some(self.scratch.remove(i))
    }

    /// Keeps `a` as the most recent scratch buffer, freeing the shortest beyond
    /// [`SCRATCH_BUFFERS`].
    fn put_scratch(&mut self, a: Buffer<T>) {
        self.scratch.push(a);
        if self.scratch.len() > SCRATCH_BUFFERS {
            let shortest = (0..self.scratch.len()).min_by_key(|&i| self.scratch[i].len());
            if let Some(i) = shortest {
                self.scratch.remove(i);
            }
        }
    }

    /// Bytes currently pooled (data plus bookkeeping charge).
    pub fn pooled_bytes(&self) -> usize {
        self.bytes
    }

    fn clear(&mut self) {
        self.small.clear();
        self.large.clear();
        self.bytes = 0;
        self.scratch.clear();
    }
}

impl<T> Default for BufferPool<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// A uniquely owned buffer of `len` elements whose contents are unspecified (a recycled buffer
/// keeps its old values; a fresh one is zeroed). Callers overwrite every element.
#[inline]
pub(crate) fn alloc<T: CpuScalar>(len: usize) -> Buffer<T> {
    if let Some(a) = T::with_pool(|p| p.take(len)).flatten() {
        return a;
    }
    Arc::new(vec![T::ZERO; len])
}

/// Offers a buffer to this thread's pool. `a` must be the only handle to its storage (the
/// tensor's `Drop` checks it before handing the buffer over).
#[inline]
pub(crate) fn recycle<T: CpuScalar>(a: Buffer<T>) {
    // `None` only while the thread is being torn down: the buffer is then simply freed.
    let _ = T::with_pool(|p| p.put(a));
}

/// Whether `a` is the only handle to its storage: no other `Arc` shares it and no `Weak`
/// watches it ([`crate::derived`]; such a buffer is freed, not pooled, and a write moves it
/// out of the watched allocation).
#[inline]
pub(crate) fn is_unshared<T>(a: &Buffer<T>) -> bool {
    Arc::strong_count(a) == 1 && Arc::weak_count(a) == 0
}

/// Offers `a` to this thread's pool when it is the only handle to its storage
/// ([`is_unshared`]); otherwise just drops this handle.
#[inline]
pub(crate) fn recycle_unshared<T: CpuScalar>(a: Buffer<T>) {
    if is_unshared(&a) {
        recycle(a);
    }
}

/// A uniquely owned scratch buffer of at least `len` elements, contents unspecified: the most
/// recently returned one long enough ([`recycle_scratch`]), else a fresh one of `len`.
pub(crate) fn alloc_scratch<T: CpuScalar>(len: usize) -> Buffer<T> {
    T::with_pool(|p| p.take_scratch(len))
        .flatten()
        .unwrap_or_else(|| Arc::new(vec![T::ZERO; len]))
}

/// Returns a scratch buffer (uniquely owned) to this thread's scratch list.
pub(crate) fn recycle_scratch<T: CpuScalar>(a: Buffer<T>) {
    // `None` only while the thread is being torn down: the buffer is then simply freed.
    let _ = T::with_pool(|p| p.put_scratch(a));
}

/// Bytes this thread keeps pooled for element type `T`.
pub fn pooled_bytes<T: CpuScalar>() -> usize {
    T::with_pool(|p| p.pooled_bytes()).unwrap_or(0)
}

/// Frees every buffer this thread keeps pooled for element type `T`.
pub fn clear_pool<T: CpuScalar>() {
    let _ = T::with_pool(|p| p.clear());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_buffer_is_reused_for_the_same_length() {
        clear_pool::<f64>();
        let a = alloc::<f64>(5000);
        let ptr = a.as_ptr();
        recycle(a);
        assert!(pooled_bytes::<f64>() >= 5000 * 8);
        let b = alloc::<f64>(5000);
        assert_eq!(b.as_ptr(), ptr);
        assert_eq!(pooled_bytes::<f64>(), 0);
        // another length does not take it
        recycle(b);
        let c = alloc::<f64>(4999);
        assert_ne!(c.as_ptr(), ptr);
        clear_pool::<f64>();
    }

    #[test]
    fn scratch_is_the_most_recent_buffer_long_enough_and_bounded() {
        let mut p = BufferPool::<f32>::new();
        let lens = [100usize, 300, 200];
        let ptrs: Vec<_> = lens
            .iter()
            .map(|&n| {
                let a = Arc::new(vec![0.0f32; n]);
                let ptr = a.as_ptr();
                p.put_scratch(a);
                ptr
            })
            .collect();
        // 150: the 200 (returned last) over the 300
        let a = p.take_scratch(150).unwrap();
        assert_eq!((a.as_ptr(), a.len()), (ptrs[2], 200));
        // 250: only the 300 is long enough
        assert_eq!(p.take_scratch(250).unwrap().as_ptr(), ptrs[1]);
        assert!(p.take_scratch(101).is_none());
        assert_eq!(p.take_scratch(100).unwrap().as_ptr(), ptrs[0]);
        // beyond the bound the shortest goes
        for n in 1..=SCRATCH_BUFFERS + 2 {
            p.put_scratch(Arc::new(vec![0.0f32; n]));
        }
        assert_eq!(p.scratch.len(), SCRATCH_BUFFERS);
        assert_eq!(p.scratch.iter().map(|b| b.len()).min(), Some(3));
    }

    #[test]
    fn the_pool_is_bounded() {
        let mut p = BufferPool::<f32>::new();
        let big = MAX_POOLED_BYTES / 4 / 2 + 1;
        p.put(Arc::new(vec![0.0f32; big]));
        p.put(Arc::new(vec![0.0f32; big]));
        assert!(p.pooled_bytes() <= MAX_POOLED_BYTES);
        assert!(p.take(big).is_some());
        assert!(p.take(big).is_none());
    }
}
