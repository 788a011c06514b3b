//! Command-line arguments.

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use torchlean_engines::EngineName;
use torchlean_spec::Budget;

#[derive(Parser, Debug)]
#[command(
    name = "torchlean",
    version,
    about = "TorchLean-rs: check, run and differentiate torchlean.ir.v1 graphs, and verify them against conformance cases",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DTypeArg {
    F32,
    F64,
}

/// The graph a command reads, and its weights.
#[derive(clap::Args, Debug)]
pub struct GraphSource {
    /// A graph (torchlean.ir.v1, either dialect) or a case file (torchlean.case.v1: graph,
    /// payload and input in one file)
    pub graph: PathBuf,
    /// The graph's weights: Payload JSON or safetensors, keyed `<node id>.<name>` (default: a
    /// case file's own; a September-dialect graph holds its weights inline)
    #[arg(long)]
    pub payload: Option<PathBuf>,
}

/// The input tensors of a graph run.
#[derive(clap::Args, Debug)]
pub struct InputFiles {
    /// Input tensor JSON (default: the case's input, for a case file). A graph with several
    /// inputs takes one per input: `--input NAME=FILE`, NAME an input's name (`input_names`)
    /// or node id, or plain `--input FILE`s in input order
    #[arg(long, value_name = "[NAME=]FILE")]
    pub input: Vec<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validate a graph (or a case file's graph, payload and input): structure, shapes, and
    /// optionally payload and input; reports every problem
    Check {
        #[command(flatten)]
        source: GraphSource,
        #[command(flatten)]
        inputs: InputFiles,
        #[command(flatten)]
        memory: MemoryArgs,
    },
    /// Evaluate a graph and print its output as tensor JSON
    Eval {
        #[command(flatten)]
        source: GraphSource,
        #[command(flatten)]
        inputs: InputFiles,
        #[arg(long, value_enum, default_value = "cpu")]
        engine: EngineName,
        /// [default: f64; f32 on the CUDA engines, which run f32 only]
        #[arg(long, value_enum)]
        dtype: Option<DTypeArg>,
        #[command(flatten)]
        memory: MemoryArgs,
        /// Stop at the first node whose forward value is NaN or infinite
        /// (computed from finite values) and name it: node id, kind, shapes, parents,
        /// direction; exit 1
        #[arg(long)]
        detect_anomaly: bool,
    },
    /// Evaluate a graph and its gradients; prints {"output", "grad_input", "grad_payload"}
    /// ("outputs" for several outputs, "grad_inputs" by input name for several inputs)
    Grad {
        #[command(flatten)]
        source: GraphSource,
        #[command(flatten)]
        inputs: InputFiles,
        /// Cotangent of the output (default: ones). A graph with several outputs (September
        /// dialect's `output_ids`) takes one `--seed` per output, repeated in output order, or
        /// none (ones for each); the gradients are the sum of each output's pullback
        #[arg(long, value_name = "SEED.json")]
        seed: Vec<PathBuf>,
        #[arg(long, value_enum, default_value = "cpu")]
        engine: EngineName,
        /// [default: f64; f32 on the CUDA engines, which run f32 only]
        #[arg(long, value_enum)]
        dtype: Option<DTypeArg>,
        #[command(flatten)]
        memory: MemoryArgs,
        /// Stop at the first node whose forward value or backward gradient is NaN or infinite
        /// (computed from finite values) and name it: node id, kind, shapes, parents,
        /// direction; exit 1
        #[arg(long)]
        detect_anomaly: bool,
    },
    /// Run torchlean.case.v1 files (or every *.json in directories) through each path and dtype
    /// asked for (--paths, --dtype) and compare with their expectations
    Conform(ConformArgs),
    /// Print the lowered SSA GraphData (the text the insta snapshots hold)
    Lower {
        #[command(flatten)]
        source: GraphSource,
        #[command(flatten)]
        memory: MemoryArgs,
    },
    /// Print the graph as Graphviz DOT
    Dot {
        /// A graph (torchlean.ir.v1, either dialect) or a case file (torchlean.case.v1)
        graph: PathBuf,
    },
    /// Rewrite a graph (read in either TorchLean dialect, detected from the file) in the
    /// dialect given: `2026-08` (TorchLean of August 2026, `output_id`, weights in a separate
    /// payload) or `2026-09` (TorchLean's September 2026, `output_ids`, weights inline)
    Convert {
        #[command(flatten)]
        source: GraphSource,
        /// The dialect to write: 2026-08 or 2026-09
        #[arg(long)]
        dialect: torchlean_ir::Dialect,
        /// Where to write the graph (default: standard output)
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
        /// Where to write the weights for `--dialect 2026-08` (`.safetensors` or Payload JSON);
        /// required when the graph has weights
        #[arg(long)]
        payload_out: Option<PathBuf>,
    },
    /// Import an ONNX model: write its graph (torchlean.ir.v1) and its initializers as the
    /// payload; every unsupported op, attribute or dynamic dimension is listed (exit 2)
    Import {
        /// The ONNX model (a ModelProto file, as torch.onnx.export writes)
        model: PathBuf,
        /// The graph JSON to write
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// The payload to write: safetensors when the name ends in `.safetensors`, Payload JSON
        /// otherwise; needed when the model has weights, except with `--dialect 2026-09`,
        /// which holds them inline (the file is then not written)
        #[arg(long)]
        payload: Option<PathBuf>,
        /// The dialect to write the graph in: 2026-08 (default) or 2026-09
        #[arg(long, default_value_t = torchlean_ir::Dialect::August2026)]
        dialect: torchlean_ir::Dialect,
        /// Bind graph input NAME to the tensor in FILE (a serialized ONNX TensorProto, as
        /// ONNX's test data holds): for the inputs that fix shapes, axes, indices or pads; the
        /// inputs left are the graph's. Repeatable
        #[arg(long = "bind", value_name = "NAME=FILE", value_parser = parse_binding)]
        bind: Vec<(String, PathBuf)>,
        /// Give graph input NAME these dims instead of its declared ones: a symbolic
        /// dimension (an export's dynamic_axes) fixed, or a batch size changed (e.g.
        /// `x=8x3x224x224`). Repeatable
        #[arg(long = "input-shape", value_name = "NAME=D0xD1x…", value_parser = parse_input_shape)]
        input_shape: Vec<(String, Vec<usize>)>,
    },
    /// Write the graph as a standalone PyTorch module (torch and safetensors only) whose
    /// forward follows it node by node, and its weights as NAME.safetensors beside it; or a
    /// `train mlp|cnn --save` checkpoint as a module that takes raw rows and names classes
    ExportTorch {
        /// A graph or case file, or a checkpoint (.safetensors)
        graph: PathBuf,
        /// Payload JSON or safetensors (default: the case's payload, for a case file)
        #[arg(long)]
        payload: Option<PathBuf>,
        /// The Python file to write (atomically)
        #[arg(short = 'o', long = "output", value_name = "MODEL.py")]
        output: PathBuf,
        #[command(flatten)]
        memory: MemoryArgs,
    },
    /// Train a model on the digits shipped in the repository (or on --csv data), with a
    /// progress bar, held-out accuracy per epoch and, with --verify-every, gradients re-checked
    /// on the reference engine as it goes; or `train gpt`, a character-level GPT on Shakespeare
    Train(Box<TrainArgs>),
    /// Print text a `train gpt` checkpoint writes after a prompt, character by character
    Sample(SampleArgs),
    /// Classify rows with a `train mlp|cnn|--from` checkpoint: raw rows in, as the training
    /// file holds them (the checkpoint normalizes them itself), one class name per row out
    Predict(PredictArgs),
}

/// `torchlean predict`'s arguments.
#[derive(clap::Args, Debug)]
pub struct PredictArgs {
    /// A checkpoint `train mlp|cnn|--from --save` wrote
    #[arg(value_name = "CHECKPOINT.safetensors")]
    pub checkpoint: PathBuf,
    /// The rows: a CSV file with a header holding the columns the model was trained on, by
    /// name (other columns, such as the label, are ignored)
    #[arg(long, required_unless_present = "digits")]
    pub csv: Option<PathBuf>,
    /// The rows: the embedded 8×8 digits, all 1,797, as raw pixels (0 to 16)
    #[arg(long, conflicts_with = "csv")]
    pub digits: bool,
    /// One JSON object per row: {"row": i, "class": id, "name": "…"}
    #[arg(long)]
    pub json: bool,
    #[arg(long, value_enum, default_value = "cpu")]
    pub engine: EngineName,
    /// [default: the checkpoint's]
    #[arg(long, value_enum)]
    pub dtype: Option<DTypeArg>,
}

/// `torchlean sample`'s arguments.
#[derive(clap::Args, Debug)]
pub struct SampleArgs {
    /// A checkpoint `train gpt --save` wrote
    #[arg(value_name = "CHECKPOINT.safetensors")]
    pub checkpoint: PathBuf,
    /// The text to continue (every character must be in the model's vocabulary)
    #[arg(long, default_value = "\n")]
    pub prompt: String,
    /// Characters to write
    #[arg(long, default_value_t = 500)]
    pub tokens: usize,
    /// Divides the logits: below 1 more predictable, above 1 more varied
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    /// Draw only from the K most likely characters (0: all)
    #[arg(long, value_name = "K", default_value_t = 20)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, value_enum, default_value = "cpu")]
    pub engine: EngineName,
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: DTypeArg,
}

/// `torchlean conform`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ConformArgs {
    /// Case files, or directories of them (every `*.json` inside)
    #[arg(required = true, value_name = "CASE.json|DIR")]
    pub files: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "cpu")]
    pub engine: EngineName,
    /// The dtypes to run every case in, comma-separated (`--dtype f64,f32` runs both); f32
    /// runs of a case written for f64 compare at the f32 tolerance (rtol 1e-4, atol 1e-5), a
    /// case that declares `"dtype": "f32"` keeps its own [default: each case's dtype; f32 on
    /// the CUDA engines, which run every case in f32]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub dtype: Vec<DTypeArg>,
    /// The ways to differentiate each case, comma-separated: `compiled` (the compiled tape, what
    /// `grad` runs), `eager` (an eager tape, as `train --backend eager` records: repeated
    /// parents not merged first), `saved` (the saved-graph executor's `backprop_from`), or
    /// `all`
    #[arg(long, value_enum, value_delimiter = ',', default_value = "compiled")]
    pub paths: Vec<PathArg>,
    /// One JSON object per run (case, path, dtype), then a summary object
    #[arg(long)]
    pub json: bool,
    /// Run a deliberately broken variant of the reference f64 engine (to reproduce the
    /// counterexamples of `cargo xtask check-equivalence --inject-fault`): flip-sign,
    /// drop-contribution, accumulation-order, broadcast-reduction, pool-off-by-one
    #[arg(long)]
    pub inject_fault: Option<torchlean_faults::Fault>,
    #[command(flatten)]
    pub memory: MemoryArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PathArg {
    /// The compiled tape and the releasing sweep
    Compiled,
    /// The eager tape and the releasing sweep
    Eager,
    /// The saved graph's `backprop_from`
    Saved,
    /// compiled, eager and saved
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// Linear(F, 128), ReLU, Linear(128, 128), ReLU, Linear(128, C)
    Mlp,
    /// Conv 1→16, ReLU, Conv 16→32, ReLU, MaxPool 2, Linear → C (3×3 kernels, padding 1)
    Cnn,
    /// nanoGPT's character-level GPT on the embedded Shakespeare (or --text): 4 layers, 4
    /// heads, 128 wide, block 64, AdamW; the flags under "GPT"
    Gpt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// The eager session (a tape recorded as the ops run)
    Eager,
    /// The program recorded once, compiled on each batch
    Compiled,
}

