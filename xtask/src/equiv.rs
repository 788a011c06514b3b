//! `cargo xtask check-equivalence`: TorchLean's theorems as executable checks, on every engine;
//! `--seeds A..B` sweeps many runs; `--replay FILE` repeats a counterexample's check. Under
//! `mpirun -np N` (built with `--features mpi`) every run is shared by the ranks
//! (`torchlean_equiv::shard`) and rank 0 alone prints the merged report.

use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;
use torchlean_distributed::{Start, World};
use torchlean_engine_cpu::with_threads;
use torchlean_engines::{with_engine, DType, Engine, EngineName};
use torchlean_equiv::{
    check, check_sharded, replay, CheckConfig, Counterexample, EngineOf, EngineUnderTest, Fault,
    Faulty, Report, UnknownFault, WithFault,
};
use torchlean_spec::Tensor;

/// Node-by-node tolerances of engines against the reference (the engine suite's norm-wise part;
/// the conditioning part is measured per case, `torchlean_engine_suite::Conditioning`).
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

impl EngineSel {
    /// The engines this selection names.
    fn names(self) -> &'static [EngineName] {
        match self {
            Self::Reference => &[EngineName::Reference],
            Self::Cpu => &[EngineName::Cpu],
            Self::Cuda => &[EngineName::Cuda],
            Self::CudaEmu => &[EngineName::CudaEmu],
            Self::All => &[EngineName::Reference, EngineName::Cpu],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DTypeSel {
    F32,
    F64,
    All,
}

/// `A..B`: the seeds from A to B, both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedRange {
    pub first: u64,
    pub last: u64,
}

impl FromStr for SeedRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a seed range: write A..B (both included, A ≤ B)");
        let (a, b) = s.split_once("..").ok_or_else(bad)?;
        let first: u64 = a.trim().parse().map_err(|_| bad())?;
        let last: u64 = b.trim().parse().map_err(|_| bad())?;
        if first > last {
            return Err(bad());
        }
        Ok(SeedRange { first, last })
    }
}

#[derive(Args, Debug)]
pub struct EquivArgs {
    /// Random float graphs (every kind); half as many algebraic graphs are checked exactly
    #[arg(long, default_value_t = 600)]
    cases: usize,
    /// Seed of the graph generator (runs are reproducible)
    #[arg(long, default_value_t = 0x7041_2c4e)]
    seed: u64,
    /// Sweep the seeds A..B (both included): one run each, one line per failing seed (no
    /// shrinking; its rerun line shrinks and writes the counterexamples), a closing line
    #[arg(long, value_name = "A..B", conflicts_with_all = ["seed", "replay"])]
    seeds: Option<SeedRange>,
    /// Repeat the check a counterexample file records (its claim, engine, dtype, threads) on its
    /// case: exit 1 if it still fails, 0 if it passes now
    #[arg(long, value_name = "FILE", conflicts_with_all = ["engine", "dtype", "inject_fault"])]
    replay: Option<PathBuf>,
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
    inject_fault: Option<Fault>,
}

pub fn run(args: &EquivArgs) -> Result<bool, String> {
    if let Some(path) = &args.replay {
        return run_replay(path);
    }
    let world = World::start(Start::Auto).map_err(|e| e.to_string())?;
    let engines = selected_engines(args)?;
    let engines: Vec<&dyn EngineUnderTest> = engines.iter().map(|e| e.as_ref()).collect();
    // one run: the whole of it in one process, rank 0's merged report on several
    let one_run = |cfg: &CheckConfig| -> Result<Option<Report>, String> {
        if world.size() == 1 {
            return Ok(Some(check(cfg, &engines)));
        }
        check_sharded(cfg, &engines, &world).map_err(|e| e.to_string())
    };
    let ok = match args.seeds {
        Some(range) => sweep(args, range, &one_run)?,
        None => match one_run(&config(args, args.seed, Some(args.out.clone())))? {
            Some(report) => {
                if args.json {
                    print!("{}", report.json_lines());
                } else if args.verbose {
                    print!("{}", report.verbose_text());
                } else {
                    print!("{}", report.text());
                }
                report.ok()
            }
            None => true,
        },
    };
    // rank 0 alone knows the verdict: every rank exits with it
    Ok(!world.any(!ok).map_err(|e| e.to_string())?)
}

fn config(args: &EquivArgs, seed: u64, out_dir: Option<PathBuf>) -> CheckConfig {
    CheckConfig {
        cases: args.cases,
        exact_cases: args.cases / 2,
        seed,
        finite_differences: !args.no_fd,
        out_dir,
        shrink_steps: args.shrink_steps,
    }
}

