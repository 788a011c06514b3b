//! The `nn` crate's error type: every variant names the op (or what was asked) and the layer
//! (the scope path, PyTorch's parameter prefix) where the user's model made the call.

use thiserror::Error;
use torchlean_compiled::CompiledError;
use torchlean_ir::IrError;
use torchlean_runtime::RuntimeError;
use torchlean_spec::{OverBudget, Shape, SpecError};

#[derive(Debug, Error)]
pub enum NnError {
    /// An op's shape rule rejected its operands at the call site.
    #[error("{}op `{op}` on shapes {}: {source}", at_layer(.layer), fmt_shapes(.shapes))]
    Shape {
        op: &'static str,
        layer: String,
        shapes: Vec<Shape>,
        #[source]
        source: SpecError,
    },

    /// A value made by another session or recorder (or one reset since).
    #[error("{}op `{op}`: operand {operand} belongs to another session", at_layer(.layer))]
    ForeignValue {
        op: &'static str,
        layer: String,
        operand: usize,
    },

    /// A parameter asked for with a shape other than the one it has.
    #[error("parameter `{name}` has shape {have}, the model asks for {want}")]
    ParamShape {
        name: String,
        have: Shape,
        want: Shape,
    },

    /// A backward seed whose shape is not the output's.
    #[error("the seed has shape {got}, the output has shape {want}")]
    SeedShape { want: Shape, got: Shape },

    /// `backward` without a seed from an output of more than one element (PyTorch: "grad can
    /// be implicitly created only for scalar outputs").
    #[error(
        "backward from an output of shape {shape} ({numel} elements) needs a seed: \
         reduce it to one element (a loss), or call backward_with_seed with a cotangent of \
         its shape"
    )]
    NonScalarBackward { shape: Shape, numel: usize },

    /// A parameter name that the session does not hold.
    #[error("no parameter `{name}`")]
    NoSuchParam { name: String },

    /// A value a layer cannot take (an embedding id out of range, a dropout probability out of
    /// `[0, 1)`), naming the layer and what was given.
    #[error("{}{what}: {reason}", at_layer(.layer))]
    Invalid {
        what: &'static str,
        layer: String,
        reason: String,
    },

    /// A recorded program that cannot be written as `torchlean.ir.v1`.
    #[error("cannot export to torchlean.ir.v1: {reason}")]
    Export { reason: String },

    /// Writing a file failed (nothing was left half-written).
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An engine or sweep error.
    #[error("{}{source}", at_layer(.layer))]
    Runtime {
        layer: String,
        #[source]
        source: RuntimeError,
    },

    /// The eager session's values, gradients and workspaces would exceed the memory budget
    /// with tape node `node` (`op`: an op, or the leaf kind); refused before the node's value
    /// was made (the compiled path's `CompiledError::OverBudget`, in tape terms).
    #[error("{}tape node {node} ({op}): output {shape} {source}", at_layer(.layer))]
    OverBudget {
        node: usize,
        op: &'static str,
        layer: String,
        shape: Shape,
        #[source]
        source: OverBudget,
    },

    /// Building, compiling or differentiating the recorded graph failed.
    #[error(transparent)]
    Compiled(#[from] CompiledError),

    /// The exported graph failed its own checks.
    #[error(transparent)]
    Ir(#[from] IrError),

    /// A tensor that is not a valid value (bad data length, a non-finite value where the exact
    /// scalar is asked for).
    #[error(transparent)]
    Spec(#[from] SpecError),

    // --- loss ---
    /// A loss given what it cannot take (a target of the wrong kind or shape, a class label out
    /// of range, a label smoothing or a soft target outside `[0, 1]`, a mean over no elements),
    /// naming the loss (its CLI name), the layer and the shapes of the output and the target.
    #[error(
        "{}loss `{loss}` on output {output} and target {target}: {reason}",
        at_layer(.layer)
    )]
    Loss {
        loss: &'static str,
        layer: String,
        output: Shape,
        target: Shape,
        reason: String,
    },

    // --- state_dict ---
    /// A `state_dict` file that cannot be read.
    #[error("cannot read state_dict {}: {source}", .path.display())]
    StateDictRead {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A `state_dict` file that is not safetensors (or is corrupt).
    #[error("state_dict {}: not a safetensors file: {source}", .path.display())]
    StateDictFormat {
        path: std::path::PathBuf,
        #[source]
        source: torchlean_ir::files::SafeTensorError,
    },

    /// A `state_dict` tensor of a dtype other than F32 and F64.
    #[error("state_dict {}: tensor `{name}` is {dtype}, expected F32 or F64", .path.display())]
    StateDictDtype {
        path: std::path::PathBuf,
        name: String,
        dtype: String,
    },

    /// A `state_dict` whose names or shapes are not the model's: every missing, unexpected
    /// and mis-shaped name at once (`strict = false` refuses only the mis-shaped ones), like
    /// PyTorch's `load_state_dict`. Nothing was loaded.
    #[error(
        "state_dict{}: its tensors do not match the model's parameters and buffers:{}",
        .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default(),
        .report.lines()
    )]
    StateDictNames {
        path: Option<std::path::PathBuf>,
        report: crate::state::NameReport,
    },

    /// A loss name that is not one of `torchlean_nn::Loss::NAMES`.
    #[error("unknown loss `{name}` (expected one of {})", crate::loss::Loss::NAMES.join(", "))]
    UnknownLoss { name: String },
}

impl From<RuntimeError> for NnError {
    fn from(source: RuntimeError) -> Self {
        NnError::Runtime {
            layer: String::new(),
            source,
        }
    }
}

fn at_layer(layer: &str) -> String {
    if layer.is_empty() {
        String::new()
    } else {
        format!("layer `{layer}`: ")
    }
}

fn fmt_shapes(shapes: &[Shape]) -> String {
    let parts: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
    parts.join(", ")
}

pub type Result<T, E = NnError> = std::result::Result<T, E>;
