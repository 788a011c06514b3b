//! Training losses with PyTorch's definitions, written once over [`Ops`] and composed of
//! existing ops, so that they run eagerly in a [`crate::Session`] on every engine and record
//! through the [`crate::Recorder`] into exportable `torchlean.ir.v1`:
//!
//! - [`Loss::Mse`]: `F.mse_loss(output, target, reduction)`: `Σ (y − t)²`, divided by the
//!   element count for the mean (the mean is the fused `mse_loss` op);
//! - [`Loss::CrossEntropy`]: `F.cross_entropy(logits [N, C], labels, label_smoothing = ε,
//!   reduction)`. With `ε = 0` it is the `cross_entropy` op. Otherwise it is ATen's
//!   `cross_entropy_loss_label_smoothing`: `(1 − ε)·nll + (ε / C)·smooth`, where `nll` is the
//!   cross entropy under the same reduction and `smooth` is the row sums `−Σ_c log_softmax`,
//!   averaged over the `N` rows for the mean and summed for the sum. So the mean divides the
//!   smoothing term by `N·C`, the sum by `C`;
//! - [`Loss::BceWithLogits`]: `F.binary_cross_entropy_with_logits(logits, target,
//!   reduction)` with targets in `[0, 1]` of the logits' shape, by PyTorch's stable formula
//!   `(1 − t)·x − log σ(x) = (1 − t)·x + softplus(−x)`, averaged over every element for the
//!   mean.
//!
//! A target of the wrong kind or shape, a label outside `[0, C)`, a label smoothing outside
//! `[0, 1]`, a soft target outside `[0, 1]` or a mean over no elements is an
//! [`NnError::Loss`] naming the loss, the layer and the two shapes. Everything is checked
//! before any op is applied, so the recorder refuses such input as early as the session.
//!
//! ```
//! use torchlean_nn::{Loss, Ops, Session, Sweep, Target};
//! use torchlean_spec::{Reduction, Tensor};
//!
//! let mut s = Session::<Tensor<f64>>::new();
//! let logits = s.input("logits", &Tensor::new([2, 3], vec![2.0, 0.0, 0.0, 0.0, 0.0, 0.0])?, true)?;
//! let loss: Loss = "cross-entropy".parse()?;
//! let value = loss.apply(&mut s, &logits, &Target::Labels(&[0, 2]), Reduction::Sum)?;
//! s.backward(&value, Sweep::Releasing)?;
//! // −log softmax: log(e² + 2) − 2 for the first row, log 3 for the second
//! let want = ((2f64.exp() + 2.0).ln() - 2.0) + 3f64.ln();
//! assert!((s.value(&value)?.item()? - want).abs() < 1e-15);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::{NnError, Result};
use crate::ops::{Ops, Var};
use std::fmt;
use std::str::FromStr;
use torchlean_spec::{Reduction, Shape, Tensor, UnaryOp};

/// A training loss (its CLI name: [`Loss::name`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    /// `F.mse_loss`: the target is [`Target::Values`] of the output's shape.
    Mse,
    /// `F.cross_entropy` with integer labels ([`Target::Labels`], one per row of logits
    /// `[N, C]`) and `label_smoothing ∈ [0, 1]`.
    CrossEntropy {
        /// PyTorch's `label_smoothing`, `ε ∈ [0, 1]` (0: none).
        label_smoothing: f64,
    },
    /// `F.binary_cross_entropy_with_logits`: the target is [`Target::Values`] in `[0, 1]`
    /// of the logits' shape.
    BceWithLogits,
}

/// What a loss compares the output with.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// Integer class labels, one per row (for [`Loss::CrossEntropy`]).
    Labels(&'a [usize]),
    /// A tensor of the output's shape (for [`Loss::Mse`] and [`Loss::BceWithLogits`]).
    Values(&'a Tensor<f64>),
}

impl Target<'_> {
    /// The target's shape: `[len]` for labels.
    pub fn shape(&self) -> Shape {
        match self {
            Target::Labels(labels) => Shape::from([labels.len()]),
            Target::Values(t) => t.shape().clone(),
        }
    }
}

impl Loss {
    /// The CLI names, in declaration order.
    pub const NAMES: [&'static str; 3] = ["mse", "cross-entropy", "bce-with-logits"];

    /// The CLI name (`mse`, `cross-entropy`, `bce-with-logits`).
    pub fn name(&self) -> &'static str {
        match self {
            Loss::Mse => Self::NAMES[0],
            Loss::CrossEntropy { .. } => Self::NAMES[1],
            Loss::BceWithLogits => Self::NAMES[2],
        }
    }

