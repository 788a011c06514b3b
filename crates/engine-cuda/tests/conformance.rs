//! The shared conformance suite on the CUDA engine: on the host emulation always (the kernel
//! sources and every op's host logic, without a GPU), and on the GPU when there is one.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cuda::{cuda_or_skip, emulation_ready, CudaF32, EmuF32};
use torchlean_engine_suite::{assert_suite_passes, Tolerance};

#[test]
fn the_emulated_engine_passes_the_suite() {
    emulation_ready().unwrap();
    assert_suite_passes::<EmuF32>(Tolerance::F32);
}

#[test]
fn the_gpu_engine_passes_the_suite() {
    if !cuda_or_skip("the_gpu_engine_passes_the_suite") {
        return;
    }
    assert_suite_passes::<CudaF32>(Tolerance::F32);
}
