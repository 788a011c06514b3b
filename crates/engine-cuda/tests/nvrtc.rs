//! Every kernel module compiles with NVRTC for `sm_90`, without errors or warnings. NVRTC needs
//! no GPU and no driver, only `libnvrtc.so.13` (PyPI `nvidia-cuda-nvrtc`; `.ci/run` installs it
//! into a virtualenv outside the repository and puts it on `LD_LIBRARY_PATH`). Without the
//! library the test says `skipped` — and fails instead when `TORCHLEAN_REQUIRE_NVRTC=1`, as
//! `.ci/run` sets it, so CI cannot pass by skipping.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cuda::kernels::{Module, MODULES};
use torchlean_engine_cuda::nvrtc::{compile, nvrtc_available, CI_ARCH};
use torchlean_engine_cuda::CudaError;

fn nvrtc_or_skip(test: &str) -> bool {
    match nvrtc_available() {
        Ok(()) => true,
        Err(why) => {
            if std::env::var("TORCHLEAN_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
                panic!("{test}: TORCHLEAN_REQUIRE_NVRTC=1 but NVRTC is not loadable: {why}");
            }
            println!("{test}: skipped: no NVRTC library ({why})");
            false
        }
    }
}

#[test]
fn every_kernel_module_compiles_for_sm_90_without_warnings() {
    if !nvrtc_or_skip("every_kernel_module_compiles_for_sm_90_without_warnings") {
        return;
    }
    let mut failures = Vec::new();
    for m in MODULES {
        match compile(m, CI_ARCH) {
            Ok(c) => {
                if !c.cubin.as_ref().is_some_and(|b| b.starts_with(b"\x7fELF")) {
                    failures.push(format!("{}: no sm_90 CUBIN (an ELF image)", m.name));
                }
                for k in m.kernel_names() {
                    if !c.ptx.contains(&format!(".entry {k}(")) {
                        failures.push(format!("{}: kernel {k} is missing from the PTX", m.name));
                    }
                }
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

static BROKEN: Module = Module {
    name: "broken",
    source: "extern \"C\" __global__ void tl_broken(float* y) { y[0] = undefined_name; }",
    generated: None,
};

static WARNS: Module = Module {
    name: "warns",
    source: "extern \"C\" __global__ void tl_warns(float* y) { int unused; y[0] = 1.0f; }",
    generated: None,
};

#[test]
fn a_compile_error_and_a_warning_are_both_errors_with_the_log() {
    if !nvrtc_or_skip("a_compile_error_and_a_warning_are_both_errors_with_the_log") {
        return;
    }
    match compile(&BROKEN, CI_ARCH) {
        Err(CudaError::Compile {
            module,
            warnings_only,
            log,
            ..
        }) => {
            assert_eq!(module, "broken");
            assert!(!warnings_only);
            assert!(log.contains("undefined_name"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    match compile(&WARNS, CI_ARCH) {
        Err(CudaError::Compile {
            warnings_only, log, ..
        }) => {
            assert!(warnings_only);
            assert!(log.contains("unused"), "{log}");
        }
        other => panic!("expected a warning to be an error, got {other:?}"),
    }
}
