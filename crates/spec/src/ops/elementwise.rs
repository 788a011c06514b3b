//! Elementwise unary and binary ops: the scalar function and its derivative, in one place.
//!
//! Edge policy (documented in `docs/ir-format.md`):
//! - `relu(x) = 0 if x < 0 else x` (so `relu(NaN) = NaN` and `relu(-0) = -0`, as `torch.relu`),
//!   and its VJP `0 if y ≤ 0 else dy` (PyTorch's `threshold_backward`: `relu'(0) = 0`, the
//!   cotangent passes at NaN);
//! - `abs'(0) = 0`;
//! - `sqrt'(x) = 1/(2·sqrt x)` for `x > 0`, else 0 (also at 0, where the true derivative is
//!   infinite); `sqrt` of a negative float is NaN;
//! - `inv(0)` is `±inf` on floats and an error on rationals;
//! - `max`/`min` are `torch.maximum`/`torch.minimum`: NaN on either side gives NaN, a tie gives
//!   the left operand (`-0` vs `+0`); the VJP is PyTorch's: the loser gets 0, a tie sends half
//!   the cotangent to each side, and at NaN both sides get all of it;
//! - `gelu` is PyTorch's formula and order of operations for each `approximate` form;
//! - `leaky_relu(x) = x if x > 0 else negative_slope·x` (NaN stays NaN), its VJP `dy` where
//!   `x > 0`, else `negative_slope·dy` (at 0 and at NaN too: PyTorch's `leaky_relu_backward`);
//! - `elu(x) = x if x > 0 else (exp(x) − 1)·alpha` (NaN stays NaN), its VJP `dy·alpha·exp(x)`
//!   where `x ≤ 0`, else `dy` (at NaN too: PyTorch's `elu_backward`).

use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// `gelu`'s `approximate` attribute: PyTorch's erf form (`"none"`) or its tanh form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GeluApprox {
    /// `x·Φ(x) = 0.5·x·(1 + erf(x/√2))`.
    None,
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (TorchLean's form).
    Tanh,
}

impl GeluApprox {
    /// The wire values, in the order of [`GeluApprox::ALL`].
    pub const OPTIONS: &'static [&'static str] = &["none", "tanh"];
    pub const ALL: [GeluApprox; 2] = [GeluApprox::None, GeluApprox::Tanh];

    /// The wire value.
    pub fn wire(self) -> &'static str {
        match self {
            GeluApprox::None => "none",
            GeluApprox::Tanh => "tanh",
        }
    }

    /// The form with wire value `s`.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.wire() == s)
    }
}

/// The constants of PyTorch's gelu kernels, as `f64` (one place for the reference and every
/// engine).
pub mod gelu_consts {
    /// `√(2/π)`, PyTorch's `kBeta` of the tanh form (`M_SQRT2 · M_2_SQRTPI · 0.5`).
    pub const BETA: f64 = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
    /// PyTorch's `kKappa`.
    pub const KAPPA: f64 = 0.044715;
    /// `3·κ`, as PyTorch's backward computes it.
    pub const THREE_KAPPA: f64 = 3.0 * KAPPA;
    /// `1/√(2π)`, PyTorch's `kAlpha` of the erf form's backward (`M_2_SQRTPI · M_SQRT1_2 · 0.5`).
    pub const ALPHA: f64 = std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2 * 0.5;
    /// `√½` (`M_SQRT1_2`).
    pub const SQRT1_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
}

use gelu_consts::{ALPHA as GELU_ALPHA, BETA as GELU_BETA, KAPPA as GELU_KAPPA};
use gelu_consts::{SQRT1_2 as GELU_SQRT1_2, THREE_KAPPA as GELU_THREE_KAPPA};

/// `leaky_relu`'s `negative_slope` when the node carries none (PyTorch's default).
pub const LEAKY_RELU_DEFAULT_SLOPE: f64 = 0.01;

/// `2/√π`, the scale of `erf`'s derivative (PyTorch's `2.0 / sqrt(M_PI)`, in f64).
pub const ERF_VJP_SCALE: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// `elu`'s `alpha` when the node carries none (PyTorch's default).
pub const ELU_DEFAULT_ALPHA: f64 = 1.0;

