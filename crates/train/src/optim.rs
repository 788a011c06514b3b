//! PyTorch's optimizers — SGD, Adam, AdamW, RMSprop, Adagrad — and `clip_grad_norm_`.
//!
//! Each update follows PyTorch 2.15's single-tensor path (`foreach=False`) operation by
//! operation, including where ATen's CPU kernels fuse a multiply and an add (`add` with
//! `alpha`, `addcmul`, `lerp` round once, as `mul_add`; `addcdiv` computes
//! `self + (value·t1)/t2`). Scalars (bias corrections, step sizes) are computed in f64 as Python
//! computes them, then rounded to the element type, as PyTorch passes them to its kernels. On
//! the fixture in `tests/fixtures/optim.json` SGD's f64 results equal PyTorch's bit for bit;
//! the others agree to ~2e-15 relative, and differ at all only where PyTorch's CPU `sqrt`
//! (MKL's `vdSqrt`) is 1 ulp off the correctly rounded square root used here.
//!
//! The element loops run once per parameter per step, compiled for the widest instruction set
//! the CPU has (`pulp` run-time dispatch, so `mul_add` is one FMA instruction and the loops
//! vectorise); `mul_add` is exactly rounded on every path, so the results do not depend on the
//! CPU. A step allocates only the first time it sees a parameter (its state).
//!
//! State is kept per parameter name, with PyTorch's buffer names (`momentum_buffer`, `exp_avg`,
//! `exp_avg_sq`, `max_exp_avg_sq`, `square_avg`, `grad_avg`, `sum`), so a checkpoint can store
//! it under the names PyTorch uses and [`Optimizer::load_state`] can resume bit-identically.

use std::collections::BTreeMap;
use std::str::FromStr;

