//! The CPU engine's convolution on inputs the random suites do not draw: NaN and infinity
//! (which must reach exactly the outputs and gradients the reference engine's do, whatever
//! patch layout the engine picks) and an empty output-channel axis.

use torchlean_engine_cpu::CpuF64;
use torchlean_engine_suite::norm_rel_error;
use torchlean_runtime::{Kernels, Saved};
use torchlean_spec::{ops, Conv2dSpec, Op, Shape, Tensor};

/// Deterministic values in `[-1, 1)`.
fn values(shape: &[usize], salt: u64) -> Tensor<f64> {
    let mut s = salt;
    Tensor::from_fn(Shape::from(shape), |_| {
        s = ops::splitmix64(s);
        (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    })
    .unwrap()
}

/// `t` with `value` at flat offset `at`.
fn with(t: &Tensor<f64>, at: usize, value: f64) -> Tensor<f64> {
    let mut data = t.data().to_vec();
    data[at] = value;
    Tensor::new(t.shape().clone(), data).unwrap()
}

/// The forward and every cotangent of `op`, on the CPU engine and on the reference engine,
/// agree: the same NaNs and infinities at the same places, the rest within 1e-12.
fn agrees(what: &str, op: &Op, inputs: &[Tensor<f64>]) {
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
    assert!(e <= 1e-12, "{what}: forward error {e:e}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let (g, w) = (g.as_ref().unwrap(), w.as_ref().unwrap());
        let e = norm_rel_error(&g.to_f64().unwrap(), w);
        assert!(e <= 1e-12, "{what}: cotangent {i} error {e:e}");
    }
}

#[test]
fn non_finite_values_reach_what_the_reference_engines_reach() {
    // (stride, padding, kernel): the wide layout, the compact one, the direct one
    for (s, pad, k) in [(1, 1, 3), (2, 1, 3), (1, 0, 1)] {
        let spec = Conv2dSpec {
            in_channels: 2,
            out_channels: 3,
            kernel_h: k,
            kernel_w: k,
            stride: s,
            padding: pad,
        };
        let op = Op::Conv2d(spec);
        let (x, w, b) = (
            values(&[2, 2, 6, 7], 1),
            values(&[3, 2, k, k], 2),
            values(&[3], 3),
        );
        // the right edge of a row, where the wide layout's dropped columns read it, and the
        // first pixel of the next row
        let edge = 6 + 7 * 2;
        for (what, xs, ws) in [
            ("NaN in x", with(&x, edge, f64::NAN), w.clone()),
            ("inf in x", with(&x, edge + 1, f64::INFINITY), w.clone()),
            ("NaN in w", x.clone(), with(&w, 0, f64::NAN)),
        ] {
            let what = format!("{what}, stride {s}, padding {pad}, kernel {k}");
            agrees(&what, &op, &[xs, ws, b.clone()]);
        }
    }
}

#[test]
fn no_output_channels_give_empty_results() {
    let spec = Conv2dSpec {
        in_channels: 2,
        out_channels: 0,
        kernel_h: 3,
        kernel_w: 3,
        stride: 1,
        padding: 1,
    };
    let op = Op::Conv2d(spec);
    agrees(
        "no output channels",
        &op,
        &[
            values(&[2, 2, 5, 5], 4),
            values(&[0, 2, 3, 3], 5),
            values(&[0], 6),
        ],
    );
}