#[derive(clap::Args, Debug)]
// `--lr -1` is a value our checks refuse with the reason, not an unknown flag
#[command(allow_negative_numbers = true)]
pub struct TrainArgs {
    /// The built-in model to train (leave it out with --from)
    #[arg(value_enum, required_unless_present = "from", conflicts_with = "from")]
    pub model: Option<ModelArg>,
    /// Fine-tune a classifier imported from ONNX instead: one input [N, …] whose dims after the
    /// batch one hold the data's features, one output [N, classes]; its initializers are the
    /// parameters, saved under their ONNX names [default: --epochs 10, --lr 0.01]
    #[arg(long, value_name = "MODEL.onnx")]
    pub from: Option<PathBuf>,
    /// The --from model's head: its last linear layer's weight initializer (or NAME.weight),
    /// replaced by a freshly initialised layer when the data has another class count
    #[arg(long, value_name = "NAME", requires = "from")]
    pub head: Option<String>,
    /// Stop after this many steps in all (default: --epochs full passes)
    #[arg(long)]
    pub steps: Option<u64>,
    /// Passes over the training split [default: 30 for mlp, 20 for cnn, 10 with --from]
    #[arg(long)]
    pub epochs: Option<u64>,
    /// Learning rate [default: 0.05 with the default optimizer (0.01 with --from); PyTorch's
    /// with --optimizer: 1e-3 for sgd/adam/adamw, 1e-2 for rmsprop/adagrad]
    #[arg(long)]
    pub lr: Option<f64>,
    /// Batch size [default: 32]
    #[arg(long)]
    pub batch: Option<usize>,
    /// sgd, adam, adamw, rmsprop or adagrad: PyTorch's update rules and defaults (sgd: no
    /// momentum unless --momentum) [default: SGD with momentum 0.9]
    #[arg(long)]
    pub optimizer: Option<String>,
    /// Momentum factor (sgd, rmsprop)
    #[arg(long)]
    pub momentum: Option<f64>,
    /// Nesterov momentum (sgd, with --momentum)
    #[arg(long)]
    pub nesterov: bool,
    /// Weight decay (every optimizer; AdamW's is decoupled, PyTorch's default 0.01; train
    /// gpt's AdamW: on weights of rank ≥ 2 only, default 0.1)
    #[arg(long)]
    pub weight_decay: Option<f64>,
    /// Learning-rate schedule over the run: constant, cosine (to 0 at the last step),
    /// step:SIZE[:GAMMA] (× GAMMA, default 0.1, every SIZE steps), warmup-cosine:STEPS (a
    /// linear warm-up from a tenth of --lr, then cosine)
    #[arg(long, value_name = "SCHEDULE", value_parser = parse_schedule)]
    pub schedule: Option<ScheduleArg>,
    /// Seed of the initial parameters, the held-out split and the batch order [default: 0]
    #[arg(long)]
    pub seed: Option<u64>,
    /// cpu, reference, cuda or cuda-emu (the CUDA engines train in f32 only)
    #[arg(long, value_enum, default_value = "cpu")]
    pub engine: EngineName,
    #[arg(long, value_enum, default_value = "eager")]
    pub backend: BackendArg,
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: DTypeArg,
    /// Threads the CPU engine's kernels use, at least 1 [default: one per core]
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub threads: Option<usize>,
    /// Train on your own data: a CSV file with a header line
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// The CSV column holding the class label
    #[arg(long, default_value = "label", requires = "csv")]
    pub label_column: String,
    /// The fraction of the data held out for evaluation [default: 0.2]
    #[arg(long)]
    pub held_out: Option<f64>,
    /// Clip the gradients' total 2-norm to this before each update
    #[arg(long)]
    pub clip_grad_norm: Option<f64>,
    /// Write the trained model here as safetensors: its parameters under PyTorch's names and
    /// its input normalization (buffers input_mean, input_scale), the state_dict of the module
    /// `export-torch PATH` writes; and the optimizer state beside
    /// it (`NAME.optim.safetensors`); each written atomically
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Continue a run from its checkpoint (--save, or the one Ctrl-C saved): the same
    /// subsequent losses, bit for bit. Ctrl-C (SIGINT) stops a run between steps, saves it to
    /// --save, else to the --resume file, else to ./torchlean-interrupted.safetensors, and
    /// exits 130
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Start from these parameters instead of the seeded initialisation: a PyTorch
    /// state_dict saved with safetensors.torch.save_file (nn.Sequential names, all of them,
    /// f32 or f64) or a --save file
    #[arg(long, value_name = "STATE.safetensors", conflicts_with = "resume")]
    pub init_from: Option<PathBuf>,
    /// Write an SVG of the training and held-out loss
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Recompute every N-th step's loss and gradients on the reference engine in f64 from the
    /// same parameters and batch; stop with exit 1 if they deviate beyond the dtype's tolerance
    #[arg(long)]
    pub verify_every: Option<u64>,
    /// Share the run with the other processes of an MPI job (`mpirun -np N torchlean train
    /// ...`; detected without this flag when a launcher starts several): each rank computes
    /// its share of every global batch and the ranks sum their gradients, so N ranks take the
    /// steps one process takes; rank 0 prints and writes. Needs a build with `--features mpi`
    #[arg(long)]
    pub distributed: bool,
    /// Print a `step k: loss=…` line every N steps [default: 50]
    #[arg(long, default_value_t = 50)]
    pub log_every: u64,
    /// JSON lines on stdout (one per step line, epoch and verified step, then a summary)
    #[arg(long)]
    pub json: bool,
    /// Train on a deliberately broken variant of the reference f64 engine (see `conform
    /// --inject-fault`), to watch --verify-every stop it; a fault that touches none of the
    /// model's ops is refused (the cnn's pools: pool-off-by-one)
    #[arg(long)]
    pub inject_fault: Option<torchlean_faults::Fault>,
    /// Stop at the first node whose forward value or backward gradient is NaN or infinite
    /// (computed from finite values) and name it: tape node, op, layer, shapes, parents,
    /// direction, step; exit 1
    #[arg(long)]
    pub detect_anomaly: bool,
    #[command(flatten)]
    pub memory: MemoryArgs,
    #[command(
        flatten,
        next_help_heading = "GPT (train gpt; --batch, --lr, --seed, --save, --resume, --plot, --json and --log-every apply too)"
    )]
    pub gpt: GptFlags,
}