use pulp::{Simd, WithSimd};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use torchlean_runtime::Element;

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
                return Err(TrainError::UnknownOptimizer {
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
                Err(TrainError::InvalidSetting {
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
                Err(TrainError::InvalidSetting {
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
                    return Err(TrainError::InvalidSetting {
                        owner,
                        field: "dampening",
                        value: dampening,
                        expected: "a number",
                    });
                }
                if nesterov && momentum <= 0.0 {
                    return Err(TrainError::InvalidSetting {
                        owner,
                        field: "momentum",
                        value: momentum,
                        expected: "> 0 with nesterov",
                    });
                }
                if nesterov && dampening != 0.0 {
                    return Err(TrainError::InvalidSetting {
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
    type Err = TrainError;

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

/// A static description of a buffer for [`TrainError::Length`].
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
fn buffers_mut<'m, T, const N: usize>(
    buffers: &'m mut BTreeMap<String, Vec<T>>,
    names: [&str; N],
) -> [&'m mut [T]; N] {
    let mut out: [Option<&'m mut [T]>; N] = std::array::from_fn(|_| None);
    for (key, value) in buffers.iter_mut() {
        if let Some(i) = names.iter().position(|n| n == key) {
            out[i] = Some(value.as_mut_slice());
        }
    }
    out.map(|b| b.expect("the state was created or validated with every buffer"))
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
        let optimizer = self.config.name();
        let expected = self.config.state_buffers();
        let lazy_momentum = matches!(self.config, OptimConfig::Sgd { .. });
        for (name, param) in &state {
            if let Some(unexpected) = param
                .buffers
                .keys()
                .find(|k| !expected.contains(&k.as_str()))
            {
                return Err(TrainError::UnexpectedOptimBuffer {
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
                return Err(TrainError::MissingOptimBuffer {
                    name: name.clone(),
                    optimizer,
                    buffer: missing,
                });
            }
            let mut buffers = param.buffers.iter();
            if let Some((first, first_data)) = buffers.next() {
                if let Some((other, data)) = buffers.find(|(_, d)| d.len() != first_data.len()) {
                    return Err(TrainError::OptimBufferLength {
                        name: name.clone(),
                        buffer: static_name(other),
                        other: static_name(first),
                        want: first_data.len(),
                        got: data.len(),
                    });
                }
            }
        }
        self.state = state;
        Ok(())
    }

    /// One optimizer step at learning rate `lr` (the schedule's value for this step) over
    /// `params`, in place. Everything is checked before anything changes: `lr >= 0`, each
    /// gradient and each state buffer as long as its parameter ([`TrainError::Length`]), no
    /// name twice. A parameter seen for the first time gets fresh state (PyTorch's zeros, or
    /// Adagrad's initial accumulator); that is the only allocation.
    pub fn step(&mut self, lr: f64, params: &mut [Param<'_, T>]) -> Result<()> {
        if lr.is_nan() || lr < 0.0 {
            return Err(TrainError::InvalidSetting {
                owner: self.config.name(),
                field: "lr",
                value: lr,
                expected: ">= 0",
            });
        }
        for (i, p) in params.iter().enumerate() {
            let n = p.value.len();
            if p.grad.len() != n {
                return Err(TrainError::Length {
                    name: p.name.to_owned(),
                    what: "its gradient",
                    want: n,
                    got: p.grad.len(),
                });
            }
            if params[..i].iter().any(|q| q.name == p.name) {
                return Err(TrainError::DuplicateParam {
                    name: p.name.to_owned(),
                });
            }
            if let Some(state) = self.state.get(p.name) {
                if let Some((key, data)) = state.buffers.iter().find(|(_, d)| d.len() != n) {
                    return Err(TrainError::Length {
                        name: p.name.to_owned(),
                        what: buffer_what(key),
                        want: n,
                        got: data.len(),
                    });
                }
            }
        }
        for p in params.iter_mut() {
            if !self.state.contains_key(p.name) {
                self.state
                    .insert(p.name.to_owned(), fresh_state(&self.config, p.value.len()));
            }
            let state = self
                .state
                .get_mut(p.name)
                .expect("inserted just above when absent");
            state.step += 1;
            update(&self.config, lr, state, p.value, p.grad);
        }
        Ok(())
    }
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

/// One parameter's update; `state.step` already counts this step.
fn update<T: Element>(
    config: &OptimConfig,
    lr: f64,
    state: &mut ParamState<T>,
    p: &mut [T],
    g: &[T],
) {
    let n = p.len();
    match *config {
        OptimConfig::Sgd {
            momentum,
            dampening,
            weight_decay,
            nesterov,
            ..
        } => {
            let buf = if momentum != 0.0 {
                let first = !state.buffers.contains_key(MOMENTUM_BUFFER);
                if first {
                    state
                        .buffers
                        .insert(MOMENTUM_BUFFER.to_owned(), vec![T::zero(); n]);
                }
                let [buf] = buffers_mut(&mut state.buffers, [MOMENTUM_BUFFER]);
                Some((buf, first))
            } else {
                None
            };
            dispatch(
                n,
                SgdKernel {
                    p,
                    g,
                    buf,
                    neg_lr: c(-lr),
                    weight_decay: (weight_decay != 0.0).then(|| c(weight_decay)),
                    momentum: c(momentum),
                    one_minus_dampening: c(1.0 - dampening),
                    nesterov,
                },
            );
        }
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
            let decoupled = matches!(config, OptimConfig::AdamW { .. });
            let (beta1, beta2) = betas;
            // Python floats, as `_single_tensor_adam` computes them (`step` is a float).
            let step = state.step as f64;
            let bias_correction1 = 1.0 - beta1.powf(step);
            let bias_correction2 = 1.0 - beta2.powf(step);
            let step_size = lr / bias_correction1;
            let bias_correction2_sqrt = bias_correction2.powf(0.5);
            let (m, v, vmax) = if amsgrad {
                let [m, v, vmax] =
                    buffers_mut(&mut state.buffers, [EXP_AVG, EXP_AVG_SQ, MAX_EXP_AVG_SQ]);
                (m, v, Some(vmax))
            } else {
                let [m, v] = buffers_mut(&mut state.buffers, [EXP_AVG, EXP_AVG_SQ]);
                (m, v, None)
            };
            let (coupled, decay) = match (weight_decay != 0.0, decoupled) {
                (false, _) => (None, None),
                (true, false) => (Some(c(weight_decay)), None),
                (true, true) => (None, Some(c(1.0 - lr * weight_decay))),
            };
            dispatch(
                n,
                AdamKernel {
                    p,
                    g,
                    m,
                    v,
                    vmax,
                    coupled,
                    decay,
                    w1: c(1.0 - beta1),
                    beta2: c(beta2),
                    one_minus_beta2: c(1.0 - beta2),
                    bias_correction2_sqrt: c(bias_correction2_sqrt),
                    eps: c(eps),
                    neg_step_size: c(-step_size),
                },
            );
        }
        OptimConfig::RmsProp {
            alpha,
            eps,
            weight_decay,
            momentum,
            centered,
            ..
        } => {
            let (square_avg, grad_avg, buf) = match (momentum > 0.0, centered) {
                (false, false) => {
                    let [s] = buffers_mut(&mut state.buffers, [SQUARE_AVG]);
                    (s, None, None)
                }
                (true, false) => {
                    let [s, b] = buffers_mut(&mut state.buffers, [SQUARE_AVG, MOMENTUM_BUFFER]);
                    (s, None, Some(b))
                }
                (false, true) => {
                    let [s, a] = buffers_mut(&mut state.buffers, [SQUARE_AVG, GRAD_AVG]);
                    (s, Some(a), None)
                }
                (true, true) => {
                    let [s, a, b] =
                        buffers_mut(&mut state.buffers, [SQUARE_AVG, GRAD_AVG, MOMENTUM_BUFFER]);
                    (s, Some(a), Some(b))
                }
            };
            dispatch(
                n,
                RmsPropKernel {
                    p,
                    g,
                    square_avg,
                    grad_avg,
                    buf,
                    weight_decay: (weight_decay != 0.0).then(|| c(weight_decay)),
                    alpha: c(alpha),
                    one_minus_alpha: c(1.0 - alpha),
                    eps: c(eps),
                    momentum: c(momentum),
                    lr: c(lr),
                },
            );
        }
        OptimConfig::Adagrad {
            lr_decay,
            weight_decay,
            eps,
            ..
        } => {
            let step = state.step as f64;
            let clr = lr / (1.0 + (step - 1.0) * lr_decay);
            let [sum] = buffers_mut(&mut state.buffers, [SUM]);
            dispatch(
                n,
                AdagradKernel {
                    p,
                    g,
                    sum,
                    weight_decay: (weight_decay != 0.0).then(|| c(weight_decay)),
                    eps: c(eps),
                    neg_clr: c(-clr),
                },
            );
        }
    }
}

/// Loops shorter than this run on the baseline path (dispatch costs a few nanoseconds).
const MIN_DISPATCH_LEN: usize = 64;

/// Runs `kernel` compiled for the best instruction set available (baseline when short).
#[inline(always)]
fn dispatch<K: WithSimd<Output = ()>>(n: usize, kernel: K) {
    if n < MIN_DISPATCH_LEN {
        kernel.with_simd(pulp::Scalar::new());
    } else {
        pulp::Arch::new().dispatch(kernel);
    }
}

/// `torch.lerp(start, end, weight)` as ATen computes it on the CPU: `weight·(end - start) +
/// start` for `|weight| < 0.5`, else `(weight - 1)·(end - start) + end`, one rounding each.
/// [`Lerp`] is the same with the branch taken once per loop.
#[cfg(test)]
fn lerp<T: Element>(start: T, end: T, weight: T) -> T {
    Lerp::new(weight).at(start, end)
}

/// A `lerp` weight prepared for a loop (ATen's vectorised form: a coefficient and a choice of
/// base, both fixed for the loop, so the loop has no branch).
#[derive(Clone, Copy)]
struct Lerp<T> {
    coeff: T,
    from_start: bool,
}

impl<T: Element> Lerp<T> {
    #[inline(always)]
    fn new(weight: T) -> Self {
        let from_start = weight.abs() < c(0.5);
        Self {
            coeff: if from_start {
                weight
            } else {
                weight - T::one()
            },
            from_start,
        }
    }

    #[inline(always)]
    fn at(self, start: T, end: T) -> T {
        let base = if self.from_start { start } else { end };
        self.coeff.mul_add(end - start, base)
    }
}

/// `torch.maximum` (NaN propagates).
#[inline(always)]
fn maximum<T: Element>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a > b {
        a
    } else {
        b
    }
}

// The kernels: a struct per optimizer holding the slices and the scalars (already rounded to
// `T`), whose `with_simd` picks a loop specialised by const flags, so that each loop is
// straight-line code LLVM vectorises. Every slice is re-sliced to the parameter's length first
// (the step checked the lengths), which removes the bounds checks.

struct SgdKernel<'a, T> {
    p: &'a mut [T],
    g: &'a [T],
    /// The momentum buffer, and whether this is its first step (it takes the gradient).
    buf: Option<(&'a mut [T], bool)>,
    neg_lr: T,
    weight_decay: Option<T>,
    momentum: T,
    one_minus_dampening: T,
    nesterov: bool,
}

impl<T: Element> WithSimd for SgdKernel<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            p,
            g,
            buf,
            neg_lr,
            weight_decay,
            momentum: mo,
            one_minus_dampening: omd,
            nesterov,
        } = self;
        let wd = weight_decay.unwrap_or(T::zero());
        let Some((b, first)) = buf else {
            return match weight_decay {
                Some(_) => sgd_loop::<T, true>(p, g, wd, neg_lr),
                None => sgd_loop::<T, false>(p, g, wd, neg_lr),
            };
        };
        let s = (p, g, b, wd, neg_lr, mo, omd);
        match (weight_decay.is_some(), first, nesterov) {
            (false, false, false) => sgd_momentum_loop::<T, false, false, false>(s),
            (false, false, true) => sgd_momentum_loop::<T, false, false, true>(s),
            (false, true, false) => sgd_momentum_loop::<T, false, true, false>(s),
            (false, true, true) => sgd_momentum_loop::<T, false, true, true>(s),
            (true, false, false) => sgd_momentum_loop::<T, true, false, false>(s),
            (true, false, true) => sgd_momentum_loop::<T, true, false, true>(s),
            (true, true, false) => sgd_momentum_loop::<T, true, true, false>(s),
            (true, true, true) => sgd_momentum_loop::<T, true, true, true>(s),
        }
    }
}

/// SGD without momentum: `grad.add(param, alpha=weight_decay)`; `param.add_(grad, alpha=-lr)`.
#[inline(always)]
fn sgd_loop<T: Element, const WD: bool>(p: &mut [T], g: &[T], wd: T, neg_lr: T) {
    let n = p.len();
    let g = &g[..n];
    for i in 0..n {
        let pi = p[i];
        let gi = if WD { wd.mul_add(pi, g[i]) } else { g[i] };
        p[i] = neg_lr.mul_add(gi, pi);
    }
}

/// SGD with momentum. First step: `buf = grad.clone()`; then
/// `buf.mul_(momentum).add_(grad, alpha=1 - dampening)`; Nesterov: `grad.add(buf,
/// alpha=momentum)`; `param.add_(d, alpha=-lr)`.
#[inline(always)]
#[allow(clippy::type_complexity)]
fn sgd_momentum_loop<T: Element, const WD: bool, const FIRST: bool, const NESTEROV: bool>(
    (p, g, b, wd, neg_lr, mo, omd): (&mut [T], &[T], &mut [T], T, T, T, T),
) {
    let n = p.len();
    let g = &g[..n];
    let b = &mut b[..n];
    for i in 0..n {
        let pi = p[i];
        let gi = if WD { wd.mul_add(pi, g[i]) } else { g[i] };
        let bi = if FIRST {
            gi
        } else {
            omd.mul_add(gi, b[i] * mo)
        };
        b[i] = bi;
        let d = if NESTEROV { mo.mul_add(bi, gi) } else { bi };
        p[i] = neg_lr.mul_add(d, pi);
    }
}

struct AdamKernel<'a, T> {
    p: &'a mut [T],
    g: &'a [T],
    m: &'a mut [T],
    v: &'a mut [T],
    vmax: Option<&'a mut [T]>,
    /// Adam's weight decay (added to the gradient).
    coupled: Option<T>,
    /// AdamW's factor `1 - lr·weight_decay`.
    decay: Option<T>,
    w1: T,
    beta2: T,
    one_minus_beta2: T,
    bias_correction2_sqrt: T,
    eps: T,
    neg_step_size: T,
}

/// How Adam's weight decay applies (`AdamKernel` loop flag).
const NO_DECAY: u8 = 0;
const COUPLED: u8 = 1;
const DECOUPLED: u8 = 2;

impl<T: Element> WithSimd for AdamKernel<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let (mode, wd) = match (self.coupled, self.decay) {
            (Some(wd), _) => (COUPLED, wd),
            (None, Some(f)) => (DECOUPLED, f),
            (None, None) => (NO_DECAY, T::zero()),
        };
        let ams = self.vmax.is_some();
        match (mode, ams) {
            (COUPLED, false) => adam_loop::<T, COUPLED, false>(self, wd),
            (COUPLED, true) => adam_loop::<T, COUPLED, true>(self, wd),
            (DECOUPLED, false) => adam_loop::<T, DECOUPLED, false>(self, wd),
            (DECOUPLED, true) => adam_loop::<T, DECOUPLED, true>(self, wd),
            (_, false) => adam_loop::<T, NO_DECAY, false>(self, wd),
            (_, true) => adam_loop::<T, NO_DECAY, true>(self, wd),
        }
    }
}

/// Adam: weight decay (`grad.add(param, alpha=weight_decay)`, or AdamW's `param.mul_(1 -
/// lr·weight_decay)`); `exp_avg.lerp_(grad, 1 - beta1)`;
/// `exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)`; amsgrad's
/// `torch.maximum`; `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`;
/// `param.addcdiv_(exp_avg, denom, value=-step_size)`.
#[inline(always)]
fn adam_loop<T: Element, const MODE: u8, const AMSGRAD: bool>(k: AdamKernel<'_, T>, wd: T) {
    let AdamKernel {
        p,
        g,
        m,
        v,
        vmax,
        w1,
        beta2,
        one_minus_beta2,
        bias_correction2_sqrt,
        eps,
        neg_step_size,
        ..
    } = k;
    let n = p.len();
    let g = &g[..n];
    let m = &mut m[..n];
    let v = &mut v[..n];
    let mut none: [T; 0] = [];
    let vmax = match vmax {
        Some(x) if AMSGRAD => &mut x[..n],
        _ => &mut none[..],
    };
    let lerp1 = Lerp::new(w1);
    for i in 0..n {
        let mut pi = p[i];
        let mut gi = g[i];
        if MODE == COUPLED {
            gi = wd.mul_add(pi, gi);
        } else if MODE == DECOUPLED {
            pi = pi * wd;
        }
        let mi = lerp1.at(m[i], gi);
        let vi = (one_minus_beta2 * gi).mul_add(gi, v[i] * beta2);
        m[i] = mi;
        v[i] = vi;
        let second = if AMSGRAD {
            let x = maximum(vmax[i], vi);
            vmax[i] = x;
            x
        } else {
            vi
        };
        let denom = second.sqrt() / bias_correction2_sqrt + eps;
        p[i] = pi + neg_step_size * mi / denom;
    }
}

struct RmsPropKernel<'a, T> {
    p: &'a mut [T],
    g: &'a [T],
    square_avg: &'a mut [T],
    grad_avg: Option<&'a mut [T]>,
    buf: Option<&'a mut [T]>,
    weight_decay: Option<T>,
    alpha: T,
    one_minus_alpha: T,
    eps: T,
    momentum: T,
    lr: T,
}

impl<T: Element> WithSimd for RmsPropKernel<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let flags = (
            self.weight_decay.is_some(),
            self.grad_avg.is_some(),
            self.buf.is_some(),
        );
        match flags {
            (false, false, false) => rmsprop_loop::<T, false, false, false>(self),
            (false, false, true) => rmsprop_loop::<T, false, false, true>(self),
            (false, true, false) => rmsprop_loop::<T, false, true, false>(self),
            (false, true, true) => rmsprop_loop::<T, false, true, true>(self),
            (true, false, false) => rmsprop_loop::<T, true, false, false>(self),
            (true, false, true) => rmsprop_loop::<T, true, false, true>(self),
            (true, true, false) => rmsprop_loop::<T, true, true, false>(self),
            (true, true, true) => rmsprop_loop::<T, true, true, true>(self),
        }
    }
}

