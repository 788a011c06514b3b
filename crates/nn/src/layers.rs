//! Layers (TorchLean's `LayerDef`) and their composition (`Seq`), with the feature and channel
//! counts in the types: a [`Seq`] whose layers do not line up does not compile, and the batch
//! size (and an image's height and width) stay runtime dimensions. The layers with parameters
//! wrap the run-time-sized ones of [`crate::dynamic`], which models sized by their data use.
//!
//! Parameters are created through [`Ops::param`] under the layer's index in its sequence, so
//! their names are PyTorch's `nn.Sequential` `state_dict` names (`0.weight`, `2.bias`), and
//! their initial values follow PyTorch's default initialisation *in distribution* (the values
//! come from a seeded SplitMix64 stream, not from PyTorch's generator):
//!
//! - `Linear(in, out)`: weight and bias `U(−1/√in, 1/√in)` (`kaiming_uniform_(a=√5)` and the
//!   fan-in bias bound);
//! - `Conv2d(inC, outC, k)`: the same with fan-in `inC·kH·kW`.

use crate::dynamic::{flatten, DynConv2d, DynLayerNorm, DynLinear};
use crate::error::{NnError, Result, ValueProblem};
use crate::ops::{Ops, Var};
use std::marker::PhantomData;
use torchlean_spec::ops::{causal_mask, uniform_at};
use torchlean_spec::{Op, PoolKind, Shape, Tensor, UnaryOp};

/// Training or evaluation (dropout and batch statistics differ).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Train,
    Eval,
}

/// `[.., N]`: `N` features on the last axis, any leading axes (batch, tokens).
#[derive(Debug)]
pub struct Features<const N: usize>;

/// `[batch, C, H, W]`: images of `C` channels (height and width are runtime dimensions).
#[derive(Debug)]
pub struct Image<const C: usize>;

/// A layer from inputs described by `In` to outputs described by `Out`.
pub trait Layer {
    type In;
    type Out;

    /// A short description (`Linear(3 → 4)`), for summaries and errors.
    fn describe(&self) -> String;

    /// The layer applied to `x`; parameters are created in the current scope.
    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var>;

    /// How many sequence positions the layer takes (a [`Seq`] the sum of its parts'; every
    /// other layer 1).
    fn positions(&self) -> usize {
        1
    }

    /// Runs the layer as position `start` of a sequence: in the scope `start` (PyTorch's
    /// `nn.Sequential` names), and a [`Seq`] its parts one after the other.
    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, start: usize) -> Result<Var> {
        ops.scoped(&start.to_string(), |ops| self.forward(ops, x, mode))
    }
}

/// `a` then `b`, where `b` takes what `a` gives: checked when the sequence is built, so
/// layers that do not line up do not compile.
#[derive(Debug)]
pub struct Seq<A: Layer, B: Layer<In = A::Out>>(A, B);

impl<A: Layer, B: Layer<In = A::Out>> Seq<A, B> {
    /// `a` then `b`.
    pub fn new(a: A, b: B) -> Self {
        Seq(a, b)
    }
}

impl<A: Layer, B: Layer<In = A::Out>> Layer for Seq<A, B> {
    type In = A::In;
    type Out = B::Out;

    fn describe(&self) -> String {
        format!("{}, {}", self.0.describe(), self.1.describe())
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        self.forward_at(ops, x, mode, 0)
    }

    fn positions(&self) -> usize {
        self.0.positions() + self.1.positions()
    }

    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, start: usize) -> Result<Var> {
        let h = self.0.forward_at(ops, x, mode, start)?;
        self.1.forward_at(ops, &h, mode, start + self.0.positions())
    }
}

/// `seq![a, b, c]` is `Seq(Seq(a, b), c)`: layers composed in order, numbered from 0.
#[macro_export]
macro_rules! seq {
    ($first:expr $(,)?) => { $first };
    ($first:expr, $second:expr $(, $rest:expr)* $(,)?) => {
        $crate::seq!($crate::layers::Seq::new($first, $second) $(, $rest)*)
    };
}

