//! The subcommands.

use crate::args::{Cli, Command};
use crate::engine::{
    default_dtype, dtype_or, engine_name, select, with_engine, Selected, F32_TOLERANCE,
};
use crate::load::{self, ir_lines};
use crate::{out, BadInput, Outcome, Stop};
use serde_json::json;
use std::path::{Path, PathBuf};
use torchlean_compiled::{
    check_denotation, exec_graph_of_ir, lower_text, run_case, run_grad_lowered, run_grad_with,
    CaseOutcome, CompiledError, ExecGraph, IrAnomaly, BUDGET_ELEM_BYTES,
};
use torchlean_ir::{
    check_budget, check_payload, check_shapes, dot, shorten, Diagnostic, Graph, IrError, Payload,
};
use torchlean_runtime::{AnomalyMode, Kernels};
use torchlean_spec::{Budget, Pass, Tensor};

pub fn run(cli: Cli) -> Result<Outcome, Stop> {
    if let Some(b) = cli.command.max_memory() {
        Budget::set_process_default(b);
    }
    match cli.command {
        Command::Check {
            graph,
            payload,
            input,
            ..
        } => check(&graph, payload.as_deref(), input.as_deref()),
        Command::Eval {
            graph,
            payload,
            input,
            engine,
            dtype: d,
            detect_anomaly,
            ..
        } => {
            let sel = select(engine, dtype_or(engine, d, torchlean_ir::DType::F64))?;
            let (g, p, x, _) = load_run_inputs(
                &graph,
                payload.as_deref(),
                input.as_deref(),
                None,
                Pass::Eval,
            )?;
            let mode = AnomalyMode::detect_if(detect_anomaly);
            let out = match sel {
                Selected::ReferenceF64 => eval_reference::<f64>(&graph, &g, &p, &x, mode)?,
                Selected::ReferenceF32 => eval_reference::<f32>(&graph, &g, &p, &x, mode)?,
                sel => {
                    let exec = exec_graph_of_ir(&g, &p).map_err(|e| compiled_lines(&graph, e))?;
                    if mode.is_on() {
                        with_engine!(sel, V => eval_detecting::<V>(&graph, &g, &exec, &p, &x))?
                    } else {
                        // the IR graph is not needed once lowered
                        drop(g);
                        with_engine!(sel, V => eval::<V>(&graph, &exec, &p, &x))?
                    }
                }
            };
            let out = match out {
                Ok(out) => out,
                Err(anomaly) => return Ok(report_anomaly(&graph, &anomaly)),
            };
            out::line(out.to_json())?;
            Ok(Outcome::Ok)
        }
        Command::Grad {
            graph,
            payload,
            input,
            seed,
            engine,
            dtype: d,
            detect_anomaly,
            ..
        } => {
            let sel = select(engine, dtype_or(engine, d, torchlean_ir::DType::F64))?;
            let (g, p, x, seed) = load_run_inputs(
                &graph,
                payload.as_deref(),
                input.as_deref(),
                seed.as_deref(),
                Pass::Grad,
            )?;
            let mode = AnomalyMode::detect_if(detect_anomaly);
            let r = if mode.is_on() {
                with_engine!(sel, V => run_grad_with::<V>(&g, &p, &x, seed.as_ref(), mode))
            } else {
                // the IR graph is not needed once lowered: free it before the tape is built
                let exec = exec_graph_of_ir(&g, &p).map_err(|e| compiled_lines(&graph, e))?;
                drop(g);
                with_engine!(sel, V => run_grad_lowered::<V>(exec, &p, &x, seed.as_ref()))
            };
            let r = match r {
                Err(CompiledError::Anomaly { at, .. }) => return Ok(report_anomaly(&graph, &at)),
                r => r.map_err(|e| compiled_lines(&graph, e))?,
            };
            out::line(json!({
                "output": r.output.to_json(),
                "grad_input": r.grad_input.to_json(),
                "grad_payload": r.grad_payload.to_json(),
            }))?;
            Ok(Outcome::Ok)
        }
        Command::Conform {
            paths,
            engine,
            dtype: d,
            json,
            inject_fault,
            ..
        } => conform(
            &paths,
            engine,
            d.map(crate::engine::dtype),
            json,
            inject_fault.as_deref(),
        ),
        Command::Lower { graph, payload, .. } => {
            let (g, case) = load::graph_or_case(&graph)?;
            within_budget(&graph, &g, Pass::Grad)?;
            let p = match (payload.as_deref(), case) {
                (Some(pp), _) => load::payload(Some(pp))?,
                (None, Some(c)) => c.payload,
                (None, None) => Payload::new(),
            };
            let exec = exec_graph_of_ir(&g, &p).map_err(|e| compiled_lines(&graph, e))?;
            out::text(&lower_text(&exec))?;
            Ok(Outcome::Ok)
        }
        Command::Train(args) => crate::train::run(&args),
        Command::ExportTorch {
            graph,
            payload,
            output,
            ..
        } => export_torch(&graph, payload.as_deref(), &output),
        Command::Dot { graph } => {
            let (g, _) = load::graph_or_case(&graph)?;
            let problems = errors_of(check_shapes(&g));
            if !problems.is_empty() {
                return Err(diag_lines(&graph, &problems).into());
            }
            out::text(&dot(&g))?;
            Ok(Outcome::Ok)
        }
    }
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
        other => BadInput::one(format!("{}: {other}", path.display())),
    }
}

