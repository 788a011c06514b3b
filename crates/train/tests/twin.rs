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
    let theirs = v["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap_or(f64::NAN))
        .collect();
    (ours, theirs)
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
