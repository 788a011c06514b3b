//! Monte Carlo arithmetic (Parker, 1997; CESTAC's random rounding): an `f64` scalar whose
//! every rounding operation moves its exact result by one rounding step of a narrower engine,
//! up or down at random, and overflows where that engine's type would. The reference's ops, written once over `Scalar`, run on it unchanged;
//! their spread over a few runs is what rounding at that precision can do to *this* op at
//! *this* point — its conditioning and its algorithm's stability together (a layer norm of a
//! nearly constant row, whose rounded mean shifts every normalized value alike, included),
//! and a comparison within rounding distance of a kink lands on either side.
//!
//! The noise is thread-local and off unless [`with_noise`] turns it on, so a value of this type
//! computed outside it is plain `f64` arithmetic. Operations that do not round on floats
//! (negation, `abs`, comparisons, conversions from `f64` and counts) carry no noise: an engine
//! sees the same inputs, attributes and cotangent as the reference (the suite rounds them
//! first), so only what it computes can differ.

use std::cell::Cell;
use torchlean_spec::{ops::splitmix64, Result, Scalar};

/// An `f64` in Monte Carlo arithmetic (see the module).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Noisy(pub f64);

/// The precision a [`Noisy`] computation imitates: a relative rounding step and the largest
/// finite magnitude (beyond it a result overflows to an infinity, as the engine's would).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Precision {
    pub eps: f64,
    pub max: f64,
}

impl Precision {
    /// No noise: plain `f64` arithmetic.
    pub const OFF: Precision = Precision {
        eps: 0.0,
        max: f64::MAX,
    };
}

thread_local! {
    /// The precision imitated (`eps` 0: off) and the random state.
    static NOISE: Cell<(Precision, u64)> = const { Cell::new((Precision::OFF, 0)) };
}

/// Runs `f` with every rounding operation on [`Noisy`] moved by `precision.eps` relative, up
/// or down as drawn from `seed` (deterministic: the same `f` and seed give the same draws), and
/// overflowing beyond `precision.max`; the noise is restored to what it was afterwards.
pub fn with_noise<R>(precision: Precision, seed: u64, f: impl FnOnce() -> R) -> R {
    let before = NOISE.with(|n| n.replace((precision, seed)));
    let r = f();
    NOISE.with(|n| n.set(before));
    r
}

/// `x` moved by the current step, in a random direction, and overflowed beyond the current
/// largest magnitude.
fn round(x: f64) -> Noisy {
    let (p, state) = NOISE.with(Cell::get);
    if p.eps == 0.0 {
        return Noisy(x);
    }
    let next = splitmix64(state);
    NOISE.with(|n| n.set((p, next)));
    let direction = if next >> 63 == 0 { 1.0 } else { -1.0 };
    let y = x * (1.0 + direction * p.eps);
    Noisy(if y.abs() > p.max {
        y.signum() * f64::INFINITY
    } else {
        y
    })
}

impl Scalar for Noisy {
    const NAME: &'static str = "noisy-f64";
    const EXACT: bool = false;
    /// An engine's wider accumulator (f32's is f64) rounds only when it narrows back.
    type Acc = f64;

    fn to_acc(&self) -> f64 {
        self.0
    }
    fn from_acc(x: &f64) -> Self {
        round(*x)
    }
    fn zero() -> Self {
        Noisy(0.0)
    }
    fn one() -> Self {
        Noisy(1.0)
    }
    fn from_f64(x: f64) -> Result<Self> {
        Ok(Noisy(x))
    }
    fn from_usize(n: usize) -> Self {
        Noisy(n as f64)
    }
    fn to_f64(&self) -> f64 {
        self.0
    }
    fn add(&self, other: &Self) -> Self {
        round(self.0 + other.0)
    }
    fn sub(&self, other: &Self) -> Self {
        round(self.0 - other.0)
    }
    fn mul(&self, other: &Self) -> Self {
        round(self.0 * other.0)
    }
    fn neg(&self) -> Self {
        Noisy(-self.0)
    }
    fn div(&self, other: &Self) -> Result<Self> {
        Ok(round(self.0 / other.0))
    }
    fn abs(&self) -> Self {
        Noisy(self.0.abs())
    }
    fn greater(&self, other: &Self) -> bool {
        self.0 > other.0
    }
    fn is_nan(&self) -> bool {
        self.0.is_nan()
    }
    fn is_finite(&self) -> bool {
        self.0.is_finite()
    }
    fn bit_eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
    fn exp(&self) -> Result<Self> {
        Ok(round(self.0.exp()))
    }
    fn tanh(&self) -> Result<Self> {
        Ok(round(self.0.tanh()))
    }
    fn log(&self) -> Result<Self> {
        Ok(round(self.0.ln()))
    }
    fn log1p(&self) -> Result<Self> {
        Ok(round(self.0.ln_1p()))
    }
    fn sqrt(&self) -> Result<Self> {
        Ok(round(self.0.sqrt()))
    }
    fn sin(&self) -> Result<Self> {
        Ok(round(self.0.sin()))
    }
    fn cos(&self) -> Result<Self> {
        Ok(round(self.0.cos()))
    }
    fn erf(&self) -> Result<Self> {
        Ok(round(libm::erf(self.0)))
    }
    fn from_f64_exact_half() -> Self {
        Noisy(0.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_noise_it_is_f64_arithmetic() {
        let (a, b) = (Noisy(0.1), Noisy(0.7));
        assert_eq!(a.add(&b).0, 0.1 + 0.7);
        assert_eq!(a.div(&b).unwrap().0, 0.1 / 0.7);
    }

    #[test]
    fn with_noise_each_rounding_moves_by_one_step_either_way_and_is_restored() {
        let eps = 2f64.powi(-23);
        let f32ish = Precision {
            eps,
            max: f32::MAX as f64,
        };
        let sums: Vec<f64> = (0..64)
            .map(|seed| with_noise(f32ish, seed, || Noisy(1.0).add(&Noisy(2.0)).0))
            .collect();
        for s in &sums {
            assert!(*s == 3.0 * (1.0 + eps) || *s == 3.0 * (1.0 - eps), "{s}");
        }
        assert!(sums.iter().any(|&s| s > 3.0) && sums.iter().any(|&s| s < 3.0));
        // exact operations carry no noise; the same seed draws the same
        with_noise(f32ish, 7, || {
            assert_eq!(Noisy(-3.0).abs().0, 3.0);
            assert_eq!(Noisy(3.0).neg().0, -3.0);
            // beyond the largest magnitude, an overflow
            assert_eq!(Noisy(1e30).mul(&Noisy(-1e30)).0, f64::NEG_INFINITY);
            assert_eq!(Noisy(100.0).exp().unwrap().0, f64::INFINITY);
        });
        let once = with_noise(f32ish, 7, || Noisy(1.0).mul(&Noisy(3.0)).0);
        assert_eq!(
            once,
            with_noise(f32ish, 7, || Noisy(1.0).mul(&Noisy(3.0)).0)
        );
        // off again afterwards
        assert_eq!(Noisy(1.0).add(&Noisy(2.0)).0, 3.0);
    }
}
