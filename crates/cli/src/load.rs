//! Reading input files, with every error turned into lines naming the file.

use crate::BadInput;
use std::path::Path;
use torchlean_ir::{Case, Graph, GraphDoc, GraphFile, IrError, Payload};
use torchlean_spec::Tensor;

fn read(path: &Path) -> Result<String, BadInput> {
    std::fs::read_to_string(path).map_err(|e| BadInput::at_doing(path, "cannot read", &e))
}

/// Prefixes each diagnostic of an IR error with the file name.
pub fn ir_lines(path: &Path, e: &IrError) -> BadInput {
    BadInput(
        e.diagnostics()
            .iter()
            .map(|d| format!("{}: {d}", path.display()))
            .collect(),
    )
}

/// What a case file supplies besides its graph: defaults for the other arguments.
#[derive(Debug)]
pub struct CaseDefaults {
    pub payload: Payload,
    /// One per graph input, in input order.
    pub inputs: Vec<Tensor<f64>>,
    pub seed: Option<Tensor<f64>>,
}

/// A graph file (either dialect), or a `torchlean.case.v1` file (its graph, with the case's
/// payload, input and seed as defaults for the other arguments). The node list of an
/// August-dialect file is read one node at a time ([`GraphFile`]), and a case's graph is moved
/// out, not copied. A September-dialect file comes with its inline weights and its node ids
/// ([`GraphDoc`]).
pub fn graph_doc_or_case(path: &Path) -> Result<(GraphDoc, Option<CaseDefaults>), BadInput> {
    let text = read(path)?;
    match GraphFile::from_json_str(&text).map_err(|e| ir_lines(path, &e))? {
        GraphFile::Graph(g) => Ok((GraphDoc::august(g), None)),
        GraphFile::Latest(d) => Ok((*d, None)),
        GraphFile::Case(c) => {
            let c = *c;
            Ok((
                GraphDoc::august(c.graph),
                Some(CaseDefaults {
                    payload: c.payload,
                    inputs: c.inputs,
                    seed: c.seed,
                }),
            ))
        }
    }
}

/// [`graph_doc_or_case`] for commands that need only the graph: a September-dialect file's
/// inline weights are dropped (`dot`).
pub fn graph_or_case(path: &Path) -> Result<(Graph, Option<CaseDefaults>), BadInput> {
    graph_doc_or_case(path).map(|(d, c)| (d.graph, c))
}

pub fn payload(path: Option<&Path>) -> Result<Payload, BadInput> {
    match path {
        None => Ok(Payload::new()),
        Some(p) if p.extension().is_some_and(|x| x == "safetensors") => {
            let bytes = std::fs::read(p).map_err(|e| BadInput::at_doing(p, "cannot read", &e))?;
            Payload::from_safetensors(&bytes).map_err(|e| ir_lines(p, &e))
        }
        Some(p) => Payload::from_json_str(&read(p)?).map_err(|e| ir_lines(p, &e)),
    }
}

pub fn tensor(path: &Path) -> Result<Tensor<f64>, BadInput> {
    let text = read(path)?;
    let v = torchlean_ir::format::json::parse(&text).map_err(|e| ir_lines(path, &e))?;
    Tensor::from_json(&v).map_err(|e| BadInput::at(path, &e))
}

pub fn case(path: &Path) -> Result<Case, BadInput> {
    Case::from_json_str(&read(path)?).map_err(|e| ir_lines(path, &e))
}
