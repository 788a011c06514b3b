//! Graphs with several inputs on the command line: `--input NAME=FILE` (or plain files in
//! input order) for `check`, `eval` and `grad`, each input's gradient under its name, and every
//! problem with the inputs named at once.

use crate::common::{assert_bad_input, run, stderr, stdout, write};
use serde_json::{json, Value};
use std::path::Path;

/// `tanh(sum((x + y) · w))`, inputs `x`, `y`, `w` (nodes 0, 1, 3).
fn three_inputs() -> Value {
    json!({
        "format": "torchlean.ir.v1", "input_ids": [0, 1, 3], "output_id": 6,
        "input_names": ["x", "y", "w"],
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "input", "parents": [], "shape": [2]},
            {"id": 2, "kind": "add", "parents": [0, 1], "shape": [2]},
            {"id": 3, "kind": "input", "parents": [], "shape": [2]},
            {"id": 4, "kind": "mul_elem", "parents": [2, 3], "shape": [2]},
            {"id": 5, "kind": "sum", "parents": [4], "shape": []},
            {"id": 6, "kind": "tanh", "parents": [5], "shape": []}
        ]
    })
}

fn tensor(data: &[f64]) -> Value {
    json!({"shape": [data.len()], "data": data})
}

/// The graph and the three input files in `dir`: x = [0.5, -1], y = [0.25, 0.5], w = [1, 2].
fn files(dir: &Path) -> [String; 4] {
    let path = |p: std::path::PathBuf| p.display().to_string();
    [
        path(write(dir, "g.json", &three_inputs())),
        path(write(dir, "x.json", &tensor(&[0.5, -1.0]))),
        path(write(dir, "y.json", &tensor(&[0.25, 0.5]))),
        path(write(dir, "w.json", &tensor(&[1.0, 2.0]))),
    ]
}

fn line(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "stderr: {}", stderr(o));
    serde_json::from_str(stdout(o).trim()).expect("one JSON line")
}

#[test]
fn eval_takes_named_inputs_in_any_order_and_plain_ones_in_input_order() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let [g, x, y, w] = files(dir.path());
    // s = (0.5 + 0.25)·1 + (−1 + 0.5)·2 = −0.25
    let want = (-0.25f64).tanh();
    let named = line(&run(&[
        "eval",
        &g,
        "--input",
        &format!("w={w}"),
        "--input",
        &format!("x={x}"),
        "--input",
        &format!("y={y}"),
    ]));
    assert_eq!(named["data"][0].as_f64(), Some(want));
    let plain = line(&run(&[
        "eval", &g, "--input", &x, "--input", &y, "--input", &w,
    ]));
    assert_eq!(plain, named);
    let by_id = line(&run(&[
        "eval",
        &g,
        "--input",
        &format!("0={x}"),
        "--input",
        &format!("1={y}"),
        "--input",
        &format!("3={w}"),
        "--engine",
        "reference",
    ]));
    assert_eq!(by_id["data"][0].as_f64(), Some(want));
}

#[test]
fn grad_gives_every_inputs_gradient_under_its_name() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let [g, x, y, w] = files(dir.path());
    let r = line(&run(&[
        "grad",
        &g,
        "--input",
        &format!("x={x}"),
        "--input",
        &format!("y={y}"),
        "--input",
        &format!("w={w}"),
    ]));
    let d = 1.0 - (-0.25f64).tanh().powi(2);
    let data = |k: &str| -> Vec<f64> {
        r["grad_inputs"][k]["data"]
            .as_array()
            .expect("a gradient")
            .iter()
            .map(|v| v.as_f64().expect("a number"))
            .collect()
    };
    // d/dx = d/dy = d·w, d/dw = d·(x + y)
    assert_eq!(data("x"), [d, 2.0 * d]);
    assert_eq!(data("y"), [d, 2.0 * d]);
    assert_eq!(data("w"), [0.75 * d, -0.5 * d]);
    assert!(r.get("grad_input").is_none(), "{r}");
}

#[test]
fn problems_with_the_inputs_are_all_named() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let [g, x, y, w] = files(dir.path());
    let missing = run(&["eval", &g, "--input", &format!("x={x}")]);
    assert_bad_input(&missing, &["no --input for y, w"]);
    let unknown = run(&["eval", &g, "--input", &format!("z={x}")]);
    assert_bad_input(&unknown, &["has no input `z` (its inputs: x, y, w)"]);
    let twice = run(&[
        "eval",
        &g,
        "--input",
        &format!("x={x}"),
        "--input",
        &format!("x={y}"),
        "--input",
        &format!("w={w}"),
    ]);
    assert_bad_input(&twice, &["input `x` is given twice"]);
    let mixed = run(&["eval", &g, "--input", &format!("x={x}"), "--input", &y]);
    assert_bad_input(&mixed, &["give every --input as NAME=FILE or none"]);
    let too_few = run(&["grad", &g, "--input", &x]);
    assert_bad_input(
        &too_few,
        &["the graph has 3 input(s) (x, y, w), 1 --input given"],
    );
    let wrong_shape = write(dir.path(), "v.json", &tensor(&[1.0, 2.0, 3.0]));
    let shaped = run(&[
        "check",
        &g,
        "--input",
        &format!("x={x}"),
        "--input",
        &format!("y={}", wrong_shape.display()),
        "--input",
        &format!("w={w}"),
    ]);
    assert!(!shaped.status.success());
    assert!(
        stderr(&shaped).contains("the input has shape [3], but graph input node 1 declares [2]"),
        "{}",
        stderr(&shaped)
    );
}
