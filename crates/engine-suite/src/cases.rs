//! The table of op cases: every op, with shapes chosen to hit the edges.

use torchlean_spec::{
    ops, BinaryOp, Conv2dSpec, GeluApprox, Op, PoolKind, PoolSpec, Reduction, Shape, Tensor,
    UnaryOp,
};

/// One op applied to concrete inputs.
#[derive(Clone, Debug)]
pub struct OpCase {
    pub name: String,
    pub op: Op,
    pub inputs: Vec<Tensor<f64>>,
}

/// Values in `[lo, hi)`, deterministic in `salt`.
fn uniform(shape: &[usize], salt: u64, lo: f64, hi: f64) -> Tensor<f64> {
    let mut s = ops::splitmix64(salt);
    Tensor::from_fn(Shape::from(shape), |_| {
        s = ops::splitmix64(s);
        lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
    })
    .expect("case shapes are small")
}

/// Values in `[-2, 2)` with magnitude at least `gap` (away from kinks at 0).
fn signed_away_from_zero(shape: &[usize], salt: u64, gap: f64) -> Tensor<f64> {
    let t = uniform(shape, salt, -2.0, 2.0);
    t.map(|&v| {
        Ok(if v.abs() < gap {
            v.signum() * gap + v
        } else {
            v
        })
    })
    .expect("map of a finite tensor")
}

fn case(name: impl Into<String>, op: Op, inputs: Vec<Tensor<f64>>) -> OpCase {
    OpCase {
        name: name.into(),
        op,
        inputs,
    }
}

/// Every op on edge and ordinary shapes.
pub fn op_cases() -> Vec<OpCase> {
    let mut out = Vec::new();
    let salt = &mut Salt(1);
    unary_cases(&mut out, salt);
    binary_cases(&mut out, salt);
    clamp_cases(&mut out, salt);
    softmax_cases(&mut out, salt);
    layer_norm_cases(&mut out, salt);
    layout_cases(&mut out, salt);
    reduce_cases(&mut out, salt);
    cross_entropy_cases(&mut out, salt);
    linalg_cases(&mut out, salt);
    attention_cases(&mut out, salt);
    conv_pool_cases(&mut out, salt);
    batch_norm_cases(&mut out, salt);
    concat_cases(&mut out);
    embedding_cases(&mut out, salt);
    random_cases(&mut out);
    shape_error_cases(&mut out);
    out
}

/// The seed of the next random operand: each case draws fresh values.
struct Salt(u64);

impl Salt {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

const ELEMENTWISE_SHAPES: [&[usize]; 5] = [&[7], &[2, 3], &[1, 1], &[0], &[5, 33, 3]];

/// Unary ops on ordinary and empty shapes, at their kinks, and gelu in its tails.
fn unary_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for u in UnaryOp::ALL {
        for shape in ELEMENTWISE_SHAPES {
            let x = match u {
                UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Inv => {
                    uniform(shape, salt.next(), 0.25, 3.0)
                }
                UnaryOp::Abs | UnaryOp::Relu => signed_away_from_zero(shape, salt.next(), 0.05),
                UnaryOp::Exp | UnaryOp::Softplus => uniform(shape, salt.next(), -4.0, 4.0),
                // both tails and the curved middle
                UnaryOp::Gelu(_) => uniform(shape, salt.next(), -6.0, 6.0),
                _ => uniform(shape, salt.next(), -2.0, 2.0),
            };
            let name = match u {
                UnaryOp::Gelu(a) => format!("gelu_{}", a.wire()),
                _ => u.name().to_string(),
            };
            out.push(case(format!("{name}_{shape:?}"), Op::Unary(u), vec![x]));
        }
    }
    // relu and abs at exactly zero (subgradient choice)
    let zeros_and_signs = Tensor::new([4], vec![0.0, -0.0, 1.5, -1.5]).expect("4 values");
    out.push(case(
        "relu_at_zero",
        Op::Unary(UnaryOp::Relu),
        vec![zeros_and_signs.clone()],
    ));
    out.push(case(
        "abs_at_zero",
        Op::Unary(UnaryOp::Abs),
        vec![zeros_and_signs],
    ));
    out.push(case(
        "sqrt_at_zero",
        Op::Unary(UnaryOp::Sqrt),
        vec![Tensor::new([3], vec![0.0, 4.0, 0.25]).expect("3 values")],
    ));

