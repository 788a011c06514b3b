//! The normalisation kernels on inputs the random suites do not draw: rows far from zero, where
//! a variance formula that is exact in real arithmetic (`Σv² − n·mean²`) loses every digit to
//! cancellation and only the two-pass one (`Σ(v − mean)²`) keeps them; logits large enough that
//! a softmax shifted by anything but the row's maximum overflows; empty spatial axes; running
//! variances at and below zero, where the clamp `max(var, 0)` decides the value and the
//! gradient; and cross entropy over no classes.

use crate::common::{agrees, values};
use torchlean_spec::{Op, Reduction, Tensor};

#[test]
fn layer_norm_keeps_its_digits_far_from_zero() {
    // values 1e8 + [-1, 1): squares near 1e16, where an f64 ulp is 2
    let x = values(&[4, 64], 1).map(|v| Ok(v + 1e8)).unwrap();
    let op = Op::LayerNorm {
        axis: 1,
        eps: Some(1e-5),
    };
    agrees("layer norm, rows near 1e8", &op, &[x], 1e-6);
}

#[test]
fn batch_norm_of_empty_images_is_empty() {
    let op = Op::BatchNormEval {
        channels: 3,
        eps: 1e-5,
    };
    let stats = |salt| values(&[3], salt);
    let var = values(&[3], 4).map(|v| Ok(v.abs() + 0.5)).unwrap();
    for x in [[2usize, 3, 0, 4], [2, 3, 4, 0], [0, 3, 4, 4]] {
        let x: Tensor<f64> = values(&x, 5);
        let inputs = [x, stats(1), stats(2), stats(3), var.clone()];
        agrees("batch norm, an empty axis", &op, &inputs, 0.0);
        let train = Op::BatchNormTrain {
            channels: 3,
            eps: None,
        };
        agrees(
            "batch norm (train), an empty axis",
            &train,
            &inputs[..3],
            0.0,
        );
    }
}

#[test]
fn softmax_shifts_by_the_maximum_wherever_it_is() {
    // rows of 37: four full lanes of 8 and a remainder; the large logit sits in every lane and
    // in the remainder in turn, so a maximum that skips a lane shifts by the wrong value and
    // exp(1000 − small) overflows
    let (rows, c) = (37, 37);
    let mut x = values(&[rows, c], 6).data().to_vec();
    for r in 0..rows {
        x[r * c + r] = 1000.0;
    }
    let x = Tensor::new([rows, c], x).unwrap();
    for op in [Op::Softmax { axis: 1 }, Op::LogSoftmax { axis: 1 }] {
        agrees(op.name(), &op, std::slice::from_ref(&x), 1e-12);
    }
    let targets = Tensor::new([rows], (0..rows).map(|r| ((r + 1) % c) as f64).collect()).unwrap();
    let ce = Op::CrossEntropy {
        reduction: Reduction::Mean,
    };
    agrees("cross entropy", &ce, &[x, targets], 1e-12);
}

#[test]
fn batch_norm_at_a_zero_or_negative_running_variance() {
    // var = 0 sits on the clamp's kink: its gradient is taken from the `var ≥ 0` side
    // (−½·sigma⁻³, large but finite with eps = 1e-5); var < 0 is clamped, gradient 0
    let op = Op::BatchNormEval {
        channels: 3,
        eps: 1e-5,
    };
    let var = Tensor::new([3], vec![0.0, -0.5, 0.7]).unwrap();
    let stats = |salt| values(&[3], salt);
    let inputs = [values(&[2, 3, 2, 2], 7), stats(8), stats(9), stats(10), var];
    agrees("batch norm, var 0 and var < 0", &op, &inputs, 1e-10);
}

#[test]
fn batch_norm_clamps_a_negative_zero_variance_to_positive_zero() {
    // `max(−0, 0)` is `if −0 > 0 then −0 else 0` = +0, so with eps = −0 (a valid eps: it is
    // not below 0) sigma is sqrt(+0 + −0) = +0 and a positive x − mean gives +∞; a clamp that
    // kept −0 would give sqrt(−0) = −0 and −∞
    let op = Op::BatchNormEval {
        channels: 1,
        eps: -0.0,
    };
    let x = Tensor::new([1, 1, 1, 2], vec![1.0, -1.0]).unwrap();
    let scalar = |v: f64| Tensor::new([1], vec![v]).unwrap();
    let inputs = [x, scalar(1.0), scalar(0.0), scalar(0.0), scalar(-0.0)];
    let refs: Vec<&Tensor<f64>> = inputs.iter().collect();
    let want = torchlean_runtime::forward::<Tensor<f64>>(&op, &refs).unwrap();
    assert_eq!(
        want.data(),
        [f64::INFINITY, f64::NEG_INFINITY],
        "the reference"
    );
    agrees("batch norm, var −0 and eps −0", &op, &inputs, 0.0);
}

#[test]
fn cross_entropy_of_no_rows_over_no_classes() {
    let ce = |reduction| Op::CrossEntropy { reduction };
    let inputs = [
        Tensor::new([0, 0], vec![]).unwrap(),
        Tensor::new([0], vec![]).unwrap(),
    ];
    for reduction in [Reduction::Mean, Reduction::Sum] {
        agrees("cross entropy, [0, 0] logits", &ce(reduction), &inputs, 0.0);
    }
}
