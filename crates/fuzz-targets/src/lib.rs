//! `torchlean-fuzz-targets`: the bodies of the fuzz targets, one function per parser or
//! checker that a user's bytes reach.
//!
//! Every target takes arbitrary bytes and returns normally: a malformed input is an `Err` it
//! drops. A panic is a finding: either a parser or checker panicked, or one of the laws the
//! targets assert (a parsed value prints and re-parses to the same JSON) failed. The same
//! functions run under libFuzzer (`fuzz/`, `cargo xtask fuzz`) and in the stable test suite
//! (`tests/`: every committed seed and regression input, and proptest mutations of the seeds).
//!
//! No target evaluates a graph: inputs may declare tensors of any size, and only parsing,
//! checking and lowering (with every declared shape capped at [`MAX_LOWERED_ELEMENTS`]
//! elements) are bounded by the input's own length.

use std::path::Path;

use serde_json::Value;
use torchlean_compiled::{exec_graph_of_ir, lower_text, CompiledError};
use torchlean_ir::{
    check_payload, check_shapes, check_well_formed, dot, expected_payload_shapes, pretty, Case,
    Graph, Payload,
};
use torchlean_spec::{Shape, Tensor};
use torchlean_train::{Checkpoint, Dataset, Standardizer};

/// One fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` file and the corpus folders
/// `fuzz/seeds/<name>/`, `fuzz/regressions/<name>/`), its body, and the longest input
/// libFuzzer should try (`-max_len`).
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
    pub max_len: usize,
}

/// Every target, in the order `cargo xtask fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "graph_json",
        run: graph_json,
        max_len: 32 * 1024,
    },
    Target {
        name: "payload_json",
        run: payload_json,
        max_len: 16 * 1024,
    },
    Target {
        name: "tensor_json",
        run: tensor_json,
        max_len: 4 * 1024,
    },
    Target {
        name: "payload_safetensors",
        run: payload_safetensors,
        max_len: 8 * 1024,
    },
    Target {
        name: "checkpoint",
        run: checkpoint,
        max_len: 8 * 1024,
    },
    Target {
        name: "case_json",
        run: case_json,
        max_len: 32 * 1024,
    },
    Target {
        name: "csv",
        run: csv,
        max_len: 4 * 1024,
    },
    Target {
        name: "lowering",
        run: lowering,
        max_len: 32 * 1024,
    },
    Target {
        name: "onnx",
        run: onnx,
        max_len: 16 * 1024,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The largest element count of any node shape (and synthesized payload tensor) the lowering
/// target lowers; larger graphs are skipped, so lowering never allocates much.
pub const MAX_LOWERED_ELEMENTS: usize = 4096;

/// The label column the CSV target asks for.
pub const CSV_LABEL: &str = "label";

/// The graph `payload_json` checks payloads against: one node of each kind that takes a
/// payload (`conv2d`, `batch_norm2d_nchw_eval`, `linear`, `const`, `cross_entropy`'s class
/// ids).
pub const FIXED_GRAPH: &str = include_str!("fixed_graph.json");

/// [`FIXED_GRAPH`], parsed.
pub fn fixed_graph() -> Graph {
    Graph::from_json_str(FIXED_GRAPH).expect("the fixed graph is a valid committed file")
}

/// Graph JSON: parse, `check_well_formed`, `check_shapes`, the review text and DOT; a parsed
/// graph prints and re-parses to the same JSON.
pub fn graph_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(g) = Graph::from_json_str(text) else {
        return;
    };
    check_graph(&g);
}

fn check_graph(g: &Graph) {
    let _ = check_well_formed(g);
    let _ = check_shapes(g);
    let _ = pretty(g);
    let _ = dot(g);
    let json = g.to_json();
    let again = Graph::from_json(&json)
        .unwrap_or_else(|e| panic!("a printed graph does not parse: {e}\n{json}"));
    assert_eq!(again.to_json(), json, "graph JSON round trip");
}

/// Payload JSON: parse, `check_payload` against [`FIXED_GRAPH`]; a parsed payload prints and
/// re-parses to the same JSON.
pub fn payload_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = Payload::from_json_str(text) else {
        return;
    };
    check_payload_round_trip(&p);
    let _ = check_payload(&fixed_graph(), &p);
}

fn check_payload_round_trip(p: &Payload) {
    let json = p.to_json();
    let again = Payload::from_json(&json)
        .unwrap_or_else(|e| panic!("a printed payload does not parse: {e}\n{json}"));
    assert_eq!(again.to_json(), json, "payload JSON round trip");
}

