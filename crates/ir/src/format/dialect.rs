//! TorchLean's two `torchlean.ir.v1` dialects: which one a file is in, and reading either into
//! the one IR ([`GraphDoc`]).
//!
//! **Detection rule.** The root key decides: `output_id` (a node id) is the August dialect,
//! `output_ids` (a non-empty array) the September dialect. A file with both, or whose nodes use the other
//! dialect's forms (a September-only kind or field in an August file, an August-only kind or
//! field in a September file), is an error naming the conflicting fields; one with neither is
//! an error naming both keys. Our extension kinds are accepted in either (they are ours, not
//! TorchLean's).
//!
//! The September dialect is lowered into our kinds by [`crate::format::september`] (one file node may become
//! several IR nodes, inline weights become [`Payload`] entries); [`GraphDoc::origin`] keeps the
//! file node each IR node came from, so that diagnostics name the file's ids.

use crate::error::{Diagnostic, IrError, Result};
use crate::graph::Graph;
use crate::payload::Payload;
use serde_json::{Map, Value};
use std::fmt;
use std::str::FromStr;

/// A TorchLean wire dialect.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Dialect {
    /// TorchLean as of August 2026 (`output_id`, `conv2d`, `reduce_sum` with `axis`, …), and
    /// our extension kinds: what this project has always read and written. Named `2026-08`.
    #[default]
    #[serde(rename = "2026-08")]
    August2026,
    /// TorchLean's wire format as of September 2026 (`output_ids`, `conv`, `max_pool`,
    /// reductions with `axes`/`keepdim`, inline weights;
    /// `../shared/reference/torchlean-wire-latest.md`). Named `2026-09`.
    #[serde(rename = "2026-09")]
    September2026,
}

impl Dialect {
    pub const ALL: [Dialect; 2] = [Dialect::August2026, Dialect::September2026];

    /// The name `--dialect` takes and [`fmt::Display`] writes.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::August2026 => "2026-08",
            Dialect::September2026 => "2026-09",
        }
    }

    /// The root key naming the outputs.
    pub fn output_key(self) -> &'static str {
        match self {
            Dialect::August2026 => OUTPUT_ID,
            Dialect::September2026 => OUTPUT_IDS,
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown dialect name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown dialect `{0}` (expected `2026-08`, TorchLean's August 2026 format with `output_id`, or `2026-09`, its September 2026 format with `output_ids`)")]
pub struct UnknownDialect(pub String);

impl FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| UnknownDialect(crate::shorten(s).into_owned()))
    }
}

pub(crate) const OUTPUT_ID: &str = "output_id";
pub(crate) const OUTPUT_IDS: &str = "output_ids";

/// The dialect of a graph document, from its root keys (see the module's detection rule).
pub fn detect(obj: &Map<String, Value>) -> std::result::Result<Dialect, Diagnostic> {
    match (obj.contains_key(OUTPUT_ID), obj.contains_key(OUTPUT_IDS)) {
        (true, true) => Err(Diagnostic::error(format!(
            "both `{OUTPUT_ID}` (August dialect) and `{OUTPUT_IDS}` (September dialect): a file is in one dialect"
        ))
        .field(OUTPUT_IDS)),
        (true, false) => Ok(Dialect::August2026),
        (false, true) => Ok(Dialect::September2026),
        (false, false) => Err(Diagnostic::error(format!(
            "missing: `{OUTPUT_ID}` (August dialect) or `{OUTPUT_IDS}` (September dialect)"
        ))
        .field(OUTPUT_ID)),
    }
}

/// The September dialect's tags that the August dialect does not have (beyond the tags both
/// share and ours): the September dialect's own table, written once here.
pub(crate) mod tags {
    pub const CONV: &str = "conv";
    pub const MAX_POOL: &str = "max_pool";
    pub const AVG_POOL: &str = "avg_pool";
    pub const BATCH_NORM_EVAL: &str = "batch_norm_eval";
    pub const SAFE_LOG: &str = "safe_log";
    /// Tags some TorchLean version writes that we cannot evaluate (the September parser itself
    /// refuses the first two; `custom` is lean-dojo's, the last three tobycmurray's side
    /// dialect; multi-head attention's tuple nodes are not supported here).
    pub const UNSUPPORTED: [&str; 8] = [
        "hard_masked_softmax",
        "custom",
        "min_max",
        "reduce_min",
        "reduce_max",
        "multihead_attention",
        "tuple_getitem",
        "tuple",
    ];
    pub const SEPTEMBER_ONLY: [&str; 5] = [CONV, MAX_POOL, AVG_POOL, BATCH_NORM_EVAL, SAFE_LOG];
}

