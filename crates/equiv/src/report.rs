//! The checker's report. Its default view ([`Report::text`]) is one line per claim (graphs,
//! kinds and `(kind, regime)` pairs covered, the worst error against its tolerance, the
//! verdict), the pairs no graph covered, every failure with its minimized counterexample and a
//! closing `N passed, M failed` line (claims). [`Report::verbose_text`] adds the table of
//! rows (claim × engine × op kind); [`Report::json_lines`] is all of it, machine-readable.

use crate::claims::Claim;
use crate::counterexample::Counterexample;
use crate::error::EquivError;
use crate::measure::{Measure, Mode};
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One row of the table.
#[derive(Clone, Debug)]
pub struct Row {
    pub claim: Claim,
    pub engine: String,
    pub kind: &'static str,
    pub mode: Mode,
    /// Observations aggregated (cases, or nodes for node-by-node claims).
    pub cases: usize,
    pub failed: usize,
    pub max_abs: f64,
    pub max_rel: f64,
    /// The worst error as a fraction of what the mode allows ([`Measure::of_tolerance`]).
    pub of_tolerance: f64,
}

impl Row {
    pub fn new(claim: Claim, engine: &str, kind: &'static str, mode: Mode) -> Self {
        Row {
            claim,
            engine: engine.to_string(),
            kind,
            mode,
            cases: 0,
            failed: 0,
            max_abs: 0.0,
            max_rel: 0.0,
            of_tolerance: 0.0,
        }
    }

    pub fn add(&mut self, m: Measure) {
        self.cases += 1;
        if !m.pass {
            self.failed += 1;
        }
        self.max_abs = self.max_abs.max(m.max_abs);
        self.max_rel = self.max_rel.max(m.max_rel);
        self.of_tolerance = self.of_tolerance.max(m.of_tolerance);
    }

    pub fn pass(&self) -> bool {
        self.failed == 0
    }

    pub fn to_json(&self) -> Value {
        let num = |x: f64| if x.is_finite() { json!(x) } else { json!(null) };
        json!({
            "claim": self.claim.id(), "claim_text": self.claim.name(), "engine": self.engine,
            "kind": self.kind, "mode": self.mode.label(), "cases": self.cases, "failed": self.failed,
            "max_abs": num(self.max_abs), "max_rel": num(self.max_rel),
            "of_tolerance": num(self.of_tolerance), "pass": self.pass(),
        })
    }
}

/// What became of a failure's counterexample file.
#[derive(Clone, Debug)]
pub enum CaseFile {
    /// No output directory was given.
    NotRequested,
    /// Written here.
    Written(PathBuf),
    /// Writing it failed (typically [`EquivError::Io`]).
    NotWritten(Arc<EquivError>),
}

impl CaseFile {
    /// The written file's path.
    pub fn path(&self) -> Option<&Path> {
        match self {
            CaseFile::Written(p) => Some(p),
            _ => None,
        }
    }

    /// Why the file could not be written.
    pub fn error(&self) -> Option<&EquivError> {
        match self {
            CaseFile::NotWritten(e) => Some(e),
            _ => None,
        }
    }
}

/// A failing claim, shrunk.
#[derive(Clone, Debug)]
pub struct Failure {
    pub claim: Claim,
    pub engine: String,
    /// Why the minimized case fails (shown with `Display` in the report).
    pub detail: Option<Arc<EquivError>>,
    /// Nodes in the minimized graph.
    pub nodes: usize,
    /// The minimized counterexample as a `torchlean.case.v1` file.
    pub case_file: CaseFile,
}

/// One claim's line: what it covered, its worst error, its verdict.
#[derive(Clone, Debug)]
pub struct ClaimSummary {
    pub claim: Claim,
    /// Random graphs the claim was observed on (fixed cases aside).
    pub graphs: usize,
    /// Kinds of the descriptor table among its rows.
    pub kinds: usize,
    /// `(kind, regime)` pairs covered by its graphs.
    pub regimes: usize,
    /// Engines it was observed on.
    pub engines: Vec<String>,
    pub rows: usize,
    pub failed_rows: usize,
    /// The row with the largest error relative to what its mode allows.
    pub worst: Option<Worst>,
}

/// A claim's worst row: its error as a fraction of the tolerance (0 for a bitwise or exact
/// row that passed, infinite for one that failed, above 1 for a tolerance row that failed).
#[derive(Clone, Debug)]
pub struct Worst {
    pub engine: String,
    pub kind: &'static str,
    pub mode: Mode,
    pub max_rel: f64,
    pub ratio: f64,
}

