//! `torchlean-ir`: the op-tagged graph IR of TorchLean.
//!
//! - [`Graph`], [`Node`], [`OpKind`]: the IR as data (`torchlean.ir.v1` JSON in and out, exact
//!   round trip, through [`format::august`]);
//! - [`Dialect`], [`GraphDoc`]: TorchLean's August and September dialects, read (detected from the
//!   file, the September dialect's lowered into our kinds by [`format::september`]) and written;
//! - [`Payload`]: weights keyed by node id (Payload JSON);
//! - [`check_well_formed`], [`check_shapes`], [`check_payload`]: every problem, each with node
//!   id, kind, field and shapes;
//! - [`denote_all`]: the reference evaluator, over any [`torchlean_spec::Scalar`] (so the
//!   rational scalar evaluates the algebraic fragment exactly), through the op semantics of
//!   `torchlean_spec::ops`;
//! - [`pretty()`] and [`dot`]: text for review and Graphviz;
//! - [`format`]: each file format in its own module ([`format::json::parse`]: , the strict JSON parser of every user file: a repeated key is an error);
//! - [`files`]: safetensors tensor data ([`TensorData`]) and atomic file writes, shared with the
//!   crates above.
//!
//! This crate never touches an engine.

pub mod budget;
pub mod check;
pub mod error;
pub mod files;
pub mod format;
pub mod graph;
pub mod kind;
pub mod payload;
pub mod pretty;
pub mod semantics;

pub use budget::check_budget;
pub use check::{broadcast_warning, check_payload, check_shapes, check_well_formed};
pub use error::{shorten, Diagnostic, IrError, Result, Severity};
pub use files::{safetensors_bytes, write_atomically, TensorData};
pub use format::august::FORMAT;
pub use format::case::{Case, Comparison, DType, Expect, Tolerance, CASE_FORMAT};
pub use format::dialect::{Dialect, FileNode, GraphDoc, UnknownDialect, Written};
pub use format::stream::GraphFile;
pub use graph::{Graph, Node};
pub use kind::{Attr, OpKind, ParentCount};
pub use payload::{Payload, PayloadEntry};
pub use pretty::{dot, pretty};
pub use semantics::{
    denote, denote_all, denote_all_within, denote_outputs, expected_payload_shapes, node_sem,
    payload_names, payload_tensor, DVal, InputValues, NodeSem,
};
