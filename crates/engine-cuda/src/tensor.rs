//! `CudaTensor`: a shape and an `Arc`-shared device buffer; `GradValue`, `GradZero` and
//! `Kernels` for it.
//!
//! Values are immutable once built, so sharing a buffer between tensors (reshape, detach, the
//! copies a tape's `Saved` keeps, a VJP passing its cotangent through) is safe, and a view or a
//! detached reference can never free a buffer twice: the buffer is freed when its last tensor
//! goes. A buffer is written in place only when its `Arc` is unique (`GradValue::add`).

use crate::buffer::Buffer;
use crate::device::{Arg, Device};
use crate::error::{CudaError, Result};
use crate::geometry::{index, Launch};
use crate::kernels::ELEMENTWISE;
use std::fmt;
use std::sync::Arc;
use torchlean_runtime::{GradValue, GradZero, Kernels, NonFinite, RuntimeError};
use torchlean_spec::{Shape, Tensor};

/// An `f32` tensor in the memory of device `D` ([`crate::Gpu`] or the emulation,
/// [`crate::Emu`]).
///
/// Invariant: `buf.len() == shape.size()`.
pub struct CudaTensor<D: Device> {
    shape: Shape,
    buf: Arc<Buffer<D>>,
}

impl<D: Device> Clone for CudaTensor<D> {
    /// Shares the buffer (no copy).
    fn clone(&self) -> Self {
        CudaTensor {
            shape: self.shape.clone(),
            buf: self.buf.clone(),
        }
    }
}

impl<D: Device> fmt::Debug for CudaTensor<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaTensor")
            .field("device", &D::NAME)
            .field("shape", &self.shape)
            .finish_non_exhaustive()
    }
}

fn check_len(what: &'static str, shape: &Shape, got: usize) -> Result<()> {
    let expected = shape.checked_size()?;
    if got != expected {
        return Err(CudaError::DataLength {
            what,
            shape: shape.clone(),
            expected,
            got,
        });
    }
    Ok(())
}

impl<D: Device> CudaTensor<D> {
    /// A tensor from a shape and row-major host data (copied to the device).
    pub fn from_host(shape: impl Into<Shape>, data: &[f32]) -> Result<Self> {
        let shape = shape.into();
        check_len("from_host", &shape, data.len())?;
        Ok(CudaTensor {
            shape,
            buf: Arc::new(Buffer::upload(data)?),
        })
    }

    /// A tensor of zeros.
    pub fn zeros(shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        let n = shape.checked_size()?;
        Ok(CudaTensor {
            shape,
            buf: Arc::new(Buffer::zeros(n)?),
        })
    }

    /// A tensor filled with `value` (one kernel).
    pub fn filled(shape: impl Into<Shape>, value: f32) -> Result<Self> {
        let shape = shape.into();
        let n = shape.checked_size()?;
        crate::ops::launch_new(
            ELEMENTWISE.kernel("tl_fill"),
            Launch::for_items(n),
            shape,
            [Arg::F32(value), Arg::Index(index("full", "n", n)?)],
        )
    }

    /// The row-major data, on the host.
    pub fn to_host(&self) -> Result<Vec<f32>> {
        self.buf.download()
    }

