//! The one error type of the `spec` crate.

use crate::shape::Shape;
use thiserror::Error;

/// Everything that can go wrong in shape arithmetic, scalar arithmetic, the reference tensor and
/// the reference op semantics. Variants carry the op name and the shapes involved so that the
/// crates above can attach a node id and print one clear line.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SpecError {
    /// The product of the extents does not fit in `usize`.
    #[error("shape {dims:?} has more elements than fit in a machine word")]
    ShapeOverflow { dims: Vec<usize> },

    /// The element count fits in `usize` but exceeds [`crate::shape::MAX_ELEMENTS`].
    #[error("shape {shape} has {elements} elements, more than the limit of {limit}")]
    ShapeTooLarge {
        shape: Shape,
        elements: usize,
        limit: usize,
    },

    /// A flat data buffer does not have `shape.size()` elements.
    #[error("shape {shape} needs {expected} elements but {got} were given")]
    DataLength {
        shape: Shape,
        expected: usize,
        got: usize,
    },

    /// A multi-index is out of bounds or of the wrong rank.
    #[error("index {index:?} is out of bounds for shape {shape}")]
    Index { index: Vec<usize>, shape: Shape },

    /// A transcendental function was asked of a scalar type that cannot compute it exactly
    /// (the rational scalar). Never a silent 0.
    #[error("`{func}` is not available over the {scalar} scalar (it is not exact there)")]
    Transcendental {
        func: &'static str,
        scalar: &'static str,
    },

    /// Division by an exact zero (rational scalar; floats follow IEEE 754 instead).
    #[error("division by zero in {context}")]
    DivisionByZero { context: &'static str },

    /// A mean over zero elements on the exact scalar: PyTorch's value is `0/0 = NaN`, which a
    /// rational cannot hold (float engines give NaN).
    #[error(
        "op `{op}`: a mean over zero elements is NaN, which the {scalar} scalar cannot represent"
    )]
    EmptyMean {
        op: &'static str,
        scalar: &'static str,
    },

    /// A non-finite float where an exact value is needed (converting to the rational scalar),
    /// or where the caller asked for finite values.
    #[error("non-finite value {value} cannot be represented {context}")]
    NonFinite { value: f64, context: &'static str },

    /// An op received the wrong number of operands.
    #[error("op `{op}` takes {expected} operand(s), got {got}")]
    Arity {
        op: &'static str,
        expected: String,
        got: usize,
    },

    /// An op's operands have shapes the op does not accept.
    #[error("op `{op}`: {reason} (operand shapes {})", fmt_shapes(.shapes))]
    OpShape {
        op: &'static str,
        shapes: Vec<Shape>,
        reason: String,
    },

    /// An op attribute is invalid (a zero stride, an axis out of range, a bad permutation, …).
    #[error("op `{op}`: attribute `{attr}` {reason}")]
    OpAttr {
        op: &'static str,
        attr: &'static str,
        reason: String,
    },

    /// A data operand's values are not what the op accepts (`cross_entropy`'s class ids): bad
    /// input, naming the operand.
    #[error("op `{op}`: operand `{operand}` {reason}")]
    OpData {
        op: &'static str,
        operand: &'static str,
        reason: String,
    },

    /// An axis attribute at or past the operand's rank.
    #[error(
        "op `{op}`: attribute `{attr}` is {axis}, out of range for an operand of shape {shape}"
    )]
    AxisOutOfRange {
        op: &'static str,
        attr: &'static str,
        axis: usize,
        shape: Shape,
    },

    /// Operands that must have one shape do not (broadcasting is explicit in graphs:
    /// `broadcast_to`).
    #[error("op `{op}`: operands must have identical shapes (operand shapes {})", fmt_shapes(.shapes))]
    ShapeMismatch {
        op: &'static str,
        shapes: Vec<Shape>,
    },

    /// An element of an operand of integral ids (`cross_entropy`'s class ids) is not one of
    /// `0..bound`: `position` is its row-major index, `what` names the ids.
    #[error("op `{op}`: operand `{operand}` element {position} is {value}, {}", id_problem(*.problem, .what, *.bound))]
    BadId {
        op: &'static str,
        operand: &'static str,
        what: &'static str,
        position: usize,
        value: f64,
        bound: usize,
        problem: IdProblem,
    },

    /// A value outside the op's domain where the semantics says evaluation fails
    /// (raw `log` of a non-positive value).
    #[error("op `{op}`: {reason}")]
    Domain { op: &'static str, reason: String },

    /// A VJP was asked for a value its op does not save (an engine or caller bug).
    #[error("op `{op}`: the VJP needs the saved {what}, which was not provided")]
    MissingSaved { op: &'static str, what: String },

    /// A byte count (`--max-memory`) that is not a whole number of bytes with a known suffix.
    #[error("byte count `{text}` {problem}")]
    BadByteCount {
        text: String,
        problem: ByteCountProblem,
    },

    /// A JSON value that should list non-negative integers (a shape, parent ids) does not:
    /// `index` is the offending element's, `None` when the value is no array at all; `got` is
    /// the value as JSON text.
    #[error("{}", not_extents(*.index, .got))]
    NotExtents { index: Option<usize>, got: String },

    /// A placeholder of an op's PyTorch template names nothing the op has (a row's mistake).
    #[error("op `{op}`: its PyTorch template's placeholder `{placeholder}` names no operand, attribute or field")]
    TorchTemplate {
        op: &'static str,
        placeholder: String,
    },

    /// Malformed tensor JSON (`{"shape": [...], "data": [...]}`).
    #[error("tensor JSON: {problem}")]
    TensorJson { problem: TensorJsonProblem },
}

impl SpecError {
    /// The attribute or operand the error names, if any (for diagnostics' `field`).
    pub fn field(&self) -> Option<&'static str> {
        match self {
            SpecError::OpAttr { attr, .. } => Some(attr),
            SpecError::OpData { operand, .. } | SpecError::BadId { operand, .. } => Some(operand),
            SpecError::AxisOutOfRange { attr, .. } => Some(attr),
            _ => None,
        }
    }
}

