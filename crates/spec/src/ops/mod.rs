//! The reference meaning of every op: its shape rule, its forward computation and its VJP, on
//! the reference [`Tensor`](crate::Tensor), written once, naively and obviously correctly.
//!
//! `ir`'s denotation, the runtime's reference engine and `compiled`'s reference backprop all
//! call these functions; fast engines implement their own kernels and are checked against them.
//!
//! # Descriptors and dispatch
//!
//! Every op's metadata (wire name, operands with the payload ones marked, arity, what its VJP
//! saves, attributes) is its row in [`desc`]; [`Op::infer_shape`], [`Op::forward`] and
//! [`Op::vjp`] are its maths. `forward` and `vjp` are generic over a [`Backend`]: they are the
//! one dispatch every engine goes through (validation by the shape rule, the saved-operand
//! wiring), so an engine writes only kernels. An [`Op`] takes all of its operands explicitly,
//! weights included (the IR takes them from the payload; `compiled` lifts them to graph inputs).
//!
//! # VJPs and what they keep alive
//!
//! [`Op::vjp`] receives a [`Saved`]: the operand shapes, and only the operand values and output
//! value that the op's descriptor declares ([`desc::Saves`]). An op whose backward needs only
//! its output (exp, tanh, sigmoid, relu, sqrt, inv, softmax, …) therefore never keeps its input
//! alive. The VJP returns one entry per operand; `None` means "structurally zero" (the operand
//! is not differentiable through this op: `detach`, the keep probability of `bernoulli_mask`).

pub(crate) mod attention;
mod conv;
pub mod desc;
pub(crate) mod elementwise;
pub(crate) mod layout;
pub(crate) mod linalg;
pub(crate) mod norm;
mod pool;
pub(crate) mod random;
pub(crate) mod reduce;
pub mod torch;

pub use attention::{causal_mask, AttentionDims};
pub use conv::{
    dilated_extent, window_out, BackwardChunks, Chunks, Conv2dSpec, ConvGeometry, GroupedConv,
    CONV_DEFAULT_DILATION, CONV_DEFAULT_GROUPS, IMPLICIT_VECTOR_COLUMNS, LANES_MAX_POSITIONS,
    LANES_MIN_CHANNELS, PARALLEL_IMAGES, PATCH_CHUNK_ELEMENTS, PATCH_CHUNK_MIN_UNITS,
    SPLIT_CHUNK_DIVISOR, WINOGRAD_F2_MIN_EXTENT, WINOGRAD_MIN_CHANNELS, WINOGRAD_MIN_EXTENT,
};
pub use desc::{
    AttrMut, AttrValue, AttrVisitor, Onnx, OpDesc, BATCH_NORM_DEFAULT_EPS, LAYER_NORM_DEFAULT_EPS,
};
pub use elementwise::{gelu_consts, BinaryOp, GeluApprox, UnaryOp, ERF_VJP_SCALE};
pub use linalg::{
    linear_dims, linear_is_narrow, linear_transposes_output, matmul_dims, NARROW_LINEAR_MAX_OUT,
    NARROW_LINEAR_MIN_IN,
};
pub use pool::{PoolKind, PoolSpec};
pub use random::{splitmix64, uniform_at};
pub use reduce::{class_ids, Reduction};

use crate::backend::{Backend, EngineValue};
use crate::budget::Pass;
use crate::error::{Result, SpecError};
use crate::shape::Shape;
use smallvec::SmallVec;
use std::borrow::Borrow;