/// The engine labelled `label` (`Kernels::ENGINE`, or a faulty engine's label), compared as
/// every run compares it: the one dispatch from a label to an engine, for the flags and for
/// replays.
fn engine_named(label: &str) -> Result<Box<dyn EngineUnderTest>, String> {
    match Engine::of_label(label) {
        Ok(engine) => engine_under_test(engine),
        Err(_) => faulty_engine(label),
    }
}

/// `engine` as the checks compare it: the reference f64 engine bit for bit (it is the
/// baseline), every other within its dtype's tolerance. The CUDA engine needs a device and its
/// emulation a C++ compiler: the error says why one is missing.
fn engine_under_test(engine: Engine) -> Result<Box<dyn EngineUnderTest>, String> {
    engine.ready().map_err(|e| e.to_string())?;
    if engine == Engine::CudaF32 {
        if let Ok(info) = torchlean_engine_cuda::probe() {
            eprintln!(
                "cuda: {} (compute capability {}.{})",
                info.name, info.compute_capability.0, info.compute_capability.1
            );
        }
    }
    let tolerance = match engine.dtype() {
        DType::F32 => F32_TOLERANCE,
        DType::F64 => F64_TOLERANCE,
    };
    Ok(
        with_engine!(engine, V => Box::new(if engine == Engine::ReferenceF64 {
            EngineOf::<V>::bitwise()
        } else {
            EngineOf::<V>::with_tolerance(tolerance)
        })),
    )
}

/// The reference f64 engine with the fault its label `faulty-NAME-f64` names.
fn faulty_engine(label: &str) -> Result<Box<dyn EngineUnderTest>, String> {
    if let Some(fault) = Fault::of_label(label) {
        return Ok(fault.with(FaultyReference));
    }
    Err(
        match label
            .strip_prefix("faulty-")
            .and_then(|r| r.strip_suffix("-f64"))
        {
            Some(name) => UnknownFault {
                name: name.to_string(),
            }
            .to_string(),
            None => format!("unknown engine `{label}`"),
        },
    )
}

/// The faulty reference engine, checked bit for bit.
struct FaultyReference;

impl WithFault for FaultyReference {
    type Output = Box<dyn EngineUnderTest>;
    fn run<const F: u8>(self) -> Self::Output {
        Box::new(EngineOf::<Faulty<Tensor<f64>, F>>::bitwise())
    }
}

/// The engines the flags select, the reference f64 engine first (the baseline of every other
/// comparison, always checked). Without a device the CUDA engine is skipped with a line, unless
/// `TORCHLEAN_REQUIRE_CUDA=1`: a GPU machine's check must not pass by skipping.
fn selected_engines(args: &EquivArgs) -> Result<Vec<Box<dyn EngineUnderTest>>, String> {
    let dtypes: &[DType] = match args.dtype {
        DTypeSel::F64 => &[DType::F64],
        DTypeSel::F32 => &[DType::F32],
        DTypeSel::All => &[DType::F64, DType::F32],
    };
    let mut engines = vec![engine_under_test(Engine::ReferenceF64)?];
    for &name in args.engine.names() {
        for &dtype in dtypes {
            if name.f32_only() && dtype == DType::F64 && args.dtype == DTypeSel::All {
                continue;
            }
            let engine = Engine::of(name, dtype).map_err(|e| e.to_string())?;
            if engine == Engine::ReferenceF64 {
                continue;
            }
            let require = std::env::var("TORCHLEAN_REQUIRE_CUDA").is_ok_and(|v| v == "1");
            match engine_under_test(engine) {
                Ok(e) => engines.push(e),
                Err(why) if engine == Engine::CudaF32 && !require => {
                    eprintln!("cuda-f32: skipped: {why}")
                }
                Err(why) if engine == Engine::CudaF32 => {
                    return Err(format!("TORCHLEAN_REQUIRE_CUDA=1 but {why}"))
                }
                Err(why) => return Err(why),
            }
        }
    }
    if let Some(fault) = args.inject_fault {
        engines.push(fault.with(FaultyReference));
    }
    Ok(engines)
}

/// The flags that repeat this run's selection with `--seed seed` (a sweep's rerun lines).
fn rerun_flags(args: &EquivArgs, seed: u64) -> String {
    let mut s = format!("--seed {seed} --cases {}", args.cases);
    if args.engine != EngineSel::All {
        let _ = write!(s, " --engine {}", flag_value(args.engine));
    }
    if args.dtype != DTypeSel::All {
        let _ = write!(s, " --dtype {}", flag_value(args.dtype));
    }
    if args.no_fd {
        s.push_str(" --no-fd");
    }
    if let Some(f) = &args.inject_fault {
        let _ = write!(s, " --inject-fault {f}");
    }
    s
}

