//! The subcommands.

use crate::args::{Cli, Command, GraphSource, InputFiles};
use crate::engine::{dtype_or, select, with_engine, Engine};
use crate::load::{self, ir_lines};
use crate::{out, BadInput, Outcome, Stop};
use std::path::{Path, PathBuf};
use torchlean_compiled::{
    check_denotation, exec_graph_of_ir, lower_text, run_grad_seeds_lowered, run_grad_seeds_with,
    CompiledError, ExecGraph, IrAnomaly, BUDGET_ELEM_BYTES,
};
use torchlean_ir::{
    check_budget, check_payload, check_shapes, dot, DType, Diagnostic, Dialect, Graph, GraphDoc,
    Payload,
};
use torchlean_runtime::{AnomalyMode, Kernels};
use torchlean_spec::{Budget, Pass, Tensor};

pub fn run(cli: Cli) -> Result<Outcome, Stop> {
    if let Some(b) = cli.command.max_memory() {
        Budget::set_process_default(b);
    }
    match cli.command {
        Command::Check {
            source: GraphSource { graph, payload },
            inputs: InputFiles { input },
            ..
        } => check(&graph, payload.as_deref(), &input),
        Command::Eval {
            source: GraphSource { graph, payload },
            inputs: InputFiles { input },
            engine,
            dtype,
            detect_anomaly,
            ..
        } => eval_command(
            &graph,
            payload.as_deref(),
            &input,
            select(engine, dtype_or(engine, dtype, DType::F64))?,
            AnomalyMode::detect_if(detect_anomaly),
        ),
        Command::Grad {
            source: GraphSource { graph, payload },
            inputs: InputFiles { input },
            seed,
            engine,
            dtype,
            detect_anomaly,
            ..
        } => grad_command(
            &graph,
            (payload.as_deref(), &input, &seed),
            select(engine, dtype_or(engine, dtype, DType::F64))?,
            AnomalyMode::detect_if(detect_anomaly),
        ),
        Command::Conform(args) => crate::conform::run(&args),
        Command::Lower {
            source: GraphSource { graph, payload },
            ..
        } => lower(&graph, payload.as_deref()),
        Command::Train(args) => crate::train::run(&args),
        Command::Sample(args) => crate::train_gpt::sample(&args),
        Command::Predict(args) => crate::predict::run(&args),
        Command::Convert {
            source: GraphSource { graph, payload },
            dialect,
            output,
            payload_out,
        } => convert(
            &graph,
            payload.as_deref(),
            dialect,
            output.as_deref(),
            payload_out.as_deref(),
        ),
        Command::Import {
            model,
            output,
            payload,
            dialect,
            bind,
            input_shape,
        } => crate::import::run(
            &model,
            &output,
            payload.as_deref(),
            dialect,
            &bind,
            &input_shape,
        ),
        Command::ExportTorch {
            graph,
            payload,
            output,
            ..
        } => export_torch(&graph, payload.as_deref(), &output),
        Command::Dot { graph } => dot_command(&graph),
    }
}

/// `torchlean eval`: the outputs, one JSON line each (or the anomaly found).
fn eval_command(
    graph: &Path,
    payload: Option<&Path>,
    input: &[PathBuf],
    sel: Engine,
    mode: AnomalyMode,
) -> Result<Outcome, Stop> {
    let (g, _, p, x, _) = load_run_inputs(graph, payload, input, &[], Pass::Eval)?;
    let out = match sel {
        Engine::ReferenceF64 => eval_reference::<f64>(graph, &g, &p, &x, mode)?,
        Engine::ReferenceF32 => eval_reference::<f32>(graph, &g, &p, &x, mode)?,
        sel => {
            let exec = exec_graph_of_ir(&g, &p).map_err(|e| compiled_lines(graph, e))?;
            if mode.is_on() {
                with_engine!(sel, V => eval_detecting::<V>(graph, &g, &exec, &p, &x))?
            } else {
                // the IR graph is not needed once lowered
                drop(g);
                with_engine!(sel, V => eval::<V>(graph, &exec, &p, &x))?
            }
        }
    };
    let out = match out {
        Ok(out) => out,
        Err(anomaly) => return Ok(report_anomaly(graph, &anomaly)),
    };
    // one line per output, in output order
    for t in &out {
        out::line(t.to_json())?;
    }
    Ok(Outcome::Ok)
}

