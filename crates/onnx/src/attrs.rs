//! Reading a node's attributes: typed getters, and the check that a node carries no attribute
//! its mapping does not read (an attribute we ignored would change the meaning silently).

use crate::error::{Problem, ProblemKind};
use crate::proto::{AttributeProto, NodeProto, TensorProto};

/// One ONNX node being mapped: its label for problems, and its attributes.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub node: &'a NodeProto,
    /// The node's name, else its first output, else `#<index>`.
    pub name: String,
    pub op: &'a str,
}

impl<'a> Ctx<'a> {
    pub fn new(node: &'a NodeProto, index: usize) -> Self {
        let name = match node.name() {
            "" => node
                .output
                .first()
                .filter(|o| !o.is_empty())
                .cloned()
                .unwrap_or_else(|| format!("#{index}")),
            n => n.to_string(),
        };
        Ctx {
            node,
            name,
            op: node.op_type(),
        }
    }

    /// A problem about this node.
    pub fn problem(&self, kind: ProblemKind, field: &str, message: impl Into<String>) -> Problem {
        Problem::new(kind, self.name.clone(), self.op, field, message)
    }

    /// An unsupported attribute value (or operand form).
    pub fn unsupported(&self, field: &str, message: impl Into<String>) -> Problem {
        self.problem(ProblemKind::UnsupportedAttribute, field, message)
    }

    fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name() == name)
    }

    /// Every attribute outside `known` (each one problem).
    pub fn only(&self, known: &[&str]) -> Vec<Problem> {
        self.node
            .attribute
            .iter()
            .filter(|a| !known.contains(&a.name()))
            .map(|a| self.unsupported(a.name(), "attribute not supported by the importer"))
            .collect()
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        self.attr(name).and_then(|a| a.i)
    }

    pub fn int_or(&self, name: &str, default: i64) -> i64 {
        self.int(name).unwrap_or(default)
    }

    pub fn float(&self, name: &str) -> Option<f64> {
        self.attr(name).and_then(|a| a.f).map(f64::from)
    }

    pub fn ints(&self, name: &str) -> Option<&'a [i64]> {
        self.attr(name).map(|a| a.ints.as_slice())
    }

    pub fn floats(&self, name: &str) -> Option<&'a [f32]> {
        self.attr(name).map(|a| a.floats.as_slice())
    }

    pub fn string(&self, name: &str) -> Option<String> {
        self.attr(name)
            .and_then(|a| a.s.as_deref())
            .map(|s| String::from_utf8_lossy(s).into_owned())
    }

    pub fn tensor(&self, name: &str) -> Option<&'a TensorProto> {
        self.attr(name).and_then(|a| a.t.as_ref())
    }

    /// Input `i`'s name, `None` when absent or empty (ONNX's omitted optional input).
    pub fn input(&self, i: usize) -> Option<&'a str> {
        self.node
            .input
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }
}
