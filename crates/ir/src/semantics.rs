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
        OpKind::Op(op) => op
            .payload_shapes(parent_shapes, &node.shape)
            .map_err(|e| Diagnostic::spec_in_its_field(e).at(node.id, node.kind.name()))?,
    };
    Ok(names.iter().copied().zip(shapes).collect())
}

/// The values of a graph's inputs, in input order ([`Graph::inputs`]): one tensor for a
/// single-input graph, or a slice or `Vec` of them.
pub trait InputValues<A> {
    fn tensors(&self) -> &[Tensor<A>];
}

impl<A> InputValues<A> for Tensor<A> {
    fn tensors(&self) -> &[Tensor<A>] {
        std::slice::from_ref(self)
    }
}

impl<A> InputValues<A> for [Tensor<A>] {
    fn tensors(&self) -> &[Tensor<A>] {
        self
    }
}

impl<A> InputValues<A> for Vec<Tensor<A>> {
    fn tensors(&self) -> &[Tensor<A>] {
        self
    }
}

/// `inputs`, if there is one per graph input.
fn one_per_input<'a, A>(
    g: &Graph,
    inputs: &'a (impl InputValues<A> + ?Sized),
) -> Result<&'a [Tensor<A>]> {
    let xs = inputs.tensors();
    if xs.len() == g.input_count() {
        Ok(xs)
    } else {
        Err(IrError::invalid(
            Diagnostic::error(format!(
                "the graph takes {} input(s), {} given",
                g.input_count(),
                xs.len()
            ))
            .field(crate::check::input_field(g)),
        ))
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
    inputs: &(impl InputValues<A> + ?Sized),
) -> Result<Vec<DVal<A>>> {
    denote_all_within(g, payload, inputs, Budget::process_default())
}

/// [`denote_all`] within `budget`: a graph whose values and workspaces
/// ([`crate::check_budget`] for [`Pass::Eval`], at `A`'s size) exceed it is refused before any
/// node is evaluated.
pub fn denote_all_within<A: Scalar>(
    g: &Graph,
    payload: &Payload,
    inputs: &(impl InputValues<A> + ?Sized),
    budget: Budget,
) -> Result<Vec<DVal<A>>> {
    well_formed_for_eval::<A>(g, budget)?;
    let inputs = one_per_input(g, inputs)?;
    let mut vals: Vec<Tensor<A>> = Vec::with_capacity(g.len());
    for node in &g.nodes {
        let parents = node.parents.iter().map(|&p| &vals[p]).collect();
        let input = &inputs[g.input_position(node.id)];
        let v = declared(node, eval_node(node, payload, input, parents)?)?;
        vals.push(v);
    }
    Ok(vals)
}

/// The value of the (first) output node: [`denote_all`]'s, computed holding only live values
/// (each is dropped after the last node that reads it), so memory follows the graph's width,
/// not its length.
pub fn denote<A: Scalar>(
    g: &Graph,
    payload: &Payload,
    inputs: &(impl InputValues<A> + ?Sized),
) -> Result<DVal<A>> {
    let mut outs = denote_outputs(g, payload, inputs)?;
    outs.truncate(1);
    Ok(outs
        .pop()
        .expect("a graph has at least one output (`output_id`)"))
}

