//! The `torchlean` binary end to end: exit codes 0/1/2, one clear line per problem, no panics.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{assert_bad_input, base_graph, cases_dir, run, stderr, stdout, write};
use serde_json::{json, Value};

/// The number of shipped case files.
fn case_count() -> usize {
    case_files(&cases_dir())
}

/// The number of case files in `dir`.
fn case_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count()
}

/// `tests/cases/`, and the shared conformance sets beside the repository (`../shared/
/// conformance*`, which `tests/cases/` was copied from) where there are any; a line says so
/// when there are none.
fn conformance_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs = vec![cases_dir()];
    let shared = cases_dir().join("../../../shared");
    let mut found: Vec<_> = std::fs::read_dir(&shared)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("conformance"))
        })
        .collect();
    if found.is_empty() {
        println!(
            "no {}/conformance* directory: running tests/cases only",
            shared.display()
        );
    }
    found.sort();
    dirs.extend(found);
    dirs
}

/// What CI runs: every case through every path (compiled, eager, saved) in f64 and f32, on the
/// CPU and the reference engines, and the count of runs per path and dtype, so a path that
/// stops running (or a dtype that is silently skipped) fails here.
#[test]
fn conform_runs_every_case_through_every_path_in_f64_and_f32_on_both_host_engines() {
    let dirs = conformance_dirs();
    let n: usize = dirs.iter().map(|d| case_files(d)).sum();
    assert!(n >= case_count());
    let mut args: Vec<&str> = vec!["conform"];
    args.extend(dirs.iter().map(|d| d.to_str().unwrap()));
    args.extend(["--paths", "all", "--dtype", "f64,f32"]);
    for engine in ["cpu", "reference"] {
        let mut a = args.clone();
        a.extend(["--engine", engine, "--json"]);
        let o = run(&a);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let (runs, summary) = lines.split_at(lines.len() - 1);
        assert_eq!(runs.len(), 6 * n, "{out}");
        for path in ["compiled", "eager", "saved"] {
            for dtype in ["f64", "f32"] {
                let these = runs
                    .iter()
                    .filter(|r| r["path"] == path && r["dtype"] == dtype && r["pass"] == true)
                    .count();
                assert_eq!(these, n, "{engine} {path} {dtype}");
            }
            assert_eq!(
                summary[0]["per_path"][path],
                json!({"passed": 2 * n, "failed": 0})
            );
        }
        for dtype in ["f64", "f32"] {
            assert_eq!(
                summary[0]["per_dtype"][dtype],
                json!({"passed": 3 * n, "failed": 0})
            );
        }
        assert_eq!(
            (&summary[0]["runs"], &summary[0]["cases"]),
            (&json!(6 * n), &json!(n))
        );
    }
    // the text summary counts the same runs
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        out.lines().last().unwrap(),
        format!(
            "{n} cases × paths (compiled, eager, saved) × dtypes (f64, f32) = {} runs: {} passed, 0 failed",
            6 * n,
            6 * n
        )
    );
    assert_eq!(out.lines().filter(|l| l.starts_with("PASS")).count(), 6 * n);
}

#[test]
fn conform_runs_the_compiled_path_in_each_cases_dtype_unless_asked() {
    let dir = cases_dir();
    let n = case_count();
    for (extra, dtype) in [
        (&[][..], "each case's"),
        (&["--dtype", "f32"][..], "f32"),
        (
            &["--engine", "reference", "--paths", "compiled"][..],
            "each case's",
        ),
    ] {
        let mut args = vec!["conform", dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = run(&args);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
        assert_eq!(
            out.lines().last().unwrap(),
            format!(
                "{n} cases × paths (compiled) × dtypes ({dtype}) = {n} runs: {n} passed, 0 failed"
            )
        );
        // in each case's own dtype: the cases that declare `"dtype": "f32"` run in f32
        let f32_cases = if dtype == "f32" {
            n
        } else {
            declared_f32_cases()
        };
        for (d, want) in [("f32", f32_cases), ("f64", n - f32_cases)] {
            let runs = out
                .lines()
                .filter(|l| {
                    l.starts_with("PASS") && l.contains(&format!(" compiled {d}  max_abs="))
                })
                .count();
            assert_eq!(runs, want, "{d} runs with {extra:?}:\n{out}");
        }
    }
}

/// How many case files in `tests/cases/` declare `"dtype": "f32"`.
fn declared_f32_cases() -> usize {
    let n = std::fs::read_dir(cases_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
            v["dtype"] == "f32"
        })
        .count();
    assert!(n > 0, "tests/cases/ has f32 cases (gen_cases writes some)");
    n
}

