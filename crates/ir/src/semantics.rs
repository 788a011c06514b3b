//! What each node means: the single mapping from an IR node (plus its payload) to a
//! `torchlean_spec::Op` and its operands, and the reference evaluator [`denote_all`].
//!
//! `compiled`'s lowering goes through the same mapping, so the IR denotation and the compiled
//! graph cannot disagree about which op a node is.

use crate::check::check_well_formed;
use crate::error::{Diagnostic, IrError, Result};
use crate::graph::{Graph, Node};
use crate::kind::OpKind;
use crate::payload::Payload;
use torchlean_spec::{Op, Scalar, Shape, SpecError, Tensor, UnaryOp};

/// Layer norm's default epsilon when the node carries none (TorchLean's `Numbers.epsilon`).
pub const LAYER_NORM_DEFAULT_EPS: f64 = 1e-6;
/// Batch norm's epsilon when the payload carries none (PyTorch's default).
pub const BATCH_NORM_DEFAULT_EPS: f64 = 1e-5;

/// The IR's value type: a shape-tagged tensor (TorchLean's `DVal`).
pub type DVal<A> = Tensor<A>;

/// What a node is.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeSem {
    /// The graph input.
    Input,
    /// A constant: the payload tensor `value`.
    Const,
    /// An op applied to the node's parents followed by its payload tensors
    /// ([`payload_names`]).
    Apply(Op),
}

/// The meaning of a node. Batch norm takes `eps` from the payload when present.
pub fn node_sem(node: &Node, payload: Option<&Payload>) -> NodeSem {
    let op = match &node.kind {
        OpKind::Input => return NodeSem::Input,
        OpKind::Const { .. } => return NodeSem::Const,
        OpKind::Detach => Op::Detach,
        OpKind::Permute { perm } => Op::Permute { perm: perm.clone() },
        OpKind::Unary(u) => Op::Unary(*u),
        OpKind::Binary(b) => Op::Binary(*b),
        OpKind::Scale { c } => Op::Scale { c: *c },
        OpKind::AddScalar { c } => Op::AddScalar { c: *c },
        OpKind::Softmax { axis } => Op::Softmax { axis: *axis },
        OpKind::LogSoftmax { axis } => Op::LogSoftmax { axis: *axis },
        OpKind::LayerNorm { axis, eps } => Op::LayerNorm {
            axis: *axis,
            eps: eps.unwrap_or(LAYER_NORM_DEFAULT_EPS),
        },
        OpKind::BroadcastTo {
            from_shape,
            to_shape,
        } => Op::BroadcastTo {
            from: from_shape.clone(),
            to: to_shape.clone(),
        },
        OpKind::Reshape { out_shape, .. } => Op::Reshape {
            to: out_shape.clone(),
        },
        OpKind::Flatten { value_shape } => Op::Reshape {
            to: Shape::from([value_shape.size()]),
        },
        OpKind::ReduceSum { axis } => Op::ReduceSum { axis: *axis },
        OpKind::ReduceMean { axis } => Op::ReduceMean { axis: *axis },
        OpKind::Sum => Op::Sum,
        OpKind::MatMul => Op::MatMul,
        OpKind::Linear => Op::Linear,
        OpKind::Conv2d(spec) => Op::Conv2d(*spec),
        OpKind::Pool { spec, .. } => Op::Pool(*spec),
        OpKind::BatchNorm2dNchwEval { channels } => Op::BatchNormEval {
            channels: *channels,
            eps: payload
                .and_then(|p| p.entry(node.id))
                .and_then(|e| e.eps)
                .unwrap_or(BATCH_NORM_DEFAULT_EPS),
        },
        OpKind::Concat { axis } => Op::Concat {
            axis: *axis,
            count: node.parents.len(),
        },
        OpKind::SwapFirstTwo => Op::SwapFirstTwo,
        OpKind::Transpose3dLastTwo => Op::Transpose3dLastTwo,
        OpKind::Transpose { dim0, dim1 } => Op::Transpose {
            dim0: *dim0,
            dim1: *dim1,
        },
        OpKind::MseLoss => Op::MseLoss,
        OpKind::RandUniform { seed } => Op::RandUniform {
            seed: *seed,
            key: node.id as u64,
            shape: node.shape.clone(),
        },
        OpKind::BernoulliMask { seed } => Op::BernoulliMask {
            seed: *seed,
            key: node.id as u64,
            shape: node.shape.clone(),
        },
    };
    NodeSem::Apply(op)
}

/// Names of the payload tensors a node takes, in operand order after its parents.
pub fn payload_names(kind: &OpKind) -> &'static [&'static str] {
    match kind {
        OpKind::Const { .. } => &["value"],
        OpKind::Linear | OpKind::Conv2d(_) => &["weight", "bias"],
        OpKind::BatchNorm2dNchwEval { .. } => &["gamma", "beta", "mean", "var"],
        _ => &[],
    }
}