/// `n` values `U(−bound, bound)` from the stream `(seed, key)`.
fn uniform(shape: Shape, bound: f64, seed: u64, key: u64) -> Result<Tensor<f64>> {
    let n = shape.checked_size()?;
    let data = (0..n as u64)
        .map(|i| (2.0 * uniform_at(seed, key, i) - 1.0) * bound)
        .collect();
    Ok(Tensor::new(shape, data)?)
}

/// `shape` values `N(0, std²)` from the stream `(seed, key)` (Box–Muller on 53-bit uniforms):
/// GPT's initialisation.
pub fn normal(shape: Shape, std: f64, seed: u64, key: u64) -> Result<Tensor<f64>> {
    use torchlean_spec::ops::splitmix64;
    let n = shape.checked_size()?;
    let stream = splitmix64(seed ^ splitmix64(key ^ 0x6e6f_726d_616c));
    let unit = |i: u64| (splitmix64(stream.wrapping_add(i)) >> 11) as f64 / (1u64 << 53) as f64;
    let data = (0..n as u64)
        .map(|i| {
            // u1 in (0, 1]: the logarithm is finite
            let u1 = 1.0 - unit(2 * i);
            let u2 = unit(2 * i + 1);
            std * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        })
        .collect();
    Ok(Tensor::new(shape, data)?)
}

/// The initial `(weight [out, in], bias [out])` of `Linear(in, out)` from `seed` (PyTorch's
/// default initialisation in distribution; see the module docs) — for models whose sizes are
/// known only at run time, and for [`Linear::new`].
pub fn linear_init(inputs: usize, outputs: usize, seed: u64) -> Result<(Tensor<f64>, Tensor<f64>)> {
    let bound = 1.0 / (inputs.max(1) as f64).sqrt();
    Ok((
        uniform(Shape::from([outputs, inputs]), bound, seed, 0)?,
        uniform(Shape::from([outputs]), bound, seed, 1)?,
    ))
}

/// The initial `(weight [out, in, k, k], bias [out])` of `Conv2d(in, out, k)` from `seed`
/// (fan-in `in·k·k`) — for run-time sizes, and for [`Conv2d::new`].
pub fn conv2d_init(
    inputs: usize,
    outputs: usize,
    kernel: usize,
    seed: u64,
) -> Result<(Tensor<f64>, Tensor<f64>)> {
    let bound = 1.0 / ((inputs * kernel * kernel).max(1) as f64).sqrt();
    Ok((
        uniform(
            Shape::from([outputs, inputs, kernel, kernel]),
            bound,
            seed,
            0,
        )?,
        uniform(Shape::from([outputs]), bound, seed, 1)?,
    ))
}

/// A fully connected layer, `x Wᵀ + b` over the last axis: a [`DynLinear`] with its sizes in
/// the type.
#[derive(Clone, Debug)]
pub struct Linear<const IN: usize, const OUT: usize>(DynLinear);

impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
    /// PyTorch's default initialisation (see the module docs) from `seed`.
    pub fn new(seed: u64) -> Result<Self> {
        Ok(Linear(DynLinear::new(IN, OUT, seed)?))
    }
}

impl<const IN: usize, const OUT: usize> Layer for Linear<IN, OUT> {
    type In = Features<IN>;
    type Out = Features<OUT>;

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        self.0.forward(ops, x, mode)
    }
}

/// A 2-D convolution of `[N, IN, H, W]` with a `K×K` kernel, stride and zero padding: a
/// [`DynConv2d`] with its sizes in the type.
#[derive(Clone, Debug)]
pub struct Conv2d<const IN: usize, const OUT: usize, const K: usize>(DynConv2d);

