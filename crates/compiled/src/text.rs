//! The text of a lowered graph (`torchlean lower`, and what the insta snapshots hold).

use crate::graph::GraphData;
use crate::lower::{ExecGraph, InputSlot};
use std::fmt::Write;

/// One line per context position: `%p : shape = what`, the `=` column aligned; node lines name
/// the op, its attributes and arguments, and the IR node they came from.
pub fn graph_text(g: &GraphData, slots: Option<&[InputSlot]>, output: Option<usize>) -> String {
    let mut lines: Vec<(String, String)> = Vec::with_capacity(g.len());
    for (i, s) in g.inputs().iter().enumerate() {
        let what = match slots.and_then(|s| s.get(i)) {
            Some(InputSlot::GraphInput) => "graph input".to_string(),
            None => format!("input {i}"),
            Some(InputSlot::Payload { node, name }) => format!("payload {node}.{name}"),
        };
        lines.push((format!("%{i} : {s}"), what));
    }
    for (k, n) in g.nodes().iter().enumerate() {
        let p = g.n_inputs() + k;
        let args: Vec<String> = n.args.iter().map(|a| format!("%{a}")).collect();
        let mut what = format!("{}({})", n.op.name(), args.join(", "));
        let attrs = op_attrs(&n.op);
        if !attrs.is_empty() {
            let _ = write!(what, " {attrs}");
        }
        if let Some(o) = &n.origin {
            let _ = write!(what, "  ; {o}");
        }
        lines.push((format!("%{p} : {}", n.shape), what));
    }
    // padded by `push_padded`: `{:<width$}` panics for a width over 65,535
    let width = lines
        .iter()
        .map(|(h, _)| h.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "graphdata: {} input{}, {} node{}{}",
        g.n_inputs(),
        if g.n_inputs() == 1 { "" } else { "s" },
        g.nodes().len(),
        if g.nodes().len() == 1 { "" } else { "s" },
        output.map(|o| format!(", output %{o}")).unwrap_or_default()
    );
    for (i, (head, what)) in lines.iter().enumerate() {
        if i == 0 {
            out.push_str("inputs:\n");
        }
        if i == g.n_inputs() {
            out.push_str("nodes:\n");
        }
        out.push_str("  ");
        torchlean_ir::pretty::push_padded(&mut out, head, width);
        let _ = writeln!(out, " = {what}");
    }
    out
}

/// The text of a lowered IR graph.
pub fn lower_text(e: &ExecGraph) -> String {
    graph_text(&e.graph, Some(&e.slots), Some(e.output))
}

/// `key=value` for every attribute, in wire order (from the op's one attribute listing, with
/// defaults shown where the node left an optional attribute out), then the fields the op took
/// from its IR node (the random kinds' key, batch norm's `eps`).
fn op_attrs(op: &torchlean_spec::Op) -> String {
    use torchlean_spec::ops::{AttrMut, AttrVisitor};
    struct Text(Vec<String>);
    impl AttrVisitor for Text {
        fn visit(&mut self, key: &'static str, value: AttrMut<'_>) {
            self.0.push(match value {
                AttrMut::Int(v) => format!("{key}={v}"),
                AttrMut::Seed(v) => format!("{key}={v}"),
                AttrMut::Float(v) => format!("{key}={v}"),
                AttrMut::OptFloat { value: Some(v), .. } => format!("{key}={v:e}"),
                AttrMut::OptFloat {
                    value: None,
                    default,
                } => format!("{key}={default:e} (default)"),
                AttrMut::MaybeFloat(Some(v)) => format!("{key}={v}"),
                AttrMut::MaybeFloat(None) => format!("{key}=none"),
                AttrMut::Shape(s) => format!("{key}={s}"),
                AttrMut::List(l) => format!("{key}={l:?}"),
                AttrMut::Choice { value, .. } => format!("{key}={value}"),
            });
        }
    }
    let mut text = Text(Vec::new());
    op.clone().visit_attrs(&mut text);
    for (key, value) in op.context_values() {
        text.0.push(format!("{key}={value}"));
    }
    text.0.join(" ")
}
