//! Elementwise ops: the unary functions, the six binary ones, `scale`, `add_scalar`, and
//! their VJPs, with the reference's edge policies (`relu'(0) = 0`, `abs'(0) = 0`, `sqrt' = 0`
//! at `y ≤ 0`, max/min ties split the cotangent in half) and its order of operations.
//!
//! Each kernel is one pass over contiguous slices with the function inlined into the loop (no
//! bounds checks, no calls for the vectorisable functions), split across threads above
//! [`crate::threads::PAR_MIN_WORK`] weighted by a per-function cost. The polynomial functions'
//! closures are `#[inline(always)]`: LLVM left the exact GELU's VJP closure out of line, a
//! scalar call per element compiled for baseline x86-64, which was 29 % of a GPT step.

use crate::error::CpuError;
use crate::scalar::CpuScalar;
use crate::simd::{kernel, vectorized_if};
use crate::tensor::CpuTensor;
use crate::threads::par_rows;
use torchlean_spec::ops::gelu_consts as gc;
use torchlean_spec::{BinaryOp, GeluApprox, UnaryOp};

/// Relative costs (≈ cheap operations per element) that weight the parallel and the dispatch
/// thresholds.
const CHEAP: usize = 1;
const DIVIDE: usize = 4;
/// The polynomial functions (`CpuScalar::vexp`, `vtanh`, `erf`).
pub(super) const POLY: usize = 16;
const LIBM: usize = 32;

/// `dst[i] = f(src[i])`.
#[inline(always)]
pub(crate) fn map_loop<T: Copy, F: Fn(T) -> T>((dst, src, f): (&mut [T], &[T], &F)) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

/// `dst[i] = f(a[i], b[i])`.
#[inline(always)]
pub(crate) fn zip_loop<T: Copy, F: Fn(T, T) -> T>((dst, a, b, f): (&mut [T], &[T], &[T], &F)) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = f(x, y);
    }
}

/// `dst[i] = f(a[i], b[i], c[i])`.
#[inline(always)]
fn zip3_loop<T: Copy, F: Fn(T, T, T) -> T>((dst, a, b, c, f): (&mut [T], &[T], &[T], &[T], &F)) {
    for (((d, &x), &y), &z) in dst.iter_mut().zip(a).zip(b).zip(c) {
        *d = f(x, y, z);
    }
}

kernel!(MapLoop => map_loop<'a> [T: (Copy), F: (Fn(T) -> T)] ((&'a mut [T], &'a [T], &'a F)) -> ());
kernel!(ZipLoop => zip_loop<'a> [T: (Copy), F: (Fn(T, T) -> T)] ((&'a mut [T], &'a [T], &'a [T], &'a F)) -> ());
kernel!(Zip3Loop => zip3_loop<'a> [T: (Copy), F: (Fn(T, T, T) -> T)] ((&'a mut [T], &'a [T], &'a [T], &'a [T], &'a F)) -> ());

/// `f` applied to every element of `x`.
#[inline(always)]
pub(crate) fn map<T: CpuScalar>(
    x: &CpuTensor<T>,
    cost: usize,
    f: impl Fn(T) -> T + Sync + Send,
) -> CpuTensor<T> {
    let mut out = CpuTensor::uninit(x.shape().clone());
    let src = x.as_slice();
    par_rows(out.data_mut(), 1, cost, |start, dst| {
        vectorized_if::<MapLoop, _>(dst.len() * cost, (dst, &src[start..], &f))
    });
    out
}

/// `f` applied to corresponding elements of `a` and `b` (same shape, checked by the caller).
#[inline(always)]
pub(crate) fn zip<T: CpuScalar>(
    a: &CpuTensor<T>,
    b: &CpuTensor<T>,
    cost: usize,
    f: impl Fn(T, T) -> T + Sync + Send,
) -> CpuTensor<T> {
    debug_assert_eq!(a.shape(), b.shape());
    let mut out = CpuTensor::uninit(a.shape().clone());
    let (sa, sb) = (a.as_slice(), b.as_slice());
    par_rows(out.data_mut(), 1, cost, |start, dst| {
        vectorized_if::<ZipLoop, _>(dst.len() * cost, (dst, &sa[start..], &sb[start..], &f))
    });
    out
}

/// `f` applied to corresponding elements of three tensors of one shape.
#[inline(always)]
fn zip3<T: CpuScalar>(
    a: &CpuTensor<T>,
    b: &CpuTensor<T>,
    c: &CpuTensor<T>,
    cost: usize,
    f: impl Fn(T, T, T) -> T + Sync + Send,
) -> CpuTensor<T> {
    let mut out = CpuTensor::uninit(a.shape().clone());
    let (sa, sb, sc) = (a.as_slice(), b.as_slice(), c.as_slice());
    par_rows(out.data_mut(), 1, cost, |start, dst| {
        let args = (dst, &sa[start..], &sb[start..], &sc[start..], &f);
        vectorized_if::<Zip3Loop, _>(args.0.len() * cost, args)
    });
    out
}

