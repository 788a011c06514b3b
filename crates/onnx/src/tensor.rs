//! ONNX `TensorProto` → a checked constant: dims, data type and data length agree, or a message
//! saying how they disagree (never a panic, never an allocation the input's size does not bound).

use crate::error::Problem;
use crate::proto::{tensor_proto, TensorProto};
use torchlean_spec::{Shape, SpecError};

/// A decoded constant: floating values as `f64` (the payload's precision), integer values
/// exactly.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Constant {
    pub shape: Shape,
    pub values: Values,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
    /// BOOL (conditions, masks): only `Where` reads them as such.
    Bool(Vec<bool>),
}

impl Constant {
    /// The values as integers (shapes, axes, starts): integer tensors only.
    pub fn ints(&self) -> Option<&[i64]> {
        match &self.values {
            Values::Int(v) => Some(v),
            Values::Float(_) | Values::Bool(_) => None,
        }
    }

    /// The values as floats (integers converted).
    pub fn floats(&self) -> Vec<f64> {
        match &self.values {
            Values::Float(v) => v.clone(),
            Values::Int(v) => v.iter().map(|&i| i as f64).collect(),
            Values::Bool(v) => v.iter().map(|&b| f64::from(u8::from(b))).collect(),
        }
    }

    /// The values of a BOOL tensor.
    pub fn bools(&self) -> Option<&[bool]> {
        match &self.values {
            Values::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The one value of a scalar or one-element tensor.
    pub fn single(&self) -> Option<f64> {
        (self.shape.size() == 1).then(|| self.floats()[0])
    }
}

/// The name of a `TensorProto.DataType` code, for messages.
pub(crate) fn dtype_name(code: i32) -> String {
    tensor_proto::DataType::try_from(code)
        .map(|d| d.as_str_name().to_string())
        .unwrap_or_else(|_| format!("data type {code}"))
}

/// Why a tensor could not be decoded: the importer's words, and the `spec` rule it broke where
/// one did (a size past the limit). [`TensorIssue::onto`] makes it a [`Problem`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TensorIssue {
    pub message: String,
    pub cause: Option<SpecError>,
}

impl TensorIssue {
    /// `problem` (which says where) with this issue's message and cause.
    pub fn onto(self, mut problem: Problem) -> Problem {
        problem.message = self.message;
        problem.cause = self.cause;
        problem
    }
}

impl From<String> for TensorIssue {
    fn from(message: String) -> Self {
        TensorIssue {
            message,
            cause: None,
        }
    }
}

impl From<&str> for TensorIssue {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

/// Dims as a shape: every dim a non-negative number, the element count within the limit.
pub(crate) fn shape_of_dims(dims: &[i64]) -> Result<Shape, TensorIssue> {
    let mut out = Vec::with_capacity(dims.len().min(8));
    for &d in dims {
        let d = usize::try_from(d).map_err(|_| format!("dims {dims:?}: a negative dim"))?;
        out.push(d);
    }
    let shape = Shape::new(out);
    shape.checked_size().map_err(|e| TensorIssue {
        message: format!("dims {dims:?}"),
        cause: Some(e),
    })?;
    Ok(shape)
}

/// Decodes a tensor: FLOAT and DOUBLE to floats, INT64 and INT32 to integers, BOOL to bools,
/// from `raw_data`
/// (little-endian) or the typed field; any disagreement between dims and data is an error.
pub(crate) fn decode(t: &TensorProto) -> Result<Constant, TensorIssue> {
    use tensor_proto::{DataLocation, DataType};
    if t.data_location() == DataLocation::External || !t.external_data.is_empty() {
        return Err(
            "external data (a tensor stored outside the model file): import the model from its file (`import_file`, `torchlean import`), which reads it from the model's directory".into(),
        );
    }
    if t.segment.is_some() {
        return Err("segmented tensors are not supported".into());
    }
    let shape = shape_of_dims(&t.dims)?;
    let n = shape.size();
    let dtype = DataType::try_from(t.data_type()).ok();
    let (elem_bytes, typed_len) = match dtype {
        Some(DataType::Float) => (4, t.float_data.len()),
        Some(DataType::Double) => (8, t.double_data.len()),
        Some(DataType::Int64) => (8, t.int64_data.len()),
        Some(DataType::Int32) => (4, t.int32_data.len()),
        Some(DataType::Bool) => (1, t.int32_data.len()),
        _ => {
            return Err(format!(
                "{} tensors are not supported (FLOAT, DOUBLE, INT64, INT32, BOOL are)",
                dtype_name(t.data_type())
            )
            .into())
        }
    };
    if let Some(raw) = &t.raw_data {
        let want = n.checked_mul(elem_bytes);
        if want != Some(raw.len()) {
            return Err(format!(
                "raw_data holds {} bytes, dims {:?} of {} need {}",
                raw.len(),
                t.dims,
                dtype_name(t.data_type()),
                n.saturating_mul(elem_bytes)
            )
            .into());
        }
        let values = match dtype {
            Some(DataType::Float) => Values::Float(
                raw.chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
            ),
            Some(DataType::Double) => Values::Float(
                raw.chunks_exact(8)
                    .map(|c| f64::from_le_bytes(eight(c)))
                    .collect(),
            ),
            Some(DataType::Int64) => Values::Int(
                raw.chunks_exact(8)
                    .map(|c| i64::from_le_bytes(eight(c)))
                    .collect(),
            ),
            Some(DataType::Bool) => Values::Bool(raw.iter().map(|&b| b != 0).collect()),
            _ => Values::Int(
                raw.chunks_exact(4)
                    .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
            ),
        };
        return Ok(Constant { shape, values });
    }
    if typed_len != n {
        return Err(format!("holds {typed_len} values, dims {:?} need {n}", t.dims).into());
    }
    let values = match dtype {
        Some(DataType::Float) => {
            Values::Float(t.float_data.iter().map(|&x| f64::from(x)).collect())
        }
        Some(DataType::Double) => Values::Float(t.double_data.clone()),
        Some(DataType::Int64) => Values::Int(t.int64_data.clone()),
        Some(DataType::Bool) => Values::Bool(t.int32_data.iter().map(|&x| x != 0).collect()),
        _ => Values::Int(t.int32_data.iter().map(|&x| i64::from(x)).collect()),
    };
    Ok(Constant { shape, values })
}

/// A serialized `TensorProto` (a `.pb` file of ONNX's test data), undecoded: what
/// [`crate::import_onnx_bound`] binds an input to.
pub fn tensor_proto(bytes: &[u8]) -> crate::Result<TensorProto> {
    use prost::Message;
    TensorProto::decode(bytes).map_err(|source| crate::OnnxError::DecodeTensor { source })
}

/// A serialized `TensorProto`, as ONNX's test data files hold them (`input_0.pb`), decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorFile {
    /// The tensor's name (the graph input or output it is for).
    pub name: String,
    /// Its ONNX data type's name (`FLOAT`, `INT64`, …).
    pub dtype: String,
    /// Its values: floats widened, integers converted (exactly up to 2^53 in magnitude).
    pub tensor: torchlean_spec::Tensor<f64>,
}

/// Decodes a serialized `TensorProto`: FLOAT, DOUBLE, INT64 and INT32 (as [`decode`] reads an
/// initializer); any other data type, or data that disagrees with the dims, is a
/// [`ProblemKind::BadTensor`](crate::ProblemKind::BadTensor) problem naming the tensor.
pub fn read_tensor(bytes: &[u8]) -> crate::Result<TensorFile> {
    let t = tensor_proto(bytes)?;
    let name = t.name().to_string();
    let problem = || {
        Problem::new(
            crate::ProblemKind::BadTensor,
            name.as_str(),
            "tensor",
            "",
            "",
        )
    };
    let c = decode(&t).map_err(|i| crate::OnnxError::Problems(vec![i.onto(problem())]))?;
    let tensor = torchlean_spec::Tensor::new(c.shape.clone(), c.floats())
        .map_err(|e| crate::OnnxError::Problems(vec![problem().because(e)]))?;
    Ok(TensorFile {
        name,
        dtype: dtype_name(t.data_type()),
        tensor,
    })
}

fn eight(c: &[u8]) -> [u8; 8] {
    let mut b = [0u8; 8];
    b.copy_from_slice(c);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float_tensor(dims: Vec<i64>, raw: Vec<u8>) -> TensorProto {
        TensorProto {
            dims,
            data_type: Some(tensor_proto::DataType::Float as i32),
            raw_data: Some(raw),
            ..Default::default()
        }
    }

    #[test]
    fn a_serialized_tensor_reads_with_its_name_and_type() {
        use prost::Message;
        let mut t = float_tensor(
            vec![2],
            [0.25f32, 3.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        );
        t.name = Some("x".into());
        let f = read_tensor(&t.encode_to_vec()).expect("a FLOAT tensor");
        assert_eq!((f.name.as_str(), f.dtype.as_str()), ("x", "FLOAT"));
        assert_eq!(f.tensor.data(), &[0.25, 3.0]);
        assert!(matches!(
            read_tensor(&[0xff, 0xff, 0xff]),
            Err(crate::OnnxError::DecodeTensor { .. })
        ));
        t.dims = vec![3];
        let e = read_tensor(&t.encode_to_vec()).expect_err("two values for dims [3]");
        assert!(e.to_string().contains("node `x` (tensor)"), "{e}");
    }

    #[test]
    fn raw_float_data_decodes_little_endian() {
        let raw: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let c = decode(&float_tensor(vec![2], raw)).expect("two floats for dims [2]");
        assert_eq!(c.shape, Shape::from([2]));
        assert_eq!(c.values, Values::Float(vec![1.5, -2.0]));
    }

    #[test]
    fn raw_data_shorter_than_dims_is_an_error() {
        let e = decode(&float_tensor(vec![2, 3], vec![0; 20])).expect_err("20 bytes for 6 floats");
        let m = &e.message;
        assert!(m.contains("20 bytes") && m.contains("need 24"), "{m}");
    }

    #[test]
    fn typed_data_length_must_match_dims() {
        let t = TensorProto {
            dims: vec![3],
            data_type: Some(tensor_proto::DataType::Int64 as i32),
            int64_data: vec![1, 2],
            ..Default::default()
        };
        let e = decode(&t).expect_err("2 values for dims [3]");
        assert!(e.message.contains("holds 2 values"), "{e:?}");
    }

    #[test]
    fn negative_and_huge_dims_are_errors_not_allocations() {
        assert!(decode(&float_tensor(vec![-1], vec![])).is_err());
        let e = decode(&float_tensor(vec![1 << 40, 1 << 40], vec![])).expect_err("2^80 elements");
        assert!(e.message.contains("dims"), "{e:?}");
        // the size rule's own error is kept, for a caller to match on
        assert!(
            matches!(e.cause, Some(SpecError::ShapeOverflow { .. })),
            "{e:?}"
        );
    }

    #[test]
    fn unsupported_data_types_are_named() {
        let t = TensorProto {
            dims: vec![1],
            data_type: Some(tensor_proto::DataType::Float16 as i32),
            raw_data: Some(vec![0, 0]),
            ..Default::default()
        };
        assert!(decode(&t).expect_err("float16").message.contains("FLOAT16"));
    }
}
