//! The one error type of the `equiv` crate.
//!
//! Errors of the crates under test are kept whole (as `#[source]`), so a caller can walk the
//! chain down to the `IrError`, `RuntimeError`, … that started it; the checker's own findings
//! (a value, shape or length mismatch, a finite-difference disagreement) carry the claim's
//! comparison, the position and the shapes or numbers involved. A message is only formatted
//! where it is shown: the report.
//!
//! The wrapping variants display their source's message (the report prints one line per
//! failure, and that line is the inner error's), so a chain printer that appends every source
//! repeats it; `std::error::Error::source` is there for code, not for printing.

use std::path::PathBuf;
use thiserror::Error;
use torchlean_compiled::CompiledError;
use torchlean_ir::IrError;
use torchlean_runtime::RuntimeError;
use torchlean_spec::{Shape, SpecError};

/// Everything that can go wrong while checking, or that a check can find.
#[derive(Debug, Error)]
pub enum EquivError {
    /// A sharded check's message from `rank` could not be read back (`crate::shard`).
    #[error("the sharded check's observations from rank {rank} are malformed: {problem}")]
    Shard { rank: usize, problem: String },

    /// A collective of a sharded check failed.
    #[error(transparent)]
    Distributed(#[from] torchlean_distributed::DistributedError),

    /// An error of the reference semantics (building a tensor, a shape rule).
    #[error("{0}")]
    Spec(#[from] SpecError),

    /// An IR error (the IR denotation failed at a node, a malformed graph).
    #[error("{0}")]
    Ir(#[from] IrError),

    /// An engine, tape or sweep error.
    #[error("{0}")]
    Runtime(#[from] RuntimeError),

    /// An error of the compiled layer (graph building, evaluation, the saved passes).
    #[error("{0}")]
    Compiled(#[from] CompiledError),

    /// Running the graph as a program (the eager session or the recorder) failed: the `nn`
    /// error with its causes (a report shows this text, not the chain).
    #[error("{}", torchlean_spec::display_chain(.0))]
    Nn(#[from] torchlean_nn::NnError),

    /// Lowering the generated IR graph failed.
    #[error("lowering failed: {0}")]
    Lowering(#[source] CompiledError),

    /// The lowered graph's inputs could not be built from the case's input and payload.
    #[error("inputs: {0}")]
    Inputs(#[source] CompiledError),

    /// Two lists of values compared by a claim differ in length.
    #[error("{what}: {got} values, expected {expected}")]
    Length {
        what: &'static str,
        expected: usize,
        got: usize,
    },

    /// A value compared by a claim has the wrong shape.
    #[error("{what}: value {index} has shape {got}, expected {expected}")]
    ShapeMismatch {
        what: &'static str,
        index: usize,
        expected: Shape,
        got: Shape,
    },

    /// Values compared by a claim differ (beyond the claim's mode); `index` is the first value
    /// that does.
    #[error(
        "{what}: max abs {max_abs:.3e}, max rel {max_rel:.3e} (first difference in value {index})"
    )]
    Mismatch {
        what: &'static str,
        index: usize,
        max_abs: f64,
        max_rel: f64,
    },

    /// An engine disagrees with the reference engine on one node (the engine suite's findings).
    #[error("{node} ({op}): {}", .failures.join("; "))]
    EngineVsReference {
        engine: &'static str,
        /// The node, as `node %k` (context position).
        node: String,
        op: &'static str,
        failures: Vec<String>,
    },

    /// A VJP disagrees with central finite differences of its op's forward, on one node of the
    /// lowered graph.
    #[error("{node} ({op}): operand {operand} element {element}: finite difference {finite_difference:.6e}, VJP {vjp:.6e}")]
    FiniteDifference {
        /// The node, as `node %k` (context position).
        node: String,
        op: &'static str,
        operand: usize,
        element: usize,
        finite_difference: f64,
        vjp: f64,
    },

    /// Running one node's op on an engine failed (finite differences).
    #[error("{node} ({op}): {source}")]
    Node {
        /// The node, as `node %k` (context position).
        node: String,
        op: &'static str,
        #[source]
        source: RuntimeError,
    },

    /// A path's gradient on a repeated-parent case differs from the written-out local sum.
    #[error("{case}: {path} gave {got:?}, the local-sum rule {want:?}")]
    LocalSum {
        case: &'static str,
        path: &'static str,
        got: Vec<f64>,
        want: Vec<f64>,
    },

    /// A graph leaving an attribute out does not evaluate as the one with SPEC's literal.
    #[error("`{kind}` without `{attr}` gave output {omitted:?}, with SPEC's default {literal} written {written:?}")]
    SpecDefault {
        kind: &'static str,
        attr: &'static str,
        literal: String,
        omitted: Vec<f64>,
        written: Vec<f64>,
    },

    /// The saved graph has no values to extend with opaque nodes.
    #[error("empty graph")]
    EmptyGraph,

    /// The constructed singular case did not behave as the claim says: the total sweep should
    /// give `3` in `x`, the reachable-only sweep `NaN`.
    #[error("at the singular point, backward_dense_all gave {dense_all} in x (expected 3) and backward_dense_from gave {dense_from} (expected NaN)")]
    SingularPoint { dense_all: f64, dense_from: f64 },

    /// A counterexample could not be serialised.
    #[error("could not serialise counterexample `{}`: {source}", .path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// A counterexample (or its directory) could not be written or read.
    #[error("could not {action} `{}`: {source}", .path.display())]
    Io {
        /// What was being done, as a verb phrase (`write counterexample`, `create the
        /// counterexample directory`).
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A counterexample file is not a `torchlean.case.v1` case.
    #[error("`{}` is not a case file: {source}", .path.display())]
    CaseFile {
        path: PathBuf,
        #[source]
        source: IrError,
    },

    /// A counterexample file's `checker` member (what its failure depended on) is missing or
    /// malformed: it cannot be replayed.
    #[error("`{}`: `{field}` {problem} (a counterexample written by `cargo xtask check-equivalence` has it)", .path.display())]
    Provenance {
        path: PathBuf,
        /// The member, as `checker.claim`.
        field: String,
        /// What is wrong with it (`is missing`, `is "x", not a claim id`).
        problem: String,
    },

    /// A replay asked for an engine this build cannot run (no CUDA device, an unknown label).
    #[error("engine `{engine}` is not available: {why}")]
    EngineUnavailable { engine: String, why: String },
}

impl EquivError {
    /// An I/O error while doing `action` (a verb phrase) on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EquivError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// `Result` with [`EquivError`].
pub type Result<T, E = EquivError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn an_nn_error_shows_its_cause_in_a_report() {
        // a report prints the error's text alone: the cause must be in it, once
        let e = EquivError::from(torchlean_nn::NnError::Invalid {
            what: "GPT input",
            layer: String::new(),
            problem: torchlean_nn::ValueProblem::Context {
                tokens: 7,
                block: 6,
            },
        });
        assert_eq!(
            e.to_string(),
            "GPT input: a context of 7 tokens is longer than the block of 6"
        );
    }

    #[test]
    fn wrapped_errors_keep_their_source_chain() {
        // runtime error → compiled error → equiv error: every link is reachable and typed
        let runtime = RuntimeError::NoSuchNode { id: 7, size: 3 };
        let text = runtime.to_string();
        let e = EquivError::from(CompiledError::Runtime(runtime));
        assert_eq!(
            e.to_string(),
            text,
            "the wrapper displays the inner message"
        );
        let source = e.source().expect("a wrapped error has a source");
        let compiled = source
            .downcast_ref::<CompiledError>()
            .expect("the source is the CompiledError itself");
        assert!(matches!(
            compiled,
            CompiledError::Runtime(RuntimeError::NoSuchNode { id: 7, size: 3 })
        ));

        let e = EquivError::from(SpecError::DivisionByZero { context: "test" });
        assert!(e
            .source()
            .and_then(|s| s.downcast_ref::<SpecError>())
            .is_some());

        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = EquivError::io("write counterexample", "/nowhere/x.json", io);
        assert_eq!(
            e.to_string(),
            "could not write counterexample `/nowhere/x.json`: denied"
        );
        let inner = e
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the io::Error is the source");
        assert_eq!(inner.kind(), std::io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn node_errors_name_the_node_and_keep_the_engine_error() {
        let e = EquivError::FiniteDifference {
            node: "node %3".into(),
            op: "mul_elem",
            operand: 0,
            element: 2,
            finite_difference: 1.0,
            vjp: -1.0,
        };
        assert_eq!(
            e.to_string(),
            "node %3 (mul_elem): operand 0 element 2: finite difference 1.000000e0, VJP -1.000000e0"
        );
        let e = EquivError::Node {
            node: "node %3".into(),
            op: "mul_elem",
            source: RuntimeError::Invalid("bad".into()),
        };
        assert_eq!(e.to_string(), "node %3 (mul_elem): invalid value: bad");
        assert!(matches!(
            e.source().and_then(|s| s.downcast_ref::<RuntimeError>()),
            Some(RuntimeError::Invalid(_))
        ));
    }
}
