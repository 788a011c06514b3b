//! The element types of the CPU engine (`f32`, `f64`) and the scalar functions its kernels use.
//!
//! Most functions are the standard library's. Three are not, for `f32` only:
//! [`CpuScalar::vexp`], [`CpuScalar::vtanh`] and [`CpuScalar::erf`] are branch-free polynomial
//! kernels (Cephes' `expf`/`tanhf` coefficients, Juffa's `erff` minimax fit) that the compiler
//! vectorises, where `libm`'s are opaque scalar calls; all stay within a few ulp of the correctly
//! rounded result (the unit tests measure it against `f64`). Their polynomials are evaluated with
//! fused multiply-adds (`mul_add`): one rounding per step, and the same bits on every path, since
//! a fused multiply-add is exactly rounded whether it is an instruction (every x86-64 with AVX2,
//! the paths pulp dispatches to) or, on a CPU without one, `libm`'s `fmaf` (correct, slower).
//! `f64` keeps the standard library for every function, so the `f64` engine matches the reference
//! semantics to the last bit on most elementwise ops.

use crate::buffers::BufferPool;
use crate::derived::{DerivedCache, MAX_DERIVED_BYTES};
use std::cell::RefCell;
use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};
use std::sync::Mutex;

mod sealed {
    /// Seals [`super::CpuScalar`] (only `f32` and `f64`, the types `gemm` dispatches on) and
    /// gives each type its own thread-local buffer pool and process-wide derived-form cache.
    pub trait Sealed: Sized {
        /// Runs `f` on this thread's pool of buffers of this element type; `None` while the
        /// thread is being torn down (the pool is gone).
        fn with_pool<R>(f: impl FnOnce(&mut crate::buffers::BufferPool<Self>) -> R) -> Option<R>;

        /// Runs `f` on the process's cache of forms derived from buffers of this element type
        /// ([`crate::derived`]).
        fn with_derived<R>(f: impl FnOnce(&mut crate::derived::DerivedCache<Self>) -> R) -> R;
    }
}

pub(crate) use sealed::Sealed;

