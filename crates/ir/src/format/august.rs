//! TorchLean's August 2026 dialect of `torchlean.ir.v1` (root key `output_id`): reading a
//! [`Graph`] from it (structure and attribute types checked, every problem reported) and
//! writing one to it (an exact round trip).

use crate::error::{shorten, shown, Diagnostic, IrError, Result};
use crate::format::dialect::GraphDoc;
use crate::format::stream::ParsedNodes;
use crate::graph::{Graph, Node};
use crate::kind::OpKind;
use serde_json::{Map, Value};
use std::borrow::Borrow;
use torchlean_spec::tensor::parse_shape;
use torchlean_spec::Shape;

/// The format tag of graph JSON.
pub const FORMAT: &str = "torchlean.ir.v1";

impl Graph {
    /// Parses graph JSON text, reading the node list one node at a time (no JSON tree of the
    /// whole document: [`crate::format::stream`]). A September-dialect file (`output_ids`) is read whole
    /// and lowered ([`GraphDoc`]); one that carries weights inline is refused here (read it with
    /// [`GraphDoc::from_json_str`] to keep them).
    pub fn from_json_str(text: &str) -> Result<Graph> {
        match crate::format::stream::read_doc(text)? {
            Some(doc) if doc.fields.contains_key(crate::format::dialect::OUTPUT_IDS) => {
                GraphDoc::from_json(&crate::format::json::parse(text)?)
                    .and_then(GraphDoc::into_graph)
            }
            Some(doc) => Graph::from_doc(doc),
            None => Graph::from_json(&crate::format::json::parse(text)?),
        }
    }

    /// Parses a graph from a JSON value. Structure and attribute types are checked here (every
    /// problem is reported); well-formedness and shapes are checked by [`crate::check_shapes`].
    pub fn from_json(value: &Value) -> Result<Graph> {
        let Some(obj) = value.as_object() else {
            return Err(IrError::invalid(Diagnostic::error(
                "a graph must be a JSON object",
            )));
        };
        if matches!(
            crate::format::dialect::detect(obj),
            Ok(crate::Dialect::September2026)
        ) {
            return crate::format::september::read(obj).and_then(GraphDoc::into_graph);
        }
        let nodes = obj.get("nodes").and_then(Value::as_array).map(parse_nodes);
        Graph::assemble(obj, nodes)
    }

    /// A graph from its top-level members and its parsed `nodes` array (`None`: missing or
    /// not an array): the one assembly of both parsing routes.
    pub(crate) fn assemble(obj: &Map<String, Value>, nodes: Option<ParsedNodes>) -> Result<Graph> {
        let mut errors = Vec::new();
        check_format(obj, "missing", &mut errors);
        let inputs = GraphInputs::read(obj, &mut errors);
        let output_id = match crate::format::dialect::detect(obj) {
            Ok(crate::Dialect::August2026) => {
                id_field(obj, crate::format::dialect::OUTPUT_ID, &mut errors)
            }
            Ok(crate::Dialect::September2026) => {
                errors.push(
                    Diagnostic::error(
                        "a September-dialect graph (`output_ids`) is read as a whole file (`GraphDoc`), not inside a case",
                    )
                    .field(crate::format::dialect::OUTPUT_IDS),
                );
                0
            }
            Err(d) => {
                errors.push(d);
                0
            }
        };
        let nodes = match nodes {
            None => {
                errors.push(Diagnostic::error("missing array").field("nodes"));
                Vec::new()
            }
            Some(Ok(nodes)) => nodes,
            Some(Err(mut d)) => {
                errors.append(&mut d);
                Vec::new()
            }
        };
        if errors.is_empty() {
            let mut g = Graph::new(inputs.first, output_id, nodes);
            inputs.fill(&mut g);
            Ok(g)
        } else {
            Err(IrError::Invalid(errors))
        }
    }

    /// The graph as `torchlean.ir.v1` JSON (exact round trip with [`Graph::from_json`]).
    pub fn to_json(&self) -> Value {
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .map(|n| {
                let mut obj = Map::new();
                obj.insert("id".into(), Value::from(n.id));
                obj.insert("kind".into(), Value::from(n.kind.name()));
                obj.insert("parents".into(), Value::from(n.parents.clone()));
                obj.insert("shape".into(), Value::from(n.shape.dims().to_vec()));
                n.kind.write_attributes(&mut obj);
                Value::Object(obj)
            })
            .collect();
        let mut obj = Map::new();
        obj.insert("format".into(), Value::from(FORMAT));
        GraphInputs::write(self, &mut obj);
        obj.insert("output_id".into(), Value::from(self.output_id));
        obj.insert("nodes".into(), Value::from(nodes));
        Value::Object(obj)
    }
}

