//! Reading graph and case files without a JSON tree of the whole document.
//!
//! A `serde_json::Value` costs about a kilobyte per graph node (a map per node, a string per
//! key, a value per number), four times everything that comes after it. So the top-level object
//! is read member by member: the `nodes` array is turned into [`Node`]s one element at a time
//! (each element's small `Value` is dropped as soon as its node is parsed), a case's `graph`
//! member is read the same way, and every other member is kept as a `Value` for the same
//! assembly code that [`Graph::from_json`] and [`Case::from_json`] run, so both routes accept
//! the same documents and report the same diagnostics.

use crate::error::{Diagnostic, Result};
use crate::format::august::parse_nodes;
use crate::format::case::{Case, CASE_FORMAT};
use crate::format::dialect::GraphDoc;
use crate::format::json::{duplicate_key, StrictValue};
use crate::graph::{Graph, Node};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// The `nodes` member as read: every node, or every problem of every malformed one.
pub(crate) type ParsedNodes = std::result::Result<Vec<Node>, Vec<Diagnostic>>;

/// A top-level object, with `nodes` and `graph` read element by element.
#[derive(Debug, Default)]
pub(crate) struct Doc {
    /// Every member other than `nodes` and an object-valued `graph`.
    pub(crate) fields: Map<String, Value>,
    /// `Some(None)`: the member is present but not an array.
    pub(crate) nodes: Option<Option<ParsedNodes>>,
    /// The `graph` member when it is an object (otherwise it is in `fields`).
    pub(crate) graph: Option<Box<Doc>>,
}

/// A graph file or a `torchlean.case.v1` file.
#[derive(Clone, Debug, PartialEq)]
pub enum GraphFile {
    /// An August-dialect graph file.
    Graph(Graph),
    Case(Box<Case>),
    /// A September-dialect graph file: the graph lowered into our kinds, its inline weights, and
    /// the file's node ids.
    Latest(Box<GraphDoc>),
}

impl GraphFile {
    /// Reads a graph or case file (a case when its `format` is `torchlean.case.v1`), streaming
    /// its node list.
    pub fn from_json_str(text: &str) -> Result<GraphFile> {
        match read_doc(text)? {
            Some(doc) if doc.fields.get("format").and_then(Value::as_str) == Some(CASE_FORMAT) => {
                Case::from_doc(doc).map(|c| GraphFile::Case(Box::new(c)))
            }
            Some(doc) if doc.fields.contains_key(crate::format::dialect::OUTPUT_IDS) => {
                GraphDoc::from_json(&crate::format::json::parse(text)?)
                    .map(|d| GraphFile::Latest(Box::new(d)))
            }
            Some(doc) => Graph::from_doc(doc).map(GraphFile::Graph),
            None => Graph::from_json(&crate::format::json::parse(text)?).map(GraphFile::Graph),
        }
    }

    /// The graph (a case's own graph).
    pub fn graph(&self) -> &Graph {
        match self {
            GraphFile::Graph(g) => g,
            GraphFile::Case(c) => &c.graph,
            GraphFile::Latest(d) => &d.graph,
        }
    }
}

/// Reads a top-level JSON object; `None` when the text is not an object (the caller reads it as
/// a `Value` and reports what it is).
pub(crate) fn read_doc(text: &str) -> Result<Option<Doc>> {
    if !text.trim_start().starts_with('{') {
        return Ok(None);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let doc = DocVisitor.deserialize(&mut de)?;
    de.end()?;
    Ok(Some(doc))
}

struct DocVisitor;

impl<'de> DeserializeSeed<'de> for DocVisitor {
    type Value = Doc;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Doc, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> std::result::Result<Doc, M::Error> {
        let mut doc = Doc::default();
        let mut seen_nodes = false;
        while let Some(key) = map.next_key::<String>()? {
            // a repeated member is an error, as in [`crate::format::json::parse`]
            let repeated = match key.as_str() {
                "nodes" => std::mem::replace(&mut seen_nodes, true),
                "graph" => doc.graph.is_some() || doc.fields.contains_key("graph"),
                _ => doc.fields.contains_key(&key),
            };
            if repeated {
                return Err(duplicate_key(&key));
            }
            match key.as_str() {
                "nodes" => doc.nodes = Some(map.next_value_seed(NodesVisitor)?),
                "graph" => match map.next_value_seed(MemberVisitor)? {
                    Member::Object(g) => {
                        doc.fields.remove("graph");
                        doc.graph = Some(Box::new(g));
                    }
                    Member::Other(v) => {
                        doc.graph = None;
                        doc.fields.insert(key, v);
                    }
                },
                _ => {
                    let v = map.next_value_seed(StrictValue)?;
                    doc.fields.insert(key, v);
                }
            }
        }
        Ok(doc)
    }
}

/// A member read either as a streamed object or, when it is anything else, as a `Value`.
enum Member {
    Object(Doc),
    Other(Value),
}

struct MemberVisitor;

impl<'de> DeserializeSeed<'de> for MemberVisitor {
    type Value = Member;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Member, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MemberVisitor {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, map: M) -> std::result::Result<Member, M::Error> {
        DocVisitor.visit_map(map).map(Member::Object)
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> std::result::Result<Member, S::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictValue)? {
            items.push(v);
        }
        Ok(Member::Other(Value::Array(items)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Member, E> {
        Ok(Member::Other(Value::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Member, E> {
        Ok(Member::Other(Value::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Member, E> {
        Ok(Member::Other(Value::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Member, E> {
        Ok(Member::Other(Value::from(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Member, E> {
        Ok(Member::Other(Value::from(v)))
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Member, E> {
        Ok(Member::Other(Value::Null))
    }
}

/// The `nodes` member: `None` when it is not an array (its contents are skipped).
struct NodesVisitor;

impl<'de> DeserializeSeed<'de> for NodesVisitor {
    type Value = Option<ParsedNodes>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Option<ParsedNodes>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodesVisitor {
    type Value = Option<ParsedNodes>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of nodes")
    }

    fn visit_seq<S: SeqAccess<'de>>(
        self,
        mut seq: S,
    ) -> std::result::Result<Option<ParsedNodes>, S::Error> {
        let elements = std::iter::from_fn(|| seq.next_element_seed(StrictValue).transpose());
        let mut failure = None;
        let parsed = parse_nodes(elements.map_while(|v| match v {
            Ok(v) => Some(v),
            Err(e) => {
                failure = Some(e);
                None
            }
        }));
        match failure {
            Some(e) => Err(e),
            None => Ok(Some(parsed)),
        }
    }

    fn visit_map<M: MapAccess<'de>>(
        self,
        mut map: M,
    ) -> std::result::Result<Option<ParsedNodes>, M::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Option<ParsedNodes>, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<Option<ParsedNodes>, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<Option<ParsedNodes>, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<Option<ParsedNodes>, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<Option<ParsedNodes>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Option<ParsedNodes>, E> {
        Ok(None)
    }
}

impl Graph {
    /// A graph from a streamed document (the same assembly as [`Graph::from_json`]).
    pub(crate) fn from_doc(doc: Doc) -> Result<Graph> {
        Graph::assemble(&doc.fields, doc.nodes.flatten())
    }
}

impl Case {
    /// A case from a streamed document (the same assembly as [`Case::from_json`]).
    pub(crate) fn from_doc(doc: Doc) -> Result<Case> {
        let graph = match (doc.graph, doc.fields.get("graph")) {
            (Some(g), _) => Some(Graph::from_doc(*g)),
            (None, Some(other)) => Some(Graph::from_json(other)),
            (None, None) => None,
        };
        Case::assemble(&doc.fields, graph)
    }
}