    // gelu far in the tails (erf saturates; the tanh form's cube dominates)
    for a in GeluApprox::ALL {
        out.push(case(
            format!("gelu_{}_tails", a.wire()),
            Op::Unary(UnaryOp::Gelu(a)),
            vec![Tensor::new([6], vec![-30.0, -9.0, -1e-8, 0.0, 1e-8, 40.0]).expect("6 values")],
        ));
    }
}

/// Binary ops, ties of max/min, and the scalar ops.
fn binary_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for b in BinaryOp::ALL {
        for shape in ELEMENTWISE_SHAPES {
            let (x, y) = match b {
                BinaryOp::Div => (
                    uniform(shape, salt.next(), -2.0, 2.0),
                    uniform(shape, salt.next(), 0.5, 2.0),
                ),
                _ => (
                    uniform(shape, salt.next(), -2.0, 2.0),
                    uniform(shape, salt.next(), -2.0, 2.0),
                ),
            };
            out.push(case(
                format!("{}_{shape:?}", b.name()),
                Op::Binary(b),
                vec![x, y],
            ));
        }
    }
    // ties split the cotangent
    let a = Tensor::new([3], vec![1.0, 2.0, 3.0]).expect("3 values");
    let c = Tensor::new([3], vec![1.0, 5.0, -3.0]).expect("3 values");
    out.push(case(
        "max_elem_ties",
        Op::Binary(BinaryOp::Max),
        vec![a.clone(), c.clone()],
    ));
    out.push(case("min_elem_ties", Op::Binary(BinaryOp::Min), vec![a, c]));

    out.push(case(
        "scale",
        Op::Scale { c: -1.75 },
        vec![uniform(&[3, 5], salt.next(), -2.0, 2.0)],
    ));
    out.push(case(
        "add_scalar",
        Op::AddScalar { c: 0.375 },
        vec![uniform(&[4, 1], salt.next(), -2.0, 2.0)],
    ));
}

/// Clamp with every bound combination, at its bounds, a min above the max; detach.
fn clamp_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for (min, max) in [
        (Some(-0.5), Some(0.75)),
        (Some(0.0), None),
        (None, Some(-0.25)),
        (Some(0.5), Some(0.5)),
        (None, None),
    ] {
        for shape in [&[5, 33, 3][..], &[0], &[2, 3]] {
            out.push(case(
                format!("clamp_{min:?}_{max:?}_{shape:?}"),
                Op::Clamp { min, max },
                vec![uniform(shape, salt.next(), -2.0, 2.0)],
            ));
        }
    }
    // exactly at the bounds (the gradient passes there), outside, and NaN
    out.push(case(
        "clamp_at_bounds",
        Op::Clamp {
            min: Some(0.0),
            max: Some(1.0),
        },
        vec![Tensor::new([7], vec![-1.0, 0.0, -0.0, 0.5, 1.0, 2.0, f64::NAN]).expect("7 values")],
    ));
    out.push(case(
        "clamp_min_above_max_error",
        Op::Clamp {
            min: Some(1.0),
            max: Some(0.0),
        },
        vec![uniform(&[3], salt.next(), -2.0, 2.0)],
    ));
    out.push(case(
        "detach",
        Op::Detach,
        vec![uniform(&[2, 2], salt.next(), -2.0, 2.0)],
    ));
}

/// Softmax and log-softmax over each axis, with an empty axis.
fn softmax_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for (shape, axis) in [
        (&[3, 1, 5][..], 2usize),
        (&[3, 1, 5], 0),
        (&[3, 1, 5], 1),
        (&[1], 0),
        (&[16, 257], 1),
        (&[2, 0], 0),
    ] {
        let x = uniform(shape, salt.next(), -3.0, 3.0);
        out.push(case(
            format!("softmax_{shape:?}_axis{axis}"),
            Op::Softmax { axis },
            vec![x.clone()],
        ));
        out.push(case(
            format!("log_softmax_{shape:?}_axis{axis}"),
            Op::LogSoftmax { axis },
            vec![x],
        ));
    }
}

/// Layer norm over each axis.
fn layer_norm_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for (shape, axis) in [
        (&[2, 3, 4][..], 0usize),
        (&[2, 3, 4], 1),
        (&[2, 3, 4], 2),
        (&[5, 1], 1),
        (&[8, 300], 1),
    ] {
        out.push(case(
            format!("layernorm_{shape:?}_axis{axis}"),
            Op::LayerNorm {
                axis,
                eps: Some(1e-5),
            },
            vec![uniform(shape, salt.next(), -2.0, 2.0)],
        ));
    }
}

