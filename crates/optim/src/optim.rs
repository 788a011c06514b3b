//! PyTorch's optimizers — SGD, Adam, AdamW, RMSprop, Adagrad (`clip_grad_norm_` is
//! `torchlean_runtime::clip_grad_norm`, beside the update rules every engine runs).
//!
//! An optimizer's configuration ([`OptimConfig`]) yields each step's rule
//! ([`OptimConfig::rule`]: the scalars — bias corrections, step sizes — computed in f64 as
//! Python computes them); the engines run the rule ([`torchlean_runtime::UpdateRule`]), which
//! follows PyTorch 2.15's single-tensor path (`foreach=False`) operation by operation. On the
//! fixture in `tests/fixtures/optim.json` SGD's f64 results equal PyTorch's bit for bit; the
//! others agree to ~2e-15 relative, and differ at all only where PyTorch's CPU `sqrt` (MKL's
//! `vdSqrt`) is 1 ulp off the correctly rounded square root used here.
//!
//! Two holders of the state share the rules and the checks: [`Optimizer`] steps host slices
//! (the library's API for any data), [`EngineOptimizer`] steps engine values where they live
//! (the trainer's: on the CUDA device nothing crosses to the host). A step allocates only the
//! first time it sees a parameter (its state).
//!
//! State is kept per parameter name, with PyTorch's buffer names (`momentum_buffer`, `exp_avg`,
//! `exp_avg_sq`, `max_exp_avg_sq`, `square_avg`, `grad_avg`, `sum`), so a checkpoint can store
//! it under the names PyTorch uses and [`Optimizer::load_state`] can resume bit-identically.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{OptimError, Result};
use torchlean_nn::Session;
pub use torchlean_runtime::clip_grad_norm;
use torchlean_runtime::{AdamDecay, Element, SgdMomentum, TrainValue, UpdateRule};
use torchlean_spec::Shape;

/// PyTorch's state buffer names.
pub mod buffer {
    /// SGD's (and RMSprop's) momentum.
    pub const MOMENTUM_BUFFER: &str = "momentum_buffer";
    /// Adam's first moment.
    pub const EXP_AVG: &str = "exp_avg";
    /// Adam's second moment.
    pub const EXP_AVG_SQ: &str = "exp_avg_sq";
    /// Adam's running maximum of the second moment (`amsgrad`).
    pub const MAX_EXP_AVG_SQ: &str = "max_exp_avg_sq";
    /// RMSprop's running mean of squared gradients.
    pub const SQUARE_AVG: &str = "square_avg";
    /// RMSprop's running mean of gradients (`centered`).
    pub const GRAD_AVG: &str = "grad_avg";
    /// Adagrad's sum of squared gradients.
    pub const SUM: &str = "sum";
}

use buffer::*;

/// An optimizer and its hyper-parameters, with PyTorch's names and defaults.
///
/// `lr` is the base learning rate; a schedule derives each step's rate from it and passes it
/// to [`Optimizer::step`]. Serialised internally tagged: `{"kind": "adam", "lr": 0.001, ...}`;
/// fields left out take PyTorch's defaults, unknown fields are errors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum OptimConfig {
    /// `torch.optim.SGD`.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum factor (0: none).
        #[serde(default)]
        momentum: f64,
        /// Dampening of the momentum.
        #[serde(default)]
        dampening: f64,
        /// L2 penalty added to the gradient.
        #[serde(default)]
        weight_decay: f64,
        /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
        #[serde(default)]
        nesterov: bool,
    },
    /// `torch.optim.Adam` (weight decay added to the gradient).
    Adam {
        /// Learning rate.
        lr: f64,
        /// Decay rates of the first and second moments.
        #[serde(default = "default_betas")]
        betas: (f64, f64),
        /// Added to the denominator.
        #[serde(default = "default_adam_eps")]
        eps: f64,
        /// L2 penalty added to the gradient.
        #[serde(default)]
        weight_decay: f64,
        /// Use the running maximum of the second moment.
        #[serde(default)]
        amsgrad: bool,
    },
    /// `torch.optim.AdamW` (decoupled weight decay: the parameter shrinks by `lr·weight_decay`).
    AdamW {
        /// Learning rate.
        lr: f64,
        /// Decay rates of the first and second moments.
        #[serde(default = "default_betas")]
        betas: (f64, f64),
        /// Added to the denominator.
        #[serde(default = "default_adam_eps")]
        eps: f64,
        /// Decoupled weight decay.
        #[serde(default = "default_adamw_weight_decay")]
        weight_decay: f64,
        /// Use the running maximum of the second moment.
        #[serde(default)]
        amsgrad: bool,
    },
    /// `torch.optim.RMSprop`.
    #[serde(rename = "rmsprop")]
    RmsProp {
        /// Learning rate.
        lr: f64,
        /// Smoothing constant.
        #[serde(default = "default_alpha")]
        alpha: f64,
        /// Added to the denominator.
        #[serde(default = "default_adam_eps")]
        eps: f64,
        /// L2 penalty added to the gradient.
        #[serde(default)]
        weight_decay: f64,
        /// Momentum factor (0: none).
        #[serde(default)]
        momentum: f64,
        /// Normalise by the estimated variance of the gradient.
        #[serde(default)]
        centered: bool,
    },
    /// `torch.optim.Adagrad`.
    Adagrad {
        /// Learning rate.
        lr: f64,
        /// Learning-rate decay: step `t` uses `lr / (1 + (t - 1)·lr_decay)`.
        #[serde(default)]
        lr_decay: f64,
        /// L2 penalty added to the gradient.
        #[serde(default)]
        weight_decay: f64,
        /// Initial value of the `sum` buffer.
        #[serde(default)]
        initial_accumulator_value: f64,
        /// Added to the denominator.
        #[serde(default = "default_adagrad_eps")]
        eps: f64,
    },
}

