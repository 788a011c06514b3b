//! Normalisers: softmax and log-softmax along an axis, layer norm over a suffix of axes,
//! batch norm in evaluation and in training mode.

use super::layout::check_axis;
use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::{collect_exact, Tensor};

/// Offsets of the 1-D lines along `axis`: `(start, stride, len)` for each line, row-major.
fn lines(shape: &Shape, axis: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let (outer, n, inner) = shape.split_at_axis(axis);
    (0..outer).flat_map(move |o| (0..inner).map(move |i| (o * n * inner + i, inner, n)))
}

fn max_of_line<A: Scalar>(d: &[A], start: usize, stride: usize, n: usize) -> A {
    let mut m = d[start].clone();
    for k in 1..n {
        m = m.max_of(&d[start + k * stride]);
    }
    m
}

pub(crate) fn softmax<A: Scalar>(x: &Tensor<A>, axis: usize) -> Result<Tensor<A>> {
    let mut out = x.clone();
    let d = x.data();
    for (start, stride, n) in lines(x.shape(), axis) {
        if n == 0 {
            continue;
        }
        let m = max_of_line(d, start, stride, n);
        let mut sum = A::zero();
        let mut e = Vec::with_capacity(n);
        for k in 0..n {
            let v = d[start + k * stride].sub(&m).exp()?;
            sum = sum.add(&v);
            e.push(v);
        }
        for (k, v) in e.into_iter().enumerate() {
            out.data_mut()[start + k * stride] = v.div(&sum)?;
        }
    }
    Ok(out)
}

pub(crate) fn log_softmax<A: Scalar>(x: &Tensor<A>, axis: usize) -> Result<Tensor<A>> {
    let mut out = x.clone();
    let d = x.data();
    for (start, stride, n) in lines(x.shape(), axis) {
        if n == 0 {
            continue;
        }
        let m = max_of_line(d, start, stride, n);
        let mut sum = A::zero();
        for k in 0..n {
            sum = sum.add(&d[start + k * stride].sub(&m).exp()?);
        }
        let lse = sum.log()?;
        for k in 0..n {
            let o = start + k * stride;
            out.data_mut()[o] = d[o].sub(&m).sub(&lse);
        }
    }
    Ok(out)
}

fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(SpecError::OpAttr {
            op,
            attr: "eps",
            reason: format!("is {eps}, must be finite and non-negative"),
        });
    }
    Ok(())
}

pub(crate) fn infer_layer_norm(axis: usize, eps: f64, x: &Shape) -> Result<Shape> {
    check_axis(super::desc::LAYERNORM.name, "axis", axis, x)?;
    check_eps(super::desc::LAYERNORM.name, eps)?;
    Ok(x.clone())
}

/// Per row of the `[prefix, suffix]` view: `(mean, sigma)` with the population variance
/// clamped at 0 and `sigma = sqrt(var + eps)`.
fn row_stats<A: Scalar>(row: &[A], eps: &A) -> Result<(A, A)> {
    let n = A::from_usize(row.len().max(1));
    let mut sum = A::zero();
    for v in row {
        sum = sum.add(v);
    }
    let mean = sum.div(&n)?;
    let mut sq = A::zero();
    for v in row {
        let c = v.sub(&mean);
        sq = sq.add(&c.mul(&c));
    }
    let var = sq.div(&n)?.max_of(&A::zero());
    Ok((mean, var.add(eps).sqrt()?))
}

fn suffix_len(x: &Shape, axis: usize) -> usize {
    x.dims()[axis..].iter().product()
}

pub(crate) fn layer_norm<A: Scalar>(x: &Tensor<A>, axis: usize, eps: f64) -> Result<Tensor<A>> {
    let inner = suffix_len(x.shape(), axis);
    let eps = A::from_f64(eps)?;
    let mut out = Vec::with_capacity(x.len());
    if inner > 0 {
        for row in x.data().chunks(inner) {
            let (mean, sigma) = row_stats(row, &eps)?;
            for v in row {
                out.push(v.sub(&mean).div(&sigma)?);
            }
        }
    }
    Tensor::new(x.shape().clone(), out)
}