/// The September-dialect field names of forms the August dialect spells differently.
pub(crate) mod fields {
    pub const AXES: &str = "axes";
    pub const KEEPDIM: &str = "keepdim";
    pub const AXIS1: &str = "axis1";
    pub const AXIS2: &str = "axis2";
    pub const VALUE_KIND: &str = "value_kind";
}

/// The file node an IR node came from: its id in the file and, for a constant made from one of
/// that node's inline tensors (layer norm's `gamma`, `beta`), that tensor's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileNode {
    pub id: usize,
    pub tensor: Option<&'static str>,
}

/// A graph file read in either dialect: the IR graph, the weights it carried inline, and
/// where each IR node came from.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphDoc {
    pub graph: Graph,
    /// The weights written inline (September dialect); empty for an August-dialect file.
    pub payload: Payload,
    pub dialect: Dialect,
    /// One per IR node: the file node it lowers (identity for an August-dialect file).
    pub origin: Vec<FileNode>,
    /// The file's kind tag of each file node (empty for an August-dialect file, whose tags
    /// are the IR's).
    pub file_kinds: Vec<String>,
}

impl GraphDoc {
    /// An August-dialect document: the graph as read, no inline weights, ids unchanged.
    pub fn august(graph: Graph) -> GraphDoc {
        let origin = (0..graph.len())
            .map(|id| FileNode { id, tensor: None })
            .collect();
        GraphDoc {
            graph,
            payload: Payload::new(),
            dialect: Dialect::August2026,
            origin,
            file_kinds: Vec::new(),
        }
    }

    /// Reads graph JSON text in either dialect (an August file streamed node by node, as
    /// [`Graph::from_json_str`]; a September-dialect file as one JSON tree, its weights being in
    /// it).
    pub fn from_json_str(text: &str) -> Result<GraphDoc> {
        match crate::format::stream::read_doc(text)? {
            Some(doc) if doc.fields.contains_key(OUTPUT_IDS) => {
                GraphDoc::from_json(&crate::format::json::parse(text)?)
            }
            Some(doc) => Graph::from_doc(doc).map(GraphDoc::august),
            None => GraphDoc::from_json(&crate::format::json::parse(text)?),
        }
    }

    /// Reads a graph JSON value in either dialect.
    pub fn from_json(value: &Value) -> Result<GraphDoc> {
        match value.as_object() {
            Some(obj) if matches!(detect(obj), Ok(Dialect::September2026)) => {
                crate::format::september::read(obj)
            }
            _ => Graph::from_json(value).map(GraphDoc::august),
        }
    }

    /// The file's id of IR node `node` (itself when out of range).
    pub fn file_id(&self, node: usize) -> usize {
        self.origin.get(node).map_or(node, |o| o.id)
    }

    /// Diagnostics about the IR graph restated in the file's terms: node ids (and, for a
    /// September-dialect file, kinds) of the file. For a September-dialect file the warnings about
    /// `broadcast_to` pairs that TorchLean's left-aligned rule reads differently are dropped:
    /// the September 2026 TorchLean broadcasts right-aligned, as we do.
    pub fn in_file_terms(&self, diags: Vec<Diagnostic>) -> Vec<Diagnostic> {
        if self.dialect == Dialect::August2026 {
            return diags;
        }
        diags
            .into_iter()
            .filter(|d| d.is_error() || d.field.as_deref() != Some(crate::check::BROADCAST_FIELD))
            .map(|mut d| {
                if let Some(n) = d.node {
                    let id = self.file_id(n);
                    d.node = Some(id);
                    if let Some(k) = self.file_kinds.get(id) {
                        d.kind = Some(k.clone());
                    }
                }
                d
            })
            .collect()
    }

    /// An IR error restated in the file's terms ([`GraphDoc::in_file_terms`]).
    pub fn error_in_file_terms(&self, e: IrError) -> IrError {
        match e {
            IrError::Invalid(d) => IrError::Invalid(self.in_file_terms(d)),
            other => other,
        }
    }

