//! The products (matmul, linear, conv2d) on the host emulation, beyond the shared suite: their
//! suite cases on their own, sizes past one launch's grid, two-pass bias gradients, NaN
//! propagation, skipped `dx`, out-of-bounds product descriptions, and the buffers an op leaves.
//! Every expected value comes from the reference (`Tensor<f64>`'s `Backend`).
#![allow(clippy::unwrap_used)]

use std::sync::Mutex;
use torchlean_engine_cuda::geometry::{BLOCK, MAX_GRID};
use torchlean_engine_cuda::{emulation_ready, live_buffers, CudaError, Emu, EmuF32};
use torchlean_engine_suite::{norm_rel_error, run_suite, Tolerance};
use torchlean_runtime::Kernels;
use torchlean_spec::{Conv2dSpec, ConvPool, Linalg, Shape, Tensor};

/// The tests of this binary run one at a time: the buffer-accounting test reads the device's
/// global counters.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    emulation_ready().unwrap();
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deterministic values in [-1, 1), exactly representable in f32.
fn values(shape: &[usize], salt: u64) -> Tensor<f64> {
    let mut s = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    Tensor::from_fn(Shape::new(shape.to_vec()), |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        f64::from(((s >> 40) as f32) / (1u64 << 23) as f32 - 1.0)
    })
    .unwrap()
}

fn emu(t: &Tensor<f64>) -> EmuF32 {
    EmuF32::from_f64(t).unwrap()
}

/// Asserts the engine's value is within f32 tolerance of the reference's.
fn close(what: &str, got: &EmuF32, want: &Tensor<f64>) {
    let got = got.to_f64().unwrap();
    let err = norm_rel_error(&got, want);
    assert!(err <= Tolerance::F32.rel, "{what}: relative error {err}");
}

const GRID_THREADS: usize = MAX_GRID as usize * BLOCK as usize;

