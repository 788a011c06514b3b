//! The PyTorch twin: `bench/pytorch/train_twin.py` loads our initial checkpoint and replays
//! our batch order with PyTorch's own model, loss and optimizer; its per-step losses agree
//! with ours over 100 steps (f64: 1e-10 relative). Skipped, visibly, when `TORCHLEAN_PYTHON`
//! is unset or cannot import torch and safetensors.
#![allow(clippy::unwrap_used)]

use crate::common;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_train::checkpoint::{Checkpoint, NamedTensor, TensorData};
use torchlean_train::data::Dataset;
use torchlean_train::model::Arch;
use torchlean_train::optim::OptimConfig;
use torchlean_train::trainer::{Quiet, TrainConfig, Trainer};
use torchlean_train::TrainValue;

const STEPS: u64 = 100;

/// Writes the twin's inputs for `t` into `dir`.
fn write_bundle<V: TrainValue>(t: &Trainer<V>, dtype: &str, dir: &Path) {
    t.save(&dir.join("init.safetensors")).unwrap();
    let set = t.train_set();
    let rows: Vec<usize> = (0..set.len()).collect();
    let (x, y) = set.batch(&rows).unwrap();
    let mut tensors = BTreeMap::new();
    tensors.insert(
        "x".to_string(),
        NamedTensor {
            shape: x.shape().dims().to_vec(),
            data: TensorData::F64(x.data().to_vec()),
        },
    );
    tensors.insert(
        "y".to_string(),
        NamedTensor {
            shape: vec![y.len()],
            data: TensorData::F64(y.iter().map(|&l| l as f64).collect()),
        },
    );
    Checkpoint {
        tensors,
        metadata: BTreeMap::new(),
    }
    .save(&dir.join("data.safetensors"))
    .unwrap();
    let c = t.config();
    let plan = serde_json::json!({
        "model": {
            "arch": c.arch,
            "features": set.features(),
            "classes": set.classes(),
            "image": set.image(),
        },
        "optimizer": c.optimizer,
        "dtype": dtype,
        "rows": (0..STEPS).map(|k| t.batch_rows(k)).collect::<Vec<_>>(),
        "lrs": (0..STEPS).map(|k| c.schedule.lr(c.optimizer.lr(), k)).collect::<Vec<_>>(),
        "clip_grad_norm": c.clip_grad_norm,
    });
    std::fs::write(dir.join("plan.json"), plan.to_string()).unwrap();
}

/// Our per-step losses and the twin's, for `cfg` on engine `V`.
fn both<V: TrainValue>(py: &PathBuf, cfg: TrainConfig, dtype: &str) -> (Vec<f64>, Vec<f64>) {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::<V>::new(cfg, &Dataset::digits().unwrap()).unwrap();
    write_bundle(&t, dtype, dir.path());
    let ours: Vec<f64> = t
        .run(&mut Quiet)
        .unwrap()
        .losses
        .iter()
        .map(|p| p.1)
        .collect();
    let script = common::script("bench/pytorch/train_twin.py");
    let v = common::run_json(py, &script, &[dir.path().as_os_str()]);
    (ours, losses_of(&v))
}

/// A twin's `{"losses": [...]}`.
fn losses_of(v: &serde_json::Value) -> Vec<f64> {
    v["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap_or(f64::NAN))
        .collect()
}

fn worst_relative(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1e-300))
        .fold(0.0, f64::max)
}

fn configs() -> Vec<(&'static str, TrainConfig)> {
    let mut out = Vec::new();
    for arch in [Arch::Mlp, Arch::Cnn] {
        for opt in ["sgd", "adam"] {
            let mut c = TrainConfig::new(arch);
            c.steps = Some(STEPS);
            if opt == "adam" {
                c.optimizer = OptimConfig::parse("adam", None).unwrap();
            }
            out.push((opt, c));
        }
    }
    out
}

#[test]
fn pytorch_replays_our_training_with_the_same_losses_in_f64() {
    let Some(py) = common::python() else { return };
    for (opt, c) in configs() {
        let arch = c.arch;
        let (ours, theirs) = both::<CpuF64>(&py, c, "f64");
        let w = worst_relative(&ours, &theirs);
        eprintln!(
            "twin f64 {arch} {opt}: worst relative loss difference over {STEPS} steps {w:.2e}"
        );
        assert!(w <= 1e-10, "{arch} {opt}: {w:e}");
    }
}

#[test]
fn pytorch_replays_our_training_in_f32_within_what_rounding_allows() {
    let Some(py) = common::python() else { return };
    for (opt, c) in configs() {
        let arch = c.arch;
        let (ours, theirs) = both::<CpuF32>(&py, c, "f32");
        let w = worst_relative(&ours, &theirs);
        eprintln!(
            "twin f32 {arch} {opt}: worst relative loss difference over {STEPS} steps {w:.2e}"
        );
        assert!(w <= 1e-4, "{arch} {opt}: {w:e}");
    }
}

