//! The backend interface: kernels by op family (one trait per family, with default
//! compositions where one exists), implemented once per engine; and [`Engine`], the op-level
//! interface graphs run on.
//!
//! [`Op::forward`](crate::Op::forward) and [`Op::vjp`](crate::Op::vjp) are the one dispatch: they
//! validate arity, attributes and shapes with the op's own shape rule, pick exactly the saved
//! values the op declares, and then call one of these methods with operands whose shapes are
//! known good (`out` is the output shape the rule computed). An engine therefore writes kernels
//! only — no `match op`, no shape checks, no saved-operand wiring.
//!
//! The reference engine is `Tensor<A>` below: each method is the naive function of `spec::ops`.

use crate::error::SpecError;
use crate::ops::{attention, elementwise, layout, linalg, norm, random, reduce};
use crate::ops::{BinaryOp, Conv2dSpec, Cotangents, Op, PoolSpec, Saved, UnaryOp};
use std::borrow::Borrow;

pub mod compose;
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// What every value an engine computes with is: a shape, its elements as `f64` for the
/// dispatch's validation, and the engine's error.
pub trait EngineValue: Clone + Sized {
    /// The engine's error; shape-rule errors arrive through `From<SpecError>`.
    type Error: From<SpecError>;

    /// The value's shape.
    fn shape_of(&self) -> &Shape;
    /// The elements in row-major order as `f64` — exactly, or NaN where an exact scalar's value
    /// is not an `f64` — so that the dispatch validates a data operand's values (`cross_entropy`'s
    /// class ids) once for every engine. Called on small operands only.
    fn values_f64(x: &Self) -> KernelResult<Self, Vec<f64>>;
}

/// A kernel's result on engine `B`: `T` (by default the engine's value) or its error.
pub type KernelResult<B, T = B> = Result<T, <B as EngineValue>::Error>;

/// The elementwise family. A new elementwise function is a [`UnaryOp`] or [`BinaryOp`] row,
/// not a method.
pub trait Elementwise: EngineValue {
    /// Elementwise unary function.
    fn unary(op: UnaryOp, x: &Self) -> KernelResult<Self>;
    /// `dx` from the saved input and/or output (as the op's descriptor declares) and `dy`.
    fn unary_vjp(op: UnaryOp, x: Option<&Self>, y: Option<&Self>, dy: &Self) -> KernelResult<Self>;
    /// Elementwise binary function of identically shaped operands.
    fn binary(op: BinaryOp, a: &Self, b: &Self) -> KernelResult<Self>;
    /// `(da, db)`; the operands are present where the op saves them.
    fn binary_vjp(
        op: BinaryOp,
        a: Option<&Self>,
        b: Option<&Self>,
        dy: &Self,
    ) -> KernelResult<Self, (Self, Self)>;
    /// `c · x`.
    fn scale(x: &Self, c: f64) -> KernelResult<Self>;
    /// `x + c`.
    fn add_scalar(x: &Self, c: f64) -> KernelResult<Self>;
    /// `torch.clamp(x, min, max)`: an absent bound does not clamp; NaN stays NaN (the bounds
    /// are validated: not NaN, `min ≤ max`).
    fn clamp(x: &Self, min: Option<f64>, max: Option<f64>) -> KernelResult<Self>;
    /// `dy` where `min ≤ x ≤ max` (bounds included), 0 elsewhere and at NaN.
    fn clamp_vjp(x: &Self, dy: &Self, min: Option<f64>, max: Option<f64>) -> KernelResult<Self>;
}

