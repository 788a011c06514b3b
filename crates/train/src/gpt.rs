//! Training a GPT on character-level text: nanoGPT's `train.py` loop for `shakespeare_char`.
//!
//! Each step draws a batch of random contexts ([`TextCorpus::batch`], a pure function of the
//! seed and the step), runs the loss and the releasing backward on an eager [`Session`], clips
//! the gradients' global norm, and steps AdamW — decoupled weight decay on the parameters of
//! rank ≥ 2 only, as nanoGPT's `configure_optimizers` groups them — at the learning rate of
//! [`GptTrainConfig::lr_at`] (linear warm-up, then cosine to `min_lr` at the last step). Every
//! `eval_interval` steps (and at the end) the mean loss over `eval_iters` batches of each split
//! is estimated in evaluation mode.
//!
//! A checkpoint is one safetensors file: the parameters under nanoGPT's `state_dict` names
//! (`lm_head.weight` beside `transformer.wte.weight`, the same values, so that
//! `load_state_dict(strict=True)` accepts it), the AdamW state under `optimizer.`, and in the
//! metadata the configuration, the step and the vocabulary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use torchlean_distributed::World;
use torchlean_nn::{Gpt, GptConfig, Mode, Session, Sweep};
use torchlean_runtime::{Element, Kernels, TrainValue};
use torchlean_spec::{ops::splitmix64, Shape, Tensor};

use crate::checkpoint::{Checkpoint, NamedTensor, OPTIMIZER_PREFIX};
use crate::data::{CharTokenizer, Draw, Split, TextCorpus, TokenBatch};
use crate::data_parallel as dp;
use crate::error::{CheckpointProblem, Result, TrainError};
use crate::optim::{EngineOptimizer, OptimConfig};
use crate::trainer::{named, tensor_f64, verify_tolerance, worst_deviation, VerifySummary};
use std::time::Instant;

/// The `format` of a GPT checkpoint's `torchlean` metadata.
pub const GPT_CHECKPOINT_FORMAT: &str = "torchlean.gpt-checkpoint.v1";

/// The name of the head's weight in nanoGPT's `state_dict` (tied to `transformer.wte.weight`).
const LM_HEAD: &str = "lm_head.weight";
/// The tied embedding's name.
const WTE: &str = "transformer.wte.weight";

/// The streams of [`Draw`]: training steps, and each split's evaluation batches.
const TRAIN_STREAM: u64 = 0;
const EVAL_STREAMS: [(Split, u64); 2] = [(Split::Train, 1), (Split::Val, 2)];

/// Everything a GPT run is: the model's sizes and nanoGPT's training settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GptTrainConfig {
    /// The model (its `vocab` is the corpus's).
    pub model: GptConfig,
    /// Contexts per step.
    pub batch: usize,
    /// Steps in all.
    pub iters: u64,
    /// Evaluate every this many steps (and after the last).
    pub eval_interval: u64,
    /// Batches per split in an evaluation.
    pub eval_iters: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// The learning rate at the last step.
    pub min_lr: f64,
    /// Steps of linear warm-up.
    pub warmup: u64,
    /// AdamW's decoupled weight decay, on parameters of rank ≥ 2 only.
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    /// The gradients' global norm is clipped to this (0: no clipping).
    pub grad_clip: f64,
    /// Seeds the initialisation, the batches and dropout.
    pub seed: u64,
}

impl GptTrainConfig {
    /// nanoGPT's `shakespeare_char` configuration scaled for a CPU (its README's laptop
    /// settings): 4 layers, 4 heads, 128 wide, block 64, batch 12, 2000 steps, AdamW at 1e-3
    /// with betas (0.9, 0.99), weight decay 0.1, 100 warm-up steps, cosine to 1e-4, clipping
    /// at 1.0, no dropout. `vocab` is 0 until a corpus sets it.
    pub fn shakespeare_char() -> GptTrainConfig {
        GptTrainConfig {
            model: GptConfig {
                vocab: 0,
                block: 64,
                n_layer: 4,
                n_head: 4,
                n_embd: 128,
                dropout: 0.0,
            },
            batch: 12,
            iters: 2000,
            eval_interval: 250,
            eval_iters: 20,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup: 100,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.99,
            grad_clip: 1.0,
            seed: 1337,
        }
    }

