//! Human-readable text of a graph (what the insta snapshots hold) and Graphviz DOT.

use crate::graph::Graph;
use crate::semantics::expected_payload_shapes;
use std::fmt::Write;
use torchlean_spec::Shape;

/// One line per node: `%id : shape = kind(parents) attrs [payload shapes]`, with the `=`
/// column aligned so a reviewer can scan shapes and ops separately.
pub fn pretty(g: &Graph) -> String {
    let mut out = String::new();
    let in_shape = g.node(g.input_id).map(|n| n.shape.to_string());
    let out_shape = g.node(g.output_id).map(|n| n.shape.to_string());
    let _ = writeln!(
        out,
        "graph: {} nodes, input %{} {}, output %{} {}",
        g.len(),
        g.input_id,
        in_shape.unwrap_or_else(|| "?".into()),
        g.output_id,
        out_shape.unwrap_or_else(|| "?".into()),
    );
    let heads: Vec<String> = g
        .nodes
        .iter()
        .map(|n| format!("%{} : {}", n.id, n.shape))
        .collect();
    let width = heads.iter().map(String::len).max().unwrap_or(0);
    for (n, head) in g.nodes.iter().zip(&heads) {
        let parents: Vec<String> = n.parents.iter().map(|p| format!("%{p}")).collect();
        let mut line = format!("  {head:<width$} = {}", n.kind.name());
        if !parents.is_empty() {
            let _ = write!(line, "({})", parents.join(", "));
        }
        for (k, v) in n.kind.attributes() {
            let _ = write!(line, " {k}={v}");
        }
        let parent_shapes: Vec<Shape> = n
            .parents
            .iter()
            .filter_map(|&p| g.node(p).map(|pn| pn.shape.clone()))
            .collect();
        if let Ok(slots) = expected_payload_shapes(n, &parent_shapes) {
            if !slots.is_empty() {
                let s: Vec<String> = slots.iter().map(|(k, s)| format!("{k}: {s}")).collect();
                let _ = write!(line, "  [payload {}]", s.join(", "));
            }
        }
        if n.id == g.output_id {
            line.push_str("  <- output");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Graphviz DOT: one box per node (id, kind, attributes, shape), one edge per parent.
pub fn dot(g: &Graph) -> String {
    let mut out = String::from(
        "digraph torchlean {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for n in &g.nodes {
        let attrs: Vec<String> = n
            .kind
            .attributes()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut label = format!("%{} {}", n.id, n.kind.name());
        if !attrs.is_empty() {
            let _ = write!(label, "\\n{}", attrs.join(" "));
        }
        let _ = write!(label, "\\n{}", n.shape);
        let style = if n.id == g.output_id {
            ", style=bold"
        } else if n.id == g.input_id {
            ", style=rounded"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  n{} [label=\"{}\"{style}];",
            n.id,
            label.replace('"', "\\\"")
        );
    }
    for n in &g.nodes {
        for (slot, p) in n.parents.iter().enumerate() {
            if n.parents.len() > 1 {
                let _ = writeln!(out, "  n{p} -> n{} [label=\"{slot}\"];", n.id);
            } else {
                let _ = writeln!(out, "  n{p} -> n{};", n.id);
            }
        }
    }
    out.push_str("}\n");
    out
}
