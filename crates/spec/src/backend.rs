//! The backend interface: one method per op family, implemented once per engine.
//!
//! [`Op::forward`](crate::Op::forward) and [`Op::vjp`](crate::Op::vjp) are the one dispatch: they
//! validate arity, attributes and shapes with the op's own shape rule, pick exactly the saved
//! values the op declares, and then call one of these methods with operands whose shapes are
//! known good (`out` is the output shape the rule computed). An engine therefore writes kernels
//! only — no `match op`, no shape checks, no saved-operand wiring.
//!
//! The reference engine is `Tensor<A>` below: each method is the naive function of `spec::ops`.

use crate::error::SpecError;
use crate::ops::{elementwise, layout, linalg, norm, random, reduce};
use crate::ops::{BinaryOp, Conv2dSpec, PoolSpec, UnaryOp};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// An engine's kernels, by family. Every method receives validated operands (the dispatch in
/// [`crate::Op::forward`] / [`crate::Op::vjp`] checked them); an error here is an engine failure
/// (out of memory, a device error), not bad input.
pub trait Backend: Clone + Sized {
    /// The engine's error; shape-rule errors arrive through `From<SpecError>`.
    type Error: From<SpecError>;

    /// The value's shape.
    fn shape_of(&self) -> &Shape;
    /// The elements in row-major order as `f64` — exactly, or NaN where an exact scalar's value
    /// is not an `f64` — so that the dispatch validates a data operand's values (`cross_entropy`'s
    /// class ids) once for every engine. Called on small operands only.
    fn values_f64(x: &Self) -> Result<Vec<f64>, Self::Error>;

    /// Elementwise unary function.
    fn unary(op: UnaryOp, x: &Self) -> Result<Self, Self::Error>;
    /// `dx` from the saved input and/or output (as the op's descriptor declares) and `dy`.
    fn unary_vjp(
        op: UnaryOp,
        x: Option<&Self>,
        y: Option<&Self>,
        dy: &Self,
    ) -> Result<Self, Self::Error>;
    /// Elementwise binary function of identically shaped operands.
    fn binary(op: BinaryOp, a: &Self, b: &Self) -> Result<Self, Self::Error>;
    /// `(da, db)`; the operands are present where the op saves them.
    fn binary_vjp(
        op: BinaryOp,
        a: Option<&Self>,
        b: Option<&Self>,
        dy: &Self,
    ) -> Result<(Self, Self), Self::Error>;
    /// `c · x`.
    fn scale(x: &Self, c: f64) -> Result<Self, Self::Error>;
    /// `x + c`.
    fn add_scalar(x: &Self, c: f64) -> Result<Self, Self::Error>;
    /// `torch.clamp(x, min, max)`: an absent bound does not clamp; NaN stays NaN (the bounds
    /// are validated: not NaN, `min ≤ max`).
    fn clamp(x: &Self, min: Option<f64>, max: Option<f64>) -> Result<Self, Self::Error>;
    /// `dy` where `min ≤ x ≤ max` (bounds included), 0 elsewhere and at NaN.
    fn clamp_vjp(
        x: &Self,
        dy: &Self,
        min: Option<f64>,
        max: Option<f64>,
    ) -> Result<Self, Self::Error>;
    /// The same elements under another shape of the same size (reshape, and the identity when
    /// `shape` is the operand's own); engines may share storage.
    fn relabel(x: &Self, shape: &Shape) -> Result<Self, Self::Error>;

    /// Softmax (`log = false`) or log-softmax along `axis`.
    fn softmax(x: &Self, axis: usize, log: bool) -> Result<Self, Self::Error>;
    /// From the saved output `y`.
    fn softmax_vjp(y: &Self, dy: &Self, axis: usize, log: bool) -> Result<Self, Self::Error>;
    fn layer_norm(x: &Self, axis: usize, eps: f64) -> Result<Self, Self::Error>;
    fn layer_norm_vjp(x: &Self, dy: &Self, axis: usize, eps: f64) -> Result<Self, Self::Error>;
    /// `[x, gamma, beta, mean, var]`.
    fn batch_norm(args: [&Self; 5], eps: f64) -> Result<Self, Self::Error>;
    /// `[dx, dgamma, dbeta, dmean, dvar]`.
    fn batch_norm_vjp(
        x: &Self,
        gamma: &Self,
        mean: &Self,
        var: &Self,
        dy: &Self,
        eps: f64,
    ) -> Result<[Self; 5], Self::Error>;
    /// Batch norm in training mode: `x` `[N, C, H, W]`, `gamma`, `beta` `[C]`; statistics over
    /// `N, H, W`.
    fn batch_norm_train(x: &Self, gamma: &Self, beta: &Self, eps: f64)
        -> Result<Self, Self::Error>;
    /// `[dx, dgamma, dbeta]`, through the batch statistics.
    fn batch_norm_train_vjp(
        x: &Self,
        gamma: &Self,
        dy: &Self,
        eps: f64,
    ) -> Result<[Self; 3], Self::Error>;

