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
}
