//! `torchlean train gpt` and `torchlean sample` end to end, on a model small enough for CI:
//! JSON lines, a checkpoint that resumes with the same losses and samples reproducibly, and bad
//! input (exit 2, one line per problem, nothing trained).
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Output;

use crate::common::{assert_bad_input, bin, json_lines, stderr, stdout};

/// A GPT of one layer, 16 wide, on contexts of 8, a few steps.
const SMALL: &[&str] = &[
    "train",
    "gpt",
    "--n-layer",
    "1",
    "--n-head",
    "2",
    "--n-embd",
    "16",
    "--block",
    "8",
    "--batch",
    "2",
    "--eval-interval",
    "3",
    "--eval-iters",
    "2",
    "--json",
];

fn gpt(extra: &[&str]) -> Output {
    bin().args(SMALL).args(extra).output().unwrap()
}

fn step_losses(lines: &[Value]) -> Vec<f64> {
    lines
        .iter()
        .filter(|v| v.get("loss").is_some())
        .map(|v| v["loss"].as_f64().unwrap())
        .collect()
}

#[test]
fn json_lines_are_steps_evaluations_and_a_summary() {
    let lines = json_lines(&gpt(&["--iters", "6"]));
    let steps: Vec<u64> = lines
        .iter()
        .filter(|v| v.get("loss").is_some())
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3, 4, 5, 6]);
    assert!(lines
        .iter()
        .all(|v| v.get("lr").is_some() || v.get("loss").is_none()));
    let evals: Vec<u64> = lines
        .iter()
        .filter(|v| v.get("val_loss").is_some() && v.get("summary").is_none())
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(evals, [3, 6]);
    let summary = lines.last().unwrap();
    assert_eq!(summary["summary"], true);
    // every line says what it is, as `train --json`'s do
    let events: BTreeSet<&str> = lines.iter().map(|v| v["event"].as_str().unwrap()).collect();
    assert_eq!(events, BTreeSet::from(["eval", "step", "summary"]));
    assert_eq!(summary["steps"], 6);
    assert!(summary["val_loss"].as_f64().unwrap() > 0.0);
    assert!(summary["tokens_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_resumed_run_continues_with_the_same_losses_and_samples_reproducibly() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("gpt.safetensors");
    let ck = ck.to_str().unwrap();
    // ten steps in one run; eight, saved, then resumed to ten (all within the warm-up, so the
    // learning rates do not depend on the total)
    let whole = step_losses(&json_lines(&gpt(&["--iters", "10"])));
    let first = step_losses(&json_lines(&gpt(&["--iters", "8", "--save", ck])));
    assert_eq!(first[..], whole[..8]);
    let resumed = bin()
        .args(["train", "gpt", "--json", "--resume", ck, "--iters", "10"])
        .output()
        .unwrap();
    let resumed = step_losses(&json_lines(&resumed));
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&resumed), bits(&whole[8..]));
    // without --save, the resumed run went back to its checkpoint: it is at step 10 now

    let sample = |seed: &str| {
        bin()
            .args([
                "sample", ck, "--prompt", "Th", "--tokens", "30", "--seed", seed,
            ])
            .output()
            .unwrap()
    };
    let a = sample("1");
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    let text = stdout(&a);
    assert!(text.starts_with("Th"), "{text:?}");
    assert_eq!(text.trim_end_matches('\n').chars().count(), 32, "{text:?}");
    assert_eq!(stdout(&sample("1")), text);
    // a prompt character outside the vocabulary: nothing is written
    let bad = bin()
        .args(["sample", ck, "--prompt", "Th€"])
        .output()
        .unwrap();
    assert_bad_input(
        &bad,
        &["character '€' at position 2 is not in the vocabulary"],
    );
    assert_eq!(stdout(&bad), "");
    // a run at its --iters has nothing to do: resuming it names the total to give
    let o = bin()
        .args(["train", "gpt", "--resume", ck])
        .output()
        .unwrap();
    assert_bad_input(&o, &["the run is at step 10 already", "give more than 10"]);
    // resuming with another model size is refused
    let o = bin()
        .args(["train", "gpt", "--resume", ck, "--n-embd", "32"])
        .output()
        .unwrap();
    assert_bad_input(
        &o,
        &["cannot resume with --n-embd 32 (the checkpoint has 16)"],
    );
}

