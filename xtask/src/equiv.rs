//! `cargo xtask check-equivalence`: TorchLean's theorems as executable checks, on every engine.

use clap::{Args, ValueEnum};
use std::path::PathBuf;
use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_engine_cuda::{CudaF32, EmuF32};
use torchlean_equiv::{check, fault, CheckConfig, EngineOf, EngineUnderTest, Faulty};
use torchlean_spec::Tensor;

/// Node-by-node tolerances of engines against the reference (the engine suite's).
const F32_TOLERANCE: f64 = 1e-5;
const F64_TOLERANCE: f64 = 1e-12;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineSel {
    Reference,
    Cpu,
    /// The CUDA engine on the GPU (f32; skipped with a line when there is no device, an error
    /// then with TORCHLEAN_REQUIRE_CUDA=1)
    Cuda,
    /// The CUDA engine's host emulation (f32; the same kernel sources on the CPU, slow)
    CudaEmu,
    /// The host engines: reference and cpu (the CUDA engines are asked for by name)
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DTypeSel {
    F32,
    F64,
    All,
}

#[derive(Args, Debug)]
pub struct EquivArgs {
    /// Random float graphs (every kind); half as many algebraic graphs are checked exactly
    #[arg(long, default_value_t = 600)]
    cases: usize,
    /// Seed of the graph generator (runs are reproducible)
    #[arg(long, default_value_t = 0x7041_2c4e)]
    seed: u64,
    /// Engines to check
    #[arg(long, value_enum, default_value = "all")]
    engine: EngineSel,
    /// Precisions to check
    #[arg(long, value_enum, default_value = "all")]
    dtype: DTypeSel,
    /// One JSON object per row (claim × engine × kind), one per claim, then a summary object
    #[arg(long)]
    json: bool,
    /// The table of every row (claim × engine × kind) before the per-claim lines
    #[arg(long)]
    verbose: bool,
    /// Most shrinking steps per failure (0: report each failure's first graph as found)
    #[arg(long, default_value_t = 4000)]
    shrink_steps: usize,
    /// Where minimized counterexamples are written
    #[arg(long, default_value = "target/equiv-counterexamples")]
    out: PathBuf,
    /// Skip the finite-difference checks
    #[arg(long)]
    no_fd: bool,
    /// Check a deliberately broken engine too (the reference engine with one fault injected):
    /// flip-sign, drop-contribution, accumulation-order, broadcast-reduction, pool-off-by-one
    #[arg(long)]
    inject_fault: Option<String>,
}

pub fn run(args: &EquivArgs) -> Result<bool, String> {
    let cfg = CheckConfig {
        cases: args.cases,
        exact_cases: args.cases / 2,
        seed: args.seed,
        finite_differences: !args.no_fd,
        out_dir: Some(args.out.clone()),
        shrink_steps: args.shrink_steps,
    };
    let ref64 = EngineOf::<Tensor<f64>>::bitwise();
    let ref32 = EngineOf::<Tensor<f32>>::with_tolerance(F32_TOLERANCE);
    let cpu64 = EngineOf::<CpuF64>::with_tolerance(F64_TOLERANCE);
    let cpu32 = EngineOf::<CpuF32>::with_tolerance(F32_TOLERANCE);
    let wants_dtype = |d: DTypeSel| args.dtype == DTypeSel::All || args.dtype == d;
    let wants_engine = |e: EngineSel| args.engine == EngineSel::All || args.engine == e;
    // the reference f64 engine is always checked: it is the baseline of every other comparison
    let mut engines: Vec<&dyn EngineUnderTest> = vec![&ref64];
    if wants_engine(EngineSel::Reference) && wants_dtype(DTypeSel::F32) {
        engines.push(&ref32);
    }
    if wants_engine(EngineSel::Cpu) {
        if wants_dtype(DTypeSel::F64) {
            engines.push(&cpu64);
        }
        if wants_dtype(DTypeSel::F32) {
            engines.push(&cpu32);
        }
    }
    let faulty: Option<Box<dyn EngineUnderTest>> = match args.inject_fault.as_deref() {
        None => None,
        Some("flip-sign") => Some(Box::new(EngineOf::<
            Faulty<Tensor<f64>, { fault::FLIP_SIGN }>,
        >::bitwise())),
        Some("drop-contribution") => Some(Box::new(EngineOf::<
            Faulty<Tensor<f64>, { fault::DROP_CONTRIBUTION }>,
        >::bitwise())),
        Some("accumulation-order") => Some(Box::new(EngineOf::<
            Faulty<Tensor<f64>, { fault::ACCUMULATION_ORDER }>,
        >::bitwise())),
        Some("broadcast-reduction") => Some(Box::new(EngineOf::<
            Faulty<Tensor<f64>, { fault::BROADCAST_REDUCTION }>,
        >::bitwise())),
        Some("pool-off-by-one") => Some(Box::new(EngineOf::<
            Faulty<Tensor<f64>, { fault::POOL_OFF_BY_ONE }>,
        >::bitwise())),
        Some(other) => {
            let names: Vec<&str> = fault::ALL.iter().map(|(_, n)| *n).collect();
            return Err(format!(
                "unknown fault `{other}` (one of {})",
                names.join(", ")
            ));
        }
    };
    let cuda32 = EngineOf::<CudaF32>::with_tolerance(F32_TOLERANCE);
    let emu32 = EngineOf::<EmuF32>::with_tolerance(F32_TOLERANCE);
    if matches!(args.engine, EngineSel::Cuda | EngineSel::CudaEmu) {
        if args.dtype == DTypeSel::F64 {
            return Err(format!(
                "--engine {} computes in f32 only: use --dtype f32 (or all)",
                cuda_name(args.engine)
            ));
        }
        if args.engine == EngineSel::CudaEmu {
            torchlean_engine_cuda::emulation_ready()
                .map_err(|e| format!("--engine cuda-emu is not available: {e}"))?;
            engines.push(&emu32);
        } else if cuda_available()? {
            engines.push(&cuda32);
        }
    }
    if let Some(f) = &faulty {
        engines.push(f.as_ref());
    }
    let report = check(&cfg, &engines);
    if args.json {
        print!("{}", report.json_lines());
    } else if args.verbose {
        print!("{}", report.verbose_text());
    } else {
        print!("{}", report.text());
    }
    Ok(report.ok())
}

fn cuda_name(e: EngineSel) -> &'static str {
    if e == EngineSel::CudaEmu {
        "cuda-emu"
    } else {
        "cuda"
    }
}

/// Whether the GPU engine can be checked: `false`, after a printed line, when there is no
/// device, and an error instead when `TORCHLEAN_REQUIRE_CUDA=1` (a GPU machine's check must not
/// pass by skipping).
fn cuda_available() -> Result<bool, String> {
    match torchlean_engine_cuda::probe() {
        Ok(info) => {
            eprintln!(
                "cuda: {} (compute capability {}.{})",
                info.name, info.compute_capability.0, info.compute_capability.1
            );
            Ok(true)
        }
        Err(why) if std::env::var("TORCHLEAN_REQUIRE_CUDA").is_ok_and(|v| v == "1") => Err(
            format!("TORCHLEAN_REQUIRE_CUDA=1 but there is no CUDA device: {why}"),
        ),
        Err(why) => {
            eprintln!("cuda-f32: skipped: no CUDA device ({why})");
            Ok(false)
        }
    }
}
