//! The reference meaning of every op: its shape rule, its forward computation and its VJP, on
//! the reference [`Tensor`], written once, naively and obviously correctly.
//!
//! `ir`'s denotation, the runtime's reference engine and `compiled`'s reference backprop all
//! call these functions; fast engines implement their own kernels and are checked against them.
//!
//! # Operands
//!
//! An [`Op`] takes all of its operands explicitly, weights included:
//!
//! | op | operands |
//! | --- | --- |
//! | `linear` | `x [.., in]`, `weight [out, in]`, `bias [out]` |
//! | `conv2d` | `x [C,H,W]` or `[N,C,H,W]`, `weight [O,C,kH,kW]`, `bias [O]` |
//! | `batch_norm2d_nchw_eval` | `x [N,C,..]`, `gamma [C]`, `beta [C]`, `mean [C]`, `var [C]` |
//! | `bernoulli_mask` | `keep_prob []` |
//! | `concat` | `count` tensors |
//! | `rand_uniform` | none |
//!
//! (the IR takes the weights from the payload; `compiled` lifts them to graph inputs).
//!
//! # VJPs and what they keep alive
//!
//! [`Op::vjp`] receives a [`Saved`]: the operand shapes, and only the operand values and output
//! value that [`Op::saves_input`] / [`Op::saves_output`] declare. An op whose backward needs only
//! its output (exp, tanh, sigmoid, relu, sqrt, inv, softmax, …) therefore never keeps its input
//! alive. The VJP returns one entry per operand; `None` means "structurally zero" (the operand
//! is not differentiable through this op: `detach`, the keep probability of `bernoulli_mask`).

mod conv;
mod elementwise;
mod layout;
mod linalg;
mod norm;
mod pool;
mod random;
mod reduce;

pub use conv::Conv2dSpec;
pub use elementwise::{BinaryOp, UnaryOp};
pub use pool::{PoolKind, PoolSpec};
pub use random::{splitmix64, uniform_at};

use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// One primitive operation with its attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Elementwise unary function.
    Unary(UnaryOp),
    /// Elementwise binary function of two identically shaped tensors.
    Binary(BinaryOp),
    /// `c · x` (extension).
    Scale { c: f64 },
    /// `x + c` (extension).
    AddScalar { c: f64 },
    /// Identity forward; the gradient stops here.
    Detach,
    /// Max-shifted softmax along `axis`.
    Softmax { axis: usize },
    /// Max-shifted log-softmax along `axis` (extension).
    LogSoftmax { axis: usize },
    /// Normalises the suffix of axes starting at `axis` (γ = 1, β = 0).
    LayerNorm { axis: usize, eps: f64 },
    /// PyTorch's right-aligned `expand`: each source extent equals the target extent it is
    /// aligned with, or is 1.
    BroadcastTo { from: Shape, to: Shape },
    /// Row-major reshape (also `flatten`).
    Reshape { to: Shape },
    /// Axis permutation, `torch.permute` convention: output axis `i` is input axis `perm[i]`.
    Permute { perm: Vec<usize> },
    /// Swaps the two outermost axes (rank ≥ 2).
    SwapFirstTwo,
    /// Swaps the last two axes of a rank-3 tensor.
    Transpose3dLastTwo,
    /// Swaps two axes (extension).
    Transpose { dim0: usize, dim1: usize },
    /// Sum over one axis, which is removed.
    ReduceSum { axis: usize },
    /// Mean over one axis, which is removed (an empty axis divides by 1).
    ReduceMean { axis: usize },
    /// Sum of all elements, to a scalar.
    Sum,
    /// `[m,n]·[n,p]` or batched `[b,m,n]·[b,n,p]`.
    MatMul,
    /// `y = x Wᵀ + b` over the last axis, leading axes kept.
    Linear,
    /// 2-D convolution, zero padding, no dilation, one group.
    Conv2d(Conv2dSpec),
    /// Max or average pooling over the last two axes.
    Pool(PoolSpec),
    /// Batch norm in evaluation mode: `(x − mean)/sqrt(max(var, 0) + eps)·γ + β`, channels on
    /// axis 1.
    BatchNormEval { channels: usize, eps: f64 },
    /// Concatenation of `count` tensors along `axis`.
    Concat { axis: usize, count: usize },
    /// Mean squared error `Σ(y − t)² / size` (size 0 divides by 1).
    MseLoss,
    /// Deterministic uniform `[0, 1)` noise keyed by `(seed, key)` and the element index.
    RandUniform { seed: u64, key: u64, shape: Shape },
    /// `1` where `keep_prob > u`, else `0`, with `u` as in `RandUniform`.
    BernoulliMask { seed: u64, key: u64, shape: Shape },
}

