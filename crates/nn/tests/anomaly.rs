//! Anomaly mode on the eager session: the op (and its layer) where a NaN or an infinity
//! originates, forward when the op runs and backward in `backward`, on both sweeps; nothing
//! is checked or named with it off.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_nn::*;
use torchlean_runtime::{AnomalyMode, Direction, Kernels, RuntimeError, Site};
use torchlean_spec::{Tensor, UnaryOp};

fn vec1(data: &[f64]) -> Tensor<f64> {
    Tensor::new([data.len()], data.to_vec()).unwrap()
}

fn anomaly(e: NnError) -> (String, torchlean_runtime::Anomaly) {
    match e {
        NnError::Runtime {
            layer,
            source: RuntimeError::Anomaly(a),
        } => (layer, *a),
        other => panic!("expected an anomaly, got {other}"),
    }
}

/// `log(x − x)` inside layer `block`: the log fails when it runs.
fn log_of_zero_fails_at_the_log<V: Kernels>() {
    let mut s = Session::<V>::new();
    s.set_anomaly_mode(AnomalyMode::Detect);
    let x = s.input("x", &vec1(&[2.0, 3.0]), true).unwrap();
    let z = s.scoped("block", |s| s.sub(&x, &x)).unwrap();
    assert_eq!(s.tape_len(), 2);
    let err = s
        .scoped("block", |s| s.unary(UnaryOp::Log, &z))
        .unwrap_err();
    let (layer, a) = anomaly(err);
    assert_eq!(layer, "block");
    assert_eq!((a.kind, a.name.as_deref()), ("log", Some("block")));
    // tape: x = 0, z = 1, the log = 2
    assert_eq!((a.node, a.site.clone()), (2, Site::Value));
    assert_eq!(a.direction(), Direction::Forward);
    assert_eq!(a.parents, vec![(1, torchlean_spec::Shape::from([2]))]);
    assert_eq!((a.found.value, a.found.count), (f64::NEG_INFINITY, 2));
}

#[test]
fn a_forward_anomaly_names_the_op_and_its_layer_on_every_engine() {
    log_of_zero_fails_at_the_log::<CpuF64>();
    log_of_zero_fails_at_the_log::<CpuF32>();
    log_of_zero_fails_at_the_log::<Tensor<f64>>();
    log_of_zero_fails_at_the_log::<Tensor<f32>>();
}

#[test]
fn a_non_finite_parameter_is_its_own_origin() {
    let mut s = Session::<CpuF64>::new();
    s.set_anomaly_mode(AnomalyMode::Detect);
    let err = s
        .scoped("0", |s| s.param("weight", &vec1(&[1.0, f64::NAN])))
        .unwrap_err();
    let (_, a) = anomaly(err);
    assert_eq!((a.kind, a.name.as_deref()), ("param", Some("0.weight")));
    assert!(a.parents.is_empty());
}

/// `sum(inv(x))` at a tiny x: finite forward, overflowing gradient, on `sweep`.
fn backward_fails_at_the_inv(sweep: Sweep) {
    let mut s = Session::<Tensor<f64>>::new();
    s.set_anomaly_mode(AnomalyMode::Detect);
    let x = s.input("x", &vec1(&[1.0, 1e-200]), true).unwrap();
    let y = s.scoped("head", |s| s.unary(UnaryOp::Inv, &x)).unwrap();
    assert_eq!(s.tape_len(), 2);
    let loss = s.sum(&y).unwrap();
    let (_, a) = anomaly(s.backward(&loss, sweep).unwrap_err());
    // tape: x = 0, y = 1, the sum = 2
    assert_eq!(
        (a.node, a.kind, a.name.as_deref()),
        (1, "inv", Some("head"))
    );
    assert_eq!(a.site, Site::Contribution { parent: 0 });
    assert_eq!(a.direction(), Direction::Backward);
    assert_eq!((a.found.index, a.found.value), (1, f64::NEG_INFINITY));
}

#[test]
fn a_backward_anomaly_names_the_op_on_both_sweeps() {
    backward_fails_at_the_inv(Sweep::Releasing);
    backward_fails_at_the_inv(Sweep::DenseAll);
}

#[test]
fn with_anomaly_mode_off_nothing_is_checked_and_the_gradients_are_as_before() {
    let mut s = Session::<Tensor<f64>>::new();
    assert_eq!(s.anomaly_mode(), AnomalyMode::Off);
    let x = s.input("x", &vec1(&[1.0, 1e-200]), true).unwrap();
    let y = s.unary(UnaryOp::Inv, &x).unwrap();
    let loss = s.sum(&y).unwrap();
    s.backward(&loss, Sweep::Releasing).unwrap();
    let g = s.grad(&x).unwrap().unwrap();
    assert_eq!(g.data(), &[-1.0, f64::NEG_INFINITY]);
    let z = s.sub(&x, &x).unwrap();
    let l = s.unary(UnaryOp::Log, &z).unwrap();
    assert_eq!(s.value(&l).unwrap().data(), &[f64::NEG_INFINITY; 2]);
}