impl Worst {
    fn of(r: &Row) -> Worst {
        let ratio = if r.pass() || r.of_tolerance > 1.0 {
            r.of_tolerance
        } else {
            f64::INFINITY
        };
        Worst {
            engine: r.engine.clone(),
            kind: r.kind,
            mode: r.mode,
            max_rel: r.max_rel,
            ratio,
        }
    }

    /// `3.1e-7 of rel ≤ 1e-5 (cpu-f32, softmax)`, or the mode when nothing differed.
    fn text(&self) -> String {
        match self.mode {
            Mode::Tolerance(t) => format!(
                "{:.1e} of {:.0e} ({}, {})",
                self.max_rel, t, self.engine, self.kind
            ),
            Mode::Measured(t) if self.ratio.is_finite() => format!(
                "{:.2} of {:.0e} + measured ({}, {})",
                self.ratio, t, self.engine, self.kind
            ),
            _ if self.ratio == 0.0 => format!("0 ({})", self.mode.label()),
            _ => format!(
                "{} broken ({}, {})",
                self.mode.label(),
                self.engine,
                self.kind
            ),
        }
    }
}

impl ClaimSummary {
    pub fn pass(&self) -> bool {
        self.failed_rows == 0
    }

    /// The summary of `claim` from the report's rows, with its graph and regime counts.
    pub fn of(claim: Claim, rows: &[Row], graphs: usize, regimes: usize) -> ClaimSummary {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.claim == claim).collect();
        let mut engines: Vec<String> = mine.iter().map(|r| r.engine.clone()).collect();
        engines.sort();
        engines.dedup();
        let mut kinds: Vec<&str> = mine
            .iter()
            .map(|r| r.kind)
            .filter(|k| torchlean_spec::ops::desc::lookup(k).is_some())
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        let worst = mine
            .iter()
            .map(|r| Worst::of(r))
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio));
        ClaimSummary {
            claim,
            graphs,
            kinds: kinds.len(),
            regimes,
            engines,
            rows: mine.len(),
            failed_rows: mine.iter().filter(|r| !r.pass()).count(),
            worst,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "claim_summary": self.claim.id(), "claim_text": self.claim.name(),
            "graphs": self.graphs, "kinds": self.kinds, "regimes": self.regimes,
            "engines": self.engines, "rows": self.rows, "failed_rows": self.failed_rows,
            "worst": self.worst.as_ref().map(|w| json!({
                "engine": w.engine, "kind": w.kind, "mode": w.mode.label(),
                "max_rel": if w.max_rel.is_finite() { json!(w.max_rel) } else { json!(null) },
                "of_tolerance": if w.ratio.is_finite() { json!(w.ratio) } else { json!(null) },
            })),
            "pass": self.pass(),
        })
    }
}

