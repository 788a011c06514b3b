//! Helpers shared by the CLI's integration tests: running the binary, reading its output,
//! asserting a bad-input exit, writing JSON files, a small graph.
#![allow(dead_code, clippy::unwrap_used)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_torchlean"))
}

pub fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases")
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The JSON lines of a `--json` run that exited 0.
#[track_caller]
pub fn json_lines(o: &Output) -> Vec<Value> {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[track_caller]
pub fn assert_bad_input(o: &Output, want: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    for w in want {
        assert!(err.contains(w), "expected {w:?} in stderr:\n{err}");
    }
}

pub fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

pub fn base_graph() -> Value {
    json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 3,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2, 3]},
            {"id": 1, "kind": "linear", "parents": [0], "shape": [2, 4]},
            {"id": 2, "kind": "relu", "parents": [1], "shape": [2, 4]},
            {"id": 3, "kind": "softmax", "parents": [2], "shape": [2, 4], "axis": 1}
        ]
    })
}

/// A file of the ONNX model zoo (`crates/onnx/tests/zoo/`, made by `tools/onnx_zoo`).
pub fn zoo(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../onnx/tests/zoo")
        .join(file)
}

/// A fixture tensor (f32 or f64) of zoo model `model` as Tensor JSON.
pub fn zoo_tensor(model: &str, key: &str) -> Value {
    let bytes = std::fs::read(zoo(&format!("{model}.safetensors"))).expect("the zoo is committed");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let view = st.tensor(key).expect("a fixture tensor");
    let data: Vec<f64> = match view.dtype() {
        safetensors::Dtype::F64 => view
            .data()
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect(),
        safetensors::Dtype::F32 => view
            .data()
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect(),
        other => panic!("{model}.safetensors `{key}`: unexpected dtype {other:?}"),
    };
    json!({"shape": view.shape(), "data": data})
}

/// The interpreter, or `None` after printing why the test is skipped.
pub fn python() -> Option<PathBuf> {
    let Some(py) = std::env::var_os("TORCHLEAN_PYTHON").filter(|p| !p.is_empty()) else {
        println!("skipped: TORCHLEAN_PYTHON is not set (a Python with torch and safetensors)");
        eprintln!("skipped: TORCHLEAN_PYTHON is not set (a Python with torch and safetensors)");
        return None;
    };
    let ok = Command::new(&py)
        .args(["-c", "import torch, safetensors"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: {py:?} cannot import torch and safetensors");
        eprintln!("skipped: {py:?} cannot import torch and safetensors");
        return None;
    }
    Some(py.into())
}
