//! A classifier imported from ONNX (`torchlean train --from MODEL.onnx`): the user's own
//! architecture, fine-tuned by the same trainer, engines and verified steps as the built-in
//! ones.
//!
//! The IR's shapes are static, so the model is imported once per batch size the run uses
//! ([`ImportedNet::prepare`]), each time with its input's first dimension set to that size
//! (`torchlean_onnx::ImportOptions::input_shapes`); every import runs the same program over
//! the same parameters. The parameters are the model's initializers under their ONNX names
//! (for a `torch.onnx.export` of a module, its `state_dict` names), so a checkpoint names them
//! as PyTorch does. Batch norm's running statistics and the constants of `Constant` nodes stay
//! constants: the imported graph is the model in inference form (`model.eval()`), and
//! fine-tuning it keeps its statistics frozen.
//!
//! When the data's class count is not the model's, `--head NAME` names the last linear layer,
//! which is replaced by a fresh one of PyTorch's default initialisation
//! (`torchlean_onnx::head`).

use crate::error::{Result, TrainError};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use torchlean_nn::dynamic::{DynLayer, DynLinear, DynSequential};
use torchlean_nn::{IrProgram, NnError, Ops, ParamNaming, Program, Var};
use torchlean_onnx::proto::{tensor_shape_proto::dimension, type_proto, ModelProto};
use torchlean_onnx::{head, ImportOptions, Imported};
use torchlean_spec::Tensor;

/// Where an imported classifier comes from: what a checkpoint records to rebuild it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OnnxSource {
    /// The `.onnx` file.
    pub path: PathBuf,
    /// The head's weight initializer (`--head`), replaced when the class count differs.
    pub head: Option<String>,
}

/// Payload tensors that are statistics, not weights: batch norm's running mean and variance.
const STATISTICS: [&str; 2] = ["mean", "var"];