/// Broadcast, reshape, flatten, permute, the transposes and slices.
fn layout_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for (from, to) in [
        (&[][..], &[3, 4][..]),
        (&[3], &[2, 3]),
        (&[2, 1, 3], &[4, 2, 5, 3]),
        (&[1, 1], &[3, 3]),
        (&[4, 1], &[4, 6]),
        (&[2], &[0, 2]),
    ] {
        out.push(case(
            format!("broadcast_{from:?}_to_{to:?}"),
            Op::BroadcastTo {
                from: Shape::from(from),
                to: Shape::from(to),
            },
            vec![uniform(from, salt.next(), -2.0, 2.0)],
        ));
    }
    for (from, to) in [
        (&[3, 4][..], &[2, 6][..]),
        (&[6][..], &[1, 6, 1][..]),
        (&[2, 3, 4][..], &[24][..]),
        (&[][..], &[1][..]),
    ] {
        out.push(case(
            format!("reshape_{from:?}_to_{to:?}"),
            Op::Reshape {
                from: Shape::from(from),
                to: Shape::from(to),
            },
            vec![uniform(from, salt.next(), -1.0, 1.0)],
        ));
    }
    for from in [&[3, 4][..], &[2, 1, 3], &[][..], &[0, 2]] {
        out.push(case(
            format!("flatten_{from:?}"),
            Op::Flatten {
                from: Shape::from(from),
            },
            vec![uniform(from, salt.next(), -1.0, 1.0)],
        ));
    }
    for (shape, perm) in [
        (&[2, 3, 4][..], vec![2usize, 0, 1]),
        (&[2, 3, 4], vec![1, 2, 0]),
        (&[5], vec![0]),
        (&[2, 1, 3, 2], vec![3, 1, 0, 2]),
    ] {
        out.push(case(
            format!("permute_{shape:?}_{perm:?}"),
            Op::Permute { perm },
            vec![uniform(shape, salt.next(), -1.0, 1.0)],
        ));
    }
    out.push(case(
        "swap_first_two",
        Op::SwapFirstTwo,
        vec![uniform(&[3, 4, 2], salt.next(), -1.0, 1.0)],
    ));
    out.push(case(
        "transpose3d_last_two",
        Op::Transpose3dLastTwo,
        vec![uniform(&[2, 3, 5], salt.next(), -1.0, 1.0)],
    ));
    out.push(case(
        "transpose_0_2",
        Op::Transpose { dim0: 0, dim1: 2 },
        vec![uniform(&[2, 3, 5], salt.next(), -1.0, 1.0)],
    ));
    for (shape, axis, start, len) in [
        (&[2, 7][..], 1usize, 4usize, 3usize),
        (&[2, 7], 1, 0, 7),
        (&[3, 4, 5], 1, 1, 2),
        (&[3, 4, 5], 0, 2, 1),
        (&[6], 0, 5, 1),
        (&[2, 3], 1, 3, 0),
        (&[0, 3], 1, 1, 2),
        (&[64, 300], 1, 17, 200),
    ] {
        out.push(case(
            format!("slice_{shape:?}_axis{axis}_{start}+{len}"),
            Op::Slice { axis, start, len },
            vec![uniform(shape, salt.next(), -1.0, 1.0)],
        ));
    }
    out.push(case(
        "slice_past_the_extent_error",
        Op::Slice {
            axis: 1,
            start: 5,
            len: 3,
        },
        vec![uniform(&[2, 7], salt.next(), -1.0, 1.0)],
    ));
    out.push(case(
        "transpose_big",
        Op::Transpose { dim0: 0, dim1: 1 },
        vec![uniform(&[65, 130], salt.next(), -1.0, 1.0)],
    ));
}

