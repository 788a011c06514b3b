//! Shared helpers for the compiled crate's integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use torchlean_ir::Case;

pub fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases")
}

/// Every shipped conformance case, sorted by name.
pub fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = std::fs::read_dir(cases_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| Case::from_json_str(&std::fs::read_to_string(&p).unwrap()).unwrap())
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(out.len() >= 22);
    out
}

pub fn case(name: &str) -> Case {
    cases().into_iter().find(|c| c.name == name).unwrap()
}

/// Cases whose graphs use only algebraic ops (exact over the rationals).
pub const ALGEBRAIC: &[&str] = &[
    "mlp3_relu_mse",
    "residual_block",
    "pooling_four_kinds",
    "cnn_small",
];