/// The payload shapes a node expects, from its attributes, declared shape and parent shapes.
pub fn expected_payload_shapes(
    node: &Node,
    parent_shapes: &[Shape],
) -> std::result::Result<Vec<(&'static str, Shape)>, Diagnostic> {
    let at = |d: Diagnostic| d.at(node.id, node.kind.name());
    Ok(match &node.kind {
        OpKind::Const { value_shape } => {
            vec![(
                "value",
                value_shape.clone().unwrap_or_else(|| node.shape.clone()),
            )]
        }
        OpKind::Linear => {
            let out = node.shape.dims().last().copied().ok_or_else(|| {
                at(
                    Diagnostic::error("linear needs an output with at least one axis")
                        .field("shape"),
                )
            })?;
            let inp = parent_shapes
                .first()
                .and_then(|s| s.dims().last().copied())
                .ok_or_else(|| {
                    at(
                        Diagnostic::error("linear needs an input with at least one axis")
                            .field("parents"),
                    )
                })?;
            vec![
                ("weight", Shape::from([out, inp])),
                ("bias", Shape::from([out])),
            ]
        }
        OpKind::Conv2d(c) => vec![
            (
                "weight",
                Shape::from([c.out_channels, c.in_channels, c.kernel_h, c.kernel_w]),
            ),
            ("bias", Shape::from([c.out_channels])),
        ],
        OpKind::BatchNorm2dNchwEval { channels } => ["gamma", "beta", "mean", "var"]
            .into_iter()
            .map(|n| (n, Shape::from([*channels])))
            .collect(),
        _ => vec![],
    })
}

/// The field a spec error points at, for diagnostics.
pub(crate) fn field_of(e: &SpecError) -> &'static str {
    match e {
        SpecError::OpAttr { attr, .. } => attr,
        SpecError::ShapeOverflow { .. } | SpecError::ShapeTooLarge { .. } => "shape",
        _ => "parents",
    }
}

/// Evaluates every node (TorchLean's `denoteAll`): one value per node id, in id order.
///
/// Fails on a graph that is not well formed, on missing or ill-shaped payload, on an input of
/// the wrong shape, on raw `log` of a non-positive (or NaN) value (use `softplus`-based
/// formulations instead), and on transcendental ops over the rational scalar. Every error names
/// the node.
pub fn denote_all<A: Scalar>(
    g: &Graph,
    payload: &Payload,
    input: &Tensor<A>,
) -> Result<Vec<DVal<A>>> {
    let problems: Vec<Diagnostic> = check_well_formed(g)
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    if !problems.is_empty() {
        return Err(IrError::Invalid(problems));
    }
    let mut vals: Vec<Tensor<A>> = Vec::with_capacity(g.len());
    for node in &g.nodes {
        let v = eval_node(node, payload, input, &vals)?;
        if v.shape() != &node.shape {
            return Err(IrError::invalid(
                Diagnostic::error(format!(
                    "evaluates to shape {}, but the node declares {}",
                    v.shape(),
                    node.shape
                ))
                .at(node.id, node.kind.name())
                .field("shape"),
            ));
        }
        vals.push(v);
    }
    Ok(vals)
}

/// The value of the output node.
pub fn denote<A: Scalar>(g: &Graph, payload: &Payload, input: &Tensor<A>) -> Result<DVal<A>> {
    let mut all = denote_all(g, payload, input)?;
    if g.output_id >= all.len() {
        return Err(IrError::invalid(
            Diagnostic::error(format!("output_id {} is not a node", g.output_id))
                .field("output_id"),
        ));
    }
    Ok(all.swap_remove(g.output_id))
}

/// Fetches payload tensor `name` of `node` in scalar type `A`, with its expected shape.
pub fn payload_tensor<A: Scalar>(
    payload: &Payload,
    node: &Node,
    name: &str,
    expected: &Shape,
) -> Result<Tensor<A>> {
    let at = |d: Diagnostic| IrError::invalid(d.at(node.id, node.kind.name()).field(name));
    let t = payload.get_as::<A>(node.id, name).ok_or_else(|| {
        at(Diagnostic::error(format!(
            "missing payload tensor `{name}`"
        )))
    })??;
    if t.shape() != expected {
        return Err(at(Diagnostic::error(format!(
            "payload tensor has shape {}, expected {expected}",
            t.shape()
        ))));
    }
    Ok(t)
}

fn eval_node<A: Scalar>(
    node: &Node,
    payload: &Payload,
    input: &Tensor<A>,
    vals: &[Tensor<A>],
) -> Result<Tensor<A>> {
    let kind = node.kind.name();
    let eval_err = |source: SpecError| IrError::Eval {
        node: node.id,
        kind: kind.to_string(),
        source,
    };
    let parent_vals: Vec<&Tensor<A>> = node.parents.iter().map(|&p| &vals[p]).collect();
    let parent_shapes: Vec<Shape> = parent_vals.iter().map(|t| t.shape().clone()).collect();
    let slots = expected_payload_shapes(node, &parent_shapes).map_err(IrError::invalid)?;
    let weights = slots
        .iter()
        .map(|(name, shape)| payload_tensor::<A>(payload, node, name, shape))
        .collect::<Result<Vec<_>>>()?;
    match node_sem(node, Some(payload)) {
        NodeSem::Input => {
            if input.shape() != &node.shape {
                return Err(IrError::invalid(
                    Diagnostic::error(format!(
                        "the input has shape {}, the node declares {}",
                        input.shape(),
                        node.shape
                    ))
                    .at(node.id, kind)
                    .field("shape"),
                ));
            }
            Ok(input.clone())
        }
        NodeSem::Const => weights.into_iter().next().ok_or_else(|| {
            eval_err(SpecError::Json {
                reason: "const without value".into(),
            })
        }),
        NodeSem::Apply(op) => {
            if op == Op::Unary(UnaryOp::Log) {
                if let Some(i) = parent_vals[0].data().iter().position(|v| !v.is_positive()) {
                    return Err(eval_err(SpecError::Domain {
                        op: "log",
                        reason: format!(
                            "element {i} is {:?}; raw `log` needs positive input",
                            parent_vals[0].data()[i]
                        ),
                    }));
                }
            }
            let mut args = parent_vals;
            args.extend(weights.iter());
            op.forward(&args).map_err(eval_err)
        }
    }
}
