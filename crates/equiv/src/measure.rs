//! How a check is measured: maximum absolute and relative error, pass or fail.

use crate::error::EquivError;
use torchlean_runtime::Kernels;
use torchlean_spec::Tensor;

/// How a claim compares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// Exact over the rational scalar.
    Exact,
    /// Bit for bit on floats.
    Bitwise,
    /// Bit for bit, except that `+0.0` and `-0.0` are identified.
    BitwiseUpToSignedZero,
    /// Norm-wise relative error `max |got − want| / max(max |want|, 1)` at most this.
    Tolerance(f64),
    /// Element by element, this norm-wise relative part plus an allowance measured at the case:
    /// for an engine against the reference, the reference's own spread under rounding at the
    /// engine's precision (`torchlean_engine_suite::Conditioning`); for finite differences,
    /// the gap between two step sizes (what the difference itself gets wrong).
    Measured(f64),
}

impl Mode {
    pub fn label(&self) -> String {
        match self {
            Mode::Exact => "exact".into(),
            Mode::Bitwise => "bitwise".into(),
            Mode::BitwiseUpToSignedZero => "bitwise (±0)".into(),
            Mode::Tolerance(t) => format!("rel ≤ {t:.0e}"),
            Mode::Measured(t) => format!("rel ≤ {t:.0e} + measured"),
        }
    }
}

/// The outcome of one comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measure {
    pub max_abs: f64,
    pub max_rel: f64,
    /// The worst error as a fraction of what the mode allows (at most 1 when it passes; 0 for
    /// an exact or bitwise comparison that holds, infinite for one that does not).
    pub of_tolerance: f64,
    pub pass: bool,
}

impl Measure {
    pub const OK: Measure = Measure {
        max_abs: 0.0,
        max_rel: 0.0,
        of_tolerance: 0.0,
        pass: true,
    };

    pub const FAIL: Measure = Measure {
        max_abs: f64::INFINITY,
        max_rel: f64::INFINITY,
        of_tolerance: f64::INFINITY,
        pass: false,
    };

    pub fn merge(self, o: Measure) -> Measure {
        Measure {
            max_abs: self.max_abs.max(o.max_abs),
            max_rel: self.max_rel.max(o.max_rel),
            of_tolerance: self.of_tolerance.max(o.of_tolerance),
            pass: self.pass && o.pass,
        }
    }

    /// A measure whose verdict is `pass` (an exact or bitwise comparison): 0 of the tolerance
    /// when it holds, all of it when it does not.
    fn judged(max_abs: f64, max_rel: f64, pass: bool) -> Measure {
        Measure {
            max_abs,
            max_rel,
            of_tolerance: if pass { 0.0 } else { f64::INFINITY },
            pass,
        }
    }

    /// A measure against a norm-wise relative tolerance `t`.
    fn within(max_abs: f64, max_rel: f64, t: f64) -> Measure {
        let of_tolerance = if max_rel == 0.0 { 0.0 } else { max_rel / t };
        Measure {
            max_abs,
            max_rel,
            of_tolerance,
            pass: max_rel <= t,
        }
    }
}

/// Compares two tensors in `mode`: the errors are always measured; `pass` follows the mode.
pub fn compare_f64(got: &Tensor<f64>, want: &Tensor<f64>, mode: Mode) -> Measure {
    if got.shape() != want.shape() {
        return Measure::FAIL;
    }
    let mut abs: f64 = 0.0;
    let mut scale: f64 = 1.0;
    let mut same_bits = true;
    let mut same_up_to_zero = true;
    for (&g, &w) in got.data().iter().zip(want.data()) {
        if g.to_bits() != w.to_bits() {
            same_bits = false;
            if !(g == 0.0 && w == 0.0) {
                same_up_to_zero = false;
            }
        }
        if g.is_nan() && w.is_nan() || (g.is_infinite() && g == w) {
            continue;
        }
        let d = (g - w).abs();
        abs = abs.max(if d.is_nan() { f64::INFINITY } else { d });
        if w.is_finite() {
            scale = scale.max(w.abs());
        }
    }
    let rel = abs / scale;
    match mode {
        Mode::Exact | Mode::Bitwise => Measure::judged(abs, rel, same_bits),
        Mode::BitwiseUpToSignedZero => Measure::judged(abs, rel, same_up_to_zero),
        // whole values carry no conditioning measurement: its norm-wise part
        Mode::Tolerance(t) | Mode::Measured(t) => Measure::within(abs, rel, t),
    }
}