    /// nanoGPT's `get_lr(it)` with `lr_decay_iters = iters`: `lr·(it+1)/(warmup+1)` during the
    /// warm-up, then a cosine from `lr` down to `min_lr` at step `iters`.
    pub fn lr_at(&self, it: u64) -> f64 {
        if it < self.warmup {
            return self.lr * (it + 1) as f64 / (self.warmup + 1) as f64;
        }
        if it > self.iters {
            return self.min_lr;
        }
        let span = self.iters.saturating_sub(self.warmup).max(1) as f64;
        let ratio = (it - self.warmup) as f64 / span;
        let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
        self.min_lr + coeff * (self.lr - self.min_lr)
    }

    fn check(&self) -> Result<()> {
        let bad = |field: &'static str, value: f64, expected: &'static str| {
            Err(TrainError::GptSetting {
                owner: "gpt",
                field,
                value,
                expected,
            })
        };
        if self.batch == 0 {
            return bad("batch", 0.0, "> 0");
        }
        if self.eval_interval == 0 {
            return bad("eval_interval", 0.0, "> 0");
        }
        if self.eval_iters == 0 {
            return bad("eval_iters", 0.0, "> 0");
        }
        for (field, v) in [
            ("lr", self.lr),
            ("min_lr", self.min_lr),
            ("weight_decay", self.weight_decay),
            ("grad_clip", self.grad_clip),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(field, v, "finite and >= 0");
            }
        }
        for (field, v) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&v) {
                return bad(field, v, "in [0, 1)");
            }
        }
        Ok(())
    }

    fn adamw(&self, weight_decay: f64) -> OptimConfig {
        OptimConfig::AdamW {
            lr: self.lr,
            betas: (self.beta1, self.beta2),
            eps: 1e-8,
            weight_decay,
            amsgrad: false,
        }
    }
}

/// One evaluation: the mean loss over `eval_iters` batches of each split.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GptEval {
    pub step: u64,
    pub train_loss: f64,
    pub val_loss: f64,
}

/// What a run reports as it goes.
#[derive(Clone, Copy, Debug)]
pub enum GptEvent {
    /// Step `step` (1-based) is done: its loss, the learning rate it used, the gradients'
    /// global norm before clipping.
    Step {
        step: u64,
        loss: f64,
        lr: f64,
        grad_norm: f64,
    },
    /// An evaluation after step `step`.
    Eval(GptEval),
    /// Step `step` was recomputed on the reference engine in f64: the worst relative deviation
    /// of the loss and the gradients, and where it was (`--verify-every`).
    Verified { step: u64, worst: f64 },
    /// The run was written to its checkpoint after step `step` (`set_save_every`).
    Saved { step: u64 },
}

/// A GPT run on engine `V`.
pub struct GptTrainer<V: TrainValue> {
    cfg: GptTrainConfig,
    corpus: TextCorpus,
    gpt: Gpt,
    session: Session<V>,
    /// AdamW over the parameters of rank ≥ 2 (decayed) and over the others (not).
    decayed: EngineOptimizer<V>,
    plain: EngineOptimizer<V>,
    step: u64,
    evals: u64,
    /// Recompute every this many steps on the reference engine (`None`: never).
    verify_every: Option<u64>,
    verify: Option<VerifySummary>,
    /// The last step's verification, for [`GptTrainer::run`] to report.
    verified: Option<f64>,
    /// The ranks this run is shared by (a world of one unless [`GptTrainer::set_world`]).
    world: World,
    /// Write the run to this checkpoint every this many steps (rank 0).
    save_every: Option<(u64, PathBuf)>,
    /// Time spent in the training steps' gradient all-reduce (several ranks).
    all_reduce: std::time::Duration,
    /// The gradient all-reduce's bucket size ([`GptTrainer::set_bucket_bytes`]).
    bucket_bytes: usize,
}

