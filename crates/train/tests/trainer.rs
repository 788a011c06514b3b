//! The trainer end to end on the embedded digits: both backends compute the same losses bit
//! for bit, a resumed run continues bit for bit, verified steps pass on correct engines and
//! stop a faulty one naming the parameter, and bad checkpoints are clear errors.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_faults::{fault, Faulty};
use torchlean_spec::Tensor;
use torchlean_train::checkpoint::{Checkpoint, TensorData};
use torchlean_train::data::Dataset;
use torchlean_train::exec::Interpreter;
use torchlean_train::model::Arch;
use torchlean_train::optim::OptimConfig;
use torchlean_train::trainer::{optimizer_path, Quiet, Summary, TrainConfig, Trainer};
use torchlean_train::{CheckpointProblem, TrainError, TrainValue};

fn digits() -> Dataset {
    Dataset::digits().unwrap()
}

fn cfg(arch: Arch, steps: u64) -> TrainConfig {
    let mut c = TrainConfig::new(arch);
    c.steps = Some(steps);
    c
}

fn run<V: TrainValue>(c: TrainConfig) -> Summary {
    Trainer::<V>::new(c, &digits())
        .unwrap()
        .run(&mut Quiet)
        .unwrap()
}

fn bits(s: &Summary) -> Vec<u64> {
    s.losses.iter().map(|(_, l)| l.to_bits()).collect()
}

#[test]
fn eager_and_compiled_backends_give_the_same_losses_bit_for_bit() {
    for arch in [Arch::Mlp, Arch::Cnn] {
        let mut c = cfg(arch, 12);
        let eager = run::<CpuF32>(c.clone());
        c.backend = Interpreter::Compiled;
        let compiled = run::<CpuF32>(c.clone());
        assert_eq!(bits(&eager), bits(&compiled), "{arch} f32");
        let e64 = run::<CpuF64>(cfg(arch, 12));
        let c64 = run::<CpuF64>(c);
        assert_eq!(bits(&e64), bits(&c64), "{arch} f64");
    }
}

#[test]
fn a_resumed_run_continues_with_the_same_losses_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    for (arch, opt) in [
        (Arch::Mlp, OptimConfig::parse("adam", None).unwrap()),
        (Arch::Cnn, torchlean_train::trainer::sgd_momentum(0.05)),
    ] {
        let mut c = cfg(arch, 50);
        c.optimizer = opt;
        let whole = run::<CpuF32>(c.clone());
        // 45 batches per epoch: the resumed part crosses an epoch boundary (a new order)
        let mut first = Trainer::<CpuF32>::new(cfg_with_steps(&c, 30), &digits()).unwrap();
        first.run(&mut Quiet).unwrap();
        first.save(&path).unwrap();
        let mut resumed = Trainer::<CpuF32>::resume(&path, &digits()).unwrap();
        resumed.set_stop(c.epochs, Some(50));
        let rest = resumed.run(&mut Quiet).unwrap();
        assert_eq!(rest.first_step, 30);
        assert_eq!(bits(&rest), bits(&whole)[30..].to_vec(), "{arch}");
    }
}

fn cfg_with_steps(c: &TrainConfig, steps: u64) -> TrainConfig {
    let mut c = c.clone();
    c.steps = Some(steps);
    c
}

#[test]
fn verified_steps_pass_on_the_cpu_engine_in_both_precisions() {
    for arch in [Arch::Mlp, Arch::Cnn] {
        let mut c = cfg(arch, 6);
        c.verify_every = Some(3);
        let s = run::<CpuF32>(c.clone());
        let v = s.verify.unwrap();
        assert_eq!(v.checks, 2);
        assert!(v.worst > 0.0 && v.worst < 1e-4, "f32 {arch}: {}", v.worst);
        let v = run::<CpuF64>(c).verify.unwrap();
        assert!(v.worst < 1e-12, "f64 {arch}: {}", v.worst);
    }
}

#[test]
fn a_faulty_engine_is_stopped_at_the_first_verified_step_naming_where() {
    let mut c = cfg(Arch::Cnn, 10);
    c.verify_every = Some(2);
    let err = Trainer::<Faulty<Tensor<f64>, { fault::POOL_OFF_BY_ONE }>>::new(c, &digits())
        .unwrap()
        .run(&mut Quiet)
        .unwrap_err();
    match &err {
        TrainError::VerifyFailed { step, param, .. } => {
            assert_eq!(*step, 2);
            assert!(!param.is_empty());
        }
        other => panic!("expected a verification failure, got {other}"),
    }
    assert!(err.to_string().contains("faulty-pool-off-by-one"), "{err}");
}