/// One primitive operation with its attributes (its metadata: [`Op::desc`]).
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
    /// `torch.clamp(x, min, max)`; an absent bound does not clamp (extension).
    Clamp { min: Option<f64>, max: Option<f64> },
    /// Identity forward; the gradient stops here.
    Detach,
    /// Max-shifted softmax along `axis`.
    Softmax { axis: usize },
    /// Max-shifted log-softmax along `axis` (extension).
    LogSoftmax { axis: usize },
    /// Normalises the suffix of axes starting at `axis` (γ = 1, β = 0); `eps: None` is the
    /// default [`LAYER_NORM_DEFAULT_EPS`].
    LayerNorm { axis: usize, eps: Option<f64> },
    /// PyTorch's right-aligned `expand`: each source extent equals the target extent it is
    /// aligned with, or is 1.
    BroadcastTo { from: Shape, to: Shape },
    /// Row-major reshape of an operand of shape `from`.
    Reshape { from: Shape, to: Shape },
    /// Row-major reshape of an operand of shape `from` to one axis.
    Flatten { from: Shape },
    /// Axis permutation, `torch.permute` convention: output axis `i` is input axis `perm[i]`.
    Permute { perm: Vec<usize> },
    /// Swaps the two outermost axes (rank ≥ 2).
    SwapFirstTwo,
    /// Swaps the last two axes of a rank-3 tensor.
    Transpose3dLastTwo,
    /// Swaps two axes (extension).
    Transpose { dim0: usize, dim1: usize },
    /// `x.narrow(axis, start, len)` (extension).
    Slice {
        axis: usize,
        start: usize,
        len: usize,
    },
    /// Sum over one axis, which is removed.
    ReduceSum { axis: usize },
    /// Mean over one axis, which is removed (over an empty axis: NaN, as in PyTorch).
    ReduceMean { axis: usize },
    /// Sum of all elements, to a scalar.
    Sum,
    /// `[m,n]·[n,p]` or batched `[b,m,n]·[b,n,p]`.
    MatMul,
    /// `y = x Wᵀ + b` over the last axis, leading axes kept.
    Linear,
    /// Causal self-attention of `heads` heads on packed projections `[.., T, 3C]` (queries,
    /// keys, values side by side) to `[.., T, C]` (extension; [`AttentionDims`]).
    CausalAttention { heads: usize },
    /// 2-D convolution, zero padding, no dilation, one group.
    Conv2d(Conv2dSpec),
    /// `relu(conv2d(x, W, b))` in one node (extension): a compiled graph's `conv2d` whose one
    /// consumer is `relu` (`torchlean_compiled::fuse`); its VJP masks the cotangent by the
    /// output.
    Conv2dRelu(Conv2dSpec),
    /// Max or average pooling over the last two axes.
    Pool(PoolSpec),
    /// Batch norm in evaluation mode: `(x − mean)/sqrt(max(var, 0) + eps)·γ + β`, channels on
    /// axis 1.
    BatchNormEval { channels: usize, eps: f64 },
    /// Batch norm in training mode on `[N, C, H, W]`: per channel, the batch mean and biased
    /// variance over `N, H, W`, `(x − mean)/sqrt(var + eps)·γ + β`; `eps: None` is the default
    /// [`BATCH_NORM_DEFAULT_EPS`] (extension).
    BatchNormTrain { channels: usize, eps: Option<f64> },
    /// Concatenation of two or more tensors along `axis`.
    Concat { axis: usize },
    /// `F.embedding(ids, weight)`: row `ids[p]` of `weight [V, D]` per position, `ids' shape +
    /// [D]`; ids are data (integral, in `[0, V)`; no gradient) (extension).
    Embedding,
    /// Mean squared error `Σ(y − t)² / size` (size 0: NaN, as in PyTorch).
    MseLoss,
    /// `F.cross_entropy(logits [N, C], target [N])` with integral class ids (extension).
    CrossEntropy { reduction: Reduction },
    /// Deterministic uniform `[0, 1)` noise keyed by `(seed, key)` and the element index.
    RandUniform { seed: u64, key: u64, shape: Shape },
    /// `1` where `keep_prob > u`, else `0`, with `u` as in `RandUniform`.
    BernoulliMask { seed: u64, key: u64, shape: Shape },
}

// a graph node and a tape entry each hold an op (`docs/ARCHITECTURE.md`, "Memory per node"):
// the largest variants are the two-shape ones (`broadcast_to`, `reshape`)
const _: () = assert!(std::mem::size_of::<Op>() <= 88);

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

/// A short list kept inline up to 2 items (the operands of elementwise ops, which dominate
/// per-op overhead): no heap allocation per op for them.
pub type Operands<T> = SmallVec<[T; 2]>;

/// Per-operand cotangents; `None` is a structural zero.
pub type Cotangents<V> = Operands<Option<V>>;

