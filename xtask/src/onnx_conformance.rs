//! `cargo xtask onnx-conformance`: ONNX's own per-operator test suite (the "node" tests that
//! onnxruntime, tract and burn-onnx are measured on) through our importer and the reference
//! semantics, with the outcome of every test and a table per op.
//!
//! The tests are generated, not committed: `tools/onnx_conformance/onnx_node_tests.py OUT` runs
//! the generators the installed `onnx` package carries (1,884 tests with onnx 1.23, ten seconds)
//! and writes `OUT/<test>/model.onnx` with `test_data_set_0/{input,output}_N.pb`. Each test is
//! imported with `torchlean_onnx::import_model_bound`, its INT64 inputs (shapes, axes, indices)
//! and BOOL ones (conditions) bound to their test values as `torchlean import --bind` binds them, evaluated on its
//! remaining inputs with `torchlean_ir::denote_outputs` in `f64`, and every output compared with ONNX's
//! tolerances (rtol 1e-3, atol 1e-7; NaN matches NaN).
//!
//! Outcomes: `pass`; `wrong` (an output's shape or a value differs); `error` (imported, but the
//! evaluation failed); `refused` (the importer reports problems: the clean refusal of something
//! unsupported); `crash` (a panic anywhere); `no-data` (a generator whose values are not plain
//! tensors). Two scopes are tallied beside the whole suite, both limited to tests whose inputs
//! and outputs are FLOAT, DOUBLE or INT64: *claimed*, every op one the importer claims
//! (`torchlean_onnx::supported_op_types`), and *target*, every op in [`TARGET_OPS`] (477 tests
//! with onnx 1.23). The command fails when any test is `wrong` or `crash`; an `error` (our
//! semantics refusing a value, such as `log` of 0) is listed with its reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use torchlean_onnx::proto::{tensor_proto::DataType, ModelProto};

/// The ops the importer is to cover: what `torch.onnx.export` emits for the CNNs, decoders and
/// encoders users have, and the shape arithmetic it emits around them (folded at import).
const TARGET_OPS: &[&str] = &[
    "Abs",
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Celu",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvTranspose",
    "Div",
    "Dropout",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "GroupNormalization",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "InstanceNormalization",
    "LayerNormalization",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "LRN",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mish",
    "Mul",
    "Neg",
    "Pad",
    "Pow",
    "PRelu",
    "Range",
    "Reciprocal",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Selu",
    "Shape",
    "Sigmoid",
    "Sign",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "Tile",
    "Transpose",
    "Trilu",
    "Unsqueeze",
    "Where",
];

/// ONNX's backend-test tolerances.
const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

#[derive(clap::Args, Debug)]
pub struct OnnxConformanceArgs {
    /// A folder of node tests (`<test>/model.onnx`, `<test>/test_data_set_0/`); without it they
    /// are generated into `target/onnx-node-tests` with $TORCHLEAN_ONNX_PYTHON (default
    /// python3), which needs the `onnx` and `numpy` packages
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Only the tests whose name contains one of these (repeatable)
    #[arg(long)]
    filter: Vec<String>,
    /// A line for every test (by default: only those that are wrong, error or crash)
    #[arg(long)]
    verbose: bool,
}

/// What happened to one test.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Pass,
    Wrong(String),
    Error(String),
    Refused(String),
    Crash(String),
    NoData,
}

impl Outcome {
    const NAMES: [&'static str; 6] = ["pass", "wrong", "error", "refused", "crash", "no-data"];

    fn name(&self) -> &'static str {
        Self::NAMES[self.slot()]
    }

    fn slot(&self) -> usize {
        match self {
            Outcome::Pass => 0,
            Outcome::Wrong(_) => 1,
            Outcome::Error(_) => 2,
            Outcome::Refused(_) => 3,
            Outcome::Crash(_) => 4,
            Outcome::NoData => 5,
        }
    }

    fn reason(&self) -> &str {
        match self {
            Outcome::Wrong(r) | Outcome::Error(r) | Outcome::Refused(r) | Outcome::Crash(r) => r,
            Outcome::Pass | Outcome::NoData => "",
        }
    }