/// The wire key of a single-input graph's input (TorchLean's).
pub(crate) const INPUT_ID: &str = "input_id";
/// The wire key of a multi-input graph's inputs (our extension; never written for one input,
/// so single-input files are TorchLean's, byte for byte).
pub(crate) const INPUT_IDS: &str = "input_ids";
/// The wire key of the inputs' names (our extension, written only beside `input_ids`).
pub(crate) const INPUT_NAMES: &str = "input_names";

/// A graph's inputs as the wire has them (`input_id`, or `input_ids` plus `input_names`): the
/// one reading and writing of them, for both dialects.
pub(crate) struct GraphInputs {
    pub first: usize,
    pub extra: Vec<usize>,
    pub names: Vec<String>,
}

impl GraphInputs {
    /// Reads the input members; a problem is a diagnostic and the inputs read as `[0]`.
    pub fn read(obj: &Map<String, Value>, errors: &mut Vec<Diagnostic>) -> GraphInputs {
        let mut inputs = GraphInputs {
            first: 0,
            extra: Vec::new(),
            names: Vec::new(),
        };
        let Some(ids) = obj.get(INPUT_IDS) else {
            inputs.first = id_field(obj, INPUT_ID, errors);
            if obj.contains_key(INPUT_NAMES) {
                errors.push(
                    Diagnostic::error(format!("is given only beside `{INPUT_IDS}`"))
                        .field(INPUT_NAMES),
                );
            }
            return inputs;
        };
        if obj.contains_key(INPUT_ID) {
            errors.push(
                Diagnostic::error(format!(
                    "both `{INPUT_ID}` and `{INPUT_IDS}`: a graph names its inputs once"
                ))
                .field(INPUT_IDS),
            );
        }
        match parse_shape(ids) {
            Ok(s) if s.rank() >= 2 => {
                inputs.first = s.dims()[0];
                inputs.extra = s.dims()[1..].to_vec();
            }
            Ok(_) => errors.push(
                Diagnostic::error(format!(
                    "has fewer than two ids; a single-input graph uses `{INPUT_ID}`"
                ))
                .field(INPUT_IDS),
            ),
            Err(e) => errors.push(Diagnostic::spec(e).field(INPUT_IDS)),
        }
        match obj.get(INPUT_NAMES) {
            None => {}
            Some(Value::Array(names)) => {
                let count = 1 + inputs.extra.len();
                match names
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                {
                    Some(names) if names.len() == count => inputs.names = names,
                    Some(names) => errors.push(
                        Diagnostic::error(format!("has {} names for {count} inputs", names.len()))
                            .field(INPUT_NAMES),
                    ),
                    None => errors
                        .push(Diagnostic::error("expected an array of strings").field(INPUT_NAMES)),
                }
            }
            Some(other) => errors.push(
                Diagnostic::error(format!("is {}, expected an array of strings", shown(other)))
                    .field(INPUT_NAMES),
            ),
        }
        inputs
    }

    /// Sets `g`'s inputs after the first and the names.
    pub fn fill(self, g: &mut Graph) {
        g.input_id = self.first;
        g.extra_inputs = self.extra;
        g.input_names = self.names;
    }

    /// Writes `g`'s inputs: `input_id` for one, `input_ids` (and `input_names` when named) for
    /// several.
    pub fn write(g: &Graph, obj: &mut Map<String, Value>) {
        if g.extra_inputs.is_empty() {
            obj.insert(INPUT_ID.into(), Value::from(g.input_id));
            return;
        }
        obj.insert(
            INPUT_IDS.into(),
            Value::from(g.inputs().collect::<Vec<_>>()),
        );
        if !g.input_names.is_empty() {
            obj.insert(INPUT_NAMES.into(), Value::from(g.input_names.clone()));
        }
    }
}

/// Parses the elements of a `nodes` array, in order: every node, or every problem of every
/// malformed node (the well-formed ones are dropped as soon as a problem is found).
pub(crate) fn parse_nodes<V: Borrow<Value>>(elements: impl IntoIterator<Item = V>) -> ParsedNodes {
    let mut nodes = Vec::new();
    let mut errors = Vec::new();
    for (index, v) in elements.into_iter().enumerate() {
        match parse_node(index, v.borrow()) {
            Ok(n) if errors.is_empty() => nodes.push(n),
            Ok(_) => {}
            Err(mut d) => {
                nodes = Vec::new();
                errors.append(&mut d);
            }
        }
    }
    if errors.is_empty() {
        Ok(nodes)
    } else {
        Err(errors)
    }
}