/// What a VJP may read: the operand shapes always; operand values and the output value only
/// where the op's descriptor declares that it saves them. The one `Saved` type: the reference
/// engine, the CPU engine, compiled graphs and eager tapes all keep this.
///
/// `V` is what holds each value: the value itself (`Saved<V>`, [`Saved::for_op`], an owned copy
/// that outlives its operands) or a borrow of it (`Saved<&V>`, [`Saved::borrowed`], a view of
/// values someone else keeps: a tape builds one from its nodes for each VJP it runs, so it
/// stores nothing per op beyond the op). [`Op::vjp`] reads either through [`Borrow`].
#[derive(Clone, Debug)]
pub struct Saved<V> {
    pub input_shapes: Operands<Shape>,
    /// Operand values, `Some` exactly where the op saves them.
    pub inputs: Operands<Option<V>>,
    /// The output value, if the op saves it.
    pub output: Option<V>,
}

impl<V> Saved<V> {
    /// Nothing saved yet.
    #[inline]
    pub fn empty() -> Self {
        Saved {
            input_shapes: Operands::new(),
            inputs: Operands::new(),
            output: None,
        }
    }

    /// Keeps, for each operand, its shape and `hold(value)` where `op` saves it, and
    /// `hold(output)` where it saves its output: the one reading of the descriptor's
    /// [`desc::Saves`] that every `Saved` is built by.
    #[inline]
    fn fill_with<'a, B: EngineValue + 'a>(
        &mut self,
        op: &Op,
        inputs: &[&'a B],
        output: &'a B,
        hold: impl Fn(&'a B) -> V,
    ) {
        let saves = op.desc().saves;
        for (i, v) in inputs.iter().enumerate() {
            self.input_shapes.push(v.shape_of().clone());
            self.inputs.push(saves.inputs.contains(&i).then(|| hold(v)));
        }
        self.output = saves.output.then(|| hold(output));
    }

    /// The same record with each value seen through `f`: a decorator's view of the values of
    /// the engine it wraps.
    pub fn view<'a, U>(&'a self, f: impl Fn(&'a V) -> &'a U) -> Saved<&'a U> {
        Saved {
            input_shapes: self.input_shapes.clone(),
            inputs: self.inputs.iter().map(|v| v.as_ref().map(&f)).collect(),
            output: self.output.as_ref().map(&f),
        }
    }

    /// Shape of operand `i`.
    pub fn shape(&self, op: &Op, i: usize) -> Result<&Shape> {
        self.input_shapes
            .get(i)
            .ok_or_else(|| SpecError::MissingSaved {
                op: op.name(),
                what: format!("shape of operand {i}"),
            })
    }

    /// Operand `i`'s value, which must have been saved with its recorded shape.
    pub fn input<B: EngineValue>(&self, op: &Op, i: usize) -> Result<&B>
    where
        V: Borrow<B>,
    {
        let v: &B = self
            .inputs
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| SpecError::MissingSaved {
                op: op.name(),
                what: format!("operand {i}"),
            })?
            .borrow();
        let want = self.shape(op, i)?;
        if v.shape_of() != want {
            return Err(SpecError::OpShape {
                op: op.name(),
                shapes: vec![want.clone(), v.shape_of().clone()],
                reason: format!("saved operand {i} does not have its recorded shape"),
            });
        }
        Ok(v)
    }

    /// The output value, which must have been saved with the output's shape.
    pub fn output<B: EngineValue>(&self, op: &Op, want: &Shape) -> Result<&B>
    where
        V: Borrow<B>,
    {
        let v: &B = self
            .output
            .as_ref()
            .ok_or_else(|| SpecError::MissingSaved {
                op: op.name(),
                what: "output".into(),
            })?
            .borrow();
        if v.shape_of() != want {
            return Err(SpecError::OpShape {
                op: op.name(),
                shapes: vec![want.clone(), v.shape_of().clone()],
                reason: "the saved output does not have the output's shape".into(),
            });
        }
        Ok(v)
    }

    /// The saved value where the op saves operand `i` (or the output), `None` where it does
    /// not — for families whose derivative is written in terms of either.
    fn maybe_input<B: EngineValue>(&self, op: &Op, i: usize) -> Result<Option<&B>>
    where
        V: Borrow<B>,
    {
        if op.desc().saves.inputs.contains(&i) {
            self.input(op, i).map(Some)
        } else {
            Ok(None)
        }
    }

    fn maybe_output<B: EngineValue>(&self, op: &Op, want: &Shape) -> Result<Option<&B>>
    where
        V: Borrow<B>,
    {
        if op.desc().saves.output {
            self.output(op, want).map(Some)
        } else {
            Ok(None)
        }
    }
}