/// `dx = (dy − mean(dy) − x̂·mean(dy·x̂)) / sigma` per row.
pub(crate) fn layer_norm_vjp<A: Scalar>(
    x: &Tensor<A>,
    dy: &Tensor<A>,
    axis: usize,
    eps: f64,
) -> Result<Tensor<A>> {
    let inner = suffix_len(x.shape(), axis);
    let eps = A::from_f64(eps)?;
    let mut dx = Vec::with_capacity(x.len());
    if inner > 0 {
        let n = A::from_usize(inner);
        for (row, drow) in x.data().chunks(inner).zip(dy.data().chunks(inner)) {
            let (mean, sigma) = row_stats(row, &eps)?;
            let xhat = collect_exact(row.len(), row.iter().map(|v| v.sub(&mean).div(&sigma)))?;
            let mut sum_d = A::zero();
            let mut sum_dx = A::zero();
            for (d, h) in drow.iter().zip(&xhat) {
                sum_d = sum_d.add(d);
                sum_dx = sum_dx.add(&d.mul(h));
            }
            let mean_d = sum_d.div(&n)?;
            let mean_dx = sum_dx.div(&n)?;
            for (d, h) in drow.iter().zip(&xhat) {
                dx.push(d.sub(&mean_d).sub(&h.mul(&mean_dx)).div(&sigma)?);
            }
        }
    }
    Tensor::new(x.shape().clone(), dx)
}

/// The payload shapes of a batch-norm node: gamma, beta, mean and var, each `[channels]`.
pub(crate) fn batch_norm_payload_shapes(channels: usize) -> Vec<Shape> {
    vec![Shape::from([channels]); 4]
}

pub(crate) fn infer_batch_norm(channels: usize, eps: f64, inputs: &[Shape]) -> Result<Shape> {
    let op = super::desc::BATCH_NORM2D_NCHW_EVAL.name;
    infer_bn(op, channels, eps, inputs, None, "gamma, beta, mean and var")
}

/// Both batch norms' shape rule: `x` `[N, C, …]` (exactly `rank` axes where given) with `C =
/// channels`, and every other operand (`params`, for the message) `[C]`.
fn infer_bn(
    op: &'static str,
    channels: usize,
    eps: f64,
    inputs: &[Shape],
    rank: Option<usize>,
    params: &str,
) -> Result<Shape> {
    check_eps(op, eps)?;
    let x = &inputs[0];
    let rank_ok = rank.map_or(x.rank() >= 2, |r| x.rank() == r);
    if !rank_ok || x.dims()[1] != channels {
        let layout = if rank == Some(4) { "H, W" } else { "…" };
        return Err(SpecError::OpShape {
            op,
            shapes: vec![x.clone()],
            reason: format!("expects [N, {channels}, {layout}] (channels on axis 1)"),
        });
    }
    if inputs[1..].iter().any(|s| s.dims() != [channels]) {
        return Err(SpecError::OpShape {
            op,
            shapes: inputs.to_vec(),
            reason: format!("{params} must be [{channels}]"),
        });
    }
    Ok(x.clone())
}

/// `(N, C, rest)` of a validated batch-norm input.
fn bn_dims(x: &Shape) -> (usize, usize, usize) {
    let d = x.dims();
    (d[0], d[1], d[2..].iter().product())
}

fn bn_sigma<A: Scalar>(var: &A, eps: &A) -> Result<A> {
    var.max_of(&A::zero()).add(eps).sqrt()
}

pub(crate) fn batch_norm<A: Scalar>(args: &[&Tensor<A>; 5], eps: f64) -> Result<Tensor<A>> {
    let (x, gamma, beta, mean, var) = (args[0], args[1], args[2], args[3], args[4]);
    let eps = A::from_f64(eps)?;
    let pairs = mean.data().iter().zip(var.data());
    let stats = collect_exact(
        mean.len(),
        pairs.map(|(m, v)| Ok((m.clone(), bn_sigma(v, &eps)?))),
    )?;
    normalise(x, &stats, gamma, beta)
}

