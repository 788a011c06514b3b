//! Reductions: over one axis (removed), over everything, and the mean-squared-error loss.
//! Sums fold left from zero in index order. A mean over zero elements (`reduce_mean` over an
//! empty axis, `mse_loss` of empty operands, `cross_entropy`'s mean over zero rows) is `0/0`:
//! NaN on floats, as in PyTorch, and [`SpecError::EmptyMean`] on the exact scalar, which has no
//! NaN. The VJPs of such means have no elements, so they divide by nothing.

use crate::error::{IdProblem, Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// `cross_entropy`'s `reduction`: PyTorch's `"mean"` (over the rows) or `"sum"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    Mean,
    Sum,
}

impl Reduction {
    /// The wire values, in the order of [`Reduction::ALL`].
    pub const OPTIONS: &'static [&'static str] = &["mean", "sum"];
    pub const ALL: [Reduction; 2] = [Reduction::Mean, Reduction::Sum];

    /// The wire value.
    pub fn wire(self) -> &'static str {
        match self {
            Reduction::Mean => "mean",
            Reduction::Sum => "sum",
        }
    }

    /// The reduction with wire value `s`.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.wire() == s)
    }
}

const CE: &str = "cross_entropy";

/// `cross_entropy`'s shape rule: logits `[N, C]`, target `[N]`; the loss is a scalar.
pub(crate) fn infer_cross_entropy(logits: &Shape, target: &Shape) -> Result<Shape> {
    let want = cross_entropy_target_shape(logits)?;
    if target != &want {
        return Err(SpecError::OpShape {
            op: CE,
            shapes: vec![logits.clone(), target.clone()],
            reason: format!("the target must be {want} (one class id per row of the logits)"),
        });
    }
    Ok(Shape::scalar())
}

/// The target's shape `[N]` for logits `[N, C]` (the payload-shape rule).
pub(crate) fn cross_entropy_target_shape(logits: &Shape) -> Result<Shape> {
    match logits.dims() {
        &[n, _] => Ok(Shape::from([n])),
        _ => Err(SpecError::OpShape {
            op: CE,
            shapes: vec![logits.clone()],
            reason: "the logits must be [N, C]".into(),
        }),
    }
}

/// The class ids of a `cross_entropy` target: every value integral and in `[0, classes)`, else
/// an error naming the operand `target` and the first bad element. The one validation every
/// engine's forward and VJP go through (the dispatch calls it), and the IR's payload check.
pub fn class_ids(values: &[f64], classes: usize) -> Result<Vec<usize>> {
    ids_below(CE, "target", "class id", values, classes)
}

/// Integral ids in `[0, bound)`: `values` as indices, or [`SpecError::BadId`] naming op, operand
/// and the first bad element's position and value (`what` says what an id is).
pub(crate) fn ids_below(
    op: &'static str,
    operand: &'static str,
    what: &'static str,
    values: &[f64],
    bound: usize,
) -> Result<Vec<usize>> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if v.is_finite() && v.fract() == 0.0 && v >= 0.0 && v < bound as f64 {
                // invariant: an integral value in [0, bound) fits in usize
                Ok(v as usize)
            } else {
                let problem = if v.is_finite() && v.fract() == 0.0 {
                    IdProblem::OutOfRange
                } else {
                    IdProblem::NotIntegral
                };
                Err(SpecError::BadId {
                    op,
                    operand,
                    what,
                    position: i,
                    value: v,
                    bound,
                    problem,
                })
            }
        })
        .collect()
}

/// `Σᵢ −log_softmax(logitsᵢ)[tᵢ]`, divided by `N` for the mean; the log-softmax is
/// max-shifted (`(x − m) − log Σ e^(x−m)`), each row's sum left to right, rows in order.
pub(crate) fn cross_entropy<A: Scalar>(
    logits: &Tensor<A>,
    target: &[usize],
    mean: bool,
) -> Result<Tensor<A>> {
    let (n, c) = (logits.shape().dims()[0], logits.shape().dims()[1]);
    let mut total = A::zero();
    for (i, &t) in target.iter().enumerate().take(n) {
        let row = &logits.data()[i * c..(i + 1) * c];
        let (m, sum) = row_shift_sum(row)?;
        let picked = row[t].sub(&m).sub(&sum.log()?);
        total = total.add(&picked.neg());
    }
    Ok(Tensor::scalar(if mean {
        mean_of(&total, n, super::desc::CROSS_ENTROPY.name)?
    } else {
        total
    }))
}

/// `(m, Σ e^(x − m))` of a non-empty row, `m` its maximum (`if m > v then m else v`).
fn row_shift_sum<A: Scalar>(row: &[A]) -> Result<(A, A)> {
    let mut m = row[0].clone();
    for v in &row[1..] {
        m = m.max_of(v);
    }
    let mut sum = A::zero();
    for v in row {
        sum = sum.add(&v.sub(&m).exp()?);
    }
    Ok((m, sum))
}

