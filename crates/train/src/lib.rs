//! `torchlean-train`: training models written with `torchlean-nn`.
//!
//! - [`TrainValue`] (from `torchlean-runtime`, implemented by each engine): flat, mutable
//!   access to an engine's parameter data, which the optimizers update in place between steps;
//! - [`optim`], [`sched`]: PyTorch's optimizers and schedules, re-exported from
//!   `torchlean-optim` (depend on that crate alone for a loop of your own);
//! - [`data`]: the embedded 8×8 digits, CSV data sets, seeded splits, shuffles and batches;
//! - [`checkpoint`]: safetensors checkpoints with PyTorch's parameter names, written atomically;
//! - [`plot`]: SVG loss curves;
//! - [`predict`]: a saved classifier on new data (raw rows in, class names out);
//! - [`model`]: what the trainer trains ([`Classify`]: any classifier written against
//!   `torchlean_nn::Ops`, a `Layer` from features among them) and the built-in models of
//!   `torchlean train`, sized by the data at run time;
//! - [`imported`]: a classifier imported from ONNX (`train --from`), its head replaceable;
//! - [`exec`]: the eager and the compiled way to run a step;
//! - [`data_parallel`]: a step over several ranks (a `torchlean_distributed::World`): each
//!   rank's share of the global batch, the gradients' all-reduce, the ranks' sync check;
//! - [`trainer`]: the training loop behind `torchlean train`, with verified steps, for a
//!   built-in model or your own ([`Trainer::with_model`]);
//! - [`gpt`]: nanoGPT's training loop for a [`torchlean_nn::Gpt`] on character-level text,
//!   and sampling.

pub mod checkpoint;
pub mod data;
pub mod data_parallel;
pub mod error;
pub mod exec;
pub mod gpt;
pub mod imported;
pub mod model;
pub mod plot;
pub mod predict;
pub mod trainer;

pub use checkpoint::{Checkpoint, NamedTensor, TensorData};
pub use data::{batches, epoch_order, Dataset, Standardizer};
pub use error::{CheckpointProblem, Result, TrainError};
pub use gpt::{GptEval, GptEvent, GptTrainConfig, GptTrainer, Sampling};
pub use model::{Arch, Classifier, Classify, ModelMisfit};
pub use optim::{clip_grad_norm, EngineOptimizer, OptimConfig, Optimizer, Param, ParamState};
pub use plot::loss_svg;
pub use predict::SavedClassifier;
pub use sched::{Schedule, Scheduler};
pub use torchlean_distributed::{Start, World};
pub use torchlean_optim::{optim, sched, OptimError};
pub use torchlean_runtime::{Element, TrainValue};
pub use trainer::{Observer, Quiet, Summary, TrainConfig, Trainer};
