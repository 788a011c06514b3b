//! The training loop behind `torchlean train`: seeded batches of a [`Dataset`], a step on the
//! chosen backend and engine, the optimizer's in-place update, held-out evaluation per epoch,
//! checkpoints that resume bit for bit, and verified steps — every `verify_every`-th step's
//! loss and parameter gradients recomputed on the reference engine in f64 from the same
//! parameters and batch, stopping at the first deviation beyond the dtype's tolerance.
//!
//! Invariant: the batch of global step `k` is a pure function of `(train set, seed, batch, k)`
//! (`data::epoch_order` of epoch `k / batches_per_epoch`), and every piece of state a step
//! reads — parameters, optimizer state, the step counter — is in the checkpoint (the model file
//! and its optimizer file), in the engine's own precision. So a run resumed from a checkpoint computes the same losses, bit
//! for bit, as the uninterrupted run.

use crate::checkpoint::{Checkpoint, NamedTensor, TensorData};
use crate::data::{epoch_order, Dataset, Standardizer};
use crate::data_parallel as dp;
use crate::error::{CheckpointProblem, Result, TrainError};
use crate::exec::{CompiledExec, EagerExec, Exec, Interpreter, StepOut};
use crate::imported::OnnxSource;
use crate::model::{check_fit, Arch, Classifier, Classify};
use crate::optim::{EngineOptimizer, OptimConfig, ParamState};
use crate::sched::{Schedule, Scheduler};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use torchlean_distributed::World;
use torchlean_runtime::AnomalyMode;
use torchlean_runtime::{Element, Kernels, TrainValue};
use torchlean_spec::Tensor;

/// The checkpoint's format tag.
pub const CHECKPOINT_FORMAT: &str = "torchlean.train.v1";

/// The optimizer file's format tag.
pub const OPTIMIZER_FORMAT: &str = "torchlean.train.optim.v1";

/// Where the optimizer state of the checkpoint `path` lives: `run.safetensors` →
/// `run.optim.safetensors`, beside it.
pub fn optimizer_path(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}.optim.safetensors"))
}

/// Everything that decides what a run computes.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainConfig {
    pub arch: Arch,
    /// The ONNX model of an [`Arch::Onnx`] run (`train --from`), and its head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<OnnxSource>,
    /// Epochs to run (an epoch is one pass over the training split).
    pub epochs: u64,
    /// Stop after this many steps in all (overrides `epochs` when given).
    pub steps: Option<u64>,
    pub batch: usize,
    pub optimizer: OptimConfig,
    pub schedule: Schedule,
    /// `clip_grad_norm_` to this total 2-norm before each update.
    pub clip_grad_norm: Option<f64>,
    pub seed: u64,
    /// The fraction of the data held out for evaluation.
    pub held_out: f64,
    pub backend: Interpreter,
    /// Verify every N-th step on the reference engine in f64 (0 or `None`: never).
    pub verify_every: Option<u64>,
    /// Anomaly mode: stop at the first node whose value or gradient contribution is NaN or
    /// infinite ([`TrainError::Anomaly`]). Decides whether a run stops, not what it computes.
    #[serde(default)]
    pub detect_anomaly: bool,
}

impl TrainConfig {
    /// The defaults of `torchlean train <arch>` on the digits.
    pub fn new(arch: Arch) -> TrainConfig {
        let (epochs, lr) = match arch {
            Arch::Mlp => (30, 0.05),
            Arch::Cnn => (20, 0.05),
            // fine-tuning: fewer passes, a smaller step
            Arch::Onnx => (10, 0.01),
            Arch::Custom => (10, 0.05),
        };
        TrainConfig {
            arch,
            from: None,
            epochs,
            steps: None,
            batch: 32,
            optimizer: sgd_momentum(lr),
            schedule: Schedule::Constant,
            clip_grad_norm: None,
            seed: 0,
            held_out: 0.2,
            backend: Interpreter::Eager,
            verify_every: None,
            detect_anomaly: false,
        }
    }

    /// The model this configuration trains, for data of `features` per example (as
    /// `image`, if images) and `classes` classes: the built-in `arch` seeded by `seed`, or the
    /// model imported `from` its file.
    pub fn classifier(
        &self,
        features: usize,
        image: Option<(usize, usize)>,
        classes: usize,
    ) -> Result<Classifier> {
        match &self.from {
            Some(source) => Classifier::imported(source, features, classes, self.seed),
            None => Classifier::new(self.arch, features, image, classes, self.seed),
        }
    }

    /// The defaults of `torchlean train --from` for the ONNX model of `source`.
    pub fn imported(source: OnnxSource) -> TrainConfig {
        TrainConfig {
            from: Some(source),
            ..TrainConfig::new(Arch::Onnx)
        }
    }

