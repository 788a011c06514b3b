//! `torchlean import`: the zoo's MLP imported and differentiated by `torchlean grad` gives
//! PyTorch's gradients; an unsupported or truncated model is exit 2 with one line per problem.

use crate::common;

use common::{assert_bad_input, run, stdout, zoo, zoo_tensor};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A fixture tensor of the zoo's MLP (f64) as Tensor JSON.
fn fixture_tensor(key: &str) -> Value {
    zoo_tensor("mlp", key)
}

fn floats(v: &Value) -> Vec<f64> {
    v["data"]
        .as_array()
        .expect("tensor data")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

fn assert_close(what: &str, got: &Value, want: &Value) {
    assert_eq!(got["shape"], want["shape"], "{what}: shape");
    let (g, w) = (floats(got), floats(want));
    let scale = w.iter().fold(1f64, |m, x| m.max(x.abs()));
    let err = g
        .iter()
        .zip(&w)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale;
    assert!(err <= 1e-9, "{what}: relative error {err:e}");
}

fn import(dir: &Path, model: &Path) -> std::process::Output {
    let g = dir.join("graph.json");
    let p = dir.join("weights.safetensors");
    run(&[
        "import",
        model.to_str().expect("utf-8 path"),
        "-o",
        g.to_str().expect("utf-8 path"),
        "--payload",
        p.to_str().expect("utf-8 path"),
    ])
}

#[test]
fn imported_mlp_gradients_are_pytorchs() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let o = import(dir.path(), &zoo("mlp.onnx"));
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let report = stdout(&o);
    assert!(report.contains("fc1.weight -> 1.weight"), "{report}");
    let x = common::write(dir.path(), "x.json", &fixture_tensor("input"));
    let seed = common::write(dir.path(), "seed.json", &fixture_tensor("seed"));
    let g = dir.path().join("graph.json");
    let p = dir.path().join("weights.safetensors");
    let o = run(&[
        "grad",
        g.to_str().expect("utf-8"),
        "--payload",
        p.to_str().expect("utf-8"),
        "--input",
        x.to_str().expect("utf-8"),
        "--seed",
        seed.to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).expect("grad prints JSON");
    assert_close("output", &out["output"], &fixture_tensor("output_torch"));
    assert_close(
        "grad_input",
        &out["grad_input"],
        &fixture_tensor("grad_input"),
    );
    for (onnx, node) in [("fc1", "1"), ("fc2", "3"), ("fc3", "7")] {
        for t in ["weight", "bias"] {
            let want = fixture_tensor(&format!("grad.{onnx}.{t}"));
            assert_close(&format!("{onnx}.{t}"), &out["grad_payload"][node][t], &want);
        }
    }
}

#[test]
fn unsupported_and_truncated_models_are_bad_input() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bytes = std::fs::read(zoo("mlp.onnx")).expect("the zoo is committed");
    // the same model with its Relu and Tanh renamed (same lengths: still a valid protobuf)
    let renamed = String::from_utf8_lossy(&bytes)
        .contains("Relu")
        .then(|| replace(&replace(&bytes, b"Relu", b"Relx"), b"Tanh", b"Tanx"))
        .expect("the MLP has a Relu");
    let model = dir.path().join("renamed.onnx");
    std::fs::write(&model, renamed).expect("write");
    let o = import(dir.path(), &model);
    assert_bad_input(&o, &["renamed.onnx: node `/Relx` (Relx), field `op_type`"]);
    let err = common::stderr(&o);
    assert!(
        err.contains("(Tanx)"),
        "both unsupported ops are listed:\n{err}"
    );
    assert!(
        !dir.path().join("graph.json").exists(),
        "nothing is written"
    );

    let cut = dir.path().join("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).expect("write");
    assert_bad_input(&import(dir.path(), &cut), &["cut.onnx: not an ONNX model"]);
}

fn replace(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
    out
}

fn import_september(dir: &Path, model: &str) -> (std::process::Output, PathBuf, PathBuf) {
    let g = dir.join(format!("{model}.september.json"));
    let p = dir.join(format!("{model}.unused.safetensors"));
    let o = run(&[
        "import",
        zoo(&format!("{model}.onnx")).to_str().expect("utf-8 path"),
        "-o",
        g.to_str().expect("utf-8 path"),
        "--payload",
        p.to_str().expect("utf-8 path"),
        "--dialect",
        "2026-09",
    ]);
    (o, g, p)
}

#[test]
fn import_writes_the_september_dialect_with_weights_inline() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (o, g, p) = import_september(dir.path(), "cnn");
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(stdout(&o).contains("weights inline"), "{}", stdout(&o));
    assert!(
        !p.exists(),
        "the September dialect keeps the weights inline"
    );
    let text = std::fs::read_to_string(&g).expect("the graph is written");
    let file: Value = serde_json::from_str(&text).expect("graph JSON");
    assert!(
        file.get("output_ids").is_some(),
        "September dialect: {text}"
    );
    assert!(file.get("output_id").is_none(), "September dialect: {text}");

    // read back (dialect detected from the file) and run in f64: PyTorch's f64 run
    let x = common::write(dir.path(), "x.json", &zoo_tensor("cnn", "input"));
    let o = run(&[
        "eval",
        g.to_str().expect("utf-8"),
        "--input",
        x.to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).expect("eval prints JSON");
    assert_close("output", &out, &zoo_tensor("cnn", "output_torch_f64"));
}

#[test]
fn import_refuses_the_september_dialect_for_kinds_it_lacks() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (o, g, p) = import_september(dir.path(), "residual");
    assert_bad_input(
        &o,
        &[
            "node 7 (clamp), field `kind`: kind `clamp` has no counterpart in TorchLean's September 2026 dialect",
            "node 10 (div), field `kind`",
        ],
    );
    assert!(!g.exists() && !p.exists(), "nothing is written");
}