/// Axis reductions, full sums and the MSE loss, with empty operands.
fn reduce_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for (shape, axis) in [
        (&[3, 5, 2][..], 1usize),
        (&[3, 5, 2], 0),
        (&[3, 5, 2], 2),
        (&[4, 1], 1),
        (&[3, 0], 1),
        (&[64, 300], 0),
    ] {
        out.push(case(
            format!("reduce_sum_{shape:?}_axis{axis}"),
            Op::ReduceSum { axis },
            vec![uniform(shape, salt.next(), -1.0, 1.0)],
        ));
        out.push(case(
            format!("reduce_mean_{shape:?}_axis{axis}"),
            Op::ReduceMean { axis },
            vec![uniform(shape, salt.next(), -1.0, 1.0)],
        ));
    }
    for shape in [&[2, 3][..], &[0], &[], &[1000]] {
        out.push(case(
            format!("sum_{shape:?}"),
            Op::Sum,
            vec![uniform(shape, salt.next(), -1.0, 1.0)],
        ));
        out.push(case(
            format!("mse_loss_{shape:?}"),
            Op::MseLoss,
            vec![
                uniform(shape, salt.next(), -1.0, 1.0),
                uniform(shape, salt.next(), -1.0, 1.0),
            ],
        ));
    }
}

/// Cross-entropy in every reduction, far beyond exp's range, and bad class ids.
fn cross_entropy_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for reduction in Reduction::ALL {
        for (n, classes, scale) in [
            (4usize, 3usize, 2.0),
            (1, 1, 2.0),
            (0, 3, 2.0),
            (7, 5, 900.0), // far beyond exp's range: the max shift keeps it finite
            (300, 130, 4.0),
        ] {
            let ids: Vec<f64> = (0..n).map(|i| ((i * 7 + 3) % classes) as f64).collect();
            out.push(case(
                format!("cross_entropy_{}_{n}x{classes}_s{scale}", reduction.wire()),
                Op::CrossEntropy { reduction },
                vec![
                    uniform(&[n, classes], salt.next(), -scale, scale),
                    Tensor::new([n], ids).expect("one id per row"),
                ],
            ));
        }
    }
    // class ids that are not integral or not in [0, C) are errors on every engine
    for bad in [3.0, -1.0, 0.5, f64::NAN] {
        out.push(case(
            format!("cross_entropy_bad_target_{bad}_error"),
            Op::CrossEntropy {
                reduction: Reduction::Mean,
            },
            vec![
                uniform(&[2, 3], salt.next(), -1.0, 1.0),
                Tensor::new([2], vec![0.0, bad]).expect("2 ids"),
            ],
        ));
    }
}

/// Matrix products and linear layers.
fn linalg_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for (a, b) in [
        (&[5, 7][..], &[7, 3][..]),
        (&[1, 1], &[1, 1]),
        (&[3, 4, 5], &[3, 5, 2]),
        (&[64, 65], &[65, 33]),
        (&[2, 130, 70], &[2, 70, 129]),
        (&[4, 0], &[0, 3]),
    ] {
        out.push(case(
            format!("matmul_{a:?}x{b:?}"),
            Op::MatMul,
            vec![
                uniform(a, salt.next(), -1.0, 1.0),
                uniform(b, salt.next(), -1.0, 1.0),
            ],
        ));
    }
    for (x, o) in [
        (&[5][..], 3usize),
        (&[3, 7], 4),
        (&[2, 3, 7], 1),
        (&[64, 100], 50),
        (&[1, 1], 1),
        (&[0, 4], 2),
    ] {
        let i = *x.last().expect("linear inputs have an axis");
        out.push(case(
            format!("linear_{x:?}_to_{o}"),
            Op::Linear,
            vec![
                uniform(x, salt.next(), -1.0, 1.0),
                uniform(&[o, i], salt.next(), -1.0, 1.0),
                uniform(&[o], salt.next(), -1.0, 1.0),
            ],
        ));
    }
}

/// Causal attention on packed projections `[.., T, 3C]`: one position (nothing masked), one
/// head, one column per head, several heads, leading batch axes (none, one, two), no
/// positions, no batch entries, `T` odd and past several vector widths with two entries (two
/// tasks for a threaded engine); and a last extent that is no multiple of `3·heads`, rank 1, no
/// heads (shape errors on every engine).
fn attention_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for (shape, heads) in [
        (&[1, 3][..], 1usize),
        (&[1, 1, 12], 2),
        (&[4, 6], 1),
        (&[5, 12], 2),
        (&[3, 12], 4),
        (&[2, 3, 18], 3),
        (&[2, 2, 4, 24], 4),
        (&[1, 7, 9], 1),
        (&[2, 0, 6], 1),
        (&[0, 3, 6], 2),
        (&[2, 67, 48], 2),
    ] {
        out.push(case(
            format!("causal_attention_{shape:?}_heads{heads}"),
            Op::CausalAttention { heads },
            vec![uniform(shape, salt.next(), -2.0, 2.0)],
        ));
    }
    for (shape, heads) in [(&[3, 8][..], 2usize), (&[6][..], 1), (&[2, 6], 0)] {
        out.push(case(
            format!("causal_attention_{shape:?}_heads{heads}_error"),
            Op::CausalAttention { heads },
            vec![uniform(shape, salt.next(), -1.0, 1.0)],
        ));
    }
}