/// The model imported at one batch size, and which payload tensors are parameters.
#[derive(Debug)]
struct AtBatch {
    imported: Imported,
    names: HashMap<(usize, &'static str), String>,
}

/// An imported classifier.
#[derive(Clone)]
pub struct ImportedNet {
    source: OnnxSource,
    /// The model, with its head replaced if it was.
    model: Arc<ModelProto>,
    /// The ONNX name of its one input.
    input: String,
    /// One example's dims (the input's dims after the first).
    example: Vec<usize>,
    classes: usize,
    /// `(old, new)` class counts when the head was replaced.
    replaced_head: Option<(usize, usize)>,
    initial: Vec<(String, Tensor<f64>)>,
    at_batch: HashMap<usize, Arc<AtBatch>>,
}

impl std::fmt::Debug for ImportedNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedNet")
            .field("source", &self.source)
            .field("input", &self.input)
            .field("example", &self.example)
            .field("classes", &self.classes)
            .field("batch_sizes", &self.at_batch.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why an ONNX model that imports is no classifier of the data (`train --from`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImportMisfit {
    #[error("the model has no graph")]
    NoGraph,
    /// Not exactly one graph input that is no initializer: their names.
    #[error("a classifier takes one input, this model takes {} ({})", .inputs.len(), .inputs.join(", "))]
    Inputs { inputs: Vec<String> },
    #[error("its input `{input}` declares no shape")]
    NoShape { input: String },
    /// An input dimension after the batch one that is symbolic or not positive.
    #[error("its input `{input}` must fix every dimension after the batch one")]
    FreeDim { input: String },
    #[error("its input `{input}` is a scalar; a classifier takes a batch [N, …]")]
    Scalar { input: String },
    /// An example of another size than the data's rows.
    #[error("its input `{input}` takes {example:?} per example ({} values); the data has {features} features", .example.iter().product::<usize>())]
    ExampleSize {
        input: String,
        example: Vec<usize>,
        features: usize,
    },
    /// Not one output `[batch, classes]` at batch size `batch` (`output` is the first output's
    /// shape, if any); `head_named` says whether `--head` already replaced the head.
    #[error(
        "a classifier gives one output [N, classes]; at batch {batch} this model's is {} ({outputs} output(s)) and the data has {classes} classes{}",
        .output.as_ref().map_or("none".to_string(), |d| format!("{d:?}")),
        if *.head_named { "" } else { "; if it is another class count, name its last linear layer's weight with --head NAME to replace it" }
    )]
    Output {
        batch: usize,
        output: Option<Vec<usize>>,
        outputs: usize,
        classes: usize,
        head_named: bool,
    },
}

fn unfit(path: &Path, problem: ImportMisfit) -> TrainError {
    TrainError::ImportedModel {
        path: path.to_path_buf(),
        problem,
    }
}

impl ImportedNet {
    /// Reads the model of `source` for data of `features` per example and `classes` classes:
    /// one FLOAT or DOUBLE input `[N, d1, …]` with `d1·… = features` (any `N`, symbolic or
    /// fixed) and one output `[N, classes]` (the head replaced, with a seeded fresh one, when
    /// the model has another count and `source.head` names it).
    pub fn load(source: &OnnxSource, features: usize, classes: usize, seed: u64) -> Result<Self> {
        let path = source.path.as_path();
        let import_error = |batch, source| TrainError::Import {
            path: path.to_path_buf(),
            batch,
            source,
        };
        let mut model = torchlean_onnx::read_model(path).map_err(|e| import_error(None, e))?;
        let (input, example) = one_input(&model).map_err(|r| unfit(path, r))?;
        let per_example: usize = example.iter().product();
        if per_example != features {
            return Err(unfit(
                path,
                ImportMisfit::ExampleSize {
                    input,
                    example,
                    features,
                },
            ));
        }
        let mut replaced_head = None;
        if let Some(name) = &source.head {
            let h = head::find_head(&model, name).map_err(|e| import_error(None, e))?;
            if h.classes != classes {
                let layer = DynLinear::new(h.features, classes, seed.wrapping_mul(1000))?;
                let fresh = DynSequential::new(vec![DynLayer::Linear(layer)]).named_params();
                let (w, b) = (fresh[0].1.data(), fresh[1].1.data());
                head::replace_head(&mut model, &h, classes, w, b)
                    .map_err(|e| import_error(None, e))?;
                replaced_head = Some((h.classes, classes));
            }
        }
        let mut net = ImportedNet {
            source: source.clone(),
            model: Arc::new(model),
            input,
            example,
            classes,
            replaced_head,
            initial: Vec::new(),
            at_batch: HashMap::new(),
        };
        let one = net.import_at(1)?;
        net.initial = initial_params(&one);
        net.at_batch.insert(1, Arc::new(one));
        Ok(net)
    }

    /// Imports the model at each of `sizes` not imported yet, so [`ImportedNet::logits`] can
    /// run batches of those sizes; an import that fails (a size the export baked in) is an
    /// error naming the batch size.
    pub fn prepare(&mut self, sizes: &BTreeSet<usize>) -> Result<()> {
        for &n in sizes {
            if !self.at_batch.contains_key(&n) {
                let at = self.import_at(n)?;
                self.at_batch.insert(n, Arc::new(at));
            }
        }
        Ok(())
    }

