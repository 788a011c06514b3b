//! Builders of small ONNX models for the importer's tests.
#![allow(dead_code)]

use prost::Message;
use torchlean_onnx::proto::{
    tensor_proto::DataType, tensor_shape_proto::dimension, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};

pub fn dims(ds: &[Result<i64, &str>]) -> TensorShapeProto {
    TensorShapeProto {
        dim: ds
            .iter()
            .map(|d| torchlean_onnx::proto::tensor_shape_proto::Dimension {
                value: Some(match d {
                    Ok(n) => dimension::Value::DimValue(*n),
                    Err(p) => dimension::Value::DimParam(p.to_string()),
                }),
                ..Default::default()
            })
            .collect(),
    }
}

pub fn value(name: &str, shape: &[Result<i64, &str>]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(dims(shape)),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(i),
        ..Default::default()
    }
}

pub fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        ..Default::default()
    }
}

pub fn float_attr(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(f),
        ..Default::default()
    }
}

pub fn floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        raw_data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ..Default::default()
    }
}

pub fn model(
    input: ValueInfoProto,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    outputs: &[&str],
) -> Vec<u8> {
    let outputs = outputs.iter().map(|o| value(o, &[])).collect();
    model_declaring(input, nodes, inits, outputs)
}

/// [`model`] with its outputs declared as given (shapes included).
pub fn model_declaring(
    input: ValueInfoProto,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    outputs: Vec<ValueInfoProto>,
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: inits,
            input: vec![input],
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

pub fn str_attr(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(s.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// A model of several graph inputs (each `(name, dims)`, FLOAT) at default-domain `opset`.
pub fn model_with_inputs(
    inputs: &[(&str, &[i64])],
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    outputs: &[&str],
    opset: i64,
) -> Vec<u8> {
    let shaped = |(name, d): &(&str, &[i64])| {
        let ds: Vec<Result<i64, &str>> = d.iter().map(|&n| Ok(n)).collect();
        value(name, &ds)
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: inits,
            input: inputs.iter().map(shaped).collect(),
            output: outputs
                .iter()
                .map(|o| ValueInfoProto {
                    name: Some(o.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// An INT64 initializer.
pub fn int64s(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Int64 as i32),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}
