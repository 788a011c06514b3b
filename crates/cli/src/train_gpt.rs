//! `torchlean train gpt`: nanoGPT's character-level GPT on the embedded Shakespeare or a text
//! file (`torchlean_train::gpt`), with a progress bar or plain or JSON lines, evaluations,
//! checkpoints, a loss plot, and Ctrl-C saving the run.

use crate::args::{ModelArg, SampleArgs, TrainArgs};
use crate::train::{
    bad, interrupt_path, progress_bar, stop_on_sigint, write_outputs, Curves, Printer,
};
use crate::{out, BadInput, Outcome, Stop};
use indicatif::ProgressBar;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Instant;
use torchlean_train::data::TextCorpus;
use torchlean_train::gpt::GptEval;
use torchlean_train::model::Arch;
use torchlean_train::{GptEvent, GptTrainConfig, GptTrainer, TrainValue};

/// The classifier flags `train gpt` does not take, and the GPT flags `train mlp|cnn` does not:
/// each given one is a line of bad input.
fn misplaced(a: &TrainArgs, gpt: bool) -> Vec<String> {
    let g = &a.gpt;
    let classifier_only: [(&str, bool); 12] = [
        ("--epochs", a.epochs.is_some()),
        ("--steps", a.steps.is_some()),
        ("--optimizer", a.optimizer.is_some()),
        ("--csv", a.csv.is_some()),
        ("--held-out", a.held_out.is_some()),
        ("--clip-grad-norm", a.clip_grad_norm.is_some()),
        ("--init-from", a.init_from.is_some()),
        ("--inject-fault", a.inject_fault.is_some()),
        ("--detect-anomaly", a.detect_anomaly),
        ("--momentum", a.momentum.is_some()),
        ("--nesterov", a.nesterov),
        ("--schedule", a.schedule.is_some()),
    ];
    let gpt_only: [(&str, bool); 14] = [
        ("--text", g.text.is_some()),
        ("--iters", g.iters.is_some()),
        ("--eval-interval", g.eval_interval.is_some()),
        ("--eval-iters", g.eval_iters.is_some()),
        ("--block", g.block.is_some()),
        ("--n-layer", g.n_layer.is_some()),
        ("--n-head", g.n_head.is_some()),
        ("--n-embd", g.n_embd.is_some()),
        ("--min-lr", g.min_lr.is_some()),
        ("--warmup", g.warmup.is_some()),
        ("--grad-clip", g.grad_clip.is_some()),
        ("--dropout", g.dropout.is_some()),
        ("--save-every", g.save_every.is_some()),
        ("--bucket-kib", g.bucket_kib.is_some()),
    ];
    let (flags, why): (&[(&str, bool)], &str) = if gpt {
        (
            &classifier_only,
            "is a `train mlp|cnn` flag; `train gpt` takes the flags under \"GPT\" in `train --help`",
        )
    } else {
        (&gpt_only, "is a `train gpt` flag")
    };
    flags
        .iter()
        .filter(|(_, given)| *given)
        .map(|(flag, _)| format!("{flag} {why}"))
        .collect()
}

/// `train mlp|cnn` given a GPT flag: one line per flag.
pub fn refuse_gpt_flags(a: &TrainArgs, arch: Arch) -> Result<(), BadInput> {
    let lines: Vec<String> = misplaced(a, false)
        .into_iter()
        .map(|l| format!("{l}, not a `train {arch}` one"))
        .collect();
    if lines.is_empty() {
        Ok(())
    } else {
        Err(BadInput(lines))
    }
}