/// `0 if x < 0 else x`: NaN and `-0` stay (`torch.relu`).
#[inline(always)]
pub(crate) fn relu<T: CpuScalar>(x: T) -> T {
    if x < T::ZERO {
        T::ZERO
    } else {
        x
    }
}

/// ReLU's VJP from its output `y` and cotangent `d`: PyTorch's `threshold_backward`, so the
/// cotangent passes at NaN.
#[inline(always)]
pub(crate) fn relu_vjp<T: CpuScalar>(y: T, d: T) -> T {
    if y <= T::ZERO {
        T::ZERO
    } else {
        d
    }
}

/// `(0 < x) − (x < 0)`: `+0` for `±0` and NaN (`torch.sign`).
#[inline(always)]
fn sign<T: CpuScalar>(x: T) -> T {
    if x > T::ZERO {
        T::ONE
    } else if x < T::ZERO {
        -T::ONE
    } else {
        T::ZERO
    }
}

#[inline(always)]
fn sigmoid<T: CpuScalar>(x: T) -> T {
    T::ONE / (T::ONE + (-x).vexp())
}

pub(crate) fn unary<T: CpuScalar>(u: UnaryOp, x: &CpuTensor<T>) -> CpuTensor<T> {
    match u {
        UnaryOp::Abs => map(x, CHEAP, T::abs),
        UnaryOp::Sqrt => map(x, DIVIDE, T::sqrt),
        UnaryOp::Inv => map(x, DIVIDE, |v| T::ONE / v),
        UnaryOp::Relu => map(x, CHEAP, relu),
        UnaryOp::Tanh => map(x, POLY, T::vtanh),
        UnaryOp::Sigmoid => map(x, POLY, sigmoid),
        UnaryOp::Exp => map(x, POLY, T::vexp),
        UnaryOp::Log => map(x, LIBM, T::ln),
        UnaryOp::Sin => map(x, LIBM, T::sin),
        UnaryOp::Cos => map(x, LIBM, T::cos),
        UnaryOp::Neg => map(x, CHEAP, |v| -v),
        UnaryOp::Sign => map(x, CHEAP, sign),
        UnaryOp::Erf => map(x, POLY, T::erf),
        // max(x, 0) + log1p(exp(−|x|)): no overflow for large |x|
        UnaryOp::Softplus => map(
            x,
            LIBM,
            #[inline(always)]
            |v| relu(v) + (-v.abs()).vexp().ln_1p(),
        ),
        UnaryOp::Silu => map(
            x,
            POLY,
            #[inline(always)]
            |v| v * sigmoid(v),
        ),
        UnaryOp::Gelu(GeluApprox::None) => {
            let c = T::from_f64(gc::SQRT1_2);
            map(
                x,
                POLY,
                #[inline(always)]
                move |v| v * T::HALF * (T::ONE + (v * c).erf()),
            )
        }
        UnaryOp::Gelu(GeluApprox::Tanh) => {
            let (beta, kappa) = (T::from_f64(gc::BETA), T::from_f64(gc::KAPPA));
            map(
                x,
                POLY,
                #[inline(always)]
                move |v| {
                    let inner = beta * (v + kappa * (v * v * v));
                    T::HALF * v * (T::ONE + inner.vtanh())
                },
            )
        }
        UnaryOp::LeakyRelu { negative_slope } => {
            let s = T::from_f64(negative_slope);
            map(x, CHEAP, move |v| if v > T::ZERO { v } else { v * s })
        }
        UnaryOp::Elu { alpha } => {
            let a = T::from_f64(alpha);
            map(
                x,
                POLY,
                #[inline(always)]
                move |v| {
                    if v > T::ZERO {
                        v
                    } else {
                        (v.vexp() - T::ONE) * a
                    }
                },
            )
        }
    }
}

fn need<'a, T: CpuScalar>(
    v: Option<&'a CpuTensor<T>>,
    op: &'static str,
    what: &str,
) -> Result<&'a CpuTensor<T>, CpuError> {
    v.ok_or_else(|| CpuError::MissingSaved {
        op,
        what: what.into(),
    })
}

