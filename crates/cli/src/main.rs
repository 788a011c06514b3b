//! `torchlean`: the command line (SPEC 4).
//!
//! Exit codes: 0 success, 1 a check failed (conformance), 2 bad input (one line per problem on
//! stderr, naming the file, node id and field), 130 `train` interrupted by SIGINT (Ctrl-C)
//! after saving a checkpoint to resume from (as shells report a SIGINT death: 128 + 2). Never
//! a panic on bad input.

mod args;
mod commands;
mod engine;
mod load;
mod train;

use clap::Parser;
use std::process::ExitCode;

/// What a command ends with.
#[derive(Debug)]
pub enum Outcome {
    Ok,
    /// A check ran and failed (exit 1).
    Failed,
    /// `train` stopped on SIGINT and saved its checkpoint (exit 130).
    Interrupted,
}

/// The exit code of [`Outcome::Interrupted`] (and of a second SIGINT during `train`).
pub const EXIT_INTERRUPTED: u8 = 130;

/// A command's error: lines for stderr, exit 2.
#[derive(Debug)]
pub struct BadInput(pub Vec<String>);

impl BadInput {
    pub fn one(line: impl Into<String>) -> Self {
        BadInput(vec![line.into()])
    }
}

fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match commands::run(cli) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Ok(Outcome::Interrupted) => ExitCode::from(EXIT_INTERRUPTED),
        Err(BadInput(lines)) => {
            for l in lines {
                eprintln!("torchlean: {l}");
            }
            ExitCode::from(2)
        }
    }
}
