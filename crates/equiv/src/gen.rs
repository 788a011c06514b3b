//! Random well-formed IR graphs with consistent shapes, payloads and inputs.
//!
//! A graph is *interpreted* from a vector of random choices ([`Choices`]): every decision (which
//! kind next, which parent, which axis, which value) reads the next choice, and an exhausted
//! vector reads 0, the simplest decision. Proptest shrinks the vector, so a failing graph shrinks
//! to a small one for free, and every prefix of choices still builds a valid graph.
//!
//! Graphs are DAGs with fan-out, repeated parents, `detach`, broadcasting, reshapes, reductions,
//! matmul/linear/conv chains, causal attention, pools, batch norm, concat and the random kinds;
//! a binary op's second operand is sometimes a new graph input, so graphs take one input or
//! several. Values lie on the grid `k/96` (not dyadic, so float sums round and accumulation
//! order is observable; exact in the rationals after conversion). Inputs of `log`, `sqrt`, `inv`
//! and divisors are made positive by construction (`abs(x) + c` with `c ≥ 1/2`).
//! [`GenConfig::algebraic`] restricts the kinds to those exact over the rationals.

use crate::regime::{targets, Regime, Target};
use proptest::prelude::*;
use torchlean_ir::{Graph, Node, OpKind, Payload};
use torchlean_spec::ops::desc;
use torchlean_spec::ops::desc::CheckRegime;
use torchlean_spec::ops::{AttrMut, AttrVisitor};
use torchlean_spec::{
    BinaryOp, Conv2dSpec, Op, PoolKind, PoolSpec, Reduction, Shape, Tensor, UnaryOp,
};

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenConfig {
    /// Upper bound on op steps (each may add a few adapter nodes).
    pub max_steps: usize,
    /// Only kinds that are exact over the rational scalar.
    pub algebraic: bool,
}

impl GenConfig {
    pub const FLOAT: GenConfig = GenConfig {
        max_steps: 8,
        algebraic: false,
    };
    pub const ALGEBRAIC: GenConfig = GenConfig {
        max_steps: 8,
        algebraic: true,
    };
}

/// A generated graph with everything needed to run it.
#[derive(Clone, Debug)]
pub struct GenCase {
    pub graph: Graph,
    pub payload: Payload,
    /// One tensor per graph input, in input order.
    pub inputs: Vec<Tensor<f64>>,
}

impl GenCase {
    /// Wire names of the kinds in the graph (each once).
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut k: Vec<&'static str> = self.graph.nodes.iter().map(|n| n.kind.name()).collect();
        k.sort_unstable();
        k.dedup();
        k
    }
}

/// A cursor over random choices; reads 0 once exhausted.
#[derive(Debug)]
pub struct Choices<'a> {
    data: &'a [u32],
    pos: usize,
}

impl<'a> Choices<'a> {
    pub fn new(data: &'a [u32]) -> Self {
        Choices { data, pos: 0 }
    }

    /// A choice in `0..n` (0 when `n == 0` or exhausted).
    pub fn pick(&mut self, n: usize) -> usize {
        let v = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        if n == 0 {
            0
        } else {
            v as usize % n
        }
    }

    /// True with probability about `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.pick(n.max(1)) == n.max(1) - 1
    }

    /// A value on the grid `k/96`, `k ∈ -128..=128`.
    pub fn value(&mut self) -> f64 {
        (self.pick(257) as f64 - 128.0) / 96.0
    }
}

/// The proptest strategy: choices, interpreted by [`build`].
pub fn arb_case(cfg: GenConfig) -> impl Strategy<Value = GenCase> {
    prop::collection::vec(any::<u32>(), 16..160).prop_map(move |c| build(cfg, &c))
}

/// Builds a graph from choices. Total: any choice vector gives a well-formed, shape-correct graph
/// with a complete payload.
pub fn build(cfg: GenConfig, choices: &[u32]) -> GenCase {
    build_targeted(cfg, &[], choices)
}

/// How many `(kind, regime)` pairs one case of the round-robin is built around.
pub const TARGETS_PER_CASE: usize = 3;

/// The round-robin of a run: the pairs of [`targets`] the generator can build under `cfg`
/// (each kind at all, then every special regime; `input` and `const` appear in every graph
/// anyway), [`TARGETS_PER_CASE`] per case. A run's first cases are built from these, so every
/// pair is covered as soon as the budget reaches `schedule(cfg).len()` cases.
pub fn schedule(cfg: GenConfig) -> Vec<Vec<Target>> {
    let steps = allowed_steps(cfg);
    let pairs: Vec<Target> = targets()
        .into_iter()
        .filter(|&t| step_for(t, &steps).is_some())
        .collect();
    pairs
        .chunks(TARGETS_PER_CASE)
        .map(<[Target]>::to_vec)
        .collect()
}

/// [`build`], with the first steps forced: one per target, each building its kind in its
/// regime whatever the choices (so shrinking keeps them), chained on the latest node; then
/// half as many random steps as an untargeted case. A target no step builds is skipped.
pub fn build_targeted(cfg: GenConfig, targets: &[Target], choices: &[u32]) -> GenCase {
    let mut c = Choices::new(choices);
    let mut b = Builder::new();
    let rank = 1 + c.pick(3);
    let dims: Vec<usize> = (0..rank).map(|_| 1 + c.pick(4)).collect();
    let in_shape = Shape::new(dims);
    let input = tensor_of(&mut c, &in_shape);
    b.push(OpKind::Input, vec![], in_shape);
    let kinds = allowed_steps(cfg);
    for &t in targets {
        if let Some(step) = step_for(t, &kinds) {
            let x = b.graph.nodes.len() - 1;
            b.forced_step(&mut c, step, t, x);
        }
    }
    let steps = 1 + c.pick(cfg.max_steps);
    let steps = if targets.is_empty() { steps } else { steps / 2 };
    for _ in 0..steps {
        let step = kinds[c.pick(kinds.len())];
        // a parent, biased towards recent nodes (long chains) but able to fan out
        let n = b.graph.nodes.len();
        let parent = if c.one_in(3) { c.pick(n) } else { n - 1 };
        b.step(&mut c, step, parent);
    }
    let output_id = b.graph.nodes.len() - 1;
    b.graph.output_id = output_id;
    let mut inputs = vec![input];
    inputs.append(&mut b.extra_inputs);
    GenCase {
        graph: b.graph,
        payload: b.payload,
        inputs,
    }
}