    fn validate(&self) -> Result<()> {
        if (self.arch == Arch::Onnx) != self.from.is_some() {
            return Err(TrainError::Config {
                field: "from",
                reason: format!(
                    "an ONNX file goes with the onnx model only (model {}, file {:?})",
                    self.arch,
                    self.from.as_ref().map(|f| &f.path)
                ),
            });
        }
        if self.batch == 0 {
            return Err(TrainError::Config {
                field: "batch",
                reason: "must be at least 1".into(),
            });
        }
        if !(self.held_out > 0.0 && self.held_out < 1.0) {
            return Err(TrainError::Config {
                field: "held_out",
                reason: format!("must be in (0, 1), got {}", self.held_out),
            });
        }
        if let Some(c) = self.clip_grad_norm {
            if !(c > 0.0 && c.is_finite()) {
                return Err(TrainError::Config {
                    field: "clip_grad_norm",
                    reason: format!("must be positive and finite, got {c}"),
                });
            }
        }
        Ok(self.optimizer.validate()?)
    }
}

/// The trainer's default optimizer: `torch.optim.SGD(lr, momentum=0.9)`.
pub fn sgd_momentum(lr: f64) -> OptimConfig {
    OptimConfig::Sgd {
        lr,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
    }
}

/// What the trainer reports as it goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<'a> {
    /// Before the first step: the total number of steps this run will take.
    Start {
        first_step: u64,
        last_step: u64,
        params: usize,
    },
    /// After step `step` (1-based) of `epoch` (0-based): its loss (before the update) and lr.
    Step {
        step: u64,
        epoch: u64,
        loss: f64,
        lr: f64,
    },
    /// A verified step: the worst relative deviation and the parameter it was in.
    Verified {
        step: u64,
        worst: f64,
        param: &'a str,
    },
    /// At the end of each epoch: held-out loss and accuracy.
    Epoch {
        epoch: u64,
        step: u64,
        held_out_loss: f64,
        held_out_accuracy: f64,
    },
}

/// Receives [`Event`]s (the CLI's progress bar and lines; a test's recorder).
pub trait Observer {
    fn event(&mut self, e: &Event<'_>);
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {
    fn event(&mut self, _: &Event<'_>) {}
}

/// The evaluation of a set at some parameters.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Eval {
    pub loss: f64,
    pub accuracy: f64,
}

/// What verified steps found.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VerifySummary {
    pub checks: u64,
    /// The worst relative deviation over every checked loss and gradient.
    pub worst: f64,
    pub worst_param: String,
    pub tolerance: f64,
    pub seconds: f64,
}

impl VerifySummary {
    /// Counts one verified step into `slot` (created on the first): its worst deviation, where,
    /// and its cost.
    pub(crate) fn record(
        slot: &mut Option<VerifySummary>,
        worst: f64,
        param: &str,
        tolerance: f64,
        seconds: f64,
    ) {
        let v = slot.get_or_insert_with(|| VerifySummary {
            checks: 0,
            worst: 0.0,
            worst_param: String::new(),
            tolerance,
            seconds: 0.0,
        });
        v.checks += 1;
        if worst >= v.worst || worst.is_nan() {
            v.worst = worst;
            v.worst_param = param.to_string();
        }
        v.seconds += seconds;
    }
}

/// The worst relative deviation of a step's `loss` and `grads` from the reference's
/// (`want_loss`, `want`), and where: `"loss"` or a parameter's name (a gradient missing on
/// either side counts as infinitely far).
pub(crate) fn worst_deviation<V: Kernels>(
    loss: f64,
    grads: &BTreeMap<String, V>,
    want_loss: f64,
    want: &BTreeMap<String, Tensor<f64>>,
) -> Result<(f64, String)> {
    let mut worst = (
        relative_deviation(&[loss], &[want_loss]),
        "loss".to_string(),
    );
    for (name, g_ref) in want {
        let dev = match grads.get(name) {
            Some(g) => relative_deviation(g.to_f64()?.data(), g_ref.data()),
            None => f64::INFINITY,
        };
        if dev.is_nan() || dev > worst.0 {
            worst = (dev, name.clone());
        }
    }
    for name in grads.keys().filter(|n| !want.contains_key(*n)) {
        worst = (f64::INFINITY, name.clone());
    }
    Ok(worst)
}

/// The outcome of a run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    pub arch: Arch,
    pub engine: &'static str,
    pub backend: &'static str,
    pub steps: u64,
    pub first_step: u64,
    /// Training-set loss and accuracy before the first step of this run, and after the last.
    pub train_before: Eval,
    pub train_after: Eval,
    pub held_out_before: Eval,
    pub held_out_after: Eval,
    /// Wall time of the steps (forward, backward, update; verification excluded).
    pub train_seconds: f64,
    /// Wall time of the held-out evaluations.
    pub eval_seconds: f64,
    pub verify: Option<VerifySummary>,
    /// `(step, loss)` of every step of this run.
    pub losses: Vec<(u64, f64)>,
    /// `(step, held-out loss, held-out accuracy)` at every epoch end.
    pub held_out: Vec<(u64, f64, f64)>,
}

/// The relative tolerance of a verified step for an engine of element type `T`. A correct f64
/// engine agrees with the reference to ~1e-14 (measured worst 3.7e-14 over a 30-epoch MLP run).
/// A correct f32 engine's deviation grows as training converges, because late gradients are
/// small sums of cancelling terms (a bias gradient sums 2,048 of them in the CNN): measured
/// worst 2.5e-4 (MLP, 30 epochs) and 9.1e-4 (CNN, 20 epochs, `0.bias`); 1e-2 leaves a margin
/// of 10 over that, while the faults this is meant to catch deviate by O(1) (an off-by-one
/// pooling window: 0.72 at the first verified step).
pub fn verify_tolerance<T: Element>() -> f64 {
    if T::NAME == "f64" {
        1e-9
    } else {
        1e-2
    }
}