    /// The loss of `output` against `target` under `reduction`, a scalar, applied through
    /// `ops` (so under the current scope). The input is validated first; see the
    /// [module docs](self) for the definitions and the errors.
    pub fn apply<O: Ops>(
        &self,
        ops: &mut O,
        output: &Var,
        target: &Target<'_>,
        reduction: Reduction,
    ) -> Result<Var> {
        let refuse = |problem| NnError::Loss {
            loss: self.name(),
            layer: ops.scope_path(),
            output: output.shape().clone(),
            target: target.shape(),
            problem,
        };
        if reduction == Reduction::Mean && output.shape().size() == 0 {
            return Err(refuse(LossProblem::EmptyMean));
        }
        match (*self, *target) {
            (Loss::Mse, Target::Values(t)) => {
                same_shape(output, t).map_err(|()| refuse(LossProblem::TargetShape))?;
                mse(ops, output, t, reduction)
            }
            (Loss::BceWithLogits, Target::Values(t)) => {
                same_shape(output, t).map_err(|()| refuse(LossProblem::TargetShape))?;
                if let Some((i, v)) = t
                    .data()
                    .iter()
                    .enumerate()
                    .find(|(_, v)| !(0.0..=1.0).contains(*v))
                {
                    return Err(refuse(LossProblem::TargetRange {
                        element: i,
                        value: *v,
                    }));
                }
                bce_with_logits(ops, output, t, reduction)
            }
            (Loss::CrossEntropy { label_smoothing }, Target::Labels(labels)) => {
                if !(0.0..=1.0).contains(&label_smoothing) {
                    return Err(refuse(LossProblem::Smoothing {
                        value: label_smoothing,
                    }));
                }
                let &[n, c] = output.shape().dims() else {
                    return Err(refuse(LossProblem::LogitsRank));
                };
                if labels.len() != n {
                    return Err(refuse(LossProblem::LabelCount {
                        labels: labels.len(),
                        rows: n,
                    }));
                }
                if let Some((i, l)) = labels.iter().enumerate().find(|(_, &l)| l >= c) {
                    return Err(refuse(LossProblem::Label {
                        row: i,
                        label: *l,
                        classes: c,
                    }));
                }
                cross_entropy(ops, output, labels, c, label_smoothing, reduction)
            }
            (Loss::Mse | Loss::BceWithLogits, Target::Labels(_)) => {
                Err(refuse(LossProblem::LabelsGiven))
            }
            (Loss::CrossEntropy { .. }, Target::Values(_)) => Err(refuse(LossProblem::ValuesGiven)),
        }
    }
}

impl fmt::Display for Loss {
    /// The CLI name; the label smoothing is not part of it (a separate setting), so parsing
    /// the name back gives cross-entropy without smoothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Loss {
    type Err = NnError;

    /// A CLI name ([`Loss::NAMES`]); `cross-entropy` has no label smoothing.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "mse" => Ok(Loss::Mse),
            "cross-entropy" => Ok(Loss::CrossEntropy {
                label_smoothing: 0.0,
            }),
            "bce-with-logits" => Ok(Loss::BceWithLogits),
            _ => Err(NnError::UnknownLoss {
                name: s.to_string(),
            }),
        }
    }
}

fn same_shape(output: &Var, target: &Tensor<f64>) -> std::result::Result<(), ()> {
    if output.shape() == target.shape() {
        Ok(())
    } else {
        Err(())
    }
}

/// What a loss cannot take ([`NnError::Loss`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LossProblem {
    #[error("the mean over no elements is undefined (PyTorch gives NaN)")]
    EmptyMean,
    /// Value targets of another shape than the output.
    #[error("the target must have the output's shape (no broadcasting)")]
    TargetShape,
    /// A probability target outside `[0, 1]` (`element` row-major).
    #[error("target element {element} is {value}, outside [0, 1]")]
    TargetRange { element: usize, value: f64 },
    #[error("label smoothing {value} is outside [0, 1]")]
    Smoothing { value: f64 },
    /// Cross-entropy logits that are not `[N, C]`.
    #[error("the logits must be [N, C]")]
    LogitsRank,
    #[error("{labels} labels for {rows} rows of logits")]
    LabelCount { labels: usize, rows: usize },
    /// A class label at or past the class count.
    #[error("row {row}'s label is {label}, but the logits have {classes} classes ({})", match .classes {
        0 => "no label is valid".to_string(),
        c => format!("labels 0 to {}", c - 1),
    })]
    Label {
        row: usize,
        label: usize,
        classes: usize,
    },
    /// Class labels for a loss of values.
    #[error("the target must be values of the output's shape, not class labels")]
    LabelsGiven,
    /// Values for a loss of class labels.
    #[error("the target must be integer class labels (probability targets are not supported)")]
    ValuesGiven,
}

