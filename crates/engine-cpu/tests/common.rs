//! Helpers the test modules share: deterministic inputs, and the CPU engine checked against
//! the reference engine on one op.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cpu::CpuF64;
use torchlean_engine_suite::norm_rel_error;
use torchlean_runtime::{Kernels, Saved};
use torchlean_spec::{ops, Op, Shape, Tensor};

/// Deterministic values in `[-1, 1)`.
pub fn values(shape: &[usize], salt: u64) -> Tensor<f64> {
    let mut s = salt;
    Tensor::from_fn(Shape::from(shape), |_| {
        s = ops::splitmix64(s);
        (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    })
    .unwrap()
}

/// `t` with `value` at flat offset `at`.
pub fn with(t: &Tensor<f64>, at: usize, value: f64) -> Tensor<f64> {
    let mut data = t.data().to_vec();
    data[at] = value;
    Tensor::new(t.shape().clone(), data).unwrap()
}

/// The forward and every cotangent of `op`, on the CPU engine and on the reference engine,
/// agree: the same NaNs and infinities at the same places, the rest within `tol`
/// ([`norm_rel_error`]).
pub fn agrees(what: &str, op: &Op, inputs: &[Tensor<f64>], tol: f64) {
    let cpu: Vec<CpuF64> = inputs
        .iter()
        .map(|t| CpuF64::from_f64(t).unwrap())
        .collect();
    let cpu_refs: Vec<&CpuF64> = cpu.iter().collect();
    let ref_refs: Vec<&Tensor<f64>> = inputs.iter().collect();
    let y = torchlean_runtime::forward::<CpuF64>(op, &cpu_refs).unwrap();
    let want_y = torchlean_runtime::forward::<Tensor<f64>>(op, &ref_refs).unwrap();
    let dy = values(want_y.shape().dims(), 77);
    let got = torchlean_runtime::vjp::<CpuF64>(
        op,
        &Saved::for_op(op, &cpu_refs, &y),
        &CpuF64::from_f64(&dy).unwrap(),
    )
    .unwrap();
    let want =
        torchlean_runtime::vjp::<Tensor<f64>>(op, &Saved::for_op(op, &ref_refs, &want_y), &dy)
            .unwrap();
    let e = norm_rel_error(&y.to_f64().unwrap(), &want_y);
    assert!(e <= tol, "{what}: forward error {e:e}");
    assert_eq!(got.len(), want.len(), "{what}: cotangents");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        match (g, w) {
            (Some(g), Some(w)) => {
                let e = norm_rel_error(&g.to_f64().unwrap(), w);
                assert!(e <= tol, "{what}: cotangent {i} error {e:e}");
            }
            (None, None) => {} // an operand without a gradient (cross entropy's targets)
            _ => panic!("{what}: cotangent {i} on one engine only"),
        }
    }
}