/// `torchlean grad`: the output and the gradients of the inputs and the payload, one JSON line
/// (or the anomaly found), from the payload, input and seed files given.
fn grad_command(
    graph: &Path,
    (payload, input, seed): (Option<&Path>, &[PathBuf], &[PathBuf]),
    sel: Engine,
    mode: AnomalyMode,
) -> Result<Outcome, Stop> {
    let (g, doc, p, x, seeds) = load_run_inputs(graph, payload, input, seed, Pass::Grad)?;
    let input_names: Vec<String> = (0..g.input_count()).map(|k| g.input_name(k)).collect();
    let r = if mode.is_on() {
        with_engine!(sel, V => run_grad_seeds_with::<V>(&g, &p, &x, &seeds, mode))
    } else {
        // the IR graph is not needed once lowered: free it before the tape is built
        let exec = exec_graph_of_ir(&g, &p).map_err(|e| compiled_lines(graph, e))?;
        drop(g);
        with_engine!(sel, V => run_grad_seeds_lowered::<V>(exec, &p, &x, &seeds))
    };
    let r = match r {
        Err(CompiledError::Anomaly { at, .. }) => return Ok(report_anomaly(graph, &at)),
        r => r.map_err(|e| compiled_lines(graph, e))?,
    };
    // payload gradients keyed as the file keys its nodes (September dialect: its ids)
    let grad_payload = doc.to_file_payload(&r.grad_payload).to_json();
    let mut line = serde_json::Map::new();
    if r.extra_outputs.is_empty() {
        line.insert("output".into(), r.output.to_json());
    } else {
        let outputs: Vec<serde_json::Value> = r.outputs().map(Tensor::to_json).collect();
        line.insert("outputs".into(), outputs.into());
    }
    if let [only] = r.grad_inputs.as_slice() {
        line.insert("grad_input".into(), only.to_json());
    } else {
        // several inputs: each gradient under its input's name
        let by_name: serde_json::Map<String, serde_json::Value> = input_names
            .into_iter()
            .zip(&r.grad_inputs)
            .map(|(name, g)| (name, g.to_json()))
            .collect();
        line.insert("grad_inputs".into(), by_name.into());
    }
    line.insert("grad_payload".into(), grad_payload);
    out::line(serde_json::Value::Object(line))?;
    Ok(Outcome::Ok)
}

/// `torchlean lower`: the lowered graph's text.
fn lower(graph: &Path, payload: Option<&Path>) -> Result<Outcome, Stop> {
    let (doc, case) = load::graph_doc_or_case(graph)?;
    within_budget(graph, &doc.graph, Pass::Grad)?;
    let p = match (payload, case) {
        (Some(pp), _) => with_inline(&doc, load::payload(Some(pp))?),
        (None, Some(c)) => c.payload,
        (None, None) => doc.payload.clone(),
    };
    let g = doc.graph;
    let exec = exec_graph_of_ir(&g, &p).map_err(|e| compiled_lines(graph, e))?;
    out::text(&lower_text(&exec))?;
    Ok(Outcome::Ok)
}

/// `torchlean dot`: the graph in Graphviz's language.
fn dot_command(graph: &Path) -> Result<Outcome, Stop> {
    let (g, _) = load::graph_or_case(graph)?;
    let problems = errors_of(check_shapes(&g));
    if !problems.is_empty() {
        return Err(diag_lines(graph, &problems).into());
    }
    out::text(&dot(&g))?;
    Ok(Outcome::Ok)
}

fn errors_of(d: Vec<Diagnostic>) -> Vec<Diagnostic> {
    d.into_iter().filter(Diagnostic::is_error).collect()
}

fn diag_lines(path: &Path, d: &[Diagnostic]) -> BadInput {
    BadInput(
        d.iter()
            .map(|d| format!("{}: {d}", path.display()))
            .collect(),
    )
}