/// Tensor JSON, as `f64` and `f32`; a parsed tensor prints and re-parses to the same JSON.
pub fn tensor_json(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(t) = Tensor::<f64>::from_json(&v) {
        let json = t.to_json();
        let again = Tensor::<f64>::from_json(&json)
            .unwrap_or_else(|e| panic!("a printed tensor does not parse: {e}\n{json}"));
        assert_eq!(again.to_json(), json, "tensor JSON round trip");
    }
    let _ = Tensor::<f32>::from_json(&v);
}

/// A safetensors payload: `Payload::from_safetensors`, `check_payload` against
/// [`FIXED_GRAPH`]; a parsed payload writes and re-reads to the same payload.
pub fn payload_safetensors(data: &[u8]) {
    let Ok(p) = Payload::from_safetensors(data) else {
        return;
    };
    let _ = check_payload(&fixed_graph(), &p);
    check_payload_round_trip(&p);
    if let Ok(bytes) = p.to_safetensors() {
        let again = Payload::from_safetensors(&bytes)
            .unwrap_or_else(|e| panic!("a written payload does not read back: {e}"));
        assert_eq!(
            again.to_json(),
            p.to_json(),
            "payload safetensors round trip"
        );
    }
}

/// An ONNX model (`torchlean_onnx::import_onnx`, what `torchlean import` reads). Laws: an
/// imported graph passes `check_shapes` and `check_payload` with no error, and its graph JSON
/// and safetensors payload round-trip.
pub fn onnx(data: &[u8]) {
    let Ok(imported) = torchlean_onnx::import_onnx(data) else {
        return;
    };
    let (g, p) = (&imported.graph, &imported.payload);
    let errors = |d: Vec<torchlean_ir::Diagnostic>| d.into_iter().filter(|d| d.is_error()).count();
    assert_eq!(errors(check_shapes(g)), 0, "an imported graph checks");
    assert_eq!(errors(check_payload(g, p)), 0, "an imported payload checks");
    let json = g.to_json();
    let again =
        Graph::from_json(&json).unwrap_or_else(|e| panic!("an imported graph re-parses: {e}"));
    assert_eq!(&again, g, "imported graph JSON round trip");
    let bytes = p
        .to_safetensors()
        .unwrap_or_else(|e| panic!("an imported payload writes: {e}"));
    let back = Payload::from_safetensors(&bytes).unwrap_or_else(|e| panic!("it reads back: {e}"));
    assert_eq!(
        back.to_json(),
        p.to_json(),
        "imported payload safetensors round trip"
    );
}

/// A training checkpoint (`Checkpoint::from_safetensors`, what `Checkpoint::load` reads) and
/// `check_names` against a fixed expectation.
pub fn checkpoint(data: &[u8]) {
    let path = Path::new("<fuzz>.safetensors");
    let Ok(ck) = Checkpoint::from_safetensors(data, path) else {
        return;
    };
    let expected = [
        ("0.weight".to_string(), vec![2, 3]),
        ("0.bias".to_string(), vec![2]),
    ];
    let _ = ck.check_names(&expected, "");
    let _ = ck.check_names(&expected, torchlean_train::checkpoint::OPTIMIZER_PREFIX);
}

/// A `torchlean.case.v1` file: parse, then the graph checks and `check_payload`; a parsed
/// case prints and re-parses to the same JSON.
pub fn case_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(case) = Case::from_json_str(text) else {
        return;
    };
    check_graph(&case.graph);
    let _ = check_payload(&case.graph, &case.payload);
    let json = case.to_json();
    let again = Case::from_json(&json)
        .unwrap_or_else(|e| panic!("a printed case does not parse: {e}\n{json}"));
    assert_eq!(again.to_json(), json, "case JSON round trip");
}

/// The training CSV loader (`Dataset::from_csv_str` with label column [`CSV_LABEL`]), then
/// what training does with a loaded set before the first step: standardize, split, batch.
pub fn csv(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut set) = Dataset::from_csv_str(text, "<fuzz>", CSV_LABEL) else {
        return;
    };
    let stats = Standardizer::fit(&set);
    let _ = set.standardize(&stats);
    let _ = set.split(0.25, 7);
    let rows: Vec<usize> = (0..set.len().min(4)).collect();
    let _ = set.batch(&rows);
}