/// `c` with each flag given replacing its value.
fn with_flags(a: &TrainArgs, mut c: GptTrainConfig) -> GptTrainConfig {
    let g = &a.gpt;
    let m = &mut c.model;
    m.block = g.block.unwrap_or(m.block);
    m.n_layer = g.n_layer.unwrap_or(m.n_layer);
    m.n_head = g.n_head.unwrap_or(m.n_head);
    m.n_embd = g.n_embd.unwrap_or(m.n_embd);
    m.dropout = g.dropout.unwrap_or(m.dropout);
    c.batch = a.batch.unwrap_or(c.batch);
    c.lr = a.lr.unwrap_or(c.lr);
    c.seed = a.seed.unwrap_or(c.seed);
    c.iters = g.iters.unwrap_or(c.iters);
    c.eval_interval = g.eval_interval.unwrap_or(c.eval_interval);
    c.eval_iters = g.eval_iters.unwrap_or(c.eval_iters);
    c.min_lr = g.min_lr.unwrap_or(c.min_lr);
    c.warmup = g.warmup.unwrap_or(c.warmup);
    c.weight_decay = a.weight_decay.unwrap_or(c.weight_decay);
    c.grad_clip = g.grad_clip.unwrap_or(c.grad_clip);
    c
}

/// The settings a resumed run may change: the total it runs to and how it reports.
const RESUMABLE: &[&str] = &["iters", "eval_interval", "eval_iters"];

/// With `--resume`, the run's settings come from the checkpoint; a flag given that would change
/// one of them (other than [`RESUMABLE`]) is bad input, one line each.
fn check_resume_flags(a: &TrainArgs, saved: &GptTrainConfig) -> Result<(), BadInput> {
    let flat = |c: &GptTrainConfig| -> Vec<(String, serde_json::Value)> {
        let v = serde_json::to_value(c).unwrap_or_default();
        let mut out = Vec::new();
        for (k, v) in v.as_object().into_iter().flatten() {
            match v.as_object() {
                Some(inner) => out.extend(inner.iter().map(|(k, v)| (k.clone(), v.clone()))),
                None => out.push((k.clone(), v.clone())),
            }
        }
        out
    };
    let lines: Vec<String> = flat(&with_flags(a, saved.clone()))
        .into_iter()
        .zip(flat(saved))
        .filter(|((k, given), (_, have))| given != have && !RESUMABLE.contains(&k.as_str()))
        .map(|((k, given), (_, have))| {
            let flag = k.replace('_', "-");
            format!("cannot resume with --{flag} {given} (the checkpoint has {have})")
        })
        .collect();
    if lines.is_empty() {
        Ok(())
    } else {
        Err(BadInput(lines))
    }
}

pub fn run(a: &TrainArgs) -> Result<Outcome, Stop> {
    debug_assert_eq!(a.model, Some(ModelArg::Gpt));
    let misplaced = misplaced(a, true);
    if !misplaced.is_empty() {
        return Err(BadInput(misplaced).into());
    }
    if a.backend != crate::args::BackendArg::Eager {
        return Err(BadInput::one(
            "--backend compiled is not available for `train gpt` yet (it trains eagerly)",
        )
        .into());
    }
    let sel = crate::engine::select(a.engine, crate::engine::dtype(a.dtype))?;
    let world = crate::distributed::world(a)?;
    crate::engine::with_engine!(sel, V => train_gpt_on::<V>(a, world))
}

fn corpus(a: &TrainArgs, block: usize) -> Result<TextCorpus, BadInput> {
    match &a.gpt.text {
        Some(path) => TextCorpus::read(path, block).map_err(bad),
        None => TextCorpus::shakespeare(block).map_err(bad),
    }
}

/// The peak resident set of this process in MiB (`VmHWM`), where the system says.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The trainer of this run: the checkpoint's with `--resume` (the flags it allows applied),
/// else a fresh one from the flags.
fn trainer<V: TrainValue>(a: &TrainArgs) -> Result<GptTrainer<V>, Stop> {
    let Some(path) = &a.resume else {
        let c = with_flags(a, GptTrainConfig::shakespeare_char());
        let corpus = corpus(a, c.model.block)?;
        return Ok(GptTrainer::<V>::new(c, corpus).map_err(bad)?);
    };
    let saved =
        torchlean_train::gpt::GptCheckpoint::load(path).map_err(|e| BadInput::at(path, &e))?;
    check_resume_flags(a, &saved.config)?;
    let corpus = corpus(a, saved.config.model.block)?;
    let iters = a.gpt.iters.unwrap_or(saved.config.iters);
    if iters <= saved.step {
        return Err(BadInput::one(format!(
            "{}: the run is at step {} already: --iters is the total to reach, give more than {}",
            path.display(),
            saved.step,
            saved.step
        ))
        .into());
    }
    let mut t = GptTrainer::<V>::resume(path, corpus).map_err(bad)?;
    t.set_iters(iters);
    t.set_eval(
        a.gpt.eval_interval.unwrap_or(saved.config.eval_interval),
        a.gpt.eval_iters.unwrap_or(saved.config.eval_iters),
    )
    .map_err(bad)?;
    Ok(t)
}

