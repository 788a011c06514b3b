//! The CPU engine's error type. Every error names the op (or constructor) and the shapes
//! involved; it converts into `torchlean_runtime::RuntimeError` for the kernel trait.

use thiserror::Error;
use torchlean_runtime::RuntimeError;
use torchlean_spec::{Shape, SpecError};

#[derive(Debug, Clone, PartialEq, Error)]
pub enum CpuError {
    /// A flat buffer does not have as many elements as the shape declares.
    #[error("{what}: shape {shape} needs {expected} elements but {got} were given")]
    DataLength {
        what: &'static str,
        shape: Shape,
        expected: usize,
        got: usize,
    },

    /// Operands (or saved values, or a cotangent) whose shapes the op does not accept.
    #[error("op `{op}`: {reason} (shapes {})", fmt_shapes(.shapes))]
    Shape {
        op: &'static str,
        shapes: Vec<Shape>,
        reason: String,
    },

    /// A VJP needs a value its op did not save (the caller built a wrong `Saved`).
    #[error("op `{op}`: the VJP needs the saved {what}, which was not provided")]
    MissingSaved { op: &'static str, what: String },

    /// A matrix product whose operands do not fit their declared strides (an engine bug if it
    /// ever shows: shapes are validated before any product).
    #[error("op `{op}`: {reason}")]
    Gemm { op: &'static str, reason: String },

    /// A kernel's work buffer shorter than its geometry reads (an engine bug if it ever shows:
    /// the buffers are sized from the same geometry).
    #[error("op `{op}`: the {what} holds {got} elements but the kernel reads {needed}")]
    Workspace {
        op: &'static str,
        what: &'static str,
        needed: usize,
        got: usize,
    },

    /// An error from the shape rules of `torchlean_spec`.
    #[error(transparent)]
    Spec(#[from] SpecError),
}

impl From<CpuError> for RuntimeError {
    /// Shape-rule errors stay `RuntimeError::Spec` (structured, as from every engine); the CPU
    /// engine's own errors become `RuntimeError::Engine` with the `CpuError` as the source.
    fn from(e: CpuError) -> Self {
        match e {
            CpuError::Spec(s) => RuntimeError::from(s),
            other => RuntimeError::Engine {
                engine: "cpu",
                node: None,
                source: Box::new(other),
            },
        }
    }
}

fn fmt_shapes(shapes: &[Shape]) -> String {
    let parts: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_keep_their_structure_as_a_source() {
        let e = CpuError::Shape {
            op: "add",
            shapes: vec![Shape::from([2]), Shape::from([3])],
            reason: "operands differ".into(),
        };
        assert_eq!(e.to_string(), "op `add`: operands differ (shapes [2], [3])");
        let r = RuntimeError::from(e.clone()).at_node(4);
        assert_eq!(
            r.to_string(),
            "node 4: cpu engine: op `add`: operands differ (shapes [2], [3])"
        );
        let source = std::error::Error::source(&r).expect("a source");
        assert_eq!(source.downcast_ref::<CpuError>(), Some(&e));
    }

    #[test]
    fn shape_rule_errors_stay_spec_errors() {
        let e = CpuError::Spec(SpecError::Arity {
            op: "matmul",
            expected: "2".into(),
            got: 1,
        });
        assert!(matches!(RuntimeError::from(e), RuntimeError::Spec { .. }));
    }
}