impl<V: TrainValue> std::fmt::Debug for GptTrainer<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GptTrainer")
            .field("cfg", &self.cfg)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl<V: TrainValue> GptTrainer<V> {
    /// A fresh run on `corpus` (the model's vocabulary becomes the corpus's).
    pub fn new(mut cfg: GptTrainConfig, corpus: TextCorpus) -> Result<Self> {
        cfg.model.vocab = corpus.tokenizer().vocab_size();
        cfg.check()?;
        let gpt = Gpt::new(cfg.model, cfg.seed)?;
        let mut session = Session::<V>::new();
        // register every parameter, at its initial value
        gpt.logits(&mut session, &[0], 1, Mode::Eval)?;
        session.reset();
        Ok(GptTrainer {
            decayed: EngineOptimizer::new(cfg.adamw(cfg.weight_decay))?,
            plain: EngineOptimizer::new(cfg.adamw(0.0))?,
            cfg,
            corpus,
            gpt,
            session,
            step: 0,
            evals: 0,
            verify_every: None,
            verify: None,
            verified: None,
            world: World::solo(),
            save_every: None,
            all_reduce: std::time::Duration::ZERO,
            bucket_bytes: 0,
        })
    }

    /// Shares every following step with the ranks of `world` (see
    /// [`crate::data_parallel`]): the parameters become rank 0's, each rank computes its share
    /// of every global batch, and the ranks sum their gradients before each update, so the
    /// run takes the steps one process would take on the whole batch. Only rank 0 verifies
    /// (`set_verify_every`) and saves (`set_save_every`). Refused when a rank would get no
    /// rows, or with dropout; the trainer keeps `world` even then (for the caller to end the
    /// job through it), and should not be stepped.
    pub fn set_world(&mut self, world: World) -> Result<()> {
        self.world = world;
        let world = &self.world;
        dp::check_batch(world.size(), self.cfg.batch)?;
        if world.size() > 1 && self.cfg.model.dropout > 0.0 {
            return Err(TrainError::DropoutOnRanks {
                dropout: self.cfg.model.dropout,
                ranks: world.size(),
            });
        }
        dp::broadcast_params(world, self.session.params_mut().map(|(_, v)| v))
    }

    /// Writes the run to `path` ([`GptTrainer::save`], atomically) after every `every`-th
    /// step, on rank 0 only; [`GptTrainer::run`] reports each as [`GptEvent::Saved`].
    pub fn set_save_every(&mut self, every: u64, path: PathBuf) {
        self.save_every = (every > 0).then_some((every, path));
    }

    /// On several ranks, the gradients go to the other ranks in buckets of about `bytes` as
    /// the backward sweep finishes them, overlapping the rest of the sweep
    /// ([`dp::backward_all_reduced`]); 0, the default, sends them all after the sweep (on one
    /// machine whose cores all compute, overlap did not pay: `docs/distributed.md`). The steps
    /// are the same, bit for bit, either way.
    pub fn set_bucket_bytes(&mut self, bytes: usize) {
        self.bucket_bytes = bytes;
    }

    /// The ranks this run is shared by.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// Seconds this rank spent waiting for the training steps' gradient all-reduce so far,
    /// once its own backward sweep was done (the wait for the slowest rank included; what
    /// buckets sent during the sweep hid is not counted; 0 in a world of one).
    pub fn all_reduce_seconds(&self) -> f64 {
        self.all_reduce.as_secs_f64()
    }

    /// Recompute every `every`-th step's loss and gradients on the reference engine in f64
    /// from the same parameters and batch; a deviation beyond the dtype's tolerance
    /// ([`verify_tolerance`]) fails the step with [`TrainError::VerifyFailed`].
    pub fn set_verify_every(&mut self, every: Option<u64>) {
        self.verify_every = every.filter(|&n| n > 0);
    }

    /// What the verified steps found so far.
    pub fn verify_summary(&self) -> Option<&VerifySummary> {
        self.verify.as_ref()
    }

    pub fn config(&self) -> &GptTrainConfig {
        &self.cfg
    }

    pub fn corpus(&self) -> &TextCorpus {
        &self.corpus
    }

    pub fn model(&self) -> &Gpt {
        &self.gpt
    }

    /// Sets the total number of steps (a resumed run continued further; the cosine schedule
    /// then decays to `min_lr` at the new total).
    pub fn set_iters(&mut self, iters: u64) {
        self.cfg.iters = iters;
    }

    /// How often to evaluate, and on how many batches per split (a resumed run may change
    /// it); both must be positive.
    pub fn set_eval(&mut self, interval: u64, iters: u64) -> Result<()> {
        let mut c = self.cfg.clone();
        c.eval_interval = interval;
        c.eval_iters = iters;
        c.check()?;
        self.cfg = c;
        Ok(())
    }

    /// Steps done.
    pub fn steps_done(&self) -> u64 {
        self.step
    }

    /// The parameters by name (nanoGPT's, without the tied `lm_head.weight`).
    pub fn params(&self) -> &BTreeMap<String, V> {
        self.session.params()
    }

    /// The batch of training step `step` (0-based): a pure function of the seed and the step.
    pub fn batch_of(&self, step: u64) -> TokenBatch {
        let draw = Draw {
            seed: self.cfg.seed,
            stream: TRAIN_STREAM,
            step,
        };
        self.corpus
            .batch(Split::Train, self.cfg.batch, self.cfg.model.block, draw)
    }

    /// One training step; returns its event.
    pub fn step(&mut self) -> Result<GptEvent> {
        let lr = self.cfg.lr_at(self.step);
        let batch = self.cfg.batch;
        let global = self.batch_of(self.step);
        let rows = self.world.share(batch);
        let (b, n) = (global.rows(rows.clone()), rows.len());
        let s = &mut self.session;
        let (world, bucket_bytes) = (&self.world, self.bucket_bytes);
        let run = (|| {
            let loss = self.gpt.loss(s, &b.ids, &b.targets, n, Mode::Train)?;
            dp::backward_all_reduced(world, s, &loss, n, batch, bucket_bytes)
        })();
        s.reset();
        let dp::Reduced {
            mut grads,
            loss,
            exposed,
        } = run?;
        self.all_reduce += exposed;
        self.verified = None;
        if self.world.is_root()
            && self
                .verify_every
                .is_some_and(|n| (self.step + 1).is_multiple_of(n))
        {
            let loss = V::scalars(&[&loss])?[0];
            self.verify_step(&global, loss, &grads)?;
        }
        let norm = clip(&mut grads, self.cfg.grad_clip)?;
        let (mut decayed, mut plain) = (Vec::new(), Vec::new());
        for (name, p) in self.session.params_mut() {
            let Some(g) = grads.get(name) else { continue };
            let group = if p.shape_of().rank() >= 2 {
                &mut decayed
            } else {
                &mut plain
            };
            group.push((name, p, g));
        }
        self.decayed.step(lr, &mut decayed)?;
        self.plain.step(lr, &mut plain)?;
        // the step's one read back: its loss and gradient norm, together
        let (loss, grad_norm) = match V::scalars(&[&loss, &norm])?[..] {
            [loss, norm] => (loss, norm),
            _ => unreachable!("two values read, two scalars back"),
        };
        self.step += 1;
        Ok(GptEvent::Step {
            step: self.step,
            loss,
            lr,
            grad_norm,
        })
    }

    /// Recomputes the step about to be taken (batch `b`, the current parameters) on the
    /// reference engine in f64 and compares its loss and every gradient with ours.
    fn verify_step(
        &mut self,
        b: &TokenBatch,
        loss: f64,
        grads: &BTreeMap<String, V>,
    ) -> Result<()> {
        let started = Instant::now();
        let step = self.step + 1;
        let mut params = BTreeMap::new();
        for (name, v) in self.session.params() {
            params.insert(name.clone(), v.to_f64()?);
        }
        let mut r = Session::<Tensor<f64>>::new();
        r.load_params(&params)?;
        let want = self
            .gpt
            .loss(&mut r, &b.ids, &b.targets, self.cfg.batch, Mode::Train)?;
        r.backward(&want, Sweep::Releasing)?;
        let want_loss = *r.value_f64(&want)?.item()?;
        let want_grads = r.take_param_grads();
        let worst = worst_deviation(loss, grads, want_loss, &want_grads)?;
        let tol = verify_tolerance::<V::Elem>();
        let seconds = started.elapsed().as_secs_f64();
        VerifySummary::record(&mut self.verify, worst.0, &worst.1, tol, seconds);
        self.verified = Some(worst.0);
        if worst.0.is_nan() || worst.0 > tol {
            return Err(TrainError::VerifyFailed {
                step,
                param: worst.1,
                deviation: worst.0,
                tolerance: tol,
                engine: V::ENGINE,
            });
        }
        Ok(())
    }

    /// The loss of the current model on `b`, in evaluation mode, without gradients.
    pub fn loss_on(&mut self, b: &TokenBatch) -> Result<f64> {
        let rows = b.offsets.len();
        let gpt = &self.gpt;
        let out = self.session.no_grad(|s| {
            let loss = gpt.loss(s, &b.ids, &b.targets, rows, Mode::Eval)?;
            s.value_f64(&loss)
        });
        self.session.reset();
        Ok(*out?.item()?)
    }

    /// The mean loss of `eval_iters` fresh batches of each split, in evaluation mode, without
    /// gradients.
    pub fn evaluate(&mut self) -> Result<GptEval> {
        let (batch, block, n) = (self.cfg.batch, self.cfg.model.block, self.cfg.eval_iters);
        let rows = self.world.share(batch);
        let weight = rows.len() as f64 / batch as f64;
        let mut terms = Vec::with_capacity(2 * n as usize);
        for (split, stream) in EVAL_STREAMS {
            for i in 0..n {
                let draw = Draw {
                    seed: self.cfg.seed,
                    stream,
                    step: self.evals * n + i,
                };
                let b = self.corpus.batch(split, batch, block, draw);
                let loss = self.loss_on(&b.rows(rows.clone()))?;
                // a world of one: weight 1, the loss as it is
                terms.push(loss * weight);
            }
        }
        let means = dp::all_reduce_group_means(&self.world, terms, EVAL_STREAMS.len())?;
        self.evals += 1;
        Ok(GptEval {
            step: self.step,
            train_loss: means[0],
            val_loss: means[1],
        })
    }

    /// Steps until `iters`, evaluating every `eval_interval` steps and after the last; `on`
    /// sees every event and may stop the run early by returning `false` (on several ranks:
    /// any rank's `false` stops every rank after the same step). The ranks check that their
    /// parameters are the same every [`SYNC_CHECK_EVERY`](dp::SYNC_CHECK_EVERY) steps and when the run stops
    /// ([`TrainError::RanksDiverged`]). The last evaluation.
    pub fn run(&mut self, mut on: impl FnMut(&GptEvent) -> bool) -> Result<Option<GptEval>> {
        let mut last = None;
        while self.step < self.cfg.iters {
            let event = self.step()?;
            let mut go_on = on(&event);
            if let Some(worst) = self.verified {
                go_on &= on(&GptEvent::Verified {
                    step: self.step,
                    worst,
                });
            }
            if self.step.is_multiple_of(self.cfg.eval_interval) || self.step == self.cfg.iters {
                let e = self.evaluate()?;
                last = Some(e);
                go_on &= on(&GptEvent::Eval(e));
            }
            if let Some((every, path)) = &self.save_every {
                if self.world.is_root() && self.step.is_multiple_of(*every) {
                    self.save(path)?;
                    go_on &= on(&GptEvent::Saved { step: self.step });
                }
            }
            if self.world.size() > 1 {
                go_on = !self.world.any(!go_on)?;
            }
            let stopping = !go_on || self.step == self.cfg.iters;
            dp::check_in_sync_if_due(&self.world, self.session.params(), self.step, stopping)?;
            if !go_on {
                break;
            }
        }
        Ok(last)
    }

    /// `tokens` new characters after `prompt` (it must not be empty), each drawn from the
    /// softmax of the last position's logits divided by `temperature`, restricted to the `top_k`
    /// most likely (all when `None`), with a generator seeded by `seed`; the context is the
    /// last `block` characters. `out` receives each new character as it is drawn.
    pub fn sample(
        &mut self,
        prompt: &str,
        sampling: Sampling,
        mut out: impl FnMut(char),
    ) -> Result<String> {
        sample(
            &self.gpt,
            &mut self.session,
            self.corpus.tokenizer(),
            prompt,
            sampling,
            &mut out,
        )
    }

    /// The run as one checkpoint (see the module docs).
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        let mut tensors = BTreeMap::new();
        for (name, v) in self.session.params() {
            tensors.insert(name.clone(), named(v.shape_of().dims(), &v.read()?));
        }
        if let Some(wte) = tensors.get(WTE).cloned() {
            tensors.insert(LM_HEAD.to_string(), wte);
        }
        let mut steps = BTreeMap::new();
        for opt in [&self.decayed, &self.plain] {
            for (pname, st) in opt.host_state()? {
                let shape = self.session.params()[&pname].shape_of().dims().to_vec();
                for (buf, data) in &st.buffers {
                    tensors.insert(
                        format!("{OPTIMIZER_PREFIX}state.{pname}.{buf}"),
                        named(&shape, data),
                    );
                }
                steps.insert(pname, st.step);
            }
        }
        let meta = serde_json::json!({
            "format": GPT_CHECKPOINT_FORMAT,
            "config": self.cfg,
            "step": self.step,
            "evals": self.evals,
            "optimizer_steps": steps,
            "vocabulary": self.corpus.tokenizer().vocabulary(),
            "corpus": self.corpus.origin(),
            "dtype": V::Elem::NAME,
            "engine": V::ENGINE,
        });
        let mut metadata = BTreeMap::new();
        metadata.insert("torchlean".to_string(), meta.to_string());
        Ok(Checkpoint { tensors, metadata })
    }

    /// Writes [`GptTrainer::checkpoint`] to `path`, atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.checkpoint()?.save(path)
    }

    /// The run saved at `path`, continued on `corpus` (which must have the checkpoint's
    /// vocabulary): its configuration, parameters, optimizer state and step, so the following
    /// steps are those the run would have taken.
    pub fn resume(path: &Path, corpus: TextCorpus) -> Result<Self> {
        let saved = GptCheckpoint::load(path)?;
        if saved.vocabulary != corpus.tokenizer().vocabulary() {
            return Err(TrainError::Checkpoint {
                path: path.to_path_buf(),
                problem: CheckpointProblem::Vocabulary {
                    saved: saved.vocabulary.chars().count(),
                    text: corpus.tokenizer().vocab_size(),
                },
            });
        }
        let mut t = GptTrainer::<V>::new(saved.config.clone(), corpus)?;
        t.session.load_params(&saved.params)?;
        for (opt, decayed) in [(&mut t.decayed, true), (&mut t.plain, false)] {
            let mut state = BTreeMap::new();
            for (name, p) in &saved.params {
                if (p.shape().rank() >= 2) != decayed {
                    continue;
                }
                if let Some(st) = saved.optimizer_state::<V::Elem>(name) {
                    state.insert(name.clone(), st);
                }
            }
            let params = t.session.params();
            opt.load_state(state, |name| params.get(name).map(|v| v.shape_of().clone()))?;
        }
        t.step = saved.step;
        t.evals = saved.evals;
        Ok(t)
    }
}

