//! The engines this build has, named once.
//!
//! A user names an engine (`--engine cpu`) and a dtype; a report names the pair by its label
//! (`cpu-f32`, `Kernels::ENGINE`). [`Engine`] is the pair, and the only place that knows which
//! pairs exist (the CUDA engines compute in f32 only), how each is probed on this machine
//! ([`Engine::ready`]: a device for `cuda`, the emulation's library for `cuda-emu`), and which
//! value type implements it ([`with_engine!`]). The CLI and `xtask` both dispatch through it.
//!
//! Invariant: [`Engine::label`] is the engine's `Kernels::ENGINE`, read off its value type.

use std::fmt;
use std::str::FromStr;
use thiserror::Error;
/// Runs a closure with the CPU engine's kernels on `n` threads (`--threads`).
pub use torchlean_engine_cpu::{default_threads, with_threads};
pub use torchlean_ir::DType;

/// An engine as a user names it, whatever the dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EngineName {
    /// The fast CPU engine
    Cpu,
    /// The reference engine (the semantics; slow, obviously correct)
    Reference,
    /// The CUDA engine on the GPU (f32 only; without a device, choosing it is an error that
    /// says why: `no CUDA device: <reason>`)
    Cuda,
    /// The CUDA engine's host emulation: the same kernel sources compiled for the CPU, one
    /// thread at a time (f32 only; a testing aid, slow, needs a C++ compiler)
    CudaEmu,
}

impl EngineName {
    pub const ALL: [EngineName; 4] = [Self::Cpu, Self::Reference, Self::Cuda, Self::CudaEmu];

    /// The name as a user types it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Reference => "reference",
            Self::Cuda => "cuda",
            Self::CudaEmu => "cuda-emu",
        }
    }

    /// Whether the engine computes in f32 only.
    pub fn f32_only(self) -> bool {
        matches!(self, Self::Cuda | Self::CudaEmu)
    }

    /// The dtype a run takes when none is asked for: f32 on an f32-only engine, else `or` (the
    /// command's or the case's own).
    pub fn default_dtype(self, or: DType) -> DType {
        if self.f32_only() {
            DType::F32
        } else {
            or
        }
    }
}

impl fmt::Display for EngineName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An engine at a dtype: one that this build has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    ReferenceF64,
    ReferenceF32,
    CpuF64,
    CpuF32,
    /// `torchlean_engine_cuda::CudaF32`.
    CudaF32,
    /// `torchlean_engine_cuda::EmuF32`.
    CudaEmuF32,
}

/// Why an engine cannot run here.
#[derive(Debug, Error)]
pub enum EngineError {
    /// An f32-only engine was asked for f64.
    #[error("--engine {engine} computes in f32 only: --dtype f64 is not available on it (use --dtype f32)")]
    F32Only { engine: EngineName },
    /// `cuda` without a usable device.
    #[error("no CUDA device: {source}")]
    NoDevice {
        #[source]
        source: torchlean_engine_cuda::NoDevice,
    },
    /// `cuda-emu` whose emulation library could not be built or loaded.
    #[error("--engine cuda-emu is not available: {source}")]
    EmulationUnavailable {
        #[source]
        source: torchlean_engine_cuda::CudaError,
    },
    /// A label that names no engine.
    #[error("unknown engine `{label}` (known: {})", Engine::ALL.map(Engine::label).join(", "))]
    UnknownLabel { label: String },
}

impl Engine {
    pub const ALL: [Engine; 6] = [
        Self::ReferenceF64,
        Self::ReferenceF32,
        Self::CpuF64,
        Self::CpuF32,
        Self::CudaF32,
        Self::CudaEmuF32,
    ];

    /// `name` at `dtype`; f64 on an f32-only engine is refused. Nothing is probed.
    pub fn of(name: EngineName, dtype: DType) -> Result<Engine, EngineError> {
        Ok(match (name, dtype) {
            (EngineName::Reference, DType::F64) => Self::ReferenceF64,
            (EngineName::Reference, DType::F32) => Self::ReferenceF32,
            (EngineName::Cpu, DType::F64) => Self::CpuF64,
            (EngineName::Cpu, DType::F32) => Self::CpuF32,
            (EngineName::Cuda, DType::F32) => Self::CudaF32,
            (EngineName::CudaEmu, DType::F32) => Self::CudaEmuF32,
            (EngineName::Cuda | EngineName::CudaEmu, DType::F64) => {
                return Err(EngineError::F32Only { engine: name })
            }
        })
    }

    /// [`Engine::of`], then [`Engine::ready`]: the engine a command runs on.
    pub fn select(name: EngineName, dtype: DType) -> Result<Engine, EngineError> {
        let engine = Self::of(name, dtype)?;
        engine.ready()?;
        Ok(engine)
    }

    /// The engine whose [`label`](Engine::label) is `label`.
    pub fn of_label(label: &str) -> Result<Engine, EngineError> {
        Self::ALL
            .into_iter()
            .find(|e| e.label() == label)
            .ok_or_else(|| EngineError::UnknownLabel {
                label: label.to_string(),
            })
    }

