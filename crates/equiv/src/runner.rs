//! Running every claim over many random graphs, in parallel; collecting **all** failures;
//! shrinking each failing graph; writing the smallest counterexample as a case file.

use crate::claims::{
    dense_skipping_avoids_nan, lowering_vs_denote, seed_values, semantic_claims, Claim, Observation,
};
use crate::engines::EngineUnderTest;
use crate::error::EquivError;
use crate::gen::{build, GenCase, GenConfig};
use crate::measure::Mode;
use crate::report::{Failure, Report, Row};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use torchlean_compiled::run_grad;
use torchlean_ir::{Case, DType, Expect, Tolerance};
use torchlean_spec::{Rational, Tensor};

/// What to check.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    /// Random float graphs (every kind).
    pub cases: usize,
    /// Random algebraic graphs, checked exactly over the rationals.
    pub exact_cases: usize,
    pub seed: u64,
    /// Finite-difference checks of every VJP (f64 engines).
    pub finite_differences: bool,
    /// Where minimized counterexamples are written (none: not written).
    pub out_dir: Option<PathBuf>,
    /// Most shrinking steps per failure.
    pub shrink_steps: usize,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig {
            cases: 200,
            exact_cases: 100,
            seed: 0x7041_2c4e,
            finite_differences: true,
            out_dir: None,
            shrink_steps: 4000,
        }
    }
}

fn strategy() -> impl Strategy<Value = Vec<u32>> {
    proptest::collection::vec(proptest::num::u32::ANY, 16..160)
}

/// The `count` value trees of a run, from the seed (deterministic).
fn trees(seed: u64, salt: u64, count: usize) -> Vec<impl ValueTree<Value = Vec<u32>>> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&salt.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let s = strategy();
    (0..count)
        .filter_map(|_| s.new_tree(&mut runner).ok())
        .collect()
}

/// Every observation on one float case.
pub fn observe_float(
    case: &GenCase,
    engines: &[&dyn EngineUnderTest],
    fd: bool,
) -> Vec<Observation> {
    let mut out = vec![
        lowering_vs_denote::<f64>(case),
        lowering_vs_denote::<f32>(case),
    ];
    out.extend(semantic_claims::<Tensor<f64>>(case));
    for e in engines {
        if e.name() != "reference-f64" {
            out.extend(e.semantic(case));
        }
        out.extend(e.per_node(case, fd));
    }
    out
}

/// Every observation on one algebraic case: exactly over the rationals, and bit for bit in f64.
pub fn observe_exact(case: &GenCase) -> Vec<Observation> {
    let mut out = vec![
        lowering_vs_denote::<Rational>(case),
        lowering_vs_denote::<f64>(case),
    ];
    out.extend(semantic_claims::<Tensor<Rational>>(case));
    out
}

fn is_failure_of(o: &Observation, claim: Claim, engine: &str) -> bool {
    o.claim == claim && o.engine == engine && !o.measure.pass
}

