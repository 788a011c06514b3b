//! Learning-rate schedules with PyTorch's values: `StepLR`, `CosineAnnealingLR`, `LinearLR`
//! (linear warm-up or decay), `SequentialLR` (warm-up followed by another schedule), constant.
//!
//! PyTorch's schedulers compute each rate from the previous one ("chainable" recursive
//! formulas), and the result differs from the closed forms in the last bits (StepLR with
//! `gamma = 0.3`, LinearLR's end value, the cosine's tail after many steps). [`Scheduler`]
//! replays those recursions step by step, including what `SequentialLR` does at construction
//! and at each milestone, so the rates are PyTorch's bit for bit (`tests/optim.rs` checks them
//! against PyTorch for 50 steps, the cosine for 1000).
//!
//! Step `t` (counting from 0) of a training loop uses [`Schedule::lr`]`(base_lr, t)`: the rate
//! after `t` calls of `scheduler.step()` in PyTorch.

use serde::{Deserialize, Serialize};

use crate::error::{OptimError, Result};

/// A learning-rate schedule. Serialised internally tagged: `{"kind": "cosine", "t_max": 100,
/// "eta_min": 0.0}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Schedule {
    /// The base rate throughout (PyTorch: `LambdaLR(opt, lambda _: 1.0)`, or no scheduler).
    Constant,
    /// `StepLR(step_size, gamma)`: the rate is multiplied by `gamma` every `step_size` steps.
    Step {
        /// Steps between decays (`>= 1`).
        step_size: u64,
        /// Multiplicative factor (finite, `>= 0`).
        gamma: f64,
    },
    /// `CosineAnnealingLR(T_max, eta_min)`: half a cosine from the base rate down to `eta_min`
    /// over `t_max` steps (then back up, as PyTorch continues it).
    Cosine {
        /// Half period in steps (`>= 1`).
        t_max: u64,
        /// The minimum rate (finite).
        #[serde(default)]
        eta_min: f64,
    },
    /// `LinearLR(start_factor, end_factor, total_iters)`: the factor moves linearly from
    /// `start_factor` to `end_factor` over `total_iters` steps, then stays.
    Linear {
        /// Factor at step 0, in `(0, 1]`.
        start_factor: f64,
        /// Factor from step `total_iters` on, in `[0, 1]`.
        end_factor: f64,
        /// Steps of the ramp (`>= 1`).
        total_iters: u64,
    },
    /// `SequentialLR(schedules, milestones)`: `schedules[i]` runs from `milestones[i - 1]` on,
    /// restarted at its milestone. Parts may not be sequential themselves.
    Sequential {
        /// The parts, in order.
        schedules: Vec<Schedule>,
        /// Strictly increasing steps at which the next part starts (one fewer than parts).
        milestones: Vec<u64>,
    },
}

impl Schedule {
    /// Linear warm-up from `start_factor · base_lr` to `base_lr` over `steps` steps, then `then`
    /// (restarted at step `steps`): `SequentialLR([LinearLR(start_factor, 1.0, steps), then],
    /// [steps])`.
    pub fn warmup(steps: u64, start_factor: f64, then: Schedule) -> Self {
        Self::Sequential {
            schedules: vec![
                Self::Linear {
                    start_factor,
                    end_factor: 1.0,
                    total_iters: steps,
                },
                then,
            ],
            milestones: vec![steps],
        }
    }

    /// PyTorch's scheduler call (`CosineAnnealingLR(T_max=900, eta_min=0)`), for headers.
    pub fn describe(&self) -> String {
        match self {
            Self::Constant => "constant".to_string(),
            Self::Step { step_size, gamma } => {
                format!("StepLR(step_size={step_size}, gamma={gamma})")
            }
            Self::Cosine { t_max, eta_min } => {
                format!("CosineAnnealingLR(T_max={t_max}, eta_min={eta_min})")
            }
            Self::Linear {
                start_factor,
                end_factor,
                total_iters,
            } => format!(
                "LinearLR(start_factor={start_factor}, end_factor={end_factor}, total_iters={total_iters})"
            ),
            Self::Sequential {
                schedules,
                milestones,
            } => {
                let parts: Vec<String> = schedules.iter().map(Schedule::describe).collect();
                format!(
                    "SequentialLR([{}], milestones={milestones:?})",
                    parts.join(", ")
                )
            }
        }
    }