    pub fn name(self) -> EngineName {
        match self {
            Self::ReferenceF64 | Self::ReferenceF32 => EngineName::Reference,
            Self::CpuF64 | Self::CpuF32 => EngineName::Cpu,
            Self::CudaF32 => EngineName::Cuda,
            Self::CudaEmuF32 => EngineName::CudaEmu,
        }
    }

    pub fn dtype(self) -> DType {
        match self {
            Self::ReferenceF64 | Self::CpuF64 => DType::F64,
            _ => DType::F32,
        }
    }

    /// The label reports and replays name the engine by: its value type's `Kernels::ENGINE`.
    pub fn label(self) -> &'static str {
        with_engine!(self, V => <V as torchlean_runtime::Kernels>::ENGINE)
    }

    /// Whether the engine can run on this machine: the CUDA engine needs a device
    /// (`torchlean_engine_cuda::probe`), its emulation the library built on first use with
    /// the host C++ compiler; the host engines always can.
    pub fn ready(self) -> Result<(), EngineError> {
        match self {
            Self::CudaF32 => torchlean_engine_cuda::probe()
                .map(|_| ())
                .map_err(|source| EngineError::NoDevice { source }),
            Self::CudaEmuF32 => torchlean_engine_cuda::emulation_ready()
                .map_err(|source| EngineError::EmulationUnavailable { source }),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for Engine {
    type Err = EngineError;
    fn from_str(label: &str) -> Result<Self, EngineError> {
        Self::of_label(label)
    }
}

/// Runs `$body` with the type alias `$V` bound to the value type of an [`Engine`]: the one
/// dispatch from an engine to its type.
#[macro_export]
macro_rules! with_engine {
    ($engine:expr, $V:ident => $body:expr) => {{
        use $crate::Engine;
        match $engine {
            Engine::ReferenceF64 => {
                type $V = $crate::reexport::Tensor<f64>;
                $body
            }
            Engine::ReferenceF32 => {
                type $V = $crate::reexport::Tensor<f32>;
                $body
            }
            Engine::CpuF64 => {
                type $V = $crate::reexport::CpuF64;
                $body
            }
            Engine::CpuF32 => {
                type $V = $crate::reexport::CpuF32;
                $body
            }
            Engine::CudaF32 => {
                type $V = $crate::reexport::CudaF32;
                $body
            }
            Engine::CudaEmuF32 => {
                type $V = $crate::reexport::EmuF32;
                $body
            }
        }
    }};
}

/// The value types [`with_engine!`] names, so that its callers need not depend on each engine.
#[doc(hidden)]
pub mod reexport {
    pub use torchlean_engine_cpu::{CpuF32, CpuF64};
    pub use torchlean_engine_cuda::{CudaF32, EmuF32};
    pub use torchlean_spec::Tensor;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_is_found_by_its_label_and_is_its_name_at_its_dtype() {
        for e in Engine::ALL {
            assert_eq!(Engine::of_label(e.label()).ok(), Some(e));
            assert_eq!(Engine::of(e.name(), e.dtype()).ok(), Some(e));
            assert_eq!(e.to_string().parse::<Engine>().ok(), Some(e));
        }
    }

    #[test]
    fn the_labels_are_the_value_types_and_say_the_dtype() {
        let labels = Engine::ALL.map(Engine::label);
        assert_eq!(
            labels,
            [
                "reference-f64",
                "reference-f32",
                "cpu-f64",
                "cpu-f32",
                "cuda-f32",
                "cuda-emu-f32"
            ]
        );
    }

    #[test]
    fn a_cuda_engine_refuses_f64_before_looking_for_a_device() {
        for name in [EngineName::Cuda, EngineName::CudaEmu] {
            let e = Engine::select(name, DType::F64).expect_err("f64 on a CUDA engine");
            assert!(matches!(e, EngineError::F32Only { engine } if engine == name));
            assert!(e.to_string().contains("f32 only"), "{e}");
        }
    }

    #[test]
    fn the_cuda_engines_default_to_f32_and_the_others_keep_theirs() {
        assert_eq!(EngineName::Cuda.default_dtype(DType::F64), DType::F32);
        assert_eq!(EngineName::CudaEmu.default_dtype(DType::F64), DType::F32);
        assert_eq!(EngineName::Cpu.default_dtype(DType::F64), DType::F64);
        assert_eq!(EngineName::Reference.default_dtype(DType::F32), DType::F32);
    }

    #[test]
    fn host_engines_are_ready_at_either_dtype() {
        for name in [EngineName::Cpu, EngineName::Reference] {
            for d in [DType::F32, DType::F64] {
                let e = Engine::select(name, d).expect("a host engine");
                assert_eq!((e.name(), e.dtype()), (name, d));
            }
        }
    }

    #[test]
    fn an_unknown_label_lists_the_known_ones() {
        let e = Engine::of_label("abacus-f32").expect_err("no such engine");
        assert!(matches!(&e, EngineError::UnknownLabel { label } if label == "abacus-f32"));
        assert!(e.to_string().contains("cpu-f32"), "{e}");
    }
}
