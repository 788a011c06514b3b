//! Scale: a 1,000,000-node chain through every command (no recursion anywhere, so no stack
//! overflow), in memory proportional to the graph, and `concat` linear in its parents.
//!
//! The chain runs the test-profile binary end to end. The memory bound is measured in a child
//! process (this test binary run again on one test) that does what `torchlean grad` does —
//! read, parse, lower, drop the IR, compile, sweep — and reports its own peak resident set
//! (`VmHWM`); the parent asserts on it, so other tests running in parallel cannot inflate it.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::fmt::Write as _;
use std::process::Command;
use torchlean_compiled::{exec_graph_of_ir, lower_text, run_grad, run_grad_lowered};
use torchlean_ir::{check_shapes, denote, GraphFile, Payload};
use torchlean_spec::Tensor;

const CHAIN: usize = 1_000_000;
const X: [f64; 4] = [0.7, -0.2, 0.3, 1.5];

/// `input [4]` followed by `n` `tanh` nodes, each reading the one before.
fn chain_json(n: usize) -> String {
    let mut s = String::with_capacity(60 * n + 200);
    let _ = write!(
        s,
        r#"{{"format":"torchlean.ir.v1","input_id":0,"output_id":{n},"nodes":[{{"id":0,"kind":"input","parents":[],"shape":[4]}}"#
    );
    for i in 1..=n {
        let _ = write!(
            s,
            r#",{{"id":{i},"kind":"tanh","parents":[{}],"shape":[4]}}"#,
            i - 1
        );
    }
    s.push_str("]}");
    s
}

/// `input [1]`, `n` distinct `tanh` nodes of it, and one `concat` of all of them.
fn concat_json(n: usize) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"{{"format":"torchlean.ir.v1","input_id":0,"output_id":{},"nodes":[{{"id":0,"kind":"input","parents":[],"shape":[1]}}"#,
        n + 1
    );
    for i in 1..=n {
        let _ = write!(
            s,
            r#",{{"id":{i},"kind":"tanh","parents":[0],"shape":[1]}}"#
        );
    }
    let parents: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
    let _ = write!(
        s,
        r#",{{"id":{},"kind":"concat","parents":[{}],"shape":[{n}],"axis":0}}]}}"#,
        n + 1,
        parents.join(",")
    );
    s
}

fn input_json() -> String {
    serde_json::json!({"shape": [4], "data": X}).to_string()
}

/// The chain's output and input gradient, computed here in `f64`: `y_k = tanh(y_{k-1})`, and
/// the gradient of `sum(y_n)` is `∏_k (1 − y_k²)` per element.
fn chain_expected(n: usize) -> ([f64; 4], [f64; 4]) {
    let (mut y, mut g) = (X, [1.0; 4]);
    for _ in 0..n {
        for e in 0..4 {
            y[e] = y[e].tanh();
            g[e] *= 1.0 - y[e] * y[e];
        }
    }
    (y, g)
}

#[track_caller]
fn assert_close(got: &Value, want: &[f64; 4], what: &str) {
    let got: Vec<f64> = got["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(got.len(), 4, "{what}: {got:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-9 * w.abs(),
            "{what}: got {got:?}, want {want:?}"
        );
    }
}

fn torchlean(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_torchlean"))
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "torchlean {args:?}: {err}");
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn a_million_node_chain_checks_lowers_evaluates_and_backpropagates_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("chain.json");
    let input = dir.path().join("x.json");
    std::fs::write(&graph, chain_json(CHAIN)).unwrap();
    std::fs::write(&input, input_json()).unwrap();
    let (g, x) = (graph.to_str().unwrap(), input.to_str().unwrap());
    let (want_y, want_g) = chain_expected(CHAIN);

    assert!(torchlean(&["check", g]).contains(&format!("ok ({} nodes", CHAIN + 1)));
    let lowered = torchlean(&["lower", g]);
    assert_eq!(
        lowered.lines().count(),
        CHAIN + 4,
        "header, two titles, input"
    );
    let last = lowered.lines().last().unwrap();
    assert!(
        last.contains(&format!("%{CHAIN} : [4]"))
            && last.contains(&format!("tanh(%{})", CHAIN - 1)),
        "{last}"
    );
    drop(lowered);
    for engine in ["cpu", "reference"] {
        let out: Value =
            serde_json::from_str(&torchlean(&["eval", g, "--input", x, "--engine", engine]))
                .unwrap();
        assert_close(&out, &want_y, &format!("eval --engine {engine}"));
        let r: Value =
            serde_json::from_str(&torchlean(&["grad", g, "--input", x, "--engine", engine]))
                .unwrap();
        assert_close(
            &r["output"],
            &want_y,
            &format!("grad --engine {engine}: output"),
        );
        assert_close(
            &r["grad_input"],
            &want_g,
            &format!("grad --engine {engine}: grad_input"),
        );
    }
}

