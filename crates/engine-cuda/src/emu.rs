//! The host emulation of the CUDA device: the same kernel sources, compiled by the host's C++
//! compiler with `TORCHLEAN_EMU` defined (the prelude supplies CUDA's built-in indices and a
//! launcher that runs every thread of a launch in order), loaded as a shared library; device
//! memory is host memory; products are [`gemm_host`], cuBLAS's column-major meaning.
//!
//! It exists so that everything above the device — every op's host logic, argument lists,
//! geometry, the buffer accounting and the kernels' arithmetic — runs against the reference
//! suite on a machine without a GPU. It is not fast and does not pretend to be.
//!
//! The library is built once per kernel-source version into
//! `$TMPDIR/torchlean-cuda-emu-<hash>/` (atomically renamed into place, so concurrent test
//! processes share it), with `$CXX` or `c++`.
#![allow(unsafe_code)]

use crate::blas::{gemm_host, GemmCall};
use crate::device::{Arg, Counters, Device};
use crate::error::{CudaError, Result};
use crate::geometry::Launch;
use crate::kernels::{Kernel, MODULES};
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

/// The host emulation of a CUDA device (see the module docs).
#[derive(Debug)]
pub struct Emu;

static COUNTERS: Counters = Counters::new();

/// The bits of every element of a fresh uninitialised emulated buffer (a quiet NaN with a
/// recognisable payload).
pub const POISON: u32 = 0x7fc0_dead;

/// The loaded library, or why it could not be built (kept to answer every later call alike).
static LIBRARY: OnceLock<std::result::Result<libloading::Library, BuildFailure>> = OnceLock::new();

/// Why the library could not be built or loaded, kept for every later call: the compiler's
/// log, or the I/O or loader error as the source (shared, since the answer is cached).
#[derive(Debug, Clone)]
struct BuildFailure {
    what: &'static str,
    path: Option<PathBuf>,
    log: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl BuildFailure {
    /// A step that failed with `source` (no compiler log).
    fn because(
        what: &'static str,
        path: Option<PathBuf>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BuildFailure {
            what,
            path,
            log: String::new(),
            source: Some(Arc::new(source)),
        }
    }
}

impl From<&BuildFailure> for CudaError {
    fn from(f: &BuildFailure) -> Self {
        CudaError::Emulation {
            what: f.what,
            path: f.path.clone(),
            log: f.log.clone(),
            source: f
                .source
                .clone()
                .map(|s| Box::new(s) as Box<dyn std::error::Error + Send + Sync>),
        }
    }
}

/// The C++ translation unit: every module (each starts with the prelude, which is guarded), then
/// one `tl_emu_<kernel>(grid, block, params)` entry point per kernel.
pub fn emulation_source() -> String {
    let mut src = String::from("#define TORCHLEAN_EMU 1\n");
    for m in MODULES {
        src.push_str(&m.full_source());
        src.push('\n');
    }
    src.push_str("#line 1 \"emulation-entry-points\"\n");
    for m in MODULES {
        for k in m.kernel_names() {
            src.push_str(&format!(
                "extern \"C\" void tl_emu_{k}(unsigned int g, unsigned int b, void** p) \
                 {{ tl_launch({k}, g, b, p); }}\n"
            ));
        }
    }
    src
}

/// FNV-1a: a hash that is the same in every process and toolchain (the kernel cache key here;
/// `cargo xtask mutants` names a long shard by it).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn compiler() -> String {
    std::env::var("CXX")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "c++".to_string())
}

/// Compiles the emulation library into `dir` (if it is not there yet) and returns its path.
fn build(dir: &Path, src: &str) -> std::result::Result<PathBuf, BuildFailure> {
    let lib = dir.join("kernels.so");
    if lib.exists() {
        return Ok(lib);
    }
    let fail = BuildFailure::because;
    std::fs::create_dir_all(dir)
        .map_err(|e| fail("creating its directory", Some(dir.into()), e))?;
    let unique = format!("{}-{:?}", std::process::id(), std::thread::current().id())
        .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let cpp = dir.join(format!("kernels-{unique}.cpp"));
    let tmp = dir.join(format!("kernels-{unique}.so"));
    std::fs::write(&cpp, src).map_err(|e| fail("writing its source", Some(cpp.clone()), e))?;
    let cxx = compiler();
    let out = Command::new(&cxx)
        .args([
            "-std=c++17",
            "-O2",
            "-fPIC",
            "-shared",
            // IEEE arithmetic as written: no contraction into FMA, no fast math (the device
            // build passes --fmad=false for the same reason)
            "-ffp-contract=off",
            "-fno-fast-math",
            "-o",
        ])
        .arg(&tmp)
        .arg(&cpp)
        .output()
        .map_err(|e| {
            fail(
                "running the C++ compiler (set CXX, or install g++)",
                Some(PathBuf::from(&cxx)),
                e,
            )
        })?;
    if !out.status.success() {
        return Err(BuildFailure {
            what: "compiling the kernel sources",
            path: Some(cpp),
            log: String::from_utf8_lossy(&out.stderr).into_owned(),
            source: None,
        });
    }
    let _ = std::fs::remove_file(&cpp);
    std::fs::rename(&tmp, &lib)
        .map_err(|e| fail("installing the library", Some(lib.clone()), e))?;
    Ok(lib)
}

