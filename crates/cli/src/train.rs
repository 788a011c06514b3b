//! `torchlean train mlp|cnn`: the main job (SPEC 4).

use crate::args::{BackendArg, ModelArg, TrainArgs};
use crate::out::{self, WriteError};
use crate::{chain, BadInput, Outcome, Stop, EXIT_INTERRUPTED};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use torchlean_faults::Fault;
use torchlean_train::data::Dataset;
use torchlean_train::exec::Interpreter;
use torchlean_train::imported::OnnxSource;
use torchlean_train::model::{Arch, Classify};
use torchlean_train::optim::OptimConfig;
use torchlean_train::trainer::{Event, Observer, Summary, TrainConfig, Trainer};
use torchlean_train::{OptimError, TrainError, TrainValue};

pub(crate) fn bad(e: impl Into<TrainError>) -> BadInput {
    let e = e.into();
    match &e {
        // every problem of the model, one line each
        TrainError::Import {
            source: source @ torchlean_onnx::OnnxError::Problems(_),
            ..
        } => BadInput(
            std::iter::once(e.to_string())
                .chain(source.lines().into_iter().map(|l| format!("  {l}")))
                .collect(),
        ),
        TrainError::Config { field, reason } => match flag_of(field) {
            Some(flag) => BadInput::one(format!("{flag}: {reason}")),
            None => BadInput::one(chain(&e)),
        },
        TrainError::GptSetting {
            owner,
            field,
            value,
            expected,
        }
        | TrainError::Optim(OptimError::InvalidSetting {
            owner,
            field,
            value,
            expected,
        }) => match flag_of(field) {
            Some(flag) => BadInput::one(format!(
                "{flag} {value}: {owner}'s {field} must be {expected}"
            )),
            None => BadInput::one(chain(&e)),
        },
        _ => BadInput::one(chain(&e)),
    }
}

/// The `train` flag that sets the library's setting `field` (`held_out` → `--held-out`, clap's
/// spelling of the argument's field), if there is one.
fn flag_of(field: &str) -> Option<String> {
    use clap::CommandFactory;
    let long = field.replace('_', "-");
    crate::args::Cli::command()
        .find_subcommand("train")?
        .get_arguments()
        .any(|a| a.get_long() == Some(long.as_str()))
        .then(|| format!("--{long}"))
}

/// The optimizer from `--optimizer`, `--lr`, `--momentum`, `--nesterov` and
/// `--weight-decay`: without `--optimizer` the trainer's default (SGD with momentum 0.9, lr
/// 0.05; 0.01 for an imported model); a named one takes PyTorch's defaults (`sgd`: no momentum).
fn optimizer(a: &TrainArgs, arch: Arch) -> Result<OptimConfig, BadInput> {
    let base = match &a.optimizer {
        None => TrainConfig::new(arch).optimizer,
        Some(n) => OptimConfig::parse(n, None).map_err(bad)?,
    };
    let c = match a.lr {
        Some(lr) => base.with_lr(lr),
        None => base,
    };
    c.with_options(a.momentum, a.nesterov, a.weight_decay)
        .map_err(bad)
}

fn config(a: &TrainArgs, arch: Arch) -> Result<TrainConfig, BadInput> {
    let mut c = match &a.from {
        Some(path) => TrainConfig::imported(OnnxSource {
            path: path.clone(),
            head: a.head.clone(),
        }),
        None => TrainConfig::new(arch),
    };
    if let Some(e) = a.epochs {
        c.epochs = e;
    }
    c.steps = a.steps;
    if let Some(b) = a.batch {
        c.batch = b;
    }
    c.optimizer = optimizer(a, arch)?;
    if let Some(s) = a.seed {
        c.seed = s;
    }
    if let Some(h) = a.held_out {
        c.held_out = h;
    }
    c.clip_grad_norm = a.clip_grad_norm;
    c.backend = match a.backend {
        BackendArg::Eager => Interpreter::Eager,
        BackendArg::Compiled => Interpreter::Compiled,
    };
    c.verify_every = a.verify_every;
    c.detect_anomaly = a.detect_anomaly;
    Ok(c)
}

