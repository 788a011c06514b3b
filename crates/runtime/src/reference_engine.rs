//! The reference engine: `torchlean_spec::Tensor<A>` for `A` = `f32`, `f64` or the exact
//! rational, implementing [`GradValue`], [`GradZero`] and [`Kernels`]; its kernels are
//! `torchlean_spec`'s `Backend` implementation, the reference op semantics themselves. Simple and obviously correct; every fast engine is checked against it.

use crate::error::{Result, RuntimeError};
use crate::kernel::Kernels;
use crate::value::{GradValue, GradZero};
use torchlean_spec::{NonFinite, Scalar, Shape, Tensor};

impl<A: Scalar> GradValue for Tensor<A> {
    fn shape(&self) -> &Shape {
        Tensor::shape(self)
    }

    fn retag(self, shape: Shape) -> Result<Self> {
        Ok(self.reshaped(shape)?)
    }

    fn check(&self) -> Result<()> {
        if self.len() != self.shape().size() {
            return Err(RuntimeError::Invalid(format!(
                "{} elements under shape {}",
                self.len(),
                self.shape()
            )));
        }
        Ok(())
    }

    fn add(self, other: Self) -> Result<Self> {
        Ok(Tensor::add(&self, &other)?)
    }

    fn drop(self) {}

    fn into_owned(self) -> Self {
        self
    }

    fn non_finite(&self) -> Option<NonFinite> {
        Tensor::non_finite(self)
    }
}

impl<A: Scalar> GradZero for Tensor<A> {
    fn zeros_like(&self) -> Self {
        // invariant: a tensor's shape has a valid size, so zeros of it do too
        Tensor::zeros(self.shape().clone()).expect("zeros of a valid shape")
    }
}

/// Engine label for the reference engine over scalar `A`.
pub const fn reference_label<A: Scalar>() -> &'static str {
    match A::NAME.as_bytes() {
        b"f32" => "reference-f32",
        b"f64" => "reference-f64",
        _ => "reference-rational",
    }
}

impl<A: Scalar> Kernels for Tensor<A> {
    const ENGINE: &'static str = reference_label::<A>();
    const EXACT: bool = A::EXACT;

    fn from_f64(t: &Tensor<f64>) -> Result<Self> {
        Ok(t.convert::<A>()?)
    }

    fn to_f64(&self) -> Result<Tensor<f64>> {
        Ok(self.convert::<f64>()?)
    }

    fn full(shape: &Shape, value: f64) -> Result<Self> {
        Ok(Tensor::full(shape.clone(), A::from_f64(value)?)?)
    }

    fn bit_eq(&self, other: &Self) -> bool {
        Tensor::bit_eq(self, other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlean_spec::Rational;

    #[test]
    fn each_scalar_names_its_reference_engine() {
        // the label is what reports and `--engine` name; f32 and f64 must not share one
        assert_eq!(<Tensor<f32> as Kernels>::ENGINE, "reference-f32");
        assert_eq!(<Tensor<f64> as Kernels>::ENGINE, "reference-f64");
        assert_eq!(<Tensor<Rational> as Kernels>::ENGINE, "reference-rational");
    }

    #[test]
    fn bit_equality_compares_shapes_and_bits() {
        let a = Tensor::new([2], vec![1.0f64, -0.0]).unwrap();
        assert!(Kernels::bit_eq(&a, &a.clone()));
        let zero = Tensor::new([2], vec![1.0f64, 0.0]).unwrap();
        assert!(!Kernels::bit_eq(&a, &zero), "-0 and +0 differ in bits");
        let column = a.clone().reshaped(Shape::new(vec![2, 1])).unwrap();
        assert!(
            !Kernels::bit_eq(&a, &column),
            "the same bits under another shape"
        );
    }
}
