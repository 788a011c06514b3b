//! The `train` crate's error type: every variant names what was being done (the parameter, the
//! file and line, the optimizer) and keeps the lower crate's error as its source.

use thiserror::Error;
use torchlean_nn::NnError;
use torchlean_runtime::RuntimeError;
use torchlean_spec::SpecError;

pub type Result<T, E = TrainError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum TrainError {
    /// A model call failed (shape, parameter, engine), with the `nn` error as its source.
    #[error(transparent)]
    Nn(#[from] NnError),

    /// An engine call failed outside a model (a conversion, an optimizer's gradient read).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),

    /// Compiling a recorded program failed.
    #[error(transparent)]
    Compiled(#[from] torchlean_compiled::CompiledError),

    /// Building a tensor failed.
    #[error(transparent)]
    Spec(#[from] SpecError),

    // --- data parallelism ---
    /// A collective between the ranks failed.
    #[error(transparent)]
    Distributed(#[from] torchlean_distributed::DistributedError),

    /// The ranks' parameters are no longer the same bits: `param` (the first, in name order)
    /// differs on `rank` from rank 0's after `step` steps.
    #[error(
        "the ranks have diverged: after step {step}, parameter `{param}` on rank {rank} differs from rank 0's"
    )]
    RanksDiverged {
        step: u64,
        param: String,
        rank: usize,
    },

    /// The global batch has fewer rows than there are ranks.
    #[error(
        "a global batch of {batch} rows cannot be shared by {ranks} ranks: give --batch {ranks} or more"
    )]
    BatchBelowRanks { batch: usize, ranks: usize },

    /// The short last batch of an epoch has fewer rows than there are ranks (the other
    /// batches have enough).
    #[error(
        "the last batch of each epoch has {rows} rows ({examples} training examples in batches of {batch}), fewer than the {ranks} ranks: choose a --batch that divides {examples} or leaves {ranks} or more rows in the last batch"
    )]
    ShortLastBatch {
        rows: usize,
        examples: usize,
        batch: usize,
        ranks: usize,
    },

    /// Dropout with several ranks: each rank would draw its masks from the same stream, so the
    /// step would not be the one a single process takes.
    #[error(
        "dropout {dropout} is not available on {ranks} ranks yet (each would draw the same masks): train with --dropout 0"
    )]
    DropoutOnRanks { dropout: f64, ranks: usize },

    // --- data ---
    /// A data file could not be read.
    #[error("cannot read the data file {}: {source}", .path.display())]
    ReadData {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    // --- checkpoint ---
    /// Writing a file (a checkpoint, a plot) failed; the old file, if any, is intact.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A CSV text is malformed at `line` (1-based) of `origin` (a path, or what the caller
    /// named the text).
    #[error("{origin}, line {line}: {problem}")]
    Csv {
        origin: String,
        line: usize,
        problem: crate::data::CsvProblem,
    },

    /// The `csv` crate could not read a CSV text (it reads from memory, so only a field that is
    /// not UTF-8 could cause this; the text is a `str`, so it should never happen).
    #[error("{origin}: cannot read the CSV text")]
    CsvRead {
        origin: String,
        #[source]
        source: ::csv::Error,
    },

    /// `Dataset::with_image` was given a shape whose size is not the feature count.
    #[error("an image of {height}×{width} pixels does not fit rows of {features} features")]
    ImageShape {
        height: usize,
        width: usize,
        features: usize,
    },

    /// A row index past the end of a data set.
    #[error("row {row} is out of range: the data set has {rows} rows")]
    RowOutOfRange { row: usize, rows: usize },

    /// `Dataset::subset` was asked for no rows (a data set is never empty).
    #[error("a subset needs at least one row")]
    EmptySubset,

    /// A held-out fraction outside `(0, 1)`.
    #[error("the held-out fraction must lie strictly between 0 and 1, got {held_out}")]
    SplitFraction { held_out: f64 },

    /// A split that would leave one side empty.
    #[error(
        "holding out {held_out} of {rows} rows gives {held} held-out rows; both sides need \
         at least one"
    )]
    SplitEmpty {
        held_out: f64,
        rows: usize,
        held: usize,
    },

    /// A text corpus that is not UTF-8 (`position` is the byte offset of the first bad byte).
    #[error("{origin}: not UTF-8 text (byte {position})")]
    TextNotUtf8 { origin: String, position: usize },

    /// A text corpus too short to train on: each of its splits needs more than `block`
    /// characters (a context and its next character).
    #[error(
        "{origin}: {chars} characters are too few for a block of {block}: the {split} split \
         has {split_chars}, it needs at least {}",
        .block + 1
    )]
    TextTooShort {
        origin: String,
        chars: usize,
        block: usize,
        split: &'static str,
        split_chars: usize,
    },

    /// A character outside the tokenizer's vocabulary (`position` counts characters).
    #[error("{what}: character {ch:?} at position {position} is not in the vocabulary of {vocab} characters")]
    UnknownChar {
        what: &'static str,
        ch: char,
        position: usize,
        vocab: usize,
    },

    /// A vocabulary that is not a sorted list of distinct characters (a checkpoint's).
    #[error("the vocabulary is not sorted distinct characters: {got:?}")]
    BadVocabulary { got: String },

    /// A token id at or past the vocabulary's size.
    #[error("token id {id} is not below the vocabulary size {vocab}")]
    TokenOutOfRange { id: usize, vocab: usize },

    /// A standardizer applied to data with a different number of features.
    #[error("the standardizer was fitted on {fitted} features, the data has {features} features")]
    StandardizerFeatures { fitted: usize, features: usize },
    /// Reading a checkpoint file failed (missing, unreadable).
    #[error("cannot read checkpoint {}: {source}", .path.display())]
    CheckpointRead {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A checkpoint file that is not safetensors, or is truncated or corrupt.
    #[error(
        "checkpoint {} is not a valid safetensors file (truncated or corrupt?): {source}",
        .path.display()
    )]
    CheckpointFormat {
        path: std::path::PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },

    /// A checkpoint file shorter than its own header says (a save cut short, a partial copy).
    #[error(
        "checkpoint {} is truncated: {len} bytes, its header describes {expected}",
        .path.display()
    )]
    CheckpointTruncated {
        path: std::path::PathBuf,
        len: u64,
        expected: u64,
        #[source]
        source: safetensors::SafeTensorError,
    },

    /// A checkpoint whose bytes do not match its checksum (`computed` is `None` when the
    /// stored entry is malformed): corrupted on disk or in transit, or edited.
    #[error(
        "checkpoint {} is corrupt: its checksum says {stored}, its bytes give {}",
        .path.display(),
        .computed.as_deref().unwrap_or("no comparable value (the checksum entry is malformed)")
    )]
    CheckpointChecksum {
        path: std::path::PathBuf,
        stored: String,
        computed: Option<String>,
    },

    /// A file that must carry torchlean's checksum (a run's checkpoint or optimizer file) has
    /// none.
    #[error(
        "checkpoint {} has no checksum (`torchlean.checksum`): not written by torchlean train, \
         or damaged",
        .path.display()
    )]
    CheckpointUnchecked { path: std::path::PathBuf },

    /// A checkpoint tensor whose dtype is neither `F32` nor `F64`.
    #[error(
        "checkpoint {}: tensor `{name}` has dtype {dtype:?}; only F32 and F64 are supported",
        .path.display()
    )]
    CheckpointDtype {
        path: std::path::PathBuf,
        name: String,
        dtype: safetensors::Dtype,
    },

    /// A tensor that cannot be saved: its data does not fill its shape exactly.
    #[error(
        "cannot save checkpoint {}: tensor `{name}` has shape {shape:?} but {len} elements",
        .path.display()
    )]
    CheckpointShape {
        path: std::path::PathBuf,
        name: String,
        shape: Vec<usize>,
        len: usize,
    },

    /// A tensor name that safetensors reserves (`__metadata__`).
    #[error("cannot save checkpoint {}: the tensor name `{name}` is reserved by safetensors", .path.display())]
    CheckpointName {
        path: std::path::PathBuf,
        name: String,
    },

    /// Encoding the checkpoint as safetensors failed.
    #[error("cannot save checkpoint {}: {source}", .path.display())]
    CheckpointEncode {
        path: std::path::PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },

    /// A checkpoint's tensors do not match the model's (or the optimizer's): every missing,
    /// unexpected and mis-shaped name at once, like PyTorch's `load_state_dict`.
    #[error("{}", crate::checkpoint::describe_mismatch(.prefix, .missing, .unexpected, .mismatched))]
    CheckpointNames {
        /// The prefix that selected the checkpoint's tensors (`""`: those outside
        /// `optimizer.`).
        prefix: String,
        /// Expected names the checkpoint lacks, in the expected order.
        missing: Vec<String>,
        /// Checkpoint names (under the prefix) nobody expected, sorted.
        unexpected: Vec<String>,
        /// Names present in both with different shapes, in the expected order.
        mismatched: Vec<crate::checkpoint::ShapeMismatch>,
    },

    // --- plot ---
    /// A loss series with no points (the training series must have at least one).
    #[error("cannot plot {}: the {series} series is empty", .path.display())]
    PlotEmpty {
        path: std::path::PathBuf,
        series: &'static str,
    },

    /// A point whose step or loss is not finite.
    #[error(
        "cannot plot {}: {series} point {index} is (step {step}, loss {loss}); both must be finite",
        .path.display()
    )]
    PlotNonFinite {
        path: std::path::PathBuf,
        series: &'static str,
        index: usize,
        step: f64,
        loss: f64,
    },

    /// Drawing the chart failed (the plotting library's error).
    #[error("cannot plot {}: {source}", .path.display())]
    PlotDraw {
        path: std::path::PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// An optimizer, a schedule or their state refused a setting or a step.
    #[error(transparent)]
    Optim(#[from] torchlean_optim::OptimError),

    /// A GPT training or sampling setting outside its range (or NaN); an optimizer's is
    /// [`torchlean_optim::OptimError::InvalidSetting`].
    #[error("{owner}: {field} = {value} is invalid (expected {expected})")]
    GptSetting {
        owner: &'static str,
        field: &'static str,
        value: f64,
        expected: &'static str,
    },

    // --- model, trainer ---
    /// A name the user gave that is not one of the valid ones (a model, an optimizer).
    #[error("unknown {what} `{got}`; valid: {}", .valid.join(", "))]
    UnknownName {
        what: &'static str,
        got: String,
        valid: Vec<&'static str>,
    },

    /// The data does not fit the model.
    #[error("model {arch}")]
    ModelSize {
        arch: crate::model::Arch,
        #[source]
        problem: crate::model::SizeProblem,
    },

    /// A model given to the trainer that does not fit the data or the trainer.
    #[error("the model {model} does not fit")]
    ModelMisfit {
        /// The model's [`Classify::description`](crate::model::Classify::description).
        model: String,
        #[source]
        problem: crate::model::ModelMisfit,
    },

    /// Data for a saved classifier that is no whole number of its rows.
    #[error("{values} values are not rows of the model's {features} features")]
    RowLength { values: usize, features: usize },

    /// The ONNX model of `train --from` cannot be imported (at batch size `batch`, when the
    /// failure is one batch size's): the importer's problems, whole.
    #[error("{}: cannot import the model{}", .path.display(), .batch.map(|n| format!(" at batch size {n}")).unwrap_or_default())]
    Import {
        path: std::path::PathBuf,
        batch: Option<usize>,
        #[source]
        source: torchlean_onnx::OnnxError,
    },

    /// The ONNX model of `train --from` imports but is no classifier of this data.
    #[error("{}", .path.display())]
    ImportedModel {
        path: std::path::PathBuf,
        #[source]
        problem: crate::imported::ImportMisfit,
    },

    /// A training setting out of range.
    #[error("invalid {field}: {reason}")]
    Config { field: &'static str, reason: String },

    /// Evaluating the training or held-out set failed (the error names the evaluation batch's
    /// shapes, which are not the training batch's).
    #[error("evaluating the {set} set, {batch} rows at a time (the evaluation batch, whatever the training batch)")]
    Evaluating {
        set: &'static str,
        batch: usize,
        #[source]
        source: Box<TrainError>,
    },

    /// A step's loss was NaN or infinite (the run stops; the last checkpoint is intact).
    #[error("step {step}: the loss is {loss}; lower the learning rate or clip gradients (--clip-grad-norm)")]
    NonFiniteLoss { step: u64, loss: f64 },

    /// Anomaly mode found where a NaN or an infinity originates in step `step`; the source
    /// names the node (a `RuntimeError::Anomaly` down its chain).
    #[error("step {step}")]
    Anomaly {
        step: u64,
        #[source]
        source: Box<TrainError>,
    },

    /// A verified step deviated from the reference engine beyond the tolerance.
    #[error("step {step}: `{param}` on {engine} deviates from the reference engine (f64) by {deviation:.3e} relative, above the tolerance {tolerance:.0e}")]
    VerifyFailed {
        step: u64,
        param: String,
        deviation: f64,
        tolerance: f64,
        engine: &'static str,
    },

    /// A checkpoint whose `torchlean` metadata (or one of its members) is not the JSON it should
    /// be: the parser's error, whole.
    #[error("checkpoint {}: its `{field}` metadata: {source}", .path.display())]
    CheckpointMetadata {
        path: std::path::PathBuf,
        field: &'static str,
        #[source]
        source: serde_json::Error,
    },

    /// A checkpoint that is readable but cannot be used here: `problem` says why, as a value
    /// a caller can match on.
    #[error("checkpoint {}", .path.display())]
    Checkpoint {
        path: std::path::PathBuf,
        #[source]
        problem: CheckpointProblem,
    },

    /// The run stopped at a step boundary because its stop flag was set
    /// ([`crate::trainer::Trainer::set_stop_flag`]); `step` steps are done and the trainer's state is
    /// consistent there (save it to resume).
    #[error("interrupted after step {step}")]
    Interrupted { step: u64 },

    /// Something the trainer relies on did not hold (a bug, reported instead of a panic).
    #[error("internal: expected that {what}")]
    Invariant { what: &'static str },
}

impl TrainError {
    /// The anomaly this error carries, if anomaly mode stopped the run (through the
    /// transparent wrappers, which `source()` skips, then down the source chain).
    pub fn anomaly(&self) -> Option<&torchlean_runtime::Anomaly> {
        let direct = match self {
            TrainError::Runtime(RuntimeError::Anomaly(a)) => Some(&**a),
            TrainError::Nn(NnError::Runtime {
                source: RuntimeError::Anomaly(a),
                ..
            }) => Some(&**a),
            TrainError::Nn(NnError::Compiled(c)) | TrainError::Compiled(c) => compiled_anomaly(c),
            _ => None,
        };
        if direct.is_some() {
            return direct;
        }
        let mut cur = std::error::Error::source(self);
        while let Some(e) = cur {
            if let Some(RuntimeError::Anomaly(a)) = e.downcast_ref::<RuntimeError>() {
                return Some(a);
            }
            cur = e.source();
        }
        None
    }

    /// An error of step `step`: an anomaly becomes [`TrainError::Anomaly`] (naming the step);
    /// anything else is unchanged.
    pub fn at_step(self, step: u64) -> Self {
        if self.anomaly().is_some() {
            TrainError::Anomaly {
                step,
                source: Box::new(self),
            }
        } else {
            self
        }
    }
}

/// Why a readable checkpoint (safetensors file) cannot be used here: its `torchlean` metadata or
/// its tensors are not what the model, the data or the engine need.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CheckpointProblem {
    /// A safetensors file without our metadata: `what` is the file we expected.
    #[error("no `torchlean` metadata: not a torchlean {what}")]
    NotTorchlean { what: &'static str },
    /// Our metadata with another `format` (the saved value as JSON text).
    #[error("format {found}, expected {expected}")]
    Format {
        found: String,
        expected: &'static str,
    },
    /// A metadata member that is not there.
    #[error("its metadata has no `{field}`")]
    MissingField { field: &'static str },
    /// A metadata member of the wrong JSON type: `expected` says what it should be.
    #[error("its `{field}` is not {expected}")]
    FieldType {
        field: &'static str,
        expected: &'static str,
    },
    /// A training checkpoint saved by an engine of another precision.
    #[error("it holds {saved} values; resume it with --dtype {saved}")]
    Dtype { saved: String, here: &'static str },
    /// A classifier trained on data with other feature or class counts (as saved: absent
    /// counts are `None`).
    #[error(
        "trained on {} features and {} classes, this data has {data_features} and {data_classes}",
        count_or_null(.features),
        count_or_null(.classes)
    )]
    DataShape {
        features: Option<u64>,
        classes: Option<u64>,
        data_features: usize,
        data_classes: usize,
    },
    /// A GPT trained on another vocabulary than the text's.
    #[error("it was trained on a vocabulary of {saved} characters, the text has {text}")]
    Vocabulary { saved: usize, text: usize },
    /// A parameter of the model that the file does not hold.
    #[error("it has no parameter `{name}`")]
    MissingParam { name: String },
    /// A parameter whose saved shape is not the model's.
    #[error("`{name}` has shape {saved:?}, the model's is {model}")]
    ParamShape {
        name: String,
        saved: Vec<usize>,
        model: torchlean_spec::Shape,
    },
    /// A classifier whose metadata has no feature or class count.
    #[error("its metadata has no feature or class count")]
    NoCounts,
    /// A classifier saved before `predict` existed: no class or feature names.
    #[error("it names no classes or features (saved before `predict` existed): resume it with more --steps and --save it again")]
    NoNames,
    /// Class or feature names that do not match the saved counts.
    #[error("its metadata names {class_names} classes and {feature_names} features, for {classes} and {features}")]
    NameCounts {
        class_names: usize,
        feature_names: usize,
        classes: usize,
        features: usize,
    },
    /// An input-normalization buffer that is absent or not one value per feature.
    #[error("no `{name}` of {features} values")]
    MissingBuffer { name: &'static str, features: usize },
    /// An input normalization with a scale that is not finite and positive.
    #[error("its input normalization is not finite and positive")]
    Normalization,
    /// An optimizer file written by another save than the model file beside it (the save ids as
    /// JSON text).
    #[error("written by another save than {} (save {found} against {expected}); save again", .model.display())]
    OtherSave {
        model: std::path::PathBuf,
        found: String,
        expected: String,
    },
}

fn count_or_null(n: &Option<u64>) -> String {
    n.map_or_else(|| "null".to_string(), |n| n.to_string())
}

fn compiled_anomaly(e: &torchlean_compiled::CompiledError) -> Option<&torchlean_runtime::Anomaly> {
    match e {
        torchlean_compiled::CompiledError::Runtime(RuntimeError::Anomaly(a)) => Some(a),
        _ => None,
    }
}
