//! Engine and dtype selection: one generic code path per command, instantiated per engine.

use crate::args::{DTypeArg, EngineArg};
use torchlean_ir::{DType, Tolerance};

/// The tolerance at which f32 runs are compared with float64 expectations.
pub const F32_TOLERANCE: Tolerance = Tolerance {
    rtol: 1e-4,
    atol: 1e-5,
};

/// Runs `$body` with the type alias `$V` bound to the value type of the chosen engine and dtype.
macro_rules! with_engine {
    ($engine:expr, $dtype:expr, $V:ident => $body:expr) => {{
        use torchlean_ir::DType;
        use $crate::args::EngineArg;
        match ($engine, $dtype) {
            (EngineArg::Reference, DType::F64) => {
                type $V = torchlean_spec::Tensor<f64>;
                $body
            }
            (EngineArg::Reference, DType::F32) => {
                type $V = torchlean_spec::Tensor<f32>;
                $body
            }
            (EngineArg::Cpu, DType::F64) => {
                type $V = torchlean_engine_cpu::CpuF64;
                $body
            }
            (EngineArg::Cpu, DType::F32) => {
                type $V = torchlean_engine_cpu::CpuF32;
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

pub fn engine_name(e: EngineArg) -> &'static str {
    match e {
        EngineArg::Cpu => "cpu",
        EngineArg::Reference => "reference",
    }
}