/// `max |a − b| / max(max |b|, tiny)` — the deviation of a whole tensor relative to the
/// reference's scale (elementwise relative errors of entries near zero say nothing).
pub fn relative_deviation(a: &[f64], reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(reference)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    if a.iter().chain(reference).any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    diff / scale.max(f64::MIN_POSITIVE)
}

/// The buffer of a saved classifier holding each feature's mean, in the data file's units
/// (the digits' raw pixels, a CSV's values): the exported module subtracts it from its input.
pub const INPUT_MEAN: &str = "input_mean";

/// The buffer holding each feature's scale (standard deviation, 1 for a constant feature), in
/// the file's units: the exported module divides by it after subtracting [`INPUT_MEAN`].
pub const INPUT_SCALE: &str = "input_scale";

/// The input normalization's buffers, which a model file holds beside the parameters (saved in
/// f64 whatever the run's dtype, so the normalization is the trainer's to the bit).
pub const INPUT_BUFFERS: [&str; 2] = [INPUT_MEAN, INPUT_SCALE];

/// The batch size [`Trainer::evaluate`] uses.
const EVAL_BATCH: usize = 256;

/// Every batch size a run of `batch` on `train` and `held` examples uses: the training batches
/// (the last of an epoch may be short) and the evaluation ones.
fn batch_sizes(batch: usize, train: usize, held: usize) -> BTreeSet<usize> {
    let mut sizes = chunk_sizes(train, batch);
    sizes.extend(chunk_sizes(train, EVAL_BATCH));
    sizes.extend(chunk_sizes(held, EVAL_BATCH));
    sizes
}

/// The sizes of `n` rows taken `b` at a time: `b` (if there is a whole chunk) and the
/// remainder (if any).
pub(crate) fn chunk_sizes(n: usize, b: usize) -> BTreeSet<usize> {
    let mut sizes = BTreeSet::new();
    if n >= b {
        sizes.insert(b);
    }
    if !n.is_multiple_of(b) {
        sizes.insert(n % b);
    }
    sizes
}

/// A training run on engine `V` of a model `M`: a built-in [`Classifier`] ([`Trainer::new`])
/// or the program's own ([`Trainer::with_model`]).
pub struct Trainer<V: TrainValue, M: Classify = Classifier> {
    cfg: TrainConfig,
    model: M,
    /// The training and held-out sets, standardized by `standardizer`.
    train: Dataset,
    held: Dataset,
    standardizer: Standardizer,
    exec: Box<dyn Exec<V, M>>,
    optimizer: EngineOptimizer<V>,
    /// Global steps done.
    step: u64,
    /// When set (by a signal handler, another thread), [`Trainer::run`] stops before its next
    /// step with [`TrainError::Interrupted`].
    stop: Option<Arc<AtomicBool>>,
    /// The ranks this run is shared by (a world of one unless [`Trainer::set_world`]).
    world: World,
}

impl<V: TrainValue, M: Classify> std::fmt::Debug for Trainer<V, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("cfg", &self.cfg)
            .field("model", &self.model.description())
            .field("engine", &V::ENGINE)
            .field("step", &self.step)
            .finish()
    }
}

fn exec_for<V: TrainValue, M: Classify>(
    cfg: &TrainConfig,
    params: &BTreeMap<String, Tensor<f64>>,
) -> Result<Box<dyn Exec<V, M>>> {
    let mut exec: Box<dyn Exec<V, M>> = match cfg.backend {
        Interpreter::Eager => Box::new(EagerExec::<V>::new(params)?),
        Interpreter::Compiled => Box::new(CompiledExec::<V>::new(params)?),
    };
    exec.set_anomaly_mode(AnomalyMode::detect_if(cfg.detect_anomaly));
    Ok(exec)
}

impl<V: TrainValue> Trainer<V, Classifier> {
    /// A fresh run of `cfg` on `data` with the built-in model `cfg.arch` (or the one imported
    /// `cfg.from`), sized by the data and seeded by `cfg.seed`: [`Trainer::with_model`] of
    /// [`TrainConfig::classifier`].
    pub fn new(cfg: TrainConfig, data: &Dataset) -> Result<Self> {
        cfg.validate()?;
        let model = cfg.classifier(data.features(), data.image(), data.classes())?;
        Trainer::with_model(cfg, model, data)
    }

    /// A run restored from the checkpoint at `path` (and its optimizer file beside it) on
    /// `data`: the checkpoint's configuration, model, parameters, optimizer state and step.
    /// `data` must be the data set it was trained on (checked by feature and class count).
    pub fn resume(path: &Path, data: &Dataset) -> Result<Self> {
        Trainer::restore(path, data, |cfg| Trainer::new(cfg, data))
    }
}