/// The run's first line: the data, the model, the engine and the optimizer.
fn header<V: TrainValue>(t: &GptTrainer<V>) -> String {
    let (c, corpus) = (t.config(), t.corpus());
    let m = &c.model;
    let params: usize = t.params().values().map(|v| v.shape_of().size()).sum();
    let train = corpus.split(torchlean_train::data::Split::Train).len();
    let chars = train + corpus.split(torchlean_train::data::Split::Val).len();
    let ranks = crate::distributed::on_ranks(t.world());
    format!(
        "training gpt on {}: {chars} characters ({} distinct), {train} for training; {} layers, {} heads, {} wide, block {}: {params} parameters; {}{ranks}; AdamW lr {} batch {}; steps {}..{}",
        corpus.origin(),
        m.vocab,
        m.n_layer,
        m.n_head,
        m.n_embd,
        m.block,
        V::ENGINE,
        c.lr,
        c.batch,
        t.steps_done(),
        c.iters
    )
}

/// What a running `train gpt` shows and keeps: the bar or log lines (JSON lines with
/// `--json`), the loss curve, the evaluations, and whether Ctrl-C stopped it.
struct GptProgress<'a> {
    a: &'a TrainArgs,
    printer: Printer,
    bar: Option<ProgressBar>,
    first_step: u64,
    tokens_per_step: f64,
    start: Instant,
    train_points: Vec<(f64, f64)>,
    evals: Vec<GptEval>,
}