impl<V: EngineValue> Saved<V> {
    /// Keeps exactly what `op` declares it saves, as copies (an engine's clone: a shared
    /// buffer on the CPU engine, the data on the reference engine).
    #[inline]
    pub fn for_op(op: &Op, inputs: &[&V], output: &V) -> Self {
        let mut saved = Saved::empty();
        saved.fill(op, inputs, output);
        saved
    }

    /// [`Saved::for_op`] into an empty `Saved`, in place.
    #[inline]
    pub fn fill(&mut self, op: &Op, inputs: &[&V], output: &V) {
        self.fill_with(op, inputs, output, V::clone);
    }
}

impl<'a, V: EngineValue> Saved<&'a V> {
    /// [`Saved::for_op`] without a copy: borrows exactly what `op` declares it saves from
    /// values the caller keeps alive (a tape's nodes) for as long as the view is used.
    #[inline]
    pub fn borrowed(op: &Op, inputs: &[&'a V], output: &'a V) -> Self {
        let mut saved = Saved::empty();
        saved.fill_with(op, inputs, output, |v| v);
        saved
    }
}

impl Op {
    /// The wire name (the descriptor's).
    #[inline]
    pub fn name(&self) -> &'static str {
        self.desc().name
    }

    /// Number of operands (weights included).
    #[inline]
    pub fn arity(&self) -> Arity {
        self.desc().arity
    }

    /// Whether the VJP reads operand `i`'s value.
    #[inline]
    pub fn saves_input(&self, i: usize) -> bool {
        self.desc().saves.inputs.contains(&i)
    }

    /// Whether the VJP reads the output value.
    #[inline]
    pub fn saves_output(&self) -> bool {
        self.desc().saves.output
    }

    /// Layer norm's effective `eps` (the default where the node carries none).
    pub fn layer_norm_eps(&self) -> Option<f64> {
        match self {
            Op::LayerNorm { eps, .. } => Some(eps.unwrap_or(LAYER_NORM_DEFAULT_EPS)),
            _ => None,
        }
    }

