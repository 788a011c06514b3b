//! The op interface a model is written against, once (TorchLean's `Ops` class): one primitive,
//! [`Ops::apply`], which takes any `torchlean_spec::Op` (so every IR kind, and every kind added
//! to the descriptor table later, is available without a new method), plus named helpers for
//! the common ops that build the `Op` and call it.
//!
//! Both interpreters validate every call with the op's own shape rule before doing any work
//! (`check_call`), so a wrong shape is an error naming the op, the layer (the scope path) and
//! the operand shapes at the call in the user's model, not deep inside a kernel.

use crate::error::{NnError, Result};
use smallvec::SmallVec;
use torchlean_spec::{
    BinaryOp, Conv2dSpec, Op, PoolKind, PoolSpec, Reduction, Shape, Tensor, UnaryOp,
};

/// A value of a program: a handle into the interpreter that made it (a tape node, a graph
/// position), with its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Var {
    pub(crate) index: usize,
    pub(crate) shape: Shape,
    pub(crate) owner: u64,
}

impl Var {
    /// The value's shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The index in the interpreter (a tape node id for the eager session, a value index for
    /// the recorder).
    pub fn index(&self) -> usize {
        self.index
    }
}

/// A fresh interpreter identity, so that a value from one session is refused by another.
pub(crate) fn new_owner() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The scope path of the layer being run (`layers.1`), which prefixes parameter names as in
/// PyTorch's `state_dict` and is named in every error.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scopes(Vec<String>);

impl Scopes {
    pub(crate) fn push(&mut self, name: &str) {
        self.0.push(name.to_string());
    }

    pub(crate) fn pop(&mut self) {
        self.0.pop();
    }

    pub(crate) fn path(&self) -> String {
        self.0.join(".")
    }

    /// `name` under the current scope (`layers.1.weight`).
    pub(crate) fn qualify(&self, name: &str) -> String {
        if self.0.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path())
        }
    }
}

/// The shared validation of a call: every operand belongs to `owner`, and the op's shape rule
/// accepts the operand shapes. Returns the output shape.
pub(crate) fn check_call(owner: u64, scopes: &Scopes, op: &Op, args: &[&Var]) -> Result<Shape> {
    if let Some(operand) = args.iter().position(|a| a.owner != owner) {
        return Err(NnError::ForeignValue {
            op: op.name(),
            layer: scopes.path(),
            operand,
        });
    }
    if let (true, [x]) = (op.identity_rule(), args) {
        return Ok(x.shape.clone());
    }
    let shapes: SmallVec<[Shape; 3]> = args.iter().map(|a| a.shape.clone()).collect();
    op.infer_shape(&shapes).map_err(|source| NnError::Shape {
        op: op.name(),
        layer: scopes.path(),
        shapes: shapes.to_vec(),
        source,
    })
}

/// How [`Ops::update_buffer`] computes a buffer's next value: `(current, input) -> next`.
pub type BufferUpdate<'a> = &'a dyn Fn(&Tensor<f64>, &Tensor<f64>) -> Result<Tensor<f64>>;

/// The op interface. A model is ordinary generic Rust code over `O: Ops`; the eager
/// [`crate::Session`] runs it now on an engine, the [`crate::Recorder`] records it as a graph.
pub trait Ops {
    /// `op` applied to `args` (weights included, in the op's operand order).
    fn apply(&mut self, op: Op, args: &[&Var]) -> Result<Var>;

    /// A constant: no gradient.
    fn constant(&mut self, value: &Tensor<f64>) -> Result<Var>;

    /// A constant of `shape` whose every element is `value` ([`Tensor::full`]). The eager
    /// session makes it on its engine: on a device, nothing is uploaded.
    fn filled(&mut self, shape: Shape, value: f64) -> Result<Var> {
        self.constant(&Tensor::full(shape, value)?)
    }

