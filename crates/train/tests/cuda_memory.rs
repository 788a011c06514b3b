//! The CUDA engine's memory and transfers over a training run: the live device buffers and
//! bytes after 100 steps equal those after step 1, a dropped trainer frees everything it
//! allocated, and a step moves only its batch up and its loss (and, for the GPT, the norm it
//! clips by) down: no parameter, gradient or optimizer state crosses. On the host emulation
//! always; on the GPU when there is one.
//!
//! Alone in its binary: the live-buffer counters are per process, and another test
//! allocating on the same device at the same time would move them.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cuda::{cuda_or_skip, emulation_ready, live_buffers, transfers, Device};
use torchlean_engine_cuda::{CudaTensor, Emu, Gpu, LiveBuffers, Transfers};
use torchlean_nn::GptConfig;
use torchlean_train::data::{Dataset, TextCorpus};
use torchlean_train::exec::{CompiledExec, Exec, Interpreter};
use torchlean_train::model::{Arch, Classifier, Classify};
use torchlean_train::trainer::{Event, Observer, TrainConfig, Trainer};
use torchlean_train::{GptTrainConfig, GptTrainer, OptimConfig};

const STEPS: u64 = 100;

/// The live buffers and the transfers so far of device `D` after every step.
struct AfterEachStep<D>(Vec<(LiveBuffers, Transfers)>, std::marker::PhantomData<D>);

impl<D: Device> Observer for AfterEachStep<D> {
    fn event(&mut self, e: &Event<'_>) {
        if let Event::Step { .. } = e {
            self.0.push((live_buffers::<D>(), transfers::<D>()));
        }
    }
}

/// What a training step moves: its batch goes up (inputs and labels) and its loss comes down.
/// The MLP's 6 parameter tensors and the optimizer's state stay on the device (before the
/// device-side optimizer, every step also moved the 6 parameters each way and the 6 gradients
/// down); the labels are read back as class ids, by the loss and its VJP, from the host copy
/// their upload kept (they were downloaded twice a step), and the backward's seed is made on
/// the device (the eager path uploaded it). An epoch's end adds the held-out evaluation.
const STEP_UPLOADS: usize = 2;
const STEP_DOWNLOADS: usize = 1;

fn steps_return_to_the_baseline<D: Device>() {
    let data = Dataset::digits().unwrap();
    let optimizers = [
        TrainConfig::new(Arch::Mlp).optimizer,
        OptimConfig::adam(1e-3),
    ];
    for backend in [Interpreter::Eager, Interpreter::Compiled] {
        for optimizer in optimizers.clone() {
            let what = format!("{backend:?}, {}", optimizer.name());
            let before = live_buffers::<D>();
            let mut c = TrainConfig::new(Arch::Mlp);
            c.steps = Some(STEPS);
            c.backend = backend;
            c.optimizer = optimizer;
            let mut t = Trainer::<CudaTensor<D>>::new(c, &data).unwrap();
            let mut seen = AfterEachStep::<D>(Vec::new(), std::marker::PhantomData);
            let s = t.run(&mut seen).unwrap();
            assert_eq!(s.steps, STEPS);
            assert_eq!(seen.0.len() as u64, STEPS);
            let epoch = t.train_set().len().div_ceil(t.config().batch);
            let per_step: Vec<Transfers> = seen
                .0
                .windows(2)
                .map(|w| Transfers {
                    uploads: w[1].1.uploads - w[0].1.uploads,
                    downloads: w[1].1.downloads - w[0].1.downloads,
                })
                .collect();
            for (k, t) in per_step.iter().enumerate() {
                // step k + 2 (1-based); the first of an epoch comes after the evaluation
                // that ended the previous one
                if (k + 2) % epoch != 1 {
                    assert_eq!(
                        (t.uploads, t.downloads),
                        (STEP_UPLOADS, STEP_DOWNLOADS),
                        "{what}: step {} moved (uploads, downloads) {t:?}",
                        k + 2
                    );
                }
            }
            let after: Vec<LiveBuffers> = seen.0.iter().map(|(live, _)| *live).collect();
            // the parameters and the state are on the device, nothing else is kept between
            // steps
            assert!(after[0].buffers > before.buffers, "{what}: {after:?}");
            for (k, live) in after.iter().enumerate() {
                assert_eq!(
                    *live,
                    after[0],
                    "{what}: live device memory after step {} differs from step 1",
                    k + 1
                );
            }
            drop(t);
            assert_eq!(
                live_buffers::<D>(),
                before,
                "{what}: a dropped trainer left buffers behind"
            );
        }
    }
}

