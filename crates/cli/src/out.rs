//! Standard output and error: every byte a command prints goes through here, so no write can
//! panic (`println!` panics on a closed pipe or a full disk) and none fails unnoticed.
//!
//! - The reader went away (`EPIPE`, `torchlean dot g.json | head -n 1`): [`WriteError::Closed`],
//!   and the command ends quietly with exit 0, as `git` and `ripgrep` do. Rust ignores `SIGPIPE`,
//!   so the write returns the error instead of killing the process.
//! - Any other failed write or flush (`> /dev/full`): [`WriteError::Failed`], exit 2 with one
//!   line.
//! - Standard output closed before the start (`>&-`): Rust's runtime puts `/dev/null` in its
//!   place, so every write would "succeed" and the output be lost; [`check_open`] refuses to
//!   start instead.

use std::fmt;
use std::io::{self, Write};

/// Why output stopped.
#[derive(Debug)]
pub enum WriteError {
    /// Whoever read standard output has gone: the command ends quietly, exit 0.
    Closed,
    /// Writing or flushing standard output failed: exit 2.
    Failed(io::Error),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Closed => write!(f, "standard output was closed by its reader"),
            WriteError::Failed(e) => write!(f, "cannot write standard output: {e}"),
        }
    }
}

impl From<io::Error> for WriteError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            WriteError::Closed
        } else {
            WriteError::Failed(e)
        }
    }
}

/// Writes `text` to standard output as is and flushes it.
pub fn text(text: &str) -> Result<(), WriteError> {
    let mut w = io::stdout().lock();
    w.write_all(text.as_bytes())?;
    w.flush()?;
    Ok(())
}

/// Writes `line` and a newline to standard output and flushes it (so a reader sees each line
/// when it is written, and a failure is known at that line).
pub fn line(line: impl fmt::Display) -> Result<(), WriteError> {
    let mut w = io::stdout().lock();
    writeln!(w, "{line}")?;
    w.flush()?;
    Ok(())
}

/// Writes `torchlean: <line>` to standard error. A failure is ignored: there is nowhere left
/// to report it, and the exit code still says what happened.
pub fn error_line(line: impl fmt::Display) {
    let _ = writeln!(io::stderr().lock(), "torchlean: {line}");
}

/// Fails when standard output was closed before the program started: the runtime opened
/// `/dev/null` read-write in its place (a shell's `> /dev/null` opens it write-only), and
/// everything written there would be lost while the command reported success.
pub fn check_open() -> Result<(), WriteError> {
    if stdout_replaced_by_runtime() {
        return Err(WriteError::Failed(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "it was closed when torchlean started (nothing would be written)",
        )));
    }
    Ok(())
}

/// Whether file descriptor 1 is `/dev/null` opened read-write, which is what Rust's runtime
/// opens for a standard descriptor that was closed at start-up (Linux: read from `/proc`).
#[cfg(target_os = "linux")]
fn stdout_replaced_by_runtime() -> bool {
    let is_null = std::fs::read_link("/proc/self/fd/1")
        .is_ok_and(|target| target == std::path::Path::new("/dev/null"));
    is_null
        && std::fs::read_to_string("/proc/self/fdinfo/1").is_ok_and(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
                .is_some_and(|flags| flags & 0o3 == 0o2) // O_ACCMODE == O_RDWR
        })
}

#[cfg(not(target_os = "linux"))]
fn stdout_replaced_by_runtime() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_is_closed_and_anything_else_failed() {
        let closed = WriteError::from(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(matches!(closed, WriteError::Closed));
        let full = WriteError::from(io::Error::from_raw_os_error(28)); // ENOSPC
        assert!(matches!(full, WriteError::Failed(_)));
        assert!(full
            .to_string()
            .starts_with("cannot write standard output: "));
    }
}