/// The value of every output, in output order ([`Graph::outputs`]), computed like [`denote`]
/// (only live values held).
pub fn denote_outputs<A: Scalar>(
    g: &Graph,
    payload: &Payload,
    inputs: &(impl InputValues<A> + ?Sized),
) -> Result<Vec<DVal<A>>> {
    well_formed_for_eval::<A>(g, Budget::process_default())?;
    if let Some(bad) = g.outputs().find(|&o| o >= g.len()) {
        // every node's own error comes first, as in `denote_all`
        denote_all(g, payload, inputs)?;
        return Err(IrError::invalid(
            Diagnostic::error(format!("output {bad} is not a node")).field(output_field(g)),
        ));
    }
    // the last node reading each value (well-formed: parents are earlier nodes)
    let mut last_use: Vec<usize> = (0..g.len()).collect();
    for node in &g.nodes {
        for &p in &node.parents {
            last_use[p] = node.id;
        }
    }
    for o in g.outputs() {
        last_use[o] = usize::MAX;
    }
    let inputs = one_per_input(g, inputs)?;
    let mut vals: Vec<Option<Tensor<A>>> = Vec::with_capacity(g.len());
    for node in &g.nodes {
        let parents = node
            .parents
            .iter()
            .map(|&p| vals[p].as_ref().expect("a value lives until its last use"))
            .collect();
        let input = &inputs[g.input_position(node.id)];
        let v = declared(node, eval_node(node, payload, input, parents)?)?;
        for &p in &node.parents {
            if last_use[p] == node.id {
                vals[p] = None;
            }
        }
        vals.push((last_use[node.id] != node.id).then_some(v));
    }
    Ok(g.outputs()
        .map(|o| {
            vals[o]
                .clone()
                .expect("an output is never dropped (its last use is MAX)")
        })
        .collect())
}

/// The wire key naming a graph's outputs: `output_id`, or `output_ids` for a graph with more
/// than one.
pub(crate) fn output_field(g: &Graph) -> &'static str {
    if g.extra_outputs.is_empty() {
        "output_id"
    } else {
        "output_ids"
    }
}

/// The graph is well formed and its values and workspaces ([`crate::check_budget`] for
/// [`Pass::Eval`], at `A`'s size) fit `budget`: checked before any node is evaluated.
fn well_formed_for_eval<A: Scalar>(g: &Graph, budget: Budget) -> Result<()> {
    let mut problems: Vec<Diagnostic> = check_well_formed(g)
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    if problems.is_empty() {
        problems = crate::budget::check_budget(g, budget, std::mem::size_of::<A>(), Pass::Eval);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(IrError::Invalid(problems))
    }
}

/// `v`, if it has the shape `node` declares.
fn declared<A: Scalar>(node: &Node, v: Tensor<A>) -> Result<Tensor<A>> {
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
    Ok(v)
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

/// Evaluates one node; `input` is the value of the graph input it denotes if it is an
/// `input` node.
fn eval_node<A: Scalar>(
    node: &Node,
    payload: &Payload,
    input: &Tensor<A>,
    parent_vals: Vec<&Tensor<A>>,
) -> Result<Tensor<A>> {
    let kind = node.kind.name();
    let eval_err = |source: SpecError| IrError::Eval {
        node: node.id,
        kind: kind.to_string(),
        source,
    };
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
            IrError::invalid(
                Diagnostic::error("a const node has no `value` payload")
                    .at(node.id, kind)
                    .field("value"),
            )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denote_is_denote_all_at_the_output_while_dropping_dead_values() {
        let g = Graph::from_json_str(
            r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":3,"nodes":[
            {"id":0,"kind":"input","parents":[],"shape":[2]},
            {"id":1,"kind":"tanh","parents":[0],"shape":[2]},
            {"id":2,"kind":"exp","parents":[1],"shape":[2]},
            {"id":3,"kind":"mul_elem","parents":[1,0],"shape":[2]},
            {"id":4,"kind":"sin","parents":[3],"shape":[2]}]}"#,
        )
        .expect("a graph");
        let x = Tensor::new([2], vec![0.25, -3.0]).expect("2 values");
        let p = Payload::new();
        let all = denote_all(&g, &p, &x).expect("evaluates");
        for out in 0..g.len() {
            let g = Graph {
                output_id: out,
                ..g.clone()
            };
            assert_eq!(
                denote(&g, &p, &x).expect("evaluates"),
                all[out],
                "output {out}"
            );
        }
        let bad = Graph {
            output_id: 9,
            ..g.clone()
        };
        assert!(denote(&bad, &p, &x).is_err());
    }
}
