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
}

impl Model {
    pub const ALL: [Model; 2] = [Model::Mlp, Model::Cnn];

    pub fn name(self) -> &'static str {
        match self {
            Model::Mlp => "mlp",
            Model::Cnn => "cnn",
        }
    }

    /// The label the checker's report lists the model under.
    pub fn label(self) -> &'static str {
        match self {
            Model::Mlp => "model mlp",
            Model::Cnn => "model cnn",
        }
    }

    /// The model's fixed input.
    pub fn input(self) -> Result<Tensor<f64>> {
        let shape = match self {
            Model::Mlp => Shape::from([5, 6]),
            Model::Cnn => Shape::from([2, 1, 4, 4]),
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
        };
        ops.sum(&y)
    }
}