/// `dx` from the saved input `x` and/or output `y` (as the op declares) and the cotangent.
pub(crate) fn unary_vjp<T: CpuScalar>(
    u: UnaryOp,
    x: Option<&CpuTensor<T>>,
    y: Option<&CpuTensor<T>>,
    dy: &CpuTensor<T>,
) -> Result<CpuTensor<T>, CpuError> {
    let op = u.name();
    let x = || need(x, op, "input");
    let y = || need(y, op, "output");
    Ok(match u {
        UnaryOp::Abs => zip(x()?, dy, CHEAP, |x, d| {
            if x > T::ZERO {
                d
            } else if x < T::ZERO {
                -d
            } else {
                T::ZERO
            }
        }),
        UnaryOp::Sqrt => zip(y()?, dy, DIVIDE, |y, d| {
            if y > T::ZERO {
                d / (y + y)
            } else {
                T::ZERO
            }
        }),
        UnaryOp::Inv => zip(y()?, dy, CHEAP, |y, d| -(d * (y * y))),
        UnaryOp::Relu => zip(y()?, dy, CHEAP, relu_vjp),
        UnaryOp::Tanh => zip(y()?, dy, CHEAP, |y, d| d * (T::ONE - y * y)),
        UnaryOp::Sigmoid => zip(y()?, dy, CHEAP, |y, d| d * (T::ONE - y) * y),
        UnaryOp::Exp => zip(y()?, dy, CHEAP, |y, d| d * y),
        UnaryOp::Log => zip(x()?, dy, DIVIDE, |x, d| d / x),
        UnaryOp::Sin => zip(
            x()?,
            dy,
            LIBM,
            #[inline(always)]
            |x, d| d * x.cos(),
        ),
        UnaryOp::Cos => zip(
            x()?,
            dy,
            LIBM,
            #[inline(always)]
            |x, d| d * -x.sin(),
        ),
        UnaryOp::Neg => map(dy, CHEAP, |d| -d),
        UnaryOp::Sign => map(dy, CHEAP, |_| T::ZERO),
        UnaryOp::Softplus => zip(
            x()?,
            dy,
            POLY,
            #[inline(always)]
            |x, d| d * sigmoid(x),
        ),
        // 2/√π·exp(−x²)·dy, PyTorch's order (the reference's)
        UnaryOp::Erf => {
            let c = T::from_f64(torchlean_spec::ops::ERF_VJP_SCALE);
            zip(
                x()?,
                dy,
                POLY,
                #[inline(always)]
                move |x, d| c * (-(x * x)).vexp() * d,
            )
        }
        // σ(x)·(1 + x·(1 − σ(x))), the reference's formula
        UnaryOp::Silu => zip(
            x()?,
            dy,
            POLY,
            #[inline(always)]
            |x, d| {
                let s = sigmoid(x);
                d * (s * (T::ONE + x * (T::ONE - s)))
            },
        ),
        // Φ(x) + x·φ(x), PyTorch's order (the reference's)
        UnaryOp::Gelu(GeluApprox::None) => {
            let (c, alpha) = (T::from_f64(gc::SQRT1_2), T::from_f64(gc::ALPHA));
            zip(
                x()?,
                dy,
                POLY,
                #[inline(always)]
                move |x, d| {
                    let cdf = T::HALF * (T::ONE + (x * c).erf());
                    let pdf = alpha * (-T::HALF * x * x).vexp();
                    d * (cdf + x * pdf)
                },
            )
        }
        UnaryOp::Gelu(GeluApprox::Tanh) => {
            let (beta, kappa) = (T::from_f64(gc::BETA), T::from_f64(gc::KAPPA));
            let three_kappa = T::from_f64(gc::THREE_KAPPA);
            zip(
                x()?,
                dy,
                POLY,
                #[inline(always)]
                move |x, d| {
                    let sq = x * x;
                    let t = (beta * (x + kappa * (sq * x))).vtanh();
                    let left = T::HALF * x;
                    let left_d = T::HALF * (T::ONE + t);
                    let right_d = left * (T::ONE - t * t) * (beta * (T::ONE + three_kappa * sq));
                    d * (left_d + right_d)
                },
            )
        }
        // PyTorch's leaky_relu_backward: the slope at 0 and at NaN
        UnaryOp::LeakyRelu { negative_slope } => {
            let s = T::from_f64(negative_slope);
            zip(
                x()?,
                dy,
                CHEAP,
                move |x, d| if x > T::ZERO { d } else { d * s },
            )
        }
        // PyTorch's elu_backward: `dy` at NaN
        UnaryOp::Elu { alpha } => {
            let a = T::from_f64(alpha);
            zip(
                x()?,
                dy,
                POLY,
                #[inline(always)]
                move |x, d| {
                    if x <= T::ZERO {
                        d * a * x.vexp()
                    } else {
                        d
                    }
                },
            )
        }
    })
}

