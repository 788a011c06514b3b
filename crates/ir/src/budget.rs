//! [`check_budget`]: a graph's memory estimate against a [`Budget`], from shapes alone, before
//! anything is allocated.
//!
//! Each node costs its value, its gradient, its payload tensors (and theirs) and its op's
//! workspace ([`torchlean_spec::Op::workspace_elements`]), counted at the shape its op's rule
//! infers from its parents (not the declared one, which an unchecked graph may get wrong: a
//! `broadcast_to` declaring `[]` while `to_shape` is huge still costs `to_shape`).

use crate::error::Diagnostic;
use crate::graph::Graph;
use crate::semantics::{expected_payload_shapes, node_sem, NodeSem};
use torchlean_spec::{Budget, NodeCost, Pass, Shape, Tally};

/// The first node whose cost takes the graph's total over `budget`, as an error naming the
/// node, its kind, its shapes and the bytes asked (field `shape`); nothing when the graph fits.
/// `elem_bytes` is the element size of the values (8 for f64); `pass` says whether gradients
/// and backward workspaces count. Nodes whose shape rule fails are counted at their declared
/// shape (their evaluation fails before allocating).
pub fn check_budget(g: &Graph, budget: Budget, elem_bytes: usize, pass: Pass) -> Vec<Diagnostic> {
    let mut tally = Tally::new(budget, elem_bytes);
    let mut shapes: Vec<Shape> = Vec::with_capacity(g.len());
    // the node's operand shapes: parents, then payload (one buffer for the whole walk)
    let mut operands: Vec<Shape> = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        operands.clear();
        operands.extend(
            n.parents
                .iter()
                .map(|&p| shapes.get(p).cloned().unwrap_or_default()),
        );
        let parents = n.parents.len();
        let payload = expected_payload_shapes(n, &operands).unwrap_or_default();
        let payload_elements = payload
            .iter()
            .fold(0usize, |a, (_, s)| a.saturating_add(s.size()));
        operands.extend(payload.into_iter().map(|(_, s)| s));
        let (out, workspace) = match node_sem(n, None) {
            NodeSem::Input => (n.shape.clone(), 0),
            NodeSem::Const => (operands.first().cloned().unwrap_or(n.shape.clone()), 0),
            NodeSem::Apply(op) => match op.infer_shape(&operands) {
                Ok(out) => {
                    let ws = op.workspace_elements(&operands, &out, pass);
                    (out, ws)
                }
                Err(_) => (n.shape.clone(), 0),
            },
        };
        let cost = NodeCost::new(out.size().saturating_add(payload_elements), workspace, pass);
        if let Err(over) = tally.add(cost) {
            let from = if parents == 0 {
                String::new()
            } else {
                let p: Vec<String> = operands[..parents].iter().map(Shape::to_string).collect();
                format!(" from {}", p.join(", "))
            };
            return vec![Diagnostic::error(format!("output {out}{from} {over}"))
                .at(i, n.kind.name())
                .field("shape")];
        }
        shapes.push(out);
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(json: &str) -> Graph {
        Graph::from_json_str(json).unwrap()
    }

    /// `x [1]` then `broadcast_to` it to `to`.
    fn broadcast(to: &str, declared: &str) -> Graph {
        graph(&format!(
            r#"{{"format":"torchlean.ir.v1","input_id":0,"output_id":1,"nodes":[
            {{"id":0,"kind":"input","parents":[],"shape":[1]}},
            {{"id":1,"kind":"broadcast_to","parents":[0],"shape":{declared},
              "from_shape":[1],"to_shape":{to}}}]}}"#
        ))
    }

    #[test]
    fn a_graph_within_budget_passes_and_one_byte_less_fails_at_the_crossing_node() {
        // input 1 + broadcast 8 elements, each with a gradient: 2·(1 + 8)·8 = 144 bytes
        let g = broadcast("[4,2]", "[4,2]");
        assert!(check_budget(&g, Budget::bytes(144), 8, Pass::Grad).is_empty());
        let d = check_budget(&g, Budget::bytes(143), 8, Pass::Grad);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].node, d[0].kind.as_deref()),
            (Some(1), Some("broadcast_to"))
        );
        assert_eq!(d[0].field.as_deref(), Some("shape"));
        assert!(
            d[0].message
                .contains("output [4, 2] from [1] needs 128 bytes"),
            "{}",
            d[0]
        );
        assert!(
            d[0].message
                .contains("144 bytes, over the memory budget of 143 bytes"),
            "{}",
            d[0]
        );
        // f32 halves it, evaluation alone (no gradients) halves it again
        assert!(check_budget(&g, Budget::bytes(72), 4, Pass::Grad).is_empty());
        assert_eq!(check_budget(&g, Budget::bytes(71), 4, Pass::Grad).len(), 1);
        assert!(check_budget(&g, Budget::bytes(36), 4, Pass::Eval).is_empty());
        assert_eq!(check_budget(&g, Budget::bytes(35), 4, Pass::Eval).len(), 1);
    }

    #[test]
    fn the_inferred_shape_counts_not_the_declared_one() {
        let g = broadcast("[65536,65536]", "[]");
        let d = check_budget(&g, Budget::bytes(1 << 30), 8, Pass::Eval);
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("output [65536, 65536]"), "{}", d[0]);
    }

    #[test]
    fn conv_workspace_and_payload_count() {
        let g = graph(
            r#"{"format":"torchlean.ir.v1","input_id":0,"output_id":1,"nodes":[
            {"id":0,"kind":"input","parents":[],"shape":[1,1,4,4]},
            {"id":1,"kind":"conv2d","parents":[0],"shape":[1,2,4,4],
             "inC":1,"outC":2,"kH":3,"kW":3,"stride":1,"padding":1}]}"#,
        );
        let spec = torchlean_spec::Conv2dSpec::ungrouped(1, 2, (3, 3), 1, 1);
        let (x, y) = (Shape::from([1, 1, 4, 4]), Shape::from([1, 2, 4, 4]));
        let ws = spec.workspace_elements(&x, &y, Pass::Grad) as u64;
        assert!(ws > spec.workspace_elements(&x, &y, Pass::Eval) as u64);
        // input 16, output 32, weight 18, bias 2, each with a gradient, plus the workspace
        let need = (2 * (16 + 32 + 18 + 2) + ws) * 8;
        assert!(check_budget(&g, Budget::bytes(need), 8, Pass::Grad).is_empty());
        assert_eq!(
            check_budget(&g, Budget::bytes(need - 1), 8, Pass::Grad).len(),
            1
        );
    }
}
