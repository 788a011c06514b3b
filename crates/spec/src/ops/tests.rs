//! Tests of the reference op semantics: finite differences for every op's VJP, hand-computed
//! values at the edges, shape-rule errors, and the "reads only what it saves" contract.

use super::*;
use crate::error::IdProblem;
use crate::scalar::Rational;
use crate::Tensor;

/// A small deterministic generator (tests must be seeded).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = random::splitmix64(self.0);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
}

fn t(shape: &[usize], data: &[f64]) -> Tensor<f64> {
    Tensor::new(shape.to_vec(), data.to_vec()).unwrap()
}

/// A pooling of `kind` with kernel `(kh, kw)`: the `_pad` kind exactly when `padding > 0`.
fn pool(
    kind: PoolKind,
    (kernel_h, kernel_w): (usize, usize),
    stride: usize,
    padding: usize,
) -> PoolSpec {
    PoolSpec {
        kind,
        kernel_h,
        kernel_w,
        stride,
        padding,
        padded: padding > 0,
    }
}

fn random_tensor(rng: &mut Lcg, shape: &Shape, lo: f64, hi: f64) -> Tensor<f64> {
    Tensor::from_fn(shape.clone(), |_| rng.range(lo, hi)).unwrap()
}

/// Checks `op.vjp` against central finite differences of `⟨c, op(x)⟩` for every differentiable
/// operand, with `Saved::for_op` (so the VJP may read only what the op declares).
fn check_fd(op: &Op, inputs: &[Tensor<f64>], seed: u64, tol: f64) {
    let mut rng = Lcg(seed);
    let refs: Vec<&Tensor<f64>> = inputs.iter().collect();
    let out = op.forward(&refs).unwrap();
    let cot = random_tensor(&mut rng, out.shape(), -1.0, 1.0);
    let saved = Saved::for_op(op, &refs, &out);
    let grads = op.vjp(&saved, &cot).unwrap();
    assert_eq!(
        grads.len(),
        inputs.len(),
        "{}: one cotangent per operand",
        op.name()
    );
    let objective = |ins: &[Tensor<f64>]| -> f64 {
        let r: Vec<&Tensor<f64>> = ins.iter().collect();
        let y = op.forward(&r).unwrap();
        y.data().iter().zip(cot.data()).map(|(a, b)| a * b).sum()
    };
    for (k, g) in grads.iter().enumerate() {
        let Some(g) = g else { continue };
        assert_eq!(
            g.shape(),
            inputs[k].shape(),
            "{}: operand {k} shape",
            op.name()
        );
        for i in 0..inputs[k].len() {
            let h = 1e-6 * (1.0 + inputs[k].data()[i].abs());
            let mut plus = inputs.to_vec();
            plus[k].data_mut()[i] += h;
            let mut minus = inputs.to_vec();
            minus[k].data_mut()[i] -= h;
            let fd = (objective(&plus) - objective(&minus)) / (2.0 * h);
            let an = g.data()[i];
            let err = (fd - an).abs() / (1.0 + fd.abs().max(an.abs()));
            assert!(
                err < tol,
                "{}: operand {k} element {i}: finite difference {fd} vs VJP {an}",
                op.name()
            );
        }
    }
}

fn rand_inputs(seed: u64, shapes: &[&[usize]], lo: f64, hi: f64) -> Vec<Tensor<f64>> {
    let mut rng = Lcg(seed);
    shapes
        .iter()
        .map(|s| random_tensor(&mut rng, &Shape::from(*s), lo, hi))
        .collect()
}

#[test]
fn every_unary_op_vjp_matches_finite_differences() {
    for (i, u) in UnaryOp::ALL.iter().enumerate() {
        // positive inputs keep log/sqrt/inv in their domain; abs and relu avoid their kink
        let (lo, hi) = match u {
            UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Inv => (0.3, 2.0),
            UnaryOp::Abs | UnaryOp::Relu => (0.1, 1.5),
            _ => (-1.5, 1.5),
        };
        let mut ins = rand_inputs(10 + i as u64, &[&[2, 3]], lo, hi);
        if matches!(u, UnaryOp::Abs | UnaryOp::Relu) {
            // mix signs away from the kink
            for (k, v) in ins[0].data_mut().iter_mut().enumerate() {
                if k % 2 == 0 {
                    *v = -*v;
                }
            }
        }
        check_fd(&Op::Unary(*u), &ins, 100 + i as u64, 1e-6);
    }
}

#[test]
fn every_binary_op_vjp_matches_finite_differences() {
    for (i, b) in BinaryOp::ALL.iter().enumerate() {
        let ins = rand_inputs(20 + i as u64, &[&[3, 2], &[3, 2]], 0.5, 2.0);
        check_fd(&Op::Binary(*b), &ins, 200 + i as u64, 1e-6);
    }
}

#[test]
fn structural_ops_vjp_match_finite_differences() {
    let cases: Vec<(Op, Vec<&[usize]>)> = vec![
        (Op::Scale { c: -1.5 }, vec![&[4]]),
        (Op::AddScalar { c: 0.25 }, vec![&[2, 2]]),
        (
            Op::Clamp {
                min: Some(-0.5),
                max: Some(0.5),
            },
            vec![&[3, 4]],
        ),
        (
            Op::Clamp {
                min: None,
                max: Some(0.25),
            },
            vec![&[6]],
        ),
        (Op::Softmax { axis: 0 }, vec![&[3, 4]]),
        (Op::Softmax { axis: 1 }, vec![&[2, 3, 2]]),
        (Op::LogSoftmax { axis: 1 }, vec![&[3, 4]]),
        (Op::LogSoftmax { axis: 0 }, vec![&[3, 4]]),
        (
            Op::LayerNorm {
                axis: 1,
                eps: Some(1e-5),
            },
            vec![&[2, 3, 4]],
        ),
        (
            Op::BroadcastTo {
                from: Shape::from([2, 1, 3]),
                to: Shape::from([4, 2, 5, 3]),
            },
            vec![&[2, 1, 3]],
        ),
        (
            Op::Reshape {
                from: Shape::from([3, 4]),
                to: Shape::from([6, 2]),
            },
            vec![&[3, 4]],
        ),
        (
            Op::Permute {
                perm: vec![1, 2, 0],
            },
            vec![&[2, 3, 4]],
        ),
        (Op::SwapFirstTwo, vec![&[2, 3, 4]]),
        (Op::Transpose3dLastTwo, vec![&[2, 3, 4]]),
        (Op::Transpose { dim0: 0, dim1: 2 }, vec![&[2, 3, 4]]),
        (
            Op::Slice {
                axis: 1,
                start: 1,
                len: 2,
            },
            vec![&[2, 4, 3]],
        ),
        (
            Op::Slice {
                axis: 0,
                start: 3,
                len: 2,
            },
            vec![&[5]],
        ),
        (Op::ReduceSum { axis: 1 }, vec![&[3, 5, 2]]),
        (Op::ReduceMean { axis: 0 }, vec![&[3, 5, 2]]),
        (Op::Sum, vec![&[2, 3]]),
        (Op::MatMul, vec![&[3, 4], &[4, 2]]),
        (Op::MatMul, vec![&[2, 3, 4], &[2, 4, 5]]),
        (Op::Linear, vec![&[2, 3, 5], &[4, 5], &[4]]),
        (Op::Linear, vec![&[5], &[2, 5], &[2]]),
        (
            Op::Conv2d(Conv2dSpec::ungrouped(2, 3, (3, 2), 2, 1)),
            vec![&[2, 6, 5], &[3, 2, 3, 2], &[3]],
        ),
        (
            Op::Conv2d(Conv2dSpec::ungrouped(1, 2, (2, 2), 1, 0)),
            vec![&[2, 1, 3, 3], &[2, 1, 2, 2], &[2]],
        ),
        (
            Op::Pool(pool(PoolKind::Avg, (3, 3), 2, 1)),
            vec![&[2, 7, 6]],
        ),
        (
            Op::Pool(pool(PoolKind::Max, (2, 3), 1, 1)),
            vec![&[1, 2, 4, 5]],
        ),
        (
            Op::BatchNormEval {
                channels: 3,
                eps: 1e-5,
            },
            vec![&[2, 3, 2, 2], &[3], &[3], &[3], &[3]],
        ),
        (
            Op::BatchNormTrain {
                channels: 3,
                eps: Some(1e-3),
            },
            vec![&[2, 3, 2, 2], &[3], &[3]],
        ),
        (
            Op::BatchNormTrain {
                channels: 2,
                eps: None,
            },
            vec![&[3, 2, 1, 2], &[2], &[2]],
        ),
        (Op::Concat { axis: 1 }, vec![&[2, 1], &[2, 3], &[2, 2]]),
        (Op::Concat { axis: 0 }, vec![&[1, 3], &[2, 3]]),
        (Op::Concat { axis: 1 }, vec![&[2, 1, 2], &[2, 3, 2]]),
        (Op::MseLoss, vec![&[2, 3], &[2, 3]]),
        (
            Op::CrossEntropy {
                reduction: Reduction::Mean,
            },
            vec![&[4, 3], &[4]],
        ),
        (
            Op::CrossEntropy {
                reduction: Reduction::Sum,
            },
            vec![&[3, 5], &[3]],
        ),
    ];
    for (i, (op, shapes)) in cases.iter().enumerate() {
        let mut ins = rand_inputs(300 + i as u64, shapes, -1.0, 1.0);
        if let Op::BatchNormEval { .. } = op {
            // variances positive
            ins[4] = random_tensor(&mut Lcg(7), &Shape::from([3]), 0.5, 1.5);
        }
        if let Op::CrossEntropy { .. } = op {
            // integral class ids in [0, C)
            let classes = shapes[0][1];
            for (r, v) in ins[1].data_mut().iter_mut().enumerate() {
                *v = ((r * 2 + 1) % classes) as f64;
            }
        }
        check_fd(op, &ins, 400 + i as u64, 1e-6);
    }
}

#[test]
fn relu_and_abs_have_zero_derivative_at_zero_and_relu_keeps_exact_zeros() {
    let x = t(&[3], &[-1.0, 0.0, 2.0]);
    let op = Op::Unary(UnaryOp::Relu);
    let y = op.forward(&[&x]).unwrap();
    assert_eq!(y.data(), &[0.0, 0.0, 2.0]);
    let dy = t(&[3], &[5.0, 5.0, 5.0]);
    let g = op.vjp(&Saved::for_op(&op, &[&x], &y), &dy).unwrap();
    assert_eq!(g[0].as_ref().unwrap().data(), &[0.0, 0.0, 5.0]);
    let op = Op::Unary(UnaryOp::Abs);
    let y = op.forward(&[&x]).unwrap();
    let g = op.vjp(&Saved::for_op(&op, &[&x], &y), &dy).unwrap();
    assert_eq!(g[0].as_ref().unwrap().data(), &[-5.0, 0.0, 5.0]);
}

#[test]
fn gelu_matches_pytorch_values_in_both_forms() {
    // x·Φ(x) and the tanh formula in f64 (Python's math.erf / math.tanh)
    let x = t(&[4], &[-2.0, 0.0, 1.0, 3.0]);
    for (a, want) in [
        (
            GeluApprox::None,
            [
                -0.045_500_263_896_358_42,
                0.0,
                0.841_344_746_068_542_9,
                2.995_950_305_905_11,
            ],
        ),
        (
            GeluApprox::Tanh,
            [
                -0.045_402_305_912_224_94,
                0.0,
                0.841_191_990_608_276_8,
                2.996_362_607_918_227,
            ],
        ),
    ] {
        let y = Op::Unary(UnaryOp::Gelu(a)).forward(&[&x]).unwrap();
        for (g, w) in y.data().iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{a:?}: {g} vs {w}");
        }
    }
}

#[test]
fn clamp_passes_the_gradient_at_its_bounds_like_pytorch() {
    // torch.clamp(x, 0, 1) and its backward: 1 on [min, max] (bounds included), 0 outside and at NaN
    let x = t(&[6], &[-1.0, 0.0, 0.5, 1.0, 2.0, f64::NAN]);
    let op = Op::Clamp {
        min: Some(0.0),
        max: Some(1.0),
    };
    let y = op.forward(&[&x]).unwrap();
    assert_eq!(&y.data()[..5], &[0.0, 0.0, 0.5, 1.0, 1.0]);
    assert!(y.data()[5].is_nan());
    let g = op
        .vjp(&Saved::for_op(&op, &[&x], &y), &t(&[6], &[3.0; 6]))
        .unwrap();
    assert_eq!(
        g[0].as_ref().unwrap().data(),
        &[0.0, 3.0, 3.0, 3.0, 0.0, 0.0]
    );
    // one bound only
    let op = Op::Clamp {
        min: None,
        max: Some(0.5),
    };
    let y = op.forward(&[&x]).unwrap();
    assert_eq!(&y.data()[..5], &[-1.0, 0.0, 0.5, 0.5, 0.5]);
    // min == max is allowed; min > max and NaN bounds are attribute errors
    let op = Op::Clamp {
        min: Some(0.5),
        max: Some(0.5),
    };
    assert!(op.forward(&[&x]).is_ok());
    for (min, max, attr) in [
        (Some(2.0), Some(1.0), "min"),
        (Some(f64::NAN), None, "min"),
        (None, Some(f64::NAN), "max"),
    ] {
        let e = Op::Clamp { min, max }.forward(&[&x]).unwrap_err();
        assert!(
            matches!(e, SpecError::OpAttr { op: "clamp", attr: a, .. } if a == attr),
            "{e}"
        );
    }
    // exact over the rationals
    let xr = Tensor::new([3], vec![q(-1, 3), q(1, 2), q(5, 4)]).unwrap();
    let op = Op::Clamp {
        min: Some(0.0),
        max: Some(1.0),
    };
    assert_eq!(
        op.forward(&[&xr]).unwrap().data(),
        &[q(0, 1), q(1, 2), q(1, 1)]
    );
}