/// With `--resume`, the settings that decide what is computed come from the checkpoint; one
/// given on the command line must agree with it, except those a resumed run may change
/// ([`apply_resume_changes`]).
fn check_resume_flags(
    a: &TrainArgs,
    arch: Arch,
    c: &TrainConfig,
    path: &Path,
) -> Result<(), BadInput> {
    let mut conflicts = Vec::new();
    let mut check = |flag: &str, given: Option<String>, have: String| {
        if let Some(g) = given {
            if g != have {
                conflicts.push(format!("{flag} {g} (the checkpoint has {have})"));
            }
        }
    };
    check("--seed", a.seed.map(|v| v.to_string()), c.seed.to_string());
    check(
        "--held-out",
        a.held_out.map(|v| v.to_string()),
        c.held_out.to_string(),
    );
    check(
        "--optimizer",
        a.optimizer.clone(),
        c.optimizer.name().to_string(),
    );
    check("model", Some(arch.to_string()), c.arch.to_string());
    let from = |f: Option<&PathBuf>| f.map(|p| p.display().to_string());
    let had = c.from.as_ref().map(|f| &f.path);
    check(
        "--from",
        from(a.from.as_ref()),
        from(had).unwrap_or_default(),
    );
    let had = c.from.as_ref().and_then(|f| f.head.clone());
    check("--head", a.head.clone(), had.unwrap_or_default());
    let given = [
        ("--momentum", a.momentum.is_some()),
        ("--nesterov", a.nesterov),
        ("--weight-decay", a.weight_decay.is_some()),
    ];
    for (flag, _) in given.iter().filter(|(_, g)| *g) {
        conflicts.push(format!(
            "{flag} (the checkpoint's {} is kept, with its state; --lr, --batch and \
             --schedule may change)",
            c.optimizer.describe()
        ));
    }
    if conflicts.is_empty() {
        Ok(())
    } else {
        Err(BadInput(
            conflicts
                .into_iter()
                .map(|c| format!("{}: cannot resume with {c}", path.display()))
                .collect(),
        ))
    }
}

/// A resumed run's `--lr` and `--batch` where they differ from the checkpoint's, applied; the
/// optimizer state is kept. One line per change, for the header.
fn apply_resume_changes<V: TrainValue>(
    a: &TrainArgs,
    t: &mut Trainer<V>,
) -> Result<Vec<String>, BadInput> {
    let mut changes = Vec::new();
    let c = t.config().clone();
    if let Some(lr) = a.lr.filter(|&lr| lr != c.optimizer.lr()) {
        t.set_lr(lr).map_err(bad)?;
        changes.push(format!("lr {} -> {lr}", c.optimizer.lr()));
    }
    if let Some(batch) = a.batch.filter(|&b| b != c.batch) {
        let before = t.steps_done();
        let after = t.set_batch(batch).map_err(bad)?;
        changes.push(format!(
            "batch {} -> {batch} (step {before} -> {after}: the same place in epoch {})",
            c.batch,
            after / t.batches_per_epoch() + 1
        ));
    }
    Ok(changes)
}

/// Standard output for a run that must not stop when its output does: after the first failed
/// write nothing more is written, training goes on (and saves what it was asked to), and
/// [`Printer::finish`] reports the failure at the end.
#[derive(Default)]
pub(crate) struct Printer {
    failed: Option<WriteError>,
    /// Writes nothing: a rank other than 0 of a shared run.
    silent: bool,
}

impl Printer {
    /// The printer of a rank of a shared run: rank 0 writes, the others write nothing.
    pub(crate) fn for_rank(world: &torchlean_train::World) -> Printer {
        Printer {
            failed: None,
            silent: !world.is_root(),
        }
    }