/// The flags only `train gpt` takes (its defaults: nanoGPT's `shakespeare_char` on a CPU).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GptFlags {
    /// Train on this UTF-8 text file instead of the embedded Shakespeare
    #[arg(long, value_name = "PATH")]
    pub text: Option<PathBuf>,
    /// Training steps [default: 2000]
    #[arg(long)]
    pub iters: Option<u64>,
    /// Estimate the train and val loss every N steps (and after the last) [default: 250]
    #[arg(long, value_name = "N")]
    pub eval_interval: Option<u64>,
    /// Batches per split in an estimate [default: 20]
    #[arg(long, value_name = "N")]
    pub eval_iters: Option<u64>,
    /// Context length in characters [default: 64]
    #[arg(long)]
    pub block: Option<usize>,
    /// Transformer blocks [default: 4]
    #[arg(long)]
    pub n_layer: Option<usize>,
    /// Attention heads (a divisor of --n-embd) [default: 4]
    #[arg(long)]
    pub n_head: Option<usize>,
    /// Embedding width [default: 128]
    #[arg(long)]
    pub n_embd: Option<usize>,
    /// The learning rate at the last step (cosine decay from --lr) [default: 1e-4]
    #[arg(long)]
    pub min_lr: Option<f64>,
    /// Steps of linear warm-up [default: 100]
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Clip the gradients' global norm to this (0: off) [default: 1.0]
    #[arg(long)]
    pub grad_clip: Option<f64>,
    /// Dropout probability [default: 0]
    #[arg(long)]
    pub dropout: Option<f64>,
    /// Also write the run to --save every N steps (atomically: a run killed mid-write leaves
    /// the previous checkpoint whole)
    #[arg(long, value_name = "N", requires = "save", value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub save_every: Option<u64>,
    /// On several ranks, send the gradients to the others in buckets of about N KiB as the
    /// backward sweep finishes them, while it goes on (0: all at once after it; the steps are
    /// the same either way; worth trying across machines) [default: 0]
    #[arg(long, value_name = "N")]
    pub bucket_kib: Option<usize>,
}