/// RMSprop: `grad.add(param, alpha=weight_decay)`;
/// `square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)`; centered:
/// `grad_avg.lerp_(grad, 1 - alpha)`, `avg = square_avg.addcmul(grad_avg, grad_avg,
/// value=-1).sqrt_()`, else `avg = square_avg.sqrt()`; `avg.add_(eps)`; momentum:
/// `buf.mul_(momentum).addcdiv_(grad, avg)`, `param.add_(buf, alpha=-lr)`, else
/// `param.addcdiv_(grad, avg, value=-lr)`.
#[inline(always)]
fn rmsprop_loop<T: Element, const WD: bool, const CENTERED: bool, const MOMENTUM: bool>(
    k: RmsPropKernel<'_, T>,
) {
    let RmsPropKernel {
        p,
        g,
        square_avg,
        grad_avg,
        buf,
        weight_decay,
        alpha,
        one_minus_alpha,
        eps,
        momentum,
        lr,
    } = k;
    let n = p.len();
    let g = &g[..n];
    let sq = &mut square_avg[..n];
    let (mut none_a, mut none_b): ([T; 0], [T; 0]) = ([], []);
    let ga = match grad_avg {
        Some(x) if CENTERED => &mut x[..n],
        _ => &mut none_a[..],
    };
    let b = match buf {
        Some(x) if MOMENTUM => &mut x[..n],
        _ => &mut none_b[..],
    };
    let wd = weight_decay.unwrap_or(T::zero());
    let lerp = Lerp::new(one_minus_alpha);
    let neg_lr = -lr;
    for i in 0..n {
        let pi = p[i];
        let gi = if WD { wd.mul_add(pi, g[i]) } else { g[i] };
        let si = (one_minus_alpha * gi).mul_add(gi, sq[i] * alpha);
        sq[i] = si;
        let avg = if CENTERED {
            let a = lerp.at(ga[i], gi);
            ga[i] = a;
            (-a).mul_add(a, si).sqrt()
        } else {
            si.sqrt()
        } + eps;
        p[i] = if MOMENTUM {
            let bi = b[i] * momentum + gi / avg;
            b[i] = bi;
            neg_lr.mul_add(bi, pi)
        } else {
            pi + neg_lr * gi / avg
        };
    }
}

