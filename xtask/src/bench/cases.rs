//! The benchmark cases.

use super::{measure, Result, Row};
use std::hint::black_box;
use torchlean_compiled::{compile, exec_graph_of_ir, SavedGraph};
use torchlean_ir::{Graph, Node, OpKind, Payload};
use torchlean_nn::{Ops, Recorder, Session, Sweep};
use torchlean_runtime::{record, Kernels, Tape};
use torchlean_spec::{Op, Shape, Tensor, UnaryOp};

/// `(threads, reps) -> rows`.
pub type RunFn = fn(usize, usize) -> Result<Vec<Row>>;

/// A benchmark case: `run(threads, reps)` returns one or more rows. Each case runs in a fresh
/// process whose rayon pool has `threads` threads. A `cuda` case needs a CUDA device: the
/// harness skips it, with a line, when there is none.
pub struct Case {
    pub name: &'static str,
    pub about: &'static str,
    pub run: RunFn,
    pub cuda: bool,
}

pub const CASES: &[Case] = &[
    Case {
        name: "tape_overhead",
        about: "10,000 elementwise ops (×c, +c, tanh) on [16], forward then backward; us_per_op",
        run: tape_overhead_cpu,
        cuda: false,
    },
    Case {
        name: "session_overhead",
        about: "tape_overhead's chain through the eager nn Session, and recording + exporting it to torchlean.ir.v1; us_per_op",
        run: session_overhead,
        cuda: false,
    },
    Case {
        name: "matmul_1024",
        about: "1024² f32 matmul on the CPU engine; gflops",
        run: matmul_1024,
        cuda: false,
    },
    Case {
        name: "matmul_2048",
        about: "2048² f32 matmul on the CPU engine; gflops",
        run: matmul_2048,
        cuda: false,
    },
    Case {
        name: "deep_backward_memory",
        about: "200 × (Linear 512→512, tanh), batch 64, forward + releasing backward; peak_rss_mb",
        run: deep_backward_memory,
        cuda: false,
    },
    Case {
        name: "equiv_throughput",
        about: "random graphs checked per second by the equivalence checker (every claim, reference engines)",
        run: equiv_throughput,
        cuda: false,
    },
    Case {
        name: "resnet18_forward",
        about: "torchvision ResNet-18 (random weights) imported from ONNX, f32 forward at batch 1, 224×224, CPU engine; import_ms",
        run: resnet18_forward,
        cuda: false,
    },
    Case {
        name: "relu_chain",
        about: "IR chain of relu over [4] at 1k/4k/16k nodes: lowering, compile, backward",
        run: relu_chain_all,
        cuda: false,
    },
    Case {
        name: "mlp_train_b64",
        about: "one SGD step of MLP 784-256-256-10 (ReLU, cross-entropy), batch 64, f32; eager and compiled",
        run: super::train::mlp_train_b64,
        cuda: false,
    },
    Case {
        name: "mlp_train_b512",
        about: "mlp_train_b64 at batch 512",
        run: super::train::mlp_train_b512,
        cuda: false,
    },
    Case {
        name: "conv_train",
        about: "one SGD step of conv3x3 1->8, relu, conv3x3 8->16, relu, flatten, linear ->10; batch 32 of 28x28, f32; eager and compiled",
        run: super::train::conv_train,
        cuda: false,
    },
    Case {
        name: "matmul_8192_cuda",
        about: "8192² f32 matmul on the CUDA engine (cuBLAS), TF32 off, and with TF32 allowed as matmul_8192_cuda_tf32; gflops",
        run: matmul_8192_cuda,
        cuda: true,
    },
    Case {
        name: "gpt_train_step",
        about: "one AdamW step of the default GPT (4 layers, 4 heads, 128 wide, block 64, batch 12) on Shakespeare, f32; eager and compiled",
        run: super::train::gpt_train_step,
        cuda: false,
    },
    Case {
        name: "mlp_train_b512_cuda",
        about: "mlp_train_b512 on the CUDA engine; eager and compiled",
        run: super::train::mlp_train_b512_cuda,
        cuda: true,
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
        id = record(&mut tape, chain_op(i), &[id], None).map_err(err)?;
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
            kind: OpKind::Op(Op::Unary(UnaryOp::Relu)),
            parents: vec![i - 1],
            shape: shape.clone(),
        });
    }
    Graph::new(0, n, nodes)
}