fn compiled_lines(path: &Path, e: torchlean_compiled::CompiledError) -> BadInput {
    match e {
        torchlean_compiled::CompiledError::Ir(ir) => ir_lines(path, &ir),
        other => BadInput::at(path, &other),
    }
}

/// The graph's memory estimate for `pass` against the process's budget (`--max-memory`): one
/// line naming the node that takes it over, before anything is allocated.
pub(crate) fn within_budget(path: &Path, g: &Graph, pass: Pass) -> Result<(), BadInput> {
    let over = check_budget(g, Budget::process_default(), BUDGET_ELEM_BYTES, pass);
    if over.is_empty() {
        Ok(())
    } else {
        Err(diag_lines(path, &over))
    }
}

/// What a command runs on, and the file each part came from (a case file supplies the parts
/// not given on the command line), so that a problem is reported against the file it is in.
struct Loaded<'a> {
    /// The graph, and (September dialect) the file's node ids, which diagnostics name.
    doc: GraphDoc,
    graph_file: &'a Path,
    /// The payload, and its file (`None`: no payload was given, and none is checked). A
    /// September-dialect file's inline weights are part of it.
    payload: Option<(Payload, &'a Path)>,
    /// One per graph input, in input order (empty: none given).
    inputs: Vec<(Tensor<f64>, PathBuf)>,
    /// One per output, in output order (none: ones).
    seeds: Vec<(Tensor<f64>, &'a Path)>,
}

/// A payload given for a September-dialect file (keyed by the file's ids) with the file's inline
/// weights: an entry given replaces the inline one.
fn with_inline(doc: &GraphDoc, given: Payload) -> Payload {
    let mut p = doc.from_file_payload(&given);
    for (id, e) in &doc.payload.entries {
        p.entries.entry(*id).or_insert_with(|| e.clone());
    }
    p
}

/// Reads the graph (or case) file and the payload, input and seed files given.
fn load<'a>(
    graph: &'a Path,
    payload: Option<&'a Path>,
    input: &[PathBuf],
    seeds: &'a [PathBuf],
) -> Result<Loaded<'a>, BadInput> {
    let (doc, case) = load::graph_doc_or_case(graph)?;
    let payload = match (payload, &case) {
        (Some(pp), _) => Some((with_inline(&doc, load::payload(Some(pp))?), pp)),
        (None, Some(c)) => Some((c.payload.clone(), graph)),
        (None, None) if !doc.payload.entries.is_empty() => Some((doc.payload.clone(), graph)),
        (None, None) => None,
    };
    let inputs = match (input, &case) {
        ([], Some(c)) => c
            .inputs
            .iter()
            .map(|x| (x.clone(), graph.to_path_buf()))
            .collect(),
        (given, _) => input_files(graph, &doc.graph, given)?
            .into_iter()
            .map(|file| Ok((load::tensor(&file)?, file)))
            .collect::<Result<Vec<_>, BadInput>>()?,
    };
    let seeds = match (seeds, &case) {
        ([], Some(c)) => c.seed.clone().map(|s| (s, graph)).into_iter().collect(),
        (seeds, _) => seeds
            .iter()
            .map(|sp| Ok((load::tensor(sp)?, sp.as_path())))
            .collect::<Result<Vec<_>, BadInput>>()?,
    };
    Ok(Loaded {
        doc,
        graph_file: graph,
        payload,
        inputs,
        seeds,
    })
}

