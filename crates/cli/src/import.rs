//! `torchlean import model.onnx -o graph.json --payload weights.safetensors [--bind NAME=FILE]…
//! [--input-shape NAME=D0xD1x…]…`.

use crate::{out, BadInput, Outcome, Stop};
use std::path::{Path, PathBuf};
use torchlean_ir::Dialect;
use torchlean_onnx::{import_file_with, tensor_proto, ImportOptions, OnnxError};

/// Imports `model` with the inputs of `bind` bound to the tensors in their files, writes the
/// graph and payload, and prints where each initializer went.
pub fn run(
    model: &Path,
    graph: &Path,
    payload: Option<&Path>,
    dialect: Dialect,
    bind: &[(String, PathBuf)],
    input_shapes: &[(String, Vec<usize>)],
) -> Result<Outcome, Stop> {
    let mut bound = Vec::new();
    for (name, file) in bind {
        let t = std::fs::read(file).map_err(|e| BadInput::at_doing(file, "cannot read", &e))?;
        let t = tensor_proto(&t).map_err(|e| lines(file, &e))?;
        bound.push((name.clone(), t));
    }
    let options = ImportOptions {
        bound,
        input_shapes: input_shapes.to_vec(),
    };
    let imported = import_file_with(model, &options).map_err(|e| lines(model, &e))?;
    let wrote_payload = imported
        .save(dialect, graph, payload)
        .map_err(|e| lines(model, &e))?;
    let weights = match payload {
        Some(payload) if wrote_payload => payload.display().to_string(),
        _ => "weights inline".to_string(),
    };
    out::line(format!(
        "imported {}: {} nodes, {} payload tensors (opset {}, {:?} input) -> {} ({dialect} dialect), {weights}",
        model.display(),
        imported.graph.len(),
        imported.params.len(),
        imported.opset,
        imported.elem_type,
        graph.display(),
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
