//! Forms a kernel derives from a weight buffer (Winograd's transformed weights), computed once
//! per buffer and kept while the buffer lives unchanged: an inference session runs the same
//! weights call after call, as onnxruntime prepacks its weights once per session.
//!
//! An entry is keyed by its source buffer's identity and a [`DerivedKey`] (what was derived and
//! for which shape). It holds a `Weak` to the source, so:
//!
//! - the source's allocation is not freed while the entry exists, and no other buffer can take
//!   its address;
//! - the entry dies the moment the source's values could change. Every write into a tensor's
//!   buffer needs sole ownership, and the safe ways to get it from an `Arc` with weak references
//!   all leave the old allocation without strong ones: `Arc::make_mut` (the engine's only one,
//!   [`crate::CpuTensor::make_mut`] and the kernels' fresh buffers) moves the data to a new
//!   allocation, `Arc::try_unwrap` takes it out, `Arc::get_mut` refuses. A dead entry no
//!   longer upgrades and is dropped at the next lookup.
//!
//! So a live entry's form is the form of its source's current values. Training, which changes
//! its weights every step, gets a fresh entry per step (the previous one dropped); the cost over
//! no cache is one lookup per call.
//!
//! Bounded: at most [`MAX_DERIVED_BYTES`] of forms per element type (process-wide), the least
//! recently used evicted first; a form larger than the bound is returned without being kept.
//!
//! Bits: a derived form is a pure function of the source's values and the key, computed with
//! the same operations whatever the thread count, so a cached form is the bits a fresh one
//! would have.

use crate::buffers::{self, Buffer};
use crate::scalar::CpuScalar;
use std::sync::{Arc, Weak};

/// Upper bound on the bytes of derived forms kept per element type.
pub const MAX_DERIVED_BYTES: usize = 256 << 20;

/// What was derived from a buffer, and for which shape: a buffer used under two shapes has two
/// entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DerivedKey {
    /// Winograd's transformed weights of an `oc × c × 3 × 3` convolution for tiles of
    /// `tile × tile` ([`crate::kernels::conv_winograd`]).
    Winograd { oc: usize, c: usize, tile: usize },
    /// The weights of `oc` output channels with `row` taps each packed in blocks of `lanes`
    /// channels ([`crate::kernels::conv_lanes`]).
    Lanes { oc: usize, row: usize, lanes: usize },
}

/// One source buffer's form.
struct Entry<T> {
    source: Weak<Vec<T>>,
    key: DerivedKey,
    /// `None`: the derivation does not apply to these values (kept too, so the check is not
    /// repeated either).
    form: Option<Buffer<T>>,
    /// The cache's clock at the last lookup that found it.
    used: u64,
}

impl<T> Entry<T> {
    fn bytes(&self) -> usize {
        self.form
            .as_ref()
            .map_or(0, |f| f.len().saturating_mul(std::mem::size_of::<T>()))
    }

    fn is_of(&self, source: &Buffer<T>, key: DerivedKey) -> bool {
        self.key == key && std::ptr::eq(self.source.as_ptr(), Arc::as_ptr(source))
    }
}

/// The derived forms of one element type.
pub struct DerivedCache<T> {
    entries: Vec<Entry<T>>,
    bytes: usize,
    capacity: usize,
    clock: u64,
}

