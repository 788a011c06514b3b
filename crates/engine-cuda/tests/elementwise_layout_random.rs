//! The elementwise, layout and random families on the host emulation, at the edges the shared
//! suite does not reach: bitwise agreement with the reference's `f32` engine where the order of
//! operations is the same (data movement, the exact IEEE operations, the random streams), NaN,
//! infinities and signed zeros, sizes beyond one launch's grid, long broadcast sums, buffer
//! sharing, and errors instead of kernel reads past a buffer.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use torchlean_engine_cuda::geometry::{BLOCK, MAX_GRID};
use torchlean_engine_cuda::{emulation_ready, EmuF32};
use torchlean_spec::ops::{splitmix64, uniform_at};
use torchlean_spec::{
    Backend, BinaryOp, Elementwise, GeluApprox, Layout, Op, Random, Saved, Shape, Tensor, UnaryOp,
};

/// One launch's most threads: sizes above it loop inside the kernels.
const GRID_THREADS: usize = MAX_GRID as usize * BLOCK as usize;

fn emu(shape: &[usize], data: &[f32]) -> EmuF32 {
    emulation_ready().unwrap();
    EmuF32::from_host(Shape::from(shape), data).unwrap()
}

fn reference(shape: &[usize], data: &[f32]) -> Tensor<f32> {
    Tensor::new(Shape::from(shape), data.to_vec()).unwrap()
}

/// Bit for bit, except that any NaN equals any NaN (the device's and the host's NaN payloads
/// differ).
fn same_bits(got: &[f32], want: &[f32]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} elements, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
            return Err(format!(
                "element {i}: {g:e} ({:#x}), expected {w:e} ({:#x})",
                g.to_bits(),
                w.to_bits()
            ));
        }
    }
    Ok(())
}

fn assert_same(what: &str, got: &EmuF32, want: &Tensor<f32>) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    if let Err(e) = same_bits(&got.to_host().unwrap(), want.data()) {
        panic!("{what}: {e}");
    }
}