    /// PyTorch's validity rules, and those its formulas need not to divide by zero.
    pub fn validate(&self) -> Result<()> {
        let invalid = |owner, field, value, expected| {
            Err(OptimError::InvalidSetting {
                owner,
                field,
                value,
                expected,
            })
        };
        match self {
            Self::Constant => Ok(()),
            Self::Step { step_size, gamma } => {
                if *step_size == 0 {
                    return invalid("step schedule", "step_size", 0.0, ">= 1");
                }
                if !(gamma.is_finite() && *gamma >= 0.0) {
                    return invalid("step schedule", "gamma", *gamma, "finite and >= 0");
                }
                Ok(())
            }
            Self::Cosine { t_max, eta_min } => {
                if *t_max == 0 {
                    return invalid("cosine schedule", "t_max", 0.0, ">= 1");
                }
                if !eta_min.is_finite() {
                    return invalid("cosine schedule", "eta_min", *eta_min, "finite");
                }
                Ok(())
            }
            Self::Linear {
                start_factor,
                end_factor,
                total_iters,
            } => {
                if !(*start_factor > 0.0 && *start_factor <= 1.0) {
                    return invalid(
                        "linear schedule",
                        "start_factor",
                        *start_factor,
                        "in (0, 1]",
                    );
                }
                if !(*end_factor >= 0.0 && *end_factor <= 1.0) {
                    return invalid("linear schedule", "end_factor", *end_factor, "in [0, 1]");
                }
                if *total_iters == 0 {
                    return invalid("linear schedule", "total_iters", 0.0, ">= 1");
                }
                Ok(())
            }
            Self::Sequential {
                schedules,
                milestones,
            } => {
                let fail = |problem| {
                    Err(OptimError::SequentialSchedule {
                        schedules: schedules.len(),
                        milestones: milestones.clone(),
                        problem,
                    })
                };
                if schedules.is_empty() {
                    return fail("needs at least one schedule");
                }
                if milestones.len() + 1 != schedules.len() {
                    return fail("needs one milestone fewer than schedules");
                }
                if milestones.windows(2).any(|w| w[0] >= w[1]) {
                    return fail("milestones must be strictly increasing");
                }
                if schedules
                    .iter()
                    .any(|s| matches!(s, Self::Sequential { .. }))
                {
                    return fail("a part may not be sequential itself");
                }
                schedules.iter().try_for_each(Self::validate)
            }
        }
    }

    /// The rate of step `t` (from 0) for base rate `base_lr`: PyTorch's value after `t`
    /// scheduler steps. Replays the recursion, so it costs `O(t)`; a training loop advances a
    /// [`Scheduler`] instead. NaN if the schedule is invalid ([`Schedule::validate`]).
    pub fn lr(&self, base_lr: f64, t: u64) -> f64 {
        match Scheduler::resume(self.clone(), base_lr, t) {
            Ok(s) => s.lr(),
            Err(_) => f64::NAN,
        }
    }
}

/// One PyTorch scheduler's counters (`last_epoch`, `_step_count`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Counters {
    last_epoch: i64,
    step_count: u64,
}

impl Counters {
    const NEW: Self = Self {
        last_epoch: -1,
        step_count: 0,
    };
}

