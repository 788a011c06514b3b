//! `CpuTensor`: a shape and an `Arc`-shared, C-contiguous flat buffer; `GradValue` and
//! `GradZero` for it.
//!
//! Values are immutable once built, so sharing a buffer between tensors (reshape, detach, the
//! copies `Saved` keeps, a VJP that passes its cotangent through) is always safe. A buffer is
//! written in place only when its `Arc` is unique: kernels fill fresh buffers from the pool, and
//! [`GradValue::add`] accumulates into whichever operand it owns exclusively.

use crate::buffers;
use crate::buffers::Buffer;
use crate::error::CpuError;
use crate::scalar::CpuScalar;
use crate::threads::par_rows;
use ndarray::{ArrayD, ArrayViewD, IxDyn};
use std::fmt;
use std::sync::Arc;
use torchlean_runtime::{GradValue, GradZero, NonFinite, Result};
use torchlean_spec::Shape;

/// A dense tensor of `f32` or `f64` on the CPU.
///
/// Storage is an `Arc<Vec<T>>`: one flat, row-major buffer shared by reference counting, with
/// the logical [`Shape`] kept beside it (so `shape()` is a field read and shapes up to rank 4
/// never allocate). [`CpuTensor::view`] gives the `n`-dimensional ndarray view. The tensor is
/// its shape plus one pointer (56 bytes): tensors are moved and cloned several times per op.
///
/// Invariant: `data.len() == shape.size()`, and `shape.checked_size()` succeeded.
pub struct CpuTensor<T: CpuScalar> {
    shape: Shape,
    /// Always `Some`, except inside `Drop`, which takes the buffer to hand it to the pool
    /// without touching the reference count.
    data: Option<Buffer<T>>,
}

/// `CpuTensor<f32>`.
pub type CpuF32 = CpuTensor<f32>;
/// `CpuTensor<f64>`.
pub type CpuF64 = CpuTensor<f64>;

impl<T: CpuScalar> Clone for CpuTensor<T> {
    /// Shares the buffer (no copy).
    fn clone(&self) -> Self {
        CpuTensor {
            shape: self.shape.clone(),
            data: self.data.clone(),
        }
    }
}

impl<T: CpuScalar> Drop for CpuTensor<T> {
    /// Hands a uniquely owned buffer to this thread's pool.
    #[inline]
    fn drop(&mut self) {
        if let Some(a) = self.data.take() {
            // a count of 1 cannot grow concurrently: no other handle to the buffer exists
            if unique(&a) {
                buffers::recycle(a);
            }
        }
    }
}

/// Whether `a` is the only handle to its buffer ([`buffers::is_unshared`]: no other tensor
/// shares it and no derived form watches it).
#[inline]
fn unique<T>(a: &Buffer<T>) -> bool {
    buffers::is_unshared(a)
}

impl<T: CpuScalar> fmt::Debug for CpuTensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOW: usize = 8;
        let data = self.as_slice();
        let mut d = f.debug_struct("CpuTensor");
        d.field("shape", &self.shape);
        if data.len() <= SHOW {
            d.field("data", &data);
        } else {
            d.field(
                "data",
                &format_args!("{:?} … ({} elements)", &data[..SHOW], data.len()),
            );
        }
        d.finish()
    }
}

fn check_len(what: &'static str, shape: &Shape, got: usize) -> Result<(), CpuError> {
    let expected = shape.checked_size()?;
    if got != expected {
        return Err(CpuError::DataLength {
            what,
            shape: shape.clone(),
            expected,
            got,
        });
    }
    Ok(())
}

impl<T: CpuScalar> CpuTensor<T> {
    /// A tensor from a shape and row-major data; an error if the lengths disagree or the shape
    /// is too large. Takes ownership of `data` (no copy).
    pub fn from_vec(shape: impl Into<Shape>, data: Vec<T>) -> Result<Self, CpuError> {
        let shape = shape.into();
        check_len("from_vec", &shape, data.len())?;
        Ok(CpuTensor {
            shape,
            data: Some(Arc::new(data)),
        })
    }

