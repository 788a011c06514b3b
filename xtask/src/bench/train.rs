//! The training-step cases (SPEC 5): one SGD step — forward, cross-entropy (mean), backward,
//! PyTorch's plain SGD (`torchlean_train::Optimizer`) — of an MLP (784-256-256-10, ReLU) and of a small CNN (conv 3×3 1→8, relu, conv
//! 3×3 8→16, relu, flatten, linear → 10) on the CPU engine in f32, through the eager `Session`
//! and through the compiled path (`Recorded::step`); `mlp_train_b512_cuda` is the same MLP step
//! on the CUDA engine (a step ends with the loss on the host, which waits for the device).
//! `bench/pytorch/bench.py` runs the same steps in PyTorch (CPU and CUDA) and JAX.

use super::{measure, Result, Row};
use std::collections::BTreeMap;
use std::hint::black_box;
use torchlean_engine_cpu::CpuF32;
use torchlean_nn::layers::{relu, Conv2d, Flatten, Linear};
use torchlean_nn::{seq, Layer, LeafKind, Mode, Ops, Recorded, Recorder, Session, Sweep};
use torchlean_runtime::Kernels;
use torchlean_spec::{Reduction, Shape, Tensor};
use torchlean_train::{OptimConfig, Optimizer, Param, TrainValue};

/// The learning rate of every case (the PyTorch and JAX twins use the same).
const LR: f64 = 0.01;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// PyTorch's plain SGD (`torch.optim.SGD(lr=0.01)`), `torchlean_train`'s implementation.
fn sgd() -> Result<Optimizer<f32>> {
    Optimizer::new(OptimConfig::sgd(LR)).map_err(err)
}

