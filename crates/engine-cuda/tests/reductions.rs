//! The reduce, norm and pool families on the host emulation: the shared suite's cases of these
//! families, and what the suite does not reach — sums longer than one launch's grid and than
//! one level of the partial-sum tree, bit-identical reruns, NaN policies.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cuda::geometry::{BLOCK, MAX_GRID};
use torchlean_engine_cuda::{emulation_ready, EmuF32};
use torchlean_engine_suite::{check_case, norm_rel_error, op_cases, OpCase, Tolerance};
use torchlean_runtime::{forward, vjp, Kernels, Saved};
use torchlean_spec::{Op, PoolKind, PoolSpec, Shape, Tensor};

fn family(op: &Op) -> bool {
    matches!(
        op,
        Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::LayerNorm { .. }
            | Op::BatchNormEval { .. }
            | Op::BatchNormTrain { .. }
            | Op::ReduceSum { .. }
            | Op::ReduceMean { .. }
            | Op::Sum
            | Op::MseLoss
            | Op::CrossEntropy { .. }
            | Op::Pool(_)
    )
}

/// Runs `cases` through the suite's check on the emulation; panics listing the failures.
fn assert_cases_pass(cases: &[OpCase]) {
    emulation_ready().unwrap();
    let failures: Vec<String> = cases
        .iter()
        .map(|c| check_case::<EmuF32>(c, Tolerance::F32))
        .filter(|r| !r.pass())
        .map(|r| format!("{} ({}): {}", r.name, r.op, r.failures.join("; ")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_suite_cases_of_the_reduce_norm_and_pool_families_pass() {
    let cases: Vec<OpCase> = op_cases().into_iter().filter(|c| family(&c.op)).collect();
    // every op of the three families is in the table (a filter that matched nothing would
    // pass vacuously)
    assert!(cases.len() >= 60, "{} cases", cases.len());
    assert_cases_pass(&cases);
}

/// Values in [-1, 1) with an offset, deterministic.
fn values(n: usize, offset: f64) -> Vec<f64> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            s = torchlean_spec::ops::splitmix64(s);
            offset + (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

fn tensor(shape: &[usize], offset: f64) -> Tensor<f64> {
    let n = shape.iter().product();
    Tensor::new(Shape::from(shape), values(n, offset)).unwrap()
}

fn case(name: &str, op: Op, inputs: Vec<Tensor<f64>>) -> OpCase {
    OpCase {
        name: name.into(),
        op,
        inputs,
    }
}

/// More elements than one launch has threads: the kernels' grid-stride loops and a three-level
/// partial-sum tree.
const LONG: usize = (MAX_GRID as usize) * (BLOCK as usize) + 12_345;

#[test]
fn long_sums_beyond_one_grid_match_the_reference() {
    let x = tensor(&[LONG], 0.25);
    let t = tensor(&[LONG], -0.5);
    assert_cases_pass(&[
        case("sum_long", Op::Sum, vec![x.clone()]),
        case("mse_long", Op::MseLoss, vec![x.clone(), t]),
        case(
            "reduce_mean_long_rows",
            Op::ReduceMean { axis: 1 },
            vec![x.reshaped(Shape::from([1, LONG])).unwrap()],
        ),
    ]);
}

#[test]
fn batch_statistics_over_many_positions_match_the_reference() {
    // 2·3·40·40 = 9600 positions per channel: two levels of partials; a large offset and a
    // small spread make the mean's rounding visible in the normalised output
    let x = tensor(&[6, 2, 40, 40], 0.0)
        .map(|&v| Ok(1000.0 + 0.01 * v))
        .unwrap();
    let gamma = Tensor::new(Shape::from([2]), vec![1.5, 0.5]).unwrap();
    let beta = Tensor::new(Shape::from([2]), vec![0.25, -1.0]).unwrap();
    let train = Op::BatchNormTrain {
        channels: 2,
        eps: Some(1e-5),
    };
    assert_cases_pass(&[case("bn_train_long", train, vec![x, gamma, beta])]);
}

#[test]
fn strided_sums_over_several_partials_match_the_reference() {
    // more than one partial per output, items at a stride, and (for batch norm) partials that
    // step across images: the kernel's (m1, m2) stepping
    let bn_train = Op::BatchNormTrain {
        channels: 2,
        eps: None,
    };
    let bn_eval = Op::BatchNormEval {
        channels: 2,
        eps: 1e-5,
    };
    let param = |v: f64| Tensor::new(Shape::from([2]), vec![v, 2.0 * v]).unwrap();
    assert_cases_pass(&[
        case(
            "reduce_sum_700x3_axis0",
            Op::ReduceSum { axis: 0 },
            vec![tensor(&[700, 3], 0.0)],
        ),
        case(
            "reduce_mean_2x600x3_axis1",
            Op::ReduceMean { axis: 1 },
            vec![tensor(&[2, 600, 3], 0.5)],
        ),
        case(
            "bn_train_300x2x1x3",
            bn_train.clone(),
            vec![tensor(&[300, 2, 1, 3], 0.3), param(1.0), param(0.1)],
        ),
        case(
            "bn_train_1000x2x1x1",
            bn_train,
            vec![tensor(&[1000, 2, 1, 1], -0.2), param(0.7), param(0.0)],
        ),
        case(
            "bn_eval_300x2x3",
            bn_eval,
            vec![
                tensor(&[300, 2, 3], 0.0),
                param(1.0),
                param(0.5),
                param(0.1),
                param(0.8),
            ],
        ),
    ]);
}

#[test]
fn partial_sums_keep_the_range_of_a_double_and_infinities() {
    // 1000 values near f32's largest: every partial sum overflows f32, the mean does not
    let big = Tensor::new([1000], vec![3.0e38; 1000]).unwrap();
    let mut with_inf = values(LONG, 0.0);
    with_inf[LONG / 2] = f64::INFINITY;
    let with_inf = Tensor::new([LONG], with_inf).unwrap();
    assert_cases_pass(&[
        case(
            "mean_of_huge_values",
            Op::ReduceMean { axis: 0 },
            vec![big.clone()],
        ),
        case(
            "mean_of_huge_rows",
            Op::BatchNormTrain {
                channels: 1,
                eps: None,
            },
            vec![
                big.reshaped(Shape::from([10, 1, 10, 10])).unwrap(),
                Tensor::new([1], vec![1.0]).unwrap(),
                Tensor::new([1], vec![0.0]).unwrap(),
            ],
        ),
        case("sum_with_an_infinity", Op::Sum, vec![with_inf]),
    ]);
}

#[test]
fn reruns_are_bit_identical() {
    emulation_ready().unwrap();
    let x = EmuF32::from_f64(&tensor(&[LONG], 0.1)).unwrap();
    let a = forward::<EmuF32>(&Op::Sum, &[&x]).unwrap();
    let b = forward::<EmuF32>(&Op::Sum, &[&x]).unwrap();
    assert!(a.bit_eq(&b));
    let want: f64 = x.to_f64().unwrap().data().iter().sum();
    let got = a.to_f64().unwrap().data()[0];
    assert!((got - want).abs() <= 1e-6 * want.abs(), "{got} vs {want}");
}

fn pool_spec(kind: PoolKind) -> PoolSpec {
    PoolSpec {
        kind,
        kernel_h: 2,
        kernel_w: 2,
        stride: 1,
        padding: 0,
        padded: false,
    }
}

/// The engine's forward and input cotangent of `op` on `x`, and the reference's.
fn engine_and_reference(op: &Op, x: &Tensor<f64>) -> [(Tensor<f64>, Tensor<f64>); 2] {
    emulation_ready().unwrap();
    let xe = EmuF32::from_f64(x).unwrap();
    let y = forward::<EmuF32>(op, &[&xe]).unwrap();
    let n = y.shape().size();
    let cot = Tensor::new(y.shape().clone(), (0..n).map(|i| 1.0 + i as f64).collect()).unwrap();
    let ce = EmuF32::from_f64(&cot).unwrap();
    let g = vjp::<EmuF32>(op, &Saved::for_op(op, &[&xe], &y), &ce).unwrap();
    let engine = (
        y.to_f64().unwrap(),
        g.into_vec()[0].as_ref().unwrap().to_f64().unwrap(),
    );
    let yr = op.forward(&[x]).unwrap();
    let gr = op.vjp(&Saved::for_op(op, &[x], &yr), &cot).unwrap();
    let reference = (yr, gr.into_vec()[0].clone().unwrap());
    [engine, reference]
}

fn bits(t: &Tensor<f64>) -> Vec<u64> {
    t.data().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn max_pool_routes_to_the_first_maximum_and_a_nan_takes_over() {
    let nan = f64::NAN;
    // 2×2 windows at stride 1 over 3×3: window (0,0) = cells 0 1 3 4 has a NaN after a
    // larger value; (0,1) = 1 2 4 5 ties at 5 (cell 2 wins); (1,1) = 4 5 7 8 holds two NaNs
    // (the later one, cell 8, takes the gradient)
    let x = Tensor::new([1, 3, 3], vec![9.0, 2.0, 5.0, nan, 5.0, 1.0, 0.0, nan, nan]).unwrap();
    let [(y, g), (yr, gr)] = engine_and_reference(&Op::Pool(pool_spec(PoolKind::Max)), &x);
    assert_eq!(bits(&y), bits(&yr), "{y:?} vs {yr:?}");
    assert_eq!(bits(&g), bits(&gr), "{g:?} vs {gr:?}");
    assert!(y.data()[0].is_nan());
    assert_eq!(y.data()[1], 5.0);
    // cotangents 1, 2, 3, 4 for windows (0,0), (0,1), (1,0), (1,1)
    assert_eq!(g.data(), &[0.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 3.0, 4.0]);
}

#[test]
fn huge_pooling_windows_visit_only_real_cells_without_overflow() {
    let huge = |kind, k: usize| {
        Op::Pool(PoolSpec {
            kind,
            kernel_h: k,
            kernel_w: k,
            stride: 1,
            padding: k / 2,
            padded: true,
        })
    };
    let x = Tensor::new([1, 1, 1], vec![3.0]).unwrap();
    let big = Tensor::new([1, 1, 1], vec![2.0f64.powi(62)]).unwrap();
    assert_cases_pass(&[
        case("max_pool_k2^62", huge(PoolKind::Max, 1 << 62), vec![x]),
        case("avg_pool_k2^31", huge(PoolKind::Avg, 1 << 31), vec![big]),
    ]);
}

#[test]
fn a_nan_reaches_its_whole_softmax_line_and_only_it() {
    let nan = f64::NAN;
    let x = Tensor::new([2, 3], vec![1.0, nan, 0.5, 0.25, -1.0, 2.0]).unwrap();
    for op in [Op::Softmax { axis: 1 }, Op::LogSoftmax { axis: 1 }] {
        let [(y, _), (yr, _)] = engine_and_reference(&op, &x);
        assert!(y.data()[..3].iter().all(|v| v.is_nan()), "{op:?}: {y:?}");
        assert!(norm_rel_error(&y, &yr) < 1e-6, "{op:?}: {y:?} vs {yr:?}");
    }
}
