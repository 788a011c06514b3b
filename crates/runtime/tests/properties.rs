//! Laws of the sweeps on random tapes (proptest):
//! - `backward_dense_all` == `backward_dense_from` from the one-hot seed on zero-preserving
//!   tapes: exactly over the rationals; over f64 bit for bit except the sign of zero (see
//!   `same_up_to_signed_zero`);
//! - `backward_sparse` agrees bit for bit with `backward_dense` on every retained id.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use torchlean_runtime::*;
use torchlean_spec::{BinaryOp, Op, Rational, Scalar, Tensor, UnaryOp};

/// One step of a random tape: an op over earlier node indices (taken modulo the current size).
#[derive(Clone, Debug)]
enum Step {
    Leaf {
        values: Vec<i8>,
        requires_grad: bool,
    },
    Unary {
        op: usize,
        a: usize,
    },
    Binary {
        op: usize,
        a: usize,
        b: usize,
    },
    Scale {
        c: i8,
        a: usize,
    },
    Detach {
        a: usize,
    },
}

/// Zero-preserving, algebraic ops (exact over rationals, finite over f64).
const UNARY: [UnaryOp; 3] = [UnaryOp::Relu, UnaryOp::Abs, UnaryOp::Neg];
const BINARY: [BinaryOp; 5] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Max,
    BinaryOp::Min,
];
const WIDTH: usize = 3;

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (prop::collection::vec(-8i8..8, WIDTH), prop::bool::weighted(0.8))
            .prop_map(|(values, requires_grad)| Step::Leaf { values, requires_grad }),
        3 => (0..UNARY.len(), any::<usize>()).prop_map(|(op, a)| Step::Unary { op, a }),
        5 => (0..BINARY.len(), any::<usize>(), any::<usize>()).prop_map(|(op, a, b)| Step::Binary { op, a, b }),
        1 => (-4i8..4, any::<usize>()).prop_map(|(c, a)| Step::Scale { c, a }),
        1 => any::<usize>().prop_map(|a| Step::Detach { a }),
    ]
}

/// Builds the tape over scalar `A`; leaf values are quarters so float arithmetic stays exact
/// for short products and the rational run is meaningful.
fn build<A: Scalar>(steps: &[Step]) -> Tape<Tensor<A>> {
    let mut tape = Tape::empty();
    tape.leaf(
        Tensor::from_f64s([WIDTH], &[0.5, -1.25, 2.0]).unwrap(),
        true,
        Some("x".into()),
    );
    for s in steps {
        let n = tape.size();
        match s {
            Step::Leaf {
                values,
                requires_grad,
            } => {
                let v: Vec<f64> = values.iter().map(|&q| f64::from(q) / 4.0).collect();
                tape.leaf(
                    Tensor::from_f64s([WIDTH], &v).unwrap(),
                    *requires_grad,
                    None,
                );
            }
            Step::Unary { op, a } => {
                record(&mut tape, Op::Unary(UNARY[*op]), &[a % n], None).unwrap();
            }
            Step::Binary { op, a, b } => {
                record(&mut tape, Op::Binary(BINARY[*op]), &[a % n, b % n], None).unwrap();
            }
            Step::Scale { c, a } => {
                record(
                    &mut tape,
                    Op::Scale {
                        c: f64::from(*c) / 2.0,
                    },
                    &[a % n],
                    None,
                )
                .unwrap();
            }
            Step::Detach { a } => {
                record(&mut tape, Op::Detach, &[a % n], None).unwrap();
            }
        }
    }
    tape
}

fn seed<A: Scalar>(tape: &Tape<Tensor<A>>, out: usize) -> Tensor<A> {
    Tensor::from_f64s([WIDTH], &[1.0, -0.5, 0.25])
        .unwrap()
        .reshaped(tape.get_value(out).unwrap().shape().clone())
        .unwrap()
}

fn one_hot<A: Scalar>(tape: &Tape<Tensor<A>>, out: usize) -> Vec<Tensor<A>> {
    (0..tape.size())
        .map(|i| {
            if i == out {
                seed(tape, out)
            } else {
                tape.get_value(i).unwrap().zeros_like()
            }
        })
        .collect()
}

/// Bitwise equality except that `+0.0` and `-0.0` are identified. The two sweeps differ exactly
/// there: `backward_dense_all` stores a slot's first contribution `c` as is, while
/// `backward_dense_from` computes `0 + c`, and IEEE 754 gives `0 + (−0) = +0`.
fn same_up_to_signed_zero(a: &Tensor<f64>, b: &Tensor<f64>) -> bool {
    a.shape() == b.shape()
        && a.data()
            .iter()
            .zip(b.data())
            .all(|(x, y)| x.to_bits() == y.to_bits() || (*x == 0.0 && *y == 0.0))
}

fn cases() -> u32 {
    std::env::var("TORCHLEAN_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn dense_all_equals_dense_from_one_hot_exactly_over_rationals(steps in prop::collection::vec(step(), 1..24), out_pick in any::<usize>()) {
        let tape = build::<Rational>(&steps);
        let out = out_pick % tape.size();
        let all = tape.backward_dense_all(out, seed(&tape, out)).unwrap();
        let from = tape.backward_dense_from(one_hot(&tape, out)).unwrap();
        prop_assert_eq!(all, from);
    }

    #[test]
    fn dense_all_equals_dense_from_one_hot_bitwise_over_f64(steps in prop::collection::vec(step(), 1..24), out_pick in any::<usize>()) {
        let tape = build::<f64>(&steps);
        let out = out_pick % tape.size();
        let all = tape.backward_dense_all(out, seed(&tape, out)).unwrap();
        let from = tape.backward_dense_from(one_hot(&tape, out)).unwrap();
        for (i, (a, b)) in all.iter().zip(&from).enumerate() {
            prop_assert!(same_up_to_signed_zero(a, b), "node {}: {:?} vs {:?}", i, a, b);
        }
    }

    #[test]
    fn sparse_agrees_bitwise_with_dense_on_retained_ids(
        steps in prop::collection::vec(step(), 1..24),
        out_pick in any::<usize>(),
        retain_mask in any::<u64>(),
    ) {
        let tape = build::<f64>(&steps);
        let out = out_pick % tape.size();
        let dense = tape.backward_dense(out, seed(&tape, out)).unwrap();
        let retain = |id: usize| (retain_mask >> (id % 64)) & 1 == 1;
        let sparse = tape.backward_sparse(out, seed(&tape, out), retain).unwrap();
        for id in 0..tape.size() {
            match (retain(id), sparse.get(id), &dense[id]) {
                (true, Some(s), Some(d)) => prop_assert!(s.bit_eq(d), "node {}", id),
                (true, None, None) => {}
                (false, None, _) => {}
                (r, s, d) => prop_assert!(false, "node {}: retain {} sparse {:?} dense {:?}", id, r, s, d),
            }
        }
    }
}
