//! The models `torchlean train` trains, with sizes fixed at run time by the data set (the
//! digits' 64 pixels and 10 classes, or a CSV file's columns): `nn`'s run-time-sized layers
//! ([`DynSequential`]), so the eager session, the recorder (the compiled backend) and the
//! reference engine of a verified step all run the same program. Parameter names are those of the equivalent
//! PyTorch `nn.Sequential` (`0.weight`, `2.bias`, …), which is what a checkpoint holds and
//! what the PyTorch twin (`bench/pytorch/train_twin.py`) loads with `load_state_dict`.

use crate::error::{Result, TrainError};
use crate::imported::{ImportedNet, OnnxSource};
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use torchlean_nn::dynamic::{DynConv2d, DynLayer, DynLinear, DynSequential};
use torchlean_nn::layers::Features;
use torchlean_nn::{Layer, LeafKind, Mode, Ops, Recorded, Recorder, Var};
use torchlean_spec::ops::desc::Family;
use torchlean_spec::{Op, PoolKind, Reduction, Shape, Tensor, UnaryOp};

/// Which model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// `Linear(F, 128), ReLU, Linear(128, 128), ReLU, Linear(128, C)`.
    Mlp,
    /// On `H×W` images: `Conv2d(1, 16, 3, padding=1), ReLU, Conv2d(16, 32, 3, padding=1),
    /// ReLU, MaxPool2d(2), Flatten, Linear(32·⌊H/2⌋·⌊W/2⌋, C)`.
    Cnn,
    /// A model imported from ONNX ([`crate::imported`]; the file is the configuration's
    /// `from`).
    Onnx,
    /// A model of the program's own, given to [`Trainer::with_model`](crate::Trainer::with_model)
    /// (not built from a configuration, so not among [`Arch::ALL`], the ones the CLI offers).
    Custom,
}

impl Arch {
    /// The models built from a configuration.
    pub const ALL: [Arch; 3] = [Arch::Mlp, Arch::Cnn, Arch::Onnx];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Mlp => "mlp",
            Arch::Cnn => "cnn",
            Arch::Onnx => "onnx",
            Arch::Custom => "custom",
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

/// A model of [`Arch`] for `features` inputs and `classes` outputs, with its initial
/// parameters drawn from `seed`.
#[derive(Clone, Debug)]
pub struct Classifier {
    arch: Arch,
    /// The input shape of one example (`[F]`, or `[1, H, W]` for the CNN).
    example: Vec<usize>,
    classes: usize,
    net: Net,
}

/// A classifier's network: built in, or imported.
#[derive(Clone, Debug)]
enum Net {
    Layers(DynSequential),
    Imported(Box<ImportedNet>),
}

impl Classifier {
    /// The model; the CNN needs `image = Some((h, w))` with `h·w = features` and `h, w ≥ 2`.
    pub fn new(
        arch: Arch,
        features: usize,
        image: Option<(usize, usize)>,
        classes: usize,
        seed: u64,
    ) -> Result<Classifier> {
        if features == 0 || classes < 2 {
            return Err(TrainError::ModelSize {
                arch,
                problem: SizeProblem::TooFew { features, classes },
            });
        }
        // each layer's stream: the model seed and the layer's position
        let seed_at = |index: u64| seed.wrapping_mul(1000).wrapping_add(index);
        let linear = |index, i, o| -> Result<DynLayer> {
            Ok(DynLayer::Linear(DynLinear::new(i, o, seed_at(index))?))
        };
        let conv = |index, i, o| -> Result<DynLayer> {
            Ok(DynLayer::Conv2d(DynConv2d::new(
                i,
                o,
                3,
                1,
                1,
                seed_at(index),
            )?))
        };
        let relu = DynLayer::Activation(UnaryOp::Relu);
        let (example, layers) = match arch {
            Arch::Onnx => {
                return Err(TrainError::Config {
                    field: "from",
                    reason: "an imported model is read from its file (Classifier::imported)".into(),
                })
            }
            Arch::Custom => {
                return Err(TrainError::Config {
                    field: "arch",
                    reason: "a custom model is the program's own: train it with Trainer::with_model and resume it with Trainer::resume_with".into(),
                })
            }
            Arch::Mlp => (
                vec![features],
                vec![
                    linear(0, features, MLP_HIDDEN)?,
                    relu.clone(),
                    linear(2, MLP_HIDDEN, MLP_HIDDEN)?,
                    relu,
                    linear(4, MLP_HIDDEN, classes)?,
                ],
            ),
            Arch::Cnn => {
                let (h, w) = match image {
                    Some((h, w)) if h * w == features && h >= 2 && w >= 2 => (h, w),
                    _ => {
                        return Err(TrainError::ModelSize {
                            arch,
                            problem: SizeProblem::Image { features, image },
                        })
                    }
                };
                let (c1, c2) = CNN_CHANNELS;
                (
                    vec![1, h, w],
                    vec![
                        conv(0, 1, c1)?,
                        relu.clone(),
                        conv(2, c1, c2)?,
                        relu,
                        DynLayer::Pool2d {
                            kind: PoolKind::Max,
                            kernel: 2,
                            stride: 2,
                            padding: 0,
                        },
                        DynLayer::Flatten,
                        linear(6, c2 * (h / 2) * (w / 2), classes)?,
                    ],
                )
            }
        };
        Ok(Classifier {
            arch,
            example,
            classes,
            net: Net::Layers(DynSequential::new(layers)),
        })
    }

