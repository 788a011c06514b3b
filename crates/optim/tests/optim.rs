//! The optimizers, gradient clipping and schedules against PyTorch 2.15.
//!
//! `fixtures/optim.json` is made by `tools/pytorch/optim_fixture.py` (see its header): a small
//! MLP trained for 20 steps by each optimizer configuration in float64, recording the
//! gradients of every step and the parameters after it. The optimizer is isolated from our
//! autograd: each step here is fed PyTorch's recorded gradients, and every parameter after
//! every step is compared with PyTorch's.

use std::collections::BTreeMap;

use serde::Deserialize;
use torchlean_optim::optim::buffer;
use torchlean_optim::{
    clip_grad_norm, OptimConfig, OptimError, Optimizer, Param, ParamState, Schedule, Scheduler,
};

#[derive(Deserialize)]
struct Fixture {
    torch_version: String,
    params: Vec<ParamInit>,
    runs: Vec<Run>,
    schedules: Vec<ScheduleCase>,
}

#[derive(Deserialize)]
struct ParamInit {
    name: String,
    init: Vec<f64>,
}

#[derive(Deserialize)]
struct Run {
    name: String,
    optimizer: OptimConfig,
    schedule: Schedule,
    clip: Option<f64>,
    steps: Vec<StepRecord>,
    final_state: BTreeMap<String, StateRecord>,
}

#[derive(Deserialize)]
struct StepRecord {
    lr: f64,
    grads: Vec<Vec<f64>>,
    total_norm: Option<f64>,
    params: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
struct StateRecord {
    step: Option<u64>,
    buffers: BTreeMap<String, Vec<f64>>,
}

#[derive(Deserialize)]
struct ScheduleCase {
    name: String,
    base_lr: f64,
    schedule: Schedule,
    lrs: Vec<f64>,
}

fn fixture() -> Fixture {
    let text = include_str!("fixtures/optim.json");
    serde_json::from_str(text).expect("the fixture parses")
}

/// `|a - b| / |b|` (`|a|` where `b` is 0).
fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else if b == 0.0 {
        a.abs()
    } else {
        ((a - b) / b).abs()
    }
}

/// What a run's comparison saw: the largest element-wise relative error over every parameter
/// after every step, and how many elements differed at all.
#[derive(Debug, Default)]
struct Deviation {
    max_rel: f64,
    /// Largest `max |ours - torch| / max |torch|` over every tensor after every step.
    max_tensor_rel: f64,
    differing: usize,
    compared: usize,
}

impl Deviation {
    fn add(&mut self, ours: &[f64], torch: &[f64]) {
        assert_eq!(ours.len(), torch.len());
        let scale = torch.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for (&a, &b) in ours.iter().zip(torch) {
            self.max_rel = self.max_rel.max(rel(a, b));
            self.max_tensor_rel = self.max_tensor_rel.max((a - b).abs() / scale);
            self.differing += usize::from(a.to_bits() != b.to_bits());
            self.compared += 1;
        }
    }
}