    /// Right-aligned broadcast to `out`.
    fn broadcast(x: &Self, out: &Shape) -> Result<Self, Self::Error>;
    /// Sums `dy` back to `from`.
    fn broadcast_vjp(dy: &Self, from: &Shape) -> Result<Self, Self::Error>;
    /// Output axis `i` is input axis `perm[i]`.
    fn permute(x: &Self, perm: &[usize], out: &Shape) -> Result<Self, Self::Error>;
    /// Indices `start..start + out[axis]` of `axis` (`x.narrow`).
    fn slice(x: &Self, axis: usize, start: usize, out: &Shape) -> Result<Self, Self::Error>;
    /// The VJP of [`Backend::slice`]: `dy` scattered into zeros of `in_shape`.
    fn slice_vjp(
        dy: &Self,
        in_shape: &Shape,
        axis: usize,
        start: usize,
    ) -> Result<Self, Self::Error>;
    fn concat(args: &[&Self], axis: usize, out: &Shape) -> Result<Self, Self::Error>;
    /// One piece per operand, of the given shapes.
    fn concat_vjp(dy: &Self, shapes: &[Shape], axis: usize) -> Result<Vec<Self>, Self::Error>;

    /// Sum (`mean = false`) or mean over `axis`, which is removed.
    fn reduce_axis(x: &Self, axis: usize, mean: bool, out: &Shape) -> Result<Self, Self::Error>;
    /// The VJP of [`Backend::reduce_axis`]: `dy` spread along `axis` of `in_shape`.
    fn spread(dy: &Self, in_shape: &Shape, axis: usize, mean: bool) -> Result<Self, Self::Error>;
    /// Sum of all elements, to a scalar.
    fn sum_all(x: &Self) -> Result<Self, Self::Error>;
    /// The VJP of [`Backend::sum_all`]: the scalar `dy` everywhere in `in_shape`.
    fn sum_all_vjp(dy: &Self, in_shape: &Shape) -> Result<Self, Self::Error>;
    fn mse_loss(y: &Self, t: &Self) -> Result<Self, Self::Error>;
    fn mse_loss_vjp(y: &Self, t: &Self, dy: &Self) -> Result<(Self, Self), Self::Error>;
    /// Cross entropy of logits `[N, C]` with validated class ids (one per row, each `< C`),
    /// summed over the rows or (`mean`) divided by `max(N, 1)`; a scalar.
    fn cross_entropy(logits: &Self, target: &[usize], mean: bool) -> Result<Self, Self::Error>;
    /// `d/dlogits` from the saved logits, the class ids and the scalar `dy`.
    fn cross_entropy_vjp(
        logits: &Self,
        target: &[usize],
        dy: &Self,
        mean: bool,
    ) -> Result<Self, Self::Error>;

    fn matmul(a: &Self, b: &Self, out: &Shape) -> Result<Self, Self::Error>;
    fn matmul_vjp(a: &Self, b: &Self, dy: &Self) -> Result<(Self, Self), Self::Error>;
    fn linear(x: &Self, w: &Self, b: &Self, out: &Shape) -> Result<Self, Self::Error>;
    /// `(dx, dW, db)`.
    fn linear_vjp(x: &Self, w: &Self, dy: &Self) -> Result<(Self, Self, Self), Self::Error>;
    /// [`Backend::linear_vjp`] where `dx` is only needed if `need_dx`: an engine may then skip
    /// it (`None`); `dW` and `db` are [`Backend::linear_vjp`]'s. The default computes all three.
    #[allow(clippy::type_complexity)]
    fn linear_vjp_for(
        x: &Self,
        w: &Self,
        dy: &Self,
        need_dx: bool,
    ) -> Result<(Option<Self>, Self, Self), Self::Error> {
        let _ = need_dx;
        let (dx, dw, db) = Self::linear_vjp(x, w, dy)?;
        Ok((Some(dx), dw, db))
    }
    fn conv2d(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        b: &Self,
        out: &Shape,
    ) -> Result<Self, Self::Error>;
    /// `(dx, dW, db)`.
    fn conv2d_vjp(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        dy: &Self,
    ) -> Result<(Self, Self, Self), Self::Error>;
    /// [`Backend::conv2d_vjp`] where `dx` is only needed if `need_dx` (as
    /// [`Backend::linear_vjp_for`]). The default computes all three.
    #[allow(clippy::type_complexity)]
    fn conv2d_vjp_for(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        dy: &Self,
        need_dx: bool,
    ) -> Result<(Option<Self>, Self, Self), Self::Error> {
        let _ = need_dx;
        let (dx, dw, db) = Self::conv2d_vjp(spec, x, w, dy)?;
        Ok((Some(dx), dw, db))
    }
    fn pool(spec: &PoolSpec, x: &Self, out: &Shape) -> Result<Self, Self::Error>;
    /// Max pooling's VJP, from the saved input.
    fn max_pool_vjp(spec: &PoolSpec, x: &Self, dy: &Self) -> Result<Self, Self::Error>;
    /// Average pooling's VJP, from the input shape alone.
    fn avg_pool_vjp(spec: &PoolSpec, in_shape: &Shape, dy: &Self) -> Result<Self, Self::Error>;

