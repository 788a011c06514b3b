//! The `optim` crate's error type: each variant names the parameter, the optimizer or the
//! setting, and keeps the engine's error as its source.

use thiserror::Error;
use torchlean_runtime::RuntimeError;

pub type Result<T, E = OptimError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum OptimError {
    /// An engine call failed (allocating state, applying an update).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),

    /// A parameter and its gradient (or its optimizer state) disagree in length.
    #[error("parameter `{name}`: {what} has {got} elements, the parameter has {want}")]
    Length {
        name: String,
        what: &'static str,
        want: usize,
        got: usize,
    },

    /// An optimizer or schedule setting outside the range PyTorch accepts (or NaN).
    #[error("{owner}: {field} = {value} is invalid (expected {expected})")]
    InvalidSetting {
        owner: &'static str,
        field: &'static str,
        value: f64,
        expected: &'static str,
    },

    /// An option the chosen optimizer does not have (`--momentum` for Adam).
    #[error("{optimizer} has no {option} (only {have})")]
    OptimizerOption {
        optimizer: &'static str,
        option: &'static str,
        have: &'static str,
    },

    /// An optimizer name (`--optimizer`) that names none of ours.
    #[error("unknown optimizer `{name}` (expected one of: {})", expected.join(", "))]
    UnknownOptimizer {
        name: String,
        expected: &'static [&'static str],
    },

    /// The same parameter name given twice to one optimizer step.
    #[error("parameter `{name}` is given twice to one optimizer step")]
    DuplicateParam { name: String },

    /// Loaded optimizer state lacks a buffer the optimizer keeps.
    #[error("parameter `{name}`: the {optimizer} state has no `{buffer}` buffer")]
    MissingOptimBuffer {
        name: String,
        optimizer: &'static str,
        buffer: &'static str,
    },

    /// Loaded optimizer state has a buffer the optimizer does not keep.
    #[error(
        "parameter `{name}`: `{buffer}` is not a buffer of the {optimizer} state (it keeps: {})",
        expected.join(", ")
    )]
    UnexpectedOptimBuffer {
        name: String,
        optimizer: &'static str,
        buffer: String,
        expected: &'static [&'static str],
    },

    /// Loaded optimizer state whose buffers disagree in length.
    #[error(
        "parameter `{name}`: optimizer buffer `{buffer}` has {got} elements, `{other}` has {want}"
    )]
    OptimBufferLength {
        name: String,
        buffer: &'static str,
        other: &'static str,
        want: usize,
        got: usize,
    },

    /// A sequential schedule whose parts and milestones do not fit together.
    #[error(
        "sequential schedule with {schedules} schedules and milestones {milestones:?}: {problem}"
    )]
    SequentialSchedule {
        schedules: usize,
        milestones: Vec<u64>,
        problem: &'static str,
    },
}