/// `(x − mean)/sigma·gamma + beta` over `[N, C, …]`, with channel `ch`'s `(mean, sigma)` at
/// `stats[ch]`: both batch norms' forward.
fn normalise<A: Scalar>(
    x: &Tensor<A>,
    stats: &[(A, A)],
    gamma: &Tensor<A>,
    beta: &Tensor<A>,
) -> Result<Tensor<A>> {
    let (n, c, rest) = bn_dims(x.shape());
    let mut out = Vec::with_capacity(x.len());
    for b in 0..n {
        for (ch, (mean, sigma)) in stats.iter().enumerate() {
            for r in 0..rest {
                let v = &x.data()[(b * c + ch) * rest + r];
                let norm = v.sub(mean).div(sigma)?;
                out.push(norm.mul(&gamma.data()[ch]).add(&beta.data()[ch]));
            }
        }
    }
    Tensor::new(x.shape().clone(), out)
}

/// `[dx, dgamma, dbeta, dmean, dvar]`; `d max(var, 0)/d var` is 0 for `var < 0`, else 1.
pub(crate) fn batch_norm_vjp<A: Scalar>(
    x: &Tensor<A>,
    gamma: &Tensor<A>,
    mean: &Tensor<A>,
    var: &Tensor<A>,
    dy: &Tensor<A>,
    eps: f64,
) -> Result<[Tensor<A>; 5]> {
    let (n, c, rest) = bn_dims(x.shape());
    let eps = A::from_f64(eps)?;
    let cshape = Shape::from([c]);
    let mut dx = Vec::with_capacity(x.len());
    let mut dgamma = vec![A::zero(); c];
    let mut dbeta = vec![A::zero(); c];
    let mut dmean = vec![A::zero(); c];
    let mut dvar = vec![A::zero(); c];
    let half = A::one().half();
    let mut sigmas = Vec::with_capacity(c);
    let mut var_coef = Vec::with_capacity(c);
    for ch in 0..c {
        let s = bn_sigma(&var.data()[ch], &eps)?;
        // d sigma^-1 / d var = -1/2 · sigma^-3
        var_coef.push(if var.data()[ch].is_negative() {
            A::zero()
        } else {
            half.neg().div(&s.mul(&s).mul(&s))?
        });
        sigmas.push(s);
    }
    for b in 0..n {
        for ch in 0..c {
            for r in 0..rest {
                let off = (b * c + ch) * rest + r;
                let d = &dy.data()[off];
                let centered = x.data()[off].sub(&mean.data()[ch]);
                let g = &gamma.data()[ch];
                let gx = d.mul(g).div(&sigmas[ch])?;
                dgamma[ch] = dgamma[ch].add(&d.mul(&centered.div(&sigmas[ch])?));
                dbeta[ch] = dbeta[ch].add(d);
                dmean[ch] = dmean[ch].add(&gx);
                dvar[ch] = dvar[ch].add(&d.mul(g).mul(&centered).mul(&var_coef[ch]));
                dx.push(gx);
            }
        }
    }
    let dmean: Vec<A> = dmean.iter().map(|v| v.neg()).collect();
    Ok([
        Tensor::new(x.shape().clone(), dx)?,
        Tensor::new(cshape.clone(), dgamma)?,
        Tensor::new(cshape.clone(), dbeta)?,
        Tensor::new(cshape.clone(), dmean)?,
        Tensor::new(cshape, dvar)?,
    ])
}

const BN_TRAIN: &str = "batch_norm2d_nchw_train";

pub(crate) fn infer_batch_norm_train(channels: usize, eps: f64, inputs: &[Shape]) -> Result<Shape> {
    infer_bn(BN_TRAIN, channels, eps, inputs, Some(4), "gamma and beta")
}

/// Per channel of a validated `[N, C, H, W]` input: `(mean, sigma)` over `N, H, W` with the
/// biased variance (`Σ (x − mean)² / M`, `M = max(N·H·W, 1)`) and `sigma = sqrt(var + eps)`;
/// sums over the batch, then each image's positions, in index order.
fn batch_stats<A: Scalar>(x: &Tensor<A>, eps: &A) -> Result<Vec<(A, A)>> {
    let (n, c, rest) = bn_dims(x.shape());
    let count = A::from_usize((n * rest).max(1));
    let at = |b: usize, ch: usize, r: usize| &x.data()[(b * c + ch) * rest + r];
    (0..c)
        .map(|ch| {
            let mut sum = A::zero();
            for b in 0..n {
                for r in 0..rest {
                    sum = sum.add(at(b, ch, r));
                }
            }
            let mean = sum.div(&count)?;
            let mut sq = A::zero();
            for b in 0..n {
                for r in 0..rest {
                    let d = at(b, ch, r).sub(&mean);
                    sq = sq.add(&d.mul(&d));
                }
            }
            let var = sq.div(&count)?;
            Ok((mean, var.add(eps).sqrt()?))
        })
        .collect()
}

