//! The engine conformance suite, written once and run against every engine (burn/dfdx style).
//!
//! For every op, on a table of shapes that includes the edges (size-1 axes, odd sizes, empty
//! tensors and reductions where meaningful, batched and unbatched forms, sizes large enough to
//! reach an engine's fast paths), the suite runs the op forward and backward on the engine under
//! test and on the reference engine in `f64`, from the *same* inputs, cotangent and real
//! attributes (rounded to the engine's precision first — `Op::map_reals` for the attributes —
//! so only the engine's arithmetic is measured), and compares:
//!
//! - the forward value;
//! - each operand's cotangent, computed by the engine's VJP from a [`Saved`] that holds exactly
//!   what the op declares it saves (so an engine that reads anything else fails);
//! - structural zeros (`None`) where and only where the reference has them.
//!
//! The measure is the norm-wise relative error `max |got − want| / max(max |want|, 1)`, with
//! per-dtype tolerances ([`Tolerance::F32`], [`Tolerance::F64`]); a tolerance may add a part
//! measured at each case, the reference's own spread under rounding at the engine's precision
//! ([`Conditioning`], Monte Carlo arithmetic in [`noisy`]), which the equivalence checker uses
//! on its random graphs.
//!
//! Use: `torchlean_engine_suite::run_suite::<MyTensor>(Tolerance::F32)` returns one report per
//! case; [`assert_suite_passes`] panics with every failure listed. Engines call it from their
//! tests (the CPU engine in `crates/engine-cpu/tests/conformance.rs`; every later engine the same way).

mod cases;
pub mod noisy;

pub use cases::{op_cases, OpCase};

use noisy::{with_noise, Noisy, Precision};
use torchlean_runtime::{forward, vjp, Kernels, Saved};
use torchlean_spec::{ops, Op, Tensor};

/// How far an engine may be from the reference, element by element: element `i` of a
/// compared value passes when `|got_i − want_i| ≤ rel · max(max |want|, 1) + allowance_i`, the
/// second term from [`Conditioning`] (zero without it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// The norm-wise relative part.
    pub rel: f64,
    /// The part that follows the conditioning of the op at the case (off: `None`).
    pub conditioning: Option<Conditioning>,
}

impl Tolerance {
    /// Single precision: 1e-5 relative.
    pub const F32: Tolerance = Tolerance::norm_wise(1e-5);
    /// Double precision: 1e-12 relative.
    pub const F64: Tolerance = Tolerance::norm_wise(1e-12);

    /// `rel` norm-wise, no conditioning part.
    pub const fn norm_wise(rel: f64) -> Tolerance {
        Tolerance {
            rel,
            conditioning: None,
        }
    }
}

/// The part of a [`Tolerance`] that follows the maths: what rounding at the engine's precision
/// can do to this op at this case, measured on the reference itself. The suite runs the
/// reference's forward and VJP [`ROUNDINGS`] times in Monte Carlo arithmetic ([`noisy`]: every
/// rounding operation moved by `eps` relative, up or down at random) on exactly the engine's
/// inputs, attributes and cotangent, and allows element `i` to differ by `factor ×` the spread of
/// those runs there. Where the op is well conditioned the spread is a few `eps` and the
/// tolerance is the norm-wise one; at a layer norm of a nearly constant row it is what f32
/// rounding of the row's mean really costs; where an intermediate comparison sits within
/// rounding distance of a kink, it spans both sides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Conditioning {
    /// The engine's precision: its relative rounding step (f32: 2⁻²³) and largest finite
    /// magnitude (f32: `f32::MAX`).
    pub precision: Precision,
    /// How many spreads an element may differ by.
    pub factor: f64,
}

/// Runs of the reference in Monte Carlo arithmetic per case ([`Conditioning`]).
pub const ROUNDINGS: usize = 6;