/// Peak resident set of this process, in bytes (`VmHWM`).
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The bytes of values a `[4]` chain of `n` nodes holds in `f64`.
const VALUE_BYTES: usize = 4 * 8;

/// Bytes per node allowed beyond the values (the scale work's target). Measured: 480 (856 while
/// a tape entry copied what its op saves and shapes were 48 bytes, 1,336 before the streaming
/// reader; the breakdown is in ARCHITECTURE.md, "Memory per node").
const BUDGET_PER_NODE: usize = 512;

const CHILD: &str = "TORCHLEAN_SCALE_CHILD";

#[test]
fn grad_of_a_million_node_chain_needs_under_half_a_kilobyte_per_node_beyond_its_values() {
    if let Ok(path) = std::env::var(CHILD) {
        // the child: `torchlean grad` on the CPU engine in f64, as the CLI runs it
        let before = peak_rss();
        let text = std::fs::read_to_string(&path).unwrap();
        let GraphFile::Graph(g) = GraphFile::from_json_str(&text).unwrap() else {
            panic!("a graph file")
        };
        drop(text);
        let p = Payload::new();
        let exec = exec_graph_of_ir(&g, &p).unwrap();
        drop(g);
        let x = Tensor::new([4], X.to_vec()).unwrap();
        let r = run_grad_lowered::<torchlean_engine_cpu::CpuF64>(exec, &p, &x, None).unwrap();
        assert_eq!(r.grad_input().shape().dims(), &[4]);
        println!("peak-bytes {}", peak_rss() - before);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("chain.json");
    std::fs::write(&graph, chain_json(CHAIN)).unwrap();
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "grad_of_a_million_node_chain_needs_under_half_a_kilobyte_per_node_beyond_its_values",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &graph)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let peak: usize = out
        .lines()
        .find_map(|l| l.split("peak-bytes ").nth(1))
        .unwrap_or_else(|| panic!("no peak in {out}"))
        .trim()
        .parse()
        .unwrap();
    let per_node = peak / CHAIN;
    eprintln!(
        "grad, {CHAIN}-node chain: peak {:.1} MB above the start, {per_node} bytes per node",
        peak as f64 / 1e6
    );
    assert!(
        per_node <= VALUE_BYTES + BUDGET_PER_NODE,
        "{per_node} bytes per node (budget {BUDGET_PER_NODE} beyond {VALUE_BYTES} of values)"
    );
}

/// This thread's CPU time in nanoseconds (`/proc/thread-self/schedstat`; other threads and
/// processes do not count), or wall-clock nanoseconds where that file is missing.
fn cpu_ns(start: std::time::Instant) -> u128 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| start.elapsed().as_nanos())
}

/// Everything the commands do to a graph file, on the reference engine (no thread pool, so the
/// work is all on this thread): parse, check, lower and print, evaluate, backpropagate.
fn every_command(text: &str) -> u128 {
    let start = std::time::Instant::now();
    let t0 = cpu_ns(start);
    let GraphFile::Graph(g) = GraphFile::from_json_str(text).unwrap() else {
        panic!("a graph file")
    };
    assert!(check_shapes(&g).is_empty());
    let p = Payload::new();
    let x = Tensor::new([1], vec![0.5]).unwrap();
    let exec = exec_graph_of_ir(&g, &p).unwrap();
    assert!(!lower_text(&exec).is_empty());
    assert_eq!(denote(&g, &p, &x).unwrap().shape().dims()[0], g.len() - 2);
    let r = run_grad::<Tensor<f64>>(&g, &p, &x, None).unwrap();
    assert_eq!(r.grad_input().shape().dims(), &[1]);
    cpu_ns(start) - t0
}

#[test]
fn every_command_is_linear_in_the_parents_of_a_concat() {
    // 4× the parents must cost about 4× the work; the quadratic `compact_pack` of the past cost
    // 16× (9.4 s at 100,000 parents). The bound of 8× leaves room for cache effects and noise;
    // each size takes its fastest of three runs.
    let n = 20_000;
    let (small, large) = (concat_json(n), concat_json(4 * n));
    let best = |text: &str| (0..3).map(|_| every_command(text)).min().unwrap();
    let (t1, t4) = (best(&small), best(&large));
    let ratio = t4 as f64 / t1 as f64;
    eprintln!(
        "concat: {n} parents {t1} ns, {} parents {t4} ns, ratio {ratio:.2}",
        4 * n
    );
    assert!(ratio < 8.0, "4× the parents took {ratio:.1}× the time");
}

#[test]
fn the_generated_files_are_what_the_tests_say() {
    // guards the generators above: a chain of 3 and a concat of 3 parse and check cleanly
    for (text, nodes) in [(chain_json(3), 4), (concat_json(3), 5)] {
        let GraphFile::Graph(g) = GraphFile::from_json_str(&text).unwrap() else {
            panic!("a graph file")
        };
        assert!(check_shapes(&g).is_empty(), "{text}");
        assert_eq!(g.len(), nodes, "{text}");
    }
}