#[test]
fn payload_file_is_needed_only_where_weights_stay_outside_the_graph() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let model = zoo("cnn.onnx");
    let g = dir.path().join("g.json");
    let (model, graph) = (
        model.to_str().expect("utf-8 path"),
        g.to_str().expect("utf-8 path"),
    );
    // the September dialect holds the weights inline: no --payload needed
    let o = run(&["import", model, "-o", graph, "--dialect", "2026-09"]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(stdout(&o).contains("weights inline"), "{}", stdout(&o));
    std::fs::remove_file(&g).expect("the graph was written");
    // the August dialect keeps them in a payload file: refused, naming the flag, nothing written
    let o = run(&["import", model, "-o", graph]);
    assert_bad_input(
        &o,
        &["the weights of 4 node(s) stay outside the graph in the 2026-08 dialect: name a file for them (torchlean import --payload FILE), or write --dialect 2026-09"],
    );
    assert!(!g.exists(), "nothing is written");
}

/// `Reshape(x [2, 3] FLOAT, shape [2] INT64)` as ONNX bytes, and `shape = [3, 2]` as a
/// serialized `TensorProto`.
fn reshape_with_a_shape_input() -> (Vec<u8>, Vec<u8>) {
    use prost::Message;
    use torchlean_onnx::proto::{
        tensor_proto::DataType, tensor_shape_proto::dimension, tensor_shape_proto::Dimension,
        type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
        TensorShapeProto, TypeProto, ValueInfoProto,
    };
    let value = |name: &str, elem: DataType, dims: &[i64]| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                name: Some("r".into()),
                op_type: Some("Reshape".into()),
                input: vec!["x".into(), "shape".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![
                value("x", DataType::Float, &[2, 3]),
                value("shape", DataType::Int64, &[2]),
            ],
            output: vec![value("y", DataType::Float, &[3, 2])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let shape = TensorProto {
        name: Some("shape".into()),
        dims: vec![2],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![3, 2],
        ..Default::default()
    };
    (model.encode_to_vec(), shape.encode_to_vec())
}

#[test]
fn bind_fixes_an_int64_input_and_leaves_one_graph_input() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (model, shape) = reshape_with_a_shape_input();
    let m = dir.path().join("reshape.onnx");
    std::fs::write(&m, model).expect("write the model");
    let s = dir.path().join("shape.pb");
    std::fs::write(&s, shape).expect("write the tensor");
    let g = dir.path().join("graph.json");
    let p = dir.path().join("weights.safetensors");
    let import_binding = |bind: &str| {
        run(&[
            "import",
            m.to_str().expect("utf-8"),
            "-o",
            g.to_str().expect("utf-8"),
            "--payload",
            p.to_str().expect("utf-8"),
            "--bind",
            bind,
        ])
    };
    // without the binding: the INT64 input cannot be Reshape's shape; the flag that fixes it is named
    assert_bad_input(
        &import(dir.path(), &m),
        &["`shape` is an integer graph input", "--bind NAME=FILE"],
    );
    let o = import_binding(&format!("shape={}", s.display()));
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let x = common::write(
        dir.path(),
        "x.json",
        &serde_json::json!({"shape": [2, 3], "data": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]}),
    );
    let out = eval_imported(&g, &p, &x);
    assert_eq!(out["shape"], serde_json::json!([3, 2]));
    assert_eq!(floats(&out), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // a name that is no input, and a malformed flag
    let o = import_binding(&format!("nope={}", s.display()));
    assert_bad_input(&o, &["nope", "no graph input of this name to bind"]);
    let o = import_binding("shape");
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
}

/// `--input-shape` gives an input other dims than the model declares: the zoo's MLP, exported
/// at batch 4, imports and evaluates at batch 7; malformed dims are refused by the parser.
#[test]
fn input_shape_changes_the_batch_an_export_declares() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let g = dir.path().join("graph.json");
    let p = dir.path().join("weights.safetensors");
    let import_shaped = |shape: &str| {
        run(&[
            "import",
            zoo("mlp.onnx").to_str().expect("utf-8"),
            "-o",
            g.to_str().expect("utf-8"),
            "--payload",
            p.to_str().expect("utf-8"),
            "--input-shape",
            shape,
        ])
    };
    let o = import_shaped("x=7x6");
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let x = common::write(
        dir.path(),
        "x.json",
        &serde_json::json!({"shape": [7, 6], "data": vec![0.5; 42]}),
    );
    let out = eval_imported(&g, &p, &x);
    assert_eq!(out["shape"], serde_json::json!([7, 3]));
    // every row is the same input, so the same log-probabilities
    let v = floats(&out);
    assert!(v.chunks(3).all(|r| r == &v[..3]), "{v:?}");
    assert_bad_input(&import_shaped("x=7x6x1"), &["input_shape", "3 dims given"]);
    let o = import_shaped("x=0x6");
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
    assert!(common::stderr(&o).contains("positive dims"));
}

/// `torchlean eval` of an imported graph and payload on input file `x`: its JSON output.
#[track_caller]
fn eval_imported(graph: &Path, payload: &Path, x: &Path) -> Value {
    let o = run(&[
        "eval",
        graph.to_str().expect("utf-8"),
        "--payload",
        payload.to_str().expect("utf-8"),
        "--input",
        x.to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("eval prints JSON")
}
