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

    /// A matrix product (`m × k` by `k × n`) whose destination, starting row or operand does
    /// not fit its buffer and strides (an engine bug if it ever shows: shapes are validated
    /// before any product).
    #[error("op `{op}`: a {m}×{k} by {k}×{n} product: {misfit}")]
    Gemm {
        op: &'static str,
        m: usize,
        n: usize,
        k: usize,
        misfit: GemmMisfit,
    },

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

/// What of a matrix product does not fit ([`CpuError::Gemm`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GemmMisfit {
    /// The `m × n` destination, its rows `row_stride` apart, in a buffer of `len` elements
    /// (or a row stride shorter than a row, or beyond `isize`).
    #[error("its destination of {len} elements with rows {row_stride} apart is too short")]
    Destination { len: usize, row_stride: usize },
    /// The row every destination row starts from (a bias) has `len` elements, not `n`.
    #[error("its starting row has {len} elements")]
    StartRow { len: usize },
    /// An operand, `rows × cols` at strides `(rs, cs)`, reaches past its `len` elements (or a
    /// stride beyond `isize`).
    #[error("its {name} ({rows}×{cols}, strides {rs} and {cs}) reaches past its {len} elements")]
    Operand {
        name: &'static str,
        rows: usize,
        cols: usize,
        rs: usize,
        cs: usize,
        len: usize,
    },
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