struct AdagradKernel<'a, T> {
    p: &'a mut [T],
    g: &'a [T],
    sum: &'a mut [T],
    weight_decay: Option<T>,
    eps: T,
    neg_clr: T,
}

impl<T: Element> WithSimd for AdagradKernel<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        match self.weight_decay {
            Some(_) => adagrad_loop::<T, true>(self),
            None => adagrad_loop::<T, false>(self),
        }
    }
}

/// Adagrad: `grad.add(param, alpha=weight_decay)`; `state_sum.addcmul_(grad, grad, value=1)`;
/// `std = state_sum.sqrt().add_(eps)`; `param.addcdiv_(grad, std, value=-clr)`.
#[inline(always)]
fn adagrad_loop<T: Element, const WD: bool>(k: AdagradKernel<'_, T>) {
    let AdagradKernel {
        p,
        g,
        sum,
        weight_decay,
        eps,
        neg_clr,
    } = k;
    let n = p.len();
    let g = &g[..n];
    let sum = &mut sum[..n];
    let wd = weight_decay.unwrap_or(T::zero());
    for i in 0..n {
        let pi = p[i];
        let gi = if WD { wd.mul_add(pi, g[i]) } else { g[i] };
        let si = gi.mul_add(gi, sum[i]);
        sum[i] = si;
        let std = si.sqrt() + eps;
        p[i] = pi + neg_clr * gi / std;
    }
}