/// The file of each graph input, in input order, from the `--input` values given: all
/// `NAME=FILE` (NAME an input's name or node id), or all plain files in input order. Every
/// input missing, named twice or unknown is listed at once.
fn input_files(graph: &Path, g: &Graph, given: &[PathBuf]) -> Result<Vec<PathBuf>, BadInput> {
    if given.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = (0..g.input_count()).map(|k| g.input_name(k)).collect();
    let mut errors = Vec::new();
    let mut files: Vec<Option<PathBuf>> = vec![None; g.input_count()];
    let mut plain = Vec::new();
    for arg in given {
        match named_input(g, arg) {
            Some((k, _)) if files[k].is_some() => errors.push(format!(
                "{}: input `{}` is given twice (--input {})",
                graph.display(),
                names[k],
                arg.display()
            )),
            Some((k, file)) => files[k] = Some(file),
            None => {
                let text = arg.to_string_lossy();
                match text.split_once('=') {
                    Some((name, _)) if !arg.exists() => errors.push(format!(
                        "{}: --input {text}: the graph has no input `{name}` (its inputs: {})",
                        graph.display(),
                        names.join(", ")
                    )),
                    _ => plain.push(arg.clone()),
                }
            }
        }
    }
    let named = files.iter().any(Option::is_some);
    if named && !plain.is_empty() {
        errors.push(format!(
            "{}: give every --input as NAME=FILE or none (its inputs: {})",
            graph.display(),
            names.join(", ")
        ));
    } else if !named && errors.is_empty() {
        if plain.len() != g.input_count() {
            errors.push(format!(
                "{}: the graph has {} input(s) ({}), {} --input given",
                graph.display(),
                g.input_count(),
                names.join(", "),
                plain.len()
            ));
        }
        files = plain.into_iter().map(Some).collect();
    }
    let missing: Vec<&str> = files
        .iter()
        .zip(&names)
        .filter(|(f, _)| f.is_none())
        .map(|(_, n)| n.as_str())
        .collect();
    if errors.is_empty() && !missing.is_empty() {
        errors.push(format!(
            "{}: no --input for {} (one --input NAME=FILE per input)",
            graph.display(),
            missing.join(", ")
        ));
    }
    if errors.is_empty() {
        Ok(files.into_iter().flatten().collect())
    } else {
        Err(BadInput(errors))
    }
}

/// `NAME=FILE` naming an input of `g`: its position and the file.
fn named_input(g: &Graph, arg: &Path) -> Option<(usize, PathBuf)> {
    let text = arg.to_str()?;
    let (name, file) = text.split_once('=')?;
    g.find_input(name).map(|k| (k, PathBuf::from(file)))
}

/// The one validation of `check`, `eval` and `grad`: the graph's shapes, the payload against
/// the graph, the input against the input node and each seed against its output node, each
/// line naming the file the problem is in (and a September-dialect file's own node ids). Errors,
/// then warnings.
fn validate(l: &Loaded<'_>, pass: Pass) -> (Vec<String>, Vec<String>) {
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    let mut file_diags = |path: &Path, diags: Vec<Diagnostic>| {
        for d in l.doc.in_file_terms(diags) {
            let line = format!("{}: {d}", path.display());
            if d.is_error() {
                errors.push(line);
            } else {
                warnings.push(line);
            }
        }
    };
    let g = &l.doc.graph;
    file_diags(l.graph_file, check_shapes(g));
    file_diags(
        l.graph_file,
        check_budget(g, Budget::process_default(), BUDGET_ELEM_BYTES, pass),
    );
    if let Some((p, pp)) = &l.payload {
        file_diags(pp, check_payload(g, p));
    }
    let mut against = |what: &str, t: &Tensor<f64>, file: &Path, node: &str, id: usize| {
        if let Some(n) = g.node(id) {
            if t.shape() != &n.shape {
                errors.push(format!(
                    "{}: the {what} has shape {}, but graph {node} node {} declares {}",
                    file.display(),
                    t.shape(),
                    l.doc.file_id(id),
                    n.shape
                ));
            }
        }
    };
    for ((x, ip), id) in l.inputs.iter().zip(g.inputs()) {
        against("input", x, ip, "input", id);
    }
    if !l.seeds.is_empty() && l.seeds.len() != g.output_count() {
        let count = torchlean_compiled::CompiledError::SeedCount {
            outputs: g.output_count(),
            seeds: l.seeds.len(),
        };
        errors.push(format!("{}: {count}", l.graph_file.display()));
    } else {
        for ((s, sp), out) in l.seeds.iter().zip(g.outputs()) {
            // a seed is its output's cotangent: the output node's shape
            against("seed", s, sp, "output", out);
        }
    }
    (errors, warnings)
}

