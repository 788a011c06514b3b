//! `OpKind`: a node's kind — the graph input, a constant, or a `torchlean_spec::Op` — with its
//! wire name and attributes.
//!
//! Nothing about a kind is written here: wire names, operands, payload names and attributes
//! come from the op descriptors of `torchlean_spec::ops::desc`, attribute keys and types from
//! `Op::visit_attrs`. This module only moves attributes between JSON and the op. Kinds marked
//! *extension* in the descriptors are ours; a graph that uses none of them is a TorchLean graph.

use crate::error::{shorten, shown, Diagnostic};
use serde_json::{Map, Value};
use torchlean_spec::ops::desc::{self, AttrMut, AttrValue, AttrVisitor};
use torchlean_spec::tensor::parse_shape;
use torchlean_spec::{Arity, Op, OpDesc, Shape};

/// A node kind with its attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// The graph input (every `input` node evaluates to the one input tensor).
    Input,
    /// A constant from the payload (`{"value": T}`); `value_shape` defaults to the node shape.
    Const { value_shape: Option<Shape> },
    /// An op applied to the node's parents, then its payload tensors. Fields the op takes from
    /// the node rather than from attributes (the random kinds' key and shape, batch norm's
    /// `eps`) are filled in by [`crate::node_sem`].
    Op(Op),
}

/// The attribute type shared by printing and serialisation.
pub type Attr = AttrValue;

/// How many parents a kind takes (graph edges; payload weights are not parents).
pub type ParentCount = Arity;

impl From<Op> for OpKind {
    fn from(op: Op) -> Self {
        OpKind::Op(op)
    }
}

impl OpKind {
    /// The kind's descriptor.
    pub fn desc(&self) -> &'static OpDesc {
        match self {
            OpKind::Input => &desc::INPUT,
            OpKind::Const { .. } => &desc::CONST,
            OpKind::Op(op) => op.desc(),
        }
    }

    /// The wire name.
    pub fn name(&self) -> &'static str {
        self.desc().name
    }

    /// Whether this kind is one of our extensions (not in TorchLean's wire format).
    pub fn is_extension(&self) -> bool {
        self.desc().extension
    }

    /// Number of parents.
    pub fn parent_count(&self) -> ParentCount {
        self.desc().parents()
    }

    /// The op, if the kind is one.
    pub fn op(&self) -> Option<&Op> {
        match self {
            OpKind::Op(op) => Some(op),
            _ => None,
        }
    }

    /// The attributes, with their wire keys, in wire order (optional ones only when set).
    pub fn attributes(&self) -> Vec<(&'static str, Attr)> {
        match self {
            OpKind::Input | OpKind::Const { value_shape: None } => vec![],
            OpKind::Const {
                value_shape: Some(s),
            } => vec![("value_shape", Attr::Shape(s.clone()))],
            OpKind::Op(op) => op.attr_values(),
        }
    }

    /// Writes the attributes into a node object.
    pub(crate) fn write_attributes(&self, obj: &mut Map<String, Value>) {
        for (k, v) in self.attributes() {
            let json = match v {
                Attr::Int(v) => Value::from(v),
                Attr::Float(v) => torchlean_spec::tensor::f64_to_json(v),
                Attr::Shape(s) => Value::from(s.dims().to_vec()),
                Attr::List(v) => Value::from(v),
                Attr::Str(v) => Value::from(v),
            };
            obj.insert(k.to_string(), json);
        }
    }

    /// Parses a kind and its attributes from a node object. Unknown keys are ignored; a
    /// missing or ill-typed attribute is a diagnostic naming the field.
    pub(crate) fn parse(name: &str, obj: &Map<String, Value>) -> Result<OpKind, Vec<Diagnostic>> {
        let Some(d) = desc::lookup(name) else {
            return Err(vec![Diagnostic::error(format!(
                "unknown kind `{}` (known kinds: {})",
                shorten(name),
                desc::names().collect::<Vec<_>>().join(", ")
            ))
            .field("kind")]);
        };
        let mut r = AttrReader {
            obj,
            errors: vec![],
        };
        let kind = match d.prototype() {
            Some(mut op) => {
                op.visit_attrs(&mut r);
                OpKind::Op(op)
            }
            None if d.is_input() => OpKind::Input,
            None => OpKind::Const {
                value_shape: r.opt_shape("value_shape"),
            },
        };
        if r.errors.is_empty() {
            Ok(kind)
        } else {
            Err(r.errors)
        }
    }
}