    /// The model imported from `source` ([`ImportedNet::load`]) for data of `features` per
    /// example and `classes` classes.
    pub fn imported(
        source: &OnnxSource,
        features: usize,
        classes: usize,
        seed: u64,
    ) -> Result<Classifier> {
        let net = ImportedNet::load(source, features, classes, seed)?;
        Ok(Classifier {
            arch: Arch::Onnx,
            example: net.example().to_vec(),
            classes,
            net: Net::Imported(Box::new(net)),
        })
    }

    /// The imported network, if the model is one.
    pub fn imported_net(&self) -> Option<&ImportedNet> {
        match &self.net {
            Net::Imported(n) => Some(n),
            Net::Layers(_) => None,
        }
    }

    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Each layer's PyTorch expression, for a built-in model (an imported one has none: its
    /// module is the one it was exported from).
    pub fn torch_layers(&self) -> Option<Vec<String>> {
        match &self.net {
            Net::Layers(l) => Some(l.torch_layers()),
            Net::Imported(_) => None,
        }
    }
}

impl Classify for Classifier {
    fn example_shape(&self) -> Vec<usize> {
        self.example.clone()
    }

    fn logits<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> torchlean_nn::Result<Var> {
        match &self.net {
            Net::Layers(l) => l.forward(ops, x, mode),
            Net::Imported(n) => n.logits(ops, x),
        }
    }

    fn arch(&self) -> Arch {
        self.arch
    }

    /// A PyTorch `nn.Sequential` expression of the model, for the twin script and the docs;
    /// for an imported model, where it came from.
    fn description(&self) -> String {
        match &self.net {
            Net::Layers(l) => l.torch_expr(),
            Net::Imported(n) => format!("imported from {}", n.source().path.display()),
        }
    }

    /// An imported model is imported once per batch size; the built-in ones take any.
    fn prepare(&mut self, sizes: &BTreeSet<usize>) -> Result<()> {
        match &mut self.net {
            Net::Imported(n) => n.prepare(sizes),
            Net::Layers(_) => Ok(()),
        }
    }