/// Compile, backward and saved-graph backward of the relu chain on engine `V`.
fn relu_chain_engine<V: Kernels>(
    exec: &torchlean_compiled::ExecGraph,
    n: usize,
    threads: usize,
    reps: usize,
) -> Result<Vec<Row>> {
    let engine = V::ENGINE;
    let x =
        V::from_f64(&Tensor::new([4], vec![0.5, -1.0, 2.0, 0.25]).map_err(err)?).map_err(err)?;
    let compile_stats = measure(1, reps, || {
        let (tape, values) = compile::<V>(&exec.graph, vec![x.clone()]).map_err(err)?;
        black_box(values.len());
        tape.release();
        Ok(())
    })?;
    let (tape, _) = compile::<V>(&exec.graph, vec![x.clone()]).map_err(err)?;
    let seed = V::full(x.shape(), 1.0).map_err(err)?;
    let backward = measure(1, reps, || {
        let g = tape
            .backward_sparse(exec.output, seed.clone(), |i| i == 0)
            .map_err(err)?;
        black_box(g.len());
        g.release();
        Ok(())
    })?;
    let saved = SavedGraph::of_graph(&exec.graph, vec![x.clone()]).map_err(err)?;
    let saved_stats = measure(1, reps, || {
        let s = saved.one_hot(exec.output, seed.clone()).map_err(err)?;
        black_box(saved.backprop_inputs_array(s).map_err(err)?);
        Ok(())
    })?;
    Ok(vec![
        Row::new("relu_chain_compile", engine, threads, compile_stats).with("nodes", n),
        Row::new("relu_chain_backward", engine, threads, backward)
            .with("nodes", n)
            .with("sweep", "backward_sparse"),
        Row::new("relu_chain_saved_backward", engine, threads, saved_stats)
            .with("nodes", n)
            .with("pass", "backprop_inputs_array"),
    ])
}

/// TorchLean's own scaling benchmark: a chain of relu nodes over `[4]` at 1k, 4k and 16k
/// nodes, in f64 (TorchLean's `Float`), on the reference and CPU engines.
fn relu_chain_all(threads: usize, reps: usize) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for n in [1024usize, 4096, 16384] {
        let g = relu_chain_graph(n);
        let payload = Payload::new();
        let lower = measure(1, reps, || {
            black_box(exec_graph_of_ir(&g, &payload).map_err(err)?);
            Ok(())
        })?;
        rows.push(Row::new("relu_chain_lower", "ir", threads, lower).with("nodes", n));
        let exec = exec_graph_of_ir(&g, &payload).map_err(err)?;
        rows.extend(relu_chain_engine::<Tensor<f64>>(&exec, n, threads, reps)?);
        rows.extend(relu_chain_engine::<torchlean_engine_cpu::CpuF64>(
            &exec, n, threads, reps,
        )?);
    }
    Ok(rows)
}

/// The fixed graph set [`equiv_throughput`] checks: the 100 float and 50 exact graphs (with
/// their payloads and inputs) that the default seed generated at `f0c7dab`, before the redesign,
/// written once and committed. The generator's graphs change whenever the kinds or the regimes
/// do, so a set it makes afresh would time the generator's choices, not the checker; these
/// stay. Every kind in them still exists, and graphs keep their wire format.
pub const EQUIV_GRAPHS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench-data/equiv-graphs.json");

/// [`EQUIV_GRAPHS`], read: `{"float": [case], "exact": [case]}`, each case `{"graph", "payload",
/// "inputs": [{"shape", "data"}]}` in the August 2026 graph format.
pub fn fixed_equiv_cases() -> Result<torchlean_equiv::Cases> {
    use serde_json::Value;
    use torchlean_equiv::{Cases, GenCase};
    let text = std::fs::read_to_string(EQUIV_GRAPHS)
        .map_err(|e| format!("cannot read {EQUIV_GRAPHS}: {e}"))?;
    let doc: Value =
        serde_json::from_str(&text).map_err(|e| format!("{EQUIV_GRAPHS}: not JSON: {e}"))?;
    let tensor = |v: &Value| -> Option<Tensor<f64>> {
        let dims = v["shape"]
            .as_array()?
            .iter()
            .map(|d| d.as_u64().map(|d| d as usize));
        let data = v["data"].as_array()?.iter().map(Value::as_f64);
        let dims: Option<Vec<usize>> = dims.collect();
        let data: Option<Vec<f64>> = data.collect();
        Tensor::new(Shape::new(dims?), data?).ok()
    };
    let family = |key: &str| -> Result<Vec<GenCase>> {
        let cases = doc[key]
            .as_array()
            .ok_or_else(|| format!("{EQUIV_GRAPHS}: no `{key}` list"))?;
        cases
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let at = |what: &str| format!("{EQUIV_GRAPHS}: {key} case {i}: {what}");
                let graph = Graph::from_json(&c["graph"]).map_err(|e| at(&e.to_string()))?;
                let payload = Payload::from_json(&c["payload"]).map_err(|e| at(&e.to_string()))?;
                let inputs = c["inputs"]
                    .as_array()
                    .and_then(|xs| xs.iter().map(tensor).collect::<Option<Vec<_>>>())
                    .ok_or_else(|| at("its inputs are not tensors"))?;
                Ok(GenCase {
                    graph,
                    payload,
                    inputs,
                })
            })
            .collect()
    };
    Ok(Cases {
        float: family("float")?,
        exact: family("exact")?,
    })
}

