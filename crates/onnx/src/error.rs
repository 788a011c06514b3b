//! `OnnxError` and `Problem`: what an import reports — every problem of the model at once.

use std::fmt;
use torchlean_ir::IrError;
use torchlean_spec::SpecError;

/// What kind of problem a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// An op type the importer does not map.
    UnsupportedOp,
    /// An attribute value (or an operand form) the mapping does not support.
    UnsupportedAttribute,
    /// A dimension that is not a fixed positive number (`dim_param`, unknown, ≤ 0).
    DynamicDim,
    /// A tensor whose data disagrees with its dims or data type.
    BadTensor,
    /// Operand shapes an op's shape rule refuses, or an output shape that disagrees with the
    /// one the model declares.
    Shape,
    /// An operand an earlier problem left unavailable: the node's own attributes are still
    /// checked, this follow-on is never reported.
    Upstream,
    /// Something about the model as a whole (inputs, outputs, references to unknown values).
    Model,
    /// A weight operand (it becomes an IR payload tensor) that is no initializer used by this
    /// node only: computed, shared, or a graph input (which `--bind NAME=FILE` makes a
    /// constant). `field` names the operand (`input[1]`).
    NotAWeight,
    /// An integer graph input in an operand the import must know (a shape, axes, a count, an
    /// exponent): `--bind NAME=FILE` makes it a constant. `field` names the operand.
    MustBeBound,
}

/// One problem, naming the ONNX node (or value) and op type it is about.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub kind: ProblemKind,
    /// The ONNX node's name (its first output when the node has no name), or the value's name
    /// for graph inputs, outputs and initializers.
    pub node: String,
    /// The node's op type; `input`, `output` or `initializer` for values.
    pub op_type: String,
    /// The attribute or operand the problem is in (empty when it is about the whole node).
    pub field: String,
    /// What is wrong, in the importer's words (empty where the cause says it all).
    pub message: String,
    /// The rule the model broke, where one of `spec`'s did (a shape rule, a tensor's size).
    pub cause: Option<SpecError>,
}

impl Problem {
    pub fn new(
        kind: ProblemKind,
        node: impl Into<String>,
        op_type: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Problem {
            kind,
            node: torchlean_ir::shorten(&node.into()).into_owned(),
            op_type: torchlean_ir::shorten(&op_type.into()).into_owned(),
            field: field.into(),
            message: message.into(),
            cause: None,
        }
    }

    /// The problem with the `spec` error that is its cause.
    pub fn because(mut self, cause: SpecError) -> Self {
        self.cause = Some(cause);
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node `{}` ({})", self.node, self.op_type)?;
        if !self.field.is_empty() {
            write!(f, ", field `{}`", self.field)?;
        }
        let sep = if self.message.is_empty() { "" } else { ": " };
        match &self.cause {
            Some(cause) => write!(f, ": {}{sep}{cause}", self.message),
            None => write!(f, ": {}", self.message),
        }
    }
}

impl std::error::Error for Problem {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_ref().map(|c| c as _)
    }
}

impl From<Problem> for Vec<Problem> {
    fn from(p: Problem) -> Self {
        vec![p]
    }
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The bytes are not a protobuf `ModelProto` (truncated, corrupt, not ONNX).
    #[error("not an ONNX model: {source}")]
    Decode {
        #[source]
        source: prost::DecodeError,
    },
    /// The bytes are not a protobuf `TensorProto` (an ONNX test's `input_0.pb`).
    #[error("not an ONNX tensor: {source}")]
    DecodeTensor {
        #[source]
        source: prost::DecodeError,
    },
    /// Every unsupported op, attribute value, dynamic dimension and bad tensor of the model.
    #[error("{} problem(s) in the ONNX model, first: {}", .0.len(), first(.0))]
    Problems(Vec<Problem>),
    /// Reading the model file failed.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing the graph or payload file failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Weights stay outside the graph in this dialect, and no payload file was named for them.
    #[error(
        "the weights of {nodes} node(s) stay outside the graph in the {dialect} dialect: name a file \
         for them (torchlean import --payload FILE), or write --dialect 2026-09, which holds \
         them inline"
    )]
    PayloadFileNeeded {
        dialect: torchlean_ir::Dialect,
        nodes: usize,
    },
    /// The imported graph or payload failed the IR's own checks or writing (a mapping the
    /// importer got wrong).
    #[error("the imported graph or payload does not pass the IR's checks: {source}")]
    Ir {
        #[source]
        source: IrError,
    },
}

fn first(problems: &[Problem]) -> String {
    problems.first().map(Problem::to_string).unwrap_or_default()
}

impl OnnxError {
    /// The problems, one per line of a report (a decode or IR error is one line).
    pub fn lines(&self) -> Vec<String> {
        match self {
            OnnxError::Problems(ps) => ps.iter().map(Problem::to_string).collect(),
            OnnxError::Ir { source } => match source {
                IrError::Invalid(ds) => ds.iter().map(|d| format!("imported graph: {d}")).collect(),
                other => vec![format!("imported graph: {other}")],
            },
            OnnxError::Decode { .. }
            | OnnxError::DecodeTensor { .. }
            | OnnxError::Read { .. }
            | OnnxError::Io { .. }
            | OnnxError::PayloadFileNeeded { .. } => {
                vec![self.to_string()]
            }
        }
    }
}

pub type Result<T> = std::result::Result<T, OnnxError>;
