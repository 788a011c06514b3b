//! `torchlean import model.onnx -o graph.json --payload weights.safetensors`.

use crate::{out, BadInput, Outcome, Stop};
use std::path::Path;
use torchlean_onnx::{import_onnx, OnnxError};

/// Imports `model`, writes the graph and payload, and prints where each initializer went.
pub fn run(model: &Path, graph: &Path, payload: &Path) -> Result<Outcome, Stop> {
    let bytes = std::fs::read(model)
        .map_err(|e| BadInput::one(format!("{}: cannot read: {e}", model.display())))?;
    let imported = import_onnx(&bytes).map_err(|e| lines(model, &e))?;
    imported
        .save(graph, payload)
        .map_err(|e| lines(model, &e))?;
    out::line(format!(
        "imported {}: {} nodes, {} payload tensors (opset {}, {:?} input) -> {}, {}",
        model.display(),
        imported.graph.len(),
        imported.params.len(),
        imported.opset,
        imported.elem_type,
        graph.display(),
        payload.display()
    ))?;
    for p in &imported.params {
        out::line(format!("  {} -> {}.{}", p.onnx_name, p.node, p.tensor))?;
    }
    Ok(Outcome::Ok)
}

/// One line per problem, each naming the model file (a write failure names its own file).
fn lines(model: &Path, e: &OnnxError) -> BadInput {
    match e {
        OnnxError::Io { .. } => BadInput::one(e.to_string()),
        _ => BadInput(
            e.lines()
                .into_iter()
                .map(|l| format!("{}: {l}", model.display()))
                .collect(),
        ),
    }
}
