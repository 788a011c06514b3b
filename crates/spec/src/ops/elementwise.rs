//! Elementwise unary and binary ops: the scalar function and its derivative, in one place.
//!
//! Edge policy (documented in `docs/ir-format.md`):
//! - `relu(x) = x if x > 0 else 0` (so `relu(NaN) = 0`), `relu'(0) = 0`;
//! - `abs'(0) = 0`;
//! - `sqrt'(x) = 1/(2·sqrt x)` for `x > 0`, else 0 (also at 0, where the true derivative is
//!   infinite); `sqrt` of a negative float is NaN;
//! - `inv(0)` is `±inf` on floats and an error on rationals;
//! - `max`/`min` at a tie send half of the cotangent to each side (PyTorch's
//!   `maximum`/`minimum`).

use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// Elementwise unary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// Extension: `x · σ(x)`.
    Silu,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 13] = [
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
        UnaryOp::Silu,
    ];

    /// The wire name (the descriptor's).
    pub fn name(self) -> &'static str {
        self.desc().name
    }

    /// Whether the function is defined over the exact rational scalar.
    pub fn is_algebraic(self) -> bool {
        matches!(
            self,
            UnaryOp::Abs | UnaryOp::Inv | UnaryOp::Relu | UnaryOp::Neg
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
                if x.is_positive() {
                    x.clone()
                } else {
                    A::zero()
                }
            }
            UnaryOp::Tanh => x.tanh()?,
            UnaryOp::Sigmoid => A::one().div(&A::one().add(&x.neg().exp()?))?,
            UnaryOp::Exp => x.exp()?,
            UnaryOp::Log => x.log()?,
            UnaryOp::Sin => x.sin()?,
            UnaryOp::Cos => x.cos()?,
            UnaryOp::Neg => x.neg(),
            UnaryOp::Softplus => {
                // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|.
                let pos = if x.is_positive() {
                    x.clone()
                } else {
                    A::zero()
                };
                pos.add(&x.abs().neg().exp()?.log1p()?)
            }
            UnaryOp::Silu => x.mul(&UnaryOp::Sigmoid.apply(x)?),
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
                if y.is_positive() {
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
            UnaryOp::Softplus => dy.mul(&UnaryOp::Sigmoid.apply(&need(x, "input")?)?),
            UnaryOp::Silu => {
                // d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x)))
                let x = need(x, "input")?;
                let sg = UnaryOp::Sigmoid.apply(&x)?;
                dy.mul(&sg.mul(&A::one().add(&x.mul(&A::one().sub(&sg)))))
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
            BinaryOp::Max => a.max_of(b),
            BinaryOp::Min => a.min_of(b),
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
                let a_wins = if self == BinaryOp::Max {
                    a.greater(b)
                } else {
                    b.greater(a)
                };
                let b_wins = if self == BinaryOp::Max {
                    b.greater(a)
                } else {
                    a.greater(b)
                };
                if a_wins {
                    (d.clone(), A::zero())
                } else if b_wins {
                    (A::zero(), d.clone())
                } else {
                    // tie (or NaN): split evenly, as PyTorch does
                    let h = d.half();
                    (h.clone(), h)
                }
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
        return Err(SpecError::OpShape {
            op,
            shapes: vec![a.clone(), b.clone()],
            reason: "operands must have identical shapes (use broadcast_to first)".into(),
        });
    }
    Ok(a.clone())
}
