//! Multi-input graphs (`input_ids`, our extension of TorchLean's format): the wire, the checks,
//! the evaluator and the printed IR.

use serde_json::{json, Value};
use torchlean_ir::*;
use torchlean_spec::Tensor;

/// `(x [2] + y [2]) · w [2]`, summed: three inputs, named.
fn three_inputs() -> Value {
    json!({
        "format": "torchlean.ir.v1", "input_ids": [0, 1, 3], "output_id": 5,
        "input_names": ["x", "y", "w"],
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "input", "parents": [], "shape": [2]},
            {"id": 2, "kind": "add", "parents": [0, 1], "shape": [2]},
            {"id": 3, "kind": "input", "parents": [], "shape": [2]},
            {"id": 4, "kind": "mul_elem", "parents": [2, 3], "shape": [2]},
            {"id": 5, "kind": "sum", "parents": [4], "shape": []}
        ]
    })
}

fn t(data: &[f64]) -> Tensor<f64> {
    Tensor::new([data.len()], data.to_vec()).expect("a vector")
}

/// The errors of loading and checking `v`, as text.
fn errors_of(v: &Value) -> String {
    let diags = match Graph::from_json(v) {
        Err(e) => e.diagnostics(),
        Ok(g) => check_shapes(&g),
    };
    diags
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_three_input_graph_round_trips_and_evaluates_each_input_in_its_place() {
    let g = Graph::from_json(&three_inputs()).expect("a graph");
    assert_eq!(g.inputs().collect::<Vec<_>>(), [0, 1, 3]);
    assert_eq!(g.input_names, ["x", "y", "w"]);
    assert_eq!(g.find_input("w"), Some(2));
    assert_eq!(g.find_input("3"), Some(2), "and by node id");
    assert!(g.uses_extensions());
    assert!(check_shapes(&g).iter().all(|d| !d.is_error()));
    assert_eq!(g.to_json(), three_inputs());
    let xs = vec![t(&[1.0, 2.0]), t(&[10.0, 20.0]), t(&[3.0, -1.0])];
    // (1 + 10)·3 + (2 + 20)·(−1) = 11
    let out = denote(&g, &Payload::new(), &xs).expect("evaluates");
    assert_eq!(out.data(), [11.0]);
    let all = denote_all(&g, &Payload::new(), &xs).expect("evaluates");
    assert_eq!(all[3], xs[2], "node 3 is the third input");
}

#[test]
fn unnamed_inputs_are_found_by_node_id() {
    let mut v = three_inputs();
    v.as_object_mut().expect("an object").remove("input_names");
    let g = Graph::from_json(&v).expect("a graph");
    assert_eq!(g.find_input("3"), Some(2));
    assert_eq!(g.input_name(1), "1");
    assert_eq!(g.to_json(), v, "no names are written when there are none");
}

#[test]
fn a_single_input_graph_is_written_as_torchlean_writes_it() {
    let v = json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "relu", "parents": [0], "shape": [2]}
        ]
    });
    let g = Graph::from_json(&v).expect("a graph");
    assert!(!g.uses_extensions());
    assert_eq!(g.to_json().to_string(), v.to_string());
}

#[test]
fn the_wrong_number_of_input_values_is_an_error_naming_both_counts() {
    let g = Graph::from_json(&three_inputs()).expect("a graph");
    let e = denote(&g, &Payload::new(), &t(&[1.0, 2.0])).expect_err("one of three");
    assert!(e.to_string().contains("takes 3 input(s), 1 given"), "{e}");
}

#[test]
fn malformed_input_lists_are_rejected_with_the_field_named() {
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|v| v["input_ids"] = json!([0, 2, 3])),
            "input_ids 2 names a `add` node",
        ),
        (
            Box::new(|v| v["input_ids"] = json!([0, 1, 1])),
            "names node 1 twice",
        ),
        (
            Box::new(|v| v["input_ids"] = json!([0, 1, 9])),
            "input_ids 9 is not a node",
        ),
        (
            Box::new(|v| v["input_ids"] = json!([0])),
            "fewer than two ids",
        ),
        (
            Box::new(|v| v["input_id"] = json!(0)),
            "both `input_id` and `input_ids`",
        ),
        (
            Box::new(|v| v["input_names"] = json!(["x"])),
            "1 names for 3 inputs",
        ),
        (
            Box::new(|v| v["input_names"] = json!(["x", 2, "w"])),
            "an array of strings",
        ),
        (
            Box::new(|v| {
                v["input_ids"] = json!([0, 1]);
                v["input_names"] = json!(["x", "y"]);
                v["nodes"][3]["shape"] = json!([3]);
            }),
            "every input node must have the graph input's shape [2]",
        ),
    ];
    for (mutate, want) in cases {
        let mut v = three_inputs();
        mutate(&mut v);
        let text = errors_of(&v);
        assert!(
            text.contains(want),
            "expected {want:?} in:\n{text}\nfor {v}"
        );
    }
    let mut single = three_inputs();
    let obj = single.as_object_mut().expect("an object");
    obj.remove("input_ids");
    obj.insert("input_id".into(), json!(0));
    assert!(errors_of(&single).contains("is given only beside `input_ids`"));
}

#[test]
fn an_unlisted_input_node_still_denotes_the_first_input() {
    // TorchLean's rule: every `input` node is the graph input; with `input_ids`, only the
    // listed ones are other inputs
    let mut v = three_inputs();
    v["input_ids"] = json!([0, 3]);
    v["input_names"] = json!(["x", "w"]);
    let g = Graph::from_json(&v).expect("a graph");
    let xs = vec![t(&[1.0, 2.0]), t(&[3.0, -1.0])];
    // (1 + 1)·3 + (2 + 2)·(−1) = 2
    let out = denote(&g, &Payload::new(), &xs).expect("evaluates");
    assert_eq!(out.data(), [2.0]);
}

#[test]
fn the_september_dialect_carries_input_ids_too() {
    let g = Graph::from_json(&three_inputs()).expect("a graph");
    let written = Dialect::September2026
        .write(&g, &Payload::new())
        .expect("writes");
    assert_eq!(written.graph["input_ids"], json!([0, 1, 3]));
    let doc = GraphDoc::from_json(&written.graph).expect("reads back");
    assert_eq!(doc.graph.inputs().collect::<Vec<_>>(), [0, 1, 3]);
    assert_eq!(doc.graph.input_names, ["x", "y", "w"]);
}

#[test]
fn the_printed_ir_lists_every_input() {
    let g = Graph::from_json(&three_inputs()).expect("a graph");
    insta::assert_snapshot!(pretty(&g));
}
