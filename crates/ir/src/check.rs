//! Checks that report **every** problem, each naming the node, its kind, the field and the
//! shapes involved: [`check_well_formed`] (ids, arity, topological order), [`check_shapes`]
//! (shape inference for every kind against the declared shapes, plus warnings) and
//! [`check_payload`] (every weight present with the right shape).

use crate::error::Diagnostic;
use crate::graph::Graph;
use crate::kind::OpKind;
use crate::payload::Payload;
use crate::semantics::{expected_payload_shapes, node_sem, payload_names, NodeSem};
use torchlean_spec::{Op, Shape};

/// TorchLean's `checkWellFormed`, reporting all violations: per index `i`, `nodes[i].id == i`,
/// the parent count is within the kind's arity, and every parent id is `< i`; plus the graph's
/// inputs (`input` nodes, each listed once) and outputs exist.
pub fn check_well_formed(g: &Graph) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if g.nodes.is_empty() {
        out.push(Diagnostic::error("the graph has no nodes").field("nodes"));
        return out;
    }
    for (i, n) in g.nodes.iter().enumerate() {
        let at = |d: Diagnostic| d.at(i, n.kind.name());
        if n.id != i {
            out.push(at(Diagnostic::error(format!(
                "id discipline violated: the node at index {i} has id {}",
                n.id
            ))
            .field("id")));
        }
        let count = n.kind.parent_count();
        if !count.accepts(n.parents.len()) {
            out.push(at(Diagnostic::error(format!(
                "bad parent count for {}: expected {count}, got {}",
                n.kind.name(),
                n.parents.len()
            ))
            .field("parents")));
        }
        for &p in &n.parents {
            if p >= i {
                out.push(at(Diagnostic::error(format!(
                    "parent id {p} is not < {i} (parents must come earlier)"
                ))
                .field("parents")));
            }
        }
    }
    let field = input_field(g);
    for (k, id) in g.inputs().enumerate() {
        match g.nodes.get(id) {
            None => out.push(Diagnostic::error(format!("{field} {id} is not a node")).field(field)),
            Some(n) if n.kind != OpKind::Input => out.push(
                Diagnostic::error(format!(
                    "{field} {id} names a `{}` node, not an `input` node",
                    n.kind.name()
                ))
                .field(field),
            ),
            Some(_) if g.inputs().take(k).any(|earlier| earlier == id) => {
                out.push(Diagnostic::error(format!("{field} names node {id} twice")).field(field))
            }
            Some(_) => {}
        }
    }
    if !g.input_names.is_empty() && g.input_names.len() != g.input_count() {
        out.push(
            Diagnostic::error(format!(
                "{} names for {} inputs",
                g.input_names.len(),
                g.input_count()
            ))
            .field("input_names"),
        );
    }
    for o in g.outputs().filter(|&o| o >= g.nodes.len()) {
        let field = crate::semantics::output_field(g);
        out.push(Diagnostic::error(format!("{field} {o} is not a node")).field(field));
    }
    out
}

/// The wire key naming a graph's inputs: `input_id`, or `input_ids` for a graph with more
/// than one.
pub(crate) fn input_field(g: &Graph) -> &'static str {
    if g.extra_inputs.is_empty() {
        crate::format::august::INPUT_ID
    } else {
        crate::format::august::INPUT_IDS
    }
}

/// The field of [`broadcast_warning`]'s diagnostics (`broadcast_to`'s target).
pub(crate) const BROADCAST_FIELD: &str = "to_shape";