    /// Worth a line of its own: not a pass, a clean refusal or a test without data.
    fn is_notable(&self) -> bool {
        matches!(
            self,
            Outcome::Wrong(_) | Outcome::Error(_) | Outcome::Crash(_)
        )
    }

    /// A defect that fails the command: a wrong value or a crash.
    fn is_defect(&self) -> bool {
        matches!(self, Outcome::Wrong(_) | Outcome::Crash(_))
    }
}

/// One test's result.
struct TestResult {
    name: String,
    ops: Vec<String>,
    scope: Scope,
    outcome: Outcome,
}

/// Which scopes a test is in (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
struct Scope {
    claimed: bool,
    target: bool,
}

/// Counts per outcome.
#[derive(Clone, Copy, Default)]
struct Tally([usize; 6]);

impl Tally {
    fn add(&mut self, o: &Outcome) {
        self.0[o.slot()] += 1;
    }
    fn total(&self) -> usize {
        self.0.iter().sum()
    }
}

/// `Ok(false)` when a test is wrong or crashes; `Err` when the tests cannot be read or
/// generated.
pub fn run(args: &OnnxConformanceArgs) -> Result<bool, String> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => generate()?,
    };
    let mut tests: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .filter(|p| {
            let name = file_name(p);
            args.filter.is_empty() || args.filter.iter().any(|f| name.contains(f.as_str()))
        })
        .collect();
    tests.sort();
    if tests.is_empty() {
        return Err(format!(
            "no node tests (`<test>/model.onnx`) in {} match",
            dir.display()
        ));
    }
    let claimed = torchlean_onnx::supported_op_types();
    let results: Vec<TestResult> = tests.iter().map(|t| run_test(t, &claimed)).collect();
    for r in &results {
        if args.verbose || r.outcome.is_notable() {
            println!(
                "{:<8} {:<60} {} {}",
                r.outcome.name(),
                r.name,
                r.ops.join(","),
                r.outcome.reason()
            );
        }
    }
    print_summary(&dir, &results, &claimed);
    let defects = results.iter().filter(|r| r.outcome.is_defect()).count();
    if defects > 0 {
        println!("{defects} test(s) wrong or crashing");
    }
    Ok(defects == 0)
}

/// Writes the node tests into `target/onnx-node-tests` (anew each time: the installed `onnx`
/// decides what they are).
fn generate() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = root.join("target/onnx-node-tests");
    if out.exists() {
        std::fs::remove_dir_all(&out)
            .map_err(|e| format!("cannot clear {}: {e}", out.display()))?;
    }
    let python = std::env::var("TORCHLEAN_ONNX_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = root.join("tools/onnx_conformance/onnx_node_tests.py");
    let status = Command::new(&python)
        .arg(&script)
        .arg(&out)
        .status()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !status.success() {
        return Err(format!(
            "{python} {} failed ({status}): it needs the `onnx` and `numpy` packages \
             (pip install onnx numpy; set TORCHLEAN_ONNX_PYTHON to that interpreter)",
            script.display()
        ));
    }
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Imports, evaluates and compares one test; a panic anywhere is its `crash`.
fn run_test(dir: &Path, claimed: &[&str]) -> TestResult {
    let name = file_name(dir);
    let bytes = match std::fs::read(dir.join("model.onnx")) {
        Ok(b) => b,
        Err(e) => {
            return result(
                name,
                vec![],
                Scope::default(),
                Outcome::Error(format!("read: {e}")),
            )
        }
    };
    let model = match <ModelProto as prost::Message>::decode(bytes.as_slice()) {
        Ok(m) => m,
        Err(e) => {
            let why = Outcome::Refused(format!("not a model: {e}"));
            return result(name, vec![], Scope::default(), why);
        }
    };
    let (ops, scope) = describe(&model, claimed);
    let outcome = std::panic::catch_unwind(|| evaluate(dir, &model)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Outcome::Crash(format!("panicked: {msg}"))
    });
    result(name, ops, scope, outcome)
}

