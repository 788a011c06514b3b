//! The runtime crate's error type. Every sweep is pure `Result`: nothing panics on a bad tape,
//! a bad seed or a failing VJP.

use thiserror::Error;
use torchlean_spec::{Shape, SpecError};

/// Large payloads (shapes, spec errors) are boxed: every `Result` on the per-op path carries
/// this type, and a small error keeps those results cheap to move.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// An id that is not on the tape.
    #[error("node {id} does not exist (the tape has {size} nodes)")]
    NoSuchNode { id: usize, size: usize },

    /// A VJP produced a contribution for a parent id that is not on the tape.
    #[error("node {node}{}: contribution to parent {parent}, which is not on the tape ({size} nodes)", name_suffix(.name))]
    BadParent {
        node: usize,
        name: Option<String>,
        parent: usize,
        size: usize,
    },

    /// A gradient (contribution, upstream or accumulator) has the wrong shape.
    #[error("node {node}{}: {what} has shape {got}, expected {expected}", name_suffix(.name))]
    ShapeMismatch {
        node: usize,
        name: Option<String>,
        what: &'static str,
        expected: Box<Shape>,
        got: Box<Shape>,
    },

    /// A sweep from several outputs was given none.
    #[error("a sweep needs at least one seeded output")]
    NoSeed,

    /// The seed of a sweep does not match the output's shape.
    #[error("the seed for node {node} has shape {got}, the node's value has shape {expected}")]
    SeedShape {
        node: usize,
        expected: Box<Shape>,
        got: Box<Shape>,
    },

    /// A total gradient array (`backward_dense_from`) with no entry for a node.
    #[error(
        "node {node}: the total gradient array has no entry for it (one per node is required)"
    )]
    EmptyTotalSlot { node: usize },

    /// A total gradient array of the wrong length.
    #[error("the gradient array has {got} entries, the tape has {expected} nodes")]
    GradArrayLength { expected: usize, got: usize },

    /// An engine's kernel failed; the engine's own error (with its op, shapes and cause) is the
    /// source.
    #[error("{}{engine} engine: {source}", node_prefix(.node))]
    Engine {
        engine: &'static str,
        node: Option<usize>,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A VJP returned a different number of cotangents than its op has operands.
    #[error("{}op `{op}`: the VJP returned {got} cotangents for {expected} operands", node_prefix(.node))]
    VjpArity {
        op: &'static str,
        node: Option<usize>,
        expected: usize,
        got: usize,
    },

    /// A value failed its own consistency check (`GradValue::check`).
    #[error("invalid value: {0}")]
    Invalid(String),

    /// Anomaly mode found the node where a NaN or an infinity originates.
    #[error("{0}")]
    Anomaly(Box<crate::anomaly::Anomaly>),

    /// An error from the reference semantics.
    #[error("{}{source}", node_prefix(.node))]
    Spec {
        node: Option<usize>,
        #[source]
        source: Box<SpecError>,
    },
}

impl RuntimeError {
    /// Attaches a node id to an op-level error that lacks one.
    pub fn at_node(self, id: usize) -> Self {
        match self {
            RuntimeError::Spec { node: None, source } => RuntimeError::Spec {
                node: Some(id),
                source,
            },
            RuntimeError::VjpArity {
                op,
                node: None,
                expected,
                got,
            } => RuntimeError::VjpArity {
                op,
                node: Some(id),
                expected,
                got,
            },
            RuntimeError::Engine {
                engine,
                node: None,
                source,
            } => RuntimeError::Engine {
                engine,
                node: Some(id),
                source,
            },
            other => other,
        }
    }
}

impl From<SpecError> for RuntimeError {
    fn from(source: SpecError) -> Self {
        RuntimeError::Spec {
            node: None,
            source: Box::new(source),
        }
    }
}

fn name_suffix(name: &Option<String>) -> String {
    name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
}

fn node_prefix(node: &Option<usize>) -> String {
    node.map(|n| format!("node {n}: ")).unwrap_or_default()
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
