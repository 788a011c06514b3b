//! Command-line arguments.

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "torchlean",
    version,
    about = "TorchLean-rs: check, run and differentiate torchlean.ir.v1 graphs, and verify them against conformance cases",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// The fast CPU engine
    Cpu,
    /// The reference engine (the semantics; slow, obviously correct). `eval` with it is the IR
    /// denotation itself, which enforces raw `log`'s domain
    Reference,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DTypeArg {
    F32,
    F64,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validate a graph (or a case file's graph, payload and input): structure, shapes, and
    /// optionally payload and input; reports every problem
    Check {
        graph: PathBuf,
        #[arg(long)]
        payload: Option<PathBuf>,
        #[arg(long)]
        input: Option<PathBuf>,
    },
    /// Evaluate a graph and print its output as tensor JSON
    Eval {
        graph: PathBuf,
        #[arg(long)]
        payload: Option<PathBuf>,
        /// Input tensor JSON (default: the case's input, for a case file)
        #[arg(long)]
        input: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "cpu")]
        engine: EngineArg,
        #[arg(long, value_enum, default_value = "f64")]
        dtype: DTypeArg,
    },
    /// Evaluate a graph and its gradients; prints {"output", "grad_input", "grad_payload"}
    Grad {
        graph: PathBuf,
        #[arg(long)]
        payload: Option<PathBuf>,
        /// Input tensor JSON (default: the case's input, for a case file)
        #[arg(long)]
        input: Option<PathBuf>,
        /// Cotangent of the output (default: ones)
        #[arg(long)]
        seed: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "cpu")]
        engine: EngineArg,
        #[arg(long, value_enum, default_value = "f64")]
        dtype: DTypeArg,
    },
    /// Run torchlean.case.v1 files (or every *.json in directories) and compare
    Conform {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(long, value_enum, default_value = "cpu")]
        engine: EngineArg,
        /// Override the cases' dtype (f32 runs compare at f32 tolerance)
        #[arg(long, value_enum)]
        dtype: Option<DTypeArg>,
        /// One JSON object per case, then a summary object
        #[arg(long)]
        json: bool,
        /// Run a deliberately broken variant of the reference f64 engine (to reproduce the
        /// counterexamples of `cargo xtask check-equivalence --inject-fault`): flip-sign,
        /// drop-contribution, accumulation-order, broadcast-reduction, pool-off-by-one
        #[arg(long)]
        inject_fault: Option<String>,
    },
    /// Print the lowered SSA GraphData (the text the insta snapshots hold)
    Lower {
        graph: PathBuf,
        #[arg(long)]
        payload: Option<PathBuf>,
    },
    /// Print the graph as Graphviz DOT
    Dot { graph: PathBuf },
}
