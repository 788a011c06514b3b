//! What the shipped conformance cases (`tests/cases/`) cover: every kind of the op descriptor
//! table (extension kinds included) in some case, every optional attribute left out in some
//! case, and the regimes that change the maths (padding, strides, repeated parents, square
//! right operands, last-axis broadcasts, f32 runs). The kinds and attributes come from
//! `torchlean_spec::ops::desc`, never from a list written here.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use torchlean_ir::{Case, DType};
use torchlean_spec::ops::desc::OPS;

/// Every case file: its name, its raw JSON (to see which keys were written) and the parsed case.
fn cases() -> Vec<(String, Value, Case)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let case = Case::from_json_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            out.push((name, serde_json::from_str(&text).unwrap(), case));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn nodes(v: &Value) -> &[Value] {
    v["graph"]["nodes"].as_array().unwrap()
}

fn kind(n: &Value) -> &str {
    n["kind"].as_str().unwrap()
}

fn ints(v: &Value) -> Vec<u64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

#[test]
fn there_are_at_least_sixty_cases() {
    let n = cases().len();
    assert!(
        n >= 60,
        "{n} conformance cases; the interop issue asks for at least 60"
    );
}

#[test]
fn every_kind_and_every_extension_kind_has_a_case() {
    let cases = cases();
    let seen: BTreeSet<String> = cases
        .iter()
        .flat_map(|(_, _, c)| c.graph.nodes.iter().map(|n| n.kind.name().to_string()))
        .collect();
    let missing: Vec<&str> = OPS
        .iter()
        .filter(|d| !d.extension && !seen.contains(d.name))
        .map(|d| d.name)
        .collect();
    let missing_ext: Vec<&str> = OPS
        .iter()
        .filter(|d| d.extension && !seen.contains(d.name))
        .map(|d| d.name)
        .collect();
    assert!(
        missing.is_empty() && missing_ext.is_empty(),
        "IR kinds without a conformance case: {missing:?}; extension kinds without one: {missing_ext:?}"
    );
}

#[test]
fn every_optional_attribute_is_left_out_in_some_case() {
    // a default is checked only by a case that relies on it
    let cases = cases();
    let mut missing = Vec::new();
    for d in OPS {
        for a in d.attributes().iter().filter(|a| a.optional) {
            let left_out = cases.iter().any(|(_, v, _)| {
                nodes(v)
                    .iter()
                    .any(|n| kind(n) == d.name && n.get(a.key).is_none())
            });
            if !left_out {
                missing.push(format!("{}.{}", d.name, a.key));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "optional attributes no case leaves out: {missing:?}"
    );
}

/// The regimes that change the maths, each a predicate on one node of a case (raw JSON, with
/// the shapes of its parents).
#[allow(clippy::type_complexity)]
fn regimes() -> Vec<(&'static str, Box<dyn Fn(&[Value], &Value) -> bool>)> {
    let shape = |ns: &[Value], id: u64| ints(&ns[id as usize]["shape"]);
    vec![
        (
            "a padded average pool (padded zeros in the divisor)",
            Box::new(|_, n| kind(n) == "avg_pool2d_pad" && n["padding"].as_u64() > Some(0)),
        ),
        (
            "a padded max pool",
            Box::new(|_, n| kind(n) == "max_pool2d_pad" && n["padding"].as_u64() > Some(0)),
        ),
        (
            "a convolution with stride > 1",
            Box::new(|_, n| kind(n) == "conv2d" && n["stride"].as_u64() > Some(1)),
        ),
        (
            "a pool with stride > 1",
            Box::new(|_, n| kind(n).contains("pool") && n["stride"].as_u64() > Some(1)),
        ),
        (
            "a pool whose windows overlap (stride < window)",
            Box::new(|_, n| {
                kind(n).contains("pool")
                    && n["stride"].as_u64() < n["kH"].as_u64().min(n["kW"].as_u64())
            }),
        ),
        (
            "a node with a repeated parent",
            Box::new(|_, n| {
                let p = ints(&n["parents"]);
                p.iter().collect::<BTreeSet<_>>().len() < p.len()
            }),
        ),
        (
            "a matmul whose right operand is square",
            Box::new(move |ns, n| {
                kind(n) == "matmul" && {
                    let r = shape(ns, ints(&n["parents"])[1]);
                    r.len() >= 2 && r[r.len() - 1] == r[r.len() - 2]
                }
            }),
        ),
        (
            "a broadcast along the last axis",
            Box::new(|_, n| {
                kind(n) == "broadcast_to" && {
                    let (f, t) = (ints(&n["from_shape"]), ints(&n["to_shape"]));
                    f.last() == Some(&1) && t.last() > Some(&1)
                }
            }),
        ),
    ]
}

#[test]
fn the_cases_cover_the_regimes_that_change_the_maths() {
    let cases = cases();
    let missing: Vec<&str> = regimes()
        .into_iter()
        .filter(|(_, holds)| {
            !cases
                .iter()
                .any(|(_, v, _)| nodes(v).iter().any(|n| holds(nodes(v), n)))
        })
        .map(|(what, _)| what)
        .collect();
    assert!(missing.is_empty(), "no case has: {missing:?}");
    assert!(
        cases.iter().any(|(_, _, c)| c.dtype == DType::F32),
        "no case runs in f32 (\"dtype\": \"f32\")"
    );
}