    fn initial_params(&self) -> Result<Vec<(String, Tensor<f64>)>> {
        Ok(match &self.net {
            Net::Layers(l) => l.named_params(),
            Net::Imported(n) => n.initial_params(),
        })
    }
}

/// A classifier the [`Trainer`](crate::Trainer) trains: a batch of examples in, logits `[N,
/// C]` out, written once against [`Ops`], so the eager session, the recorder (the compiled
/// backend) and the reference engine of a verified step all run the same program. Its
/// parameters are the ones it creates through [`Ops::param`] (their names are the
/// checkpoint's `state_dict` names); a model with buffers (running statistics) or random draws
/// (dropout) is refused ([`check_fit`]): the trainer keeps and saves parameters only, and its
/// backends and verified steps would draw differently.
///
/// Every [`Layer`] from features (`seq![Linear::<64, 128>::new(1)?, relu(), …]`) is a model;
/// a model of your own implements [`Classify::example_shape`], [`Classify::logits`] and
/// [`Classify::description`]. The provided methods (`batch_shape`, `loss`, `record_loss`,
/// `program_ops`) are the trainer's and are not meant to be overridden.
pub trait Classify {
    /// One example's shape inside the model (`[F]`, or `[C, H, W]`); a batch is `[N,
    /// ..example]`, and the example's size must be the data's feature count.
    fn example_shape(&self) -> Vec<usize>;

    /// The logits `[N, C]` of the batch `x` (shape [`Classify::batch_shape`]): `Train` mode in a
    /// step, `Eval` when evaluating or predicting.
    fn logits<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> torchlean_nn::Result<Var>;

    /// A one-line description, for the checkpoint's metadata (the built-in models: their
    /// PyTorch expression).
    fn description(&self) -> String;

    /// Which model: a built-in [`Arch`], or [`Arch::Custom`] (the default) for the program's own.
    fn arch(&self) -> Arch {
        Arch::Custom
    }

    /// Readies the model for batches of each of `sizes` examples (default: nothing to do).
    fn prepare(&mut self, sizes: &BTreeSet<usize>) -> Result<()> {
        let _ = sizes;
        Ok(())
    }

    /// The initial parameters by name, in the order the model creates them (default: the ones
    /// it creates on a one-example batch, recorded, nothing run).
    fn initial_params(&self) -> Result<Vec<(String, Tensor<f64>)>> {
        Ok(self
            .record_loss(1)?
            .leaves
            .into_iter()
            .filter(|l| l.kind == LeafKind::Param)
            .map(|l| (l.name, l.value))
            .collect())
    }

    /// Every parameter's `(name, shape)`, in the order of [`Classify::initial_params`].
    fn param_shapes(&self) -> Result<Vec<(String, Vec<usize>)>> {
        Ok(self
            .initial_params()?
            .into_iter()
            .map(|(n, t)| (n, t.shape().dims().to_vec()))
            .collect())
    }

    /// The shape of a batch of `n` examples.
    fn batch_shape(&self, n: usize) -> Shape {
        let mut d = vec![n];
        d.extend(self.example_shape());
        Shape::from(d)
    }

    /// The mean cross-entropy of the batch `x` against `labels`, a data input of the program
    /// (so a recorded program takes each batch's labels as an input, not a constant).
    fn loss<O: Ops>(&self, ops: &mut O, x: &Var, labels: &Var) -> torchlean_nn::Result<Var> {
        let logits = self.logits(ops, x, Mode::Train)?;
        ops.apply(
            Op::CrossEntropy {
                reduction: Reduction::Mean,
            },
            &[&logits, labels],
        )
    }

    /// The loss on a batch of `n` as a recorded program, its leaves `x` and `labels` (the
    /// values are placeholders: every leaf is supplied when it runs).
    fn record_loss(&self, n: usize) -> Result<Recorded> {
        let mut r = Recorder::new();
        let x = r.input("x", &Tensor::zeros(self.batch_shape(n))?, false)?;
        let labels = r.input("labels", &Tensor::zeros(Shape::from([n]))?, false)?;
        let loss = self.loss(&mut r, &x, &labels)?;
        Ok(r.finish(&loss)?)
    }

