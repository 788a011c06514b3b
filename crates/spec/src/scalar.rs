//! The scalar trait (TorchLean's `Context α`) and its three instances: `f32`, `f64` and the exact
//! [`Rational`].
//!
//! Field operations take references so that the arbitrary-precision rational does not need to
//! be cloned for every operation. Operations that can fail on some scalar type return
//! `Result`: division by an exact zero and every transcendental function over the rational
//! scalar are typed errors (TorchLean's `ℚ` instance returns 0 for transcendentals; we refuse
//! instead, so an exact run never silently computes something else).

use crate::error::{Result, SpecError};
use num_bigint::BigInt;
use num_traits::{One, Signed, ToPrimitive, Zero};
use std::fmt;

/// The exact rational scalar: arbitrary-precision numerator and denominator, so no chain of
/// operations can overflow.
pub type Rational = num_rational::BigRational;

/// The scalar dictionary every reference computation is written against.
pub trait Scalar: Clone + fmt::Debug + PartialEq + Send + Sync + 'static {
    /// Human-readable name (`"f32"`, `"f64"`, `"rational"`).
    const NAME: &'static str;
    /// Whether arithmetic is exact (no rounding) — true only for [`Rational`].
    const EXACT: bool;
    /// The accumulation type of ill-conditioned reductions (PyTorch's CPU `acc_type`): `f64`
    /// for `f32`, the type itself otherwise. Batch statistics are computed in it.
    type Acc: Scalar;

    /// Widens to [`Scalar::Acc`] (exact).
    fn to_acc(&self) -> Self::Acc;
    /// Rounds back from [`Scalar::Acc`] (to nearest; the identity where `Acc = Self`).
    fn from_acc(x: &Self::Acc) -> Self;

    fn zero() -> Self;
    fn one() -> Self;
    /// Converts a float. Exact for `f64` and [`Rational`] (every finite float is a dyadic
    /// rational); rounds to nearest for `f32`. Non-finite values are an error for
    /// [`Rational`] only.
    fn from_f64(x: f64) -> Result<Self>;
    /// Converts a count (exact for counts below 2^53 in `f64`, always exact for rationals).
    fn from_usize(n: usize) -> Self;
    /// Nearest `f64` (for printing, JSON and tolerance comparisons).
    fn to_f64(&self) -> f64;

    fn add(&self, other: &Self) -> Self;
    fn sub(&self, other: &Self) -> Self;
    fn mul(&self, other: &Self) -> Self;
    fn neg(&self) -> Self;
    /// Division: IEEE 754 on floats (so `1/0 = inf`), an error on an exact zero divisor.
    fn div(&self, other: &Self) -> Result<Self>;
    fn abs(&self) -> Self;
    /// The decidable `>` (false whenever either side is NaN).
    fn greater(&self, other: &Self) -> bool;
    fn is_nan(&self) -> bool;
    fn is_finite(&self) -> bool;
    /// Identity of representation: bitwise on floats (so `-0.0` differs from `0.0` and a NaN
    /// equals itself), value equality on rationals. This is what "bit for bit" means in tests.
    fn bit_eq(&self, other: &Self) -> bool;

    fn exp(&self) -> Result<Self>;
    fn tanh(&self) -> Result<Self>;
    fn log(&self) -> Result<Self>;
    /// `ln(1 + self)`, accurate near 0.
    fn log1p(&self) -> Result<Self>;
    fn sqrt(&self) -> Result<Self>;
    fn sin(&self) -> Result<Self>;
    fn cos(&self) -> Result<Self>;
    /// The error function `2/√π ∫₀ˣ e^(−t²) dt` (`libm`'s `erf`/`erff`, within 1 ulp).
    fn erf(&self) -> Result<Self>;

    /// `self > 0`.
    fn is_positive(&self) -> bool {
        self.greater(&Self::zero())
    }

    /// `self < 0`.
    fn is_negative(&self) -> bool {
        Self::zero().greater(self)
    }

    /// `max` with TorchLean's decidable `>`: `if a > b then a else b`.
    fn max_of(&self, other: &Self) -> Self {
        if self.greater(other) {
            self.clone()
        } else {
            other.clone()
        }
    }

    /// `min` with the decidable `>`: `if b > a then a else b`.
    fn min_of(&self, other: &Self) -> Self {
        if other.greater(self) {
            self.clone()
        } else {
            other.clone()
        }
    }

    /// `1 / self`.
    fn recip(&self) -> Result<Self> {
        Self::one().div(self)
    }

    /// `self / 2` (exact on rationals; a halving on floats).
    fn half(&self) -> Self {
        self.mul(&Self::from_f64_exact_half())
    }

    #[doc(hidden)]
    fn from_f64_exact_half() -> Self;

    /// `acc[i] = acc[i] + c·src[i]` for each `i` (each product rounded, then added: no fused
    /// multiply-add), the inner step of every reference product. Floats run it compiled for
    /// the widest vector instructions the CPU has (the same IEEE operations on every path, so
    /// the same bits).
    fn add_scaled(acc: &mut [Self], c: &Self, src: &[Self]) {
        for (a, v) in acc.iter_mut().zip(src) {
            *a = a.add(&c.mul(v));
        }
    }
}

