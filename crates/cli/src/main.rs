//! `torchlean`: the command line (SPEC 4).
//!
//! Exit codes: 0 success, 1 a check failed (conformance), 2 bad input (one line per problem on
//! stderr, naming the file, node id and field) or output that could not be written (one
//! line), 130 `train` interrupted by SIGINT (Ctrl-C) after saving a checkpoint to resume from
//! (as shells report a SIGINT death: 128 + 2). Standard output closed by its reader
//! (`torchlean dot g.json | head -n 1`) ends the command quietly with exit 0. Never a panic.

mod args;
mod commands;
mod conform;
mod engine;
mod export_torch;
mod import;
mod load;
mod out;
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

/// Why a command stopped early.
#[derive(Debug)]
pub enum Stop {
    /// Bad input: exit 2.
    BadInput(BadInput),
    /// Standard output closed by its reader (exit 0, quietly) or failing (exit 2).
    Output(out::WriteError),
}

impl From<BadInput> for Stop {
    fn from(b: BadInput) -> Self {
        Stop::BadInput(b)
    }
}

impl From<out::WriteError> for Stop {
    fn from(e: out::WriteError) -> Self {
        Stop::Output(e)
    }
}

fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            // `--help` into a closed pipe: nothing more to do either way
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = out::check_open()
        .map_err(Stop::from)
        .and_then(|()| commands::run(cli));
    match result {
        Ok(Outcome::Ok) | Err(Stop::Output(out::WriteError::Closed)) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Ok(Outcome::Interrupted) => ExitCode::from(EXIT_INTERRUPTED),
        Err(Stop::BadInput(BadInput(lines))) => {
            for l in lines {
                out::error_line(l);
            }
            ExitCode::from(2)
        }
        Err(Stop::Output(e)) => {
            out::error_line(e);
            ExitCode::from(2)
        }
    }
}
