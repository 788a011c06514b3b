//! The compiled crate's error type.

use thiserror::Error;
use torchlean_ir::IrError;
use torchlean_runtime::RuntimeError;
use torchlean_spec::{OverBudget, Shape, SpecError};

#[derive(Debug, Error)]
pub enum CompiledError {
    /// The IR graph or payload is not lowerable (every problem, with node ids).
    #[error(transparent)]
    Ir(#[from] IrError),

    /// An engine or sweep error.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),

    /// A node argument that does not point to an earlier context position.
    #[error("node %{position}: argument {arg} is %{target}, not an earlier position (context has {len})")]
    BadArgument {
        position: usize,
        arg: usize,
        target: usize,
        len: usize,
    },

    /// An op rejected its argument shapes while building the graph.
    #[error("node %{position} ({op}): {source}")]
    Shape {
        position: usize,
        op: &'static str,
        #[source]
        source: SpecError,
    },

    /// Inputs or seeds that do not match the graph's context.
    #[error("{what} has {got} entries, expected {expected}")]
    Length {
        what: &'static str,
        expected: usize,
        got: usize,
    },

    /// A value whose shape does not match its context position.
    #[error("{what} at %{position} has shape {got}, expected {expected}")]
    ValueShape {
        what: &'static str,
        position: usize,
        expected: Shape,
        got: Shape,
    },

    /// Lowering IR node `node` failed (its shapes passed `check_shapes`, so this is an
    /// invariant of the lowering; the cause is the source).
    #[error("IR node {node} ({kind}): {source}")]
    AtIrNode {
        node: usize,
        kind: &'static str,
        #[source]
        source: Box<CompiledError>,
    },

    /// A seed (the output's cotangent) whose shape is not the output's; `node` is the IR
    /// graph's output node, not a lowered position.
    #[error("the seed has shape {got}, but the output (node {node}) has shape {expected}")]
    SeedShape {
        node: usize,
        expected: Shape,
        got: Shape,
    },

    /// A graph with several outputs takes one seed per output (or none: ones for each).
    #[error(
        "the graph has {}, but {} given (one seed per output, in output order, or none for ones)",
        counted(*outputs, "output", "outputs"),
        counted(*seeds, "seed was", "seeds were")
    )]
    SeedCount { outputs: usize, seeds: usize },

    /// A graph takes one input tensor per graph input, in input order.
    #[error(
        "the graph takes {expected} input(s), but {got} were given (one per input, in input order)"
    )]
    InputCount { expected: usize, got: usize },

    /// A differentiation path that sweeps from one output was given a graph with several.
    #[error("the {path} path differentiates from one output; this graph has {outputs}")]
    SingleOutputPath { path: &'static str, outputs: usize },

    /// The graph's values, gradients and workspaces would exceed the memory budget; found at
    /// this node before anything was allocated.
    #[error("node %{position} ({op}): output {shape} {source}")]
    OverBudget {
        position: usize,
        op: &'static str,
        shape: Shape,
        #[source]
        source: OverBudget,
    },

    /// Anomaly mode found where a NaN or an infinity originates, stated in IR terms; the
    /// runtime's finding (tape ids) is the source when a tape or GraphData run found it.
    #[error("{at}")]
    Anomaly {
        at: Box<crate::ir_anomaly::IrAnomaly>,
        #[source]
        source: Option<Box<RuntimeError>>,
    },

    /// A position that is not in the context.
    #[error("position %{position} is not in the context ({len} positions)")]
    NoSuchPosition { position: usize, len: usize },
}

pub type Result<T, E = CompiledError> = std::result::Result<T, E>;

/// `n` and the noun in the number `n` takes: `1 output`, `2 outputs`, `0 outputs`.
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
