//! Counterexamples that reproduce: what a failure depended on is written into its case file
//! (the `checker` member of a `torchlean.case.v1` file, [`Provenance`]), and [`replay`] repeats
//! exactly that check on exactly that case — `cargo xtask check-equivalence --replay FILE`, the
//! rerun line every failure prints.
//!
//! The case carries the graph, the payload and the input (JSON numbers written to round-trip,
//! so bit for bit); the provenance carries the claim, the engine (its dtype with it), the
//! family of the run (float or algebraic), whether finite differences ran, the number of
//! threads the engines' kernels ran on, and the run it came from. Nothing else enters an
//! observation: cotangent seeds are fixed salts, and the Monte Carlo roundings of the
//! conditioning measurement are seeded per run.

use crate::claims::{Claim, Observation};
use crate::engines::EngineUnderTest;
use crate::error::EquivError;
use crate::gen::GenCase;
use crate::runner::{CheckConfig, Family};
use serde_json::{json, Map, Value};
use std::path::Path;
use torchlean_ir::Case;

/// What a counterexample's failure depended on.
#[derive(Clone, Debug, PartialEq)]
pub struct Provenance {
    pub claim: Claim,
    /// The engine label (`cpu-f32`, `faulty-flip-sign-f64`, …): engine and dtype.
    pub engine: String,
    pub family: Family,
    /// Whether the finite-difference checks ran.
    pub finite_differences: bool,
    /// The rayon threads the engines' kernels ran on.
    pub threads: usize,
    /// The run the case came from: its seed, its budget of float cases, and the case's index
    /// in its family before shrinking.
    pub seed: u64,
    pub cases: usize,
    pub case_index: usize,
    /// Why the minimized case failed, as the report said.
    pub detail: String,
}

/// The member of a case file that holds the provenance.
pub const MEMBER: &str = "checker";

impl Provenance {
    pub fn to_json(&self) -> Value {
        json!({
            "claim": self.claim.id(),
            "engine": self.engine,
            "family": self.family.name(),
            "finite_differences": self.finite_differences,
            "threads": self.threads,
            "run": {"seed": self.seed, "cases": self.cases, "case": self.case_index},
            "detail": self.detail,
        })
    }

    /// Reads the provenance of the case file at `path` from its top-level JSON object.
    pub fn from_json(path: &Path, doc: &Value) -> Result<Provenance, EquivError> {
        let bad = |field: &str, problem: String| EquivError::Provenance {
            path: path.to_path_buf(),
            field: format!("{MEMBER}{}{field}", if field.is_empty() { "" } else { "." }),
            problem,
        };
        let member = doc
            .get(MEMBER)
            .and_then(Value::as_object)
            .ok_or_else(|| bad("", "is missing or not an object".into()))?;
        let get = |obj: &Map<String, Value>, key: &str, field: &str| {
            obj.get(key)
                .cloned()
                .ok_or_else(|| bad(field, "is missing".into()))
        };
        let text = |key: &'static str| -> Result<String, EquivError> {
            match get(member, key, key)? {
                Value::String(s) => Ok(s),
                other => Err(bad(key, format!("is {other}, not a string"))),
            }
        };
        let count = |obj: &Map<String, Value>, key: &str, field: &str| -> Result<u64, EquivError> {
            let v = get(obj, key, field)?;
            v.as_u64()
                .ok_or_else(|| bad(field, format!("is {v}, not a non-negative integer")))
        };
        let claim_id = text("claim")?;
        let claim = Claim::from_id(&claim_id)
            .ok_or_else(|| bad("claim", format!("is \"{claim_id}\", not a claim id")))?;
        let family_name = text("family")?;
        let family = Family::from_name(&family_name).ok_or_else(|| {
            bad(
                "family",
                format!("is \"{family_name}\", not float or exact"),
            )
        })?;
        let finite_differences = match get(member, "finite_differences", "finite_differences")? {
            Value::Bool(b) => b,
            other => return Err(bad("finite_differences", format!("is {other}, not a bool"))),
        };
        let run = match get(member, "run", "run")? {
            Value::Object(o) => o,
            other => return Err(bad("run", format!("is {other}, not an object"))),
        };
        let usize_of = |n: u64, field: &str| {
            usize::try_from(n).map_err(|_| bad(field, format!("is {n}, too large")))
        };
        Ok(Provenance {
            claim,
            engine: text("engine")?,
            family,
            finite_differences,
            threads: usize_of(count(member, "threads", "threads")?, "threads")?,
            seed: count(&run, "seed", "run.seed")?,
            cases: usize_of(count(&run, "cases", "run.cases")?, "run.cases")?,
            case_index: usize_of(count(&run, "case", "run.case")?, "run.case")?,
            detail: text("detail")?,
        })
    }
}

/// A counterexample read back: its case and what its failure depended on.
#[derive(Clone, Debug)]
pub struct Counterexample {
    pub case: GenCase,
    pub provenance: Provenance,
}

impl Counterexample {
    /// Reads the counterexample written at `path`.
    pub fn read(path: &Path) -> Result<Counterexample, EquivError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| EquivError::io("read counterexample", path, e))?;
        let case = Case::from_json_str(&text).map_err(|source| EquivError::CaseFile {
            path: path.to_path_buf(),
            source,
        })?;
        let doc: Value = serde_json::from_str(&text).map_err(|source| EquivError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        let provenance = Provenance::from_json(path, &doc)?;
        Ok(Counterexample {
            case: GenCase {
                graph: case.graph,
                payload: case.payload,
                inputs: case.inputs,
            },
            provenance,
        })
    }

    /// The command that repeats its check.
    pub fn rerun(path: &Path) -> String {
        format!("cargo xtask check-equivalence --replay {}", path.display())
    }
}

/// Repeats the check `cx` records: every observation of its family on its case, on `engines`
/// (the recorded engine and the reference f64 engine, whose results the others are measured
/// against), keeping the recorded claim's on the recorded engine. Run it on the recorded
/// number of threads (the caller's pool). An engine missing from `engines` is an error.
pub fn replay(
    cx: &Counterexample,
    engines: &[&dyn EngineUnderTest],
) -> Result<Vec<Observation>, EquivError> {
    let p = &cx.provenance;
    let exact = p.family == Family::Exact;
    if !exact && !engines.iter().any(|e| e.name() == p.engine) {
        return Err(EquivError::EngineUnavailable {
            engine: p.engine.clone(),
            why: "not among the engines given to the replay".into(),
        });
    }
    let cfg = CheckConfig {
        finite_differences: p.finite_differences,
        ..CheckConfig::default()
    };
    Ok(p.family
        .observe(&cx.case, engines, &cfg)
        .into_iter()
        .filter(|o| o.claim == p.claim && o.engine == p.engine)
        .collect())
}
