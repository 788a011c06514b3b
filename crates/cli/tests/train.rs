//! `torchlean train` end to end: the summary and its figures, JSON lines, checkpoints that
//! resume with the same losses, plots, verified steps, and bad input (exit 2, one clear line).
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

use crate::common;

use common::{bin, json_lines, stderr, stdout};

fn train(args: &[&str]) -> Output {
    bin().arg("train").args(args).output().unwrap()
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

/// The `summary` event of a `--json` run.
fn summary(o: &Output) -> Value {
    json_lines(o)
        .into_iter()
        .find(|v| v["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary event in {}", stdout(o)))
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
    let summary = summary(&whole);
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
    // --lr, --batch and --schedule may change on resume, the optimizer state kept; the header
    // says what changed (the resumed run above saved back to ck: step 60)
    let o = train(&[
        "mlp",
        "--resume",
        ck,
        "--steps",
        "70",
        "--lr",
        "0.0005",
        "--batch",
        "64",
        "--schedule",
        "cosine",
    ]);
    assert_exit(&o, 0, &[]);
    let want = "resumed with lr 0.001 -> 0.0005, batch 32 -> 64 (step 60 -> 31: the same place \
                in epoch 2), schedule constant -> CosineAnnealingLR(T_max=70, eta_min=0); the \
                optimizer state is kept";
    assert!(stdout(&o).contains(want), "{}", stdout(&o));
    // a flag that would change what else is computed is refused, naming both values
    let o = train(&["mlp", "--resume", ck, "--seed", "7"]);
    assert_exit(&o, 2, &["--seed 7", "the checkpoint has 0"]);
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
    assert_exit(
        &train(&["mlp", "--held-out", "1.5"]),
        2,
        &["--held-out: must be in (0, 1)"],
    );
    let o = train(&["mlp", "--resume", "/nonexistent/ck.safetensors"]);
    assert_exit(&o, 2, &["/nonexistent/ck.safetensors"]);
}

/// `--max-memory` bounds the eager backend's session as it does the compiled path (it was
/// ignored): a cap below the first batch is refused with exit 2 and one line naming the tape
/// node, op, shape and bytes; without a cap the same run trains.
#[test]
fn max_memory_bounds_the_eager_backend() {
    let o = train(&[
        "mlp",
        "--steps",
        "2",
        "--backend",
        "eager",
        "--max-memory",
        "4K",
    ]);
    assert_exit(
        &o,
        2,
        &[
            "tape node 0 (input): output [",
            "over the memory budget of 4096 bytes",
            "--max-memory",
        ],
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    let o = train(&["mlp", "--steps", "2", "--backend", "eager"]);
    assert_exit(&o, 0, &[]);
    assert!(stdout(&o).contains("summary: mlp on cpu-f32 (eager), steps 0..2"));
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

/// Sends SIGINT to the process `pid` (what Ctrl-C in a terminal does).
#[allow(unsafe_code)]
fn sigint(pid: u32) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; `pid` is our own
    // child, not yet waited for, so the id cannot have been reused.
    let rc = unsafe { libc::kill(pid, libc::SIGINT) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
}

#[test]
fn sigint_saves_a_checkpoint_that_resumes_with_the_losses_of_an_uninterrupted_run() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.safetensors");
    let ck = ck.to_str().unwrap();
    // far more steps than it can take before the signal lands
    let mut child = bin()
        .args(["train", "mlp", "--optimizer", "adam", "--steps", "1000000"])
        .args(["--json", "--log-every", "1", "--save", ck])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let start = lines.next().unwrap().unwrap();
    assert!(start.contains(r#""event":"start""#), "{start}");
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains(r#""event":"step""#), "{first}");
    sigint(child.id());
    // the rest of stdout, read on a thread so a full pipe cannot stall the child
    let rest = std::thread::spawn(move || lines.map(Result::unwrap).collect::<Vec<_>>());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("SIGINT did not stop the run within 120 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "stderr: {err}");
    let stdout: Vec<String> = std::iter::once(first).chain(rest.join().unwrap()).collect();
    let before: Vec<(u64, f64)> = stdout
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["event"] == "step")
        .map(|v| (v["step"].as_u64().unwrap(), v["loss"].as_f64().unwrap()))
        .collect();
    let k = before.last().unwrap().0;
    assert_eq!(before.len() as u64, k, "{stdout:?}");
    assert!(
        err.contains(&format!("interrupted after step {k} of 1000000"))
            && err.contains("ck.safetensors")
            && err.contains("ck.optim.safetensors")
            && err.contains("--resume"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    // resumed to k + 20 steps: the same losses, bit for bit, as one run of k + 20 steps
    let end = (k + 20).to_string();
    let resumed = train(&[
        "mlp",
        "--resume",
        ck,
        "--steps",
        &end,
        "--json",
        "--log-every",
        "1",
    ]);
    assert_exit(&resumed, 0, &[]);
    let whole = train(&[
        "mlp",
        "--optimizer",
        "adam",
        "--steps",
        &end,
        "--json",
        "--log-every",
        "1",
    ]);
    assert_exit(&whole, 0, &[]);
    let whole = losses(&whole);
    assert_eq!(before, whole[..k as usize].to_vec());
    let bits = |v: &[(u64, f64)]| v.iter().map(|&(s, l)| (s, l.to_bits())).collect::<Vec<_>>();
    let resumed = losses(&resumed);
    assert_eq!(resumed.first().map(|s| s.0), Some(k + 1));
    assert_eq!(bits(&resumed), bits(&whole[k as usize..]));
}

#[test]
fn a_save_that_fails_exits_2_naming_the_file_and_keeps_the_old_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.safetensors");
    let ck_s = ck.to_str().unwrap();
    assert_exit(&train(&["mlp", "--steps", "3", "--save", ck_s]), 0, &[]);
    let optim = dir.path().join("ck.optim.safetensors");
    let (model_before, optim_before) =
        (std::fs::read(&ck).unwrap(), std::fs::read(&optim).unwrap());
    // a real write failure, root or not: files may grow to 20 KiB (the checkpoint is ~100 KiB),
    // so the write fails with EFBIG (SIGXFSZ ignored, as it then stays across exec)
    let o = Command::new("sh")
        .arg("-c")
        .arg(r#"trap "" XFSZ; ulimit -f 40 && exec "$0" train mlp --steps 5 --save "$1""#)
        .arg(env!("CARGO_BIN_EXE_torchlean"))
        .arg(ck_s)
        .output()
        .unwrap();
    assert_exit(
        &o,
        2,
        &["cannot write", "ck.optim.safetensors", "too large"],
    );
    assert_eq!(std::fs::read(&ck).unwrap(), model_before);
    assert_eq!(std::fs::read(&optim).unwrap(), optim_before);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["ck.optim.safetensors", "ck.safetensors"],
        "no temporary left"
    );
    // and the old pair still resumes
    assert_exit(&train(&["mlp", "--resume", ck_s, "--steps", "4"]), 0, &[]);
}

/// Output paths are checked before training: a directory that cannot be made, or a plot not
/// named `.svg`, stops the run at once (exit 2, nothing trained, every bad path named); a
/// missing directory is created.
#[test]
fn bad_output_paths_are_refused_before_training_and_missing_directories_made() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let under_file = file.join("x.safetensors");
    let png = dir.path().join("loss.png");
    let o = train(&[
        "mlp",
        "--epochs",
        "3",
        "--save",
        under_file.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert_exit(
        &o,
        2,
        &[
            "--save",
            "a-file/x.safetensors",
            "cannot create its directory",
            "--plot",
            "name it .svg",
        ],
    );
    assert!(stdout(&o).is_empty(), "trained: {}", stdout(&o));
    assert!(!png.exists());
    // a directory in the file's place
    let o = train(&[
        "gpt",
        "--iters",
        "1",
        "--save",
        dir.path().to_str().unwrap(),
    ]);
    assert_exit(&o, 2, &["is a directory"]);
    // a missing directory is made, and the run saves into it
    let nested = dir.path().join("new/sub/ck.safetensors");
    let o = train(&["mlp", "--steps", "2", "--save", nested.to_str().unwrap()]);
    assert_exit(&o, 0, &[]);
    assert!(nested.exists() && dir.path().join("new/sub/ck.optim.safetensors").exists());
}

/// A resumed run without `--save` writes back to its checkpoint and says so on its last line;
/// one with nothing left to do (`--epochs` and `--steps` are totals) is refused, not a silent
/// no-op.
#[test]
fn a_resumed_run_saves_back_and_one_already_done_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.safetensors");
    let ck_s = ck.to_str().unwrap();
    assert_exit(&train(&["mlp", "--steps", "3", "--save", ck_s]), 0, &[]);
    let before = std::fs::read(&ck).unwrap();
    let o = train(&["mlp", "--resume", ck_s, "--steps", "5"]);
    assert_exit(&o, 0, &[]);
    let out = stdout(&o);
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.contains("the --resume file, as no --save was given"),
        "{out}"
    );
    assert_ne!(
        std::fs::read(&ck).unwrap(),
        before,
        "the checkpoint moved on"
    );
    // at step 5 now: --steps 5 has nothing left to do
    let o = train(&["mlp", "--resume", ck_s, "--steps", "5"]);
    assert_exit(&o, 2, &["at step 5 already", "totals"]);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
}

/// `--init-from` starts from a state_dict's parameters: from a run's saved parameters, the
/// held-out loss before the first step is that run's after its last; a file whose names are not
/// the model's is refused with every missing, unexpected and mis-shaped name (exit 2).
#[test]
fn init_from_starts_at_a_state_dicts_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.safetensors");
    let ck = ck.to_str().unwrap();
    let first = train(&["mlp", "--steps", "20", "--json", "--save", ck]);
    assert_exit(&first, 0, &[]);
    let after = summary(&first)["held_out_after"].clone();
    let second = train(&["mlp", "--steps", "1", "--json", "--init-from", ck]);
    assert_exit(&second, 0, &[]);
    let before = summary(&second)["held_out_before"].clone();
    assert_eq!(before, after);
    let fresh = train(&["mlp", "--steps", "1", "--json"]);
    assert_ne!(summary(&fresh)["held_out_before"], after);
    // a cnn's parameters are not an mlp's
    let cnn = dir.path().join("cnn.safetensors");
    let cnn = cnn.to_str().unwrap();
    assert_exit(&train(&["cnn", "--steps", "1", "--save", cnn]), 0, &[]);
    let o = train(&["mlp", "--steps", "1", "--init-from", cnn]);
    assert_exit(
        &o,
        2,
        &["missing key(s)", "unexpected key(s)", "cnn.safetensors"],
    );
    let o = train(&["mlp", "--init-from", ck, "--resume", ck]);
    assert_exit(&o, 2, &["--init-from"]);
}

/// The tensor names and shapes of a safetensors file, from its header.
fn safetensors_shapes(path: &Path) -> Vec<(String, Vec<u64>)> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut out: Vec<(String, Vec<u64>)> = header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let dims = v["shape"].as_array().unwrap();
            (
                k.clone(),
                dims.iter().map(|d| d.as_u64().unwrap()).collect(),
            )
        })
        .collect();
    out.sort();
    out
}

/// `train --from`: the digits classifier exported at batch 1 (`tools/onnx_zoo/make_zoo.py`)
/// trains at batch 32 on the compiled backend with verified steps, saves its initializers
/// under their ONNX names (batch norm's running statistics stay constants), and resumes with
/// the losses of an uninterrupted run.
#[test]
fn an_imported_onnx_classifier_fine_tunes_saves_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::zoo("digits_cnn.onnx");
    let model = model.to_str().unwrap();
    let ck = dir.path().join("ck.safetensors");
    let ckp = ck.to_str().unwrap();
    let flags = ["--from", model, "--json", "--log-every", "1"];
    let whole = train(&[&flags[..], &["--epochs", "2", "--backend", "compiled"]].concat());
    assert_exit(&whole, 0, &[]);
    let summary = summary(&whole);
    assert_eq!(summary["arch"], "onnx");
    let (before, after) = (
        summary["held_out_before"]["accuracy"].as_f64().unwrap(),
        summary["held_out_after"]["accuracy"].as_f64().unwrap(),
    );
    assert!(before < 0.3 && after > 0.8, "{before} -> {after}");
    let first = train(
        &[
            &flags[..],
            &["--steps", "30", "--verify-every", "10", "--save", ckp],
            &["--backend", "compiled"],
        ]
        .concat(),
    );
    assert_exit(&first, 0, &[]);
    let verified = json_lines(&first)
        .iter()
        .filter(|v| v["event"] == "verified")
        .count();
    assert_eq!(verified, 3);
    let names: Vec<String> = safetensors_shapes(&ck)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "bn.bias",
            "bn.weight",
            "conv.bias",
            "conv.weight",
            "fc.bias",
            "fc.weight",
            "input_mean",
            "input_scale"
        ]
    );
    let rest = train(&[&flags[..], &["--epochs", "2", "--resume", ckp]].concat());
    assert_exit(&rest, 0, &[]);
    assert_eq!(losses(&rest), losses(&whole)[30..].to_vec());
    // the checkpoint is of this model
    let o = train(&["mlp", "--resume", ckp]);
    assert_exit(&o, 2, &["model mlp", "onnx"]);
}