/// Why an id is not one ([`SpecError::BadId`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdProblem {
    /// Not a whole number (or not finite).
    NotIntegral,
    /// A whole number below 0 or at or past the bound.
    OutOfRange,
}

fn id_problem(problem: IdProblem, what: &str, bound: usize) -> String {
    match problem {
        IdProblem::NotIntegral => format!("not an integral {what} in [0, {bound})"),
        IdProblem::OutOfRange => format!("outside [0, {bound})"),
    }
}

/// What is wrong with tensor JSON ([`SpecError::TensorJson`]), naming the member at fault.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TensorJsonProblem {
    #[error("expected an object")]
    NotAnObject,
    #[error("missing member `shape`")]
    MissingShape,
    /// `shape` is no list of extents (the [`SpecError::NotExtents`] it gave).
    #[error("`shape`: {0}")]
    BadShape(Box<SpecError>),
    #[error("missing array member `data`")]
    MissingData,
    /// An element of `data` that is neither a number nor `"nan"`/`"inf"`/`"-inf"`; `got` is it
    /// as JSON text.
    #[error("`data[{index}]` is {got}, expected a number or \"nan\"/\"inf\"/\"-inf\"")]
    NotANumber { index: usize, got: String },
}

/// What is wrong with a byte count ([`SpecError::BadByteCount`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ByteCountProblem {
    #[error("needs a whole number of bytes, e.g. 512M or 4G")]
    NoNumber,
    #[error("does not fit in 64 bits")]
    TooLarge,
    #[error("has an unknown suffix (use K, M, G or T)")]
    UnknownSuffix,
}

/// `Result` with [`SpecError`].
pub type Result<T, E = SpecError> = std::result::Result<T, E>;

fn not_extents(index: Option<usize>, got: &str) -> String {
    match index {
        None => format!("expected an array of non-negative integers, got {got}"),
        Some(i) => format!("element {i} is {got}, expected a non-negative integer"),
    }
}

fn fmt_shapes(shapes: &[Shape]) -> String {
    let parts: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
    parts.join(", ")
}
/// An error and its sources on one line, `what: why: deeper why`, as the command line prints
/// it. A source whose text the message already ends with is not repeated (wrappers that show
/// their source's text, and `transparent` ones).
pub fn display_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.ends_with(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}