/// Elementwise unary functions (a function with a number attribute holds its value, so the
/// type is `PartialEq` only).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Abs,
    Sqrt,
    Inv,
    Relu,
    Tanh,
    Sigmoid,
    Exp,
    Log,
    Sin,
    Cos,
    /// Extension: `-x`.
    Neg,
    /// Extension: `log(1 + exp(x))`, computed stably.
    Softplus,
    /// Extension: `torch.sign(x)`: 1, −1, or +0 for ±0 and NaN (`(0 < x) − (x < 0)`); its
    /// gradient is 0 everywhere, PyTorch's.
    Sign,
    /// Extension: `torch.erf(x)`.
    Erf,
    /// Extension: `x · σ(x)`.
    Silu,
    /// Extension: `F.gelu(x, approximate=…)`.
    Gelu(GeluApprox),
    /// Extension: `F.leaky_relu(x, negative_slope)`.
    LeakyRelu {
        negative_slope: f64,
    },
    /// Extension: `F.elu(x, alpha)`.
    Elu {
        alpha: f64,
    },
}

impl UnaryOp {
    /// Every function, each `gelu` form once.
    pub const ALL: [UnaryOp; 19] = [
        UnaryOp::Abs,
        UnaryOp::Sqrt,
        UnaryOp::Inv,
        UnaryOp::Relu,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Neg,
        UnaryOp::Softplus,
        UnaryOp::Sign,
        UnaryOp::Erf,
        UnaryOp::Silu,
        UnaryOp::Gelu(GeluApprox::None),
        UnaryOp::Gelu(GeluApprox::Tanh),
        UnaryOp::LeakyRelu {
            negative_slope: LEAKY_RELU_DEFAULT_SLOPE,
        },
        UnaryOp::Elu {
            alpha: ELU_DEFAULT_ALPHA,
        },
    ];