    pub(crate) fn line(&mut self, text: impl std::fmt::Display) {
        if self.failed.is_none() && !self.silent {
            self.failed = out::line(text).err();
        }
    }

    pub(crate) fn finish(self) -> Result<(), WriteError> {
        self.failed.map_or(Ok(()), Err)
    }
}

/// Progress: a bar on a terminal, plain lines otherwise, JSON lines with `--json`.
struct Progress {
    bar: Option<ProgressBar>,
    json: bool,
    log_every: u64,
    out: Printer,
    /// The curves so far, for the plot of a run that stops early.
    curves: Curves,
}

impl Progress {
    fn line(&mut self, text: String) {
        match &self.bar {
            Some(b) => b.println(text),
            None => self.out.line(text),
        }
    }
}

impl Observer for Progress {
    fn event(&mut self, e: &Event<'_>) {
        match *e {
            Event::Start {
                first_step,
                last_step,
                ..
            } => {
                if let Some(b) = &self.bar {
                    b.set_length(last_step);
                    b.set_position(first_step);
                }
            }
            Event::Step {
                step,
                epoch,
                loss,
                lr,
            } => {
                self.curves.train.push((step as f64, loss));
                if let Some(b) = &self.bar {
                    b.set_position(step);
                    b.set_message(format!("loss {loss:.4}"));
                }
                if self.log_every > 0 && step % self.log_every == 0 {
                    if self.json {
                        self.out.line(json!({"event": "step", "step": step, "epoch": epoch, "loss": loss, "lr": lr}));
                    } else {
                        self.line(format!("step {step}: loss={loss:.6}"));
                    }
                }
            }
            Event::Verified { step, worst, param } => {
                if self.json {
                    self.out.line(
                        json!({"event": "verified", "step": step, "worst": worst, "param": param}),
                    );
                } else {
                    self.line(format!(
                        "step {step}: verified on reference-f64, worst relative deviation {worst:.2e} ({param})"
                    ));
                }
            }
            Event::Epoch {
                epoch,
                step,
                held_out_loss,
                held_out_accuracy,
            } => {
                self.curves.held_out.push((step as f64, held_out_loss));
                if self.json {
                    self.out.line(json!({"event": "epoch", "epoch": epoch + 1, "step": step, "held_out_loss": held_out_loss, "held_out_accuracy": held_out_accuracy}));
                } else {
                    self.line(format!(
                        "epoch {}: held-out loss={held_out_loss:.4} accuracy={:.2}%",
                        epoch + 1,
                        100.0 * held_out_accuracy
                    ));
                }
            }
        }
    }
}

fn print_summary(out: &mut Printer, s: &Summary, json_out: bool) {
    if json_out {
        let mut v = serde_json::to_value(s).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("losses");
            o.remove("held_out");
            o.insert("event".into(), json!("summary"));
        }
        out.line(v);
        return;
    }
    let per_step = if s.steps > 0 {
        s.train_seconds * 1e3 / s.steps as f64
    } else {
        0.0
    };
    out.line(format_args!(
        "summary: {} on {} ({}), steps {}..{}: training loss {:.4} -> {:.4}; held-out loss {:.4} -> {:.4}, accuracy {:.2}% -> {:.2}%",
        s.arch,
        s.engine,
        s.backend,
        s.first_step,
        s.first_step + s.steps,
        s.train_before.loss,
        s.train_after.loss,
        s.held_out_before.loss,
        s.held_out_after.loss,
        100.0 * s.held_out_before.accuracy,
        100.0 * s.held_out_after.accuracy,
    ));
    out.line(format_args!(
        "time: {:.2} s training ({per_step:.3} ms/step), {:.2} s held-out evaluation",
        s.train_seconds, s.eval_seconds
    ));
    if let Some(v) = &s.verify {
        out.line(format_args!(
            "verified: {} steps on reference-f64, worst relative deviation {:.2e} ({}), tolerance {:.0e}; cost {:.2} s ({:.0}% of training time)",
            v.checks,
            v.worst,
            v.worst_param,
            v.tolerance,
            v.seconds,
            100.0 * v.seconds / s.train_seconds.max(1e-9)
        ));
    }
}

