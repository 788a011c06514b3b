//! Integration tests of the IR: the shipped conformance cases, malformed input, round trips,
//! exact rational evaluation, a no-panic property over mutated graphs, and snapshots of the
//! pretty-printed IR.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use torchlean_ir::*;
use torchlean_spec::{Rational, Scalar, Shape, Tensor};

/// Every wire name (the op descriptors').
fn wire_names() -> Vec<&'static str> {
    torchlean_spec::ops::desc::names().collect()
}

fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases")
}

fn load_cases() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(cases_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((
                path.file_stem().unwrap().to_string_lossy().into_owned(),
                serde_json::from_str(&text).unwrap(),
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 22, "the shipped conformance cases are missing");
    out
}

fn errors(d: &[Diagnostic]) -> Vec<&Diagnostic> {
    d.iter().filter(|d| d.is_error()).collect()
}

#[test]
fn every_conformance_graph_passes_check_shapes_and_check_payload() {
    for (name, v) in load_cases() {
        let case = Case::from_json(&v).unwrap_or_else(|e| panic!("{name}: {e}"));
        let d = check_shapes(&case.graph);
        assert!(errors(&d).is_empty(), "{name}: {d:?}");
        let d = check_payload(&case.graph, &case.payload);
        assert!(errors(&d).is_empty(), "{name}: {d:?}");
    }
}

#[test]
fn denote_reproduces_every_expected_output_in_f64_and_f32() {
    for (name, v) in load_cases() {
        let case = Case::from_json(&v).unwrap();
        let want = case.expect.output.as_ref().unwrap();
        let got = denote::<f64>(&case.graph, &case.payload, &case.inputs).unwrap();
        let c = case.tolerance.compare(&got, want);
        assert!(c.pass, "{name} (f64): {c:?}");
        let x32 = case.inputs[0].convert::<f32>().unwrap();
        let got32 = denote::<f32>(&case.graph, &case.payload, &x32).unwrap();
        let tol32 = Tolerance {
            rtol: 1e-4,
            atol: 1e-5,
        };
        let c = tol32.compare(&got32.convert::<f64>().unwrap(), want);
        assert!(c.pass, "{name} (f32): {c:?}");
    }
}

#[test]
fn graph_json_round_trip_is_exact() {
    for (name, v) in load_cases() {
        let g = Graph::from_json(&v["graph"]).unwrap();
        let back = Graph::from_json(&g.to_json()).unwrap();
        assert_eq!(g, back, "{name}");
        // and text-level: serialising twice gives the same bytes
        assert_eq!(g.to_json().to_string(), back.to_json().to_string());
        // a case with NaN expectations (PyTorch's NaN semantics) is not `==` to itself, so the
        // whole case is compared as its JSON, which writes NaN as "nan" and every float exactly
        let case = Case::from_json(&v).unwrap();
        let again = Case::from_json(&case.to_json()).unwrap();
        assert_eq!(again.graph, case.graph, "{name}");
        assert_eq!(again.to_json(), case.to_json(), "{name}");
    }
}

#[test]
fn torchlean_exporter_extra_keys_are_accepted() {
    let g = json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 3,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [1, 2, 3, 3], "value_kind": "tensor",
             "debug_target": "x"},
            {"id": 1, "kind": "batch_norm2d_nchw_eval", "parents": [0], "shape": [1, 2, 3, 3],
             "channels": 2, "eps": 1e-5, "value_kind": "tensor"},
            {"id": 2, "kind": "const", "parents": [], "shape": [1, 2, 3, 3],
             "value_shape": [1, 2, 3, 3], "values": [0.0], "debug_target": "c"},
            {"id": 3, "kind": "add", "parents": [1, 2], "shape": [1, 2, 3, 3]}
        ]
    });
    let g = Graph::from_json(&g).unwrap();
    assert!(errors(&check_shapes(&g)).is_empty());
}

