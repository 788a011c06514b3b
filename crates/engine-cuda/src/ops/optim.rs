//! Optimizer steps on the device (`kernels/optim.cu`): one launch per parameter updates it and
//! its state buffers in place from its gradient, by the same rule the host engines run
//! (`torchlean_runtime::UpdateRule`), so a CUDA training run keeps its parameters and optimizer
//! state on the device.

use super::launch_into;
use crate::device::{Arg, Device};
use crate::error::{CudaError, Result};
use crate::geometry::{index, Launch};
use crate::kernels::OPTIM;
use crate::tensor::CudaTensor;
use torchlean_runtime::{clip_coefficient, total_norm, AdamDecay, UpdateRule};
use torchlean_spec::{BinaryOp, Shape, SpecError};

/// The op name errors give.
const OP: &str = "optimizer step";

/// A flag as a kernel's `long long`.
fn flag<'a, D: Device>(b: bool) -> Arg<'a, D> {
    Arg::Index(i64::from(b))
}

/// `x` as the kernel's `float` (round to nearest, as the host rounds a Python float).
#[allow(clippy::cast_possible_truncation)]
fn f(x: f64) -> f32 {
    x as f32
}

/// Runs `rule` on `p` (in place) with gradient `g` and the rule's state `buffers`, in its
/// order. Every tensor must have `p`'s size; a shared buffer is copied first (copy-on-write),
/// so no other value observes the update.
pub fn apply_update<D: Device>(
    rule: &UpdateRule,
    p: &mut CudaTensor<D>,
    g: &CudaTensor<D>,
    buffers: &mut [&mut CudaTensor<D>],
) -> Result<()> {
    let n = p.len();
    let sizes = std::iter::once(g.len()).chain(buffers.iter().map(|b| b.len()));
    if buffers.len() != rule.buffer_count() || sizes.clone().any(|len| len != n) {
        let shapes = std::iter::once(p.shape().clone())
            .chain(std::iter::once(g.shape().clone()))
            .chain(buffers.iter().map(|b| b.shape().clone()))
            .collect();
        return Err(CudaError::Spec(SpecError::OpShape {
            op: OP,
            shapes,
            reason: format!(
                "a parameter, its gradient and its {} state buffers of one size",
                rule.buffer_count()
            ),
        }));
    }
    let len = index(OP, "n", n)?;
    let mut state = Vec::with_capacity(buffers.len());
    for b in buffers.iter_mut() {
        state.push(Arg::Out(b.buffer_mut()?.mem_mut()));
    }
    let g = g.mem();
    let (kernel, present, scalars) = kernel_layout::<D>(rule);
    // kernel parameters: p, the state slots, g, the scalars, n
    let args = slots(state, present, g)
        .into_iter()
        .chain([Arg::In(g)])
        .chain(scalars)
        .chain([Arg::Index(len)]);
    launch_into(
        OPTIM.kernel(kernel),
        Launch::for_items(n),
        [p.buffer_mut()?],
        args,
    )
}