fn default_betas() -> (f64, f64) {
    (0.9, 0.999)
}
fn default_adam_eps() -> f64 {
    1e-8
}
fn default_adamw_weight_decay() -> f64 {
    1e-2
}
fn default_alpha() -> f64 {
    0.99
}
fn default_adagrad_eps() -> f64 {
    1e-10
}

impl OptimConfig {
    /// The names [`OptimConfig::parse`] accepts, as `--optimizer` takes them.
    pub const NAMES: &'static [&'static str] = &["sgd", "adam", "adamw", "rmsprop", "adagrad"];

    /// SGD with PyTorch's defaults: no momentum, dampening or weight decay.
    pub fn sgd(lr: f64) -> Self {
        Self::Sgd {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }

    /// Adam with PyTorch's defaults: betas (0.9, 0.999), eps 1e-8, no weight decay.
    pub fn adam(lr: f64) -> Self {
        Self::Adam {
            lr,
            betas: default_betas(),
            eps: default_adam_eps(),
            weight_decay: 0.0,
            amsgrad: false,
        }
    }

    /// AdamW with PyTorch's defaults: betas (0.9, 0.999), eps 1e-8, weight decay 1e-2.
    pub fn adamw(lr: f64) -> Self {
        Self::AdamW {
            lr,
            betas: default_betas(),
            eps: default_adam_eps(),
            weight_decay: default_adamw_weight_decay(),
            amsgrad: false,
        }
    }

    /// RMSprop with PyTorch's defaults: alpha 0.99, eps 1e-8, no weight decay or momentum.
    pub fn rmsprop(lr: f64) -> Self {
        Self::RmsProp {
            lr,
            alpha: default_alpha(),
            eps: default_adam_eps(),
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
        }
    }

    /// Adagrad with PyTorch's defaults: no lr decay or weight decay, accumulator 0, eps 1e-10.
    pub fn adagrad(lr: f64) -> Self {
        Self::Adagrad {
            lr,
            lr_decay: 0.0,
            weight_decay: 0.0,
            initial_accumulator_value: 0.0,
            eps: default_adagrad_eps(),
        }
    }

    /// The optimizer `name` (one of [`OptimConfig::NAMES`], any case) with PyTorch's defaults,
    /// and `lr`, or PyTorch's default learning rate where `lr` is `None` (1e-3 for SGD, Adam
    /// and AdamW, 1e-2 for RMSprop and Adagrad). The result is validated.
    pub fn parse(name: &str, lr: Option<f64>) -> Result<Self> {
        let config = match name.to_ascii_lowercase().as_str() {
            "sgd" => Self::sgd(lr.unwrap_or(1e-3)),
            "adam" => Self::adam(lr.unwrap_or(1e-3)),
            "adamw" => Self::adamw(lr.unwrap_or(1e-3)),
            "rmsprop" => Self::rmsprop(lr.unwrap_or(1e-2)),
            "adagrad" => Self::adagrad(lr.unwrap_or(1e-2)),
            _ => {
                return Err(OptimError::UnknownOptimizer {
                    name: name.to_owned(),
                    expected: Self::NAMES,
                })
            }
        };
        config.validate()?;
        Ok(config)
    }

    /// The lowercase name (`"sgd"`, `"adam"`, `"adamw"`, `"rmsprop"`, `"adagrad"`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sgd { .. } => "sgd",
            Self::Adam { .. } => "adam",
            Self::AdamW { .. } => "adamw",
            Self::RmsProp { .. } => "rmsprop",
            Self::Adagrad { .. } => "adagrad",
        }
    }

    /// The base learning rate.
    pub fn lr(&self) -> f64 {
        match *self {
            Self::Sgd { lr, .. }
            | Self::Adam { lr, .. }
            | Self::AdamW { lr, .. }
            | Self::RmsProp { lr, .. }
            | Self::Adagrad { lr, .. } => lr,
        }
    }

    /// The same configuration with these of PyTorch's options set (`momentum`: SGD and
    /// RMSprop; `nesterov`: SGD; `weight_decay`: all), validated. An option this optimizer does
    /// not have is [`OptimError::OptimizerOption`], naming the optimizers that have it.
    pub fn with_options(
        mut self,
        momentum: Option<f64>,
        nesterov: bool,
        weight_decay: Option<f64>,
    ) -> Result<Self> {
        let name = self.name();
        let missing = |option: &'static str, have: &'static str| OptimError::OptimizerOption {
            optimizer: name,
            option,
            have,
        };
        match &mut self {
            Self::Sgd {
                momentum: m,
                nesterov: n,
                ..
            } => {
                *m = momentum.unwrap_or(*m);
                *n = nesterov || *n;
            }
            Self::RmsProp { momentum: m, .. } => {
                *m = momentum.unwrap_or(*m);
                if nesterov {
                    return Err(missing("--nesterov", "sgd"));
                }
            }
            _ if momentum.is_some() => return Err(missing("--momentum", "sgd, rmsprop")),
            _ if nesterov => return Err(missing("--nesterov", "sgd")),
            _ => {}
        }
        if let Some(wd) = weight_decay {
            match &mut self {
                Self::Sgd { weight_decay, .. }
                | Self::Adam { weight_decay, .. }
                | Self::AdamW { weight_decay, .. }
                | Self::RmsProp { weight_decay, .. }
                | Self::Adagrad { weight_decay, .. } => *weight_decay = wd,
            }
        }
        self.validate()?;
        Ok(self)
    }

    /// PyTorch's constructor call with every hyper-parameter (`SGD(lr=0.05, momentum=0.9,
    /// dampening=0, weight_decay=0, nesterov=False)`), for headers and logs.
    pub fn describe(&self) -> String {
        let class = match self {
            Self::Sgd { .. } => "SGD",
            Self::Adam { .. } => "Adam",
            Self::AdamW { .. } => "AdamW",
            Self::RmsProp { .. } => "RMSprop",
            Self::Adagrad { .. } => "Adagrad",
        };
        let value = serde_json::to_value(self).unwrap_or_default();
        let mut entries: Vec<(&String, &serde_json::Value)> = value
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != "kind")
            .collect();
        // the learning rate first, as PyTorch's signatures have it
        entries.sort_by_key(|(k, _)| k.as_str() != "lr");
        let fields: Vec<String> = entries
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::Bool(b) => if *b { "True" } else { "False" }.to_string(),
                    serde_json::Value::Array(a) => {
                        let items: Vec<String> = a.iter().map(|x| x.to_string()).collect();
                        format!("({})", items.join(", "))
                    }
                    other => other.to_string(),
                };
                format!("{k}={v}")
            })
            .collect();
        format!("{class}({})", fields.join(", "))
    }

    /// The same configuration with base learning rate `lr`.
    pub fn with_lr(mut self, new: f64) -> Self {
        match &mut self {
            Self::Sgd { lr, .. }
            | Self::Adam { lr, .. }
            | Self::AdamW { lr, .. }
            | Self::RmsProp { lr, .. }
            | Self::Adagrad { lr, .. } => *lr = new,
        }
        self
    }

    /// The buffers this optimizer keeps per parameter, by PyTorch's names, sorted.
    pub fn state_buffers(&self) -> &'static [&'static str] {
        match *self {
            Self::Sgd { momentum, .. } if momentum != 0.0 => &[MOMENTUM_BUFFER],
            Self::Sgd { .. } => &[],
            Self::Adam { amsgrad, .. } | Self::AdamW { amsgrad, .. } => {
                if amsgrad {
                    &[EXP_AVG, EXP_AVG_SQ, MAX_EXP_AVG_SQ]
                } else {
                    &[EXP_AVG, EXP_AVG_SQ]
                }
            }
            Self::RmsProp {
                momentum, centered, ..
            } => match (momentum > 0.0, centered) {
                (false, false) => &[SQUARE_AVG],
                (true, false) => &[MOMENTUM_BUFFER, SQUARE_AVG],
                (false, true) => &[GRAD_AVG, SQUARE_AVG],
                (true, true) => &[GRAD_AVG, MOMENTUM_BUFFER, SQUARE_AVG],
            },
            Self::Adagrad { .. } => &[SUM],
        }
    }

    /// PyTorch's validity rules (its constructors' `ValueError`s), and no NaN anywhere:
    /// learning rate, weight decay, eps, momentum, lr decay, alpha and the initial accumulator
    /// `>= 0`; Adam's betas in `[0, 1)`; Nesterov needs `momentum > 0` and `dampening == 0`.
    pub fn validate(&self) -> Result<()> {
        let owner = self.name();
        let at_least_zero = |field: &'static str, value: f64| {
            if value >= 0.0 {
                Ok(())
            } else {
                Err(OptimError::InvalidSetting {
                    owner,
                    field,
                    value,
                    expected: ">= 0",
                })
            }
        };
        let beta = |field: &'static str, value: f64| {
            if (0.0..1.0).contains(&value) {
                Ok(())
            } else {
                Err(OptimError::InvalidSetting {
                    owner,
                    field,
                    value,
                    expected: "in [0, 1)",
                })
            }
        };
        at_least_zero("lr", self.lr())?;
        match *self {
            Self::Sgd {
                momentum,
                dampening,
                weight_decay,
                nesterov,
                ..
            } => {
                at_least_zero("momentum", momentum)?;
                at_least_zero("weight_decay", weight_decay)?;
                if dampening.is_nan() {
                    return Err(OptimError::InvalidSetting {
                        owner,
                        field: "dampening",
                        value: dampening,
                        expected: "a number",
                    });
                }
                if nesterov && momentum <= 0.0 {
                    return Err(OptimError::InvalidSetting {
                        owner,
                        field: "momentum",
                        value: momentum,
                        expected: "> 0 with nesterov",
                    });
                }
                if nesterov && dampening != 0.0 {
                    return Err(OptimError::InvalidSetting {
                        owner,
                        field: "dampening",
                        value: dampening,
                        expected: "0 with nesterov",
                    });
                }
            }
            Self::Adam {
                betas,
                eps,
                weight_decay,
                ..
            }
            | Self::AdamW {
                betas,
                eps,
                weight_decay,
                ..
            } => {
                at_least_zero("eps", eps)?;
                beta("betas.0", betas.0)?;
                beta("betas.1", betas.1)?;
                at_least_zero("weight_decay", weight_decay)?;
            }
            Self::RmsProp {
                alpha,
                eps,
                weight_decay,
                momentum,
                ..
            } => {
                at_least_zero("eps", eps)?;
                at_least_zero("momentum", momentum)?;
                at_least_zero("weight_decay", weight_decay)?;
                at_least_zero("alpha", alpha)?;
            }
            Self::Adagrad {
                lr_decay,
                weight_decay,
                initial_accumulator_value,
                eps,
                ..
            } => {
                at_least_zero("lr_decay", lr_decay)?;
                at_least_zero("weight_decay", weight_decay)?;
                at_least_zero("initial_accumulator_value", initial_accumulator_value)?;
                at_least_zero("eps", eps)?;
            }
        }
        Ok(())
    }
}

