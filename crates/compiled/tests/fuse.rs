//! `fuse::conv_relu` keeps the graph's meaning to the bit: two convolutions each followed by
//! its ReLU, then a sum, fused and not, on the CPU engine in f32 and f64 — the output and every
//! input's gradient (the image, both weights and both biases) — over random geometries, batch
//! sizes (one image: the whole cotangent masked at once; several: per group) and thread counts.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use torchlean_compiled::{compile, fuse, GraphData, Pos};
use torchlean_engine_cpu::{with_threads, CpuF32, CpuF64};
use torchlean_runtime::Kernels;
use torchlean_spec::{Conv2dSpec, Op, Shape, Tensor, UnaryOp};

#[derive(Clone, Copy, Debug)]
struct Geometry {
    n: usize,
    c: usize,
    mid: usize,
    oc: usize,
    k: usize,
    stride: usize,
    padding: usize,
    hw: usize,
}

/// `sum(relu(conv(relu(conv(x, W1, b1)), W2, b2)))` and its output position; inputs x, W1, b1,
/// W2, b2.
fn graph(g: Geometry) -> (GraphData, Pos) {
    let first = Conv2dSpec::ungrouped(g.c, g.mid, (g.k, g.k), g.stride, g.padding);
    let second = Conv2dSpec::ungrouped(g.mid, g.oc, (g.k, g.k), 1, g.padding);
    let mut gd = GraphData::new(vec![
        Shape::from([g.n, g.c, g.hw, g.hw]),
        Shape::from([g.mid, g.c, g.k, g.k]),
        Shape::from([g.mid]),
        Shape::from([g.oc, g.mid, g.k, g.k]),
        Shape::from([g.oc]),
    ])
    .unwrap();
    let relu = Op::Unary(UnaryOp::Relu);
    let y1 = gd.push(Op::Conv2d(first), vec![0, 1, 2], None).unwrap();
    let r1 = gd.push(relu.clone(), vec![y1], None).unwrap();
    let y2 = gd.push(Op::Conv2d(second), vec![r1, 3, 4], None).unwrap();
    let r2 = gd.push(relu, vec![y2], None).unwrap();
    let out = gd.push(Op::Sum, vec![r2], None).unwrap();
    (gd, out)
}

/// Deterministic values in [-1, 1) from `seed`.
fn values(shape: &Shape, seed: u64) -> Tensor<f64> {
    let mut st = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    Tensor::from_fn(shape.clone(), |_| {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        (st >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    })
    .unwrap()
}

/// The output and every input's gradient, as bits of their `f64` values.
fn run<V: Kernels>(gd: &GraphData, out: Pos, seed: u64) -> Vec<Vec<u64>> {
    let inputs: Vec<V> = gd
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, s)| V::from_f64(&values(s, seed + i as u64)).unwrap())
        .collect();
    let (tape, vals) = compile::<V>(gd, inputs).unwrap();
    let bits = |v: &V| -> Vec<u64> {
        let t = v.to_f64().unwrap();
        t.data().iter().map(|x| x.to_bits()).collect()
    };
    let mut got = vec![bits(&vals[out])];
    let cot = V::from_f64(&Tensor::full(gd.shape(out).clone(), 1.0).unwrap()).unwrap();
    let grads = tape.backward_dense_all(out, cot).unwrap();
    got.extend(grads.iter().take(gd.n_inputs()).map(bits));
    tape.release();
    got
}

fn check<V: Kernels>(g: Geometry, seed: u64, threads: usize) {
    let (gd, out) = graph(g);
    let fused = fuse::conv_relu(&gd, &[out]).unwrap().expect("two fusions");
    let kinds: Vec<_> = fused.graph.nodes().iter().map(|n| n.op.name()).collect();
    assert_eq!(kinds, ["conv2d_relu", "conv2d_relu", "sum"]);
    let (plain, merged) = with_threads(threads, || {
        (
            run::<V>(&gd, out, seed),
            run::<V>(&fused.graph, fused.position[out], seed),
        )
    });
    assert_eq!(plain, merged, "{g:?}, seed {seed}, {threads} thread(s)");
}

fn geometry() -> impl Strategy<Value = Geometry> {
    (
        1usize..5,
        1usize..4,
        1usize..18,
        1usize..18,
        1usize..4,
        1usize..3,
        0usize..2,
        0usize..6,
    )
        .prop_map(|(n, c, mid, oc, k, stride, padding, extra)| Geometry {
            n,
            c,
            mid,
            oc,
            k,
            stride,
            padding,
            // room for both convolutions' kernels
            hw: 2 * k * stride + extra,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fusing_conv_relu_keeps_every_bit(g in geometry(), seed in 0u64..1000, threads in 1usize..3) {
        check::<CpuF32>(g, seed, threads);
        check::<CpuF64>(g, seed, threads);
    }
}

/// The routes the random geometries seldom reach: output channels in lanes (16, small
/// outputs), Winograd (16 and 16 channels, 16 × 16 outputs), a batch of several groups.
#[test]
fn fusing_keeps_the_bits_on_the_lanes_and_winograd_routes() {
    for g in [
        Geometry {
            n: 3,
            c: 2,
            mid: 16,
            oc: 16,
            k: 3,
            stride: 1,
            padding: 1,
            hw: 8,
        },
        Geometry {
            n: 9,
            c: 16,
            mid: 16,
            oc: 16,
            k: 3,
            stride: 1,
            padding: 1,
            hw: 16,
        },
    ] {
        for threads in [1, 2] {
            check::<CpuF32>(g, 7, threads);
            check::<CpuF64>(g, 7, threads);
        }
    }
}
