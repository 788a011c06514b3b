//! The CLI on TorchLean's September dialect: several outputs through `eval` and `grad`, `convert`
//! both ways, and bad input naming the file's node ids (exit 2).
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{assert_bad_input, run, stderr, stdout, write};
use serde_json::{json, Value};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../ir/tests/september/{name}.json"))
}

fn expect(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../ir/tests/september/{name}.expect.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn data(v: &Value) -> Vec<f64> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(what: &str, got: &Value, want: &Value) {
    assert_eq!(got["shape"], want["shape"], "{what}");
    for (a, b) in data(got).iter().zip(data(want)) {
        assert!(
            (a - b).abs() <= 1e-12 + 1e-10 * b.abs(),
            "{what}: {a} vs {b}"
        );
    }
}

#[test]
fn eval_prints_each_output_and_grad_takes_a_seed_per_output() {
    let dir = tempfile::tempdir().unwrap();
    let e = expect("two_outputs");
    let x = write(dir.path(), "x.json", &e["input"]);
    let s0 = write(dir.path(), "s0.json", &e["seeds"][0]);
    let s1 = write(dir.path(), "s1.json", &e["seeds"][1]);
    let g = fixture("two_outputs");
    let (g, x, s0, s1) = (
        g.to_str().unwrap(),
        x.to_str().unwrap(),
        s0.to_str().unwrap(),
        s1.to_str().unwrap(),
    );
    for engine in ["cpu", "reference"] {
        let o = run(&["eval", g, "--input", x, "--engine", engine]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let lines: Vec<Value> = stdout(&o)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        for (k, line) in lines.iter().enumerate() {
            close(&format!("{engine} output {k}"), line, &e["outputs"][k]);
        }
    }
    let o = run(&["grad", g, "--input", x, "--seed", s0, "--seed", s1]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    close("output 1", &r["outputs"][1], &e["outputs"][1]);
    close("grad_input", &r["grad_input"], &e["grad_input"]);
    close(
        "grad of the constant",
        &r["grad_payload"]["3"]["value"],
        &e["grad_payload"]["3"]["value"],
    );
    // anomaly mode computes the same
    let o = run(&[
        "grad",
        g,
        "--input",
        x,
        "--seed",
        s0,
        "--seed",
        s1,
        "--detect-anomaly",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let a: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(a["grad_input"], r["grad_input"]);
    // one seed for two outputs, or a seed of the wrong shape: exit 2, one line each
    assert_bad_input(
        &run(&["grad", g, "--input", x, "--seed", s1]),
        &["the graph has 2 outputs, but 1 seed was given"],
    );
    assert_bad_input(
        &run(&["grad", g, "--input", x, "--seed", s1, "--seed", s0]),
        &["s0.json: the seed has shape [], but graph output node 1 declares [3, 2]"],
    );
}

#[test]
fn layernorm_affine_gradients_come_back_under_the_file_node_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let e = expect("inline_weights");
    let x = write(dir.path(), "x.json", &e["input"]);
    let s = write(dir.path(), "s.json", &e["seeds"][0]);
    let o = run(&[
        "grad",
        fixture("inline_weights").to_str().unwrap(),
        "--input",
        x.to_str().unwrap(),
        "--seed",
        s.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    for (node, key) in [
        ("3", "gamma"),
        ("3", "beta"),
        ("1", "value"),
        ("4", "value"),
        ("6", "value"),
    ] {
        close(
            &format!("{node}.{key}"),
            &r["grad_payload"][node][key],
            &e["grad_payload"][node][key],
        );
    }
}

#[test]
fn convert_writes_either_dialect_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let case = common::cases_dir().join("cnn_small.json");
    let september = dir.path().join("september.json");
    let o = run(&[
        "convert",
        case.to_str().unwrap(),
        "--dialect",
        "2026-09",
        "-o",
        september.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&september).unwrap()).unwrap();
    assert_eq!(v["output_ids"], json!([5]));
    assert_eq!(v["nodes"][1]["kind"], json!("conv"));
    assert!(v["nodes"][1]["weight"].is_array(), "weights inline");
    let c = run(&["check", september.to_str().unwrap()]);
    assert!(
        stdout(&c).contains("TorchLean September 2026 dialect"),
        "{}",
        stdout(&c)
    );
    // back to August: the weights go to a separate payload, required
    let aug = dir.path().join("aug.json");
    let p = dir.path().join("p.safetensors");
    assert_bad_input(
        &run(&[
            "convert",
            september.to_str().unwrap(),
            "--dialect",
            "2026-08",
            "-o",
            aug.to_str().unwrap(),
        ]),
        &["--payload-out is required"],
    );
    let o = run(&[
        "convert",
        september.to_str().unwrap(),
        "--dialect",
        "2026-08",
        "-o",
        aug.to_str().unwrap(),
        "--payload-out",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // the same gradients as the case itself, bit for bit
    let cv: Value = serde_json::from_str(&std::fs::read_to_string(&case).unwrap()).unwrap();
    let x = write(dir.path(), "x.json", &cv["input"]);
    let a = run(&["grad", case.to_str().unwrap()]);
    let b = run(&[
        "grad",
        aug.to_str().unwrap(),
        "--payload",
        p.to_str().unwrap(),
        "--input",
        x.to_str().unwrap(),
    ]);
    let l = run(&[
        "grad",
        september.to_str().unwrap(),
        "--input",
        x.to_str().unwrap(),
    ]);
    assert_eq!(b.status.code(), Some(0), "{}", stderr(&b));
    let (a, b, l): (Value, Value, Value) = (
        serde_json::from_str(stdout(&a).trim()).unwrap(),
        serde_json::from_str(stdout(&b).trim()).unwrap(),
        serde_json::from_str(stdout(&l).trim()).unwrap(),
    );
    // the case's seed is not ones, so compare the unseeded runs of the three files
    assert_eq!(b, l);
    assert_eq!(a["output"], b["output"]);
}

#[test]
fn convert_lists_every_node_without_a_counterpart_and_bad_september_files_name_file_ids() {
    let dir = tempfile::tempdir().unwrap();
    let g = write(
        dir.path(),
        "g.json",
        &json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 3, "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "gelu", "parents": [0], "shape": [2]},
            {"id": 2, "kind": "tanh", "parents": [1], "shape": [2]},
            {"id": 3, "kind": "neg", "parents": [2], "shape": [2]}]}),
    );
    let o = run(&["convert", g.to_str().unwrap(), "--dialect", "2026-09"]);
    assert_bad_input(
        &o,
        &["node 1 (gelu), field `kind`", "node 3 (neg), field `kind`"],
    );
    assert_eq!(stderr(&o).lines().count(), 2, "{}", stderr(&o));
    let o = run(&["convert", g.to_str().unwrap(), "--dialect", "newest"]);
    assert_bad_input(&o, &["unknown dialect `newest`"]);
    // a shape error after a reduction's lowering names the file's node 2, not an IR id
    let bad = write(
        dir.path(),
        "bad.json",
        &json!({"format": "torchlean.ir.v1", "input_id": 0, "output_ids": [2], "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2, 3]},
            {"id": 1, "kind": "reduce_sum", "parents": [0], "shape": [1, 1], "axes": [0, 1], "keepdim": true},
            {"id": 2, "kind": "softmax", "parents": [1], "shape": [1, 1], "axis": 2}]}),
    );
    assert_bad_input(
        &run(&["check", bad.to_str().unwrap()]),
        &["node 2 (softmax), field `axis`"],
    );
}
