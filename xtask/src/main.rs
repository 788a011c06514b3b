//! `cargo xtask`: project chores.
//!
//! - `cargo xtask check-equivalence [--cases N] [--seed S | --seeds A..B] [--engine E]
//!   [--dtype D] [--json] [--verbose] [--shrink-steps N]` — every claim of SPEC 2.3 on random
//!   graphs (the first built round-robin around every `(kind, regime)` pair) and every engine;
//!   one line per claim (the claim × engine × kind table with `--verbose`), what was not covered,
//!   a closing `N passed, M failed` line, exit 1 on any failure, minimized counterexamples on
//!   disk, each with its rerun line; `--seeds A..B` one run per seed, a line per failing seed;
//!   `--replay FILE` repeats a counterexample's check (exit 1 while it fails).
//! - `cargo xtask bench [--json] [--case NAME]… [--threads 1,2] [--compare]` — the benchmark
//!   contract of SPEC 5: one JSON line per case (`--json`) or a table; `--compare` runs the
//!   PyTorch scripts in `bench/pytorch/` in the same invocation (with `$TORCHLEAN_PYTHON`, a
//!   virtualenv you create, see `bench/pytorch/README.md`) and prints ratios.
//! - `cargo xtask fuzz [--target T]… [--seconds N]` — every fuzz target under libFuzzer
//!   (nightly; installs cargo-fuzz if absent), N seconds each, one after the other; a table of
//!   executions per target, exit 1 if any input crashed, leaked, hung or ran out of memory.
//! - `cargo xtask mutants [--crate C]… [--file GLOB]… [--sample K/N | --missed | --untested]
//!   [--oracle lib|own|checkers] [--timeout S] [--jobs N] [--report] [--keep]` — mutation testing (cargo-mutants, installed if absent) of spec, runtime,
//!   compiled and engine-cpu; the score per crate less the accepted equivalent mutants of
//!   `xtask/mutants-equivalent.json`, the missed mutants, the run time; exit 1 under target.
//! - `cargo xtask onnx-conformance [--dir DIR] [--filter S]… [--verbose]` — ONNX's node test
//!   suite (generated from the installed `onnx` package unless `--dir` names a folder of it)
//!   through the importer and the reference semantics: an outcome per test, tallies overall,
//!   for the tests whose ops we claim or target, and per op; exit 1 on any wrong value or
//!   crash (a failed evaluation is listed with its reason).

mod bench;
mod equiv;
mod fuzz;
mod mutants;
mod onnx_conformance;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", about = "TorchLean-rs project chores")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the benchmarks (release build; SPEC 5)
    Bench(bench::BenchArgs),
    /// Check TorchLean's theorems on random graphs, on every engine (SPEC 2.3)
    CheckEquivalence(equiv::EquivArgs),
    /// Fuzz every parser and checker with libFuzzer (nightly, cargo-fuzz)
    Fuzz(fuzz::FuzzArgs),
    /// Mutation testing with cargo-mutants: the score per crate (not in CI; docs/mutants.md)
    Mutants(mutants::MutantsArgs),
    /// ONNX's node test suite through the importer: pass / wrong / error / refused / crash per
    /// test and per op (docs/onnx.md)
    OnnxConformance(onnx_conformance::OnnxConformanceArgs),
    /// Internal: run one benchmark case in this fresh process
    #[command(hide = true)]
    BenchChild {
        case: String,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long, default_value_t = 9)]
        reps: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Bench(args) => bench::run(&args),
        Cmd::CheckEquivalence(args) => equiv::run(&args),
        Cmd::Fuzz(args) => fuzz::run(&args),
        Cmd::Mutants(args) => mutants::run(&args),
        Cmd::OnnxConformance(args) => onnx_conformance::run(&args),
        Cmd::BenchChild {
            case,
            threads,
            reps,
        } => bench::run_child(&case, threads, reps),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::from(2)
        }
    }
}

/// Installs the cargo subcommand `package` from crates.io (`cargo install PACKAGE --locked`)
/// when `cargo PROBE...` does not run; the one installer of `xtask fuzz` and `xtask mutants`.
fn ensure_cargo_tool(package: &str, probe: &[&str]) -> Result<(), String> {
    let present = std::process::Command::new("cargo")
        .args(probe)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    eprintln!("{package} is not installed; installing it (cargo install {package} --locked)");
    let status = std::process::Command::new("cargo")
        .args(["install", package, "--locked"])
        .status()
        .map_err(|e| format!("cannot run cargo install: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo install {package} failed ({status})"))
    }
}
