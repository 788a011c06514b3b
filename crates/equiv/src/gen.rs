//! Random well-formed IR graphs with consistent shapes, payloads and inputs.
//!
//! A graph is *interpreted* from a vector of random choices ([`Choices`]): every decision (which
//! kind next, which parent, which axis, which value) reads the next choice, and an exhausted
//! vector reads 0, the simplest decision. Proptest shrinks the vector, so a failing graph shrinks
//! to a small one for free, and every prefix of choices still builds a valid graph.
//!
//! Graphs are DAGs with fan-out, repeated parents, `detach`, broadcasting, reshapes, reductions,
//! matmul/linear/conv chains, pools, batch norm, concat and the random kinds. Values lie on the
//! grid `k/96` (not dyadic, so float sums round and accumulation order is observable; exact in
//! the rationals after conversion). Inputs of `log`, `sqrt`, `inv` and divisors are made positive
//! by construction (`abs(x) + c` with `c ≥ 1/2`). [`GenConfig::algebraic`] restricts the kinds to
//! those exact over the rationals.

use proptest::prelude::*;
use torchlean_ir::{Graph, Node, OpKind, Payload};
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolKind, PoolSpec, Shape, Tensor, UnaryOp};

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
    pub input: Tensor<f64>,
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
    let mut c = Choices::new(choices);
    let mut b = Builder::new();
    let rank = 1 + c.pick(3);
    let dims: Vec<usize> = (0..rank).map(|_| 1 + c.pick(4)).collect();
    let in_shape = Shape::new(dims);
    let input = tensor_of(&mut c, &in_shape);
    b.push(OpKind::Input, vec![], in_shape);
    let steps = 1 + c.pick(cfg.max_steps);
    let kinds: Vec<Step> = ALL_STEPS
        .iter()
        .copied()
        .filter(|s| !cfg.algebraic || s.is_algebraic())
        .collect();
    for _ in 0..steps {
        let step = kinds[c.pick(kinds.len())];
        // a parent, biased towards recent nodes (long chains) but able to fan out
        let n = b.graph.nodes.len();
        let parent = if c.one_in(3) { c.pick(n) } else { n - 1 };
        b.step(&mut c, step, parent);
    }
    let output_id = b.graph.nodes.len() - 1;
    b.graph.output_id = output_id;
    GenCase {
        graph: b.graph,
        payload: b.payload,
        input,
    }
}

fn tensor_of(c: &mut Choices<'_>, shape: &Shape) -> Tensor<f64> {
    let n = shape.size();
    let data: Vec<f64> = (0..n).map(|_| c.value()).collect();
    // invariant: shapes built here are small and the data has exactly `size` elements
    Tensor::new(shape.clone(), data).expect("generated tensor")
}

/// A generation step: a kind (or family) to add next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Scale,
    AddScalar,
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
    ReduceSum,
    ReduceMean,
    Sum,
    MatMul,
    Linear,
    Conv2d,
    Pool(PoolKind),
    BatchNorm,
    Concat,
    MseLoss,
    RandUniform,
    Bernoulli,
}

const ALL_STEPS: &[Step] = &[
    Step::Unary(UnaryOp::Abs),
    Step::Unary(UnaryOp::Sqrt),
    Step::Unary(UnaryOp::Inv),
    Step::Unary(UnaryOp::Relu),
    Step::Unary(UnaryOp::Tanh),
    Step::Unary(UnaryOp::Sigmoid),
    Step::Unary(UnaryOp::Exp),
    Step::Unary(UnaryOp::Log),
    Step::Unary(UnaryOp::Sin),
    Step::Unary(UnaryOp::Cos),
    Step::Unary(UnaryOp::Neg),
    Step::Unary(UnaryOp::Softplus),
    Step::Binary(BinaryOp::Add),
    Step::Binary(BinaryOp::Sub),
    Step::Binary(BinaryOp::Mul),
    Step::Binary(BinaryOp::Div),
    Step::Binary(BinaryOp::Max),
    Step::Binary(BinaryOp::Min),
    Step::Scale,
    Step::AddScalar,
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
    Step::ReduceSum,
    Step::ReduceMean,
    Step::Sum,
    Step::MatMul,
    Step::Linear,
    Step::Conv2d,
    Step::Pool(PoolKind::Max),
    Step::Pool(PoolKind::Avg),
    Step::BatchNorm,
    Step::Concat,
    Step::MseLoss,
    Step::RandUniform,
    Step::Bernoulli,
];

impl Step {
    /// Whether the step's kinds are exact over the rational scalar.
    fn is_algebraic(self) -> bool {
        match self {
            Step::Unary(u) => u.is_algebraic(),
            Step::Softmax | Step::LogSoftmax | Step::LayerNorm | Step::BatchNorm => false,
            _ => true,
        }
    }
}