/// The kernel of `rule`, which of its state slots the rule uses (the others get the gradient's
/// address) and its scalar arguments, in the kernel's parameter order.
fn kernel_layout<'a, D: Device>(
    rule: &UpdateRule,
) -> (&'static str, &'static [bool], Vec<Arg<'a, D>>) {
    match *rule {
        UpdateRule::Sgd {
            neg_lr,
            weight_decay,
            momentum: None,
        } => (
            "tl_opt_sgd",
            &[],
            vec![
                Arg::F32(f(neg_lr)),
                Arg::F32(f(weight_decay.unwrap_or(0.0))),
                flag(weight_decay.is_some()),
            ],
        ),
        UpdateRule::Sgd {
            neg_lr,
            weight_decay,
            momentum: Some(m),
        } => (
            "tl_opt_sgd_momentum",
            &[true],
            vec![
                Arg::F32(f(neg_lr)),
                Arg::F32(f(weight_decay.unwrap_or(0.0))),
                flag(weight_decay.is_some()),
                Arg::F32(f(m.momentum)),
                Arg::F32(f(m.one_minus_dampening)),
                flag(m.first),
                flag(m.nesterov),
            ],
        ),
        UpdateRule::Adam {
            decay,
            one_minus_beta1,
            beta2,
            one_minus_beta2,
            bias_correction2_sqrt,
            eps,
            neg_step_size,
            amsgrad,
        } => {
            let (mode, wd) = match decay {
                AdamDecay::None => (0, 0.0),
                AdamDecay::Coupled(wd) => (1, wd),
                AdamDecay::Decoupled(factor) => (2, factor),
            };
            (
                "tl_opt_adam",
                if amsgrad {
                    &[true, true, true]
                } else {
                    &[true, true, false]
                },
                vec![
                    Arg::Index(mode),
                    Arg::F32(f(wd)),
                    Arg::F32(f(one_minus_beta1)),
                    Arg::F32(f(beta2)),
                    Arg::F32(f(one_minus_beta2)),
                    Arg::F32(f(bias_correction2_sqrt)),
                    Arg::F32(f(eps)),
                    Arg::F32(f(neg_step_size)),
                    flag(amsgrad),
                ],
            )
        }
        UpdateRule::RmsProp {
            weight_decay,
            alpha,
            one_minus_alpha,
            eps,
            momentum,
            centered,
            lr,
        } => (
            "tl_opt_rmsprop",
            match (centered, momentum.is_some()) {
                (false, false) => &[true, false, false],
                (true, false) => &[true, true, false],
                (false, true) => &[true, false, true],
                (true, true) => &[true, true, true],
            },
            vec![
                Arg::F32(f(weight_decay.unwrap_or(0.0))),
                flag(weight_decay.is_some()),
                Arg::F32(f(alpha)),
                Arg::F32(f(one_minus_alpha)),
                Arg::F32(f(eps)),
                Arg::F32(f(momentum.unwrap_or(0.0))),
                flag(momentum.is_some()),
                flag(centered),
                Arg::F32(f(lr)),
            ],
        ),
        UpdateRule::Adagrad {
            weight_decay,
            eps,
            neg_clr,
        } => (
            "tl_opt_adagrad",
            &[true],
            vec![
                Arg::F32(f(weight_decay.unwrap_or(0.0))),
                flag(weight_decay.is_some()),
                Arg::F32(f(eps)),
                Arg::F32(f(neg_clr)),
            ],
        ),
    }
}

/// The kernel's state slots, in order: the rule's buffers (`state`, in the rule's order) where
/// `present` is true, and the gradient's address in a slot the rule does not use (the kernel
/// never touches it).
fn slots<'a, D: Device>(
    state: Vec<Arg<'a, D>>,
    present: &[bool],
    g: &'a D::Mem,
) -> Vec<Arg<'a, D>> {
    let mut state = state.into_iter();
    present
        .iter()
        .map(|&used| match used {
            true => state.next().unwrap_or(Arg::In(g)),
            false => Arg::In(g),
        })
        .collect()
}

/// [`torchlean_runtime::TrainValue::clip_to_norm`] on the device: each gradient's `Σ x²` by
/// two kernels (square, then the engine's sum), the sums gathered into one tensor and
/// downloaded at once, the total norm and the clipping factor computed on the host by the
/// host engines' formulas ([`total_norm`], [`clip_coefficient`]), and each gradient scaled on
/// the device. One download per call, however many gradients; nothing is uploaded. The sums
/// are the engine's `f32` reductions (the host engines sum in f64), as PyTorch reduces on a
/// GPU.
pub fn clip_to_norm<D: Device>(
    grads: &mut [&mut CudaTensor<D>],
    max_norm: Option<f64>,
) -> Result<f64> {
    if grads.is_empty() {
        return Ok(0.0);
    }
    let one = Shape::from([1]);
    let mut sums = Vec::with_capacity(grads.len());
    for g in grads.iter() {
        let squares = super::elementwise::binary(BinaryOp::Mul, g, g)?;
        sums.push(super::reduce::sum_all(&squares)?.share(one.clone())?);
    }
    let parts: Vec<&CudaTensor<D>> = sums.iter().collect();
    let gathered = super::layout::concat(&parts, 0, &Shape::from([parts.len()]))?;
    let total = total_norm(gathered.to_host()?.into_iter().map(f64::from));
    if let Some(coef) = max_norm.and_then(|max| clip_coefficient::<f32>(total, max)) {
        for g in grads.iter_mut() {
            **g = super::elementwise::scale(g, f64::from(coef))?;
        }
    }
    Ok(total)
}
