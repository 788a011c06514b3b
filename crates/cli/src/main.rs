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
mod distributed;
mod engine;
mod export_torch;
mod import;
mod load;
mod out;
mod predict;
mod train;
mod train_gpt;

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

    /// `path: error: its source: …` (the whole chain, [`chain`]).
    pub fn at(path: &std::path::Path, e: &dyn std::error::Error) -> Self {
        BadInput::one(format!("{}: {}", path.display(), chain(e)))
    }

    /// `path: doing: error: its source: …`.
    pub fn at_doing(path: &std::path::Path, doing: &str, e: &dyn std::error::Error) -> Self {
        BadInput::one(format!("{}: {doing}: {}", path.display(), chain(e)))
    }
}

/// The error and its sources, one line: `what: why: deeper why`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    torchlean_spec::display_chain(e)
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
    ExitCode::from(report(result))
}

/// The exit status of a command's `result`, after printing its errors on standard error.
pub(crate) fn report(result: Result<Outcome, Stop>) -> u8 {
    match result {
        Ok(Outcome::Ok) | Err(Stop::Output(out::WriteError::Closed)) => 0,
        Ok(Outcome::Failed) => 1,
        Ok(Outcome::Interrupted) => EXIT_INTERRUPTED,
        Err(Stop::BadInput(BadInput(lines))) => {
            for l in lines {
                out::error_line(l);
            }
            2
        }
        Err(Stop::Output(e)) => {
            out::error_line(e);
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose message leaves its source out (`quiet`), or ends with it.
    #[derive(Debug)]
    struct Layer {
        quiet: bool,
        source: std::io::Error,
    }

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            if self.quiet {
                write!(f, "cannot read the payload")
            } else {
                write!(f, "node 3: {}", self.source)
            }
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_chain_names_each_source_once() {
        let io = || std::io::Error::other("disk on fire");
        assert_eq!(
            chain(&Layer {
                quiet: true,
                source: io()
            }),
            "cannot read the payload: disk on fire"
        );
        let loud = Layer {
            quiet: false,
            source: io(),
        };
        assert_eq!(chain(&loud), "node 3: disk on fire");
        let BadInput(lines) =
            BadInput::at_doing(std::path::Path::new("w.bin"), "cannot write", &io());
        assert_eq!(lines, ["w.bin: cannot write: disk on fire"]);
    }
}
