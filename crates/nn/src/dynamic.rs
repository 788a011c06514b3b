//! Layers sized at run time: the same layers as [`crate::layers`], with their feature and
//! channel counts known only when the model is built (from a data set's columns), so their
//! shapes are checked when they run instead of when they compile. The typed layers wrap these
//! ([`crate::layers::Linear`] is a [`DynLinear`] with its sizes in the type): one layer system,
//! two ways to size it, one forward per layer.
//!
//! A [`DynSequential`] names its parameters as PyTorch's `nn.Sequential` does (`0.weight`,
//! `2.bias`: the layer's position), and prints itself as the `nn.Sequential` expression that
//! loads its `state_dict` ([`DynSequential::torch_expr`]).

use crate::error::{NnError, Result, ValueProblem};
use crate::layers::{conv2d_init, linear_init, Layer, Mode};
use crate::ops::{Ops, Var};
use torchlean_spec::{Conv2dSpec, Op, PoolKind, Shape, Tensor, UnaryOp};

/// Values whose feature or channel counts are checked when the layer runs.
#[derive(Debug)]
pub struct Dyn;

/// A fully connected layer, `x Wᵀ + b` over the last axis.
#[derive(Clone, Debug)]
pub struct DynLinear {
    weight: Tensor<f64>,
    bias: Tensor<f64>,
}

impl DynLinear {
    /// `Linear(inputs, outputs)` with PyTorch's default initialisation from `seed`.
    pub fn new(inputs: usize, outputs: usize, seed: u64) -> Result<Self> {
        let (weight, bias) = linear_init(inputs, outputs, seed)?;
        Ok(DynLinear { weight, bias })
    }

    /// The layer with these initial values: `weight [out, in]`, `bias [out]`.
    pub fn from_tensors(weight: Tensor<f64>, bias: Tensor<f64>) -> Result<Self> {
        match (weight.shape().dims(), bias.shape().dims()) {
            (&[o, _], &[ob]) if o == ob => Ok(DynLinear { weight, bias }),
            _ => Err(NnError::Invalid {
                what: "linear layer",
                layer: String::new(),
                problem: ValueProblem::LinearShapes {
                    weight: weight.shape().clone(),
                    bias: bias.shape().clone(),
                },
            }),
        }
    }

    /// `(inputs, outputs)`.
    pub fn sizes(&self) -> (usize, usize) {
        let d = self.weight.shape().dims();
        (d[1], d[0])
    }
}

impl Layer for DynLinear {
    type In = Dyn;
    type Out = Dyn;

    fn describe(&self) -> String {
        let (i, o) = self.sizes();
        format!("Linear({i} → {o})")
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, _: Mode) -> Result<Var> {
        let w = ops.param("weight", &self.weight)?;
        let b = ops.param("bias", &self.bias)?;
        ops.linear(x, &w, &b)
    }
}

/// A 2-D convolution of `[N, C, H, W]` with a square kernel, stride and zero padding.
#[derive(Clone, Debug)]
pub struct DynConv2d {
    spec: Conv2dSpec,
    weight: Tensor<f64>,
    bias: Tensor<f64>,
}

impl DynConv2d {
    /// `Conv2d(inputs, outputs, kernel, stride, padding)` with PyTorch's default
    /// initialisation from `seed`.
    pub fn new(
        inputs: usize,
        outputs: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        seed: u64,
    ) -> Result<Self> {
        let (weight, bias) = conv2d_init(inputs, outputs, kernel, seed)?;
        let spec = Conv2dSpec::ungrouped(inputs, outputs, (kernel, kernel), stride, padding);
        Ok(DynConv2d { spec, weight, bias })
    }

    pub fn spec(&self) -> &Conv2dSpec {
        &self.spec
    }
}

impl Layer for DynConv2d {
    type In = Dyn;
    type Out = Dyn;

    fn describe(&self) -> String {
        let s = &self.spec;
        format!(
            "Conv2d({} → {}, {}×{}, stride {}, padding {})",
            s.in_channels, s.out_channels, s.kernel_h, s.kernel_w, s.stride, s.padding
        )
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, _: Mode) -> Result<Var> {
        let w = ops.param("weight", &self.weight)?;
        let b = ops.param("bias", &self.bias)?;
        ops.conv2d(self.spec, x, &w, &b)
    }
}

