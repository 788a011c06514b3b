//! The CUDA engine's error type. Every error names what failed (the kernel, the library call,
//! the op and its shapes) and keeps the driver's or compiler's error as its source; it converts
//! into `torchlean_runtime::RuntimeError` for the kernel trait.

use std::path::PathBuf;
use thiserror::Error;
use torchlean_runtime::RuntimeError;
use torchlean_spec::{Shape, SpecError};

/// Why there is no usable CUDA device (a probe's answer, never a panic). Tests that need a GPU
/// print `skipped: no CUDA device (<this>)` and pass, unless `TORCHLEAN_REQUIRE_CUDA=1`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NoDevice {
    /// A shared library could not be opened (no driver installed, no toolkit on the path).
    #[error("the library {library} could not be loaded (tried {tried})")]
    LibraryMissing {
        library: &'static str,
        tried: String,
    },
    /// The driver loaded but a call failed (no GPU, a driver/toolkit mismatch).
    #[error("{call} failed: {source}")]
    Driver {
        call: &'static str,
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// The device opened but cuBLAS could not create its handle.
    #[error("{call} failed: {source}")]
    Blas {
        call: &'static str,
        #[source]
        source: cudarc::cublas::result::CublasError,
    },
    /// The driver reports no device.
    #[error("the driver reports no CUDA device")]
    NoGpu,
}

/// Errors of the CUDA engine.
#[derive(Debug, Error)]
pub enum CudaError {
    /// No usable device (see [`NoDevice`]).
    #[error("no CUDA device: {0}")]
    NoDevice(#[from] NoDevice),

    /// A CUDA driver call failed (allocation, copy, launch, module load).
    #[error("CUDA driver: {call}{}: {source}", kernel_suffix(.kernel))]
    Driver {
        call: &'static str,
        kernel: Option<&'static str>,
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// A cuBLAS call failed.
    #[error("cuBLAS: {call}: {source}")]
    Blas {
        call: &'static str,
        #[source]
        source: cudarc::cublas::result::CublasError,
    },

    /// NVRTC rejected a kernel module, or compiled it with warnings (which are errors here).
    #[error("NVRTC: module `{module}` for {arch}: {}{}", if *.warnings_only { "warnings (treated as errors)" } else { "compile error" }, log_suffix(.log))]
    Compile {
        module: &'static str,
        arch: String,
        warnings_only: bool,
        log: String,
    },

    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC: {call} for module `{module}`: {source}")]
    Nvrtc {
        call: &'static str,
        module: &'static str,
        #[source]
        source: cudarc::nvrtc::result::NvrtcError,
    },

    /// The host emulation could not build or load its kernels (no C++ compiler, a compile
    /// error in a kernel source).
    #[error("host emulation: {what}{}{}", path_suffix(.path), log_suffix(.log))]
    Emulation {
        what: &'static str,
        path: Option<PathBuf>,
        log: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// A kernel the engine asked for is not in its module (an engine bug if it ever shows).
    #[error("kernel `{kernel}` is not in module `{module}`")]
    UnknownKernel {
        module: &'static str,
        kernel: &'static str,
    },

    /// A flat buffer does not have as many elements as the shape declares.
    #[error("{what}: shape {shape} needs {expected} elements but the buffer has {got}")]
    DataLength {
        what: &'static str,
        shape: Shape,
        expected: usize,
        got: usize,
    },

    /// A size that does not fit the integer type a kernel or a library takes.
    #[error("op `{op}`: {what} = {value} does not fit the {limit} a CUDA call takes")]
    TooLarge {
        op: &'static str,
        what: &'static str,
        value: usize,
        limit: &'static str,
    },

    /// An error from the shape rules of `torchlean_spec`.
    #[error(transparent)]
    Spec(#[from] SpecError),

    /// A product description whose leading dimension is below its operand's stored rows
    /// (cuBLAS rejects it; an engine bug if it ever shows).
    #[error(
        "op `{op}`: the product's {operand} has leading dimension {ld} below its {rows} stored rows"
    )]
    GemmLeading {
        op: &'static str,
        operand: &'static str,
        ld: usize,
        rows: usize,
    },

    /// A product description that reaches past its buffer (`needed` saturates at `usize::MAX`;
    /// an engine bug if it ever shows: checked before cuBLAS or the emulation touches memory).
    #[error(
        "op `{op}`: the product's {operand} needs {needed} elements but its buffer holds {len}"
    )]
    GemmBounds {
        op: &'static str,
        operand: &'static str,
        needed: usize,
        len: usize,
    },

    /// A batched product whose output matrices overlap (two batches would write one element).
    #[error(
        "op `{op}`: the product's output batches overlap (stride {stride} below one matrix's \
         extent {extent})"
    )]
    GemmOverlap {
        op: &'static str,
        stride: usize,
        extent: usize,
    },
}

impl CudaError {
    /// A driver error from `call` (optionally while launching `kernel`).
    pub(crate) fn driver(
        call: &'static str,
        kernel: Option<&'static str>,
    ) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
        move |source| CudaError::Driver {
            call,
            kernel,
            source,
        }
    }
}

fn kernel_suffix(kernel: &Option<&'static str>) -> String {
    kernel
        .map(|k| format!(" (kernel `{k}`)"))
        .unwrap_or_default()
}

fn path_suffix(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!(" ({})", p.display()))
        .unwrap_or_default()
}

fn log_suffix(log: &str) -> String {
    let log = log.trim();
    if log.is_empty() {
        String::new()
    } else {
        format!(":\n{log}")
    }
}

impl From<CudaError> for RuntimeError {
    /// Shape-rule errors stay `RuntimeError::Spec` (structured, as from every engine); the CUDA
    /// engine's own errors become `RuntimeError::Engine` with the `CudaError` as the source.
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::Spec(s) => RuntimeError::from(s),
            other => RuntimeError::Engine {
                engine: "cuda",
                node: None,
                source: Box::new(other),
            },
        }
    }
}

/// `Result` with [`CudaError`].
pub type Result<T, E = CudaError> = std::result::Result<T, E>;
