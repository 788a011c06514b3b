//! TorchLean's two dialects end to end: the September-dialect fixtures of `crates/ir/tests/september/`
//! evaluate and differentiate to PyTorch's float64 values (`make_fixtures.py`), and every
//! conformance case whose kinds both dialects know converts August → September → August unchanged
//! in meaning (bitwise-equal outputs and gradients).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use torchlean_compiled::{exec_graph_of_ir, run_grad_seeds_lowered, GradResult};
use torchlean_engine_cpu::CpuF64;
use torchlean_ir::{Case, Dialect, Graph, GraphDoc, OpKind, Payload, Tolerance};
use torchlean_spec::{Op, Tensor};

const FIXTURES: [&str; 6] = [
    "mlp",
    "cnn",
    "batch_norm",
    "reductions",
    "two_outputs",
    "inline_weights",
];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ir/tests/september")
}

fn tensor(v: &serde_json::Value) -> Tensor<f64> {
    Tensor::from_json(v).unwrap()
}

/// PyTorch float64 against our f64: the lowering of several kinds (multi-axis means, the
/// affine layer norm) rounds differently, hence not bitwise.
const TOL: Tolerance = Tolerance {
    rtol: 1e-10,
    atol: 1e-12,
};

fn close(what: &str, got: &Tensor<f64>, want: &Tensor<f64>) {
    let c = TOL.compare(got, want);
    assert!(c.pass, "{what}: {c:?}\n got {got:?}\nwant {want:?}");
}

fn grad(doc: &GraphDoc, x: &Tensor<f64>, seeds: &[Tensor<f64>]) -> GradResult {
    let exec = exec_graph_of_ir(&doc.graph, &doc.payload).unwrap();
    run_grad_seeds_lowered::<Tensor<f64>>(exec, &doc.payload, x, seeds).unwrap()
}

#[test]
fn september_dialect_fixtures_evaluate_and_differentiate_as_pytorch_does() {
    for name in FIXTURES {
        let dir = fixture_dir();
        let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
        let doc = GraphDoc::from_json_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(doc.dialect, Dialect::September2026, "{name}");
        let expect: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.expect.json"))).unwrap(),
        )
        .unwrap();
        let x = tensor(&expect["input"]);
        let seeds: Vec<Tensor<f64>> = expect["seeds"]
            .as_array()
            .unwrap()
            .iter()
            .map(tensor)
            .collect();
        let outputs: Vec<Tensor<f64>> = expect["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(tensor)
            .collect();
        assert_eq!(doc.graph.output_count(), outputs.len(), "{name}");

        // the reference evaluator
        let denoted = torchlean_ir::denote_outputs(&doc.graph, &doc.payload, &x).unwrap();
        for (k, (got, want)) in denoted.iter().zip(&outputs).enumerate() {
            close(&format!("{name} reference output {k}"), got, want);
        }
        // forward and backward on the reference and CPU engines
        let r = grad(&doc, &x, &seeds);
        let exec = exec_graph_of_ir(&doc.graph, &doc.payload).unwrap();
        let cpu = run_grad_seeds_lowered::<CpuF64>(exec, &doc.payload, &x, &seeds).unwrap();
        for r in [&r, &cpu] {
            for (k, (got, want)) in r.outputs().zip(&outputs).enumerate() {
                close(&format!("{name} output {k}"), got, want);
            }
            close(
                &format!("{name} grad_input"),
                r.grad_input(),
                &tensor(&expect["grad_input"]),
            );
            let got = doc.to_file_payload(&r.grad_payload);
            let want = Payload::from_json(&expect["grad_payload"]).unwrap();
            for (node, entry) in &want.entries {
                for (key, t) in &entry.tensors {
                    let g = got
                        .entry(*node)
                        .and_then(|e| e.tensor(key))
                        .unwrap_or_else(|| panic!("{name}: no gradient for {node}.{key}"));
                    close(&format!("{name} grad {node}.{key}"), g, t);
                }
            }
        }
    }
}

#[test]
fn the_combined_pullback_is_the_sum_of_each_outputs_pullback() {
    let text = std::fs::read_to_string(fixture_dir().join("reductions.json")).unwrap();
    let doc = GraphDoc::from_json_str(&text).unwrap();
    let x = Tensor::from_fn([2, 3, 4], |i| {
        (i[0] * 12 + i[1] * 4 + i[2]) as f64 * 0.25 - 1.0
    })
    .unwrap();
    let shapes: Vec<_> = doc
        .graph
        .outputs()
        .map(|o| doc.graph.nodes[o].shape.clone())
        .collect();
    let seeds: Vec<Tensor<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            Tensor::from_fn(s.clone(), |i| {
                1.5 + k as f64 + i.iter().sum::<usize>() as f64
            })
            .unwrap()
        })
        .collect();
    let all = grad(&doc, &x, &seeds).grad_input().clone();
    // each output alone (zero seeds for the others), summed
    let mut sum = Tensor::zeros([2, 3, 4]).unwrap();
    for k in 0..seeds.len() {
        let only: Vec<Tensor<f64>> = (0..seeds.len())
            .map(|j| {
                if j == k {
                    seeds[j].clone()
                } else {
                    Tensor::zeros(shapes[j].clone()).unwrap()
                }
            })
            .collect();
        sum = sum.add(grad(&doc, &x, &only).grad_input()).unwrap();
    }
    close("combined pullback", &all, &sum);
    // no seeds: ones for every output
    let ones: Vec<Tensor<f64>> = shapes
        .iter()
        .map(|s| Tensor::ones(s.clone()).unwrap())
        .collect();
    assert!(grad(&doc, &x, &[])
        .grad_input()
        .bit_eq(grad(&doc, &x, &ones).grad_input()));
}