/// One optimizer step over `(name, parameter, gradient)` triples (the buffers are unique
/// after the session's reset or the compiled step's release, so on a host engine the update
/// copies nothing; a device engine downloads and uploads, `TrainValue::update_all`).
fn update<'a, V: TrainValue<Elem = f32> + 'a>(
    opt: &mut Optimizer<f32>,
    params: impl Iterator<Item = (&'a str, &'a mut V, Option<&'a V>)>,
) -> Result<()> {
    let (mut names, mut grads, mut values) = (Vec::new(), Vec::new(), Vec::new());
    for (name, p, g) in params {
        if let Some(g) = g {
            names.push(name);
            grads.push(g.read().map_err(err)?);
            values.push(p);
        }
    }
    V::update_all(&mut values, |slices| {
        let mut batch: Vec<Param<'_, f32>> = names
            .iter()
            .zip(slices.iter_mut())
            .zip(&grads)
            .map(|((name, value), grad)| Param { name, value, grad })
            .collect();
        opt.step(LR, &mut batch)
    })
    .map_err(err)
}

/// A deterministic batch: `x` in `[0, 1)` of `shape` (batch first) and labels in `0..10`.
fn batch<V: Kernels>(shape: &[usize]) -> Result<(V, Vec<usize>)> {
    let n: usize = shape.iter().product();
    let mut s = 7u64;
    let data: Vec<f64> = (0..n)
        .map(|_| {
            s = torchlean_spec::ops::splitmix64(s);
            f64::from((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect();
    let x = V::from_f64(&Tensor::new(Shape::from(shape), data).map_err(err)?).map_err(err)?;
    let labels = (0..shape[0]).map(|i| (i * 7 + 3) % 10).collect();
    Ok((x, labels))
}

/// One eager step: forward on the session, cross-entropy, releasing backward, then (after the
/// reset that releases the tape) the in-place update. Returns the loss.
fn eager_step<V: TrainValue<Elem = f32>, M: Layer>(
    s: &mut Session<V>,
    opt: &mut Optimizer<f32>,
    model: &M,
    x: &V,
    labels: &[usize],
) -> Result<f32> {
    s.reset();
    let xv = s.input_value("x", x.clone(), false).map_err(err)?;
    let logits = model.forward(s, &xv, Mode::Train).map_err(err)?;
    let loss = s
        .cross_entropy(&logits, labels, Reduction::Mean)
        .map_err(err)?;
    let l = s.value_f64(&loss).map_err(err)?.data()[0] as f32;
    s.backward(&loss, Sweep::Releasing).map_err(err)?;
    let grads: BTreeMap<String, V> = s.take_param_grads();
    s.reset();
    update(opt, s.params_mut().map(|(n, p)| (n, p, grads.get(n))))?;
    Ok(l)
}

/// The compiled program of a model's training step and the current value of each of its
/// leaves (parameters, the batch, the labels constant).
struct CompiledStep<V> {
    rec: Recorded,
    leaf_values: Vec<V>,
    x_leaf: usize,
}

impl<V: TrainValue<Elem = f32>> CompiledStep<V> {
    fn new<M: Layer>(model: &M, x: &V, labels: &[usize]) -> Result<Self> {
        let mut r = Recorder::new();
        let xv = r
            .input("x", &x.to_f64().map_err(err)?, false)
            .map_err(err)?;
        let logits = model.forward(&mut r, &xv, Mode::Train).map_err(err)?;
        let loss = r
            .cross_entropy(&logits, labels, Reduction::Mean)
            .map_err(err)?;
        let rec = r.finish(&loss).map_err(err)?;
        let leaf_values = rec.inputs::<V>().map_err(err)?;
        let x_leaf = rec
            .leaves
            .iter()
            .position(|l| matches!(l.kind, LeafKind::Input { .. }))
            .ok_or("the program has no input")?;
        Ok(CompiledStep {
            rec,
            leaf_values,
            x_leaf,
        })
    }

    /// One compiled step on batch `x`: `Recorded::step` keeping the parameters' gradients,
    /// then the in-place update. Returns the loss.
    fn step(&mut self, opt: &mut Optimizer<f32>, x: &V) -> Result<f32> {
        self.leaf_values[self.x_leaf] = x.clone();
        let leaves = &self.rec.leaves;
        let (out, grads) = self
            .rec
            .step::<V>(self.leaf_values.clone(), |i| {
                leaves[i].kind == LeafKind::Param
            })
            .map_err(err)?;
        let named = leaves.iter().zip(self.leaf_values.iter_mut()).zip(&grads);
        update(
            opt,
            named.map(|((l, p), g)| (l.name.as_str(), p, g.as_ref())),
        )?;
        Ok(out.to_f64().map_err(err)?.data()[0] as f32)
    }
}

/// Both backends of one case; `gflop` is the matrix-product work of one step.
fn train_rows<V: TrainValue<Elem = f32>, M: Layer>(
    case: &str,
    model: &M,
    x_shape: &[usize],
    gflop: f64,
    threads: usize,
    reps: usize,
) -> Result<Vec<Row>> {
    let (x, labels) = batch::<V>(x_shape)?;
    let mut s = Session::<V>::new();
    let mut last = f32::NAN;
    let mut opt = sgd()?;
    let eager = measure(3, reps, || {
        last = black_box(eager_step(&mut s, &mut opt, model, &x, &labels)?);
        Ok(())
    })?;
    let eager_loss = last;
    let mut c = CompiledStep::new(model, &x, &labels)?;
    let mut opt = sgd()?;
    let compiled = measure(3, reps, || {
        last = black_box(c.step(&mut opt, &x)?);
        Ok(())
    })?;
    let row = |backend: &str, stats, loss: f32| {
        Row::new(case, V::ENGINE, threads, stats)
            .with("backend", backend)
            .with("batch", x_shape[0])
            .with("matmul_gflop", gflop)
            .with("loss", (loss as f64 * 1e4).round() / 1e4)
    };
    Ok(vec![
        row("eager", eager, eager_loss),
        row("compiled", compiled, last),
    ])
}

/// Matrix-product GFLOP of one MLP step: forward, weight gradients, and the input gradients of
/// layers 2 and 3 (the first layer's is not needed).
fn mlp_gflop(b: usize) -> f64 {
    let fwd = 2.0 * b as f64 * (784.0 * 256.0 + 256.0 * 256.0 + 256.0 * 10.0);
    let dx = 2.0 * b as f64 * (256.0 * 256.0 + 256.0 * 10.0);
    (2.0 * fwd + dx) / 1e9
}

fn mlp_train<V: TrainValue<Elem = f32>>(
    case: &str,
    b: usize,
    threads: usize,
    reps: usize,
) -> Result<Vec<Row>> {
    let model = seq![
        Linear::<784, 256>::new(1).map_err(err)?,
        relu(),
        Linear::<256, 256>::new(2).map_err(err)?,
        relu(),
        Linear::<256, 10>::new(3).map_err(err)?
    ];
    train_rows::<V, _>(case, &model, &[b, 784], mlp_gflop(b), threads, reps)
}

pub fn mlp_train_b64(threads: usize, reps: usize) -> Result<Vec<Row>> {
    mlp_train::<CpuF32>("mlp_train_b64", 64, threads, reps)
}

pub fn mlp_train_b512(threads: usize, reps: usize) -> Result<Vec<Row>> {
    mlp_train::<CpuF32>("mlp_train_b512", 512, threads, reps)
}

/// `mlp_train_b512` on the CUDA engine (the harness skips it, with a line, without a device).
pub fn mlp_train_b512_cuda(threads: usize, reps: usize) -> Result<Vec<Row>> {
    mlp_train::<torchlean_engine_cuda::CudaF32>("mlp_train_b512_cuda", 512, threads, reps)
}

pub const CONV_BATCH: usize = 32;

/// conv 3×3 1→8, relu, conv 3×3 8→16, relu, flatten, linear 16·24·24 → 10 on batch 32 of
/// 28×28 (stride 1, padding 0, as the PyTorch twin).
pub fn conv_train(threads: usize, reps: usize) -> Result<Vec<Row>> {
    let model = seq![
        Conv2d::<1, 8, 3>::new(1, 0, 1).map_err(err)?,
        relu(),
        Conv2d::<8, 16, 3>::new(1, 0, 2).map_err(err)?,
        relu(),
        Flatten::<16, 9216>,
        Linear::<9216, 10>::new(3).map_err(err)?
    ];
    let b = CONV_BATCH as f64;
    // forward: conv1 (9 MACs per output), conv2 (72), linear; backward: every weight gradient,
    // the input gradients of conv2 and the linear layer
    let conv1 = 2.0 * b * 8.0 * 676.0 * 9.0;
    let conv2 = 2.0 * b * 16.0 * 576.0 * 72.0;
    let lin = 2.0 * b * 9216.0 * 10.0;
    let gflop = (2.0 * (conv1 + conv2 + lin) + conv2 + lin) / 1e9;
    train_rows::<CpuF32, _>(
        "conv_train",
        &model,
        &[CONV_BATCH, 1, 28, 28],
        (gflop * 1e4).round() / 1e4,
        threads,
        reps,
    )
}

/// The GPT issue's default configuration (nanoGPT's CPU `shakespeare_char` settings).
fn gpt_default() -> torchlean_nn::GptConfig {
    torchlean_nn::GptConfig {
        vocab: 77,
        block: 64,
        n_layer: 4,
        n_head: 4,
        n_embd: 128,
        dropout: 0.0,
    }
}

/// `gpt_train_step`: one full training step of the default GPT on a fixed batch of 12
/// Shakespeare contexts — forward, loss, releasing backward, AdamW update — on the CPU engine
/// in f32, eager and compiled.
pub fn gpt_train_step(threads: usize, reps: usize) -> Result<Vec<Row>> {
    use torchlean_train::data::{Draw, Split, TextCorpus};
    let cfg = gpt_default();
    let batch = 12;
    let corpus = TextCorpus::shakespeare(cfg.block).map_err(err)?;
    let draw = Draw {
        seed: 1337,
        stream: 0,
        step: 0,
    };
    let b = corpus.batch(Split::Train, batch, cfg.block, draw);
    let gpt = torchlean_nn::Gpt::new(cfg, 1337).map_err(err)?;
    let gflop = 3.0 * cfg.forward_matmul_flops(batch, cfg.block) / 1e9;
    let adamw = || Optimizer::<f32>::new(OptimConfig::adamw(1e-3)).map_err(err);

    let mut s = Session::<CpuF32>::new();
    let mut opt = adamw()?;
    let mut last = f32::NAN;
    let eager = measure(2, reps, || {
        s.reset();
        let loss = gpt
            .loss(&mut s, &b.ids, &b.targets, batch, Mode::Train)
            .map_err(err)?;
        last = s.value_f64(&loss).map_err(err)?.data()[0] as f32;
        s.backward(&loss, Sweep::Releasing).map_err(err)?;
        let grads: BTreeMap<String, CpuF32> = s.take_param_grads();
        s.reset();
        update(&mut opt, s.params_mut().map(|(n, p)| (n, p, grads.get(n))))?;
        black_box(last);
        Ok(())
    })?;
    let eager_loss = last;

    let mut r = Recorder::new();
    let out = gpt
        .loss(&mut r, &b.ids, &b.targets, batch, Mode::Train)
        .map_err(err)?;
    let rec = r.finish(&out).map_err(err)?;
    let mut leaf_values = rec.inputs::<CpuF32>().map_err(err)?;
    let mut opt = adamw()?;
    let compiled = measure(2, reps, || {
        let leaves = &rec.leaves;
        let (out, grads) = rec
            .step::<CpuF32>(leaf_values.clone(), |i| leaves[i].kind == LeafKind::Param)
            .map_err(err)?;
        let named = leaves.iter().zip(leaf_values.iter_mut()).zip(&grads);
        update(
            &mut opt,
            named.map(|((l, p), g)| (l.name.as_str(), p, g.as_ref())),
        )?;
        last = black_box(out.to_f64().map_err(err)?.data()[0] as f32);
        Ok(())
    })?;
    let row = |backend: &str, stats, loss: f32| {
        Row::new("gpt_train_step", CpuF32::ENGINE, threads, stats)
            .with("backend", backend)
            .with("batch", batch)
            .with("matmul_gflop", (gflop * 1e3).round() / 1e3)
            .with("loss", (loss as f64 * 1e4).round() / 1e4)
    };
    Ok(vec![
        row("eager", eager, eager_loss),
        row("compiled", compiled, last),
    ])
}