impl<const IN: usize, const OUT: usize, const K: usize> Conv2d<IN, OUT, K> {
    /// PyTorch's default initialisation from `seed`.
    pub fn new(stride: usize, padding: usize, seed: u64) -> Result<Self> {
        Ok(Conv2d(DynConv2d::new(IN, OUT, K, stride, padding, seed)?))
    }
}

impl<const IN: usize, const OUT: usize, const K: usize> Layer for Conv2d<IN, OUT, K> {
    type In = Image<IN>;
    type Out = Image<OUT>;

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        self.0.forward(ops, x, mode)
    }
}

/// An elementwise activation; `D` is whatever the layer before it gives (inferred).
#[derive(Debug)]
pub struct Activation<D> {
    f: UnaryOp,
    _dims: PhantomData<fn(D) -> D>,
}

impl<D> Activation<D> {
    fn of(f: UnaryOp) -> Self {
        Activation {
            f,
            _dims: PhantomData,
        }
    }
}

/// `max(x, 0)`.
pub fn relu<D>() -> Activation<D> {
    Activation::of(UnaryOp::Relu)
}
/// `tanh(x)`.
pub fn tanh<D>() -> Activation<D> {
    Activation::of(UnaryOp::Tanh)
}
/// `σ(x)`.
pub fn sigmoid<D>() -> Activation<D> {
    Activation::of(UnaryOp::Sigmoid)
}
/// `x·σ(x)`.
pub fn silu<D>() -> Activation<D> {
    Activation::of(UnaryOp::Silu)
}

impl<D> Layer for Activation<D> {
    type In = D;
    type Out = D;

    fn describe(&self) -> String {
        let name = self.f.name();
        let mut c = name.chars();
        match c.next() {
            Some(first) => format!("{}{}", first.to_uppercase(), c.as_str()),
            None => String::new(),
        }
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, _: Mode) -> Result<Var> {
        ops.unary(self.f, x)
    }

    /// Parameterless: runs without a scope of its own (still one sequence position).
    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, _: usize) -> Result<Var> {
        self.forward(ops, x, mode)
    }
}

/// Softmax (`log = false`) or log-softmax over the last axis.
#[derive(Debug)]
pub struct Softmax<D> {
    log: bool,
    _dims: PhantomData<fn(D) -> D>,
}

/// Softmax over the last axis.
pub fn softmax<D>() -> Softmax<D> {
    Softmax {
        log: false,
        _dims: PhantomData,
    }
}

/// Log-softmax over the last axis.
pub fn log_softmax<D>() -> Softmax<D> {
    Softmax {
        log: true,
        _dims: PhantomData,
    }
}

impl<D> Layer for Softmax<D> {
    type In = D;
    type Out = D;

    fn describe(&self) -> String {
        if self.log { "LogSoftmax" } else { "Softmax" }.to_string()
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, _: Mode) -> Result<Var> {
        let axis = x.shape().rank().saturating_sub(1);
        if self.log {
            ops.log_softmax(x, axis)
        } else {
            ops.softmax(x, axis)
        }
    }

    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, _: usize) -> Result<Var> {
        self.forward(ops, x, mode)
    }
}

/// Max or average pooling of images, `K×K` windows.
#[derive(Debug)]
pub struct Pool2d<const C: usize, const K: usize> {
    kind: PoolKind,
    stride: usize,
    padding: usize,
}

/// Max pooling with `K×K` windows.
pub fn max_pool2d<const C: usize, const K: usize>(stride: usize, padding: usize) -> Pool2d<C, K> {
    Pool2d {
        kind: PoolKind::Max,
        stride,
        padding,
    }
}

/// Average pooling with `K×K` windows (padded zeros count in the divisor, as in PyTorch).
pub fn avg_pool2d<const C: usize, const K: usize>(stride: usize, padding: usize) -> Pool2d<C, K> {
    Pool2d {
        kind: PoolKind::Avg,
        stride,
        padding,
    }
}

impl<const C: usize, const K: usize> Layer for Pool2d<C, K> {
    type In = Image<C>;
    type Out = Image<C>;

