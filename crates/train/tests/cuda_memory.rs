//! The CUDA engine's memory over a training run (issue 16's target: the live device buffers
//! and bytes after 100 steps equal those after step 1, and a dropped trainer frees everything
//! it allocated). On the host emulation always; on the GPU when there is one.
//!
//! Alone in its binary: the live-buffer counters are per process, and another test
//! allocating on the same device at the same time would move them.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cuda::{cuda_or_skip, emulation_ready, live_buffers, Device, Emu, Gpu};
use torchlean_engine_cuda::{CudaTensor, LiveBuffers};
use torchlean_train::data::Dataset;
use torchlean_train::exec::{CompiledExec, Exec, Interpreter};
use torchlean_train::model::{Arch, Classifier};
use torchlean_train::trainer::{Event, Observer, TrainConfig, Trainer};

const STEPS: u64 = 100;

/// The live buffers of device `D` after every step.
struct AfterEachStep<D>(Vec<LiveBuffers>, std::marker::PhantomData<D>);

impl<D: Device> Observer for AfterEachStep<D> {
    fn event(&mut self, e: &Event<'_>) {
        if let Event::Step { .. } = e {
            self.0.push(live_buffers::<D>());
        }
    }
}

fn steps_return_to_the_baseline<D: Device>() {
    let data = Dataset::digits().unwrap();
    for backend in [Interpreter::Eager, Interpreter::Compiled] {
        let before = live_buffers::<D>();
        let mut c = TrainConfig::new(Arch::Mlp);
        c.steps = Some(STEPS);
        c.backend = backend;
        let mut t = Trainer::<CudaTensor<D>>::new(c, &data).unwrap();
        let mut seen = AfterEachStep::<D>(Vec::new(), std::marker::PhantomData);
        let s = t.run(&mut seen).unwrap();
        assert_eq!(s.steps, STEPS);
        let after = &seen.0;
        assert_eq!(after.len() as u64, STEPS);
        // the parameters are on the device, nothing else is kept between steps
        assert!(after[0].buffers > before.buffers, "{backend:?}: {after:?}");
        for (k, live) in after.iter().enumerate() {
            assert_eq!(
                *live,
                after[0],
                "{backend:?}: live device memory after step {} differs from step 1",
                k + 1
            );
        }
        drop(t);
        assert_eq!(
            live_buffers::<D>(),
            before,
            "{backend:?}: a dropped trainer left buffers behind"
        );
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
    let params = model.initial_params().into_iter().collect();
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