/// The twins' GPT: nanoGPT's settings at 2 layers, 2 heads, 32 wide, contexts of 16, batch 4.
fn small_gpt() -> torchlean_train::GptTrainConfig {
    let mut cfg = torchlean_train::GptTrainConfig::shakespeare_char();
    cfg.model.n_layer = 2;
    cfg.model.n_head = 2;
    cfg.model.n_embd = 32;
    cfg.model.block = 16;
    cfg.batch = 4;
    cfg
}

/// The GPT twin (`bench/pytorch/gpt_twin.py`, nanoGPT's model and optimizer setup): a small GPT
/// on Shakespeare, 50 steps, from our initial checkpoint and on our batches.
fn gpt_both<V: TrainValue>(py: &PathBuf, dtype: &str) -> (Vec<f64>, Vec<f64>) {
    use torchlean_train::data::TextCorpus;
    use torchlean_train::{GptEvent, GptTrainer};
    const GPT_STEPS: u64 = 50;
    let mut cfg = small_gpt();
    cfg.iters = GPT_STEPS;
    cfg.warmup = 10;
    let dir = tempfile::tempdir().unwrap();
    let corpus = TextCorpus::shakespeare(cfg.model.block).unwrap();
    let mut t = GptTrainer::<V>::new(cfg, corpus).unwrap();
    t.save(&dir.path().join("init.safetensors")).unwrap();
    let c = t.config().clone();
    let batches: Vec<_> = (0..GPT_STEPS)
        .map(|k| {
            let b = t.batch_of(k);
            serde_json::json!({"ids": b.ids, "targets": b.targets})
        })
        .collect();
    let plan = serde_json::json!({
        "config": c,
        "vocab": c.model.vocab,
        "dtype": dtype,
        "lrs": (0..GPT_STEPS).map(|k| c.lr_at(k)).collect::<Vec<_>>(),
        "batches": batches,
    });
    std::fs::write(dir.path().join("plan.json"), plan.to_string()).unwrap();
    let mut ours = Vec::new();
    for _ in 0..GPT_STEPS {
        if let GptEvent::Step { loss, .. } = t.step().unwrap() {
            ours.push(loss);
        }
    }
    let script = common::script("bench/pytorch/gpt_twin.py");
    let v = common::run_json(py, &script, &[dir.path().as_os_str()]);
    (ours, losses_of(&v))
}

#[test]
fn nanogpt_replays_our_gpt_training_with_the_same_losses() {
    let Some(py) = common::python() else { return };
    let (ours, theirs) = gpt_both::<CpuF64>(&py, "f64");
    let w = worst_relative(&ours, &theirs);
    eprintln!("twin f64 gpt: worst relative loss difference over 50 steps {w:.2e}");
    assert!(w <= 1e-10, "gpt f64: {w:e}");
    let (ours, theirs) = gpt_both::<CpuF32>(&py, "f32");
    let w = worst_relative(&ours, &theirs);
    eprintln!("twin f32 gpt: worst relative loss difference over 50 steps {w:.2e}");
    assert!(w <= 1e-4, "gpt f32: {w:e}");
}

#[test]
fn nanogpt_scores_our_trained_checkpoint_as_we_do() {
    use torchlean_train::data::{Draw, Split, TextCorpus};
    use torchlean_train::GptTrainer;
    let Some(py) = common::python() else { return };
    let cfg = small_gpt();
    let corpus = TextCorpus::shakespeare(cfg.model.block).unwrap();
    let mut t = GptTrainer::<CpuF64>::new(cfg, corpus).unwrap();
    for _ in 0..20 {
        t.step().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    t.save(&dir.path().join("model.safetensors")).unwrap();
    let c = t.config().clone();
    let batches: Vec<_> = (0..5)
        .map(|step| {
            let draw = Draw {
                seed: 7,
                stream: 99,
                step,
            };
            t.corpus().batch(Split::Val, c.batch, c.model.block, draw)
        })
        .collect();
    let ours = batches.iter().map(|b| t.loss_on(b).unwrap()).sum::<f64>() / 5.0;
    let plan = serde_json::json!({
        "config": c,
        "vocab": c.model.vocab,
        "dtype": "f64",
        "batches": batches
            .iter()
            .map(|b| serde_json::json!({"ids": b.ids, "targets": b.targets}))
            .collect::<Vec<_>>(),
    });
    std::fs::write(dir.path().join("plan.json"), plan.to_string()).unwrap();
    let script = common::script("bench/pytorch/gpt_twin.py");
    let v = common::run_json(&py, &script, &["--eval".as_ref(), dir.path().as_os_str()]);
    let theirs = v["eval_loss"].as_f64().unwrap();
    let w = worst_relative(&[ours], &[theirs]);
    eprintln!("twin gpt: val loss ours {ours}, PyTorch's {theirs}, relative difference {w:.2e}");
    assert!(w <= 1e-12, "{ours} vs {theirs}");
}