/// Convolutions and pools, padded and strided, with a max-pool tie.
fn conv_pool_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    // (input, outC, kH, kW, stride, padding, groups, dilation): the last four grouped or
    // dilated (depthwise, dilated and strided, both, groups of two channels)
    for (x, oc, kh, kw, stride, padding, groups, dilation) in [
        (
            &[2, 6, 5][..],
            3usize,
            3usize,
            2usize,
            2usize,
            1usize,
            1usize,
            1usize,
        ),
        (&[2, 3, 5, 5], 2, 3, 3, 1, 0, 1, 1),
        (&[1, 1, 4, 4], 1, 1, 1, 1, 0, 1, 1),
        (&[3, 8, 8], 4, 3, 3, 1, 1, 1, 1),
        (&[4, 3, 12, 12], 8, 3, 3, 2, 1, 1, 1),
        (&[2, 16, 9, 9], 16, 3, 3, 1, 1, 1, 1),
        (&[2, 4, 7, 7], 4, 3, 3, 1, 1, 4, 1),
        (&[5, 9, 8], 2, 3, 2, 2, 2, 1, 2),
        (&[2, 6, 9, 9], 6, 3, 3, 2, 2, 3, 2),
        (&[3, 4, 6, 5], 6, 2, 3, 1, 0, 2, 1),
    ] {
        let c = x[x.len() - 3];
        let spec = Conv2dSpec {
            in_channels: c,
            out_channels: oc,
            kernel_h: kh,
            kernel_w: kw,
            stride,
            padding,
            groups,
            dilation,
        };
        let grouped = match (groups, dilation) {
            (1, 1) => String::new(),
            _ => format!("_g{groups}_d{dilation}"),
        };
        // each geometry plain and with the fused ReLU
        let geometry = format!("{x:?}_o{oc}_k{kh}x{kw}_s{stride}_p{padding}{grouped}");
        for op in [Op::Conv2d(spec), Op::Conv2dRelu(spec)] {
            out.push(case(
                format!("{}_{geometry}", op.name()),
                op,
                vec![
                    uniform(x, salt.next(), -1.0, 1.0),
                    uniform(&[oc, c / groups, kh, kw], salt.next(), -1.0, 1.0),
                    uniform(&[oc], salt.next(), -1.0, 1.0),
                ],
            ));
        }
    }
    for kind in [PoolKind::Max, PoolKind::Avg] {
        for (x, kh, kw, stride, padding) in [
            (&[2, 7, 6][..], 2usize, 2usize, 2usize, 0usize),
            (&[2, 7, 6], 3, 3, 2, 1),
            (&[1, 2, 4, 5], 2, 3, 1, 1),
            (&[3, 1, 1], 1, 1, 1, 0),
            (&[4, 16, 16], 2, 2, 2, 0),
        ] {
            let spec = PoolSpec {
                kind,
                kernel_h: kh,
                kernel_w: kw,
                stride,
                padding,
                padded: padding > 0,
            };
            out.push(case(
                format!("{}_{x:?}_k{kh}x{kw}_s{stride}_p{padding}", spec.name()),
                Op::Pool(spec),
                vec![uniform(x, salt.next(), -2.0, 2.0)],
            ));
        }
    }
    // a max-pool window with a tie (first maximum wins)
    out.push(case(
        "max_pool2d_tie",
        Op::Pool(PoolSpec {
            kind: PoolKind::Max,
            kernel_h: 2,
            kernel_w: 2,
            stride: 2,
            padding: 0,
            padded: false,
        }),
        vec![Tensor::new([1, 2, 2], vec![3.0, 3.0, 1.0, 3.0]).expect("4 values")],
    ));
}

