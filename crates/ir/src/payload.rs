//! `Payload`: weights and constants keyed by node id, as Payload JSON
//! (`{"<id>": {"weight": T, "bias": T}}`, `{"value": T}`, batch norm's
//! `{"gamma", "beta", "mean", "var", "eps"}`).

use crate::error::{shorten, shown, Diagnostic, IrError, Result};
use crate::files::{safetensors_bytes, TensorData};
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
            t.convert::<A>()
                .map_err(|e| IrError::invalid(Diagnostic::spec(e).at_node(node).field(name)))
        })
    }

    /// The payload as a safetensors file: one tensor per `"<node id>.<name>"` (`"3.weight"`,
    /// the keys SPEC 3 names), stored as F64, and batch norm's `eps` in the metadata under
    /// `"<node id>.eps"`.
    pub fn to_safetensors(&self) -> Result<Vec<u8>> {
        let mut tensors: Vec<(String, Vec<usize>, TensorData)> = Vec::new();
        let mut meta = BTreeMap::new();
        for (id, entry) in &self.entries {
            for (name, t) in &entry.tensors {
                tensors.push((
                    format!("{id}.{name}"),
                    t.shape().dims().to_vec(),
                    TensorData::F64(t.data().to_vec()),
                ));
            }
            if let Some(eps) = entry.eps {
                meta.insert(format!("{id}.eps"), format!("{eps:e}"));
            }
        }
        safetensors_bytes(
            tensors
                .iter()
                .map(|(k, s, d)| (k.as_str(), s.as_slice(), d)),
            &meta,
        )
        .map_err(safetensors_error)
    }

    /// Reads a payload from a safetensors file with keys `"<node id>.<name>"` (F64 or F32
    /// tensors; batch norm's `eps` from the metadata). Every bad key is reported.
    pub fn from_safetensors(bytes: &[u8]) -> Result<Payload> {
        let st = safetensors::SafeTensors::deserialize(bytes).map_err(safetensors_error)?;
        let mut p = Payload::new();
        let mut problems = Vec::new();
        for (key, view) in st.tensors() {
            let Some((node, name)) = key
                .split_once('.')
                .and_then(|(n, name)| Some((n.parse::<usize>().ok()?, name)))
            else {
                problems.push(
                    Diagnostic::error(format!("key `{}` is not `<node id>.<name>`", shorten(&key)))
                        .field(key.clone()),
                );
                continue;
            };
            if name == "eps" {
                // batch norm's `eps` is a number (metadata `<node>.eps`), never a tensor: as a
                // tensor it would print as JSON that does not parse back
                problems.push(
                    Diagnostic::error(
                        "a tensor named `eps`; batch norm's eps is the metadata entry `<node>.eps`",
                    )
                    .at_node(node)
                    .field("eps"),
                );
                continue;
            }
            let data: Vec<f64> = match TensorData::from_le_bytes(view.dtype(), view.data()) {
                Some(TensorData::F64(v)) => v,
                Some(TensorData::F32(v)) => v.into_iter().map(f64::from).collect(),
                None => {
                    problems.push(
                        Diagnostic::error(format!("dtype {:?}; expected F64 or F32", view.dtype()))
                            .at_node(node)
                            .field(name.to_string()),
                    );
                    continue;
                }
            };
            match Tensor::new(view.shape().to_vec(), data) {
                Ok(t) => p.insert(node, name, t),
                Err(e) => problems.push(Diagnostic::spec(e).at_node(node).field(name.to_string())),
            }
        }
        if let Ok((_, meta)) = safetensors::SafeTensors::read_metadata(bytes) {
            for (key, value) in meta.metadata().iter().flatten() {
                let Some(node) = key
                    .strip_suffix(".eps")
                    .and_then(|n| n.parse::<usize>().ok())
                else {
                    continue;
                };
                match value.parse::<f64>() {
                    Ok(eps) => p.entries.entry(node).or_default().eps = Some(eps),
                    Err(_) => problems.push(
                        Diagnostic::error(format!("eps `{value}` is not a number"))
                            .at_node(node)
                            .field("eps"),
                    ),
                }
            }
        }
        if problems.is_empty() {
            Ok(p)
        } else {
            Err(IrError::Invalid(problems))
        }
    }

    pub fn from_json_str(text: &str) -> Result<Payload> {
        Payload::from_json(&crate::format::json::parse(text)?)
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
                    "payload key `{}` is not a node id",
                    shorten(key)
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
                            Diagnostic::error(format!("is {}, expected a number", shown(t)))
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
                    Err(e) => errors.push(Diagnostic::spec(e).at_node(node).field(name)),
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

fn safetensors_error(source: safetensors::SafeTensorError) -> IrError {
    IrError::Safetensors { source }
}
