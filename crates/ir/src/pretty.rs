//! Human-readable text of a graph (what the insta snapshots hold) and Graphviz DOT.

use crate::graph::Graph;
use crate::semantics::expected_payload_shapes;
use std::fmt::Write;
use torchlean_spec::Shape;

/// One line per node: `%id : shape = kind(parents) attrs [payload shapes]`, with the `=`
/// column aligned so a reviewer can scan shapes and ops separately.
pub fn pretty(g: &Graph) -> String {
    let mut out = String::new();
    let shape_of = |id: usize| {
        g.node(id)
            .map_or_else(|| "?".into(), |n| n.shape.to_string())
    };
    let inputs = if g.extra_inputs.is_empty() {
        format!("input %{} {}", g.input_id, shape_of(g.input_id))
    } else {
        let each: Vec<String> = g
            .inputs()
            .enumerate()
            .map(|(k, id)| match g.input_names.get(k) {
                Some(name) => format!("%{id} {name} {}", shape_of(id)),
                None => format!("%{id} {}", shape_of(id)),
            })
            .collect();
        format!("inputs {}", each.join(", "))
    };
    let _ = writeln!(
        out,
        "graph: {} nodes, {inputs}, output %{} {}",
        g.len(),
        g.output_id,
        shape_of(g.output_id),
    );
    let heads: Vec<String> = g
        .nodes
        .iter()
        .map(|n| format!("%{} : {}", n.id, n.shape))
        .collect();
    let width = heads.iter().map(|h| h.chars().count()).max().unwrap_or(0);
    for (n, head) in g.nodes.iter().zip(&heads) {
        let parents: Vec<String> = n.parents.iter().map(|p| format!("%{p}")).collect();
        let mut line = String::from("  ");
        push_padded(&mut line, head, width);
        let _ = write!(line, " = {}", n.kind.name());
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
        if g.outputs().any(|o| o == n.id) {
            line.push_str("  <- output");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Appends `s` and spaces up to `width` characters: `{:<width$}` without its limit (a width
/// over 65,535, from a rank-22,000 shape, panics in `format!`).
pub fn push_padded(out: &mut String, s: &str, width: usize) {
    out.push_str(s);
    out.extend(std::iter::repeat_n(
        ' ',
        width.saturating_sub(s.chars().count()),
    ));
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
        let style = if g.outputs().any(|o| o == n.id) {
            ", style=bold"
        } else if g.inputs().any(|i| i == n.id) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_22000_shape_prints_aligned() {
        let dims = vec![1usize; 22_000];
        let g = Graph::from_json(&serde_json::json!({
            "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1, "nodes": [
                {"id": 0, "kind": "input", "parents": [], "shape": dims},
                {"id": 1, "kind": "input", "parents": [], "shape": []}]}))
        .unwrap();
        let text = pretty(&g);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1].find(" = "), lines[2].find(" = "));
        assert!(lines[2].starts_with("  %1 : []    "));
    }

    #[test]
    fn push_padded_counts_characters() {
        let mut s = String::new();
        push_padded(&mut s, "é", 3);
        assert_eq!(s, "é  ");
        push_padded(&mut s, "long", 2);
        assert_eq!(s, "é  long");
    }
}
