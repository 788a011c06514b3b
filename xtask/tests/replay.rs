//! `cargo xtask check-equivalence` as a user runs it: a planted fault's printed rerun line
//! fails the same way (`--replay`), a sweep over seeds prints one line per failing seed.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("check-equivalence")
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The value after `prefix` on the line that starts with it (after indentation).
fn line_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix(prefix))
        .collect()
}

/// A run of 24 cases on the reference f64 engine with `flip-sign` planted, its counterexamples
/// written to `dir`.
fn planted_flip_sign(dir: &Path, more: &[&str]) -> Output {
    let mut args = vec![
        "--cases",
        "24",
        "--engine",
        "reference",
        "--dtype",
        "f64",
        "--inject-fault",
        "flip-sign",
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend(more);
    xtask(&args)
}

#[test]
fn a_planted_faults_rerun_line_fails_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let run = planted_flip_sign(dir.path(), &["--shrink-steps", "100"]);
    let text = stdout(&run);
    assert_eq!(run.status.code(), Some(1), "{text}");
    let reruns = line_after(&text, "rerun: cargo xtask check-equivalence --replay ");
    assert!(!reruns.is_empty(), "no rerun line:\n{text}");
    for file in reruns {
        assert!(Path::new(file).starts_with(dir.path()), "{file}");
        let replay = xtask(&["--replay", file]);
        let said = stdout(&replay);
        assert_eq!(
            replay.status.code(),
            Some(1),
            "{file} does not fail:\n{said}"
        );
        let recorded = line_after(&said, "recorded: ");
        let now = line_after(&said, "now:      FAIL ");
        assert_eq!(recorded.len(), 1, "{said}");
        assert_eq!(recorded, now, "a different failure:\n{said}");
        assert!(said.starts_with("replay: "), "{said}");
        assert!(said.contains("[faulty-flip-sign-f64]"), "{said}");
    }
}

#[test]
fn a_replay_on_the_correct_engine_passes_and_a_file_without_provenance_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = planted_flip_sign(dir.path(), &["--shrink-steps", "50", "--no-fd"]);
    assert_eq!(run.status.code(), Some(1));
    let file = dir
        .path()
        .join("engine_vs_reference-faulty-flip-sign-f64.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    // the same check on the unbroken engine passes: the failure was the fault's
    doc["checker"]["engine"] = "reference-f64".into();
    let fixed = dir.path().join("fixed.json");
    std::fs::write(&fixed, doc.to_string()).unwrap();
    let replay = xtask(&["--replay", fixed.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(0), "{}", stdout(&replay));
    assert!(stdout(&replay).contains("now:      pass (the recorded failure does not reproduce)"));
    // a case file that does not say what its failure depended on cannot be replayed
    doc.as_object_mut().unwrap().remove("checker");
    let bare = dir.path().join("bare.json");
    std::fs::write(&bare, doc.to_string()).unwrap();
    let replay = xtask(&["--replay", bare.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(2));
    let err = String::from_utf8_lossy(&replay.stderr);
    assert!(
        err.contains("`checker` is missing or not an object"),
        "{err}"
    );
    // nor can a file that is not there
    let replay = xtask(&["--replay", dir.path().join("none.json").to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&replay.stderr).contains("could not read counterexample"));
}

#[test]
fn a_sweep_prints_a_line_per_failing_seed_and_a_closing_line() {
    let sweep = |more: &[&str]| {
        let mut args = vec![
            "--seeds",
            "3..4",
            "--cases",
            "16",
            "--engine",
            "reference",
            "--dtype",
            "f64",
            "--no-fd",
        ];
        args.extend(more);
        xtask(&args)
    };
    let run = sweep(&["--inject-fault", "drop-contribution"]);
    let text = stdout(&run);
    assert_eq!(run.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for (line, seed) in lines.iter().zip([3, 4]) {
        assert!(line.starts_with(&format!("seed {seed}: FAIL ")), "{line}");
        assert!(
            line.ends_with(&format!(
                "rerun: cargo xtask check-equivalence --seed {seed} --cases 16 --engine reference \
                 --dtype f64 --no-fd --inject-fault drop-contribution"
            )),
            "{line}"
        );
        assert!(line.contains("[faulty-drop-contribution-f64]"), "{line}");
    }
    assert!(
        lines[2].starts_with("seeds 3..4 (2 runs of 16 cases): 0 passed, 2 failed;"),
        "{}",
        lines[2]
    );
    let run = sweep(&[]);
    assert_eq!(run.status.code(), Some(0), "{}", stdout(&run));
    assert!(stdout(&run).starts_with("seeds 3..4 (2 runs of 16 cases): 2 passed, 0 failed;"));
    let bad = xtask(&["--seeds", "9..3"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`9..3` is not a seed range"));
}
