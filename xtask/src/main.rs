//! `cargo xtask`: project chores.
//!
//! - `cargo xtask bench [--json] [--case NAME]… [--threads 1,2] [--compare]` — the benchmark
//!   contract of SPEC 5: one JSON line per case (`--json`) or a table; `--compare` runs the
//!   PyTorch scripts in `bench/pytorch/` in the same invocation (with `$TORCHLEAN_PYTHON`, a
//!   virtualenv you create, see `bench/pytorch/README.md`) and prints ratios.

mod bench;

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
    /// Internal: run one benchmark case in a fresh process (for peak-RSS measurements)
    #[command(hide = true)]
    BenchChild {
        case: String,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Bench(args) => bench::run(&args),
        Cmd::BenchChild { case, threads } => bench::run_child(&case, threads),
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