fn library() -> Result<&'static libloading::Library> {
    LIBRARY
        .get_or_init(|| {
            let src = emulation_source();
            let dir = std::env::temp_dir()
                .join(format!("torchlean-cuda-emu-{:016x}", fnv1a(src.as_bytes())));
            let path = build(&dir, &src)?;
            // SAFETY: the library is ours, just built from our sources; its initialisers only
            // set up the C++ runtime.
            unsafe { libloading::Library::new(&path) }
                .map_err(|e| BuildFailure::because("loading the library", Some(path), e))
        })
        .as_ref()
        .map_err(CudaError::from)
}

/// Builds (or finds) and loads the emulation library: `Ok` when the emulated device is usable.
pub fn emulation_ready() -> Result<()> {
    library().map(|_| ())
}

/// One kernel parameter as the launcher reads it: a pointer to each argument's value.
#[repr(C)]
#[derive(Clone, Copy)]
union Slot {
    ptr: *const c_void,
    index: i64,
    float: f32,
    word: u64,
}

type Entry = unsafe extern "C" fn(u32, u32, *mut *mut c_void);

impl Device for Emu {
    const NAME: &'static str = "cuda-emu";
    const ENGINE: &'static str = "cuda-emu-f32";
    type Mem = Vec<f32>;

    fn counters() -> &'static Counters {
        &COUNTERS
    }

    /// Poisoned with a signalling-looking NaN pattern: device memory from `cuMemAlloc` holds
    /// whatever was there, so a kernel that leaves an element unwritten must fail the suite here
    /// too, not read a convenient zero.
    fn alloc(len: usize) -> Result<Vec<f32>> {
        Ok(vec![f32::from_bits(POISON); len])
    }

    fn alloc_zeros(len: usize) -> Result<Vec<f32>> {
        Ok(vec![0.0; len])
    }

    fn upload(data: &[f32]) -> Result<Vec<f32>> {
        Ok(data.to_vec())
    }

    fn download(mem: &Vec<f32>, len: usize) -> Result<Vec<f32>> {
        Ok(mem[..len.min(mem.len())].to_vec())
    }

    fn copy(mem: &Vec<f32>, len: usize) -> Result<Vec<f32>> {
        Ok(mem[..len.min(mem.len())].to_vec())
    }

    fn launch(kernel: Kernel, launch: Launch, args: &mut [Arg<'_, Emu>]) -> Result<()> {
        let lib = library()?;
        let symbol = format!("tl_emu_{}", kernel.name);
        // SAFETY: every `tl_emu_*` symbol is an entry point of `emulation_source` with the
        // `Entry` signature.
        let entry: libloading::Symbol<'_, Entry> =
            unsafe { lib.get(symbol.as_bytes()) }.map_err(|_| CudaError::UnknownKernel {
                module: kernel.module.name,
                kernel: kernel.name,
            })?;
        let mut slots: Vec<Slot> = args
            .iter_mut()
            .map(|a| match a {
                Arg::In(m) => Slot {
                    ptr: m.as_ptr().cast(),
                },
                Arg::Out(m) => Slot {
                    ptr: m.as_mut_ptr().cast_const().cast(),
                },
                Arg::Table(t) => Slot {
                    ptr: t.as_ptr().cast(),
                },
                Arg::Index(i) => Slot { index: *i },
                Arg::F32(f) => Slot { float: *f },
                Arg::U64(u) => Slot { word: *u },
            })
            .collect();
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| (s as *mut Slot).cast::<c_void>())
            .collect();
        // SAFETY: `params[i]` points at a live `Slot` holding the i-th argument as the kernel's
        // parameter type reads it (a pointer, `long long`, `float` at offset 0, or `unsigned
        // long long`); the buffers behind the pointers outlive the call (borrowed by `args`),
        // and the ops size every buffer for the indices their kernels touch.
        unsafe { entry(launch.grid, launch.block, params.as_mut_ptr()) };
        Ok(())
    }

    fn gemm(call: &GemmCall, a: &Vec<f32>, b: &Vec<f32>, c: &mut Vec<f32>) -> Result<()> {
        gemm_host(call, a, b, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uninitialised_memory_is_poisoned_and_zeroed_memory_is_zero() {
        let m = Emu::alloc(3).unwrap_or_default();
        assert!(m.iter().all(|v| v.to_bits() == POISON));
        assert!(Emu::alloc_zeros(3).unwrap_or_default() == vec![0.0; 3]);
    }

    #[test]
    fn a_failed_build_step_keeps_the_io_error_as_its_source() {
        // a directory that cannot be created: its parent is a file
        let file = std::env::temp_dir().join(format!("torchlean-emu-file-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap_or_default();
        let dir = file.join("sub");
        let io = std::fs::create_dir_all(&dir).map(|_| ()).unwrap_err();
        let e = CudaError::from(&build(&dir, "").map(|_| ()).unwrap_err());
        let _ = std::fs::remove_file(&file);
        assert!(e.to_string().contains("creating its directory"), "{e}");
        let source = std::error::Error::source(&e).map(|s| s.to_string());
        assert_eq!(source, Some(io.to_string()));
    }

    #[test]
    fn the_hash_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn the_translation_unit_has_one_entry_point_per_kernel() {
        let src = emulation_source();
        for m in MODULES {
            for k in m.kernel_names() {
                assert_eq!(src.matches(&format!("void tl_emu_{k}(")).count(), 1, "{k}");
            }
        }
    }
}