/// The emulated device's counters are per process: its tests take turns.
static EMU: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn training_on_the_emulated_engine_returns_to_its_baseline_every_step() {
    emulation_ready().unwrap();
    let _turn = EMU.lock().unwrap_or_else(|e| e.into_inner());
    steps_return_to_the_baseline::<Emu>();
}

#[test]
fn compiled_evaluation_uses_the_parameters_where_they_are() {
    // no copy of a parameter is made or kept: evaluation runs on the device values the
    // optimizer updates (it used to download them and upload copies into a session it kept)
    emulation_ready().unwrap();
    let _turn = EMU.lock().unwrap_or_else(|e| e.into_inner());
    let data = Dataset::digits().unwrap();
    let model = Classifier::new(Arch::Mlp, data.features(), None, data.classes(), 3).unwrap();
    let params = model.initial_params().unwrap().into_iter().collect();
    let mut exec = CompiledExec::<CudaTensor<Emu>>::new(&params).unwrap();
    let (x, labels) = data.batch(&(0..32).collect::<Vec<_>>()).unwrap();
    let before = live_buffers::<Emu>();
    let (_, correct) = exec.evaluate(&model, &x, &labels).unwrap();
    assert!(correct <= 32);
    assert_eq!(live_buffers::<Emu>(), before, "evaluation kept buffers");
}

#[test]
fn training_on_the_gpu_returns_to_its_baseline_every_step() {
    if !cuda_or_skip("training_on_the_gpu_returns_to_its_baseline_every_step") {
        return;
    }
    steps_return_to_the_baseline::<Gpu>();
}

/// What a GPT step moves, whatever its depth: its ids, its targets and the causal mask go up
/// (dropout's keep probability is made on the device) and one transfer brings its loss and
/// gradient norm down together (clipping runs on the device). Before, clipping downloaded and
/// uploaded every gradient, each block uploaded its own mask and each dropout its constant:
/// 23 uploads and 17 downloads a step for one block.
const GPT_STEP_UPLOADS: usize = 3;
const GPT_STEP_DOWNLOADS: usize = 1;

fn gpt_steps_move_only_their_tokens_and_loss<D: Device>() {
    let verse = "to be, or not to be: that is the question.\n";
    let corpus = TextCorpus::from_text("verse", &verse.repeat(40), 16).unwrap();
    let cfg = GptTrainConfig {
        model: GptConfig {
            vocab: 0,
            block: 16,
            n_layer: 2,
            n_head: 2,
            n_embd: 16,
            dropout: 0.1,
        },
        batch: 4,
        ..GptTrainConfig::shakespeare_char()
    };
    assert!(cfg.grad_clip > 0.0, "the steps clip their gradients");
    let before = live_buffers::<D>();
    let mut t = GptTrainer::<CudaTensor<D>>::new(cfg, corpus).unwrap();
    let mut seen = vec![(live_buffers::<D>(), transfers::<D>())];
    for _ in 0..6 {
        t.step().unwrap();
        seen.push((live_buffers::<D>(), transfers::<D>()));
    }
    for (k, w) in seen.windows(2).enumerate() {
        let moved = (
            w[1].1.uploads - w[0].1.uploads,
            w[1].1.downloads - w[0].1.downloads,
        );
        assert_eq!(
            moved,
            (GPT_STEP_UPLOADS, GPT_STEP_DOWNLOADS),
            "step {} moved (uploads, downloads) {moved:?}",
            k + 1
        );
    }
    // the optimizer's state appears at step 1; nothing else is kept between steps
    for (k, (live, _)) in seen.iter().enumerate().skip(2) {
        assert_eq!(
            *live, seen[1].0,
            "live device memory after step {k} differs"
        );
    }
    drop(t);
    assert_eq!(
        live_buffers::<D>(),
        before,
        "a dropped trainer left buffers"
    );
}

#[test]
fn gpt_steps_on_the_emulated_engine_move_only_their_tokens_and_loss() {
    emulation_ready().unwrap();
    let _turn = EMU.lock().unwrap_or_else(|e| e.into_inner());
    gpt_steps_move_only_their_tokens_and_loss::<Emu>();
}

#[test]
fn gpt_steps_on_the_gpu_move_only_their_tokens_and_loss() {
    if !cuda_or_skip("gpt_steps_on_the_gpu_move_only_their_tokens_and_loss") {
        return;
    }
    gpt_steps_move_only_their_tokens_and_loss::<Gpu>();
}