/// How [`sample`] draws.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    pub tokens: usize,
    pub temperature: f64,
    pub top_k: Option<usize>,
    pub seed: u64,
}

/// See [`GptTrainer::sample`]; `session` holds the parameters.
pub fn sample<V: Kernels>(
    gpt: &Gpt,
    session: &mut Session<V>,
    tokenizer: &CharTokenizer,
    prompt: &str,
    sampling: Sampling,
    out: &mut dyn FnMut(char),
) -> Result<String> {
    if !(sampling.temperature.is_finite() && sampling.temperature > 0.0) {
        return Err(TrainError::GptSetting {
            owner: "sample",
            field: "temperature",
            value: sampling.temperature,
            expected: "finite and > 0",
        });
    }
    let mut ids = tokenizer.encode("the prompt", prompt)?;
    if ids.is_empty() {
        return Err(TrainError::GptSetting {
            owner: "sample",
            field: "prompt length",
            value: 0.0,
            expected: "at least one character",
        });
    }
    let block = gpt.config().block;
    let vocab = gpt.config().vocab;
    let mut text = String::new();
    for k in 0..sampling.tokens {
        let context = &ids[ids.len().saturating_sub(block)..];
        let logits = session.no_grad(|s| {
            let l = gpt.logits(s, context, 1, Mode::Eval)?;
            s.value_f64(&l)
        });
        session.reset();
        let logits = logits?;
        let last = &logits.data()[(context.len() - 1) * vocab..context.len() * vocab];
        let u =
            (splitmix64(splitmix64(sampling.seed) ^ k as u64) >> 11) as f64 / (1u64 << 53) as f64;
        let id = draw_token(last, sampling.temperature, sampling.top_k, u);
        ids.push(id);
        let ch = tokenizer.decode(&[id])?;
        for c in ch.chars() {
            out(c);
        }
        text.push_str(&ch);
    }
    Ok(text)
}