/// The graph's memory estimate for `pass` against the process's budget (`--max-memory`): one
/// line naming the node that takes it over, before anything is allocated.
fn within_budget(path: &Path, g: &Graph, pass: Pass) -> Result<(), BadInput> {
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
    graph: Graph,
    graph_file: &'a Path,
    /// The payload, and its file (`None`: no payload was given, and none is checked).
    payload: Option<(Payload, &'a Path)>,
    input: Option<(Tensor<f64>, &'a Path)>,
    seed: Option<(Tensor<f64>, &'a Path)>,
}

/// Reads the graph (or case) file and the payload, input and seed files given.
fn load<'a>(
    graph: &'a Path,
    payload: Option<&'a Path>,
    input: Option<&'a Path>,
    seed: Option<&'a Path>,
) -> Result<Loaded<'a>, BadInput> {
    let (g, case) = load::graph_or_case(graph)?;
    let payload = match (payload, &case) {
        (Some(pp), _) => Some((load::payload(Some(pp))?, pp)),
        (None, Some(c)) => Some((c.payload.clone(), graph)),
        (None, None) => None,
    };
    let input = match (input, &case) {
        (Some(ip), _) => Some((load::tensor(ip)?, ip)),
        (None, Some(c)) => Some((c.input.clone(), graph)),
        (None, None) => None,
    };
    let seed = match (seed, &case) {
        (Some(sp), _) => Some((load::tensor(sp)?, sp)),
        (None, Some(c)) => c.seed.clone().map(|s| (s, graph)),
        (None, None) => None,
    };
    Ok(Loaded {
        graph: g,
        graph_file: graph,
        payload,
        input,
        seed,
    })
}

/// The one validation of `check`, `eval` and `grad`: the graph's shapes, the payload against
/// the graph, the input against the input node and the seed against the output node, each
/// line naming the file the problem is in. Errors, then warnings.
fn validate(l: &Loaded<'_>, pass: Pass) -> (Vec<String>, Vec<String>) {
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    let mut file_diags = |path: &Path, diags: Vec<Diagnostic>| {
        for d in diags {
            let line = format!("{}: {d}", path.display());
            if d.is_error() {
                errors.push(line);
            } else {
                warnings.push(line);
            }
        }
    };
    let g = &l.graph;
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
                    "{}: the {what} has shape {}, but graph {node} node {id} declares {}",
                    file.display(),
                    t.shape(),
                    n.shape
                ));
            }
        }
    };
    if let Some((x, ip)) = &l.input {
        against("input", x, ip, "input", g.input_id);
    }
    if let Some((s, sp)) = &l.seed {
        // the seed is the output's cotangent: the output node's shape
        against("seed", s, sp, "output", g.output_id);
    }
    (errors, warnings)
}