#[test]
fn a_seed_count_other_than_the_outputs_is_refused() {
    let text = std::fs::read_to_string(fixture_dir().join("two_outputs.json")).unwrap();
    let doc = GraphDoc::from_json_str(&text).unwrap();
    let x = Tensor::zeros([3, 2]).unwrap();
    let exec = exec_graph_of_ir(&doc.graph, &doc.payload).unwrap();
    let one = [Tensor::scalar(1.0)];
    let e = run_grad_seeds_lowered::<Tensor<f64>>(exec, &doc.payload, &x, &one).unwrap_err();
    assert!(
        e.to_string().contains("2 outputs, but 1 seed was given"),
        "{e}"
    );
    // the single-seed entry point refuses a graph with several outputs too
    let e =
        torchlean_compiled::run_grad::<Tensor<f64>>(&doc.graph, &doc.payload, &x, Some(&one[0]))
            .unwrap_err();
    assert!(e.to_string().contains("2 outputs"), "{e}");
    // the eager path takes ones for each of the two outputs, as the compiled path does
    let ones = |t: &Tensor<f64>| Tensor::full(t.shape().clone(), 1.0).unwrap();
    let x = Tensor::from_fn([3, 2], |i| (i[0] * 2 + i[1]) as f64 * 0.3 - 0.7).unwrap();
    let compiled = grad(&doc, &x, &[]);
    assert_eq!(compiled.outputs().count(), 2);
    let seeds: Vec<Tensor<f64>> = std::iter::once(&compiled.output)
        .chain(&compiled.extra_outputs)
        .map(ones)
        .collect();
    let want = grad(&doc, &x, &seeds);
    let on = |path, seed: Option<&Tensor<f64>>| {
        torchlean_compiled::run_grad_on::<Tensor<f64>>(path, &doc.graph, &doc.payload, &x, seed)
    };
    let eager = on(torchlean_compiled::GradPath::Eager, None).unwrap();
    close("eager grad_input", eager.grad_input(), want.grad_input());
    // one seed for two outputs is refused on the eager path, naming both counts
    let e = on(torchlean_compiled::GradPath::Eager, Some(&one[0])).unwrap_err();
    assert!(
        matches!(
            e,
            torchlean_compiled::CompiledError::SeedCount {
                outputs: 2,
                seeds: 1
            }
        ),
        "{e}"
    );
    // and so does the saved-graph path of `conform --paths`, counting every output
    let e = on(torchlean_compiled::GradPath::Saved, None).unwrap_err();
    assert!(
        matches!(
            e,
            torchlean_compiled::CompiledError::SingleOutputPath { outputs: 2, .. }
        ),
        "{e}"
    );
}