    /// The wire name (the descriptor's).
    pub fn name(self) -> &'static str {
        self.desc().name
    }

    /// Whether the function is defined over the exact rational scalar.
    pub fn is_algebraic(self) -> bool {
        matches!(
            self,
            UnaryOp::Abs
                | UnaryOp::Inv
                | UnaryOp::Relu
                | UnaryOp::Neg
                | UnaryOp::Sign
                | UnaryOp::LeakyRelu { .. }
        )
    }

    /// The scalar function.
    #[inline]
    pub fn apply<A: Scalar>(self, x: &A) -> Result<A> {
        Ok(match self {
            UnaryOp::Abs => x.abs(),
            UnaryOp::Sqrt => x.sqrt()?,
            UnaryOp::Inv => x.recip()?,
            UnaryOp::Relu => {
                if x.is_negative() {
                    A::zero()
                } else {
                    x.clone()
                }
            }
            UnaryOp::Tanh => x.tanh()?,
            UnaryOp::Sigmoid => A::one().div(&A::one().add(&x.neg().exp()?))?,
            UnaryOp::Exp => x.exp()?,
            UnaryOp::Log => x.log()?,
            UnaryOp::Sin => x.sin()?,
            UnaryOp::Cos => x.cos()?,
            UnaryOp::Neg => x.neg(),
            UnaryOp::Sign => {
                if x.is_positive() {
                    A::one()
                } else if x.is_negative() {
                    A::one().neg()
                } else {
                    A::zero()
                }
            }
            UnaryOp::Softplus => {
                // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|.
                let pos = if x.is_positive() {
                    x.clone()
                } else {
                    A::zero()
                };
                pos.add(&x.abs().neg().exp()?.log1p()?)
            }
            UnaryOp::Erf => x.erf()?,
            UnaryOp::Silu => x.mul(&UnaryOp::Sigmoid.apply(x)?),
            UnaryOp::Gelu(GeluApprox::None) => {
                // x·0.5·(1 + erf(x·√½)), PyTorch's order
                let half = A::one().half();
                let c = A::from_f64(GELU_SQRT1_2)?;
                x.mul(&half).mul(&A::one().add(&x.mul(&c).erf()?))
            }
            UnaryOp::Gelu(GeluApprox::Tanh) => {
                // 0.5·x·(1 + tanh(β·(x + κ·x³)))
                let (beta, kappa) = (A::from_f64(GELU_BETA)?, A::from_f64(GELU_KAPPA)?);
                let cube = x.mul(x).mul(x);
                let inner = beta.mul(&x.add(&kappa.mul(&cube)));
                A::one().half().mul(x).mul(&A::one().add(&inner.tanh()?))
            }
            UnaryOp::LeakyRelu { negative_slope } => {
                if x.is_positive() {
                    x.clone()
                } else {
                    x.mul(&A::from_f64(negative_slope)?)
                }
            }
            // PyTorch's order: (exp(x) − 1)·alpha
            UnaryOp::Elu { alpha } => {
                if x.is_positive() {
                    x.clone()
                } else {
                    x.exp()?.sub(&A::one()).mul(&A::from_f64(alpha)?)
                }
            }
        })
    }

    /// The scalar VJP: `dx` from the input `x` and/or output `y` (as declared by
    /// the descriptor's `saves`) and the cotangent `dy`.
    #[inline]
    pub fn vjp_scalar<A: Scalar>(self, x: Option<&A>, y: Option<&A>, dy: &A) -> Result<A> {
        let need = |v: Option<&A>, what: &str| -> Result<A> {
            v.cloned().ok_or_else(|| SpecError::MissingSaved {
                op: self.name(),
                what: what.to_string(),
            })
        };
        Ok(match self {
            UnaryOp::Abs => {
                let x = need(x, "input")?;
                if x.is_positive() {
                    dy.clone()
                } else if x.is_negative() {
                    dy.neg()
                } else {
                    A::zero()
                }
            }
            UnaryOp::Sqrt => {
                let y = need(y, "output")?;
                if y.is_positive() {
                    dy.div(&y.add(&y))?
                } else {
                    A::zero()
                }
            }
            UnaryOp::Inv => {
                let y = need(y, "output")?;
                dy.mul(&y.mul(&y)).neg()
            }
            UnaryOp::Relu => {
                let y = need(y, "output")?;
                if y.is_positive() || y.is_nan() {
                    dy.clone()
                } else {
                    A::zero()
                }
            }
            UnaryOp::Tanh => {
                let y = need(y, "output")?;
                dy.mul(&A::one().sub(&y.mul(&y)))
            }
            UnaryOp::Sigmoid => {
                let y = need(y, "output")?;
                dy.mul(&A::one().sub(&y)).mul(&y)
            }
            UnaryOp::Exp => dy.mul(&need(y, "output")?),
            UnaryOp::Log => dy.div(&need(x, "input")?)?,
            UnaryOp::Sin => dy.mul(&need(x, "input")?.cos()?),
            UnaryOp::Cos => dy.mul(&need(x, "input")?.sin()?.neg()),
            UnaryOp::Neg => dy.neg(),
            // `zeros_like(grad)`: 0 whatever the cotangent (a NaN one too)
            UnaryOp::Sign => A::zero(),
            UnaryOp::Softplus => dy.mul(&UnaryOp::Sigmoid.apply(&need(x, "input")?)?),
            // PyTorch's `2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad`
            UnaryOp::Erf => {
                let x = need(x, "input")?;
                A::from_f64(ERF_VJP_SCALE)?
                    .mul(&x.mul(&x).neg().exp()?)
                    .mul(dy)
            }
            UnaryOp::Silu => {
                // d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x)))
                let x = need(x, "input")?;
                let sg = UnaryOp::Sigmoid.apply(&x)?;
                dy.mul(&sg.mul(&A::one().add(&x.mul(&A::one().sub(&sg)))))
            }
            UnaryOp::Gelu(GeluApprox::None) => {
                // Φ(x) + x·φ(x): 0.5·(1 + erf(x·√½)) + x·exp(−x²/2)·α
                let x = need(x, "input")?;
                let half = A::one().half();
                let cdf = half.mul(&A::one().add(&x.mul(&A::from_f64(GELU_SQRT1_2)?).erf()?));
                let pdf = A::from_f64(GELU_ALPHA)?.mul(&half.neg().mul(&x).mul(&x).exp()?);
                dy.mul(&cdf.add(&x.mul(&pdf)))
            }
            UnaryOp::Gelu(GeluApprox::Tanh) => {
                // PyTorch's gelu_backward: 0.5·(1 + t) + 0.5·x·(1 − t²)·β·(1 + 3κ·x²)
                let x = need(x, "input")?;
                let (beta, kappa) = (A::from_f64(GELU_BETA)?, A::from_f64(GELU_KAPPA)?);
                let half = A::one().half();
                let sq = x.mul(&x);
                let cube = sq.mul(&x);
                let t = beta.mul(&x.add(&kappa.mul(&cube))).tanh()?;
                let left = half.mul(&x);
                let right = A::one().add(&t);
                let left_d = half.mul(&right);
                let three_kappa = A::from_f64(GELU_THREE_KAPPA)?;
                let inner_d = beta.mul(&A::one().add(&three_kappa.mul(&sq)));
                let right_d = left.mul(&A::one().sub(&t.mul(&t))).mul(&inner_d);
                dy.mul(&left_d.add(&right_d))
            }
            UnaryOp::LeakyRelu { negative_slope } => {
                if need(x, "input")?.is_positive() {
                    dy.clone()
                } else {
                    dy.mul(&A::from_f64(negative_slope)?)
                }
            }
            UnaryOp::Elu { alpha } => {
                let x = need(x, "input")?;
                if x.is_positive() || x.is_nan() {
                    dy.clone()
                } else {
                    dy.mul(&A::from_f64(alpha)?).mul(&x.exp()?)
                }
            }
        })
    }

    /// Tensor VJP.
    pub fn vjp<A: Scalar>(
        self,
        x: Option<&Tensor<A>>,
        y: Option<&Tensor<A>>,
        dy: &Tensor<A>,
    ) -> Result<Tensor<A>> {
        let mut out = Vec::with_capacity(dy.len());
        for (i, d) in dy.data().iter().enumerate() {
            let xi = x.map(|t| &t.data()[i]);
            let yi = y.map(|t| &t.data()[i]);
            out.push(self.vjp_scalar(xi, yi, d)?);
        }
        Tensor::new(dy.shape().clone(), out)
    }
}