pub(crate) fn binary<T: CpuScalar>(
    b: BinaryOp,
    x: &CpuTensor<T>,
    y: &CpuTensor<T>,
) -> CpuTensor<T> {
    match b {
        BinaryOp::Add => zip(x, y, CHEAP, |a, b| a + b),
        BinaryOp::Sub => zip(x, y, CHEAP, |a, b| a - b),
        BinaryOp::Mul => zip(x, y, CHEAP, |a, b| a * b),
        BinaryOp::Div => zip(x, y, DIVIDE, |a, b| a / b),
        // torch.maximum/minimum: NaN on either side is NaN (`a` is NaN unless `b` wins), a tie
        // gives `a`
        BinaryOp::Max => zip(x, y, CHEAP, |a, b| if b > a || b.is_nan() { b } else { a }),
        BinaryOp::Min => zip(x, y, CHEAP, |a, b| if a > b || b.is_nan() { b } else { a }),
    }
}

/// `(da, db)`. `add` and `sub` pass the cotangent through without a copy.
pub(crate) fn binary_vjp<T: CpuScalar>(
    kind: BinaryOp,
    x: Option<&CpuTensor<T>>,
    y: Option<&CpuTensor<T>>,
    d: &CpuTensor<T>,
) -> Result<(CpuTensor<T>, CpuTensor<T>), CpuError> {
    let op = kind.name();
    let both = || -> Result<(&CpuTensor<T>, &CpuTensor<T>), CpuError> {
        Ok((need(x, op, "operand 0")?, need(y, op, "operand 1")?))
    };
    Ok(match kind {
        BinaryOp::Add => (d.clone(), d.clone()),
        BinaryOp::Sub => (d.clone(), map(d, CHEAP, |d| -d)),
        BinaryOp::Mul => {
            let (a, b) = both()?;
            (
                zip(d, b, CHEAP, |d, b| d * b),
                zip(d, a, CHEAP, |d, a| d * a),
            )
        }
        BinaryOp::Div => {
            let (a, b) = both()?;
            let da = zip(d, b, DIVIDE, |d, b| d / b);
            let db = zip3(d, a, b, DIVIDE, |d, a, b| -((d * a) / (b * b)));
            (da, db)
        }
        BinaryOp::Max | BinaryOp::Min => {
            let (a, b) = both()?;
            // PyTorch's: the loser gets 0, a tie half each, and at NaN (neither loses, no tie)
            // both get the cotangent
            let share = move |loses: bool, tie: bool, d: T| {
                if tie {
                    d * T::HALF
                } else if loses {
                    T::ZERO
                } else {
                    d
                }
            };
            if kind == BinaryOp::Max {
                (
                    zip3(a, b, d, CHEAP, move |a, b, d| share(a < b, a == b, d)),
                    zip3(a, b, d, CHEAP, move |a, b, d| share(a > b, a == b, d)),
                )
            } else {
                (
                    zip3(a, b, d, CHEAP, move |a, b, d| share(a > b, a == b, d)),
                    zip3(a, b, d, CHEAP, move |a, b, d| share(a < b, a == b, d)),
                )
            }
        }
    })
}

#[inline]
pub(crate) fn scale<T: CpuScalar>(x: &CpuTensor<T>, c: T) -> CpuTensor<T> {
    map(x, CHEAP, |v| c * v)
}

#[inline]
pub(crate) fn add_scalar<T: CpuScalar>(x: &CpuTensor<T>, c: T) -> CpuTensor<T> {
    map(x, CHEAP, |v| v + c)
}

/// `torch.clamp`: an absent bound is an infinite one (the same result: `x < −inf` never holds,
/// NaN stays NaN), so the loop is two selects.
pub(crate) fn clamp<T: CpuScalar>(
    x: &CpuTensor<T>,
    min: Option<f64>,
    max: Option<f64>,
) -> CpuTensor<T> {
    let (lo, hi) = clamp_bounds::<T>(min, max);
    map(x, CHEAP, move |v| {
        if v < lo {
            lo
        } else if v > hi {
            hi
        } else {
            v
        }
    })
}

/// `dy` where `lo ≤ x ≤ hi` (false at NaN), else 0.
pub(crate) fn clamp_vjp<T: CpuScalar>(
    x: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    min: Option<f64>,
    max: Option<f64>,
) -> CpuTensor<T> {
    let (lo, hi) = clamp_bounds::<T>(min, max);
    zip(
        x,
        dy,
        CHEAP,
        move |v, d| {
            if v >= lo && v <= hi {
                d
            } else {
                T::ZERO
            }
        },
    )
}

fn clamp_bounds<T: CpuScalar>(min: Option<f64>, max: Option<f64>) -> (T, T) {
    (
        T::from_f64(min.unwrap_or(f64::NEG_INFINITY)),
        T::from_f64(max.unwrap_or(f64::INFINITY)),
    )
}