/// `d/dlogits = g·(softmax − onehot(t))` with `g = δ / N` for the mean, `δ` for the sum (no
/// rows: no gradient elements, and no division).
pub(crate) fn cross_entropy_vjp<A: Scalar>(
    logits: &Tensor<A>,
    target: &[usize],
    cot: &Tensor<A>,
    mean: bool,
) -> Result<Tensor<A>> {
    let (n, c) = (logits.shape().dims()[0], logits.shape().dims()[1]);
    let delta = cot.item()?;
    if n == 0 {
        return Tensor::new(logits.shape().clone(), Vec::new());
    }
    let g = if mean {
        delta.div(&A::from_usize(n))?
    } else {
        delta.clone()
    };
    let mut dx = Vec::with_capacity(n * c);
    for (i, &t) in target.iter().enumerate().take(n) {
        let row = &logits.data()[i * c..(i + 1) * c];
        let (m, sum) = row_shift_sum(row)?;
        for (j, v) in row.iter().enumerate() {
            let p = v.sub(&m).exp()?.div(&sum)?;
            let d = p.mul(&g);
            dx.push(if j == t { d.sub(&g) } else { d });
        }
    }
    Tensor::new(logits.shape().clone(), dx)
}

/// `total / n`, the mean of `n` elements summing to `total`: NaN on floats when `n = 0` (PyTorch's
/// `0/0`), an [`SpecError::EmptyMean`] on the exact scalar.
fn mean_of<A: Scalar>(total: &A, n: usize, op: &'static str) -> Result<A> {
    if n == 0 && A::EXACT {
        return Err(SpecError::EmptyMean {
            op,
            scalar: A::NAME,
        });
    }
    total.div(&A::from_usize(n))
}

pub(crate) fn reduce_sum<A: Scalar>(x: &Tensor<A>, axis: usize) -> Result<Tensor<A>> {
    let (outer, n, inner) = x.shape().split_at_axis(axis);
    let mut data = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = A::zero();
            for k in 0..n {
                acc = acc.add(&x.data()[(o * n + k) * inner + i]);
            }
            data.push(acc);
        }
    }
    Tensor::new(x.shape().remove_axis(axis), data)
}

pub(crate) fn reduce_mean<A: Scalar>(x: &Tensor<A>, axis: usize) -> Result<Tensor<A>> {
    let n = x.shape().dims()[axis];
    reduce_sum(x, axis)?.map(|s| mean_of(s, n, super::desc::REDUCE_MEAN.name))
}

/// Spreads `cot` (shape with `axis` removed) back over `axis`, scaled by `scale`.
fn spread<A: Scalar>(
    cot: &Tensor<A>,
    in_shape: &Shape,
    axis: usize,
    scale: Option<&A>,
) -> Result<Tensor<A>> {
    let (outer, n, inner) = in_shape.split_at_axis(axis);
    let mut data = Vec::with_capacity(in_shape.size());
    for o in 0..outer {
        for _ in 0..n {
            for i in 0..inner {
                let d = &cot.data()[o * inner + i];
                data.push(match scale {
                    Some(s) => d.div(s)?,
                    None => d.clone(),
                });
            }
        }
    }
    Tensor::new(in_shape.clone(), data)
}

pub(crate) fn reduce_sum_vjp<A: Scalar>(
    cot: &Tensor<A>,
    in_shape: &Shape,
    axis: usize,
) -> Result<Tensor<A>> {
    spread(cot, in_shape, axis, None)
}

pub(crate) fn reduce_mean_vjp<A: Scalar>(
    cot: &Tensor<A>,
    in_shape: &Shape,
    axis: usize,
) -> Result<Tensor<A>> {
    let n = in_shape.dims()[axis];
    if n == 0 {
        // an empty axis: the input has no elements, so neither has its gradient
        return spread(cot, in_shape, axis, None);
    }
    spread(cot, in_shape, axis, Some(&A::from_usize(n)))
}

pub(crate) fn sum_all<A: Scalar>(x: &Tensor<A>) -> Result<Tensor<A>> {
    let mut acc = A::zero();
    for v in x.data() {
        acc = acc.add(v);
    }
    Ok(Tensor::scalar(acc))
}

pub(crate) fn sum_all_vjp<A: Scalar>(cot: &Tensor<A>, in_shape: &Shape) -> Result<Tensor<A>> {
    Tensor::full(in_shape.clone(), cot.item()?.clone())
}

pub(crate) fn mse_loss<A: Scalar>(y: &Tensor<A>, t: &Tensor<A>) -> Result<Tensor<A>> {
    let mut acc = A::zero();
    for (a, b) in y.data().iter().zip(t.data()) {
        let d = a.sub(b);
        acc = acc.add(&d.mul(&d));
    }
    Ok(Tensor::scalar(mean_of(
        &acc,
        y.len(),
        super::desc::MSE_LOSS.name,
    )?))
}

/// `d/dy = (2/n)·(y − t)·δ`, `d/dt = −d/dy` (PyTorch's order of operations).
pub(crate) fn mse_loss_vjp<A: Scalar>(
    y: &Tensor<A>,
    t: &Tensor<A>,
    cot: &Tensor<A>,
) -> Result<(Tensor<A>, Tensor<A>)> {
    let delta = cot.item()?;
    if y.is_empty() {
        // no elements: empty gradients, and no division by zero
        return Ok((y.clone(), t.clone()));
    }
    let two = A::one().add(&A::one());
    let norm = two.div(&A::from_usize(y.len()))?;
    let dy = y.zip_with(t, super::desc::MSE_LOSS.name, |a, b| {
        Ok(norm.mul(&a.sub(b)).mul(delta))
    })?;
    let dt = dy.map(|d| Ok(d.neg()))?;
    Ok((dy, dt))
}
