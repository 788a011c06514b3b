//! The Python front ends against the binary: `tools/torch_export` (PyTorch modules exported to
//! IR + safetensors, then `torchlean eval` and `grad` reproduce PyTorch's float64 outputs and
//! gradients; unsupported ops reported all at once, exit 2) and `tools/gen_cases` (a rerun
//! writes the committed cases byte for byte). Each test needs `TORCHLEAN_PYTHON` naming a
//! Python with torch and safetensors and is skipped, saying so, without one (CI has none).
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{python, run, stderr, stdout};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tool(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools")
        .join(relative)
}

fn py_run(py: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(py).args(args).output().unwrap()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Relative agreement of two tensor JSON values: `|got − want| ≤ 1e-9·max|want| + 1e-12`
/// elementwise, same shape.
#[track_caller]
fn assert_close(what: &str, got: &Value, want: &Value) {
    assert_eq!(got["shape"], want["shape"], "{what}: shape");
    let g: Vec<f64> = got["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let w: Vec<f64> = want["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(g.len(), w.len(), "{what}: length");
    let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= 1e-9 * scale + 1e-12,
            "{what}[{i}]: ours {a}, PyTorch {b}"
        );
    }
}

#[test]
fn exported_modules_evaluate_and_differentiate_as_in_pytorch() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let o = py_run(
        &py,
        &[
            tool("torch_export/tests/oracle.py").as_os_str(),
            dir.path().as_os_str(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let names: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert_eq!(names, ["mlp", "cnn", "residual", "encoder"]);
    for name in &names {
        let d = dir.path().join(name);
        let p = |f: &str| d.join(f).to_str().unwrap().to_string();
        let (graph, payload, input, seed) = (
            p("graph.json"),
            p("payload.safetensors"),
            p("input.json"),
            p("seed.json"),
        );
        let want = read_json(&d.join("expected.json"));
        let o = run(&["check", &graph, "--payload", &payload, "--input", &input]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        for engine in ["cpu", "reference"] {
            let o = run(&[
                "eval",
                &graph,
                "--payload",
                &payload,
                "--input",
                &input,
                "--engine",
                engine,
            ]);
            assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
            let got: Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_close(&format!("{name} eval {engine}"), &got, &want["output"]);
        }
        let o = run(&[
            "grad",
            &graph,
            "--payload",
            &payload,
            "--input",
            &input,
            "--seed",
            &seed,
        ]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let got: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_close(&format!("{name} output"), &got["output"], &want["output"]);
        assert_close(
            &format!("{name} grad_input"),
            &got["grad_input"],
            &want["grad_input"],
        );
        let params = want["grad_payload"].as_object().unwrap();
        assert!(
            !params.is_empty(),
            "{name}: no parameter gradients to compare"
        );
        for (node, entry) in params {
            for (slot, t) in entry.as_object().unwrap() {
                assert_close(
                    &format!("{name} grad_payload.{node}.{slot}"),
                    &got["grad_payload"][node][slot],
                    t,
                );
            }
        }
    }
}

#[test]
fn unsupported_ops_are_all_reported_at_once_with_their_source_lines() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let examples = tool("torch_export/tests/examples.py");
    let graph = dir.path().join("graph.json");
    let payload = dir.path().join("payload.safetensors");
    let spec = format!("{}:unsupported", examples.display());
    let o = py_run(
        &py,
        &[
            tool("torch_export/torch_export.py").as_os_str(),
            spec.as_ref(),
            "-o".as_ref(),
            graph.as_os_str(),
            "--payload".as_ref(),
            payload.as_os_str(),
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("Traceback"), "{err}");
    // each problem on the line of examples.py that the module marks `# PROBLEM <what>`
    let source = std::fs::read_to_string(&examples).unwrap();
    let marked: Vec<(usize, &str)> = source
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            l.split_once("# PROBLEM ")
                .map(|(_, what)| (i + 1, what.trim()))
        })
        .collect();
    assert_eq!(marked.len(), 4);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), marked.len() + 1, "{err}");
    for ((line, what), got) in marked.iter().zip(&lines) {
        let at = format!("examples.py:{line}: ");
        assert!(got.contains(&at), "expected {at:?} in {got:?}");
        let op = what.split(' ').next().unwrap();
        assert!(got.contains(op), "expected {op:?} in {got:?}");
    }
    assert!(lines[4].contains("4 problem(s)"), "{err}");
    assert!(
        !graph.exists() && !payload.exists(),
        "a failed export wrote files"
    );
}

/// A rerun writes the same bytes, and the committed cases are what the generator writes
/// (`gen_cases.py --check`: up to the last bits of the expected values, which follow the
/// machine's BLAS, and with no case missing or stale).
#[test]
fn regenerating_the_cases_writes_the_committed_cases() {
    let Some(py) = python() else { return };
    let gen = tool("gen_cases/gen_cases.py");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for d in [&a, &b] {
        let o = py_run(
            &py,
            &[gen.as_os_str(), "--out".as_ref(), d.path().as_os_str()],
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let list = |d: &Path| {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    };
    let files = list(a.path());
    assert!(files.len() >= 28, "{} generated cases", files.len());
    assert_eq!(list(b.path()).len(), files.len());
    for f in &files {
        let name = f.file_name().unwrap();
        assert_eq!(
            std::fs::read(f).unwrap(),
            std::fs::read(b.path().join(name)).unwrap(),
            "{name:?} differs between two runs"
        );
    }
    let committed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases");
    let o = py_run(
        &py,
        &[
            gen.as_os_str(),
            "--check".as_ref(),
            "--out".as_ref(),
            committed.as_os_str(),
        ],
    );
    assert!(
        o.status.success(),
        "tests/cases is not what tools/gen_cases writes (rerun it and commit):\n{}{}",
        stdout(&o),
        stderr(&o)
    );
}