impl FromStr for OptimConfig {
    type Err = OptimError;

    /// [`OptimConfig::parse`] with PyTorch's default learning rate.
    fn from_str(name: &str) -> Result<Self> {
        Self::parse(name, None)
    }
}

/// One parameter handed to [`Optimizer::step`]: its name (the key of its state), its data,
/// updated in place, and its gradient.
#[derive(Debug)]
pub struct Param<'a, T> {
    /// The parameter's name (PyTorch's, e.g. `0.weight`).
    pub name: &'a str,
    /// The data, updated in place.
    pub value: &'a mut [T],
    /// The gradient, as long as `value`.
    pub grad: &'a [T],
}

/// An optimizer's state for one parameter: PyTorch's `state[p]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ParamState<T> {
    /// Steps taken on this parameter (PyTorch keeps it for Adam, AdamW, RMSprop and Adagrad;
    /// here every optimizer counts).
    pub step: u64,
    /// The buffers by PyTorch's names ([`OptimConfig::state_buffers`]), each as long as the
    /// parameter.
    pub buffers: BTreeMap<String, Vec<T>>,
}

/// An optimizer: a configuration and the state of every parameter it has stepped.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer<T: Element> {
    config: OptimConfig,
    state: BTreeMap<String, ParamState<T>>,
}