/// `torch.nn.utils.clip_grad_norm_(params, max_norm)` (2-norm): scales every gradient by
/// `min(max_norm / (total + 1e-6), 1)` (PyTorch's clamp, so NaN propagates) where `total` is
/// the 2-norm of the per-tensor 2-norms, and returns `total`.
///
/// The norm is accumulated in f64 (PyTorch reduces in the element type, in its own order), so
/// it can differ from PyTorch's in the last bits; the coefficient is then computed in the
/// element type, as PyTorch does. Like PyTorch, `max_norm` is not checked.
pub fn clip_grad_norm<T: Element>(grads: &mut [&mut [T]], max_norm: f64) -> f64 {
    let mut total_sq = 0.0f64;
    for g in grads.iter() {
        let norm = sum_of_squares(g).sqrt();
        total_sq += norm * norm;
    }
    let total = total_sq.sqrt();
    let coef = c::<T>(max_norm) / (c::<T>(total) + c::<T>(1e-6));
    // `torch.clamp(coef, max=1.0)`: NaN stays NaN. A factor of exactly 1 changes nothing.
    if coef.is_nan() || coef < T::one() {
        for g in grads.iter_mut() {
            for x in g.iter_mut() {
                *x = *x * coef;
            }
        }
    }
    total
}

/// `Σ x²` in f64, over eight independent lanes (so it vectorises), then the lanes in order.
fn sum_of_squares<T: Element>(x: &[T]) -> f64 {
    const LANES: usize = 8;
    let mut acc = [0.0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            let v = v.to_f64().expect("f32 and f64 convert to f64");
            *a += v * v;
        }
    }
    let mut sum = acc.iter().sum::<f64>();
    for &v in tail {
        let v = v.to_f64().expect("f32 and f64 convert to f64");
        sum += v * v;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lerp_takes_the_branch_aten_takes() {
        // weight < 0.5: start + w·(end - start); else end - (1 - w)·(end - start).
        assert_eq!(lerp(1.0f64, 3.0, 0.25), 1.5);
        assert_eq!(lerp(1.0f64, 3.0, 0.75), 2.5);
        assert_eq!(lerp(1.0f64, 3.0, 1.0), 3.0);
    }

    #[test]
    fn maximum_propagates_nan() {
        assert!(maximum(f64::NAN, 1.0).is_nan());
        assert!(maximum(1.0, f64::NAN).is_nan());
        assert_eq!(maximum(1.0, 2.0), 2.0);
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