impl<V: TrainValue, M: Classify> Trainer<V, M> {
    /// A fresh run of `cfg` training `model` on `data`: split into training and held-out sets
    /// by `cfg.seed` (stratified), both standardized with the training set's per-feature mean
    /// and standard deviation (which the checkpoint records, for whoever uses the model
    /// later). `cfg.arch` must be the model's ([`Arch::Custom`] for a model of your own, e.g.
    /// `TrainConfig::new(Arch::Custom)`), and the model must fit the data
    /// ([`check_fit`]: its example size, one logit per class, no buffers, no random draws).
    pub fn with_model(cfg: TrainConfig, mut model: M, data: &Dataset) -> Result<Self> {
        cfg.validate()?;
        if cfg.arch != model.arch() {
            return Err(TrainError::Config {
                field: "arch",
                reason: format!(
                    "the configuration is for model {} and the model given is {} (`{}`)",
                    cfg.arch,
                    model.arch(),
                    model.description()
                ),
            });
        }
        let (mut train, mut held) = data.split(cfg.held_out, cfg.seed)?;
        let standardizer = Standardizer::fit(&train);
        train.standardize(&standardizer)?;
        held.standardize(&standardizer)?;
        check_fit(&model, data.features(), data.classes())?;
        model.prepare(&batch_sizes(cfg.batch, train.len(), held.len()))?;
        let params: BTreeMap<String, Tensor<f64>> = model.initial_params()?.into_iter().collect();
        let exec = exec_for::<V, M>(&cfg, &params)?;
        let optimizer = EngineOptimizer::new(cfg.optimizer.clone())?;
        Ok(Trainer {
            cfg,
            model,
            train,
            held,
            standardizer,
            exec,
            optimizer,
            step: 0,
            stop: None,
            world: World::solo(),
        })
    }