/// Batch norm in eval and train mode, one value per channel, an empty batch.
fn batch_norm_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for x in [&[2, 3, 2, 2][..], &[4, 3], &[1, 3, 5]] {
        out.push(case(
            format!("batch_norm_{x:?}"),
            Op::BatchNormEval {
                channels: 3,
                eps: 1e-5,
            },
            vec![
                uniform(x, salt.next(), -2.0, 2.0),
                uniform(&[3], salt.next(), 0.5, 1.5),
                uniform(&[3], salt.next(), -0.5, 0.5),
                uniform(&[3], salt.next(), -0.5, 0.5),
                uniform(&[3], salt.next(), 0.5, 2.0),
            ],
        ));
    }
    for (x, eps) in [
        (&[2, 3, 2, 2][..], None),
        (&[4, 2, 5, 5], Some(1e-3)),
        (&[1, 3, 1, 1], None), // one value per channel: var 0, output β, input gradient 0
        (&[1, 1, 1, 7], Some(1e-4)),
        (&[0, 3, 2, 2], None),
        (&[8, 16, 9, 9], None),
    ] {
        let c = x[1];
        out.push(case(
            format!("batch_norm_train_{x:?}_eps{eps:?}"),
            Op::BatchNormTrain { channels: c, eps },
            vec![
                uniform(x, salt.next(), -2.0, 3.0),
                uniform(&[c], salt.next(), 0.5, 1.5),
                uniform(&[c], salt.next(), -0.5, 0.5),
            ],
        ));
    }
}

/// Concatenation along each axis.
fn concat_cases(out: &mut Vec<OpCase>) {
    for (shapes, axis) in [
        (vec![&[2, 1][..], &[2, 3], &[2, 2]], 1usize),
        (vec![&[1, 3][..], &[2, 3]], 0),
        (vec![&[2, 2, 1][..], &[2, 2, 4]], 2),
        (vec![&[0, 2][..], &[3, 2]], 0),
    ] {
        let count = shapes.len();
        out.push(case(
            format!("concat_axis{axis}_{count}"),
            Op::Concat { axis },
            shapes.iter().map(|s| uniform(s, 99, -1.0, 1.0)).collect(),
        ));
    }
}

/// Embedding lookups: repeated ids (the weight's gradient sums them in position order), ids of
/// rank 2, no ids, a big table; and ids that are not integral or not in `[0, V)`.
fn embedding_cases(out: &mut Vec<OpCase>, salt: &mut Salt) {
    for (ids, rows, d) in [
        (vec![1.0, 3.0, 1.0, 0.0, 1.0], 4usize, 3usize),
        (vec![2.0, 0.0, 2.0, 1.0, 0.0, 2.0], 3, 2),
        (vec![], 5, 4),
        (vec![0.0], 1, 1),
        ((0..300).map(|i| ((i * 37) % 65) as f64).collect(), 65, 128),
    ] {
        let n = ids.len();
        let ids_shape: Vec<usize> = if n == 6 { vec![2, 3] } else { vec![n] };
        out.push(case(
            format!("embedding_{ids_shape:?}_of_{rows}x{d}"),
            Op::Embedding,
            vec![
                Tensor::new(Shape::from(ids_shape), ids).expect("one id per position"),
                uniform(&[rows, d], salt.next(), -2.0, 2.0),
            ],
        ));
    }
    for bad in [4.0, -1.0, 0.5, f64::NAN] {
        out.push(case(
            format!("embedding_bad_id_{bad}_error"),
            Op::Embedding,
            vec![
                Tensor::new([3], vec![0.0, bad, 1.0]).expect("3 ids"),
                uniform(&[4, 2], salt.next(), -1.0, 1.0),
            ],
        ));
    }
}

/// The random ops.
fn random_cases(out: &mut Vec<OpCase>) {
    out.push(case(
        "rand_uniform",
        Op::RandUniform {
            seed: 5,
            key: 9,
            shape: Shape::from([3, 4]),
        },
        vec![],
    ));
    out.push(case(
        "bernoulli_mask",
        Op::BernoulliMask {
            seed: 5,
            key: 9,
            shape: Shape::from([3, 4]),
        },
        vec![Tensor::scalar(0.6)],
    ));
}

/// Shape errors must be errors on every engine.
fn shape_error_cases(out: &mut Vec<OpCase>) {
    // shape errors must be errors on every engine
    out.push(case(
        "matmul_shape_error",
        Op::MatMul,
        vec![
            uniform(&[2, 3], 1, -1.0, 1.0),
            uniform(&[4, 2], 2, -1.0, 1.0),
        ],
    ));
    out.push(case(
        "add_shape_error",
        Op::Binary(BinaryOp::Add),
        vec![uniform(&[2], 1, -1.0, 1.0), uniform(&[3], 2, -1.0, 1.0)],
    ));
}