/// Every case file of the conformance sets this machine has: the repository's, and the shared
/// ones when present (CI has only the repository's).
fn conformance_cases() -> Vec<(PathBuf, Case)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut dirs = vec![root.join("tests/cases")];
    for shared in ["../shared/conformance", "../shared/conformance-ext"] {
        let d = root.join(shared);
        if d.is_dir() {
            dirs.push(d);
        } else {
            println!("skipping {}: not on this machine", d.display());
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for f in files {
            let case = Case::from_json_str(&std::fs::read_to_string(&f).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            out.push((f, case));
        }
    }
    out
}

fn run(g: &Graph, p: &Payload, x: &[Tensor<f64>], seed: Option<&Tensor<f64>>) -> GradResult {
    torchlean_compiled::run_grad::<CpuF64>(g, p, x, seed).unwrap()
}

#[test]
fn every_conformance_case_both_dialects_know_round_trips_through_the_september_dialect_unchanged() {
    let (mut converted, mut refused) = (0, 0);
    for (file, case) in conformance_cases() {
        let here = file.display();
        let september = match Dialect::September2026.write(&case.graph, &case.payload) {
            Ok(w) => w,
            Err(e) => {
                // only kinds without a counterpart are refused, each one named
                let named: Vec<usize> = e.diagnostics().iter().filter_map(|d| d.node).collect();
                // (a foreign kind, or weights holding a NaN or an infinity, which the September
                // dialect's numbers cannot)
                let non_finite = |id: usize| {
                    case.payload
                        .entry(id)
                        .is_some_and(|e| e.tensors.values().any(|t| t.non_finite().is_some()))
                };
                // (or a grouped convolution: the dialect's kernels are dense)
                let grouped = |k: &OpKind| matches!(k, OpKind::Op(Op::Conv2d(s)) if s.groups != 1);
                let foreign: Vec<usize> = case
                    .graph
                    .nodes
                    .iter()
                    .filter(|n| {
                        (n.kind.is_extension()
                            && !matches!(n.kind.name(), "transpose" | "softplus"))
                            || non_finite(n.id)
                            || grouped(&n.kind)
                    })
                    .map(|n| n.id)
                    .collect();
                assert!(
                    !foreign.is_empty(),
                    "{here}: refused without a foreign kind: {e}"
                );
                assert_eq!(
                    named, foreign,
                    "{here}: every such node, and only those: {e}"
                );
                refused += 1;
                continue;
            }
        };
        assert!(
            september.payload.entries.is_empty(),
            "{here}: weights are inline"
        );
        let doc = GraphDoc::from_json(&september.graph).unwrap_or_else(|e| panic!("{here}: {e}"));
        assert_eq!(
            doc.graph.len(),
            case.graph.len(),
            "{here}: one node per node"
        );
        let back = Dialect::August2026.write(&doc.graph, &doc.payload).unwrap();
        let g2 = Graph::from_json(&back.graph).unwrap();
        let p2 = back.payload;
        let a = run(&case.graph, &case.payload, &case.inputs, case.seed.as_ref());
        let b = run(&g2, &p2, &case.inputs, case.seed.as_ref());
        assert!(a.output.bit_eq(&b.output), "{here}: output");
        assert!(a.grad_input().bit_eq(b.grad_input()), "{here}: grad_input");
        assert_eq!(
            a.grad_payload.entries.keys().collect::<Vec<_>>(),
            b.grad_payload.entries.keys().collect::<Vec<_>>(),
            "{here}"
        );
        for (id, e) in &a.grad_payload.entries {
            for (name, t) in &e.tensors {
                let u = b
                    .grad_payload
                    .entry(*id)
                    .and_then(|e| e.tensor(name))
                    .unwrap();
                assert!(t.bit_eq(u), "{here}: grad_payload.{id}.{name}");
            }
        }
        converted += 1;
    }
    println!(
        "{converted} cases round-tripped through the September dialect, {refused} use kinds it lacks"
    );
    assert!(converted >= 10, "{converted} converted");
    assert!(refused >= 1, "some case uses an extension kind");
}

#[test]
fn the_saved_graph_takes_several_outputs_as_a_dense_seed() {
    // SavedGraph's passes take a cotangent for every position: the outputs' seeds at their
    // positions, zeros elsewhere, give the tape sweep's gradients
    let text = std::fs::read_to_string(fixture_dir().join("two_outputs.json")).unwrap();
    let doc = GraphDoc::from_json_str(&text).unwrap();
    let x = Tensor::from_fn([3, 2], |i| i[0] as f64 * 0.5 - i[1] as f64 * 0.25).unwrap();
    let seeds = [
        Tensor::scalar(0.75),
        Tensor::from_fn([3, 2], |i| 1.0 + (i[0] + i[1]) as f64).unwrap(),
    ];
    let exec = exec_graph_of_ir(&doc.graph, &doc.payload).unwrap();
    let inputs: Vec<Tensor<f64>> = exec.inputs(&x, &doc.payload).unwrap();
    let saved = torchlean_compiled::SavedGraph::of_graph(&exec.graph, inputs).unwrap();
    let mut dense: Vec<Tensor<f64>> = saved
        .values()
        .iter()
        .map(|v| Tensor::zeros(v.shape().clone()).unwrap())
        .collect();
    for (&(pos, _), s) in exec.outputs().iter().zip(&seeds) {
        dense[pos] = dense[pos].add(s).unwrap();
    }
    let by_saved = saved.backprop_inputs_dense(dense).unwrap();
    let by_tape = grad(&doc, &x, &seeds);
    close("grad_input", &by_saved[0], by_tape.grad_input());
}

#[test]
fn the_committed_fixtures_are_what_make_fixtures_py_writes() {
    let Some(python) = std::env::var_os("TORCHLEAN_PYTHON") else {
        println!("skipping: TORCHLEAN_PYTHON is not set (a Python with PyTorch regenerates the fixtures)");
        return;
    };
    let has_torch = std::process::Command::new(&python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_torch {
        println!("skipping: {} cannot import torch", python.to_string_lossy());
        return;
    }
    let out = std::env::temp_dir().join(format!(
        "torchlean-september-fixtures-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&out).unwrap();
    let run = std::process::Command::new(&python)
        .arg(fixture_dir().join("make_fixtures.py"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for name in FIXTURES {
        for suffix in [".json", ".expect.json"] {
            let file = format!("{name}{suffix}");
            let made = std::fs::read(out.join(&file)).unwrap();
            let committed = std::fs::read(fixture_dir().join(&file)).unwrap();
            assert!(made == committed, "{file} is stale: rerun make_fixtures.py");
        }
    }
    std::fs::remove_dir_all(&out).unwrap();
}