/// Replays `run` with our optimizer in `T`, fed PyTorch's gradients (rounded to `T`), and
/// returns the deviation of the parameters from PyTorch's float64 ones.
fn replay<T>(run: &Run, init: &[ParamInit]) -> Deviation
where
    T: torchlean_optim::Element,
{
    let to_t = |v: &[f64]| -> Vec<T> {
        v.iter()
            .map(|&x| T::from_f64(x).expect("f64 to T"))
            .collect()
    };
    let to_f64 =
        |v: &[T]| -> Vec<f64> { v.iter().map(|x| x.to_f64().expect("T to f64")).collect() };
    let names: Vec<&str> = init.iter().map(|p| p.name.as_str()).collect();
    let mut values: Vec<Vec<T>> = init.iter().map(|p| to_t(&p.init)).collect();
    let mut opt = Optimizer::<T>::new(run.optimizer.clone()).expect("a valid config");
    let mut sched =
        Scheduler::new(run.schedule.clone(), run.optimizer.lr()).expect("a valid schedule");
    let mut dev = Deviation::default();
    for (k, rec) in run.steps.iter().enumerate() {
        assert_eq!(
            sched.lr().to_bits(),
            rec.lr.to_bits(),
            "{}: step {k}: lr {} vs PyTorch's {}",
            run.name,
            sched.lr(),
            rec.lr
        );
        let mut grads: Vec<Vec<T>> = rec.grads.iter().map(|g| to_t(g)).collect();
        if let Some(max_norm) = run.clip {
            let mut views: Vec<&mut [T]> = grads.iter_mut().map(|g| g.as_mut_slice()).collect();
            let norm = clip_grad_norm(&mut views, max_norm);
            let torch = rec.total_norm.expect("a clipping run records the norm");
            let tol = if T::NAME == "f64" { 1e-14 } else { 1e-6 };
            assert!(
                rel(norm, torch) <= tol,
                "{}: step {k}: total norm {norm} vs PyTorch's {torch}",
                run.name
            );
        }
        let mut params: Vec<Param<'_, T>> = names
            .iter()
            .zip(values.iter_mut())
            .zip(&grads)
            .map(|((name, value), grad)| Param { name, value, grad })
            .collect();
        opt.step(sched.lr(), &mut params).expect("a step");
        sched.step();
        for (ours, torch) in values.iter().zip(&rec.params) {
            dev.add(&to_f64(ours), torch);
        }
    }
    // The state at the end: PyTorch's buffer names, step counts and values.
    for (name, torch) in &run.final_state {
        let ours = &opt.state()[name];
        if let Some(step) = torch.step {
            assert_eq!(ours.step, step, "{}: `{name}` step", run.name);
        }
        assert_eq!(
            ours.buffers.keys().collect::<Vec<_>>(),
            torch.buffers.keys().collect::<Vec<_>>(),
            "{}: `{name}` buffer names",
            run.name
        );
        for (b, values) in &torch.buffers {
            dev.add(&to_f64(&ours.buffers[b]), values);
        }
    }
    dev
}

/// Runs that must equal PyTorch bit for bit: SGD without clipping uses only `+ - *` and fused
/// multiply-adds, all exactly rounded. The others differ in the last bit here and there because
/// PyTorch's CPU `sqrt` (MKL's vectorised `vdSqrt`) is not correctly rounded: it is 1 ulp off
/// for about 0.7 % of f64 inputs, where ours is IEEE `sqrt` (traced for the first difference of
/// `adam` and of `rmsprop_centered_momentum`); clipping sums in another order than PyTorch.
fn exact_everywhere(run: &Run) -> bool {
    matches!(run.optimizer, OptimConfig::Sgd { .. }) && run.clip.is_none()
}

#[test]
fn f64_trajectories_match_pytorch() {
    let f = fixture();
    assert!(f.torch_version.starts_with("2.15"), "{}", f.torch_version);
    assert_eq!(f.runs.len(), 13);
    for run in &f.runs {
        let dev = replay::<f64>(run, &f.params);
        eprintln!(
            "f64 {:<28} max rel err {:.2e}, {} of {} values differ from PyTorch's bits",
            run.name, dev.max_rel, dev.differing, dev.compared
        );
        assert!(dev.max_rel <= 1e-12, "{}: {dev:?}", run.name);
        if exact_everywhere(run) {
            assert_eq!(dev.differing, 0, "{}: not bit-exact: {dev:?}", run.name);
        }
    }
}

#[test]
fn f32_trajectories_stay_close_to_pytorch_f64() {
    // The same data rounded to f32, our f32 path, against PyTorch's f64 trajectory: the
    // deviation is f32 rounding accumulated over 20 steps.
    let f = fixture();
    let mut worst = 0.0f64;
    for run in &f.runs {
        let dev = replay::<f32>(run, &f.params);
        eprintln!(
            "f32 {:<28} max |ours - torch| / max |torch| per tensor {:.2e} (element-wise max rel {:.2e})",
            run.name, dev.max_tensor_rel, dev.max_rel
        );
        worst = worst.max(dev.max_tensor_rel);
    }
    assert!(worst <= 1e-5, "f32 deviation {worst:.2e}");
}

