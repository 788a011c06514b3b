//! Host access to parameter data: what an optimizer needs from an engine's value type. Each
//! engine implements [`TrainValue`] beside its kernels, so the trainer depends on no engine.
//!
//! Host engines (the reference `Tensor<A>` here, `CpuTensor<T>`) lend their own buffers:
//! [`TrainValue::read`] borrows, [`TrainValue::update_all`] hands out `&mut` slices into the
//! values (copy-on-write where a buffer is shared), so nothing is copied. A device engine's
//! `update_all` downloads, runs `f` on the host and uploads (a checkpoint restore, gradient
//! clipping); its optimizer step, [`TrainValue::apply_update`], runs on the device, so the
//! parameters and the optimizer state stay there.
//!
//! Invariant: [`TrainValue::update_all`] never changes what another value observes — an engine
//! whose buffers are shared copies first (copy-on-write), so updating a parameter in place
//! while an old tape still holds it is correct, only slower. The trainer resets the session
//! before the update so that the parameter's buffer is unique and nothing is copied.

use crate::error::RuntimeError;
use crate::kernel::Kernels;
use crate::update::UpdateRule;
use std::borrow::Cow;
use torchlean_spec::{Shape, Tensor};

/// A floating-point element type an optimizer computes in (`f32`, `f64`).
pub trait Element:
    num_traits::Float + num_traits::FromPrimitive + Send + Sync + std::fmt::Debug + 'static
{
    /// `"f32"` or `"f64"`.
    const NAME: &'static str;
}

impl Element for f32 {
    const NAME: &'static str = "f32";
}

impl Element for f64 {
    const NAME: &'static str = "f64";
}

/// An engine value whose data an optimizer can read and update as a flat, row-major slice of
/// [`Element`]s on the host.
pub trait TrainValue: Kernels {
    type Elem: Element;

    /// The row-major data: borrowed from the value on a host engine, a download on a device.
    fn read(&self) -> Result<Cow<'_, [Self::Elem]>, RuntimeError>;

    /// Runs `f` once on the row-major data of every value of `values` (in that order) and
    /// makes what `f` leaves there their data: in place on a host engine (copy-on-write where
    /// a buffer is shared), download, `f`, upload on a device. When `f` fails a device
    /// engine changes nothing; a host engine keeps what `f` wrote, so `f` should check before
    /// it writes (the optimizer does).
    fn update_all<R, E: From<RuntimeError>>(
        values: &mut [&mut Self],
        f: impl FnOnce(&mut [&mut [Self::Elem]]) -> Result<R, E>,
    ) -> Result<R, E>;

    /// The gradients' global 2-norm ([`crate::total_norm`] of their sums of squares), as a
    /// value of one element where the gradients are; with `Some(max_norm)`, each gradient is
    /// first scaled as `torch.nn.utils.clip_grad_norm_` scales it ([`crate::clip_coefficient`]).
    /// The default computes on the host engine's own data (in place, no copy; the norm in f64,
    /// then in the element type); a device engine overrides it so that nothing crosses to the
    /// host: read the norm with the step's other scalars ([`TrainValue::scalars`]).
    fn clip_to_norm(grads: &mut [&mut Self], max_norm: Option<f64>) -> Result<Self, RuntimeError> {
        let total = match max_norm {
            Some(max) => Self::update_all(grads, |slices| {
                Ok::<_, RuntimeError>(crate::clip_grad_norm(slices, max))
            })?,
            None => {
                let mut sums = Vec::with_capacity(grads.len());
                for g in grads.iter() {
                    sums.push(crate::sum_of_squares(&g.read()?));
                }
                crate::total_norm(sums)
            }
        };
        Self::full(&Shape::scalar(), total)
    }

    /// The elements of one-element `values`, in order, on the host: one transfer on a device,
    /// however many values (a step's loss and gradient norm come back together).
    fn scalars(values: &[&Self]) -> Result<Vec<f64>, RuntimeError> {
        values.iter().map(|v| Ok(*v.to_f64()?.item()?)).collect()
    }

    /// One optimizer step of one parameter where the values live: `value` updated from `grad`
    /// by `rule`, with `buffers` the rule's state in its order, each as large as `value` (the
    /// optimizer checks the sizes first). The default runs [`UpdateRule::apply`] through
    /// [`TrainValue::update_all`]: in place on a host engine. A device engine overrides it
    /// with a kernel, so that nothing crosses to the host.
    fn apply_update(
        rule: &UpdateRule,
        value: &mut Self,
        grad: &Self,
        buffers: &mut [&mut Self],
    ) -> Result<(), RuntimeError> {
        let g = grad.read()?;
        let mut all: Vec<&mut Self> = std::iter::once(value)
            .chain(buffers.iter_mut().map(|b| &mut **b))
            .collect();
        Self::update_all(&mut all, |slices| {
            let (p, state) = slices
                .split_first_mut()
                .expect("the parameter is the first value");
            rule.apply(p, &g, state);
            Ok::<_, RuntimeError>(())
        })
    }
}

macro_rules! reference_value {
    ($t:ty) => {
        impl TrainValue for Tensor<$t> {
            type Elem = $t;
            fn read(&self) -> Result<Cow<'_, [$t]>, RuntimeError> {
                Ok(Cow::Borrowed(Tensor::data(self)))
            }
            fn update_all<R, E: From<RuntimeError>>(
                values: &mut [&mut Self],
                f: impl FnOnce(&mut [&mut [$t]]) -> Result<R, E>,
            ) -> Result<R, E> {
                let mut slices: Vec<&mut [$t]> =
                    values.iter_mut().map(|v| Tensor::data_mut(v)).collect();
                f(&mut slices)
            }
        }
    };
}

reference_value!(f32);
reference_value!(f64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_engine_lends_its_data_and_updates_in_place() {
        let mut t = Tensor::new([2], vec![1.0f64, 2.0]).expect("a tensor");
        assert!(matches!(t.read().expect("read"), Cow::Borrowed(_)));
        let before = t.data().as_ptr();
        Tensor::update_all(&mut [&mut t], |s| {
            s[0][1] = 5.0;
            Ok::<_, RuntimeError>(())
        })
        .expect("an update");
        assert_eq!(t.data(), &[1.0, 5.0]);
        assert_eq!(t.data().as_ptr(), before);
    }
}
