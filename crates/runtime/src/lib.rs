//! `torchlean-runtime`: the autograd tape and every reverse sweep (SPEC 2.1), the kernel trait
//! engines implement, and the reference engine.
//!
//! - [`Tape`], [`Node`]: a grow-only array of nodes with local VJP closures;
//! - [`GradValue`], [`GradZero`]: what a gradient value provides to the sweeps;
//! - the sweeps: [`Tape::backward_dense`], [`Tape::backward_dense_all`],
//!   [`Tape::backward_dense_from`], [`Tape::backward_sparse`] and their steps
//!   ([`add_grad_dense`], [`backward_dense_step`], [`totalize`], [`add_grad_all`],
//!   [`backward_dense_from_step`], [`backward_dense_from_loop`]);
//! - [`Kernels`]: what a value type provides (ops through `torchlean_spec::Engine`,
//!   conversions); [`forward`] / [`vjp`], the one dispatch; [`record`] / [`record_compiled`] to
//!   put an op on a tape (eager, or as a compiled node with the local-sum rule);
//! - the reference engine: `Kernels` for `torchlean_spec::Tensor<A>`;
//! - [`TrainValue`]: host access to parameter data, which optimizers update in place; each
//!   engine implements it beside its kernels.
//!
//! This crate never inspects the IR.

pub mod anomaly;
pub mod error;
pub mod host;
pub mod kernel;
pub mod reference_engine;
pub mod sweep;
pub mod tape;
pub mod update;
pub mod value;

pub use anomaly::{check_forward, Anomaly, AnomalyMode, Direction, Site};
pub use error::{Result, RuntimeError};
pub use host::{Element, TrainValue};
pub use kernel::{
    fold_repeated_operands, forward, record, record_compiled, release_saved, vjp, vjp_for,
    Cotangents, Kernels, Operands, RecordMode, Saved,
};
pub use sweep::{
    add_grad_all, add_grad_dense, backward_dense_from_loop, backward_dense_from_step,
    backward_dense_step, needed_nodes, totalize, SparseGrads,
};
pub use tape::{
    Backward, ContributionIter, Contributions, Node, Parents, RecordedSlot, Tape, VjpClosure,
};
pub use torchlean_spec::NonFinite;
pub use update::{
    clip_coefficient, clip_grad_norm, sum_of_squares, total_norm, AdamDecay, SgdMomentum,
    UpdateRule,
};
pub use value::{GradValue, GradZero};