/// `train --from --head`: another class count replaces the named head with a fresh layer of
/// that many outputs; without `--head` the mismatch is bad input that says how to fix it, and
/// a `--head` that is no linear layer's weight names what it is.
#[test]
fn an_imported_classifier_gets_a_new_head_for_other_classes() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = (0..64).map(|i| format!("f{i},")).collect::<String>() + "label\n";
    for r in 0..60 {
        let class = r % 3;
        let row: String = (0..64)
            .map(|i| format!("{},", class as f64 + ((r * 7 + i * 13) % 10) as f64 / 10.0))
            .collect();
        csv.push_str(&format!("{row}{class}\n"));
    }
    let data = write(dir.path(), "three.csv", &csv);
    let model = common::zoo("digits_cnn.onnx");
    let model = model.to_str().unwrap();
    let ck = dir.path().join("h.safetensors");
    let o = train(&[
        "--from",
        model,
        "--csv",
        &data,
        "--head",
        "fc",
        "--steps",
        "4",
        "--save",
        ck.to_str().unwrap(),
    ]);
    assert_exit(&o, 0, &[]);
    assert!(
        stdout(&o).contains("(imported; head `fc` replaced: 10 -> 3 classes"),
        "{}",
        stdout(&o)
    );
    let shapes = safetensors_shapes(&ck);
    assert!(
        shapes.contains(&("fc.weight".into(), vec![3, 128])),
        "{shapes:?}"
    );
    assert!(shapes.contains(&("fc.bias".into(), vec![3])), "{shapes:?}");
    let o = train(&["--from", model, "--csv", &data]);
    assert_exit(&o, 2, &["[1, 10]", "3 classes", "--head NAME"]);
    let o = train(&["--from", model, "--csv", &data, "--head", "conv"]);
    assert_exit(&o, 2, &["`conv.weight`", "read by a Conv node"]);
    let wide = common::zoo("mlp.onnx");
    let o = train(&["--from", wide.to_str().unwrap()]);
    assert_exit(&o, 2, &["takes [6] per example", "64 features"]);
}