    /// Ids (an embedding's rows, a loss's class labels) as a constant of `shape`, one per
    /// element in row-major order: the data an id operand reads.
    fn ids(&mut self, shape: Shape, ids: &[usize]) -> Result<Var> {
        self.constant(&Tensor::new(
            shape,
            ids.iter().map(|&i| i as f64).collect(),
        )?)
    }

    /// A model input (data). `requires_grad` asks for its gradient too.
    fn input(&mut self, name: &str, value: &Tensor<f64>, requires_grad: bool) -> Result<Var>;

    /// The parameter `name` under the current scope, created from `init` on first use; later
    /// uses (and later steps of the same session) get the current value, whose shape must be
    /// `init`'s.
    fn param(&mut self, name: &str, init: &Tensor<f64>) -> Result<Var>;

    /// The buffer `name` under the current scope (state without a gradient, such as batch
    /// norm's running statistics), created from `init` on first use.
    fn buffer(&mut self, name: &str, init: &Tensor<f64>) -> Result<Var>;

    /// Replaces buffer `name` (under the current scope) by `update(current, x)` where `x` is the
    /// value of `input` — for running statistics in training mode. The eager session applies it
    /// at once; the recorder records programs, not state changes, and ignores it.
    fn update_buffer(&mut self, name: &str, input: &Var, update: BufferUpdate<'_>) -> Result<()>;

    /// A key for a random op (dropout's mask) not used before in this interpreter: 0, 1, 2, …
    /// in call order, so the eager session and the recorder key one program alike.
    fn fresh_key(&mut self) -> u64;

    /// Enters a layer's scope (parameter names get the prefix, errors name it).
    fn push_scope(&mut self, name: &str);

    /// Leaves the innermost scope.
    fn pop_scope(&mut self);

    /// The current scope path (`layers.1`), for errors.
    fn scope_path(&self) -> String;

    /// Runs `f` inside scope `name`.
    fn scoped<R>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R>
    where
        Self: Sized,
    {
        self.push_scope(name);
        let r = f(self);
        self.pop_scope();
        r
    }

    /// Elementwise unary function.
    fn unary(&mut self, u: UnaryOp, x: &Var) -> Result<Var> {
        self.apply(Op::Unary(u), &[x])
    }
    fn relu(&mut self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Relu, x)
    }
    fn tanh(&mut self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Tanh, x)
    }
    fn sigmoid(&mut self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Sigmoid, x)
    }
    fn silu(&mut self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Silu, x)
    }
    fn exp(&mut self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Exp, x)
    }
    fn neg(&mut self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Neg, x)
    }

    /// Elementwise binary function of identically shaped operands.
    fn binary(&mut self, b: BinaryOp, x: &Var, y: &Var) -> Result<Var> {
        self.apply(Op::Binary(b), &[x, y])
    }
    fn add(&mut self, x: &Var, y: &Var) -> Result<Var> {
        self.binary(BinaryOp::Add, x, y)
    }
    fn sub(&mut self, x: &Var, y: &Var) -> Result<Var> {
        self.binary(BinaryOp::Sub, x, y)
    }
    fn mul(&mut self, x: &Var, y: &Var) -> Result<Var> {
        self.binary(BinaryOp::Mul, x, y)
    }
    fn div(&mut self, x: &Var, y: &Var) -> Result<Var> {
        self.binary(BinaryOp::Div, x, y)
    }

    /// `c · x`.
    fn scale(&mut self, x: &Var, c: f64) -> Result<Var> {
        self.apply(Op::Scale { c }, &[x])
    }
    /// `x + c`.
    fn add_scalar(&mut self, x: &Var, c: f64) -> Result<Var> {
        self.apply(Op::AddScalar { c }, &[x])
    }
    /// The value with its gradient stopped.
    fn detach(&mut self, x: &Var) -> Result<Var> {
        self.apply(Op::Detach, &[x])
    }

    fn softmax(&mut self, x: &Var, axis: usize) -> Result<Var> {
        self.apply(Op::Softmax { axis }, &[x])
    }
    fn log_softmax(&mut self, x: &Var, axis: usize) -> Result<Var> {
        self.apply(Op::LogSoftmax { axis }, &[x])
    }

    /// PyTorch's `expand` to `to`.
    fn broadcast_to(&mut self, x: &Var, to: Shape) -> Result<Var> {
        let from = x.shape.clone();
        self.apply(Op::BroadcastTo { from, to }, &[x])
    }
    /// Row-major reshape.
    fn reshape(&mut self, x: &Var, to: Shape) -> Result<Var> {
        let from = x.shape.clone();
        self.apply(Op::Reshape { from, to }, &[x])
    }
    /// Swaps axes `dim0` and `dim1`.
    fn transpose(&mut self, x: &Var, dim0: usize, dim1: usize) -> Result<Var> {
        self.apply(Op::Transpose { dim0, dim1 }, &[x])
    }

    /// Sum over `axis`, which is removed.
    fn reduce_sum(&mut self, x: &Var, axis: usize) -> Result<Var> {
        self.apply(Op::ReduceSum { axis }, &[x])
    }
    /// Mean over `axis`, which is removed.
    fn reduce_mean(&mut self, x: &Var, axis: usize) -> Result<Var> {
        self.apply(Op::ReduceMean { axis }, &[x])
    }
    /// Sum of all elements.
    fn sum(&mut self, x: &Var) -> Result<Var> {
        self.apply(Op::Sum, &[x])
    }
    /// Mean squared error.
    fn mse_loss(&mut self, y: &Var, target: &Var) -> Result<Var> {
        self.apply(Op::MseLoss, &[y, target])
    }

    fn matmul(&mut self, a: &Var, b: &Var) -> Result<Var> {
        self.apply(Op::MatMul, &[a, b])
    }
    /// `x Wᵀ + b` over the last axis.
    fn linear(&mut self, x: &Var, weight: &Var, bias: &Var) -> Result<Var> {
        self.apply(Op::Linear, &[x, weight, bias])
    }
    fn conv2d(&mut self, spec: Conv2dSpec, x: &Var, weight: &Var, bias: &Var) -> Result<Var> {
        self.apply(Op::Conv2d(spec), &[x, weight, bias])
    }
    /// Max or average pooling; `padding > 0` selects the `_pad` kind.
    fn pool2d(
        &mut self,
        kind: PoolKind,
        x: &Var,
        kernel: (usize, usize),
        stride: usize,
        padding: usize,
    ) -> Result<Var> {
        let spec = PoolSpec {
            kind,
            kernel_h: kernel.0,
            kernel_w: kernel.1,
            stride,
            padding,
            padded: padding > 0,
        };
        self.apply(Op::Pool(spec), &[x])
    }
    /// `F.cross_entropy(logits, labels)` for logits `[N, C]` and `N` integer class labels (a
    /// data input: no gradient). A label outside `[0, C)` is an error naming the op.
    fn cross_entropy(
        &mut self,
        logits: &Var,
        labels: &[usize],
        reduction: Reduction,
    ) -> Result<Var> {
        let target = self.ids(Shape::from([labels.len()]), labels)?;
        self.apply(Op::CrossEntropy { reduction }, &[logits, &target])
    }

    /// Concatenation along `axis`.
    fn concat(&mut self, parts: &[&Var], axis: usize) -> Result<Var> {
        self.apply(Op::Concat { axis }, parts)
    }

    /// `F.embedding(ids, table)`: row `ids[p]` of `table [V, D]` per position, `ids' shape +
    /// [D]`. The ids are data (a value holding integral row ids: no gradient); one outside
    /// `[0, V)` or not integral is an error naming the op, the position and the value.
    fn embedding(&mut self, ids: &Var, table: &Var) -> Result<Var> {
        self.apply(Op::Embedding, &[ids, table])
    }
}