fn check(graph: &Path, payload: Option<&Path>, input: &[PathBuf]) -> Result<Outcome, Stop> {
    let loaded = load(graph, payload, input, &[])?;
    // `check` answers for every command: the estimate with gradients
    let (errors, warnings) = validate(&loaded, Pass::Grad);
    for w in &warnings {
        out::error_line(w);
    }
    if !errors.is_empty() {
        return Err(BadInput(errors).into());
    }
    let g = &loaded.doc.graph;
    if loaded.doc.dialect == Dialect::September2026 {
        out::line(format_args!(
            "{}: ok ({} nodes, TorchLean September 2026 dialect; {} IR nodes)",
            graph.display(),
            loaded.doc.file_kinds.len(),
            g.len(),
        ))?;
        return Ok(Outcome::Ok);
    }
    out::line(format_args!(
        "{}: ok ({} nodes{})",
        graph.display(),
        g.len(),
        if g.uses_extensions() {
            ", uses TorchLean-rs extensions"
        } else {
            ""
        }
    ))?;
    Ok(Outcome::Ok)
}

/// `export-torch`: the graph validated as `eval` validates it, the module and its weights
/// (`NAME.safetensors` beside `output`) written atomically, the weights first.
fn export_torch(graph: &Path, payload: Option<&Path>, output: &Path) -> Result<Outcome, Stop> {
    if graph.extension().is_some_and(|e| e == "safetensors") {
        return export_checkpoint(graph, payload, output);
    }
    let mut loaded = load(graph, payload, &[], &[])?;
    loaded
        .payload
        .get_or_insert_with(|| (Payload::new(), graph));
    let (errors, _) = validate(&loaded, Pass::Eval);
    if !errors.is_empty() {
        return Err(BadInput(errors).into());
    }
    let (weights_path, weights_name) = weights_beside(output)?;
    let p = loaded.payload.map(|(p, _)| p).unwrap_or_default();
    let module = crate::export_torch::emit(&loaded.doc.graph, &p, &weights_name)
        .map_err(|d| diag_lines(graph, &d))?;
    let bytes = torchlean_ir::safetensors_bytes(
        module
            .weights
            .iter()
            .map(|t| (t.key.as_str(), t.shape.as_slice(), &t.data)),
        &Default::default(),
    )
    .map_err(|e| BadInput::at(&weights_path, &e))?;
    write_file(&weights_path, &bytes)?;
    write_file(output, module.source.as_bytes())?;
    out::line(format_args!(
        "{}: wrote {} and {}",
        graph.display(),
        output.display(),
        weights_path.display()
    ))?;
    Ok(Outcome::Ok)
}

/// Where a module's weights go: `NAME.safetensors` beside `NAME.py`, and that file name; the
/// directory is made if missing.
fn weights_beside(output: &Path) -> Result<(PathBuf, String), BadInput> {
    if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| BadInput::at_doing(dir, "cannot create the directory", &e))?;
    }
    let weights_path = output.with_extension("safetensors");
    if weights_path == output {
        return Err(BadInput::one(format!(
            "{}: the module's weights go to NAME.safetensors beside it: name the module NAME.py",
            output.display()
        )));
    }
    let weights_name = weights_path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| BadInput::one(format!("{}: not a file name in UTF-8", output.display())))?
        .to_string();
    Ok((weights_path, weights_name))
}

/// `torchlean export-torch CHECKPOINT -o NAME.py`: a `train mlp|cnn` checkpoint as a module
/// that takes raw rows ([`crate::export_torch::checkpoint_module`]), its weights the
/// checkpoint's model file copied to `NAME.safetensors`.
fn export_checkpoint(
    checkpoint: &Path,
    payload: Option<&Path>,
    output: &Path,
) -> Result<Outcome, Stop> {
    if payload.is_some() {
        return Err(BadInput::one(format!(
            "{}: a checkpoint holds its weights: no --payload",
            checkpoint.display()
        ))
        .into());
    }
    let saved =
        torchlean_train::predict::SavedClassifier::load(checkpoint).map_err(crate::train::bad)?;
    let (weights_path, weights_name) = weights_beside(output)?;
    let source = checkpoint.display().to_string();
    let module = crate::export_torch::checkpoint_module(&saved, &source, &weights_name)
        .ok_or_else(|| {
            BadInput::one(format!(
                "{source}: an imported model's module is the one it was exported from; its parameters are under their ONNX names in the checkpoint"
            ))
        })?;
    let bytes =
        std::fs::read(checkpoint).map_err(|e| BadInput::at_doing(checkpoint, "cannot read", &e))?;
    write_file(&weights_path, &bytes)?;
    write_file(output, module.as_bytes())?;
    out::line(format_args!(
        "{source}: wrote {} and {}",
        output.display(),
        weights_path.display()
    ))?;
    Ok(Outcome::Ok)
}