/// Runs the checker. `engines` should include the reference f64 engine (its node-by-node
/// comparison is the finite-difference baseline).
pub fn check(cfg: &CheckConfig, engines: &[&dyn EngineUnderTest]) -> Report {
    let start = Instant::now();
    let float_trees = trees(cfg.seed, 1, cfg.cases);
    let exact_trees = trees(cfg.seed, 2, cfg.exact_cases);
    let float_cases: Vec<GenCase> = float_trees
        .iter()
        .map(|t| build(GenConfig::FLOAT, &t.current()))
        .collect();
    let exact_cases: Vec<GenCase> = exact_trees
        .iter()
        .map(|t| build(GenConfig::ALGEBRAIC, &t.current()))
        .collect();
    let float_obs: Vec<Vec<Observation>> = float_cases
        .par_iter()
        .map(|c| observe_float(c, engines, cfg.finite_differences))
        .collect();
    let exact_obs: Vec<Vec<Observation>> = exact_cases.par_iter().map(observe_exact).collect();
    let checked = float_cases.len() + exact_cases.len();
    let elapsed = start.elapsed().as_secs_f64();

    // aggregate rows: claim × engine × kind
    let mut rows: BTreeMap<(Claim, String, &'static str), Row> = BTreeMap::new();
    let singular = dense_skipping_avoids_nan();
    let all = float_obs
        .iter()
        .flatten()
        .chain(exact_obs.iter().flatten())
        .chain(std::iter::once(&singular));
    for o in all {
        for &k in &o.kinds {
            let r = rows
                .entry((o.claim, o.engine.clone(), k))
                .or_insert_with(|| Row::new(o.claim, &o.engine, k, o.mode));
            r.add(o.measure);
        }
    }

    // every failing case per (claim, engine); the first one (for engine claims: the first whose
    // disagreement reaches the whole graph's outputs, so it reproduces in `torchlean conform`)
    // is shrunk and written out
    let mut failures = Vec::new();
    struct Source<'a> {
        obs: &'a [Vec<Observation>],
        cases: &'a [GenCase],
        salt: u64,
        gen_cfg: GenConfig,
        exact: bool,
    }
    let sources = [
        Source {
            obs: &float_obs,
            cases: &float_cases,
            salt: 1,
            gen_cfg: GenConfig::FLOAT,
            exact: false,
        },
        Source {
            obs: &exact_obs,
            cases: &exact_cases,
            salt: 2,
            gen_cfg: GenConfig::ALGEBRAIC,
            exact: true,
        },
    ];
    let mut done: BTreeMap<(Claim, String), ()> = BTreeMap::new();
    for Source {
        obs,
        cases,
        salt,
        gen_cfg,
        exact,
    } in sources
    {
        let mut failing: BTreeMap<(Claim, String), Vec<usize>> = BTreeMap::new();
        for (i, case_obs) in obs.iter().enumerate() {
            for o in case_obs.iter().filter(|o| !o.measure.pass) {
                let v = failing.entry((o.claim, o.engine.clone())).or_default();
                if v.last() != Some(&i) {
                    v.push(i);
                }
            }
        }
        for ((claim, engine), indices) in failing {
            if done.insert((claim, engine.clone()), ()).is_some() {
                continue;
            }
            let engine_claim = matches!(
                claim,
                Claim::EngineVsReference | Claim::VjpVsFiniteDifferences
            );
            let under_test = engines.iter().find(|e| e.name() == engine);
            let i = indices
                .iter()
                .take(20)
                .copied()
                .find(|&i| {
                    engine_claim && under_test.is_some_and(|e| graph_level_differs(*e, &cases[i]))
                })
                .unwrap_or(indices[0]);
            let observe = |case: &GenCase| {
                if exact {
                    observe_exact(case)
                } else {
                    observe_float(case, engines, cfg.finite_differences)
                }
            };
            let fails = |case: &GenCase| {
                observe(case)
                    .iter()
                    .any(|o| is_failure_of(o, claim, &engine))
            };
            let Some(tree) = trees(cfg.seed, salt, i + 1).pop() else {
                continue;
            };
            let minimal = shrink(
                tree,
                gen_cfg,
                cfg.shrink_steps,
                &fails,
                engines,
                claim,
                &engine,
            );
            let detail = observe(&minimal)
                .into_iter()
                .find(|o| is_failure_of(o, claim, &engine))
                .and_then(|o| o.detail);
            let path = cfg
                .out_dir
                .as_ref()
                .and_then(|d| write_counterexample(d, claim, &engine, &minimal, engines).ok());
            failures.push(Failure {
                claim,
                engine,
                detail,
                nodes: minimal.graph.len(),
                case_file: path,
            });
        }
    }
    if !singular.measure.pass {
        failures.push(Failure {
            claim: singular.claim,
            engine: singular.engine.clone(),
            detail: singular.detail.clone(),
            nodes: 3,
            case_file: None,
        });
    }
    Report {
        rows: rows.into_values().collect(),
        failures,
        graphs: checked,
        seconds: elapsed,
    }
}