/// The checker on a fixed set of graphs ([`EQUIV_GRAPHS`]), read outside the timing: what is
/// timed is every claim on every graph (`run_observations`) and their rows. `graph_set` (a hash
/// of the graphs, their payloads and inputs) says that two runs checked the same ones.
fn equiv_throughput(threads: usize, reps: usize) -> Result<Vec<Row>> {
    use torchlean_equiv::{aggregate_rows, run_observations, CheckConfig};
    use torchlean_equiv::{EngineOf, EngineUnderTest};
    let f64e = EngineOf::<Tensor<f64>>::bitwise();
    let f32e = EngineOf::<Tensor<f32>>::with_tolerance(1e-5);
    let engines: [&dyn EngineUnderTest; 2] = [&f64e, &f32e];
    let cfg = CheckConfig {
        cases: 100,
        exact_cases: 50,
        ..CheckConfig::default()
    };
    let cases = fixed_equiv_cases()?;
    let graphs = cases.len();
    let nodes: usize = cases
        .float
        .iter()
        .chain(&cases.exact)
        .map(|c| c.graph.nodes.len())
        .sum();
    let set = graph_set(&cases);
    let stats = measure(1, reps, || {
        let obs = run_observations(&cfg, &cases, &engines);
        let failed: Vec<String> = aggregate_rows(&obs)
            .iter()
            .filter(|r| r.failed > 0)
            .map(|r| format!("{} [{}] {}", r.claim.name(), r.engine, r.kind))
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the equivalence check failed: {}",
                failed.join(", ")
            ))
        }
    })?;
    Ok(vec![Row::new(
        "equiv_throughput",
        "reference",
        threads,
        stats,
    )
    .with("graphs", graphs)
    .with("nodes", nodes)
    .with("graph_set", format!("{set:016x}"))
    .with(
        "graphs_per_s",
        (graphs as f64 / (stats.median_ms / 1e3) * 10.0).round() / 10.0,
    )])
}

/// A fingerprint of a graph set: its graphs, payloads and inputs, as written.
pub fn graph_set(cases: &torchlean_equiv::Cases) -> u64 {
    let mut set = Fnv::default();
    for c in cases.float.iter().chain(&cases.exact) {
        set.write(c.graph.to_json().to_string().as_bytes());
        set.write(c.payload.to_json().to_string().as_bytes());
        for v in c.inputs.iter().flat_map(|x| x.data()) {
            set.write(&v.to_bits().to_le_bytes());
        }
    }
    set.0
}

/// FNV-1a, 64 bits: a fingerprint of the bytes written, the same on every machine.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

fn tape_overhead_cpu(threads: usize, reps: usize) -> Result<Vec<Row>> {
    Ok(vec![
        tape_overhead::<torchlean_engine_cpu::CpuTensor<f32>>("cpu-f32", threads, reps)?,
        tape_overhead::<Tensor<f32>>("reference-f32", threads, reps)?,
    ])
}

/// The op of step `i` of the tape_overhead chain.
fn chain_op(i: usize) -> Op {
    match i % 3 {
        0 => Op::Scale { c: 0.999 },
        1 => Op::AddScalar { c: 0.001 },
        _ => Op::Unary(UnaryOp::Tanh),
    }
}