#[test]
fn training_learns_the_digits() {
    // a short run, far from the README's figures, but well above chance (10 %)
    let s = run::<CpuF32>(cfg(Arch::Mlp, 90));
    assert!(
        s.held_out_after.accuracy > 0.8,
        "{}",
        s.held_out_after.accuracy
    );
    assert!(s.train_after.loss < 0.5 * s.train_before.loss);
}

#[test]
fn a_checkpoint_of_another_model_or_precision_is_refused_with_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mlp.safetensors");
    let t = Trainer::<CpuF32>::new(cfg(Arch::Mlp, 0), &digits()).unwrap();
    t.save(&path).unwrap();
    let err = Trainer::<CpuF64>::resume(&path, &digits()).unwrap_err();
    assert!(
        matches!(
            &err,
            TrainError::Checkpoint {
                problem: CheckpointProblem::Dtype { saved, here: "f64" },
                ..
            } if saved == "f32"
        ),
        "{err:?}"
    );
    assert!(
        torchlean_spec::display_chain(&err).contains("resume it with --dtype f32"),
        "{err}"
    );
    // data of another width: the counts, saved and given
    let csv = "a,b,label\n1,2,x\n3,4,y\n5,6,x\n";
    let other = Dataset::from_csv_str(csv, "two.csv", "label").unwrap();
    let err = Trainer::<CpuF32>::resume(&path, &other).unwrap_err();
    assert!(
        matches!(
            &err,
            TrainError::Checkpoint {
                problem: CheckpointProblem::DataShape {
                    features: Some(64),
                    classes: Some(10),
                    data_features: 2,
                    data_classes: 2,
                },
                ..
            }
        ),
        "{err:?}"
    );
    // the same file with one parameter removed and one mis-shaped: every name is listed
    let (mut ck, optim) = t.checkpoint().unwrap();
    ck.tensors.remove("2.bias");
    let w = ck.tensors.get_mut("4.weight").unwrap();
    w.shape = vec![5, 128];
    w.data = TensorData::F32(vec![0.0; 640]);
    ck.save(&path).unwrap();
    optim.save(&optimizer_path(&path)).unwrap();
    let err = Trainer::<CpuF32>::resume(&path, &digits())
        .unwrap_err()
        .to_string();
    assert!(err.contains("2.bias") && err.contains("4.weight"), "{err}");
    // a truncated file
    t.save(&path).unwrap();
    let bytes = std::fs::read(dir.path().join("mlp.safetensors")).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = Trainer::<CpuF32>::resume(&path, &digits())
        .unwrap_err()
        .to_string();
    assert!(err.contains("mlp.safetensors"), "{err}");
}

#[test]
fn the_model_file_holds_the_parameters_and_the_input_normalization_and_the_optimizer_file_must_match_it(
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.safetensors");
    let mut c = cfg(Arch::Mlp, 5);
    c.optimizer = OptimConfig::parse("adam", None).unwrap();
    let mut t = Trainer::<CpuF32>::new(c, &digits()).unwrap();
    t.run(&mut Quiet).unwrap();
    t.save(&path).unwrap();
    // what `load_state_dict(strict=True)` needs: exactly the state_dict names of the exported
    // module, the parameters and the input normalization's buffers
    let ck = Checkpoint::load(&path).unwrap();
    let names: Vec<&str> = ck.tensors.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "0.bias",
            "0.weight",
            "2.bias",
            "2.weight",
            "4.bias",
            "4.weight",
            "input_mean",
            "input_scale"
        ]
    );
    // in the file's units (raw pixels, 0 to 16), f64: the trainer's standardization to the bit
    let meta: serde_json::Value = serde_json::from_str(&ck.metadata["torchlean"]).unwrap();
    let fitted = &meta["standardize"];
    for (buffer, key) in [("input_mean", "mean"), ("input_scale", "scale")] {
        let TensorData::F64(values) = &ck.tensors[buffer].data else {
            panic!("{buffer} is not f64");
        };
        let want: Vec<f64> = fitted[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() * 16.0)
            .collect();
        assert_eq!(values, &want, "{buffer}");
    }
    assert_eq!(meta["model"]["class_names"][3], "3");
    assert_eq!(meta["model"]["input_divisor"], 16.0);
    let optim = Checkpoint::load(&optimizer_path(&path)).unwrap();
    assert!(optim.tensors.contains_key("state.0.weight.exp_avg_sq"));
    // an optimizer file from another save is refused, naming it
    let other = dir.path().join("other.safetensors");
    t.save(&other).unwrap();
    std::fs::copy(optimizer_path(&other), optimizer_path(&path)).unwrap();
    let err = Trainer::<CpuF32>::resume(&path, &digits()).unwrap_err();
    assert!(
        matches!(
            &err,
            TrainError::Checkpoint {
                path: optim,
                problem: CheckpointProblem::OtherSave { model, .. },
            } if optim == &optimizer_path(&path) && model == &path
        ),
        "{err:?}"
    );
    // a missing one too
    std::fs::remove_file(optimizer_path(&path)).unwrap();
    let err = Trainer::<CpuF32>::resume(&path, &digits())
        .unwrap_err()
        .to_string();
    assert!(err.contains("run.optim.safetensors"), "{err}");
}