/// How many operands an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exact(usize),
    AtLeast(usize),
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exact(k) => n == k,
            Arity::AtLeast(k) => n >= k,
        }
    }
}

impl std::fmt::Display for Arity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arity::Exact(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
        }
    }
}

/// What a VJP may read: the operand shapes always; operand values and the output value only
/// where the op declares that it saves them.
#[derive(Clone, Debug)]
pub struct Saved<'a, A> {
    pub input_shapes: Vec<Shape>,
    pub inputs: Vec<Option<&'a Tensor<A>>>,
    pub output: Option<&'a Tensor<A>>,
}

impl<'a, A: Scalar> Saved<'a, A> {
    /// Keeps exactly what `op` declares it saves.
    pub fn for_op(op: &Op, inputs: &[&'a Tensor<A>], output: &'a Tensor<A>) -> Self {
        Saved {
            input_shapes: inputs.iter().map(|t| t.shape().clone()).collect(),
            inputs: inputs
                .iter()
                .enumerate()
                .map(|(i, t)| op.saves_input(i).then_some(*t))
                .collect(),
            output: op.saves_output().then_some(output),
        }
    }

    /// Operand `i`, or an error if it was not saved.
    pub fn input(&self, op: &'static str, i: usize) -> Result<&'a Tensor<A>> {
        self.inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| SpecError::MissingSaved {
                op,
                what: format!("operand {i}"),
            })
    }

    /// The output, or an error if it was not saved.
    pub fn output(&self, op: &'static str) -> Result<&'a Tensor<A>> {
        self.output.ok_or_else(|| SpecError::MissingSaved {
            op,
            what: "output".into(),
        })
    }

    /// Shape of operand `i`.
    pub fn shape(&self, op: &'static str, i: usize) -> Result<&Shape> {
        self.input_shapes
            .get(i)
            .ok_or_else(|| SpecError::MissingSaved {
                op,
                what: format!("shape of operand {i}"),
            })
    }
}

/// Per-operand cotangents; `None` is a structural zero.
pub type Cotangents<A> = Vec<Option<Tensor<A>>>;

impl Op {
    /// The wire name of the op (TorchLean's tag where one exists).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Scale { .. } => "scale",
            Op::AddScalar { .. } => "add_scalar",
            Op::Detach => "detach",
            Op::Softmax { .. } => "softmax",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::LayerNorm { .. } => "layernorm",
            Op::BroadcastTo { .. } => "broadcast_to",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::SwapFirstTwo => "swap_first_two",
            Op::Transpose3dLastTwo => "transpose3d_last_two",
            Op::Transpose { .. } => "transpose",
            Op::ReduceSum { .. } => "reduce_sum",
            Op::ReduceMean { .. } => "reduce_mean",
            Op::Sum => "sum",
            Op::MatMul => "matmul",
            Op::Linear => "linear",
            Op::Conv2d(_) => "conv2d",
            Op::Pool(p) => p.name(),
            Op::BatchNormEval { .. } => "batch_norm2d_nchw_eval",
            Op::Concat { .. } => "concat",
            Op::MseLoss => "mse_loss",
            Op::RandUniform { .. } => "rand_uniform",
            Op::BernoulliMask { .. } => "bernoulli_mask",
        }
    }

    /// Number of operands (weights included).
    pub fn arity(&self) -> Arity {
        match self {
            Op::RandUniform { .. } => Arity::Exact(0),
            Op::Binary(_) | Op::MatMul | Op::MseLoss => Arity::Exact(2),
            Op::Linear | Op::Conv2d(_) => Arity::Exact(3),
            Op::BatchNormEval { .. } => Arity::Exact(5),
            Op::Concat { count, .. } => Arity::Exact(*count),
            _ => Arity::Exact(1),
        }
    }

