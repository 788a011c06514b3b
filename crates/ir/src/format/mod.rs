//! The files the IR is read from and written to, one module per format: the strict JSON
//! parser every user file goes through ([`json`]), the node-at-a-time reader of large files
//! ([`stream`]), TorchLean's two dialects of `torchlean.ir.v1` ([`august`], [`september`]) and
//! how a file's dialect is told ([`dialect`]), and the conformance case format ([`case`]).
//! The data they fill ([`crate::Graph`], [`crate::Payload`]) knows none of them.

pub mod august;
pub mod case;
pub mod dialect;
pub mod json;
pub mod september;
pub mod stream;