    fn import_at(&self, n: usize) -> Result<AtBatch> {
        let path = &self.source.path;
        let mut dims = vec![n];
        dims.extend_from_slice(&self.example);
        let options = ImportOptions {
            bound: Vec::new(),
            input_shapes: vec![(self.input.clone(), dims)],
        };
        let imported = torchlean_onnx::import_model_with(&self.model, &options).map_err(|e| {
            TrainError::Import {
                path: path.clone(),
                batch: Some(n),
                source: e,
            }
        })?;
        let g = &imported.graph;
        let out = g.node(g.output_id).map(|o| o.shape.dims().to_vec());
        if g.output_count() != 1 || out.as_deref() != Some(&[n, self.classes][..]) {
            return Err(unfit(
                path,
                ImportMisfit::Output {
                    batch: n,
                    output: out,
                    outputs: g.output_count(),
                    classes: self.classes,
                    head_named: self.source.head.is_some(),
                },
            ));
        }
        let names = imported
            .params
            .iter()
            .filter(|p| !STATISTICS.contains(&p.tensor))
            .map(|p| ((p.node, p.tensor), p.onnx_name.clone()))
            .collect();
        Ok(AtBatch { imported, names })
    }

    pub fn source(&self) -> &OnnxSource {
        &self.source
    }

    /// One example's dims.
    pub fn example(&self) -> &[usize] {
        &self.example
    }

    /// `(old, new)` class counts, when the head was replaced.
    pub fn replaced_head(&self) -> Option<(usize, usize)> {
        self.replaced_head
    }

    /// The trainable parameters' initial values, by ONNX initializer name.
    pub fn initial_params(&self) -> Vec<(String, Tensor<f64>)> {
        self.initial.clone()
    }

    /// The logits `[N, classes]` of a batch of `N` examples; `N` must be a prepared size.
    pub fn logits<O: Ops>(&self, ops: &mut O, x: &Var) -> torchlean_nn::Result<Var> {
        let n = x.shape().dims().first().copied().unwrap_or(0);
        let at = self.at_batch.get(&n).ok_or_else(|| NnError::Invalid {
            what: "imported model",
            layer: String::new(),
            problem: torchlean_nn::ValueProblem::Unprepared { batch: n },
        })?;
        let program = IrProgram {
            graph: &at.imported.graph,
            payload: &at.imported.payload,
            naming: ParamNaming::Only(&at.names),
        };
        program.run(ops, x)
    }
}

/// The trainable payload tensors of `at`, by ONNX name, in the order the import placed them.
fn initial_params(at: &AtBatch) -> Vec<(String, Tensor<f64>)> {
    let mut out: Vec<(String, Tensor<f64>)> = Vec::new();
    for p in &at.imported.params {
        let trainable = at.names.contains_key(&(p.node, p.tensor));
        let t = at
            .imported
            .payload
            .entry(p.node)
            .and_then(|e| e.tensor(p.tensor));
        if let (true, Some(t)) = (trainable, t) {
            out.push((p.onnx_name.clone(), t.clone()));
        }
    }
    out
}

/// The model's one graph input (not an initializer), and its dims after the first, which
/// must be fixed.
fn one_input(model: &ModelProto) -> std::result::Result<(String, Vec<usize>), ImportMisfit> {
    let graph = model.graph.as_ref().ok_or(ImportMisfit::NoGraph)?;
    let inputs: Vec<_> = graph
        .input
        .iter()
        .filter(|v| !graph.initializer.iter().any(|t| t.name() == v.name()))
        .collect();
    let [v] = inputs[..] else {
        return Err(ImportMisfit::Inputs {
            inputs: inputs.iter().map(|v| v.name().to_string()).collect(),
        });
    };
    let dims = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t.shape.as_ref().map(|s| &s.dim),
        _ => None,
    }
    .ok_or_else(|| ImportMisfit::NoShape {
        input: v.name().to_string(),
    })?;
    let mut example = Vec::new();
    for d in dims.iter().skip(1) {
        match d.value {
            Some(dimension::Value::DimValue(n)) if n > 0 => {
                example.push(usize::try_from(n).unwrap_or(usize::MAX))
            }
            _ => {
                return Err(ImportMisfit::FreeDim {
                    input: v.name().to_string(),
                })
            }
        }
    }
    if dims.is_empty() {
        return Err(ImportMisfit::Scalar {
            input: v.name().to_string(),
        });
    }
    Ok((v.name().to_string(), example))
}