/// A small valid graph to mutate.
fn base() -> Value {
    json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 4,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2, 3]},
            {"id": 1, "kind": "linear", "parents": [0], "shape": [2, 4]},
            {"id": 2, "kind": "relu", "parents": [1], "shape": [2, 4]},
            {"id": 3, "kind": "softmax", "parents": [2], "shape": [2, 4], "axis": 1},
            {"id": 4, "kind": "sum", "parents": [3], "shape": []}
        ]
    })
}

/// Applies `mutate` to the base graph and asserts that loading + checking reports an error
/// whose text contains every string in `want`.
#[track_caller]
fn check_rejected(mutate: impl FnOnce(&mut Value), want: &[&str]) {
    let mut v = base();
    mutate(&mut v);
    let diags = match Graph::from_json(&v) {
        Err(e) => e.diagnostics(),
        Ok(g) => check_shapes(&g),
    };
    let text: Vec<String> = diags
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert!(!text.is_empty(), "expected an error for {v}");
    let joined = text.join("\n");
    for w in want {
        assert!(joined.contains(w), "expected {w:?} in:\n{joined}");
    }
}

#[test]
fn a_shape_rule_error_keeps_the_spec_error_whole() {
    // the softmax axis out of range: the diagnostic's text, and the spec error behind it for a
    // caller to match on (and as its `source`)
    let mut v = base();
    v["nodes"][3]["axis"] = json!(5);
    let diags = match Graph::from_json(&v) {
        Err(e) => e.diagnostics(),
        Ok(g) => check_shapes(&g),
    };
    let d = diags.iter().find(|d| d.is_error()).expect("an error");
    assert!(
        matches!(
            &d.cause,
            Some(torchlean_spec::SpecError::AxisOutOfRange {
                op: "softmax",
                attr: "axis",
                axis: 5,
                ..
            })
        ),
        "{d:?}"
    );
    assert_eq!(d.field.as_deref(), Some("axis"));
    let source = std::error::Error::source(d).expect("the spec error as the source");
    assert_eq!(source.to_string(), d.message);
    // the IR's own findings have no spec error behind them
    let mut v = base();
    v["nodes"][2]["parents"] = json!([9]);
    let diags = Graph::from_json(&v).map_or_else(|e| e.diagnostics(), |g| check_shapes(&g));
    assert!(diags.iter().all(|d| d.cause.is_none()), "{diags:?}");
}

#[test]
fn attributes_restating_the_operand_shape_are_checked_and_named() {
    // one validation (the shape rule) for in_shape, value_shape and from_shape
    check_rejected(
        |v| {
            v["nodes"][2] = json!({"id": 2, "kind": "reshape", "parents": [1], "shape": [8],
                       "in_shape": [4, 2], "out_shape": [8]})
        },
        &["node 2 (reshape)", "field `in_shape`", "[4, 2]", "[2, 4]"],
    );
    check_rejected(
        |v| {
            v["nodes"][2] = json!({"id": 2, "kind": "flatten", "parents": [1], "shape": [8],
                                   "value_shape": [8]})
        },
        &["node 2 (flatten)", "field `value_shape`"],
    );
    check_rejected(
        |v| {
            v["nodes"][2] = json!({"id": 2, "kind": "broadcast_to", "parents": [1],
                                   "shape": [3, 2, 4], "from_shape": [1, 4],
                                   "to_shape": [3, 2, 4]})
        },
        &["node 2 (broadcast_to)", "field `from_shape`"],
    );
}

