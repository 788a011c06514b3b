//! The check shared by the ranks of an MPI job (`mpirun -np N xtask check-equivalence`):
//! every rank generates the run's cases from the seed (cheap, deterministic), observes its
//! share of them ([`torchlean_distributed::share`], contiguous, in rank order), and sends its
//! observations to every rank; rank 0 puts them back in case order, adds the fixed cases', and
//! finishes the run as [`check`](crate::check) does (rows, coverage, shrinking). So the
//! merged report is the single-process report at the same seed and case count.
//!
//! An observation travels as its claim, engine, mode and measure (the floats as their bits:
//! exact, infinities and NaN included) and its kinds' names, which rank 0 finds among the
//! case's kinds (it has every case). The
//! failure detail stays behind: rank 0 shrinks every failing case again, which finds it.

use std::time::Instant;

use rayon::prelude::*;
use serde_json::{json, Value};
use torchlean_distributed::World;

use crate::claims::{dense_skipping_avoids_nan, Claim, Observation};
use crate::engines::EngineUnderTest;
use crate::error::EquivError;
use crate::measure::{Measure, Mode};
use crate::report::Report;
use crate::runner::{generate_cases, report_of, CheckConfig, Family, Observations};

/// [`check`](crate::check) over the ranks of `world`: the report on rank 0, `None` on the
/// others. Every rank must call it with the same configuration and engines.
pub fn check_sharded(
    cfg: &CheckConfig,
    engines: &[&dyn EngineUnderTest],
    world: &World,
) -> Result<Option<Report>, EquivError> {
    let start = Instant::now();
    let cases = generate_cases(cfg);
    let mut mine = Vec::new();
    for family in [Family::Float, Family::Exact] {
        let all = cases.of(family);
        let observed: Vec<Vec<Observation>> = all[world.share(all.len())]
            .par_iter()
            .with_max_len(1) // one case per task, as run_observations does
            .map(|c| family.observe(c, engines, cfg))
            .collect();
        mine.push(Value::Array(
            observed
                .iter()
                .map(|o| Value::Array(o.iter().map(encode).collect()))
                .collect(),
        ));
    }
    let sent = serde_json::to_vec(&Value::Array(mine)).map_err(|e| bad(world.rank(), &e))?;
    let gathered = world.all_gather_bytes(&sent)?;
    if !world.is_root() {
        return Ok(None);
    }
    let mut float = Vec::with_capacity(cases.float.len());
    let mut exact = Vec::with_capacity(cases.exact.len());
    for (rank, bytes) in gathered.iter().enumerate() {
        let families: Vec<Vec<Vec<Value>>> =
            serde_json::from_slice(bytes).map_err(|e| bad(rank, &e))?;
        let [f, x] = families.as_slice() else {
            return Err(bad(rank, &"not two families"));
        };
        for (family, sent, into) in [
            (Family::Float, f, &mut float),
            (Family::Exact, x, &mut exact),
        ] {
            let at = world_share(cases.of(family).len(), gathered.len(), rank);
            if sent.len() != at.len() {
                return Err(bad(
                    rank,
                    &format!("{} cases, not {}", sent.len(), at.len()),
                ));
            }
            for (case, case_obs) in cases.of(family)[at].iter().zip(sent) {
                let kinds = case.kinds();
                let decoded: Option<Vec<Observation>> =
                    case_obs.iter().map(|v| decode(v, &kinds)).collect();
                into.push(decoded.ok_or_else(|| bad(rank, &"an observation"))?);
            }
        }
    }
    let obs = Observations {
        float,
        exact,
        singular: dense_skipping_avoids_nan(),
        zoo: engines.iter().flat_map(|e| e.zoo()).collect(),
        fixed: engines.par_iter().flat_map(|e| e.fixed()).collect(),
    };
    let seconds = start.elapsed().as_secs_f64();
    Ok(Some(report_of(cfg, &cases, &obs, engines, seconds)))
}

fn world_share(len: usize, size: usize, rank: usize) -> std::ops::Range<usize> {
    torchlean_distributed::share(len, size, rank)
}

fn bad(rank: usize, problem: &dyn std::fmt::Display) -> EquivError {
    EquivError::Shard {
        rank,
        problem: problem.to_string(),
    }
}

fn mode_words(m: Mode) -> (u64, u64) {
    match m {
        Mode::Exact => (0, 0),
        Mode::Bitwise => (1, 0),
        Mode::BitwiseUpToSignedZero => (2, 0),
        Mode::Tolerance(t) => (3, t.to_bits()),
        Mode::Measured(t) => (4, t.to_bits()),
    }
}