/// tape_overhead's chain through the eager `Session` (the user-facing API), on the CPU engine,
/// its backward seeded with `ones` (PyTorch's twin: `y.backward(torch.ones(16))`).
fn session_overhead_once(
    s: &mut Session<torchlean_engine_cpu::CpuF32>,
    x0: &Tensor<f64>,
    ones: &Tensor<f64>,
) -> Result<()> {
    s.reset();
    let x = s.input("x", x0, true).map_err(err)?;
    let mut v = x.clone();
    for i in 0..TAPE_OPS {
        v = s.apply(chain_op(i), &[&v]).map_err(err)?;
    }
    s.backward_with_seed(&v, ones, Sweep::Releasing)
        .map_err(err)?;
    black_box(s.grad(&x).map_err(err)?.is_some());
    Ok(())
}

fn session_overhead(threads: usize, reps: usize) -> Result<Vec<Row>> {
    let x0 = Tensor::from_fn([16], |i| 0.1 * i[0] as f64).map_err(err)?;
    let ones = Tensor::full(x0.shape().clone(), 1.0).map_err(err)?;
    let mut s = Session::new();
    let stats = measure(2, reps, || session_overhead_once(&mut s, &x0, &ones))?;
    let per_op = |ms: f64| (ms * 1e3 / TAPE_OPS as f64 * 1e4).round() / 1e4;
    let eager = Row::new("session_overhead", "cpu-f32", threads, stats)
        .with("ops", TAPE_OPS)
        .with("us_per_op", per_op(stats.median_ms));
    let record = measure(2, reps, || {
        let mut r = Recorder::new();
        let x = r.input("x", &x0, false).map_err(err)?;
        let mut v = x;
        for i in 0..TAPE_OPS {
            v = r.apply(chain_op(i), &[&v]).map_err(err)?;
        }
        let ir = r.finish(&v).map_err(err)?.to_ir().map_err(err)?;
        black_box(ir.graph.to_json());
        Ok(())
    })?;
    let export = Row::new("record_and_export", "ir", threads, record)
        .with("ops", TAPE_OPS)
        .with("us_per_op", per_op(record.median_ms));
    Ok(vec![eager, export])
}

fn matmul_case(n: usize, threads: usize, reps: usize) -> Result<Vec<Row>> {
    type V = torchlean_engine_cpu::CpuTensor<f32>;
    let a = V::from_f64(
        &Tensor::from_fn([n, n], |i| ((i[0] * 7 + i[1] * 3) % 11) as f64 / 11.0 - 0.5)
            .map_err(err)?,
    )
    .map_err(err)?;
    let b = V::from_f64(
        &Tensor::from_fn([n, n], |i| ((i[0] * 5 + i[1]) % 13) as f64 / 13.0 - 0.5).map_err(err)?,
    )
    .map_err(err)?;
    let stats = measure(2, reps, || {
        let c = torchlean_runtime::forward::<V>(&Op::MatMul, &[&a, &b]).map_err(err)?;
        black_box(c.shape().size());
        torchlean_runtime::GradValue::drop(c);
        Ok(())
    })?;
    let gflops = 2.0 * (n as f64).powi(3) / (stats.median_ms * 1e6);
    Ok(vec![Row::new(
        &format!("matmul_{n}"),
        "cpu-f32",
        threads,
        stats,
    )
    .with("gflops", (gflops * 10.0).round() / 10.0)])
}

/// `n`² f32 matmul on the CUDA engine, TF32 off then allowed (rows `matmul_N_cuda` and
/// `matmul_N_cuda_tf32`). Each timed run ends by downloading one element of the product, which
/// waits for the device (the PyTorch twin calls `torch.cuda.synchronize()`).
fn matmul_cuda(n: usize, threads: usize, reps: usize) -> Result<Vec<Row>> {
    use torchlean_engine_cuda::{set_tf32, CudaF32, Device, Gpu};
    let fill = |f: fn(usize, usize) -> f32| -> Result<CudaF32> {
        let data: Vec<f32> = (0..n * n).map(|k| f(k / n, k % n)).collect();
        CudaF32::from_host([n, n], &data).map_err(err)
    };
    let a = fill(|i, j| ((i * 7 + j * 3) % 11) as f32 / 11.0 - 0.5)?;
    let b = fill(|i, j| ((i * 5 + j) % 13) as f32 / 13.0 - 0.5)?;
    let mut rows = Vec::new();
    for tf32 in [false, true] {
        set_tf32(tf32);
        let stats = measure(2, reps, || {
            let c = torchlean_runtime::forward::<CudaF32>(&Op::MatMul, &[&a, &b]).map_err(err)?;
            black_box(Gpu::download(c.mem(), 1).map_err(err)?);
            torchlean_runtime::GradValue::drop(c);
            Ok(())
        })?;
        let gflops = 2.0 * (n as f64).powi(3) / (stats.median_ms * 1e6);
        let case = if tf32 {
            format!("matmul_{n}_cuda_tf32")
        } else {
            format!("matmul_{n}_cuda")
        };
        rows.push(
            Row::new(&case, "cuda-f32", threads, stats)
                .with("gflops", (gflops * 10.0).round() / 10.0)
                .with("tf32", tf32),
        );
    }
    set_tf32(false);
    Ok(rows)
}