/// The layout family: moves elements, computes nothing.
pub trait Layout: EngineValue {
    /// The same elements under another shape of the same size (reshape, and the identity when
    /// `shape` is the operand's own); engines may share storage.
    fn relabel(x: &Self, shape: &Shape) -> KernelResult<Self>;
    /// Right-aligned broadcast to `out`.
    fn broadcast(x: &Self, out: &Shape) -> KernelResult<Self>;
    /// Sums `dy` back to `from`.
    fn broadcast_vjp(dy: &Self, from: &Shape) -> KernelResult<Self>;
    /// Output axis `i` is input axis `perm[i]`.
    fn permute(x: &Self, perm: &[usize], out: &Shape) -> KernelResult<Self>;
    /// Indices `start..start + out[axis]` of `axis` (`x.narrow`).
    fn slice(x: &Self, axis: usize, start: usize, out: &Shape) -> KernelResult<Self>;
    /// The VJP of [`Layout::slice`]: `dy` scattered into zeros of `in_shape`.
    fn slice_vjp(dy: &Self, in_shape: &Shape, axis: usize, start: usize) -> KernelResult<Self>;
    fn concat(args: &[&Self], axis: usize, out: &Shape) -> KernelResult<Self>;
    /// One piece per operand, of the given shapes.
    fn concat_vjp(dy: &Self, shapes: &[Shape], axis: usize) -> KernelResult<Self, Vec<Self>>;
    /// Row `ids[p]` of `table` `[V, D]` for each position `p`, as `out` (`ids' shape + [D]`);
    /// the ids are validated (each `< V`).
    fn gather_rows(table: &Self, ids: &[usize], out: &Shape) -> KernelResult<Self>;
    /// The VJP of [`Layout::gather_rows`]: row `p` of `dy` added into row `ids[p]` of zeros of
    /// `table`'s shape, positions in order — the same bits whatever the thread count.
    fn gather_rows_vjp(dy: &Self, ids: &[usize], table: &Shape) -> KernelResult<Self>;
    /// A value of shape `out` holding `values` (row-major, `out.size()` of them) rounded to the
    /// engine's precision: the constants of a default composition (`causal_attention`'s
    /// mask). An engine that cannot hold a value (−∞ on the exact scalar) says so.
    fn constant(values: &[f64], out: &Shape) -> KernelResult<Self>;
}

/// The reduction family, losses included. `reduce_axis` and `spread` are the primitives (a
/// mean divides once, there); the rest have default compositions ([`compose`]).
pub trait Reduce: Elementwise + Layout {
    /// Sum (`mean = false`) or mean over `axis`, which is removed.
    fn reduce_axis(x: &Self, axis: usize, mean: bool, out: &Shape) -> KernelResult<Self>;
    /// The VJP of [`Reduce::reduce_axis`]: `dy` spread along `axis` of `in_shape`.
    fn spread(dy: &Self, in_shape: &Shape, axis: usize, mean: bool) -> KernelResult<Self>;
    /// Sum of all elements, to a scalar.
    fn sum_all(x: &Self) -> KernelResult<Self> {
        compose::sum_all(x)
    }
    /// The VJP of [`Reduce::sum_all`]: the scalar `dy` everywhere in `in_shape`.
    fn sum_all_vjp(dy: &Self, in_shape: &Shape) -> KernelResult<Self> {
        Self::broadcast(dy, in_shape)
    }
    /// The mean of `(y − t)²` (NaN over zero elements).
    fn mse_loss(y: &Self, t: &Self) -> KernelResult<Self> {
        compose::mse_loss(y, t)
    }
    /// `(dy·2(y − t)/n, −dy·2(y − t)/n)`.
    fn mse_loss_vjp(y: &Self, t: &Self, dy: &Self) -> KernelResult<Self, (Self, Self)> {
        compose::mse_loss_vjp(y, t, dy)
    }
    /// Cross entropy of logits `[N, C]` with validated class ids (one per row, each `< C`),
    /// summed over the rows or (`mean`) divided by `N` (NaN for no rows); a scalar.
    fn cross_entropy(logits: &Self, target: &[usize], mean: bool) -> KernelResult<Self>;
    /// `d/dlogits` from the saved logits, the class ids and the scalar `dy`.
    fn cross_entropy_vjp(
        logits: &Self,
        target: &[usize],
        dy: &Self,
        mean: bool,
    ) -> KernelResult<Self>;
}

