//! The text of a lowered graph (`torchlean lower`, and what the insta snapshots hold).

use crate::graph::GraphData;
use crate::lower::{ExecGraph, InputSlot};
use std::fmt::Write;

/// One line per context position: `%p : shape = what`, the `=` column aligned; node lines name
/// the op, its attributes and arguments, and the IR node they came from. Two passes (the column
/// width, then the lines) so that nothing per line is kept besides the text itself.
pub fn graph_text(g: &GraphData, slots: Option<&[InputSlot]>, output: Option<usize>) -> String {
    let mut head = String::new();
    let mut width = 0;
    for p in 0..g.len() {
        head.clear();
        write_head(&mut head, p, g.shape(p));
        width = width.max(head.len());
    }
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
    let mut what = String::new();
    for p in 0..g.len() {
        if p == 0 {
            out.push_str("inputs:\n");
        }
        if p == g.n_inputs() {
            out.push_str("nodes:\n");
        }
        head.clear();
        write_head(&mut head, p, g.shape(p));
        what.clear();
        match g.node_at(p) {
            None => match slots.and_then(|s| s.get(p)) {
                Some(InputSlot::GraphInput { index: 0 }) => what.push_str("graph input"),
                Some(InputSlot::GraphInput { index }) => {
                    let _ = write!(what, "graph input {index}");
                }
                None => {
                    let _ = write!(what, "input {p}");
                }
                Some(InputSlot::Payload { node, name }) => {
                    let _ = write!(what, "payload {node}.{name}");
                }
            },
            Some(n) => {
                let _ = write!(what, "{}(", n.op.name());
                for (i, a) in n.args.iter().enumerate() {
                    let _ = write!(what, "{}%{a}", if i == 0 { "" } else { ", " });
                }
                what.push(')');
                let attrs = op_attrs(&n.op);
                if !attrs.is_empty() {
                    let _ = write!(what, " {attrs}");
                }
                if let Some(o) = &n.origin {
                    let _ = write!(what, "  ; {o}");
                }
            }
        }
        // padded by `push_padded`: `{:<width$}` panics for a width over 65,535
        out.push_str("  ");
        torchlean_ir::pretty::push_padded(&mut out, &head, width);
        let _ = writeln!(out, " = {what}");
    }
    out
}

fn write_head(out: &mut String, p: usize, shape: &torchlean_spec::Shape) {
    let _ = write!(out, "%{p} : {shape}");
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
                // left out at its default, as the wire format leaves it out
                AttrMut::IntOr { value, default } if *value == default => return,
                AttrMut::IntOr { value: v, .. } => format!("{key}={v}"),
                AttrMut::Seed(v) => format!("{key}={v}"),
                AttrMut::Float(v) | AttrMut::FloatOr { value: v, .. } => format!("{key}={v}"),
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
