//! `torchlean conform`: every case file through every differentiation path asked for
//! (`--paths`) in every dtype asked for (`--dtype`), one line (or JSON object) per run and a
//! summary that counts the runs per path, so a path that stops running shows.

use crate::args::{ConformArgs, PathArg};
use crate::commands::within_budget;
use crate::engine::{dtype, select, with_engine, EngineName};
use crate::load::{self, ir_lines};
use crate::{out, BadInput, Outcome, Stop};
use serde_json::json;
use std::path::{Path, PathBuf};
use torchlean_compiled::{run_case_on, tolerance_for, CaseOutcome, CompiledError, GradPath};
use torchlean_faults::{Fault, Faulty, WithFault};
use torchlean_ir::{shorten, Case, DType};
use torchlean_spec::Pass;

pub fn run(args: &ConformArgs) -> Result<Outcome, Stop> {
    let plan = Plan::of(args)?;
    let files = expand(&args.files)?;
    if files.is_empty() {
        return Err(BadInput::one("no case files found").into());
    }
    let mut tally = Tally::new(&plan.paths);
    let mut bad = Vec::<String>::new();
    for f in &files {
        let case = match load::case(f).and_then(|c| {
            within_budget(f, &c.graph, Pass::Grad)?;
            Ok(c)
        }) {
            Ok(c) => c,
            Err(BadInput(lines)) => {
                bad.extend(lines);
                continue;
            }
        };
        tally.cases += 1;
        'case: for d in plan.dtypes_for(&case) {
            for &path in &plan.paths {
                match plan.run(&case, path, d)? {
                    Err(e) => {
                        // a bad case is bad on every path: once is enough
                        bad.extend(error_lines(f, e, path, d));
                        break 'case;
                    }
                    Ok(outcome) => {
                        tally.count(path, d, outcome.pass());
                        report_run(&outcome, plan.label(), path, d, args.json)?;
                    }
                }
            }
        }
    }
    tally.report(&plan, bad.len(), args.json)?;
    if !bad.is_empty() {
        return Err(BadInput(bad).into());
    }
    Ok(if tally.failed() > 0 {
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}

/// What every case runs through: the engine (or the faulty reference), the paths, the dtypes.
struct Plan {
    engine: EngineName,
    paths: Vec<GradPath>,
    /// Empty: each case in its own dtype (f32 on the CUDA engines).
    dtypes: Vec<DType>,
    fault: Option<Fault>,
}

impl Plan {
    /// The flags read and checked: the engine is available at every dtype asked for (a
    /// device, the emulation) before any case runs, one line if not.
    fn of(args: &ConformArgs) -> Result<Self, BadInput> {
        let plan = Plan {
            engine: args.engine,
            paths: grad_paths(&args.paths),
            dtypes: unique(args.dtype.iter().map(|&d| dtype(d))),
            fault: args.inject_fault,
        };
        match plan.fault {
            Some(_) => {
                if plan.dtypes.contains(&DType::F32) {
                    return Err(BadInput::one(
                        "--inject-fault runs the reference engine in f64 only: --dtype f32 is not available with it",
                    ));
                }
            }
            None if plan.dtypes.is_empty() => {
                select(plan.engine, plan.engine.default_dtype(DType::F64))?;
            }
            None => {
                for &d in &plan.dtypes {
                    select(plan.engine, d)?;
                }
            }
        }
        Ok(plan)
    }

    /// The dtypes `case` runs in.
    fn dtypes_for(&self, case: &Case) -> Vec<DType> {
        match (self.fault, self.dtypes.is_empty()) {
            (Some(_), _) => vec![DType::F64],
            (None, true) => vec![self.engine.default_dtype(case.dtype)],
            (None, false) => self.dtypes.clone(),
        }
    }

    /// One run of `case`, compared at [`tolerance_for`] its dtype: the outer error is the
    /// engine not being available (checked up front, so not expected here), the inner one the
    /// case's.
    fn run(
        &self,
        case: &Case,
        path: GradPath,
        d: DType,
    ) -> Result<Result<CaseOutcome, CompiledError>, BadInput> {
        let tol = Some(tolerance_for(case, d));
        Ok(match self.fault {
            Some(fault) => fault.with(RunFaulty { case, path }),
            None => {
                let sel = select(self.engine, d)?;
                with_engine!(sel, V => run_case_on::<V>(path, case, tol))
            }
        })
    }

    fn label(&self) -> &'static str {
        match self.fault {
            Some(_) => "faulty-reference",
            None => self.engine.as_str(),
        }
    }
}

/// `--paths` as the library's paths, `all` expanded, each once, in the order given.
fn grad_paths(args: &[PathArg]) -> Vec<GradPath> {
    unique(args.iter().flat_map(|a| {
        match a {
            PathArg::Compiled => &[GradPath::Compiled][..],
            PathArg::Eager => &[GradPath::Eager][..],
            PathArg::Saved => &[GradPath::Saved][..],
            PathArg::All => &GradPath::ALL[..],
        }
        .iter()
        .copied()
    }))
}

/// The items in order, each only at its first occurrence.
fn unique<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// A case run on the reference f64 engine with a fault injected (at the case's tolerance).
struct RunFaulty<'a> {
    case: &'a Case,
    path: GradPath,
}