/// The normalisation family.
pub trait Norm: Reduce {
    /// Softmax (`log = false`) or log-softmax along `axis`.
    fn softmax(x: &Self, axis: usize, log: bool) -> KernelResult<Self>;
    /// From the saved output `y`.
    fn softmax_vjp(y: &Self, dy: &Self, axis: usize, log: bool) -> KernelResult<Self> {
        compose::softmax_vjp(y, dy, axis, log)
    }
    /// Normalises over the axes `axis..` (population variance, clamped at 0, plus `eps`).
    fn layer_norm(x: &Self, axis: usize, eps: f64) -> KernelResult<Self> {
        compose::layer_norm(x, axis, eps)
    }
    fn layer_norm_vjp(x: &Self, dy: &Self, axis: usize, eps: f64) -> KernelResult<Self> {
        compose::layer_norm_vjp(x, dy, axis, eps)
    }
    /// `[x, gamma, beta, mean, var]`.
    fn batch_norm(args: [&Self; 5], eps: f64) -> KernelResult<Self> {
        compose::batch_norm(args, eps)
    }
    /// `[dx, dgamma, dbeta, dmean, dvar]` from the saved `[x, gamma, mean, var]`.
    fn batch_norm_vjp(saved: [&Self; 4], dy: &Self, eps: f64) -> KernelResult<Self, [Self; 5]>;
    /// Batch norm in training mode: `x` `[N, C, H, W]`, `gamma`, `beta` `[C]`; statistics over
    /// `N, H, W`.
    fn batch_norm_train(x: &Self, gamma: &Self, beta: &Self, eps: f64) -> KernelResult<Self>;
    /// `[dx, dgamma, dbeta]`, through the batch statistics.
    fn batch_norm_train_vjp(
        saved: [&Self; 2],
        dy: &Self,
        eps: f64,
    ) -> KernelResult<Self, [Self; 3]>;
}

/// The products family (attention included, whose default composes softmax).
pub trait Linalg: Norm {
    /// `[m,n]·[n,p]` or batched `[b,m,n]·[b,n,p]`.
    fn matmul(a: &Self, b: &Self, out: &Shape) -> KernelResult<Self>;
    fn matmul_vjp(a: &Self, b: &Self, dy: &Self) -> KernelResult<Self, (Self, Self)>;
    /// `x·Wᵀ + b` over the last axis of `x`.
    fn linear(x: &Self, w: &Self, b: &Self, out: &Shape) -> KernelResult<Self> {
        compose::linear(x, w, b, out)
    }
    /// `(dx, dW, db)`.
    fn linear_vjp(x: &Self, w: &Self, dy: &Self) -> KernelResult<Self, (Self, Self, Self)> {
        compose::linear_vjp(x, w, dy)
    }
    /// [`Linalg::linear_vjp`] where `dx` is only needed if `need_dx`: an engine may then skip
    /// it (`None`); `dW` and `db` are [`Linalg::linear_vjp`]'s. The default computes all three.
    fn linear_vjp_for(
        x: &Self,
        w: &Self,
        dy: &Self,
        need_dx: bool,
    ) -> KernelResult<Self, Grads3<Self>> {
        let _ = need_dx;
        let (dx, dw, db) = Self::linear_vjp(x, w, dy)?;
        Ok((Some(dx), dw, db))
    }
    /// Causal self-attention of `heads` heads on packed projections `qkv` `[.., T, 3C]`
    /// (`crate::ops::AttentionDims`).
    fn causal_attention(qkv: &Self, heads: usize, out: &Shape) -> KernelResult<Self> {
        compose::causal_attention(qkv, heads, out)
    }
    /// The gradient with respect to `qkv` from `qkv` and `dy` (the weights recomputed).
    fn causal_attention_vjp(qkv: &Self, heads: usize, dy: &Self) -> KernelResult<Self> {
        compose::causal_attention_vjp(qkv, heads, dy)
    }
}

/// `(dx if asked for, dW, db)`.
pub type Grads3<B> = (Option<B>, B, B);