fn matmul_8192_cuda(threads: usize, reps: usize) -> Result<Vec<Row>> {
    matmul_cuda(8192, threads, reps)
}

fn matmul_1024(threads: usize, reps: usize) -> Result<Vec<Row>> {
    matmul_case(1024, threads, reps)
}

fn matmul_2048(threads: usize, reps: usize) -> Result<Vec<Row>> {
    matmul_case(2048, threads, reps)
}

/// Peak resident set size of this process, in MiB (Linux `VmHWM`).
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kb / 1024.0 * 10.0).round() / 10.0)
}

const DEEP_LAYERS: usize = 200;
const DEEP_WIDTH: usize = 512;
const DEEP_BATCH: usize = 64;

/// One forward + backward through 200 × (Linear 512→512, tanh), batch 64, with the releasing
/// sweep retaining only the parameters; returns the peak live gradient elements.
fn deep_step<V: Kernels>(params: &[(V, V)], x: &V) -> Result<usize> {
    let mut tape = Tape::with_capacity(3 * DEEP_LAYERS + 2);
    let mut h = tape.leaf(x.clone(), false, None);
    let mut param_ids = Vec::with_capacity(2 * DEEP_LAYERS);
    for (w, b) in params {
        let wi = tape.leaf(w.clone(), true, None);
        let bi = tape.leaf(b.clone(), true, None);
        param_ids.push(wi);
        param_ids.push(bi);
        let y = record(&mut tape, Op::Linear, &[h, wi, bi], None).map_err(err)?;
        h = record(&mut tape, Op::Unary(UnaryOp::Tanh), &[y], None).map_err(err)?;
    }
    let loss = record(&mut tape, Op::Sum, &[h], None).map_err(err)?;
    let seed = V::full(&Shape::scalar(), 1.0).map_err(err)?;
    let is_param = |id: usize| param_ids.binary_search(&id).is_ok();
    let grads = tape.backward_sparse(loss, seed, is_param).map_err(err)?;
    let peak = grads.peak_live_elements();
    grads.release();
    tape.release();
    Ok(peak)
}

/// Runs in its own process (see `spawn_case`), so the peak RSS is this case's alone. Subnormal
/// numbers are flushed to zero, here and in the PyTorch twin: the gradient of this chain
/// shrinks through the subnormal range on its way back, where Intel cores take a microcode
/// assist per operation (3.7 s here and 3.9 s for PyTorch on the project's Intel machine,
/// against 0.14 s in a run on AMD), and the case is meant to time the products and the memory.
fn deep_backward_memory(threads: usize, reps: usize) -> Result<Vec<Row>> {
    type V = torchlean_engine_cpu::CpuTensor<f32>;
    let flushed = torchlean_engine_cpu::set_flush_denormal(true);
    let bound = 1.0 / (DEEP_WIDTH as f64).sqrt();
    let mut s = 1u64;
    let mut uniform = |shape: &[usize]| -> Result<V> {
        let t = Tensor::from_fn(Shape::from(shape), |_| {
            s = torchlean_spec::ops::splitmix64(s);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * bound
        })
        .map_err(err)?;
        V::from_f64(&t).map_err(err)
    };
    let params: Vec<(V, V)> = (0..DEEP_LAYERS)
        .map(|_| Ok((uniform(&[DEEP_WIDTH, DEEP_WIDTH])?, uniform(&[DEEP_WIDTH])?)))
        .collect::<Result<_>>()?;
    let x = uniform(&[DEEP_BATCH, DEEP_WIDTH])?;
    let mut peak = 0;
    let stats = measure(1, reps, || {
        peak = deep_step(&params, &x)?;
        Ok(())
    })?;
    let rss = peak_rss_mb()
        .map(serde_json::Value::from)
        .unwrap_or(serde_json::Value::Null);
    Ok(vec![Row::new(
        "deep_backward_memory",
        "cpu-f32",
        threads,
        stats,
    )
    .with("peak_rss_mb", rss)
    .with("flush_denormal", flushed)
    .with(
        "peak_live_grad_mb",
        ((peak * 4) as f64 / 1048576.0 * 10.0).round() / 10.0,
    )])
}