    fn describe(&self) -> String {
        let kind = match self.kind {
            PoolKind::Max => "MaxPool2d",
            PoolKind::Avg => "AvgPool2d",
        };
        format!("{kind}({K}×{K}, stride {})", self.stride)
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, _: Mode) -> Result<Var> {
        ops.pool2d(self.kind, x, (K, K), self.stride, self.padding)
    }

    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, _: usize) -> Result<Var> {
        self.forward(ops, x, mode)
    }
}

/// `[N, C, H, W]` images to `[N, F]` features, `F = C·H·W` (checked when it runs: the height
/// and width are not in the types).
#[derive(Debug)]
pub struct Flatten<const C: usize, const F: usize>;

impl<const C: usize, const F: usize> Layer for Flatten<C, F> {
    type In = Image<C>;
    type Out = Features<F>;

    fn describe(&self) -> String {
        format!("Flatten({C} channels → {F})")
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, _: Mode) -> Result<Var> {
        flatten(ops, x, Some(F))
    }

    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, _: usize) -> Result<Var> {
        self.forward(ops, x, mode)
    }
}

/// `x + f(x)`.
#[derive(Debug)]
pub struct Residual<L>(pub L);

impl<D, L: Layer<In = D, Out = D>> Layer for Residual<L> {
    type In = D;
    type Out = D;

    fn describe(&self) -> String {
        format!("Residual({})", self.0.describe())
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        let fx = self.0.forward_at(ops, x, mode, 0)?;
        ops.add(x, &fx)
    }
}

/// Layer normalisation over the last axis with a learned elementwise affine (`weight`, `bias`:
/// PyTorch's `nn.LayerNorm(F)`, initialised to ones and zeros), `eps` 1e-5 as in PyTorch.
#[derive(Clone, Debug)]
pub struct LayerNorm<const F: usize> {
    eps: f64,
}

impl<const F: usize> LayerNorm<F> {
    pub fn new() -> Self {
        LayerNorm { eps: 1e-5 }
    }
}

impl<const F: usize> Default for LayerNorm<F> {
    fn default() -> Self {
        LayerNorm::new()
    }
}

impl<const F: usize> Layer for LayerNorm<F> {
    type In = Features<F>;
    type Out = Features<F>;

    fn describe(&self) -> String {
        format!("LayerNorm({F})")
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        DynLayerNorm::new(F, self.eps).forward(ops, x, mode)
    }
}

/// Dropout with drop probability `p`: in training, `x · mask / (1 − p)` with a mask drawn from
/// `(seed, key)` (a fresh key per call, so every step draws a new mask); the identity in
/// evaluation mode.
#[derive(Debug)]
pub struct Dropout<D> {
    p: f64,
    seed: u64,
    _dims: PhantomData<fn(D) -> D>,
}

/// Dropout with probability `p` (in `[0, 1)`), masks from `seed`.
pub fn dropout<D>(p: f64, seed: u64) -> Result<Dropout<D>> {
    if !(0.0..1.0).contains(&p) {
        return Err(NnError::Invalid {
            what: "dropout",
            layer: String::new(),
            problem: ValueProblem::Probability {
                name: "the probability",
                value: p,
            },
        });
    }
    Ok(Dropout {
        p,
        seed,
        _dims: PhantomData,
    })
}

impl<D> Layer for Dropout<D> {
    type In = D;
    type Out = D;

    fn describe(&self) -> String {
        format!("Dropout({})", self.p)
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        if mode == Mode::Eval || self.p == 0.0 {
            return Ok(x.clone());
        }
        let keep = ops.filled(Shape::scalar(), 1.0 - self.p)?;
        let op = Op::BernoulliMask {
            seed: self.seed,
            key: ops.fresh_key(),
            shape: x.shape().clone(),
        };
        let mask = ops.apply(op, &[&keep])?;
        let kept = ops.mul(x, &mask)?;
        ops.scale(&kept, 1.0 / (1.0 - self.p))
    }

    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, _: usize) -> Result<Var> {
        self.forward(ops, x, mode)
    }
}