/// PyTorch's defaults under PyTorch's names: the header prints the whole optimizer; a named
/// `sgd` has no momentum unless `--momentum` says so; an option an optimizer lacks is refused
/// by name; a schedule changes the run; a resumed run keeps its optimizer and schedule.
#[test]
fn optimizer_flags_take_pytorchs_defaults_and_names() {
    let header = |args: &[&str]| {
        let o = train(&[&["mlp", "--steps", "3"][..], args].concat());
        assert_exit(&o, 0, &[]);
        stdout(&o).lines().next().unwrap().to_string()
    };
    let default = header(&[]);
    assert!(
        default.contains(
            "SGD(lr=0.05, dampening=0.0, momentum=0.9, nesterov=False, weight_decay=0.0)"
        ),
        "{default}"
    );
    let plain = header(&["--optimizer", "sgd"]);
    assert!(
        plain.contains("SGD(lr=0.001, dampening=0.0, momentum=0.0,"),
        "{plain}"
    );
    let nesterov = header(&[
        "--optimizer",
        "sgd",
        "--momentum",
        "0.8",
        "--nesterov",
        "--weight-decay",
        "1e-4",
    ]);
    assert!(
        nesterov.contains("momentum=0.8, nesterov=True, weight_decay=0.0001)"),
        "{nesterov}"
    );
    let cosine = header(&["--schedule", "cosine"]);
    assert!(
        cosine.contains("CosineAnnealingLR(T_max=3, eta_min=0)"),
        "{cosine}"
    );
    assert_exit(
        &train(&["mlp", "--optimizer", "adam", "--momentum", "0.5"]),
        2,
        &["adam has no --momentum (only sgd, rmsprop)"],
    );
    assert_exit(
        &train(&["mlp", "--optimizer", "sgd", "--nesterov"]),
        2,
        &["nesterov"],
    );
    assert_exit(
        &train(&["mlp", "--schedule", "step:0"]),
        2,
        &["step:SIZE[:GAMMA]"],
    );
    // a schedule changes what is computed: step 2 of a run decayed ×0.1 every step differs
    let flags = ["mlp", "--steps", "3", "--json", "--log-every", "1"];
    let constant = losses(&train(&flags));
    let decayed = losses(&train(
        &[&flags[..], &["--schedule", "step:1:0.1"]].concat(),
    ));
    assert_eq!(constant[..2], decayed[..2]);
    assert_ne!(constant[2], decayed[2]);
    // resuming keeps the checkpoint's optimizer and schedule
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.safetensors");
    let ck = ck.to_str().unwrap();
    assert_exit(&train(&["mlp", "--steps", "2", "--save", ck]), 0, &[]);
    assert_exit(
        &train(&["mlp", "--steps", "4", "--resume", ck, "--momentum", "0.5"]),
        2,
        &["--momentum", "momentum=0.9", "is kept, with its state"],
    );
}

