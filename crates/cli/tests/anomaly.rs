//! `--detect-anomaly` on `eval`, `grad` and `train`: exit 1 and one line naming the node where a
//! NaN or an infinity originates, on every engine and dtype; without the flag, nothing changes.
#![allow(clippy::unwrap_used)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;

use common::{run, stderr, stdout};

/// Exit 1, nothing on stdout, and exactly one line on stderr holding every `want`.
#[track_caller]
fn assert_anomaly(o: &Output, want: &[&str]) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout: {}\nstderr: {err}",
        stdout(o)
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(stdout(o).is_empty(), "{}", stdout(o));
    for w in want {
        assert!(err.contains(w), "expected {w:?} in stderr:\n{err}");
    }
}

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// The reviewers' graph, `inv(sub(x, x))`, and an input.
fn inv_of_zero(dir: &Path) -> (String, String) {
    let g = json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 2,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "sub", "parents": [0, 0], "shape": [2]},
            {"id": 2, "kind": "inv", "parents": [1], "shape": [2]}
        ]
    });
    let x = json!({"shape": [2], "data": [1.0, 0.0]});
    (
        write(dir, "g.json", &g).display().to_string(),
        write(dir, "x.json", &x).display().to_string(),
    )
}

const ENGINES: [[&str; 4]; 4] = [
    ["--engine", "cpu", "--dtype", "f64"],
    ["--engine", "cpu", "--dtype", "f32"],
    ["--engine", "reference", "--dtype", "f64"],
    ["--engine", "reference", "--dtype", "f32"],
];

#[test]
fn eval_and_grad_name_the_inv_node_in_the_forward_on_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    let (g, x) = inv_of_zero(dir.path());
    for cmd in ["eval", "grad"] {
        for e in ENGINES {
            let mut args = vec![cmd, g.as_str(), "--input", x.as_str(), "--detect-anomaly"];
            args.extend(e);
            assert_anomaly(
                &run(&args),
                &[
                    &g,
                    "anomaly in the forward",
                    "IR node 2 (inv)",
                    "shape [2]",
                    "parents [node 1 (sub) [2]]",
                    "inf at flat index 0",
                    "from finite operands",
                ],
            );
        }
    }
}

#[test]
fn without_the_flag_the_output_is_unchanged_inf_and_nan_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let (g, x) = inv_of_zero(dir.path());
    for e in ENGINES {
        let mut args = vec!["grad", g.as_str(), "--input", x.as_str()];
        args.extend(e);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["output"]["data"], json!(["inf", "inf"]), "{e:?}");
        assert_eq!(v["grad_input"]["data"], json!(["nan", "nan"]), "{e:?}");
        let mut args = vec!["eval", g.as_str(), "--input", x.as_str()];
        args.extend(e);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["data"], json!(["inf", "inf"]), "{e:?}");
    }
}

#[test]
fn grad_names_the_node_whose_gradient_overflows_in_the_backward() {
    // inv(1e-200) = 1e200 is finite; its gradient −1/x² is not
    let dir = tempfile::tempdir().unwrap();
    let g = json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "inv", "parents": [0], "shape": [2]}
        ]
    });
    let g = write(dir.path(), "g.json", &g).display().to_string();
    let x = write(
        dir.path(),
        "x.json",
        &json!({"shape": [2], "data": [1.0, 1e-200]}),
    );
    let x = x.display().to_string();
    for engine in ["cpu", "reference"] {
        let args = [
            "grad",
            &g,
            "--input",
            &x,
            "--engine",
            engine,
            "--detect-anomaly",
        ];
        assert_anomaly(
            &run(&args),
            &[
                "anomaly in the backward",
                "IR node 1 (inv)",
                "its gradient for node 0 (input) is -inf at flat index 1",
                "from a finite incoming gradient",
            ],
        );
    }
    // a finite run prints the same with the flag as without
    let fine = write(
        dir.path(),
        "fine.json",
        &json!({"shape": [2], "data": [1.0, 2.0]}),
    );
    let fine = fine.display().to_string();
    let with = run(&["grad", &g, "--input", &fine, "--detect-anomaly"]);
    let without = run(&["grad", &g, "--input", &fine]);
    assert_eq!(with.status.code(), Some(0), "{}", stderr(&with));
    assert_eq!(stdout(&with), stdout(&without));
}