/// [`Scalar::add_scaled`] on a float type, dispatched by `pulp` to AVX-512, AVX2 or the
/// baseline (Rust never contracts `a + c·v` into a fused multiply-add on its own).
struct AddScaled<'a, T>(&'a mut [T], T, &'a [T]);

macro_rules! add_scaled_simd {
    ($t:ty) => {
        impl pulp::WithSimd for AddScaled<'_, $t> {
            type Output = ();
            #[inline(always)]
            fn with_simd<S: pulp::Simd>(self, _: S) {
                let AddScaled(acc, c, src) = self;
                for (a, v) in acc.iter_mut().zip(src) {
                    *a += c * v;
                }
            }
        }
    };
}
add_scaled_simd!(f32);
add_scaled_simd!(f64);

macro_rules! float_scalar {
    ($t:ty, $name:literal, $erf:path) => {
        impl Scalar for $t {
            const NAME: &'static str = $name;
            const EXACT: bool = false;
            type Acc = f64;

            #[inline]
            fn to_acc(&self) -> f64 {
                *self as f64
            }
            #[inline]
            fn from_acc(x: &f64) -> Self {
                *x as $t
            }

            #[inline]
            fn zero() -> Self {
                0.0
            }
            #[inline]
            fn one() -> Self {
                1.0
            }
            #[inline]
            fn from_f64(x: f64) -> Result<Self> {
                Ok(x as $t)
            }
            #[inline]
            fn from_usize(n: usize) -> Self {
                n as $t
            }
            #[inline]
            fn to_f64(&self) -> f64 {
                *self as f64
            }
            #[inline]
            fn add(&self, other: &Self) -> Self {
                *self + *other
            }
            #[inline]
            fn sub(&self, other: &Self) -> Self {
                *self - *other
            }
            #[inline]
            fn mul(&self, other: &Self) -> Self {
                *self * *other
            }
            #[inline]
            fn neg(&self) -> Self {
                -*self
            }
            #[inline]
            fn div(&self, other: &Self) -> Result<Self> {
                Ok(*self / *other)
            }
            #[inline]
            fn abs(&self) -> Self {
                <$t>::abs(*self)
            }
            #[inline]
            fn greater(&self, other: &Self) -> bool {
                *self > *other
            }
            #[inline]
            fn is_nan(&self) -> bool {
                <$t>::is_nan(*self)
            }
            #[inline]
            fn is_finite(&self) -> bool {
                <$t>::is_finite(*self)
            }
            #[inline]
            fn bit_eq(&self, other: &Self) -> bool {
                self.to_bits() == other.to_bits()
            }
            #[inline]
            fn exp(&self) -> Result<Self> {
                Ok(<$t>::exp(*self))
            }
            #[inline]
            fn tanh(&self) -> Result<Self> {
                Ok(<$t>::tanh(*self))
            }
            #[inline]
            fn log(&self) -> Result<Self> {
                Ok(<$t>::ln(*self))
            }
            #[inline]
            fn log1p(&self) -> Result<Self> {
                Ok(<$t>::ln_1p(*self))
            }
            #[inline]
            fn sqrt(&self) -> Result<Self> {
                Ok(<$t>::sqrt(*self))
            }
            #[inline]
            fn sin(&self) -> Result<Self> {
                Ok(<$t>::sin(*self))
            }
            #[inline]
            fn cos(&self) -> Result<Self> {
                Ok(<$t>::cos(*self))
            }
            #[inline]
            fn erf(&self) -> Result<Self> {
                Ok($erf(*self))
            }
            #[inline]
            fn from_f64_exact_half() -> Self {
                0.5
            }

            #[inline]
            fn add_scaled(acc: &mut [Self], c: &Self, src: &[Self]) {
                pulp::Arch::new().dispatch(AddScaled(acc, *c, src));
            }
        }
    };
}

float_scalar!(f32, "f32", libm::erff);
float_scalar!(f64, "f64", libm::erf);

fn transcendental<T>(func: &'static str) -> Result<T> {
    Err(SpecError::Transcendental {
        func,
        scalar: "rational",
    })
}

impl Scalar for Rational {
    const NAME: &'static str = "rational";
    const EXACT: bool = true;
    type Acc = Rational;

    fn to_acc(&self) -> Rational {
        self.clone()
    }
    fn from_acc(x: &Rational) -> Self {
        x.clone()
    }

