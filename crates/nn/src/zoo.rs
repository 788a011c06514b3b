//! The model zoo: small models with fixed seeds and inputs, written with the typed layers, that
//! the checks run end to end (eager == compiled on every engine in `check-equivalence`, the
//! exported IR passes `torchlean check`, its lowering is an insta snapshot, and `torchlean
//! grad` on it reproduces the Session's gradients).

use crate::error::Result;
use crate::layers::{self, Conv2d, Flatten, Layer, Linear, Mode};
use crate::ops::{Ops, Var};
use crate::seq;
use torchlean_spec::{Shape, Tensor};

/// A zoo model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Linear 6→8, ReLU, Linear 8→8, Tanh, Linear 8→3, LogSoftmax; batch 5.
    Mlp,
    /// Conv 1→3 (3×3, padding 1), ReLU, MaxPool 2, Flatten, Linear 12→4; batch 2 of 4×4.
    Cnn,
    /// Conv 1→3, BatchNorm2d, ReLU, AvgPool 2, Flatten, Linear 12→4; batch 2 of 4×4.
    CnnBatchNorm,
    /// Linear 6→6, then a residual block `x + Linear(ReLU(Linear(x)))`, LayerNorm; batch 5.
    Residual,
    /// A transformer encoder block (4 features, 2 heads, feed-forward 8, causal) over
    /// `[2, 3, 4]` tokens.
    Transformer,
}

impl Model {
    pub const ALL: [Model; 5] = [
        Model::Mlp,
        Model::Cnn,
        Model::CnnBatchNorm,
        Model::Residual,
        Model::Transformer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Model::Mlp => "mlp",
            Model::Cnn => "cnn",
            Model::CnnBatchNorm => "cnn_batchnorm",
            Model::Residual => "residual",
            Model::Transformer => "transformer",
        }
    }

    /// The label the checker's report lists the model under.
    pub fn label(self) -> &'static str {
        match self {
            Model::Mlp => "model mlp",
            Model::Cnn => "model cnn",
            Model::CnnBatchNorm => "model cnn_batchnorm",
            Model::Residual => "model residual",
            Model::Transformer => "model transformer",
        }
    }

    /// The model's fixed input.
    pub fn input(self) -> Result<Tensor<f64>> {
        let shape = match self {
            Model::Mlp | Model::Residual => Shape::from([5, 6]),
            Model::Cnn | Model::CnnBatchNorm => Shape::from([2, 1, 4, 4]),
            Model::Transformer => Shape::from([2, 3, 4]),
        };
        let n = shape.checked_size()?;
        Ok(Tensor::new(
            shape,
            (0..n).map(|i| ((i * 7 % 11) as f64 - 5.0) / 6.0).collect(),
        )?)
    }

    /// The model applied to `x` in `mode`, summed to a scalar loss.
    pub fn loss<O: Ops>(self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        let y = match self {
            Model::Mlp => seq![
                Linear::<6, 8>::new(1)?,
                layers::relu(),
                Linear::<8, 8>::new(2)?,
                layers::tanh(),
                Linear::<8, 3>::new(3)?,
                layers::log_softmax(),
            ]
            .forward(ops, x, mode)?,
            Model::Cnn => seq![
                Conv2d::<1, 3, 3>::new(1, 1, 7)?,
                layers::relu(),
                layers::max_pool2d::<3, 2>(2, 0),
                Flatten::<3, 12>,
                Linear::<12, 4>::new(8)?,
            ]
            .forward(ops, x, mode)?,
            Model::CnnBatchNorm => seq![
                Conv2d::<1, 3, 3>::new(1, 1, 9)?,
                layers::BatchNorm2d::<3>::new(),
                layers::relu(),
                layers::avg_pool2d::<3, 2>(2, 0),
                Flatten::<3, 12>,
                Linear::<12, 4>::new(10)?,
            ]
            .forward(ops, x, mode)?,
            Model::Residual => seq![
                Linear::<6, 6>::new(4)?,
                layers::Residual(seq![
                    Linear::<6, 6>::new(5)?,
                    layers::relu(),
                    Linear::<6, 6>::new(6)?,
                ]),
                layers::LayerNorm::<6>::new(),
            ]
            .forward(ops, x, mode)?,
            Model::Transformer => {
                layers::TransformerEncoderBlock::<4, 2, 8>::new(true, 12)?.forward(ops, x, mode)?
            }
        };
        ops.sum(&y)
    }
}