    /// [`Trainer::resume`] for a model of your own: `model` must be the one the checkpoint at
    /// `path` was trained with (the same parameter names and shapes, checked); its parameters,
    /// the optimizer state and the step come from the checkpoint.
    pub fn resume_with(path: &Path, model: M, data: &Dataset) -> Result<Self> {
        Trainer::restore(path, data, |cfg| Trainer::with_model(cfg, model, data))
    }

    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }

    pub fn model(&self) -> &M {
        &self.model
    }

    pub fn train_set(&self) -> &Dataset {
        &self.train
    }

    pub fn held_out_set(&self) -> &Dataset {
        &self.held
    }

    /// Global steps done so far (including those before a resume).
    pub fn steps_done(&self) -> u64 {
        self.step
    }

    /// Batches in one epoch of the training set.
    pub fn batches_per_epoch(&self) -> u64 {
        self.train.len().div_ceil(self.cfg.batch) as u64
    }

    /// The training-set rows of global step `k` (0-based).
    pub fn batch_rows(&self, k: u64) -> Vec<usize> {
        let per = self.batches_per_epoch();
        let order = epoch_order(self.train.len(), self.cfg.seed, k / per);
        let b = self.cfg.batch;
        let start = (k % per) as usize * b;
        order[start..(start + b).min(order.len())].to_vec()
    }

    /// The step at which this run stops.
    pub fn last_step(&self) -> u64 {
        self.cfg
            .steps
            .unwrap_or(self.cfg.epochs.saturating_mul(self.batches_per_epoch()))
    }

    /// Changes where the run stops (a resumed run's `--steps` / `--epochs`).
    pub fn set_stop(&mut self, epochs: u64, steps: Option<u64>) {
        self.cfg.epochs = epochs;
        self.cfg.steps = steps;
    }

    /// A flag [`Trainer::run`] reads between steps: once it is `true`, the run stops before
    /// its next step with [`TrainError::Interrupted`], every piece of state consistent at that
    /// step, so [`Trainer::save`] then writes a checkpoint that resumes bit for bit. The
    /// library installs no signal handler; the caller sets the flag (the CLI: on SIGINT).
    pub fn set_stop_flag(&mut self, flag: Arc<AtomicBool>) {
        self.stop = Some(flag);
    }

    /// The training examples of `rows`, shaped as the model takes a batch, and their labels.
    fn examples(&self, rows: &[usize]) -> Result<(Tensor<f64>, Vec<usize>)> {
        let (x, y) = self.train.batch(rows)?;
        Ok((x.reshaped(self.model.batch_shape(rows.len()))?, y))
    }

    /// Whether the stop flag is set (on several ranks: on any rank, every rank answering the
    /// same).
    fn stop_requested(&self) -> Result<bool> {
        let here = self.stop.as_ref().is_some_and(|f| f.load(Ordering::SeqCst));
        if self.world.size() == 1 {
            return Ok(here);
        }
        Ok(self.world.any(here)?)
    }

    /// Shares every following step with the ranks of `world` (see [`crate::data_parallel`]):
    /// the parameters become rank 0's, each rank computes its share of every batch's rows, and
    /// the ranks sum their gradients before each update, so the run takes the steps one
    /// process takes. Evaluations run whole on every rank (the same parameters, the same
    /// result). Only rank 0 verifies. Refused when a rank would get no rows of some batch (the
    /// short last batch of an epoch included); the trainer keeps `world` even then (for the
    /// caller to end the job through it), and should not be run.
    pub fn set_world(&mut self, world: World) -> Result<()> {
        self.world = world;
        let world = &self.world;
        dp::check_epoch_batches(world.size(), self.train.len(), self.cfg.batch)?;
        let (n, whole) = (
            world.size(),
            batch_sizes(self.cfg.batch, self.train.len(), self.held.len()),
        );
        let shares: BTreeSet<usize> = whole
            .iter()
            .flat_map(|&b| (0..n).map(move |r| torchlean_distributed::share(b, n, r).len()))
            .collect();
        self.model.prepare(&shares)?;
        dp::broadcast_params(world, self.exec.params_mut().into_iter().map(|(_, v)| v))
    }

    /// The ranks this run is shared by.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// Sets the learning-rate schedule (`--schedule`, whose lengths depend on
    /// [`Trainer::last_step`]), validated. On a resumed run it applies as if the run had had it
    /// from step 0: the rate of step `k` is the new schedule's at `k` (PyTorch's scheduler
    /// state is its step count, which the run keeps); the optimizer state is kept.
    pub fn set_schedule(&mut self, schedule: Schedule) -> Result<()> {
        schedule.validate()?;
        self.cfg.schedule = schedule;
        Ok(())
    }

    /// Sets the base learning rate (a resumed run's `--lr`): the schedule scales the new rate
    /// from the next step on; the optimizer state (momentum, Adam's moments) is kept.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        let optimizer = self.cfg.optimizer.clone().with_lr(lr);
        optimizer.validate()?;
        self.optimizer.set_lr(lr)?;
        self.cfg.optimizer = optimizer;
        Ok(())
    }

    /// Sets the batch size of a resumed run (`--batch`). Steps count batches, so the step
    /// count becomes the new size's at the same place in the same epoch: the epoch's rows
    /// seen so far, rounded up to whole new batches (so at most `batch − 1` rows of the epoch
    /// under way are skipped; none when the run is at an epoch boundary). The epochs' row
    /// orders do not depend on the batch size, and the optimizer state is kept. Returns the
    /// new step count.
    pub fn set_batch(&mut self, batch: usize) -> Result<u64> {
        let mut cfg = self.cfg.clone();
        cfg.batch = batch;
        cfg.validate()?;
        self.model
            .prepare(&batch_sizes(batch, self.train.len(), self.held.len()))?;
        let (per, n) = (self.batches_per_epoch(), self.train.len() as u64);
        let (epoch, seen) = (self.step / per, (self.step % per) * self.cfg.batch as u64);
        self.cfg = cfg;
        let per = self.batches_per_epoch();
        self.step = epoch * per + seen.min(n).div_ceil(batch as u64);
        Ok(self.step)
    }

    /// Changes how often steps are verified.
    pub fn set_verify_every(&mut self, every: Option<u64>) {
        self.cfg.verify_every = every;
    }

    /// Turns anomaly mode on or off (for a resumed run).
    pub fn set_detect_anomaly(&mut self, on: bool) {
        self.cfg.detect_anomaly = on;
        self.exec.set_anomaly_mode(AnomalyMode::detect_if(on));
    }

    /// The current parameters as `f64` data, by name.
    pub fn params_f64(&self) -> Result<BTreeMap<String, Tensor<f64>>> {
        self.exec
            .params()
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.to_f64()?)))
            .collect()
    }

    /// Loss and accuracy of the current parameters on `set`, in batches.
    pub fn evaluate(&mut self, held_out: bool) -> Result<Eval> {
        let set = if held_out { &self.held } else { &self.train };
        let n = set.len();
        let (mut loss, mut correct) = (0.0, 0);
        let rows: Vec<usize> = (0..n).collect();
        for chunk in rows.chunks(EVAL_BATCH) {
            let (x, y) = set.batch(chunk)?;
            let x = x.reshaped(self.model.batch_shape(chunk.len()))?;
            let (l, c) =
                self.exec
                    .evaluate(&self.model, &x, &y)
                    .map_err(|e| TrainError::Evaluating {
                        set: if held_out { "held-out" } else { "training" },
                        batch: EVAL_BATCH,
                        source: Box::new(e),
                    })?;
            loss += l;
            correct += c;
        }
        Ok(Eval {
            loss: loss / n.max(1) as f64,
            accuracy: correct as f64 / n.max(1) as f64,
        })
    }

    /// Runs the steps from the current one to [`Trainer::last_step`]. With a stop flag
    /// ([`Trainer::set_stop_flag`]) set, returns [`TrainError::Interrupted`] at the first step
    /// boundary after it was set (the steps done were reported to `obs`).
    pub fn run(&mut self, obs: &mut dyn Observer) -> Result<Summary> {
        let first_step = self.step;
        let last = self.last_step();
        let t_eval = Instant::now();
        let train_before = self.evaluate(false)?;
        let held_out_before = self.evaluate(true)?;
        let mut eval_time = t_eval.elapsed();
        obs.event(&Event::Start {
            first_step,
            last_step: last,
            params: self.exec.params().values().map(|v| v.shape().size()).sum(),
        });
        let mut losses = Vec::new();
        let mut held_out = Vec::new();
        let mut train_time = Duration::ZERO;
        let mut verify: Option<VerifySummary> = None;
        let per = self.batches_per_epoch();
        let mut sched = Scheduler::resume(
            self.cfg.schedule.clone(),
            self.cfg.optimizer.lr(),
            self.step,
        )?;
        while self.step < last {
            if self.stop_requested()? {
                return Err(TrainError::Interrupted { step: self.step });
            }
            let k = self.step;
            let rows = self.batch_rows(k);
            let mine = &rows[self.world.share(rows.len())];
            let (x, y) = self.examples(mine)?;
            let lr = sched.lr();
            let verify_now = self.world.is_root()
                && matches!(self.cfg.verify_every, Some(n) if n > 0 && (k + 1).is_multiple_of(n));
            let t = Instant::now();
            let mut out = self
                .exec
                .step(&self.model, &x, &y)
                .map_err(|e| e.at_step(k + 1))?;
            out.loss = dp::all_reduce_mean(
                &self.world,
                &mut out.grads,
                out.loss,
                mine.len(),
                rows.len(),
            )?;
            train_time += t.elapsed();
            if !out.loss.is_finite() {
                return Err(TrainError::NonFiniteLoss {
                    step: k + 1,
                    loss: out.loss,
                });
            }
            if verify_now {
                // the global batch, whose loss and gradients the all-reduce gave
                let global;
                let (x, y) = if mine.len() == rows.len() {
                    (&x, &y)
                } else {
                    global = self.examples(&rows)?;
                    (&global.0, &global.1)
                };
                self.verify(k + 1, x, y, &out, &mut verify, obs)?;
            }
            let t = Instant::now();
            self.update(lr, out.grads)?;
            train_time += t.elapsed();
            self.step += 1;
            sched.step();
            losses.push((self.step, out.loss));
            obs.event(&Event::Step {
                step: self.step,
                epoch: k / per,
                loss: out.loss,
                lr,
            });
            dp::check_in_sync_if_due(
                &self.world,
                self.exec.params(),
                self.step,
                self.step == last,
            )?;
            if self.step.is_multiple_of(per) || self.step == last {
                let t = Instant::now();
                let e = self.evaluate(true)?;
                eval_time += t.elapsed();
                held_out.push((self.step, e.loss, e.accuracy));
                obs.event(&Event::Epoch {
                    epoch: k / per,
                    step: self.step,
                    held_out_loss: e.loss,
                    held_out_accuracy: e.accuracy,
                });
            }
        }
        let t = Instant::now();
        let train_after = self.evaluate(false)?;
        let held_out_after = self.evaluate(true)?;
        eval_time += t.elapsed();
        Ok(Summary {
            arch: self.cfg.arch,
            engine: V::ENGINE,
            backend: self.cfg.backend.name(),
            steps: self.step - first_step,
            first_step,
            train_before,
            train_after,
            held_out_before,
            held_out_after,
            train_seconds: train_time.as_secs_f64(),
            eval_seconds: eval_time.as_secs_f64(),
            verify,
            losses,
            held_out,
        })
    }

    /// Clips (if asked) and applies the optimizer to every parameter with a gradient, where the
    /// values are ([`EngineOptimizer::step`]: on the device for CUDA, in place on a host
    /// engine), after clipping the gradients where they are ([`TrainValue::clip_to_norm`]).
    fn update(&mut self, lr: f64, mut grads: BTreeMap<String, V>) -> Result<()> {
        if let Some(max) = self.cfg.clip_grad_norm {
            let mut all: Vec<&mut V> = grads.values_mut().collect();
            V::clip_to_norm(&mut all, Some(max))?;
        }
        let mut batch: Vec<(&str, &mut V, &V)> = self
            .exec
            .params_mut()
            .into_iter()
            .filter_map(|(name, value)| Some((name, value, grads.get(name)?)))
            .collect();
        self.optimizer.step(lr, &mut batch)?;
        drop(batch);
        for (_, g) in grads {
            g.drop();
        }
        Ok(())
    }

    /// Verifies step `step` (1-based) before its update: the parameters are still those the
    /// step ran with. Records the check in `summary`, reports it to `obs`, and fails when the
    /// deviation exceeds the dtype's tolerance.
    fn verify(
        &self,
        step: u64,
        x: &Tensor<f64>,
        labels: &[usize],
        out: &StepOut<V>,
        summary: &mut Option<VerifySummary>,
        obs: &mut dyn Observer,
    ) -> Result<()> {
        let t = Instant::now();
        let (worst, param) =
            self.verify_step(&self.params_f64()?, x, labels, out.loss, &out.grads)?;
        let tol = verify_tolerance::<V::Elem>();
        VerifySummary::record(summary, worst, &param, tol, t.elapsed().as_secs_f64());
        obs.event(&Event::Verified {
            step,
            worst,
            param: &param,
        });
        if worst.is_nan() || worst > tol {
            return Err(TrainError::VerifyFailed {
                step,
                param,
                deviation: worst,
                tolerance: tol,
                engine: V::ENGINE,
            });
        }
        Ok(())
    }

    /// Recomputes the step on the reference engine in f64 from `params`; returns the worst
    /// relative deviation of the loss and the gradients, and where it was.
    fn verify_step(
        &self,
        params: &BTreeMap<String, Tensor<f64>>,
        x: &Tensor<f64>,
        labels: &[usize],
        loss: f64,
        grads: &BTreeMap<String, V>,
    ) -> Result<(f64, String)> {
        let mut reference = EagerExec::<Tensor<f64>>::new(params)?;
        let want = reference.step(&self.model, x, labels)?;
        worst_deviation(loss, grads, want.loss, &want.grads)
    }

    // ---- checkpoints ----

    /// The run's state as two checkpoints. The model file holds the parameters under their
    /// PyTorch names and the input normalization's buffers ([`INPUT_BUFFERS`], f64, in the data
    /// file's units): the `state_dict` of the module `torchlean export-torch` writes for it (so
    /// `load_state_dict(safetensors.torch.load_file(path))` works with `strict=True`), with
    /// the metadata to resume and to predict (config, step, dtype, standardizer, class and
    /// feature names) as safetensors metadata; the optimizer file
    /// ([`optimizer_path`]) holds `state.<param>.<buffer>` tensors and the step counts. Both
    /// carry one `save_id`, so a pair from different saves is refused on resume.
    pub fn checkpoint(&self) -> Result<(Checkpoint, Checkpoint)> {
        let save_id = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let mut tensors = BTreeMap::new();
        for (name, v) in self.exec.params() {
            tensors.insert(name.clone(), named(v.shape().dims(), &v.read()?));
        }
        // the input normalization, in the file's units, as buffers of the exported module
        let raw = self.standardizer.in_file_units(self.train.input_divisor());
        for (name, values) in [(INPUT_MEAN, raw.mean()), (INPUT_SCALE, raw.scale())] {
            tensors.insert(name.to_string(), named(&[values.len()], values));
        }
        let mut optim = BTreeMap::new();
        let mut steps = BTreeMap::new();
        for (pname, st) in &self.optimizer.host_state()? {
            let shape = self
                .exec
                .params()
                .get(pname)
                .map(|v| v.shape().dims().to_vec())
                .unwrap_or_default();
            for (buf, data) in &st.buffers {
                optim.insert(format!("state.{pname}.{buf}"), named(&shape, data));
            }
            steps.insert(pname.clone(), st.step);
        }
        let meta = serde_json::json!({
            "format": CHECKPOINT_FORMAT,
            "save_id": save_id,
            "config": self.cfg,
            "step": self.step,
            "dtype": V::Elem::NAME,
            "engine": V::ENGINE,
            "model": {
                "arch": self.model.arch(),
                "features": self.train.features(),
                "classes": self.train.classes(),
                "image": self.train.image(),
                "torch": self.model.description(),
                "class_names": self.train.class_names(),
                "feature_names": self.train.feature_names(),
                "input_divisor": self.train.input_divisor(),
            },
            "standardize": self.standardizer,
        });
        let optim_meta = serde_json::json!({
            "format": OPTIMIZER_FORMAT,
            "save_id": save_id,
            "optimizer": self.cfg.optimizer,
            "steps": steps,
        });
        let file = |tensors, meta: serde_json::Value| {
            let mut metadata = BTreeMap::new();
            metadata.insert("torchlean".to_string(), meta.to_string());
            Checkpoint { tensors, metadata }
        };
        Ok((file(tensors, meta), file(optim, optim_meta)))
    }

    /// Writes [`Trainer::checkpoint`] to `path` and [`optimizer_path`]`(path)`, each
    /// atomically: the optimizer file first, so an interrupted save leaves either the old pair
    /// or a new optimizer file beside the old model file, which resume refuses by `save_id`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let (model, optim) = self.checkpoint()?;
        optim.save(&optimizer_path(path))?;
        model.save(path)
    }

    /// Starts a fresh run from the parameters of the `state_dict` at `path` (PyTorch's
    /// `safetensors.torch.save_file(model.state_dict(), path)`, or a run's `--save` file) instead
    /// of the seeded initialisation; call it before the first step. The names must be exactly
    /// the model's (`nn.Sequential` names, PyTorch's `load_state_dict(strict=True)`): one
    /// [`TrainError::CheckpointNames`] lists every missing, unexpected and mis-shaped one, and
    /// on any error the run is unchanged.
    pub fn init_from(&mut self, path: &Path) -> Result<()> {
        let params = model_params(Checkpoint::load(path)?, &self.model)?;
        self.exec = exec_for::<V, M>(&self.cfg, &params)?;
        Ok(())
    }

    /// The run of the checkpoint at `path` (and its optimizer file beside it) on `data`: its
    /// configuration handed to `fresh` for a new run, whose parameters, optimizer state and
    /// step are then the checkpoint's.
    fn restore(
        path: &Path,
        data: &Dataset,
        fresh: impl FnOnce(TrainConfig) -> Result<Self>,
    ) -> Result<Self> {
        let ck = Checkpoint::load_checked(path)?;
        let bad = |problem| TrainError::Checkpoint {
            path: path.to_path_buf(),
            problem,
        };
        let meta = ck.torchlean_metadata(path, CHECKPOINT_FORMAT, "train checkpoint")?;
        let json = |field| crate::checkpoint::metadata_error(path, field);
        if meta["dtype"] != V::Elem::NAME {
            return Err(bad(CheckpointProblem::Dtype {
                saved: meta["dtype"].as_str().unwrap_or("?").to_string(),
                here: V::Elem::NAME,
            }));
        }
        let cfg: TrainConfig =
            serde_json::from_value(meta["config"].clone()).map_err(json("config"))?;
        let (features, classes) = (&meta["model"]["features"], &meta["model"]["classes"]);
        if features.as_u64() != Some(data.features() as u64)
            || classes.as_u64() != Some(data.classes() as u64)
        {
            return Err(bad(CheckpointProblem::DataShape {
                features: features.as_u64(),
                classes: classes.as_u64(),
                data_features: data.features(),
                data_classes: data.classes(),
            }));
        }
        let step = meta["step"].as_u64().ok_or_else(|| {
            bad(CheckpointProblem::FieldType {
                field: "step",
                expected: "a count",
            })
        })?;
        let mut t = fresh(cfg)?;
        let params = model_params(ck, &t.model)?;
        t.exec = exec_for::<V, M>(&t.cfg, &params)?;
        // the engine's own precision, exactly: f32 data converted to f64 and back is the same
        let opath = optimizer_path(path);
        let oc = Checkpoint::load_checked(&opath)?;

        let ometa = oc.torchlean_metadata(&opath, OPTIMIZER_FORMAT, "optimizer file")?;
        if ometa["save_id"] != meta["save_id"] {
            return Err(TrainError::Checkpoint {
                path: opath.clone(),
                problem: CheckpointProblem::OtherSave {
                    model: path.to_path_buf(),
                    found: ometa["save_id"].to_string(),
                    expected: meta["save_id"].to_string(),
                },
            });
        }
        let mut state = BTreeMap::new();
        let steps = ometa["steps"].as_object().cloned().unwrap_or_default();
        for (pname, st) in steps {
            let mut buffers = BTreeMap::new();
            let prefix = format!("state.{pname}.");
            for (name, nt) in oc.tensors.range(prefix.clone()..) {
                let Some(buf) = name.strip_prefix(&prefix) else {
                    break;
                };
                buffers.insert(buf.to_string(), elements::<V::Elem>(nt));
            }
            state.insert(
                pname,
                ParamState {
                    step: st.as_u64().unwrap_or(0),
                    buffers,
                },
            );
        }
        let params = t.exec.params();
        t.optimizer
            .load_state(state, |name| params.get(name).map(|v| v.shape_of().clone()))?;
        t.step = step;
        Ok(t)
    }
}