/// A lookup table of `V` rows of `D` features (`nn.Embedding(V, D)`; weight `U(±√3)`, the
/// variance of PyTorch's `N(0, 1)` initialisation): the `embedding` kind, a gather whose weight
/// gradient adds the rows of repeated ids.
#[derive(Clone, Debug)]
pub struct Embedding<const V: usize, const D: usize> {
    weight: Tensor<f64>,
}

impl<const V: usize, const D: usize> Embedding<V, D> {
    pub fn new(seed: u64) -> Result<Self> {
        Ok(Embedding {
            weight: uniform(Shape::from([V, D]), 3f64.sqrt(), seed, 0)?,
        })
    }

    /// The rows of `ids` (shape `batch`, flattened row-major): `[batch.., D]`. An id `≥ V` is
    /// an error naming the layer, its position and its value.
    pub fn forward<O: Ops>(&self, ops: &mut O, ids: &[usize], batch: &[usize]) -> Result<Var> {
        let n: usize = batch.iter().product();
        if n != ids.len() {
            return Err(NnError::Invalid {
                what: "embedding",
                layer: ops.scope_path(),
                problem: ValueProblem::Ids {
                    ids: ids.len(),
                    batch: batch.to_vec(),
                },
            });
        }
        let w = ops.param("weight", &self.weight)?;
        let ids = ops.ids(Shape::new(batch.to_vec()), ids)?;
        ops.embedding(&ids, &w)
    }
}

/// Batch normalisation of `[N, C, H, W]` (PyTorch's `nn.BatchNorm2d(C)`: `weight` ones, `bias`
/// zeros, buffers `running_mean` zeros and `running_var` ones, `eps` 1e-5, momentum 0.1). In
/// training mode it normalises with the batch statistics (`batch_norm2d_nchw_train`, the
/// gradient flowing through them) and updates the running statistics with the unbiased batch
/// variance, as PyTorch does; in evaluation mode it uses the running statistics
/// (`batch_norm2d_nchw_eval`).
#[derive(Clone, Debug)]
pub struct BatchNorm2d<const C: usize> {
    eps: f64,
    momentum: f64,
}

impl<const C: usize> BatchNorm2d<C> {
    pub fn new() -> Self {
        BatchNorm2d {
            eps: 1e-5,
            momentum: 0.1,
        }
    }
}

impl<const C: usize> Default for BatchNorm2d<C> {
    fn default() -> Self {
        BatchNorm2d::new()
    }
}

/// Per-channel mean and unbiased variance of `[N, C, …]` data.
fn channel_stats(x: &Tensor<f64>, c: usize) -> (Vec<f64>, Vec<f64>) {
    let d = x.shape().dims();
    let (n, rest) = (d[0], d[2..].iter().product::<usize>());
    let count = (n * rest) as f64;
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    for ch in 0..c {
        let vals = (0..n).flat_map(|b| {
            let off = (b * c + ch) * rest;
            x.data()[off..off + rest].iter().copied()
        });
        let m = vals.clone().sum::<f64>() / count.max(1.0);
        let ss: f64 = vals.map(|v| (v - m) * (v - m)).sum();
        mean[ch] = m;
        var[ch] = ss / (count - 1.0).max(1.0);
    }
    (mean, var)
}

impl<const C: usize> Layer for BatchNorm2d<C> {
    type In = Image<C>;
    type Out = Image<C>;

