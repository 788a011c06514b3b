//! A classifier's head — its last linear layer — found in a model and given another class
//! count, so an imported model can be fine-tuned on other classes (`torchlean train --from
//! MODEL --head NAME`). The model is rewritten before import: the head's weight (and bias)
//! initializers are replaced by the caller's fresh ones, and the declared shapes that named
//! the old class count are dropped.

use crate::error::{OnnxError, Problem, ProblemKind, Result};
use crate::proto::{tensor_proto::DataType, GraphProto, ModelProto, NodeProto, TensorProto};
use crate::tensor::decode;

/// Where a model's head is: the weight initializer, its bias, and its sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The weight initializer's name.
    pub weight: String,
    /// The bias initializer's name: `Gemm`'s third operand, or the initializer an `Add` right
    /// after the `MatMul` adds.
    pub bias: Option<String>,
    /// The layer's input features.
    pub features: usize,
    /// Its outputs (the class count the model has).
    pub classes: usize,
    /// Whether the weight is stored `[features, classes]` (`MatMul`, `Gemm` without `transB`)
    /// rather than `[classes, features]` (PyTorch's `Linear`, exported as `Gemm` with
    /// `transB = 1`).
    pub features_first: bool,
}

fn head_problem(name: &str, message: impl Into<String>) -> OnnxError {
    OnnxError::Problems(vec![Problem::new(
        ProblemKind::Model,
        name,
        "initializer",
        "head",
        message,
    )])
}

fn graph_of(model: &ModelProto) -> Result<&GraphProto> {
    model
        .graph
        .as_ref()
        .ok_or_else(|| head_problem("model", "the model has no graph"))
}

/// The one node reading `value`, if exactly one does.
fn only_reader<'g>(graph: &'g GraphProto, value: &str) -> Option<&'g NodeProto> {
    let mut readers = graph
        .node
        .iter()
        .filter(|n| n.input.iter().any(|i| i == value));
    let first = readers.next()?;
    readers.next().is_none().then_some(first)
}

fn initializer<'g>(graph: &'g GraphProto, name: &str) -> Option<&'g TensorProto> {
    graph.initializer.iter().find(|t| t.name() == name)
}

fn int_attribute(node: &NodeProto, name: &str) -> i64 {
    node.attribute
        .iter()
        .find(|a| a.name() == name)
        .map_or(0, |a| a.i())
}

/// Finds the head named `name`: the initializer `name`, or `name.weight` (PyTorch's name for a
/// `Linear` layer `name`), read as the weight operand of one `Gemm` or `MatMul`. Anything else
/// is a problem naming the initializer and what was found instead.
pub fn find_head(model: &ModelProto, name: &str) -> Result<Head> {
    let graph = graph_of(model)?;
    let dotted = format!("{name}.weight");
    let Some(w) = initializer(graph, name).or_else(|| initializer(graph, &dotted)) else {
        let mut two_d: Vec<&str> = graph
            .initializer
            .iter()
            .filter(|t| t.dims.len() == 2)
            .map(|t| t.name())
            .collect();
        two_d.truncate(12);
        return Err(head_problem(
            name,
            format!(
                "no initializer `{name}` or `{dotted}`; the model's 2-D initializers: {}",
                two_d.join(", ")
            ),
        ));
    };
    let weight = w.name().to_string();
    let c = decode(w).map_err(|issue| {
        OnnxError::Problems(vec![issue.onto(Problem::new(
            ProblemKind::BadTensor,
            &weight,
            "initializer",
            "head",
            "",
        ))])
    })?;
    let dims = c.shape.dims().to_vec();
    let node = only_reader(graph, &weight)
        .ok_or_else(|| head_problem(&weight, "not read by exactly one node"))?;
    let is_b = node.input.get(1).is_some_and(|i| *i == weight);
    let features_first = match node.op_type() {
        "Gemm" if is_b => int_attribute(node, "transB") == 0,
        "MatMul" if is_b => true,
        op => {
            return Err(head_problem(
                &weight,
                format!(
                "read by a {op} node; a head is the weight (second operand) of a Gemm or MatMul"
            ),
            ))
        }
    };
    if dims.len() != 2 || (node.op_type() == "Gemm" && int_attribute(node, "transA") != 0) {
        return Err(head_problem(
            &weight,
            format!(
                "a head's weight is 2-D and its Gemm takes its data untransposed; this one has dims {dims:?}"
            ),
        ));
    }
    let (features, classes) = if features_first {
        (dims[0], dims[1])
    } else {
        (dims[1], dims[0])
    };
    let bias_of = |v: &str| {
        initializer(graph, v)
            .filter(|t| t.dims == [classes as i64] && only_reader(graph, v).is_some())
            .map(|t| t.name().to_string())
    };
    let bias = match node.op_type() {
        "Gemm" => node.input.get(2).and_then(|b| bias_of(b)),
        _ => node
            .output
            .first()
            .and_then(|out| only_reader(graph, out))
            .filter(|add| add.op_type() == "Add")
            .and_then(|add| add.input.iter().find_map(|i| bias_of(i))),
    };
    Ok(Head {
        weight,
        bias,
        features,
        classes,
        features_first,
    })
}

/// A tensor named `name` of `dims` and `values`, in `like`'s data type (FLOAT or DOUBLE).
fn float_tensor(like: &TensorProto, name: &str, dims: Vec<i64>, values: &[f64]) -> TensorProto {
    let mut t = TensorProto {
        name: Some(name.to_string()),
        dims,
        data_type: like.data_type,
        ..TensorProto::default()
    };
    if like.data_type() == DataType::Double as i32 {
        t.double_data = values.to_vec();
    } else {
        t.data_type = Some(DataType::Float as i32);
        t.float_data = values.iter().map(|&v| v as f32).collect();
    }
    t
}

/// Rewrites `model` so `head` has `classes` outputs: its weight becomes `weight` (given as
/// `[classes, features]`, PyTorch's layout, transposed here where the model stores it the
/// other way) and its bias `bias` (`[classes]`). Declared shapes (`value_info`, the outputs')
/// are dropped: they name the old class count, and import infers every shape anyway.
pub fn replace_head(
    model: &mut ModelProto,
    head: &Head,
    classes: usize,
    weight: &[f64],
    bias: &[f64],
) -> Result<()> {
    let f = head.features;
    if weight.len() != classes * f || bias.len() != classes {
        return Err(head_problem(
            &head.weight,
            format!(
                "the new head needs {} weights and {classes} biases, {} and {} given",
                classes * f,
                weight.len(),
                bias.len()
            ),
        ));
    }
    let graph = model
        .graph
        .as_mut()
        .ok_or_else(|| head_problem("model", "the model has no graph"))?;
    let (dims, values): (Vec<i64>, Vec<f64>) = if head.features_first {
        let t = (0..f * classes)
            .map(|k| weight[(k % classes) * f + k / classes])
            .collect();
        (vec![f as i64, classes as i64], t)
    } else {
        (vec![classes as i64, f as i64], weight.to_vec())
    };
    for t in graph.initializer.iter_mut() {
        if t.name() == head.weight {
            *t = float_tensor(t, &head.weight, dims.clone(), &values);
        } else if head.bias.as_deref() == Some(t.name()) {
            *t = float_tensor(t, t.name(), vec![classes as i64], bias);
        }
    }
    graph.value_info.clear();
    for out in graph.output.iter_mut() {
        if let Some(crate::proto::type_proto::Value::TensorType(tt)) =
            out.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            tt.shape = None;
        }
    }
    Ok(())
}