/// Reads attributes, collecting every problem instead of stopping at the first.
struct AttrReader<'a> {
    obj: &'a Map<String, Value>,
    errors: Vec<Diagnostic>,
}

impl AttrVisitor for AttrReader<'_> {
    fn visit(&mut self, key: &'static str, value: AttrMut<'_>) {
        match value {
            AttrMut::Int(v) => *v = self.int(key),
            AttrMut::IntOr { value, default } => {
                *value = match self.obj.contains_key(key) {
                    true => self.int(key),
                    false => default,
                }
            }
            AttrMut::Seed(v) => *v = self.u64(key),
            AttrMut::Float(v) => *v = self.float(key),
            AttrMut::FloatOr { value, default } => *value = self.opt_float(key).unwrap_or(default),
            AttrMut::OptFloat { value, .. } | AttrMut::MaybeFloat(value) => {
                *value = self.opt_float(key)
            }
            AttrMut::Shape(s) => *s = self.shape(key),
            AttrMut::List(l) => *l = self.shape(key).dims().to_vec(),
            AttrMut::Choice {
                value,
                options,
                default,
            } => *value = self.choice(key, options, default),
        }
    }
}

impl AttrReader<'_> {
    fn fail(&mut self, key: &str, msg: String) {
        self.errors.push(Diagnostic::error(msg).field(key));
    }

    fn get(&mut self, key: &str) -> Option<&Value> {
        let v = self.obj.get(key);
        if v.is_none() {
            self.fail(key, "missing required attribute".into());
        }
        v
    }

    fn u64(&mut self, key: &str) -> u64 {
        match self.get(key).map(|v| (v.as_u64(), shown(v))) {
            Some((Some(x), _)) => x,
            Some((None, text)) => {
                self.fail(key, format!("is {text}, expected a non-negative integer"));
                0
            }
            None => 0,
        }
    }

    fn int(&mut self, key: &str) -> usize {
        let v = self.u64(key);
        usize::try_from(v).unwrap_or_else(|_| {
            self.fail(key, format!("{v} is too large"));
            0
        })
    }

    fn float(&mut self, key: &str) -> f64 {
        match self.get(key).map(|v| (v.as_f64(), shown(v))) {
            Some((Some(x), _)) => x,
            Some((None, text)) => {
                self.fail(key, format!("is {text}, expected a number"));
                0.0
            }
            None => 0.0,
        }
    }

    fn opt_float(&mut self, key: &str) -> Option<f64> {
        if self.obj.contains_key(key) {
            Some(self.float(key))
        } else {
            None
        }
    }

    /// One of `options` (absent: `default`); anything else is a diagnostic listing them.
    fn choice(
        &mut self,
        key: &str,
        options: &'static [&'static str],
        default: &'static str,
    ) -> &'static str {
        let Some(v) = self.obj.get(key) else {
            return default;
        };
        if let Some(o) = v.as_str().and_then(|s| options.iter().find(|o| **o == s)) {
            return o;
        }
        let quoted: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
        let text = match v.as_str() {
            Some(s) => format!("\"{}\"", shorten(s)),
            None => shown(v),
        };
        self.fail(
            key,
            format!("is {text}, expected one of {}", quoted.join(", ")),
        );
        default
    }

    fn shape(&mut self, key: &str) -> Shape {
        match self.get(key).cloned() {
            Some(v) => match parse_shape(&v) {
                Ok(s) => s,
                Err(e) => {
                    self.errors.push(Diagnostic::spec(e).field(key));
                    Shape::scalar()
                }
            },
            None => Shape::scalar(),
        }
    }

    fn opt_shape(&mut self, key: &str) -> Option<Shape> {
        if self.obj.contains_key(key) {
            Some(self.shape(key))
        } else {
            None
        }
    }
}
