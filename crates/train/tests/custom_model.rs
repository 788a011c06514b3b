//! The trainer on a model of the program's own ([`Classify`]): a typed `seq!` of layers, and a
//! hand-written network with scoped parameter names and a residual block. Both backends agree
//! bit for bit, verified steps pass, a checkpoint resumes bit for bit through
//! `Trainer::resume_with` and predicts raw rows through `SavedClassifier::load_with`, and a
//! model that does not fit is refused before training, naming what is wrong.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_nn::dynamic::{Dyn, DynConv2d, DynLinear};
use torchlean_nn::layers::{dropout, relu, BatchNorm2d, Linear};
use torchlean_nn::{seq, Layer, Mode, Ops, Var};
use torchlean_spec::{Shape, UnaryOp};
use torchlean_train::exec::Interpreter;
use torchlean_train::{
    Arch, Checkpoint, Classify, Dataset, ModelMisfit, Quiet, SavedClassifier, Summary, TrainConfig,
    TrainError, Trainer,
};

/// Images `[1, 8, 8]`: a 3×3 convolution to 4 channels, ReLU, flattened; a projection to 32
/// features, ReLU; a residual block `h + relu(block(h))`; a head of 10. Its parameters are
/// named by scope (`conv.weight`, `block.bias`, …). With `norm`, a `BatchNorm2d` first, whose
/// running statistics are buffers; with `dropout`, dropout before the head.
#[derive(Clone, Debug)]
struct SmallNet {
    conv: DynConv2d,
    proj: DynLinear,
    block: DynLinear,
    head: DynLinear,
    norm: bool,
    dropout: bool,
}

impl SmallNet {
    fn new(classes: usize, seed: u64) -> SmallNet {
        SmallNet {
            conv: DynConv2d::new(1, 4, 3, 1, 1, seed).unwrap(),
            proj: DynLinear::new(4 * 8 * 8, 32, seed + 1).unwrap(),
            block: DynLinear::new(32, 32, seed + 2).unwrap(),
            head: DynLinear::new(32, classes, seed + 3).unwrap(),
            norm: false,
            dropout: false,
        }
    }
}

impl Classify for SmallNet {
    fn example_shape(&self) -> Vec<usize> {
        vec![1, 8, 8]
    }

    fn logits<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> torchlean_nn::Result<Var> {
        let x = if self.norm {
            ops.scoped("norm", |ops| BatchNorm2d::<1>::new().forward(ops, x, mode))?
        } else {
            x.clone()
        };
        let h = ops.scoped("conv", |ops| self.conv.forward(ops, &x, mode))?;
        let h = ops.unary(UnaryOp::Relu, &h)?;
        let n = h.shape().dims()[0];
        let h = ops.reshape(&h, Shape::from([n, 4 * 8 * 8]))?;
        let h = ops.scoped("proj", |ops| self.proj.forward(ops, &h, mode))?;
        let h = ops.unary(UnaryOp::Relu, &h)?;
        let b = ops.scoped("block", |ops| self.block.forward(ops, &h, mode))?;
        let b = ops.unary(UnaryOp::Relu, &b)?;
        let mut h = ops.add(&h, &b)?;
        if self.dropout {
            h = dropout::<Dyn>(0.1, 5)?.forward(ops, &h, mode)?;
        }
        ops.scoped("head", |ops| self.head.forward(ops, &h, mode))
    }

    fn description(&self) -> String {
        "SmallNet".into()
    }
}

fn digits() -> Dataset {
    Dataset::digits().unwrap()
}

fn custom(steps: u64) -> TrainConfig {
    let mut c = TrainConfig::new(Arch::Custom);
    c.steps = Some(steps);
    c
}

fn bits(s: &Summary) -> Vec<u64> {
    s.losses.iter().map(|(_, l)| l.to_bits()).collect()
}

#[test]
fn a_network_of_ones_own_trains_the_same_on_both_backends_and_verifies() {
    let run = |backend| {
        let mut c = custom(30);
        c.backend = backend;
        c.verify_every = Some(10);
        Trainer::<CpuF32, _>::with_model(c, SmallNet::new(10, 7), &digits())
            .unwrap()
            .run(&mut Quiet)
            .unwrap()
    };
    let (eager, compiled) = (run(Interpreter::Eager), run(Interpreter::Compiled));
    assert_eq!(bits(&eager), bits(&compiled));
    assert_eq!(eager.arch, Arch::Custom);
    let verify = eager.verify.unwrap();
    assert_eq!(verify.checks, 3);
    assert!(verify.worst <= verify.tolerance, "{verify:?}");
    // 30 steps of SGD with momentum learn something
    assert!(
        eager.held_out_after.accuracy > eager.held_out_before.accuracy + 0.3,
        "{:?} → {:?}",
        eager.held_out_before,
        eager.held_out_after
    );
}

#[test]
fn a_sequence_of_typed_layers_is_a_model_with_nn_sequential_names() {
    let model = seq![
        Linear::<64, 32>::new(1).unwrap(),
        relu(),
        Linear::<32, 10>::new(2).unwrap()
    ];
    assert_eq!(model.example_shape(), [64]);
    let mut c = custom(0);
    c.steps = None;
    c.epochs = 3;
    let mut t = Trainer::<CpuF64, _>::with_model(c, model, &digits()).unwrap();
    let s = t.run(&mut Quiet).unwrap();
    assert!(s.held_out_after.accuracy > 0.9, "{:?}", s.held_out_after);
    let names: Vec<String> = t.params_f64().unwrap().into_keys().collect();
    assert_eq!(names, ["0.bias", "0.weight", "2.bias", "2.weight"]);
}