    /// The ops one training step runs (the loss of a one-example batch, as recorded), each
    /// once, in first-use order.
    fn program_ops(&self) -> Result<Vec<Op>> {
        let rec = self.record_loss(1)?;
        let mut ops: Vec<Op> = Vec::new();
        for node in rec.graph.nodes() {
            if !ops.contains(&node.op) {
                ops.push(node.op.clone());
            }
        }
        Ok(ops)
    }
}

/// A layer (or [`Seq`](torchlean_nn::Seq) of layers) from `N` features is a model of examples
/// `[N]`.
impl<const N: usize, L: Layer<In = Features<N>>> Classify for L {
    fn example_shape(&self) -> Vec<usize> {
        vec![N]
    }

    fn logits<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> torchlean_nn::Result<Var> {
        self.forward(ops, x, mode)
    }

    fn description(&self) -> String {
        self.describe()
    }
}

/// Why a built-in architecture cannot be sized for the data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeProblem {
    #[error("needs at least 1 feature and 2 classes, the data has {features} and {classes}")]
    TooFew { features: usize, classes: usize },
    /// A CNN on data that is no image of at least 2×2 pixels (`image` is the data's shape, if
    /// it has one).
    #[error("needs images of at least 2×2 pixels; the data has {features} features{}", match .image {
        Some((h, w)) => format!(" as {h}×{w}"),
        None => " and no image shape".to_string(),
    })]
    Image {
        features: usize,
        image: Option<(usize, usize)>,
    },
}

/// Why a model given to [`Trainer::with_model`](crate::Trainer::with_model) does not fit the
/// data or the trainer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelMisfit {
    #[error("its examples are {example:?} ({size} values), the data's rows have {features}")]
    ExampleSize {
        example: Vec<usize>,
        size: usize,
        features: usize,
    },
    #[error("it gives logits of shape {logits:?} for one example, where [1, {classes}] is one score per class of the data")]
    Logits { logits: Vec<usize>, classes: usize },
    #[error("it keeps buffers ({}), which the trainer neither updates nor saves; a classifier for the trainer has parameters only", .names.join(", "))]
    Buffers { names: Vec<String> },
    #[error("it draws random numbers ({}: dropout?), which the trainer's eager and compiled backends and its verified steps would draw differently; train it in a Session of your own", .ops.join(", "))]
    Random { ops: Vec<String> },
}

/// Checks that `model` fits data of `features` per example and `classes` classes, from its
/// recorded one-example step: its example size, its logits' shape, no buffers and no random
/// draws.
pub fn check_fit<M: Classify>(model: &M, features: usize, classes: usize) -> Result<()> {
    let misfit = |problem| TrainError::ModelMisfit {
        model: model.description(),
        problem,
    };
    let example = model.example_shape();
    let size: usize = example.iter().product();
    if size != features {
        return Err(misfit(ModelMisfit::ExampleSize {
            example,
            size,
            features,
        }));
    }
    let mut r = Recorder::new();
    let x = r.input("x", &Tensor::zeros(model.batch_shape(1))?, false)?;
    let logits = model.logits(&mut r, &x, Mode::Eval)?;
    if logits.shape().dims() != [1, classes] {
        return Err(misfit(ModelMisfit::Logits {
            logits: logits.shape().dims().to_vec(),
            classes,
        }));
    }
    let step = model.record_loss(1)?;
    let buffers: Vec<String> = step
        .leaves
        .iter()
        .filter(|l| l.kind == LeafKind::Buffer)
        .map(|l| l.name.clone())
        .collect();
    if !buffers.is_empty() {
        return Err(misfit(ModelMisfit::Buffers { names: buffers }));
    }
    let mut random: Vec<String> = Vec::new();
    for node in step.graph.nodes() {
        let desc = node.op.desc();
        if desc.family == Family::Random && !random.iter().any(|n| n == desc.name) {
            random.push(desc.name.to_string());
        }
    }
    if !random.is_empty() {
        return Err(misfit(ModelMisfit::Random { ops: random }));
    }
    Ok(())
}