#[test]
fn malformed_graphs_name_the_node_and_field() {
    check_rejected(
        |v| v["nodes"][2]["kind"] = json!("frobnicate"),
        &["node 2 (frobnicate)", "field `kind`", "unknown kind"],
    );
    check_rejected(
        |v| v["nodes"][2]["parents"] = json!([0, 1]),
        &["node 2 (relu)", "field `parents`", "expected 1, got 2"],
    );
    check_rejected(
        |v| v["nodes"][2]["parents"] = json!([3]),
        &["node 2 (relu)", "parent id 3 is not < 2"],
    );
    check_rejected(
        |v| v["nodes"][2]["shape"] = json!([2, 5]),
        &["node 2 (relu)", "field `shape`", "[2, 5]", "[2, 4]"],
    );
    check_rejected(
        |v| {
            v["nodes"][3].as_object_mut().unwrap().remove("axis");
        },
        &["node 3 (softmax)", "field `axis`", "missing"],
    );
    check_rejected(
        |v| v["nodes"][3]["axis"] = json!(5),
        &["node 3 (softmax)", "field `axis`", "out of range"],
    );
    check_rejected(
        |v| v["nodes"][2]["id"] = json!(7),
        &["node 2 (relu)", "field `id`", "id discipline"],
    );
    check_rejected(
        |v| v["nodes"][4]["shape"] = json!([4294967296u64, 4294967296u64]),
        &["node 4 (sum)", "field `shape`", "more elements than fit"],
    );
    check_rejected(
        |v| v["nodes"][2]["shape"] = json!([1u64 << 20, 1u64 << 20]),
        &["node 2 (relu)", "field `shape`", "limit"],
    );
    check_rejected(|v| v["format"] = json!("onnx"), &["field `format`"]);
    check_rejected(|v| v["output_id"] = json!(9), &["field `output_id`"]);
    check_rejected(
        |v| v["nodes"][1]["shape"] = json!("wide"),
        &["node 1 (linear)", "field `shape`"],
    );
}

#[test]
fn bad_extension_attributes_name_the_node_and_field() {
    // an `approximate` outside its options
    check_rejected(
        |v| {
            v["nodes"][2]["kind"] = json!("gelu");
            v["nodes"][2]["approximate"] = json!("exact");
        },
        &[
            "node 2 (gelu)",
            "field `approximate`",
            "is \"exact\", expected one of \"none\", \"tanh\"",
        ],
    );
    check_rejected(
        |v| {
            v["nodes"][2]["kind"] = json!("gelu");
            v["nodes"][2]["approximate"] = json!(true);
        },
        &["node 2 (gelu)", "field `approximate`", "is true"],
    );
    // clamp with min > max
    check_rejected(
        |v| {
            v["nodes"][2]["kind"] = json!("clamp");
            v["nodes"][2]["min"] = json!(1.0);
            v["nodes"][2]["max"] = json!(-1.0);
        },
        &["node 2 (clamp)", "field `min`", "greater than `max`"],
    );
    check_rejected(
        |v| {
            v["nodes"][2]["kind"] = json!("clamp");
            v["nodes"][2]["max"] = json!("high");
        },
        &["node 2 (clamp)", "field `max`", "expected a number"],
    );
    // slices past the extent of [2, 4] on axis 1
    check_rejected(
        |v| {
            v["nodes"][2] = json!({"id": 2, "kind": "slice", "parents": [1], "shape": [2, 2],
                                   "axis": 1, "start": 3, "len": 2});
        },
        &["node 2 (slice)", "field `len`", "past the extent 4"],
    );
    check_rejected(
        |v| {
            v["nodes"][2] = json!({"id": 2, "kind": "slice", "parents": [1], "shape": [2, 0],
                                   "axis": 1, "start": 5, "len": 0});
        },
        &["node 2 (slice)", "field `start`", "past the extent 4"],
    );
    check_rejected(
        |v| {
            v["nodes"][2] = json!({"id": 2, "kind": "slice", "parents": [1], "shape": [2, 1],
                                   "axis": 1, "start": 2, "len": u64::MAX});
        },
        &["node 2 (slice)", "field `len`", "overflows"],
    );
    // training-mode batch norm needs [N, C, H, W] and a valid eps
    check_rejected(
        |v| {
            v["nodes"][2] = json!({"id": 2, "kind": "batch_norm2d_nchw_train", "parents": [1],
                                   "shape": [2, 4], "channels": 4});
        },
        &["node 2 (batch_norm2d_nchw_train)", "expects [N, 4, H, W]"],
    );
    check_rejected(
        |v| {
            v["nodes"][2] = json!({"id": 2, "kind": "batch_norm2d_nchw_train", "parents": [1],
                                   "shape": [2, 4], "channels": 4, "eps": -1.0});
        },
        &["node 2 (batch_norm2d_nchw_train)", "field `eps`"],
    );
}