fn result(name: String, ops: Vec<String>, scope: Scope, outcome: Outcome) -> TestResult {
    TestResult {
        name,
        ops,
        scope,
        outcome,
    }
}

/// The model's distinct op types, and the scopes the test is in.
fn describe(model: &ModelProto, claimed: &[&str]) -> (Vec<String>, Scope) {
    let Some(graph) = &model.graph else {
        return (vec![], Scope::default());
    };
    let mut ops: Vec<String> = graph.node.iter().map(|n| n.op_type().to_string()).collect();
    ops.sort();
    ops.dedup();
    let plain = [DataType::Float, DataType::Double, DataType::Int64].map(|d| d as i32);
    let values_plain = graph.input.iter().chain(&graph.output).all(|v| {
        let elem = v.r#type.as_ref().and_then(|t| match &t.value {
            Some(torchlean_onnx::proto::type_proto::Value::TensorType(tt)) => tt.elem_type,
            _ => None,
        });
        elem.is_some_and(|e| plain.contains(&e))
    });
    let all_in = |list: &[&str]| {
        values_plain && !ops.is_empty() && ops.iter().all(|o| list.contains(&o.as_str()))
    };
    let scope = Scope {
        claimed: all_in(claimed),
        target: all_in(TARGET_OPS),
    };
    (ops, scope)
}

/// The numbered `prefix_N.pb` files of a data set, in order, as read (their bytes).
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let p = dir.join(format!("{prefix}_{}.pb", out.len()));
        if !p.is_file() {
            return Ok(out);
        }
        out.push(std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?);
    }
}

fn read_all(files: &[Vec<u8>], prefix: &str) -> Result<Vec<torchlean_onnx::TensorFile>, String> {
    files
        .iter()
        .enumerate()
        .map(|(i, b)| torchlean_onnx::read_tensor(b).map_err(|e| format!("{prefix}_{i}.pb: {e}")))
        .collect()
}

/// The graph inputs declared INT64 (shapes, axes, indices, pads) or BOOL (conditions, masks),
/// bound at import to their test values as `torchlean import --bind` binds them; the others
/// stay inputs.
fn bound_inputs(model: &ModelProto) -> Vec<bool> {
    let Some(graph) = &model.graph else {
        return vec![];
    };
    graph
        .input
        .iter()
        .map(|v| {
            matches!(
                v.r#type.as_ref().and_then(|t| t.value.as_ref()),
                Some(torchlean_onnx::proto::type_proto::Value::TensorType(t))
                    if t.elem_type == Some(DataType::Int64 as i32)
                        || t.elem_type == Some(DataType::Bool as i32)
            )
        })
        .collect()
}