/// Deterministic values in `[-2, 2)`.
fn values(n: usize, salt: u64) -> Vec<f32> {
    let mut s = splitmix64(salt);
    (0..n)
        .map(|_| {
            s = splitmix64(s);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// The forward value and every operand's cotangent of `op`, through the one dispatch.
fn forward_and_vjp<B: Backend>(op: &Op, inputs: &[B], cot: &B) -> (B, Vec<Option<B>>)
where
    B::Error: std::fmt::Debug,
{
    let refs: Vec<&B> = inputs.iter().collect();
    let y = op.forward(&refs).unwrap();
    let grads = op.vjp(&Saved::for_op(op, &refs, &y), cot).unwrap();
    (y, grads.into_vec())
}

/// `op` on the emulation and on the reference `f32` engine: forward and VJP bit for bit.
fn check_exact(name: &str, op: &Op, inputs: &[(&[usize], Vec<f32>)], cot: &[f32]) {
    let e: Vec<EmuF32> = inputs.iter().map(|(s, d)| emu(s, d)).collect();
    let r: Vec<Tensor<f32>> = inputs.iter().map(|(s, d)| reference(s, d)).collect();
    let out = op.infer_shape(&r.iter().map(|t| t.shape().clone()).collect::<Vec<_>>());
    let out = out.unwrap();
    let (ey, eg) = forward_and_vjp(op, &e, &EmuF32::from_host(out.clone(), cot).unwrap());
    let (ry, rg) = forward_and_vjp(op, &r, &Tensor::new(out, cot.to_vec()).unwrap());
    assert_same(&format!("{name}: forward"), &ey, &ry);
    for (k, (g, w)) in eg.iter().zip(&rg).enumerate() {
        match (g, w) {
            (Some(g), Some(w)) => assert_same(&format!("{name}: d operand {k}"), g, w),
            (None, None) => {}
            _ => panic!("{name}: operand {k} has a cotangent on one engine only"),
        }
    }
}

/// NaN, infinities, signed zeros, the smallest subnormal, ordinary values.
const EDGES: [f32; 10] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    1e-45,
    -1.5,
    0.75,
    3.0e38,
    -2.0,
];

#[test]
fn exact_unary_functions_match_the_reference_bit_for_bit_at_the_edges() {
    // the functions whose every operation is a correctly rounded IEEE one
    for u in [
        UnaryOp::Abs,
        UnaryOp::Sqrt,
        UnaryOp::Inv,
        UnaryOp::Relu,
        UnaryOp::Neg,
    ] {
        let cot: Vec<f32> = (0..EDGES.len()).map(|i| i as f32 - 4.5).collect();
        check_exact(u.name(), &Op::Unary(u), &[(&[10], EDGES.to_vec())], &cot);
    }
}

#[test]
fn binary_functions_match_the_reference_bit_for_bit_on_nan_ties_and_zeros() {
    // every pair of edge values, both ways round (NaN on either side, ties, +0 against -0)
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &x in &EDGES {
        for &y in &EDGES {
            a.push(x);
            b.push(y);
        }
    }
    let n = a.len();
    let cot = values(n, 9);
    for op in BinaryOp::ALL {
        check_exact(
            op.name(),
            &Op::Binary(op),
            &[(&[n], a.clone()), (&[n], b.clone())],
            &cot,
        );
    }
}

#[test]
fn scale_shift_and_clamp_match_the_reference_bit_for_bit() {
    let x = EDGES.to_vec();
    let cot = values(x.len(), 3);
    for op in [
        Op::Scale { c: -0.5 },
        Op::Scale { c: 0.1 },
        Op::AddScalar { c: 1e-3 },
        Op::Clamp {
            min: Some(-1.5),
            max: Some(0.75),
        },
        Op::Clamp {
            min: None,
            max: Some(0.0),
        },
        Op::Clamp {
            min: Some(-0.0),
            max: None,
        },
        Op::Clamp {
            min: None,
            max: None,
        },
    ] {
        check_exact(&format!("{op:?}"), &op, &[(&[10], x.clone())], &cot);
    }
}

/// `a` and `b` agree to `rel` relative to the larger magnitude, or are both NaN, or are the same
/// infinity.
fn close(a: f32, b: f32, rel: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rel * a.abs().max(b.abs())
}

#[test]
fn transcendental_functions_follow_the_reference_at_nan_and_infinities() {
    let x = EDGES.to_vec();
    let cot = vec![1.0f32; x.len()];
    for u in UnaryOp::ALL {
        let op = Op::Unary(u);
        let (ey, eg) = forward_and_vjp(&op, &[emu(&[10], &x)], &emu(&[10], &cot));
        let (ry, rg) = forward_and_vjp(&op, &[reference(&[10], &x)], &reference(&[10], &cot));
        let pairs = [
            ("forward", ey.to_host().unwrap(), ry.data().to_vec()),
            (
                "vjp",
                eg[0].as_ref().unwrap().to_host().unwrap(),
                rg[0].as_ref().unwrap().data().to_vec(),
            ),
        ];
        for (what, got, want) in pairs {
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    close(*g, *w, 1e-6),
                    "{} {what} at {:e}: {g:e}, reference {w:e}",
                    u.name(),
                    x[i]
                );
            }
        }
    }
}

#[test]
fn gelu_constants_reach_the_kernels() {
    // a gelu computed without its constants would be far off: check ordinary values closely
    let x = values(64, 5);
    for a in GeluApprox::ALL {
        let op = Op::Unary(UnaryOp::Gelu(a));
        let (ey, eg) = forward_and_vjp(&op, &[emu(&[64], &x)], &emu(&[64], &x));
        let (ry, rg) = forward_and_vjp(&op, &[reference(&[64], &x)], &reference(&[64], &x));
        let got = ey.to_host().unwrap();
        let dgot = eg[0].as_ref().unwrap().to_host().unwrap();
        let dwant = rg[0].as_ref().unwrap();
        for i in 0..64 {
            assert!(close(got[i], ry.data()[i], 1e-5), "{a:?} at {}", x[i]);
            assert!(close(dgot[i], dwant.data()[i], 1e-5), "{a:?}' at {}", x[i]);
        }
    }
}

#[test]
fn uniform_noise_and_masks_equal_the_reference_bit_for_bit() {
    emulation_ready().unwrap();
    let seeds = [0u64, 1, 42, 0x9E37_79B9_7F4A_7C15, u64::MAX];
    let keys = [0u64, 7, 1 << 63, u64::MAX];
    for &seed in &seeds {
        for &key in &keys {
            for n in [0usize, 1, 257, 4099] {
                let shape = Shape::from([n]);
                let got = EmuF32::rand_uniform(seed, key, &shape).unwrap();
                let want = <Tensor<f32> as Random>::rand_uniform(seed, key, &shape).unwrap();
                assert_same(&format!("uniform {seed} {key} {n}"), &got, &want);
                for p in [0.0f32, 0.3, 0.5, 1.0] {
                    let kp = EmuF32::from_host(Shape::scalar(), &[p]).unwrap();
                    let got = EmuF32::bernoulli_mask(seed, key, &kp, &shape).unwrap();
                    let rp = Tensor::new(Shape::scalar(), vec![p]).unwrap();
                    let want = Tensor::bernoulli_mask(seed, key, &rp, &shape).unwrap();
                    assert_same(&format!("mask {seed} {key} {n} {p}"), &got, &want);
                }
            }
        }
    }
}