#[test]
fn bad_cross_entropy_targets_name_the_node_and_field_in_checks_and_evaluation() {
    let g = Graph::from_json(&json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2, 3]},
            {"id": 1, "kind": "cross_entropy", "parents": [0], "shape": [], "reduction": "sum"}
        ]
    }))
    .unwrap();
    assert!(errors(&check_shapes(&g)).is_empty());
    let x = Tensor::<f64>::zeros([2, 3]).unwrap();
    let mut ok = Payload::new();
    ok.insert(1, "target", Tensor::new([2], vec![2.0, 0.0]).unwrap());
    assert!(errors(&check_payload(&g, &ok)).is_empty());
    let y = denote::<f64>(&g, &ok, &x).unwrap();
    assert!((y.item().unwrap() - 2.0 * 3f64.ln()).abs() < 1e-15);
    for (bad, want) in [(3.0, "outside [0, 3)"), (0.5, "not an integral class id")] {
        let mut p = Payload::new();
        p.insert(1, "target", Tensor::new([2], vec![0.0, bad]).unwrap());
        let text: Vec<String> = errors(&check_payload(&g, &p))
            .iter()
            .map(|d| d.to_string())
            .collect();
        let text = text.join("\n");
        for w in [
            "node 1 (cross_entropy)",
            "field `target`",
            "element 1",
            want,
        ] {
            assert!(text.contains(w), "expected {w:?} in {text}");
        }
        // the evaluator refuses too, naming the node and the field
        let e = denote_all::<f64>(&g, &p, &x).unwrap_err();
        let text = e.diagnostics()[0].to_string();
        for w in ["node 1 (cross_entropy)", "field `target`", want] {
            assert!(text.contains(w), "expected {w:?} in {text}");
        }
    }
    // a target of the wrong shape is a payload-shape error
    let mut p = Payload::new();
    p.insert(1, "target", Tensor::new([3], vec![0.0, 1.0, 2.0]).unwrap());
    let text = format!("{:?}", errors(&check_payload(&g, &p)));
    assert!(text.contains("expected [2]"), "{text}");
    // and an unknown reduction is an attribute error
    check_rejected(
        |v| {
            v["nodes"][4] = json!({"id": 4, "kind": "cross_entropy", "parents": [3], "shape": [],
                                   "reduction": "max"});
        },
        &[
            "node 4 (cross_entropy)",
            "field `reduction`",
            "\"mean\", \"sum\"",
        ],
    );
}

#[test]
fn extension_attributes_round_trip_and_default() {
    let mut v = base();
    v["nodes"][2]["kind"] = json!("gelu");
    let g = Graph::from_json(&v).unwrap();
    // absent `approximate` is "none", and the printer writes it
    assert_eq!(g.to_json()["nodes"][2]["approximate"], json!("none"));
    v["nodes"][2]["approximate"] = json!("tanh");
    let g = Graph::from_json(&v).unwrap();
    assert_eq!(g.to_json()["nodes"][2]["approximate"], json!("tanh"));
    assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
    assert!(errors(&check_shapes(&g)).is_empty());
    // clamp: an absent bound stays absent
    let mut v = base();
    v["nodes"][2] = json!({"id": 2, "kind": "clamp", "parents": [1], "shape": [2, 4], "min": 0});
    let g = Graph::from_json(&v).unwrap();
    let node = &g.to_json()["nodes"][2];
    assert_eq!(node["min"], json!(0.0));
    assert!(node.get("max").is_none(), "{node}");
    assert!(errors(&check_shapes(&g)).is_empty());
}

#[test]
fn every_problem_is_reported_not_only_the_first() {
    let mut v = base();
    v["nodes"][2]["shape"] = json!([9]);
    v["nodes"][3]["axis"] = json!(7);
    v["nodes"][4]["parents"] = json!([4]);
    let g = Graph::from_json(&v).unwrap();
    let d = check_shapes(&g);
    let nodes: Vec<usize> = errors(&d).iter().filter_map(|d| d.node).collect();
    assert!(
        nodes.contains(&2) && nodes.contains(&3) && nodes.contains(&4),
        "{d:?}"
    );
    // parse errors are collected too
    let mut v = base();
    v["nodes"][1]["kind"] = json!("nope");
    v["nodes"][3].as_object_mut().unwrap().remove("axis");
    let e = Graph::from_json(&v).unwrap_err().diagnostics();
    assert_eq!(e.len(), 2, "{e:?}");
}

