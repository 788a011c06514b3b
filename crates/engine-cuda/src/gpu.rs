//! The real CUDA device through cudarc: the driver and cuBLAS are loaded at run time (the
//! build needs no CUDA), probed before cudarc touches them (cudarc panics on a missing
//! library; the probe answers [`NoDevice`] instead), kernels compiled by NVRTC for the
//! device's architecture on first use and cached for the process, one stream.
#![allow(unsafe_code)]

use crate::blas::GemmCall;
use crate::device::{Arg, Counters, Device};
use crate::error::{CudaError, NoDevice, Result};
use crate::geometry::{blas_dim, Launch};
use crate::kernels::{Kernel, Module};
use crate::nvrtc;
use cudarc::cublas::sys::{cublasMath_t, cublasOperation_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::PushKernelArg;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The CUDA device (ordinal 0).
#[derive(Debug)]
pub struct Gpu;

static COUNTERS: Counters = Counters::new();
static CONTEXT: OnceLock<std::result::Result<GpuContext, NoDevice>> = OnceLock::new();
static TF32: AtomicBool = AtomicBool::new(false);

/// Allows (or, the default, forbids) TF32 tensor-core arithmetic in cuBLAS products. Off, f32
/// products are IEEE single precision, as on the CPU; on, they are faster and round their
/// inputs to 10 mantissa bits.
pub fn set_tf32(allow: bool) {
    TF32.store(allow, Ordering::Relaxed);
}

/// Whether TF32 is allowed (see [`set_tf32`]).
pub fn tf32() -> bool {
    TF32.load(Ordering::Relaxed)
}

/// What a probe found: the device's name and compute capability.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_memory: usize,
}

#[derive(Debug)]
struct GpuContext {
    info: DeviceInfo,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    arch: String,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
}

fn library_present(
    library: &'static str,
    stem: &str,
    present: unsafe fn() -> bool,
) -> std::result::Result<(), NoDevice> {
    // SAFETY: only tries to open the library by its candidate names.
    if unsafe { present() } {
        Ok(())
    } else {
        Err(NoDevice::LibraryMissing {
            library,
            tried: cudarc::get_lib_name_candidates(stem).join(", "),
        })
    }
}

fn open() -> std::result::Result<GpuContext, NoDevice> {
    library_present("libcuda", "cuda", cudarc::driver::sys::is_culib_present)?;
    library_present("libcublas", "cublas", cudarc::cublas::sys::is_culib_present)?;
    nvrtc::nvrtc_available()?;
    let driver = |call: &'static str| {
        move |source: cudarc::driver::DriverError| NoDevice::Driver { call, source }
    };
    if CudaContext::device_count().map_err(driver("cuDeviceGetCount"))? < 1 {
        return Err(NoDevice::NoGpu);
    }
    let ctx = CudaContext::new(0).map_err(driver("cuCtxCreate"))?;
    let (major, minor) = ctx
        .compute_capability()
        .map_err(driver("cuDeviceGetAttribute"))?;
    let info = DeviceInfo {
        name: ctx.name().map_err(driver("cuDeviceGetName"))?,
        compute_capability: (major, minor),
        total_memory: ctx.total_mem().map_err(driver("cuDeviceTotalMem"))?,
    };
    let stream = ctx.default_stream();
    let blas = CudaBlas::new(stream.clone()).map_err(|source| NoDevice::Blas {
        call: "cublasCreate",
        source,
    })?;
    Ok(GpuContext {
        info,
        stream,
        blas,
        arch: format!("sm_{major}{minor}"),
        modules: Mutex::new(HashMap::new()),
        functions: Mutex::new(HashMap::new()),
    })
}

fn context() -> Result<&'static GpuContext> {
    CONTEXT
        .get_or_init(open)
        .as_ref()
        .map_err(|e| CudaError::NoDevice(e.clone()))
}

/// Probes for a usable CUDA device: its description, or why there is none. Never panics, also
/// when no driver is installed.
pub fn probe() -> std::result::Result<DeviceInfo, NoDevice> {
    CONTEXT
        .get_or_init(open)
        .as_ref()
        .map(|c| c.info.clone())
        .map_err(Clone::clone)
}

impl GpuContext {
    fn module(&self, module: &'static Module) -> Result<Arc<CudaModule>> {
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = modules.get(module.name) {
            return Ok(m.clone());
        }
        let compiled = nvrtc::compile(module, &self.arch)?;
        let image = match compiled.cubin {
            Some(bin) => cudarc::nvrtc::Ptx::from_binary(bin),
            None => cudarc::nvrtc::Ptx::from_src(compiled.ptx),
        };
        let m = self
            .stream
            .context()
            .load_module(image)
            .map_err(CudaError::driver("cuModuleLoadData", None))?;
        modules.insert(module.name, m.clone());
        Ok(m)
    }

    fn function(&self, kernel: Kernel) -> Result<CudaFunction> {
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(kernel.name)
        {
            return Ok(f.clone());
        }
        let f = self
            .module(kernel.module)?
            .load_function(kernel.name)
            .map_err(|_| CudaError::UnknownKernel {
                module: kernel.module.name,
                kernel: kernel.name,
            })?;
        self.functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(kernel.name, f.clone());
        Ok(f)
    }
}