fn train(args: &[&str]) -> Output {
    let mut all = vec!["train", "mlp", "--steps", "6", "--lr", "1e30"];
    all.extend(args);
    run(&all)
}

#[test]
fn train_with_an_absurd_learning_rate_stops_at_the_first_node_that_overflows() {
    for backend in ["eager", "compiled"] {
        let o = train(&["--detect-anomaly", "--backend", backend]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{backend}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        for w in [
            "step 2",
            "anomaly: tape node",
            "(linear,",
            "forward value is inf",
            "its operands are finite",
        ] {
            assert!(err.contains(w), "{backend}: expected {w:?} in {err}");
        }
    }
    // the eager session names the layer
    assert!(stderr(&train(&["--detect-anomaly"])).contains("(linear, `2`"));
    // without the flag the run goes on to the NaN loss, a failed run (exit 1)
    let o = train(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("the loss is NaN"), "{}", stderr(&o));
}

/// A run stopped by a NaN loss still writes what it was asked to: the plot of its finite
/// steps and a checkpoint of the last one (before, it wrote neither: exit 2 and nothing).
#[test]
fn a_run_stopped_by_a_nan_loss_writes_its_plot_and_last_finite_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("loss.svg");
    let ck = dir.path().join("ck.safetensors");
    let o = train(&[
        "--plot",
        plot.to_str().unwrap(),
        "--save",
        ck.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("step 2: the loss is NaN"), "{err}");
    let out = stdout(&o);
    assert!(out.contains("the last step with a finite loss, 1"), "{out}");
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));
    // the checkpoint is a step-1 run: resuming it for one more step reaches the same NaN
    let again = run(&[
        "train",
        "mlp",
        "--steps",
        "2",
        "--resume",
        ck.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert!(stderr(&again).contains("step 2: the loss is NaN"));
}

/// The JSON events of a `--json` run: `start` first; a run stopped early says so on standard
/// output (`stopped`, with the step and the reason) before its `wrote` events (before, a NaN
/// stop printed nothing on standard output, and no run printed `start` or `wrote`).
#[test]
fn json_runs_say_when_they_start_stop_and_write() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("loss.svg");
    let ck = dir.path().join("ck.safetensors");
    let (plot_s, ck_s) = (plot.to_str().unwrap(), ck.to_str().unwrap());
    let events = |o: &Output| -> Vec<serde_json::Value> {
        stdout(o)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect()
    };
    let names = |evs: &[serde_json::Value]| -> Vec<String> {
        evs.iter()
            .map(|e| e["event"].as_str().unwrap().to_string())
            .filter(|e| e != "step" && e != "epoch")
            .collect()
    };
    let o = train(&["--json", "--plot", plot_s, "--save", ck_s]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let evs = events(&o);
    assert_eq!(names(&evs), ["start", "stopped", "wrote", "wrote"]);
    assert_eq!(evs[0]["last_step"], 6);
    let stopped = evs.iter().find(|e| e["event"] == "stopped").unwrap();
    assert_eq!(stopped["step"], 1);
    assert!(stopped["reason"]
        .as_str()
        .unwrap()
        .contains("step 2: the loss is NaN"));
    let wrote: Vec<_> = evs.iter().filter(|e| e["event"] == "wrote").collect();
    assert_eq!(
        (wrote[0]["content"].as_str(), wrote[0]["file"].as_str()),
        (Some("plot"), Some(plot_s))
    );
    assert_eq!(
        (wrote[1]["content"].as_str(), wrote[1]["file"].as_str()),
        (Some("checkpoint"), Some(ck_s))
    );

    // a run that finishes: start, its summary, what it wrote
    let o = run(&["train", "mlp", "--steps", "2", "--json", "--save", ck_s]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(names(&events(&o)), ["start", "summary", "wrote"]);
}