#[test]
fn slice_narrows_and_its_vjp_scatters_into_zeros() {
    let x = t(&[2, 4], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    let op = Op::Slice {
        axis: 1,
        start: 2,
        len: 2,
    };
    let y = op.forward(&[&x]).unwrap();
    assert_eq!(y.shape(), &Shape::from([2, 2]));
    assert_eq!(y.data(), &[2.0, 3.0, 6.0, 7.0]);
    let g = op
        .vjp(
            &Saved::for_op(&op, &[&x], &y),
            &t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]),
        )
        .unwrap();
    assert_eq!(
        g[0].as_ref().unwrap().data(),
        &[0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0]
    );
    // an empty slice at the end is fine; past the extent names the field
    let empty = Op::Slice {
        axis: 1,
        start: 4,
        len: 0,
    };
    assert_eq!(empty.forward(&[&x]).unwrap().shape(), &Shape::from([2, 0]));
    for (start, len, attr) in [(5, 0, "start"), (3, 2, "len"), (1, usize::MAX, "len")] {
        let e = Op::Slice {
            axis: 1,
            start,
            len,
        }
        .infer_shape(&[Shape::from([2, 4])])
        .unwrap_err();
        assert!(
            matches!(e, SpecError::OpAttr { op: "slice", attr: a, .. } if a == attr),
            "{e}"
        );
    }
    let e = Op::Slice {
        axis: 2,
        start: 0,
        len: 1,
    }
    .infer_shape(&[Shape::from([2, 4])])
    .unwrap_err();
    assert!(
        matches!(
            e,
            SpecError::AxisOutOfRange {
                op: "slice",
                attr: "axis",
                axis: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn cross_entropy_matches_pytorch_and_rejects_bad_targets() {
    // F.cross_entropy(tensor([[1., 2., 3.], [0., 0., 0.]]), tensor([2, 0])): the mean of
    // log(e + e² + e³) − 3 and log 3
    let x = t(&[2, 3], &[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]);
    let target = t(&[2], &[2.0, 0.0]);
    let l0 = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln() - 3.0;
    let l1 = 3f64.ln();
    for (reduction, want) in [
        (Reduction::Mean, (l0 + l1) / 2.0),
        (Reduction::Sum, l0 + l1),
    ] {
        let op = Op::CrossEntropy { reduction };
        let y = op.forward(&[&x, &target]).unwrap();
        assert!((y.item().unwrap() - want).abs() < 1e-14, "{reduction:?}");
        let g = op
            .vjp(
                &Saved::for_op(&op, &[&x, &target], &y),
                &Tensor::scalar(1.0),
            )
            .unwrap();
        assert!(g[1].is_none(), "the target is data: a structural zero");
        let dx = g[0].as_ref().unwrap();
        // each row of softmax − onehot sums to 0
        for row in dx.data().chunks(3) {
            assert!(row.iter().sum::<f64>().abs() < 1e-15);
        }
    }
    // stable for huge logits
    let big = t(&[1, 2], &[1000.0, -1000.0]);
    let op = Op::CrossEntropy {
        reduction: Reduction::Sum,
    };
    let y = op.forward(&[&big, &t(&[1], &[1.0])]).unwrap();
    assert_eq!(y.item().unwrap(), &2000.0);
    // bad class ids name the operand, the position and why
    for (bad, why) in [
        (3.0, IdProblem::OutOfRange),
        (-1.0, IdProblem::OutOfRange),
        (1.5, IdProblem::NotIntegral),
        (f64::NAN, IdProblem::NotIntegral),
        (f64::INFINITY, IdProblem::NotIntegral),
    ] {
        let e = op.forward(&[&x, &t(&[2], &[0.0, bad])]).unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::BadId {
                    op: "cross_entropy",
                    operand: "target",
                    position: 1,
                    bound: 3,
                    problem,
                    ..
                } if problem == why
            ),
            "{e}"
        );
        assert!(e.to_string().contains("element 1"), "{e}");
    }
    // shapes: logits [N, C], target [N]
    assert!(op
        .infer_shape(&[Shape::from([2, 3]), Shape::from([3])])
        .is_err());
    assert!(op
        .infer_shape(&[Shape::from([6]), Shape::from([6])])
        .is_err());
    // over the rationals, a target that is not an exact integer is rejected too
    let xr = Tensor::new([1, 2], vec![q(1, 1), q(2, 1)]).unwrap();
    let tr = Tensor::new([1], vec![q(1, 3)]).unwrap();
    assert!(matches!(
        op.forward(&[&xr, &tr]),
        Err(SpecError::BadId {
            problem: IdProblem::NotIntegral,
            ..
        })
    ));
}

#[test]
fn batch_norm_train_normalises_each_channel_with_the_batch_statistics() {
    // two images, two channels, 1×2 each: channel 0 holds 1, 3, 5, 7 (mean 4, biased var 5)
    let x = t(&[2, 2, 1, 2], &[1.0, 3.0, 10.0, 10.0, 5.0, 7.0, 10.0, 10.0]);
    let gamma = t(&[2], &[2.0, 1.0]);
    let beta = t(&[2], &[0.5, -1.0]);
    let op = Op::BatchNormTrain {
        channels: 2,
        eps: Some(0.0),
    };
    let y = op.forward(&[&x, &gamma, &beta]).unwrap();
    let s = 5f64.sqrt();
    let want0: Vec<f64> = [1.0, 3.0, 5.0, 7.0]
        .iter()
        .map(|v| (v - 4.0) / s * 2.0 + 0.5)
        .collect();
    for (got, want) in [y.data()[0], y.data()[1], y.data()[4], y.data()[5]]
        .iter()
        .zip(&want0)
    {
        assert!((got - want).abs() < 1e-14, "{got} vs {want}");
    }
    // channel 1 is constant: var 0 and eps 0 make 0/0 (PyTorch gives NaN too)
    assert!(y.data()[2].is_nan());
    // with a positive eps a constant channel is β; its input gradient is γ·(dy − mean dy)/√eps
    // (the variance's derivative vanishes there, the mean's does not)
    let op = Op::BatchNormTrain {
        channels: 2,
        eps: None,
    };
    let y = op.forward(&[&x, &gamma, &beta]).unwrap();
    assert_eq!(y.data()[2], -1.0);
    let dy = t(&[2, 2, 1, 2], &[1.0, -2.0, 0.5, 3.0, 0.25, 1.0, -1.0, 2.0]);
    let g = op
        .vjp(&Saved::for_op(&op, &[&x, &gamma, &beta], &y), &dy)
        .unwrap();
    let (dx, dg, db) = (
        g[0].as_ref().unwrap(),
        g[1].as_ref().unwrap(),
        g[2].as_ref().unwrap(),
    );
    let want = (0.5 - 1.125) / 1e-5f64.sqrt();
    assert!(
        (dx.data()[2] - want).abs() < 1e-9,
        "{} vs {want}",
        dx.data()[2]
    );
    assert_eq!(db.data(), &[0.25, 4.5]);
    assert_eq!(dg.data()[1], 0.0);
    // the input gradient sums to 0 per channel (the mean is subtracted)
    let ch0 = dx.data()[0] + dx.data()[1] + dx.data()[4] + dx.data()[5];
    assert!(ch0.abs() < 1e-14, "{ch0}");
    // only [N, C, H, W] with C = channels
    for shape in [[2usize, 2, 2].as_slice(), &[2, 3, 1, 2]] {
        let e = op
            .infer_shape(&[Shape::from(shape), Shape::from([2]), Shape::from([2])])
            .unwrap_err();
        assert!(e.to_string().contains("batch_norm2d_nchw_train"), "{e}");
    }
}

#[test]
fn sqrt_derivative_is_zero_at_and_below_zero() {
    let x = t(&[3], &[0.0, -4.0, 4.0]);
    let op = Op::Unary(UnaryOp::Sqrt);
    let y = op.forward(&[&x]).unwrap();
    assert!(y.data()[1].is_nan());
    let g = op
        .vjp(&Saved::for_op(&op, &[&x], &y), &t(&[3], &[1.0, 1.0, 1.0]))
        .unwrap();
    assert_eq!(g[0].as_ref().unwrap().data(), &[0.0, 0.0, 0.25]);
}

#[test]
fn max_and_min_split_ties_evenly() {
    let a = t(&[2], &[1.0, 3.0]);
    let b = t(&[2], &[1.0, 2.0]);
    let d = t(&[2], &[4.0, 4.0]);
    for (bop, want_a, want_b) in [
        (BinaryOp::Max, [2.0, 4.0], [2.0, 0.0]),
        (BinaryOp::Min, [2.0, 0.0], [2.0, 4.0]),
    ] {
        let op = Op::Binary(bop);
        let y = op.forward(&[&a, &b]).unwrap();
        let g = op.vjp(&Saved::for_op(&op, &[&a, &b], &y), &d).unwrap();
        assert_eq!(g[0].as_ref().unwrap().data(), &want_a);
        assert_eq!(g[1].as_ref().unwrap().data(), &want_b);
    }
}

#[test]
fn max_and_min_propagate_nan_from_either_side_and_pass_the_cotangent_to_both() {
    // torch.maximum / torch.minimum: the result is NaN whichever side holds it, and both
    // sides get the whole cotangent there (neither is the loser, nor is it a tie)
    let nan = f64::NAN;
    let a = t(&[3], &[nan, 1.0, 2.0]);
    let b = t(&[3], &[1.0, nan, 5.0]);
    let d = t(&[3], &[4.0, 8.0, 16.0]);
    for (bop, y2, want_a, want_b) in [
        (BinaryOp::Max, 5.0, [4.0, 8.0, 0.0], [4.0, 8.0, 16.0]),
        (BinaryOp::Min, 2.0, [4.0, 8.0, 16.0], [4.0, 8.0, 0.0]),
    ] {
        let op = Op::Binary(bop);
        for (l, r) in [(&a, &b), (&b, &a)] {
            let y = op.forward(&[l, r]).unwrap();
            assert!(y.data()[0].is_nan() && y.data()[1].is_nan(), "{bop:?}");
            assert_eq!(y.data()[2], y2);
        }
        let y = op.forward(&[&a, &b]).unwrap();
        let g = op.vjp(&Saved::for_op(&op, &[&a, &b], &y), &d).unwrap();
        assert_eq!(g[0].as_ref().unwrap().data(), &want_a, "{bop:?}");
        assert_eq!(g[1].as_ref().unwrap().data(), &want_b, "{bop:?}");
    }
}

#[test]
fn max_and_min_give_the_left_operand_at_a_tie_of_signed_zeros() {
    // torch.maximum(-0., 0.) is -0. and torch.maximum(0., -0.) is 0. (likewise minimum)
    let (neg, pos) = (t(&[1], &[-0.0]), t(&[1], &[0.0]));
    for bop in [BinaryOp::Max, BinaryOp::Min] {
        let op = Op::Binary(bop);
        assert!(op.forward(&[&neg, &pos]).unwrap().data()[0].is_sign_negative());
        assert!(op.forward(&[&pos, &neg]).unwrap().data()[0].is_sign_positive());
    }
}

#[test]
fn relu_keeps_nan_and_passes_its_cotangent() {
    // torch.relu(NaN) is NaN and torch.relu(-0.) is -0.; threshold_backward passes the
    // cotangent where y is not <= 0
    let op = Op::Unary(UnaryOp::Relu);
    let x = t(&[5], &[f64::NAN, 0.0, 2.0, -0.0, -3.0]);
    let y = op.forward(&[&x]).unwrap();
    assert!(y.data()[0].is_nan());
    assert_eq!(&y.data()[1..], &[0.0, 2.0, 0.0, 0.0]);
    assert!(y.data()[3].is_sign_negative() && y.data()[4].is_sign_positive());
    let g = op
        .vjp(&Saved::for_op(&op, &[&x], &y), &t(&[5], &[5.0; 5]))
        .unwrap();
    assert_eq!(g[0].as_ref().unwrap().data(), &[5.0, 0.0, 5.0, 0.0, 0.0]);
}

#[test]
fn means_over_zero_elements_are_nan_on_floats_and_an_error_on_rationals() {
    let empty = t(&[2, 0], &[]);
    let (logits, ids) = (t(&[0, 3], &[]), t(&[0], &[]));
    let means = [
        (Op::ReduceMean { axis: 1 }, vec![&empty]),
        (Op::MseLoss, vec![&empty, &empty]),
        (
            Op::CrossEntropy {
                reduction: Reduction::Mean,
            },
            vec![&logits, &ids],
        ),
    ];
    for (op, args) in &means {
        let y = op.forward(args).unwrap();
        assert!(y.data().iter().all(|v| v.is_nan()), "{op:?}: {y:?}");
        // the gradients have no elements, and computing them divides by nothing
        let dy = Tensor::full(y.shape().clone(), 1.0).unwrap();
        let g = op.vjp(&Saved::for_op(op, args, &y), &dy).unwrap();
        assert!(g.iter().flatten().all(|d| d.is_empty()), "{op:?}");
        let exact: Vec<Tensor<Rational>> = args.iter().map(|a| a.convert().unwrap()).collect();
        let exact: Vec<&Tensor<Rational>> = exact.iter().collect();
        assert!(
            matches!(op.forward(&exact), Err(SpecError::EmptyMean { .. })),
            "{op:?}"
        );
    }
    // a sum over nothing stays 0, and a mean over a non-empty axis of an empty tensor is empty
    assert_eq!(Op::Sum.forward(&[&empty]).unwrap().data(), &[0.0]);
    let y = Op::ReduceMean { axis: 0 }.forward(&[&empty]).unwrap();
    assert!(y.is_empty());
}

#[test]
fn detach_and_bernoulli_stop_the_gradient() {
    let x = t(&[2], &[1.0, 2.0]);
    let y = Op::Detach.forward(&[&x]).unwrap();
    assert_eq!(y, x);
    let g = Op::Detach
        .vjp(&Saved::for_op(&Op::Detach, &[&x], &y), &x)
        .unwrap();
    assert_eq!(g.to_vec(), vec![None]);
}

#[test]
fn avg_pool_counts_padding_and_max_pool_ignores_it() {
    // one 2x2 plane of -1s, 3x3 windows padded by 1, stride 1
    let x = t(&[1, 2, 2], &[-1.0; 4]);
    let spec = |kind| pool(kind, (3, 3), 1, 1);
    let avg = Op::Pool(spec(PoolKind::Avg)).forward(&[&x]).unwrap();
    assert_eq!(avg.data(), &[-4.0 / 9.0; 4]);
    let max = Op::Pool(spec(PoolKind::Max)).forward(&[&x]).unwrap();
    assert_eq!(max.data(), &[-1.0; 4], "padded zeros never win a max");
}

#[test]
fn max_pool_picks_the_first_maximum_row_major() {
    let x = t(&[1, 2, 2], &[5.0, 5.0, 5.0, 1.0]);
    let op = Op::Pool(pool(PoolKind::Max, (2, 2), 2, 0));
    let y = op.forward(&[&x]).unwrap();
    let g = op
        .vjp(&Saved::for_op(&op, &[&x], &y), &t(&[1, 1, 1], &[1.0]))
        .unwrap();
    assert_eq!(g[0].as_ref().unwrap().data(), &[1.0, 0.0, 0.0, 0.0]);
}

#[test]
fn broadcast_is_right_aligned_like_pytorch() {
    let x = t(&[3], &[1.0, 2.0, 3.0]);
    let op = Op::BroadcastTo {
        from: Shape::from([3]),
        to: Shape::from([2, 3]),
    };
    let y = op.forward(&[&x]).unwrap();
    assert_eq!(y.data(), &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    let bad = Op::BroadcastTo {
        from: Shape::from([3]),
        to: Shape::from([3, 2]),
    };
    assert!(matches!(
        bad.infer_shape(&[Shape::from([3])]),
        Err(SpecError::OpAttr {
            attr: "to_shape",
            ..
        })
    ));
}

#[test]
fn shape_rule_errors_name_the_op_and_shapes() {
    let e = Op::MatMul
        .infer_shape(&[Shape::from([2, 3]), Shape::from([4, 5])])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("matmul") && e.contains("[2, 3]") && e.contains("[4, 5]"),
        "{e}"
    );
    let e = Op::Binary(BinaryOp::Add)
        .infer_shape(&[Shape::from([2])])
        .unwrap_err();
    assert!(matches!(e, SpecError::Arity { .. }));
    let conv = Op::Conv2d(Conv2dSpec::ungrouped(1, 1, (5, 1), 1, 0));
    let e = conv
        .infer_shape(&[
            Shape::from([1, 3, 3]),
            Shape::from([1, 1, 5, 1]),
            Shape::from([1]),
        ])
        .unwrap_err();
    assert!(matches!(e, SpecError::OpAttr { attr: "kH", .. }), "{e}");
    let e = Op::Permute { perm: vec![0, 0] }
        .infer_shape(&[Shape::from([2, 2])])
        .unwrap_err();
    assert!(matches!(e, SpecError::OpAttr { attr: "perm", .. }));
}

#[test]
fn vjp_refuses_to_read_what_was_not_saved() {
    // tanh saves only its output: asking for the VJP without it is an error, not a guess
    let op = Op::Unary(UnaryOp::Tanh);
    let x = t(&[1], &[0.5]);
    let saved = Saved {
        input_shapes: smallvec::smallvec![x.shape().clone()],
        inputs: smallvec::smallvec![Some(x.clone())],
        output: None,
    };
    assert!(matches!(
        op.vjp(&saved, &x),
        Err(SpecError::MissingSaved { .. })
    ));
}

fn q(num: i64, den: i64) -> Rational {
    Rational::new(num.into(), den.into())
}

#[test]
fn rational_evaluation_is_exact_where_floats_round() {
    // [1/10, 2/10] · [1, 1] = 3/10 exactly; in f64, 0.1 + 0.2 = 0.30000000000000004
    let a = Tensor::new([1, 2], vec![q(1, 10), q(2, 10)]).unwrap();
    let b = Tensor::new([2, 1], vec![q(1, 1), q(1, 1)]).unwrap();
    let y = Op::MatMul.forward(&[&a, &b]).unwrap();
    assert_eq!(y.data(), &[q(3, 10)]);
    let af = Tensor::<f64>::new([1, 2], vec![0.1, 0.2]).unwrap();
    let bf = Tensor::<f64>::new([2, 1], vec![1.0, 1.0]).unwrap();
    let yf = Op::MatMul.forward(&[&af, &bf]).unwrap();
    assert_ne!(
        yf.data()[0],
        0.3,
        "the float path rounds; the rational path does not"
    );

    // mean of [1, 2] / 3 over an axis: exactly 1/2
    let x = Tensor::new([2], vec![q(1, 3), q(2, 3)]).unwrap();
    let m = Op::ReduceMean { axis: 0 }.forward(&[&x]).unwrap();
    assert_eq!(m.data(), &[q(1, 2)]);
}

#[test]
fn rational_transcendental_ops_fail_with_a_typed_error() {
    let x = Tensor::new([1], vec![q(1, 2)]).unwrap();
    let e = Op::Unary(UnaryOp::Exp).forward(&[&x]).unwrap_err();
    assert!(matches!(e, SpecError::Transcendental { func: "exp", .. }));
    let e = Op::Softmax { axis: 0 }.forward(&[&x]).unwrap_err();
    assert!(matches!(e, SpecError::Transcendental { .. }));
}

#[test]
fn random_ops_are_deterministic_in_unit_interval_and_keyed() {
    let a = Op::RandUniform {
        seed: 7,
        key: 3,
        shape: Shape::from([64]),
    }
    .forward::<Tensor<f32>>(&[])
    .unwrap();
    let b = Op::RandUniform {
        seed: 7,
        key: 3,
        shape: Shape::from([64]),
    }
    .forward::<Tensor<f32>>(&[])
    .unwrap();
    let c = Op::RandUniform {
        seed: 7,
        key: 4,
        shape: Shape::from([64]),
    }
    .forward::<Tensor<f32>>(&[])
    .unwrap();
    assert!(a.bit_eq(&b));
    assert!(!a.bit_eq(&c));
    assert!(a.data().iter().all(|&v| (0.0..1.0).contains(&v)));
    let keep = Tensor::scalar(0.5f64);
    let m = Op::BernoulliMask {
        seed: 1,
        key: 2,
        shape: Shape::from([1000]),
    }
    .forward(&[&keep])
    .unwrap();
    let ones = m.data().iter().filter(|&&v| v == 1.0).count();
    assert!((400..600).contains(&ones), "{ones}");
}

#[test]
fn identity_rule_matches_the_shape_rule() {
    let mut ops: Vec<Op> = UnaryOp::ALL.iter().map(|&u| Op::Unary(u)).collect();
    ops.extend([Op::Scale { c: 2.0 }, Op::AddScalar { c: 1.0 }, Op::Detach]);
    for op in ops {
        assert!(op.identity_rule(), "{}", op.name());
        for s in [vec![], vec![0], vec![3, 1, 4], vec![1, 2, 3, 4, 5, 6, 7]] {
            let s = Shape::new(s);
            assert_eq!(op.infer_shape(std::slice::from_ref(&s)).unwrap(), s);
        }
        // and the dispatch still rejects a wrong operand count
        assert!(op.forward::<Tensor<f64>>(&[]).is_err());
    }
    for op in [
        Op::Sum,
        Op::Softmax { axis: 0 },
        Op::Flatten {
            from: Shape::from([1]),
        },
    ] {
        assert!(!op.identity_rule(), "{}", op.name());
    }
}

#[test]
fn a_pool_kind_is_named_by_its_padded_flag_not_by_its_padding() {
    // an `avg_pool2d_pad` node with padding 0 used to be called `avg_pool2d` in errors
    let spec = PoolSpec {
        kind: PoolKind::Avg,
        kernel_h: 2,
        kernel_w: 2,
        stride: 1,
        padding: 0,
        padded: true,
    };
    assert_eq!(spec.name(), "avg_pool2d_pad");
    let e = Op::Pool(spec)
        .infer_shape(&[Shape::from([1, 3])])
        .unwrap_err();
    assert!(e.to_string().contains("`avg_pool2d_pad`"), "{e}");
    // and an unpadded kind cannot carry padding
    let e = Op::Pool(PoolSpec {
        padded: false,
        padding: 1,
        ..spec
    })
    .infer_shape(&[Shape::from([1, 4, 4])])
    .unwrap_err();
    assert!(
        matches!(
            e,
            SpecError::OpAttr {
                attr: "padding",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_borrowed_saved_holds_what_for_op_copies_and_gives_the_same_vjp() {
    // tanh saves its output only, mul both operands, sum nothing but the shape
    let x = t(&[3], &[0.5, -1.25, 2.0]);
    let w = t(&[3], &[3.0, 0.1, -0.7]);
    let cases: [(Op, Vec<&Tensor<f64>>); 3] = [
        (Op::Unary(UnaryOp::Tanh), vec![&x]),
        (Op::Binary(BinaryOp::Mul), vec![&x, &w]),
        (Op::Sum, vec![&x]),
    ];
    for (op, args) in cases {
        let y = op.forward(&args).unwrap();
        let owned = Saved::for_op(&op, &args, &y);
        let view = Saved::borrowed(&op, &args, &y);
        assert_eq!(view.input_shapes, owned.input_shapes, "{}", op.name());
        assert_eq!(view.output.is_some(), op.saves_output(), "{}", op.name());
        for (i, (v, o)) in view.inputs.iter().zip(&owned.inputs).enumerate() {
            assert_eq!(v.is_some(), op.saves_input(i), "{} operand {i}", op.name());
            assert_eq!(v.is_some(), o.is_some(), "{} operand {i}", op.name());
        }
        let cot = Tensor::new(y.shape().clone(), vec![1.5; y.shape().size()]).unwrap();
        let (a, b) = (op.vjp(&owned, &cot).unwrap(), op.vjp(&view, &cot).unwrap());
        assert_eq!(a.len(), b.len());
        for (a, b) in a.iter().zip(&b) {
            assert!(match (a, b) {
                (Some(a), Some(b)) => a.bit_eq(b),
                (None, None) => true,
                _ => false,
            });
        }
    }
    // a view without what the op saves is refused like an owned one
    let op = Op::Unary(UnaryOp::Tanh);
    let mut view = Saved::borrowed(&op, &[&x], &x);
    view.output = None;
    assert!(matches!(
        op.vjp(&view, &x),
        Err(SpecError::MissingSaved { .. })
    ));
}

/// The tests below pin forward values the finite-difference checks cannot: a forward that is
/// wrong in a way its own VJP follows (a window that never moves, a line left out) still passes
/// `check_fd`, which compares the VJP with differences of that same forward.

#[test]
fn conv2d_sums_each_window_inside_the_padding_by_hand() {
    // 3x3 input 1..9, a 2x2 kernel of ones, padding 1, stride 1, bias 0.5: each output is the
    // sum of the (up to four) input cells its window covers
    let x = t(
        &[1, 1, 3, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    );
    let w = t(&[1, 1, 2, 2], &[1.0; 4]);
    let b = t(&[1], &[0.5]);
    let op = Op::Conv2d(Conv2dSpec::ungrouped(1, 1, (2, 2), 1, 1));
    let y = op.forward(&[&x, &w, &b]).unwrap();
    let sums = [
        1.0, 3.0, 5.0, 3.0, 5.0, 12.0, 16.0, 9.0, 11.0, 24.0, 28.0, 15.0, 7.0, 15.0, 17.0, 9.0,
    ];
    let want: Vec<f64> = sums.iter().map(|s| s + 0.5).collect();
    assert_eq!(y.shape().dims(), &[1, 1, 4, 4]);
    assert_eq!(y.data(), &want[..]);
}

/// Zero padding is zeros multiplied like any other cell (as im2col, the CPU and CUDA engines
/// and PyTorch compute it): a NaN weight reaches every output of its channel, the border ones
/// too, and an infinite cotangent at the border makes the weight gradient NaN (∞ · 0).
#[test]
fn conv2d_multiplies_the_padding_zeros() {
    let x = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    // the top-left tap is NaN; with a 2x2 kernel and padding 1 it reads padding at 5 of the 9
    // outputs (those in the first row or column)
    let w = t(&[1, 1, 2, 2], &[f64::NAN, 1.0, 1.0, 1.0]);
    let b = t(&[1], &[0.0]);
    let op = Op::Conv2d(Conv2dSpec::ungrouped(1, 1, (2, 2), 1, 1));
    let y = op.forward(&[&x, &w, &b]).unwrap();
    assert_eq!(y.shape().dims(), &[1, 1, 3, 3]);
    assert!(y.data().iter().all(|v| v.is_nan()), "{:?}", y.data());
    // a finite weight: the border outputs are the sums inside the image, as before
    let w = t(&[1, 1, 2, 2], &[1.0; 4]);
    let y = op.forward(&[&x, &w, &b]).unwrap();
    assert_eq!(y.data(), &[1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 3.0, 7.0, 4.0]);
    // an infinite cotangent at the corner output (0, 0), whose window holds one real cell
    let mut dy = vec![1.0; 9];
    dy[0] = f64::INFINITY;
    let dy = t(&[1, 1, 3, 3], &dy);
    let g = op.vjp(&Saved::for_op(&op, &[&x, &w, &b], &y), &dy).unwrap();
    let dw = g[1].as_ref().unwrap();
    // taps (0,0), (0,1), (1,0) read padding at output (0, 0): ∞ · 0 = NaN; tap (1,1) reads x[0]
    assert!(dw.data()[..3].iter().all(|v| v.is_nan()), "{:?}", dw.data());
    assert_eq!(dw.data()[3], f64::INFINITY);
    // the input gradient is only ever reached from real cells: x[0] through tap (1,1) at (0,0)
    let dx = g[0].as_ref().unwrap();
    assert_eq!(dx.data()[0], f64::INFINITY);
    assert!(
        dx.data()[1..].iter().all(|v| v.is_finite()),
        "{:?}",
        dx.data()
    );
}

/// The reference skips a padded term only where it cannot change the sum: bit for bit, its
/// forward and VJP equal sums written out over an explicitly zero-padded input, every term
/// added in order, on signed zeros, exact cancellations, and a non-finite weight in one
/// output channel and a non-finite cotangent at one output.
#[test]
fn conv2d_skipping_the_padding_changes_no_bit() {
    let (n, c, h, wd, oc, k) = (2, 2, 3, 3, 3, 2);
    let pick = [-1.5, -0.0, 0.0, 2.25, 1.5, -2.25, 0.5];
    let x: Vec<f64> = (0..n * c * h * wd).map(|i| pick[(i * 5) % 7]).collect();
    let mut w: Vec<f64> = (0..oc * c * k * k).map(|i| pick[(i * 3 + 1) % 7]).collect();
    w[c * k * k + 5] = f64::INFINITY; // output channel 1 only
    let b = [0.0, -0.0, 1.0];
    for (stride, padding) in [(1, 1), (2, 1), (1, 2)] {
        let op = Op::Conv2d(Conv2dSpec::ungrouped(c, oc, (k, k), stride, padding));
        let (xt, wt, bt) = (t(&[n, c, h, wd], &x), t(&[oc, c, k, k], &w), t(&[oc], &b));
        let y = op.forward(&[&xt, &wt, &bt]).unwrap();
        let (hp, wp) = (h + 2 * padding, wd + 2 * padding);
        let (ho, wo) = ((hp - k) / stride + 1, (wp - k) / stride + 1);
        let mut xp = vec![0.0; n * c * hp * wp];
        for (i, v) in x.iter().enumerate() {
            let (q, col) = (i / wd, i % wd);
            let (q, row) = (q / h, q % h);
            xp[(q * hp + row + padding) * wp + col + padding] = *v;
        }
        let at = |bn: usize, ci: usize, i: usize, j: usize, u: usize, v: usize| {
            ((bn * c + ci) * hp + i * stride + u) * wp + j * stride + v
        };
        let mut want = Vec::new();
        for bn in 0..n {
            for o in 0..oc {
                for i in 0..ho {
                    for j in 0..wo {
                        let mut acc = 0.0;
                        for ci in 0..c {
                            for u in 0..k {
                                for v in 0..k {
                                    acc += xp[at(bn, ci, i, j, u, v)]
                                        * w[((o * c + ci) * k + u) * k + v];
                                }
                            }
                        }
                        want.push(acc + b[o]);
                    }
                }
            }
        }
        let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(y.data()),
            bits(&want),
            "forward, stride {stride} padding {padding}"
        );
        // the VJP, with a cotangent of signed zeros and one infinity
        let mut dy: Vec<f64> = (0..y.data().len()).map(|i| pick[(i * 2 + 3) % 7]).collect();
        dy[wo + 1] = f64::NEG_INFINITY;
        let mut dw = vec![0.0; w.len()];
        for bn in 0..n {
            for o in 0..oc {
                for i in 0..ho {
                    for j in 0..wo {
                        let d = dy[((bn * oc + o) * ho + i) * wo + j];
                        for ci in 0..c {
                            for u in 0..k {
                                for v in 0..k {
                                    dw[((o * c + ci) * k + u) * k + v] +=
                                        d * xp[at(bn, ci, i, j, u, v)];
                                }
                            }
                        }
                    }
                }
            }
        }
        let dyt = t(y.shape().dims(), &dy);
        let g = op
            .vjp(&Saved::for_op(&op, &[&xt, &wt, &bt], &y), &dyt)
            .unwrap();
        let got = g[1].as_ref().unwrap();
        assert_eq!(
            bits(got.data()),
            bits(&dw),
            "dW, stride {stride} padding {padding}"
        );
    }
}

#[test]
fn softmax_and_log_softmax_normalise_every_line_of_their_axis() {
    let x = t(&[2, 3], &[1.0, 2.0, 3.0, 0.0, -1.0, 4.0]);
    let row = |v: [f64; 3]| {
        let z: f64 = v.iter().map(|a| a.exp()).sum();
        v.map(|a| a.exp() / z)
    };
    let (r0, r1) = (row([1.0, 2.0, 3.0]), row([0.0, -1.0, 4.0]));
    let y = Op::Softmax { axis: 1 }.forward(&[&x]).unwrap();
    let ly = Op::LogSoftmax { axis: 1 }.forward(&[&x]).unwrap();
    for (k, want) in r0.iter().chain(&r1).enumerate() {
        assert!((y.data()[k] - want).abs() < 1e-15, "softmax {k}");
        assert!((ly.data()[k] - want.ln()).abs() < 1e-14, "log_softmax {k}");
    }
    // along axis 0 each column of two is normalised
    let y = Op::Softmax { axis: 0 }.forward(&[&x]).unwrap();
    for c in 0..3 {
        let (a, b) = (x.data()[c], x.data()[3 + c]);
        let want = a.exp() / (a.exp() + b.exp());
        assert!((y.data()[c] - want).abs() < 1e-15, "column {c}");
        assert!(
            (y.data()[c] + y.data()[3 + c] - 1.0).abs() < 1e-15,
            "column {c}"
        );
    }
}

#[test]
fn max_pool_takes_the_largest_cell_of_each_window_and_a_nan_wins() {
    let op = Op::Pool(pool(PoolKind::Max, (2, 2), 2, 0));
    let x = t(&[1, 2, 2], &[1.0, 5.0, 3.0, 2.0]);
    let y = op.forward(&[&x]).unwrap();
    assert_eq!(y.data(), &[5.0]);
    let g = op
        .vjp(&Saved::for_op(&op, &[&x], &y), &t(&[1, 1, 1], &[1.0]))
        .unwrap();
    assert_eq!(g[0].as_ref().unwrap().data(), &[0.0, 1.0, 0.0, 0.0]);
    // PyTorch's max_pool2d propagates a NaN, wherever it is in the window
    let x = t(&[1, 2, 2], &[1.0, 5.0, f64::NAN, 2.0]);
    assert!(op.forward(&[&x]).unwrap().data()[0].is_nan());
}

#[test]
fn binary_ops_are_named_by_their_wire_names() {
    assert_eq!(BinaryOp::Add.name(), "add");
    assert_eq!(BinaryOp::Max.name(), "max_elem");
    for op in BinaryOp::ALL {
        assert_eq!(op.name(), Op::Binary(op).name());
        assert!(!op.name().is_empty());
    }
}

#[test]
fn cross_entropy_checks_its_class_ids_and_no_other_operand() {
    let op = Op::CrossEntropy {
        reduction: Reduction::Mean,
    };
    let shapes = [Shape::new(vec![2, 3]), Shape::new(vec![2])];
    assert!(op.check_data(1, &shapes, &[0.0, 2.0]).is_ok());
    for bad in [[0.0, 3.0], [-1.0, 0.0], [0.5, 1.0]] {
        assert!(op.check_data(1, &shapes, &bad).is_err(), "{bad:?}");
    }
    // a bad class id names its operand for diagnostics
    let e = op.check_data(1, &shapes, &[0.0, 3.0]).unwrap_err();
    assert_eq!(e.field(), Some("target"), "{e}");
    // operand 0 holds logits, any value
    assert!(op.check_data(0, &shapes, &[7.5, -3.0]).is_ok());
    assert!(Op::MatMul.check_data(1, &shapes, &[7.5]).is_ok());
}

#[test]
fn a_norm_eps_must_be_finite_and_non_negative() {
    for eps in [0.0, 1e-5] {
        let op = Op::LayerNorm {
            axis: 1,
            eps: Some(eps),
        };
        assert!(op.infer_shape(&[Shape::new(vec![2, 3])]).is_ok());
    }
    for eps in [-1e-5, f64::INFINITY, f64::NAN, f64::NEG_INFINITY] {
        let e = Op::LayerNorm {
            axis: 1,
            eps: Some(eps),
        }
        .infer_shape(&[Shape::new(vec![2, 3])])
        .unwrap_err();
        assert!(e.to_string().contains("eps"), "{eps}: {e}");
    }
}

#[test]
fn splitmix64_is_the_published_generator() {
    // the first two outputs of SplitMix64 from state 0 (Vigna's reference C code)
    assert_eq!(random::splitmix64(0), 0xE220_A839_7B1D_CDAF);
    assert_eq!(
        random::splitmix64(0x9E37_79B9_7F4A_7C15),
        0x6E78_9E6A_A1B9_65F4
    );
}

#[test]
fn attribute_values_print_as_the_wire_writes_them() {
    use desc::AttrValue;
    assert_eq!(AttrValue::Int(3).to_string(), "3");
    assert_eq!(AttrValue::Float(1e-5).to_string(), "1e-5");
    assert_eq!(
        AttrValue::Shape(Shape::from([2, 3])).to_string(),
        Shape::from([2, 3]).to_string()
    );
    assert_eq!(AttrValue::List(vec![1, 0]).to_string(), "[1, 0]");
    assert_eq!(AttrValue::Str("tanh").to_string(), "\"tanh\"");
}

#[test]
fn every_op_kind_has_a_prototype_of_its_own_name_and_the_graph_kinds_none() {
    for d in desc::OPS {
        match d.prototype() {
            Some(op) => assert_eq!(op.name(), d.name),
            None => assert!(["input", "const"].contains(&d.name), "{}", d.name),
        }
    }
    assert!(desc::OPS.iter().filter(|d| d.prototype().is_some()).count() > 40);
}

#[test]
fn broadcast_reads_each_target_from_its_right_aligned_source() {
    // [2, 3] to [2, 2, 3]: both source axes are real, so the offset is row-major in the source
    let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let op = Op::BroadcastTo {
        from: Shape::from([2, 3]),
        to: Shape::from([2, 2, 3]),
    };
    let y = op.forward(&[&x]).unwrap();
    assert_eq!(
        y.data(),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    // [2, 1] to [2, 3]: the size-1 axis repeats
    let x = t(&[2, 1], &[7.0, 8.0]);
    let op = Op::BroadcastTo {
        from: Shape::from([2, 1]),
        to: Shape::from([2, 3]),
    };
    assert_eq!(
        op.forward(&[&x]).unwrap().data(),
        &[7.0, 7.0, 7.0, 8.0, 8.0, 8.0]
    );
}

#[test]
fn concat_takes_two_or_more_operands_agreeing_off_its_axis() {
    let op = Op::Concat { axis: 1 };
    let s = |d: &[usize]| Shape::from_slice(d);
    assert_eq!(
        op.infer_shape(&[s(&[2, 3]), s(&[2, 4])]).unwrap(),
        s(&[2, 7])
    );
    assert_eq!(
        op.infer_shape(&[s(&[2, 3]), s(&[2, 1]), s(&[2, 2])])
            .unwrap(),
        s(&[2, 6])
    );
    assert!(matches!(
        op.infer_shape(&[s(&[2, 3])]),
        Err(SpecError::Arity { .. })
    ));
    for bad in [[s(&[2, 3]), s(&[3, 3])], [s(&[2, 3]), s(&[2, 3, 1])]] {
        assert!(
            matches!(op.infer_shape(&bad), Err(SpecError::OpShape { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn a_pool_padding_may_not_exceed_half_its_kernel() {
    // every padding here is positive: the `_pad` kind
    let spec = |kernel, padding| Op::Pool(pool(PoolKind::Max, (kernel, kernel), 1, padding));
    let x = Shape::from([1, 5, 5]);
    assert!(spec(3, 1).infer_shape(std::slice::from_ref(&x)).is_ok());
    assert!(spec(4, 2).infer_shape(std::slice::from_ref(&x)).is_ok());
    assert!(spec(3, 2).infer_shape(std::slice::from_ref(&x)).is_err());
    assert!(spec(4, 3).infer_shape(std::slice::from_ref(&x)).is_err());
    // each side against its own kernel extent: 2 is over half of a width of 2
    let wide = Op::Pool(pool(PoolKind::Max, (5, 2), 1, 2));
    assert!(wide.infer_shape(&[x]).is_err());
}

#[test]
fn window_out_counts_the_windows_that_fit_and_refuses_zero_sizes() {
    assert_eq!(window_out(5, 2, 1, 0), Some(4));
    assert_eq!(window_out(5, 3, 2, 1), Some(3));
    assert_eq!(window_out(3, 3, 1, 0), Some(1));
    assert_eq!(window_out(2, 3, 1, 0), None);
    assert_eq!(window_out(5, 0, 1, 0), None);
    assert_eq!(window_out(5, 2, 0, 0), None);
}

#[test]
fn layer_norm_normalises_over_every_axis_from_its_own_by_hand() {
    // [2, 3] over axis 1 (each row) and over axis 0 (all six), eps 0
    let x = t(&[2, 3], &[1.0, 2.0, 3.0, 2.0, 4.0, 9.0]);
    let norm = |v: &[f64]| -> Vec<f64> {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / n;
        v.iter().map(|a| (a - mean) / var.sqrt()).collect()
    };
    let rows: Vec<f64> = [norm(&x.data()[..3]), norm(&x.data()[3..])].concat();
    for (axis, want) in [(1, rows), (0, norm(x.data()))] {
        let op = Op::LayerNorm {
            axis,
            eps: Some(0.0),
        };
        let y = op.forward(&[&x]).unwrap();
        for (k, (g, w)) in y.data().iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-14, "axis {axis} element {k}: {g} vs {w}");
        }
    }
}

#[test]
fn rational_sums_are_exact() {
    // 1/2 + 1/3 + 1/6 = 1, through the rational accumulator
    let r = |n: i64, d: i64| Rational::new(n.into(), d.into());
    let x = Tensor::new([3], vec![r(1, 2), r(1, 3), r(1, 6)]).unwrap();
    let y = Op::Sum.forward(&[&x]).unwrap();
    assert_eq!(y.data(), &[r(1, 1)]);
    let y = Op::ReduceSum { axis: 0 }.forward(&[&x]).unwrap();
    assert_eq!(y.data(), &[r(1, 1)]);
}

#[test]
fn only_the_graph_kinds_are_inputs_or_constants() {
    let d = |n: &str| desc::lookup(n).unwrap();
    assert!(d("input").is_input() && !d("input").is_const());
    assert!(d("const").is_const() && !d("const").is_input());
    assert!(!d("add").is_input() && !d("add").is_const());
}

#[test]
fn a_declared_operand_shape_must_be_the_operands() {
    let op = Op::Reshape {
        from: Shape::from([2, 3]),
        to: Shape::from([3, 2]),
    };
    assert_eq!(
        op.infer_shape(&[Shape::from([2, 3])]).unwrap(),
        Shape::from([3, 2])
    );
    let e = op.infer_shape(&[Shape::from([3, 2])]).unwrap_err();
    assert_eq!(e.field(), Some("in_shape"), "{e}");
}

#[test]
fn swapping_the_first_two_axes_needs_two() {
    assert_eq!(
        Op::SwapFirstTwo
            .infer_shape(&[Shape::from([2, 3, 4])])
            .unwrap(),
        Shape::from([3, 2, 4])
    );
    assert_eq!(
        Op::SwapFirstTwo
            .infer_shape(&[Shape::from([2, 3])])
            .unwrap(),
        Shape::from([3, 2])
    );
    assert!(Op::SwapFirstTwo.infer_shape(&[Shape::from([3])]).is_err());
}

#[test]
fn a_bad_class_id_is_named_outside_or_not_integral() {
    let op = Op::CrossEntropy {
        reduction: Reduction::Mean,
    };
    let shapes = [Shape::from([1, 3]), Shape::from([1])];
    let message = |v: f64| op.check_data(1, &shapes, &[v]).unwrap_err().to_string();
    for outside in [3.0, 7.0] {
        assert!(message(outside).contains("outside"), "{}", message(outside));
    }
    for odd in [0.5, f64::NAN, f64::INFINITY, -0.5] {
        assert!(
            message(odd).contains("not an integral class id"),
            "{}",
            message(odd)
        );
    }
}

#[test]
fn layer_norm_of_an_empty_tensor_is_empty() {
    let x = Tensor::<f64>::new([2, 0], vec![]).unwrap();
    let y = Op::LayerNorm { axis: 1, eps: None }.forward(&[&x]).unwrap();
    assert_eq!(y.shape(), x.shape());
}

#[test]
fn conv2d_declares_its_weight_and_bias() {
    let spec = Conv2dSpec::ungrouped(2, 3, (4, 5), 1, 0);
    assert_eq!(
        spec.payload_shapes(),
        vec![Shape::from([3, 2, 4, 5]), Shape::from([3])]
    );
}

#[test]
fn gelu_forms_are_read_from_their_wire_names() {
    for a in GeluApprox::ALL {
        assert_eq!(GeluApprox::from_wire(a.wire()), Some(a));
    }
    assert_eq!(GeluApprox::from_wire("tanh"), Some(GeluApprox::Tanh));
    assert_eq!(GeluApprox::from_wire("erf"), None);
}

#[test]
fn exact_values_read_as_floats_only_when_they_are_floats() {
    let r = |n: i64, d: i64| Rational::new(n.into(), d.into());
    let x = Tensor::new([3], vec![r(1, 2), r(1, 3), r(-3, 1)]).unwrap();
    let v = <Tensor<Rational> as crate::EngineValue>::values_f64(&x).unwrap();
    assert_eq!((v[0], v[2]), (0.5, -3.0));
    assert!(v[1].is_nan(), "1/3 is no float");
    assert_eq!(x.to_f64s()[..2], [0.5, 1.0 / 3.0]);
    let f = t(&[2], &[0.1, -2.5]);
    assert_eq!(
        <Tensor<f64> as crate::EngineValue>::values_f64(&f).unwrap(),
        vec![0.1, -2.5]
    );
    assert_eq!(f.to_f64s(), vec![0.1, -2.5]);
    assert_eq!(<Rational as crate::Scalar>::from_f64_exact_half(), r(1, 2));
    assert_eq!(
        format!("{:?}", Shape::from([2, 3])),
        Shape::from([2, 3]).to_string()
    );
}

#[test]
fn uniform_values_follow_the_documented_stream() {
    // docs/ir-format.md: stream = splitmix64(seed ^ splitmix64(key)),
    // u = (splitmix64(stream + i) >> 40) / 2^24; the numerators computed from that formula in
    // Python's arbitrary-precision integers
    let two24 = (1u64 << 24) as f64;
    assert_eq!(random::uniform_at(1, 2, 3), 15_135_132.0 / two24);
    assert_eq!(random::uniform_at(0, 0, 0), 2_327_157.0 / two24);
    assert_eq!(random::uniform_at(7, 5, 1), 3_166_430.0 / two24);
}

#[test]
fn conv2d_strides_over_each_image_of_a_batch_by_hand() {
    // two images (the second ten times the first), a 2x2 kernel of ones, stride 2, padding 1:
    // the windows cover rows/columns {-1, 0} and {1, 2} of 3x3 images holding 1..9
    let first = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
    let data: Vec<f64> = first
        .iter()
        .chain(&first.map(|v| 10.0 * v))
        .copied()
        .collect();
    let x = t(&[2, 1, 3, 3], &data);
    let spec = Conv2dSpec::ungrouped(1, 1, (2, 2), 2, 1);
    assert_eq!(spec.output_hw(3, 3).unwrap(), (2, 2));
    let y = Op::Conv2d(spec)
        .forward(&[&x, &t(&[1, 1, 2, 2], &[1.0; 4]), &t(&[1], &[0.0])])
        .unwrap();
    assert_eq!(y.data(), &[1.0, 5.0, 11.0, 28.0, 10.0, 50.0, 110.0, 280.0]);
}

#[test]
fn a_pool_names_its_output_size() {
    let spec = pool(PoolKind::Avg, (3, 2), 2, 1);
    // (5 + 2 - 3) / 2 + 1 = 3 rows, (6 + 2 - 2) / 2 + 1 = 4 columns
    assert_eq!(spec.output_hw(5, 6).unwrap(), (3, 4));
}

#[test]
fn the_conv_workspace_of_a_small_layer_by_its_documented_parts() {
    // one 1x1 channel map of 2x2 through a 1x1 kernel: 4 patch columns of 1 tap row, their
    // 1-channel output (forward: 4 + 4 = 8); the backward chunk's tap rows and gradient
    // (2·4) and its cotangent block (4), a partial weight gradient (1) and the bias row (1)
    let spec = Conv2dSpec::ungrouped(1, 1, (1, 1), 1, 0);
    let s = Shape::from([1, 1, 2, 2]);
    assert_eq!(spec.workspace_elements(&s, &s, Pass::Eval), 8);
    assert_eq!(spec.workspace_elements(&s, &s, Pass::Grad), 14);
    // the op declares the convolution's; `matmul` declares none
    let conv = Op::Conv2d(spec).workspace_elements(std::slice::from_ref(&s), &s, Pass::Grad);
    assert_eq!(conv, 14);
    // the fused kind adds the masked cotangent (4) to the backward only
    let fused = Op::Conv2dRelu(spec);
    assert_eq!(
        fused.workspace_elements(std::slice::from_ref(&s), &s, Pass::Eval),
        8
    );
    assert_eq!(
        fused.workspace_elements(std::slice::from_ref(&s), &s, Pass::Grad),
        18
    );
    assert_eq!(
        Op::MatMul.workspace_elements(&[s.clone(), s.clone()], &s, Pass::Grad),
        0
    );
}

#[test]
fn a_linear_over_few_rows_declares_its_transposed_output() {
    let ws = |x: &[usize], w: &[usize], y: &[usize]| {
        let (x, w, y) = (Shape::from(x), Shape::from(w), Shape::from(y));
        let b = Shape::from([w.dims()[0]]);
        Op::Linear.workspace_elements(&[x, w, b], &y, Pass::Eval)
    };
    // 64·(512 + 512) = 65,536 elements of x packed and yᵀ moved against 262,144 of W packed
    assert_eq!(ws(&[64, 512], &[512, 512], &[64, 512]), 64 * 512);
    // leading axes are rows: 2·3 = 6 rows of 100 outputs
    assert_eq!(ws(&[2, 3, 200], &[100, 200], &[2, 3, 100]), 6 * 100);
    // the GPT's projections: 768·(128 + 384) against 128·384, W packed
    assert_eq!(ws(&[768, 128], &[384, 128], &[768, 384]), 0);
    // one row: a matrix-vector product either way
    assert_eq!(ws(&[1, 512], &[512, 512], &[1, 512]), 0);
}

/// The geometry of a square convolution (`k × k`, stride `s`, padding `pad`) of one `hw × hw`
/// image.
fn geo(c: usize, oc: usize, k: usize, s: usize, pad: usize, hw: usize) -> ConvGeometry {
    Conv2dSpec::ungrouped(c, oc, (k, k), s, pad)
        .geometry(&Shape::from([1, c, hw, hw]))
        .unwrap()
}

#[test]
fn lanes_take_convs_with_16_channels_out_and_at_most_256_positions() {
    // ResNet-18's 7 × 7 layers, its stride-2 3×3 and 1×1 layers to 7 × 7 and 14 × 14, and 16
    // × 16 outputs from 16 channels
    for g in [
        geo(512, 512, 3, 1, 1, 7),
        geo(256, 512, 3, 2, 1, 14),
        geo(256, 512, 1, 2, 0, 14),
        geo(128, 256, 3, 2, 1, 28),
        geo(4, 16, 3, 1, 1, 16),
    ] {
        assert!(g.forward_lanes(), "{g:?}");
    }
    // not: 28 × 28 outputs, the 112 × 112 stem, 15 channels out, 17 × 17 outputs
    for g in [
        geo(64, 128, 3, 2, 1, 56),
        geo(3, 64, 7, 2, 3, 224),
        geo(4, 15, 3, 1, 1, 8),
        geo(4, 16, 3, 1, 1, 17),
    ] {
        assert!(!g.forward_lanes(), "{g:?}");
    }
    // blocks of 16 channels, zeros past the last: 20 channels take 32 rows of C·kH·kW
    assert_eq!(geo(4, 20, 3, 1, 1, 8).lanes_weight_elements(), 32 * 36);
    // the 7 × 7 × 512 layer's workspace: the implicit product's (its phase-split image
    // 512·9·9 plus 17 of slack, its wide output of one chunk of 7 rows of 9 columns, rounded
    // to 64, per channel) and the packed weights, 512 × 4,608
    let spec = Conv2dSpec::ungrouped(512, 512, (3, 3), 1, 1);
    let x = Shape::from([1, 512, 7, 7]);
    assert_eq!(
        spec.workspace_elements(&x, &x, Pass::Eval),
        512 * 81 + 17 + 512 * 64 + 512 * 4608
    );
}

#[test]
fn winograd_takes_3x3_stride_1_convs_with_16_channels_and_outputs_of_12_a_side() {
    // 4 × 4 tiles from 16 outputs a side (ResNet-18's 56 × 56 and 28 × 28 layers), 2 × 2 from
    // 12 (its 14 × 14 ones); padding 0 to 2
    for (g, tile) in [
        (geo(64, 64, 3, 1, 1, 56), 4),
        (geo(128, 128, 3, 1, 1, 28), 4),
        (geo(16, 16, 3, 1, 1, 16), 4),
        (geo(16, 16, 3, 1, 0, 18), 4),
        (geo(16, 16, 3, 1, 2, 14), 4),
        (geo(256, 256, 3, 1, 1, 14), 2),
        (geo(16, 16, 3, 1, 1, 15), 2),
        (geo(16, 16, 3, 1, 1, 12), 2),
    ] {
        assert_eq!(g.winograd_tile(), Some(tile), "{g:?}");
        assert!(g.forward_winograd());
    }
    // not: 15 channels in or out, 11 outputs a side, stride 2, 5×5, padding 3
    for g in [
        geo(15, 16, 3, 1, 1, 16),
        geo(16, 15, 3, 1, 1, 16),
        geo(16, 16, 3, 1, 1, 11),
        geo(512, 512, 3, 1, 1, 7),
        geo(64, 64, 3, 2, 1, 56),
        geo(64, 64, 5, 1, 2, 56),
        geo(16, 16, 3, 1, 3, 12),
    ] {
        assert_eq!(g.winograd_tile(), None, "{g:?}");
        assert!(!g.forward_winograd());
    }
    // 28 × 28 outputs in 4 × 4 tiles: 7 × 7, each tile row one more in the wide count
    let g = geo(128, 128, 3, 1, 1, 28);
    assert_eq!(
        (g.winograd_tiles(4), g.winograd_wide_tiles(4)),
        ((7, 7), 56)
    );
    // a task's scratch: the input's 16 phase planes of 9 × 8, 36 rows of 56 and a row of 32
    // (3,200), the output's 40 rows (2,240) or the weights' 27 × 128 (3,456), the largest
    assert_eq!(g.winograd_task_elements(4), 27 * 128);
    assert_eq!(g.winograd_image_elements(4), 36 * 256 * 56 + 8 * 3456);
    assert_eq!(g.winograd_weight_elements(4), 36 * 128 * 128 + 8 * 3456);
    // 14 × 14 outputs in 2 × 2 tiles: 7 × 7, 56 wide; the input's 4 phase planes of 9 × 8, 16
    // rows of 56 and a row of 16 (1,200), the output's 12 rows (672), the weights' 21 × 256
    // (5,376)
    let g = geo(256, 256, 3, 1, 1, 14);
    assert_eq!(
        (g.winograd_tiles(2), g.winograd_wide_tiles(2)),
        ((7, 7), 56)
    );
    assert_eq!(g.winograd_task_elements(2), 21 * 256);
    assert_eq!(g.winograd_image_elements(2), 16 * 512 * 56 + 8 * 5376);
    assert_eq!(g.winograd_weight_elements(2), 16 * 256 * 256 + 8 * 5376);
    // edge tiles round up: 18 outputs a side are 5 tiles of 4, 9 of 2
    assert_eq!(geo(16, 16, 3, 1, 1, 18).winograd_tiles(4), (5, 5));
    assert_eq!(geo(16, 16, 3, 1, 1, 18).winograd_tiles(2), (9, 9));
}

#[test]
fn an_implicit_conv_counts_its_padded_image_and_wide_output() {
    // ResNet's 56x56 layer (64 channels in and out, 3x3, padding 1) runs as an implicit
    // product: the padded image 64·58·58 = 215,296 plus kW − 1 + 15 = 17 of slack, and the
    // wide output: chunks of at least 5 rows (257 of the 58 wide columns), 56 / 5 = 11 of them
    // (rows k·56/11: ten of 5 rows, 290 columns rounded to 304, and one of 6, 348 → 352);
    // no patch matrix (through it, the forward alone would count (576 + 64)·3,248)
    let spec = Conv2dSpec::ungrouped(64, 64, (3, 3), 1, 1);
    let (x, y) = (Shape::from([1, 64, 56, 56]), Shape::from([1, 64, 56, 56]));
    let g = spec.geometry(&x).unwrap();
    assert!(g.forward_implicit());
    let chunks = g.implicit_row_chunks();
    assert_eq!(chunks.len(), 11);
    assert_eq!(chunks.iter().filter(|&&(_, n)| n == 5).count(), 10);
    assert_eq!(chunks.last(), Some(&(50, 6)));
    // it is also a Winograd geometry (3×3, stride 1, 64 channels, 56 × 56), whose buffers
    // are the larger: 36 × (64 + 64) × 14·15 wide tiles and 8 tasks' scratch (16 phase planes
    // of 16 × 15, 36 rows of 210 and a row of 60: 11,460), and its transformed weights
    // 36·64·64 with as much scratch
    assert_eq!(g.winograd_tile(), Some(4));
    assert_eq!(g.winograd_tiles(4), (14, 14));
    assert_eq!(g.winograd_wide_tiles(4), 14 * 15);
    assert_eq!(g.winograd_task_elements(4), 11_460);
    let winograd = 36 * 128 * 210 + 8 * 11_460 + 36 * 64 * 64 + 8 * 11_460;
    // (967,680 transformed values against the implicit forward's 64 · 3,392 = 217,088)
    assert_eq!(
        spec.workspace_elements(&x, &y, Pass::Eval),
        215_296 + 17 + winograd
    );
    // without padding the image is still copied, with its slack: 64·56·56 + 17, and the wide
    // output: 54 rows of 56 columns in 54 / 5 = 10 chunks (rows k·54/10: six of 5 rows, 280
    // columns rounded to 288, and four of 6, 336, whole vectors already)
    let spec = Conv2dSpec::ungrouped(64, 64, (3, 3), 1, 0);
    let y = Shape::from([1, 64, 54, 54]);
    assert!(spec.geometry(&x).unwrap().forward_implicit());
    // (Winograd too: 54 / 4 → 14 × 14 tiles, as above)
    assert_eq!(
        spec.workspace_elements(&x, &y, Pass::Eval),
        200_704 + 17 + winograd
    );
    // an implicit geometry that is not Winograd's (5×5): the wide output alone, 60 rows of
    // 64 columns in 60 / 5 = 12 chunks of 320
    let spec = Conv2dSpec::ungrouped(64, 64, (5, 5), 1, 2);
    let g = spec.geometry(&Shape::from([1, 64, 60, 60])).unwrap();
    assert!(g.forward_implicit() && !g.forward_winograd());
    assert_eq!(g.implicit_row_chunks().len(), 12);
    assert_eq!(
        spec.workspace_elements(
            &Shape::from([1, 64, 60, 60]),
            &Shape::from([1, 64, 60, 60]),
            Pass::Eval
        ),
        64 * 64 * 64 + 4 + 15 + 64 * 12 * 320
    );
    // few channels too (not Winograd's): conv_train's 8 → 16 layer, one chunk of 24·26 = 624 columns
    let spec = Conv2dSpec::ungrouped(8, 16, (3, 3), 1, 0);
    let x8 = Shape::from([1, 8, 26, 26]);
    let g = spec.geometry(&x8).unwrap();
    assert!(g.forward_implicit() && !g.forward_winograd());
    assert_eq!(g.implicit_row_chunks(), vec![(0, 12), (12, 12)]);
    assert_eq!(g.implicit_output_elements(), 16 * (2 * 320));
    // its backward: the input gradient as the transposed convolution (16 channels of 24×24
    // padded by 2 to 28×28, plus 17 of slack: 12,561; its wide output, 8 channels of two
    // chunks of 13 rows × 28 = 364 columns rounded to 368: 5,888) or the weight gradient (the
    // 8 × 26 × 26 image plus 17: 5,425; the wide cotangent 16 × 624: 9,984), the larger
    assert_eq!(g.implicit_backward_elements(), 12_561 + 5_888);
    let t = g.transposed().unwrap();
    assert_eq!((t.c, t.h, t.oc, t.pad, t.ho, t.wo), (16, 24, 8, 2, 26, 26));
    // stride 2 with a small kernel and 1×1 images-as-patch-matrices keep their own paths; a
    // 7×7 stride-2 stem (patch matrix 49/4 images) is implicit, over 4 phases of 115×115
    let s2 = Conv2dSpec::ungrouped(8, 16, (3, 3), 2, 1)
        .geometry(&x8)
        .unwrap();
    assert!(!s2.forward_implicit());
    let stem = Conv2dSpec::ungrouped(3, 64, (7, 7), 2, 3)
        .geometry(&Shape::from([1, 3, 224, 224]))
        .unwrap();
    assert!(stem.forward_implicit());
    assert_eq!((stem.phase_h(), stem.phase_w(), stem.ho), (115, 115, 112));
    // tap (c, u, v) = (1, 3, 5): phase (1, 1), channel 1, row 1, column 2
    assert_eq!(
        stem.implicit_shift(49 + 3 * 7 + 5),
        (3 * 3 + 1) * 115 * 115 + 115 + 2
    );
    assert_eq!(stem.implicit_image_elements(), 4 * 3 * 115 * 115 + 3 + 15);
    let one = Conv2dSpec::ungrouped(8, 16, (1, 1), 1, 0)
        .geometry(&x8)
        .unwrap();
    assert!(!one.forward_implicit());
    assert_eq!(one.implicit_backward_elements(), 0);
    assert!(s2.transposed().is_none());
    // no transposed input gradient with 2 input channels, a padding of k, or a 3×5 kernel
    let x2 = Shape::from([1, 2, 26, 26]);
    assert!(Conv2dSpec::ungrouped(2, 16, (3, 3), 1, 1)
        .geometry(&x2)
        .unwrap()
        .transposed()
        .is_none());
    assert!(Conv2dSpec::ungrouped(8, 16, (3, 3), 1, 3)
        .geometry(&x8)
        .unwrap()
        .transposed()
        .is_none());
    assert!(Conv2dSpec::ungrouped(8, 16, (3, 5), 1, 1)
        .geometry(&x8)
        .unwrap()
        .transposed()
        .is_none());
}

/// The implicit forward's row chunks cover every output row once, in order, each of at least
/// `PATCH_CHUNK_MIN_UNITS` (257) wide columns when there are several; ResNet's 28×28 layer gets
/// more than one (two threads have work).
#[test]
fn implicit_row_chunks_cover_the_rows_and_are_wide_enough() {
    for (hw, pad) in [(56, 1), (28, 1), (14, 1), (40, 1), (3, 0), (300, 1)] {
        let g = Conv2dSpec::ungrouped(32, 16, (3, 3), 1, pad)
            .geometry(&Shape::from([32, hw, hw]))
            .unwrap();
        let chunks = g.implicit_row_chunks();
        let mut next = 0;
        for &(i0, n) in &chunks {
            assert_eq!(i0, next, "{hw}×{hw}");
            assert!(chunks.len() == 1 || n * g.wp() >= 257, "{hw}×{hw}");
            next += n;
        }
        assert_eq!(next, g.ho, "{hw}×{hw}");
        assert_eq!(chunks.len() > 1, hw >= 28, "{hw}×{hw}");
    }
}

#[test]
fn concat_lays_its_operands_side_by_side_along_the_axis() {
    let a = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = t(&[2, 1], &[5.0, 6.0]);
    let y = Op::Concat { axis: 1 }.forward(&[&a, &b]).unwrap();
    assert_eq!(y.data(), &[1.0, 2.0, 5.0, 3.0, 4.0, 6.0]);
    let y = Op::Concat { axis: 0 }.forward(&[&a, &a]).unwrap();
    assert_eq!(y.data(), &[1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn softmax_subtracts_each_lines_own_maximum() {
    // along axis 0 each column's maximum is 1000 in a different row: subtracting another
    // line's maximum (or none) overflows exp to inf and gives NaN
    let x = t(&[2, 2], &[1000.0, 0.0, 0.0, 1000.0]);
    for op in [Op::Softmax { axis: 0 }, Op::LogSoftmax { axis: 0 }] {
        let y = op.forward(&[&x]).unwrap();
        assert!(
            y.data().iter().all(|v| v.is_finite()),
            "{}: {:?}",
            op.name(),
            y.data()
        );
    }
    let y = Op::Softmax { axis: 0 }.forward(&[&x]).unwrap();
    assert_eq!(y.data(), &[1.0, 0.0, 0.0, 1.0]);
    let y = Op::LogSoftmax { axis: 0 }.forward(&[&x]).unwrap();
    assert_eq!(y.data(), &[0.0, -1000.0, -1000.0, 0.0]);
}

#[test]
fn rational_arithmetic_is_exact() {
    use crate::Scalar;
    let r = |n: i64, d: i64| Rational::new(n.into(), d.into());
    assert_eq!(r(1, 2).sub(&r(1, 3)), r(1, 6));
    assert_eq!(r(1, 2).add(&r(1, 3)), r(5, 6));
    assert_eq!(r(2, 3).mul(&r(3, 4)), r(1, 2));
    assert_eq!(r(1, 2).neg(), r(-1, 2));
    assert_eq!(r(1, 2).div(&r(1, 4)).unwrap(), r(2, 1));
    assert!(r(1, 2).div(&r(0, 1)).is_err());
}

#[test]
fn layer_norm_backward_of_an_empty_tensor_is_empty() {
    let op = Op::LayerNorm { axis: 1, eps: None };
    let x = Tensor::<f64>::new([2, 0], vec![]).unwrap();
    let y = op.forward(&[&x]).unwrap();
    let g = op.vjp(&Saved::for_op(&op, &[&x], &y), &y).unwrap();
    assert_eq!(g[0].as_ref().unwrap().shape(), x.shape());
}

#[test]
fn the_payload_of_each_op_is_declared_from_its_shapes() {
    let linear = Op::Linear
        .payload_shapes(&[Shape::from([2, 5])], &Shape::from([2, 4]))
        .unwrap();
    assert_eq!(linear, vec![Shape::from([4, 5]), Shape::from([4])]);
    let spec = Conv2dSpec::ungrouped(2, 3, (1, 1), 1, 0);
    let x = Shape::from([1, 2, 4, 4]);
    let out = Shape::from([1, 3, 4, 4]);
    assert_eq!(
        Op::Conv2d(spec).payload_shapes(&[x], &out).unwrap(),
        spec.payload_shapes()
    );
    let train = Op::BatchNormTrain {
        channels: 3,
        eps: None,
    };
    let x = Shape::from([2, 3, 2, 2]);
    assert_eq!(
        train.payload_shapes(std::slice::from_ref(&x), &x).unwrap(),
        vec![Shape::from([3]); 2]
    );
    assert!(Op::MatMul
        .payload_shapes(&[Shape::from([2, 2])], &Shape::from([2, 2]))
        .unwrap()
        .is_empty());
}

#[test]
fn batch_norm_wants_channels_on_axis_one() {
    let op = |c| Op::BatchNormEval {
        channels: c,
        eps: 1e-5,
    };
    let p = vec![Shape::from([3]); 4];
    let with = |x: Shape| [vec![x], p.clone()].concat();
    assert!(op(3).infer_shape(&with(Shape::from([2, 3, 4, 4]))).is_ok());
    for bad in [Shape::from([3]), Shape::from([2, 4, 4, 4])] {
        assert!(op(3).infer_shape(&with(bad.clone())).is_err(), "{bad}");
    }
}

#[test]
fn every_wire_name_is_listed_once_in_table_order() {
    let names: Vec<&str> = desc::names().collect();
    assert_eq!(names.len(), desc::OPS.len());
    assert_eq!(names[0], desc::OPS[0].name);
    assert!(names.contains(&"add") && names.contains(&"conv2d"));
    let add = format!("{:?}", desc::lookup("add").unwrap());
    assert!(add.starts_with("OpDesc { name: \"add\""), "{add}");
    for op in UnaryOp::ALL {
        assert_eq!(op.name(), Op::Unary(op).desc().name);
        assert!(!op.name().is_empty());
    }
    assert_eq!(UnaryOp::Tanh.name(), "tanh");
}

#[test]
fn batch_norm_takes_four_per_channel_payload_tensors() {
    let op = Op::BatchNormEval {
        channels: 3,
        eps: 1e-5,
    };
    let x = Shape::from([2, 3, 4, 4]);
    assert_eq!(
        op.payload_shapes(std::slice::from_ref(&x), &x).unwrap(),
        vec![Shape::from([3]); 4]
    );
}

#[test]
fn a_padded_geometry_counts_the_padding_on_both_sides() {
    let spec = Conv2dSpec::ungrouped(1, 1, (3, 3), 1, 1);
    let g = spec.geometry(&Shape::from([1, 1, 4, 6])).unwrap();
    assert_eq!((g.hp(), g.wp()), (6, 8));
    let wide = Conv2dSpec {
        kernel_h: 5,
        kernel_w: 5,
        padding: 2,
        ..spec
    };
    let g = wide.geometry(&Shape::from([1, 1, 4, 6])).unwrap();
    assert_eq!((g.hp(), g.wp()), (8, 10));
}

#[test]
fn small_tables_read_and_print_their_wire_forms() {
    assert_eq!(Arity::Exact(2).to_string(), "2");
    assert_eq!(Arity::AtLeast(2).to_string(), "at least 2");
    for r in Reduction::ALL {
        assert_eq!(Reduction::from_wire(r.wire()), Some(r));
    }
    assert_eq!(Reduction::from_wire("sum"), Some(Reduction::Sum));
    assert_eq!(Reduction::from_wire("max"), None);
    let d = |n: &str| desc::lookup(n).unwrap();
    assert_eq!(d("add"), d("add"));
    assert_ne!(d("add"), d("sub"));
    let algebraic = [
        UnaryOp::Abs,
        UnaryOp::Inv,
        UnaryOp::Relu,
        UnaryOp::Neg,
        UnaryOp::Sign,
        UnaryOp::LeakyRelu {
            negative_slope: 0.01,
        },
    ];
    for u in UnaryOp::ALL {
        assert_eq!(u.is_algebraic(), algebraic.contains(&u), "{}", u.name());
    }
    let r = |n: i64, d: i64| Rational::new(n.into(), d.into());
    assert_eq!(crate::Scalar::abs(&r(-1, 3)), r(1, 3));
    // the rational engine has exactly the algebraic ones
    let x = Tensor::new([1], vec![r(-1, 3)]).unwrap();
    for u in UnaryOp::ALL {
        assert_eq!(
            Op::Unary(u).forward(&[&x]).is_ok(),
            u.is_algebraic(),
            "{}",
            u.name()
        );
    }
}

#[test]
fn a_pool_window_moves_by_its_stride() {
    // [1, 2, 4]: two 2x2 windows side by side, stride 2
    let x = t(&[1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let op = Op::Pool(pool(PoolKind::Avg, (2, 2), 2, 0));
    assert_eq!(op.forward(&[&x]).unwrap().data(), &[3.5, 5.5]);
}

#[test]
fn batch_norm_takes_a_rank_two_batch() {
    let op = Op::BatchNormEval {
        channels: 3,
        eps: 1e-5,
    };
    let shapes = [vec![Shape::from([4, 3])], vec![Shape::from([3]); 4]].concat();
    assert_eq!(op.infer_shape(&shapes).unwrap(), Shape::from([4, 3]));
    let ce = Op::CrossEntropy {
        reduction: Reduction::Mean,
    };
    assert_eq!(
        ce.payload_shapes(&[Shape::from([4, 3])], &Shape::scalar())
            .unwrap(),
        vec![Shape::from([4])]
    );
}

#[test]
fn only_a_plain_one_by_one_convolution_is_direct() {
    let spec = |k, stride| Conv2dSpec::ungrouped(1, 1, k, stride, 0);
    let x = Shape::from([1, 1, 4, 4]);
    assert!(spec((1, 1), 1).geometry(&x).unwrap().direct());
    for (k, stride) in [((1, 1), 2), ((1, 3), 1), ((3, 1), 1)] {
        assert!(
            !spec(k, stride).geometry(&x).unwrap().direct(),
            "{k:?} {stride}"
        );
    }
    assert_eq!(Shape::from([2, 3]).dim(1), Some(3));
    assert_eq!(Shape::from([2, 3]).dim(2), None);
}

#[test]
fn the_ir_filled_fields_are_listed_for_printing() {
    use desc::AttrValue;
    let rand = Op::RandUniform {
        seed: 1,
        key: 7,
        shape: Shape::from([2]),
    };
    assert_eq!(rand.context_values(), vec![("key", AttrValue::Int(7))]);
    let bn = Op::BatchNormEval {
        channels: 2,
        eps: 0.5,
    };
    assert_eq!(bn.context_values(), vec![("eps", AttrValue::Float(0.5))]);
    assert!(Op::MatMul.context_values().is_empty());
}

#[test]
fn add_scalar_adds_its_constant() {
    // its derivative is the identity's, so only its value tells it from a no-op
    let y = Op::AddScalar { c: 0.5 }
        .forward(&[&t(&[2], &[1.0, -2.0])])
        .unwrap();
    assert_eq!(y.data(), &[1.5, -1.5]);
}

#[test]
fn conv2d_reads_each_channel_of_each_image() {
    // two images of two 1x2 channels, a 1x1 kernel summing the channels with weights 1 and 10
    let x = t(&[2, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let op = Op::Conv2d(Conv2dSpec::ungrouped(2, 1, (1, 1), 1, 0));
    let (w, b) = (t(&[1, 2, 1, 1], &[1.0, 10.0]), t(&[1], &[0.0]));
    let y = op.forward(&[&x, &w, &b]).unwrap();
    assert_eq!(y.data(), &[31.0, 42.0, 75.0, 86.0]);
    // and its VJP sends each output's cotangent back to the cells it read
    let saved = Saved::for_op(&op, &[&x, &w, &b], &y);
    let g = op
        .vjp(&saved, &t(&[2, 1, 1, 2], &[1.0, 0.0, 0.0, 2.0]))
        .unwrap();
    assert_eq!(
        g[0].as_ref().unwrap().data(),
        &[1.0, 0.0, 10.0, 0.0, 0.0, 2.0, 0.0, 20.0]
    );
}

#[test]
fn concat_interleaves_rows_of_several_inner_elements() {
    // [2, 1, 2] and [2, 2, 2] along axis 1: outer 2, inner 2
    let a = t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = t(&[2, 2, 2], &[5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let y = Op::Concat { axis: 1 }.forward(&[&a, &b]).unwrap();
    assert_eq!(
        y.data(),
        &[1.0, 2.0, 5.0, 6.0, 7.0, 8.0, 3.0, 4.0, 9.0, 10.0, 11.0, 12.0]
    );
}

#[test]
fn a_pool_padding_is_checked_against_the_kernel_height_too() {
    let tall = Op::Pool(pool(PoolKind::Max, (2, 5), 1, 2));
    assert!(tall.infer_shape(&[Shape::from([1, 6, 6])]).is_err());
}

#[test]
fn the_exact_scalar_never_reads_nan_and_widens_to_itself() {
    let r = |n: i64, d: i64| Rational::new(n.into(), d.into());
    assert!(!crate::Scalar::is_nan(&r(1, 3)));
    let x = Tensor::new([2], vec![r(1, 3), r(-2, 7)]).unwrap();
    assert_eq!(x.to_acc(), x);
    assert_eq!(Tensor::<Rational>::from_acc(&x), x);
    assert_eq!(Shape::from([2, 3]).remove_axis(0), Shape::from([3]));
    // an axis past the rank removes nothing
    assert_eq!(Shape::from([2, 3]).remove_axis(2), Shape::from([2, 3]));
}

#[test]
fn tensors_hand_back_their_data_and_rationals_compare_strictly() {
    let x = t(&[2], &[1.0, 2.0]);
    assert_eq!(x.len(), 2);
    assert_eq!(x.into_data(), vec![1.0, 2.0]);
    let r = |n: i64, d: i64| Rational::new(n.into(), d.into());
    assert!(crate::Scalar::greater(&r(1, 2), &r(1, 3)));
    assert!(!crate::Scalar::greater(&r(1, 2), &r(1, 2)));
}

#[test]
fn embedding_gathers_rows_and_sums_repeated_ids_in_position_order() {
    let table = Tensor::new([3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let ids = Tensor::new([2, 2], vec![2.0, 0.0, 2.0, 2.0]).unwrap();
    let y = Op::Embedding.forward(&[&ids, &table]).unwrap();
    assert_eq!(y.shape(), &Shape::new(vec![2, 2, 2]));
    assert_eq!(y.data(), &[5.0, 6.0, 1.0, 2.0, 5.0, 6.0, 5.0, 6.0]);
    // row 2 is read at positions 0, 2 and 3: its gradient is their sum, first to last; row 1
    // is never read
    let cot = Tensor::new([2, 2, 2], vec![0.5, 1.0, 2.0, 3.0, 1e16, 1.0, 1.0, 1.0]).unwrap();
    let saved = Saved::for_op(&Op::Embedding, &[&ids, &table], &y);
    let grads = Op::Embedding.vjp::<Tensor<f64>>(&saved, &cot).unwrap();
    assert!(grads[0].is_none(), "the ids get no gradient");
    let dt = grads[1].as_ref().unwrap();
    assert_eq!(dt.shape(), table.shape());
    // ((0 + 0.5) + 1e16) + 1 is 1e16 in f64; another order would give 1e16 + 2
    assert_eq!(dt.data(), &[2.0, 3.0, 0.0, 0.0, (0.5 + 1e16) + 1.0, 3.0]);
}

#[test]
fn an_embedding_id_that_is_not_a_row_is_an_error_naming_position_and_value() {
    let table = Tensor::<f64>::zeros(Shape::new(vec![4, 2])).unwrap();
    for (bad, problem) in [
        (4.0, IdProblem::OutOfRange),
        (-1.0, IdProblem::OutOfRange),
        (0.5, IdProblem::NotIntegral),
        (f64::NAN, IdProblem::NotIntegral),
        (f64::INFINITY, IdProblem::NotIntegral),
    ] {
        let ids = Tensor::new([3], vec![0.0, 3.0, bad]).unwrap();
        let e = Op::Embedding.forward(&[&ids, &table]).unwrap_err();
        match e {
            SpecError::BadId {
                op: "embedding",
                operand: "ids",
                position: 2,
                bound: 4,
                problem: p,
                value,
                ..
            } => {
                assert_eq!(p, problem, "{bad}");
                assert!(value.to_bits() == bad.to_bits(), "{value} vs {bad}");
            }
            other => panic!("{bad}: {other:?}"),
        }
        // the IR's payload check asks the same rule
        let shapes = [Shape::new(vec![3]), Shape::new(vec![4, 2])];
        assert!(Op::Embedding
            .check_data(0, &shapes, &[0.0, 3.0, bad])
            .is_err());
    }
    // the table is not [V, D]
    let flat = Tensor::<f64>::zeros(Shape::new(vec![4])).unwrap();
    let ids = Tensor::new([1], vec![0.0]).unwrap();
    assert!(matches!(
        Op::Embedding.forward(&[&ids, &flat]),
        Err(SpecError::OpShape {
            op: "embedding",
            ..
        })
    ));
}

/// A product large enough to share its rows over a pool gives the plain loops' bits at one
/// thread and at three (the split is over output rows; no sum changes order).
#[test]
fn large_products_give_the_same_bits_at_any_thread_count() {
    let vals = [1e16, 1.0, -1e16, 3.0, 0.5, -2.0, 7.0, -0.25, 1e-3];
    let (m, n, p) = (70, 64, 64); // 286,720 multiply-adds: above the split threshold
    let t = |rows: usize, cols: usize, salt: usize| {
        Tensor::new(
            Shape::from([rows, cols]),
            (0..rows * cols)
                .map(|i| vals[(i * 7 + salt) % vals.len()])
                .collect(),
        )
        .unwrap()
    };
    let (a, b) = (t(m, n, 1), t(n, p, 2));
    let at = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| Op::MatMul.forward(&[&a, &b]).unwrap())
    };
    let (one, three) = (at(1), at(3));
    let bits = |t: &Tensor<f64>| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&one), bits(&three));
    for i in [0, 7, 8, 37, 69] {
        for j in [0, 31, 63] {
            let want = (0..n).fold(0.0, |acc, k| {
                acc + a.data()[i * n + k] * b.data()[k * p + j]
            });
            assert_eq!(
                three.data()[i * p + j].to_bits(),
                want.to_bits(),
                "({i}, {j})"
            );
        }
    }
}

/// The products' definition, written out as the plain loops: each element's sum over the
/// contracted index in order from 0. Values of very different magnitude make any other order
/// (or a fused multiply-add) visible in the bits.
#[test]
fn products_sum_over_their_index_in_order() {
    let vals = [1e16, 1.0, -1e16, 3.0, 0.5, -2.0, 7.0, -0.25, 1e-3];
    let t = |shape: &[usize], salt: usize| {
        let n: usize = shape.iter().product();
        Tensor::new(
            Shape::new(shape.to_vec()),
            (0..n).map(|i| vals[(i * 7 + salt) % vals.len()]).collect(),
        )
        .unwrap()
    };
    let (m, n, p) = (5, 11, 9);
    let (a, b, dy) = (t(&[2, m, n], 1), t(&[2, n, p], 2), t(&[2, m, p], 3));
    let dot = |terms: &mut dyn Iterator<Item = f64>| terms.fold(0.0, |acc, x| acc + x);
    let (ad, bd, dd) = (a.data(), b.data(), dy.data());
    let y = Op::MatMul.forward(&[&a, &b]).unwrap();
    let saved = Saved::for_op(&Op::MatMul, &[&a, &b], &y);
    let g = Op::MatMul.vjp::<Tensor<f64>>(&saved, &dy).unwrap();
    let (ga, gb) = (g[0].as_ref().unwrap(), g[1].as_ref().unwrap());
    for s in 0..2 {
        for i in 0..m {
            for j in 0..p {
                let want =
                    dot(&mut (0..n).map(|k| ad[(s * m + i) * n + k] * bd[(s * n + k) * p + j]));
                assert_eq!(y.data()[(s * m + i) * p + j].to_bits(), want.to_bits());
            }
            for k in 0..n {
                let want =
                    dot(&mut (0..p).map(|j| dd[(s * m + i) * p + j] * bd[(s * n + k) * p + j]));
                assert_eq!(ga.data()[(s * m + i) * n + k].to_bits(), want.to_bits());
            }
        }
        for k in 0..n {
            for j in 0..p {
                let want =
                    dot(&mut (0..m).map(|i| ad[(s * m + i) * n + k] * dd[(s * m + i) * p + j]));
                assert_eq!(gb.data()[(s * n + k) * p + j].to_bits(), want.to_bits());
            }
        }
    }
    // linear: y = x·Wᵀ + b, and its three gradients
    let (rows, inp, outf) = (13, 10, 9);
    let (x, w, bias, dy) = (
        t(&[rows, inp], 4),
        t(&[outf, inp], 5),
        t(&[outf], 6),
        t(&[rows, outf], 7),
    );
    let (xd, wd, dd) = (x.data(), w.data(), dy.data());
    let y = Op::Linear.forward(&[&x, &w, &bias]).unwrap();
    let saved = Saved::for_op(&Op::Linear, &[&x, &w, &bias], &y);
    let g = Op::Linear.vjp::<Tensor<f64>>(&saved, &dy).unwrap();
    let (gx, gw, gbias) = (
        g[0].as_ref().unwrap(),
        g[1].as_ref().unwrap(),
        g[2].as_ref().unwrap(),
    );
    for r in 0..rows {
        for o in 0..outf {
            let want =
                dot(&mut (0..inp).map(|i| xd[r * inp + i] * wd[o * inp + i])) + bias.data()[o];
            assert_eq!(y.data()[r * outf + o].to_bits(), want.to_bits());
        }
        for i in 0..inp {
            let want = dot(&mut (0..outf).map(|o| dd[r * outf + o] * wd[o * inp + i]));
            assert_eq!(gx.data()[r * inp + i].to_bits(), want.to_bits());
        }
    }
    for o in 0..outf {
        for i in 0..inp {
            let want = dot(&mut (0..rows).map(|r| dd[r * outf + o] * xd[r * inp + i]));
            assert_eq!(gw.data()[o * inp + i].to_bits(), want.to_bits());
        }
        let want = dot(&mut (0..rows).map(|r| dd[r * outf + o]));
        assert_eq!(gbias.data()[o].to_bits(), want.to_bits());
    }
}

/// `at_defaults` is true exactly when every attribute with a default holds it: a float by its
/// bits, an integer, a choice; an optional one left out.
#[test]
fn at_defaults_compares_every_defaulted_attribute() {
    let slope = |s: f64| Op::Unary(UnaryOp::LeakyRelu { negative_slope: s });
    assert!(slope(elementwise::LEAKY_RELU_DEFAULT_SLOPE).at_defaults());
    assert!(!slope(0.2).at_defaults());
    let conv = |groups: usize, dilation: usize| {
        Op::Conv2d(Conv2dSpec {
            in_channels: 2,
            out_channels: 2,
            kernel_h: 1,
            kernel_w: 1,
            stride: 1,
            padding: 0,
            groups,
            dilation,
        })
    };
    assert!(conv(1, 1).at_defaults());
    assert!(!conv(2, 1).at_defaults());
    assert!(!conv(1, 2).at_defaults());
    assert!(Op::Unary(UnaryOp::Gelu(GeluApprox::None)).at_defaults());
    assert!(!Op::Unary(UnaryOp::Gelu(GeluApprox::Tanh)).at_defaults());
    // an optional attribute: at its default only when left out
    let layer_norm = |eps: Option<f64>| Op::LayerNorm { axis: 1, eps };
    assert!(layer_norm(None).at_defaults());
    assert!(!layer_norm(Some(1e-3)).at_defaults());
}

#[test]
fn causal_attention_vjp_matches_finite_differences() {
    for (shape, heads, seed) in [
        (&[2, 3, 6][..], 1, 71),
        (&[4, 12], 2, 72),
        (&[1, 2, 5, 12], 2, 73),
    ] {
        let x = rand_inputs(seed, &[shape], -1.5, 1.5);
        check_fd(&Op::CausalAttention { heads }, &x, seed + 100, 1e-7);
    }
}

#[test]
fn causal_attention_is_its_composition_bit_for_bit_on_f64() {
    use crate::backend::compose;
    for (shape, heads, seed) in [
        (&[2, 5, 12][..], 2, 81),
        (&[7, 6], 1, 82),
        (&[3, 1, 9], 3, 83),
    ] {
        let op = Op::CausalAttention { heads };
        let x = rand_inputs(seed, &[shape], -2.0, 2.0).remove(0);
        let y = op.forward(&[&x]).unwrap();
        let composed = compose::causal_attention(&x, heads, y.shape()).unwrap();
        assert!(y.bit_eq(&composed), "{shape:?} / {heads}: forward");
        let dy = rand_inputs(seed + 1, &[y.shape().dims()], -1.0, 1.0).remove(0);
        let saved = Saved::for_op(&op, &[&x], &y);
        let dx = op.vjp::<Tensor<f64>>(&saved, &dy).unwrap()[0]
            .clone()
            .unwrap();
        let composed = compose::causal_attention_vjp(&x, heads, &dy).unwrap();
        assert!(dx.bit_eq(&composed), "{shape:?} / {heads}: VJP");
    }
}

#[test]
fn causal_attention_by_hand_and_a_later_infinity_reaches_no_earlier_position() {
    // one head of width 1: q = k = (1, 2), v = (10, 20); position 0 sees itself only,
    // position 1 weighs s = (2, 4) (scale 1)
    let x = t(&[2, 3], &[1.0, 1.0, 10.0, 2.0, 2.0, 20.0]);
    let y = Op::CausalAttention { heads: 1 }.forward(&[&x]).unwrap();
    let w = 1.0 / (1.0 + (2.0f64).exp());
    assert_eq!(y.data()[0], 10.0);
    assert!((y.data()[1] - (w * 10.0 + (1.0 - w) * 20.0)).abs() < 1e-12);
    let later = t(&[2, 3], &[1.0, 1.0, 10.0, 2.0, f64::INFINITY, f64::NAN]);
    let y = Op::CausalAttention { heads: 1 }.forward(&[&later]).unwrap();
    assert_eq!(y.data()[0], 10.0);
}

#[test]
fn causal_attention_shape_rule_names_heads_and_the_packed_axis() {
    let op = |heads| Op::CausalAttention { heads };
    assert_eq!(
        op(2).infer_shape(&[Shape::from([3, 4, 12])]).unwrap(),
        Shape::from([3, 4, 4])
    );
    let e = op(0).infer_shape(&[Shape::from([4, 6])]).unwrap_err();
    assert!(matches!(e, SpecError::OpAttr { attr: "heads", .. }), "{e}");
    for bad in [&[4, 8][..], &[12], &[4, 0]] {
        let e = op(2).infer_shape(&[Shape::from(bad)]).unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::OpShape {
                    op: "causal_attention",
                    ..
                }
            ),
            "{bad:?}: {e}"
        );
    }
}