fn check(graph: &Path, payload: Option<&Path>, input: Option<&Path>) -> Result<Outcome, Stop> {
    let loaded = load(graph, payload, input, None)?;
    // `check` answers for every command: the estimate with gradients
    let (errors, warnings) = validate(&loaded, Pass::Grad);
    for w in &warnings {
        out::error_line(w);
    }
    if !errors.is_empty() {
        return Err(BadInput(errors).into());
    }
    let g = &loaded.graph;
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
    let mut loaded = load(graph, payload, None, None)?;
    loaded
        .payload
        .get_or_insert_with(|| (Payload::new(), graph));
    let (errors, _) = validate(&loaded, Pass::Eval);
    if !errors.is_empty() {
        return Err(BadInput(errors).into());
    }
    let weights_path = output.with_extension("safetensors");
    if weights_path == output {
        return Err(BadInput::one(format!(
            "{}: the module's weights go to NAME.safetensors beside it: name the module NAME.py",
            output.display()
        ))
        .into());
    }
    let weights_name = weights_path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| BadInput::one(format!("{}: not a file name in UTF-8", output.display())))?;
    let p = loaded.payload.map(|(p, _)| p).unwrap_or_default();
    let module = crate::export_torch::emit(&loaded.graph, &p, weights_name)
        .map_err(|d| diag_lines(graph, &d))?;
    let bytes = torchlean_ir::safetensors_bytes(
        module
            .weights
            .iter()
            .map(|t| (t.key.as_str(), t.shape.as_slice(), &t.data)),
        &Default::default(),
    )
    .map_err(|e| BadInput::one(format!("{}: {e}", weights_path.display())))?;
    let write = |path: &Path, bytes: &[u8]| {
        torchlean_ir::write_atomically(path, bytes)
            .map_err(|e| BadInput::one(format!("{}: cannot write: {e}", path.display())))
    };
    write(&weights_path, &bytes)?;
    write(output, module.source.as_bytes())?;
    out::line(format_args!(
        "{}: wrote {} and {}",
        graph.display(),
        output.display(),
        weights_path.display()
    ))?;
    Ok(Outcome::Ok)
}

/// Graph, payload, input and seed.
type RunInputs = (Graph, Payload, Tensor<f64>, Option<Tensor<f64>>);

/// The graph, payload, input and seed of `eval`/`grad`, from the files given, falling back to
/// a case file's own members, validated by [`validate`] (so a problem in the payload, input or
/// seed file names that file).
fn load_run_inputs(
    graph: &Path,
    payload: Option<&Path>,
    input: Option<&Path>,
    seed: Option<&Path>,
    pass: Pass,
) -> Result<RunInputs, BadInput> {
    let mut loaded = load(graph, payload, input, seed)?;
    // no payload given: an empty one, so a graph that needs weights is told what is missing
    loaded
        .payload
        .get_or_insert_with(|| (Payload::new(), graph));
    let (mut errors, _) = validate(&loaded, pass);
    let Some((x, _)) = loaded.input else {
        errors.push(format!(
            "{}: --input is required for a graph file",
            graph.display()
        ));
        return Err(BadInput(errors));
    };
    if !errors.is_empty() {
        return Err(BadInput(errors));
    }
    let p = loaded.payload.map(|(p, _)| p).unwrap_or_default();
    Ok((loaded.graph, p, x, loaded.seed.map(|(s, _)| s)))
}

/// Anomaly mode's finding: one line on stderr, exit 1.
fn report_anomaly(path: &Path, anomaly: &IrAnomaly) -> Outcome {
    out::error_line(format_args!("{}: {anomaly}", path.display()));
    Outcome::Failed
}

