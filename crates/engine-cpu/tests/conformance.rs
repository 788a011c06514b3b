//! The shared conformance suite on the CPU engine (f32 and f64, on 1 and 2 threads), and
//! determinism: bitwise identical results run to run at a fixed thread count, and agreement
//! across thread counts, on kernels large enough to take their parallel paths.
#![allow(clippy::unwrap_used)]

use crate::common::values;
use torchlean_engine_cpu::{with_threads, CpuF32, CpuF64, CpuTensor};
use torchlean_engine_suite::{assert_suite_passes, norm_rel_error, run_suite, Tolerance};
use torchlean_runtime::{Kernels, Saved};
use torchlean_spec::{Conv2dSpec, Op, PoolKind, PoolSpec, Shape, Tensor, UnaryOp};

#[test]
fn f32_engine_passes_the_suite() {
    assert_suite_passes::<CpuF32>(Tolerance::F32);
}

#[test]
fn f64_engine_passes_the_suite() {
    assert_suite_passes::<CpuF64>(Tolerance::F64);
}

#[test]
fn the_suite_passes_on_one_and_two_threads_with_the_same_errors() {
    let one = with_threads(1, || run_suite::<CpuF32>(Tolerance::F32));
    let two = with_threads(2, || run_suite::<CpuF32>(Tolerance::F32));
    for (a, b) in one.iter().zip(&two) {
        assert!(
            a.pass() && b.pass(),
            "{}: {:?} / {:?}",
            a.name,
            a.failures,
            b.failures
        );
        assert_eq!(
            a.max_rel, b.max_rel,
            "{}: results differ across thread counts",
            a.name
        );
    }
}

/// Forward and every cotangent of `op` on big inputs.
fn run_op<V: Kernels>(op: &Op, inputs: &[Tensor<f64>]) -> Vec<V> {
    let args: Vec<V> = inputs.iter().map(|t| V::from_f64(t).unwrap()).collect();
    let refs: Vec<&V> = args.iter().collect();
    let out = torchlean_runtime::forward::<V>(op, &refs).unwrap();
    let cot = V::from_f64(&values(out.to_f64().unwrap().shape().dims(), 99)).unwrap();
    let saved = Saved::for_op(op, &refs, &out);
    let mut all = vec![out];
    all.extend(
        torchlean_runtime::vjp::<V>(op, &saved, &cot)
            .unwrap()
            .into_iter()
            .flatten(),
    );
    all
}