#[test]
fn schedules_match_pytorch() {
    let f = fixture();
    for case in &f.schedules {
        let mut s = Scheduler::new(case.schedule.clone(), case.base_lr).expect("valid");
        let uses_cos = format!("{:?}", case.schedule).contains("Cosine");
        let mut differing = 0;
        for (t, &torch) in case.lrs.iter().enumerate() {
            let ours = s.lr();
            assert_eq!(s.t(), t as u64);
            differing += usize::from(ours.to_bits() != torch.to_bits());
            if uses_cos {
                // `cos` comes from the platform's libm, as Python's does.
                assert!(
                    rel(ours, torch) <= 1e-15,
                    "{} t={t}: {ours} vs {torch}",
                    case.name
                );
            } else {
                assert_eq!(
                    ours.to_bits(),
                    torch.to_bits(),
                    "{} t={t}: {ours} vs {torch}",
                    case.name
                );
            }
            s.step();
        }
        eprintln!(
            "schedule {:<14} {} steps, {differing} differ from PyTorch's bits",
            case.name,
            case.lrs.len()
        );
        // The O(t) replay agrees with the stepped scheduler.
        for t in [0u64, 1, 5, 6, 17, 49] {
            assert_eq!(
                case.schedule.lr(case.base_lr, t).to_bits(),
                Scheduler::resume(case.schedule.clone(), case.base_lr, t)
                    .expect("valid")
                    .lr()
                    .to_bits()
            );
        }
    }
}

#[test]
fn chainable_formulas_are_not_the_closed_forms() {
    // Why `Scheduler` replays PyTorch's recursions: the closed forms differ in the last bits.
    let f = fixture();
    let case = |name: &str| {
        f.schedules
            .iter()
            .find(|c| c.name == name)
            .expect("a fixture schedule")
    };
    let cos = case("cosine_1000");
    let closed = |t: usize| 0.1 * (1.0 + (std::f64::consts::PI * t as f64 / 1000.0).cos()) / 2.0;
    let worst = (0..1000)
        .map(|t| (cos.lrs[t] - closed(t)).abs() / 0.1)
        .fold(0.0f64, f64::max);
    let differing = (0..1000).filter(|&t| cos.lrs[t] != closed(t)).count();
    eprintln!("cosine_1000: closed form differs at {differing} of 1000 steps, max |diff|/base {worst:.2e}");
    assert!(worst < 1e-14);
    // LinearLR's end value: PyTorch's chain reaches 0.19999999999999998, not 0.2.
    let lin = case("linear_warmup");
    assert_ne!(lin.lrs[8], 0.2);
    assert_eq!(lin.lrs[8], case("linear_warmup").schedule.lr(0.2, 8));
}

fn invalid_field(result: Result<(), OptimError>) -> &'static str {
    match result {
        Err(OptimError::InvalidSetting { field, .. }) => field,
        other => panic!("expected InvalidSetting, got {other:?}"),
    }
}