fn mode_of(tag: u64, bits: u64) -> Option<Mode> {
    Some(match tag {
        0 => Mode::Exact,
        1 => Mode::Bitwise,
        2 => Mode::BitwiseUpToSignedZero,
        3 => Mode::Tolerance(f64::from_bits(bits)),
        4 => Mode::Measured(f64::from_bits(bits)),
        _ => return None,
    })
}

fn encode(o: &Observation) -> Value {
    let m = &o.measure;
    let (tag, bits) = mode_words(o.mode);
    json!([
        o.claim.id(),
        o.engine,
        tag,
        bits,
        o.kinds,
        m.max_abs.to_bits(),
        m.max_rel.to_bits(),
        m.of_tolerance.to_bits(),
        m.pass
    ])
}

/// An observation of a case whose kinds are `kinds` (an observation's kinds are some of its
/// case's: the names are looked up there, so they are the case's `&'static str`s again).
fn decode(v: &Value, kinds: &[&'static str]) -> Option<Observation> {
    let a = v.as_array()?;
    let [claim, engine, tag, bits, names, abs, rel, tol, pass] = a.as_slice() else {
        return None;
    };
    let f = |v: &Value| v.as_u64().map(f64::from_bits);
    let kinds: Option<Vec<&'static str>> = names
        .as_array()?
        .iter()
        .map(|n| kinds.iter().copied().find(|k| Some(*k) == n.as_str()))
        .collect();
    Some(Observation {
        claim: Claim::from_id(claim.as_str()?)?,
        engine: engine.as_str()?.to_string(),
        mode: mode_of(tag.as_u64()?, bits.as_u64()?)?,
        kinds: kinds?,
        measure: Measure {
            max_abs: f(abs)?,
            max_rel: f(rel)?,
            of_tolerance: f(tol)?,
            pass: pass.as_bool()?,
        },
        detail: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_travels_whole_infinities_and_nan_included() {
        for mode in [
            Mode::Exact,
            Mode::Bitwise,
            Mode::BitwiseUpToSignedZero,
            Mode::Tolerance(1e-6),
            Mode::Measured(f64::INFINITY),
        ] {
            let o = Observation {
                claim: Claim::EngineVsReference,
                engine: "cpu-f32".to_string(),
                mode,
                kinds: vec!["add", "matmul"],
                measure: Measure {
                    max_abs: f64::NAN,
                    max_rel: -0.0,
                    of_tolerance: f64::INFINITY,
                    pass: false,
                },
                detail: None,
            };
            let text = serde_json::to_string(&encode(&o)).unwrap();
            let back = decode(&serde_json::from_str(&text).unwrap(), &["add", "matmul"]).unwrap();
            assert_eq!(back.claim, o.claim);
            assert_eq!(back.engine, o.engine);
            assert_eq!(format!("{:?}", back.mode), format!("{mode:?}"));
            assert_eq!(back.kinds, o.kinds);
            let bits = |m: &Measure| [m.max_abs, m.max_rel, m.of_tolerance].map(f64::to_bits);
            assert_eq!(bits(&back.measure), bits(&o.measure));
            assert!(!back.measure.pass);
            // a case without the observation's kinds is not its case
            assert!(decode(&serde_json::from_str(&text).unwrap(), &["add"]).is_none());
        }
    }

    #[test]
    fn a_world_of_one_reports_what_check_reports() {
        let cfg = CheckConfig {
            cases: 6,
            exact_cases: 3,
            seed: 11,
            finite_differences: false,
            out_dir: None,
            shrink_steps: 0,
        };
        let reference = crate::engines::EngineOf::<torchlean_spec::Tensor<f64>>::bitwise();
        let engines: [&dyn EngineUnderTest; 1] = [&reference];
        let whole = crate::check(&cfg, &engines);
        let shared = check_sharded(&cfg, &engines, &World::solo())
            .unwrap()
            .unwrap();
        assert_eq!(shared.graphs, whole.graphs);
        let rows = |r: &Report| -> Vec<String> {
            r.rows
                .iter()
                .map(|r| {
                    format!(
                        "{} {} {} {} {} {:e}",
                        r.claim.id(),
                        r.engine,
                        r.kind,
                        r.cases,
                        r.failed,
                        r.max_rel
                    )
                })
                .collect()
        };
        assert_eq!(rows(&shared), rows(&whole));
    }
}