/// `x` rounded to the element type (how PyTorch passes a Python float to a kernel).
#[inline(always)]
fn c<T: Element>(x: f64) -> T {
    T::from_f64(x).expect("every f64 converts to f32 and f64")
}

/// A static description of a buffer for [`OptimError::Length`].
fn buffer_what(name: &str) -> &'static str {
    match name {
        MOMENTUM_BUFFER => "its optimizer buffer `momentum_buffer`",
        EXP_AVG => "its optimizer buffer `exp_avg`",
        EXP_AVG_SQ => "its optimizer buffer `exp_avg_sq`",
        MAX_EXP_AVG_SQ => "its optimizer buffer `max_exp_avg_sq`",
        SQUARE_AVG => "its optimizer buffer `square_avg`",
        GRAD_AVG => "its optimizer buffer `grad_avg`",
        SUM => "its optimizer buffer `sum`",
        _ => "an optimizer buffer",
    }
}

/// The static name equal to `name` (for errors), if it is one of PyTorch's.
fn static_name(name: &str) -> &'static str {
    [
        MOMENTUM_BUFFER,
        EXP_AVG,
        EXP_AVG_SQ,
        MAX_EXP_AVG_SQ,
        SQUARE_AVG,
        GRAD_AVG,
        SUM,
    ]
    .into_iter()
    .find(|n| *n == name)
    .unwrap_or("?")
}

/// The buffers named `names`, mutably, in that order.
fn in_order<'m, B>(buffers: &'m mut BTreeMap<String, B>, names: &[&str]) -> Vec<&'m mut B> {
    let mut out: Vec<Option<&'m mut B>> = names.iter().map(|_| None).collect();
    for (key, value) in buffers.iter_mut() {
        if let Some(i) = names.iter().position(|n| n == key) {
            out[i] = Some(value);
        }
    }
    out.into_iter()
        .map(|b| b.expect("the state was created or validated with every buffer"))
        .collect()
}

/// The part of one parameter's step both optimizers share: counts the step, creates the
/// buffers the rule needs that the state lacks (SGD's momentum buffer at its first step, from
/// `zeros`; it then takes the gradient), and returns the rule with the buffers in its order.
fn prepare_step<'s, B>(
    config: &OptimConfig,
    lr: f64,
    step: &mut u64,
    buffers: &'s mut BTreeMap<String, B>,
    zeros: impl Fn() -> Result<B>,
) -> Result<(UpdateRule, Vec<&'s mut B>)> {
    *step += 1;
    let names = config.step_buffers();
    let first_momentum = names.first().is_some_and(|b| !buffers.contains_key(*b));
    for b in &names {
        if !buffers.contains_key(*b) {
            buffers.insert((*b).to_owned(), zeros()?);
        }
    }
    let rule = config.rule(lr, *step, first_momentum);
    Ok((rule, in_order(buffers, &names)))
}