#[test]
fn streams_longer_than_one_launch_grid_continue_the_sequence() {
    emulation_ready().unwrap();
    let n = GRID_THREADS + 1001;
    let got = EmuF32::rand_uniform(5, 6, &Shape::from([n])).unwrap();
    let got = got.to_host().unwrap();
    for i in [
        0,
        1,
        GRID_THREADS - 1,
        GRID_THREADS,
        GRID_THREADS + 1,
        n - 1,
    ] {
        assert_eq!(
            got[i].to_bits(),
            (uniform_at(5, 6, i as u64) as f32).to_bits(),
            "element {i}"
        );
    }
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, &v)| v.to_bits() == (uniform_at(5, 6, i as u64) as f32).to_bits()));
}

#[test]
fn elementwise_and_layout_kernels_cover_sizes_beyond_one_launch_grid() {
    let n = GRID_THREADS + 3;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let ex = emu(&[n], &x);
    let y = EmuF32::add_scalar(&ex, 1.0).unwrap().to_host().unwrap();
    assert!(y.iter().zip(&x).all(|(a, b)| *a == b + 1.0));
    // a transpose [2, n/2+..] -> [.., 2] whose last elements are past one grid
    let half = n.div_ceil(2);
    let x2: Vec<f32> = (0..2 * half).map(|i| i as f32).collect();
    let t = EmuF32::permute(&emu(&[2, half], &x2), &[1, 0], &Shape::from([half, 2]))
        .unwrap()
        .to_host()
        .unwrap();
    for i in [0, 1, half - 1] {
        assert_eq!(t[2 * i], i as f32);
        assert_eq!(t[2 * i + 1], (half + i) as f32);
    }
}

#[test]
fn a_long_broadcast_sum_is_accurate() {
    // a scalar broadcast over 300 000 elements: its VJP sums them all; values of both signs
    // and very different sizes, where a naive f32 running sum loses digits
    let n = 300_000;
    let cot: Vec<f32> = (0..n)
        .map(|i| match i % 3 {
            0 => 1e4,
            1 => -1e4,
            _ => 1e-3 * ((i % 7) as f32 + 1.0),
        })
        .collect();
    let exact: f64 = cot.iter().map(|&v| f64::from(v)).sum();
    let got = EmuF32::broadcast_vjp(&emu(&[n], &cot), &Shape::scalar()).unwrap();
    let got = f64::from(got.to_host().unwrap()[0]);
    assert!(
        ((got - exact) / exact).abs() < 1e-6,
        "sum {got}, exactly {exact}"
    );
}