/// Where a run interrupted by SIGINT saves its checkpoint: `--save`, else the `--resume`
/// checkpoint it continues (replaced atomically), else [`INTERRUPTED_CHECKPOINT`].
pub(crate) fn interrupt_path(a: &TrainArgs) -> PathBuf {
    a.save
        .clone()
        .or_else(|| a.resume.clone())
        .unwrap_or_else(|| PathBuf::from(INTERRUPTED_CHECKPOINT))
}

/// Every file the run will write at its end (`--save`, the classifier's optimizer file beside
/// it, `--plot`), checked before it trains, so that a bad path costs no training: a missing
/// directory is created, and one that cannot be, a directory in the file's place, a directory
/// that cannot be written, or a `--plot` not named `.svg` is bad input, one line each.
pub(crate) fn check_outputs(a: &TrainArgs) -> Result<(), BadInput> {
    let mut files: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(p) = &a.save {
        files.push(("--save", p.clone()));
        if a.model != Some(ModelArg::Gpt) {
            files.push(("--save", torchlean_train::trainer::optimizer_path(p)));
        }
    }
    if let Some(p) = &a.plot {
        files.push(("--plot", p.clone()));
    }
    let mut lines: Vec<String> = Vec::new();
    for (flag, path) in &files {
        // the optimizer file is beside --save: one line for the two
        let said = lines.iter().any(|l| l.starts_with(flag));
        if let (false, Err(why)) = (said, writable(path)) {
            lines.push(format!("{flag} {}: {why}", path.display()));
        }
    }
    if let Some(p) = &a.plot {
        let svg = p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        if !svg {
            lines.push(format!(
                "--plot {}: the plot is an SVG file; name it .svg",
                p.display()
            ));
        }
    }
    if lines.is_empty() {
        Ok(())
    } else {
        Err(BadInput(lines))
    }
}