/// The steps `cfg` draws from.
fn allowed_steps(cfg: GenConfig) -> Vec<Step> {
    all_steps()
        .into_iter()
        .filter(|s| !cfg.algebraic || s.is_algebraic())
        .collect()
}

/// The step that builds `t`'s kind (in the regime the builder is then forced to).
fn step_for(t: Target, steps: &[Step]) -> Option<Step> {
    steps.iter().copied().find(|s| s.kinds().contains(&t.kind))
}

/// `op` with every attribute that has a default moved off it: a choice to another option, a
/// number to a dyadic grid value other than the default.
fn off_defaults(op: &mut Op, c: &mut Choices<'_>) {
    struct Off<'c, 'a>(&'c mut Choices<'a>);
    impl AttrVisitor for Off<'_, '_> {
        fn visit(&mut self, _key: &'static str, value: AttrMut<'_>) {
            match value {
                AttrMut::Choice {
                    value,
                    options,
                    default,
                } => {
                    let others: Vec<&'static str> =
                        options.iter().copied().filter(|o| *o != default).collect();
                    if !others.is_empty() {
                        *value = others[self.0.pick(others.len())];
                    }
                }
                AttrMut::FloatOr { value, default } => {
                    // dyadic (k/64 in [-2, 2]): exact over the rationals with a small
                    // denominator, so exact runs stay cheap
                    let v = (self.0.pick(257) as f64 - 128.0) / 64.0;
                    *value = if v == default { v + 0.5 } else { v };
                }
                _ => {}
            }
        }
    }
    op.visit_attrs(&mut Off(c));
}

fn tensor_of(c: &mut Choices<'_>, shape: &Shape) -> Tensor<f64> {
    let n = shape.size();
    let data: Vec<f64> = (0..n).map(|_| c.value()).collect();
    // invariant: shapes built here are small and the data has exactly `size` elements
    Tensor::new(shape.clone(), data).expect("generated tensor")
}

/// A generation step: a kind (or family) to add next.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Scale,
    AddScalar,
    Clamp,
    Detach,
    Softmax,
    LogSoftmax,
    LayerNorm,
    Broadcast,
    Reshape,
    Flatten,
    Permute,
    SwapFirstTwo,
    Transpose3d,
    Transpose,
    Slice,
    ReduceSum,
    ReduceMean,
    Sum,
    MatMul,
    Linear,
    CausalAttention,
    Conv2d,
    Pool(PoolKind),
    BatchNorm,
    BatchNormTrain,
    Concat,
    MseLoss,
    CrossEntropy,
    Embedding,
    RandUniform,
    Bernoulli,
}

/// Every step: each unary and binary function, then the other families.
fn all_steps() -> Vec<Step> {
    let mut steps: Vec<Step> = UnaryOp::ALL.iter().map(|&u| Step::Unary(u)).collect();
    steps.extend(BinaryOp::ALL.iter().map(|&b| Step::Binary(b)));
    steps.extend([
        Step::Scale,
        Step::AddScalar,
        Step::Clamp,
        Step::Detach,
        Step::Softmax,
        Step::LogSoftmax,
        Step::LayerNorm,
        Step::Broadcast,
        Step::Reshape,
        Step::Flatten,
        Step::Permute,
        Step::SwapFirstTwo,
        Step::Transpose3d,
        Step::Transpose,
        Step::Slice,
        Step::ReduceSum,
        Step::ReduceMean,
        Step::Sum,
        Step::MatMul,
        Step::Linear,
        Step::CausalAttention,
        Step::Conv2d,
        Step::Pool(PoolKind::Max),
        Step::Pool(PoolKind::Avg),
        Step::BatchNorm,
        Step::BatchNormTrain,
        Step::Concat,
        Step::MseLoss,
        Step::CrossEntropy,
        Step::Embedding,
        Step::RandUniform,
        Step::Bernoulli,
    ]);
    steps
}

impl Step {
    /// The kinds of the node the step is about (adapters aside).
    fn kinds(self) -> Vec<&'static str> {
        let one = |d: &'static desc::OpDesc| vec![d.name];
        match self {
            Step::Unary(u) => vec![Op::Unary(u).name()],
            Step::Binary(b) => vec![b.name()],
            Step::Scale => one(&desc::SCALE),
            Step::AddScalar => one(&desc::ADD_SCALAR),
            Step::Clamp => one(&desc::CLAMP),
            Step::Detach => one(&desc::DETACH),
            Step::Softmax => one(&desc::SOFTMAX),
            Step::LogSoftmax => one(&desc::LOG_SOFTMAX),
            Step::LayerNorm => one(&desc::LAYERNORM),
            Step::Broadcast => one(&desc::BROADCAST_TO),
            Step::Reshape => one(&desc::RESHAPE),
            Step::Flatten => one(&desc::FLATTEN),
            Step::Permute => one(&desc::PERMUTE),
            Step::SwapFirstTwo => one(&desc::SWAP_FIRST_TWO),
            Step::Transpose3d => one(&desc::TRANSPOSE3D_LAST_TWO),
            Step::Transpose => one(&desc::TRANSPOSE),
            Step::Slice => one(&desc::SLICE),
            Step::ReduceSum => one(&desc::REDUCE_SUM),
            Step::ReduceMean => one(&desc::REDUCE_MEAN),
            Step::Sum => one(&desc::SUM),
            Step::MatMul => one(&desc::MATMUL),
            Step::Linear => one(&desc::LINEAR),
            Step::CausalAttention => one(&desc::CAUSAL_ATTENTION),
            Step::Conv2d => vec![desc::CONV2D.name, desc::CONV2D_RELU.name],
            Step::Pool(PoolKind::Max) => vec![desc::MAX_POOL2D.name, desc::MAX_POOL2D_PAD.name],
            Step::Pool(PoolKind::Avg) => vec![desc::AVG_POOL2D.name, desc::AVG_POOL2D_PAD.name],
            Step::BatchNorm => one(&desc::BATCH_NORM2D_NCHW_EVAL),
            Step::BatchNormTrain => one(&desc::BATCH_NORM2D_NCHW_TRAIN),
            Step::Concat => one(&desc::CONCAT),
            Step::MseLoss => one(&desc::MSE_LOSS),
            Step::CrossEntropy => one(&desc::CROSS_ENTROPY),
            Step::Embedding => one(&desc::EMBEDDING),
            Step::RandUniform => one(&desc::RAND_UNIFORM),
            Step::Bernoulli => one(&desc::BERNOULLI_MASK),
        }
    }

    /// The rank a forced step's operand is brought to first: at least `.0`, exactly `.1`.
    fn operand_rank(self, t: Target) -> (usize, Option<usize>) {
        match self {
            Step::SwapFirstTwo | Step::Transpose => (2, None),
            Step::Transpose3d => (3, Some(3)),
            Step::MatMul if t.regime == Regime::Row(CheckRegime::BatchedSquareRhs) => (3, Some(3)),
            Step::Softmax
            | Step::LogSoftmax
            | Step::LayerNorm
            | Step::Slice
            | Step::Linear
            | Step::Concat
            | Step::ReduceSum
            | Step::ReduceMean
            | Step::Permute => (1, None),
            _ => (0, None),
        }
    }

    /// Whether the step's kinds are exact over the rational scalar.
    fn is_algebraic(self) -> bool {
        match self {
            Step::Unary(u) => u.is_algebraic(),
            Step::Softmax
            | Step::LogSoftmax
            | Step::LayerNorm
            | Step::BatchNorm
            | Step::BatchNormTrain
            | Step::CrossEntropy
            | Step::CausalAttention => false,
            _ => true,
        }
    }
}