fn big_cases() -> Vec<(Op, Vec<Tensor<f64>>)> {
    let conv = Conv2dSpec::ungrouped(8, 16, (3, 3), 1, 1);
    vec![
        (
            Op::MatMul,
            vec![values(&[300, 280], 1), values(&[280, 260], 2)],
        ),
        (
            Op::MatMul,
            vec![values(&[6, 70, 90], 3), values(&[6, 90, 50], 4)],
        ),
        (
            Op::Linear,
            vec![
                values(&[256, 300], 5),
                values(&[200, 300], 6),
                values(&[200], 7),
            ],
        ),
        (
            Op::Conv2d(conv),
            vec![
                values(&[12, 8, 20, 20], 8),
                values(&[16, 8, 3, 3], 9),
                values(&[16], 10),
            ],
        ),
        (
            Op::Conv2d(conv),
            vec![
                values(&[8, 40, 40], 11),
                values(&[16, 8, 3, 3], 12),
                values(&[16], 13),
            ],
        ),
        // gathers split across threads: a chunk starts mid-tensor (a broadcast with a stride-0
        // inner axis; a permute that is not a transpose of the innermost two)
        (
            Op::BroadcastTo {
                from: Shape::from([300, 1]),
                to: Shape::from([64, 300, 8]),
            },
            vec![values(&[300, 1], 29)],
        ),
        (
            Op::Permute {
                perm: vec![2, 0, 1],
            },
            vec![values(&[40, 50, 30], 30)],
        ),
        (Op::Softmax { axis: 1 }, vec![values(&[300, 500], 14)]),
        (Op::Softmax { axis: 0 }, vec![values(&[300, 500], 15)]),
        (
            Op::LayerNorm {
                axis: 1,
                eps: Some(1e-5),
            },
            vec![values(&[200, 700], 16)],
        ),
        (Op::Unary(UnaryOp::Tanh), vec![values(&[400, 500], 17)]),
        (Op::Sum, vec![values(&[700, 500], 18)]),
        (Op::ReduceSum { axis: 1 }, vec![values(&[300, 600], 19)]),
        (Op::ReduceMean { axis: 0 }, vec![values(&[300, 600], 20)]),
        (
            Op::MseLoss,
            vec![values(&[500, 400], 21), values(&[500, 400], 22)],
        ),
        (
            Op::Pool(PoolSpec {
                kind: PoolKind::Max,
                kernel_h: 3,
                kernel_w: 3,
                stride: 2,
                padding: 1,
                padded: true,
            }),
            vec![values(&[16, 16, 33, 33], 23)],
        ),
        (
            Op::BatchNormEval {
                channels: 16,
                eps: 1e-5,
            },
            vec![
                values(&[32, 16, 20, 20], 24),
                values(&[16], 25),
                values(&[16], 26),
                values(&[16], 27),
                values(&[16], 28).map(|v| Ok(v.abs() + 0.5)).unwrap(),
            ],
        ),
    ]
}

fn assert_bitwise<T: torchlean_engine_cpu::CpuScalar>(
    op: &Op,
    a: &[CpuTensor<T>],
    b: &[CpuTensor<T>],
    what: &str,
) {
    assert_eq!(a.len(), b.len());
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(x.bit_eq(y), "{}: result {k} differs {what}", op.name());
    }
}

#[test]
fn results_are_bitwise_identical_run_to_run_and_across_thread_counts() {
    for (op, inputs) in big_cases() {
        let r1a = with_threads(1, || run_op::<CpuF32>(&op, &inputs));
        let r1b = with_threads(1, || run_op::<CpuF32>(&op, &inputs));
        let r2a = with_threads(2, || run_op::<CpuF32>(&op, &inputs));
        let r2b = with_threads(2, || run_op::<CpuF32>(&op, &inputs));
        assert_bitwise(&op, &r1a, &r1b, "run to run on 1 thread");
        assert_bitwise(&op, &r2a, &r2b, "run to run on 2 threads");
        // the kernels are designed not to depend on the thread count at all; the contract is
        // the suite's tolerance, so that is what is asserted
        for (x, y) in r1a.iter().zip(&r2a) {
            let e = norm_rel_error(&x.to_f64().unwrap(), &y.to_f64().unwrap());
            assert!(
                e <= Tolerance::F32.rel,
                "{}: {e:e} across thread counts",
                op.name()
            );
        }
        let f64_1 = with_threads(1, || run_op::<CpuF64>(&op, &inputs));
        let f64_2 = with_threads(2, || run_op::<CpuF64>(&op, &inputs));
        for (x, y) in f64_1.iter().zip(&f64_2) {
            let e = norm_rel_error(&x.to_f64().unwrap(), &y.to_f64().unwrap());
            assert!(
                e <= Tolerance::F64.rel,
                "{}: {e:e} across thread counts",
                op.name()
            );
        }
    }
}

#[test]
fn big_cases_agree_with_the_reference() {
    for (op, inputs) in big_cases() {
        let got = with_threads(2, || run_op::<CpuF64>(&op, &inputs));
        let want = run_op::<Tensor<f64>>(&op, &inputs);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let e = norm_rel_error(&g.to_f64().unwrap(), w);
            assert!(e <= Tolerance::F64.rel, "{} result {k}: {e:e}", op.name());
        }
    }
}