    fn zero() -> Self {
        Zero::zero()
    }
    fn one() -> Self {
        One::one()
    }
    fn from_f64(x: f64) -> Result<Self> {
        Rational::from_float(x).ok_or(SpecError::NonFinite {
            value: x,
            context: "as an exact rational",
        })
    }
    fn from_usize(n: usize) -> Self {
        Rational::from_integer(BigInt::from(n))
    }
    fn to_f64(&self) -> f64 {
        // `Ratio::to_f64` rounds correctly for big numerators/denominators.
        ToPrimitive::to_f64(self).unwrap_or(f64::NAN)
    }
    fn add(&self, other: &Self) -> Self {
        self + other
    }
    fn sub(&self, other: &Self) -> Self {
        self - other
    }
    fn mul(&self, other: &Self) -> Self {
        self * other
    }
    fn neg(&self) -> Self {
        -self
    }
    fn div(&self, other: &Self) -> Result<Self> {
        if other.is_zero() {
            return Err(SpecError::DivisionByZero {
                context: "exact rational division",
            });
        }
        Ok(self / other)
    }
    fn abs(&self) -> Self {
        Signed::abs(self)
    }
    fn greater(&self, other: &Self) -> bool {
        self > other
    }
    fn is_nan(&self) -> bool {
        false
    }
    fn is_finite(&self) -> bool {
        true
    }
    fn bit_eq(&self, other: &Self) -> bool {
        self == other
    }
    fn exp(&self) -> Result<Self> {
        transcendental("exp")
    }
    fn tanh(&self) -> Result<Self> {
        transcendental("tanh")
    }
    fn log(&self) -> Result<Self> {
        transcendental("log")
    }
    fn log1p(&self) -> Result<Self> {
        transcendental("log1p")
    }
    fn sqrt(&self) -> Result<Self> {
        transcendental("sqrt")
    }
    fn sin(&self) -> Result<Self> {
        transcendental("sin")
    }
    fn cos(&self) -> Result<Self> {
        transcendental("cos")
    }
    fn erf(&self) -> Result<Self> {
        transcendental("erf")
    }
    fn from_f64_exact_half() -> Self {
        Rational::new(BigInt::from(1), BigInt::from(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_equality_tells_values_apart_in_every_scalar() {
        let (half, third) = (
            Rational::from_f64(0.5).unwrap(),
            Rational::from_f64(0.25).unwrap(),
        );
        assert!(half.bit_eq(&half.clone()));
        assert_eq!(
            <Rational as Scalar>::one(),
            Rational::from_f64(1.0).unwrap()
        );
        assert_eq!(
            <Rational as Scalar>::zero(),
            Rational::from_f64(0.0).unwrap()
        );
        assert!(!half.bit_eq(&third));
        assert!(0.5f64.bit_eq(&0.5) && !0.5f64.bit_eq(&0.25));
        assert!(0.5f32.bit_eq(&0.5) && !0.5f32.bit_eq(&0.25));
    }

    #[test]
    fn rational_from_f64_is_exact() {
        let r = Rational::from_f64(0.1).unwrap();
        // 0.1 is not 1/10 in binary; the conversion keeps the binary value exactly.
        assert_ne!(r, Rational::new(BigInt::from(1), BigInt::from(10)));
        assert_eq!(Scalar::to_f64(&r), 0.1);
        assert!(Rational::from_f64(f64::NAN).is_err());
        assert!(Rational::from_f64(f64::INFINITY).is_err());
    }

    #[test]
    fn rational_transcendentals_are_typed_errors_not_zero() {
        let x = <Rational as Scalar>::one();
        for r in [
            x.exp(),
            x.tanh(),
            x.log(),
            x.log1p(),
            x.sqrt(),
            x.sin(),
            x.cos(),
            x.erf(),
        ] {
            assert!(matches!(r, Err(SpecError::Transcendental { .. })));
        }
    }

    #[test]
    fn erf_is_accurate_on_both_float_types() {
        // values from the series / mpmath, rounded to f64
        for (x, want) in [
            (0.0f64, 0.0f64),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (-2.0, -0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
        ] {
            assert!((Scalar::erf(&x).unwrap() - want).abs() <= 2e-16, "erf({x})");
            let f = Scalar::erf(&(x as f32)).unwrap();
            assert!((f as f64 - want).abs() <= 2e-7, "erff({x})");
        }
    }

    #[test]
    fn rational_division_by_zero_is_an_error_floats_follow_ieee() {
        let (one, zero) = (<Rational as Scalar>::one(), <Rational as Scalar>::zero());
        assert!(Scalar::div(&one, &zero).is_err());
        assert_eq!(1.0f64.div(&0.0).unwrap(), f64::INFINITY);
        assert_eq!(Scalar::recip(&2.0f32).unwrap(), 0.5);
    }

    #[test]
    fn bit_eq_distinguishes_signed_zero_and_matches_nan() {
        assert!(!0.0f64.bit_eq(&-0.0));
        assert!(f64::NAN.bit_eq(&f64::NAN));
        assert!(!f32::NAN.greater(&0.0));
    }

    #[test]
    fn max_and_min_use_the_decidable_order() {
        assert_eq!(2.0f64.max_of(&3.0), 3.0);
        assert_eq!(2.0f64.min_of(&3.0), 2.0);
        // A NaN loses every comparison, so the *other* operand wins when NaN is on the left
        // and NaN wins when it is on the right: `if a > b then a else b`.
        assert_eq!(f64::NAN.max_of(&1.0), 1.0);
        assert_eq!(f64::NAN.min_of(&1.0), 1.0);
        assert!(1.0f64.max_of(&f64::NAN).is_nan());
        assert!(1.0f64.min_of(&f64::NAN).is_nan());
    }
}
