//! Optimizer steps on the device (`kernels/optim.cu`): one launch per parameter updates it and
//! its state buffers in place from its gradient, by the same rule the host engines run
//! (`torchlean_runtime::UpdateRule`), so a CUDA training run keeps its parameters and optimizer
//! state on the device.

use super::launch_into;
use super::{elementwise, layout, reduce};
use crate::device::{Arg, Device};
use crate::error::{CudaError, Result};
use crate::geometry::{index, Launch};
use crate::kernels::ELEMENTWISE;
use crate::kernels::OPTIM;
use crate::tensor::CudaTensor;
use torchlean_runtime::{AdamDecay, UpdateRule};
use torchlean_spec::{BinaryOp, Shape, SpecError, UnaryOp};

/// The op names errors give.
const OP: &str = "optimizer step";
const CLIP: &str = "gradient clipping";

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

/// [`torchlean_runtime::TrainValue::clip_to_norm`] on the device, with nothing crossing to
/// the host: each gradient's `Σ x²` (square, then the engine's sum), the sums gathered and
/// summed, the square root; with a `max_norm`, the factor `min(max_norm / (norm + 1e-6), 1)`
/// (`clip_coefficient`'s operations in `f32`, one rounding each; NaN passes the clamp) and
/// every gradient multiplied by it in place (by exactly 1 when it is not clipped, which changes
/// no bit). The sums are the engine's `f32` reductions (the host engines sum in f64), as
/// PyTorch reduces on a GPU.
pub fn clip_to_norm<D: Device>(
    grads: &mut [&mut CudaTensor<D>],
    max_norm: Option<f64>,
) -> Result<CudaTensor<D>> {
    let scalar = Shape::scalar();
    if grads.is_empty() {
        return CudaTensor::filled(scalar, 0.0);
    }
    let one = Shape::from([1]);
    let mut sums = Vec::with_capacity(grads.len());
    for g in grads.iter() {
        let squares = elementwise::binary(BinaryOp::Mul, g, g)?;
        sums.push(reduce::sum_all(&squares)?.share(one.clone())?);
    }
    let gathered = gather(&sums)?;
    let norm = elementwise::unary(UnaryOp::Sqrt, &reduce::sum_all(&gathered)?)?;
    if let Some(max) = max_norm {
        let denominator = elementwise::add_scalar(&norm, 1e-6)?;
        let max = CudaTensor::filled(scalar, f(max))?;
        let coef = elementwise::binary(BinaryOp::Div, &max, &denominator)?;
        let coef = elementwise::clamp(&coef, None, Some(1.0))?;
        for g in grads.iter_mut() {
            let n = g.len();
            // tl_scale_by(float* y, const float* c, long long n)
            launch_into(
                ELEMENTWISE.kernel("tl_scale_by"),
                Launch::for_items(n),
                [g.buffer_mut()?],
                [Arg::In(coef.mem()), Arg::Index(index(CLIP, "n", n)?)],
            )?;
        }
    }
    Ok(norm)
}

/// [`torchlean_runtime::TrainValue::scalars`]: the one-element `values` gathered on the device
/// and downloaded in one transfer.
pub fn scalars<D: Device>(values: &[&CudaTensor<D>]) -> Result<Vec<f64>> {
    let one = Shape::from([1]);
    let mut parts = Vec::with_capacity(values.len());
    for v in values {
        if v.len() != 1 {
            return Err(CudaError::DataLength {
                what: "scalars",
                shape: v.shape().clone(),
                expected: 1,
                got: v.len(),
            });
        }
        parts.push(v.share(one.clone())?);
    }
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    Ok(gather(&parts)?
        .to_host()?
        .into_iter()
        .map(f64::from)
        .collect())
}

/// Tensors `[1]` side by side in one `[n]` (`n ≥ 1`; one is itself: `concat` takes two or
/// more).
fn gather<D: Device>(parts: &[CudaTensor<D>]) -> Result<CudaTensor<D>> {
    match parts {
        [one] => Ok(one.clone()),
        _ => {
            let refs: Vec<&CudaTensor<D>> = parts.iter().collect();
            layout::concat(&refs, 0, &Shape::from([refs.len()]))
        }
    }
}