    fn describe(&self) -> String {
        format!("BatchNorm2d({C})")
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        let cs = Shape::from([C]);
        let gamma = ops.param("weight", &Tensor::full(cs.clone(), 1.0)?)?;
        let beta = ops.param("bias", &Tensor::zeros(cs.clone())?)?;
        let mean = ops.buffer("running_mean", &Tensor::zeros(cs.clone())?)?;
        let var = ops.buffer("running_var", &Tensor::full(cs, 1.0)?)?;
        match mode {
            Mode::Eval => ops.apply(
                Op::BatchNormEval {
                    channels: C,
                    eps: self.eps,
                },
                &[x, &gamma, &beta, &mean, &var],
            ),
            Mode::Train => {
                let y = ops.apply(
                    Op::BatchNormTrain {
                        channels: C,
                        eps: Some(self.eps),
                    },
                    &[x, &gamma, &beta],
                )?;
                let m = self.momentum;
                for (name, pick) in [("running_mean", 0usize), ("running_var", 1)] {
                    ops.update_buffer(name, x, &|current, xv| {
                        let (bm, bv) = channel_stats(xv, C);
                        let batch = if pick == 0 { bm } else { bv };
                        let next = current
                            .data()
                            .iter()
                            .zip(batch)
                            .map(|(r, b)| (1.0 - m) * r + m * b)
                            .collect();
                        Ok(Tensor::new(current.shape().clone(), next)?)
                    })?;
                }
                Ok(y)
            }
        }
    }
}

/// GELU (`approximate = "none"`, PyTorch's default).
pub fn gelu<D>() -> Activation<D> {
    Activation::of(UnaryOp::Gelu(torchlean_spec::ops::GeluApprox::None))
}

/// Multi-head self-attention over `[N, T, D]` tokens with `H` heads (PyTorch's
/// `nn.MultiheadAttention(D, H, batch_first=True)` with its parameter names `in_proj_weight`,
/// `in_proj_bias`, `out_proj.weight`, `out_proj.bias` and its initialisation: Xavier-uniform
/// packed projections, zero biases). `causal` blocks attention to later positions (the
/// masked scores are `−inf`, so their weights are exactly 0).
#[derive(Clone, Debug)]
pub struct MultiHeadAttention<const D: usize, const H: usize> {
    in_proj_weight: Tensor<f64>,
    out_proj_weight: Tensor<f64>,
    causal: bool,
}

impl<const D: usize, const H: usize> MultiHeadAttention<D, H> {
    pub fn new(causal: bool, seed: u64) -> Result<Self> {
        if H == 0 || !D.is_multiple_of(H) {
            return Err(NnError::Invalid {
                what: "multi-head attention",
                layer: String::new(),
                problem: ValueProblem::HeadSplit {
                    features: D,
                    heads: H,
                },
            });
        }
        let xavier = (6.0 / (D + 3 * D).max(1) as f64).sqrt();
        Ok(MultiHeadAttention {
            in_proj_weight: uniform(Shape::from([3 * D, D]), xavier, seed, 0)?,
            out_proj_weight: uniform(Shape::from([D, D]), 1.0 / (D.max(1) as f64).sqrt(), seed, 1)?,
            causal,
        })
    }

    /// `[N, T, D]` → `[N·H, T, D/H]`: the heads of one projection.
    fn heads<O: Ops>(ops: &mut O, p: &Var, n: usize, t: usize) -> Result<Var> {
        let hd = D / H;
        let p = ops.reshape(p, Shape::from([n, t, H, hd]))?;
        let p = ops.apply(
            Op::Permute {
                perm: vec![0, 2, 1, 3],
            },
            &[&p],
        )?;
        ops.reshape(&p, Shape::from([n * H, t, hd]))
    }
}

impl<const D: usize, const H: usize> Layer for MultiHeadAttention<D, H> {
    type In = Features<D>;
    type Out = Features<D>;