    /// A payload keyed by IR node (gradients, say) keyed by the file's nodes and inline keys:
    /// a constant made from a file node's `gamma` becomes that node's `gamma`.
    pub fn to_file_payload(&self, p: &Payload) -> Payload {
        if self.dialect == Dialect::August2026 {
            return p.clone();
        }
        let mut out = Payload::new();
        for (&node, entry) in &p.entries {
            let o = self.origin.get(node).copied().unwrap_or(FileNode {
                id: node,
                tensor: None,
            });
            for (name, t) in &entry.tensors {
                out.insert(o.id, o.tensor.unwrap_or(name), t.clone());
            }
            if let Some(eps) = entry.eps {
                out.entries.entry(o.id).or_default().eps = Some(eps);
            }
        }
        out
    }
}

/// In an August-dialect file, the September-dialect form node `kind`/`obj` uses, if any: a
/// diagnostic naming the conflicting field.
pub(crate) fn august_conflict(kind: &str, obj: &Map<String, Value>) -> Option<Diagnostic> {
    let september = |field: &str, what: String| {
        Some(
            Diagnostic::error(format!(
                "{what} is the September dialect's, but this file is August-dialect (`{OUTPUT_ID}`)"
            ))
            .field(field.to_string()),
        )
    };
    if tags::SEPTEMBER_ONLY.contains(&kind) {
        return september("kind", format!("kind `{kind}`"));
    }
    let reduce = matches!(
        torchlean_spec::ops::desc::lookup(kind).and_then(|d| d.prototype()),
        Some(torchlean_spec::Op::ReduceSum { .. } | torchlean_spec::Op::ReduceMean { .. })
    );
    if reduce && (obj.contains_key(fields::AXES) || obj.contains_key(fields::KEEPDIM)) {
        let f = if obj.contains_key(fields::AXES) {
            fields::AXES
        } else {
            fields::KEEPDIM
        };
        return september(f, format!("`{kind}` with `{f}`"));
    }
    None
}

/// A graph written in a dialect: the graph document, and the payload left for a separate
/// file (all of it for the August dialect; nothing for the September dialect, which carries weights
/// inline).
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub graph: Value,
    pub payload: Payload,
}

impl Dialect {
    /// Writes `g` (with its weights `payload`) in this dialect. Every node with no
    /// counterpart in the dialect is an error, all listed at once (for the August dialect: a
    /// graph with more than one output; for the September dialect: our extension kinds other than
    /// `transpose` and `softplus`, and weights missing from `payload`).
    pub fn write(self, g: &Graph, payload: &Payload) -> Result<Written> {
        match self {
            Dialect::August2026 if !g.extra_outputs.is_empty() => Err(IrError::invalid(
                Diagnostic::error(format!(
                    "the August dialect has one `{OUTPUT_ID}`; this graph has {} outputs ({:?})",
                    g.output_count(),
                    g.outputs().collect::<Vec<_>>()
                ))
                .field(OUTPUT_IDS),
            )),
            Dialect::August2026 => Ok(Written {
                graph: g.to_json(),
                payload: payload.clone(),
            }),
            Dialect::September2026 => Ok(Written {
                graph: crate::format::september::write(g, payload)?,
                payload: Payload::new(),
            }),
        }
    }
}

impl GraphDoc {
    /// The graph alone; a file that carried weights inline is refused (they would be lost).
    pub fn into_graph(self) -> Result<Graph> {
        if self.payload.entries.is_empty() {
            Ok(self.graph)
        } else {
            Err(IrError::invalid(
                Diagnostic::error(
                    "this September-dialect file carries weights inline: read it with `GraphDoc` to keep them",
                )
                .field("nodes"),
            ))
        }
    }
}

impl GraphDoc {
    /// A payload keyed by the file's node ids (a separate payload given for a September-dialect
    /// file) keyed by IR node: each file node that takes weights lowers to exactly one IR node
    /// that does. An entry for a file node with no such IR node is kept under its id, for
    /// `check_payload` to report.
    pub fn from_file_payload(&self, p: &Payload) -> Payload {
        if self.dialect == Dialect::August2026 {
            return p.clone();
        }
        let mut ir_of = std::collections::BTreeMap::new();
        for (ir, o) in self.origin.iter().enumerate() {
            let takes = self
                .graph
                .node(ir)
                .is_some_and(|n| !crate::payload_names(&n.kind).is_empty());
            if o.tensor.is_none() && takes {
                ir_of.entry(o.id).or_insert(ir);
            }
        }
        let entries = p
            .entries
            .iter()
            .map(|(id, e)| (ir_of.get(id).copied().unwrap_or(*id), e.clone()))
            .collect();
        Payload { entries }
    }
}