#[test]
fn invalid_optimizer_configs_are_errors() {
    let sgd = |momentum: f64, dampening: f64, weight_decay: f64, nesterov: bool| OptimConfig::Sgd {
        lr: 0.1,
        momentum,
        dampening,
        weight_decay,
        nesterov,
    };
    let adam = |betas: (f64, f64), eps: f64, weight_decay: f64| OptimConfig::Adam {
        lr: 1e-3,
        betas,
        eps,
        weight_decay,
        amsgrad: false,
    };
    let cases: Vec<(OptimConfig, &str)> = vec![
        (OptimConfig::sgd(-0.1), "lr"),
        (OptimConfig::sgd(f64::NAN), "lr"),
        (sgd(-0.5, 0.0, 0.0, false), "momentum"),
        (sgd(0.0, 0.0, -1e-4, false), "weight_decay"),
        (sgd(0.0, 0.0, 0.0, true), "momentum"),
        (sgd(0.9, 0.1, 0.0, true), "dampening"),
        (sgd(0.9, f64::NAN, 0.0, false), "dampening"),
        (OptimConfig::adam(-1e-3), "lr"),
        (adam((1.0, 0.999), 1e-8, 0.0), "betas.0"),
        (adam((-0.1, 0.999), 1e-8, 0.0), "betas.0"),
        (adam((0.9, 1.0), 1e-8, 0.0), "betas.1"),
        (adam((0.9, 0.999), -1e-8, 0.0), "eps"),
        (adam((0.9, 0.999), 1e-8, -0.1), "weight_decay"),
        (
            OptimConfig::AdamW {
                lr: 1e-3,
                betas: (0.9, f64::NAN),
                eps: 1e-8,
                weight_decay: 0.01,
                amsgrad: true,
            },
            "betas.1",
        ),
        (
            OptimConfig::RmsProp {
                lr: 0.01,
                alpha: -0.5,
                eps: 1e-8,
                weight_decay: 0.0,
                momentum: 0.0,
                centered: false,
            },
            "alpha",
        ),
        (
            OptimConfig::RmsProp {
                lr: 0.01,
                alpha: 0.99,
                eps: 1e-8,
                weight_decay: 0.0,
                momentum: -0.1,
                centered: true,
            },
            "momentum",
        ),
        (
            OptimConfig::RmsProp {
                lr: 0.01,
                alpha: 0.99,
                eps: -1.0,
                weight_decay: 0.0,
                momentum: 0.0,
                centered: false,
            },
            "eps",
        ),
        (
            OptimConfig::Adagrad {
                lr: 0.01,
                lr_decay: -0.1,
                weight_decay: 0.0,
                initial_accumulator_value: 0.0,
                eps: 1e-10,
            },
            "lr_decay",
        ),
        (
            OptimConfig::Adagrad {
                lr: 0.01,
                lr_decay: 0.0,
                weight_decay: 0.0,
                initial_accumulator_value: -1.0,
                eps: 1e-10,
            },
            "initial_accumulator_value",
        ),
        (
            OptimConfig::Adagrad {
                lr: 0.01,
                lr_decay: 0.0,
                weight_decay: -1.0,
                initial_accumulator_value: 0.0,
                eps: 1e-10,
            },
            "weight_decay",
        ),
    ];
    for (config, field) in cases {
        assert_eq!(invalid_field(config.validate()), field, "{config:?}");
        assert!(Optimizer::<f64>::new(config).is_err());
    }
    // PyTorch's defaults and the boundary values are valid.
    for config in [
        OptimConfig::sgd(0.0),
        sgd(0.9, 0.0, 0.1, true),
        OptimConfig::adam(1e-3),
        adam((0.0, 0.0), 0.0, 0.0),
        OptimConfig::adamw(1e-3),
        OptimConfig::rmsprop(1e-2),
        OptimConfig::adagrad(1e-2),
    ] {
        config.validate().expect("valid");
    }
    // The message says what and why.
    let msg = sgd(0.0, 0.0, 0.0, true)
        .validate()
        .expect_err("nesterov without momentum")
        .to_string();
    assert_eq!(
        msg,
        "sgd: momentum = 0 is invalid (expected > 0 with nesterov)"
    );
}

#[test]
fn optimizer_names_parse_with_pytorch_defaults() {
    assert_eq!(
        OptimConfig::parse("sgd", Some(0.1)).expect("sgd"),
        OptimConfig::sgd(0.1)
    );
    assert_eq!(
        OptimConfig::parse("AdamW", None).expect("adamw"),
        OptimConfig::adamw(1e-3)
    );
    assert_eq!(
        "rmsprop".parse::<OptimConfig>().expect("rmsprop").lr(),
        1e-2
    );
    for name in OptimConfig::NAMES {
        assert_eq!(
            OptimConfig::parse(name, None).expect("a name").name(),
            *name
        );
    }
    let err = OptimConfig::parse("adamx", None).expect_err("not a name");
    assert_eq!(
        err.to_string(),
        "unknown optimizer `adamx` (expected one of: sgd, adam, adamw, rmsprop, adagrad)"
    );
    assert!(matches!(
        OptimConfig::parse("adam", Some(-1.0)),
        Err(OptimError::InvalidSetting { field: "lr", .. })
    ));
}