#[test]
fn conform_paths_and_dtypes_are_listed_once_and_bad_names_are_refused() {
    let p = cases_dir().join("relu_exact_zeros.json");
    let p = p.to_str().unwrap();
    let o = run(&[
        "conform",
        p,
        "--paths",
        "eager,all,eager",
        "--dtype",
        "f32",
        "--dtype",
        "f32,f64",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).trim_end().ends_with(
        "1 cases × paths (eager, compiled, saved) × dtypes (f32, f64) = 6 runs: 6 passed, 0 failed"
    ));
    assert_bad_input(&run(&["conform", p, "--paths", "lazy"]), &["lazy"]);
    assert_bad_input(
        &run(&[
            "conform",
            p,
            "--inject-fault",
            "flip-sign",
            "--dtype",
            "f32",
        ]),
        &["--inject-fault", "f64 only"],
    );
}

/// A case only the eager tape fails: `x·k` (k = 1e16) and `x + x` summed, expected at zero
/// tolerance with the local-sum rule's bits (`1e16 + (1 + 1)`); the eager tape adds the repeated
/// parent's two contributions one by one (`(1e16 + 1) + 1` = 1e16). The failing line names the
/// case, the path, the dtype, the tensor, the element and both values.
#[test]
fn conform_names_the_path_dtype_tensor_and_element_of_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let case = json!({
        "format": "torchlean.case.v1", "name": "conform_repeated_parent_order",
        "graph": {"format": "torchlean.ir.v1", "input_id": 0, "output_id": 4, "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [1]},
            {"id": 1, "kind": "const", "parents": [], "shape": [1], "value_shape": [1]},
            {"id": 2, "kind": "add", "parents": [0, 0], "shape": [1]},
            {"id": 3, "kind": "mul_elem", "parents": [0, 1], "shape": [1]},
            {"id": 4, "kind": "add", "parents": [2, 3], "shape": [1]}
        ]},
        "payload": {"1": {"value": {"shape": [1], "data": [1e16]}}},
        "input": {"shape": [1], "data": [0.5]},
        "expect": {"grad_input": {"shape": [1], "data": [10000000000000002.0]}},
        "tolerance": {"rtol": 0.0, "atol": 0.0}
    });
    let p = write(dir.path(), "order.json", &case);
    let p = p.to_str().unwrap();
    let o = run(&["conform", p, "--paths", "all", "--dtype", "f64"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("PASS  conform_repeated_parent_order")
            && lines[0].contains(" compiled f64 "),
        "{out}"
    );
    assert!(
        lines[1].starts_with("FAIL  conform_repeated_parent_order")
            && lines[1].contains(" eager    f64 "),
        "{out}"
    );
    assert!(
        lines[1]
            .ends_with("[grad_input off] at grad_input[0]: got 1e16, want 1.0000000000000002e16"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("PASS") && lines[2].contains(" saved    f64 "),
        "{out}"
    );
    assert!(lines[3].ends_with("= 3 runs: 2 passed, 1 failed"), "{out}");
    let o = run(&["conform", p, "--paths", "eager", "--json"]);
    let first: Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!(
        (&first["path"], &first["pass"]),
        (&json!("eager"), &json!(false))
    );
    assert_eq!(
        first["checks"][0]["worst"],
        json!({"index": [0], "got": 1e16, "want": 1e16 + 2.0})
    );
}

#[test]
fn conform_json_is_one_object_per_case_and_a_summary() {
    let o = run(&["conform", cases_dir().to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = case_count();
    assert_eq!(lines.len(), n + 1);
    assert!(lines[..n]
        .iter()
        .all(|l| l["pass"] == json!(true) && l["case"].is_string()));
    assert_eq!(lines[n]["passed"], json!(n));
}

#[test]
fn conform_exits_1_on_a_failing_case() {
    let dir = tempfile::tempdir().unwrap();
    let mut case: Value = serde_json::from_str(
        &std::fs::read_to_string(cases_dir().join("relu_exact_zeros.json")).unwrap(),
    )
    .unwrap();
    case["expect"]["output"]["data"][0] = json!(123.0);
    let p = write(dir.path(), "broken.json", &case);
    let o = run(&["conform", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("FAIL  relu_exact_zeros")
            && out.contains("[output off] at output[0, 0]: got "),
        "{out}"
    );
    assert!(out.contains(", want 1.23e2"), "{out}");
    assert!(out.trim_end().ends_with("0 passed, 1 failed"), "{out}");
}

#[test]
fn check_accepts_every_shipped_graph_and_case() {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(cases_dir()).unwrap() {
        let path = entry.unwrap().path();
        let o = run(&["check", path.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            stderr(&o)
        );
        // the bare graph member, with its payload and input as separate files
        let case: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let g = write(dir.path(), "g.json", &case["graph"]);
        let p = write(dir.path(), "p.json", &case["payload"]);
        let x = write(dir.path(), "x.json", &case["input"]);
        let o = run(&[
            "check",
            g.to_str().unwrap(),
            "--payload",
            p.to_str().unwrap(),
            "--input",
            x.to_str().unwrap(),
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            stderr(&o)
        );
    }
}

#[test]
fn malformed_graphs_exit_2_naming_file_node_and_field() {
    let dir = tempfile::tempdir().unwrap();
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(Mutation, Vec<&str>)> = vec![
        (
            Box::new(|v| v["nodes"][2]["kind"] = json!("frobnicate")),
            vec!["node 2 (frobnicate), field `kind`"],
        ),
        (
            Box::new(|v| v["nodes"][2]["parents"] = json!([1, 1])),
            vec!["node 2 (relu), field `parents`", "bad parent count"],
        ),
        (
            Box::new(|v| v["nodes"][2]["parents"] = json!([3])),
            vec!["node 2 (relu), field `parents`", "not < 2"],
        ),
        (
            Box::new(|v| v["nodes"][3]["shape"] = json!([4, 2])),
            vec!["node 3 (softmax), field `shape`", "[4, 2]"],
        ),
        (
            Box::new(|v| {
                v["nodes"][3].as_object_mut().unwrap().remove("axis");
            }),
            vec!["node 3 (softmax), field `axis`", "missing"],
        ),
        (
            Box::new(|v| v["nodes"][0]["shape"] = json!([4294967296u64, 4294967296u64])),
            vec!["node 0 (input), field `shape`"],
        ),
    ];
    for (mutate, want) in cases {
        let mut g = base_graph();
        mutate(&mut g);
        let p = write(dir.path(), "bad.json", &g);
        let o = run(&["check", p.to_str().unwrap()]);
        let mut want = want.clone();
        let name = p.to_str().unwrap().to_string();
        want.push(&name);
        assert_bad_input(&o, &want);
    }
}

#[test]
fn bad_extension_inputs_exit_2_naming_file_node_and_field() {
    let dir = tempfile::tempdir().unwrap();
    // graph-level: a slice past the extent, clamp with min > max, an unknown `approximate`
    let node = |v: Value| -> Value {
        let mut g = base_graph();
        g["nodes"][2] = v;
        g
    };
    let graphs = [
        (
            node(
                json!({"id": 2, "kind": "slice", "parents": [1], "shape": [2, 3],
                        "axis": 1, "start": 2, "len": 3}),
            ),
            vec!["node 2 (slice), field `len`", "past the extent 4"],
        ),
        (
            node(
                json!({"id": 2, "kind": "clamp", "parents": [1], "shape": [2, 4],
                        "min": 2.0, "max": 1.0}),
            ),
            vec!["node 2 (clamp), field `min`", "greater than `max`"],
        ),
        (
            node(
                json!({"id": 2, "kind": "gelu", "parents": [1], "shape": [2, 4],
                        "approximate": "fast"}),
            ),
            vec!["node 2 (gelu), field `approximate`", "\"fast\""],
        ),
    ];
    for (g, want) in graphs {
        let p = write(dir.path(), "bad.json", &g);
        let name = p.to_str().unwrap().to_string();
        let mut want = want.clone();
        want.push(&name);
        assert_bad_input(&run(&["check", &name]), &want);
    }
    // payload-level: cross_entropy targets out of range and not integral, through `check`,
    // `eval` on both engines, `grad` and `conform` (a case file)
    let case = cases_dir().join("transpose_class_major_ce_sum.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&case).unwrap()).unwrap();
    for (bad, want) in [(7.0, "outside [0, 7)"), (1.5, "not an integral class id")] {
        v["payload"]["2"]["target"]["data"][1] = json!(bad);
        let p = write(dir.path(), "bad_case.json", &v);
        let name = p.to_str().unwrap().to_string();
        let want = [
            "node 2 (cross_entropy), field `target`",
            "element 1",
            want,
            name.as_str(),
        ];
        for args in [
            vec!["check", &name],
            vec!["eval", &name],
            vec!["eval", &name, "--engine", "reference"],
            vec!["grad", &name, "--dtype", "f32"],
            vec!["conform", &name],
            vec!["conform", &name, "--engine", "reference", "--dtype", "f32"],
        ] {
            assert_bad_input(&run(&args), &want);
        }
    }
}

#[test]
fn truncated_json_and_missing_files_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("trunc.json");
    let text = base_graph().to_string();
    std::fs::write(&p, &text[..40]).unwrap();
    assert_bad_input(
        &run(&["check", p.to_str().unwrap()]),
        &["invalid JSON at line 1", "trunc.json"],
    );
    assert_bad_input(
        &run(&["check", "/nonexistent/graph.json"]),
        &["cannot read"],
    );
    assert_bad_input(
        &run(&["conform", "/nonexistent/case.json"]),
        &["cannot read"],
    );
}

#[test]
fn missing_or_ill_shaped_payload_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let g = write(dir.path(), "g.json", &base_graph());
    let empty = write(dir.path(), "p.json", &json!({}));
    let x = write(
        dir.path(),
        "x.json",
        &json!({"shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]}),
    );
    assert_bad_input(
        &run(&[
            "check",
            g.to_str().unwrap(),
            "--payload",
            empty.to_str().unwrap(),
        ]),
        &["p.json: node 1 (linear): missing payload (expects weight [4, 3], bias [4])"],
    );
    for cmd in ["eval", "grad"] {
        assert_bad_input(
            &run(&[
                cmd,
                g.to_str().unwrap(),
                "--payload",
                empty.to_str().unwrap(),
                "--input",
                x.to_str().unwrap(),
            ]),
            &["node 1 (linear)", "missing payload"],
        );
    }
    let bad = write(
        dir.path(),
        "p2.json",
        &json!({"1": {"weight": {"shape": [3, 4], "data": [0,0,0,0,0,0,0,0,0,0,0,0]}, "bias": {"shape": [4], "data": [0,0,0,0]}}}),
    );
    assert_bad_input(
        &run(&[
            "check",
            g.to_str().unwrap(),
            "--payload",
            bad.to_str().unwrap(),
        ]),
        &["node 1 (linear), field `weight`: payload tensor has shape [3, 4], expected [4, 3]"],
    );
    let wrong_x = write(
        dir.path(),
        "x2.json",
        &json!({"shape": [3, 2], "data": [1, 2, 3, 4, 5, 6]}),
    );
    assert_bad_input(
        &run(&[
            "check",
            g.to_str().unwrap(),
            "--input",
            wrong_x.to_str().unwrap(),
        ]),
        &["x2.json: the input has shape [3, 2]"],
    );
}

#[test]
fn eval_and_grad_reproduce_a_case() {
    let path = cases_dir().join("attention_block.json");
    let case: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let g = write(dir.path(), "g.json", &case["graph"]);
    let p = write(dir.path(), "p.json", &case["payload"]);
    let x = write(dir.path(), "x.json", &case["input"]);
    let s = write(dir.path(), "s.json", &case["seed"]);
    let o = run(&[
        "eval",
        g.to_str().unwrap(),
        "--payload",
        p.to_str().unwrap(),
        "--input",
        x.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let close = |a: &Value, b: &Value| {
        a["shape"] == b["shape"]
            && a["data"]
                .as_array()
                .unwrap()
                .iter()
                .zip(b["data"].as_array().unwrap())
                .all(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-9)
    };
    assert!(close(&out, &case["expect"]["output"]));
    let o = run(&[
        "grad",
        g.to_str().unwrap(),
        "--payload",
        p.to_str().unwrap(),
        "--input",
        x.to_str().unwrap(),
        "--seed",
        s.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(close(&out["grad_input"], &case["expect"]["grad_input"]));
    assert!(close(
        &out["grad_payload"]["2"]["weight"],
        &case["expect"]["grad_payload"]["2"]["weight"]
    ));
    // f32 runs too, and the reference engine agrees
    let o = run(&["eval", path.to_str().unwrap(), "--dtype", "f32"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["eval", path.to_str().unwrap(), "--engine", "reference"]);
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(close(&out, &case["expect"]["output"]));
}

#[test]
fn raw_log_domain_error_exits_2_naming_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let g = write(
        dir.path(),
        "g.json",
        &json!({
            "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1,
            "nodes": [
                {"id": 0, "kind": "input", "parents": [], "shape": [2]},
                {"id": 1, "kind": "log", "parents": [0], "shape": [2]}
            ]
        }),
    );
    let x = write(
        dir.path(),
        "x.json",
        &json!({"shape": [2], "data": [1.0, -1.0]}),
    );
    // the reference evaluator is the IR denotation, which refuses raw log of non-positive input
    assert_bad_input(
        &run(&[
            "eval",
            g.to_str().unwrap(),
            "--input",
            x.to_str().unwrap(),
            "--engine",
            "reference",
        ]),
        &["node 1 (log)", "element 1", "g.json"],
    );
    // the engines run the lowered graph, which is total
    let o = run(&["eval", g.to_str().unwrap(), "--input", x.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("\"nan\""), "{}", stdout(&o));
    // gradients run the lowered graph, which is total: log(-1) is NaN there
    let o = run(&["grad", g.to_str().unwrap(), "--input", x.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("\"nan\""), "{}", stdout(&o));
}

#[test]
fn lower_and_dot_print_text() {
    let path = cases_dir().join("cnn_small.json");
    let o = run(&["lower", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert!(
        out.starts_with("graphdata: 5 inputs, 5 nodes, output %9"),
        "{out}"
    );
    assert!(out.contains("conv2d(%0, %1, %2)"));
    let o = run(&["dot", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("digraph torchlean {"));
}

#[test]
fn help_exists_for_every_subcommand_and_usage_errors_exit_2() {
    for sub in ["check", "eval", "grad", "conform", "lower", "dot", "train"] {
        let o = run(&[sub, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{sub}");
        assert!(stdout(&o).contains("Usage"));
    }
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(run(&["eval"]).status.code(), Some(2));
}

#[test]
fn a_deliberately_failing_equivalence_run_writes_a_case_that_conform_reproduces() {
    use torchlean_equiv::{check, fault, CheckConfig, EngineOf, Faulty};
    use torchlean_spec::Tensor;
    let dir = tempfile::tempdir().unwrap();
    let cfg = CheckConfig {
        cases: 48,
        exact_cases: 0,
        finite_differences: false,
        out_dir: Some(dir.path().to_path_buf()),
        shrink_steps: 500,
        ..CheckConfig::default()
    };
    let reference = EngineOf::<Tensor<f64>>::bitwise();
    let faulty = EngineOf::<Faulty<Tensor<f64>, { fault::DROP_CONTRIBUTION }>>::bitwise();
    let report = check(&cfg, &[&reference, &faulty]);
    assert!(!report.ok());
    let path = report.failures[0].case_file.path().unwrap().to_path_buf();
    let p = path.to_str().unwrap();
    let o = run(&["conform", p, "--inject-fault", "drop-contribution"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("0 passed, 1 failed"));
    let o = run(&["conform", p]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_bad_input(
        &run(&["conform", p, "--inject-fault", "nonsense"]),
        &["unknown fault"],
    );
}

#[test]
fn a_safetensors_payload_gives_the_same_gradients_as_payload_json() {
    let case_path = cases_dir().join("mlp3_relu_mse.json");
    let case =
        torchlean_ir::Case::from_json_str(&std::fs::read_to_string(&case_path).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g.json");
    let pj = dir.path().join("p.json");
    let ps = dir.path().join("p.safetensors");
    let x = dir.path().join("x.json");
    std::fs::write(&g, case.graph.to_json().to_string()).unwrap();
    std::fs::write(&pj, case.payload.to_json().to_string()).unwrap();
    std::fs::write(&ps, case.payload.to_safetensors().unwrap()).unwrap();
    std::fs::write(&x, case.inputs[0].to_json().to_string()).unwrap();
    let grad = |p: &std::path::Path| {
        let o = run(&[
            "grad",
            g.to_str().unwrap(),
            "--payload",
            p.to_str().unwrap(),
            "--input",
            x.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(grad(&pj), grad(&ps));
    // a corrupt file is bad input naming it
    std::fs::write(&ps, b"not safetensors").unwrap();
    let o = run(&[
        "grad",
        g.to_str().unwrap(),
        "--payload",
        ps.to_str().unwrap(),
        "--input",
        x.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("p.safetensors"), "{}", stderr(&o));
}