fn op(trans: bool) -> cublasOperation_t {
    if trans {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

impl Device for Gpu {
    const NAME: &'static str = "cuda";
    const ENGINE: &'static str = "cuda-f32";
    type Mem = CudaSlice<f32>;

    fn counters() -> &'static Counters {
        &COUNTERS
    }

    fn alloc(len: usize) -> Result<CudaSlice<f32>> {
        let c = context()?;
        // SAFETY: the contents are unspecified until a kernel writes them; every op writes each
        // element of a buffer it allocates this way before anything reads it.
        unsafe { c.stream.alloc::<f32>(len) }.map_err(CudaError::driver("cuMemAlloc", None))
    }

    fn alloc_zeros(len: usize) -> Result<CudaSlice<f32>> {
        context()?
            .stream
            .alloc_zeros::<f32>(len)
            .map_err(CudaError::driver("cuMemAlloc", None))
    }

    fn upload(data: &[f32]) -> Result<CudaSlice<f32>> {
        context()?
            .stream
            .clone_htod(data)
            .map_err(CudaError::driver("cuMemcpyHtoD", None))
    }

    fn download(mem: &CudaSlice<f32>, len: usize) -> Result<Vec<f32>> {
        let c = context()?;
        // only the first `len` elements cross the bus (at least one, so that a download always
        // waits for the stream): reading one element of an 8192² product used to copy all
        // 256 MiB of it, ten times the product's own time
        let first = mem.slice(..len.clamp(1, mem.len()));
        let mut v = c
            .stream
            .clone_dtoh(&first)
            .map_err(CudaError::driver("cuMemcpyDtoH", None))?;
        v.truncate(len);
        Ok(v)
    }

    fn copy(mem: &CudaSlice<f32>, len: usize) -> Result<CudaSlice<f32>> {
        let c = context()?;
        let _ = len;
        c.stream
            .clone_dtod(mem)
            .map_err(CudaError::driver("cuMemcpyDtoD", None))
    }

    fn launch(kernel: Kernel, launch: Launch, args: &mut [Arg<'_, Gpu>]) -> Result<()> {
        let c = context()?;
        let f = c.function(kernel)?;
        // tables go to the device first; they are freed (stream-ordered) after the launch
        let mut tables: Vec<CudaSlice<i64>> = Vec::new();
        for a in args.iter() {
            if let Arg::Table(t) = a {
                let data: &[i64] = if t.is_empty() { &[0] } else { t };
                tables.push(
                    c.stream
                        .clone_htod(data)
                        .map_err(CudaError::driver("cuMemcpyHtoD", Some(kernel.name)))?,
                );
            }
        }
        let mut b = c.stream.launch_builder(&f);
        let mut next_table = tables.iter();
        for a in args.iter_mut() {
            match a {
                Arg::In(m) => b.arg(*m),
                Arg::Out(m) => b.arg(&mut **m),
                Arg::Index(i) => b.arg(&*i),
                Arg::F32(x) => b.arg(&*x),
                Arg::U64(u) => b.arg(&*u),
                Arg::Table(_) => match next_table.next() {
                    Some(t) => b.arg(t),
                    None => unreachable!("one device table was made per table argument"),
                },
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (launch.grid, 1, 1),
            block_dim: (launch.block, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments are the kernel's parameters in order, with its types (the ops
        // build them next to the kernel's signature), and every buffer is sized for the indices
        // the kernel touches.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(CudaError::driver("cuLaunchKernel", Some(kernel.name)))
    }

    fn gemm(
        call: &GemmCall,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
    ) -> Result<()> {
        call.check(a.len(), b.len(), c.len())?;
        if call.batch == 0 || call.m == 0 || call.n == 0 {
            return Ok(());
        }
        let ctx = context()?;
        let dim = |what, n| blas_dim(call.op, what, n);
        let cfg = StridedBatchedConfig {
            gemm: GemmConfig {
                transa: op(call.trans_a),
                transb: op(call.trans_b),
                m: dim("m", call.m)?,
                n: dim("n", call.n)?,
                k: dim("k", call.k)?,
                alpha: call.alpha,
                lda: dim("lda", call.lda.max(1))?,
                ldb: dim("ldb", call.ldb.max(1))?,
                beta: call.beta,
                ldc: dim("ldc", call.ldc.max(1))?,
            },
            batch_size: dim("batch", call.batch)?,
            stride_a: call.stride_a as i64,
            stride_b: call.stride_b as i64,
            stride_c: call.stride_c as i64,
        };
        let mode = if tf32() {
            cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            // FP32 throughout without TF32 (what PyTorch uses with TF32 off); PEDANTIC would
            // also forbid cuBLAS's fastest FP32 kernels
            cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: a live handle and a valid mode.
        let status = unsafe { cudarc::cublas::sys::cublasSetMathMode(*ctx.blas.handle(), mode) };
        status.result().map_err(|source| CudaError::Blas {
            call: "cublasSetMathMode",
            source,
        })?;
        let av = a.slice(call.offset_a..);
        let bv = b.slice(call.offset_b..);
        let mut cv = c.slice_mut(call.offset_c..);
        // SAFETY: `call.check` above accepted the description for these buffers (every index
        // inside them, leading dimensions covering their rows, output batches disjoint).
        unsafe { ctx.blas.gemm_strided_batched(cfg, &av, &bv, &mut cv) }.map_err(|source| {
            CudaError::Blas {
                call: "cublasSgemmStridedBatched",
                source,
            }
        })
    }
}