#[test]
fn split_broadcast_sums_equal_the_reference_within_one_rounding() {
    // few sources with long sums take the two-pass split; chunks of the summed range start and
    // end inside rows of its innermost axis, and two summed axes are apart
    for (from, to) in [
        (vec![3, 1, 5], vec![40, 3, 30, 5]),
        // 549 targets in two chunks of 275: the second starts inside a row of 9
        (vec![3, 1, 5], vec![61, 3, 9, 5]),
        (vec![1], vec![700]),
        (vec![2, 1], vec![2, 1000]),
    ] {
        let n_to: usize = to.iter().product();
        let x: Vec<f32> = values(from.iter().product(), 1);
        let cot = values(n_to, 2);
        let op = Op::BroadcastTo {
            from: Shape::from(from.as_slice()),
            to: Shape::from(to.as_slice()),
        };
        let (_, eg) = forward_and_vjp(&op, &[emu(&from, &x)], &emu(&to, &cot));
        let x64 = Tensor::new(
            Shape::from(from.as_slice()),
            x.iter().map(|&v| f64::from(v)).collect(),
        )
        .unwrap();
        let c64 = Tensor::new(
            Shape::from(to.as_slice()),
            cot.iter().map(|&v| f64::from(v)).collect(),
        )
        .unwrap();
        let (_, rg) = forward_and_vjp(&op, &[x64], &c64);
        let got = eg[0].as_ref().unwrap().to_host().unwrap();
        for (g, w) in got.iter().zip(rg[0].as_ref().unwrap().data()) {
            assert!(
                (f64::from(*g) - w).abs() <= w.abs() * 1e-7,
                "{from:?} -> {to:?}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn moving_nothing_shares_the_buffer() {
    let x = emu(&[2, 3], &values(6, 1));
    let same = Shape::from([2, 3]);
    assert!(EmuF32::relabel(&x, &Shape::from([3, 2]))
        .unwrap()
        .shares_storage_with(&x));
    assert!(EmuF32::broadcast(&x, &same)
        .unwrap()
        .shares_storage_with(&x));
    assert!(EmuF32::broadcast_vjp(&x, &same)
        .unwrap()
        .shares_storage_with(&x));
    assert!(EmuF32::permute(&x, &[0, 1], &same)
        .unwrap()
        .shares_storage_with(&x));
    assert!(EmuF32::slice(&x, 1, 0, &same)
        .unwrap()
        .shares_storage_with(&x));
    assert!(EmuF32::slice_vjp(&x, &same, 1, 0)
        .unwrap()
        .shares_storage_with(&x));
    let (da, db) = EmuF32::binary_vjp(BinaryOp::Add, None, None, &x).unwrap();
    assert!(da.shares_storage_with(&x) && db.shares_storage_with(&x));
}

#[test]
fn missing_saved_values_and_a_non_scalar_probability_are_errors() {
    let x = emu(&[3], &[1.0, 2.0, 3.0]);
    let e = EmuF32::unary_vjp(UnaryOp::Exp, Some(&x), None, &x).unwrap_err();
    assert!(e.to_string().contains("exp"), "{e}");
    assert!(EmuF32::unary_vjp(UnaryOp::Log, None, Some(&x), &x).is_err());
    assert!(EmuF32::binary_vjp(BinaryOp::Mul, Some(&x), None, &x).is_err());
    // a saved value of another size would make the kernel read past it
    let short = emu(&[2], &[1.0, 2.0]);
    assert!(EmuF32::unary_vjp(UnaryOp::Log, Some(&short), None, &x).is_err());
    assert!(EmuF32::binary(BinaryOp::Add, &x, &short).is_err());
    let e = EmuF32::bernoulli_mask(1, 2, &x, &Shape::from([4])).unwrap_err();
    assert!(e.to_string().contains("bernoulli_mask"), "{e}");
}

#[test]
fn layout_calls_the_shape_rules_refuse_are_errors_not_reads_past_a_buffer() {
    let x = emu(&[2, 3], &values(6, 4));
    let y = emu(&[2, 2], &values(4, 5));
    let s = |d: &[usize]| Shape::from(d);
    // an output shape that does not follow from the operands would make a kernel write or
    // read past a buffer: each is refused, naming the op
    let errors = [
        EmuF32::concat(&[&x, &y], 1, &s(&[2, 9])).map(|_| ()),
        EmuF32::concat(&[&x, &y], 0, &s(&[4, 3])).map(|_| ()),
        EmuF32::concat_vjp(&x, &[s(&[2, 2]), s(&[2, 2])], 1).map(|_| ()),
        EmuF32::permute(&x, &[1, 0], &s(&[2, 3])).map(|_| ()),
        EmuF32::permute(&x, &[1, 1], &s(&[3, 3])).map(|_| ()),
        EmuF32::slice(&x, 1, 2, &s(&[2, 2])).map(|_| ()),
        EmuF32::slice(&x, 5, 0, &s(&[2, 1])).map(|_| ()),
        EmuF32::slice_vjp(&y, &s(&[2, 3]), 1, 2).map(|_| ()),
        EmuF32::broadcast(&x, &s(&[4, 2, 4])).map(|_| ()),
        EmuF32::broadcast(&x, &s(&[3])).map(|_| ()),
        EmuF32::broadcast_vjp(&x, &s(&[4])).map(|_| ()),
    ];
    for (k, e) in errors.into_iter().enumerate() {
        let e = e.err().unwrap_or_else(|| panic!("call {k} was accepted"));
        let msg = e.to_string();
        assert!(
            ["concat", "permute", "slice", "broadcast_to"]
                .iter()
                .any(|op| msg.contains(op)),
            "call {k}: {msg}"
        );
    }
}

/// A layout op on random shapes, with its operands.
#[derive(Debug, Clone)]
struct LayoutCase {
    op: Op,
    shapes: Vec<Vec<usize>>,
}

fn dims_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![3 => 0usize..4, 1 => 4usize..9], 0..=4)
}

fn layout_case() -> impl Strategy<Value = LayoutCase> {
    let permute = dims_strategy()
        .prop_flat_map(|d| {
            let perm = Just((0..d.len()).collect::<Vec<_>>()).prop_shuffle();
            (Just(d), perm)
        })
        .prop_map(|(d, perm)| LayoutCase {
            op: Op::Permute { perm },
            shapes: vec![d],
        });
    let broadcast = (
        dims_strategy(),
        prop::collection::vec(any::<bool>(), 4),
        0usize..=4,
    )
        .prop_map(|(to, ones, drop)| {
            let drop = drop.min(to.len());
            let from: Vec<usize> = to[drop..]
                .iter()
                .zip(&ones)
                .map(|(&d, &one)| if one { 1 } else { d })
                .collect();
            LayoutCase {
                op: Op::BroadcastTo {
                    from: Shape::from(from.as_slice()),
                    to: Shape::from(to.as_slice()),
                },
                shapes: vec![from],
            }
        });
    let slice = (
        dims_strategy(),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
    )
        .prop_filter("slice needs an axis", |(d, _, _)| !d.is_empty())
        .prop_map(|(mut d, axis, at)| {
            let axis = axis.index(d.len());
            d[axis] += 2;
            let start = at.index(d[axis] + 1);
            let len = (d[axis] - start) / 2;
            LayoutCase {
                op: Op::Slice { axis, start, len },
                shapes: vec![d],
            }
        });
    let concat = (
        dims_strategy(),
        any::<prop::sample::Index>(),
        prop::collection::vec(0usize..4, 2..=3),
    )
        .prop_filter("concat needs an axis", |(d, _, _)| !d.is_empty())
        .prop_map(|(d, axis, extents)| {
            let axis = axis.index(d.len());
            let shapes = extents
                .iter()
                .map(|&e| {
                    let mut s = d.clone();
                    s[axis] = e;
                    s
                })
                .collect();
            LayoutCase {
                op: Op::Concat { axis },
                shapes,
            }
        });
    prop_oneof![permute, broadcast, slice, concat]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Data movement is exact: forward and VJP equal the reference `f32` engine bit for bit,
    /// except broadcast's VJP (a sum), which is within `f32` rounding of the `f64` reference.
    #[test]
    fn layout_ops_equal_the_reference(case in layout_case(), salt in any::<u64>()) {
        let shapes: Vec<Shape> = case.shapes.iter().map(|d| Shape::from(d.as_slice())).collect();
        let out = case.op.infer_shape(&shapes).unwrap();
        let data: Vec<Vec<f32>> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| values(s.size(), salt ^ k as u64))
            .collect();
        let cot = values(out.size(), !salt);
        let inputs: Vec<(&[usize], Vec<f32>)> = case
            .shapes
            .iter()
            .map(|d| d.as_slice())
            .zip(data)
            .collect();
        if !matches!(case.op, Op::BroadcastTo { .. }) {
            check_exact(&format!("{:?} on {:?}", case.op, case.shapes), &case.op, &inputs, &cot);
            return Ok(());
        }
        let (from, x) = &inputs[0];
        let e = [emu(from, x)];
        let (ey, eg) = forward_and_vjp(&case.op, &e, &EmuF32::from_host(out.clone(), &cot).unwrap());
        let (ry, _) = forward_and_vjp(&case.op, &[reference(from, x)], &Tensor::new(out.clone(), cot.clone()).unwrap());
        assert_same("broadcast", &ey, &ry);
        let r64 = [Tensor::new(Shape::from(*from), x.iter().map(|&v| f64::from(v)).collect()).unwrap()];
        let c64 = Tensor::new(out, cot.iter().map(|&v| f64::from(v)).collect()).unwrap();
        let (_, rg) = forward_and_vjp(&case.op, &r64, &c64);
        let got = eg[0].as_ref().unwrap().to_host().unwrap();
        let want = rg[0].as_ref().unwrap();
        for (g, w) in got.iter().zip(want.data()) {
            // one rounding of the exact (f64) sum
            prop_assert!((f64::from(*g) - w).abs() <= w.abs() * 1e-7 + 1e-30, "{g} vs {w}");
        }
    }
}
