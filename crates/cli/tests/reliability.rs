//! Hostile input and hostile output: stdout closed by its reader, a full disk, stdout closed at
//! start, a rank-22,000 shape; duplicate keys and ill-typed fields; messages that name the file
//! and node the problem is in.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{assert_bad_input, base_graph, bin, cases_dir, run, stderr, stdout, write};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

#[track_caller]
fn assert_no_panic(o: &Output) {
    let err = stderr(o);
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
}

/// A graph whose `dot`, `lower`, `eval` and `grad` each print far more than a pipe holds
/// (64 KiB), so the writer blocks until the reader has gone whatever the timing.
fn big_graph(dir: &Path) -> (PathBuf, PathBuf) {
    const N: usize = 20_000;
    let mut nodes = vec![json!({"id": 0, "kind": "input", "parents": [], "shape": [N]})];
    for i in 1..2000 {
        nodes.push(json!({"id": i, "kind": "relu", "parents": [i - 1], "shape": [N]}));
    }
    let g = json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 1999, "nodes": nodes});
    let x = json!({"shape": [N], "data": vec![0.5; N]});
    (write(dir, "big.json", &g), write(dir, "x.json", &x))
}

/// Every command that prints, on the big graph (or the shipped cases).
fn printing_commands(g: &str, x: &str) -> Vec<Vec<String>> {
    let cases = cases_dir().to_str().unwrap().to_string();
    [
        vec!["dot", g],
        vec!["lower", g],
        vec!["eval", g, "--input", x],
        vec!["grad", g, "--input", x],
        vec!["check", g],
        vec!["conform", &cases],
        vec!["conform", &cases, "--json"],
    ]
    .into_iter()
    .map(|a| a.into_iter().map(String::from).collect())
    .collect()
}

#[test]
fn a_reader_that_goes_away_ends_every_command_quietly_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let (g, x) = big_graph(dir.path());
    let args = printing_commands(g.to_str().unwrap(), x.to_str().unwrap());
    for a in args {
        let mut child = bin()
            .args(&a)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // close the read end: the next write (or the one blocked on a full pipe) gets EPIPE
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(0), "{a:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{a:?}");
    }
}

#[test]
fn a_full_disk_is_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (g, x) = big_graph(dir.path());
    let train = ["train", "mlp", "--steps", "1", "--held-out", "0.5"];
    let mut all = printing_commands(g.to_str().unwrap(), x.to_str().unwrap());
    all.push(train.iter().map(|s| s.to_string()).collect());
    for a in all {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = bin().args(&a).stdout(full).output().unwrap();
        assert_no_panic(&o);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{a:?}: {err}");
        assert!(
            err.starts_with("torchlean: cannot write standard output: No space left"),
            "{a:?}: {err}"
        );
    }
}

#[test]
fn stdout_closed_at_start_is_exit_2_not_lost_output() {
    // `>&-`: the runtime puts /dev/null in its place; before this, `grad` and `lower` exited 0
    let case = cases_dir().join("cnn_small.json");
    for cmd in ["grad", "lower", "eval", "dot"] {
        let o = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(r#"exec "$0" "$1" "$2" >&-"#)
            .arg(env!("CARGO_BIN_EXE_torchlean"))
            .arg(cmd)
            .arg(&case)
            .output()
            .unwrap();
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert!(stderr(&o).contains("closed"), "{}", stderr(&o));
    }
    // a shell's `> /dev/null` is a deliberate discard, not a closed stdout
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let o = bin().arg("grad").arg(&case).stdout(null).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn lower_prints_a_rank_22000_shape() {
    let dir = tempfile::tempdir().unwrap();
    let shape = vec![1; 22_000];
    let g = write(
        dir.path(),
        "g.json",
        &json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 1, "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": shape},
            {"id": 1, "kind": "relu", "parents": [0], "shape": shape},
        ]}),
    );
    let o = run(&["lower", g.to_str().unwrap()]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    // both heads are as wide as the widest, so the `=` columns line up
    let eq = |l: &str| l.find(" = ").unwrap();
    assert_eq!(eq(lines[2]), eq(lines[4]), "{}", &out[..200]);
    assert!(
        lines[4].contains("] = relu(%0)"),
        "{}",
        &lines[4][lines[4].len() - 40..]
    );
}

