//! The benchmark cases.

use super::{measure, Result, Row};
use std::hint::black_box;
use torchlean_compiled::{compile, exec_graph_of_ir, SavedGraph};
use torchlean_ir::{Graph, Node, OpKind, Payload};
use torchlean_runtime::{record, Kernels, Tape};
use torchlean_spec::{Op, Shape, Tensor, UnaryOp};

/// `(threads, reps) -> rows`.
pub type RunFn = fn(usize, usize) -> Result<Vec<Row>>;
/// `threads -> rows`, in a fresh process.
pub type ChildFn = fn(usize) -> Result<Vec<Row>>;

/// A benchmark case: `run(threads, reps)` returns one or more rows; `child`, when present,
/// runs the case in a fresh process (peak-memory cases).
pub struct Case {
    pub name: &'static str,
    pub about: &'static str,
    pub run: RunFn,
    pub child: Option<ChildFn>,
}

pub const CASES: &[Case] = &[
    Case {
        name: "tape_overhead",
        about: "10,000 elementwise ops (×c, +c, tanh) on [16], forward then backward; us_per_op",
        run: tape_overhead_all,
        child: None,
    },
    Case {
        name: "equiv_throughput",
        about: "random graphs checked per second by the equivalence checker (every claim, reference engines)",
        run: equiv_throughput,
        child: None,
    },
    Case {
        name: "relu_chain",
        about: "IR chain of relu over [4] at 1k/4k/16k nodes: lowering, compile, backward",
        run: relu_chain_all,
        child: None,
    },
];

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

const TAPE_OPS: usize = 10_000;

/// Builds the 10,000-op chain on a fresh tape and sweeps it back to the leaf.
fn tape_overhead_once<V: Kernels>(x0: &V) -> Result<()> {
    let mut tape = Tape::with_capacity(TAPE_OPS + 1);
    let mut id = tape.leaf(x0.clone(), true, None);
    for i in 0..TAPE_OPS {
        let op = match i % 3 {
            0 => Op::Scale { c: 0.999 },
            1 => Op::AddScalar { c: 0.001 },
            _ => Op::Unary(UnaryOp::Tanh),
        };
        id = record(&mut tape, op, &[id], None).map_err(err)?;
    }
    let seed = V::full(x0.shape(), 1.0).map_err(err)?;
    let grads = tape.backward_sparse(id, seed, |i| i == 0).map_err(err)?;
    black_box(grads.get(0).is_some());
    grads.release();
    tape.release();
    Ok(())
}

pub fn tape_overhead<V: Kernels>(engine: &str, threads: usize, reps: usize) -> Result<Row> {
    let x0 =
        V::from_f64(&Tensor::from_fn([16], |i| 0.1 * i[0] as f64).map_err(err)?).map_err(err)?;
    let stats = measure(2, reps, || tape_overhead_once(&x0))?;
    Ok(Row::new("tape_overhead", engine, threads, stats)
        .with("ops", TAPE_OPS)
        .with(
            "us_per_op",
            (stats.median_ms * 1e3 / TAPE_OPS as f64 * 1e4).round() / 1e4,
        ))
}

fn tape_overhead_all(threads: usize, reps: usize) -> Result<Vec<Row>> {
    Ok(vec![tape_overhead::<Tensor<f32>>(
        "reference-f32",
        threads,
        reps,
    )?])
}

/// An IR chain `input → relu → … → relu` of `n` relu nodes over `[4]`.
pub fn relu_chain_graph(n: usize) -> Graph {
    let shape = Shape::from([4]);
    let mut nodes = vec![Node {
        id: 0,
        kind: OpKind::Input,
        parents: vec![],
        shape: shape.clone(),
    }];
    for i in 1..=n {
        nodes.push(Node {
            id: i,
            kind: OpKind::Unary(UnaryOp::Relu),
            parents: vec![i - 1],
            shape: shape.clone(),
        });
    }
    Graph {
        input_id: 0,
        output_id: n,
        nodes,
    }
}

fn relu_chain_all(threads: usize, reps: usize) -> Result<Vec<Row>> {
    type V = Tensor<f64>;
    let mut rows = Vec::new();
    for n in [1024usize, 4096, 16384] {
        let g = relu_chain_graph(n);
        let payload = Payload::new();
        let x = Tensor::new([4], vec![0.5, -1.0, 2.0, 0.25]).map_err(err)?;
        let lower = measure(1, reps, || {
            black_box(exec_graph_of_ir(&g, &payload).map_err(err)?);
            Ok(())
        })?;
        let exec = exec_graph_of_ir(&g, &payload).map_err(err)?;
        let compile_stats = measure(1, reps, || {
            let (tape, values) = compile::<V>(&exec.graph, vec![x.clone()]).map_err(err)?;
            black_box(values.len());
            tape.release();
            Ok(())
        })?;
        let (tape, _) = compile::<V>(&exec.graph, vec![x.clone()]).map_err(err)?;
        let seed = Tensor::new([4], vec![1.0; 4]).map_err(err)?;
        let backward = measure(1, reps, || {
            let g = tape
                .backward_sparse(exec.output, seed.clone(), |i| i == 0)
                .map_err(err)?;
            black_box(g.len());
            Ok(())
        })?;
        let saved = SavedGraph::of_graph(&exec.graph, vec![x.clone()]).map_err(err)?;
        let saved_stats = measure(1, reps, || {
            let s = saved.one_hot(exec.output, seed.clone()).map_err(err)?;
            black_box(saved.backprop_inputs_array(s).map_err(err)?);
            Ok(())
        })?;
        rows.push(Row::new("relu_chain_lower", "reference-f64", threads, lower).with("nodes", n));
        rows.push(
            Row::new(
                "relu_chain_compile",
                "reference-f64",
                threads,
                compile_stats,
            )
            .with("nodes", n),
        );
        rows.push(
            Row::new("relu_chain_backward", "reference-f64", threads, backward)
                .with("nodes", n)
                .with("sweep", "backward_sparse"),
        );
        rows.push(
            Row::new(
                "relu_chain_saved_backward",
                "reference-f64",
                threads,
                saved_stats,
            )
            .with("nodes", n)
            .with("pass", "backprop_inputs_array"),
        );
    }
    Ok(rows)
}

fn equiv_throughput(threads: usize, reps: usize) -> Result<Vec<Row>> {
    use torchlean_equiv::{check, CheckConfig, EngineOf};
    let f64e = EngineOf::<Tensor<f64>>::bitwise();
    let f32e = EngineOf::<Tensor<f32>>::with_tolerance(1e-5);
    let cfg = CheckConfig {
        cases: 100,
        exact_cases: 50,
        ..CheckConfig::default()
    };
    let graphs = cfg.cases + cfg.exact_cases;
    let stats = measure(1, reps, || {
        let report = check(&cfg, &[&f64e, &f32e]);
        if report.ok() {
            Ok(())
        } else {
            Err(format!("the equivalence check failed:\n{}", report.text()))
        }
    })?;
    Ok(vec![Row::new(
        "equiv_throughput",
        "reference",
        threads,
        stats,
    )
    .with("graphs", graphs)
    .with(
        "graphs_per_s",
        (graphs as f64 / (stats.median_ms / 1e3) * 10.0).round() / 10.0,
    )])
}
