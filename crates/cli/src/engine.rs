//! Engine and dtype selection: one generic code path per command, instantiated per engine.
//!
//! [`select`] turns `--engine` and `--dtype` into a [`Selected`] — only the combinations that
//! exist (the CUDA engines are f32 only), with the device probed up front — so
//! [`with_engine!`] has no impossible arm and a missing GPU is one line of bad input, never a
//! panic half-way through a run.

use crate::args::{DTypeArg, EngineArg};
use crate::BadInput;
use torchlean_ir::DType;

/// An engine and dtype that exist and are available on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selected {
    ReferenceF64,
    ReferenceF32,
    CpuF64,
    CpuF32,
    /// `torchlean_engine_cuda::CudaF32`: a device was found.
    CudaF32,
    /// `torchlean_engine_cuda::EmuF32`: the emulation library was built.
    CudaEmuF32,
}

/// Whether `engine` computes in f32 only.
pub fn f32_only(engine: EngineArg) -> bool {
    matches!(engine, EngineArg::Cuda | EngineArg::CudaEmu)
}

/// The dtype a run takes when `--dtype` is not given: f32 on an f32-only engine, else `or`
/// (the command's or the case's own).
pub fn default_dtype(engine: EngineArg, or: DType) -> DType {
    if f32_only(engine) {
        DType::F32
    } else {
        or
    }
}

/// `engine` at `dtype`, checked: f64 on a CUDA engine is refused, `cuda` needs a device
/// (`torchlean_engine_cuda::probe`) and `cuda-emu` the emulation's library (built on first
/// use with the host C++ compiler). One line each.
pub fn select(engine: EngineArg, dtype: DType) -> Result<Selected, BadInput> {
    let name = engine_name(engine);
    match (engine, dtype) {
        (EngineArg::Reference, DType::F64) => Ok(Selected::ReferenceF64),
        (EngineArg::Reference, DType::F32) => Ok(Selected::ReferenceF32),
        (EngineArg::Cpu, DType::F64) => Ok(Selected::CpuF64),
        (EngineArg::Cpu, DType::F32) => Ok(Selected::CpuF32),
        (EngineArg::Cuda | EngineArg::CudaEmu, DType::F64) => Err(BadInput::one(format!(
            "--engine {name} computes in f32 only: --dtype f64 is not available on it (use --dtype f32)"
        ))),
        (EngineArg::Cuda, DType::F32) => match torchlean_engine_cuda::probe() {
            Ok(_) => Ok(Selected::CudaF32),
            Err(why) => Err(BadInput::one(format!("no CUDA device: {why}"))),
        },
        (EngineArg::CudaEmu, DType::F32) => match torchlean_engine_cuda::emulation_ready() {
            Ok(()) => Ok(Selected::CudaEmuF32),
            Err(e) => Err(BadInput::one(format!(
                "--engine cuda-emu is not available: {}",
                crate::chain(&e)
            ))),
        },
    }
}

/// Runs `$body` with the type alias `$V` bound to the value type of a [`Selected`] engine.
macro_rules! with_engine {
    ($selected:expr, $V:ident => $body:expr) => {{
        use $crate::engine::Selected;
        match $selected {
            Selected::ReferenceF64 => {
                type $V = torchlean_spec::Tensor<f64>;
                $body
            }
            Selected::ReferenceF32 => {
                type $V = torchlean_spec::Tensor<f32>;
                $body
            }
            Selected::CpuF64 => {
                type $V = torchlean_engine_cpu::CpuF64;
                $body
            }
            Selected::CpuF32 => {
                type $V = torchlean_engine_cpu::CpuF32;
                $body
            }
            Selected::CudaF32 => {
                type $V = torchlean_engine_cuda::CudaF32;
                $body
            }
            Selected::CudaEmuF32 => {
                type $V = torchlean_engine_cuda::EmuF32;
                $body
            }
        }
    }};
}
pub(crate) use with_engine;

pub fn dtype(d: DTypeArg) -> DType {
    match d {
        DTypeArg::F32 => DType::F32,
        DTypeArg::F64 => DType::F64,
    }
}

/// `--dtype` if given, else the engine's default over `or` ([`default_dtype`]).
pub fn dtype_or(engine: EngineArg, d: Option<DTypeArg>, or: DType) -> DType {
    d.map_or_else(|| default_dtype(engine, or), dtype)
}

pub fn engine_name(e: EngineArg) -> &'static str {
    match e {
        EngineArg::Cpu => "cpu",
        EngineArg::Reference => "reference",
        EngineArg::Cuda => "cuda",
        EngineArg::CudaEmu => "cuda-emu",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cuda_engine_refuses_f64_before_looking_for_a_device() {
        for e in [EngineArg::Cuda, EngineArg::CudaEmu] {
            let BadInput(lines) = select(e, DType::F64).expect_err("f64 on a CUDA engine");
            assert_eq!(lines.len(), 1);
            assert!(lines[0].contains("f32 only"), "{lines:?}");
        }
    }

    #[test]
    fn the_cuda_engines_default_to_f32_and_the_others_keep_theirs() {
        assert_eq!(default_dtype(EngineArg::Cuda, DType::F64), DType::F32);
        assert_eq!(default_dtype(EngineArg::CudaEmu, DType::F64), DType::F32);
        assert_eq!(default_dtype(EngineArg::Cpu, DType::F64), DType::F64);
        assert_eq!(default_dtype(EngineArg::Reference, DType::F32), DType::F32);
        assert_eq!(
            dtype_or(EngineArg::Cuda, Some(DTypeArg::F64), DType::F32),
            DType::F64
        );
    }

    #[test]
    fn host_engines_are_selected_at_either_dtype() {
        assert_eq!(
            select(EngineArg::Cpu, DType::F32).ok(),
            Some(Selected::CpuF32)
        );
        assert_eq!(
            select(EngineArg::Reference, DType::F64).ok(),
            Some(Selected::ReferenceF64)
        );
    }
}