/// Elementwise binary functions of identically shaped tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Extension: `a / b`.
    Div,
    Max,
    Min,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 6] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];

    /// The wire name (the descriptor's).
    pub fn name(self) -> &'static str {
        self.desc().name
    }

    #[inline]
    pub fn apply<A: Scalar>(self, a: &A, b: &A) -> Result<A> {
        Ok(match self {
            BinaryOp::Add => a.add(b),
            BinaryOp::Sub => a.sub(b),
            BinaryOp::Mul => a.mul(b),
            BinaryOp::Div => a.div(b)?,
            BinaryOp::Max => {
                if b.is_nan() || b.greater(a) {
                    b.clone()
                } else {
                    a.clone()
                }
            }
            BinaryOp::Min => {
                if b.is_nan() || a.greater(b) {
                    b.clone()
                } else {
                    a.clone()
                }
            }
        })
    }

    /// Scalar VJP `(da, db)`; `a`, `b` are required where the descriptor saves them.
    #[inline]
    pub fn vjp_scalar<A: Scalar>(self, a: Option<&A>, b: Option<&A>, d: &A) -> Result<(A, A)> {
        let both = || -> Result<(&A, &A)> {
            match (a, b) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err(SpecError::MissingSaved {
                    op: self.name(),
                    what: "operands".into(),
                }),
            }
        };
        Ok(match self {
            BinaryOp::Add => (d.clone(), d.clone()),
            BinaryOp::Sub => (d.clone(), d.neg()),
            BinaryOp::Mul => {
                let (a, b) = both()?;
                (d.mul(b), d.mul(a))
            }
            BinaryOp::Div => {
                let (a, b) = both()?;
                (d.div(b)?, d.mul(a).div(&b.mul(b))?.neg())
            }
            BinaryOp::Max | BinaryOp::Min => {
                let (a, b) = both()?;
                let (above, below) = (a.greater(b), b.greater(a));
                let tie = !above && !below && !a.is_nan() && !b.is_nan();
                // PyTorch's `maximum`/`minimum` backward: the loser gets 0, a tie half each,
                // and where either side is NaN neither loses, so both get the cotangent
                let (a_loses, b_loses) = if self == BinaryOp::Max {
                    (below, above)
                } else {
                    (above, below)
                };
                let share = |loses: bool| {
                    if tie {
                        d.half()
                    } else if loses {
                        A::zero()
                    } else {
                        d.clone()
                    }
                };
                (share(a_loses), share(b_loses))
            }
        })
    }

    /// Tensor VJP.
    pub fn vjp<A: Scalar>(
        self,
        a: Option<&Tensor<A>>,
        b: Option<&Tensor<A>>,
        d: &Tensor<A>,
    ) -> Result<(Tensor<A>, Tensor<A>)> {
        let n = d.len();
        let mut da = Vec::with_capacity(n);
        let mut db = Vec::with_capacity(n);
        for (i, di) in d.data().iter().enumerate() {
            let (x, y) = self.vjp_scalar(a.map(|t| &t.data()[i]), b.map(|t| &t.data()[i]), di)?;
            da.push(x);
            db.push(y);
        }
        Ok((
            Tensor::new(d.shape().clone(), da)?,
            Tensor::new(d.shape().clone(), db)?,
        ))
    }
}