    /// A tensor filled with `value`.
    pub fn filled(shape: impl Into<Shape>, value: T) -> Result<Self, CpuError> {
        let shape = shape.into();
        shape.checked_size()?;
        let mut t = Self::uninit(shape);
        t.data_mut().fill(value);
        Ok(t)
    }

    /// A tensor of zeros.
    pub fn zeros(shape: impl Into<Shape>) -> Result<Self, CpuError> {
        Self::filled(shape, T::ZERO)
    }

    /// A rank-0 tensor.
    pub fn scalar(value: T) -> Self {
        let mut t = Self::uninit(Shape::scalar());
        t.data_mut()[0] = value;
        t
    }

    /// A copy of an ndarray array of any layout (read in logical, row-major order).
    pub fn from_ndarray(a: &ArrayD<T>) -> Result<Self, CpuError> {
        Self::from_vec(Shape::from_slice(a.shape()), a.iter().copied().collect())
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The shared buffer itself (for identity: [`crate::derived`]).
    pub(crate) fn buffer(&self) -> &Buffer<T> {
        self.buf()
    }

    /// The buffer.
    #[inline(always)]
    fn buf(&self) -> &Buffer<T> {
        // invariant: only `Drop` takes the buffer, and nothing observes the tensor after it
        self.data
            .as_ref()
            .expect("the buffer is present until drop")
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.buf().len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf().is_empty()
    }

    /// The row-major data.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        self.buf().as_slice()
    }

    /// A copy of the row-major data.
    pub fn to_vec(&self) -> Vec<T> {
        self.as_slice().to_vec()
    }

    /// Mutable access to the row-major data, for in-place updates between steps (an
    /// optimizer's). Copy-on-write: a buffer shared with other tensors is copied first, so no
    /// other tensor observes the change.
    pub fn make_mut(&mut self) -> &mut [T] {
        self.data_mut()
    }

    /// The data as an `n`-dimensional ndarray view of the tensor's shape.
    pub fn view(&self) -> ArrayViewD<'_, T> {
        // invariant: data.len() == shape.size(), and a fresh view of a slice is standard layout
        ArrayViewD::from_shape(IxDyn(self.shape.dims()), self.as_slice())
            .expect("the buffer length equals the shape's size")
    }

    /// Whether this tensor is the only holder of its buffer (so `add` works in place and
    /// `into_owned` does not copy).
    pub fn is_unique(&self) -> bool {
        unique(self.buf())
    }

    /// Whether two tensors share one buffer.
    pub fn shares_storage_with(&self, other: &Self) -> bool {
        self.buf().as_ptr() == other.buf().as_ptr() && !self.is_empty()
    }

    /// Bitwise equality of shape and data (`-0.0 ≠ 0.0`; a NaN equals itself).
    pub fn bit_eq(&self, other: &Self) -> bool {
        self.shape == other.shape
            && self
                .as_slice()
                .iter()
                .zip(other.as_slice())
                .all(|(a, b)| a.bits() == b.bits())
    }

    // ---- crate-internal constructors and access ----

    /// A tensor of a validated shape whose contents are unspecified (a pooled buffer). The
    /// caller overwrites every element.
    #[inline]
    pub(crate) fn uninit(shape: Shape) -> Self {
        let n = shape.size();
        CpuTensor {
            shape,
            data: Some(buffers::alloc(n)),
        }
    }

    /// The same buffer under another shape of the same size (no copy).
    pub(crate) fn share(&self, shape: Shape) -> Self {
        debug_assert_eq!(shape.size(), self.len());
        CpuTensor {
            shape,
            data: self.data.clone(),
        }
    }

    /// Mutable access to the data; copies first if the buffer is shared (copy on write).
    #[inline]
    pub(crate) fn data_mut(&mut self) -> &mut [T] {
        // invariant: only `Drop` takes the buffer, and nothing observes the tensor after it
        let buf = self
            .data
            .as_mut()
            .expect("the buffer is present until drop");
        Arc::make_mut(buf).as_mut_slice()
    }

    /// A copy into a fresh, uniquely owned buffer.
    pub(crate) fn deep_copy(&self) -> Self {
        let mut out = Self::uninit(self.shape.clone());
        let src = self.as_slice();
        par_rows(out.data_mut(), 1, 1, |start, dst| {
            dst.copy_from_slice(&src[start..start + dst.len()])
        });
        out
    }
}