    fn rand_uniform(seed: u64, key: u64, out: &Shape) -> Result<Self, Self::Error>;
    /// `keep_prob` is a scalar.
    fn bernoulli_mask(
        seed: u64,
        key: u64,
        keep_prob: &Self,
        out: &Shape,
    ) -> Result<Self, Self::Error>;
}

type R<A> = Result<Tensor<A>, SpecError>;

/// The reference engine: every family method is the naive function of `spec::ops`.
impl<A: Scalar> Backend for Tensor<A> {
    type Error = SpecError;

    fn shape_of(&self) -> &Shape {
        self.shape()
    }
    fn values_f64(x: &Self) -> Result<Vec<f64>, SpecError> {
        Ok(x.data()
            .iter()
            .map(|v| {
                let f = v.to_f64();
                // an exact scalar whose value is not this float (1/3, or 2 + 2^-80) reads NaN
                let exact = !A::EXACT || A::from_f64(f).is_ok_and(|back| back.bit_eq(v));
                if exact {
                    f
                } else {
                    f64::NAN
                }
            })
            .collect())
    }
    fn unary(op: UnaryOp, x: &Self) -> R<A> {
        x.map(|v| op.apply(v))
    }
    fn unary_vjp(op: UnaryOp, x: Option<&Self>, y: Option<&Self>, dy: &Self) -> R<A> {
        op.vjp(x, y, dy)
    }
    fn binary(op: BinaryOp, a: &Self, b: &Self) -> R<A> {
        a.zip_with(b, op.desc().name, |x, y| op.apply(x, y))
    }
    fn binary_vjp(
        op: BinaryOp,
        a: Option<&Self>,
        b: Option<&Self>,
        dy: &Self,
    ) -> Result<(Self, Self), SpecError> {
        op.vjp(a, b, dy)
    }
    fn scale(x: &Self, c: f64) -> R<A> {
        let c = A::from_f64(c)?;
        x.map(|v| Ok(c.mul(v)))
    }
    fn add_scalar(x: &Self, c: f64) -> R<A> {
        let c = A::from_f64(c)?;
        x.map(|v| Ok(v.add(&c)))
    }
    fn clamp(x: &Self, min: Option<f64>, max: Option<f64>) -> R<A> {
        elementwise::clamp(x, min, max)
    }
    fn clamp_vjp(x: &Self, dy: &Self, min: Option<f64>, max: Option<f64>) -> R<A> {
        elementwise::clamp_vjp(x, dy, min, max)
    }
    fn relabel(x: &Self, shape: &Shape) -> R<A> {
        x.clone().reshaped(shape.clone())
    }
    fn softmax(x: &Self, axis: usize, log: bool) -> R<A> {
        if log {
            norm::log_softmax(x, axis)
        } else {
            norm::softmax(x, axis)
        }
    }
    fn softmax_vjp(y: &Self, dy: &Self, axis: usize, log: bool) -> R<A> {
        if log {
            norm::log_softmax_vjp(y, dy, axis)
        } else {
            norm::softmax_vjp(y, dy, axis)
        }
    }
    fn layer_norm(x: &Self, axis: usize, eps: f64) -> R<A> {
        norm::layer_norm(x, axis, eps)
    }
    fn layer_norm_vjp(x: &Self, dy: &Self, axis: usize, eps: f64) -> R<A> {
        norm::layer_norm_vjp(x, dy, axis, eps)
    }
    fn batch_norm(args: [&Self; 5], eps: f64) -> R<A> {
        norm::batch_norm(&args, eps)
    }
    fn batch_norm_vjp(
        x: &Self,
        gamma: &Self,
        mean: &Self,
        var: &Self,
        dy: &Self,
        eps: f64,
    ) -> Result<[Self; 5], SpecError> {
        norm::batch_norm_vjp(x, gamma, mean, var, dy, eps)
    }
    fn batch_norm_train(x: &Self, gamma: &Self, beta: &Self, eps: f64) -> R<A> {
        norm::batch_norm_train(x, gamma, beta, eps)
    }
    fn batch_norm_train_vjp(
        x: &Self,
        gamma: &Self,
        dy: &Self,
        eps: f64,
    ) -> Result<[Self; 3], SpecError> {
        norm::batch_norm_train_vjp(x, gamma, dy, eps)
    }
    fn broadcast(x: &Self, out: &Shape) -> R<A> {
        layout::broadcast(x, out)
    }
    fn broadcast_vjp(dy: &Self, from: &Shape) -> R<A> {
        layout::broadcast_vjp(dy, from)
    }
    fn permute(x: &Self, perm: &[usize], _out: &Shape) -> R<A> {
        layout::permute(x, perm)
    }
    fn slice(x: &Self, axis: usize, start: usize, out: &Shape) -> R<A> {
        layout::slice(x, axis, start, out)
    }
    fn slice_vjp(dy: &Self, in_shape: &Shape, axis: usize, start: usize) -> R<A> {
        layout::slice_vjp(dy, in_shape, axis, start)
    }
    fn concat(args: &[&Self], axis: usize, out: &Shape) -> R<A> {
        layout::concat(args, axis, out)
    }
    fn concat_vjp(dy: &Self, shapes: &[Shape], axis: usize) -> Result<Vec<Self>, SpecError> {
        layout::concat_vjp(dy, shapes, axis)
    }
    fn reduce_axis(x: &Self, axis: usize, mean: bool, _out: &Shape) -> R<A> {
        if mean {
            reduce::reduce_mean(x, axis)
        } else {
            reduce::reduce_sum(x, axis)
        }
    }
    fn spread(dy: &Self, in_shape: &Shape, axis: usize, mean: bool) -> R<A> {
        if mean {
            reduce::reduce_mean_vjp(dy, in_shape, axis)
        } else {
            reduce::reduce_sum_vjp(dy, in_shape, axis)
        }
    }
    fn sum_all(x: &Self) -> R<A> {
        reduce::sum_all(x)
    }
    fn sum_all_vjp(dy: &Self, in_shape: &Shape) -> R<A> {
        reduce::sum_all_vjp(dy, in_shape)
    }
    fn mse_loss(y: &Self, t: &Self) -> R<A> {
        reduce::mse_loss(y, t)
    }
    fn mse_loss_vjp(y: &Self, t: &Self, dy: &Self) -> Result<(Self, Self), SpecError> {
        reduce::mse_loss_vjp(y, t, dy)
    }
    fn cross_entropy(logits: &Self, target: &[usize], mean: bool) -> R<A> {
        reduce::cross_entropy(logits, target, mean)
    }
    fn cross_entropy_vjp(logits: &Self, target: &[usize], dy: &Self, mean: bool) -> R<A> {
        reduce::cross_entropy_vjp(logits, target, dy, mean)
    }
    fn matmul(a: &Self, b: &Self, out: &Shape) -> R<A> {
        linalg::matmul(a, b, out)
    }
    fn matmul_vjp(a: &Self, b: &Self, dy: &Self) -> Result<(Self, Self), SpecError> {
        linalg::matmul_vjp(a, b, dy)
    }
    fn linear(x: &Self, w: &Self, b: &Self, out: &Shape) -> R<A> {
        linalg::linear(x, w, b, out)
    }
    fn linear_vjp(x: &Self, w: &Self, dy: &Self) -> Result<(Self, Self, Self), SpecError> {
        linalg::linear_vjp(x, w, dy)
    }
    fn conv2d(spec: &Conv2dSpec, x: &Self, w: &Self, b: &Self, out: &Shape) -> R<A> {
        spec.forward(x, w, b, out)
    }
    fn conv2d_vjp(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        dy: &Self,
    ) -> Result<(Self, Self, Self), SpecError> {
        spec.vjp(x, w, dy)
    }
    fn pool(spec: &PoolSpec, x: &Self, out: &Shape) -> R<A> {
        spec.forward(x, out)
    }
    fn max_pool_vjp(spec: &PoolSpec, x: &Self, dy: &Self) -> R<A> {
        spec.max_vjp(x, dy)
    }
    fn avg_pool_vjp(spec: &PoolSpec, in_shape: &Shape, dy: &Self) -> R<A> {
        spec.avg_vjp(in_shape, dy)
    }
    fn rand_uniform(seed: u64, key: u64, out: &Shape) -> R<A> {
        random::rand_uniform(seed, key, out)
    }
    fn bernoulli_mask(seed: u64, key: u64, keep_prob: &Self, out: &Shape) -> R<A> {
        random::bernoulli_mask(seed, key, out, keep_prob.item()?)
    }
}
