//! Anomaly mode in the sweeps, on hand-built tapes: which node, which site, and that every
//! value is still released when a sweep stops.
#![allow(clippy::unwrap_used)]

use torchlean_runtime::*;
use torchlean_spec::{BinaryOp, Op, Tensor, UnaryOp};

fn t(data: &[f64]) -> Tensor<f64> {
    Tensor::new([data.len()], data.to_vec()).unwrap()
}

fn anomaly<T: std::fmt::Debug>(r: Result<T>) -> Anomaly {
    match r {
        Err(RuntimeError::Anomaly(a)) => *a,
        other => panic!("expected an anomaly, got {other:?}"),
    }
}

/// x (leaf) → y = relu(x), z = relu(x) → out = add(y, z), eager.
fn two_paths(x: &[f64]) -> (Tape<Tensor<f64>>, usize) {
    let mut tape = Tape::empty();
    let x = tape.leaf(t(x), true, Some("x".into()));
    let y = record(&mut tape, Op::Unary(UnaryOp::Relu), &[x], None).unwrap();
    let z = record(&mut tape, Op::Unary(UnaryOp::Relu), &[x], None).unwrap();
    let out = record(&mut tape, Op::Binary(BinaryOp::Add), &[y, z], None).unwrap();
    (tape, out)
}

#[test]
fn an_overflowing_sum_of_finite_contributions_is_reported_at_the_node_that_holds_it() {
    let (tape, out) = two_paths(&[1.0]);
    let a = anomaly(tape.backward_sparse_with(out, t(&[1e308]), |id| id == 0, AnomalyMode::Detect));
    assert_eq!(
        (a.node, a.kind, a.site.clone()),
        (0, "leaf", Site::Accumulated)
    );
    assert_eq!(a.name.as_deref(), Some("x"));
    let a = anomaly(tape.backward_dense_with(out, t(&[1e308]), AnomalyMode::Detect));
    assert_eq!((a.node, a.site), (0, Site::Accumulated));
    // off: the same sweeps return the infinity
    let g = tape.backward_dense(out, t(&[1e308])).unwrap();
    assert_eq!(g[0].as_ref().unwrap().data(), &[f64::INFINITY]);
}

#[test]
fn a_non_finite_seed_is_reported_as_the_seed() {
    let (tape, out) = two_paths(&[1.0]);
    let a = anomaly(tape.backward_sparse_with(out, t(&[f64::NAN]), |_| true, AnomalyMode::Detect));
    assert_eq!((a.node, a.kind, a.site.clone()), (out, "add", Site::Seed));
    assert_eq!(a.direction(), Direction::Backward);
}

#[test]
fn a_vjp_that_makes_a_non_finite_contribution_from_a_finite_gradient_is_the_origin() {
    let mut tape = Tape::empty();
    let x = tape.leaf(t(&[0.0, 4.0]), true, None);
    let c = tape.leaf(t(&[0.0, 1.0]), false, None);
    // y = x · c; ∂y/∂c = x is never asked for (c takes no gradient)
    let y = record(&mut tape, Op::Binary(BinaryOp::Mul), &[x, c], None).unwrap();
    let s = record(&mut tape, Op::Unary(UnaryOp::Inv), &[y], None).unwrap();
    check_forward(&tape, y, None).unwrap();
    let f = anomaly(check_forward(&tape, s, None));
    assert_eq!((f.node, f.kind, f.site.clone()), (s, "inv", Site::Value));
    assert_eq!(f.parents.len(), 1);
    // finite forward (inv(1e-200) = 1e200), overflowing VJP (−1/y² = −1e400)
    let mut tape = Tape::empty();
    let x = tape.leaf(t(&[1e-200]), true, None);
    let c = tape.leaf(t(&[1.0]), false, None);
    let y = record(&mut tape, Op::Binary(BinaryOp::Mul), &[x, c], None).unwrap();
    let s = record(&mut tape, Op::Unary(UnaryOp::Inv), &[y], None).unwrap();
    let a = anomaly(tape.backward_sparse_with(s, t(&[1.0]), |id| id == x, AnomalyMode::Detect));
    assert_eq!(
        (a.node, a.site.clone()),
        (s, Site::Contribution { parent: y })
    );
    assert!(a.to_string().contains("tape node 3 (inv"), "{a}");
    // the dense sweep checks each contribution too
    let a = anomaly(tape.backward_dense_with(s, t(&[1.0]), AnomalyMode::Detect));
    assert_eq!(
        (a.node, a.site.clone()),
        (s, Site::Contribution { parent: y })
    );
}

#[test]
fn a_contribution_to_a_parent_that_takes_no_gradient_is_not_checked() {
    // y = x · c with c a constant: ∂/∂c = 1e10 · 1e300 overflows, ∂/∂x = 1e10 · 1e-300 does not
    let mut tape = Tape::empty();
    let x = tape.leaf(t(&[1e300]), true, None);
    let c = tape.leaf(t(&[1e-300]), false, None);
    let y = record(&mut tape, Op::Binary(BinaryOp::Mul), &[x, c], None).unwrap();
    for mode in [AnomalyMode::Detect, AnomalyMode::Off] {
        let mut g = tape
            .backward_sparse_with(y, t(&[1e10]), |id| id == x, mode)
            .unwrap();
        assert_eq!(g.take(x).unwrap().data(), &[1e10 * 1e-300]);
    }
    let g = tape
        .backward_dense_with(y, t(&[1e10]), AnomalyMode::Detect)
        .unwrap();
    assert!(g[c].is_none());
}
