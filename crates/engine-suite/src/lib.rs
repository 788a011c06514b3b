//! The engine conformance suite, written once and run against every engine (burn/dfdx style).
//!
//! For every op, on a table of shapes that includes the edges (size-1 axes, odd sizes, empty
//! tensors and reductions where meaningful, batched and unbatched forms, sizes large enough to
//! reach an engine's fast paths), the suite runs the op forward and backward on the engine under
//! test and on the reference engine in `f64`, from the *same* inputs (rounded to the engine's
//! precision first, so only the engine's arithmetic is measured), and compares:
//!
//! - the forward value;
//! - each operand's cotangent, computed by the engine's VJP from a [`Saved`] that holds exactly
//!   what the op declares it saves (so an engine that reads anything else fails);
//! - structural zeros (`None`) where and only where the reference has them.
//!
//! The measure is the norm-wise relative error `max |got − want| / max(max |want|, 1)`, with
//! per-dtype tolerances ([`Tolerance::F32`], [`Tolerance::F64`]).
//!
//! Use: `torchlean_engine_suite::run_suite::<MyTensor>(Tolerance::F32)` returns one report per
//! case; [`assert_suite_passes`] panics with every failure listed. Engines call it from their
//! tests (the CPU engine in `crates/engine-cpu/tests/conformance.rs`; every later engine the same way).

mod cases;

pub use cases::{op_cases, OpCase};

use torchlean_runtime::{forward, vjp, Kernels, Saved};
use torchlean_spec::{ops, Op, Tensor};

/// Norm-wise relative tolerance of an engine against the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub rel: f64,
}