/// A schedule being stepped: the learning rate PyTorch's optimizer group holds, and the
/// counters of PyTorch's scheduler objects, advanced once per training step.
#[derive(Clone, Debug, PartialEq)]
pub struct Scheduler {
    schedule: Schedule,
    base_lr: f64,
    /// The group's `lr`.
    lr: f64,
    /// Steps taken (`SequentialLR.last_epoch`).
    t: u64,
    /// One per part (one for a schedule that is not sequential).
    parts: Vec<Counters>,
}

impl Scheduler {
    /// The schedule at step 0 (as PyTorch's constructor leaves it); `schedule` is validated.
    pub fn new(schedule: Schedule, base_lr: f64) -> Result<Self> {
        schedule.validate()?;
        let n = match &schedule {
            Schedule::Sequential { schedules, .. } => schedules.len(),
            _ => 1,
        };
        let mut s = Self {
            schedule,
            base_lr,
            lr: base_lr,
            t: 0,
            parts: vec![Counters::NEW; n],
        };
        match &s.schedule {
            Schedule::Sequential {
                schedules,
                milestones,
            } => {
                // Each part is constructed first (an initial step each, which changes the
                // group's rate), then SequentialLR restores the base rate, undoes one epoch of
                // every part and gives the part of epoch 0 its initial step again.
                for (part, c) in schedules.iter().zip(s.parts.iter_mut()) {
                    initial_step(part, c, &mut s.lr, base_lr);
                }
                s.lr = base_lr;
                for c in &mut s.parts {
                    c.last_epoch -= 1;
                }
                let i = milestones.partition_point(|&m| m == 0);
                initial_step(&schedules[i], &mut s.parts[i], &mut s.lr, base_lr);
            }
            single => initial_step(single, &mut s.parts[0], &mut s.lr, base_lr),
        }
        Ok(s)
    }

    /// The schedule at step `t`, as after `t` calls of [`Scheduler::step`] (checkpoint resume:
    /// the rates from here on are the uninterrupted run's, bit for bit).
    pub fn resume(schedule: Schedule, base_lr: f64, t: u64) -> Result<Self> {
        let mut s = Self::new(schedule, base_lr)?;
        for _ in 0..t {
            s.step();
        }
        Ok(s)
    }