/// An element type of [`crate::CpuTensor`]: `f32` or `f64` (sealed).
pub trait CpuScalar:
    Sealed
    + crate::simd::SimdLanes
    + Copy
    + Default
    + PartialEq
    + PartialOrd
    + fmt::Debug
    + fmt::Display
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
{
    /// The engine label (`"cpu-f32"`, `"cpu-f64"`).
    const ENGINE: &'static str;
    const ZERO: Self;
    const ONE: Self;
    const HALF: Self;

    /// Rounds an `f64` to this type (`as`, round to nearest).
    fn from_f64(x: f64) -> Self;
    /// Widens to `f64` (exact).
    fn to_f64(self) -> f64;
    /// A count as this type (`as`).
    fn from_usize(n: usize) -> Self;
    /// The bit pattern, widened (for bitwise comparisons).
    fn bits(self) -> u64;
    fn is_nan(self) -> bool;
    fn is_finite(self) -> bool;
    fn abs(self) -> Self;
    fn sqrt(self) -> Self;
    fn ln(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    /// `exp`, vectorisable (polynomial on `f32`, the standard library on `f64`).
    fn vexp(self) -> Self;
    /// `tanh`, vectorisable (polynomial on `f32`, the standard library on `f64`).
    fn vtanh(self) -> Self;
    /// The error function, vectorisable (polynomial on `f32`; `libm`'s `erf`, the reference's,
    /// on `f64`).
    fn erf(self) -> Self;
}

static DERIVED_F32: Mutex<DerivedCache<f32>> =
    Mutex::new(DerivedCache::with_capacity(MAX_DERIVED_BYTES));
static DERIVED_F64: Mutex<DerivedCache<f64>> =
    Mutex::new(DerivedCache::with_capacity(MAX_DERIVED_BYTES));

thread_local! {
    static POOL_F32: RefCell<BufferPool<f32>> = const { RefCell::new(BufferPool::new()) };
    static POOL_F64: RefCell<BufferPool<f64>> = const { RefCell::new(BufferPool::new()) };
}

macro_rules! cpu_scalar {
    ($t:ty, $engine:literal, $pool:ident, $derived:ident, $exp:expr, $tanh:expr, $erf:expr) => {
        impl Sealed for $t {
            #[inline]
            fn with_pool<R>(f: impl FnOnce(&mut BufferPool<Self>) -> R) -> Option<R> {
                $pool
                    .try_with(|p| p.try_borrow_mut().ok().map(|mut p| f(&mut p)))
                    .ok()
                    .flatten()
            }

            fn with_derived<R>(f: impl FnOnce(&mut DerivedCache<Self>) -> R) -> R {
                // a panic inside leaves the entries valid (each keeps its own source alive)
                f(&mut $derived.lock().unwrap_or_else(|e| e.into_inner()))
            }
        }

        impl CpuScalar for $t {
            const ENGINE: &'static str = $engine;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const HALF: Self = 0.5;

            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_usize(n: usize) -> Self {
                n as $t
            }
            #[inline(always)]
            fn bits(self) -> u64 {
                self.to_bits() as u64
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn vexp(self) -> Self {
                $exp(self)
            }
            #[inline(always)]
            fn vtanh(self) -> Self {
                $tanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
        }
    };
}

cpu_scalar!(
    f32,
    "cpu-f32",
    POOL_F32,
    DERIVED_F32,
    exp_f32,
    tanh_f32,
    erf_f32
);
cpu_scalar!(
    f64,
    "cpu-f64",
    POOL_F64,
    DERIVED_F64,
    f64::exp,
    f64::tanh,
    libm::erf
);

/// `exp` on `f32` without branches or calls (so loops over it vectorise).
///
/// Range reduction `x = n·ln2 + r` with Cody–Waite constants (exact products for `|n| < 2^15`),
/// Cephes' degree-6 polynomial for `exp(r)` on `|r| ≤ ln2/2`, and the scale `2^n` applied as two
/// halves so that results near the overflow and underflow thresholds (denormals included) are
/// formed without an intermediate overflow. Inputs are clamped to `[-104, 88.8]`, beyond which
/// the result is `0` or `inf` anyway; NaN propagates through the polynomial.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const HI: f32 = 88.8;
    const LO: f32 = -104.0;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4; // = 355/512 exactly
    const C2: f32 = -2.121_944_4e-4;
    // 1.5 · 2^23: adding it rounds to an integer held in the low mantissa bits
    const SHIFT: f32 = 12_582_912.0;
    const SHIFT_BITS: i32 = 0x4B40_0000;
    let x = if x > HI { HI } else { x };
    let x = if x < LO { LO } else { x };
    let t = x.mul_add(LOG2E, SHIFT);
    let n = t - SHIFT;
    let r = (-n).mul_add(C2, (-n).mul_add(C1, x));
    let ni = (t.to_bits() as i32).wrapping_sub(SHIFT_BITS);
    let z = r * r;
    let p = 1.987_569_1e-4f32
        .mul_add(r, 1.398_199_9e-3)
        .mul_add(r, 8.333_452e-3)
        .mul_add(r, 4.166_579_6e-2)
        .mul_add(r, 1.666_666_5e-1)
        .mul_add(r, 5e-1)
        .mul_add(z, r)
        + 1.0;
    let e1 = ni >> 1;
    let e2 = ni.wrapping_sub(e1);
    let s1 = f32::from_bits((e1.wrapping_add(127) as u32) << 23);
    let s2 = f32::from_bits((e2.wrapping_add(127) as u32) << 23);
    p * s1 * s2
}

/// `tanh` on `f32` without branches or calls: Cephes' odd polynomial below `|x| = 0.625`,
/// `1 − 2/(exp(2|x|) + 1)` above (which saturates to exactly 1 for large `|x|`), sign restored
/// with `copysign` (so `tanh(−0) = −0`); NaN propagates.
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = a * a;
    let small = (-5.704_988_7e-3f32)
        .mul_add(z, 2.063_909e-2)
        .mul_add(z, -5.373_971_6e-2)
        .mul_add(z, 1.333_144_2e-1)
        .mul_add(z, -3.333_328e-1)
        * z;
    let small = small.mul_add(a, a);
    let e = exp_f32(a + a);
    let large = 1.0 - 2.0 / (e + 1.0);
    let r = if a < 0.625 { small } else { large };
    r.copysign(x)
}

/// `erf` on `f32` without calls, so loops over it vectorise (GELU's forward and VJP were a
/// fifth of a GPT training step as `libm`'s scalar `erff`, which calls `expf`).
///
/// Norbert Juffa's minimax fits: below `|a| = 0.9277` the odd polynomial `a + a·P(a²)`; above,
/// `1 − exp(−|a| − |a|·Q(|a|))` with the sign restored, with fused multiply-adds as in the
/// original. `erf(±0) = ±0`, `erf(±inf) = ±1`, NaN propagates.
#[inline(always)]
pub(crate) fn erf_f32(a: f32) -> f32 {
    let t = a.abs();
    let s = a * a;
    let p = (-5.967_617e-4f32)
        .mul_add(s, 4.991_194_2e-3)
        .mul_add(s, -2.676_813_5e-2)
        .mul_add(s, 1.128_199_3e-1)
        .mul_add(s, -3.761_253_4e-1)
        .mul_add(s, 1.283_791_7e-1);
    let small = p.mul_add(a, a);
    let q = (-1.728_534_7e-5f32)
        .mul_add(t, 3.831_971_3e-4)
        .mul_add(s, (-3.883_964_4e-3f32).mul_add(t, 2.425_462_2e-2))
        .mul_add(t, -1.067_778_8e-1)
        .mul_add(t, -6.348_467e-1)
        .mul_add(t, -1.287_175_1e-1)
        .mul_add(t, -t);
    let large = (1.0 - exp_f32(q)).copysign(a);
    if t > 0.927_734_4 {
        large
    } else {
        small
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units of the last place of `f32` around the exact (f64) value.
    fn ulps(got: f32, want: f64) -> f64 {
        if want == 0.0 {
            return (got as f64).abs() / f32::MIN_POSITIVE as f64;
        }
        let w = want as f32;
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()) as f64;
        (got as f64 - want).abs() / ulp
    }

    fn sweep(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| lo + (hi - lo) * (i as f32 / n as f32))
    }

    #[test]
    fn exp_f32_is_within_two_ulp_on_the_normal_range() {
        let mut worst: f64 = 0.0;
        for x in sweep(-87.0, 88.7, 200_000) {
            worst = worst.max(ulps(exp_f32(x), (x as f64).exp()));
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
    }

    #[test]
    fn exp_f32_edges() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-200.0), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        // denormal results are formed, not flushed
        let d = exp_f32(-100.0);
        assert!(d > 0.0 && d < f32::MIN_POSITIVE);
        // within one denormal step of the exact value
        assert!(((d as f64) - (-100f64).exp()).abs() <= 1.5e-45);
        // the largest finite result
        assert!(exp_f32(88.72).is_finite());
    }

    #[test]
    fn tanh_f32_is_within_three_ulp() {
        let mut worst: f64 = 0.0;
        for x in sweep(-12.0, 12.0, 200_000) {
            worst = worst.max(ulps(tanh_f32(x), (x as f64).tanh()));
        }
        assert!(worst <= 3.0, "worst error {worst} ulp");
        for x in sweep(-1e-3, 1e-3, 10_000) {
            let w = (x as f64).tanh();
            assert!(((tanh_f32(x) as f64) - w).abs() <= 1e-7 * w.abs().max(1e-30));
        }
    }

    #[test]
    fn tanh_f32_edges() {
        assert_eq!(tanh_f32(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh_f32(50.0), 1.0);
        assert_eq!(tanh_f32(-50.0), -1.0);
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
    }

    #[test]
    fn erf_f32_is_within_one_and_a_tenth_ulp() {
        let mut worst: f64 = 0.0;
        for x in sweep(-10.0, 10.0, 400_000) {
            worst = worst.max(ulps(erf_f32(x), libm::erf(x as f64)));
        }
        // near the switch between the two fits, where the worst case was found
        for x in sweep(0.85, 1.0, 100_000) {
            worst = worst.max(ulps(erf_f32(-x), libm::erf(-x as f64)));
        }
        assert!(worst <= 1.1, "worst error {worst} ulp");
        for x in sweep(1e-30, 1e-20, 1_000) {
            assert!(ulps(erf_f32(x), libm::erf(x as f64)) <= 1.0);
        }
    }

    #[test]
    fn erf_f32_edges() {
        assert_eq!(erf_f32(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(erf_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(erf_f32(f32::INFINITY), 1.0);
        assert_eq!(erf_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(erf_f32(6.0), 1.0);
        assert!(erf_f32(f32::NAN).is_nan());
    }

    #[test]
    fn f64_functions_are_the_standard_library() {
        for x in [-3.5f64, -0.25, 0.0, 0.7, 12.0] {
            assert_eq!(x.vexp().to_bits(), x.exp().to_bits());
            assert_eq!(x.vtanh().to_bits(), x.tanh().to_bits());
            assert_eq!(CpuScalar::erf(x).to_bits(), libm::erf(x).to_bits());
        }
    }
}
