//! The subcommands.

use crate::args::{Cli, Command, EngineArg};
use crate::engine::{dtype, engine_name, with_engine, F32_TOLERANCE};
use crate::load::{self, ir_lines};
use crate::{BadInput, Outcome};
use serde_json::json;
use std::path::{Path, PathBuf};
use torchlean_compiled::{
    check_denotation, exec_graph_of_ir, lower_text, run_case, run_grad_with, CaseOutcome,
    CompiledError, IrAnomaly,
};
use torchlean_ir::{check_payload, check_shapes, dot, Diagnostic, Graph, IrError, Payload};
use torchlean_runtime::{AnomalyMode, Kernels};
use torchlean_spec::Tensor;

pub fn run(cli: Cli) -> Result<Outcome, BadInput> {
    match cli.command {
        Command::Check {
            graph,
            payload,
            input,
        } => check(&graph, payload.as_deref(), input.as_deref()),
        Command::Eval {
            graph,
            payload,
            input,
            engine,
            dtype: d,
            detect_anomaly,
        } => {
            let (g, p, x, _) = load_run_inputs(&graph, payload.as_deref(), input.as_deref())?;
            let mode = AnomalyMode::detect_if(detect_anomaly);
            let out = match (engine, dtype(d)) {
                (EngineArg::Reference, torchlean_ir::DType::F64) => {
                    eval_reference::<f64>(&graph, &g, &p, &x, mode)?
                }
                (EngineArg::Reference, torchlean_ir::DType::F32) => {
                    eval_reference::<f32>(&graph, &g, &p, &x, mode)?
                }
                (EngineArg::Cpu, d) => {
                    with_engine!(EngineArg::Cpu, d, V => eval::<V>(&graph, &g, &p, &x, mode))?
                }
            };
            let out = match out {
                Ok(out) => out,
                Err(anomaly) => return Ok(report_anomaly(&graph, &anomaly)),
            };
            println!("{}", out.to_json());
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
        } => {
            let (g, p, x, case_seed) =
                load_run_inputs(&graph, payload.as_deref(), input.as_deref())?;
            let seed = match seed.as_deref() {
                Some(s) => Some(load::tensor(s)?),
                None => case_seed,
            };
            let mode = AnomalyMode::detect_if(detect_anomaly);
            let r = with_engine!(engine, dtype(d), V => run_grad_with::<V>(&g, &p, &x, seed.as_ref(), mode));
            let r = match r {
                Err(CompiledError::Anomaly { at, .. }) => return Ok(report_anomaly(&graph, &at)),
                r => r.map_err(|e| compiled_lines(&graph, e))?,
            };
            println!(
                "{}",
                json!({
                    "output": r.output.to_json(),
                    "grad_input": r.grad_input.to_json(),
                    "grad_payload": r.grad_payload.to_json(),
                })
            );
            Ok(Outcome::Ok)
        }
        Command::Conform {
            paths,
            engine,
            dtype: d,
            json,
            inject_fault,
        } => conform(&paths, engine, d.map(dtype), json, inject_fault.as_deref()),
        Command::Lower { graph, payload } => {
            let (g, case) = load::graph_or_case(&graph)?;
            let p = match (payload.as_deref(), case) {
                (Some(pp), _) => load::payload(Some(pp))?,
                (None, Some(c)) => c.payload,
                (None, None) => Payload::new(),
            };
            let exec = exec_graph_of_ir(&g, &p).map_err(|e| compiled_lines(&graph, e))?;
            print!("{}", lower_text(&exec));
            Ok(Outcome::Ok)
        }
        Command::Train(args) => crate::train::run(&args),
        Command::Dot { graph } => {
            let (g, _) = load::graph_or_case(&graph)?;
            let problems = errors_of(check_shapes(&g));
            if !problems.is_empty() {
                return Err(diag_lines(&graph, &problems));
            }
            print!("{}", dot(&g));
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

fn check(graph: &Path, payload: Option<&Path>, input: Option<&Path>) -> Result<Outcome, BadInput> {
    let (g, case) = load::graph_or_case(graph)?;
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
    file_diags(graph, check_shapes(&g));
    match (payload, &case) {
        (Some(pp), _) => {
            let p = load::payload(Some(pp))?;
            file_diags(pp, check_payload(&g, &p));
        }
        (None, Some(c)) => file_diags(graph, check_payload(&g, &c.payload)),
        (None, None) => {}
    }
    let x = match (input, &case) {
        (Some(ip), _) => Some((ip, load::tensor(ip)?)),
        (None, Some(c)) => Some((graph, c.input.clone())),
        (None, None) => None,
    };
    if let Some((ip, x)) = x {
        if let Some(n) = g.node(g.input_id) {
            if x.shape() != &n.shape {
                errors.push(format!(
                    "{}: the input has shape {}, but graph input node {} declares {}",
                    ip.display(),
                    x.shape(),
                    g.input_id,
                    n.shape
                ));
            }
        }
    }
    for w in &warnings {
        eprintln!("torchlean: {w}");
    }
    if !errors.is_empty() {
        return Err(BadInput(errors));
    }
    println!(
        "{}: ok ({} nodes{})",
        graph.display(),
        g.len(),
        if g.uses_extensions() {
            ", uses TorchLean-rs extensions"
        } else {
            ""
        }
    );
    Ok(Outcome::Ok)
}

/// Graph, payload, input and (a case file's) seed.
type RunInputs = (Graph, Payload, Tensor<f64>, Option<Tensor<f64>>);

/// The graph, payload and input of `eval`/`grad`: from the files given, falling back to a case
/// file's own members.
fn load_run_inputs(
    graph: &Path,
    payload: Option<&Path>,
    input: Option<&Path>,
) -> Result<RunInputs, BadInput> {
    let (g, case) = load::graph_or_case(graph)?;
    let p = match (payload, &case) {
        (Some(pp), _) => load::payload(Some(pp))?,
        (None, Some(c)) => c.payload.clone(),
        (None, None) => Payload::new(),
    };
    let x = match (input, &case) {
        (Some(ip), _) => load::tensor(ip)?,
        (None, Some(c)) => c.input.clone(),
        (None, None) => {
            return Err(BadInput::one(format!(
                "{}: --input is required for a graph file",
                graph.display()
            )))
        }
    };
    Ok((g, p, x, case.and_then(|c| c.seed)))
}

/// Anomaly mode's finding: one line on stderr, exit 1.
fn report_anomaly(path: &Path, anomaly: &IrAnomaly) -> Outcome {
    eprintln!("torchlean: {}: {anomaly}", path.display());
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

/// The reference engine evaluates with the IR denotation itself (`denote_all`, which enforces
/// the domain of raw `log`); other engines run the lowered graph.
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
    let values = torchlean_ir::denote_all(g, p, &x).map_err(|e| ir_lines(path, &e))?;
    if mode.is_on() {
        if let Err(e) = check_denotation(g, &values) {
            return split_anomaly(path, e);
        }
    }
    let Some(out) = values.get(g.output_id) else {
        return Err(BadInput::one(format!(
            "{}: output_id {} is not a node",
            path.display(),
            g.output_id
        )));
    };
    out.convert::<f64>()
        .map(Ok)
        .map_err(|e| BadInput::one(format!("{}: {e}", path.display())))
}

/// Evaluates the lowered graph on engine `V`.
fn eval<V: Kernels>(
    path: &Path,
    g: &Graph,
    p: &Payload,
    x: &Tensor<f64>,
    mode: AnomalyMode,
) -> Result<Evaluated, BadInput> {
    let exec = exec_graph_of_ir(g, p).map_err(|e| compiled_lines(path, e))?;
    let inputs: Vec<V> = exec.inputs(x, p).map_err(|e| compiled_lines(path, e))?;
    let values = match exec.graph.eval_with(inputs, mode) {
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
) -> Result<Outcome, BadInput> {
    if let Some(f) = inject_fault {
        check_fault_name(f)?;
    }
    let files = expand(paths)?;
    if files.is_empty() {
        return Err(BadInput::one("no case files found"));
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
        let d = dtype_override.unwrap_or(case.dtype);
        let tol = (d == torchlean_ir::DType::F32).then_some(F32_TOLERANCE);
        let result: Result<CaseOutcome, IrError> = match inject_fault {
            Some(f) => run_faulty(&case, f),
            None => with_engine!(engine, d, V => run_case::<V>(&case, tol)),
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
                report_case(&outcome, label, d.name(), as_json);
            }
        }
    }
    if as_json {
        println!(
            "{}",
            json!({"summary": true, "passed": passed, "failed": failed, "errors": bad.len()})
        );
    } else {
        println!("{passed} passed, {failed} failed");
    }
    if !bad.is_empty() {
        return Err(BadInput(bad));
    }
    Ok(if failed > 0 {
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}

fn report_case(o: &CaseOutcome, engine: &str, dtype: &str, as_json: bool) {
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
                    "pass": c.comparison.pass,
                })
            })
            .collect();
        println!(
            "{}",
            json!({
                "case": o.name, "engine": engine, "dtype": dtype, "pass": o.pass(),
                "max_abs": finite_or_null(w.max_abs), "max_rel": finite_or_null(w.max_rel),
                "checks": checks,
            })
        );
    } else {
        let status = if o.pass() { "PASS" } else { "FAIL" };
        let mut line = format!(
            "{status}  {:<34} max_abs={:.3e}  max_rel={:.3e}",
            o.name, w.max_abs, w.max_rel
        );
        for c in o.checks.iter().filter(|c| !c.comparison.pass) {
            line.push_str(&format!("  [{} off]", c.what));
        }
        println!("{line}");
    }
}

fn finite_or_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        json!(x)
    } else {
        serde_json::Value::Null
    }
}