/// Graph, the file's terms for it, payload, inputs (in input order) and seeds.
type RunInputs = (Graph, GraphDoc, Payload, Vec<Tensor<f64>>, Vec<Tensor<f64>>);

/// The graph, payload, input and seeds of `eval`/`grad`, from the files given, falling back to
/// a case file's own members, validated by [`validate`] (so a problem in the payload, input or
/// seed file names that file).
fn load_run_inputs(
    graph: &Path,
    payload: Option<&Path>,
    input: &[PathBuf],
    seeds: &[PathBuf],
    pass: Pass,
) -> Result<RunInputs, BadInput> {
    let mut loaded = load(graph, payload, input, seeds)?;
    // no payload given: an empty one, so a graph that needs weights is told what is missing
    loaded
        .payload
        .get_or_insert_with(|| (Payload::new(), graph));
    let (mut errors, _) = validate(&loaded, pass);
    if loaded.inputs.is_empty() {
        errors.push(format!(
            "{}: --input is required for a graph file",
            graph.display()
        ));
        return Err(BadInput(errors));
    }
    let x = loaded.inputs.into_iter().map(|(x, _)| x).collect();
    if !errors.is_empty() {
        return Err(BadInput(errors));
    }
    let p = loaded.payload.map(|(p, _)| p).unwrap_or_default();
    let mut doc = loaded.doc;
    let g = std::mem::replace(&mut doc.graph, Graph::new(0, 0, Vec::new()));
    let seeds = loaded.seeds.into_iter().map(|(s, _)| s).collect();
    Ok((g, doc, p, x, seeds))
}

/// Anomaly mode's finding: one line on stderr, exit 1.
fn report_anomaly(path: &Path, anomaly: &IrAnomaly) -> Outcome {
    out::error_line(format_args!("{}: {anomaly}", path.display()));
    Outcome::Failed
}

/// An evaluation's outputs (in output order), or where anomaly mode found a NaN or an
/// infinity originate.
type Evaluated = Result<Vec<Tensor<f64>>, Box<IrAnomaly>>;

/// `Ok(Err(anomaly))` for an anomaly, the error's lines for anything else.
fn split_anomaly(path: &Path, e: CompiledError) -> Result<Evaluated, BadInput> {
    match e {
        CompiledError::Anomaly { at, .. } => Ok(Err(at)),
        other => Err(compiled_lines(path, other)),
    }
}

/// The reference engine evaluates with the IR denotation itself (`denote`, or `denote_all` in
/// anomaly mode; both enforce the domain of raw `log`); other engines run the lowered graph.
fn eval_reference<A: torchlean_spec::Scalar>(
    path: &Path,
    g: &Graph,
    p: &Payload,
    x: &[Tensor<f64>],
    mode: AnomalyMode,
) -> Result<Evaluated, BadInput> {
    let problems = errors_of(check_shapes(g));
    if !problems.is_empty() {
        return Err(diag_lines(path, &problems));
    }
    let x = x
        .iter()
        .map(|x| x.convert::<A>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BadInput::at_doing(path, "input", &e))?;
    let out = if mode.is_on() {
        // every value kept, to find where a NaN or an infinity originates
        let mut values = torchlean_ir::denote_all(g, p, &x).map_err(|e| ir_lines(path, &e))?;
        if let Err(e) = check_denotation(g, &values) {
            return split_anomaly(path, e);
        }
        let mut picked = Vec::with_capacity(g.output_count());
        for o in g.outputs() {
            match values.get(o) {
                Some(v) => picked.push(v.clone()),
                None => {
                    return Err(BadInput::one(format!(
                        "{}: output {o} is not a node",
                        path.display()
                    )))
                }
            }
        }
        values.clear();
        picked
    } else {
        // only live values
        torchlean_ir::denote_outputs(g, p, &x).map_err(|e| ir_lines(path, &e))?
    };
    out.iter()
        .map(|t| t.convert::<f64>())
        .collect::<Result<Vec<_>, _>>()
        .map(Ok)
        .map_err(|e| BadInput::at(path, &e))
}