/// An evaluation's output, or where anomaly mode found a NaN or an infinity originate.
type Evaluated = Result<Tensor<f64>, Box<IrAnomaly>>;

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
    x: &Tensor<f64>,
    mode: AnomalyMode,
) -> Result<Evaluated, BadInput> {
    let problems = errors_of(check_shapes(g));
    if !problems.is_empty() {
        return Err(diag_lines(path, &problems));
    }
    let x = x
        .convert::<A>()
        .map_err(|e| BadInput::one(format!("{}: input: {e}", path.display())))?;
    let out = if mode.is_on() {
        // every value kept, to find where a NaN or an infinity originates
        let mut values = torchlean_ir::denote_all(g, p, &x).map_err(|e| ir_lines(path, &e))?;
        if let Err(e) = check_denotation(g, &values) {
            return split_anomaly(path, e);
        }
        if g.output_id >= values.len() {
            return Err(BadInput::one(format!(
                "{}: output_id {} is not a node",
                path.display(),
                g.output_id
            )));
        }
        values.swap_remove(g.output_id)
    } else {
        // only live values
        torchlean_ir::denote(g, p, &x).map_err(|e| ir_lines(path, &e))?
    };
    out.convert::<f64>()
        .map(Ok)
        .map_err(|e| BadInput::one(format!("{}: {e}", path.display())))
}

/// Evaluates the lowered graph on engine `V`, keeping only live values.
fn eval<V: Kernels>(
    path: &Path,
    exec: &ExecGraph,
    p: &Payload,
    x: &Tensor<f64>,
) -> Result<Evaluated, BadInput> {
    let inputs: Vec<V> = exec.inputs(x, p).map_err(|e| compiled_lines(path, e))?;
    let out = exec
        .graph
        .eval_output(inputs, exec.output)
        .map_err(|e| compiled_lines(path, e))?;
    out.to_f64()
        .map(Ok)
        .map_err(|e| BadInput::one(format!("{}: {e}", path.display())))
}

/// [`eval`] in anomaly mode: every value is kept (and checked in order), and a finding is
/// stated in terms of IR graph `g`.
fn eval_detecting<V: Kernels>(
    path: &Path,
    g: &Graph,
    exec: &ExecGraph,
    p: &Payload,
    x: &Tensor<f64>,
) -> Result<Evaluated, BadInput> {
    let inputs: Vec<V> = exec.inputs(x, p).map_err(|e| compiled_lines(path, e))?;
    let values = match exec.graph.eval_with(inputs, AnomalyMode::Detect) {
        Ok(v) => v,
        Err(e) => return split_anomaly(path, exec.in_ir_terms(g, e)),
    };
    values[exec.output]
        .to_f64()
        .map(Ok)
        .map_err(|e| BadInput::one(format!("{}: {e}", path.display())))
}

fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, BadInput> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| BadInput::one(format!("{}: cannot read directory: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// `name` is one of `torchlean_faults::fault::ALL`'s (`--inject-fault`).
pub fn check_fault_name(name: &str) -> Result<(), BadInput> {
    if torchlean_faults::fault::ALL.iter().any(|(_, n)| *n == name) {
        return Ok(());
    }
    let names: Vec<&str> = torchlean_faults::fault::ALL
        .iter()
        .map(|(_, n)| *n)
        .collect();
    Err(BadInput::one(format!(
        "unknown fault `{name}` (one of {})",
        names.join(", ")
    )))
}

/// Runs a case on the reference f64 engine with fault `name` injected.
fn run_faulty(
    case: &torchlean_ir::Case,
    name: &str,
) -> Result<CaseOutcome, torchlean_compiled::CompiledError> {
    use torchlean_faults::{fault, Faulty};
    type R = Tensor<f64>;
    match name {
        "flip-sign" => run_case::<Faulty<R, { fault::FLIP_SIGN }>>(case, None),
        "drop-contribution" => run_case::<Faulty<R, { fault::DROP_CONTRIBUTION }>>(case, None),
        "accumulation-order" => run_case::<Faulty<R, { fault::ACCUMULATION_ORDER }>>(case, None),
        "broadcast-reduction" => run_case::<Faulty<R, { fault::BROADCAST_REDUCTION }>>(case, None),
        _ => run_case::<Faulty<R, { fault::POOL_OFF_BY_ONE }>>(case, None),
    }
}

fn conform(
    paths: &[PathBuf],
    engine: crate::args::EngineArg,
    dtype_override: Option<torchlean_ir::DType>,
    as_json: bool,
    inject_fault: Option<&str>,
) -> Result<Outcome, Stop> {
    match inject_fault {
        Some(f) => check_fault_name(f)?,
        // the engine is available (a device, the emulation) before any case runs: one line
        None => {
            select(
                engine,
                dtype_override.unwrap_or(default_dtype(engine, torchlean_ir::DType::F64)),
            )?;
        }
    }
    let files = expand(paths)?;
    if files.is_empty() {
        return Err(BadInput::one("no case files found").into());
    }
    let (mut passed, mut failed, mut bad) = (0usize, 0usize, Vec::<String>::new());
    for f in &files {
        let case = match load::case(f) {
            Ok(c) => c,
            Err(BadInput(lines)) => {
                bad.extend(lines);
                continue;
            }
        };
        if let Err(BadInput(lines)) = within_budget(f, &case.graph, Pass::Grad) {
            bad.extend(lines);
            continue;
        }
        let d = dtype_override.unwrap_or(default_dtype(engine, case.dtype));
        let tol = (d == torchlean_ir::DType::F32).then_some(F32_TOLERANCE);
        let result: Result<CaseOutcome, IrError> = match inject_fault {
            Some(f) => run_faulty(&case, f),
            None => {
                let sel = select(engine, d)?;
                with_engine!(sel, V => run_case::<V>(&case, tol))
            }
        }
        .map_err(|e| match e {
            torchlean_compiled::CompiledError::Ir(ir) => ir,
            other => IrError::invalid(Diagnostic::error(other.to_string())),
        });
        match result {
            Err(e) => bad.extend(ir_lines(f, &e).0),
            Ok(outcome) => {
                let ok = outcome.pass();
                if ok {
                    passed += 1;
                } else {
                    failed += 1;
                }
                let label = match inject_fault {
                    Some(_) => "faulty-reference",
                    None => engine_name(engine),
                };
                report_case(&outcome, label, d.name(), as_json)?;
            }
        }
    }
    if as_json {
        out::line(
            json!({"summary": true, "passed": passed, "failed": failed, "errors": bad.len()}),
        )?;
    } else {
        out::line(format_args!("{passed} passed, {failed} failed"))?;
    }
    if !bad.is_empty() {
        return Err(BadInput(bad).into());
    }
    Ok(if failed > 0 {
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}

/// One case's line. The text names the worst error as a fraction of what the tolerance allows
/// (`of_tolerance`, at most 1 in a pass), not `max_rel`, which is huge wherever an expected
/// value is near zero even when the case passes; the JSON has both.
fn report_case(
    o: &CaseOutcome,
    engine: &str,
    dtype: &str,
    as_json: bool,
) -> Result<(), out::WriteError> {
    let w = o.worst();
    if as_json {
        let checks: Vec<serde_json::Value> = o
            .checks
            .iter()
            .map(|c| {
                json!({
                    "what": c.what,
                    "max_abs": finite_or_null(c.comparison.max_abs),
                    "max_rel": finite_or_null(c.comparison.max_rel),
                    "of_tolerance": finite_or_null(c.comparison.of_tolerance),
                    "pass": c.comparison.pass,
                })
            })
            .collect();
        out::line(json!({
            "case": o.name, "engine": engine, "dtype": dtype, "pass": o.pass(),
            "max_abs": finite_or_null(w.max_abs), "max_rel": finite_or_null(w.max_rel),
            "of_tolerance": finite_or_null(w.of_tolerance),
            "checks": checks,
        }))
    } else {
        let status = if o.pass() { "PASS" } else { "FAIL" };
        let mut line = format!(
            "{status}  {:<34} max_abs={:.3e}  of_tolerance={:.2e}",
            shorten(&o.name),
            w.max_abs,
            w.of_tolerance
        );
        for c in o.checks.iter().filter(|c| !c.comparison.pass) {
            line.push_str(&format!("  [{} off]", shorten(&c.what)));
        }
        out::line(line)
    }
}

fn finite_or_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        json!(x)
    } else {
        serde_json::Value::Null
    }
}