/// TorchLean's `checkShapes`: well-formedness, then per node the shape inferred from its
/// parents' declared shapes (and the payload shapes its attributes imply) must equal its declared
/// shape. Also validates every declared shape's size (no overflow, at most 2^32 elements) and
/// adds warnings (see [`broadcast_warning`]).
pub fn check_shapes(g: &Graph) -> Vec<Diagnostic> {
    let mut out = check_well_formed(g);
    let broken: Vec<bool> = {
        let mut b = vec![false; g.nodes.len()];
        for d in &out {
            if let Some(n) = d.node {
                if let Some(slot) = b.get_mut(n) {
                    *slot = true;
                }
            }
        }
        b
    };
    let input_shape = g
        .nodes
        .get(g.input_id)
        .filter(|n| n.kind == OpKind::Input)
        .map(|n| n.shape.clone());
    for (i, n) in g.nodes.iter().enumerate() {
        let at = |d: Diagnostic| d.at(i, n.kind.name());
        if let Err(e) = n.shape.checked_size() {
            out.push(at(Diagnostic::spec(e).field("shape")));
            continue;
        }
        if broken[i] {
            continue;
        }
        let parent_shapes: Vec<Shape> = n
            .parents
            .iter()
            .map(|&p| g.nodes[p].shape.clone())
            .collect();
        if parent_shapes.iter().any(|s| s.checked_size().is_err()) {
            continue; // reported at the parent
        }
        match infer_node(g, i, &parent_shapes, input_shape.as_ref()) {
            Ok(inferred) if inferred != n.shape => out.push(at(Diagnostic::error(format!(
                "declared shape {} but the inferred shape is {inferred} (parent shapes {})",
                n.shape,
                fmt_shapes(&parent_shapes)
            ))
            .field("shape"))),
            Ok(_) => {}
            Err(d) => out.push(d),
        }
        if let OpKind::Op(Op::BroadcastTo { from, to }) = &n.kind {
            if let Some(w) = broadcast_warning(from, to) {
                out.push(at(Diagnostic::warning(w).field(BROADCAST_FIELD)));
            }
        }
    }
    out
}

