//! `torchlean-optim`: PyTorch's optimizers and learning-rate schedules for any torchlean engine,
//! without the trainer's data, checkpoint, plotting and import dependencies.
//!
//! - [`optim`]: SGD, Adam, AdamW, RMSprop, Adagrad (PyTorch's update rules, defaults, validity
//!   rules and state names), gradient clipping, and [`EngineOptimizer::step_session`], PyTorch's
//!   `optimizer.step()` for a model run in an eager [`torchlean_nn::Session`];
//! - [`sched`]: learning-rate schedules (StepLR, cosine annealing, linear warm-up, sequential),
//!   replaying PyTorch's recursive formulas bit for bit.
//!
//! `torchlean-train` re-exports both modules; depend on this crate alone for a training loop of
//! your own (`crates/train/examples/train_mlp.rs` shows one).

pub mod error;
pub mod optim;
pub mod sched;

pub use error::{OptimError, Result};
pub use optim::{clip_grad_norm, EngineOptimizer, OptimConfig, Optimizer, Param, ParamState};
pub use sched::{Schedule, Scheduler};
pub use torchlean_runtime::{Element, TrainValue};