#[test]
fn the_products_pass_their_suite_cases() {
    let _g = serial();
    let reports: Vec<_> = run_suite::<EmuF32>(Tolerance::F32)
        .into_iter()
        .filter(|r| matches!(r.op, "matmul" | "linear" | "conv2d"))
        .collect();
    // 6 matmul shapes and the shape error, 6 linear, 10 conv2d (4 grouped or dilated: composed)
    assert_eq!(reports.len(), 23);
    let failures: Vec<String> = reports
        .iter()
        .filter(|r| !r.pass())
        .map(|r| format!("{}: {}", r.name, r.failures.join("; ")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn linear_past_one_grid_with_a_two_pass_bias_gradient() {
    let _g = serial();
    // 3000 rows (the bias gradient sums 12 chunks of 256 rows, then the chunks), 2.4M outputs
    // (more than one launch's threads: the bias kernel's grid-stride loop wraps)
    let (rows, inp, out) = (3000, 2, 800);
    assert!(rows * out > GRID_THREADS);
    let (x, w, b) = (
        values(&[rows, inp], 1),
        values(&[out, inp], 2),
        values(&[out], 3),
    );
    let y_shape = Shape::from([rows, out]);
    let want = <Tensor<f64> as Linalg>::linear(&x, &w, &b, &y_shape).unwrap();
    let got = <EmuF32 as Linalg>::linear(&emu(&x), &emu(&w), &emu(&b), &y_shape).unwrap();
    close("y", &got, &want);
    let dy = values(&[rows, out], 4);
    let (dx, dw, db) = <Tensor<f64> as Linalg>::linear_vjp(&x, &w, &dy).unwrap();
    let (gx, gw, gb) = <EmuF32 as Linalg>::linear_vjp(&emu(&x), &emu(&w), &emu(&dy)).unwrap();
    close("dx", &gx, &dx);
    close("dW", &gw, &dw);
    close("db", &gb, &db);
}

#[test]
fn skipping_dx_keeps_dw_and_db_bit_for_bit() {
    let _g = serial();
    let (x, w, dy) = (values(&[7, 5], 5), values(&[3, 5], 6), values(&[7, 3], 7));
    let (x, w, dy) = (emu(&x), emu(&w), emu(&dy));
    let (dx, dw, db) = <EmuF32 as Linalg>::linear_vjp(&x, &w, &dy).unwrap();
    let (none, dw2, db2) = <EmuF32 as Linalg>::linear_vjp_for(&x, &w, &dy, false).unwrap();
    assert!(none.is_none());
    assert!(dw.bit_eq(&dw2) && db.bit_eq(&db2));
    let (some, ..) = <EmuF32 as Linalg>::linear_vjp_for(&x, &w, &dy, true).unwrap();
    assert!(some.unwrap().bit_eq(&dx));

    let spec = conv_spec(2, 3, 3, 2, 1);
    let (x, w) = (values(&[2, 2, 6, 5], 8), values(&[3, 2, 3, 3], 9));
    let out = spec_out(&spec, &x);
    let dy = values(out.dims(), 10);
    let (x, w, dy) = (emu(&x), emu(&w), emu(&dy));
    let (dx, dw, db) = <EmuF32 as ConvPool>::conv2d_vjp(&spec, &x, &w, &dy).unwrap();
    let (none, dw2, db2) = <EmuF32 as ConvPool>::conv2d_vjp_for(&spec, &x, &w, &dy, false).unwrap();
    assert!(none.is_none());
    assert!(dw.bit_eq(&dw2) && db.bit_eq(&db2));
    let (some, ..) = <EmuF32 as ConvPool>::conv2d_vjp_for(&spec, &x, &w, &dy, true).unwrap();
    assert!(some.unwrap().bit_eq(&dx));
}

fn conv_spec(c: usize, oc: usize, k: usize, stride: usize, padding: usize) -> Conv2dSpec {
    Conv2dSpec::ungrouped(c, oc, (k, k), stride, padding)
}

fn spec_out(spec: &Conv2dSpec, x: &Tensor<f64>) -> Shape {
    let d = x.shape().dims();
    let (ho, wo) = spec.output_hw(d[d.len() - 2], d[d.len() - 1]).unwrap();
    let mut dims = d.to_vec();
    let r = dims.len();
    dims[r - 3] = spec.out_channels;
    dims[r - 2] = ho;
    dims[r - 1] = wo;
    Shape::new(dims)
}

/// Checks conv2d and its VJP on the emulation against the reference.
fn conv_matches_the_reference(spec: &Conv2dSpec, x: &Tensor<f64>, salt: u64) {
    let c = spec.in_channels;
    let w = values(&[spec.out_channels, c, spec.kernel_h, spec.kernel_w], salt);
    let b = values(&[spec.out_channels], salt + 1);
    let out = spec_out(spec, x);
    let want = <Tensor<f64> as ConvPool>::conv2d(spec, x, &w, &b, &out).unwrap();
    let got = <EmuF32 as ConvPool>::conv2d(spec, &emu(x), &emu(&w), &emu(&b), &out).unwrap();
    close("y", &got, &want);
    let dy = values(out.dims(), salt + 2);
    let (dx, dw, db) = <Tensor<f64> as ConvPool>::conv2d_vjp(spec, x, &w, &dy).unwrap();
    let (gx, gw, gb) =
        <EmuF32 as ConvPool>::conv2d_vjp(spec, &emu(x), &emu(&w), &emu(&dy)).unwrap();
    close("dx", &gx, &dx);
    close("dW", &gw, &dw);
    close("db", &gb, &db);
}

/// The zero padding is multiplied like any cell, as in the reference (`0·NaN = NaN`): a NaN
/// weight reaches every output of its channel, the border ones too, and an infinite cotangent
/// at a corner reaches the weight gradient through the padding.
#[test]
fn conv_meets_the_zero_padding_as_the_reference_does() {
    let _g = serial();
    let spec = conv_spec(2, 3, 3, 1, 1);
    let x = values(&[2, 2, 5, 6], 31);
    let mut w = values(&[3, 2, 3, 3], 32).data().to_vec();
    w[0] = f64::NAN;
    let w = Tensor::new([3, 2, 3, 3], w).unwrap();
    let b = values(&[3], 33);
    let out = spec_out(&spec, &x);
    let want = <Tensor<f64> as ConvPool>::conv2d(&spec, &x, &w, &b, &out).unwrap();
    assert!(
        want.data()[..30].iter().all(|v| v.is_nan()),
        "channel 0 of image 0"
    );
    let got = <EmuF32 as ConvPool>::conv2d(&spec, &emu(&x), &emu(&w), &emu(&b), &out).unwrap();
    close("y", &got, &want);
    let mut dy = values(out.dims(), 34).data().to_vec();
    dy[0] = f64::INFINITY;
    let dy = Tensor::new(out.clone(), dy).unwrap();
    let w = values(&[3, 2, 3, 3], 35);
    let (dx, dw, db) = <Tensor<f64> as ConvPool>::conv2d_vjp(&spec, &x, &w, &dy).unwrap();
    assert!(dw.data()[0].is_nan(), "∞ · padding at the corner");
    let (gx, gw, gb) =
        <EmuF32 as ConvPool>::conv2d_vjp(&spec, &emu(&x), &emu(&w), &emu(&dy)).unwrap();
    close("dx", &gx, &dx);
    close("dW", &gw, &dw);
    close("db", &gb, &db);
}

#[test]
fn conv_patches_and_their_adjoint_past_one_grid() {
    let _g = serial();
    // a 1×1 kernel with padding 1 (not the direct path): 1502² patch columns and 1500² input
    // cells, both more than one launch's threads
    let spec = conv_spec(1, 1, 1, 1, 1);
    let x = values(&[1, 1, 1500, 1500], 11);
    const { assert!(1500 * 1500 > GRID_THREADS) };
    conv_matches_the_reference(&spec, &x, 12);
}

#[test]
fn conv_edge_geometries_match_the_reference() {
    let _g = serial();
    for (x, spec) in [
        // the direct path (1×1, stride 1, no padding), batched and unbatched
        (&[3, 4, 5, 6][..], conv_spec(4, 2, 1, 1, 0)),
        (&[4, 3, 3], conv_spec(4, 5, 1, 1, 0)),
        // stride larger than the kernel (input cells no window reads), padding past the kernel
        (&[2, 2, 7, 7], conv_spec(2, 3, 2, 3, 0)),
        (&[1, 2, 3, 3], conv_spec(2, 2, 2, 1, 3)),
        // a kernel covering the whole padded input (one output position)
        (&[2, 1, 4, 4], conv_spec(1, 3, 6, 1, 1)),
        // an empty batch, no output channel, no input channel (empty contractions)
        (&[0, 2, 5, 5], conv_spec(2, 3, 3, 1, 1)),
        (&[2, 2, 5, 5], conv_spec(2, 0, 3, 1, 1)),
        (&[2, 0, 5, 5], conv_spec(0, 3, 3, 1, 1)),
    ] {
        conv_matches_the_reference(&spec, &values(x, 13), 14);
    }
}

#[test]
fn nan_and_inf_propagate_through_the_products_as_in_the_reference() {
    let _g = serial();
    let mut a = values(&[4, 3], 15).data().to_vec();
    a[0] = f64::NAN;
    a[4] = f64::INFINITY;
    let a = Tensor::new([4, 3], a).unwrap();
    let b = values(&[3, 5], 16);
    let out = Shape::from([4, 5]);
    let want = <Tensor<f64> as Linalg>::matmul(&a, &b, &out).unwrap();
    let got = <EmuF32 as Linalg>::matmul(&emu(&a), &emu(&b), &out).unwrap();
    let got = got.to_f64().unwrap();
    assert!(got.data()[..5].iter().all(|v| v.is_nan()), "{got:?}");
    assert!(got.data()[10..].iter().all(|v| v.is_finite()), "{got:?}");
    // row 1 holds inf times values of either sign: ±inf where the reference has them
    assert!(norm_rel_error(&got, &want) <= Tolerance::F32.rel);

    // a NaN bias makes its whole output column NaN, and only it
    let x = values(&[3, 2], 17);
    let w = values(&[4, 2], 18);
    let mut bias = vec![0.5; 4];
    bias[2] = f64::NAN;
    let bias = Tensor::new([4], bias).unwrap();
    let y = <EmuF32 as Linalg>::linear(&emu(&x), &emu(&w), &emu(&bias), &Shape::from([3, 4]))
        .unwrap()
        .to_f64()
        .unwrap();
    for (i, v) in y.data().iter().enumerate() {
        assert_eq!(v.is_nan(), i % 4 == 2, "{i}: {v}");
    }
}

#[test]
fn a_product_reaching_past_its_buffers_is_an_error_not_a_read() {
    let _g = serial();
    // called past the dispatch's shape check: B holds 10 elements, the [2,3]·[3,5] product
    // its shapes imply would read 15; the error names the op and our (row-major) operand
    let a = emu(&values(&[2, 3], 19));
    let b = emu(&values(&[2, 5], 20));
    match <EmuF32 as Linalg>::matmul(&a, &b, &Shape::from([2, 5])) {
        Err(CudaError::GemmBounds {
            op: "matmul",
            operand: "B",
            needed: 15,
            len: 10,
        }) => {}
        other => panic!("expected a bounds error naming matmul's B, got {other:?}"),
    }
}

#[test]
fn an_op_leaves_only_its_results_on_the_device() {
    let _g = serial();
    let spec = conv_spec(3, 4, 3, 1, 1);
    let (x, w, b) = (
        values(&[5, 3, 6, 6], 24),
        values(&[4, 3, 3, 3], 25),
        values(&[4], 26),
    );
    let out = spec_out(&spec, &x);
    let dy = values(out.dims(), 27);
    let (x, w, b, dy) = (emu(&x), emu(&w), emu(&b), emu(&dy));
    let before = live_buffers::<Emu>();
    let y = <EmuF32 as ConvPool>::conv2d(&spec, &x, &w, &b, &out).unwrap();
    let (dx, dw, db) = <EmuF32 as ConvPool>::conv2d_vjp(&spec, &x, &w, &dy).unwrap();
    let (lx, lw, lb) = <EmuF32 as Linalg>::linear_vjp(
        &dy,
        &emu(&values(&[7, 6], 28)),
        &emu(&values(&[5, 4, 6, 7], 29)),
    )
    .unwrap();
    let held = live_buffers::<Emu>();
    // the workspaces (patch matrices, partial sums) are gone; the 7 results remain
    assert_eq!(held.buffers, before.buffers + 7, "{before:?} {held:?}");
    drop((y, dx, dw, db, lx, lw, lb));
    assert_eq!(live_buffers::<Emu>(), before);
}

#[test]
fn the_error_names_the_op() {
    let e = CudaError::GemmBounds {
        op: "matmul",
        operand: "B",
        needed: 15,
        len: 10,
    };
    assert_eq!(
        e.to_string(),
        "op `matmul`: the product's B needs 15 elements but its buffer holds 10"
    );
}

#[test]
fn empty_products_match_the_reference() {
    let _g = serial();
    for (a, b) in [
        (&[0, 2, 3][..], &[0, 3, 4][..]),
        (&[2, 0, 3], &[2, 3, 4]),
        (&[2, 3, 0], &[2, 0, 4]),
        (&[3, 2], &[2, 0]),
    ] {
        let (a, b) = (values(a, 30), values(b, 31));
        let mut out = a.shape().dims().to_vec();
        let last = out.len() - 1;
        out[last] = *b.shape().dims().last().unwrap();
        let out = Shape::new(out);
        let want = <Tensor<f64> as Linalg>::matmul(&a, &b, &out).unwrap();
        let got = <EmuF32 as Linalg>::matmul(&emu(&a), &emu(&b), &out).unwrap();
        close("y", &got, &want);
        let dy = values(out.dims(), 32);
        let (da, db) = <Tensor<f64> as Linalg>::matmul_vjp(&a, &b, &dy).unwrap();
        let (ga, gb) = <EmuF32 as Linalg>::matmul_vjp(&emu(&a), &emu(&b), &emu(&dy)).unwrap();
        close("dA", &ga, &da);
        close("dB", &gb, &db);
    }
    // no input feature: the output is the bias; no output feature: nothing
    for (x, o) in [(&[3, 0][..], 2usize), (&[3, 4], 0)] {
        let i = *x.last().unwrap();
        let (x, w, b) = (values(x, 33), values(&[o, i], 34), values(&[o], 35));
        let out = Shape::from([3, o]);
        let want = <Tensor<f64> as Linalg>::linear(&x, &w, &b, &out).unwrap();
        let got = <EmuF32 as Linalg>::linear(&emu(&x), &emu(&w), &emu(&b), &out).unwrap();
        close("y", &got, &want);
        let dy = values(out.dims(), 36);
        let (dx, dw, db) = <Tensor<f64> as Linalg>::linear_vjp(&x, &w, &dy).unwrap();
        let (gx, gw, gb) = <EmuF32 as Linalg>::linear_vjp(&emu(&x), &emu(&w), &emu(&dy)).unwrap();
        close("dx", &gx, &dx);
        close("dW", &gw, &dw);
        close("db", &gb, &db);
    }
}