#[test]
fn truncated_json_is_a_json_error_with_a_position() {
    let text = base().to_string();
    let e = Graph::from_json_str(&text[..text.len() / 2]).unwrap_err();
    assert!(matches!(e, IrError::Json { line: 1, .. }), "{e}");
}

#[test]
fn missing_and_ill_shaped_payload_are_reported() {
    let g = Graph::from_json(&base()).unwrap();
    let d = check_payload(&g, &Payload::new());
    let text = d
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains("node 1 (linear): missing payload (expects weight [4, 3], bias [4])"),
        "{text}"
    );
    let mut p = Payload::new();
    p.insert(1, "weight", Tensor::zeros([3, 4]).unwrap());
    let d = check_payload(&g, &p);
    let text = d
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains("field `weight`: payload tensor has shape [3, 4], expected [4, 3]"),
        "{text}"
    );
    assert!(
        text.contains("field `bias`: missing payload tensor"),
        "{text}"
    );
    // evaluation refuses too, naming the node and field
    let e = denote_all::<f64>(&g, &p, &Tensor::zeros([2, 3]).unwrap()).unwrap_err();
    assert!(
        e.to_string().contains("node 1 (linear), field `weight`"),
        "{e}"
    );
}

#[test]
fn raw_log_of_non_positive_input_is_an_evaluation_error_naming_the_node() {
    let g = Graph::from_json(&json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [3]},
            {"id": 1, "kind": "log", "parents": [0], "shape": [3]}
        ]
    }))
    .unwrap();
    let x = Tensor::new([3], vec![1.0, 0.0, 2.0]).unwrap();
    let e = denote_all::<f64>(&g, &Payload::new(), &x).unwrap_err();
    assert!(matches!(e, IrError::Eval { node: 1, .. }), "{e}");
    assert!(e.to_string().contains("element 1"), "{e}");
    let x = Tensor::new([3], vec![1.0, f64::NAN, 2.0]).unwrap();
    assert!(denote_all::<f64>(&g, &Payload::new(), &x).is_err());
}

#[test]
fn wrong_input_shape_is_reported() {
    let g = Graph::from_json(&base()).unwrap();
    let e = denote_all::<f64>(&g, &Payload::new(), &Tensor::zeros([3, 2]).unwrap()).unwrap_err();
    assert!(
        e.to_string().contains("node 0 (input), field `shape`"),
        "{e}"
    );
}

fn q(n: i64, d: i64) -> Rational {
    Rational::new(n.into(), d.into())
}

#[test]
fn rational_evaluation_is_exact_on_the_algebraic_kinds() {
    // y = sum(mse(relu(x W^T + b), c)) with values whose float evaluation rounds
    let case = Case::from_json(
        &serde_json::from_str::<Value>(
            &std::fs::read_to_string(cases_dir().join("mlp3_relu_mse.json")).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let x = case.inputs[0].convert::<Rational>().unwrap();
    let exact = denote::<Rational>(&case.graph, &case.payload, &x).unwrap();
    let float = denote::<f64>(&case.graph, &case.payload, &case.inputs).unwrap();
    // the exact value rounds to (nearly) the float one, but is not equal to it as a rational
    let exact_f = exact.item().unwrap().to_f64();
    assert!((exact_f - float.item().unwrap()).abs() < 1e-12);
    assert_ne!(
        *exact.item().unwrap(),
        Rational::from_f64(*float.item().unwrap()).unwrap()
    );

    // hand-checked: mean over [1/3, 2/3, 1] of (x - 0)^2 = (1/9 + 4/9 + 1)/3 = 14/27
    let g = Graph::from_json(&json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 2,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [3]},
            {"id": 1, "kind": "const", "parents": [], "shape": [3]},
            {"id": 2, "kind": "mse_loss", "parents": [0, 1], "shape": []}
        ]
    }))
    .unwrap();
    let mut p = Payload::new();
    p.insert(1, "value", Tensor::zeros([3]).unwrap());
    let x = Tensor::new([3], vec![q(1, 3), q(2, 3), q(1, 1)]).unwrap();
    let y = denote::<Rational>(&g, &p, &x).unwrap();
    assert_eq!(y.item().unwrap(), &q(14, 27));
}

