//! Flat access to parameter data: what an optimizer needs from an engine's value type.
//!
//! Invariant: [`TrainValue::data_mut`] never changes what another value observes — an engine
//! whose buffers are shared copies first (copy-on-write), so updating a parameter in place
//! while an old tape still holds it is correct, only slower. The trainer resets the session
//! before the update so that the parameter's buffer is unique and nothing is copied.

use torchlean_engine_cpu::CpuTensor;
use torchlean_runtime::Kernels;
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

/// An engine value whose data is a flat, row-major slice of [`Element`]s.
pub trait TrainValue: Kernels {
    type Elem: Element;

    /// The row-major data.
    fn data(&self) -> &[Self::Elem];

    /// The row-major data, mutable (copy-on-write where buffers are shared).
    fn data_mut(&mut self) -> &mut [Self::Elem];
}

macro_rules! reference_value {
    ($t:ty) => {
        impl TrainValue for Tensor<$t> {
            type Elem = $t;
            fn data(&self) -> &[$t] {
                Tensor::data(self)
            }
            fn data_mut(&mut self) -> &mut [$t] {
                Tensor::data_mut(self)
            }
        }

        impl TrainValue for CpuTensor<$t> {
            type Elem = $t;
            fn data(&self) -> &[$t] {
                self.as_slice()
            }
            fn data_mut(&mut self) -> &mut [$t] {
                self.make_mut()
            }
        }
    };
}

reference_value!(f32);
reference_value!(f64);

/// A fault-injecting engine trains like the engine it wraps (so `--verify-every` can be shown
/// catching it).
impl<V: TrainValue, const F: u8> TrainValue for torchlean_faults::Faulty<V, F> {
    type Elem = V::Elem;
    fn data(&self) -> &[V::Elem] {
        self.0.data()
    }
    fn data_mut(&mut self) -> &mut [V::Elem] {
        self.0.data_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlean_runtime::Kernels;

    #[test]
    fn data_mut_on_a_shared_cpu_buffer_leaves_the_other_holder_alone() {
        let a = CpuTensor::<f32>::from_vec([3], vec![1.0, 2.0, 3.0]).expect("a tensor");
        let mut b = a.clone();
        b.data_mut()[0] = 9.0;
        assert_eq!(TrainValue::data(&a), &[1.0, 2.0, 3.0]);
        assert_eq!(TrainValue::data(&b), &[9.0, 2.0, 3.0]);
    }

    #[test]
    fn reference_and_cpu_values_expose_the_same_row_major_data() {
        let t = Tensor::new([2, 2], vec![1.0, 2.0, 3.0, 4.0]).expect("a tensor");
        let cpu = CpuTensor::<f64>::from_f64(&t).expect("a cpu tensor");
        assert_eq!(TrainValue::data(&cpu), TrainValue::data(&t));
    }
}
