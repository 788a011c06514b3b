//! The models `torchlean train` trains, with sizes fixed at run time by the data set (the
//! digits' 64 pixels and 10 classes, or a CSV file's columns). Written once over
//! [`Ops`], so the eager session, the recorder (the compiled backend) and the reference engine
//! of a verified step all run the same program. Parameter names are those of the equivalent
//! PyTorch `nn.Sequential` (`0.weight`, `2.bias`, …), which is what a checkpoint holds and
//! what the PyTorch twin (`bench/pytorch/train_twin.py`) loads with `load_state_dict`.

use crate::error::{Result, TrainError};
use std::fmt;
use std::str::FromStr;
use torchlean_nn::layers::{conv2d_init, linear_init};
use torchlean_nn::{Ops, Var};
use torchlean_spec::{Conv2dSpec, Op, PoolKind, Reduction, Shape, Tensor};

/// Which model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// `Linear(F, 128), ReLU, Linear(128, 128), ReLU, Linear(128, C)`.
    Mlp,
    /// On `H×W` images: `Conv2d(1, 16, 3, padding=1), ReLU, Conv2d(16, 32, 3, padding=1),
    /// ReLU, MaxPool2d(2), Flatten, Linear(32·⌊H/2⌋·⌊W/2⌋, C)`.
    Cnn,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::Mlp, Arch::Cnn];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Mlp => "mlp",
            Arch::Cnn => "cnn",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = TrainError;

    fn from_str(s: &str) -> Result<Self> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| TrainError::UnknownName {
                what: "model",
                got: s.to_string(),
                valid: Arch::ALL.iter().map(|a| a.name()).collect(),
            })
    }
}

const MLP_HIDDEN: usize = 128;
const CNN_CHANNELS: (usize, usize) = (16, 32);

/// One layer with parameters: its `nn.Sequential` index and kind.
#[derive(Clone, Debug)]
enum Layer {
    Linear {
        index: usize,
        weight: Tensor<f64>,
        bias: Tensor<f64>,
    },
    Conv {
        index: usize,
        spec: Conv2dSpec,
        weight: Tensor<f64>,
        bias: Tensor<f64>,
    },
    Relu,
    MaxPool2,
    Flatten,
}

/// A model of [`Arch`] for `features` inputs and `classes` outputs, with its initial
/// parameters drawn from `seed`.
#[derive(Clone, Debug)]
pub struct Model {
    arch: Arch,
    /// The input shape of one example (`[F]`, or `[1, H, W]` for the CNN).
    example: Vec<usize>,
    classes: usize,
    layers: Vec<Layer>,
}

