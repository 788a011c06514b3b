//! The `train` crate's error type: every variant names what was being done (the parameter, the
//! file and line, the optimizer) and keeps the lower crate's error as its source.

use thiserror::Error;
use torchlean_nn::NnError;
use torchlean_runtime::RuntimeError;
use torchlean_spec::SpecError;

pub type Result<T, E = TrainError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum TrainError {
    /// A model call failed (shape, parameter, engine), with the `nn` error as its source.
    #[error(transparent)]
    Nn(#[from] NnError),

    /// An engine call failed outside a model (a conversion, an optimizer's gradient read).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),

    /// Building a tensor failed.
    #[error(transparent)]
    Spec(#[from] SpecError),

    /// A parameter and its gradient (or its optimizer state) disagree in length.
    #[error("parameter `{name}`: {what} has {got} elements, the parameter has {want}")]
    Length {
        name: String,
        what: &'static str,
        want: usize,
        got: usize,
    },

    // --- data ---
    /// A data file could not be read.
    #[error("cannot read the data file {}: {source}", .path.display())]
    ReadData {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A CSV text is malformed at `line` (1-based) of `origin` (a path, or what the caller
    /// named the text).
    #[error("{origin}, line {line}: {problem}")]
    Csv {
        origin: String,
        line: usize,
        problem: crate::data::CsvProblem,
    },

    /// `Dataset::with_image` was given a shape whose size is not the feature count.
    #[error("an image of {height}×{width} pixels does not fit rows of {features} features")]
    ImageShape {
        height: usize,
        width: usize,
        features: usize,
    },

    /// A row index past the end of a data set.
    #[error("row {row} is out of range: the data set has {rows} rows")]
    RowOutOfRange { row: usize, rows: usize },

    /// `Dataset::subset` was asked for no rows (a data set is never empty).
    #[error("a subset needs at least one row")]
    EmptySubset,

    /// A held-out fraction outside `(0, 1)`.
    #[error("the held-out fraction must lie strictly between 0 and 1, got {held_out}")]
    SplitFraction { held_out: f64 },

    /// A split that would leave one side empty.
    #[error(
        "holding out {held_out} of {rows} rows gives {held} held-out rows; both sides need \
         at least one"
    )]
    SplitEmpty {
        held_out: f64,
        rows: usize,
        held: usize,
    },

    /// A standardizer applied to data with a different number of features.
    #[error("the standardizer was fitted on {fitted} features, the data has {features} features")]
    StandardizerFeatures { fitted: usize, features: usize },
}
