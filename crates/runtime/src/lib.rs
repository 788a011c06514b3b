//! `torchlean-runtime`: the autograd tape and every reverse sweep (SPEC 2.1), the kernel trait
//! engines implement, and the reference engine.
//!
//! - [`Tape`], [`Node`]: a grow-only array of nodes with local VJP closures;
//! - [`GradValue`], [`GradZero`]: what a gradient value provides to the sweeps;
//! - the sweeps: [`Tape::backward_dense`], [`Tape::backward_dense_all`],
//!   [`Tape::backward_dense_from`], [`Tape::backward_sparse`] and their steps
//!   ([`add_grad_dense`], [`backward_dense_step`], [`totalize`], [`add_grad_all`],
//!   [`backward_dense_from_step`], [`backward_dense_from_loop`]);
//! - [`Kernels`]: forward and VJP of every `torchlean_spec::Op` on a value type, and [`record`]
//!   to put an op on an eager tape;
//! - the reference engine: `Kernels` for `torchlean_spec::Tensor<A>`.
//!
//! This crate never inspects the IR.

pub mod error;
pub mod kernel;
pub mod reference;
pub mod sweep;
pub mod tape;
pub mod value;

pub use error::{Result, RuntimeError};
pub use kernel::{record, Kernels, Operands, Saved};
pub use sweep::{
    add_grad_all, add_grad_dense, backward_dense_from_loop, backward_dense_from_step,
    backward_dense_step, totalize, SparseGrads,
};
pub use tape::{
    Backward, ContributionIter, Contributions, Node, Parents, RecordedSlot, Tape, VjpClosure,
};
pub use value::{GradValue, GradZero};
