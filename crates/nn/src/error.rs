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

    /// A size, setting or input a layer or model cannot take (a dropout probability out of
    /// `[0, 1)`, a context longer than the block), naming what (`what`), the layer, and the
    /// problem as a value a caller can match on.
    #[error("{}{what}", at_layer(.layer))]
    Invalid {
        what: &'static str,
        layer: String,
        #[source]
        problem: ValueProblem,
    },

    /// A recorded program that cannot be written as `torchlean.ir.v1`.
    #[error("cannot export to torchlean.ir.v1")]
    Export {
        #[source]
        problem: ExportProblem,
    },

    /// A `torchlean.ir.v1` graph and payload that cannot run as a program
    /// ([`crate::IrProgram`]).
    #[error("cannot run the torchlean.ir.v1 graph")]
    Program {
        #[source]
        problem: ProgramProblem,
    },

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
        "{}loss `{loss}` on output {output} and target {target}",
        at_layer(.layer)
    )]
    Loss {
        loss: &'static str,
        layer: String,
        output: Shape,
        target: Shape,
        #[source]
        problem: crate::loss::LossProblem,
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

/// Why a recorded program cannot be written as `torchlean.ir.v1` ([`NnError::Export`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExportProblem {
    #[error("a torchlean.ir.v1 graph has at least one input, the program has none")]
    NoInput,
    /// A payload operand (a weight) that the program computes: `index` is the op's position.
    #[error("op {index} (`{op}`): its `{operand}` is computed, but torchlean.ir.v1 takes it from the payload (a parameter or constant)")]
    ComputedPayload {
        index: usize,
        op: &'static str,
        operand: &'static str,
    },
    /// A random op whose key is not the node id the graph would give it.
    #[error("op {index} (`{op}`) has key {key}, but torchlean.ir.v1 keys random kinds by their node id ({node})")]
    RandomKey {
        index: usize,
        op: &'static str,
        key: u64,
        node: usize,
    },
    #[error("the output is a parameter or constant, not computed")]
    OutputNotComputed,
}

/// Why a `torchlean.ir.v1` graph cannot run as a program ([`NnError::Program`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProgramProblem {
    #[error("the graph takes {expected} input(s), {given} given")]
    Inputs { expected: usize, given: usize },
    #[error("node {node} has no payload tensor `{name}`")]
    MissingPayload { node: usize, name: &'static str },
}

/// What is wrong with a value given to a layer or a model ([`NnError::Invalid`]).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ValueProblem {
    /// A size that must be positive.
    #[error("{name} is 0")]
    ZeroSize { name: &'static str },
    /// A feature count that does not split into equal heads.
    #[error("n_embd {features} is not a multiple of n_head {heads}")]
    HeadSplit { features: usize, heads: usize },
    /// A probability outside `[0, 1)`: `name` says which.
    #[error("{name} {value} is not in [0, 1)")]
    Probability { name: &'static str, value: f64 },
    /// Token ids that do not make `batch` equal, non-empty rows.
    #[error("{ids} ids do not make {batch} equal non-empty rows")]
    Rows { ids: usize, batch: usize },
    /// A context longer than the model's block.
    #[error("a context of {tokens} tokens is longer than the block of {block}")]
    Context { tokens: usize, block: usize },
    /// Not one target per id.
    #[error("{targets} targets for {ids} ids")]
    Targets { targets: usize, ids: usize },
    /// Not one id per element of the batch's shape.
    #[error("{ids} ids for a batch of shape {batch:?}")]
    Ids { ids: usize, batch: Vec<usize> },
    /// An input of another shape than the layer takes (`expected` in the layer's words).
    #[error("expects {expected}, got {got}")]
    Input { expected: String, got: Shape },
    /// A linear layer's initial weight and bias that are not `[out, in]` and `[out]`.
    #[error("a weight of shape {weight} and a bias of shape {bias} (want [out, in] and [out])")]
    LinearShapes { weight: Shape, bias: Shape },
    /// A batch size an imported model was not prepared for.
    #[error("not prepared for batch size {batch} (ImportedNet::prepare)")]
    Unprepared { batch: usize },
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