impl Conditioning {
    /// The spreads an element may differ by. Measured (docs/checker.md): over
    /// `check-equivalence` seeds 1..10 at 600 cases, the CPU and reference engines' errors
    /// needed the conditioning part on 14 elements, the worst at 0.26 spreads beyond the
    /// norm-wise part; 8 leaves a margin of 30 for engines that round in another order and for
    /// the few runs a spread is drawn from.
    pub const FACTOR: f64 = 8.0;

    /// The conditioning part for engine `V`: its precision, measured through it
    /// ([`precision_of`]), with [`Conditioning::FACTOR`]; `None` for an engine that does not
    /// round (the rational engine).
    pub fn of<V: Kernels>() -> Option<Conditioning> {
        precision_of::<V>().map(|precision| Conditioning {
            precision,
            factor: Self::FACTOR,
        })
    }
}

/// The precision of engine `V`, found by converting through it: the smallest `2⁻ᵏ` with
/// `1 + 2⁻ᵏ` representable (f32: 2⁻²³, f64: 2⁻⁵²) and the largest finite magnitude (the
/// largest power of two that stays finite, times `2 − eps`: `f32::MAX`, `f64::MAX`); `None` for
/// an exact engine (`Kernels::EXACT`) or one that cannot convert.
pub fn precision_of<V: Kernels>() -> Option<Precision> {
    if V::EXACT {
        return None;
    }
    let through = |x: f64| -> Option<f64> {
        let t = Tensor::new([], vec![x]).ok()?;
        Some(V::from_f64(&t).and_then(|v| v.to_f64()).ok()?.data()[0])
    };
    through(1.0)?;
    let eps = (1..=64)
        .map(|k| (0.5f64).powi(k))
        .take_while(|&step| through(1.0 + step) != Some(1.0))
        .last()?;
    let top = (0..=f64::MAX_EXP)
        .rev()
        .map(|k| 2f64.powi(k))
        .find(|&p| through(p).is_some_and(f64::is_finite))?;
    Some(Precision {
        eps,
        max: top * (2.0 - eps),
    })
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseReport {
    pub name: String,
    pub op: &'static str,
    /// Worst norm-wise relative error over the forward value and every cotangent.
    pub max_rel: f64,
    /// Worst error as a fraction of what the tolerance allows at its element (at most 1 in a
    /// passing case; infinite for a mismatch of shape or of NaN/infinity).
    pub of_tolerance: f64,
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

/// How one compared value stands against a tolerance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Deviation {
    /// [`norm_rel_error`].
    pub rel: f64,
    /// The worst `|got_i − want_i| / allowed_i` (0 where nothing differs).
    pub of_tolerance: f64,
    /// Where it is reached.
    pub element: Option<usize>,
    /// The allowance there.
    pub allowed: f64,
}

impl Deviation {
    pub fn pass(&self) -> bool {
        self.of_tolerance <= 1.0
    }
}

/// Compares `got` with `want` element by element under `tol`, `spread` being the reference's
/// measured spread per element (see [`Conditioning`]; `None`: no conditioning part). Both NaN,
/// or the same infinity, agree; an element whose spread is not finite (the reference itself
/// turns NaN or infinite within rounding distance) is not constrained.
pub fn deviation(
    got: &Tensor<f64>,
    want: &Tensor<f64>,
    spread: Option<&[f64]>,
    tol: Tolerance,
) -> Deviation {
    let rel = norm_rel_error(got, want);
    if got.shape() != want.shape() {
        return Deviation {
            rel,
            of_tolerance: f64::INFINITY,
            element: None,
            allowed: 0.0,
        };
    }
    let scale = want
        .data()
        .iter()
        .filter(|w| w.is_finite())
        .fold(1.0f64, |m, w| m.max(w.abs()));
    let factor = tol.conditioning.map_or(0.0, |c| c.factor);
    let mut worst = Deviation {
        rel,
        of_tolerance: 0.0,
        element: None,
        allowed: tol.rel * scale,
    };
    for (i, (&g, &w)) in got.data().iter().zip(want.data()).enumerate() {
        if g.is_nan() && w.is_nan() || (g.is_infinite() && g == w) {
            continue;
        }
        let s = spread.and_then(|s| s.get(i)).copied().unwrap_or(0.0);
        if !s.is_finite() {
            continue;
        }
        let d = (g - w).abs();
        let allowed = tol.rel * scale + factor * s;
        let ratio = if d == 0.0 {
            0.0
        } else if d.is_nan() {
            f64::INFINITY
        } else {
            d / allowed
        };
        if ratio > worst.of_tolerance {
            worst.of_tolerance = ratio;
            worst.element = Some(i);
            worst.allowed = allowed;
        }
    }
    worst
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

/// What the reference computes at one point: the forward value and each operand's cotangent.
struct Reference {
    value: Tensor<f64>,
    grads: Vec<Option<Tensor<f64>>>,
}

/// `t` as [`Noisy`] values (exact).
fn noisy(t: &Tensor<f64>) -> Option<Tensor<Noisy>> {
    Tensor::new(
        t.shape().clone(),
        t.data().iter().map(|&v| Noisy(v)).collect(),
    )
    .ok()
}

/// `t` as `f64` values (exact).
fn plain(t: &Tensor<Noisy>) -> Option<Tensor<f64>> {
    Tensor::new(t.shape().clone(), t.data().iter().map(|v| v.0).collect()).ok()
}

/// The reference's forward value and cotangents at `inputs` and `cot`, in Monte Carlo
/// arithmetic at `precision` drawn from `seed` (`None` where the reference fails).
fn noisy_reference(
    op: &Op,
    inputs: &[Tensor<f64>],
    cot: &Tensor<f64>,
    precision: Precision,
    seed: u64,
) -> Option<Reference> {
    let inputs: Vec<Tensor<Noisy>> = inputs.iter().map(noisy).collect::<Option<_>>()?;
    let cot = noisy(cot)?;
    with_noise(precision, seed, || {
        let refs: Vec<&Tensor<Noisy>> = inputs.iter().collect();
        let value = op.forward(&refs).ok()?;
        let grads = op.vjp(&Saved::for_op(op, &refs, &value), &cot).ok()?;
        let mut plain_grads = Vec::new();
        for g in grads.into_vec() {
            plain_grads.push(match g {
                Some(g) => Some(plain(&g)?),
                None => None,
            });
        }
        Some(Reference {
            value: plain(&value)?,
            grads: plain_grads,
        })
    })
}

/// The reference's spread per element of its forward value and of each cotangent (see
/// [`Conditioning`]): the largest move from `at` over the noisy runs (infinite where a run
/// turns an element NaN or infinite, or the reference fails there).
fn reference_spread(
    op: &Op,
    inputs: &[Tensor<f64>],
    cot: &Tensor<f64>,
    at: &Reference,
    precision: Precision,
) -> (Vec<f64>, Vec<Option<Vec<f64>>>) {
    let mut value = vec![0.0; at.value.len()];
    let mut grads: Vec<Option<Vec<f64>>> = at
        .grads
        .iter()
        .map(|g| g.as_ref().map(|g| vec![0.0; g.len()]))
        .collect();
    let widen = |acc: &mut [f64], moved: Option<&Tensor<f64>>, base: &Tensor<f64>| match moved {
        Some(m) if m.shape() == base.shape() => {
            for ((a, &x), &b) in acc.iter_mut().zip(m.data()).zip(base.data()) {
                let d = if x.is_nan() && b.is_nan() || x == b {
                    0.0
                } else if x.is_finite() && b.is_finite() {
                    (x - b).abs()
                } else {
                    f64::INFINITY
                };
                *a = a.max(d);
            }
        }
        _ => acc.fill(f64::INFINITY),
    };
    for run in 0..ROUNDINGS {
        let r = noisy_reference(op, inputs, cot, precision, ops::splitmix64(run as u64));
        widen(&mut value, r.as_ref().map(|r| &r.value), &at.value);
        for (k, acc) in grads.iter_mut().enumerate() {
            let (Some(acc), Some(base)) = (acc.as_mut(), at.grads[k].as_ref()) else {
                continue;
            };
            let m = r
                .as_ref()
                .and_then(|r| r.grads.get(k))
                .and_then(Option::as_ref);
            widen(acc, m, base);
        }
    }
    (value, grads)
}

/// The rounding of `c` by engine `V` (`c` itself if the engine cannot convert it).
fn round_through<V: Kernels>(c: f64) -> f64 {
    Tensor::new([], vec![c])
        .ok()
        .map_or(c, |t| represented::<V>(&t).data()[0])
}

/// `t` as engine `V` represents it: rounded to its precision, beyond its range an infinity
/// (`t` itself if the engine cannot convert it).
fn represented<V: Kernels>(t: &Tensor<f64>) -> Tensor<f64> {
    V::from_f64(t)
        .and_then(|v| v.to_f64())
        .unwrap_or_else(|_| t.clone())
}

/// Records a comparison in `report`: its errors, and a failure line naming `what` when it is
/// beyond the tolerance.
fn judge(report: &mut CaseReport, what: &str, d: Deviation, tol: Tolerance) {
    report.max_rel = report.max_rel.max(d.rel);
    report.of_tolerance = report.of_tolerance.max(d.of_tolerance);
    if d.pass() {
        return;
    }
    let at = d
        .element
        .map(|i| format!(" at element {i}"))
        .unwrap_or_default();
    let msg = match tol.conditioning {
        None => format!("{what}: relative error {:.3e} > {:.1e}", d.rel, tol.rel),
        Some(_) => format!(
            "{what}: relative error {:.3e}, {:.3}× the allowance{at} ({:.3e}: {:.1e} norm-wise \
             plus the reference's conditioning)",
            d.rel, d.of_tolerance, d.allowed, tol.rel
        ),
    };
    report.failures.push(msg);
}

/// Runs one case on engine `V`.
pub fn check_case<V: Kernels>(case: &OpCase, tol: Tolerance) -> CaseReport {
    let mut report = CaseReport {
        name: case.name.clone(),
        op: case.op.name(),
        max_rel: 0.0,
        of_tolerance: 0.0,
        failures: Vec::new(),
    };
    let fail = |r: &mut CaseReport, msg: String| {
        r.of_tolerance = f64::INFINITY;
        r.failures.push(msg)
    };
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
    // ... and on the op's real attributes as the engine sees them
    let seen = case.op.map_reals(round_through::<V>);
    let rounded_refs: Vec<&Tensor<f64>> = rounded.iter().collect();
    let want = match seen.forward(&rounded_refs) {
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
    let want_grads = match reference_vjp(&seen, &rounded, &want, &cot) {
        Ok(g) => g,
        Err(e) => {
            fail(&mut report, format!("reference VJP failed: {e}"));
            return report;
        }
    };
    let at = Reference {
        value: want,
        grads: want_grads,
    };
    let (value_spread, grad_spreads) = match tol.conditioning {
        Some(c) => {
            let (v, g) = reference_spread(&seen, &rounded, &cot, &at, c.precision);
            (Some(v), g)
        }
        None => (None, Vec::new()),
    };
    // the reference's results as the engine would hold them (an f64 value beyond f32's range
    // is an infinity in f32)
    let want = represented::<V>(&at.value);
    judge(
        &mut report,
        "forward",
        deviation(&got, &want, value_spread.as_deref(), tol),
        tol,
    );
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
    if got_grads.len() != at.grads.len() {
        fail(
            &mut report,
            format!(
                "VJP returned {} cotangents, expected {}",
                got_grads.len(),
                at.grads.len()
            ),
        );
        return report;
    }
    for (k, (g, w)) in got_grads.iter().zip(&at.grads).enumerate() {
        match (g, w) {
            (None, None) => {}
            (Some(g), Some(w)) => match g.to_f64() {
                Ok(g) => {
                    let spread = grad_spreads.get(k).and_then(|s| s.as_deref());
                    let what = format!("cotangent of operand {k}");
                    let w = represented::<V>(w);
                    judge(&mut report, &what, deviation(&g, &w, spread, tol), tol);
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
