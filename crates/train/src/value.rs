//! Host access to parameter data: what an optimizer needs from an engine's value type.
//!
//! Host engines (the reference `Tensor<A>`, `CpuTensor<T>`) lend their own buffers: [`read`]
//! borrows, [`update_all`] hands out `&mut` slices into the values (copy-on-write where a
//! buffer is shared), so nothing is copied. A device engine (`CudaTensor<D>`) downloads,
//! runs the update on the host and uploads the results (for now; a device-side optimizer step
//! would replace this method's body, not its callers).
//!
//! Invariant: [`TrainValue::update_all`] never changes what another value observes — an engine
//! whose buffers are shared copies first (copy-on-write), so updating a parameter in place
//! while an old tape still holds it is correct, only slower. The trainer resets the session
//! before the update so that the parameter's buffer is unique and nothing is copied.
//!
//! [`read`]: TrainValue::read
//! [`update_all`]: TrainValue::update_all

use crate::error::Result;
use std::borrow::Cow;
use torchlean_engine_cpu::CpuTensor;
use torchlean_engine_cuda::{CudaTensor, Device};
use torchlean_runtime::{GradValue, Kernels, RuntimeError};
use torchlean_spec::Tensor;

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
    fn read(&self) -> Result<Cow<'_, [Self::Elem]>>;

    /// Runs `f` once on the row-major data of every value of `values` (in that order) and
    /// makes what `f` leaves there their data: in place on a host engine (copy-on-write where
    /// a buffer is shared), download, `f`, upload on a device. When `f` fails a device
    /// engine changes nothing; a host engine keeps what `f` wrote, so `f` should check before
    /// it writes (the optimizer does).
    fn update_all<R>(
        values: &mut [&mut Self],
        f: impl FnOnce(&mut [&mut [Self::Elem]]) -> Result<R>,
    ) -> Result<R>;
}

macro_rules! host_value {
    ($t:ty) => {
        impl TrainValue for Tensor<$t> {
            type Elem = $t;
            fn read(&self) -> Result<Cow<'_, [$t]>> {
                Ok(Cow::Borrowed(Tensor::data(self)))
            }
            fn update_all<R>(
                values: &mut [&mut Self],
                f: impl FnOnce(&mut [&mut [$t]]) -> Result<R>,
            ) -> Result<R> {
                let mut slices: Vec<&mut [$t]> =
                    values.iter_mut().map(|v| Tensor::data_mut(v)).collect();
                f(&mut slices)
            }
        }

        impl TrainValue for CpuTensor<$t> {
            type Elem = $t;
            fn read(&self) -> Result<Cow<'_, [$t]>> {
                Ok(Cow::Borrowed(self.as_slice()))
            }
            fn update_all<R>(
                values: &mut [&mut Self],
                f: impl FnOnce(&mut [&mut [$t]]) -> Result<R>,
            ) -> Result<R> {
                let mut slices: Vec<&mut [$t]> = values.iter_mut().map(|v| v.make_mut()).collect();
                f(&mut slices)
            }
        }
    };
}

host_value!(f32);
host_value!(f64);

/// The CUDA engine (on the GPU or its host emulation): download, update on the host, upload.
/// Every new buffer is uploaded before any value is replaced, so a failed upload (device out
/// of memory) leaves every value as it was. Each replaced buffer is freed by the assignment,
/// so a step holds as many device buffers after the update as before.
impl<D: Device> TrainValue for CudaTensor<D> {
    type Elem = f32;

    fn read(&self) -> Result<Cow<'_, [f32]>> {
        Ok(Cow::Owned(self.to_host().map_err(RuntimeError::from)?))
    }

    fn update_all<R>(
        values: &mut [&mut Self],
        f: impl FnOnce(&mut [&mut [f32]]) -> Result<R>,
    ) -> Result<R> {
        let mut host: Vec<Vec<f32>> = values
            .iter()
            .map(|v| v.to_host().map_err(RuntimeError::from))
            .collect::<std::result::Result<_, _>>()?;
        let mut slices: Vec<&mut [f32]> = host.iter_mut().map(Vec::as_mut_slice).collect();
        let r = f(&mut slices)?;
        let uploaded: Vec<Self> = values
            .iter()
            .zip(&host)
            .map(|(v, data)| {
                CudaTensor::from_host(GradValue::shape(&**v).clone(), data)
                    .map_err(RuntimeError::from)
            })
            .collect::<std::result::Result<_, _>>()?;
        for (v, new) in values.iter_mut().zip(uploaded) {
            **v = new;
        }
        Ok(r)
    }
}

/// A fault-injecting engine trains like the engine it wraps (so `--verify-every` can be shown
/// catching it).
impl<V: TrainValue, const F: u8> TrainValue for torchlean_faults::Faulty<V, F> {
    type Elem = V::Elem;
    fn read(&self) -> Result<Cow<'_, [V::Elem]>> {
        self.0.read()
    }
    fn update_all<R>(
        values: &mut [&mut Self],
        f: impl FnOnce(&mut [&mut [V::Elem]]) -> Result<R>,
    ) -> Result<R> {
        let mut inner: Vec<&mut V> = values.iter_mut().map(|v| &mut v.0).collect();
        V::update_all(&mut inner, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlean_runtime::Kernels;

    fn set_first(v: &mut [&mut [f32]]) -> Result<()> {
        v[0][0] = 9.0;
        Ok(())
    }

    #[test]
    fn an_update_of_a_shared_cpu_buffer_leaves_the_other_holder_alone() {
        let a = CpuTensor::<f32>::from_vec([3], vec![1.0, 2.0, 3.0]).expect("a tensor");
        let mut b = a.clone();
        CpuTensor::update_all(&mut [&mut b], set_first).expect("an update");
        assert_eq!(&*a.read().expect("read"), &[1.0, 2.0, 3.0]);
        assert_eq!(&*b.read().expect("read"), &[9.0, 2.0, 3.0]);
    }

    #[test]
    fn host_engines_lend_their_data_without_a_copy() {
        let t = Tensor::new([2, 2], vec![1.0, 2.0, 3.0, 4.0]).expect("a tensor");
        let cpu = CpuTensor::<f64>::from_f64(&t).expect("a cpu tensor");
        assert!(matches!(cpu.read().expect("read"), Cow::Borrowed(_)));
        assert!(matches!(t.read().expect("read"), Cow::Borrowed(_)));
        assert_eq!(cpu.read().expect("read"), t.read().expect("read"));
    }

    #[test]
    fn an_update_of_a_unique_cpu_buffer_is_in_place() {
        let mut a = CpuTensor::<f32>::from_vec([2], vec![1.0, 2.0]).expect("a tensor");
        let before = a.as_slice().as_ptr();
        CpuTensor::update_all(&mut [&mut a], set_first).expect("an update");
        assert_eq!(a.as_slice().as_ptr(), before);
        assert_eq!(a.as_slice(), &[9.0, 2.0]);
    }
}