/// Proptest's shrinking loop on the choice vector: simplify while the claim still fails,
/// complicate back when a step made it pass. For engine claims (node by node, finite
/// differences), the shrunk case must also show the disagreement on the whole graph's output or
/// gradients (so `torchlean conform` reproduces it), when the original case does.
fn shrink(
    mut tree: impl ValueTree<Value = Vec<u32>>,
    gen_cfg: GenConfig,
    max_steps: usize,
    fails: &dyn Fn(&GenCase) -> bool,
    engines: &[&dyn EngineUnderTest],
    claim: Claim,
    engine: &str,
) -> GenCase {
    let engine_claim = matches!(
        claim,
        Claim::EngineVsReference | Claim::VjpVsFiniteDifferences
    );
    let whole_graph = |case: &GenCase| -> bool {
        engines
            .iter()
            .find(|e| e.name() == engine)
            .is_none_or(|e| graph_level_differs(*e, case))
    };
    let original = build(gen_cfg, &tree.current());
    let need_graph_level = engine_claim && whole_graph(&original);
    let pred = |case: &GenCase| fails(case) && (!need_graph_level || whole_graph(case));
    let mut best = original;
    let mut steps = 0;
    if !tree.simplify() {
        return best;
    }
    while steps < max_steps {
        steps += 1;
        let candidate = build(gen_cfg, &tree.current());
        if pred(&candidate) {
            best = candidate;
            if !tree.simplify() {
                break;
            }
        } else if !tree.complicate() {
            break;
        }
    }
    best
}

/// The reference f64 gradients of a case (output, input and payload), as a case file's expect.
fn reference_expect(case: &GenCase) -> Result<(Tensor<f64>, Expect), EquivError> {
    let out_shape = case.graph.nodes[case.graph.output_id].shape.clone();
    let seed = seed_values(&out_shape, 0x5eed, false);
    let r = run_grad::<Tensor<f64>>(&case.graph, &case.payload, &case.input, Some(&seed))?;
    Ok((
        seed,
        Expect {
            output: Some(r.output),
            grad_input: Some(r.grad_input),
            grad_payload: Some(r.grad_payload),
        },
    ))
}

/// The tolerance a counterexample case file is written with for an engine compared in `mode`.
fn case_tolerance(mode: Mode) -> Tolerance {
    match mode {
        Mode::Tolerance(t) => Tolerance { rtol: t, atol: t },
        _ => Tolerance {
            rtol: 0.0,
            atol: 0.0,
        },
    }
}

/// Whether the engine's whole-graph output or gradients disagree with the reference the way
/// `torchlean conform` compares them (so a case file of this graph reproduces the failure).
fn graph_level_differs(e: &dyn EngineUnderTest, case: &GenCase) -> bool {
    let Ok((seed, expect)) = reference_expect(case) else {
        return false;
    };
    let Ok(got) = e.run_grad(&case.graph, &case.payload, &case.input, Some(&seed)) else {
        return true;
    };
    let tol = case_tolerance(e.mode());
    let cmp = |g: &Tensor<f64>, w: &Option<Tensor<f64>>| {
        w.as_ref().is_some_and(|w| !tol.compare(g, w).pass)
    };
    let payload_differs = expect.grad_payload.as_ref().is_some_and(|want| {
        want.entries.iter().any(|(node, entry)| {
            entry.tensors.iter().any(|(name, w)| {
                got.grad_payload
                    .entry(*node)
                    .and_then(|e| e.tensor(name))
                    .is_none_or(|g| !tol.compare(g, w).pass)
            })
        })
    });
    cmp(&got.output, &expect.output) || cmp(&got.grad_input, &expect.grad_input) || payload_differs
}

/// Writes the minimized counterexample as a `torchlean.case.v1` file whose expectations are the
/// reference engine's (f64) and whose tolerance is the engine's; returns its path.
pub fn write_counterexample(
    dir: &Path,
    claim: Claim,
    engine: &str,
    case: &GenCase,
    engines: &[&dyn EngineUnderTest],
) -> Result<PathBuf, EquivError> {
    std::fs::create_dir_all(dir).map_err(|e| EquivError::io(dir, e))?;
    let (seed, expect) = reference_expect(case)?;
    let mode = engines
        .iter()
        .find(|e| e.name() == engine)
        .map(|e| e.mode())
        .unwrap_or(Mode::Bitwise);
    let tolerance = case_tolerance(mode);
    let name = format!("{}-{}", claim.id(), engine);
    let file = Case {
        name: name.clone(),
        graph: case.graph.clone(),
        payload: case.payload.clone(),
        input: case.input.clone(),
        seed: Some(seed),
        expect,
        tolerance,
        dtype: if engine.ends_with("f32") {
            DType::F32
        } else {
            DType::F64
        },
    };
    let path = dir.join(format!("{name}.json"));
    let text =
        serde_json::to_string_pretty(&file.to_json()).map_err(|source| EquivError::Json {
            path: path.clone(),
            source,
        })?;
    std::fs::write(&path, text).map_err(|e| EquivError::io(&path, e))?;
    Ok(path)
}
