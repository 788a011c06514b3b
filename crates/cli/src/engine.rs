//! `--engine` and `--dtype` into a [`torchlean_engines::Engine`]: the pairs that exist, probed
//! up front, so [`with_engine!`] has no impossible arm and a missing GPU is one line of bad
//! input, never a panic half-way through a run.

use crate::args::DTypeArg;
use crate::BadInput;
pub use torchlean_engines::{with_engine, Engine, EngineName};
use torchlean_ir::DType;

/// `engine` at `dtype`, checked ([`Engine::select`]): one line of bad input when it cannot run.
pub fn select(engine: EngineName, dtype: DType) -> Result<Engine, BadInput> {
    Engine::select(engine, dtype).map_err(|e| BadInput::one(crate::chain(&e)))
}

pub fn dtype(d: DTypeArg) -> DType {
    match d {
        DTypeArg::F32 => DType::F32,
        DTypeArg::F64 => DType::F64,
    }
}

/// `--dtype` if given, else the engine's default over `or` ([`EngineName::default_dtype`]).
pub fn dtype_or(engine: EngineName, d: Option<DTypeArg>, or: DType) -> DType {
    d.map_or_else(|| engine.default_dtype(or), dtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cuda_engine_refuses_f64_in_one_line() {
        for e in [EngineName::Cuda, EngineName::CudaEmu] {
            let BadInput(lines) = select(e, DType::F64).expect_err("f64 on a CUDA engine");
            assert_eq!(lines.len(), 1);
            assert!(lines[0].contains("f32 only"), "{lines:?}");
        }
    }

    #[test]
    fn an_explicit_dtype_wins_over_the_engines_default() {
        assert_eq!(
            dtype_or(EngineName::Cuda, Some(DTypeArg::F64), DType::F32),
            DType::F64
        );
        assert_eq!(dtype_or(EngineName::Cuda, None, DType::F64), DType::F32);
    }
}
