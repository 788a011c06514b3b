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

    /// An error from the shape rules of `torchlean_spec`.
    #[error(transparent)]
    Spec(#[from] SpecError),
}

impl CpuError {
    /// The message without the `op \`name\`:` prefix (which `RuntimeError::Op` adds).
    fn op_message(&self) -> Option<(&'static str, String)> {
        match self {
            CpuError::Shape { op, shapes, reason } => {
                Some((op, format!("{reason} (shapes {})", fmt_shapes(shapes))))
            }
            CpuError::MissingSaved { op, what } => Some((
                op,
                format!("the VJP needs the saved {what}, which was not provided"),
            )),
            CpuError::Gemm { op, reason } => Some((op, reason.clone())),
            _ => None,
        }
    }
}

impl From<CpuError> for RuntimeError {
    fn from(e: CpuError) -> Self {
        if let Some((op, message)) = e.op_message() {
            return RuntimeError::Op {
                op,
                node: None,
                message,
            };
        }
        match e {
            CpuError::Spec(s) => RuntimeError::from(s),
            other => RuntimeError::Invalid(other.to_string()),
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
    fn op_errors_become_runtime_op_errors_without_a_doubled_prefix() {
        let e = CpuError::Shape {
            op: "add",
            shapes: vec![Shape::from([2]), Shape::from([3])],
            reason: "operands differ".into(),
        };
        assert_eq!(e.to_string(), "op `add`: operands differ (shapes [2], [3])");
        let r = RuntimeError::from(e);
        assert_eq!(r.to_string(), "op `add`: operands differ (shapes [2], [3])");
        assert!(matches!(r, RuntimeError::Op { op: "add", .. }));
    }

    #[test]
    fn data_length_is_an_invalid_value() {
        let e = CpuError::DataLength {
            what: "from_vec",
            shape: Shape::from([2, 2]),
            expected: 4,
            got: 3,
        };
        assert!(matches!(RuntimeError::from(e), RuntimeError::Invalid(_)));
    }
}
