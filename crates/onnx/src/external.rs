//! Initializers stored as ONNX external data (`data_location: EXTERNAL`, the `location`,
//! `offset` and `length` entries), as `torch.onnx.export` writes a large model: read from the
//! file beside the model into `raw_data` before the import decodes them. A location is a
//! relative path inside the model's directory (no `..`, not absolute); each problem (a missing
//! file, a range past its end, a bad entry) names the initializer.

use crate::error::{Problem, ProblemKind};
use crate::proto::{tensor_proto::DataLocation, ModelProto, TensorProto};
use std::path::{Component, Path};

/// Reads every external initializer of `model` (and of its `Constant` nodes' tensors) from
/// `dir` into `raw_data`; every problem found, one per tensor.
pub(crate) fn resolve(model: &mut ModelProto, dir: &Path) -> Vec<Problem> {
    let mut problems = Vec::new();
    let Some(graph) = model.graph.as_mut() else {
        return problems;
    };
    let attrs = graph
        .node
        .iter_mut()
        .flat_map(|n| n.attribute.iter_mut())
        .filter_map(|a| a.t.as_mut());
    for t in graph.initializer.iter_mut().chain(attrs) {
        if is_external(t) {
            if let Err(message) = load(t, dir) {
                problems.push(Problem::new(
                    ProblemKind::BadTensor,
                    t.name(),
                    "initializer",
                    "external_data",
                    message,
                ));
            }
        }
    }
    problems
}

pub(crate) fn is_external(t: &TensorProto) -> bool {
    t.data_location() == DataLocation::External || !t.external_data.is_empty()
}

/// Reads `t`'s bytes from its location into `raw_data`.
fn load(t: &mut TensorProto, dir: &Path) -> Result<(), String> {
    let entry = |key: &str| {
        t.external_data
            .iter()
            .find(|e| e.key() == key)
            .map(|e| e.value().to_string())
    };
    let location = entry("location").ok_or("no `location` entry")?;
    let number = |key: &str| -> Result<Option<u64>, String> {
        entry(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("`{key}` is {v:?}, not a byte count"))
            })
            .transpose()
    };
    let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
    let rel = Path::new(&location);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "location {location:?} is not a relative path inside the model's directory"
        ));
    }
    let path = dir.join(rel);
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = match length {
        Some(n) => start.saturating_add(usize::try_from(n).unwrap_or(usize::MAX)),
        None => bytes.len(),
    };
    let Some(data) = bytes.get(start..end) else {
        return Err(format!(
            "bytes {start}..{end} of {} are past its end ({} bytes)",
            path.display(),
            bytes.len()
        ));
    };
    t.raw_data = Some(data.to_vec());
    t.external_data.clear();
    t.data_location = Some(DataLocation::Default as i32);
    Ok(())
}