/// How `value` is written on the command line.
fn flag_value(value: impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

/// One run per seed of `range`, without shrinking or writing counterexamples: a line per
/// failing seed (its failing claims and engines, and the command that reruns it in full), then
/// a closing line. Whether every seed passed.
fn sweep(
    args: &EquivArgs,
    range: SeedRange,
    one_run: &dyn Fn(&CheckConfig) -> Result<Option<Report>, String>,
) -> Result<bool, String> {
    let start = Instant::now();
    let (mut failed, mut graphs) = (0usize, 0usize);
    // a rank other than 0 of a sharded sweep gets no reports, and prints nothing
    let mut reports = false;
    for seed in range.first..=range.last {
        let cfg = CheckConfig {
            shrink_steps: 0,
            ..config(args, seed, None)
        };
        let Some(report) = one_run(&cfg)? else {
            continue;
        };
        reports = true;
        graphs += report.graphs;
        if report.ok() {
            continue;
        }
        failed += 1;
        let claims: Vec<String> = report
            .failing_claims()
            .iter()
            .map(|(c, e)| format!("{} [{e}]", c.name()))
            .collect();
        println!(
            "seed {seed}: FAIL {}; rerun: cargo xtask check-equivalence {}",
            claims.join(", "),
            rerun_flags(args, seed)
        );
    }
    if !reports {
        return Ok(true);
    }
    let seeds = range.last - range.first + 1;
    println!(
        "seeds {}..{} ({seeds} runs of {} cases): {} passed, {failed} failed; {graphs} random graphs in {:.1} s",
        range.first,
        range.last,
        args.cases,
        seeds - failed as u64,
        start.elapsed().as_secs_f64()
    );
    Ok(failed == 0)
}

/// `--replay FILE`: the recorded check on the recorded case, on the recorded engine (beside
/// the reference f64 engine) and number of threads. Whether it passes now.
fn run_replay(path: &Path) -> Result<bool, String> {
    let cx = Counterexample::read(path).map_err(|e| e.to_string())?;
    let p = &cx.provenance;
    let mut engines = vec![engine_named("reference-f64")?];
    if p.engine != "reference-f64" && !p.engine.starts_with("reference-rational") {
        engines.push(engine_named(&p.engine)?);
    }
    let engines: Vec<&dyn EngineUnderTest> = engines.iter().map(|e| e.as_ref()).collect();
    println!(
        "replay: {} [{}] on {} ({} family; from seed {}, {} cases, case {}; {} threads)",
        p.claim.name(),
        p.engine,
        path.display(),
        p.family.name(),
        p.seed,
        p.cases,
        p.case_index,
        p.threads
    );
    println!("recorded: {}", p.detail);
    let observed = with_threads(p.threads, || replay(&cx, &engines)).map_err(|e| e.to_string())?;
    if observed.is_empty() {
        return Err(format!(
            "{}: {} is not observed on {} for this case (nothing to replay)",
            path.display(),
            p.claim.name(),
            p.engine
        ));
    }
    match observed.iter().find(|o| !o.measure.pass) {
        Some(o) => {
            let detail = o.detail.as_ref().map(|d| d.to_string()).unwrap_or_default();
            println!("now:      FAIL {detail}");
            Ok(false)
        }
        None => {
            println!("now:      pass (the recorded failure does not reproduce)");
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn seed_ranges_include_both_ends_and_refuse_anything_else() {
        assert_eq!(
            "1..200".parse::<SeedRange>(),
            Ok(SeedRange {
                first: 1,
                last: 200
            })
        );
        assert_eq!(
            "7..7".parse::<SeedRange>(),
            Ok(SeedRange { first: 7, last: 7 })
        );
        for bad in ["", "5", "..5", "5..", "9..3", "a..b", "1...3", "-1..2"] {
            let e = bad.parse::<SeedRange>().unwrap_err();
            assert!(e.contains("is not a seed range"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_engine_label_of_a_run_names_its_engine() {
        for label in ["reference-f64", "reference-f32", "cpu-f64", "cpu-f32"] {
            assert_eq!(engine_named(label).unwrap().name(), label);
        }
        for fault in Fault::ALL {
            let label = format!("faulty-{fault}-f64");
            assert_eq!(engine_named(&label).unwrap().name(), label);
        }
        assert_eq!(
            engine_named("faulty-nope-f64").err().unwrap(),
            "unknown fault `nope` (one of flip-sign, drop-contribution, accumulation-order, \
             broadcast-reduction, pool-off-by-one)"
        );
        assert_eq!(
            engine_named("abacus-f32").err().unwrap(),
            "unknown engine `abacus-f32`"
        );
        for engine in [Engine::CudaF32, Engine::CudaEmuF32] {
            if let Ok(e) = engine_named(engine.label()) {
                assert_eq!(e.name(), engine.label());
            }
        }
    }
}