#[test]
fn a_checkpoint_of_ones_own_model_resumes_bit_for_bit_and_predicts_raw_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.safetensors");
    let whole = Trainer::<CpuF32, _>::with_model(custom(20), SmallNet::new(10, 3), &digits())
        .unwrap()
        .run(&mut Quiet)
        .unwrap();

    let mut first =
        Trainer::<CpuF32, _>::with_model(custom(10), SmallNet::new(10, 3), &digits()).unwrap();
    let head = first.run(&mut Quiet).unwrap();
    first.save(&path).unwrap();
    let names: BTreeSet<String> = Checkpoint::load(&path)
        .unwrap()
        .tensors
        .into_keys()
        .collect();
    for want in [
        "conv.weight",
        "proj.bias",
        "block.weight",
        "head.bias",
        "input_mean",
    ] {
        assert!(names.contains(want), "{want} not in {names:?}");
    }
    let mut resumed =
        Trainer::<CpuF32, _>::resume_with(&path, SmallNet::new(10, 99), &digits()).unwrap();
    resumed.set_stop(0, Some(20));
    let tail = resumed.run(&mut Quiet).unwrap();
    let mut joined = bits(&head);
    joined.extend(bits(&tail));
    assert_eq!(joined, bits(&whole));

    // raw pixels in, through the file's own normalization: every digit gets the class the
    // trainer's evaluation counted (its sets standardized in f64 before the split)
    resumed.save(&path).unwrap();
    let mut saved = SavedClassifier::load_with(&path, SmallNet::new(10, 0)).unwrap();
    let (raw, labels) = Dataset::digits_raw().unwrap();
    let predicted = saved.predict::<CpuF32>(&raw).unwrap();
    let right = predicted
        .iter()
        .zip(&labels)
        .filter(|(p, l)| p == l)
        .count();
    let (n_train, n_held) = (resumed.train_set().len(), resumed.held_out_set().len());
    let counted =
        tail.train_after.accuracy * n_train as f64 + tail.held_out_after.accuracy * n_held as f64;
    assert_eq!(right, counted.round() as usize);
    assert_eq!(labels.len(), n_train + n_held);
}

/// The error's misfit, or a panic naming what came instead.
fn misfit(e: TrainError) -> ModelMisfit {
    match e {
        TrainError::ModelMisfit { problem, .. } => problem,
        other => panic!("not a misfit: {other}"),
    }
}

#[test]
fn a_model_that_does_not_fit_is_refused_before_training_naming_what_is_wrong() {
    let data = digits();
    let make = |model| Trainer::<CpuF64, SmallNet>::with_model(custom(1), model, &data);

    // one score per class of the data
    let e = make(SmallNet::new(7, 0)).unwrap_err();
    assert_eq!(
        misfit(e),
        ModelMisfit::Logits {
            logits: vec![1, 7],
            classes: 10
        }
    );

    // running statistics are buffers the trainer would neither update nor save
    let mut normed = SmallNet::new(10, 0);
    normed.norm = true;
    let e = make(normed).unwrap_err();
    let shown = e.to_string();
    assert_eq!(
        misfit(e),
        ModelMisfit::Buffers {
            names: vec!["norm.running_mean".into(), "norm.running_var".into()]
        }
    );
    assert_eq!(shown, "the model SmallNet does not fit");

    // dropout's draws would differ between the backends and the verifying reference
    let mut dropped = SmallNet::new(10, 0);
    dropped.dropout = true;
    let e = make(dropped).unwrap_err();
    assert_eq!(
        misfit(e),
        ModelMisfit::Random {
            ops: vec!["bernoulli_mask".into()]
        }
    );

    // 63 features in, 64 in the data
    let wrong = seq![Linear::<63, 10>::new(1).unwrap()];
    let e = Trainer::<CpuF64, _>::with_model(custom(1), wrong, &data).unwrap_err();
    assert_eq!(
        misfit(e),
        ModelMisfit::ExampleSize {
            example: vec![63],
            size: 63,
            features: 64
        }
    );

    // a configuration for a built-in model is not one for the program's own
    let e =
        Trainer::<CpuF64, _>::with_model(TrainConfig::new(Arch::Mlp), SmallNet::new(10, 0), &data)
            .unwrap_err();
    assert!(matches!(e, TrainError::Config { field: "arch", .. }), "{e}");
}

#[test]
fn a_custom_checkpoint_is_resumed_only_with_its_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.safetensors");
    let mut t =
        Trainer::<CpuF32, _>::with_model(custom(2), SmallNet::new(10, 1), &digits()).unwrap();
    t.run(&mut Quiet).unwrap();
    t.save(&path).unwrap();

    // the CLI's path (built-in models only) says where a custom model is resumed
    let e = Trainer::<CpuF32>::resume(&path, &digits()).unwrap_err();
    assert!(e.to_string().contains("Trainer::resume_with"), "{e}");
    let e = SavedClassifier::load(&path).unwrap_err();
    assert!(e.to_string().contains("Trainer::with_model"), "{e}");

    // another model's parameters are named as missing and unexpected
    let other = seq![
        Linear::<64, 16>::new(1).unwrap(),
        relu(),
        Linear::<16, 10>::new(2).unwrap()
    ];
    let e = Trainer::<CpuF32, _>::resume_with(&path, other, &digits()).unwrap_err();
    assert!(matches!(e, TrainError::CheckpointNames { .. }), "{e}");
}