impl Tolerance {
    /// Single precision: 1e-5 relative.
    pub const F32: Tolerance = Tolerance { rel: 1e-5 };
    /// Double precision: 1e-12 relative.
    pub const F64: Tolerance = Tolerance { rel: 1e-12 };
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseReport {
    pub name: String,
    pub op: &'static str,
    /// Worst norm-wise relative error over the forward value and every cotangent.
    pub max_rel: f64,
    /// Empty when the case passed.
    pub failures: Vec<String>,
}

impl CaseReport {
    pub fn pass(&self) -> bool {
        self.failures.is_empty()
    }
}

/// `max |got − want| / max(max |want|, 1)`; infinite on a shape mismatch or a NaN/inf mismatch.
pub fn norm_rel_error(got: &Tensor<f64>, want: &Tensor<f64>) -> f64 {
    if got.shape() != want.shape() {
        return f64::INFINITY;
    }
    let mut scale: f64 = 1.0;
    let mut err: f64 = 0.0;
    for (&g, &w) in got.data().iter().zip(want.data()) {
        if g.is_nan() && w.is_nan() || (g.is_infinite() && g == w) {
            continue;
        }
        let d = (g - w).abs();
        if d.is_nan() {
            return f64::INFINITY;
        }
        err = err.max(d);
        if w.is_finite() {
            scale = scale.max(w.abs());
        }
    }
    err / scale
}

/// A deterministic cotangent with values in `[-1, 1)`.
pub fn cotangent(shape: &torchlean_spec::Shape, salt: u64) -> Tensor<f64> {
    let mut s = salt;
    Tensor::from_fn(shape.clone(), |_| {
        s = ops::splitmix64(s);
        (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    })
    .expect("a cotangent of a validated shape")
}

fn reference_vjp(
    op: &Op,
    inputs: &[Tensor<f64>],
    out: &Tensor<f64>,
    cot: &Tensor<f64>,
) -> Result<Vec<Option<Tensor<f64>>>, String> {
    let refs: Vec<&Tensor<f64>> = inputs.iter().collect();
    op.vjp(&Saved::for_op(op, &refs, out), cot)
        .map(|g| g.into_vec())
        .map_err(|e| e.to_string())
}

/// Runs one case on engine `V`.
pub fn check_case<V: Kernels>(case: &OpCase, tol: Tolerance) -> CaseReport {
    let mut report = CaseReport {
        name: case.name.clone(),
        op: case.op.name(),
        max_rel: 0.0,
        failures: Vec::new(),
    };
    let fail = |r: &mut CaseReport, msg: String| r.failures.push(msg);
    // the engine's view of the inputs, and the reference on exactly those values
    let engine_inputs: Vec<V> = match case.inputs.iter().map(V::from_f64).collect() {
        Ok(v) => v,
        Err(e) => {
            fail(&mut report, format!("from_f64: {e}"));
            return report;
        }
    };
    let rounded: Vec<Tensor<f64>> = match engine_inputs.iter().map(V::to_f64).collect() {
        Ok(v) => v,
        Err(e) => {
            fail(&mut report, format!("to_f64: {e}"));
            return report;
        }
    };
    let rounded_refs: Vec<&Tensor<f64>> = rounded.iter().collect();
    let want = match case.op.forward(&rounded_refs) {
        Ok(w) => w,
        Err(e) => {
            // the reference rejects the case: the engine must reject it too
            let args: Vec<&V> = engine_inputs.iter().collect();
            if forward::<V>(&case.op, &args).is_ok() {
                fail(
                    &mut report,
                    format!("the reference rejects the case ({e}) but the engine accepts it"),
                );
            }
            return report;
        }
    };
    let args: Vec<&V> = engine_inputs.iter().collect();
    let got = match forward::<V>(&case.op, &args).and_then(|v| v.to_f64()) {
        Ok(g) => g,
        Err(e) => {
            fail(&mut report, format!("forward failed: {e}"));
            return report;
        }
    };
    let e = norm_rel_error(&got, &want);
    report.max_rel = report.max_rel.max(e);
    if e > tol.rel {
        fail(
            &mut report,
            format!("forward: relative error {e:.3e} > {:.1e}", tol.rel),
        );
    }
    // backward from a deterministic cotangent, rounded to the engine's precision too
    let cot_f64 = cotangent(want.shape(), 0x5eed ^ case.name.len() as u64);
    let (cot_v, cot) = match V::from_f64(&cot_f64).and_then(|c| {
        let r = c.to_f64()?;
        Ok((c, r))
    }) {
        Ok(p) => p,
        Err(e) => {
            fail(&mut report, format!("cotangent: {e}"));
            return report;
        }
    };
    let want_grads = match reference_vjp(&case.op, &rounded, &want, &cot) {
        Ok(g) => g,
        Err(e) => {
            fail(&mut report, format!("reference VJP failed: {e}"));
            return report;
        }
    };
    let out_v = match forward::<V>(&case.op, &args) {
        Ok(v) => v,
        Err(e) => {
            fail(&mut report, format!("forward failed: {e}"));
            return report;
        }
    };
    let saved = Saved::for_op(&case.op, &args, &out_v);
    let got_grads = match vjp::<V>(&case.op, &saved, &cot_v) {
        Ok(g) => g,
        Err(e) => {
            fail(&mut report, format!("VJP failed: {e}"));
            return report;
        }
    };
    if got_grads.len() != want_grads.len() {
        fail(
            &mut report,
            format!(
                "VJP returned {} cotangents, expected {}",
                got_grads.len(),
                want_grads.len()
            ),
        );
        return report;
    }
    for (k, (g, w)) in got_grads.iter().zip(&want_grads).enumerate() {
        match (g, w) {
            (None, None) => {}
            (Some(g), Some(w)) => match g.to_f64() {
                Ok(g) => {
                    let e = norm_rel_error(&g, w);
                    report.max_rel = report.max_rel.max(e);
                    if e > tol.rel {
                        fail(
                            &mut report,
                            format!(
                                "cotangent of operand {k}: relative error {e:.3e} > {:.1e}",
                                tol.rel
                            ),
                        );
                    }
                }
                Err(e) => fail(&mut report, format!("cotangent {k}: {e}")),
            },
            (g, w) => fail(
                &mut report,
                format!(
                    "operand {k}: engine structural zero {} vs reference {}",
                    g.is_none(),
                    w.is_none()
                ),
            ),
        }
    }
    report
}

/// Every case of [`op_cases`] on engine `V`.
pub fn run_suite<V: Kernels>(tol: Tolerance) -> Vec<CaseReport> {
    op_cases().iter().map(|c| check_case::<V>(c, tol)).collect()
}

/// Runs the suite and panics listing every failing case.
pub fn assert_suite_passes<V: Kernels>(tol: Tolerance) {
    let reports = run_suite::<V>(tol);
    let failures: Vec<String> = reports
        .iter()
        .filter(|r| !r.pass())
        .map(|r| format!("{} ({}): {}", r.name, r.op, r.failures.join("; ")))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed on {}:\n{}",
        failures.len(),
        reports.len(),
        V::ENGINE,
        failures.join("\n")
    );
}

/// Ops covered by [`op_cases`], by name (to check that every op is exercised).
pub fn covered_ops() -> std::collections::BTreeSet<&'static str> {
    op_cases().iter().map(|c| c.op.name()).collect()
}
