//! A saved classifier on new data (`torchlean predict`): the checkpoint is the whole model —
//! its parameters, its input normalization (the [`INPUT_MEAN`] and [`INPUT_SCALE`] buffers, in
//! the data file's units) and its class names (metadata) — so raw rows, as the file holds
//! them, go in and class names come out.

use crate::checkpoint::Checkpoint;
use crate::data::Standardizer;
use crate::error::{CheckpointProblem, Result, TrainError};
use crate::exec::EagerExec;
use crate::model::{check_fit, Classifier, Classify};
use crate::trainer::{
    chunk_sizes, model_params, tensor_f64, TrainConfig, CHECKPOINT_FORMAT, INPUT_MEAN, INPUT_SCALE,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use torchlean_runtime::Kernels;
use torchlean_spec::Tensor;

/// How many examples one forward pass takes.
const PREDICT_BATCH: usize = 256;

/// A classifier read back from a `torchlean train --save` file (or a [`Trainer::save`] of a
/// model of your own: [`SavedClassifier::load_with`]).
///
/// [`Trainer::save`]: crate::Trainer::save
#[derive(Debug)]
pub struct SavedClassifier<M: Classify = Classifier> {
    path: PathBuf,
    model: M,
    params: BTreeMap<String, Tensor<f64>>,
    input: Standardizer,
    class_names: Vec<String>,
    feature_names: Vec<String>,
    dtype: String,
}

impl SavedClassifier<Classifier> {
    /// Reads the model file at `path` (its checksum checked when it has one, so a file
    /// PyTorch re-saved loads too): the built-in model its configuration names, every
    /// parameter that model needs, by name and shape, and the input normalization's buffers.
    pub fn load(path: &Path) -> Result<SavedClassifier> {
        SavedClassifier::read(path, |cfg, features, image, classes| {
            cfg.classifier(features, image, classes)
        })
    }
}

impl<M: Classify> SavedClassifier<M> {
    /// [`SavedClassifier::load`] for a model of your own: `model` must be the one the file was
    /// trained with (it must fit the file's features and classes, and its parameter names and
    /// shapes must be the file's).
    pub fn load_with(path: &Path, model: M) -> Result<SavedClassifier<M>> {
        SavedClassifier::read(path, |_, features, _, classes| {
            check_fit(&model, features, classes)?;
            Ok(model)
        })
    }

    /// Reads the model file at `path`, its model built by `model` from the file's configuration,
    /// feature count, image shape and class count.
    fn read(
        path: &Path,
        model: impl FnOnce(TrainConfig, usize, Option<(usize, usize)>, usize) -> Result<M>,
    ) -> Result<SavedClassifier<M>> {
        let ck = Checkpoint::load(path)?;
        let bad = |problem| TrainError::Checkpoint {
            path: path.to_path_buf(),
            problem,
        };
        let meta = ck.torchlean_metadata(path, CHECKPOINT_FORMAT, "train checkpoint")?;
        let json = |field| crate::checkpoint::metadata_error(path, field);
        let cfg: TrainConfig =
            serde_json::from_value(meta["config"].clone()).map_err(json("config"))?;
        let m = &meta["model"];
        let count = |key: &str| m[key].as_u64().map(|v| v as usize);
        let (Some(features), Some(classes)) = (count("features"), count("classes")) else {
            return Err(bad(CheckpointProblem::NoCounts));
        };
        let strings = |key: &str| -> Option<Vec<String>> {
            m[key]
                .as_array()?
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect()
        };
        let (Some(class_names), Some(feature_names)) =
            (strings("class_names"), strings("feature_names"))
        else {
            return Err(bad(CheckpointProblem::NoNames));
        };
        if class_names.len() != classes || feature_names.len() != features {
            return Err(bad(CheckpointProblem::NameCounts {
                class_names: class_names.len(),
                feature_names: feature_names.len(),
                classes,
                features,
            }));
        }
        let buffer = |name: &'static str| {
            ck.tensors
                .get(name)
                .filter(|t| t.shape == [features])
                .map(tensor_f64)
                .ok_or_else(|| bad(CheckpointProblem::MissingBuffer { name, features }))
        };
        let input = Standardizer::new(buffer(INPUT_MEAN)?, buffer(INPUT_SCALE)?)
            .ok_or_else(|| bad(CheckpointProblem::Normalization))?;
        let image = m["image"]
            .as_array()
            .and_then(|d| Some((d.first()?.as_u64()? as usize, d.get(1)?.as_u64()? as usize)));
        let model = model(cfg, features, image, classes)?;
        let params = model_params(ck, &model)?;
        Ok(SavedClassifier {
            path: path.to_path_buf(),
            model,
            params,
            input,
            class_names,
            feature_names,
            dtype: meta["dtype"].as_str().unwrap_or("f32").to_string(),
        })
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The features a row holds, by name, in order (the training CSV's columns, or the digits'
    /// `pixel_<row>_<col>`).
    pub fn feature_names(&self) -> &[String] {
        &self.feature_names
    }

    /// The name of each class id.
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// The element type it was trained in (`"f32"` or `"f64"`).
    pub fn dtype(&self) -> &str {
        &self.dtype
    }

    /// The class id of each row of `raw` (row-major, [`SavedClassifier::feature_names`]'
    /// count per row, in the data file's units: the digits' pixels 0 to 16) on engine `V`: the
    /// rows normalized in f64 as the trainer normalized its data, then the model's largest
    /// logit (the first on ties).
    pub fn predict<V: Kernels>(&mut self, raw: &[f64]) -> Result<Vec<usize>> {
        let f = self.feature_names.len();
        if f == 0 || !raw.len().is_multiple_of(f) {
            return Err(TrainError::RowLength {
                values: raw.len(),
                features: f,
            });
        }
        let n = raw.len() / f;
        self.model.prepare(&chunk_sizes(n, PREDICT_BATCH))?;
        let mut x = raw.to_vec();
        self.input.apply(&mut x);
        let mut exec = EagerExec::<V>::new(&self.params)?;
        let mut classes = Vec::with_capacity(n);
        for rows in x.chunks(PREDICT_BATCH * f) {
            let batch = Tensor::new(self.model.batch_shape(rows.len() / f), rows.to_vec())?;
            classes.extend(exec.predict(&self.model, &batch)?);
        }
        Ok(classes)
    }
}
