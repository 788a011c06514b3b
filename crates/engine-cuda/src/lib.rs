//! `torchlean-engine-cuda`: the CUDA engine.
//!
//! [`CudaTensor<D>`] holds `f32` data in the memory of a device `D` and implements the
//! runtime's `GradValue`, `GradZero` and `Kernels` traits, so compiled graphs, eager tapes and
//! every reverse sweep run on it, checked op by op against the reference by the shared
//! conformance suite (`torchlean-engine-suite`). Two devices implement [`Device`]:
//!
//! - [`Gpu`] ([`CudaF32`]): the real device through `cudarc` — the driver, NVRTC and cuBLAS
//!   are loaded at run time, so the crate builds on machines without CUDA; [`probe`] answers
//!   "no device" (with the reason) instead of cudarc's panic.
//! - [`Emu`] ([`EmuF32`]): the host emulation — the *same* kernel sources compiled by the host
//!   C++ compiler, threads run in order, host memory, cuBLAS's column-major product computed
//!   naively. Everything above the device (tensors, accounting, geometry, argument lists, the
//!   row/column-major mapping, every op's host logic, the kernels' arithmetic) is shared, so CI
//!   runs the conformance suite on it without a GPU.
//!
//! # Design
//!
//! **Kernels** are CUDA C (`src/kernels/*.cu`, one module per op family, see [`kernels`]),
//! compiled at run time by NVRTC for the device's architecture and cached per process; no
//! shared memory, no block synchronisation, no atomics: every output element is written by one
//! thread and every sum runs in a fixed order, so results are identical run to run.
//! **Products** (matmul, batched matmul, linear, the GEMM parts of conv) are cuBLAS
//! `sgemmStridedBatched` calls described by [`GemmCall`]; TF32 is off unless [`set_tf32`].
//! **Ownership**: a tensor is a shape and an `Arc` of a [`Buffer`]; views and detached
//! references share it and the last holder frees it at once; [`live_buffers`] counts live
//! buffers and bytes per device.
//!
//! # Tests without a GPU
//!
//! The NVRTC compile test (`tests/nvrtc.rs`) compiles every module for `sm_90` and fails on any
//! error or warning; it needs only `libnvrtc.so.13` (PyPI `nvidia-cuda-nvrtc`). GPU tests print
//! `skipped: no CUDA device (...)` and pass when [`probe`] finds none, and fail instead when
//! `TORCHLEAN_REQUIRE_CUDA=1`.

mod backend;
pub mod blas;
mod buffer;
pub mod device;
pub mod emu;
mod error;
pub mod geometry;
pub mod gpu;
pub mod kernels;
pub mod nvrtc;
mod ops;
mod tensor;

pub use blas::GemmCall;
pub use buffer::{Buffer, HOST_COPY_MAX};
pub use device::{live_buffers, transfers, Arg, Counters, Device, LiveBuffers, Transfers};
pub use emu::{emulation_ready, Emu};
pub use error::{CudaError, NoDevice, Result};
pub use gpu::{probe, set_tf32, tf32, DeviceInfo, Gpu};
pub use tensor::CudaTensor;

/// `f32` tensors on the CUDA device.
pub type CudaF32 = CudaTensor<Gpu>;
/// `f32` tensors on the host emulation of the CUDA device.
pub type EmuF32 = CudaTensor<Emu>;

/// Whether a test that needs a CUDA device should run: `true` when [`probe`] finds one;
/// otherwise prints `skipped: no CUDA device (<reason>)` and returns `false`, or panics when
/// `TORCHLEAN_REQUIRE_CUDA=1` (a GPU machine's check must not pass by skipping).
pub fn cuda_or_skip(test: &str) -> bool {
    match probe() {
        Ok(_) => true,
        Err(why) => {
            if std::env::var("TORCHLEAN_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("{test}: TORCHLEAN_REQUIRE_CUDA=1 but there is no CUDA device: {why}");
            }
            println!("{test}: skipped: no CUDA device ({why})");
            false
        }
    }
}