/// The token whose cumulative probability first exceeds `u` (in `[0, 1)`) under the softmax of
/// `logits / temperature` over the `top_k` largest logits.
fn draw_token(logits: &[f64], temperature: f64, top_k: Option<usize>, u: f64) -> usize {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    order.truncate(top_k.unwrap_or(logits.len()).clamp(1, logits.len().max(1)));
    let top = logits[order[0]] / temperature;
    let weights: Vec<f64> = order
        .iter()
        .map(|&i| (logits[i] / temperature - top).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    for (&i, w) in order.iter().zip(&weights) {
        acc += w / total;
        if u < acc {
            return i;
        }
    }
    order[order.len() - 1]
}

/// The global norm of `grads` (before clipping, one element on the engine), clipped to
/// `max_norm` in place as PyTorch's `clip_grad_norm_` does; `max_norm` 0 leaves them as they
/// are.
fn clip<V: TrainValue>(grads: &mut BTreeMap<String, V>, max_norm: f64) -> Result<V> {
    let mut values: Vec<&mut V> = grads.values_mut().collect();
    let max_norm = (max_norm > 0.0).then_some(max_norm);
    Ok(V::clip_to_norm(&mut values, max_norm)?)
}

/// A GPT checkpoint as read back.
#[derive(Debug)]
pub struct GptCheckpoint {
    pub config: GptTrainConfig,
    pub step: u64,
    pub evals: u64,
    pub vocabulary: String,
    /// The parameters (without the tied `lm_head.weight`).
    pub params: BTreeMap<String, Tensor<f64>>,
    tensors: BTreeMap<String, NamedTensor>,
    optimizer_steps: BTreeMap<String, u64>,
}

impl GptCheckpoint {
    /// Reads and checks a checkpoint [`GptTrainer::save`] wrote.
    pub fn load(path: &Path) -> Result<GptCheckpoint> {
        let ck = Checkpoint::load_checked(path)?;
        let bad = |problem| TrainError::Checkpoint {
            path: path.to_path_buf(),
            problem,
        };
        let meta = ck.torchlean_metadata(path, GPT_CHECKPOINT_FORMAT, "GPT checkpoint")?;
        let json = |field| crate::checkpoint::metadata_error(path, field);
        let field = |field: &'static str| {
            meta.get(field)
                .cloned()
                .ok_or_else(|| bad(CheckpointProblem::MissingField { field }))
        };
        let config: GptTrainConfig =
            serde_json::from_value(field("config")?).map_err(json("config"))?;
        let number = |k: &'static str| -> Result<u64> {
            field(k)?.as_u64().ok_or_else(|| {
                bad(CheckpointProblem::FieldType {
                    field: k,
                    expected: "a count",
                })
            })
        };
        let (step, evals) = (number("step")?, number("evals")?);
        let vocabulary = field("vocabulary")?
            .as_str()
            .ok_or_else(|| {
                bad(CheckpointProblem::FieldType {
                    field: "vocabulary",
                    expected: "a string",
                })
            })?
            .to_string();
        CharTokenizer::from_vocabulary(&vocabulary)?;
        let optimizer_steps: BTreeMap<String, u64> =
            serde_json::from_value(field("optimizer_steps")?).map_err(json("optimizer_steps"))?;
        let mut model_cfg = config.model;
        model_cfg.vocab = vocabulary.chars().count();
        let mut session = Session::<Tensor<f64>>::new();
        Gpt::new(model_cfg, 0)?.logits(&mut session, &[0], 1, Mode::Eval)?;
        let mut params = BTreeMap::new();
        for (name, v) in session.params() {
            let t = ck
                .tensors
                .get(name)
                .ok_or_else(|| bad(CheckpointProblem::MissingParam { name: name.clone() }))?;
            if t.shape != v.shape().dims() {
                return Err(bad(CheckpointProblem::ParamShape {
                    name: name.clone(),
                    saved: t.shape.clone(),
                    model: v.shape().clone(),
                }));
            }
            params.insert(
                name.clone(),
                Tensor::new(Shape::new(t.shape.clone()), tensor_f64(t))?,
            );
        }
        Ok(GptCheckpoint {
            config,
            step,
            evals,
            vocabulary,
            params,
            tensors: ck.tensors,
            optimizer_steps,
        })
    }

    /// The saved model on engine `V` — the GPT, a session holding its parameters, its
    /// tokenizer — for [`sample`].
    pub fn model<V: Kernels>(&self) -> Result<(Gpt, Session<V>, CharTokenizer)> {
        let tokenizer = CharTokenizer::from_vocabulary(&self.vocabulary)?;
        let mut cfg = self.config.model;
        cfg.vocab = tokenizer.vocab_size();
        let gpt = Gpt::new(cfg, self.config.seed)?;
        let mut session = Session::<V>::new();
        session.load_params(&self.params)?;
        Ok((gpt, session, tokenizer))
    }

    /// The saved AdamW state of parameter `name`, if it has one.
    fn optimizer_state<T: Element>(&self, name: &str) -> Option<crate::optim::ParamState<T>> {
        let step = *self.optimizer_steps.get(name)?;
        let prefix = format!("{OPTIMIZER_PREFIX}state.{name}.");
        let buffers = self
            .tensors
            .iter()
            .filter_map(|(k, t)| {
                let buf = k.strip_prefix(&prefix)?;
                let data = tensor_f64(t)
                    .into_iter()
                    .map(|v| T::from_f64(v).unwrap_or_else(T::nan))
                    .collect();
                Some((buf.to_string(), data))
            })
            .collect();
        Some(crate::optim::ParamState { step, buffers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_learning_rate_warms_up_then_follows_a_cosine_to_min_lr() {
        let cfg = GptTrainConfig::shakespeare_char();
        assert!((cfg.lr_at(0) - 1e-3 / 101.0).abs() < 1e-18);
        assert!((cfg.lr_at(99) - 1e-3 * 100.0 / 101.0).abs() < 1e-18);
        assert_eq!(cfg.lr_at(100), 1e-3);
        let mid = cfg.lr_at(1050);
        assert!((mid - (1e-4 + 0.5 * 9e-4)).abs() < 1e-15, "{mid}");
        assert!((cfg.lr_at(2000) - 1e-4).abs() < 1e-18);
        assert_eq!(cfg.lr_at(5000), 1e-4);
    }

    #[test]
    fn a_drawn_token_follows_temperature_and_top_k() {
        let logits = [0.0, 3.0, 1.0, 2.0];
        // top-1 is greedy whatever u is
        for u in [0.0, 0.5, 0.999] {
            assert_eq!(draw_token(&logits, 1.0, Some(1), u), 1);
        }
        // a tiny temperature is greedy too; at u → 1 the least likely of the top 2 is drawn
        assert_eq!(draw_token(&logits, 1e-3, None, 0.999), 1);
        assert_eq!(draw_token(&logits, 1.0, Some(2), 0.9999), 3);
        // the first token's share of the softmax decides u's cut
        let p1 = 3f64.exp()
            / [0.0, 3.0, 1.0, 2.0]
                .iter()
                .map(|v: &f64| v.exp())
                .sum::<f64>();
        assert_eq!(draw_token(&logits, 1.0, None, p1 - 1e-9), 1);
        assert_eq!(draw_token(&logits, 1.0, None, p1 + 1e-9), 3);
    }
}