fn fmt_shapes(s: &[Shape]) -> String {
    if s.is_empty() {
        return "none".into();
    }
    s.iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The inferred output shape of node `i` from its parents' shapes.
fn infer_node(
    g: &Graph,
    i: usize,
    parent_shapes: &[Shape],
    input_shape: Option<&Shape>,
) -> Result<Shape, Diagnostic> {
    let n = &g.nodes[i];
    let at = |d: Diagnostic| d.at(i, n.kind.name());
    let payload_shapes = expected_payload_shapes(n, parent_shapes)?;
    match node_sem(n, None) {
        // an input node the graph lists declares its input's shape; any other denotes the
        // first input and must have its shape
        NodeSem::Input if g.inputs().any(|id| id == i) => Ok(n.shape.clone()),
        NodeSem::Input => match input_shape {
            Some(s) if s != &n.shape => Err(at(Diagnostic::error(format!(
                "every input node must have the graph input's shape {s}, this one declares {}",
                n.shape
            ))
            .field("shape"))),
            _ => Ok(n.shape.clone()),
        },
        NodeSem::Const => Ok(payload_shapes
            .into_iter()
            .next()
            .map(|(_, s)| s)
            .unwrap_or_else(|| n.shape.clone())),
        NodeSem::Apply(op) => {
            let mut operands = parent_shapes.to_vec();
            operands.extend(payload_shapes.into_iter().map(|(_, s)| s));
            op.infer_shape(&operands)
                .map_err(|e| at(Diagnostic::spec_in_its_field(e)))
        }
    }
}

/// Checks a payload against a graph: every `const`, `linear`, `conv2d`, batch-norm and
/// `cross_entropy` node has all its tensors with the expected shapes, and data tensors (class
/// ids) have valid values. Entries for nodes that take no payload, and
/// unexpected tensor names, are warnings.
pub fn check_payload(g: &Graph, payload: &Payload) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for n in &g.nodes {
        let names = payload_names(&n.kind);
        let at = |d: Diagnostic| d.at(n.id, n.kind.name());
        if names.is_empty() {
            if payload.entry(n.id).is_some() {
                out.push(at(Diagnostic::warning(
                    "has a payload entry but takes no payload; it is ignored",
                )));
            }
            continue;
        }
        let parent_shapes: Vec<Shape> = n
            .parents
            .iter()
            .filter_map(|&p| g.nodes.get(p).map(|pn| pn.shape.clone()))
            .collect();
        let expected = match expected_payload_shapes(n, &parent_shapes) {
            Ok(e) => e,
            Err(d) => {
                out.push(d);
                continue;
            }
        };
        let Some(entry) = payload.entry(n.id) else {
            out.push(at(Diagnostic::error(format!(
                "missing payload (expects {})",
                expected
                    .iter()
                    .map(|(k, s)| format!("{k} {s}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))));
            continue;
        };
        // every operand's shape, for the data operands' value rule
        let mut operand_shapes = parent_shapes.clone();
        operand_shapes.extend(expected.iter().map(|(_, s)| s.clone()));
        for (k, (name, shape)) in expected.iter().enumerate() {
            if let Err(e) = shape.checked_size() {
                out.push(at(Diagnostic::spec(e).field(*name)));
                continue;
            }
            match entry.tensor(name) {
                None => out.push(at(Diagnostic::error(format!(
                    "missing payload tensor (expected shape {shape})"
                ))
                .field(*name))),
                Some(t) if t.shape() != shape => out.push(at(Diagnostic::error(format!(
                    "payload tensor has shape {}, expected {shape}",
                    t.shape()
                ))
                .field(*name))),
                Some(t) => {
                    // data operands (class ids) have a value rule too: the op's own
                    if let OpKind::Op(op) = &n.kind {
                        let i = n.parents.len() + k;
                        if let Err(e) = op.check_data(i, &operand_shapes, t.data()) {
                            out.push(at(Diagnostic::spec(e).field(*name)));
                        }
                    }
                }
            }
        }
        if let Some(d) = payload_attr_problem(n, payload, &operand_shapes) {
            out.push(d);
        }
        for name in entry.tensors.keys() {
            if !names.contains(&name.as_str()) {
                out.push(at(Diagnostic::warning(format!(
                    "unexpected payload tensor `{name}` is ignored"
                ))
                .field(name.clone())));
            }
        }
    }
    for id in payload.entries.keys() {
        if *id >= g.nodes.len() {
            out.push(Diagnostic::warning(format!(
                "payload entry for node {id}, which does not exist, is ignored"
            )));
        }
    }
    out
}

/// The shape rule's verdict on the attributes a node takes from the payload (batch norm's
/// `eps`): the op as evaluation runs it ([`node_sem`] with the payload) through the same
/// `Op::infer_shape` that `forward` validates with, so `check` and evaluation cannot disagree.
/// Only where the payload changes the op: otherwise [`check_shapes`] has already run the rule.
fn payload_attr_problem(
    n: &crate::graph::Node,
    payload: &Payload,
    operand_shapes: &[Shape],
) -> Option<Diagnostic> {
    let NodeSem::Apply(op) = node_sem(n, Some(payload)) else {
        return None;
    };
    if NodeSem::Apply(op.clone()) == node_sem(n, None) {
        return None;
    }
    op.infer_shape(operand_shapes)
        .err()
        .map(|e| Diagnostic::spec_in_its_field(e).at(n.id, n.kind.name()))
}

/// Where TorchLean's left-aligned `CanBroadcastTo` can derive `from → to` with a different
/// meaning from PyTorch's right-aligned `expand` (which we implement), a warning text.
///
/// TorchLean's rules: scalar → anything; equal outer extents with broadcastable tails; an
/// outer 1 → any outer extent; prepend a target axis. A derivation assigns each source axis to
/// a target axis; if any non-1 source axis can land elsewhere than PyTorch puts it, the two
/// systems may read the graph differently (e.g. `[3] → [3, 3]`, `[2, 1] → [2, 2, 1]`).
pub fn broadcast_warning(from: &Shape, to: &Shape) -> Option<String> {
    if from.rank() > to.rank() || to.rank() > 12 {
        return None;
    }
    let lead = to.rank() - from.rank();
    let pytorch: Vec<usize> = (0..from.rank()).map(|i| i + lead).collect();
    let mut differing = None;
    left_derivations(from.dims(), to.dims(), 0, &mut Vec::new(), &mut |assign| {
        let differs = assign
            .iter()
            .zip(&pytorch)
            .enumerate()
            .any(|(i, (a, p))| from.dims()[i] != 1 && a != p);
        if differs && differing.is_none() {
            differing = Some(assign.to_vec());
        }
    });
    differing.map(|assign| {
        format!(
            "broadcast {from} -> {to} is read right-aligned as in PyTorch (source axes -> target \
             axes {pytorch:?}), but TorchLean's left-aligned rule also derives it with source \
             axes -> {assign:?}; the two give different tensors (see docs/ir-format.md)"
        )
    })
}

/// Enumerates TorchLean derivations of `from → to`, calling `found` with the target axis of each
/// source axis. `offset` is the index in the full target of `to[0]`.
fn left_derivations(
    from: &[usize],
    to: &[usize],
    offset: usize,
    assign: &mut Vec<usize>,
    found: &mut dyn FnMut(&[usize]),
) {
    if from.is_empty() {
        found(assign);
        return;
    }
    if to.is_empty() {
        return;
    }
    // equal outer extent, or an outer 1 broadcast to any extent
    if from[0] == to[0] || from[0] == 1 {
        assign.push(offset);
        left_derivations(&from[1..], &to[1..], offset + 1, assign, found);
        assign.pop();
    }
    // prepend a target axis
    left_derivations(from, &to[1..], offset + 1, assign, found);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_warning_flags_pairs_where_the_rules_differ() {
        let w = |f: &[usize], t: &[usize]| broadcast_warning(&Shape::from(f), &Shape::from(t));
        assert!(w(&[3], &[3, 3]).is_some());
        assert!(w(&[2, 1], &[2, 2, 1]).is_some());
        // unambiguous pairs from the conformance cases
        assert!(w(&[2, 1, 3], &[4, 2, 5, 3]).is_none());
        assert!(w(&[4], &[2, 3, 4]).is_none());
        assert!(w(&[3, 4], &[2, 3, 4]).is_none());
        assert!(w(&[], &[5, 5]).is_none());
        // size-1 source axes read the same value wherever they land
        assert!(w(&[1], &[4, 4]).is_none());
    }
}

#[cfg(test)]
mod payload_attr_tests {
    use super::*;
    use torchlean_spec::Tensor;

    #[test]
    fn batch_norm_eps_from_the_payload_goes_through_the_shape_rule() {
        let g = Graph::from_json(&serde_json::json!({
            "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1, "nodes": [
                {"id": 0, "kind": "input", "parents": [], "shape": [2, 3]},
                {"id": 1, "kind": "batch_norm2d_nchw_eval", "parents": [0], "shape": [2, 3],
                 "channels": 3}]}))
        .unwrap();
        let mut p = Payload::new();
        for name in ["gamma", "beta", "mean", "var"] {
            p.insert(1, name, Tensor::new([3], vec![1.0; 3]).unwrap());
        }
        let errors = |p: &Payload| -> Vec<String> {
            check_payload(&g, p)
                .iter()
                .filter(|d| d.is_error())
                .map(|d| d.to_string())
                .collect()
        };
        assert!(errors(&p).is_empty(), "{:?}", errors(&p));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            p.entries.get_mut(&1).unwrap().eps = Some(bad);
            let e = errors(&p);
            assert_eq!(e.len(), 1, "{e:?}");
            assert!(
                e[0].starts_with("node 1 (batch_norm2d_nchw_eval), field `eps`: "),
                "{e:?}"
            );
        }
        p.entries.get_mut(&1).unwrap().eps = Some(0.0);
        assert!(errors(&p).is_empty());
    }
}