#[test]
fn configs_round_trip_through_serde_with_defaults() {
    let adam: OptimConfig =
        serde_json::from_str(r#"{"kind":"adam","lr":0.01}"#).expect("defaults fill in");
    assert_eq!(adam, OptimConfig::adam(0.01));
    let adamw: OptimConfig =
        serde_json::from_str(r#"{"kind":"adamw","lr":0.01}"#).expect("defaults fill in");
    assert_eq!(adamw, OptimConfig::adamw(0.01));
    let typo = serde_json::from_str::<OptimConfig>(r#"{"kind":"sgd","lr":0.1,"momentun":0.9}"#);
    assert!(typo.is_err(), "unknown fields are errors");
    for config in [
        OptimConfig::sgd(0.1),
        OptimConfig::adam(1e-3),
        OptimConfig::adamw(1e-3),
        OptimConfig::rmsprop(1e-2),
        OptimConfig::adagrad(1e-2),
    ] {
        let text = serde_json::to_string(&config).expect("serialise");
        assert!(
            text.contains(&format!(r#""kind":"{}""#, config.name())),
            "{text}"
        );
        assert_eq!(
            serde_json::from_str::<OptimConfig>(&text).expect("read back"),
            config
        );
    }
    let schedule = Schedule::warmup(
        5,
        0.1,
        Schedule::Cosine {
            t_max: 100,
            eta_min: 0.0,
        },
    );
    let text = serde_json::to_string(&schedule).expect("serialise");
    assert_eq!(
        serde_json::from_str::<Schedule>(&text).expect("read back"),
        schedule
    );
    let constant: Schedule = serde_json::from_str(r#"{"kind":"constant"}"#).expect("constant");
    assert_eq!(constant, Schedule::Constant);
}

#[test]
fn invalid_schedules_are_errors() {
    let cases: Vec<(Schedule, &str)> = vec![
        (
            Schedule::Step {
                step_size: 0,
                gamma: 0.1,
            },
            "step_size",
        ),
        (
            Schedule::Step {
                step_size: 3,
                gamma: f64::NAN,
            },
            "gamma",
        ),
        (
            Schedule::Cosine {
                t_max: 0,
                eta_min: 0.0,
            },
            "t_max",
        ),
        (
            Schedule::Cosine {
                t_max: 10,
                eta_min: f64::INFINITY,
            },
            "eta_min",
        ),
        (
            Schedule::Linear {
                start_factor: 0.0,
                end_factor: 1.0,
                total_iters: 5,
            },
            "start_factor",
        ),
        (
            Schedule::Linear {
                start_factor: 1.5,
                end_factor: 1.0,
                total_iters: 5,
            },
            "start_factor",
        ),
        (
            Schedule::Linear {
                start_factor: 0.5,
                end_factor: -0.1,
                total_iters: 5,
            },
            "end_factor",
        ),
        (
            Schedule::Linear {
                start_factor: 0.5,
                end_factor: 1.0,
                total_iters: 0,
            },
            "total_iters",
        ),
        (
            Schedule::warmup(
                5,
                0.1,
                Schedule::Step {
                    step_size: 0,
                    gamma: 0.5,
                },
            ),
            "step_size",
        ),
    ];
    for (schedule, field) in cases {
        assert_eq!(invalid_field(schedule.validate()), field, "{schedule:?}");
        assert!(Scheduler::new(schedule, 0.1).is_err());
    }
    let sequential = |schedules: Vec<Schedule>, milestones: Vec<u64>| Schedule::Sequential {
        schedules,
        milestones,
    };
    for (schedule, problem) in [
        (sequential(vec![], vec![]), "needs at least one schedule"),
        (
            sequential(vec![Schedule::Constant, Schedule::Constant], vec![]),
            "needs one milestone fewer than schedules",
        ),
        (
            sequential(
                vec![Schedule::Constant, Schedule::Constant, Schedule::Constant],
                vec![5, 5],
            ),
            "milestones must be strictly increasing",
        ),
        (
            sequential(
                vec![
                    Schedule::Constant,
                    Schedule::warmup(2, 0.5, Schedule::Constant),
                ],
                vec![3],
            ),
            "a part may not be sequential itself",
        ),
    ] {
        match schedule.validate() {
            Err(OptimError::SequentialSchedule { problem: p, .. }) => assert_eq!(p, problem),
            other => panic!("{schedule:?}: {other:?}"),
        }
    }
}

/// A state for one parameter `w` with the given buffers.
fn state_with(buffers: &[(&str, usize)]) -> BTreeMap<String, ParamState<f64>> {
    let mut state = BTreeMap::new();
    state.insert(
        "w".to_owned(),
        ParamState {
            step: 3,
            buffers: buffers
                .iter()
                .map(|(b, n)| ((*b).to_owned(), vec![0.5; *n]))
                .collect(),
        },
    );
    state
}

#[test]
fn loading_mismatched_state_is_an_error_naming_the_parameter() {
    let mut opt = Optimizer::<f64>::new(OptimConfig::adam(1e-3)).expect("valid");
    // Buffers of different lengths.
    let err = opt
        .load_state(state_with(&[(buffer::EXP_AVG, 4), (buffer::EXP_AVG_SQ, 3)]))
        .expect_err("lengths differ");
    assert!(
        matches!(&err, OptimError::OptimBufferLength { name, .. } if name == "w"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "parameter `w`: optimizer buffer `exp_avg_sq` has 3 elements, `exp_avg` has 4"
    );
    // A missing and an unexpected buffer.
    let err = opt
        .load_state(state_with(&[(buffer::EXP_AVG, 4)]))
        .expect_err("no exp_avg_sq");
    assert!(
        matches!(&err, OptimError::MissingOptimBuffer { name, buffer: "exp_avg_sq", .. } if name == "w"),
        "{err:?}"
    );
    let err = opt
        .load_state(state_with(&[
            (buffer::EXP_AVG, 4),
            (buffer::EXP_AVG_SQ, 4),
            (buffer::SUM, 4),
        ]))
        .expect_err("sum is Adagrad's");
    assert!(
        matches!(&err, OptimError::UnexpectedOptimBuffer { name, buffer, .. } if name == "w" && buffer == "sum"),
        "{err:?}"
    );
    assert!(opt.state().is_empty(), "a failed load changes nothing");

    // Consistent state whose length is not the parameter's: the step refuses before changing
    // anything.
    opt.load_state(state_with(&[(buffer::EXP_AVG, 4), (buffer::EXP_AVG_SQ, 4)]))
        .expect("consistent");
    let before = opt.clone();
    let mut w = vec![1.0, 2.0, 3.0];
    let mut b = vec![1.0];
    let err = opt
        .step(
            1e-3,
            &mut [
                Param {
                    name: "b",
                    value: &mut b,
                    grad: &[0.5],
                },
                Param {
                    name: "w",
                    value: &mut w,
                    grad: &[0.1, 0.2, 0.3],
                },
            ],
        )
        .expect_err("state of 4 for a parameter of 3");
    assert!(
        matches!(&err, OptimError::Length { name, want: 3, got: 4, .. } if name == "w"),
        "{err:?}"
    );
    assert_eq!(opt, before, "nothing stepped");
    assert_eq!((w, b), (vec![1.0, 2.0, 3.0], vec![1.0]));

    // SGD creates its momentum buffer lazily, as PyTorch does: a state without one loads.
    let mut sgd = Optimizer::<f64>::new(OptimConfig::Sgd {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
    })
    .expect("valid");
    sgd.load_state(state_with(&[])).expect("no buffer yet");
}

#[test]
fn bad_steps_are_errors() {
    let mut opt = Optimizer::<f64>::new(OptimConfig::sgd(0.1)).expect("valid");
    let mut w = vec![1.0, 2.0];
    let err = opt
        .step(
            0.1,
            &mut [Param {
                name: "w",
                value: &mut w,
                grad: &[1.0],
            }],
        )
        .expect_err("gradient too short");
    assert!(
        matches!(&err, OptimError::Length { name, what: "its gradient", want: 2, got: 1 } if name == "w"),
        "{err:?}"
    );
    let mut v = vec![1.0];
    let mut u = vec![1.0];
    let err = opt
        .step(
            0.1,
            &mut [
                Param {
                    name: "w",
                    value: &mut v,
                    grad: &[1.0],
                },
                Param {
                    name: "w",
                    value: &mut u,
                    grad: &[1.0],
                },
            ],
        )
        .expect_err("the same name twice");
    assert!(matches!(&err, OptimError::DuplicateParam { name } if name == "w"));
    let err = opt
        .step(
            -1.0,
            &mut [Param {
                name: "w",
                value: &mut v,
                grad: &[1.0],
            }],
        )
        .expect_err("negative lr");
    assert!(matches!(
        err,
        OptimError::InvalidSetting { field: "lr", .. }
    ));
    assert!(opt.state().is_empty());
    assert_eq!((w, v, u), (vec![1.0, 2.0], vec![1.0], vec![1.0]));
}

#[test]
fn resumed_steps_are_bit_identical_to_uninterrupted_ones() {
    let f = fixture();
    let names: Vec<&str> = f.params.iter().map(|p| p.name.as_str()).collect();
    let step_all = |opt: &mut Optimizer<f64>,
                    sched: &mut Scheduler,
                    values: &mut [Vec<f64>],
                    rec: &StepRecord| {
        let mut params: Vec<Param<'_, f64>> = names
            .iter()
            .zip(values.iter_mut())
            .zip(&rec.grads)
            .map(|((name, value), grad)| Param { name, value, grad })
            .collect();
        opt.step(sched.lr(), &mut params).expect("a step");
        sched.step();
    };
    for run in f.runs.iter().filter(|r| r.clip.is_none()) {
        let init: Vec<Vec<f64>> = f.params.iter().map(|p| p.init.clone()).collect();
        let base = run.optimizer.lr();
        // Uninterrupted.
        let mut values = init.clone();
        let mut opt = Optimizer::<f64>::new(run.optimizer.clone()).expect("valid");
        let mut sched = Scheduler::new(run.schedule.clone(), base).expect("valid");
        for rec in &run.steps {
            step_all(&mut opt, &mut sched, &mut values, rec);
        }
        // Ten steps, a checkpoint (the state through JSON), a fresh optimizer and scheduler.
        let mut resumed = init.clone();
        let mut first = Optimizer::<f64>::new(run.optimizer.clone()).expect("valid");
        let mut first_sched = Scheduler::new(run.schedule.clone(), base).expect("valid");
        for rec in &run.steps[..10] {
            step_all(&mut first, &mut first_sched, &mut resumed, rec);
        }
        let saved = serde_json::to_string(first.state()).expect("serialise the state");
        let mut second = Optimizer::<f64>::new(run.optimizer.clone()).expect("valid");
        second
            .load_state(serde_json::from_str(&saved).expect("read back"))
            .expect("load");
        assert_eq!(second.state(), first.state());
        let mut second_sched = Scheduler::resume(run.schedule.clone(), base, 10).expect("valid");
        assert_eq!(second_sched, first_sched);
        for rec in &run.steps[10..] {
            step_all(&mut second, &mut second_sched, &mut resumed, rec);
        }
        let bits =
            |v: &[Vec<f64>]| -> Vec<u64> { v.iter().flatten().map(|x| x.to_bits()).collect() };
        assert_eq!(bits(&resumed), bits(&values), "{}", run.name);
        assert_eq!(second.state(), opt.state(), "{}", run.name);
    }
}