impl<T: CpuScalar> GradValue for CpuTensor<T> {
    fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Shares the buffer under the new shape (no copy).
    fn retag(self, shape: Shape) -> Result<Self> {
        let n = shape.checked_size()?;
        if n != self.len() {
            return Err(CpuError::Shape {
                op: "retag",
                shapes: vec![self.shape.clone(), shape],
                reason: format!("cannot view {} elements under another size", self.len()),
            }
            .into());
        }
        let mut t = self;
        t.shape = shape;
        Ok(t)
    }

    fn check(&self) -> Result<()> {
        check_len("check", &self.shape, self.len())?;
        Ok(())
    }

    /// `self + other`, in place into whichever operand owns its buffer exclusively (no
    /// allocation); a fresh pooled buffer only when both are shared.
    fn add(self, other: Self) -> Result<Self> {
        if self.shape != other.shape {
            return Err(CpuError::Shape {
                op: "add",
                shapes: vec![self.shape.clone(), other.shape.clone()],
                reason: "gradients must have identical shapes".into(),
            }
            .into());
        }
        if self.is_unique() {
            let mut acc = self;
            let b = other.as_slice();
            par_rows(acc.data_mut(), 1, 1, |start, dst| {
                for (a, &b) in dst.iter_mut().zip(&b[start..]) {
                    *a += b;
                }
            });
            return Ok(acc);
        }
        if other.is_unique() {
            let mut acc = other;
            let a = self.as_slice();
            par_rows(acc.data_mut(), 1, 1, |start, dst| {
                for (b, &a) in dst.iter_mut().zip(&a[start..]) {
                    *b = a + *b;
                }
            });
            return Ok(acc);
        }
        let mut out = Self::uninit(self.shape.clone());
        let (a, b) = (self.as_slice(), other.as_slice());
        par_rows(out.data_mut(), 1, 1, |start, dst| {
            for ((d, &a), &b) in dst.iter_mut().zip(&a[start..]).zip(&b[start..]) {
                *d = a + b;
            }
        });
        Ok(out)
    }

    /// Releases the value; a uniquely owned buffer goes back to the pool (see `Drop`).
    fn drop(self) {}

    /// Reads the buffer in place (no copy).
    fn non_finite(&self) -> Option<NonFinite> {
        NonFinite::scan(self.as_slice(), |x| x.is_finite(), |x| x.to_f64())
    }

    fn into_owned(self) -> Self {
        if self.is_unique() {
            self
        } else {
            self.deep_copy()
        }
    }
}