/// Whether a file can be written at `path`: its directory exists (created if missing) and takes
/// a new file, and `path` is no directory. The probe file is removed again.
fn writable(path: &std::path::Path) -> Result<(), String> {
    if path.is_dir() {
        return Err("is a directory".into());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create its directory {}: {e}", dir.display()))?;
    let probe = dir.join(format!(".torchlean-write-check-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The checkpoint of an interrupted run given neither `--save` nor `--resume`, in the current
/// directory.
const INTERRUPTED_CHECKPOINT: &str = "torchlean-interrupted.safetensors";

/// A flag SIGINT sets, for [`Trainer::set_stop_flag`]: the first Ctrl-C asks the run to stop
/// at the next step boundary and save; a second one, while the first is handled, ends the
/// process at once with [`EXIT_INTERRUPTED`] (a save under way is atomic: the old checkpoint
/// survives). `None`, after a warning, when the handler cannot be installed (then Ctrl-C
/// kills the run as it would without one).
pub(crate) fn stop_on_sigint() -> Option<Arc<AtomicBool>> {
    use signal_hook::consts::SIGINT;
    let flag = Arc::new(AtomicBool::new(false));
    // the conditional shutdown first: it sees the flag as the previous SIGINT left it
    let installed = signal_hook::flag::register_conditional_shutdown(
        SIGINT,
        i32::from(EXIT_INTERRUPTED),
        Arc::clone(&flag),
    )
    .and_then(|_| signal_hook::flag::register(SIGINT, Arc::clone(&flag)));
    match installed {
        Ok(_) => Some(flag),
        Err(e) => {
            out::error_line(format_args!(
                "warning: cannot handle SIGINT ({e}); Ctrl-C will not save"
            ));
            None
        }
    }
}

/// After [`TrainError::Interrupted`]: saves the run where [`interrupt_path`] says and tells
/// stderr where, and how to continue.
fn save_interrupted<V: TrainValue>(
    a: &TrainArgs,
    t: &Trainer<V>,
    step: u64,
) -> Result<Outcome, Stop> {
    let path = interrupt_path(a);
    t.save(&path).map_err(bad)?;
    out::error_line(format_args!(
        "interrupted after step {step} of {}; saved a checkpoint to {} (optimizer \
         state: {}); continue with --resume {}",
        t.last_step(),
        path.display(),
        torchlean_train::trainer::optimizer_path(&path).display(),
        path.display()
    ));
    Ok(Outcome::Interrupted)
}

/// `--inject-fault` only where it can be seen: a fault that touches none of the ops the
/// model's step runs trains exactly as the correct engine, so `--verify-every` could never
/// catch it; it is refused, naming the model's ops and the faults that do touch them.
fn refuse_untouched(fault: Fault, cfg: &TrainConfig, data: &Dataset) -> Result<(), BadInput> {
    let model = cfg
        .classifier(data.features(), data.image(), data.classes())
        .map_err(bad)?;
    let ops = model.program_ops().map_err(bad)?;
    let touched = |f: &Fault| ops.iter().any(|op| f.touches(op));
    if touched(&fault) {
        return Ok(());
    }
    let mut names: Vec<&str> = Vec::new();
    for name in ops.iter().map(|op| op.name()) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let offered: Vec<&str> = Fault::ALL
        .iter()
        .filter(|f| touched(f))
        .map(|f| f.name())
        .collect();
    let instead = if offered.is_empty() {
        "no fault touches them".to_string()
    } else {
        format!("faults that touch them: {}", offered.join(", "))
    };
    Err(BadInput::one(format!(
        "--inject-fault {fault}: the {} model's step runs none of the ops it breaks ({}), so it would train as the correct engine; {instead}",
        cfg.arch,
        names.join(", ")
    )))
}

/// `train_on` the reference f64 engine with a fault injected.
struct TrainFaulty<'a> {
    a: &'a TrainArgs,
    arch: Arch,
    data: &'a Dataset,
    origin: &'a str,
    world: torchlean_train::World,
}

impl torchlean_faults::WithFault for TrainFaulty<'_> {
    type Output = Result<Outcome, Stop>;
    fn run<const F: u8>(self) -> Self::Output {
        type R = torchlean_spec::Tensor<f64>;
        let (a, arch, data, origin) = (self.a, self.arch, self.data, self.origin);
        train_on::<torchlean_faults::Faulty<R, F>>(a, arch, data, origin, self.world)
    }
}

fn train_on<V: TrainValue>(
    a: &TrainArgs,
    arch: Arch,
    data: &Dataset,
    origin: &str,
    world: torchlean_train::World,
) -> Result<Outcome, Stop> {
    let (mut t, resume_changes) = match trainer::<V>(a, arch, data) {
        Ok(made) => made,
        Err(stop) => return crate::distributed::settle(&world, Err(stop)),
    };
    if let Err(e) = t.set_world(world) {
        return crate::distributed::settle(t.world(), Err(bad(e).into()));
    }
    let result = train_shared(a, &mut t, data, origin, &resume_changes);
    crate::distributed::settle(t.world(), result)
}

/// The run's trainer: the checkpoint's with `--resume` (the flags it allows applied, and what
/// they changed, for the header), else a fresh one from the flags.
fn trainer<V: TrainValue>(
    a: &TrainArgs,
    arch: Arch,
    data: &Dataset,
) -> Result<(Trainer<V>, Vec<String>), Stop> {
    // what a resumed run changed, for the header
    let mut resume_changes: Vec<String> = Vec::new();
    let t = match &a.resume {
        Some(path) => {
            let mut t = Trainer::<V>::resume(path, data).map_err(bad)?;
            check_resume_flags(a, arch, t.config(), path)?;
            resume_changes = apply_resume_changes(a, &mut t)?;
            let epochs = a.epochs.unwrap_or(t.config().epochs);
            t.set_stop(epochs, a.steps);
            if let Some(s) = &a.schedule {
                let before = t.config().schedule.describe();
                t.set_schedule(s.over(t.last_step())).map_err(bad)?;
                let after = t.config().schedule.describe();
                if after != before {
                    resume_changes.push(format!("schedule {before} -> {after}"));
                }
            }
            if t.last_step() <= t.steps_done() {
                return Err(BadInput::one(format!(
                    "{}: the run is at step {} already, and --epochs {epochs}{} ends at step {}: \
                     --epochs and --steps are totals to reach, give more",
                    path.display(),
                    t.steps_done(),
                    a.steps.map(|s| format!(" --steps {s}")).unwrap_or_default(),
                    t.last_step()
                ))
                .into());
            }
            t.set_verify_every(a.verify_every);
            t.set_detect_anomaly(a.detect_anomaly);
            t
        }
        None => {
            let mut t = Trainer::<V>::new(config(a, arch)?, data).map_err(bad)?;
            if let Some(s) = &a.schedule {
                t.set_schedule(s.over(t.last_step())).map_err(bad)?;
            }
            if let Some(path) = &a.init_from {
                t.init_from(path).map_err(|e| BadInput::at(path, &e))?;
            }
            t
        }
    };
    Ok((t, resume_changes))
}

/// The run of `t`, on this rank of its world (a world of one: the whole run); rank 0 alone
/// prints and writes.
fn train_shared<V: TrainValue>(
    a: &TrainArgs,
    t: &mut Trainer<V>,
    data: &Dataset,
    origin: &str,
    resume_changes: &[String],
) -> Result<Outcome, Stop> {
    let c = t.config().clone();
    let root = t.world().is_root();
    let mut printer = Printer::for_rank(t.world());
    if a.json {
        printer.line(json!({
            "event": "start",
            "model": model_label(t.model()),
            "data": origin,
            "train_examples": t.train_set().len(),
            "held_out_examples": t.held_out_set().len(),
            "features": data.features(),
            "classes": data.classes(),
            "engine": V::ENGINE,
            "backend": c.backend.name(),
            "optimizer": c.optimizer.describe(),
            "schedule": c.schedule.describe(),
            "batch": c.batch,
            "first_step": t.steps_done(),
            "last_step": t.last_step(),
            "resume_changes": resume_changes,
            "ranks": t.world().size(),
        }));
    } else {
        printer.line(format_args!(
            "training {} on {origin}: {} examples for training, {} held out; {} features, {} classes; {} {}{}; {}{} batch {}; steps {}..{}",
            model_label(t.model()),
            t.train_set().len(),
            t.held_out_set().len(),
            data.features(),
            data.classes(),
            V::ENGINE,
            c.backend.name(),
            crate::distributed::on_ranks(t.world()),
            c.optimizer.describe(),
            schedule_label(&c.schedule),
            c.batch,
            t.steps_done(),
            t.last_step()
        ));
        if !resume_changes.is_empty() {
            printer.line(format_args!(
                "resumed with {}; the optimizer state is kept",
                resume_changes.join(", ")
            ));
        }
    }
    let mut progress = Progress {
        bar: if root {
            progress_bar(a, t.last_step(), t.steps_done())
        } else {
            None
        },
        json: a.json,
        log_every: a.log_every,
        out: printer,
        curves: Curves {
            title: format!(
                "torchlean train {} ({}, {})",
                c.arch,
                V::ENGINE,
                c.backend.name()
            ),
            train: Vec::new(),
            held_out: Vec::new(),
        },
    };
    if let Some(flag) = stop_on_sigint() {
        t.set_stop_flag(flag);
    }
    let result = t.run(&mut progress);
    if let Some(b) = &progress.bar {
        b.finish_and_clear();
    }
    let summary = match result {
        Ok(s) => s,
        // every rank stops at the same step; rank 0 saves
        Err(TrainError::Interrupted { .. }) if !root => return Ok(Outcome::Interrupted),
        Err(TrainError::Interrupted { step }) => return save_interrupted(a, t, step),
        Err(e @ (TrainError::VerifyFailed { .. } | TrainError::Anomaly { .. })) => {
            let mut printer = progress.out;
            stopped_event(a, &mut printer, t, &e);
            printer.finish()?;
            out::error_line(chain(&e));
            if t.world().size() > 1 {
                // found on this rank alone (rank 0 verifies; an anomaly is in a rank's rows)
                t.world().abort(1);
            }
            return Ok(Outcome::Failed);
        }
        // every rank found it: rank 0 says so, and each stops
        Err(e @ TrainError::RanksDiverged { .. }) => {
            if root {
                out::error_line(chain(&e));
            }
            return Ok(Outcome::Failed);
        }
        // the global loss: every rank stops; rank 0 writes what was asked for
        Err(TrainError::NonFiniteLoss { .. }) if !root => return Ok(Outcome::Failed),
        // the plot and checkpoint asked for, of the last finite step, then the failure
        Err(e @ TrainError::NonFiniteLoss { .. }) => {
            let mut printer = progress.out;
            stopped_event(a, &mut printer, t, &e);
            write_outputs(a, &mut printer, &progress.curves, |path| {
                t.save(path)?;
                Ok(format!(
                    "wrote {} and its optimizer state: the last step with a finite loss, {}",
                    path.display(),
                    t.steps_done()
                ))
            })?;
            printer.finish()?;
            out::error_line(chain(&e));
            return Ok(Outcome::Failed);
        }
        Err(e) => return Err(bad(e).into()),
    };
    if !root {
        return Ok(Outcome::Ok);
    }
    let mut printer = progress.out;
    print_summary(&mut printer, &summary, a.json);
    let curves = progress.curves;
    write_outputs(a, &mut printer, &curves, |path| {
        t.save(path)?;
        Ok(format!(
            "wrote {} (the state_dict) and {} (the optimizer state)",
            path.display(),
            torchlean_train::trainer::optimizer_path(path).display()
        ))
    })?;
    printer.finish()?;
    Ok(Outcome::Ok)
}

/// With `--json`, the line that says the run stopped early, at which step and why (the reason
/// goes to standard error too, as without `--json`).
fn stopped_event<V: TrainValue>(
    a: &TrainArgs,
    printer: &mut Printer,
    t: &Trainer<V>,
    e: &TrainError,
) {
    if a.json {
        printer.line(json!({"event": "stopped", "step": t.steps_done(), "reason": chain(e)}));
    }
}

/// The schedule for the header: nothing when constant.
fn schedule_label(s: &torchlean_train::Schedule) -> String {
    match s {
        torchlean_train::Schedule::Constant => String::new(),
        other => format!(" {}", other.describe()),
    }
}

/// What the header calls the model: its name, or the imported file and what became of its
/// head.
fn model_label(m: &torchlean_train::model::Classifier) -> String {
    let Some(net) = m.imported_net() else {
        return m.arch().to_string();
    };
    let head = match (net.replaced_head(), &net.source().head) {
        (Some((old, new)), Some(name)) => {
            format!("; head `{name}` replaced: {old} -> {new} classes, freshly initialised")
        }
        _ => String::new(),
    };
    format!("{} (imported{head})", net.source().path.display())
}

/// A terminal progress bar over `len` steps at `position` (none with `--json` or off a terminal).
pub(crate) fn progress_bar(a: &TrainArgs, len: u64, position: u64) -> Option<ProgressBar> {
    (!a.json && std::io::stdout().is_terminal()).then(|| {
        let b = ProgressBar::new(len);
        b.set_position(position);
        if let Ok(style) =
            ProgressStyle::with_template("{bar:40} {pos}/{len} steps {msg} [{elapsed}<{eta}]")
        {
            b.set_style(style);
        }
        b
    })
}

/// A finished run's loss curves, `(step, loss)`, for `--plot`.
pub(crate) struct Curves {
    pub title: String,
    pub train: Vec<(f64, f64)>,
    pub held_out: Vec<(f64, f64)>,
}

/// The end of a finished run, either trainer: `--plot` writes the curves, then `--save` (or,
/// without it, the `--resume` file) is passed to `save`, which returns the line saying what it
/// wrote; each prints its line unless `--json`.
pub(crate) fn write_outputs(
    a: &TrainArgs,
    printer: &mut Printer,
    curves: &Curves,
    save: impl FnOnce(&std::path::Path) -> Result<String, TrainError>,
) -> Result<(), Stop> {
    match &a.plot {
        // a run stopped before its first finite step has nothing to draw
        Some(path) if curves.train.is_empty() => {
            out::error_line(format_args!("{}: no finite step to plot", path.display()))
        }
        Some(path) => {
            torchlean_train::plot::loss_svg(path, &curves.title, &curves.train, &curves.held_out)
                .map_err(bad)?;
            if a.json {
                printer.line(json!({"event": "wrote", "file": path, "content": "plot"}));
            } else {
                printer.line(format_args!("wrote {}", path.display()));
            }
        }
        None => {}
    }
    // a resumed run without --save goes back to its checkpoint, and says so
    let back = a.save.is_none() && a.resume.is_some();
    if let Some(path) = a.save.as_ref().or(a.resume.as_ref()) {
        let wrote = save(path).map_err(bad)?;
        if a.json {
            printer.line(json!({
                "event": "wrote",
                "file": path,
                "content": "checkpoint",
                "optimizer_file": torchlean_train::trainer::optimizer_path(path),
                "resume_file": back,
            }));
        } else {
            let back = if back {
                "; the --resume file, as no --save was given"
            } else {
                ""
            };
            printer.line(format_args!("{wrote}{back}"));
        }
    }
    Ok(())
}

pub fn run(a: &TrainArgs) -> Result<Outcome, Stop> {
    // inside the pool, so that this thread is one of its threads (`torchlean_engine_cpu`'s
    // crate documentation)
    let n = a.threads.unwrap_or_else(torchlean_engines::default_threads);
    torchlean_engines::with_threads(n, || run_here(a))
}

/// [`run`] on the current thread pool.
fn run_here(a: &TrainArgs) -> Result<Outcome, Stop> {
    check_outputs(a)?;
    let arch = match a.model {
        Some(ModelArg::Mlp) => Arch::Mlp,
        Some(ModelArg::Cnn) => Arch::Cnn,
        Some(ModelArg::Gpt) => return crate::train_gpt::run(a),
        None => Arch::Onnx,
    };
    crate::train_gpt::refuse_gpt_flags(a, arch)?;
    let (data, origin) = match &a.csv {
        Some(path) => (
            Dataset::from_csv(path, &a.label_column).map_err(bad)?,
            path.display().to_string(),
        ),
        None => (
            Dataset::digits().map_err(bad)?,
            "the 8×8 digits".to_string(),
        ),
    };
    if let Some(fault) = a.inject_fault {
        refuse_untouched(fault, &config(a, arch)?, &data)?;
        return fault.with(TrainFaulty {
            a,
            arch,
            data: &data,
            origin: &origin,
            world: crate::distributed::world(a)?,
        });
    }
    let sel = crate::engine::select(a.engine, crate::engine::dtype(a.dtype))?;
    let world = crate::distributed::world(a)?;
    crate::engine::with_engine!(sel, V => train_on::<V>(a, arch, &data, &origin, world))
}