    /// A tensor over a buffer an op filled; an error if the sizes disagree.
    pub fn from_buffer(shape: Shape, buf: Buffer<D>) -> Result<Self> {
        check_len("from_buffer", &shape, buf.len())?;
        Ok(CudaTensor {
            shape,
            buf: Arc::new(buf),
        })
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The device memory (for a kernel argument).
    pub fn mem(&self) -> &D::Mem {
        self.buf.mem()
    }

    /// The same buffer under another shape of the same size (no copy).
    pub fn share(&self, shape: Shape) -> Result<Self> {
        check_len("share", &shape, self.len())?;
        Ok(CudaTensor {
            shape,
            buf: self.buf.clone(),
        })
    }

    /// Whether this tensor is the only holder of its buffer.
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.buf) == 1
    }

    /// Whether two tensors share one buffer.
    pub fn shares_storage_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
    }

    /// A copy in a buffer of its own.
    pub fn deep_copy(&self) -> Result<Self> {
        Ok(CudaTensor {
            shape: self.shape.clone(),
            buf: Arc::new(self.buf.duplicate()?),
        })
    }

    /// The buffer, to be written in place: copied first when another tensor shares it
    /// (copy-on-write), so no other value observes the write.
    pub(crate) fn buffer_mut(&mut self) -> Result<&mut Buffer<D>> {
        if !self.is_unique() {
            *self = self.deep_copy()?;
        }
        Ok(Arc::get_mut(&mut self.buf).expect("a tensor made unique above has one holder"))
    }

    /// `self += other` in place when `self` owns its buffer (else on a copy); shapes must
    /// agree (the sweeps check them before accumulating).
    fn accumulate(mut self, other: &Self) -> Result<Self> {
        check_len("add", &self.shape, other.len())?;
        let n = self.len();
        let other = other.buf.mem();
        crate::ops::launch_into(
            ELEMENTWISE.kernel("tl_accumulate"),
            Launch::for_items(n),
            [self.buffer_mut()?],
            [Arg::In(other), Arg::Index(index("add", "n", n)?)],
        )?;
        Ok(self)
    }
}

fn engine(e: CudaError) -> RuntimeError {
    e.into()
}

impl<D: Device> GradValue for CudaTensor<D> {
    fn shape(&self) -> &Shape {
        &self.shape
    }

    fn retag(self, shape: Shape) -> torchlean_runtime::Result<Self> {
        self.share(shape).map_err(engine)
    }

    /// The dtype is `f32` by construction; the buffer must hold exactly the shape's elements.
    fn check(&self) -> torchlean_runtime::Result<()> {
        check_len("check", &self.shape, self.len()).map_err(engine)
    }

    /// Accumulates into whichever operand owns its buffer (no allocation), else into a copy.
    fn add(self, other: Self) -> torchlean_runtime::Result<Self> {
        let r = if !self.is_unique() && other.is_unique() {
            other.accumulate(&self)
        } else {
            self.accumulate(&other)
        };
        r.map_err(engine)
    }

    /// Dropping the last tensor of a buffer frees it at once (and the live-buffer counter says
    /// so).
    fn drop(self) {}

    fn into_owned(self) -> Self {
        if self.is_unique() {
            return self;
        }
        match self.deep_copy() {
            Ok(t) => t,
            // a failed copy (out of device memory) keeps the shared value: still correct, as
            // values are never written while shared
            Err(_) => self,
        }
    }

    fn non_finite(&self) -> Option<NonFinite> {
        let data = self.to_host().ok()?;
        NonFinite::scan(&data, |x| x.is_finite(), |x| f64::from(*x))
    }
}

impl<D: Device> GradZero for CudaTensor<D> {
    fn zeros_like(&self) -> Self {
        match Self::zeros(self.shape.clone()) {
            Ok(z) => z,
            Err(e) => panic!("the CUDA engine could not allocate a zero gradient: {e}"),
        }
    }
}

impl<D: Device> Kernels for CudaTensor<D> {
    const ENGINE: &'static str = D::ENGINE;

    fn from_f64(t: &Tensor<f64>) -> torchlean_runtime::Result<Self> {
        let data: Vec<f32> = t.data().iter().map(|&v| v as f32).collect();
        Self::from_host(t.shape().clone(), &data).map_err(engine)
    }

    fn to_f64(&self) -> torchlean_runtime::Result<Tensor<f64>> {
        let data = self.to_host().map_err(engine)?;
        Tensor::new(
            self.shape.clone(),
            data.into_iter().map(f64::from).collect(),
        )
        .map_err(Into::into)
    }

    fn full(shape: &Shape, value: f64) -> torchlean_runtime::Result<Self> {
        Self::filled(shape.clone(), value as f32).map_err(engine)
    }

    fn bit_eq(&self, other: &Self) -> bool {
        if self.shape != other.shape {
            return false;
        }
        match (self.to_host(), other.to_host()) {
            (Ok(a), Ok(b)) => a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            _ => false,
        }
    }
}