/// Compares two engine values: `Exact`/`Bitwise` through the engine's own bitwise equality
/// (exact for rationals), otherwise in `f64`.
pub fn compare<V: Kernels>(got: &V, want: &V, mode: Mode) -> Measure {
    let (g, w) = match (got.to_f64(), want.to_f64()) {
        (Ok(g), Ok(w)) => (g, w),
        _ => return Measure::FAIL,
    };
    let m = compare_f64(&g, &w, Mode::Tolerance(f64::INFINITY));
    match mode {
        Mode::Exact | Mode::Bitwise => Measure::judged(m.max_abs, m.max_rel, got.bit_eq(want)),
        Mode::BitwiseUpToSignedZero => Measure::judged(
            m.max_abs,
            m.max_rel,
            got.bit_eq(want) || compare_f64(&g, &w, Mode::BitwiseUpToSignedZero).pass,
        ),
        Mode::Tolerance(t) | Mode::Measured(t) => Measure::within(m.max_abs, m.max_rel, t),
    }
}

/// Compares two lists position by position.
pub fn compare_all<V: Kernels>(got: &[V], want: &[V], mode: Mode) -> Measure {
    if got.len() != want.len() {
        return Measure::FAIL;
    }
    got.iter()
        .zip(want)
        .fold(Measure::OK, |m, (g, w)| m.merge(compare(g, w, mode)))
}

/// Compares two values like [`compare`] and, when they differ, says how (see
/// [`compare_all_detail`]); `index` is the value's position in what the claim compares.
pub fn compare_detail<V: Kernels>(
    what: &'static str,
    index: usize,
    got: &V,
    want: &V,
    mode: Mode,
) -> (Measure, Option<EquivError>) {
    let m = compare(got, want, mode);
    let detail = (!m.pass).then(|| difference(what, index, got, want, m));
    (m, detail)
}

/// Compares two lists like [`compare_all`] and, when they differ, says how: a length mismatch,
/// or the first value that differs (its shapes when those differ, else the list's errors).
/// `what` names the comparison (the claim's two sides).
pub fn compare_all_detail<V: Kernels>(
    what: &'static str,
    got: &[V],
    want: &[V],
    mode: Mode,
) -> (Measure, Option<EquivError>) {
    if got.len() != want.len() {
        let e = EquivError::Length {
            what,
            expected: want.len(),
            got: got.len(),
        };
        return (Measure::FAIL, Some(e));
    }
    let m = compare_all(got, want, mode);
    if m.pass {
        return (m, None);
    }
    let first = got
        .iter()
        .zip(want)
        .enumerate()
        .find(|(_, (g, w))| !compare(*g, *w, mode).pass);
    let detail = first.map(|(i, (g, w))| difference(what, i, g, w, m));
    (m, detail)
}

/// How value `index` differs: its shapes, or the comparison's errors `m`.
fn difference<V: Kernels>(
    what: &'static str,
    index: usize,
    got: &V,
    want: &V,
    m: Measure,
) -> EquivError {
    if got.shape() != want.shape() {
        EquivError::ShapeMismatch {
            what,
            index,
            expected: want.shape().clone(),
            got: got.shape().clone(),
        }
    } else {
        EquivError::Mismatch {
            what,
            index,
            max_abs: m.max_abs,
            max_rel: m.max_rel,
        }
    }
}