fn evaluate(dir: &Path, model: &ModelProto) -> Outcome {
    let data = dir.join("test_data_set_0");
    if !data.is_dir() {
        return Outcome::NoData;
    }
    let (input_files, output_files) = match (numbered(&data, "input"), numbered(&data, "output")) {
        (Ok(i), Ok(o)) => (i, o),
        (Err(e), _) | (_, Err(e)) => return Outcome::Refused(format!("test data: {e}")),
    };
    let mut bind = bound_inputs(model);
    bind.resize(input_files.len(), false);
    if input_files.len() < 2 {
        // a graph of one input keeps it, whatever its type
        bind.fill(false);
    }
    let mut imported = import_binding(model, &input_files, &bind);
    // a weight the test feeds as a graph input (`Conv`'s `W`): bound, as `--bind` does for a
    // user whose model takes its weights as inputs, and imported again
    if let Err(Outcome::Refused(_)) = &imported.result {
        let weights = weight_inputs(model, &imported.not_weights);
        if !weights.is_empty() {
            for i in weights {
                bind[i] = true;
            }
            if bind.iter().any(|b| !b) {
                imported = import_binding(model, &input_files, &bind);
            }
        }
    }
    // integer data: bind only the integer inputs the import must know (shapes, axes, counts),
    // and keep the others as data, where the first policy left no input or refused them
    if let Err(Outcome::Refused(_)) = &imported.result {
        if let Some(second) = import_integer_data(model, &input_files) {
            imported = second;
        }
    }
    let free = imported.free;
    let imported = match imported.result {
        Ok(i) => i,
        Err(outcome) => return outcome,
    };
    let (inputs, expected) = match (read_all(&free, "input"), read_all(&output_files, "output")) {
        (Ok(i), Ok(o)) => (i, o),
        (Err(e), _) | (_, Err(e)) => return Outcome::Refused(format!("test data: {e}")),
    };
    // the importer makes one `input` node per unbound graph input, in the model's order
    let inputs: Vec<torchlean_spec::Tensor<f64>> = inputs.into_iter().map(|t| t.tensor).collect();
    let got = match torchlean_ir::denote_outputs::<f64>(&imported.graph, &imported.payload, &inputs)
    {
        Ok(v) => v,
        Err(e) => return Outcome::Error(format!("evaluation: {e}")),
    };
    if got.len() != expected.len() {
        return Outcome::Wrong(format!(
            "{} outputs, the test has {}",
            got.len(),
            expected.len()
        ));
    }
    for (g, want) in got.iter().zip(&expected) {
        if let Some(why) = differs(g, &want.tensor) {
            return Outcome::Wrong(format!("output `{}`: {why}", want.name));
        }
    }
    Outcome::Pass
}

/// One import of a test's model with the inputs marked in `bind` bound to their test values.
struct Import {
    result: Result<torchlean_onnx::Imported, Outcome>,
    /// The inputs left free, in the model's order.
    free: Vec<Vec<u8>>,
    /// Where the importer found no weight it could lift, or an integer input it must know at
    /// import: `(node, field)`.
    not_weights: Vec<(String, String)>,
}

fn import_binding(model: &ModelProto, input_files: &[Vec<u8>], bind: &[bool]) -> Import {
    let mut bound = Vec::new();
    let mut free = Vec::new();
    for (i, bytes) in input_files.iter().enumerate() {
        if bind[i] {
            match torchlean_onnx::tensor_proto(bytes) {
                Ok(t) => bound.push((t.name().to_string(), t)),
                Err(e) => {
                    return Import {
                        result: Err(Outcome::Refused(format!("input_{i}.pb: {e}"))),
                        free,
                        not_weights: vec![],
                    }
                }
            }
        } else {
            free.push(bytes.clone());
        }
    }
    match torchlean_onnx::import_model_bound(model, &bound) {
        Ok(i) => Import {
            result: Ok(i),
            free,
            not_weights: vec![],
        },
        Err(e) => {
            let not_weights = match &e {
                torchlean_onnx::OnnxError::Problems(ps) => ps
                    .iter()
                    .filter(|p| {
                        matches!(
                            p.kind,
                            torchlean_onnx::ProblemKind::NotAWeight
                                | torchlean_onnx::ProblemKind::MustBeBound
                        )
                    })
                    .map(|p| (p.node.clone(), p.field.clone()))
                    .collect(),
                _ => vec![],
            };
            let lines = e.lines();
            let more = if lines.len() > 1 {
                format!(" (+{} more)", lines.len() - 1)
            } else {
                String::new()
            };
            Import {
                result: Err(Outcome::Refused(format!("{}{more}", lines.join("; ")))),
                free,
                not_weights,
            }
        }
    }
}