    /// The rate of the current step.
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// The current step (scheduler steps taken).
    pub fn t(&self) -> u64 {
        self.t
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The base rate.
    pub fn base_lr(&self) -> f64 {
        self.base_lr
    }

    /// Advances one step (PyTorch's `scheduler.step()` after `optimizer.step()`).
    pub fn step(&mut self) {
        self.t += 1;
        let base = self.base_lr;
        match &self.schedule {
            Schedule::Sequential {
                schedules,
                milestones,
            } => {
                let i = milestones.partition_point(|&m| m <= self.t);
                if i > 0 && milestones[i - 1] == self.t {
                    // `scheduler._update_lr(0)`: the closed form at epoch 0.
                    self.parts[i].last_epoch = 0;
                    self.lr = closed_form(&schedules[i], 0, base);
                } else {
                    step(&schedules[i], &mut self.parts[i], &mut self.lr, base, false);
                }
            }
            single => step(single, &mut self.parts[0], &mut self.lr, base, false),
        }
    }
}

/// `LRScheduler._initial_step`.
fn initial_step(s: &Schedule, c: &mut Counters, lr: &mut f64, base: f64) {
    c.step_count = 0;
    step(s, c, lr, base, true);
}

/// `LRScheduler.step()` (with `_is_initial` as given): the counters advance and the group's
/// rate becomes `get_lr()`.
fn step(s: &Schedule, c: &mut Counters, lr: &mut f64, base: f64, initial: bool) {
    c.step_count += 1;
    c.last_epoch += 1;
    *lr = get_lr(s, *c, *lr, base, initial);
}

/// Each scheduler's `get_lr()`, in Python's order of operations.
fn get_lr(s: &Schedule, c: Counters, lr: f64, base: f64, initial: bool) -> f64 {
    let e = c.last_epoch;
    match *s {
        Schedule::Constant => base,
        Schedule::Step { step_size, gamma } => {
            if e == 0 || e.rem_euclid(step_size as i64) != 0 {
                lr
            } else {
                lr * gamma
            }
        }
        Schedule::Linear {
            start_factor,
            end_factor,
            total_iters,
        } => {
            if e == 0 {
                lr * start_factor
            } else if initial || e > total_iters as i64 {
                lr
            } else {
                lr * (1.0
                    + (end_factor - start_factor)
                        / (total_iters as f64 * start_factor
                            + (e - 1) as f64 * (end_factor - start_factor)))
            }
        }
        Schedule::Cosine { t_max, eta_min } => {
            let pi = std::f64::consts::PI;
            let t = t_max as f64;
            if initial {
                lr
            } else if c.step_count == 1 && e > 0 {
                eta_min + (base - eta_min) * (1.0 + (e as f64 * pi / t).cos()) / 2.0
            } else if (e - 1 - t_max as i64).rem_euclid(2 * t_max as i64) == 0 {
                lr + (base - eta_min) * (1.0 - (pi / t).cos()) / 2.0
            } else {
                (1.0 + (pi * e as f64 / t).cos()) / (1.0 + (pi * (e - 1) as f64 / t).cos())
                    * (lr - eta_min)
                    + eta_min
            }
        }
        Schedule::Sequential { .. } => unreachable!("validate rejects nested sequential schedules"),
    }
}

/// Each scheduler's `_get_closed_form_lr()` at `epoch` (what `SequentialLR` uses at a
/// milestone).
fn closed_form(s: &Schedule, epoch: u64, base: f64) -> f64 {
    match *s {
        Schedule::Constant => base,
        Schedule::Step { step_size, gamma } => base * gamma.powf((epoch / step_size) as f64),
        Schedule::Linear {
            start_factor,
            end_factor,
            total_iters,
        } => {
            base * (start_factor
                + (end_factor - start_factor) * total_iters.min(epoch) as f64 / total_iters as f64)
        }
        Schedule::Cosine { t_max, eta_min } => {
            eta_min
                + (base - eta_min)
                    * (1.0 + (std::f64::consts::PI * epoch as f64 / t_max as f64).cos())
                    / 2.0
        }
        Schedule::Sequential { .. } => unreachable!("validate rejects nested sequential schedules"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_schedule_by_hand() {
        // gamma 0.5 is exact in binary: 1, 1, 0.5, 0.5, 0.25.
        let s = Schedule::Step {
            step_size: 2,
            gamma: 0.5,
        };
        let lrs: Vec<f64> = (0..5).map(|t| s.lr(1.0, t)).collect();
        assert_eq!(lrs, [1.0, 1.0, 0.5, 0.5, 0.25]);
    }

    #[test]
    fn linear_warmup_by_hand() {
        // factors 0.25, 0.5, 0.75, 1, 1 (exact: each ratio is (k+1)/k with small k).
        let s = Schedule::Linear {
            start_factor: 0.25,
            end_factor: 1.0,
            total_iters: 3,
        };
        let lrs: Vec<f64> = (0..5).map(|t| s.lr(4.0, t)).collect();
        assert_eq!(lrs, [1.0, 2.0, 3.0, 4.0, 4.0]);
    }

    #[test]
    fn cosine_half_way_and_at_the_end() {
        let s = Schedule::Cosine {
            t_max: 2,
            eta_min: 0.0,
        };
        assert_eq!(s.lr(1.0, 0), 1.0);
        assert!((s.lr(1.0, 1) - 0.5).abs() < 1e-15);
        assert!(s.lr(1.0, 2).abs() < 1e-15);
    }

    #[test]
    fn an_invalid_schedule_has_nan_rates() {
        let s = Schedule::Step {
            step_size: 0,
            gamma: 0.5,
        };
        assert!(s.lr(1.0, 3).is_nan());
    }
}