impl<T: CpuScalar> GradZero for CpuTensor<T> {
    fn zeros_like(&self) -> Self {
        let mut t = Self::uninit(self.shape.clone());
        t.data_mut().fill(T::ZERO);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], data: &[f32]) -> CpuF32 {
        CpuTensor::from_vec(shape, data.to_vec()).unwrap()
    }

    #[test]
    fn a_tensor_is_a_shape_and_one_pointer() {
        assert_eq!(
            std::mem::size_of::<CpuF32>(),
            std::mem::size_of::<torchlean_spec::Shape>() + 8
        );
        assert_eq!(
            std::mem::size_of::<CpuF64>(),
            std::mem::size_of::<torchlean_spec::Shape>() + 8
        );
    }

    #[test]
    fn from_vec_checks_the_length() {
        let e = CpuF32::from_vec([2, 2], vec![1.0; 3]).unwrap_err();
        assert!(matches!(
            e,
            CpuError::DataLength {
                expected: 4,
                got: 3,
                ..
            }
        ));
        assert!(CpuF32::from_vec([1 << 20, 1 << 20], vec![]).is_err());
        let s = CpuF64::scalar(2.5);
        assert_eq!(s.shape().rank(), 0);
        assert_eq!(s.as_slice(), &[2.5]);
    }

    #[test]
    fn add_into_a_unique_buffer_is_in_place() {
        let a = t(&[3], &[1.0, 2.0, 3.0]);
        let b = t(&[3], &[10.0, 20.0, 30.0]);
        let pa = a.as_slice().as_ptr();
        let s = GradValue::add(a, b).unwrap();
        assert_eq!(s.as_slice().as_ptr(), pa);
        assert_eq!(s.as_slice(), &[11.0, 22.0, 33.0]);
    }

    #[test]
    fn add_uses_the_other_operand_when_self_is_shared() {
        let a = t(&[2], &[1.0, 2.0]);
        let keep = a.clone();
        let b = t(&[2], &[0.5, 0.25]);
        let pb = b.as_slice().as_ptr();
        let s = GradValue::add(a, b).unwrap();
        assert_eq!(s.as_slice().as_ptr(), pb);
        assert_eq!(s.as_slice(), &[1.5, 2.25]);
        // the shared operand is untouched
        assert_eq!(keep.as_slice(), &[1.0, 2.0]);
    }

    #[test]
    fn add_of_two_shared_values_allocates_and_leaves_both_alone() {
        let a = t(&[2], &[1.0, 2.0]);
        let b = t(&[2], &[3.0, 4.0]);
        let (ka, kb) = (a.clone(), b.clone());
        let s = GradValue::add(a, b).unwrap();
        assert!(!s.shares_storage_with(&ka) && !s.shares_storage_with(&kb));
        assert_eq!(s.as_slice(), &[4.0, 6.0]);
        assert_eq!(ka.as_slice(), &[1.0, 2.0]);
        assert_eq!(kb.as_slice(), &[3.0, 4.0]);
    }

    #[test]
    fn add_of_mismatched_shapes_is_an_error_naming_both() {
        let e = GradValue::add(t(&[2], &[1.0, 2.0]), t(&[1, 2], &[1.0, 2.0])).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("add") && msg.contains("[2]") && msg.contains("[1, 2]"),
            "{msg}"
        );
    }

    #[test]
    fn into_owned_copies_only_shared_buffers() {
        let a = t(&[2], &[1.0, 2.0]);
        let p = a.as_slice().as_ptr();
        let a = a.into_owned();
        assert_eq!(a.as_slice().as_ptr(), p);
        let keep = a.clone();
        let b = a.into_owned();
        assert_ne!(b.as_slice().as_ptr(), p);
        assert!(b.is_unique());
        assert_eq!(b.as_slice(), keep.as_slice());
    }

    #[test]
    fn retag_shares_the_buffer_and_checks_the_size() {
        let a = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let keep = a.clone();
        let r = a.retag(Shape::from([3, 2])).unwrap();
        assert!(r.shares_storage_with(&keep));
        assert_eq!(r.shape(), &Shape::from([3, 2]));
        let e = r.retag(Shape::from([4])).unwrap_err();
        assert!(e.to_string().contains("retag"), "{e}");
    }

    #[test]
    fn dropped_buffers_are_reused() {
        crate::buffers::clear_pool::<f64>();
        let a = CpuF64::zeros([3000]).unwrap();
        let p = a.as_slice().as_ptr();
        GradValue::drop(a);
        let b = CpuF64::zeros([3000]).unwrap();
        assert_eq!(b.as_slice().as_ptr(), p);
        // a shared buffer is not pooled when one handle goes
        let c = b.clone();
        drop(b);
        let d = CpuF64::zeros([3000]).unwrap();
        assert_ne!(d.as_slice().as_ptr(), c.as_slice().as_ptr());
        crate::buffers::clear_pool::<f64>();
    }

    #[test]
    fn views_and_ndarray_round_trip() {
        let a = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let v = a.view();
        assert_eq!(v.shape(), &[2, 3]);
        assert_eq!(v[[1, 2]], 6.0);
        let tr = v.t().to_owned();
        let b = CpuF32::from_ndarray(&tr).unwrap();
        assert_eq!(b.as_slice(), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn bit_eq_distinguishes_signed_zeros_and_equates_nans() {
        let a = t(&[2], &[0.0, f32::NAN]);
        let b = t(&[2], &[-0.0, f32::NAN]);
        assert!(a.bit_eq(&a.clone()));
        assert!(!a.bit_eq(&b));
        assert!(!a.bit_eq(&t(&[1, 2], &[0.0, f32::NAN])));
    }
}