/// Layer normalisation over the last axis (`features` of them) with a learned elementwise
/// affine: PyTorch's `nn.LayerNorm(features, eps)`, `weight` ones and `bias` zeros initially.
#[derive(Clone, Copy, Debug)]
pub struct DynLayerNorm {
    features: usize,
    eps: f64,
}

impl DynLayerNorm {
    pub fn new(features: usize, eps: f64) -> Self {
        DynLayerNorm { features, eps }
    }
}

impl Layer for DynLayerNorm {
    type In = Dyn;
    type Out = Dyn;

    fn describe(&self) -> String {
        format!("LayerNorm({})", self.features)
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, _: Mode) -> Result<Var> {
        let f = Shape::from([self.features]);
        let axis = x.shape().rank().saturating_sub(1);
        let w = ops.param("weight", &Tensor::full(f.clone(), 1.0)?)?;
        let b = ops.param("bias", &Tensor::zeros(f)?)?;
        let h = ops.apply(
            Op::LayerNorm {
                axis,
                eps: Some(self.eps),
            },
            &[x],
        )?;
        let w = ops.broadcast_to(&w, x.shape().clone())?;
        let b = ops.broadcast_to(&b, x.shape().clone())?;
        let h = ops.mul(&h, &w)?;
        ops.add(&h, &b)
    }
}

/// `[N, …]` to `[N, F]` with `F` the product of the other extents; where `features` is given,
/// `F` must be it (an error naming the layer otherwise).
pub(crate) fn flatten<O: Ops>(ops: &mut O, x: &Var, features: Option<usize>) -> Result<Var> {
    let (n, per) = match x.shape().dims() {
        [n, rest @ ..] => (*n, rest.iter().product::<usize>()),
        [] => (1, 1),
    };
    if let Some(f) = features.filter(|&f| f != per) {
        return Err(NnError::Shape {
            op: "flatten",
            layer: ops.scope_path(),
            shapes: vec![x.shape().clone()],
            source: torchlean_spec::SpecError::OpShape {
                op: "flatten",
                shapes: vec![x.shape().clone()],
                reason: format!("C·H·W = {per}, but the layer is declared with {f} features"),
            },
        });
    }
    ops.reshape(x, Shape::from([n, per]))
}

/// `, stride=…, padding=…` where they differ from PyTorch's defaults (`default_stride`, 0).
fn keywords(stride: usize, default_stride: usize, padding: usize) -> String {
    let mut out = String::new();
    if stride != default_stride {
        out += &format!(", stride={stride}");
    }
    if padding != 0 {
        out += &format!(", padding={padding}");
    }
    out
}

/// One layer of a [`DynSequential`].
#[derive(Clone, Debug)]
pub enum DynLayer {
    Linear(DynLinear),
    Conv2d(DynConv2d),
    /// An elementwise activation (`ReLU`, `Tanh`, …).
    Activation(UnaryOp),
    /// Max or average pooling with `kernel×kernel` windows.
    Pool2d {
        kind: PoolKind,
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// `[N, …]` to `[N, F]`.
    Flatten,
}

impl DynLayer {
    /// The parameters `(weight, bias)` of a layer that has them.
    fn params(&self) -> Option<(&Tensor<f64>, &Tensor<f64>)> {
        match self {
            DynLayer::Linear(l) => Some((&l.weight, &l.bias)),
            DynLayer::Conv2d(c) => Some((&c.weight, &c.bias)),
            _ => None,
        }
    }