/// Largest tensor the generator creates (elements).
const MAX_ELEMS: usize = 96;

struct Builder {
    graph: Graph,
    payload: Payload,
    /// The values of the graph inputs after the first ([`Graph::extra_inputs`]), in order.
    extra_inputs: Vec<Tensor<f64>>,
    /// The target of the step being forced, if any.
    target: Option<Target>,
}

impl Builder {
    fn new() -> Self {
        Builder {
            graph: Graph::new(0, 0, Vec::new()),
            payload: Payload::new(),
            extra_inputs: Vec::new(),
            target: None,
        }
    }

    /// Whether the step being built is forced into `r`.
    fn forcing(&self, r: Regime) -> bool {
        self.target.is_some_and(|t| t.regime == r)
    }

    /// The kind the step being built is forced to, if any.
    fn forced_kind(&self) -> Option<&'static str> {
        self.target.map(|t| t.kind)
    }

    /// Builds `step` on `x` in `t`'s regime: the operand first made small (at most 24
    /// elements, so that concatenations and broadcasts fit) and of the rank the step needs.
    fn forced_step(&mut self, c: &mut Choices<'_>, step: Step, t: Target, x: usize) {
        let mut x = x;
        while self.shape(x).size() > 24 && self.shape(x).rank() > 1 {
            x = self.push_op(Op::ReduceSum { axis: 0 }, vec![x], vec![]);
        }
        let s = self.shape(x);
        let (min, exact) = step.operand_rank(t);
        let rank = exact.unwrap_or(s.rank().max(min));
        if s.rank() != rank {
            let mut dims = vec![1; rank.saturating_sub(1)];
            dims.push(s.size());
            x = self.reshape(x, Shape::new(dims));
        }
        self.target = Some(t);
        self.step(c, step, x);
        self.target = None;
    }

    /// `x` itself when it has at least two elements, else `linear` of it to two features.
    fn at_least_two(&mut self, c: &mut Choices<'_>, x: usize) -> usize {
        let size = self.shape(x).size();
        if size >= 2 {
            return x;
        }
        let flat = self.reshape(x, Shape::from([1, size.max(1)]));
        self.linear_to(c, flat, 2)
    }

    fn shape(&self, id: usize) -> Shape {
        self.graph.nodes[id].shape.clone()
    }

    fn push(&mut self, kind: impl Into<OpKind>, parents: Vec<usize>, shape: Shape) -> usize {
        let id = self.graph.nodes.len();
        self.graph.nodes.push(Node {
            id,
            kind: kind.into(),
            parents,
            shape,
        });
        id
    }

    /// Appends `op` on `parents` with its payload tensors, its declared shape computed by the
    /// op's own shape rule (never by a formula of the generator's).
    fn push_op(&mut self, op: Op, parents: Vec<usize>, payload: Vec<(&str, Tensor<f64>)>) -> usize {
        let mut shapes: Vec<Shape> = parents.iter().map(|&p| self.shape(p)).collect();
        shapes.extend(payload.iter().map(|(_, t)| t.shape().clone()));
        // invariant: every step builds operands its op accepts (the tests build thousands)
        let out = op
            .infer_shape(&shapes)
            .unwrap_or_else(|e| panic!("generated {} is ill-shaped: {e}", op.name()));
        let id = self.push(op, parents, out);
        for (name, t) in payload {
            self.payload.insert(id, name, t);
        }
        id
    }

    /// A `const` node of `shape` with values from the choices (`offset` added to each).
    fn constant(&mut self, c: &mut Choices<'_>, shape: &Shape, positive: bool) -> usize {
        let mut t = tensor_of(c, shape);
        if positive {
            for v in t.data_mut() {
                *v = v.abs() + 0.5;
            }
        }
        self.const_of(t)
    }

    /// A `const` node holding `t`.
    fn const_of(&mut self, t: Tensor<f64>) -> usize {
        let shape = t.shape().clone();
        let id = self.push(
            OpKind::Const {
                value_shape: Some(shape.clone()),
            },
            vec![],
            shape,
        );
        self.payload.insert(id, "value", t);
        id
    }

    /// `abs(x) + c` with `c ≥ 1/2`: strictly positive.
    fn positive(&mut self, c: &mut Choices<'_>, x: usize) -> usize {
        let a = self.push_op(Op::Unary(UnaryOp::Abs), vec![x], vec![]);
        let k = self.constant(c, &self.shape(x), true);
        self.push_op(Op::Binary(BinaryOp::Add), vec![a, k], vec![])
    }

    /// An existing node with shape `s` other than `not`, or a new graph input, or a new
    /// constant.
    fn partner(&mut self, c: &mut Choices<'_>, s: &Shape, not: usize) -> usize {
        let same: Vec<usize> = self
            .graph
            .nodes
            .iter()
            .filter(|n| &n.shape == s && n.id != not)
            .map(|n| n.id)
            .collect();
        if !same.is_empty() && !c.one_in(3) {
            same[c.pick(same.len())]
        } else if c.one_in(3) {
            self.new_input(c, s)
        } else {
            self.constant(c, s, false)
        }
    }

    /// A new graph input of shape `s` (listed in `extra_inputs`), its value from the choices.
    fn new_input(&mut self, c: &mut Choices<'_>, s: &Shape) -> usize {
        let value = tensor_of(c, s);
        let id = self.push(OpKind::Input, vec![], s.clone());
        self.graph.extra_inputs.push(id);
        self.extra_inputs.push(value);
        id
    }

    fn reshape(&mut self, x: usize, to: Shape) -> usize {
        let from = self.shape(x);
        if from == to {
            return x;
        }
        self.push_op(Op::Reshape { from, to }, vec![x], vec![])
    }

    /// `x` carried to an image `[C,H,W]` or `[N,C,H,W]` through `linear`: flatten to
    /// `[1, size]`, project to `[1, n·c·h·w]`, reshape.
    fn image(&mut self, c: &mut Choices<'_>, x: usize, batched: bool, channels: usize) -> usize {
        let size = self.shape(x).size().max(1);
        let flat = if self.shape(x).size() == 0 {
            // an empty tensor cannot be projected; start from a constant instead
            self.constant(c, &Shape::from([1, 1]), false)
        } else {
            self.reshape(x, Shape::from([1, size]))
        };
        let n = if batched { 1 + c.pick(2) } else { 1 };
        let (h, w) = (2 + c.pick(3), 2 + c.pick(3));
        let proj = self.linear_to(c, flat, n * channels * h * w);
        let dims = if batched {
            vec![n, channels, h, w]
        } else {
            vec![channels, h, w]
        };
        self.reshape(proj, Shape::new(dims))
    }

    /// `linear` from `x`'s last axis to `out` features, weights from the choices.
    fn linear_to(&mut self, c: &mut Choices<'_>, x: usize, out: usize) -> usize {
        let inp = self.shape(x).dims().last().copied().unwrap_or(1);
        let w = tensor_of(c, &Shape::from([out, inp]))
            .map(|v| Ok(v / 2.0))
            .expect("scaling");
        let bias = tensor_of(c, &Shape::from([out]));
        self.push_op(Op::Linear, vec![x], vec![("weight", w), ("bias", bias)])
    }

    fn step(&mut self, c: &mut Choices<'_>, step: Step, x: usize) {
        let rank = self.shape(x).rank();
        match step {
            Step::Unary(u) => self.unary(c, u, x),
            Step::Binary(op) => self.binary(c, op, x),
            Step::Scale | Step::AddScalar | Step::Clamp | Step::Detach => {
                self.scalar_family(c, step, x)
            }
            Step::Softmax | Step::LogSoftmax | Step::LayerNorm if rank > 0 => {
                self.normalise(c, step, x)
            }
            Step::Broadcast => self.broadcast(c, x),
            Step::Reshape | Step::Flatten => self.reshape_family(c, step, x),
            Step::Permute | Step::SwapFirstTwo | Step::Transpose3d | Step::Transpose => {
                self.permute_family(c, step, x)
            }
            Step::ReduceSum | Step::ReduceMean | Step::Sum | Step::MseLoss => {
                self.reduce_family(c, step, x)
            }
            Step::Slice if rank > 0 => self.slice(c, x),
            Step::CrossEntropy => self.cross_entropy(c, x),
            Step::Embedding => self.embedding(c, x),
            Step::MatMul => self.matmul(c, x),
            Step::Linear if rank > 0 => self.linear(c, x),
            Step::CausalAttention => self.causal_attention(c, x),
            Step::Conv2d => self.conv(c, x),
            Step::Pool(kind) => self.pool(c, kind, x),
            Step::BatchNorm => self.batch_norm(c, x),
            Step::BatchNormTrain => self.batch_norm_train(c, x),
            Step::Concat if rank > 0 => self.concat(c, x),
            Step::RandUniform | Step::Bernoulli => self.random(c, step, x),
            // a step whose rank condition failed: a neutral elementwise op instead
            _ => {
                self.push_op(Op::Unary(UnaryOp::Relu), vec![x], vec![]);
            }
        }
    }

    /// `u` on `x`, its attributes at their defaults or off them (as the regime being forced
    /// asks, else at random).
    fn unary(&mut self, c: &mut Choices<'_>, u: UnaryOp, x: usize) {
        let arg = match u {
            UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Inv => self.positive(c, x),
            _ => x,
        };
        let mut op = Op::Unary(u);
        if op.desc().has_defaults() {
            let off = match self.target.map(|t| t.regime) {
                Some(Regime::Default) => false,
                Some(Regime::Explicit) => true,
                _ => c.one_in(2),
            };
            if off {
                off_defaults(&mut op, c);
            } else {
                op = op.desc().prototype().unwrap_or(op);
            }
        }
        self.push_op(op, vec![arg], vec![]);
    }

    fn binary(&mut self, c: &mut Choices<'_>, op: BinaryOp, x: usize) {
        let s = self.shape(x);
        if op == BinaryOp::Div {
            let rhs = self.partner(c, &s, x);
            let rhs = self.positive(c, rhs);
            self.push_op(Op::Binary(op), vec![x, rhs], vec![]);
            return;
        }
        let rhs = if c.one_in(5) || self.forcing(Regime::Row(CheckRegime::RepeatedParent)) {
            x // repeated parent
        } else {
            self.partner(c, &s, x)
        };
        let parents = if c.one_in(2) {
            vec![rhs, x]
        } else {
            vec![x, rhs]
        };
        self.push_op(Op::Binary(op), parents, vec![]);
    }

    fn scalar_family(&mut self, c: &mut Choices<'_>, step: Step, x: usize) {
        match step {
            Step::Scale => {
                let v = c.value();
                self.push_op(Op::Scale { c: v }, vec![x], vec![]);
            }
            Step::AddScalar => {
                let v = c.value();
                self.push_op(Op::AddScalar { c: v }, vec![x], vec![]);
            }
            Step::Clamp => {
                // bounds on the values' grid (so inputs land exactly on them), `min <= max`,
                // either one possibly absent
                let (a, b) = (c.value(), c.value());
                let (lo, hi) = (a.min(b), a.max(b));
                let (min, max) = match c.pick(3) {
                    0 => (Some(lo), Some(hi)),
                    1 => (Some(lo), None),
                    _ => (None, Some(hi)),
                };
                self.push_op(Op::Clamp { min, max }, vec![x], vec![]);
            }
            _ => {
                let d = self.push_op(Op::Detach, vec![x], vec![]);
                // keep the detached value in use next to the original
                self.push_op(Op::Binary(BinaryOp::Mul), vec![x, d], vec![]);
            }
        }
    }

    fn normalise(&mut self, c: &mut Choices<'_>, step: Step, x: usize) {
        let axis = c.pick(self.shape(x).rank());
        let op = match step {
            Step::Softmax => Op::Softmax { axis },
            Step::LogSoftmax => Op::LogSoftmax { axis },
            _ => Op::LayerNorm {
                axis,
                eps: match self.target.map(|t| t.regime) {
                    Some(Regime::Default) => None,
                    Some(Regime::Explicit) => Some(1e-5),
                    _ if c.one_in(2) => Some(1e-5),
                    _ => None,
                },
            },
        };
        self.push_op(op, vec![x], vec![]);
    }

    fn broadcast(&mut self, c: &mut Choices<'_>, x: usize) {
        if self.forcing(Regime::Row(CheckRegime::BroadcastLastAxis)) {
            // `[n, 1] → [n, k]`, n ≥ 2
            let x = self.at_least_two(c, x);
            let n = self.shape(x).size();
            let col = self.reshape(x, Shape::from([n, 1]));
            let to = Shape::from([n, 2 + c.pick(2)]);
            self.push_op(
                Op::BroadcastTo {
                    from: Shape::from([n, 1]),
                    to,
                },
                vec![col],
                vec![],
            );
            return;
        }
        if self.forcing(Regime::Row(CheckRegime::BroadcastLeadingAxes)) {
            let from = self.shape(x);
            let mut to = vec![2 + c.pick(2)];
            to.extend_from_slice(from.dims());
            self.push_op(
                Op::BroadcastTo {
                    from,
                    to: Shape::new(to),
                },
                vec![x],
                vec![],
            );
            return;
        }
        let s = self.shape(x);
        let mut to: Vec<usize> = s.dims().to_vec();
        // expand size-1 axes and/or prepend axes, within the size budget
        for d in to.iter_mut() {
            if *d == 1 && c.one_in(2) {
                *d = 2 + c.pick(2);
            }
        }
        for _ in 0..c.pick(3) {
            to.insert(0, 1 + c.pick(3));
        }
        if self.forced_kind().is_some()
            && (to == s.dims() || Shape::new(to.clone()).size() > MAX_ELEMS)
        {
            // forced (the operand has at most 24 elements): always a broadcast
            to = s.dims().to_vec();
            to.insert(0, 2);
        }
        let to = Shape::new(to);
        if to.size() <= MAX_ELEMS && to != s {
            self.push_op(Op::BroadcastTo { from: s, to }, vec![x], vec![]);
        } else {
            self.push_op(Op::Unary(UnaryOp::Neg), vec![x], vec![]);
        }
    }

    fn reshape_family(&mut self, c: &mut Choices<'_>, step: Step, x: usize) {
        let s = self.shape(x);
        if step == Step::Flatten {
            self.push_op(Op::Flatten { from: s }, vec![x], vec![]);
            return;
        }
        let size = s.size();
        let divisors: Vec<usize> = (1..=size.max(1))
            .filter(|d| size.is_multiple_of(*d))
            .collect();
        let a = divisors[c.pick(divisors.len())];
        let to = if c.one_in(2) {
            Shape::from([a, size / a.max(1)])
        } else {
            Shape::from([size / a.max(1), 1, a])
        };
        let to = if to.size() == size {
            to
        } else {
            Shape::from([size])
        };
        self.push_op(Op::Reshape { from: s, to }, vec![x], vec![]);
    }

    fn permute_family(&mut self, c: &mut Choices<'_>, step: Step, x: usize) {
        let rank = self.shape(x).rank();
        let op = match step {
            Step::Permute if rank > 0 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, c.pick(i + 1));
                }
                Op::Permute { perm }
            }
            Step::SwapFirstTwo if rank >= 2 => Op::SwapFirstTwo,
            Step::Transpose3d if rank == 3 => Op::Transpose3dLastTwo,
            Step::Transpose if rank >= 2 => Op::Transpose {
                dim0: c.pick(rank),
                dim1: c.pick(rank),
            },
            _ => Op::Unary(UnaryOp::Relu),
        };
        self.push_op(op, vec![x], vec![]);
    }

    fn slice(&mut self, c: &mut Choices<'_>, x: usize) {
        let s = self.shape(x);
        let axis = c.pick(s.rank());
        let extent = s.dims()[axis];
        // a non-empty window inside the extent (the engine suite covers empty slices)
        let len = 1 + c.pick(extent);
        let start = c.pick(extent - len + 1);
        self.push_op(Op::Slice { axis, start, len }, vec![x], vec![]);
    }

    fn reduce_family(&mut self, c: &mut Choices<'_>, step: Step, x: usize) {
        let s = self.shape(x);
        match step {
            Step::ReduceSum | Step::ReduceMean if s.rank() > 0 => {
                let axis = c.pick(s.rank());
                let op = if step == Step::ReduceSum {
                    Op::ReduceSum { axis }
                } else {
                    Op::ReduceMean { axis }
                };
                self.push_op(op, vec![x], vec![]);
            }
            Step::MseLoss => {
                let t = self.partner(c, &s, x);
                self.push_op(Op::MseLoss, vec![x, t], vec![]);
            }
            _ => {
                self.push_op(Op::Sum, vec![x], vec![]);
            }
        }
    }

    /// `x` as logits `[N, C]` (rows of its last axis), with valid integral class ids.
    fn cross_entropy(&mut self, c: &mut Choices<'_>, x: usize) {
        let s = self.shape(x);
        let classes = s.dims().last().copied().unwrap_or(1);
        if s.size() == 0 || classes == 0 {
            self.push_op(Op::Sum, vec![x], vec![]);
            return;
        }
        let rows = s.size() / classes;
        let logits = self.reshape(x, Shape::from([rows, classes]));
        let ids: Vec<f64> = (0..rows).map(|_| c.pick(classes) as f64).collect();
        let target = Tensor::new([rows], ids).expect("one class id per row");
        let reduction = match self.target.map(|t| t.regime) {
            Some(Regime::Default) => Reduction::Mean,
            Some(Regime::Explicit) => Reduction::Sum,
            _ if c.one_in(2) => Reduction::Sum,
            _ => Reduction::Mean,
        };
        self.push_op(
            Op::CrossEntropy { reduction },
            vec![logits],
            vec![("target", target)],
        );
    }

    /// `x` as an embedding table `[V, D]` (rows of its last axis) looked up by a `const` of
    /// valid integral ids: `[n]` or `[2, n]`, more positions than rows when the regime asks
    /// for repeated ids.
    fn embedding(&mut self, c: &mut Choices<'_>, x: usize) {
        let s = self.shape(x);
        let d = s.dims().last().copied().unwrap_or(1);
        if s.size() == 0 || d == 0 {
            self.push_op(Op::Sum, vec![x], vec![]);
            return;
        }
        let rows = s.size() / d;
        let table = self.reshape(x, Shape::from([rows, d]));
        let repeated = self.forcing(Regime::Row(CheckRegime::RepeatedIds));
        let n = if repeated {
            rows + 1 + c.pick(2)
        } else {
            1 + c.pick(rows + 2)
        };
        let ids_shape = if n % 2 == 0 && c.one_in(3) {
            Shape::from([2, n / 2])
        } else {
            Shape::from([n])
        };
        let ids: Vec<f64> = (0..n).map(|_| c.pick(rows) as f64).collect();
        let ids = Tensor::new(ids_shape, ids).expect("one id per position");
        let ids = self.const_of(ids);
        self.push_op(Op::Embedding, vec![ids, table], vec![]);
    }

    /// `x` as a left operand `[m, n]` (batched: `[1, m, n]`) with `n ≥ 2`, for a square right
    /// operand: `n` the largest of 4, 3, 2 dividing the size, else `linear` to two features.
    fn square_lhs(&mut self, c: &mut Choices<'_>, x: usize, batched: bool) -> (usize, usize) {
        let size = self.shape(x).size();
        let divisor = (2..=4).rev().find(|&d| size.is_multiple_of(d));
        let (x, size, n) = match divisor {
            Some(n) => (x, size, n),
            None => {
                let flat = self.reshape(x, Shape::from([1, size.max(1)]));
                (self.linear_to(c, flat, 2), 2, 2)
            }
        };
        let dims = if batched {
            vec![1, size / n, n]
        } else {
            vec![size / n, n]
        };
        (self.reshape(x, Shape::new(dims)), n)
    }

    fn matmul(&mut self, c: &mut Choices<'_>, x: usize) {
        for (regime, batched) in [
            (Regime::Row(CheckRegime::SquareRhs), false),
            (Regime::Row(CheckRegime::BatchedSquareRhs), true),
        ] {
            if self.forcing(regime) {
                let (lhs, n) = self.square_lhs(c, x, batched);
                let rs = if batched {
                    Shape::from([1, n, n])
                } else {
                    Shape::from([n, n])
                };
                let rhs = self.partner(c, &rs, lhs);
                self.push_op(Op::MatMul, vec![lhs, rhs], vec![]);
                return;
            }
        }
        let s = self.shape(x);
        let (rank, size) = (s.rank(), s.size());
        let batched = rank == 3 && c.one_in(2);
        let (lhs, rhs_lead) = if batched {
            (x, vec![s.dims()[0], s.dims()[2]])
        } else if rank == 2 {
            (x, vec![s.dims()[1]])
        } else {
            let n = s.dims().last().copied().unwrap_or(1).max(1);
            let m = (size / n).max(1);
            let lhs = if size == m * n {
                self.reshape(x, Shape::from([m, n]))
            } else {
                self.constant(c, &Shape::from([m, n]), false)
            };
            (lhs, vec![n])
        };
        let mut rs = rhs_lead;
        rs.push(1 + c.pick(3));
        let rhs = self.partner(c, &Shape::new(rs), lhs);
        self.push_op(Op::MatMul, vec![lhs, rhs], vec![]);
    }

    fn linear(&mut self, c: &mut Choices<'_>, x: usize) {
        let s = self.shape(x);
        let inp = s.dims()[s.rank() - 1];
        let out = 1 + c.pick(4);
        if s.size() / inp.max(1) * out <= MAX_ELEMS {
            self.linear_to(c, x, out);
        } else {
            self.push_op(Op::Unary(UnaryOp::Abs), vec![x], vec![]);
        }
    }

    /// `x` as packed projections `[.., T, 3C]` of `heads` heads: as it is, two times in three,
    /// when it has rank ≥ 2 and a last extent that is a positive multiple of 3 (the heads a
    /// divisor of `C`, at most 4); otherwise through `linear` (`x` flattened to `[1, size]`) to
    /// `[T, 3C]`, `[1, T, 3C]` or `[2, T, 3C]` with `T` of 2 to 4, 1 to 3 heads of 1 or 2
    /// columns. Not algebraic (its weights are a softmax): float graphs only.
    fn causal_attention(&mut self, c: &mut Choices<'_>, x: usize) {
        let s = self.shape(x);
        let last = s.dims().last().copied().unwrap_or(0);
        if s.rank() >= 2 && last > 0 && last.is_multiple_of(3) && !c.one_in(3) {
            let width = last / 3;
            let divisors: Vec<usize> = (1..=width.min(4))
                .filter(|h| width.is_multiple_of(*h))
                .collect();
            let heads = divisors[c.pick(divisors.len())];
            self.push_op(Op::CausalAttention { heads }, vec![x], vec![]);
            return;
        }
        let heads = 1 + c.pick(3);
        let width = 3 * heads * (1 + c.pick(2));
        let t = 2 + c.pick(3);
        let mut dims = match c.pick(3) {
            1 => vec![1],
            2 if 2 * t * width <= MAX_ELEMS => vec![2],
            _ => vec![],
        };
        dims.extend([t, width]);
        let to = Shape::new(dims);
        let size = self.shape(x).size();
        let flat = if size == 0 {
            // an empty tensor cannot be projected; start from a constant instead
            self.constant(c, &Shape::from([1, 1]), false)
        } else {
            self.reshape(x, Shape::from([1, size]))
        };
        let proj = self.linear_to(c, flat, to.size());
        let qkv = self.reshape(proj, to);
        self.push_op(Op::CausalAttention { heads }, vec![qkv], vec![]);
    }

    fn conv(&mut self, c: &mut Choices<'_>, x: usize) {
        // groups and dilation off their defaults (as the regime being forced asks, else one
        // time in three): a grouped conv has 2 or 4 channels, at least one of the two is off
        let off = match self.target.map(|t| t.regime) {
            Some(Regime::Default) => false,
            Some(Regime::Explicit) => true,
            _ => c.one_in(3),
        };
        let (groups, dilation) = match off {
            false => (1, 1),
            true => match (1 + c.pick(2), 1 + c.pick(2)) {
                (1, 1) => (1, 2),
                pair => pair,
            },
        };
        let ch = groups * (1 + c.pick(2));
        let batched = c.one_in(2);
        let img = self.image(c, x, batched, ch);
        let d = self.shape(img).dims().to_vec();
        let (h, w) = (d[d.len() - 2], d[d.len() - 1]);
        let padding = if self.forcing(Regime::Row(CheckRegime::Padded)) {
            1
        } else {
            c.pick(2)
        };
        let stride = if self.forcing(Regime::Row(CheckRegime::Strided)) {
            2
        } else {
            1 + c.pick(2)
        };
        // the most taps whose dilated extent fits the padded input, at most 3
        let taps = |extent: usize| ((extent + 2 * padding - 1) / dilation + 1).min(3);
        let spec = Conv2dSpec {
            in_channels: ch,
            kernel_h: 1 + c.pick(taps(h)),
            kernel_w: 1 + c.pick(taps(w)),
            stride,
            padding,
            out_channels: groups * (1 + c.pick(2)),
            groups,
            dilation,
        };
        // the fused kind as forced; else one time in three, and one in three the plain kind
        // followed by a ReLU: the pattern a recorded program's compiled run fuses
        // (`torchlean_compiled::fuse`), which `eager == compiled` then checks to the bit
        let (fused, relu_after) = match self.forced_kind() {
            Some(k) => (k == desc::CONV2D_RELU.name, false),
            None => match c.pick(3) {
                0 => (true, false),
                1 => (false, true),
                _ => (false, false),
            },
        };
        let op = if fused {
            Op::Conv2dRelu(spec)
        } else {
            Op::Conv2d(spec)
        };
        // the payload shapes are the op's own rule
        let shapes = op
            .payload_shapes(&[self.shape(img)], &Shape::scalar())
            .expect("conv payload shapes need no parent");
        let wt = tensor_of(c, &shapes[0])
            .map(|v| Ok(v / 2.0))
            .expect("scaling");
        let bias = tensor_of(c, &shapes[1]);
        let y = self.push_op(op, vec![img], vec![("weight", wt), ("bias", bias)]);
        if relu_after {
            self.push_op(Op::Unary(UnaryOp::Relu), vec![y], vec![]);
        }
    }

    fn pool(&mut self, c: &mut Choices<'_>, kind: PoolKind, x: usize) {
        let ch = 1 + c.pick(2);
        let batched = c.one_in(2);
        let img = self.image(c, x, batched, ch);
        let d = self.shape(img).dims().to_vec();
        let (h, w) = (d[d.len() - 2], d[d.len() - 1]);
        // the forced kind: a `_pad` kind or not
        let pad_kind = self
            .forced_kind()
            .map(|k| k == desc::MAX_POOL2D_PAD.name || k == desc::AVG_POOL2D_PAD.name);
        let padded_windows = self.forcing(Regime::Row(CheckRegime::Padded));
        // padding 1 needs windows of at least 2 × 2 (padding ≤ kernel / 2); the images are
        // at least 2 × 2
        let least = if padded_windows { 2 } else { 1 };
        let kernel_h = least + c.pick(h.min(w).min(3) + 1 - least);
        let kernel_w = least + c.pick(w.min(3) + 1 - least);
        let padding = match pad_kind {
            Some(false) => 0,
            _ if padded_windows => 1,
            _ => c.pick(kernel_h.min(kernel_w) / 2 + 1),
        };
        let stride = if self.forcing(Regime::Row(CheckRegime::Strided)) {
            2
        } else {
            1 + c.pick(2)
        };
        let spec = PoolSpec {
            kind,
            kernel_h,
            kernel_w,
            stride,
            padding,
            padded: pad_kind.unwrap_or(padding > 0 || c.one_in(3)),
        };
        self.push_op(Op::Pool(spec), vec![img], vec![]);
    }

    fn batch_norm(&mut self, c: &mut Choices<'_>, x: usize) {
        let channels = 1 + c.pick(3);
        let img = self.image(c, x, true, channels);
        let op = Op::BatchNormEval {
            channels,
            eps: torchlean_spec::ops::BATCH_NORM_DEFAULT_EPS,
        };
        let shapes = op
            .payload_shapes(&[self.shape(img)], &Shape::scalar())
            .expect("batch-norm payload shapes need no parent");
        let gamma = tensor_of(c, &shapes[0]);
        let beta = tensor_of(c, &shapes[1]);
        let mean = tensor_of(c, &shapes[2]);
        let var = tensor_of(c, &shapes[3])
            .map(|v| Ok(v.abs() + 0.25))
            .expect("positive");
        let id = self.push_op(
            op,
            vec![img],
            vec![
                ("gamma", gamma),
                ("beta", beta),
                ("mean", mean),
                ("var", var),
            ],
        );
        if let Some(e) = self.payload.entries.get_mut(&id) {
            e.eps = Some(1e-5);
        }
    }

    fn batch_norm_train(&mut self, c: &mut Choices<'_>, x: usize) {
        let channels = 1 + c.pick(3);
        let img = self.image(c, x, true, channels);
        let op = Op::BatchNormTrain {
            channels,
            eps: match self.target.map(|t| t.regime) {
                Some(Regime::Default) => None,
                Some(Regime::Explicit) => Some(1e-3),
                _ if c.one_in(2) => Some(1e-3),
                _ => None,
            },
        };
        let shapes = op
            .payload_shapes(&[self.shape(img)], &Shape::scalar())
            .expect("batch-norm payload shapes need no parent");
        let gamma = tensor_of(c, &shapes[0]);
        let beta = tensor_of(c, &shapes[1]);
        self.push_op(op, vec![img], vec![("gamma", gamma), ("beta", beta)]);
    }

    fn concat(&mut self, c: &mut Choices<'_>, x: usize) {
        let s = self.shape(x);
        let axis = c.pick(s.rank());
        let mut parents = vec![x];
        let mut total = s.dims()[axis];
        let thrice = self.forcing(Regime::Row(CheckRegime::ThriceRepeated));
        let more = if thrice { 2 } else { 1 + c.pick(2) };
        for _ in 0..more {
            let p = if thrice || c.one_in(3) {
                x
            } else {
                let mut d = s.dims().to_vec();
                d[axis] = 1 + c.pick(2);
                self.partner(c, &Shape::new(d), x)
            };
            total += self.shape(p).dims()[axis];
            parents.push(p);
        }
        if total * (s.size() / s.dims()[axis].max(1)) <= MAX_ELEMS {
            self.push_op(Op::Concat { axis }, parents, vec![]);
        } else {
            self.push_op(Op::Sum, vec![x], vec![]);
        }
    }

    fn random(&mut self, c: &mut Choices<'_>, step: Step, x: usize) {
        let s = self.shape(x);
        let seed = c.pick(1000) as u64;
        // key and shape are the node's id and declared shape (`node_sem`); the kind keeps
        // the descriptor's placeholders so that it round-trips through JSON unchanged
        let r = if step == Step::RandUniform {
            let op = Op::RandUniform {
                seed,
                key: 0,
                shape: Shape::scalar(),
            };
            self.push(op, vec![], s)
        } else {
            let keep = self.constant(c, &Shape::scalar(), false);
            let op = Op::BernoulliMask {
                seed,
                key: 0,
                shape: Shape::scalar(),
            };
            self.push(op, vec![keep], s)
        };
        self.push_op(Op::Binary(BinaryOp::Mul), vec![x, r], vec![]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlean_ir::{check_payload, check_shapes, denote_all};

    fn check_valid(case: &GenCase) {
        let d = check_shapes(&case.graph);
        assert!(
            d.iter().all(|d| !d.is_error()),
            "{d:?}\n{}",
            torchlean_ir::pretty(&case.graph)
        );
        let d = check_payload(&case.graph, &case.payload);
        assert!(d.iter().all(|d| !d.is_error()), "{d:?}");
    }

    #[test]
    fn every_choice_vector_builds_a_valid_graph() {
        let mut s = 7u64;
        for len in [0usize, 1, 5, 40, 160] {
            for _ in 0..200 {
                let v: Vec<u32> = (0..len)
                    .map(|_| {
                        s = torchlean_spec::ops::splitmix64(s);
                        s as u32
                    })
                    .collect();
                for cfg in [GenConfig::FLOAT, GenConfig::ALGEBRAIC] {
                    let case = build(cfg, &v);
                    check_valid(&case);
                    denote_all::<f64>(&case.graph, &case.payload, &case.inputs).unwrap();
                }
            }
        }
    }

    #[test]
    fn graphs_of_several_inputs_are_built_and_each_input_has_its_value() {
        let mut s = 11u64;
        let mut several = 0;
        for _ in 0..400 {
            let v: Vec<u32> = (0..120)
                .map(|_| {
                    s = torchlean_spec::ops::splitmix64(s);
                    s as u32
                })
                .collect();
            let case = build(GenConfig::FLOAT, &v);
            assert_eq!(case.inputs.len(), case.graph.input_count());
            for (x, id) in case.inputs.iter().zip(case.graph.inputs()) {
                assert_eq!(x.shape(), &case.graph.nodes[id].shape);
            }
            several += usize::from(case.graph.input_count() > 1);
        }
        // a binary op's partner is a new input about one time in nine it is not a node
        assert!(several >= 40, "{several} of 400 graphs have several inputs");
    }

    #[test]
    fn every_targeted_case_covers_its_targets_whatever_the_choices() {
        let mut s = 5u64;
        for cfg in [GenConfig::FLOAT, GenConfig::ALGEBRAIC] {
            for targets in schedule(cfg) {
                for len in [0usize, 16, 80, 160] {
                    for _ in 0..8 {
                        let v: Vec<u32> = (0..len)
                            .map(|_| {
                                s = torchlean_spec::ops::splitmix64(s);
                                s as u32
                            })
                            .collect();
                        let case = build_targeted(cfg, &targets, &v);
                        check_valid(&case);
                        denote_all::<f64>(&case.graph, &case.payload, &case.inputs).unwrap();
                        let seen = crate::regime::covered(&case.graph);
                        for t in &targets {
                            assert!(
                                seen.contains(t),
                                "{} not built (choices of length {len}):\n{}",
                                t.label(),
                                torchlean_ir::pretty(&case.graph)
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_float_schedule_covers_every_pair_but_input_and_const_within_ci_budget() {
        let sched = schedule(GenConfig::FLOAT);
        println!("{} targeted float cases", sched.len());
        // CI runs `--cases 100`: the round-robin must fit well inside it
        assert!(sched.len() <= 40, "{} targeted cases", sched.len());
        let scheduled: std::collections::BTreeSet<Target> =
            sched.iter().flatten().copied().collect();
        for t in targets() {
            let leaf = t.kind == desc::INPUT.name || t.kind == desc::CONST.name;
            assert!(
                leaf || scheduled.contains(&t),
                "{} never scheduled",
                t.label()
            );
        }
    }

    #[test]
    fn the_generator_reaches_every_kind() {
        let mut seen = std::collections::BTreeSet::new();
        let mut s = 11u64;
        for _ in 0..3000 {
            let v: Vec<u32> = (0..80)
                .map(|_| {
                    s = torchlean_spec::ops::splitmix64(s);
                    s as u32
                })
                .collect();
            seen.extend(build(GenConfig::FLOAT, &v).kinds());
        }
        // every kind of the descriptor table
        let missing: Vec<&str> = torchlean_spec::ops::desc::names()
            .filter(|k| !seen.contains(k))
            .collect();
        assert!(missing.is_empty(), "never generated: {missing:?}");
    }

    #[test]
    fn algebraic_graphs_evaluate_exactly_over_rationals() {
        let mut s = 3u64;
        for _ in 0..100 {
            let v: Vec<u32> = (0..60)
                .map(|_| {
                    s = torchlean_spec::ops::splitmix64(s);
                    s as u32
                })
                .collect();
            let case = build(GenConfig::ALGEBRAIC, &v);
            let xs: Vec<Tensor<torchlean_spec::Rational>> =
                case.inputs.iter().map(|x| x.convert().unwrap()).collect();
            denote_all(&case.graph, &case.payload, &xs).unwrap();
        }
    }
}
