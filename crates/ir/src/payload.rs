//! `Payload`: weights and constants keyed by node id, as Payload JSON
//! (`{"<id>": {"weight": T, "bias": T}}`, `{"value": T}`, batch norm's
//! `{"gamma", "beta", "mean", "var", "eps"}`).

use crate::error::{Diagnostic, IrError, Result};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use torchlean_spec::{Scalar, Tensor};

/// The tensors (and batch norm's `eps`) of one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PayloadEntry {
    pub tensors: BTreeMap<String, Tensor<f64>>,
    pub eps: Option<f64>,
}

impl PayloadEntry {
    pub fn tensor(&self, name: &str) -> Option<&Tensor<f64>> {
        self.tensors.get(name)
    }
}

/// Weights keyed by node id. Stored in `f64` (the interchange precision) and converted to the
/// evaluation scalar on use (exactly, for rationals).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Payload {
    pub entries: BTreeMap<usize, PayloadEntry>,
}

impl Payload {
    pub fn new() -> Self {
        Payload::default()
    }

    pub fn entry(&self, node: usize) -> Option<&PayloadEntry> {
        self.entries.get(&node)
    }

    /// Inserts one named tensor for a node.
    pub fn insert(&mut self, node: usize, name: &str, t: Tensor<f64>) {
        self.entries
            .entry(node)
            .or_default()
            .tensors
            .insert(name.to_string(), t);
    }

    /// Converts a stored tensor to another scalar type.
    pub fn get_as<A: Scalar>(&self, node: usize, name: &str) -> Option<Result<Tensor<A>>> {
        self.entry(node)?.tensor(name).map(|t| {
            t.convert::<A>().map_err(|e| {
                IrError::invalid(Diagnostic::error(e.to_string()).at_node(node).field(name))
            })
        })
    }

    pub fn from_json_str(text: &str) -> Result<Payload> {
        let v: Value = serde_json::from_str(text)?;
        Payload::from_json(&v)
    }

    /// Parses Payload JSON, reporting every malformed member.
    pub fn from_json(v: &Value) -> Result<Payload> {
        let Some(obj) = v.as_object() else {
            return Err(IrError::invalid(Diagnostic::error(
                "a payload must be a JSON object keyed by node id",
            )));
        };
        let mut errors = Vec::new();
        let mut entries = BTreeMap::new();
        for (key, val) in obj {
            let Ok(node) = key.parse::<usize>() else {
                errors.push(Diagnostic::error(format!(
                    "payload key `{key}` is not a node id"
                )));
                continue;
            };
            let Some(members) = val.as_object() else {
                errors.push(Diagnostic::error("payload entry is not an object").at_node(node));
                continue;
            };
            let mut entry = PayloadEntry::default();
            for (name, t) in members {
                if name == "eps" {
                    match t.as_f64() {
                        Some(e) => entry.eps = Some(e),
                        None => errors.push(
                            Diagnostic::error(format!("is {t}, expected a number"))
                                .at_node(node)
                                .field("eps"),
                        ),
                    }
                    continue;
                }
                match Tensor::<f64>::from_json(t) {
                    Ok(t) => {
                        entry.tensors.insert(name.clone(), t);
                    }
                    Err(e) => {
                        errors.push(Diagnostic::error(e.to_string()).at_node(node).field(name))
                    }
                }
            }
            entries.insert(node, entry);
        }
        if errors.is_empty() {
            Ok(Payload { entries })
        } else {
            Err(IrError::Invalid(errors))
        }
    }

    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        for (id, e) in &self.entries {
            let mut m = Map::new();
            for (name, t) in &e.tensors {
                m.insert(name.clone(), t.to_json());
            }
            if let Some(eps) = e.eps {
                m.insert("eps".into(), Value::from(eps));
            }
            obj.insert(id.to_string(), Value::Object(m));
        }
        Value::Object(obj)
    }
}