/// The second binding policy: BOOL inputs bound, integer ones kept as data, then bound where
/// the importer says it must know them (`MustBeBound`) or wants them as weights
/// (`NotAWeight`), once. `None` when the model has no integer input (nothing changes).
fn import_integer_data(model: &ModelProto, input_files: &[Vec<u8>]) -> Option<Import> {
    let graph = model.graph.as_ref()?;
    let elem = |v: &torchlean_onnx::proto::ValueInfoProto| match v
        .r#type
        .as_ref()
        .and_then(|t| t.value.as_ref())
    {
        Some(torchlean_onnx::proto::type_proto::Value::TensorType(t)) => t.elem_type,
        _ => None,
    };
    let integer = |v: &torchlean_onnx::proto::ValueInfoProto| {
        elem(v) == Some(DataType::Int64 as i32) || elem(v) == Some(DataType::Int32 as i32)
    };
    if !graph.input.iter().any(integer) {
        return None;
    }
    let mut bind: Vec<bool> = graph
        .input
        .iter()
        .map(|v| elem(v) == Some(DataType::Bool as i32))
        .collect();
    bind.resize(input_files.len(), false);
    let first = import_binding(model, input_files, &bind);
    if first.result.is_ok() || first.not_weights.is_empty() {
        return Some(first);
    }
    for i in weight_inputs(model, &first.not_weights) {
        bind[i] = true;
    }
    Some(import_binding(model, input_files, &bind))
}

