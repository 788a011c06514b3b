//! The suite run on the reference engine itself: f64 must agree exactly with itself, f32 within
//! the f32 tolerance; and the suite must be able to fail.
#![allow(clippy::unwrap_used)]

use torchlean_engine_suite::*;
use torchlean_spec::Tensor;

#[test]
fn reference_engine_passes_its_own_suite() {
    for r in run_suite::<Tensor<f64>>(Tolerance::F64) {
        assert!(r.pass(), "{}: {:?}", r.name, r.failures);
        assert_eq!(
            r.max_rel, 0.0,
            "{}: the reference against itself is exact",
            r.name
        );
    }
    assert_suite_passes::<Tensor<f32>>(Tolerance::F32);
}

#[test]
fn every_op_of_the_descriptor_table_is_covered() {
    let covered = covered_ops();
    let missing: Vec<&str> = torchlean_spec::ops::desc::OPS
        .iter()
        .filter(|d| d.prototype().is_some())
        .map(|d| d.name)
        .filter(|name| !covered.contains(name))
        .collect();
    assert!(missing.is_empty(), "not in the suite: {missing:?}");
}

#[test]
fn the_suite_catches_a_wrong_value() {
    let a = Tensor::new([2], vec![1.0, 2.0]).unwrap();
    let b = Tensor::new([2], vec![1.0, 2.0 + 1e-9]).unwrap();
    assert!(norm_rel_error(&b, &a) > Tolerance::F64.rel);
    assert!(norm_rel_error(&b, &a) < Tolerance::F32.rel);
    let c = Tensor::new([3], vec![1.0, 2.0, 3.0]).unwrap();
    assert_eq!(norm_rel_error(&c, &a), f64::INFINITY);
}