impl GptProgress<'_> {
    /// A line above the bar (or on standard output without one).
    fn line(&mut self, text: String) {
        match &self.bar {
            Some(b) => b.println(text),
            None => self.printer.line(text),
        }
    }

    fn event(&mut self, e: &GptEvent) {
        let json = self.a.json;
        match *e {
            GptEvent::Step { step, loss, lr, .. } => {
                self.train_points.push((step as f64, loss));
                let done = (step - self.first_step) as f64;
                let rate =
                    done * self.tokens_per_step / self.start.elapsed().as_secs_f64().max(1e-9);
                if let Some(b) = &self.bar {
                    b.set_position(step);
                    b.set_message(format!("loss {loss:.4}, {rate:.0} tokens/s"));
                }
                if json {
                    self.printer
                        .line(json!({"event": "step", "step": step, "loss": loss, "lr": lr}));
                } else if self.a.log_every > 0 && step % self.a.log_every == 0 {
                    self.line(format!(
                        "step {step}: loss={loss:.4} lr={lr:.3e} ({rate:.0} tokens/s)"
                    ));
                }
            }
            GptEvent::Verified { step, worst } if json => {
                self.printer
                    .line(json!({"event": "verified", "step": step, "worst": worst}));
            }
            GptEvent::Verified { step, worst } => self.line(format!(
                "step {step}: verified on reference-f64, worst relative deviation {worst:.2e}"
            )),
            GptEvent::Saved { step } => {
                let file = self.a.save.as_deref().unwrap_or(std::path::Path::new(""));
                if json {
                    self.printer.line(json!({"event": "wrote", "step": step, "file": file, "content": "checkpoint"}));
                } else {
                    self.line(format!("step {step}: saved the run to {}", file.display()));
                }
            }
            GptEvent::Eval(ev) => {
                self.evals.push(ev);
                if json {
                    self.printer.line(json!({"event": "eval", "step": ev.step, "train_loss": ev.train_loss, "val_loss": ev.val_loss}));
                } else {
                    self.line(format!(
                        "step {}: train loss {:.4}, val loss {:.4}",
                        ev.step, ev.train_loss, ev.val_loss
                    ));
                }
            }
        }
    }

    /// The finished run's summary: a JSON object, or the losses, speed and verification lines.
    fn summary<V: TrainValue>(&mut self, t: &GptTrainer<V>) {
        let seconds = self.start.elapsed().as_secs_f64();
        let steps = t.steps_done() - self.first_step;
        let tokens_per_s = steps as f64 * self.tokens_per_step / seconds.max(1e-9);
        let last = self.evals.last().copied();
        let rss = peak_rss_mib();
        if self.a.json {
            self.printer.line(json!({
                "event": "summary",
                "summary": true,
                "steps": steps,
                "last_step": t.steps_done(),
                "train_loss": last.map(|e| e.train_loss),
                "val_loss": last.map(|e| e.val_loss),
                "seconds": seconds,
                "tokens_per_s": tokens_per_s,
                "peak_rss_mib": rss,
                "engine": V::ENGINE,
                "ranks": t.world().size(),
                "all_reduce_s": t.all_reduce_seconds(),
                "verify": t.verify_summary(),
            }));
            return;
        }
        let losses = last.map_or_else(
            || "no evaluation".to_string(),
            |e| format!("val loss {:.4}, train loss {:.4}", e.val_loss, e.train_loss),
        );
        self.printer.line(format_args!(
            "{losses}; {steps} steps in {seconds:.1} s ({:.1} ms/step, {tokens_per_s:.0} tokens/s); peak RSS {}",
            seconds * 1e3 / steps.max(1) as f64,
            rss.map_or_else(|| "unknown".to_string(), |r| format!("{r:.0} MiB"))
        ));
        if t.world().size() > 1 {
            self.printer.line(format_args!(
                "{} ranks: rank 0 spent {:.2} s ({:.1}% of the run) in the gradients' all-reduce",
                t.world().size(),
                t.all_reduce_seconds(),
                100.0 * t.all_reduce_seconds() / seconds.max(1e-9)
            ));
        }
        if let Some(v) = t.verify_summary() {
            self.printer.line(format_args!(
                "verified: {} steps on reference-f64, worst relative deviation {:.2e} ({}), tolerance {:.0e}; cost {:.2} s ({:.0}% of training time)",
                v.checks,
                v.worst,
                v.worst_param,
                v.tolerance,
                v.seconds,
                100.0 * v.seconds / seconds.max(1e-9)
            ));
        }
    }
}

fn train_gpt_on<V: TrainValue>(
    a: &TrainArgs,
    world: torchlean_train::World,
) -> Result<Outcome, Stop> {
    let mut t = match trainer::<V>(a) {
        Ok(t) => t,
        Err(stop) => return crate::distributed::settle(&world, Err(stop)),
    };
    let set = t.set_world(world).map_err(|e| bad(e).into());
    if let Err(stop) = set {
        return crate::distributed::settle(t.world(), Err(stop));
    }
    let result = train_shared(a, &mut t);
    crate::distributed::settle(t.world(), result)
}