impl<T: Element> Optimizer<T> {
    /// An optimizer with no state yet; `config` is validated.
    pub fn new(config: OptimConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            state: BTreeMap::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OptimConfig {
        &self.config
    }

    /// The state of every parameter stepped so far, by name.
    pub fn state(&self) -> &BTreeMap<String, ParamState<T>> {
        &self.state
    }

    /// Replaces the state (checkpoint resume). Every entry must have exactly the buffers this
    /// optimizer keeps ([`OptimConfig::state_buffers`]; SGD's `momentum_buffer` may be absent,
    /// as in PyTorch before a parameter's first step), all of one length; otherwise nothing is
    /// replaced. A length that differs from the parameter's is reported by the next
    /// [`Optimizer::step`], which checks before it changes anything.
    pub fn load_state(&mut self, state: BTreeMap<String, ParamState<T>>) -> Result<()> {
        check_state(&self.config, &state)?;
        self.state = state;
        Ok(())
    }

    /// One optimizer step at learning rate `lr` (the schedule's value for this step) over
    /// `params`, in place. Everything is checked before anything changes: `lr >= 0`, each
    /// gradient and each state buffer as long as its parameter ([`OptimError::Length`]), no
    /// name twice. A parameter seen for the first time gets fresh state (PyTorch's zeros, or
    /// Adagrad's initial accumulator); that is the only allocation.
    pub fn step(&mut self, lr: f64, params: &mut [Param<'_, T>]) -> Result<()> {
        check_step(
            &self.config,
            lr,
            params.iter().map(|p| (p.name, p.value.len(), p.grad.len())),
            |name, n| {
                let state = self.state.get(name)?;
                let (key, data) = state.buffers.iter().find(|(_, d)| d.len() != n)?;
                Some((buffer_what(key), data.len()))
            },
        )?;
        for p in params.iter_mut() {
            let n = p.value.len();
            if !self.state.contains_key(p.name) {
                self.state
                    .insert(p.name.to_owned(), fresh_state(&self.config, p.value.len()));
            }
            let state = self
                .state
                .get_mut(p.name)
                .expect("inserted just above when absent");
            let (rule, buffers) = prepare_step(
                &self.config,
                lr,
                &mut state.step,
                &mut state.buffers,
                || Ok(vec![T::zero(); n]),
            )?;
            let mut buffers: Vec<&mut [T]> = buffers.into_iter().map(Vec::as_mut_slice).collect();
            rule.apply(p.value, p.grad, &mut buffers);
        }
        Ok(())
    }
}

/// An optimizer whose state lives where the engine keeps its values: on the device for the
/// CUDA engine, in the engine's own buffers on a host engine. The trainer's optimizer. It
/// computes the same rules as [`Optimizer`] ([`OptimConfig::rule`]) and checks the same things
/// before a step; each parameter's step is one [`TrainValue::apply_update`], so neither the
/// parameters nor the state cross to the host during training. The state is read to the host
/// only for a checkpoint ([`EngineOptimizer::host_state`]) and written from it on resume.
pub struct EngineOptimizer<V: TrainValue> {
    config: OptimConfig,
    state: BTreeMap<String, EngineParamState<V>>,
}

/// One parameter's state on the engine: its step count and its buffers by PyTorch's names.
struct EngineParamState<V> {
    step: u64,
    buffers: BTreeMap<String, V>,
}

impl<V: TrainValue> std::fmt::Debug for EngineOptimizer<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptimizer")
            .field("config", &self.config)
            .field("params", &self.state.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A new engine value of `shape` holding `fill`.
fn engine_full<V: TrainValue>(shape: &Shape, fill: f64) -> Result<V> {
    Ok(V::full(shape, fill)?)
}

impl<V: TrainValue> EngineOptimizer<V> {
    /// An optimizer with no state yet; `config` is validated.
    pub fn new(config: OptimConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            state: BTreeMap::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OptimConfig {
        &self.config
    }

    /// One step at learning rate `lr` over `params` (name, value, gradient), each value
    /// updated in place on its engine. Checked first, as [`Optimizer::step`] is; a parameter
    /// seen for the first time gets PyTorch's initial state, allocated on the engine.
    pub fn step(&mut self, lr: f64, params: &mut [(&str, &mut V, &V)]) -> Result<()> {
        let size = |v: &V| v.shape_of().size();
        check_step(
            &self.config,
            lr,
            params.iter().map(|(name, v, g)| (*name, size(v), size(g))),
            |name, n| {
                let state = self.state.get(name)?;
                let (key, data) = state.buffers.iter().find(|(_, d)| size(d) != n)?;
                Some((buffer_what(key), size(data)))
            },
        )?;
        for (name, value, grad) in params.iter_mut() {
            if !self.state.contains_key(*name) {
                let fresh = self.fresh_state(value.shape_of())?;
                self.state.insert((*name).to_owned(), fresh);
            }
            let state = self
                .state
                .get_mut(*name)
                .expect("inserted just above when absent");
            let shape = value.shape_of().clone();
            let (rule, mut ordered) = prepare_step(
                &self.config,
                lr,
                &mut state.step,
                &mut state.buffers,
                || engine_full(&shape, 0.0),
            )?;
            V::apply_update(&rule, value, grad, &mut ordered)?;
        }
        Ok(())
    }

    /// PyTorch's `optimizer.step()` for a model run in an eager [`Session`]: one step, at the
    /// configured learning rate, of every parameter the session's last backward pass reached,
    /// with the gradients it computed. The gradients are moved out of the session, so a second
    /// call before the next backward pass changes nothing (PyTorch's `zero_grad` is implied).
    /// Returns how many parameters were stepped. For a schedule, change the rate with
    /// [`EngineOptimizer::set_lr`], or step explicitly with [`EngineOptimizer::step`].
    pub fn step_session(&mut self, session: &mut Session<V>) -> Result<usize> {
        let grads = session.take_param_grads();
        let mut params: Vec<(&str, &mut V, &V)> = session
            .params_mut()
            .filter_map(|(name, value)| grads.get(name).map(|g| (name, value, g)))
            .collect();
        self.step(self.config.lr(), &mut params)?;
        Ok(params.len())
    }

    /// Sets the base learning rate [`EngineOptimizer::step_session`] uses (checked as a new
    /// configuration is); the state is kept.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        let config = self.config.clone().with_lr(lr);
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// PyTorch's initial state for a parameter of `shape` (SGD's momentum buffer comes at the
    /// first step).
    fn fresh_state(&self, shape: &Shape) -> Result<EngineParamState<V>> {
        let fill = match self.config {
            OptimConfig::Adagrad {
                initial_accumulator_value,
                ..
            } => initial_accumulator_value,
            _ => 0.0,
        };
        let mut buffers = BTreeMap::new();
        if !matches!(self.config, OptimConfig::Sgd { .. }) {
            for b in self.config.state_buffers() {
                buffers.insert((*b).to_owned(), engine_full(shape, fill)?);
            }
        }
        Ok(EngineParamState { step: 0, buffers })
    }

    /// The state of every parameter stepped so far, read to the host (a checkpoint).
    pub fn host_state(&self) -> Result<BTreeMap<String, ParamState<V::Elem>>> {
        let mut out = BTreeMap::new();
        for (name, st) in &self.state {
            let mut buffers = BTreeMap::new();
            for (key, v) in &st.buffers {
                buffers.insert(key.clone(), v.read()?.into_owned());
            }
            let step = st.step;
            out.insert(name.clone(), ParamState { step, buffers });
        }
        Ok(out)
    }

    /// Replaces the state (checkpoint resume), checked as [`Optimizer::load_state`] checks
    /// it; `shape_of` gives each parameter's shape, which its buffers take (a buffer whose size
    /// is not the parameter's is kept flat, and the next step reports it). Nothing is replaced
    /// on an error.
    pub fn load_state(
        &mut self,
        state: BTreeMap<String, ParamState<V::Elem>>,
        shape_of: impl Fn(&str) -> Option<Shape>,
    ) -> Result<()> {
        check_state(&self.config, &state)?;
        let mut loaded = BTreeMap::new();
        for (name, st) in state {
            let mut buffers = BTreeMap::new();
            for (key, data) in st.buffers {
                let shape = shape_of(&name)
                    .filter(|s| s.size() == data.len())
                    .unwrap_or_else(|| Shape::new(vec![data.len()]));
                let mut v: V = engine_full(&shape, 0.0)?;
                V::update_all(&mut [&mut v], |s| {
                    s[0].copy_from_slice(&data);
                    Ok::<_, OptimError>(())
                })?;
                buffers.insert(key, v);
            }
            let step = st.step;
            loaded.insert(name, EngineParamState { step, buffers });
        }
        self.state = loaded;
        Ok(())
    }
}

/// What a restored state must be ([`Optimizer::load_state`], [`EngineOptimizer::load_state`]):
/// exactly the buffers `config` keeps (SGD's `momentum_buffer` may be absent, as in PyTorch
/// before a parameter's first step), all of one length per parameter.
fn check_state<T>(config: &OptimConfig, state: &BTreeMap<String, ParamState<T>>) -> Result<()> {
    let optimizer = config.name();
    let expected = config.state_buffers();
    let lazy_momentum = matches!(config, OptimConfig::Sgd { .. });
    for (name, param) in state {
        if let Some(unexpected) = param
            .buffers
            .keys()
            .find(|k| !expected.contains(&k.as_str()))
        {
            return Err(OptimError::UnexpectedOptimBuffer {
                name: name.clone(),
                optimizer,
                buffer: unexpected.clone(),
                expected,
            });
        }
        if let Some(missing) = expected
            .iter()
            .find(|b| !param.buffers.contains_key(**b) && !lazy_momentum)
        {
            return Err(OptimError::MissingOptimBuffer {
                name: name.clone(),
                optimizer,
                buffer: missing,
            });
        }
        let mut buffers = param.buffers.iter();
        if let Some((first, first_data)) = buffers.next() {
            if let Some((other, data)) = buffers.find(|(_, d)| d.len() != first_data.len()) {
                return Err(OptimError::OptimBufferLength {
                    name: name.clone(),
                    buffer: static_name(other),
                    other: static_name(first),
                    want: first_data.len(),
                    got: data.len(),
                });
            }
        }
    }
    Ok(())
}

/// What a step checks before anything changes: `lr >= 0`; each parameter's gradient (`params`
/// yields name, size, gradient size) and each of its state buffers (`mismatch`: the first
/// buffer whose size is not the parameter's, described by [`buffer_what`], with its size) as large as the parameter; no name
/// twice.
fn check_step<'a>(
    config: &OptimConfig,
    lr: f64,
    params: impl Iterator<Item = (&'a str, usize, usize)>,
    mismatch: impl Fn(&str, usize) -> Option<(&'static str, usize)>,
) -> Result<()> {
    if lr.is_nan() || lr < 0.0 {
        return Err(OptimError::InvalidSetting {
            owner: config.name(),
            field: "lr",
            value: lr,
            expected: ">= 0",
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, n, grad) in params {
        if grad != n {
            return Err(OptimError::Length {
                name: name.to_owned(),
                what: "its gradient",
                want: n,
                got: grad,
            });
        }
        if !seen.insert(name) {
            return Err(OptimError::DuplicateParam {
                name: name.to_owned(),
            });
        }
        if let Some((what, got)) = mismatch(name, n) {
            return Err(OptimError::Length {
                name: name.to_owned(),
                what,
                want: n,
                got,
            });
        }
    }
    Ok(())
}

/// PyTorch's initial state for a parameter of `n` elements (SGD's momentum buffer is created
/// at the first step, from the gradient).
fn fresh_state<T: Element>(config: &OptimConfig, n: usize) -> ParamState<T> {
    let fill = match *config {
        OptimConfig::Adagrad {
            initial_accumulator_value,
            ..
        } => c::<T>(initial_accumulator_value),
        _ => T::zero(),
    };
    let buffers = match config {
        OptimConfig::Sgd { .. } => BTreeMap::new(),
        _ => config
            .state_buffers()
            .iter()
            .map(|b| ((*b).to_owned(), vec![fill; n]))
            .collect(),
    };
    ParamState { step: 0, buffers }
}

impl OptimConfig {
    /// The state buffers one step reads and writes, in [`UpdateRule`]'s order (SGD's momentum
    /// buffer only when `momentum` is set; Adam's `max_exp_avg_sq` only with `amsgrad`;
    /// RMSprop's `grad_avg` only when `centered`, its `momentum_buffer` only with momentum).
    pub fn step_buffers(&self) -> Vec<&'static str> {
        match *self {
            OptimConfig::Sgd { momentum, .. } if momentum != 0.0 => vec![MOMENTUM_BUFFER],
            OptimConfig::Sgd { .. } => vec![],
            OptimConfig::Adam { amsgrad, .. } | OptimConfig::AdamW { amsgrad, .. } => {
                let mut b = vec![EXP_AVG, EXP_AVG_SQ];
                if amsgrad {
                    b.push(MAX_EXP_AVG_SQ);
                }
                b
            }
            OptimConfig::RmsProp {
                momentum, centered, ..
            } => {
                let mut b = vec![SQUARE_AVG];
                if centered {
                    b.push(GRAD_AVG);
                }
                if momentum > 0.0 {
                    b.push(MOMENTUM_BUFFER);
                }
                b
            }
            OptimConfig::Adagrad { .. } => vec![SUM],
        }
    }

    /// The rule of one step at learning rate `lr`: `step` counts this step (1 at the first)
    /// and `first_momentum` says whether SGD's momentum buffer is new (it then takes the
    /// gradient). Scalars are Python floats, as `_single_tensor_*` computes them.
    pub fn rule(&self, lr: f64, step: u64, first_momentum: bool) -> UpdateRule {
        let step = step as f64;
        let nonzero = |wd: f64| (wd != 0.0).then_some(wd);
        match *self {
            OptimConfig::Sgd {
                momentum,
                dampening,
                weight_decay,
                nesterov,
                ..
            } => UpdateRule::Sgd {
                neg_lr: -lr,
                weight_decay: nonzero(weight_decay),
                momentum: (momentum != 0.0).then_some(SgdMomentum {
                    momentum,
                    one_minus_dampening: 1.0 - dampening,
                    nesterov,
                    first: first_momentum,
                }),
            },
            OptimConfig::Adam {
                betas,
                eps,
                weight_decay,
                amsgrad,
                ..
            }
            | OptimConfig::AdamW {
                betas,
                eps,
                weight_decay,
                amsgrad,
                ..
            } => {
                let (beta1, beta2) = betas;
                let bias_correction1 = 1.0 - beta1.powf(step);
                let bias_correction2 = 1.0 - beta2.powf(step);
                let decay = match (
                    weight_decay != 0.0,
                    matches!(self, OptimConfig::AdamW { .. }),
                ) {
                    (false, _) => AdamDecay::None,
                    (true, false) => AdamDecay::Coupled(weight_decay),
                    (true, true) => AdamDecay::Decoupled(1.0 - lr * weight_decay),
                };
                UpdateRule::Adam {
                    decay,
                    one_minus_beta1: 1.0 - beta1,
                    beta2,
                    one_minus_beta2: 1.0 - beta2,
                    bias_correction2_sqrt: bias_correction2.powf(0.5),
                    eps,
                    neg_step_size: -(lr / bias_correction1),
                    amsgrad,
                }
            }
            OptimConfig::RmsProp {
                alpha,
                eps,
                weight_decay,
                momentum,
                centered,
                ..
            } => UpdateRule::RmsProp {
                weight_decay: nonzero(weight_decay),
                alpha,
                one_minus_alpha: 1.0 - alpha,
                eps,
                momentum: (momentum > 0.0).then_some(momentum),
                centered,
                lr,
            },
            OptimConfig::Adagrad {
                lr_decay,
                weight_decay,
                eps,
                ..
            } => UpdateRule::Adagrad {
                weight_decay: nonzero(weight_decay),
                eps,
                neg_clr: -(lr / (1.0 + (step - 1.0) * lr_decay)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_apply_where_pytorch_has_them_and_describe_names_every_field() {
        let sgd = OptimConfig::sgd(0.1)
            .with_options(Some(0.9), true, Some(1e-4))
            .unwrap();
        assert_eq!(
            sgd.describe(),
            "SGD(lr=0.1, dampening=0.0, momentum=0.9, nesterov=True, weight_decay=0.0001)"
        );
        let rms = OptimConfig::rmsprop(0.01)
            .with_options(Some(0.5), false, None)
            .unwrap();
        assert!(matches!(rms, OptimConfig::RmsProp { momentum, .. } if momentum == 0.5));
        let adagrad = OptimConfig::adagrad(0.01)
            .with_options(None, false, Some(0.2))
            .unwrap();
        assert!(
            matches!(adagrad, OptimConfig::Adagrad { weight_decay, .. } if weight_decay == 0.2)
        );
        let adam = OptimConfig::adam(1e-3);
        for (m, n, want) in [(Some(0.9), false, "--momentum"), (None, true, "--nesterov")] {
            let e = adam
                .clone()
                .with_options(m, n, None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.starts_with("adam has no"), "{e}");
        }
        assert!(OptimConfig::rmsprop(0.01)
            .with_options(None, true, None)
            .is_err());
        // validated: nesterov needs momentum
        assert!(OptimConfig::sgd(0.1)
            .with_options(None, true, None)
            .is_err());
        assert!(OptimConfig::adamw(1e-3)
            .describe()
            .starts_with("AdamW(lr=0.001, amsgrad=False, betas=(0.9, 0.999)"));
    }

    #[test]
    fn sgd_plain_step_by_hand() {
        // p - lr·g: 1 - 0.5·2 = 0, 2 - 0.5·(-4) = 4.
        let mut opt = Optimizer::<f64>::new(OptimConfig::sgd(0.5)).expect("valid");
        let mut p = vec![1.0, 2.0];
        opt.step(
            0.5,
            &mut [Param {
                name: "w",
                value: &mut p,
                grad: &[2.0, -4.0],
            }],
        )
        .expect("a step");
        assert_eq!(p, [0.0, 4.0]);
        assert_eq!(opt.state()["w"].step, 1);
        assert!(opt.state()["w"].buffers.is_empty());
    }

    #[test]
    fn long_tensors_take_the_dispatched_path_and_agree_with_short_ones() {
        // The same element values, once in a tensor long enough for the SIMD dispatch and once
        // element by element (baseline path): identical bits, since `mul_add` is exact.
        let n = 300;
        let p0: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
        let g: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
        for config in [
            OptimConfig::adam(0.01),
            OptimConfig::adamw(0.01),
            OptimConfig::rmsprop(0.01),
            OptimConfig::adagrad(0.1),
            OptimConfig::Sgd {
                lr: 0.1,
                momentum: 0.9,
                dampening: 0.1,
                weight_decay: 0.01,
                nesterov: false,
            },
            OptimConfig::Sgd {
                lr: 0.1,
                momentum: 0.9,
                dampening: 0.0,
                weight_decay: 0.0,
                nesterov: true,
            },
            OptimConfig::sgd(0.1),
            OptimConfig::Adam {
                lr: 0.01,
                betas: (0.3, 0.99),
                eps: 1e-8,
                weight_decay: 0.1,
                amsgrad: true,
            },
            OptimConfig::RmsProp {
                lr: 0.01,
                alpha: 0.4,
                eps: 1e-8,
                weight_decay: 0.1,
                momentum: 0.5,
                centered: true,
            },
            OptimConfig::Adagrad {
                lr: 0.1,
                lr_decay: 0.1,
                weight_decay: 0.1,
                initial_accumulator_value: 0.2,
                eps: 1e-10,
            },
        ] {
            let mut long = Optimizer::<f64>::new(config.clone()).expect("valid");
            let mut p_long = p0.clone();
            let mut short = Optimizer::<f64>::new(config).expect("valid");
            let mut p_short = p0.clone();
            let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
            for _ in 0..3 {
                long.step(
                    0.01,
                    &mut [Param {
                        name: "w",
                        value: &mut p_long,
                        grad: &g,
                    }],
                )
                .expect("a step");
                let mut params: Vec<Param<'_, f64>> = p_short
                    .chunks_mut(1)
                    .zip(g.chunks(1))
                    .zip(&names)
                    .map(|((value, grad), name)| Param { name, value, grad })
                    .collect();
                short.step(0.01, &mut params).expect("a step");
            }
            assert_eq!(p_long, p_short);
        }
    }
}
