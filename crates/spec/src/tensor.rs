//! The reference tensor: a shape and its row-major data. Simple, owned, obviously correct; the
//! fast engines keep their own storage and are checked against this one.

use crate::error::{Result, SpecError, TensorJsonProblem};
use crate::scalar::Scalar;
use crate::shape::Shape;
use serde_json::Value;

/// A dense tensor in row-major order.
///
/// Invariant: `data.len() == shape.size()` and `shape.checked_size()` succeeded.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor<A> {
    shape: Shape,
    data: Vec<A>,
}

impl<A: Scalar> Tensor<A> {
    /// A tensor from a shape and flat row-major data; errors if the lengths disagree or the
    /// shape is too large.
    pub fn new(shape: impl Into<Shape>, data: Vec<A>) -> Result<Self> {
        let shape = shape.into();
        let expected = shape.checked_size()?;
        if data.len() != expected {
            return Err(SpecError::DataLength {
                shape,
                expected,
                got: data.len(),
            });
        }
        Ok(Tensor { shape, data })
    }

    /// A rank-0 tensor.
    pub fn scalar(x: A) -> Self {
        Tensor {
            shape: Shape::scalar(),
            data: vec![x],
        }
    }

    /// A tensor filled with `value`.
    pub fn full(shape: impl Into<Shape>, value: A) -> Result<Self> {
        let shape = shape.into();
        let n = shape.checked_size()?;
        Ok(Tensor {
            shape,
            data: vec![value; n],
        })
    }

    /// A tensor of zeros.
    pub fn zeros(shape: impl Into<Shape>) -> Result<Self> {
        Self::full(shape, A::zero())
    }

    /// A tensor of ones.
    pub fn ones(shape: impl Into<Shape>) -> Result<Self> {
        Self::full(shape, A::one())
    }

    /// A tensor whose element at each multi-index is `f(index)`.
    pub fn from_fn(shape: impl Into<Shape>, mut f: impl FnMut(&[usize]) -> A) -> Result<Self> {
        let shape = shape.into();
        let n = shape.checked_size()?;
        let mut data = Vec::with_capacity(n);
        shape.for_each_index(|_, idx| data.push(f(idx)));
        Ok(Tensor { shape, data })
    }