/// Convolution and pooling.
pub trait ConvPool: Elementwise {
    fn conv2d(spec: &Conv2dSpec, x: &Self, w: &Self, b: &Self, out: &Shape) -> KernelResult<Self>;
    /// `relu(conv2d(x, w, b))` (`conv2d_relu`). The default composes the two kernels; an engine
    /// overrides it to apply the ReLU where the convolution stores its output.
    fn conv2d_relu(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        b: &Self,
        out: &Shape,
    ) -> KernelResult<Self> {
        compose::conv2d_relu(spec, x, w, b, out)
    }
    /// `conv2d_relu`'s `(dx if need_dx, dW, db)` from the saved operands and output `y`: the
    /// cotangent masked by `y` (ReLU's VJP), then [`ConvPool::conv2d_vjp_for`]. The default
    /// composes the two; an engine overrides it to mask the cotangent where it reads it.
    fn conv2d_relu_vjp_for(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        y: &Self,
        dy: &Self,
        need_dx: bool,
    ) -> KernelResult<Self, Grads3<Self>> {
        compose::conv2d_relu_vjp_for(spec, x, w, y, dy, need_dx)
    }
    /// `(dx, dW, db)`.
    fn conv2d_vjp(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        dy: &Self,
    ) -> KernelResult<Self, (Self, Self, Self)>;
    /// [`ConvPool::conv2d_vjp`] where `dx` is only needed if `need_dx` (as
    /// [`Linalg::linear_vjp_for`]). The default computes all three.
    fn conv2d_vjp_for(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        dy: &Self,
        need_dx: bool,
    ) -> KernelResult<Self, Grads3<Self>> {
        let _ = need_dx;
        let (dx, dw, db) = Self::conv2d_vjp(spec, x, w, dy)?;
        Ok((Some(dx), dw, db))
    }
    fn pool(spec: &PoolSpec, x: &Self, out: &Shape) -> KernelResult<Self>;
    /// Max pooling's VJP, from the saved input.
    fn max_pool_vjp(spec: &PoolSpec, x: &Self, dy: &Self) -> KernelResult<Self>;
    /// Average pooling's VJP, from the input shape alone.
    fn avg_pool_vjp(spec: &PoolSpec, in_shape: &Shape, dy: &Self) -> KernelResult<Self>;
}

/// Counter-based random tensors.
pub trait Random: EngineValue {
    fn rand_uniform(seed: u64, key: u64, out: &Shape) -> KernelResult<Self>;
    /// `keep_prob` is a scalar.
    fn bernoulli_mask(seed: u64, key: u64, keep_prob: &Self, out: &Shape) -> KernelResult<Self>;
}

/// An engine's kernels: every family. Every method receives validated operands (the dispatch in
/// [`crate::Op::forward`] / [`crate::Op::vjp`] checked them); an error here is an engine
/// failure (out of memory, a device error), not bad input. Implemented for every type that
/// implements the families.
pub trait Backend: Elementwise + Layout + Reduce + Norm + Linalg + ConvPool + Random {}

impl<B: Elementwise + Layout + Reduce + Norm + Linalg + ConvPool + Random> Backend for B {}

/// What runs graphs: an op forward, and its VJP from what it saved. Every [`Backend`] is an
/// engine through the one dispatch ([`crate::Op::forward`], [`crate::Op::vjp_for`]); a
/// decorator that wraps another engine (the fault injectors, a test double) implements these
/// two methods on the wrapped engine's instead of forwarding every family method.
pub trait Engine: EngineValue {
    /// `op` applied to `args` (weights included, in the op's operand order).
    fn forward_op(op: &Op, args: &[&Self]) -> KernelResult<Self>;
    /// One cotangent per operand (`None` = structurally zero) where `needs(i)`; the others may
    /// be `None`.
    fn vjp_op(
        op: &Op,
        saved: &Saved<impl Borrow<Self>>,
        cot: &Self,
        needs: &dyn Fn(usize) -> bool,
    ) -> KernelResult<Self, Cotangents<Self>>;
}

impl<B: Backend> Engine for B {
    #[inline]
    fn forward_op(op: &Op, args: &[&Self]) -> KernelResult<Self> {
        op.forward(args)
    }
    #[inline]
    fn vjp_op(
        op: &Op,
        saved: &Saved<impl Borrow<Self>>,
        cot: &Self,
        needs: &dyn Fn(usize) -> bool,
    ) -> KernelResult<Self, Cotangents<Self>> {
        op.vjp_for(saved, cot, needs)
    }
}

type R<A> = Result<Tensor<A>, SpecError>;
type R2<A> = Result<(Tensor<A>, Tensor<A>), SpecError>;

/// The reference engine: every family method is the naive function of `spec::ops`, or the
/// family's default composition where that is the same computation (`softmax_vjp`).
impl<A: Scalar> EngineValue for Tensor<A> {
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
}

