//! One optimizer step's arithmetic on one parameter, as data ([`UpdateRule`]) and as host loops
//! ([`UpdateRule::apply`]). The optimizer (in `torchlean-train`) computes a rule's scalars from
//! its configuration and step count — in f64, as Python computes them — and every engine runs
//! the rule where its values are: host engines through [`UpdateRule::apply`] on their own
//! buffers, the CUDA engine in one kernel per parameter (so parameters and optimizer state never
//! leave the device).
//!
//! Each rule follows PyTorch 2.15's single-tensor path (`foreach=False`) operation by
//! operation, including where ATen's CPU kernels fuse a multiply and an add (`add` with
//! `alpha`, `addcmul`, `lerp` round once, as `mul_add`; `addcdiv` computes
//! `self + (value·t1)/t2`). Scalars are rounded to the element type when applied, as PyTorch
//! passes a Python float to its kernels.
//!
//! The host loops run once per parameter per step, compiled for the widest instruction set the
//! CPU has (`pulp` run-time dispatch, so `mul_add` is one FMA instruction and the loops
//! vectorise); `mul_add` is exactly rounded on every path, so the results do not depend on the
//! CPU.
//!
//! Invariant: a rule's state buffers are passed in the order [`UpdateRule::buffer_count`]
//! documents per variant, each as long as the parameter; every engine reads them so.

use crate::host::Element;
use pulp::{Simd, WithSimd};

/// SGD's momentum settings for one step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdMomentum {
    /// The momentum factor.
    pub momentum: f64,
    /// `1 - dampening`.
    pub one_minus_dampening: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// The buffer's first step: it takes the gradient (PyTorch's `torch.clone(grad)`).
    pub first: bool,
}

/// How Adam's weight decay applies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AdamDecay {
    /// No weight decay.
    None,
    /// Adam's: `weight_decay` added to the gradient (`grad.add(param, alpha=weight_decay)`).
    Coupled(f64),
    /// AdamW's: the parameter multiplied by this factor, `1 - lr·weight_decay`.
    Decoupled(f64),
}

/// One step of one parameter: which update, with this step's scalars. The state buffers it
/// reads and writes, in order:
///
/// - `Sgd`: `momentum_buffer` when `momentum` is set, else none;
/// - `Adam`: `exp_avg`, `exp_avg_sq`, then `max_exp_avg_sq` when `amsgrad`;
/// - `RmsProp`: `square_avg`, then `grad_avg` when `centered`, then `momentum_buffer` when
///   `momentum` is set;
/// - `Adagrad`: `sum`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UpdateRule {
    /// `torch.optim.SGD`: `grad.add(param, alpha=weight_decay)`; momentum: first step
    /// `buf = grad.clone()`, then `buf.mul_(momentum).add_(grad, alpha=1 - dampening)`;
    /// Nesterov: `grad.add(buf, alpha=momentum)`; `param.add_(d, alpha=-lr)`.
    Sgd {
        /// `-lr`.
        neg_lr: f64,
        /// The L2 penalty, when not zero.
        weight_decay: Option<f64>,
        /// Momentum, when not zero.
        momentum: Option<SgdMomentum>,
    },
    /// `torch.optim.Adam` and `AdamW`: weight decay ([`AdamDecay`]);
    /// `exp_avg.lerp_(grad, 1 - beta1)`; `exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
    /// value=1 - beta2)`; amsgrad's `torch.maximum`; `denom = (exp_avg_sq.sqrt() /
    /// bias_correction2_sqrt).add_(eps)`; `param.addcdiv_(exp_avg, denom, value=-step_size)`.
    Adam {
        decay: AdamDecay,
        /// `1 - beta1`, the `lerp` weight.
        one_minus_beta1: f64,
        beta2: f64,
        one_minus_beta2: f64,
        bias_correction2_sqrt: f64,
        eps: f64,
        /// `-lr / bias_correction1`.
        neg_step_size: f64,
        amsgrad: bool,
    },
    /// `torch.optim.RMSprop`: `grad.add(param, alpha=weight_decay)`;
    /// `square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)`; centered:
    /// `grad_avg.lerp_(grad, 1 - alpha)`, `avg = square_avg.addcmul(grad_avg, grad_avg,
    /// value=-1).sqrt_()`, else `avg = square_avg.sqrt()`; `avg.add_(eps)`; momentum:
    /// `buf.mul_(momentum).addcdiv_(grad, avg)`, `param.add_(buf, alpha=-lr)`, else
    /// `param.addcdiv_(grad, avg, value=-lr)`.
    RmsProp {
        weight_decay: Option<f64>,
        alpha: f64,
        one_minus_alpha: f64,
        eps: f64,
        /// The momentum factor, when above zero.
        momentum: Option<f64>,
        centered: bool,
        lr: f64,
    },
    /// `torch.optim.Adagrad`: `grad.add(param, alpha=weight_decay)`;
    /// `state_sum.addcmul_(grad, grad, value=1)`; `std = state_sum.sqrt().add_(eps)`;
    /// `param.addcdiv_(grad, std, value=-clr)`.
    Adagrad {
        weight_decay: Option<f64>,
        eps: f64,
        /// `-lr / (1 + (step - 1)·lr_decay)`.
        neg_clr: f64,
    },
}