    /// A tensor of the given shape from `f64` values (exact for `f64` and rationals).
    pub fn from_f64s(shape: impl Into<Shape>, values: &[f64]) -> Result<Self> {
        let data = collect_exact(values.len(), values.iter().map(|&x| A::from_f64(x)))?;
        Self::new(shape, data)
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn data(&self) -> &[A] {
        &self.data
    }

    /// The first NaN or infinite element, if any (never for exact rationals).
    pub fn non_finite(&self) -> Option<crate::NonFinite> {
        crate::NonFinite::scan(&self.data, A::is_finite, A::to_f64)
    }

    /// Mutable access to the flat data (the shape cannot change through it).
    pub fn data_mut(&mut self) -> &mut [A] {
        &mut self.data
    }

    pub fn into_data(self) -> Vec<A> {
        self.data
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The element at a multi-index.
    pub fn get(&self, index: &[usize]) -> Result<&A> {
        let off = self.shape.offset(index)?;
        Ok(&self.data[off])
    }

    /// The single element of a size-1 tensor.
    pub fn item(&self) -> Result<&A> {
        if self.data.len() != 1 {
            return Err(SpecError::DataLength {
                shape: self.shape.clone(),
                expected: 1,
                got: self.data.len(),
            });
        }
        Ok(&self.data[0])
    }

    /// The same data under another shape of equal size.
    pub fn reshaped(self, shape: impl Into<Shape>) -> Result<Self> {
        Self::new(shape, self.data)
    }

    /// Elementwise map with a fallible function.
    pub fn map(&self, f: impl FnMut(&A) -> Result<A>) -> Result<Self> {
        let data = collect_exact(self.data.len(), self.data.iter().map(f))?;
        Ok(Tensor {
            shape: self.shape.clone(),
            data,
        })
    }

    /// Elementwise combination of two tensors of identical shape.
    pub fn zip_with(
        &self,
        other: &Self,
        op: &'static str,
        mut f: impl FnMut(&A, &A) -> Result<A>,
    ) -> Result<Self> {
        if self.shape != other.shape {
            return Err(SpecError::ShapeMismatch {
                op,
                shapes: vec![self.shape.clone(), other.shape.clone()],
            });
        }
        let pairs = self.data.iter().zip(&other.data);
        let data = collect_exact(self.data.len(), pairs.map(|(a, b)| f(a, b)))?;
        Ok(Tensor {
            shape: self.shape.clone(),
            data,
        })
    }

    /// Elementwise sum (the gradient accumulation `existing + new`).
    pub fn add(&self, other: &Self) -> Result<Self> {
        self.zip_with(other, "add", |a, b| Ok(a.add(b)))
    }

    /// Nearest `f64` values.
    pub fn to_f64s(&self) -> Vec<f64> {
        self.data.iter().map(Scalar::to_f64).collect()
    }

    /// Converts to another scalar type through `f64` (exact into `f64` and rationals from
    /// floats; rounds into `f32`).
    pub fn convert<B: Scalar>(&self) -> Result<Tensor<B>> {
        let data = collect_exact(
            self.data.len(),
            self.data.iter().map(|x| B::from_f64(x.to_f64())),
        )?;
        Ok(Tensor {
            shape: self.shape.clone(),
            data,
        })
    }

    /// Widened to the accumulation type (exact).
    pub fn to_acc(&self) -> Tensor<A::Acc> {
        Tensor {
            shape: self.shape.clone(),
            data: self.data.iter().map(Scalar::to_acc).collect(),
        }
    }

    /// Rounded back from the accumulation type.
    pub fn from_acc(t: &Tensor<A::Acc>) -> Self {
        Tensor {
            shape: t.shape.clone(),
            data: t.data.iter().map(A::from_acc).collect(),
        }
    }

    /// Bitwise equality of shape and data (see [`Scalar::bit_eq`]).
    pub fn bit_eq(&self, other: &Self) -> bool {
        self.shape == other.shape && self.data.iter().zip(&other.data).all(|(a, b)| a.bit_eq(b))
    }

    /// Tensor JSON (`{"shape": [...], "data": [...]}`), non-finite values as the strings
    /// `"nan"`, `"inf"`, `"-inf"`.
    pub fn to_json(&self) -> Value {
        let data: Vec<Value> = self.data.iter().map(|x| f64_to_json(x.to_f64())).collect();
        serde_json::json!({ "shape": self.shape.dims(), "data": data })
    }

    /// Parses Tensor JSON. Every problem is an error naming the member at fault.
    pub fn from_json(value: &Value) -> Result<Self> {
        let obj = value
            .as_object()
            .ok_or(json_err(TensorJsonProblem::NotAnObject))?;
        let shape_v = obj
            .get("shape")
            .ok_or(json_err(TensorJsonProblem::MissingShape))?;
        let shape =
            parse_shape(shape_v).map_err(|e| json_err(TensorJsonProblem::BadShape(Box::new(e))))?;
        let n = shape.checked_size()?;
        let data_v = obj
            .get("data")
            .and_then(Value::as_array)
            .ok_or(json_err(TensorJsonProblem::MissingData))?;
        if data_v.len() != n {
            return Err(SpecError::DataLength {
                shape,
                expected: n,
                got: data_v.len(),
            });
        }
        let mut data = Vec::with_capacity(n);
        for (i, v) in data_v.iter().enumerate() {
            let x = json_to_f64(v).ok_or_else(|| {
                json_err(TensorJsonProblem::NotANumber {
                    index: i,
                    got: v.to_string(),
                })
            })?;
            data.push(A::from_f64(x)?);
        }
        Ok(Tensor { shape, data })
    }
}

fn json_err(problem: TensorJsonProblem) -> SpecError {
    SpecError::TensorJson { problem }
}

/// A JSON number, or the strings used for non-finite values.
pub fn f64_to_json(x: f64) -> Value {
    if x.is_nan() {
        Value::from("nan")
    } else if x == f64::INFINITY {
        Value::from("inf")
    } else if x == f64::NEG_INFINITY {
        Value::from("-inf")
    } else {
        // Finite floats are always representable as JSON numbers.
        serde_json::Number::from_f64(x)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

/// Reads a JSON number or one of `"nan"`, `"inf"`, `"-inf"` (also `"+inf"`, `"infinity"`).
pub fn json_to_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "nan" => Some(f64::NAN),
            "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
            "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// Parses a JSON array of non-negative integers as a [`Shape`] (the size is not checked here);
/// anything else is [`SpecError::NotExtents`].
pub fn parse_shape(v: &Value) -> Result<Shape> {
    let arr = v.as_array().ok_or_else(|| SpecError::NotExtents {
        index: None,
        got: v.to_string(),
    })?;
    let mut dims = Vec::with_capacity(arr.len());
    for (i, d) in arr.iter().enumerate() {
        let extent = d.as_u64().and_then(|d| usize::try_from(d).ok());
        dims.push(extent.ok_or_else(|| SpecError::NotExtents {
            index: Some(i),
            got: d.to_string(),
        })?);
    }
    Ok(Shape::new(dims))
}

/// The values of `items` (`len` of them, or fewer on an error), stopping at the first error.
/// `collect::<Result<Vec<_>>>()` would see no length through its error adapter and grow the
/// vector by doubling (two reallocations for 16 values): the elementwise ops of the reference
/// engine, on small tensors, spent 6 % of their time in `realloc`.
pub(crate) fn collect_exact<A>(
    len: usize,
    items: impl Iterator<Item = Result<A>>,
) -> Result<Vec<A>> {
    let mut out = Vec::with_capacity(len);
    for item in items {
        out.push(item?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar::Rational;

    #[test]
    fn elementwise_results_are_allocated_once_at_their_size() {
        // 17 values: grown by doubling, the data would have room for 32
        let x = Tensor::<f32>::from_f64s([17], &[0.5; 17]).unwrap();
        let results = [
            (x.map(|v| Ok(v.add(v))).unwrap(), 1.0),
            (x.zip_with(&x, "add", |a, b| Ok(a.add(b))).unwrap(), 1.0),
            (x.convert::<f64>().unwrap().convert::<f32>().unwrap(), 0.5),
        ];
        for (t, value) in results {
            assert_eq!(t.data.capacity(), 17);
            assert_eq!(t.data, [value; 17]);
        }
        assert_eq!(x.data.capacity(), 17);
        // an error stops the collection and is the result
        let e = x
            .map(|_| Err(SpecError::DivisionByZero { context: "test" }))
            .unwrap_err();
        assert!(
            matches!(e, SpecError::DivisionByZero { context: "test" }),
            "{e}"
        );
    }

    #[test]
    fn a_shape_that_is_no_list_of_extents_says_where() {
        use serde_json::json;
        assert_eq!(
            parse_shape(&json!([2, 0, 3])).unwrap(),
            Shape::from([2, 0, 3])
        );
        let e = parse_shape(&json!({"a": 1})).unwrap_err();
        assert_eq!(
            e,
            SpecError::NotExtents {
                index: None,
                got: r#"{"a":1}"#.into()
            }
        );
        assert_eq!(
            e.to_string(),
            r#"expected an array of non-negative integers, got {"a":1}"#
        );
        for (bad, text) in [
            (json!([1, -2]), "-2"),
            (json!([1, 2.5]), "2.5"),
            (json!([1, "3"]), "\"3\""),
        ] {
            let e = parse_shape(&bad).unwrap_err();
            assert_eq!(
                e,
                SpecError::NotExtents {
                    index: Some(1),
                    got: text.into()
                },
                "{bad}"
            );
            assert_eq!(
                e.to_string(),
                format!("element 1 is {text}, expected a non-negative integer")
            );
        }
    }

    #[test]
    fn a_tensor_with_a_zero_dimension_is_empty() {
        let e = Tensor::<f64>::new([2, 0], vec![]).unwrap();
        assert!(e.is_empty());
        assert_eq!(e.len(), 0);
        assert!(!Tensor::<f64>::scalar(1.0).is_empty());
    }

    #[test]
    fn new_checks_length() {
        assert!(Tensor::<f64>::new([2, 2], vec![1.0; 3]).is_err());
        assert!(Tensor::<f64>::new([2, 2], vec![1.0; 4]).is_ok());
    }

    #[test]
    fn json_round_trip_with_non_finite_values() {
        let t =
            Tensor::<f64>::new([2, 2], vec![1.5, f64::NAN, f64::INFINITY, -f64::INFINITY]).unwrap();
        let j = t.to_json();
        assert_eq!(
            j.to_string(),
            r#"{"data":[1.5,"nan","inf","-inf"],"shape":[2,2]}"#
        );
        let back = Tensor::<f64>::from_json(&j).unwrap();
        assert!(back.bit_eq(&t) || back.data()[1].is_nan());
        assert_eq!(back.shape(), t.shape());
    }

    #[test]
    fn json_round_trip_is_exact_for_f64() {
        let vals = [0.1, -1e-300, 123456.789, 5e-324, 1.0 / 3.0];
        let t = Tensor::<f64>::new([5], vals.to_vec()).unwrap();
        let text = serde_json::to_string(&t.to_json()).unwrap();
        let back =
            Tensor::<f64>::from_json(&serde_json::from_str::<Value>(&text).unwrap()).unwrap();
        assert!(back.bit_eq(&t));
    }

    #[test]
    fn json_errors_name_the_member() {
        let bad = serde_json::json!({"shape": [2], "data": [1, "x"]});
        let e = Tensor::<f64>::from_json(&bad).unwrap_err();
        assert!(
            matches!(&e, SpecError::TensorJson { problem: TensorJsonProblem::NotANumber { index: 1, got } } if got == "\"x\""),
            "{e:?}"
        );
        assert!(e.to_string().contains("data[1]"), "{e}");
        for (bad, problem) in [
            (serde_json::json!([1]), TensorJsonProblem::NotAnObject),
            (
                serde_json::json!({"data": []}),
                TensorJsonProblem::MissingShape,
            ),
            (
                serde_json::json!({"shape": [0]}),
                TensorJsonProblem::MissingData,
            ),
        ] {
            assert_eq!(
                Tensor::<f64>::from_json(&bad).unwrap_err(),
                SpecError::TensorJson { problem }
            );
        }
        let bad = serde_json::json!({"shape": [2, -1], "data": []});
        let e = Tensor::<f64>::from_json(&bad).unwrap_err().to_string();
        assert!(e.contains("shape"), "{e}");
        let bad = serde_json::json!({"shape": [3], "data": [1, 2]});
        assert!(matches!(
            Tensor::<f64>::from_json(&bad),
            Err(SpecError::DataLength { .. })
        ));
        let absurd = serde_json::json!({"shape": [4294967296u64, 4294967296u64], "data": []});
        assert!(matches!(
            Tensor::<f64>::from_json(&absurd),
            Err(SpecError::ShapeOverflow { .. })
        ));
    }

    #[test]
    fn rational_json_input_is_exact() {
        let t = Tensor::<Rational>::from_json(&serde_json::json!({"shape": [], "data": [0.1]}))
            .unwrap();
        assert_eq!(t.item().unwrap(), &Rational::from_float(0.1).unwrap());
    }

    #[test]
    fn from_fn_uses_row_major_indices() {
        let t = Tensor::<f64>::from_fn([2, 3], |i| (i[0] * 10 + i[1]) as f64).unwrap();
        assert_eq!(t.data(), &[0.0, 1.0, 2.0, 10.0, 11.0, 12.0]);
        assert_eq!(*t.get(&[1, 2]).unwrap(), 12.0);
    }
}