    /// The PyTorch module that has this layer's parameters under the same names.
    fn torch_expr(&self) -> String {
        match self {
            DynLayer::Linear(l) => {
                let (i, o) = l.sizes();
                format!("nn.Linear({i}, {o})")
            }
            DynLayer::Conv2d(c) => {
                let s = &c.spec;
                format!(
                    "nn.Conv2d({}, {}, {}{})",
                    s.in_channels,
                    s.out_channels,
                    s.kernel_h,
                    keywords(s.stride, 1, s.padding)
                )
            }
            DynLayer::Activation(f) => match f {
                UnaryOp::Relu => "nn.ReLU()".into(),
                UnaryOp::Tanh => "nn.Tanh()".into(),
                UnaryOp::Sigmoid => "nn.Sigmoid()".into(),
                UnaryOp::Silu => "nn.SiLU()".into(),
                other => format!("Lambda({})", other.name()),
            },
            DynLayer::Pool2d {
                kind,
                kernel,
                stride,
                padding,
            } => {
                let name = match kind {
                    PoolKind::Max => "MaxPool2d",
                    PoolKind::Avg => "AvgPool2d",
                };
                format!(
                    "nn.{name}({kernel}{})",
                    keywords(*stride, *kernel, *padding)
                )
            }
            DynLayer::Flatten => "nn.Flatten()".into(),
        }
    }
}

impl Layer for DynLayer {
    type In = Dyn;
    type Out = Dyn;

    fn describe(&self) -> String {
        match self {
            DynLayer::Linear(l) => l.describe(),
            DynLayer::Conv2d(c) => c.describe(),
            DynLayer::Activation(f) => f.name().to_string(),
            DynLayer::Pool2d { kind, kernel, .. } => format!("{kind:?}Pool2d({kernel}×{kernel})"),
            DynLayer::Flatten => "Flatten".into(),
        }
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        match self {
            DynLayer::Linear(l) => l.forward(ops, x, mode),
            DynLayer::Conv2d(c) => c.forward(ops, x, mode),
            DynLayer::Activation(f) => ops.unary(*f, x),
            DynLayer::Pool2d {
                kind,
                kernel,
                stride,
                padding,
            } => ops.pool2d(*kind, x, (*kernel, *kernel), *stride, *padding),
            DynLayer::Flatten => flatten(ops, x, None),
        }
    }

    /// Layers with parameters run in their position's scope; the others without one.
    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, start: usize) -> Result<Var> {
        if self.params().is_some() {
            ops.scoped(&start.to_string(), |ops| self.forward(ops, x, mode))
        } else {
            self.forward(ops, x, mode)
        }
    }
}

/// Layers applied in order, numbered from 0 as in PyTorch's `nn.Sequential`.
#[derive(Clone, Debug, Default)]
pub struct DynSequential {
    layers: Vec<DynLayer>,
}

impl DynSequential {
    pub fn new(layers: Vec<DynLayer>) -> Self {
        DynSequential { layers }
    }

    pub fn layers(&self) -> &[DynLayer] {
        &self.layers
    }

    /// The parameters by `state_dict` name (`0.weight`, `0.bias`, `2.weight`, …), in order.
    pub fn named_params(&self) -> Vec<(String, Tensor<f64>)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            if let Some((w, b)) = l.params() {
                out.push((format!("{i}.weight"), w.clone()));
                out.push((format!("{i}.bias"), b.clone()));
            }
        }
        out
    }

    /// The `nn.Sequential(…)` expression whose `state_dict` has these parameters' names and
    /// shapes.
    pub fn torch_expr(&self) -> String {
        format!("nn.Sequential({})", self.torch_layers().join(", "))
    }

    /// Each layer's PyTorch expression (`nn.Linear(64, 128)`, `nn.ReLU()`, …), in order.
    pub fn torch_layers(&self) -> Vec<String> {
        self.layers.iter().map(DynLayer::torch_expr).collect()
    }
}

impl Layer for DynSequential {
    type In = Dyn;
    type Out = Dyn;

    fn describe(&self) -> String {
        let parts: Vec<String> = self.layers.iter().map(Layer::describe).collect();
        parts.join(", ")
    }

    fn forward<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        self.forward_at(ops, x, mode, 0)
    }

    fn positions(&self) -> usize {
        self.layers.len()
    }

    fn forward_at<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode, start: usize) -> Result<Var> {
        let mut h = x.clone();
        for (i, l) in self.layers.iter().enumerate() {
            h = l.forward_at(ops, &h, mode, start + i)?;
        }
        Ok(h)
    }
}