    /// Whether the shape rule is `output = operand` for any single operand (the elementwise
    /// unary family): callers on the per-op path (the dispatch, the front end's call checks)
    /// skip a full rule evaluation for them (a unit test checks that the rule agrees).
    #[inline]
    pub fn identity_rule(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Scale { .. } | Op::AddScalar { .. } | Op::Detach
        )
    }

    /// The shapes of the payload operands (those after the parents, [`OpDesc::payload`]) of a
    /// node with these parent shapes and this declared output shape: the one payload-shape
    /// rule (the IR's checks and the generators call it).
    pub fn payload_shapes(&self, parents: &[Shape], out: &Shape) -> Result<Vec<Shape>> {
        let first = || {
            parents.first().ok_or_else(|| SpecError::Arity {
                op: self.name(),
                expected: self.desc().parents().to_string(),
                got: 0,
            })
        };
        Ok(match self {
            Op::Linear => linalg::linear_payload_shapes(first()?, out)?,
            Op::Conv2d(spec) | Op::Conv2dRelu(spec) => spec.payload_shapes(),
            Op::BatchNormEval { channels, .. } => norm::batch_norm_payload_shapes(*channels),
            Op::BatchNormTrain { channels, .. } => vec![Shape::from([*channels]); 2],
            Op::CrossEntropy { .. } => vec![reduce::cross_entropy_target_shape(first()?)?],
            _ => Vec::new(),
        })
    }

    /// The shape rule: validates operand shapes and attributes and returns the output shape.
    pub fn infer_shape(&self, inputs: &[Shape]) -> Result<Shape> {
        let name = self.name();
        if !self.arity().accepts(inputs.len()) {
            return Err(SpecError::Arity {
                op: name,
                expected: self.arity().to_string(),
                got: inputs.len(),
            });
        }
        let out = match self {
            Op::Unary(_) | Op::Scale { .. } | Op::AddScalar { .. } | Op::Detach => {
                inputs[0].clone()
            }
            Op::Binary(_) => elementwise::infer_same(name, &inputs[0], &inputs[1])?,
            Op::Clamp { min, max } => {
                elementwise::check_clamp_bounds(*min, *max)?;
                inputs[0].clone()
            }
            Op::Softmax { axis } | Op::LogSoftmax { axis } => {
                layout::check_axis(name, "axis", *axis, &inputs[0])?;
                inputs[0].clone()
            }
            Op::LayerNorm { axis, eps } => {
                norm::infer_layer_norm(*axis, eps.unwrap_or(LAYER_NORM_DEFAULT_EPS), &inputs[0])?
            }
            Op::BroadcastTo { from, to } => layout::infer_broadcast(from, to, &inputs[0])?,
            Op::Reshape { from, to } => {
                layout::check_declared(name, "in_shape", from, &inputs[0])?;
                layout::infer_reshape(to, &inputs[0])?
            }
            Op::Flatten { from } => {
                layout::check_declared(name, "value_shape", from, &inputs[0])?;
                Shape::from([inputs[0].size()])
            }
            Op::Permute { perm } => layout::infer_permute(name, perm, &inputs[0])?,
            Op::SwapFirstTwo | Op::Transpose3dLastTwo | Op::Transpose { .. } => {
                let perm = self.permutation(&inputs[0])?;
                layout::infer_permute(name, &perm, &inputs[0])?
            }
            Op::Slice { axis, start, len } => layout::infer_slice(*axis, *start, *len, &inputs[0])?,
            Op::ReduceSum { axis } | Op::ReduceMean { axis } => {
                layout::check_axis(name, "axis", *axis, &inputs[0])?;
                inputs[0].remove_axis(*axis)
            }
            Op::Sum => Shape::scalar(),
            Op::MatMul => linalg::infer_matmul(&inputs[0], &inputs[1])?,
            Op::Linear => linalg::infer_linear(&inputs[0], &inputs[1], &inputs[2])?,
            Op::CausalAttention { heads } => attention::infer_causal_attention(&inputs[0], *heads)?,
            Op::Conv2d(spec) | Op::Conv2dRelu(spec) => {
                spec.infer(&inputs[0], &inputs[1], &inputs[2])?
            }
            Op::Pool(spec) => spec.infer(&inputs[0])?,
            Op::BatchNormEval { channels, eps } => norm::infer_batch_norm(*channels, *eps, inputs)?,
            Op::BatchNormTrain { channels, eps } => norm::infer_batch_norm_train(
                *channels,
                eps.unwrap_or(BATCH_NORM_DEFAULT_EPS),
                inputs,
            )?,
            Op::Concat { axis } => layout::infer_concat(*axis, inputs)?,
            Op::Embedding => layout::infer_embedding(&inputs[0], &inputs[1])?,
            Op::MseLoss => {
                elementwise::infer_same(name, &inputs[0], &inputs[1])?;
                Shape::scalar()
            }
            Op::CrossEntropy { .. } => reduce::infer_cross_entropy(&inputs[0], &inputs[1])?,
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

    /// Engine workspace of one application in `pass`, in elements, for operands and output of these
    /// (validated) shapes: what a forward or VJP allocates besides its output and its operands'
    /// gradients (the convolution's patch matrices, [`Conv2dSpec::workspace_elements`]). The
    /// memory budget ([`crate::budget`]) adds it to each node's value and gradient. `linear`
    /// over few rows forms its output transposed first ([`linalg::linear_transposes_output`]);
    /// other products, pools, norms and layout ops allocate only their results.
    pub fn workspace_elements(&self, operands: &[Shape], out: &Shape, pass: Pass) -> usize {
        match (self, operands) {
            (Op::Linear, [x, w, ..]) => linalg::linear_workspace_elements(x, w),
            (Op::Conv2d(spec), [x, ..]) => spec.workspace_elements(x, out, pass),
            // and in the backward the masked cotangent (the composition's ReLU gradient; a
            // kernel may hold less, the CPU engine one group of images at a time)
            (Op::Conv2dRelu(spec), [x, ..]) => match pass {
                Pass::Eval => spec.workspace_elements(x, out, pass),
                Pass::Grad => spec
                    .workspace_elements(x, out, pass)
                    .saturating_add(out.size()),
            },
            // the scores of every head, which the composition holds (a kernel may need less)
            (Op::CausalAttention { heads }, [x, ..]) => {
                let d = AttentionDims::of(x, *heads);
                d.batch * d.heads * d.t * d.t
            }
            _ => 0,
        }
    }

    /// Validates the values of data operand `i` ([`OpDesc::data`]) of an op whose operands have
    /// these (valid) shapes: `cross_entropy`'s class ids. Other operands are not checked. The
    /// rule the dispatch applies on every engine, exposed for checks that run no engine (the
    /// IR's payload check).
    pub fn check_data(&self, i: usize, shapes: &[Shape], values: &[f64]) -> Result<()> {
        match self {
            Op::CrossEntropy { .. } if i == 1 => {
                let classes = shapes.first().and_then(|s| s.dims().get(1)).copied();
                reduce::class_ids(values, classes.unwrap_or(0)).map(drop)
            }
            Op::Embedding if i == 0 => {
                let rows = shapes.get(1).and_then(|s| s.dims().first()).copied();
                embedding_ids(values, rows.unwrap_or(0)).map(drop)
            }
            _ => Ok(()),
        }
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

    /// The forward computation on any backend: validates with the shape rule, then calls the
    /// family's kernel with the output shape.
    pub fn forward<B: Backend>(&self, args: &[&B]) -> std::result::Result<B, B::Error> {
        // the elementwise family on its one operand: the output takes the operand's (already
        // valid) shape, so the rule is not evaluated (`identity_rule`)
        if let (true, [x]) = (self.identity_rule(), args) {
            return match self {
                Op::Unary(u) => B::unary(*u, x),
                Op::Scale { c } => B::scale(x, *c),
                Op::AddScalar { c } => B::add_scalar(x, *c),
                _ => B::relabel(x, x.shape_of()),
            };
        }
        let shapes: SmallVec<[Shape; 3]> = args.iter().map(|a| a.shape_of().clone()).collect();
        let out = self.infer_shape(&shapes)?;
        let a = args;
        match self {
            Op::Unary(u) => B::unary(*u, a[0]),
            Op::Binary(b) => B::binary(*b, a[0], a[1]),
            Op::Scale { c } => B::scale(a[0], *c),
            Op::AddScalar { c } => B::add_scalar(a[0], *c),
            Op::Clamp { min, max } => B::clamp(a[0], *min, *max),
            Op::Detach => B::relabel(a[0], &out),
            Op::Softmax { axis } => B::softmax(a[0], *axis, false),
            Op::LogSoftmax { axis } => B::softmax(a[0], *axis, true),
            Op::LayerNorm { axis, eps } => {
                B::layer_norm(a[0], *axis, eps.unwrap_or(LAYER_NORM_DEFAULT_EPS))
            }
            Op::BroadcastTo { .. } => B::broadcast(a[0], &out),
            Op::Reshape { .. } | Op::Flatten { .. } => B::relabel(a[0], &out),
            Op::Permute { .. }
            | Op::SwapFirstTwo
            | Op::Transpose3dLastTwo
            | Op::Transpose { .. } => B::permute(a[0], &self.permutation(&shapes[0])?, &out),
            Op::Slice { axis, start, .. } => B::slice(a[0], *axis, *start, &out),
            Op::ReduceSum { axis } => B::reduce_axis(a[0], *axis, false, &out),
            Op::ReduceMean { axis } => B::reduce_axis(a[0], *axis, true, &out),
            Op::Sum => B::sum_all(a[0]),
            Op::MatMul => B::matmul(a[0], a[1], &out),
            Op::Linear => B::linear(a[0], a[1], a[2], &out),
            Op::CausalAttention { heads } => B::causal_attention(a[0], *heads, &out),
            Op::Conv2d(spec) => B::conv2d(spec, a[0], a[1], a[2], &out),
            Op::Conv2dRelu(spec) => B::conv2d_relu(spec, a[0], a[1], a[2], &out),
            Op::Pool(spec) => B::pool(spec, a[0], &out),
            Op::BatchNormEval { eps, .. } => B::batch_norm([a[0], a[1], a[2], a[3], a[4]], *eps),
            Op::BatchNormTrain { eps, .. } => {
                B::batch_norm_train(a[0], a[1], a[2], eps.unwrap_or(BATCH_NORM_DEFAULT_EPS))
            }
            Op::Concat { axis } => B::concat(a, *axis, &out),
            Op::Embedding => {
                let ids = embedding_ids(&B::values_f64(a[0])?, shapes[1].dims()[0])?;
                B::gather_rows(a[1], &ids, &out)
            }
            Op::MseLoss => B::mse_loss(a[0], a[1]),
            Op::CrossEntropy { reduction } => {
                let ids = reduce::class_ids(&B::values_f64(a[1])?, shapes[0].dims()[1])?;
                B::cross_entropy(a[0], &ids, *reduction == Reduction::Mean)
            }
            Op::RandUniform { seed, key, .. } => B::rand_uniform(*seed, *key, &out),
            Op::BernoulliMask { seed, key, .. } => B::bernoulli_mask(*seed, *key, a[0], &out),
        }
    }

    /// The VJP on any backend: one cotangent per operand (`None` = structurally zero), reading
    /// only what the op saves. Validates the saved shapes with the shape rule, the cotangent's
    /// shape, and the shape of every saved value it reads.
    pub fn vjp<B: Backend>(
        &self,
        saved: &Saved<impl Borrow<B>>,
        cot: &B,
    ) -> std::result::Result<Cotangents<B>, B::Error> {
        self.vjp_for(saved, cot, &|_| true)
    }

    /// [`Op::vjp`] where only the operands `i` with `needs(i)` need a cotangent: the others may
    /// come back `None` (a sweep passes the operands whose gradient reaches nothing it keeps,
    /// such as a model input that does not require grad). The cotangents that are returned
    /// are exactly [`Op::vjp`]'s. Engines skip work through the `_for` methods of [`Backend`]
    /// (the input gradient of `linear` and `conv2d`); every other op returns all of them.
    #[inline]
    pub fn vjp_for<B: Backend>(
        &self,
        saved: &Saved<impl Borrow<B>>,
        cot: &B,
        needs: &dyn Fn(usize) -> bool,
    ) -> std::result::Result<Cotangents<B>, B::Error> {
        use smallvec::smallvec;
        let inferred;
        let out: &Shape = match saved.input_shapes.as_slice() {
            [x] if self.identity_rule() => x,
            shapes => {
                inferred = self.infer_shape(shapes)?;
                &inferred
            }
        };
        if cot.shape_of() != out {
            return Err(SpecError::OpShape {
                op: self.name(),
                shapes: vec![out.clone(), cot.shape_of().clone()],
                reason: "the cotangent must have the output's shape".into(),
            }
            .into());
        }
        let s = saved;
        let one = |t: B| -> std::result::Result<Cotangents<B>, B::Error> { Ok(smallvec![Some(t)]) };
        match self {
            Op::Unary(u) => one(B::unary_vjp(
                *u,
                s.maybe_input(self, 0)?,
                s.maybe_output(self, out)?,
                cot,
            )?),
            Op::Binary(b) => {
                let (da, db) =
                    B::binary_vjp(*b, s.maybe_input(self, 0)?, s.maybe_input(self, 1)?, cot)?;
                Ok(smallvec![Some(da), Some(db)])
            }
            Op::Scale { c } => one(B::scale(cot, *c)?),
            Op::AddScalar { .. } => one(B::relabel(cot, out)?),
            Op::Clamp { min, max } => one(B::clamp_vjp(s.input(self, 0)?, cot, *min, *max)?),
            Op::Detach => Ok(smallvec![None]),
            Op::Softmax { axis } => one(B::softmax_vjp(s.output(self, out)?, cot, *axis, false)?),
            Op::LogSoftmax { axis } => one(B::softmax_vjp(s.output(self, out)?, cot, *axis, true)?),
            Op::LayerNorm { axis, eps } => one(B::layer_norm_vjp(
                s.input(self, 0)?,
                cot,
                *axis,
                eps.unwrap_or(LAYER_NORM_DEFAULT_EPS),
            )?),
            Op::BroadcastTo { from, .. } => one(B::broadcast_vjp(cot, from)?),
            Op::Reshape { .. } | Op::Flatten { .. } => one(B::relabel(cot, s.shape(self, 0)?)?),
            Op::Permute { .. }
            | Op::SwapFirstTwo
            | Op::Transpose3dLastTwo
            | Op::Transpose { .. } => {
                let in_shape = s.shape(self, 0)?;
                let perm = layout::inverse(&self.permutation(in_shape)?);
                one(B::permute(cot, &perm, in_shape)?)
            }
            Op::Slice { axis, start, .. } => {
                one(B::slice_vjp(cot, s.shape(self, 0)?, *axis, *start)?)
            }
            Op::ReduceSum { axis } => one(B::spread(cot, s.shape(self, 0)?, *axis, false)?),
            Op::ReduceMean { axis } => one(B::spread(cot, s.shape(self, 0)?, *axis, true)?),
            Op::Sum => one(B::sum_all_vjp(cot, s.shape(self, 0)?)?),
            Op::MatMul => {
                let (da, db) = B::matmul_vjp(s.input(self, 0)?, s.input(self, 1)?, cot)?;
                Ok(smallvec![Some(da), Some(db)])
            }
            Op::Linear => {
                let (dx, dw, db) =
                    B::linear_vjp_for(s.input(self, 0)?, s.input(self, 1)?, cot, needs(0))?;
                Ok(smallvec![dx, Some(dw), Some(db)])
            }
            Op::CausalAttention { heads } => {
                one(B::causal_attention_vjp(s.input(self, 0)?, *heads, cot)?)
            }
            Op::Conv2d(spec) => {
                let (dx, dw, db) =
                    B::conv2d_vjp_for(spec, s.input(self, 0)?, s.input(self, 1)?, cot, needs(0))?;
                Ok(smallvec![dx, Some(dw), Some(db)])
            }
            Op::Conv2dRelu(spec) => {
                let (x, w, y) = (s.input(self, 0)?, s.input(self, 1)?, s.output(self, out)?);
                let (dx, dw, db) = B::conv2d_relu_vjp_for(spec, x, w, y, cot, needs(0))?;
                Ok(smallvec![dx, Some(dw), Some(db)])
            }
            Op::Pool(spec) => one(match spec.kind {
                PoolKind::Max => B::max_pool_vjp(spec, s.input(self, 0)?, cot)?,
                PoolKind::Avg => B::avg_pool_vjp(spec, s.shape(self, 0)?, cot)?,
            }),
            Op::BatchNormEval { eps, .. } => {
                let saved = [
                    s.input(self, 0)?,
                    s.input(self, 1)?,
                    s.input(self, 3)?,
                    s.input(self, 4)?,
                ];
                let grads = B::batch_norm_vjp(saved, cot, *eps)?;
                Ok(grads.into_iter().map(Some).collect())
            }
            Op::BatchNormTrain { eps, .. } => {
                let eps = eps.unwrap_or(BATCH_NORM_DEFAULT_EPS);
                let saved = [s.input(self, 0)?, s.input(self, 1)?];
                let grads = B::batch_norm_train_vjp(saved, cot, eps)?;
                Ok(grads.into_iter().map(Some).collect())
            }
            Op::Concat { axis } => Ok(B::concat_vjp(cot, &s.input_shapes, *axis)?
                .into_iter()
                .map(Some)
                .collect()),
            Op::MseLoss => {
                let (da, db) = B::mse_loss_vjp(s.input(self, 0)?, s.input(self, 1)?, cot)?;
                Ok(smallvec![Some(da), Some(db)])
            }
            Op::Embedding => {
                let table = &s.input_shapes[1];
                let ids = embedding_ids(&B::values_f64(s.input(self, 0)?)?, table.dims()[0])?;
                Ok(smallvec![None, Some(B::gather_rows_vjp(cot, &ids, table)?)])
            }
            Op::CrossEntropy { reduction } => {
                let logits = s.input(self, 0)?;
                let classes = logits.shape_of().dims()[1];
                let ids = reduce::class_ids(&B::values_f64(s.input(self, 1)?)?, classes)?;
                let mean = *reduction == Reduction::Mean;
                let dx = B::cross_entropy_vjp(logits, &ids, cot, mean)?;
                Ok(smallvec![Some(dx), None])
            }
            Op::RandUniform { .. } => Ok(Operands::new()),
            Op::BernoulliMask { .. } => Ok(smallvec![None]),
        }
    }
}

/// `embedding`'s ids: integral and in `[0, rows)` ([`SpecError::BadId`] otherwise).
pub fn embedding_ids(values: &[f64], rows: usize) -> Result<Vec<usize>> {
    reduce::ids_below(desc::EMBEDDING.name, "ids", "row id", values, rows)
}

#[cfg(test)]
mod tests;