/// Evaluates the lowered graph on engine `V`, keeping only live values.
fn eval<V: Kernels>(
    path: &Path,
    exec: &ExecGraph,
    p: &Payload,
    x: &[Tensor<f64>],
) -> Result<Evaluated, BadInput> {
    let inputs: Vec<V> = exec.inputs(x, p).map_err(|e| compiled_lines(path, e))?;
    let outs = if exec.extra_outputs.is_empty() {
        vec![exec
            .graph
            .eval_output(inputs, exec.output)
            .map_err(|e| compiled_lines(path, e))?]
    } else {
        // several outputs: every value kept, each output read from it
        let values = exec
            .graph
            .eval(inputs)
            .map_err(|e| compiled_lines(path, e))?;
        exec.outputs()
            .iter()
            .map(|&(pos, _)| values[pos].clone())
            .collect()
    };
    to_f64s(path, &outs)
}

/// Engine values in `f64`, as an evaluation's outputs.
fn to_f64s<V: Kernels>(path: &Path, vals: &[V]) -> Result<Evaluated, BadInput> {
    vals.iter()
        .map(|v| v.to_f64())
        .collect::<Result<Vec<_>, _>>()
        .map(Ok)
        .map_err(|e| BadInput::at(path, &e))
}

/// [`eval`] in anomaly mode: every value is kept (and checked in order), and a finding is
/// stated in terms of IR graph `g`.
fn eval_detecting<V: Kernels>(
    path: &Path,
    g: &Graph,
    exec: &ExecGraph,
    p: &Payload,
    x: &[Tensor<f64>],
) -> Result<Evaluated, BadInput> {
    let inputs: Vec<V> = exec.inputs(x, p).map_err(|e| compiled_lines(path, e))?;
    let values = match exec.graph.eval_with(inputs, AnomalyMode::Detect) {
        Ok(v) => v,
        Err(e) => return split_anomaly(path, exec.in_ir_terms(g, e)),
    };
    let outs: Vec<V> = exec
        .outputs()
        .iter()
        .map(|&(pos, _)| values[pos].clone())
        .collect();
    to_f64s(path, &outs)
}

/// `torchlean convert`: the graph (either dialect, with its weights) written in `dialect`; the
/// August dialect's weights go to `payload_out`.
fn convert(
    graph: &Path,
    payload: Option<&Path>,
    dialect: Dialect,
    output: Option<&Path>,
    payload_out: Option<&Path>,
) -> Result<Outcome, Stop> {
    let loaded = load(graph, payload, &[], &[])?;
    let (errors, warnings) = validate(&loaded, Pass::Eval);
    for w in &warnings {
        out::error_line(w);
    }
    if !errors.is_empty() {
        return Err(BadInput(errors).into());
    }
    let p = loaded.payload.map(|(p, _)| p).unwrap_or_default();
    let written = dialect
        .write(&loaded.doc.graph, &p)
        .map_err(|e| ir_lines(graph, &loaded.doc.error_in_file_terms(e)))?;
    if !written.payload.entries.is_empty() {
        let Some(po) = payload_out else {
            return Err(BadInput::one(format!(
                "{}: the graph has weights: --payload-out is required with --dialect {dialect} (it keeps them in a separate file)",
                graph.display()
            ))
            .into());
        };
        let bytes = if po.extension().is_some_and(|x| x == "safetensors") {
            written
                .payload
                .to_safetensors()
                .map_err(|e| ir_lines(po, &e))?
        } else {
            written.payload.to_json().to_string().into_bytes()
        };
        write_file(po, &bytes)?;
    }
    let text = written.graph.to_string();
    match output {
        Some(o) => write_file(o, text.as_bytes())?,
        None => out::line(text)?,
    }
    Ok(Outcome::Ok)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BadInput> {
    torchlean_ir::write_atomically(path, bytes)
        .map_err(|e| BadInput::at_doing(path, "cannot write", &e))
}