fn parse_node(index: usize, v: &Value) -> std::result::Result<Node, Vec<Diagnostic>> {
    let Some(obj) = v.as_object() else {
        return Err(vec![Diagnostic::error(format!(
            "nodes[{index}] is not an object"
        ))
        .at_node(index)]);
    };
    let kind_name = obj.get("kind").and_then(Value::as_str);
    let label = shorten(kind_name.unwrap_or("?")).into_owned();
    let mut errors = Vec::new();
    let id = match obj.get("id").and_then(Value::as_u64) {
        Some(i) => usize::try_from(i).unwrap_or(usize::MAX),
        None => {
            errors.push(Diagnostic::error("missing or not a non-negative integer").field("id"));
            index
        }
    };
    let parents = match obj.get("parents") {
        Some(p) => match parse_shape(p) {
            Ok(s) => s.dims().to_vec(),
            Err(e) => {
                errors.push(Diagnostic::spec(e).field("parents"));
                vec![]
            }
        },
        None => {
            errors.push(Diagnostic::error("missing").field("parents"));
            vec![]
        }
    };
    let shape = match obj.get("shape") {
        Some(s) => match parse_shape(s) {
            Ok(s) => s,
            Err(e) => {
                errors.push(Diagnostic::spec(e).field("shape"));
                Shape::scalar()
            }
        },
        None => {
            errors.push(Diagnostic::error("missing").field("shape"));
            Shape::scalar()
        }
    };
    let kind = match kind_name {
        Some(k) => match crate::format::dialect::august_conflict(k, obj) {
            Some(d) => {
                errors.push(d);
                None
            }
            None => match OpKind::parse(k, &august_spelling(k, obj)) {
                Ok(kind) => Some(kind),
                Err(mut d) => {
                    errors.append(&mut d);
                    None
                }
            },
        },
        None => {
            errors.push(Diagnostic::error("missing or not a string").field("kind"));
            None
        }
    };
    match kind {
        Some(kind) if errors.is_empty() => Ok(Node {
            id,
            kind,
            parents,
            shape,
        }),
        _ => Err(errors
            .into_iter()
            .map(|d| {
                let d = d.at_node(index);
                Diagnostic {
                    kind: Some(label.clone()),
                    ..d
                }
            })
            .collect()),
    }
}

/// A node object as the August parser reads it: `transpose` may spell its axes the September
/// dialect's way (`axis1`, `axis2`; SPEC 3 reads both), renamed to ours.
fn august_spelling<'a>(
    kind: &str,
    obj: &'a Map<String, Value>,
) -> std::borrow::Cow<'a, Map<String, Value>> {
    use crate::format::dialect::fields::{AXIS1, AXIS2};
    let transpose = torchlean_spec::ops::desc::lookup(kind)
        .and_then(|d| d.prototype())
        .filter(|op| matches!(op, torchlean_spec::Op::Transpose { .. }));
    let Some(op) = transpose else {
        return std::borrow::Cow::Borrowed(obj);
    };
    let keys: Vec<&'static str> = op.attr_values().into_iter().map(|(k, _)| k).collect();
    if keys.iter().any(|k| obj.contains_key(*k)) || !obj.contains_key(AXIS1) {
        return std::borrow::Cow::Borrowed(obj);
    }
    let mut renamed = obj.clone();
    for (ours, theirs) in keys.into_iter().zip([AXIS1, AXIS2]) {
        if let Some(v) = renamed.remove(theirs) {
            renamed.insert(ours.to_string(), v);
        }
    }
    std::borrow::Cow::Owned(renamed)
}

/// The top-level `format` member, which must be [`FORMAT`]; `missing` is the message when it is
/// absent (the dialects say it differently). Both dialects' readers call this.
pub(crate) fn check_format(obj: &Map<String, Value>, missing: &str, errors: &mut Vec<Diagnostic>) {
    match obj.get("format") {
        Some(Value::String(f)) if f == FORMAT => {}
        Some(other) => errors.push(
            Diagnostic::error(format!("is {}, expected \"{FORMAT}\"", shown(other)))
                .field("format"),
        ),
        None => errors.push(Diagnostic::error(missing).field("format")),
    }
}

/// A top-level node id member (`input_id`, `output_id`); a missing or malformed one is a
/// diagnostic and reads as 0. Both dialects' readers call this.
pub(crate) fn id_field(obj: &Map<String, Value>, key: &str, errors: &mut Vec<Diagnostic>) -> usize {
    match obj.get(key).map(|v| (v.as_u64(), shown(v))) {
        Some((Some(v), _)) => usize::try_from(v).unwrap_or(usize::MAX),
        Some((None, text)) => {
            errors.push(Diagnostic::error(format!("is {text}, expected a node id")).field(key));
            0
        }
        None => {
            errors.push(Diagnostic::error("missing").field(key));
            0
        }
    }
}
