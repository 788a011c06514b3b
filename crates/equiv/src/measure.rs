//! How a check is measured: maximum absolute and relative error, pass or fail.

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
}

impl Mode {
    pub fn label(&self) -> String {
        match self {
            Mode::Exact => "exact".into(),
            Mode::Bitwise => "bitwise".into(),
            Mode::BitwiseUpToSignedZero => "bitwise (±0)".into(),
            Mode::Tolerance(t) => format!("rel ≤ {t:.0e}"),
        }
    }
}

/// The outcome of one comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measure {
    pub max_abs: f64,
    pub max_rel: f64,
    pub pass: bool,
}

impl Measure {
    pub const OK: Measure = Measure {
        max_abs: 0.0,
        max_rel: 0.0,
        pass: true,
    };

    pub const FAIL: Measure = Measure {
        max_abs: f64::INFINITY,
        max_rel: f64::INFINITY,
        pass: false,
    };

    pub fn merge(self, o: Measure) -> Measure {
        Measure {
            max_abs: self.max_abs.max(o.max_abs),
            max_rel: self.max_rel.max(o.max_rel),
            pass: self.pass && o.pass,
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
    let pass = match mode {
        Mode::Exact | Mode::Bitwise => same_bits,
        Mode::BitwiseUpToSignedZero => same_up_to_zero,
        Mode::Tolerance(t) => rel <= t,
    };
    Measure {
        max_abs: abs,
        max_rel: rel,
        pass,
    }
}

/// Compares two engine values: `Exact`/`Bitwise` through the engine's own bitwise equality
/// (exact for rationals), otherwise in `f64`.
pub fn compare<V: Kernels>(got: &V, want: &V, mode: Mode) -> Measure {
    let (g, w) = match (got.to_f64(), want.to_f64()) {
        (Ok(g), Ok(w)) => (g, w),
        _ => return Measure::FAIL,
    };
    let mut m = compare_f64(&g, &w, Mode::Tolerance(f64::INFINITY));
    m.pass = match mode {
        Mode::Exact | Mode::Bitwise => got.bit_eq(want),
        Mode::BitwiseUpToSignedZero => {
            got.bit_eq(want) || compare_f64(&g, &w, Mode::BitwiseUpToSignedZero).pass
        }
        Mode::Tolerance(t) => m.max_rel <= t,
    };
    m
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