    /// Names of the operands, in order. The IR takes those after the first from the payload
    /// under these names for `linear`, `conv2d` and batch norm.
    pub fn operand_names(&self) -> &'static [&'static str] {
        match self {
            Op::Linear | Op::Conv2d(_) => &["x", "weight", "bias"],
            Op::BatchNormEval { .. } => &["x", "gamma", "beta", "mean", "var"],
            Op::Binary(_) | Op::MatMul | Op::MseLoss => &["lhs", "rhs"],
            Op::BernoulliMask { .. } => &["keep_prob"],
            Op::RandUniform { .. } => &[],
            _ => &["x"],
        }
    }

    /// Whether the VJP reads operand `i`'s value.
    pub fn saves_input(&self, i: usize) -> bool {
        match self {
            Op::Unary(u) => u.saves_input(),
            Op::Binary(b) => b.saves_inputs(),
            Op::LayerNorm { .. } | Op::MseLoss | Op::MatMul => true,
            Op::Linear | Op::Conv2d(_) => i < 2,
            Op::Pool(p) => p.kind == PoolKind::Max,
            Op::BatchNormEval { .. } => matches!(i, 0 | 1 | 3 | 4),
            _ => false,
        }
    }

    /// Whether the VJP reads the output value.
    pub fn saves_output(&self) -> bool {
        match self {
            Op::Unary(u) => u.saves_output(),
            Op::Softmax { .. } | Op::LogSoftmax { .. } => true,
            _ => false,
        }
    }

    /// The shape rule: validates operand shapes and attributes and returns the output shape.
    pub fn infer_shape(&self, inputs: &[Shape]) -> Result<Shape> {
        if !self.arity().accepts(inputs.len()) {
            return Err(SpecError::Arity {
                op: self.name(),
                expected: self.arity().to_string(),
                got: inputs.len(),
            });
        }
        let name = self.name();
        let out = match self {
            Op::Unary(_) | Op::Scale { .. } | Op::AddScalar { .. } | Op::Detach => {
                inputs[0].clone()
            }
            Op::Binary(_) => elementwise::infer_same(name, &inputs[0], &inputs[1])?,
            Op::Softmax { axis } | Op::LogSoftmax { axis } => {
                layout::check_axis(name, "axis", *axis, &inputs[0])?;
                inputs[0].clone()
            }
            Op::LayerNorm { axis, eps } => norm::infer_layer_norm(*axis, *eps, &inputs[0])?,
            Op::BroadcastTo { from, to } => layout::infer_broadcast(from, to, &inputs[0])?,
            Op::Reshape { to } => layout::infer_reshape(to, &inputs[0])?,
            Op::Permute { perm } => layout::infer_permute(name, perm, &inputs[0])?,
            Op::SwapFirstTwo | Op::Transpose3dLastTwo | Op::Transpose { .. } => {
                let perm = self.permutation(&inputs[0])?;
                layout::infer_permute(name, &perm, &inputs[0])?
            }
            Op::ReduceSum { axis } | Op::ReduceMean { axis } => {
                layout::check_axis(name, "axis", *axis, &inputs[0])?;
                inputs[0].remove_axis(*axis)
            }
            Op::Sum => Shape::scalar(),
            Op::MatMul => linalg::infer_matmul(&inputs[0], &inputs[1])?,
            Op::Linear => linalg::infer_linear(&inputs[0], &inputs[1], &inputs[2])?,
            Op::Conv2d(spec) => spec.infer(&inputs[0], &inputs[1], &inputs[2])?,
            Op::Pool(spec) => spec.infer(&inputs[0])?,
            Op::BatchNormEval { channels, eps } => norm::infer_batch_norm(*channels, *eps, inputs)?,
            Op::Concat { axis, .. } => layout::infer_concat(*axis, inputs)?,
            Op::MseLoss => {
                elementwise::infer_same(name, &inputs[0], &inputs[1])?;
                Shape::scalar()
            }
            Op::RandUniform { shape, .. } => shape.clone(),
            Op::BernoulliMask { shape, .. } => {
                if inputs[0].rank() != 0 {
                    return Err(SpecError::OpShape {
                        op: name,
                        shapes: inputs.to_vec(),
                        reason: "the keep probability must be a scalar".into(),
                    });
                }
                shape.clone()
            }
        };
        out.checked_size()?;
        Ok(out)
    }

    /// For the permutation-like ops, the permutation they perform on a tensor of shape `s`.
    fn permutation(&self, s: &Shape) -> Result<Vec<usize>> {
        let name = self.name();
        let rank = s.rank();
        match self {
            Op::Permute { perm } => Ok(perm.clone()),
            Op::SwapFirstTwo => {
                if rank < 2 {
                    return Err(layout::rank_err(name, s, "needs rank at least 2"));
                }
                let mut p: Vec<usize> = (0..rank).collect();
                p.swap(0, 1);
                Ok(p)
            }
            Op::Transpose3dLastTwo => {
                if rank != 3 {
                    return Err(layout::rank_err(name, s, "needs rank 3"));
                }
                Ok(vec![0, 2, 1])
            }
            Op::Transpose { dim0, dim1 } => {
                layout::check_axis(name, "dim0", *dim0, s)?;
                layout::check_axis(name, "dim1", *dim1, s)?;
                let mut p: Vec<usize> = (0..rank).collect();
                p.swap(*dim0, *dim1);
                Ok(p)
            }
            _ => Err(SpecError::OpAttr {
                op: name,
                attr: "perm",
                reason: "is not a permutation op".into(),
            }),
        }
    }

    /// The forward computation.
    pub fn forward<A: Scalar>(&self, args: &[&Tensor<A>]) -> Result<Tensor<A>> {
        let shapes: Vec<Shape> = args.iter().map(|t| t.shape().clone()).collect();
        let out_shape = self.infer_shape(&shapes)?;
        let name = self.name();
        match self {
            Op::Unary(u) => args[0].map(|x| u.apply(x)),
            Op::Binary(b) => args[0].zip_with(args[1], name, |x, y| b.apply(x, y)),
            Op::Scale { c } => {
                let c = A::from_f64(*c)?;
                args[0].map(|x| Ok(c.mul(x)))
            }
            Op::AddScalar { c } => {
                let c = A::from_f64(*c)?;
                args[0].map(|x| Ok(x.add(&c)))
            }
            Op::Detach => Ok(args[0].clone()),
            Op::Softmax { axis } => norm::softmax(args[0], *axis),
            Op::LogSoftmax { axis } => norm::log_softmax(args[0], *axis),
            Op::LayerNorm { axis, eps } => norm::layer_norm(args[0], *axis, *eps),
            Op::BroadcastTo { to, .. } => layout::broadcast(args[0], to),
            Op::Reshape { to } => args[0].clone().reshaped(to.clone()),
            Op::Permute { .. }
            | Op::SwapFirstTwo
            | Op::Transpose3dLastTwo
            | Op::Transpose { .. } => {
                let perm = self.permutation(args[0].shape())?;
                layout::permute(args[0], &perm)
            }
            Op::ReduceSum { axis } => reduce::reduce_sum(args[0], *axis),
            Op::ReduceMean { axis } => reduce::reduce_mean(args[0], *axis),
            Op::Sum => reduce::sum_all(args[0]),
            Op::MatMul => linalg::matmul(args[0], args[1], &out_shape),
            Op::Linear => linalg::linear(args[0], args[1], args[2], &out_shape),
            Op::Conv2d(spec) => spec.forward(args[0], args[1], args[2], &out_shape),
            Op::Pool(spec) => spec.forward(args[0], &out_shape),
            Op::BatchNormEval { eps, .. } => norm::batch_norm(args, *eps),
            Op::Concat { axis, .. } => layout::concat(args, *axis, &out_shape),
            Op::MseLoss => reduce::mse_loss(args[0], args[1]),
            Op::RandUniform { seed, key, shape } => random::rand_uniform(*seed, *key, shape),
            Op::BernoulliMask { seed, key, shape } => {
                random::bernoulli_mask(*seed, *key, shape, args[0].item()?)
            }
        }
    }

    /// The VJP: one cotangent per operand (`None` = structurally zero), reading only what the
    /// op saves.
    pub fn vjp<A: Scalar>(&self, saved: &Saved<'_, A>, cot: &Tensor<A>) -> Result<Cotangents<A>> {
        let name = self.name();
        if !self.arity().accepts(saved.input_shapes.len()) {
            return Err(SpecError::Arity {
                op: name,
                expected: self.arity().to_string(),
                got: saved.input_shapes.len(),
            });
        }
        let out_shape = self.infer_shape(&saved.input_shapes)?;
        if cot.shape() != &out_shape {
            return Err(SpecError::OpShape {
                op: name,
                shapes: vec![out_shape, cot.shape().clone()],
                reason: "the cotangent must have the output's shape".into(),
            });
        }
        match self {
            Op::Unary(u) => {
                let x = if u.saves_input() {
                    Some(saved.input(name, 0)?)
                } else {
                    None
                };
                let y = if u.saves_output() {
                    Some(saved.output(name)?)
                } else {
                    None
                };
                Ok(vec![Some(u.vjp(x, y, cot)?)])
            }
            Op::Binary(b) => {
                let (x, y) = if b.saves_inputs() {
                    (Some(saved.input(name, 0)?), Some(saved.input(name, 1)?))
                } else {
                    (None, None)
                };
                let (dx, dy) = b.vjp(x, y, cot)?;
                Ok(vec![Some(dx), Some(dy)])
            }
            Op::Scale { c } => {
                let c = A::from_f64(*c)?;
                Ok(vec![Some(cot.map(|d| Ok(c.mul(d)))?)])
            }
            Op::AddScalar { .. } => Ok(vec![Some(cot.clone())]),
            Op::Detach => Ok(vec![None]),
            Op::Softmax { axis } => Ok(vec![Some(norm::softmax_vjp(
                saved.output(name)?,
                cot,
                *axis,
            )?)]),
            Op::LogSoftmax { axis } => Ok(vec![Some(norm::log_softmax_vjp(
                saved.output(name)?,
                cot,
                *axis,
            )?)]),
            Op::LayerNorm { axis, eps } => Ok(vec![Some(norm::layer_norm_vjp(
                saved.input(name, 0)?,
                cot,
                *axis,
                *eps,
            )?)]),
            Op::BroadcastTo { from, .. } => Ok(vec![Some(layout::broadcast_vjp(cot, from)?)]),
            Op::Reshape { .. } => Ok(vec![Some(
                cot.clone().reshaped(saved.shape(name, 0)?.clone())?,
            )]),
            Op::Permute { .. }
            | Op::SwapFirstTwo
            | Op::Transpose3dLastTwo
            | Op::Transpose { .. } => {
                let perm = self.permutation(saved.shape(name, 0)?)?;
                Ok(vec![Some(layout::permute(cot, &layout::inverse(&perm))?)])
            }
            Op::ReduceSum { axis } => Ok(vec![Some(reduce::reduce_sum_vjp(
                cot,
                saved.shape(name, 0)?,
                *axis,
            )?)]),
            Op::ReduceMean { axis } => Ok(vec![Some(reduce::reduce_mean_vjp(
                cot,
                saved.shape(name, 0)?,
                *axis,
            )?)]),
            Op::Sum => Ok(vec![Some(reduce::sum_all_vjp(cot, saved.shape(name, 0)?)?)]),
            Op::MatMul => {
                let (da, db) =
                    linalg::matmul_vjp(saved.input(name, 0)?, saved.input(name, 1)?, cot)?;
                Ok(vec![Some(da), Some(db)])
            }
            Op::Linear => {
                let (dx, dw, db) =
                    linalg::linear_vjp(saved.input(name, 0)?, saved.input(name, 1)?, cot)?;
                Ok(vec![Some(dx), Some(dw), Some(db)])
            }
            Op::Conv2d(spec) => {
                let (dx, dw, db) = spec.vjp(saved.input(name, 0)?, saved.input(name, 1)?, cot)?;
                Ok(vec![Some(dx), Some(dw), Some(db)])
            }
            Op::Pool(spec) => {
                let dx = match spec.kind {
                    PoolKind::Max => spec.max_vjp(saved.input(name, 0)?, cot)?,
                    PoolKind::Avg => spec.avg_vjp(saved.shape(name, 0)?, cot)?,
                };
                Ok(vec![Some(dx)])
            }
            Op::BatchNormEval { eps, .. } => {
                let grads = norm::batch_norm_vjp(
                    saved.input(name, 0)?,
                    saved.input(name, 1)?,
                    saved.input(name, 3)?,
                    saved.input(name, 4)?,
                    cot,
                    *eps,
                )?;
                Ok(grads.into_iter().map(Some).collect())
            }
            Op::Concat { axis, .. } => {
                let parts = layout::concat_vjp(cot, &saved.input_shapes, *axis)?;
                Ok(parts.into_iter().map(Some).collect())
            }
            Op::MseLoss => {
                let (da, db) =
                    reduce::mse_loss_vjp(saved.input(name, 0)?, saved.input(name, 1)?, cot)?;
                Ok(vec![Some(da), Some(db)])
            }
            Op::RandUniform { .. } => Ok(vec![]),
            Op::BernoulliMask { .. } => Ok(vec![None]),
        }
    }
}

#[cfg(test)]
mod tests;