/// `(x − mean)/sigma·γ + β` with the batch's own statistics, computed in the accumulation
/// type ([`Scalar::Acc`]: `f64` for `f32`, as PyTorch's CPU kernels do) and rounded once.
pub(crate) fn batch_norm_train<A: Scalar>(
    x: &Tensor<A>,
    gamma: &Tensor<A>,
    beta: &Tensor<A>,
    eps: f64,
) -> Result<Tensor<A>> {
    let y = batch_norm_train_in(&x.to_acc(), &gamma.to_acc(), &beta.to_acc(), eps)?;
    Ok(Tensor::from_acc(&y))
}

fn batch_norm_train_in<A: Scalar>(
    x: &Tensor<A>,
    gamma: &Tensor<A>,
    beta: &Tensor<A>,
    eps: f64,
) -> Result<Tensor<A>> {
    let stats = batch_stats(x, &A::from_f64(eps)?)?;
    normalise(x, &stats, gamma, beta)
}

/// `[dx, dγ, dβ]`: with `x̂ = (x − mean)/sigma`, `dβ = Σ dy`, `dγ = Σ dy·x̂` and
/// `dx = γ·((dy − dβ/M) − x̂·dγ/M)/sigma` (the gradient through the batch mean and variance),
/// in the accumulation type like the forward.
pub(crate) fn batch_norm_train_vjp<A: Scalar>(
    x: &Tensor<A>,
    gamma: &Tensor<A>,
    dy: &Tensor<A>,
    eps: f64,
) -> Result<[Tensor<A>; 3]> {
    let g = batch_norm_train_vjp_in(&x.to_acc(), &gamma.to_acc(), &dy.to_acc(), eps)?;
    Ok(g.map(|t| Tensor::from_acc(&t)))
}

fn batch_norm_train_vjp_in<A: Scalar>(
    x: &Tensor<A>,
    gamma: &Tensor<A>,
    dy: &Tensor<A>,
    eps: f64,
) -> Result<[Tensor<A>; 3]> {
    let (n, c, rest) = bn_dims(x.shape());
    let stats = batch_stats(x, &A::from_f64(eps)?)?;
    let count = A::from_usize((n * rest).max(1));
    let xhat = |off: usize, ch: usize| -> Result<A> {
        let (mean, sigma) = &stats[ch];
        x.data()[off].sub(mean).div(sigma)
    };
    let mut dgamma = vec![A::zero(); c];
    let mut dbeta = vec![A::zero(); c];
    for ch in 0..c {
        for b in 0..n {
            for r in 0..rest {
                let off = (b * c + ch) * rest + r;
                let d = &dy.data()[off];
                dbeta[ch] = dbeta[ch].add(d);
                dgamma[ch] = dgamma[ch].add(&d.mul(&xhat(off, ch)?));
            }
        }
    }
    let mut dx = Vec::with_capacity(x.len());
    for b in 0..n {
        for ch in 0..c {
            let mean_d = dbeta[ch].div(&count)?;
            let mean_dh = dgamma[ch].div(&count)?;
            for r in 0..rest {
                let off = (b * c + ch) * rest + r;
                let centred = dy.data()[off]
                    .sub(&mean_d)
                    .sub(&xhat(off, ch)?.mul(&mean_dh));
                dx.push(gamma.data()[ch].mul(&centred).div(&stats[ch].1)?);
            }
        }
    }
    let cshape = Shape::from([c]);
    Ok([
        Tensor::new(x.shape().clone(), dx)?,
        Tensor::new(cshape.clone(), dgamma)?,
        Tensor::new(cshape, dbeta)?,
    ])
}