/// The parameters of `model` in the model file `ck` as f64 data, by name, the input
/// normalization's buffers ([`INPUT_BUFFERS`]) set aside: every missing, unexpected and
/// mis-shaped name reported at once ([`Checkpoint::check_names`]).
pub(crate) fn model_params<M: Classify>(
    ck: Checkpoint,
    model: &M,
) -> Result<BTreeMap<String, Tensor<f64>>> {
    let ck = ck.without(&INPUT_BUFFERS);
    let shapes = model.param_shapes()?;
    ck.check_names(&shapes, "")?;
    shapes
        .into_iter()
        .map(|(name, shape)| {
            let t = Tensor::new(shape, tensor_f64(&ck.tensors[&name]))?;
            Ok((name, t))
        })
        .collect()
}

pub(crate) fn named<T: Element>(shape: &[usize], data: &[T]) -> NamedTensor {
    let data = if T::NAME == "f64" {
        TensorData::F64(
            data.iter()
                .map(|v| v.to_f64().unwrap_or(f64::NAN))
                .collect(),
        )
    } else {
        TensorData::F32(
            data.iter()
                .map(|v| v.to_f32().unwrap_or(f32::NAN))
                .collect(),
        )
    };
    NamedTensor {
        shape: shape.to_vec(),
        data,
    }
}

pub(crate) fn tensor_f64(t: &NamedTensor) -> Vec<f64> {
    match &t.data {
        TensorData::F32(d) => d.iter().map(|&v| v as f64).collect(),
        TensorData::F64(d) => d.clone(),
    }
}

fn elements<T: Element>(t: &NamedTensor) -> Vec<T> {
    tensor_f64(t)
        .into_iter()
        .map(|v| T::from_f64(v).unwrap_or_else(T::nan))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_are_the_full_and_short_batches_of_training_and_evaluation() {
        // 100 training rows in 32s: 32 and a last batch of 4; evaluated in one short batch of
        // 100 (under 256); 300 held out: 256 and 44
        let want: BTreeSet<usize> = [4, 32, 44, 100, 256].into();
        assert_eq!(batch_sizes(32, 100, 300), want);
        // a batch larger than the training set is the set
        assert_eq!(batch_sizes(64, 10, 5), [5, 10].into());
        // whole batches only
        assert_eq!(batch_sizes(8, 512, 256), [8, 256].into());
    }
}