/// `--max-memory`, on every command that checks or runs a graph.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct MemoryArgs {
    /// The most bytes a graph's values, gradients and engine workspaces may take, estimated
    /// from its shapes before anything is allocated (suffixes K, M, G, T: 512M, 4G) [default:
    /// 3/4 of the smallest of physical memory, the cgroup limit and the address-space limit]
    #[arg(long, value_name = "BYTES", value_parser = parse_max_memory)]
    pub max_memory: Option<Budget>,
}

fn parse_binding(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("`{text}` is not NAME=FILE")),
    }
}

/// A `--schedule`, before the run's length is known.
#[derive(Clone, Debug, PartialEq)]
pub enum ScheduleArg {
    Constant,
    Cosine,
    Step { size: u64, gamma: f64 },
    WarmupCosine { warmup: u64 },
}

impl ScheduleArg {
    /// The schedule of a run of `steps` steps.
    pub fn over(&self, steps: u64) -> torchlean_train::Schedule {
        use torchlean_train::Schedule;
        let cosine = |t_max: u64| Schedule::Cosine {
            t_max: t_max.max(1),
            eta_min: 0.0,
        };
        match *self {
            ScheduleArg::Constant => Schedule::Constant,
            ScheduleArg::Cosine => cosine(steps),
            ScheduleArg::Step { size, gamma } => Schedule::Step {
                step_size: size,
                gamma,
            },
            ScheduleArg::WarmupCosine { warmup } => {
                Schedule::warmup(warmup, 0.1, cosine(steps.saturating_sub(warmup)))
            }
        }
    }
}