#[test]
fn rational_evaluation_of_a_transcendental_op_fails_cleanly() {
    let case = Case::from_json(
        &serde_json::from_str::<Value>(
            &std::fs::read_to_string(cases_dir().join("unary_smooth_chain.json")).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let x = case.inputs[0].convert::<Rational>().unwrap();
    let e = denote::<Rational>(&case.graph, &case.payload, &x).unwrap_err();
    assert!(
        e.to_string().contains("node 1 (sin)") && e.to_string().contains("rational"),
        "{e}"
    );
}

fn snapshot_graph(case: &str) -> String {
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(cases_dir().join(format!("{case}.json"))).unwrap(),
    )
    .unwrap();
    pretty(&Graph::from_json(&v["graph"]).unwrap())
}

#[test]
fn pretty_printed_ir_snapshots() {
    insta::assert_snapshot!("mlp", snapshot_graph("mlp3_relu_mse"));
    insta::assert_snapshot!("cnn", snapshot_graph("cnn_small"));
    insta::assert_snapshot!("attention", snapshot_graph("attention_block"));
    insta::assert_snapshot!("residual", snapshot_graph("residual_block"));
}

#[test]
fn dot_output_has_every_node_and_edge() {
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(cases_dir().join("residual_block.json")).unwrap(),
    )
    .unwrap();
    let g = Graph::from_json(&v["graph"]).unwrap();
    let d = dot(&g);
    for n in &g.nodes {
        assert!(d.contains(&format!("n{} [label=", n.id)));
        for p in &n.parents {
            assert!(d.contains(&format!("n{p} -> n{}", n.id)));
        }
    }
}