/// Where `bench/pytorch/export_resnet18.py` writes the model both sides run.
const RESNET18: &str = "target/bench/resnet18.onnx";

/// ResNet-18's forward as a user runs an imported model: `import_onnx_bound` (timed once, as
/// `import_ms`), lowering, the payload converted to the engine once, then the lowered graph's
/// forward per repetition (only live values kept). The ONNX file is exported with
/// `$TORCHLEAN_PYTHON` (torch, torchvision, onnx) when absent, or built with onnx and numpy
/// alone (`build_resnet18.py`: the same network, other random weights); without either the
/// case is skipped with a line.
fn resnet18_forward(threads: usize, reps: usize) -> Result<Vec<Row>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join(RESNET18);
    if !path.exists() {
        let python = std::env::var("TORCHLEAN_PYTHON").unwrap_or_else(|_| "python3".into());
        // torchvision's export, else the same network built with onnx alone
        let made = ["export_resnet18.py", "build_resnet18.py"]
            .iter()
            .any(|script| {
                std::process::Command::new(&python)
                    .arg(root.join("bench/pytorch").join(script))
                    .arg(&path)
                    .status()
                    .is_ok_and(|s| s.success())
            });
        if !made {
            eprintln!(
                "resnet18_forward: skipped: no {RESNET18}, and {python} could not write it (set TORCHLEAN_PYTHON to a Python with onnx and numpy, or torch and torchvision)"
            );
            return Ok(vec![]);
        }
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = std::time::Instant::now();
    let imported = torchlean_onnx::import_onnx_bound(&bytes, &[]).map_err(err)?;
    let import_ms = t.elapsed().as_secs_f64() * 1e3;
    let exec = exec_graph_of_ir(&imported.graph, &imported.payload).map_err(err)?;
    let x = Tensor::from_fn([1, 3, 224, 224], |i| {
        ((i[1] * 224 + i[2]) * 224 + i[3]) as f64 % 7.0 / 7.0 - 0.5
    })
    .map_err(err)?;
    type V = torchlean_engine_cpu::CpuF32;
    let inputs: Vec<V> = exec
        .inputs(std::slice::from_ref(&x), &imported.payload)
        .map_err(err)?;
    let stats = measure(2, reps, || {
        let y = exec
            .graph
            .eval_output(inputs.clone(), exec.output)
            .map_err(err)?;
        black_box(y.shape().size());
        Ok(())
    })?;
    Ok(vec![Row::new(
        "resnet18_forward",
        V::ENGINE,
        threads,
        stats,
    )
    .with("import_ms", (import_ms * 10.0).round() / 10.0)
    .with("batch", 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed graph set is what was committed (its fingerprint, pinned), 100 float and 50
    /// exact graphs that are well-formed today: the bench measures the same work at every
    /// commit.
    #[test]
    fn the_fixed_graph_set_loads_and_is_the_committed_one() {
        let cases = fixed_equiv_cases().unwrap();
        assert_eq!((cases.float.len(), cases.exact.len()), (100, 50));
        for c in cases.float.iter().chain(&cases.exact) {
            let problems: Vec<_> = torchlean_ir::check_shapes(&c.graph)
                .into_iter()
                .chain(torchlean_ir::check_payload(&c.graph, &c.payload))
                .filter(torchlean_ir::Diagnostic::is_error)
                .collect();
            assert!(problems.is_empty(), "{problems:?}");
            assert_eq!(c.inputs.len(), c.graph.input_count());
        }
        assert_eq!(format!("{:016x}", graph_set(&cases)), "94b98416cf8b0193");
    }

    /// One pass of each overhead chain, forward and backward (the cases' bodies, without
    /// their timing loops): `session_overhead` stopped working, unnoticed, when `backward`
    /// began refusing a non-scalar output.
    #[test]
    fn the_overhead_chains_run_forward_and_backward() {
        let x0 = Tensor::from_fn([16], |i| 0.1 * i[0] as f64).unwrap();
        let ones = Tensor::full(x0.shape().clone(), 1.0).unwrap();
        let mut s = Session::new();
        session_overhead_once(&mut s, &x0, &ones).unwrap();
        let x = torchlean_engine_cpu::CpuF32::from_f64(&x0).unwrap();
        tape_overhead_once(&x).unwrap();
    }
}