/// The mean of every element of `x`: a rank-1 view, then `reduce_mean` (a sum divided by the
/// count, as PyTorch's `mean`).
fn mean_all<O: Ops>(ops: &mut O, x: &Var) -> Result<Var> {
    let flat = if x.shape().rank() == 1 {
        x.clone()
    } else {
        ops.reshape(x, Shape::from([x.shape().size()]))?
    };
    ops.reduce_mean(&flat, 0)
}

fn reduce_all<O: Ops>(ops: &mut O, x: &Var, reduction: Reduction) -> Result<Var> {
    match reduction {
        Reduction::Mean => mean_all(ops, x),
        Reduction::Sum => ops.sum(x),
    }
}

/// Mean: the fused `mse_loss`; sum: `Σ (y − t)·(y − t)`.
fn mse<O: Ops>(ops: &mut O, y: &Var, t: &Tensor<f64>, reduction: Reduction) -> Result<Var> {
    let t = ops.constant(t)?;
    match reduction {
        Reduction::Mean => ops.mse_loss(y, &t),
        Reduction::Sum => {
            let d = ops.sub(y, &t)?;
            let sq = ops.mul(&d, &d)?;
            ops.sum(&sq)
        }
    }
}

/// ATen's `cross_entropy_loss_label_smoothing` for `ε > 0` (see the module docs), the
/// `cross_entropy` op for `ε = 0`.
fn cross_entropy<O: Ops>(
    ops: &mut O,
    logits: &Var,
    labels: &[usize],
    classes: usize,
    eps: f64,
    reduction: Reduction,
) -> Result<Var> {
    let nll = ops.cross_entropy(logits, labels, reduction)?;
    if eps == 0.0 {
        return Ok(nll);
    }
    let logp = ops.log_softmax(logits, 1)?;
    let rows = ops.reduce_sum(&logp, 1)?;
    let rows = ops.neg(&rows)?;
    let smooth = match reduction {
        Reduction::Mean => ops.reduce_mean(&rows, 0)?,
        Reduction::Sum => ops.sum(&rows)?,
    };
    let nll = ops.scale(&nll, 1.0 - eps)?;
    let smooth = ops.scale(&smooth, eps / classes as f64)?;
    ops.add(&nll, &smooth)
}

/// `(1 − t)·x + softplus(−x)` elementwise, reduced.
fn bce_with_logits<O: Ops>(
    ops: &mut O,
    x: &Var,
    t: &Tensor<f64>,
    reduction: Reduction,
) -> Result<Var> {
    let t = ops.constant(t)?;
    let neg_t = ops.neg(&t)?;
    let one_minus_t = ops.add_scalar(&neg_t, 1.0)?;
    let linear = ops.mul(&one_minus_t, x)?;
    let neg_x = ops.neg(x)?;
    let soft = ops.unary(UnaryOp::Softplus, &neg_x)?;
    let per_element = ops.add(&linear, &soft)?;
    reduce_all(ops, &per_element, reduction)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_parse_and_display_round_trip() {
        for name in Loss::NAMES {
            let loss: Loss = name.parse().unwrap();
            assert_eq!(loss.to_string(), name);
            assert_eq!(loss.name(), name);
        }
        assert_eq!(
            "cross-entropy".parse::<Loss>().unwrap(),
            Loss::CrossEntropy {
                label_smoothing: 0.0
            }
        );
        let e = "cross_entropy".parse::<Loss>().unwrap_err();
        assert!(
            matches!(&e, NnError::UnknownLoss { name } if name == "cross_entropy"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "unknown loss `cross_entropy` (expected one of mse, cross-entropy, bce-with-logits)"
        );
    }

    #[test]
    fn a_target_reports_its_shape() {
        assert_eq!(Target::Labels(&[1, 2, 0]).shape(), Shape::from([3]));
        let t = Tensor::<f64>::zeros(Shape::from([2, 5])).unwrap();
        assert_eq!(Target::Values(&t).shape(), Shape::from([2, 5]));
    }
}