    fn describe(&self) -> String {
        format!(
            "MultiHeadAttention({D}, {H} heads{})",
            if self.causal { ", causal" } else { "" }
        )
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, _: Mode) -> Result<Var> {
        let [n, t, _] = x.shape().dims()[..] else {
            return Err(NnError::Invalid {
                what: "multi-head attention",
                layer: ops.scope_path(),
                problem: ValueProblem::Input {
                    expected: format!("[N, T, {D}] tokens"),
                    got: x.shape().clone(),
                },
            });
        };
        let w = ops.param("in_proj_weight", &self.in_proj_weight)?;
        let b = ops.param("in_proj_bias", &Tensor::zeros(Shape::from([3 * D]))?)?;
        let qkv = ops.linear(x, &w, &b)?;
        let mut parts = Vec::with_capacity(3);
        for k in 0..3 {
            let p = ops.apply(
                Op::Slice {
                    axis: 2,
                    start: k * D,
                    len: D,
                },
                &[&qkv],
            )?;
            parts.push(Self::heads(ops, &p, n, t)?);
        }
        let kt = ops.apply(Op::Transpose3dLastTwo, &[&parts[1]])?;
        let scores = ops.matmul(&parts[0], &kt)?;
        let mut scores = ops.scale(&scores, 1.0 / ((D / H) as f64).sqrt())?;
        if self.causal {
            let mask = ops.constant(&Tensor::new([t, t], causal_mask(t))?)?;
            let mask = ops.broadcast_to(&mask, scores.shape().clone())?;
            scores = ops.add(&scores, &mask)?;
        }
        let attn = ops.softmax(&scores, 2)?;
        let ctx = ops.matmul(&attn, &parts[2])?;
        let ctx = ops.reshape(&ctx, Shape::from([n, H, t, D / H]))?;
        let ctx = ops.apply(
            Op::Permute {
                perm: vec![0, 2, 1, 3],
            },
            &[&ctx],
        )?;
        let ctx = ops.reshape(&ctx, Shape::from([n, t, D]))?;
        ops.scoped("out_proj", |ops| {
            let w = ops.param("weight", &self.out_proj_weight)?;
            let b = ops.param("bias", &Tensor::zeros(Shape::from([D]))?)?;
            ops.linear(&ctx, &w, &b)
        })
    }
}

/// PyTorch's `nn.TransformerEncoderLayer(D, H, FF, dropout=0, batch_first=True)` (post-norm,
/// ReLU): `x ← norm1(x + self_attn(x))`, `x ← norm2(x + linear2(relu(linear1(x))))`, with
/// PyTorch's parameter names.
#[derive(Debug)]
pub struct TransformerEncoderBlock<const D: usize, const H: usize, const FF: usize> {
    self_attn: MultiHeadAttention<D, H>,
    linear1: Linear<D, FF>,
    linear2: Linear<FF, D>,
}

impl<const D: usize, const H: usize, const FF: usize> TransformerEncoderBlock<D, H, FF> {
    pub fn new(causal: bool, seed: u64) -> Result<Self> {
        Ok(TransformerEncoderBlock {
            self_attn: MultiHeadAttention::new(causal, seed)?,
            linear1: Linear::new(seed.wrapping_add(1))?,
            linear2: Linear::new(seed.wrapping_add(2))?,
        })
    }
}

impl<const D: usize, const H: usize, const FF: usize> Layer for TransformerEncoderBlock<D, H, FF> {
    type In = Features<D>;
    type Out = Features<D>;

    fn describe(&self) -> String {
        format!("TransformerEncoderBlock({D}, {H} heads, {FF})")
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        let norm = LayerNorm::<D>::new();
        let sa = ops.scoped("self_attn", |ops| self.self_attn.forward(ops, x, mode))?;
        let h = ops.add(x, &sa)?;
        let h = ops.scoped("norm1", |ops| norm.forward(ops, &h, mode))?;
        let f = ops.scoped("linear1", |ops| self.linear1.forward(ops, &h, mode))?;
        let f = ops.relu(&f)?;
        let f = ops.scoped("linear2", |ops| self.linear2.forward(ops, &f, mode))?;
        let out = ops.add(&h, &f)?;
        ops.scoped("norm2", |ops| norm.forward(ops, &out, mode))
    }
}