impl UpdateRule {
    /// How many state buffers the rule reads and writes (their order: [`UpdateRule`]).
    pub fn buffer_count(&self) -> usize {
        match *self {
            UpdateRule::Sgd { momentum, .. } => usize::from(momentum.is_some()),
            UpdateRule::Adam { amsgrad, .. } => 2 + usize::from(amsgrad),
            UpdateRule::RmsProp {
                momentum, centered, ..
            } => 1 + usize::from(centered) + usize::from(momentum.is_some()),
            UpdateRule::Adagrad { .. } => 1,
        }
    }

    /// Runs the rule on host slices: `p` updated in place from `g`, `buffers` in the rule's
    /// order. Every slice must be as long as `p` and `buffers` must hold
    /// [`UpdateRule::buffer_count`] of them (the optimizer checks both before a step).
    ///
    /// # Panics
    ///
    /// When `buffers` or a slice is shorter than that.
    pub fn apply<T: Element>(&self, p: &mut [T], g: &[T], buffers: &mut [&mut [T]]) {
        let n = p.len();
        let mut buffers = buffers.iter_mut().map(|b| &mut b[..n]);
        let mut next = || {
            buffers
                .next()
                .expect("the optimizer passes every buffer of the rule")
        };
        match *self {
            UpdateRule::Sgd {
                neg_lr,
                weight_decay,
                momentum,
            } => {
                let m = momentum.unwrap_or(SgdMomentum {
                    momentum: 0.0,
                    one_minus_dampening: 1.0,
                    nesterov: false,
                    first: false,
                });
                let buf = momentum.map(|m| (next(), m.first));
                dispatch(
                    n,
                    SgdKernel {
                        p,
                        g,
                        buf,
                        neg_lr: c(neg_lr),
                        weight_decay: weight_decay.map(c),
                        momentum: c(m.momentum),
                        one_minus_dampening: c(m.one_minus_dampening),
                        nesterov: m.nesterov,
                    },
                );
            }
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
                let (m, v) = (next(), next());
                let vmax = amsgrad.then(next);
                let (coupled, decay) = match decay {
                    AdamDecay::None => (None, None),
                    AdamDecay::Coupled(wd) => (Some(c(wd)), None),
                    AdamDecay::Decoupled(f) => (None, Some(c(f))),
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
                        w1: c(one_minus_beta1),
                        beta2: c(beta2),
                        one_minus_beta2: c(one_minus_beta2),
                        bias_correction2_sqrt: c(bias_correction2_sqrt),
                        eps: c(eps),
                        neg_step_size: c(neg_step_size),
                    },
                );
            }
            UpdateRule::RmsProp {
                weight_decay,
                alpha,
                one_minus_alpha,
                eps,
                momentum,
                centered,
                lr,
            } => {
                let square_avg = next();
                let grad_avg = centered.then(&mut next);
                let buf = momentum.map(|_| next());
                dispatch(
                    n,
                    RmsPropKernel {
                        p,
                        g,
                        square_avg,
                        grad_avg,
                        buf,
                        weight_decay: weight_decay.map(c),
                        alpha: c(alpha),
                        one_minus_alpha: c(one_minus_alpha),
                        eps: c(eps),
                        momentum: c(momentum.unwrap_or(0.0)),
                        lr: c(lr),
                    },
                );
            }
            UpdateRule::Adagrad {
                weight_decay,
                eps,
                neg_clr,
            } => dispatch(
                n,
                AdagradKernel {
                    p,
                    g,
                    sum: next(),
                    weight_decay: weight_decay.map(c),
                    eps: c(eps),
                    neg_clr: c(neg_clr),
                },
            ),
        }
    }
}

