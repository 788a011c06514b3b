//! `torchlean train` end to end: the summary and its figures, JSON lines, checkpoints that
//! resume with the same losses, plots, verified steps, and bad input (exit 2, one clear line).
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn train(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_torchlean"))
        .arg("train")
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn assert_exit(o: &Output, code: i32, want: &[&str]) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {err}",
        stdout(o)
    );
    assert!(!err.contains("panicked"), "{err}");
    for w in want {
        assert!(err.contains(w), "expected {w:?} in stderr:\n{err}");
    }
}

/// The JSON lines of a `--json` run.
fn json_lines(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn losses(o: &Output) -> Vec<(u64, f64)> {
    json_lines(o)
        .iter()
        .filter(|v| v["event"] == "step")
        .map(|v| (v["step"].as_u64().unwrap(), v["loss"].as_f64().unwrap()))
        .collect()
}

#[test]
fn a_short_run_prints_step_lines_epochs_and_a_summary() {
    let o = train(&["mlp", "--steps", "50", "--log-every", "10"]);
    assert_exit(&o, 0, &[]);
    let out = stdout(&o);
    assert!(out.contains("training mlp on the 8×8 digits"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("step ")).count(),
        5,
        "{out}"
    );
    assert!(out.contains("step 50: loss="), "{out}");
    assert!(out.contains("epoch 1: held-out loss="), "{out}");
    assert!(
        out.contains("summary: mlp on cpu-f32 (eager), steps 0..50"),
        "{out}"
    );
}

#[test]
fn json_lines_and_a_checkpoint_that_resumes_with_the_same_losses() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.safetensors");
    let ck = ck.to_str().unwrap();
    let whole = train(&[
        "mlp",
        "--steps",
        "60",
        "--log-every",
        "1",
        "--json",
        "--optimizer",
        "adam",
    ]);
    assert_exit(&whole, 0, &[]);
    let summary = json_lines(&whole).pop().unwrap();
    assert_eq!(summary["event"], "summary");
    assert!(summary["held_out_after"]["accuracy"].as_f64().unwrap() > 0.5);
    let first = train(&[
        "mlp",
        "--steps",
        "25",
        "--json",
        "--optimizer",
        "adam",
        "--save",
        ck,
    ]);
    assert_exit(&first, 0, &[]);
    let rest = train(&[
        "mlp",
        "--steps",
        "60",
        "--log-every",
        "1",
        "--json",
        "--resume",
        ck,
    ]);
    assert_exit(&rest, 0, &[]);
    assert_eq!(losses(&rest), losses(&whole)[25..].to_vec());
    // a flag that would change what is computed is refused, naming both values
    let o = train(&["mlp", "--resume", ck, "--batch", "64"]);
    assert_exit(&o, 2, &["--batch 64", "the checkpoint has 32"]);
    let o = train(&["cnn", "--resume", ck]);
    assert_exit(&o, 2, &["model cnn", "mlp"]);
}

#[test]
fn plot_and_verify_every() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("loss.svg");
    let o = train(&[
        "cnn",
        "--steps",
        "20",
        "--verify-every",
        "10",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_exit(&o, 0, &[]);
    let out = stdout(&o);
    assert!(out.contains("step 10: verified on reference-f64"), "{out}");
    assert!(out.contains("verified: 2 steps"), "{out}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn csv_data_trains_and_bad_csv_exits_2_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    // two separable blobs
    let mut text = String::from("a,b,label\n");
    for i in 0..60 {
        let (c, l) = if i % 2 == 0 {
            (1.0, "yes")
        } else {
            (-1.0, "no")
        };
        let j = (i as f64 * 0.37).sin() * 0.3;
        text.push_str(&format!("{},{},{l}\n", c + j, c - j));
    }
    let good = write(dir.path(), "good.csv", &text);
    let o = train(&["mlp", "--csv", &good, "--epochs", "5", "--batch", "8"]);
    assert_exit(&o, 0, &[]);
    assert!(
        stdout(&o).contains("2 features, 2 classes"),
        "{}",
        stdout(&o)
    );
    let ragged = write(dir.path(), "ragged.csv", "a,b,label\n1,2,0\n3,1\n");
    assert_exit(
        &train(&["mlp", "--csv", &ragged]),
        2,
        &["ragged.csv", "line 3"],
    );
    let o = train(&["mlp", "--csv", &good, "--label-column", "class"]);
    assert_exit(&o, 2, &["class"]);
    let o = train(&["cnn", "--csv", &good]);
    assert_exit(&o, 2, &["model cnn"]);
}

#[test]
fn bad_settings_exit_2() {
    assert_exit(
        &train(&["mlp", "--optimizer", "lbfgs"]),
        2,
        &["lbfgs", "adam"],
    );
    assert_exit(&train(&["mlp", "--batch", "0"]), 2, &["batch"]);
    assert_exit(&train(&["mlp", "--held-out", "1.5"]), 2, &["held_out"]);
    let o = train(&["mlp", "--resume", "/nonexistent/ck.safetensors"]);
    assert_exit(&o, 2, &["/nonexistent/ck.safetensors"]);
}

#[test]
fn verify_every_stops_a_faulty_engine_with_exit_1_naming_the_parameter() {
    let o = train(&[
        "cnn",
        "--steps",
        "4",
        "--verify-every",
        "2",
        "--inject-fault",
        "pool-off-by-one",
    ]);
    assert_exit(
        &o,
        1,
        &[
            "step 2:",
            "faulty-pool-off-by-one",
            "deviates from the reference engine",
        ],
    );
    // the same run on the correct engine passes
    let o = train(&[
        "cnn",
        "--steps",
        "4",
        "--verify-every",
        "2",
        "--dtype",
        "f64",
    ]);
    assert_exit(&o, 0, &[]);
    assert_exit(
        &train(&["mlp", "--inject-fault", "nope"]),
        2,
        &["unknown fault `nope`"],
    );
}