/// The graph inputs (positions) that the importer's `NotAWeight` and `MustBeBound` problems name: the operand
/// `input[k]` of the named node, where that operand is a graph input.
fn weight_inputs(model: &ModelProto, not_weights: &[(String, String)]) -> Vec<usize> {
    let Some(graph) = &model.graph else {
        return vec![];
    };
    let mut out = Vec::new();
    for (node, field) in not_weights {
        let k = field
            .strip_prefix("input[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|k| k.parse::<usize>().ok());
        // a node is named by its name, or by its first output when it has none
        let found = graph
            .node
            .iter()
            .find(|n| n.name() == node || (n.name().is_empty() && n.output.first() == Some(node)));
        let value = found.zip(k).and_then(|(n, k)| n.input.get(k));
        if let Some(pos) = value.and_then(|v| graph.input.iter().position(|i| i.name() == v)) {
            if !out.contains(&pos) {
                out.push(pos);
            }
        }
    }
    out
}

/// Why `got` is not `want` within ONNX's tolerances, if it is not.
fn differs(
    got: &torchlean_spec::Tensor<f64>,
    want: &torchlean_spec::Tensor<f64>,
) -> Option<String> {
    if got.shape() != want.shape() {
        return Some(format!(
            "shape {} where {} is expected",
            got.shape(),
            want.shape()
        ));
    }
    let bad = got.data().iter().zip(want.data()).position(|(&g, &w)| {
        let same = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= ATOL + RTOL * w.abs();
        !same
    })?;
    Some(format!(
        "element {bad} is {} where {} is expected",
        got.data()[bad],
        want.data()[bad]
    ))
}

fn print_summary(dir: &Path, results: &[TestResult], claimed: &[&str]) {
    let (mut all, mut target, mut mine) = (Tally::default(), Tally::default(), Tally::default());
    let mut per_op: BTreeMap<&str, Tally> = BTreeMap::new();
    for r in results {
        all.add(&r.outcome);
        if r.scope.target {
            target.add(&r.outcome);
        }
        if r.scope.claimed {
            mine.add(&r.outcome);
        }
        for op in &r.ops {
            per_op.entry(op.as_str()).or_default().add(&r.outcome);
        }
    }
    println!();
    println!(
        "ONNX node tests in {}: {}; target: {} (every op one of the {} of TARGET_OPS); \
         claimed: {} (every op one of the {} the importer claims); both scopes only \
         FLOAT, DOUBLE and INT64 inputs and outputs",
        dir.display(),
        all.total(),
        target.total(),
        TARGET_OPS.len(),
        mine.total(),
        claimed.len(),
    );
    println!(
        "{:<10} {:>6} {:>7} {:>8}",
        "outcome", "all", "target", "claimed"
    );
    for (i, name) in Outcome::NAMES.iter().enumerate() {
        println!(
            "{name:<10} {:>6} {:>7} {:>8}",
            all.0[i], target.0[i], mine.0[i]
        );
    }
    for (what, t) in [("all", all), ("target", target), ("claimed", mine)] {
        let with_data = t.total() - t.0[5];
        if with_data > 0 {
            println!(
                "{what}: {} of {with_data} with data pass ({:.1} %)",
                t.0[0],
                100.0 * t.0[0] as f64 / with_data as f64
            );
        }
    }
    println!();
    println!(
        "{:<28} {:>5} {:>5} {:>5} {:>5} {:>7} {:>5} {:>7}",
        "op (* claimed, + target)",
        "tests",
        "pass",
        "wrong",
        "error",
        "refused",
        "crash",
        "no-data"
    );
    for (op, t) in &per_op {
        let mark = match (claimed.contains(op), TARGET_OPS.contains(op)) {
            (true, _) => "*",
            (false, true) => "+",
            (false, false) => " ",
        };
        println!(
            "{:<28} {:>5} {:>5} {:>5} {:>5} {:>7} {:>5} {:>7}",
            format!("{mark}{op}"),
            t.total(),
            t.0[0],
            t.0[1],
            t.0[2],
            t.0[3],
            t.0[4],
            t.0[5]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use torchlean_onnx::proto::{
        tensor_shape_proto::{dimension, Dimension},
        type_proto, GraphProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
        TypeProto, ValueInfoProto,
    };
    use torchlean_spec::{Shape, Tensor};

    fn value(name: &str, n: i64) -> ValueInfoProto {
        typed_value(name, n, DataType::Float)
    }

    fn typed_value(name: &str, n: i64, elem: DataType) -> ValueInfoProto {
        ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(elem as i32),
                    shape: Some(TensorShapeProto {
                        dim: vec![Dimension {
                            value: Some(dimension::Value::DimValue(n)),
                            ..Default::default()
                        }],
                    }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A one-node model `op(inputs…) → y` over `[3]` floats.
    fn model(op: &str, inputs: &[&str]) -> Vec<u8> {
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            graph: Some(GraphProto {
                node: vec![NodeProto {
                    name: Some("n".into()),
                    op_type: Some(op.into()),
                    input: inputs.iter().map(|s| s.to_string()).collect(),
                    output: vec!["y".into()],
                    ..Default::default()
                }],
                input: inputs.iter().map(|i| value(i, 3)).collect(),
                output: vec![value("y", 3)],
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn tensor(name: &str, v: &[f32]) -> Vec<u8> {
        TensorProto {
            name: Some(name.into()),
            dims: vec![v.len() as i64],
            data_type: Some(DataType::Float as i32),
            float_data: v.to_vec(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// A node test folder: the model, and a data set unless `data` is `None`.
    fn case(root: &Path, name: &str, model: Vec<u8>, data: Option<(&[&[f32]], &[f32])>) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("model.onnx"), model).unwrap();
        if let Some((inputs, output)) = data {
            let ds = dir.join("test_data_set_0");
            std::fs::create_dir_all(&ds).unwrap();
            for (i, x) in inputs.iter().enumerate() {
                std::fs::write(ds.join(format!("input_{i}.pb")), tensor("x", x)).unwrap();
            }
            std::fs::write(ds.join("output_0.pb"), tensor("y", output)).unwrap();
        }
        dir
    }

    fn check(name: &str, model: Vec<u8>, data: Option<(&[&[f32]], &[f32])>) -> TestResult {
        let root = tempfile::tempdir().unwrap();
        let dir = case(root.path(), name, model, data);
        run_test(&dir, &torchlean_onnx::supported_op_types())
    }

    #[test]
    fn every_outcome_is_told_apart() {
        let x: &[f32] = &[-1.0, 0.5, 2.0];
        let pass = check(
            "relu",
            model("Relu", &["x"]),
            Some((&[x], &[0.0, 0.5, 2.0])),
        );
        assert_eq!(pass.outcome, Outcome::Pass);
        assert!(pass.scope.claimed && pass.scope.target);
        assert_eq!(pass.ops, ["Relu"]);

        let wrong = check(
            "relu_wrong",
            model("Relu", &["x"]),
            Some((&[x], &[0.0, 0.5, 2.1])),
        );
        assert!(
            matches!(&wrong.outcome, Outcome::Wrong(r) if r.contains("element 2")),
            "{:?}",
            wrong.outcome
        );

        let two_inputs = check(
            "add",
            model("Add", &["x", "z"]),
            Some((&[x, &[1.0, 1.0, 1.0]], &[0.0, 1.5, 3.0])),
        );
        assert_eq!(
            two_inputs.outcome,
            Outcome::Pass,
            "{:?}",
            two_inputs.outcome
        );

        let unknown = check(
            "acos",
            model("Acos", &["x"]),
            Some((&[x], &[0.0, 0.0, 0.0])),
        );
        assert!(matches!(unknown.outcome, Outcome::Refused(_)));
        assert!(!unknown.scope.claimed && !unknown.scope.target);

        assert_eq!(
            check("nodata", model("Relu", &["x"]), None).outcome,
            Outcome::NoData
        );

        let garbage = check("garbage", vec![0xff, 0xff, 0xff], None);
        assert!(matches!(garbage.outcome, Outcome::Refused(_)));
    }

    #[test]
    fn int64_inputs_are_bound_at_import_and_the_other_is_evaluated() {
        // Reshape(x [3], shape [1] = [3]): the INT64 `shape` input bound, `x` evaluated
        let mut bytes = model("Reshape", &["x", "shape"]);
        let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
        let g = m.graph.as_mut().unwrap();
        g.input[1] = typed_value("shape", 1, DataType::Int64);
        bytes = m.encode_to_vec();
        let root = tempfile::tempdir().unwrap();
        let dir = case(
            root.path(),
            "reshape",
            bytes,
            Some((&[&[1.0, -2.0, 3.0]], &[1.0, -2.0, 3.0])),
        );
        let shape = TensorProto {
            name: Some("shape".into()),
            dims: vec![1],
            data_type: Some(DataType::Int64 as i32),
            int64_data: vec![3],
            ..Default::default()
        };
        std::fs::write(
            dir.join("test_data_set_0/input_1.pb"),
            shape.encode_to_vec(),
        )
        .unwrap();
        let r = run_test(&dir, &torchlean_onnx::supported_op_types());
        assert_eq!(r.outcome, Outcome::Pass, "{:?}", r.outcome);
        assert!(r.scope.target);
    }

    #[test]
    fn values_compare_with_onnx_tolerances() {
        let t = |v: &[f64]| Tensor::new(Shape::from([v.len()]), v.to_vec()).unwrap();
        assert_eq!(differs(&t(&[1.0, f64::NAN]), &t(&[1.0009, f64::NAN])), None);
        assert!(differs(&t(&[1.0]), &t(&[1.0011])).is_some());
        // the absolute tolerance near zero
        assert_eq!(differs(&t(&[5e-8]), &t(&[0.0])), None);
        assert!(differs(&t(&[2e-7]), &t(&[0.0])).is_some());
        assert_eq!(differs(&t(&[f64::INFINITY]), &t(&[f64::INFINITY])), None);
        assert!(differs(&t(&[1.0, 2.0]), &t(&[1.0]))
            .unwrap()
            .contains("shape"));
    }

    #[test]
    fn a_weight_the_importer_names_is_found_among_the_graph_inputs() {
        let m = ModelProto::decode(&model("Conv", &["x", "w", "b"])[..]).unwrap();
        let named =
            |node: &str, field: &str| weight_inputs(&m, &[(node.to_string(), field.to_string())]);
        assert_eq!(named("n", "input[1]"), [1]);
        assert_eq!(named("n", "input[2]"), [2]);
        // the same input twice is listed once; an unknown node, a field that is no operand
        // or an operand past the node's inputs: nothing
        let twice = weight_inputs(
            &m,
            &[
                ("n".into(), "input[1]".into()),
                ("n".into(), "input[1]".into()),
            ],
        );
        assert_eq!(twice, [1]);
        assert!(named("other", "input[1]").is_empty());
        assert!(named("n", "kernel_shape").is_empty());
        assert!(named("n", "input[7]").is_empty());
    }
}
