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
use torchlean_spec::{Budget, Op, Pass, Scalar, Shape, SpecError, Tensor, UnaryOp};

pub use torchlean_spec::ops::{BATCH_NORM_DEFAULT_EPS, LAYER_NORM_DEFAULT_EPS};

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

/// The meaning of a node: its kind's op with the fields it takes from the node rather than
/// from attributes filled in — the random kinds' key (the node id) and shape (the declared
/// shape), and batch norm's `eps` (from the payload when present, else the default).
pub fn node_sem(node: &Node, payload: Option<&Payload>) -> NodeSem {
    let mut op = match &node.kind {
        OpKind::Input => return NodeSem::Input,
        OpKind::Const { .. } => return NodeSem::Const,
        OpKind::Op(op) => op.clone(),
    };
    match &mut op {
        Op::RandUniform { key, shape, .. } | Op::BernoulliMask { key, shape, .. } => {
            *key = node.id as u64;
            *shape = node.shape.clone();
        }
        Op::BatchNormEval { eps, .. } => {
            *eps = payload
                .and_then(|p| p.entry(node.id))
                .and_then(|e| e.eps)
                .unwrap_or(BATCH_NORM_DEFAULT_EPS);
        }
        _ => {}
    }
    NodeSem::Apply(op)
}

/// Names of the payload tensors a node takes, in operand order after its parents (the
/// descriptor's).
pub fn payload_names(kind: &OpKind) -> &'static [&'static str] {
    kind.desc().payload_names()
}

/// The payload shapes a node expects, from its attributes, declared shape and parent shapes
/// (`const`: `value_shape`, else the node's shape; ops: `Op::payload_shapes`, the one rule).
pub fn expected_payload_shapes(
    node: &Node,
    parent_shapes: &[Shape],
) -> std::result::Result<Vec<(&'static str, Shape)>, Diagnostic> {
    let names = payload_names(&node.kind);
    let shapes = match &node.kind {
        OpKind::Input => vec![],
        OpKind::Const { value_shape } => {
            vec![value_shape.clone().unwrap_or_else(|| node.shape.clone())]
        }
        OpKind::Op(op) => op.payload_shapes(parent_shapes, &node.shape).map_err(|e| {
            Diagnostic::error(e.to_string())
                .at(node.id, node.kind.name())
                .field(field_of(&e))
        })?,
    };
    Ok(names.iter().copied().zip(shapes).collect())
}

/// The field a spec error points at, for diagnostics.
pub(crate) fn field_of(e: &SpecError) -> &'static str {
    match e {
        SpecError::ShapeOverflow { .. } | SpecError::ShapeTooLarge { .. } => "shape",
        _ => e.field().unwrap_or("parents"),
    }
}

/// Evaluates every node (TorchLean's `denoteAll`): one value per node id, in id order.
///
/// Fails on a graph that is not well formed, on missing or ill-shaped payload, on an input of
/// the wrong shape, on raw `log` of a non-positive (or NaN) value (use `softplus`-based
/// formulations instead), on transcendental ops over the rational scalar, and on a graph over
/// the process's memory budget ([`Budget::process_default`], see [`denote_all_within`]). Every
/// error names the node.
pub fn denote_all<A: Scalar>(
    g: &Graph,
    payload: &Payload,
    input: &Tensor<A>,
) -> Result<Vec<DVal<A>>> {
    denote_all_within(g, payload, input, Budget::process_default())
}

/// [`denote_all`] within `budget`: a graph whose values and workspaces
/// ([`crate::check_budget`] for [`Pass::Eval`], at `A`'s size) exceed it is refused before any
/// node is evaluated.
pub fn denote_all_within<A: Scalar>(
    g: &Graph,
    payload: &Payload,
    input: &Tensor<A>,
    budget: Budget,
) -> Result<Vec<DVal<A>>> {
    let mut problems: Vec<Diagnostic> = check_well_formed(g)
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    if problems.is_empty() {
        problems = crate::budget::check_budget(g, budget, std::mem::size_of::<A>(), Pass::Eval);
    }
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
                        op: torchlean_spec::ops::desc::LOG.name,
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