/// Records every step's loss and sets the stop flag once step `at` is done (what the CLI's
/// SIGINT handler does, at a known step).
struct StopAt {
    at: u64,
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    losses: Vec<u64>,
}

impl torchlean_train::trainer::Observer for StopAt {
    fn event(&mut self, e: &torchlean_train::trainer::Event<'_>) {
        if let torchlean_train::trainer::Event::Step { step, loss, .. } = *e {
            self.losses.push(loss.to_bits());
            if step == self.at {
                self.flag.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

#[test]
fn a_run_stopped_by_its_flag_saves_and_resumes_with_the_same_losses_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stopped.safetensors");
    let mut c = cfg(Arch::Mlp, 60);
    c.optimizer = OptimConfig::parse("adam", None).unwrap();
    c.schedule = torchlean_train::Schedule::Step {
        step_size: 10,
        gamma: 0.5,
    };
    let whole = run::<CpuF32>(c.clone());
    // stopped mid-epoch (45 batches per epoch) and mid-schedule-period
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut t = Trainer::<CpuF32>::new(c.clone(), &digits()).unwrap();
    t.set_stop_flag(flag.clone());
    let mut obs = StopAt {
        at: 37,
        flag,
        losses: Vec::new(),
    };
    let e = t.run(&mut obs).unwrap_err();
    assert!(matches!(e, TrainError::Interrupted { step: 37 }), "{e:?}");
    assert_eq!(t.steps_done(), 37);
    assert_eq!(obs.losses, bits(&whole)[..37].to_vec());
    t.save(&path).unwrap();
    let mut resumed = Trainer::<CpuF32>::resume(&path, &digits()).unwrap();
    let rest = resumed.run(&mut Quiet).unwrap();
    assert_eq!(rest.first_step, 37);
    assert_eq!(bits(&rest), bits(&whole)[37..].to_vec());

    // a flag already set stops the run before its first step
    let mut t = Trainer::<CpuF32>::new(c, &digits()).unwrap();
    t.set_stop_flag(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
        true,
    )));
    let e = t.run(&mut Quiet).unwrap_err();
    assert!(matches!(e, TrainError::Interrupted { step: 0 }), "{e:?}");
}

#[test]
fn a_corrupted_model_or_optimizer_file_is_refused_on_resume_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.safetensors");
    let mut t = Trainer::<CpuF32>::new(cfg(Arch::Mlp, 3), &digits()).unwrap();
    t.run(&mut Quiet).unwrap();
    t.save(&path).unwrap();
    for (file, name) in [
        (path.clone(), "run.safetensors"),
        (optimizer_path(&path), "run.optim.safetensors"),
    ] {
        let good = std::fs::read(&file).unwrap();
        // one bit of one parameter (or momentum buffer) value, near the end of the data
        let mut bad = good.clone();
        let i = bad.len() - 5;
        bad[i] ^= 0x01;
        std::fs::write(&file, &bad).unwrap();
        let e = Trainer::<CpuF32>::resume(&path, &digits()).unwrap_err();
        assert!(
            matches!(&e, TrainError::CheckpointChecksum { path: p, .. } if p == &file),
            "{e:?}"
        );
        assert!(e.to_string().contains(name), "{e}");
        // cut short
        std::fs::write(&file, &good[..good.len() - 100]).unwrap();
        let e = Trainer::<CpuF32>::resume(&path, &digits()).unwrap_err();
        assert!(
            matches!(&e, TrainError::CheckpointTruncated { path: p, .. } if p == &file),
            "{e:?}"
        );
        std::fs::write(&file, &good).unwrap();
        Trainer::<CpuF32>::resume(&path, &digits()).unwrap();
    }
}

