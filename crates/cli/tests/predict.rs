//! `torchlean predict` and `torchlean export-torch CHECKPOINT`: a saved classifier takes raw
//! rows as its training file holds them (it carries its input normalization and class names),
//! in the tool and in PyTorch alike; the PyTorch half needs `TORCHLEAN_PYTHON` (a Python with
//! torch and safetensors) and is skipped, saying so, without one.
#![allow(clippy::unwrap_used)]

use crate::common::{self, assert_bad_input, stdout};
use std::path::Path;
use std::process::{Command, Output};

fn torchlean(args: &[&str]) -> Output {
    common::bin().args(args).output().unwrap()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(o));
    stdout(o)
}

/// The digits file's labels, in order.
fn digit_labels() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../train/data/digits.csv");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.rsplit(',').next().unwrap().to_string())
        .collect()
}

/// Trains `model` briefly into `dir`, returning the checkpoint's path.
fn trained(dir: &Path, model: &str) -> String {
    let ck = dir.join(format!("{model}.safetensors"));
    let ck = ck.to_str().unwrap().to_string();
    ok(&torchlean(&[
        "train", model, "--epochs", "3", "--save", &ck,
    ]));
    ck
}

#[test]
fn predict_names_a_class_per_raw_row_from_the_digits_or_a_csv() {
    let dir = tempfile::tempdir().unwrap();
    let ck = trained(dir.path(), "mlp");
    let lines = ok(&torchlean(&["predict", &ck, "--digits"]));
    let got: Vec<&str> = lines.lines().collect();
    let labels = digit_labels();
    assert_eq!(got.len(), 1797);
    let right = got.iter().zip(&labels).filter(|(g, l)| *g == l).count();
    // raw pixels, normalized by the checkpoint: the trained accuracy, not the 70-84 % of a
    // model fed data it was not trained on
    assert!(right > 1700, "{right} of 1797");
    // a CSV with the columns by name, in another order and with extra ones, gives the same
    let mut csv = String::from("id,");
    csv.push_str(
        &(0..64)
            .rev()
            .map(|i| format!("pixel_{}_{}", i / 8, i % 8))
            .collect::<Vec<_>>()
            .join(","),
    );
    csv.push('\n');
    let digits = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../train/data/digits.csv"),
    )
    .unwrap();
    for (k, line) in digits.lines().take(20).enumerate() {
        let cells: Vec<&str> = line.split(',').take(64).collect();
        let reversed: Vec<&str> = cells.into_iter().rev().collect();
        csv.push_str(&format!("{k},{}\n", reversed.join(",")));
    }
    let file = dir.path().join("rows.csv");
    std::fs::write(&file, csv).unwrap();
    let from_csv = ok(&torchlean(&[
        "predict",
        &ck,
        "--csv",
        file.to_str().unwrap(),
        "--json",
    ]));
    let rows: Vec<serde_json::Value> = from_csv
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 20);
    for (k, row) in rows.iter().enumerate() {
        assert_eq!(row["row"], k);
        assert_eq!(row["name"], got[k], "row {k}");
        assert_eq!(row["class"].to_string(), got[k], "row {k}");
    }
}

#[test]
fn predict_refuses_rows_the_model_was_not_trained_on() {
    let dir = tempfile::tempdir().unwrap();
    let ck = trained(dir.path(), "mlp");
    let file = dir.path().join("other.csv");
    std::fs::write(&file, "a,b,label\n1,2,x\n").unwrap();
    assert_bad_input(
        &torchlean(&["predict", &ck, "--csv", file.to_str().unwrap()]),
        &[
            "other.csv, line 1",
            "`pixel_0_0`",
            "and 56 more",
            "the columns are `a`, `b`, `label`",
        ],
    );
    // a checkpoint without its input normalization (saved before it existed) says so
    let mut old = torchlean_train::Checkpoint::load(Path::new(&ck)).unwrap();
    for buffer in ["input_mean", "input_scale"] {
        old.tensors.remove(buffer);
    }
    let stale = dir.path().join("stale.safetensors");
    old.save(&stale).unwrap();
    assert_bad_input(
        &torchlean(&["predict", stale.to_str().unwrap(), "--digits"]),
        &["stale.safetensors", "no `input_mean` of 64 values"],
    );
}

/// The acceptance of issue 34: the checkpoint of `train mlp` (and of `train cnn`), exported
/// with `export-torch` and loaded in PyTorch, predicts the class `torchlean predict` does on
/// every one of the 1,797 digits, both fed raw pixels.
#[test]
fn pytorch_predicts_what_predict_does_on_every_digit() {
    let Some(py) = common::python() else { return };
    let dir = tempfile::tempdir().unwrap();
    for model in ["mlp", "cnn"] {
        let ck = trained(dir.path(), model);
        let ours = ok(&torchlean(&["predict", &ck, "--digits"]));
        let module = dir.path().join(format!("exported/{model}_model.py"));
        ok(&torchlean(&[
            "export-torch",
            &ck,
            "-o",
            module.to_str().unwrap(),
        ]));
        let digits = Path::new(env!("CARGO_MANIFEST_DIR")).join("../train/data/digits.csv");
        let script = format!(
            "import sys; sys.path.insert(0, {dir:?}); import {model}_model as m\n\
             rows = [[float(v) for v in l.split(',')[:64]] for l in open({digits:?})]\n\
             print('\\n'.join(m.Model().predict(rows)))",
            dir = module.parent().unwrap().to_str().unwrap(),
            digits = digits.to_str().unwrap(),
        );
        let o = Command::new(&py).args(["-c", &script]).output().unwrap();
        let theirs = ok(&o);
        assert_eq!(theirs.lines().count(), 1797, "{model}");
        let differ: Vec<usize> = ours
            .lines()
            .zip(theirs.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, _)| i)
            .collect();
        assert!(differ.is_empty(), "{model}: rows {differ:?} differ");
    }
}

#[test]
fn export_torch_refuses_an_imported_models_checkpoint_and_a_payload() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("imported.safetensors");
    let model = common::zoo("digits_cnn.onnx");
    ok(&torchlean(&[
        "train",
        "--from",
        model.to_str().unwrap(),
        "--steps",
        "2",
        "--save",
        ck.to_str().unwrap(),
    ]));
    let ck = ck.to_str().unwrap();
    let out = dir.path().join("m.py");
    let out = out.to_str().unwrap();
    assert_bad_input(
        &torchlean(&["export-torch", ck, "-o", out]),
        &["imported model's module is the one it was exported from"],
    );
    // predict takes it: the imported model, rebuilt from its file
    let classes = ok(&torchlean(&["predict", ck, "--digits"]));
    assert_eq!(classes.lines().count(), 1797);
    let mlp = trained(dir.path(), "mlp");
    assert_bad_input(
        &torchlean(&["export-torch", &mlp, "--payload", ck, "-o", out]),
        &["a checkpoint holds its weights: no --payload"],
    );
}
