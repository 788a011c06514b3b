//! The checker's report: one row per claim × engine × op kind, every failure with its
//! minimized counterexample, a closing `N passed, M failed` line.

use crate::claims::Claim;
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
        }
    }

    pub fn add(&mut self, m: Measure) {
        self.cases += 1;
        if !m.pass {
            self.failed += 1;
        }
        self.max_abs = self.max_abs.max(m.max_abs);
        self.max_rel = self.max_rel.max(m.max_rel);
    }

    pub fn pass(&self) -> bool {
        self.failed == 0
    }

    pub fn to_json(&self) -> Value {
        let num = |x: f64| if x.is_finite() { json!(x) } else { json!(null) };
        json!({
            "claim": self.claim.id(), "claim_text": self.claim.name(), "engine": self.engine,
            "kind": self.kind, "mode": self.mode.label(), "cases": self.cases, "failed": self.failed,
            "max_abs": num(self.max_abs), "max_rel": num(self.max_rel), "pass": self.pass(),
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

/// The `torchlean conform` flags that select an engine label's engine.
pub fn rerun_flags(engine: &str) -> String {
    if let Some(rest) = engine.strip_prefix("faulty-") {
        let fault = rest.strip_suffix("-f64").unwrap_or(rest);
        return format!(" --engine reference --dtype f64 --inject-fault {fault}");
    }
    match engine.split_once('-') {
        Some((e, d)) if d == "f32" || d == "f64" => format!(" --engine {e} --dtype {d}"),
        _ => String::new(),
    }
}

/// Everything a check found.
#[derive(Clone, Debug)]
pub struct Report {
    pub rows: Vec<Row>,
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

    /// The human-readable table, failures and closing line.
    pub fn text(&self) -> String {
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
                            "\n    counterexample: {}\n    rerun: torchlean conform {}{}",
                            p.display(),
                            p.display(),
                            rerun_flags(&f.engine)
                        ),
                        CaseFile::NotWritten(e) => format!("\n    counterexample not written: {e}"),
                    }
                );
            }
        }
        let _ = writeln!(
            out,
            "\n{} random graphs in {:.1} s ({:.1} graphs/s)",
            self.graphs,
            self.seconds,
            self.throughput()
        );
        let _ = writeln!(out, "{} passed, {} failed", self.passed(), self.failed());
        out
    }

    /// One JSON object per row, then a summary object.
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for r in &self.rows {
            let _ = writeln!(out, "{}", r.to_json());
        }
        let failures: Vec<Value> = self
            .failures
            .iter()
            .map(|f| json!({"claim": f.claim.id(), "engine": f.engine, "detail": f.detail.as_ref().map(|d| d.to_string()).unwrap_or_default(), "nodes": f.nodes, "case_file": f.case_file.path().map(|p| p.display().to_string()), "write_error": f.case_file.error().map(|e| e.to_string())}))
            .collect();
        let _ = writeln!(
            out,
            "{}",
            json!({"summary": true, "passed": self.passed(), "failed": self.failed(), "graphs": self.graphs, "seconds": self.seconds, "graphs_per_second": self.throughput(), "failures": failures})
        );
        out
    }
}