/// One mutation of a graph JSON value.
#[derive(Clone, Debug)]
enum Mutation {
    SetNumber { path: usize, value: i64 },
    RemoveKey { node: usize, key: usize },
    SetKind { node: usize, kind: usize },
    SetParents { node: usize, parents: Vec<usize> },
    SetShape { node: usize, dims: Vec<u64> },
    DropNode { node: usize },
    Truncate { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), -3i64..70).prop_map(|(path, value)| Mutation::SetNumber { path, value }),
        (any::<usize>(), any::<usize>()).prop_map(|(node, key)| Mutation::RemoveKey { node, key }),
        (any::<usize>(), any::<usize>()).prop_map(|(node, kind)| Mutation::SetKind { node, kind }),
        (any::<usize>(), prop::collection::vec(0usize..12, 0..4))
            .prop_map(|(node, parents)| Mutation::SetParents { node, parents }),
        (
            any::<usize>(),
            prop::collection::vec(prop_oneof![0u64..6, Just(1u64 << 32), Just(u64::MAX)], 0..5)
        )
            .prop_map(|(node, dims)| Mutation::SetShape { node, dims }),
        any::<usize>().prop_map(|node| Mutation::DropNode { node }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

/// How many numbers a JSON value contains.
fn count_numbers(v: &Value) -> usize {
    match v {
        Value::Number(_) => 1,
        Value::Array(a) => a.iter().map(count_numbers).sum(),
        Value::Object(o) => o.values().map(count_numbers).sum(),
        _ => 0,
    }
}

fn apply(v: &mut Value, m: &Mutation) -> Option<String> {
    let n_nodes = v["nodes"].as_array().map_or(0, Vec::len);
    if n_nodes == 0 && !matches!(m, Mutation::SetNumber { .. } | Mutation::Truncate { .. }) {
        // every node was dropped: there is no node to mutate (indexing would panic here)
        return None;
    }
    match m {
        Mutation::SetNumber { path, value } => {
            let total = count_numbers(v);
            if total > 0 {
                set_nth_number(v, path % total, &mut 0, *value);
            }
        }
        Mutation::RemoveKey { node, key } => {
            if let Some(o) = v["nodes"][node % n_nodes].as_object_mut() {
                let keys: Vec<String> = o.keys().cloned().collect();
                if !keys.is_empty() {
                    o.remove(&keys[key % keys.len()]);
                }
            }
        }
        Mutation::SetKind { node, kind } => {
            v["nodes"][node % n_nodes]["kind"] = json!(wire_names()[kind % wire_names().len()]);
        }
        Mutation::SetParents { node, parents } => {
            v["nodes"][node % n_nodes]["parents"] = json!(parents)
        }
        Mutation::SetShape { node, dims } => v["nodes"][node % n_nodes]["shape"] = json!(dims),
        Mutation::DropNode { node } => {
            if let Some(a) = v["nodes"].as_array_mut() {
                if !a.is_empty() {
                    a.remove(node % a.len());
                }
            }
        }
        Mutation::Truncate { at } => {
            let text = v.to_string();
            return Some(text[..at % text.len()].to_string());
        }
    }
    None
}

fn set_nth_number(v: &mut Value, target: usize, k: &mut usize, value: i64) {
    match v {
        Value::Number(_) => {
            if *k == target {
                *v = json!(value);
            }
            *k += 1;
        }
        Value::Array(a) => a
            .iter_mut()
            .for_each(|x| set_nth_number(x, target, k, value)),
        Value::Object(o) => o
            .values_mut()
            .for_each(|x| set_nth_number(x, target, k, value)),
        _ => {}
    }
}

fn proptest_cases() -> u32 {
    std::env::var("TORCHLEAN_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases()))]

    /// Parsing, checking and (when the checks pass) evaluating mutated graphs never panics.
    #[test]
    fn mutated_graphs_never_panic(case_idx in 0usize..1024, muts in prop::collection::vec(mutation(), 1..4)) {
        let cases = load_cases();
        let (_, v) = &cases[case_idx % cases.len()];
        let mut g = v["graph"].clone();
        let payload = Payload::from_json(&v["payload"]).unwrap();
        let mut text = None;
        for m in &muts {
            if let Some(t) = apply(&mut g, m) {
                text = Some(t);
                break;
            }
        }
        let parsed = match text {
            Some(t) => Graph::from_json_str(&t),
            None => Graph::from_json(&g),
        };
        if let Ok(graph) = parsed {
            let d = check_shapes(&graph);
            let _ = check_payload(&graph, &payload);
            let _ = pretty(&graph);
            let _ = dot(&graph);
            if d.iter().all(|d| !d.is_error()) {
                if let Some(input) = graph.node(graph.input_id) {
                    if input.shape.size() <= 4096 {
                        let x = Tensor::<f64>::full(input.shape.clone(), 0.5).unwrap();
                        let _ = denote_all(&graph, &payload, &x);
                    }
                }
            }
        }
    }
}

#[test]
fn shape_of_every_kind_is_inferred() {
    // each wire kind appears in at least one conformance case or in this test's own graphs
    let mut seen: std::collections::BTreeSet<&str> = Default::default();
    for (_, v) in load_cases() {
        for n in v["graph"]["nodes"].as_array().unwrap() {
            let k = n["kind"].as_str().unwrap();
            if let Some(w) = wire_names().into_iter().find(|w| *w == k) {
                seen.insert(w);
            }
        }
    }
    let extra = json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 13,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2, 3]},
            {"id": 1, "kind": "div", "parents": [0, 0], "shape": [2, 3]},
            {"id": 2, "kind": "neg", "parents": [1], "shape": [2, 3]},
            {"id": 3, "kind": "softplus", "parents": [2], "shape": [2, 3]},
            {"id": 4, "kind": "scale", "parents": [3], "shape": [2, 3], "c": 2.5},
            {"id": 5, "kind": "add_scalar", "parents": [4], "shape": [2, 3], "c": -1},
            {"id": 6, "kind": "log_softmax", "parents": [5], "shape": [2, 3], "axis": 1},
            {"id": 7, "kind": "transpose", "parents": [6], "shape": [3, 2], "dim0": 0, "dim1": 1},
            {"id": 8, "kind": "rand_uniform", "parents": [], "shape": [3, 2], "seed": 3},
            {"id": 9, "kind": "const", "parents": [], "shape": [], "value_shape": []},
            {"id": 10, "kind": "bernoulli_mask", "parents": [9], "shape": [3, 2], "seed": 4},
            {"id": 11, "kind": "mul_elem", "parents": [7, 10], "shape": [3, 2]},
            {"id": 12, "kind": "add", "parents": [11, 8], "shape": [3, 2]},
            {"id": 13, "kind": "exp", "parents": [12], "shape": [3, 2]}
        ]
    });
    let g = Graph::from_json(&extra).unwrap();
    assert!(
        errors(&check_shapes(&g)).is_empty(),
        "{:?}",
        check_shapes(&g)
    );
    assert!(g.uses_extensions());
    let mut p = Payload::new();
    p.insert(9, "value", Tensor::scalar(0.5));
    let x = Tensor::<f64>::full(Shape::from([2, 3]), 0.7).unwrap();
    denote_all(&g, &p, &x).unwrap();
    for n in &g.nodes {
        if let Some(w) = wire_names().into_iter().find(|w| *w == n.kind.name()) {
            seen.insert(w);
        }
    }
    let missing: Vec<&str> = wire_names()
        .into_iter()
        .filter(|w| !seen.contains(w))
        .collect();
    assert!(
        missing.is_empty(),
        "kinds without a test graph: {missing:?}"
    );
}