impl<T> std::fmt::Debug for DerivedCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DerivedCache")
            .field("entries", &self.entries.len())
            .field("bytes", &self.bytes)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl<T> DerivedCache<T> {
    /// An empty cache keeping at most `capacity` bytes of forms.
    pub const fn with_capacity(capacity: usize) -> Self {
        DerivedCache {
            entries: Vec::new(),
            bytes: 0,
            capacity,
            clock: 0,
        }
    }

    /// Bytes of the forms kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries kept (dead ones included until the next lookup).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<T: CpuScalar> DerivedCache<T> {
    /// Whether a live entry for `source` under `key` is kept (for tests; no lookup is counted).
    #[cfg(test)]
    pub(crate) fn holds(&self, source: &Buffer<T>, key: DerivedKey) -> bool {
        self.entries
            .iter()
            .any(|e| e.is_of(source, key) && e.source.strong_count() > 0)
    }

    /// Drops the entries whose source is gone or may have changed (no strong reference left).
    fn sweep(&mut self) {
        let mut freed = 0;
        self.entries.retain_mut(|e| {
            let live = e.source.strong_count() > 0;
            if !live {
                freed += e.bytes();
                if let Some(f) = e.form.take() {
                    buffers::recycle_unshared(f);
                }
            }
            live
        });
        self.bytes -= freed;
    }

    /// The form of `source` under `key`, when kept (`Some(None)`: kept as not applying).
    fn find(&mut self, source: &Buffer<T>, key: DerivedKey) -> Option<Option<Buffer<T>>> {
        self.sweep();
        self.clock += 1;
        let clock = self.clock;
        let e = self.entries.iter_mut().find(|e| e.is_of(source, key))?;
        e.used = clock;
        Some(e.form.clone())
    }

    /// Keeps `form` as `source`'s under `key` (replacing one found meanwhile), evicting the
    /// least recently used forms beyond the capacity; a form larger than the capacity is not
    /// kept.
    fn insert(&mut self, source: &Buffer<T>, key: DerivedKey, form: Option<Buffer<T>>) {
        let entry = Entry {
            source: Arc::downgrade(source),
            key,
            form,
            used: self.clock,
        };
        let size = entry.bytes();
        if size > self.capacity {
            return;
        }
        if let Some(i) = self.entries.iter().position(|e| e.is_of(source, key)) {
            self.bytes -= self.entries.swap_remove(i).bytes();
        }
        while self.bytes + size > self.capacity {
            let oldest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used);
            let Some(i) = oldest else { break };
            let mut gone = self.entries.swap_remove(i);
            self.bytes -= gone.bytes();
            if let Some(f) = gone.form.take() {
                buffers::recycle_unshared(f);
            }
        }
        self.bytes += size;
        self.entries.push(entry);
    }
}