impl Model {
    /// The model; the CNN needs `image = Some((h, w))` with `h·w = features` and `h, w ≥ 2`.
    pub fn new(
        arch: Arch,
        features: usize,
        image: Option<(usize, usize)>,
        classes: usize,
        seed: u64,
    ) -> Result<Model> {
        if features == 0 || classes < 2 {
            return Err(TrainError::ModelSize {
                arch,
                reason: format!(
                    "needs at least 1 feature and 2 classes, the data has {features} and {classes}"
                ),
            });
        }
        let linear = |index: usize, i: usize, o: usize| -> Result<Layer> {
            let (weight, bias) =
                linear_init(i, o, seed.wrapping_mul(1000).wrapping_add(index as u64))?;
            Ok(Layer::Linear {
                index,
                weight,
                bias,
            })
        };
        let conv = |index: usize, i: usize, o: usize| -> Result<Layer> {
            let (weight, bias) =
                conv2d_init(i, o, 3, seed.wrapping_mul(1000).wrapping_add(index as u64))?;
            let spec = Conv2dSpec {
                in_channels: i,
                out_channels: o,
                kernel_h: 3,
                kernel_w: 3,
                stride: 1,
                padding: 1,
            };
            Ok(Layer::Conv {
                index,
                spec,
                weight,
                bias,
            })
        };
        let (example, layers) = match arch {
            Arch::Mlp => (
                vec![features],
                vec![
                    linear(0, features, MLP_HIDDEN)?,
                    Layer::Relu,
                    linear(2, MLP_HIDDEN, MLP_HIDDEN)?,
                    Layer::Relu,
                    linear(4, MLP_HIDDEN, classes)?,
                ],
            ),
            Arch::Cnn => {
                let (h, w) = match image {
                    Some((h, w)) if h * w == features && h >= 2 && w >= 2 => (h, w),
                    _ => {
                        return Err(TrainError::ModelSize {
                            arch,
                            reason: format!(
                                "needs images of at least 2×2 pixels; the data has {features} features{}",
                                match image {
                                    Some((h, w)) => format!(" as {h}×{w}"),
                                    None => " and no image shape".to_string(),
                                }
                            ),
                        })
                    }
                };
                let (c1, c2) = CNN_CHANNELS;
                (
                    vec![1, h, w],
                    vec![
                        conv(0, 1, c1)?,
                        Layer::Relu,
                        conv(2, c1, c2)?,
                        Layer::Relu,
                        Layer::MaxPool2,
                        Layer::Flatten,
                        linear(6, c2 * (h / 2) * (w / 2), classes)?,
                    ],
                )
            }
        };
        Ok(Model {
            arch,
            example,
            classes,
            layers,
        })
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    pub fn classes(&self) -> usize {
        self.classes
    }

    /// The shape of a batch of `n` examples.
    pub fn batch_shape(&self, n: usize) -> Shape {
        let mut d = vec![n];
        d.extend_from_slice(&self.example);
        Shape::from(d)
    }

    /// Every parameter's `(name, shape)`, in `state_dict` order.
    pub fn param_shapes(&self) -> Vec<(String, Vec<usize>)> {
        self.initial_params()
            .into_iter()
            .map(|(n, t)| (n, t.shape().dims().to_vec()))
            .collect()
    }

    /// The initial parameters by name.
    pub fn initial_params(&self) -> Vec<(String, Tensor<f64>)> {
        let mut out = Vec::new();
        for l in &self.layers {
            if let Layer::Linear {
                index,
                weight,
                bias,
            }
            | Layer::Conv {
                index,
                weight,
                bias,
                ..
            } = l
            {
                out.push((format!("{index}.weight"), weight.clone()));
                out.push((format!("{index}.bias"), bias.clone()));
            }
        }
        out
    }

    /// The logits `[N, C]` of a batch `x` (shape [`Model::batch_shape`]).
    pub fn logits<O: Ops>(&self, ops: &mut O, x: &Var) -> torchlean_nn::Result<Var> {
        let mut h = x.clone();
        for l in &self.layers {
            h = match l {
                Layer::Linear {
                    index,
                    weight,
                    bias,
                } => ops.scoped(&index.to_string(), |o| {
                    let w = o.param("weight", weight)?;
                    let b = o.param("bias", bias)?;
                    o.linear(&h, &w, &b)
                })?,
                Layer::Conv {
                    index,
                    spec,
                    weight,
                    bias,
                } => ops.scoped(&index.to_string(), |o| {
                    let w = o.param("weight", weight)?;
                    let b = o.param("bias", bias)?;
                    o.conv2d(*spec, &h, &w, &b)
                })?,
                Layer::Relu => ops.relu(&h)?,
                Layer::MaxPool2 => ops.pool2d(PoolKind::Max, &h, (2, 2), 2, 0)?,
                Layer::Flatten => {
                    let n = h.shape().dims().first().copied().unwrap_or(1);
                    let per = h.shape().size() / n.max(1);
                    ops.reshape(&h, Shape::from([n, per]))?
                }
            };
        }
        Ok(h)
    }

    /// The mean cross-entropy of the batch `x` against `labels`, a data input of the program
    /// (so a recorded program takes each batch's labels as an input, not a constant).
    pub fn loss<O: Ops>(&self, ops: &mut O, x: &Var, labels: &Var) -> torchlean_nn::Result<Var> {
        let logits = self.logits(ops, x)?;
        ops.apply(
            Op::CrossEntropy {
                reduction: Reduction::Mean,
            },
            &[&logits, labels],
        )
    }

    /// A PyTorch `nn.Sequential` expression of the model, for the twin script and the docs.
    pub fn torch_expr(&self) -> String {
        let parts: Vec<String> = self
            .layers
            .iter()
            .map(|l| match l {
                Layer::Linear { weight, .. } => {
                    let d = weight.shape().dims();
                    format!("nn.Linear({}, {})", d[1], d[0])
                }
                Layer::Conv { spec, .. } => format!(
                    "nn.Conv2d({}, {}, {}, padding={})",
                    spec.in_channels, spec.out_channels, spec.kernel_h, spec.padding
                ),
                Layer::Relu => "nn.ReLU()".to_string(),
                Layer::MaxPool2 => "nn.MaxPool2d(2)".to_string(),
                Layer::Flatten => "nn.Flatten()".to_string(),
            })
            .collect();
        format!("nn.Sequential({})", parts.join(", "))
    }
}