impl WithFault for RunFaulty<'_> {
    type Output = Result<CaseOutcome, CompiledError>;
    fn run<const F: u8>(self) -> Self::Output {
        type R = torchlean_spec::Tensor<f64>;
        run_case_on::<Faulty<R, F>>(self.path, self.case, None)
    }
}

/// A case that could not run: its IR diagnostics as they are (the same on every path), any
/// other error with the path and dtype it happened on.
fn error_lines(file: &Path, e: CompiledError, path: GradPath, d: DType) -> Vec<String> {
    match e {
        CompiledError::Ir(ir) => ir_lines(file, &ir).0,
        other => vec![format!(
            "{}: {} path, {}: {other}",
            file.display(),
            path.name(),
            d.name()
        )],
    }
}

fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, BadInput> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| BadInput::at_doing(p, "cannot read directory", &e))?
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

/// Passed and failed runs, per path and per dtype.
struct Tally {
    cases: usize,
    per_path: Vec<(GradPath, [usize; 2])>,
    per_dtype: Vec<(DType, [usize; 2])>,
}

impl Tally {
    fn new(paths: &[GradPath]) -> Self {
        Tally {
            cases: 0,
            per_path: paths.iter().map(|&p| (p, [0, 0])).collect(),
            per_dtype: Vec::new(),
        }
    }

    fn count(&mut self, path: GradPath, d: DType, pass: bool) {
        let k = usize::from(!pass);
        if let Some((_, n)) = self.per_path.iter_mut().find(|(p, _)| *p == path) {
            n[k] += 1;
        }
        match self.per_dtype.iter_mut().find(|(x, _)| *x == d) {
            Some((_, n)) => n[k] += 1,
            None => {
                let mut n = [0, 0];
                n[k] = 1;
                self.per_dtype.push((d, n));
            }
        }
    }

    fn passed(&self) -> usize {
        self.per_path.iter().map(|(_, n)| n[0]).sum()
    }

    fn failed(&self) -> usize {
        self.per_path.iter().map(|(_, n)| n[1]).sum()
    }

    /// The summary: `C cases × paths (…) × dtypes (…) = R runs: P passed, F failed`, or its
    /// JSON object with the counts per path and per dtype.
    fn report(&self, plan: &Plan, errors: usize, as_json: bool) -> Result<(), out::WriteError> {
        let (passed, failed) = (self.passed(), self.failed());
        let names = |v: Vec<&str>| v.join(", ");
        let paths = names(self.per_path.iter().map(|(p, _)| p.name()).collect());
        let dtypes = if plan.dtypes.is_empty() && plan.fault.is_none() {
            "each case's".to_string()
        } else {
            names(self.per_dtype.iter().map(|(d, _)| d.name()).collect())
        };
        if as_json {
            let counts = |n: &[usize; 2]| json!({"passed": n[0], "failed": n[1]});
            let per_path: serde_json::Map<String, serde_json::Value> = self
                .per_path
                .iter()
                .map(|(p, n)| (p.name().to_string(), counts(n)))
                .collect();
            let per_dtype: serde_json::Map<String, serde_json::Value> = self
                .per_dtype
                .iter()
                .map(|(d, n)| (d.name().to_string(), counts(n)))
                .collect();
            out::line(json!({
                "summary": true, "passed": passed, "failed": failed, "errors": errors,
                "cases": self.cases, "runs": passed + failed,
                "per_path": per_path, "per_dtype": per_dtype,
            }))
        } else {
            out::line(format_args!(
                "{} cases × paths ({paths}) × dtypes ({dtypes}) = {} runs: {passed} passed, {failed} failed",
                self.cases,
                passed + failed
            ))
        }
    }
}

/// One run's line. The text names the worst error as a fraction of what the tolerance allows
/// (`of_tolerance`, at most 1 in a pass), not `max_rel`, which is huge wherever an expected
/// value is near zero even when the case passes; the JSON has both. A failing check names its
/// worst element: index, computed and expected value.
fn report_run(
    o: &CaseOutcome,
    engine: &str,
    path: GradPath,
    d: DType,
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
                    "worst": c.worst.as_ref().map(|e| json!({
                        "index": e.index,
                        "got": finite_or_null(e.got),
                        "want": finite_or_null(e.want),
                    })),
                })
            })
            .collect();
        out::line(json!({
            "case": o.name, "engine": engine, "path": path.name(), "dtype": d.name(),
            "pass": o.pass(),
            "max_abs": finite_or_null(w.max_abs), "max_rel": finite_or_null(w.max_rel),
            "of_tolerance": finite_or_null(w.of_tolerance),
            "checks": checks,
        }))
    } else {
        let status = if o.pass() { "PASS" } else { "FAIL" };
        let mut line = format!(
            "{status}  {:<34} {:<8} {}  max_abs={:.3e}  of_tolerance={:.2e}",
            shorten(&o.name),
            path.name(),
            d.name(),
            w.max_abs,
            w.of_tolerance
        );
        for c in o.checks.iter().filter(|c| !c.comparison.pass) {
            let what = shorten(&c.what);
            line.push_str(&format!("  [{what} off]"));
            if let Some(e) = &c.worst {
                let index: Vec<String> = e.index.iter().map(usize::to_string).collect();
                line.push_str(&format!(
                    " at {what}[{}]: got {:e}, want {:e}",
                    index.join(", "),
                    e.got,
                    e.want
                ));
            }
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
