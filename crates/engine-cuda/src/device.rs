//! The device interface: what the engine needs from a CUDA device, implemented by the real
//! device ([`crate::Gpu`], cudarc) and by the host emulation ([`crate::Emu`], the same kernel
//! sources compiled by a C++ compiler). Everything above it — tensors, buffer accounting, launch
//! geometry, argument lists, the row-major/column-major mapping of products, every op's host
//! logic — is shared, so the emulation tests it on a machine without a GPU.

use crate::blas::GemmCall;
use crate::error::Result;
use crate::geometry::Launch;
use crate::kernels::Kernel;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One kernel argument, in the kernel's parameter order.
#[derive(Debug)]
pub enum Arg<'a, D: Device> {
    /// A buffer the kernel reads (`const float*`).
    In(&'a D::Mem),
    /// A buffer the kernel writes (`float*`).
    Out(&'a mut D::Mem),
    /// A size, index or axis (`long long`).
    Index(i64),
    /// A float parameter (`float`).
    F32(f32),
    /// A seed or key (`unsigned long long`).
    U64(u64),
    /// A small host table (shapes, strides, class ids: `const long long*`), copied to the
    /// device for the launch.
    Table(&'a [i64]),
}

/// A CUDA device as the engine sees it. One process-wide instance per implementation (the
/// kernel trait's constructors take no device argument), created on first use.
pub trait Device: Debug + Send + Sync + Sized + 'static {
    /// `"cuda"` or `"cuda-emu"`.
    const NAME: &'static str;
    /// The engine label of its tensors (`Kernels::ENGINE`).
    const ENGINE: &'static str;
    /// Device memory holding `f32`s (at least one element, even for an empty tensor).
    type Mem: Debug + Send + Sync + 'static;

    /// The live-buffer counters of this device.
    fn counters() -> &'static Counters;

    /// Memory for `len` elements whose contents are unspecified (the caller's kernel writes
    /// every element).
    fn alloc(len: usize) -> Result<Self::Mem>;
    /// Memory for `len` zeros.
    fn alloc_zeros(len: usize) -> Result<Self::Mem>;
    /// A copy of host data.
    fn upload(data: &[f32]) -> Result<Self::Mem>;
    /// The first `len` elements, on the host (waits for the work queued before it).
    fn download(mem: &Self::Mem, len: usize) -> Result<Vec<f32>>;
    /// A device-side copy of the first `len` elements.
    fn copy(mem: &Self::Mem, len: usize) -> Result<Self::Mem>;
    /// Runs `kernel` over `launch` with `args` (the kernel's parameters, in order).
    fn launch(kernel: Kernel, launch: Launch, args: &mut [Arg<'_, Self>]) -> Result<()>;
    /// cuBLAS's `sgemmStridedBatched` (column-major; see [`GemmCall`]).
    fn gemm(call: &GemmCall, a: &Self::Mem, b: &Self::Mem, c: &mut Self::Mem) -> Result<()>;
}

/// Live device buffers and their bytes (every allocation counts until its buffer is dropped),
/// and the tensor transfers between host and device so far (a launch's small index tables are
/// not counted).
#[derive(Debug, Default)]
pub struct Counters {
    buffers: AtomicUsize,
    bytes: AtomicUsize,
    uploads: AtomicUsize,
    downloads: AtomicUsize,
}

/// Host-to-device and device-to-host tensor transfers so far ([`Counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    pub uploads: usize,
    pub downloads: usize,
}

/// A reading of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveBuffers {
    pub buffers: usize,
    pub bytes: usize,
}

impl Counters {
    /// New counters at zero (a `static` per device).
    pub const fn new() -> Counters {
        Counters {
            buffers: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            uploads: AtomicUsize::new(0),
            downloads: AtomicUsize::new(0),
        }
    }

    pub(crate) fn uploaded(&self) {
        self.uploads.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn downloaded(&self) {
        self.downloads.fetch_add(1, Ordering::Relaxed);
    }

    /// The transfers so far.
    pub fn transfers(&self) -> Transfers {
        Transfers {
            uploads: self.uploads.load(Ordering::Relaxed),
            downloads: self.downloads.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn allocated(&self, bytes: usize) {
        self.buffers.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn released(&self, bytes: usize) {
        self.buffers.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The current reading.
    pub fn read(&self) -> LiveBuffers {
        LiveBuffers {
            buffers: self.buffers.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// The live buffers of device `D` now (tests assert a training step returns to its baseline).
pub fn live_buffers<D: Device>() -> LiveBuffers {
    D::counters().read()
}

/// The tensor transfers of device `D` so far (tests count those of a training step).
pub fn transfers<D: Device>() -> Transfers {
    D::counters().transfers()
}
