//! Reductions: over one axis (removed), over everything, and the mean-squared-error loss.
//! Sums fold left from zero in index order; a mean over zero elements divides by 1.

use crate::error::Result;
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// `max(n, 1)` as a scalar: the mean denominator.
fn mean_denominator<A: Scalar>(n: usize) -> A {
    A::from_usize(n.max(1))
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
    let denom = mean_denominator::<A>(x.shape().dims()[axis]);
    reduce_sum(x, axis)?.map(|s| s.div(&denom))
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
    let denom = mean_denominator::<A>(in_shape.dims()[axis]);
    spread(cot, in_shape, axis, Some(&denom))
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
    Ok(Tensor::scalar(acc.div(&mean_denominator(y.len()))?))
}

/// `d/dy = (2/n)·(y − t)·δ`, `d/dt = −d/dy` (PyTorch's order of operations).
pub(crate) fn mse_loss_vjp<A: Scalar>(
    y: &Tensor<A>,
    t: &Tensor<A>,
    cot: &Tensor<A>,
) -> Result<(Tensor<A>, Tensor<A>)> {
    let delta = cot.item()?;
    let two = A::one().add(&A::one());
    let norm = two.div(&mean_denominator(y.len()))?;
    let dy = y.zip_with(t, super::desc::MSE_LOSS.name, |a, b| {
        Ok(norm.mul(&a.sub(b)).mul(delta))
    })?;
    let dt = dy.map(|d| Ok(d.neg()))?;
    Ok((dy, dt))
}