/// Largest tensor the generator creates (elements).
const MAX_ELEMS: usize = 96;

struct Builder {
    graph: Graph,
    payload: Payload,
}

impl Builder {
    fn new() -> Self {
        Builder {
            graph: Graph {
                input_id: 0,
                output_id: 0,
                nodes: Vec::new(),
            },
            payload: Payload::new(),
        }
    }

    fn shape(&self, id: usize) -> Shape {
        self.graph.nodes[id].shape.clone()
    }

    fn push(&mut self, kind: OpKind, parents: Vec<usize>, shape: Shape) -> usize {
        let id = self.graph.nodes.len();
        self.graph.nodes.push(Node {
            id,
            kind,
            parents,
            shape,
        });
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
        let id = self.push(
            OpKind::Const {
                value_shape: Some(shape.clone()),
            },
            vec![],
            shape.clone(),
        );
        self.payload.insert(id, "value", t);
        id
    }

    /// `abs(x) + c` with `c ≥ 1/2`: strictly positive.
    fn positive(&mut self, c: &mut Choices<'_>, x: usize) -> usize {
        let s = self.shape(x);
        let a = self.push(OpKind::Unary(UnaryOp::Abs), vec![x], s.clone());
        let k = self.constant(c, &s, true);
        self.push(OpKind::Binary(BinaryOp::Add), vec![a, k], s)
    }