fn parse_schedule(text: &str) -> Result<ScheduleArg, String> {
    let bad =
        || format!("`{text}` is not constant, cosine, step:SIZE[:GAMMA] or warmup-cosine:STEPS");
    let mut parts = text.split(':');
    let kind = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    let count = |s: &str| s.parse::<u64>().ok().filter(|&n| n >= 1);
    match (kind, rest.as_slice()) {
        ("constant", []) => Ok(ScheduleArg::Constant),
        ("cosine", []) => Ok(ScheduleArg::Cosine),
        ("step", [size]) => Ok(ScheduleArg::Step {
            size: count(size).ok_or_else(bad)?,
            gamma: 0.1,
        }),
        ("step", [size, gamma]) => Ok(ScheduleArg::Step {
            size: count(size).ok_or_else(bad)?,
            gamma: gamma.parse().map_err(|_| bad())?,
        }),
        ("warmup-cosine", [steps]) => Ok(ScheduleArg::WarmupCosine {
            warmup: count(steps).ok_or_else(bad)?,
        }),
        _ => Err(bad()),
    }
}

/// `NAME=D0xD1x…` (or `NAME=D0,D1,…`): positive dims.
fn parse_input_shape(text: &str) -> Result<(String, Vec<usize>), String> {
    let bad = || format!("`{text}` is not NAME=D0xD1x… (positive dims, e.g. x=1x3x224x224)");
    let (name, dims) = text.split_once('=').ok_or_else(bad)?;
    let dims: Vec<usize> = dims
        .split(['x', ','])
        .map(|d| d.trim().parse::<usize>().ok().filter(|&d| d > 0))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    if name.is_empty() {
        return Err(bad());
    }
    Ok((name.to_string(), dims))
}

fn parse_max_memory(text: &str) -> Result<Budget, String> {
    Budget::parse(text).map_err(|e| e.to_string())
}

impl Command {
    /// The `--max-memory` of the command, if it takes one and it was given.
    pub fn max_memory(&self) -> Option<Budget> {
        match self {
            Command::Check { memory, .. }
            | Command::Eval { memory, .. }
            | Command::Grad { memory, .. }
            | Command::Lower { memory, .. }
            | Command::ExportTorch { memory, .. } => memory.max_memory,
            Command::Conform(args) => args.memory.max_memory,
            Command::Train(args) => args.memory.max_memory,
            Command::Dot { .. }
            | Command::Convert { .. }
            | Command::Import { .. }
            | Command::Sample(_)
            | Command::Predict(_) => None,
        }
    }
}
