//! The integer codes by which the elementwise kernels name their function, written once: a row
//! per function here, generated into `elementwise.cu` ([`defines`]) as `#define
//! TL_UNARY_<NAME> <code>` lines and the lists `TL_UNARY_CASES(CASE)` / `TL_BINARY_CASES(CASE)`.
//! A function's code is its row's position; a row stands for its function whatever the values
//! of its number attributes (the kernels take them as arguments).

use std::fmt::Write as _;
use torchlean_spec::{BinaryOp, GeluApprox, Op, UnaryOp};

/// Every unary function and the name of its code in the kernel source.
pub const UNARY: &[(UnaryOp, &str)] = &[
    (UnaryOp::Abs, "ABS"),
    (UnaryOp::Sqrt, "SQRT"),
    (UnaryOp::Inv, "INV"),
    (UnaryOp::Relu, "RELU"),
    (UnaryOp::Tanh, "TANH"),
    (UnaryOp::Sigmoid, "SIGMOID"),
    (UnaryOp::Exp, "EXP"),
    (UnaryOp::Log, "LOG"),
    (UnaryOp::Sin, "SIN"),
    (UnaryOp::Cos, "COS"),
    (UnaryOp::Neg, "NEG"),
    (UnaryOp::Softplus, "SOFTPLUS"),
    (UnaryOp::Silu, "SILU"),
    (UnaryOp::Gelu(GeluApprox::None), "GELU_ERF"),
    (UnaryOp::Gelu(GeluApprox::Tanh), "GELU_TANH"),
    (
        UnaryOp::LeakyRelu {
            negative_slope: 0.0,
        },
        "LEAKY_RELU",
    ),
    (UnaryOp::Elu { alpha: 0.0 }, "ELU"),
    (UnaryOp::Erf, "ERF"),
    (UnaryOp::Sign, "SIGN"),
];

/// Every binary function and the name of its code in the kernel source.
pub const BINARY: &[(BinaryOp, &str)] = &[
    (BinaryOp::Add, "ADD"),
    (BinaryOp::Sub, "SUB"),
    (BinaryOp::Mul, "MUL"),
    (BinaryOp::Div, "DIV"),
    (BinaryOp::Max, "MAX"),
    (BinaryOp::Min, "MIN"),
];

/// The code of a function not in the table: the kernels write NaN for it (a test checks that
/// every function has a row).
const UNKNOWN: (i64, &str) = (-1, "UNKNOWN");

fn code_of<T>(table: &'static [(T, &'static str)], is: impl Fn(&T) -> bool) -> (i64, &'static str) {
    table
        .iter()
        .zip(0i64..)
        .find(|((row, _), _)| is(row))
        .map_or(UNKNOWN, |((_, name), code)| (code, name))
}

/// The function `op` computes, its number attributes aside (the kernel takes those as
/// arguments): a row stands for every value of them.
fn function_of(op: UnaryOp) -> Op {
    Op::Unary(op).map_reals(|_| 0.0)
}

/// `op`'s code and the name of its `#define` (`TL_UNARY_<name>`).
pub fn unary_code(op: UnaryOp) -> (i64, &'static str) {
    let f = function_of(op);
    code_of(UNARY, |row| function_of(*row) == f)
}

/// `op`'s code and the name of its `#define` (`TL_BINARY_<name>`).
pub fn binary_code(op: BinaryOp) -> (i64, &'static str) {
    code_of(BINARY, |row| *row == op)
}

/// The generated head of `elementwise.cu`: each function's `#define` and each family's
/// `CASES` list.
pub fn defines() -> String {
    let mut s = String::from("// generated from kernels/codes.rs\n");
    let unary = UNARY.iter().map(|(_, name)| *name);
    let binary = BINARY.iter().map(|(_, name)| *name);
    let families: [(&str, Vec<&str>); 2] =
        [("UNARY", unary.collect()), ("BINARY", binary.collect())];
    for (family, names) in families {
        for (code, name) in names.iter().enumerate() {
            let _ = writeln!(s, "#define TL_{family}_{name} {code}");
        }
        let _ = write!(s, "#define TL_{family}_CASES(CASE)");
        for name in &names {
            let _ = write!(s, " CASE(TL_{family}_{name})");
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::ELEMENTWISE;

    /// Every function of `all` has exactly one row of `table` (found by `code`), and its code
    /// name appears in `want_cases(op)` `case TL_<family>_<name>:` labels of the source.
    fn check_family<T: Copy + PartialEq + std::fmt::Debug>(
        family: &str,
        table: &[(T, &str)],
        all: &[T],
        code: fn(T) -> (i64, &'static str),
        want_cases: fn(T) -> usize,
    ) {
        assert_eq!(table.len(), all.len(), "{family}: one row per function");
        let mut seen = std::collections::BTreeSet::new();
        for &op in all {
            let (code, name) = code(op);
            assert!(code >= 0, "{op:?} has no row in kernels/codes.rs");
            assert!(seen.insert(code), "{op:?}: one row each");
            let label = format!("case TL_{family}_{name}:");
            let cases = ELEMENTWISE.source.matches(&label).count();
            assert_eq!(cases, want_cases(op), "{op:?}: {label}");
        }
    }

    #[test]
    fn every_unary_function_has_one_row_and_a_forward_and_a_vjp_case() {
        // tl_unary_at and tl_unary_vjp_at
        check_family("UNARY", UNARY, &UnaryOp::ALL, unary_code, |_| 2);
    }

    #[test]
    fn every_binary_function_has_one_row_and_its_cases() {
        // tl_binary_at, and tl_ew_binary_vjp except for add and sub (no kernel of their own)
        check_family("BINARY", BINARY, &BinaryOp::ALL, binary_code, |op| {
            if matches!(op, BinaryOp::Add | BinaryOp::Sub) {
                1
            } else {
                2
            }
        });
    }

    #[test]
    fn the_generated_head_defines_each_code_and_lists_them() {
        let head = defines();
        assert!(head.contains("#define TL_UNARY_ABS 0\n"));
        assert!(head.contains("#define TL_UNARY_GELU_TANH 14\n"));
        assert!(head.contains("#define TL_BINARY_MIN 5\n"));
        assert!(head.contains(
            "#define TL_BINARY_CASES(CASE) CASE(TL_BINARY_ADD) CASE(TL_BINARY_SUB) \
             CASE(TL_BINARY_MUL) CASE(TL_BINARY_DIV) CASE(TL_BINARY_MAX) CASE(TL_BINARY_MIN)\n"
        ));
        assert!(ELEMENTWISE.full_source().contains(&head));
    }
}