    /// An existing node with shape `s` other than `not`, or a new constant.
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
        } else {
            self.constant(c, s, false)
        }
    }

    fn reshape(&mut self, x: usize, to: Shape) -> usize {
        let from = self.shape(x);
        if from == to {
            return x;
        }
        self.push(
            OpKind::Reshape {
                in_shape: from,
                out_shape: to.clone(),
            },
            vec![x],
            to,
        )
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
        let out = n * channels * h * w;
        let lin_in = self.shape(flat).dims()[1];
        let proj = self.linear_to(c, flat, lin_in, out);
        let dims = if batched {
            vec![n, channels, h, w]
        } else {
            vec![channels, h, w]
        };
        self.reshape(proj, Shape::new(dims))
    }

    fn linear_to(&mut self, c: &mut Choices<'_>, x: usize, inp: usize, out: usize) -> usize {
        let mut dims = self.shape(x).dims().to_vec();
        let last = dims.len() - 1;
        dims[last] = out;
        let id = self.push(OpKind::Linear, vec![x], Shape::new(dims));
        let w = tensor_of(c, &Shape::from([out, inp]))
            .map(|v| Ok(v / 2.0))
            .expect("scaling");
        self.payload.insert(id, "weight", w);
        let bias = tensor_of(c, &Shape::from([out]));
        self.payload.insert(id, "bias", bias);
        id
    }

    fn step(&mut self, c: &mut Choices<'_>, step: Step, x: usize) {
        let s = self.shape(x);
        let rank = s.rank();
        match step {
            Step::Unary(u) => {
                let arg = match u {
                    UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Inv => self.positive(c, x),
                    _ => x,
                };
                self.push(OpKind::Unary(u), vec![arg], s);
            }
            Step::Binary(op) => {
                let rhs = if c.one_in(5) && op != BinaryOp::Div {
                    x // repeated parent
                } else {
                    self.partner(c, &s, x)
                };
                let rhs = if op == BinaryOp::Div {
                    self.positive(c, rhs)
                } else {
                    rhs
                };
                let (a, b) = if c.one_in(2) { (rhs, x) } else { (x, rhs) };
                let (a, b) = if op == BinaryOp::Div {
                    (x, rhs)
                } else {
                    (a, b)
                };
                self.push(OpKind::Binary(op), vec![a, b], s);
            }
            Step::Scale => {
                let v = c.value();
                self.push(OpKind::Scale { c: v }, vec![x], s);
            }
            Step::AddScalar => {
                let v = c.value();
                self.push(OpKind::AddScalar { c: v }, vec![x], s);
            }
            Step::Detach => {
                let d = self.push(OpKind::Detach, vec![x], s.clone());
                // keep the detached value in use next to the original
                self.push(OpKind::Binary(BinaryOp::Mul), vec![x, d], s);
            }
            Step::Softmax | Step::LogSoftmax | Step::LayerNorm if rank > 0 => {
                let axis = c.pick(rank);
                let kind = match step {
                    Step::Softmax => OpKind::Softmax { axis },
                    Step::LogSoftmax => OpKind::LogSoftmax { axis },
                    _ => OpKind::LayerNorm {
                        axis,
                        eps: if c.one_in(2) { Some(1e-5) } else { None },
                    },
                };
                self.push(kind, vec![x], s);
            }
            Step::Broadcast => {
                let mut to: Vec<usize> = s.dims().to_vec();
                // expand size-1 axes and/or prepend axes, within the size budget
                for d in to.iter_mut() {
                    if *d == 1 && c.one_in(2) {
                        *d = 2 + c.pick(2);
                    }
                }
                let prepend = c.pick(3);
                for _ in 0..prepend {
                    to.insert(0, 1 + c.pick(3));
                }
                let to = Shape::new(to);
                if to.size() <= MAX_ELEMS && to != s {
                    self.push(
                        OpKind::BroadcastTo {
                            from_shape: s,
                            to_shape: to.clone(),
                        },
                        vec![x],
                        to,
                    );
                } else {
                    self.push(OpKind::Unary(UnaryOp::Neg), vec![x], s);
                }
            }
            Step::Reshape => {
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
                self.push(
                    OpKind::Reshape {
                        in_shape: s,
                        out_shape: to.clone(),
                    },
                    vec![x],
                    to,
                );
            }
            Step::Flatten => {
                let to = Shape::from([s.size()]);
                self.push(OpKind::Flatten { value_shape: s }, vec![x], to);
            }
            Step::Permute if rank > 0 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, c.pick(i + 1));
                }
                let to = Shape::new(perm.iter().map(|&p| s.dims()[p]).collect::<Vec<_>>());
                self.push(OpKind::Permute { perm }, vec![x], to);
            }
            Step::SwapFirstTwo if rank >= 2 => {
                let mut d = s.dims().to_vec();
                d.swap(0, 1);
                self.push(OpKind::SwapFirstTwo, vec![x], Shape::new(d));
            }
            Step::Transpose3d if rank == 3 => {
                let d = s.dims();
                self.push(
                    OpKind::Transpose3dLastTwo,
                    vec![x],
                    Shape::from([d[0], d[2], d[1]]),
                );
            }
            Step::Transpose if rank >= 2 => {
                let (a, b) = (c.pick(rank), c.pick(rank));
                let mut d = s.dims().to_vec();
                d.swap(a, b);
                self.push(
                    OpKind::Transpose { dim0: a, dim1: b },
                    vec![x],
                    Shape::new(d),
                );
            }
            Step::ReduceSum | Step::ReduceMean if rank > 0 => {
                let axis = c.pick(rank);
                let kind = if step == Step::ReduceSum {
                    OpKind::ReduceSum { axis }
                } else {
                    OpKind::ReduceMean { axis }
                };
                self.push(kind, vec![x], s.remove_axis(axis));
            }
            Step::Sum => {
                self.push(OpKind::Sum, vec![x], Shape::scalar());
            }
            Step::MatMul => {
                let size = s.size();
                let batched = rank == 3 && c.one_in(2);
                let (lhs, bt, m, n) = if batched {
                    let d = s.dims();
                    (x, d[0], d[1], d[2])
                } else if rank == 2 {
                    (x, 1, s.dims()[0], s.dims()[1])
                } else {
                    let n = s.dims().last().copied().unwrap_or(1).max(1);
                    let m = (size / n).max(1);
                    let lhs = if size == m * n {
                        self.reshape(x, Shape::from([m, n]))
                    } else {
                        self.constant(c, &Shape::from([m, n]), false)
                    };
                    (lhs, 1, m, n)
                };
                let p = 1 + c.pick(3);
                let (rs, out) = if batched {
                    (Shape::from([bt, n, p]), Shape::from([bt, m, p]))
                } else {
                    (Shape::from([n, p]), Shape::from([m, p]))
                };
                let rhs = self.partner(c, &rs, lhs);
                self.push(OpKind::MatMul, vec![lhs, rhs], out);
            }
            Step::Linear if rank > 0 => {
                let inp = s.dims()[rank - 1];
                let out = 1 + c.pick(4);
                if s.size() / inp.max(1) * out <= MAX_ELEMS {
                    self.linear_to(c, x, inp, out);
                } else {
                    self.push(OpKind::Unary(UnaryOp::Abs), vec![x], s);
                }
            }
            Step::Conv2d => {
                let ch = 1 + c.pick(2);
                let batched = c.one_in(2);
                let img = self.image(c, x, batched, ch);
                let d = self.shape(img).dims().to_vec();
                let (h, w) = (d[d.len() - 2], d[d.len() - 1]);
                let padding = c.pick(2);
                let kh = 1 + c.pick((h + 2 * padding).min(3));
                let kw = 1 + c.pick((w + 2 * padding).min(3));
                let stride = 1 + c.pick(2);
                let oc = 1 + c.pick(2);
                let spec = Conv2dSpec {
                    in_channels: ch,
                    out_channels: oc,
                    kernel_h: kh,
                    kernel_w: kw,
                    stride,
                    padding,
                };
                let ho = (h + 2 * padding - kh) / stride + 1;
                let wo = (w + 2 * padding - kw) / stride + 1;
                let mut out = d.clone();
                let r = out.len();
                out[r - 3] = oc;
                out[r - 2] = ho;
                out[r - 1] = wo;
                let id = self.push(OpKind::Conv2d(spec), vec![img], Shape::new(out));
                let wt = tensor_of(c, &Shape::from([oc, ch, kh, kw]))
                    .map(|v| Ok(v / 2.0))
                    .expect("scaling");
                self.payload.insert(id, "weight", wt);
                let bias = tensor_of(c, &Shape::from([oc]));
                self.payload.insert(id, "bias", bias);
            }
            Step::Pool(kind) => {
                let ch = 1 + c.pick(2);
                let batched = c.one_in(2);
                let img = self.image(c, x, batched, ch);
                let d = self.shape(img).dims().to_vec();
                let (h, w) = (d[d.len() - 2], d[d.len() - 1]);
                let k = 1 + c.pick(h.min(w).min(3));
                let kw = 1 + c.pick(w.min(3));
                let padding = c.pick(k.min(kw) / 2 + 1);
                let stride = 1 + c.pick(2);
                let spec = PoolSpec {
                    kind,
                    kernel_h: k,
                    kernel_w: kw,
                    stride,
                    padding,
                };
                let ho = (h + 2 * padding - k) / stride + 1;
                let wo = (w + 2 * padding - kw) / stride + 1;
                let mut out = d.clone();
                let r = out.len();
                out[r - 2] = ho;
                out[r - 1] = wo;
                self.push(
                    OpKind::Pool {
                        spec,
                        padded: padding > 0 || c.one_in(3),
                    },
                    vec![img],
                    Shape::new(out),
                );
            }
            Step::BatchNorm => {
                let ch = 1 + c.pick(3);
                let img = self.image(c, x, true, ch);
                let s2 = self.shape(img);
                let id = self.push(OpKind::BatchNorm2dNchwEval { channels: ch }, vec![img], s2);
                let cs = Shape::from([ch]);
                let gamma = tensor_of(c, &cs);
                let beta = tensor_of(c, &cs);
                let mean = tensor_of(c, &cs);
                let var = tensor_of(c, &cs)
                    .map(|v| Ok(v.abs() + 0.25))
                    .expect("positive");
                for (name, t) in [
                    ("gamma", gamma),
                    ("beta", beta),
                    ("mean", mean),
                    ("var", var),
                ] {
                    self.payload.insert(id, name, t);
                }
                if let Some(e) = self.payload.entries.get_mut(&id) {
                    e.eps = Some(1e-5);
                }
            }
            Step::Concat if rank > 0 => {
                let axis = c.pick(rank);
                let mut parents = vec![x];
                let extra = 1 + c.pick(2);
                let mut total = s.dims()[axis];
                for _ in 0..extra {
                    let p = if c.one_in(3) {
                        x
                    } else {
                        let mut d = s.dims().to_vec();
                        d[axis] = 1 + c.pick(2);
                        let ps = Shape::new(d);
                        self.partner(c, &ps, x)
                    };
                    total += self.shape(p).dims()[axis];
                    parents.push(p);
                }
                let mut d = s.dims().to_vec();
                d[axis] = total;
                let out = Shape::new(d);
                if out.size() <= MAX_ELEMS {
                    self.push(OpKind::Concat { axis }, parents, out);
                } else {
                    self.push(OpKind::Sum, vec![x], Shape::scalar());
                }
            }
            Step::MseLoss => {
                let t = self.partner(c, &s, x);
                self.push(OpKind::MseLoss, vec![x, t], Shape::scalar());
            }
            Step::RandUniform => {
                let seed = c.pick(1000) as u64;
                let r = self.push(OpKind::RandUniform { seed }, vec![], s.clone());
                self.push(OpKind::Binary(BinaryOp::Mul), vec![x, r], s);
            }
            Step::Bernoulli => {
                let keep = self.constant(c, &Shape::scalar(), false);
                let seed = c.pick(1000) as u64;
                let m = self.push(OpKind::BernoulliMask { seed }, vec![keep], s.clone());
                self.push(OpKind::Binary(BinaryOp::Mul), vec![x, m], s);
            }
            // a step whose rank condition failed: a neutral elementwise op instead
            _ => {
                self.push(OpKind::Unary(UnaryOp::Relu), vec![x], s);
            }
        }
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
                    denote_all::<f64>(&case.graph, &case.payload, &case.input).unwrap();
                }
            }
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
        let missing: Vec<&&str> = torchlean_ir::WIRE_NAMES
            .iter()
            .filter(|k| !seen.contains(**k))
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
            let x = case.input.convert::<torchlean_spec::Rational>().unwrap();
            denote_all(&case.graph, &case.payload, &x).unwrap();
        }
    }
}