/// Writes `text` (not re-serialised, so duplicate keys survive) as `name`.
fn write_text(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `{"a": 1}` with its first member written a second time, with `dup`.
fn with_duplicate(v: &Value, key: &str, dup: &str) -> String {
    let text = v.to_string();
    let at = text.find(&format!("\"{key}\":")).unwrap();
    format!("{}\"{key}\":{dup},{}", &text[..at], &text[at..])
}

fn relu_case() -> Value {
    let path = cases_dir().join("relu_exact_zeros.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn duplicate_keys_are_errors_in_every_file_a_user_gives() {
    let dir = tempfile::tempdir().unwrap();
    let case = relu_case();
    let g = write(dir.path(), "g.json", &case["graph"]);
    let x = write(dir.path(), "x.json", &case["input"]);
    let p = write(dir.path(), "p.json", &json!({}));
    let s = write(dir.path(), "s.json", &case["expect"]["output"]);
    let (gs, xs, ps) = (
        g.to_str().unwrap(),
        x.to_str().unwrap(),
        p.to_str().unwrap(),
    );
    // graph: a node's kind given twice (last-one-wins would read `sin` as `relu`)
    let mut dup_graph = case["graph"].to_string();
    dup_graph = dup_graph.replacen("\"kind\":\"sin\"", "\"kind\":\"sin\",\"kind\":\"relu\"", 1);
    let bad_g = write_text(dir.path(), "dup_g.json", &dup_graph);
    let bad_x = write_text(
        dir.path(),
        "dup_x.json",
        &with_duplicate(&case["input"], "shape", "[10]"),
    );
    let bad_p = write_text(dir.path(), "dup_p.json", r#"{"1": {}, "1": {}}"#);
    let bad_s = write_text(
        dir.path(),
        "dup_s.json",
        &with_duplicate(&case["expect"]["output"], "data", "[]"),
    );
    let bad_case = write_text(
        dir.path(),
        "dup_case.json",
        &with_duplicate(&case, "input", "{}"),
    );
    let (bg, bx, bp, bs, bc) = (
        bad_g.to_str().unwrap(),
        bad_x.to_str().unwrap(),
        bad_p.to_str().unwrap(),
        bad_s.to_str().unwrap(),
        bad_case.to_str().unwrap(),
    );
    let table: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["check", bg], bg, "\"kind\""),
        (vec!["eval", bg, "--input", xs], bg, "\"kind\""),
        (vec!["check", gs, "--input", bx], bx, "\"shape\""),
        (vec!["grad", gs, "--input", bx], bx, "\"shape\""),
        (vec!["check", gs, "--payload", bp], bp, "\"1\""),
        (
            vec!["eval", gs, "--input", xs, "--payload", bp],
            bp,
            "\"1\"",
        ),
        (
            vec!["grad", gs, "--input", xs, "--seed", bs],
            bs,
            "\"data\"",
        ),
        (vec!["check", bc], bc, "\"input\""),
        (vec!["conform", bc], bc, "\"input\""),
        (vec!["eval", bc], bc, "\"input\""),
    ];
    for (args, file, key) in table {
        let o = run(&args);
        assert_bad_input(&o, &[&format!("{file}: "), "duplicate key", key]);
    }
    // the same files without the duplicates are fine
    for args in [
        vec!["check", gs, "--payload", ps, "--input", xs],
        vec!["grad", gs, "--input", xs, "--seed", s.to_str().unwrap()],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn ill_typed_and_missing_case_fields_are_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    type Mutation = Box<dyn Fn(&mut Value)>;
    let table: Vec<(Mutation, Vec<&str>)> = vec![
        (
            Box::new(|c| c["tolerance"]["rtol"] = json!("loose")),
            vec!["field `tolerance.rtol`", "\"loose\""],
        ),
        (
            Box::new(|c| c["tolerance"]["atol"] = json!(null)),
            vec!["field `tolerance.atol`", "null"],
        ),
        (
            Box::new(|c| c["tolerance"]["atol"] = json!(-1.0)),
            vec!["field `tolerance.atol`", "non-negative"],
        ),
        (
            Box::new(|c| c["tolerance"]["rtool"] = json!(1e-3)),
            vec!["field `tolerance.rtool`", "unknown member"],
        ),
        (
            Box::new(|c| c["tolerance"] = json!(1e-3)),
            vec!["field `tolerance`", "expected an object"],
        ),
        (
            Box::new(|c| {
                c.as_object_mut().unwrap().remove("expect");
            }),
            vec!["field `expect`", "checks nothing"],
        ),
        (
            Box::new(|c| c["expect"] = json!({})),
            vec!["field `expect`", "checks nothing"],
        ),
        (
            Box::new(|c| c["dtype"] = json!(32)),
            vec!["field `dtype`", "is 32"],
        ),
        (
            Box::new(|c| c["name"] = json!(["x"])),
            vec!["field `name`", "expected a string"],
        ),
    ];
    for (mutate, want) in table {
        let mut c = relu_case();
        mutate(&mut c);
        let p = write(dir.path(), "case.json", &c);
        let name = p.to_str().unwrap().to_string();
        for cmd in ["conform", "check"] {
            let mut want = want.clone();
            want.push(&name);
            assert_bad_input(&run(&[cmd, &name]), &want);
        }
    }
}

#[test]
fn batch_norm_eps_is_checked_by_check_as_by_eval() {
    let dir = tempfile::tempdir().unwrap();
    let path = cases_dir().join("batchnorm_eval_block.json");
    let mut case: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    case["payload"]["2"]["eps"] = json!(-1.0);
    let c = write(dir.path(), "case.json", &case);
    let g = write(dir.path(), "g.json", &case["graph"]);
    let p = write(dir.path(), "p.json", &case["payload"]);
    let x = write(dir.path(), "x.json", &case["input"]);
    let (c, g, p, x) = (
        c.to_str().unwrap(),
        g.to_str().unwrap(),
        p.to_str().unwrap(),
        x.to_str().unwrap(),
    );
    let want = "node 2 (batch_norm2d_nchw_eval), field `eps`: ";
    for (args, file) in [
        (vec!["check", c], c),
        (vec!["eval", c], c),
        (vec!["grad", c], c),
        (vec!["eval", c, "--engine", "reference"], c),
        (vec!["check", g, "--payload", p], p),
        (vec!["eval", g, "--payload", p, "--input", x], p),
    ] {
        let o = run(&args);
        assert_bad_input(&o, &[&format!("{file}: {want}"), "is -1"]);
        // one validation: the same single line from every command
        assert_eq!(stderr(&o).lines().count(), 1, "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn messages_name_the_file_and_node_the_problem_is_in() {
    let dir = tempfile::tempdir().unwrap();
    let g = write(dir.path(), "g.json", &base_graph());
    let gs = g.to_str().unwrap();
    let linear = json!({"1": {
        "weight": {"shape": [4, 3], "data": vec![0.1; 12]},
        "bias": {"shape": [4], "data": vec![0.0; 4]}}});
    let p = write(dir.path(), "p.json", &linear);
    let ps = p.to_str().unwrap();
    let x = write(
        dir.path(),
        "x.json",
        &json!({"shape": [2, 3], "data": vec![1.0; 6]}),
    );
    let xs = x.to_str().unwrap();
    let bad_x = write(
        dir.path(),
        "bad_x.json",
        &json!({"shape": [3], "data": [1, 2, 3]}),
    );
    let bad_s = write(
        dir.path(),
        "bad_s.json",
        &json!({"shape": [3], "data": [1, 2, 3]}),
    );
    let bad_p = write(dir.path(), "bad_p.json", &json!({"x": {}}));
    let short_p = write(dir.path(), "short_p.json", &json!({"1": {}}));
    let (bx, bs, bp, sp) = (
        bad_x.to_str().unwrap(),
        bad_s.to_str().unwrap(),
        bad_p.to_str().unwrap(),
        short_p.to_str().unwrap(),
    );
    let table: Vec<(Vec<&str>, String)> = vec![
        // the seed names the IR output node (3), not a lowered position (%5)
        (
            vec!["grad", gs, "--payload", ps, "--input", xs, "--seed", bs],
            format!("{bs}: the seed has shape [3], but graph output node 3 declares [2, 4]"),
        ),
        (
            vec!["eval", gs, "--payload", ps, "--input", bx],
            format!("{bx}: the input has shape [3], but graph input node 0 declares [2, 3]"),
        ),
        (
            vec!["grad", gs, "--payload", ps, "--input", bx],
            format!("{bx}: the input has shape [3]"),
        ),
        (
            vec!["eval", gs, "--payload", sp, "--input", xs],
            format!("{sp}: node 1 (linear), field `weight`: missing payload tensor"),
        ),
        (
            vec!["grad", gs, "--payload", sp, "--input", xs],
            format!("{sp}: node 1 (linear), field `bias`: missing payload tensor"),
        ),
        // a payload's own problem is not labelled `graph`
        (
            vec!["check", gs, "--payload", bp],
            format!("{bp}: payload key `x` is not a node id"),
        ),
    ];
    for (args, want) in table {
        let o = run(&args);
        assert_bad_input(&o, &[&want]);
        let err = stderr(&o);
        assert!(!err.contains("graph:") && !err.contains('%'), "{err}");
        if args[0] != "check" {
            assert!(!err.contains(&format!("{gs}:")), "blames the graph: {err}");
        }
    }
}

#[test]
fn a_huge_unknown_kind_is_cut_in_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = base_graph();
    let kind = "k".repeat(1 << 20);
    g["nodes"][2]["kind"] = json!(kind);
    let p = write(dir.path(), "g.json", &g);
    let o = run(&["check", p.to_str().unwrap()]);
    assert_bad_input(&o, &["node 2 (kkkk", "unknown kind", "(1048576 bytes)"]);
    let err = stderr(&o);
    assert!(err.len() < 4096, "{} bytes of stderr", err.len());
}

#[test]
fn conform_reports_the_error_against_the_tolerance_not_a_near_zero_relative_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut case = relu_case();
    // output element 1 is an exact zero; expect half the absolute tolerance there instead:
    // still a pass, but |got − want| / |want| is 1 there
    let tol = &case["tolerance"];
    let (atol, rtol) = (tol["atol"].as_f64().unwrap(), tol["rtol"].as_f64().unwrap());
    assert_eq!(case["expect"]["output"]["data"][1], json!(0.0));
    let want = atol / 2.0;
    case["expect"]["output"]["data"][1] = json!(want);
    let of_tolerance = want / (atol + rtol * want);
    let p = write(dir.path(), "near_zero.json", &case);
    let o = run(&["conform", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out.lines().next().unwrap();
    assert!(line.starts_with("PASS"), "{line}");
    assert!(!line.contains("max_rel"), "{line}");
    assert!(
        line.contains(&format!("of_tolerance={of_tolerance:.2e}")),
        "{line}"
    );
    let o = run(&["conform", p.to_str().unwrap(), "--json"]);
    let first: Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    let got = first["of_tolerance"].as_f64().unwrap();
    assert!((got - of_tolerance).abs() < 1e-12, "{first}");
    assert!(first["max_rel"].as_f64().unwrap() >= 1.0, "{first}");
}

#[test]
fn train_whose_reader_went_away_still_trains_and_saves() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("m.safetensors");
    let mut child = bin()
        .args(["train", "mlp", "--steps", "3", "--log-every", "1", "--save"])
        .arg(&ck)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    assert!(ck.exists(), "the checkpoint was not written");
}
