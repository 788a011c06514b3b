//! The streaming reader (`Graph::from_json_str`, `Case::from_json_str`, `GraphFile`) accepts and
//! rejects exactly what the `Value` route (`Graph::from_json`, `Case::from_json`) does, with the
//! same diagnostics.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use torchlean_ir::{Case, Graph, GraphFile};

const GOOD: &str = r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":2,"nodes":[
    {"id":0,"kind":"input","parents":[],"shape":[2,3]},
    {"id":1,"kind":"tanh","parents":[0],"shape":[2,3]},
    {"id":2,"kind":"concat","parents":[0,1,0],"shape":[6,3],"axis":0}],"extra":{"ignored":[1,2]}}"#;

/// Graph documents, good and bad, each read both ways.
fn graph_documents() -> Vec<String> {
    vec![
        GOOD.to_string(),
        // members in another order
        r#"{"nodes":[{"id":0,"kind":"input","parents":[],"shape":[1]}],"output_id":0,"format":"torchlean.ir.v1","input_id":0}"#.into(),
        // a repeated member: an error on both routes, at the top level, for `nodes` and
        // `graph`, and inside a node
        r#"{"nodes":[{"id":0,"kind":"input","parents":[],"shape":[1]}],"output_id":0,"input_id":5,"format":"torchlean.ir.v1","input_id":0}"#.into(),
        r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":0,"nodes":[],"nodes":[{"id":0,"kind":"input","parents":[],"shape":[1]}]}"#.into(),
        r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":0,"nodes":[{"id":0,"kind":"input","kind":"tanh","parents":[],"shape":[1]}]}"#.into(),
        r#"{"graph":{},"graph":3}"#.into(),
        r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":0,"nodes":{"id":0}}"#.into(),
        r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":0,"nodes":"none"}"#.into(),
        r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":0,"nodes":null}"#.into(),
        r#"{"format":"torchlean.ir.v2","input_id":-1,"output_id":"x"}"#.into(),
        r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":1,"nodes":[
            {"id":0,"kind":"input","parents":[],"shape":[1]}, 7,
            {"id":2,"kind":"nope","parents":[0],"shape":[1]},
            {"kind":"tanh","parents":"x","shape":[1,-1]}]}"#
            .into(),
        r#"{"nodes":[[]],"graph":3}"#.into(),
        "[1, 2]".into(),
        "  \"a graph\"".into(),
        "{}".into(),
    ]
}

fn case_with_graph(graph: &str) -> String {
    format!(
        r#"{{"format":"torchlean.case.v1","name":"c","graph":{graph},"input":{{"shape":[2,3],"data":[1,2,3,4,5,6]}},"expect":{{"grad_input":{{"shape":[2,3],"data":[1,1,1,1,1,1]}}}},"dtype":"f32"}}"#
    )
}

/// The `Value` route: the strict parser (a repeated key is its error), then `from_json`.
fn via_value<T>(
    text: &str,
    from_json: impl Fn(&Value) -> torchlean_ir::Result<T>,
) -> Result<T, Vec<torchlean_ir::Diagnostic>> {
    match torchlean_ir::format::json::parse(text) {
        Ok(v) => from_json(&v).map_err(|e| e.diagnostics()),
        Err(e) => Err(e.diagnostics()),
    }
}

fn same<T: PartialEq + std::fmt::Debug>(text: &str, streamed: T, via_value: T) {
    assert_eq!(streamed, via_value, "{text}");
}

#[test]
fn streamed_graphs_equal_graphs_read_through_a_value() {
    for text in graph_documents() {
        let via_value = via_value(&text, Graph::from_json);
        let streamed = Graph::from_json_str(&text).map_err(|e| e.diagnostics());
        same(&text, streamed.clone(), via_value.clone());
        let file = GraphFile::from_json_str(&text).map_err(|e| e.diagnostics());
        same(&text, file, via_value.map(GraphFile::Graph));
    }
    assert!(Graph::from_json_str(GOOD).is_ok());
    let e = Graph::from_json_str(&graph_documents()[3]).unwrap_err();
    assert!(e.to_string().contains("duplicate key \"nodes\""), "{e}");
}

#[test]
fn streamed_cases_equal_cases_read_through_a_value() {
    let mut texts: Vec<String> = graph_documents()
        .iter()
        .map(|g| case_with_graph(g))
        .collect();
    texts.push(r#"{"format":"torchlean.case.v1","graph":[1]}"#.into());
    texts.push(r#"{"format":"torchlean.case.v1","input":{"shape":[1],"data":[1]}}"#.into());
    for text in texts {
        let via_value = via_value(&text, Case::from_json);
        let streamed = Case::from_json_str(&text).map_err(|e| e.diagnostics());
        same(&text, streamed, via_value.clone());
        let file = GraphFile::from_json_str(&text).map_err(|e| e.diagnostics());
        same(&text, file, via_value.map(|c| GraphFile::Case(Box::new(c))));
    }
    assert!(Case::from_json_str(&case_with_graph(GOOD)).is_ok());
}

#[test]
fn malformed_json_is_an_error_at_its_line_and_column_on_both_routes() {
    for text in [
        r#"{"format":"torchlean.ir.v1","nodes":[{"id":0,}]}"#,
        r#"{"format":"torchlean.ir.v1"} trailing"#,
        r#"{"nodes":[1,2"#,
    ] {
        let streamed = Graph::from_json_str(text).unwrap_err().to_string();
        let via_value = serde_json::from_str::<Value>(text).unwrap_err().to_string();
        assert!(streamed.contains(&via_value), "{streamed} vs {via_value}");
    }
}
