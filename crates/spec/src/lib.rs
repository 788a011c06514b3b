//! `torchlean-spec`: the foundation every other TorchLean-rs crate stands on.
//!
//! - [`Shape`]: outermost dimension first, scalar = no dimensions, row-major everywhere.
//! - [`Scalar`]: TorchLean's `Context α` — field operations, order, transcendental functions —
//!   for `f32`, `f64` and the exact [`Rational`] (where transcendentals are typed errors).
//! - [`Tensor`]: the reference tensor (shape + row-major data) with Tensor JSON.
//! - [`ops`]: **the reference meaning of every op** — shape rule, forward and VJP — which the IR
//!   denotation, the runtime's reference engine and the compiled reference backprop all call.
//!
//! This crate never touches an engine or the IR.

pub mod backend;
pub mod budget;
pub mod error;
pub mod finite;
pub mod ops;
pub mod scalar;
pub mod shape;
pub mod tensor;

pub use backend::{
    compose, Backend, ConvPool, Elementwise, Engine, EngineValue, Grads3, KernelResult, Layout,
    Linalg, Norm, Random, Reduce,
};
pub use budget::{Budget, NodeCost, OverBudget, Pass, Tally};
pub use error::{display_chain, ByteCountProblem, IdProblem, Result, SpecError, TensorJsonProblem};
pub use finite::NonFinite;
pub use ops::{
    Arity, AttentionDims, BinaryOp, Conv2dSpec, Cotangents, GeluApprox, Op, OpDesc, Operands,
    PoolKind, PoolSpec, Reduction, Saved, UnaryOp,
};
pub use scalar::{Rational, Scalar};
pub use shape::Shape;
pub use tensor::Tensor;
