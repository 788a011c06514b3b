//! Compiling kernel modules with NVRTC. NVRTC needs no driver and no GPU: its library alone
//! (`libnvrtc.so.13`, on PyPI as `nvidia-cuda-nvrtc`) compiles every module for any
//! architecture, so a typo in a kernel is caught on the CPU-only CI.
//!
//! A compilation that succeeds with warnings is an error here ([`CudaError::Compile`] with
//! `warnings_only`): a warning in a kernel is a bug waiting for a GPU.
#![allow(unsafe_code)]

use crate::error::{CudaError, NoDevice, Result};
use crate::kernels::Module;
use cudarc::nvrtc::result;
use std::ffi::{CStr, CString};

/// The architecture the CI compile test targets (the H200's).
pub const CI_ARCH: &str = "sm_90";

/// Whether NVRTC's library can be opened (without cudarc's panic when it cannot).
pub fn nvrtc_available() -> std::result::Result<(), NoDevice> {
    // SAFETY: only tries to open the library by its candidate names.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(NoDevice::LibraryMissing {
            library: "libnvrtc",
            tried: cudarc::get_lib_name_candidates("nvrtc").join(", "),
        })
    }
}

/// The options every module is compiled with: IEEE arithmetic as written (no FMA contraction,
/// IEEE division and square root), as the host emulation compiles it.
pub fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--std=c++17".into(),
    ]
}

/// What one compilation produced.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The PTX (always produced).
    pub ptx: String,
    /// The device binary, when `arch` is a real architecture (`sm_90`): what the engine loads,
    /// since a driver older than the NVRTC that made the PTX cannot JIT it, while a CUBIN of
    /// the same major CUDA version loads.
    pub cubin: Option<Vec<u8>>,
}

/// `module` compiled for `arch` (`sm_90`, `compute_90`, …). An error carries the compiler's
/// log; warnings are errors.
pub fn compile(module: &'static Module, arch: &str) -> Result<Compiled> {
    nvrtc_available()?;
    let fail = |log: &str| CudaError::Compile {
        module: module.name,
        arch: arch.into(),
        warnings_only: false,
        log: log.into(),
    };
    let src =
        CString::new(module.full_source()).map_err(|_| fail("the source contains a NUL byte"))?;
    let name = CString::new(format!("{}.cu", module.name))
        .map_err(|_| fail("the module name contains a NUL byte"))?;
    let nv = |call: &'static str| {
        move |source| CudaError::Nvrtc {
            call,
            module: module.name,
            source,
        }
    };
    let prog = result::create_program(&src, Some(&name)).map_err(nv("nvrtcCreateProgram"))?;
    let _guard = Destroy(prog);
    // SAFETY: `prog` is a live program (destroyed by `_guard` after its last use below).
    let compiled = unsafe { result::compile_program(prog, &options(arch)) };
    // SAFETY: as above; the log is a NUL-terminated buffer NVRTC filled.
    let log = unsafe { result::get_program_log(prog) }.map_err(nv("nvrtcGetProgramLog"))?;
    let log = unsafe { CStr::from_ptr(log.as_ptr()) }
        .to_string_lossy()
        .trim()
        .to_string();
    if compiled.is_err() || !log.is_empty() {
        return Err(CudaError::Compile {
            module: module.name,
            arch: arch.into(),
            warnings_only: compiled.is_ok(),
            log,
        });
    }
    // SAFETY: as above, after a successful compilation.
    let ptx = unsafe { result::get_ptx(prog) }.map_err(nv("nvrtcGetPTX"))?;
    let ptx = unsafe { CStr::from_ptr(ptx.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let cubin = if arch.starts_with("sm_") {
        Some(cubin_of(prog).map_err(nv("nvrtcGetCUBIN"))?)
    } else {
        None
    };
    Ok(Compiled { ptx, cubin })
}

/// The CUBIN of a program compiled for a real architecture.
fn cubin_of(
    prog: cudarc::nvrtc::sys::nvrtcProgram,
) -> std::result::Result<Vec<u8>, result::NvrtcError> {
    use cudarc::nvrtc::sys;
    let mut size = 0usize;
    // SAFETY: `prog` is live and compiled (the caller's guard destroys it later); the buffer
    // has the size NVRTC reported.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }.result()?;
    let mut bin = vec![0u8; size];
    unsafe { sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast()) }.result()?;
    Ok(bin)
}

/// Destroys an NVRTC program when dropped.
struct Destroy(cudarc::nvrtc::sys::nvrtcProgram);

impl Drop for Destroy {
    fn drop(&mut self) {
        // SAFETY: the program was created by `create_program` and is destroyed once, here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

impl std::fmt::Debug for Destroy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Destroy(nvrtcProgram)")
    }
}