/// Shape rule shared by the binary ops: identical shapes (broadcasting is explicit in graphs).
pub(crate) fn infer_same(op: &'static str, a: &Shape, b: &Shape) -> Result<Shape> {
    if a != b {
        return Err(SpecError::ShapeMismatch {
            op,
            shapes: vec![a.clone(), b.clone()],
        });
    }
    Ok(a.clone())
}

/// `clamp`'s attribute rule: no NaN bound, and `min ≤ max` where both are present.
pub(crate) fn check_clamp_bounds(min: Option<f64>, max: Option<f64>) -> Result<()> {
    const OP: &str = "clamp";
    for (attr, v) in [("min", min), ("max", max)] {
        if v.is_some_and(f64::is_nan) {
            return Err(SpecError::OpAttr {
                op: OP,
                attr,
                reason: "is NaN".into(),
            });
        }
    }
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            return Err(SpecError::OpAttr {
                op: OP,
                attr: "min",
                reason: format!("is {lo}, greater than `max` = {hi}"),
            });
        }
    }
    Ok(())
}

/// `torch.clamp`: `min` where `x < min`, `max` where `x > max`, else `x` (so NaN stays NaN).
pub(crate) fn clamp<A: Scalar>(
    x: &Tensor<A>,
    min: Option<f64>,
    max: Option<f64>,
) -> Result<Tensor<A>> {
    let lo = min.map(A::from_f64).transpose()?;
    let hi = max.map(A::from_f64).transpose()?;
    x.map(|v| {
        Ok(match (&lo, &hi) {
            (Some(lo), _) if lo.greater(v) => lo.clone(),
            (_, Some(hi)) if v.greater(hi) => hi.clone(),
            _ => v.clone(),
        })
    })
}

/// PyTorch's `clamp_backward`: `dy` where `min ≤ x ≤ max` (bounds included; an absent bound
/// is no condition), 0 elsewhere and at NaN.
pub(crate) fn clamp_vjp<A: Scalar>(
    x: &Tensor<A>,
    dy: &Tensor<A>,
    min: Option<f64>,
    max: Option<f64>,
) -> Result<Tensor<A>> {
    let lo = min.map(A::from_f64).transpose()?;
    let hi = max.map(A::from_f64).transpose()?;
    x.zip_with(dy, "clamp", |v, d| {
        let inside = !v.is_nan()
            && lo.as_ref().is_none_or(|lo| !lo.greater(v))
            && hi.as_ref().is_none_or(|hi| !v.greater(hi));
        Ok(if inside { d.clone() } else { A::zero() })
    })
}