impl<A: Scalar> Elementwise for Tensor<A> {
    fn unary(op: UnaryOp, x: &Self) -> R<A> {
        x.map(|v| op.apply(v))
    }
    fn unary_vjp(op: UnaryOp, x: Option<&Self>, y: Option<&Self>, dy: &Self) -> R<A> {
        op.vjp(x, y, dy)
    }
    fn binary(op: BinaryOp, a: &Self, b: &Self) -> R<A> {
        a.zip_with(b, op.desc().name, |x, y| op.apply(x, y))
    }
    fn binary_vjp(op: BinaryOp, a: Option<&Self>, b: Option<&Self>, dy: &Self) -> R2<A> {
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
}

impl<A: Scalar> Layout for Tensor<A> {
    fn relabel(x: &Self, shape: &Shape) -> R<A> {
        x.clone().reshaped(shape.clone())
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
    fn gather_rows(table: &Self, ids: &[usize], out: &Shape) -> R<A> {
        layout::gather_rows(table, ids, out)
    }
    fn gather_rows_vjp(dy: &Self, ids: &[usize], table: &Shape) -> R<A> {
        layout::gather_rows_vjp(dy, ids, table)
    }
    fn constant(values: &[f64], out: &Shape) -> R<A> {
        Tensor::from_f64s(out.clone(), values)
    }
}

impl<A: Scalar> Reduce for Tensor<A> {
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
    fn mse_loss_vjp(y: &Self, t: &Self, dy: &Self) -> R2<A> {
        reduce::mse_loss_vjp(y, t, dy)
    }
    fn cross_entropy(logits: &Self, target: &[usize], mean: bool) -> R<A> {
        reduce::cross_entropy(logits, target, mean)
    }
    fn cross_entropy_vjp(logits: &Self, target: &[usize], dy: &Self, mean: bool) -> R<A> {
        reduce::cross_entropy_vjp(logits, target, dy, mean)
    }
}

impl<A: Scalar> Norm for Tensor<A> {
    fn softmax(x: &Self, axis: usize, log: bool) -> R<A> {
        if log {
            norm::log_softmax(x, axis)
        } else {
            norm::softmax(x, axis)
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
    fn batch_norm_vjp(saved: [&Self; 4], dy: &Self, eps: f64) -> Result<[Self; 5], SpecError> {
        let [x, gamma, mean, var] = saved;
        norm::batch_norm_vjp(x, gamma, mean, var, dy, eps)
    }
    fn batch_norm_train(x: &Self, gamma: &Self, beta: &Self, eps: f64) -> R<A> {
        norm::batch_norm_train(x, gamma, beta, eps)
    }
    fn batch_norm_train_vjp(
        saved: [&Self; 2],
        dy: &Self,
        eps: f64,
    ) -> Result<[Self; 3], SpecError> {
        let [x, gamma] = saved;
        norm::batch_norm_train_vjp(x, gamma, dy, eps)
    }
}

impl<A: Scalar> Linalg for Tensor<A> {
    fn matmul(a: &Self, b: &Self, out: &Shape) -> R<A> {
        linalg::matmul(a, b, out)
    }
    fn matmul_vjp(a: &Self, b: &Self, dy: &Self) -> R2<A> {
        linalg::matmul_vjp(a, b, dy)
    }
    fn linear(x: &Self, w: &Self, b: &Self, out: &Shape) -> R<A> {
        linalg::linear(x, w, b, out)
    }
    fn linear_vjp(x: &Self, w: &Self, dy: &Self) -> Result<(Self, Self, Self), SpecError> {
        linalg::linear_vjp(x, w, dy)
    }
    fn causal_attention(qkv: &Self, heads: usize, out: &Shape) -> R<A> {
        attention::causal_attention(qkv, heads, out)
    }
    fn causal_attention_vjp(qkv: &Self, heads: usize, dy: &Self) -> R<A> {
        attention::causal_attention_vjp(qkv, heads, dy)
    }
}

impl<A: Scalar> ConvPool for Tensor<A> {
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
}

impl<A: Scalar> Random for Tensor<A> {
    fn rand_uniform(seed: u64, key: u64, out: &Shape) -> R<A> {
        random::rand_uniform(seed, key, out)
    }
    fn bernoulli_mask(seed: u64, key: u64, keep_prob: &Self, out: &Shape) -> R<A> {
        random::bernoulli_mask(seed, key, out, keep_prob.item()?)
    }
}