/// Everything a check found.
#[derive(Clone, Debug)]
pub struct Report {
    pub rows: Vec<Row>,
    /// One per claim, in report order.
    pub claims: Vec<ClaimSummary>,
    /// The `(kind, regime)` pairs (labels) no graph of the run covered, and the dtypes no
    /// engine computed in.
    pub uncovered: Vec<String>,
    /// Kinds in the descriptor table and `(kind, regime)` pairs in the regime table.
    pub kinds_total: usize,
    pub regimes_total: usize,
    pub failures: Vec<Failure>,
    /// Random graphs checked.
    pub graphs: usize,
    pub seconds: f64,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.rows.iter().filter(|r| r.pass()).count()
    }

    pub fn failed(&self) -> usize {
        self.rows.len() - self.passed()
    }

    pub fn ok(&self) -> bool {
        self.failed() == 0 && self.failures.is_empty()
    }

    /// The counterexamples that could not be written (each also shown under its failure).
    pub fn write_errors(&self) -> impl Iterator<Item = &EquivError> {
        self.failures.iter().filter_map(|f| f.case_file.error())
    }

    /// Graphs checked per second.
    pub fn throughput(&self) -> f64 {
        self.graphs as f64 / self.seconds.max(1e-9)
    }

    /// Claims with at least one failing row, for each engine.
    pub fn failing_claims(&self) -> Vec<(Claim, String)> {
        let mut v: Vec<(Claim, String)> = self
            .rows
            .iter()
            .filter(|r| !r.pass())
            .map(|r| (r.claim, r.engine.clone()))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Claims whose every row passed.
    pub fn claims_passed(&self) -> usize {
        self.claims.iter().filter(|c| c.pass()).count()
    }

    /// The default view: one line per claim, what no graph covered, the failures, the closing
    /// line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<42} {:>6} {:>7} {:>8} {:>7}  {:<44} verdict",
            "claim", "graphs", "kinds", "regimes", "engines", "worst error of its tolerance"
        );
        for c in &self.claims {
            let _ = writeln!(
                out,
                "{:<42} {:>6} {:>7} {:>8} {:>7}  {:<44} {}",
                c.claim.name(),
                c.graphs,
                format!("{}/{}", c.kinds, self.kinds_total),
                format!("{}/{}", c.regimes, self.regimes_total),
                c.engines.len(),
                c.worst
                    .as_ref()
                    .map(Worst::text)
                    .unwrap_or_else(|| "-".into()),
                if c.pass() {
                    "pass".to_string()
                } else {
                    format!("FAIL ({} of {} rows)", c.failed_rows, c.rows)
                }
            );
        }
        if self.uncovered.is_empty() {
            let _ = writeln!(
                out,
                "\nevery kind and regime covered ({} kinds, {} (kind, regime) pairs)",
                self.kinds_total, self.regimes_total
            );
        } else {
            let _ = writeln!(out, "\nnot covered: {}", self.uncovered.join(", "));
        }
        self.failures_and_close(&mut out);
        out
    }

    /// [`Report::text`] after the table of every row (claim × engine × kind).
    pub fn verbose_text(&self) -> String {
        let mut out = self.rows_table();
        out.push('\n');
        out.push_str(&self.text());
        out
    }

    /// The table of rows.
    fn rows_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<42} {:<20} {:<24} {:>6} {:>10} {:>10}  {:<13} result",
            "claim", "engine", "kind", "cases", "max_abs", "max_rel", "mode"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "{:<42} {:<20} {:<24} {:>6} {:>10.2e} {:>10.2e}  {:<13} {}",
                r.claim.name(),
                r.engine,
                r.kind,
                r.cases,
                r.max_abs,
                r.max_rel,
                r.mode.label(),
                if r.pass() {
                    "pass".to_string()
                } else {
                    format!("FAIL ({} of {})", r.failed, r.cases)
                }
            );
        }
        out
    }

    /// The failures, the throughput and the closing line.
    fn failures_and_close(&self, out: &mut String) {
        if !self.failures.is_empty() {
            let _ = writeln!(out, "\nfailures (each shrunk to a minimal graph):");
            for f in &self.failures {
                let _ = writeln!(
                    out,
                    "  {} [{}]: {} nodes; {}{}",
                    f.claim.name(),
                    f.engine,
                    f.nodes,
                    f.detail.as_ref().map(|d| d.to_string()).unwrap_or_default(),
                    match &f.case_file {
                        CaseFile::NotRequested => String::new(),
                        CaseFile::Written(p) => format!(
                            "\n    counterexample: {}\n    rerun: {}",
                            p.display(),
                            Counterexample::rerun(p)
                        ),
                        CaseFile::NotWritten(e) => format!("\n    counterexample not written: {e}"),
                    }
                );
            }
        }
        let _ = writeln!(
            out,
            "\n{} random graphs in {:.1} s ({:.1} graphs/s); {} rows, {} failed",
            self.graphs,
            self.seconds,
            self.throughput(),
            self.rows.len(),
            self.failed()
        );
        let _ = writeln!(
            out,
            "{} passed, {} failed",
            self.claims_passed(),
            self.claims.len() - self.claims_passed()
        );
    }

    /// One JSON object per row, one per claim (`claim_summary`), then a summary object.
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for r in &self.rows {
            let _ = writeln!(out, "{}", r.to_json());
        }
        for c in &self.claims {
            let _ = writeln!(out, "{}", c.to_json());
        }
        let failures: Vec<Value> = self
            .failures
            .iter()
            .map(|f| json!({"claim": f.claim.id(), "engine": f.engine, "detail": f.detail.as_ref().map(|d| d.to_string()).unwrap_or_default(), "nodes": f.nodes, "case_file": f.case_file.path().map(|p| p.display().to_string()), "rerun": f.case_file.path().map(Counterexample::rerun), "write_error": f.case_file.error().map(|e| e.to_string())}))
            .collect();
        let _ = writeln!(
            out,
            "{}",
            json!({"summary": true, "passed": self.passed(), "failed": self.failed(), "claims_passed": self.claims_passed(), "claims_failed": self.claims.len() - self.claims_passed(), "uncovered": self.uncovered, "kinds": self.kinds_total, "regimes": self.regimes_total, "graphs": self.graphs, "seconds": self.seconds, "graphs_per_second": self.throughput(), "failures": failures})
        );
        out
    }
}