/// `source`'s form under `key`: the kept one, else `derive()`'s (kept for the next call).
/// `None` when the derivation does not apply to these values.
pub(crate) fn derived<T: CpuScalar>(
    source: &Buffer<T>,
    key: DerivedKey,
    derive: impl FnOnce() -> Option<Buffer<T>>,
) -> Option<Buffer<T>> {
    if let Some(found) = T::with_derived(|c| c.find(source, key)) {
        return found;
    }
    // derived outside the lock: other threads' lookups go on meanwhile
    let form = derive();
    T::with_derived(|c| c.insert(source, key, form.clone()));
    form
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuF32;
    use std::cell::Cell;

    const KEY: DerivedKey = DerivedKey::Winograd {
        oc: 2,
        c: 1,
        tile: 4,
    };

    /// Derives through `cache` (a private one, so tests do not share state): the form is the
    /// source's values doubled, and `count` counts derivations.
    fn lookup(
        cache: &mut DerivedCache<f32>,
        source: &Buffer<f32>,
        key: DerivedKey,
        count: &Cell<usize>,
    ) -> Option<Buffer<f32>> {
        if let Some(found) = cache.find(source, key) {
            return found;
        }
        count.set(count.get() + 1);
        let form = Some(Arc::new(source.iter().map(|v| 2.0 * v).collect()));
        cache.insert(source, key, form.clone());
        form
    }

    fn buffer_of(t: &CpuF32) -> &Buffer<f32> {
        t.buffer()
    }

    #[test]
    fn a_buffer_is_derived_once_per_key() {
        let mut cache = DerivedCache::with_capacity(1 << 20);
        let count = Cell::new(0);
        let w = CpuF32::from_vec(vec![2, 1], vec![1.0, 2.0]).unwrap();
        let first = lookup(&mut cache, buffer_of(&w), KEY, &count).unwrap();
        let again = lookup(&mut cache, buffer_of(&w.clone()), KEY, &count).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(count.get(), 1);
        let other = DerivedKey::Winograd {
            oc: 2,
            c: 1,
            tile: 2,
        };
        lookup(&mut cache, buffer_of(&w), other, &count);
        assert_eq!((count.get(), cache.len()), (2, 2));
        // equal values in another buffer are another source
        let copy = CpuF32::from_vec(vec![2, 1], vec![1.0, 2.0]).unwrap();
        lookup(&mut cache, buffer_of(&copy), KEY, &count);
        assert_eq!(count.get(), 3);
    }

    /// The property the cache rests on: a write into the source (in place, the buffer not
    /// shared) is never answered with the form of the old values.
    #[test]
    fn a_written_buffer_is_derived_again() {
        let mut cache = DerivedCache::with_capacity(1 << 20);
        let count = Cell::new(0);
        let mut w = CpuF32::from_vec(vec![2, 1], vec![1.0, 2.0]).unwrap();
        lookup(&mut cache, buffer_of(&w), KEY, &count);
        let before = w.as_slice().as_ptr();
        w.make_mut()[0] = 5.0;
        // written in place: the data did not move, only the `Arc` around it
        assert_eq!(w.as_slice().as_ptr(), before);
        let form = lookup(&mut cache, buffer_of(&w), KEY, &count).unwrap();
        assert_eq!(form.as_slice(), &[10.0, 4.0]);
        assert_eq!(count.get(), 2);
        // the old entry was dropped at that lookup
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_dropped_source_frees_its_form() {
        let mut cache = DerivedCache::with_capacity(1 << 20);
        let count = Cell::new(0);
        let w = CpuF32::from_vec(vec![4], vec![1.0; 4]).unwrap();
        lookup(&mut cache, buffer_of(&w), KEY, &count);
        assert_eq!(cache.bytes(), 16);
        drop(w);
        let v = CpuF32::from_vec(vec![1], vec![1.0]).unwrap();
        lookup(&mut cache, buffer_of(&v), KEY, &count);
        assert_eq!((cache.len(), cache.bytes()), (1, 4));
    }

    #[test]
    fn the_least_recently_used_form_goes_first_and_a_form_beyond_the_bound_is_not_kept() {
        // room for two forms of 4 elements
        let mut cache = DerivedCache::with_capacity(32);
        let count = Cell::new(0);
        let w: Vec<CpuF32> = (0..3)
            .map(|i| CpuF32::from_vec(vec![4], vec![i as f32; 4]).unwrap())
            .collect();
        lookup(&mut cache, buffer_of(&w[0]), KEY, &count);
        lookup(&mut cache, buffer_of(&w[1]), KEY, &count);
        // w[0] used again, so w[1] is the least recent when w[2] comes
        lookup(&mut cache, buffer_of(&w[0]), KEY, &count);
        lookup(&mut cache, buffer_of(&w[2]), KEY, &count);
        assert_eq!((count.get(), cache.bytes()), (3, 32));
        lookup(&mut cache, buffer_of(&w[0]), KEY, &count);
        assert_eq!(count.get(), 3);
        lookup(&mut cache, buffer_of(&w[1]), KEY, &count);
        assert_eq!(count.get(), 4);
        // 9 elements: 36 bytes, more than the whole cache
        let big = CpuF32::from_vec(vec![9], vec![1.0; 9]).unwrap();
        let form = lookup(&mut cache, buffer_of(&big), KEY, &count).unwrap();
        assert_eq!(form.len(), 9);
        lookup(&mut cache, buffer_of(&big), KEY, &count);
        assert_eq!(count.get(), 6);
        assert!(cache.bytes() <= 32);
    }

    #[test]
    fn a_refusal_is_kept_too() {
        let mut cache = DerivedCache::<f32>::with_capacity(1 << 20);
        let w = CpuF32::from_vec(vec![1], vec![f32::NAN]).unwrap();
        assert_eq!(cache.find(buffer_of(&w), KEY), None);
        cache.insert(buffer_of(&w), KEY, None);
        assert_eq!(cache.find(buffer_of(&w), KEY), Some(None));
        assert_eq!(cache.bytes(), 0);
    }
}