#[test]
fn flags_of_the_other_models_and_bad_text_are_refused() {
    let o = gpt(&["--epochs", "3", "--optimizer", "adam"]);
    assert_bad_input(
        &o,
        &["--epochs is a `train mlp|cnn` flag", "--optimizer is a"],
    );
    let o = bin()
        .args(["train", "mlp", "--iters", "3"])
        .output()
        .unwrap();
    assert_bad_input(
        &o,
        &["--iters is a `train gpt` flag, not a `train mlp` one"],
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let o = gpt(&["--text", empty.to_str().unwrap()]);
    assert_bad_input(
        &o,
        &["empty.txt: 0 characters are too few for a block of 8"],
    );
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "to be or not to be, that is").unwrap();
    let o = gpt(&["--text", short.to_str().unwrap()]);
    assert_bad_input(&o, &["the val split has 3, it needs at least 9"]);
    let latin1 = dir.path().join("latin1.txt");
    std::fs::write(&latin1, b"caf\xe9 au lait").unwrap();
    let o = gpt(&["--text", latin1.to_str().unwrap()]);
    assert_bad_input(&o, &["not UTF-8 text (byte 3)"]);
    let o = bin()
        .args(["train", "gpt", "--n-embd", "16", "--n-head", "3"])
        .output()
        .unwrap();
    assert_bad_input(&o, &["n_embd 16 is not a multiple of n_head 3"]);
}

#[test]
fn a_users_text_trains() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("verse.txt");
    std::fs::write(
        &text,
        "to be, or not to be: that is the question.\n".repeat(30),
    )
    .unwrap();
    let lines = json_lines(&gpt(&[
        "--iters",
        "3",
        "--threads",
        "1",
        "--text",
        text.to_str().unwrap(),
    ]));
    assert_eq!(step_losses(&lines).len(), 3);
}

/// A build without MPI cannot take part in a shared run: started by a launcher as one of
/// several, or asked with `--distributed`, it refuses before training rather than train the
/// whole batch alone, N times over.
#[cfg(not(feature = "mpi"))]
#[test]
fn a_build_without_mpi_refuses_a_shared_run() {
    let o = bin()
        .args(SMALL)
        .args(["--iters", "1"])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .env("OMPI_COMM_WORLD_RANK", "1")
        .output()
        .unwrap();
    assert_bad_input(
        &o,
        &["started by OpenMPI's mpirun as rank 1 of 2, but this torchlean was built without MPI: rebuild it with `--features mpi`"],
    );
    assert!(stdout(&o).is_empty());
    let o = gpt(&["--iters", "1", "--distributed"]);
    assert_bad_input(
        &o,
        &["--distributed was given, but this torchlean was built without MPI"],
    );
    // a launch of one is no launch
    let o = bin()
        .args(SMALL)
        .args(["--iters", "1"])
        .env("OMPI_COMM_WORLD_SIZE", "1")
        .env("OMPI_COMM_WORLD_RANK", "0")
        .output()
        .unwrap();
    assert_eq!(step_losses(&json_lines(&o)).len(), 1);
}

/// `--save-every N` writes the run every N steps as it goes (a long run killed keeps its last
/// checkpoint); it needs `--save`.
#[test]
fn save_every_writes_the_run_as_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("run.safetensors");
    let ck = ck.to_str().unwrap();
    let lines = json_lines(&gpt(&[
        "--iters",
        "5",
        "--threads",
        "1",
        "--save",
        ck,
        "--save-every",
        "2",
    ]));
    let saved: Vec<u64> = lines
        .iter()
        .filter(|v| v["event"] == "wrote" && v["content"] == "checkpoint")
        .map(|v| v["step"].as_u64().unwrap_or(0))
        .collect();
    // after steps 2 and 4, and at the end (the final write has no step)
    assert_eq!(saved, [2, 4, 0], "{lines:?}");
    let o = gpt(&["--iters", "2", "--save-every", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--save"), "{}", stderr(&o));
}