/// `torch.nn.utils.clip_grad_norm_(params, max_norm)` (2-norm) on host slices: scales every
/// gradient by [`clip_coefficient`] of `total`, the [`total_norm`] of their sums of squares,
/// and returns `total`.
///
/// The norm is accumulated in f64 (PyTorch reduces in the element type, in its own order), so
/// it can differ from PyTorch's in the last bits; the coefficient is then computed in the
/// element type, as PyTorch does. Like PyTorch, `max_norm` is not checked.
pub fn clip_grad_norm<T: Element>(grads: &mut [&mut [T]], max_norm: f64) -> f64 {
    let total = total_norm(grads.iter().map(|g| sum_of_squares(g)));
    if let Some(coef) = clip_coefficient::<T>(total, max_norm) {
        for g in grads.iter_mut() {
            for x in g.iter_mut() {
                *x = *x * coef;
            }
        }
    }
    total
}

/// The 2-norm of the per-tensor 2-norms, from each tensor's `Σ x²` (in f64, in order).
pub fn total_norm(sums_of_squares: impl IntoIterator<Item = f64>) -> f64 {
    let mut total_sq = 0.0f64;
    for sq in sums_of_squares {
        let norm = sq.sqrt();
        total_sq += norm * norm;
    }
    total_sq.sqrt()
}

/// The factor `clip_grad_norm_` scales the gradients by, `max_norm / (total + 1e-6)` in the
/// element type, when it changes them: below 1, or NaN (`torch.clamp(coef, max=1.0)` lets NaN
/// through). `None` when it is at least 1 (a factor of exactly 1 changes nothing).
pub fn clip_coefficient<T: Element>(total: f64, max_norm: f64) -> Option<T> {
    let coef = c::<T>(max_norm) / (c::<T>(total) + c::<T>(1e-6));
    (coef.is_nan() || coef < T::one()).then_some(coef)
}

/// `Σ x²` in f64, over eight independent lanes (so it vectorises), then the lanes in order.
pub fn sum_of_squares<T: Element>(x: &[T]) -> f64 {
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

/// `x` rounded to the element type (how PyTorch passes a Python float to a kernel).
#[inline(always)]
fn c<T: Element>(x: f64) -> T {
    T::from_f64(x).expect("every f64 converts to f32 and f64")
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
    fn buffer_counts_follow_the_documented_order() {
        let sgd = |momentum| UpdateRule::Sgd {
            neg_lr: -0.1,
            weight_decay: None,
            momentum,
        };
        assert_eq!(sgd(None).buffer_count(), 0);
        let m = SgdMomentum {
            momentum: 0.9,
            one_minus_dampening: 1.0,
            nesterov: false,
            first: true,
        };
        assert_eq!(sgd(Some(m)).buffer_count(), 1);
        let rms = |momentum, centered| UpdateRule::RmsProp {
            weight_decay: None,
            alpha: 0.99,
            one_minus_alpha: 0.01,
            eps: 1e-8,
            momentum,
            centered,
            lr: 0.01,
        };
        assert_eq!(rms(None, false).buffer_count(), 1);
        assert_eq!(rms(Some(0.5), true).buffer_count(), 3);
    }
}