#[test]
fn payloads_round_trip_through_safetensors_and_bad_keys_are_all_reported() {
    let mut p = Payload::new();
    p.insert(
        3,
        "weight",
        Tensor::new([2, 2], vec![1.5, -0.25, 1e-300, f64::MAX]).unwrap(),
    );
    p.insert(3, "bias", Tensor::new([2], vec![0.0, -0.0]).unwrap());
    p.insert(7, "gamma", Tensor::scalar(2.0));
    p.entries.get_mut(&7).unwrap().eps = Some(1e-3);
    let bytes = p.to_safetensors().unwrap();
    let back = Payload::from_safetensors(&bytes).unwrap();
    assert_eq!(back, p);
    for (id, e) in &p.entries {
        for (name, t) in &e.tensors {
            assert!(back.entry(*id).unwrap().tensor(name).unwrap().bit_eq(t));
        }
    }
    // truncated bytes and keys that are not `<node>.<name>` are errors, not panics
    // the reader's own error is kept as the source, not flattened to text
    for bad in [&bytes[..bytes.len() / 2], b"garbage".as_slice()] {
        let e = Payload::from_safetensors(bad).unwrap_err();
        assert!(matches!(e, IrError::Safetensors { .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some(), "{e}");
    }
    let mut bad = Payload::new();
    bad.insert(1, "w", Tensor::scalar(1.0));
    let mut bytes = bad.to_safetensors().unwrap();
    let at = bytes.windows(3).position(|w| w == b"1.w").unwrap();
    bytes[at] = b'x'; // the key in the header, same length
    let e = Payload::from_safetensors(&bytes).unwrap_err();
    assert!(e.to_string().contains("x.w"), "{e}");
    // a *tensor* named `eps` (batch norm's eps is a number, in the metadata) is refused: it
    // printed as payload JSON that did not parse back (found by fuzzing payload_safetensors)
    let mut eps_tensor = Payload::new();
    eps_tensor.insert(2, "eps", Tensor::new([2], vec![1.0, -1.0]).unwrap());
    let e = Payload::from_safetensors(&eps_tensor.to_safetensors().unwrap()).unwrap_err();
    let d = &e.diagnostics()[0];
    assert_eq!((d.node, d.field.as_deref()), (Some(2), Some("eps")), "{e}");
}