/// The lowering: a graph (bare graph JSON, or a case's `graph` with its `payload`) that
/// passes `check_shapes` and whose every shape has at most [`MAX_LOWERED_ELEMENTS`] elements
/// is lowered with `exec_graph_of_ir` and printed with `lower_text`. A bare graph gets a
/// zero payload of the shapes it expects, so mutated graphs still reach the lowering.
pub fn lowering(data: &[u8]) {
    let _ = lowered_text(data);
}

/// The lowering target's work: `None` when the input is skipped (not JSON, not a graph, fails
/// `check_shapes`, too large), else the lowering's text or its error.
fn lowered_text(data: &[u8]) -> Option<Result<String, CompiledError>> {
    let v = serde_json::from_slice::<Value>(data).ok()?;
    let (graph_v, payload) = match v.get("graph") {
        Some(g) => match v.get("payload").map(Payload::from_json) {
            None => (g, None),
            Some(p) => (g, Some(p.ok()?)),
        },
        None => (&v, None),
    };
    let g = Graph::from_json(graph_v).ok()?;
    if check_shapes(&g).iter().any(|d| d.is_error()) || !small(&g) {
        return None;
    }
    let payload = payload.or_else(|| zero_payload(&g))?;
    Some(exec_graph_of_ir(&g, &payload).map(|e| lower_text(&e)))
}

fn small(g: &Graph) -> bool {
    g.nodes.iter().all(|n| fits(&n.shape))
}

fn fits(s: &Shape) -> bool {
    s.checked_size().is_ok_and(|n| n <= MAX_LOWERED_ELEMENTS)
}

/// Zeros of every payload shape `g`'s nodes expect (`None` if one is too large).
fn zero_payload(g: &Graph) -> Option<Payload> {
    let mut p = Payload::new();
    for n in &g.nodes {
        let parents: Vec<Shape> = n
            .parents
            .iter()
            .filter_map(|&id| g.node(id).map(|pn| pn.shape.clone()))
            .collect();
        let Ok(expected) = expected_payload_shapes(n, &parents) else {
            continue;
        };
        for (name, shape) in expected {
            if !fits(&shape) {
                return None;
            }
            p.insert(n.id, name, Tensor::zeros(shape).ok()?);
        }
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names_are_unique() {
        for (i, t) in TARGETS.iter().enumerate() {
            assert!(
                TARGETS[..i].iter().all(|u| u.name != t.name),
                "{} twice",
                t.name
            );
            assert!(target(t.name).is_some());
        }
    }

    #[test]
    fn the_fixed_graph_checks_clean() {
        let g = fixed_graph();
        let problems: Vec<_> = check_shapes(&g)
            .into_iter()
            .filter(|d| d.is_error())
            .collect();
        assert!(problems.is_empty(), "{problems:?}");
        // every kind that takes a payload is there, so check_payload sees each of them
        let p = zero_payload(&g).expect("the fixed graph is small");
        for id in [1, 2, 4, 5, 7] {
            assert!(p.entry(id).is_some(), "node {id} takes no payload");
        }
        assert!(exec_graph_of_ir(&g, &p).is_ok());
    }

    /// The lowering target is not vacuous: every conformance case, and its bare graph with
    /// the zero payload, passes the cap and lowers.
    #[test]
    fn every_conformance_case_and_its_bare_graph_lowers() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("tests/cases") {
            let path = entry.expect("a readable folder").path();
            let bytes = std::fs::read(&path).expect("a readable case");
            let v: Value = serde_json::from_slice(&bytes).expect("a case is JSON");
            let graph = serde_json::to_vec(&v["graph"]).expect("JSON prints");
            for input in [&bytes, &graph] {
                match lowered_text(input) {
                    Some(Ok(text)) => assert!(!text.is_empty()),
                    other => panic!("{} does not lower: {other:?}", path.display()),
                }
            }
            n += 1;
        }
        assert!(n > 0);
    }

    #[test]
    fn the_zero_payload_of_a_large_graph_is_skipped() {
        let g = Graph::from_json_str(
            r#"{"format": "torchlean.ir.v1", "input_id": 0, "output_id": 1, "nodes": [
                {"id": 0, "kind": "input", "parents": [], "shape": [1, 5000]},
                {"id": 1, "kind": "linear", "parents": [0], "shape": [1, 2]}]}"#,
        )
        .expect("a valid graph");
        assert!(zero_payload(&g).is_none());
        assert!(!small(&g));
    }
}