/// The run of `t`, on this rank of its world (a world of one: the whole run).
fn train_shared<V: TrainValue>(a: &TrainArgs, t: &mut GptTrainer<V>) -> Result<Outcome, Stop> {
    t.set_verify_every(a.verify_every);
    if let (Some(every), Some(path)) = (a.gpt.save_every, &a.save) {
        t.set_save_every(every, path.clone());
    }
    if let Some(kib) = a.gpt.bucket_kib {
        t.set_bucket_bytes(kib.saturating_mul(1024));
    }
    let c = t.config().clone();
    let root = t.world().is_root();
    let mut printer = Printer::for_rank(t.world());
    if !a.json {
        printer.line(header(t));
    }
    let mut progress = GptProgress {
        a,
        printer,
        bar: if root {
            progress_bar(a, c.iters, t.steps_done())
        } else {
            None
        },
        first_step: t.steps_done(),
        tokens_per_step: (c.batch * c.model.block) as f64,
        start: Instant::now(),
        train_points: Vec::new(),
        evals: Vec::new(),
    };
    let stop = stop_on_sigint();
    let mut interrupted = false;
    let result = t.run(|e| {
        progress.event(e);
        interrupted = stop.as_ref().is_some_and(|f| f.load(Ordering::Relaxed));
        !interrupted
    });
    if let Some(b) = &progress.bar {
        b.finish_and_clear();
    }
    match result {
        Ok(_) => {}
        Err(e @ torchlean_train::TrainError::VerifyFailed { .. }) => {
            out::error_line(crate::chain(&e));
            if t.world().size() > 1 {
                // only rank 0 verifies: the others are waiting for it
                t.world().abort(1);
            }
            progress.printer.finish()?;
            return Ok(Outcome::Failed);
        }
        Err(e @ torchlean_train::TrainError::RanksDiverged { .. }) => {
            // every rank found it: rank 0 says so, and each stops
            if root {
                out::error_line(crate::chain(&e));
            }
            progress.printer.finish()?;
            return Ok(Outcome::Failed);
        }
        Err(e) => return Err(bad(e).into()),
    }
    if !root {
        return Ok(if interrupted {
            Outcome::Interrupted
        } else {
            Outcome::Ok
        });
    }
    if interrupted {
        let path = interrupt_path(a);
        t.save(&path).map_err(bad)?;
        out::error_line(format_args!(
            "interrupted after step {} of {}; saved the run to {}; continue with --resume {}",
            t.steps_done(),
            c.iters,
            path.display(),
            path.display()
        ));
        progress.printer.finish()?;
        return Ok(Outcome::Interrupted);
    }
    progress.summary(t);
    let curves = Curves {
        title: format!("torchlean train gpt ({})", V::ENGINE),
        train: std::mem::take(&mut progress.train_points),
        held_out: progress
            .evals
            .iter()
            .map(|e| (e.step as f64, e.val_loss))
            .collect(),
    };
    write_outputs(a, &mut progress.printer, &curves, |path| {
        t.save(path)?;
        Ok(format!(
            "wrote {} (nanoGPT's state_dict, the optimizer state and the run)",
            path.display()
        ))
    })?;
    progress.printer.finish()?;
    Ok(Outcome::Ok)
}

/// `torchlean sample CHECKPOINT`: the model of a `train gpt` checkpoint continues `--prompt`,
/// each character written as it is drawn.
pub fn sample(a: &SampleArgs) -> Result<Outcome, Stop> {
    let sel = crate::engine::select(a.engine, crate::engine::dtype(a.dtype))?;
    crate::engine::with_engine!(sel, V => sample_on::<V>(a))
}

fn sample_on<V: TrainValue>(a: &SampleArgs) -> Result<Outcome, Stop> {
    let saved = torchlean_train::gpt::GptCheckpoint::load(&a.checkpoint)
        .map_err(|e| BadInput::at(&a.checkpoint, &e))?;
    let (gpt, mut session, tokenizer) = saved.model::<V>().map_err(bad)?;
    // a bad prompt is refused before anything is written
    tokenizer.encode("the prompt", &a.prompt).map_err(bad)?;
    let sampling = torchlean_train::Sampling {
        tokens: a.tokens,
        temperature: a.temperature,
        top_k: (a.top_k > 0).then_some(a.top_k),
        seed: a.seed,
    };
    let mut failed = None;
    let mut write = |c: char| {
        if failed.is_none() {
            failed = out::text(c.encode_utf8(&mut [0; 4])).err();
        }
    };
    a.prompt.chars().for_each(&mut write);
    torchlean_train::gpt::sample(
        &gpt,
        &mut session,
        &tokenizer,
        &a.prompt,
        sampling,
        &mut write,
    )
    .map_err(bad)?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    out::line("")?;
    Ok(Outcome::Ok)
}