/// `set_lr` on a resumed SGD-momentum run keeps the momentum buffers and applies the new rate
/// from the next step: one step at 0.01 and one at 0.05 from the same checkpoint move every
/// parameter along the same direction (the updated momentum buffer), by 0.01 and 0.05 of it.
#[test]
fn a_resumed_run_takes_a_new_learning_rate_and_keeps_the_optimizer_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let mut c = cfg(Arch::Mlp, 10);
    c.optimizer = torchlean_train::trainer::sgd_momentum(0.05);
    let mut first = Trainer::<CpuF64>::new(c.clone(), &digits()).unwrap();
    first.run(&mut Quiet).unwrap();
    first.save(&path).unwrap();
    let before = first.params_f64().unwrap();
    let one_step = |lr: Option<f64>| {
        let mut t = Trainer::<CpuF64>::resume(&path, &digits()).unwrap();
        if let Some(lr) = lr {
            t.set_lr(lr).unwrap();
            assert_eq!(t.config().optimizer.lr(), lr);
        }
        t.set_stop(c.epochs, Some(11));
        t.run(&mut Quiet).unwrap();
        t.params_f64().unwrap()
    };
    let (slow, kept) = (one_step(Some(0.01)), one_step(None));
    for (name, p0) in &before {
        let step = |p: &Tensor<f64>, lr: f64| -> Vec<f64> {
            p0.data()
                .iter()
                .zip(p.data())
                .map(|(a, b)| (a - b) / lr)
                .collect()
        };
        let (a, b) = (step(&slow[name], 0.01), step(&kept[name], 0.05));
        let scale = b.iter().fold(1e-12f64, |m, x| m.max(x.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .fold(0f64, |m, (x, y)| m.max((x - y).abs()));
        // a lost momentum buffer would make the two directions differ by the old buffer
        assert!(worst / scale < 1e-9, "{name}: {worst:e} of {scale:e}");
    }
    assert!(Trainer::<CpuF64>::resume(&path, &digits())
        .unwrap()
        .set_lr(-1.0)
        .is_err());
}

/// `set_batch` on a resumed run: the step count becomes the new size's at the same place in
/// the same epoch, rounded up to whole new batches, and the next rows are that epoch's order
/// continued.
#[test]
fn a_resumed_run_takes_a_new_batch_size_at_the_same_place_in_its_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let mut first = Trainer::<CpuF32>::new(cfg(Arch::Mlp, 50), &digits()).unwrap();
    first.run(&mut Quiet).unwrap();
    first.save(&path).unwrap();
    // batch 32: 45 batches per epoch, so step 50 is 5 batches (160 rows) into epoch 1
    assert_eq!(first.batches_per_epoch(), 45);
    let epoch_1 = torchlean_train::epoch_order(first.train_set().len(), 0, 1);
    assert_eq!(first.batch_rows(50), epoch_1[160..192].to_vec());
    let mut t = Trainer::<CpuF32>::resume(&path, &digits()).unwrap();
    // batch 64: 23 per epoch; 160 rows are 2.5 batches, rounded up to 3: step 23 + 3
    assert_eq!(t.set_batch(64).unwrap(), 26);
    assert_eq!(t.steps_done(), 26);
    assert_eq!(t.config().batch, 64);
    assert_eq!(t.batch_rows(26), epoch_1[192..256].to_vec());
    t.set_stop(t.config().epochs, Some(28));
    let rest = t.run(&mut Quiet).unwrap();
    assert_eq!((rest.first_step, rest.losses.len()), (26, 2));
    assert!(t.set_batch(0).is_err(), "batch 0 is refused");
}