/// `--inject-fault` is honest: on every model, a fault that touches one of the model's ops is
/// caught by `--verify-every` (exit 1), and one that touches none is refused before training
/// (exit 2), naming the model's ops and the faults that would show.
#[test]
fn every_offered_fault_is_caught_and_the_others_refused() {
    let digits_cnn = common::zoo("digits_cnn.onnx");
    let models: [&[&str]; 3] = [
        &["mlp"],
        &["cnn"],
        &["--from", digits_cnn.to_str().unwrap()],
    ];
    let mut caught = 0;
    for model in models {
        for fault in [
            "flip-sign",
            "drop-contribution",
            "accumulation-order",
            "broadcast-reduction",
            "pool-off-by-one",
        ] {
            let run = [
                &[
                    "--steps",
                    "2",
                    "--verify-every",
                    "1",
                    "--inject-fault",
                    fault,
                ][..],
                model,
            ]
            .concat();
            let o = train(&run);
            let err = stderr(&o);
            match o.status.code() {
                Some(1) => {
                    assert!(
                        err.contains("deviates from the reference engine"),
                        "{model:?} {fault}: {err}"
                    );
                    caught += 1;
                }
                Some(2) => assert!(
                    err.contains(&format!("--inject-fault {fault}: the"))
                        && err.contains("runs none of the ops it breaks"),
                    "{model:?} {fault}: {err}"
                ),
                other => panic!("{model:?} {fault}: exit {other:?}: {err}"),
            }
        }
    }
    // the CNNs' pools are caught (the MLP's ops are touched by no fault)
    assert!(caught >= 2, "{caught}");
}

/// A build without MPI cannot share a `train mlp|cnn` run: asked to, or started by a launcher
/// as one of several, it refuses before training (N copies of one run would each write the
/// same files).
#[cfg(not(feature = "mpi"))]
#[test]
fn a_build_without_mpi_refuses_to_share_a_classifier_run() {
    assert_exit(
        &train(&["mlp", "--steps", "1", "--distributed"]),
        2,
        &["--distributed was given, but this torchlean was built without MPI"],
    );
    let o = bin()
        .args(["train", "cnn", "--steps", "1"])
        .env("PMI_SIZE", "2")
        .env("PMI_RANK", "1")
        .output()
        .unwrap();
    assert_exit(
        &o,
        2,
        &["started by a PMI launcher (MPICH, Intel MPI) as rank 1 of 2, but this torchlean was built without MPI"],
    );
}
