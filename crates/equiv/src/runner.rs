//! Running every claim over many random graphs, in parallel; collecting **all** failures;
//! shrinking each failing graph; writing the smallest counterexample as a case file.

use crate::claims::{
    dense_skipping_avoids_nan, lowering_vs_denote, seed_values, semantic_claims, Claim, Observation,
};
use crate::counterexample::{self, Provenance};
use crate::engines::EngineUnderTest;
use crate::error::EquivError;
use crate::gen::{build_targeted, schedule, GenCase, GenConfig};
use crate::measure::Mode;
use crate::regime::Target;
use crate::regime::{covered, targets};
use crate::report::{CaseFile, ClaimSummary, Failure, Report, Row};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
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

/// Claims about one engine's ops (node by node, finite differences), as opposed to claims
/// about the runtime paths.
fn is_engine_claim(claim: Claim) -> bool {
    matches!(
        claim,
        Claim::EngineVsReference | Claim::VjpVsFiniteDifferences
    )
}

/// The two families of random cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Float graphs of every kind, on every engine.
    Float,
    /// Algebraic graphs, checked exactly over the rationals (and bit for bit in f64).
    Exact,
}

impl Family {
    /// The family's name (counterexample files).
    pub fn name(self) -> &'static str {
        match self {
            Family::Float => "float",
            Family::Exact => "exact",
        }
    }

    /// The family named `name` ([`Family::name`]).
    pub fn from_name(name: &str) -> Option<Family> {
        [Family::Float, Family::Exact]
            .into_iter()
            .find(|f| f.name() == name)
    }

    /// The salt of the family's choice vectors (with the run's seed).
    fn salt(self) -> u64 {
        match self {
            Family::Float => 1,
            Family::Exact => 2,
        }
    }

    fn gen_config(self) -> GenConfig {
        match self {
            Family::Float => GenConfig::FLOAT,
            Family::Exact => GenConfig::ALGEBRAIC,
        }
    }

    /// The `(kind, regime)` pairs case `i` of the family is built around: the round-robin
    /// ([`schedule`]) first, then none (random cases).
    pub fn targets(self, i: usize) -> Vec<Target> {
        schedule(self.gen_config())
            .into_iter()
            .nth(i)
            .unwrap_or_default()
    }

    /// Case `i` of the family from its choices.
    pub fn build(self, i: usize, choices: &[u32]) -> GenCase {
        build_targeted(self.gen_config(), &self.targets(i), choices)
    }

    /// Every observation on one case of the family.
    pub fn observe(
        self,
        case: &GenCase,
        engines: &[&dyn EngineUnderTest],
        cfg: &CheckConfig,
    ) -> Vec<Observation> {
        match self {
            Family::Float => observe_float(case, engines, cfg.finite_differences),
            Family::Exact => observe_exact(case),
        }
    }
}

/// The random cases of a run.
#[derive(Clone, Debug)]
pub struct Cases {
    pub float: Vec<GenCase>,
    pub exact: Vec<GenCase>,
}

impl Cases {
    pub fn of(&self, family: Family) -> &[GenCase] {
        match family {
            Family::Float => &self.float,
            Family::Exact => &self.exact,
        }
    }

    pub fn len(&self) -> usize {
        self.float.len() + self.exact.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every observation of a run: one list per case, in case order, and the constructed singular
/// case's.
#[derive(Clone, Debug)]
pub struct Observations {
    pub float: Vec<Vec<Observation>>,
    pub exact: Vec<Vec<Observation>>,
    pub singular: Observation,
    /// The model zoo's, per engine.
    pub zoo: Vec<Observation>,
    /// The fixed cases' (local sums, SPEC's defaults), per engine.
    pub fixed: Vec<Observation>,
}

impl Observations {
    pub fn of(&self, family: Family) -> &[Vec<Observation>] {
        match family {
            Family::Float => &self.float,
            Family::Exact => &self.exact,
        }
    }

    /// Every observation: float cases, exact cases, the singular case.
    pub fn iter(&self) -> impl Iterator<Item = &Observation> {
        self.float
            .iter()
            .flatten()
            .chain(self.exact.iter().flatten())
            .chain(std::iter::once(&self.singular))
            .chain(self.zoo.iter())
            .chain(self.fixed.iter())
    }
}

/// Generates the run's cases from its seed (deterministic).
pub fn generate_cases(cfg: &CheckConfig) -> Cases {
    let family = |f: Family, count: usize| -> Vec<GenCase> {
        let sched = schedule(f.gen_config());
        trees(cfg.seed, f.salt(), count)
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let targets = sched.get(i).map(Vec::as_slice).unwrap_or_default();
                build_targeted(f.gen_config(), targets, &t.current())
            })
            .collect()
    };
    Cases {
        float: family(Family::Float, cfg.cases),
        exact: family(Family::Exact, cfg.exact_cases),
    }
}

/// Runs every claim on every case, in parallel, and the constructed singular case.
pub fn run_observations(
    cfg: &CheckConfig,
    cases: &Cases,
    engines: &[&dyn EngineUnderTest],
) -> Observations {
    // One parallel pass over both families, the exact cases first, one case per task: a case
    // costs from well under a millisecond to a third of a second (big rationals), and rayon
    // otherwise hands each thread a contiguous run of cases that it works through alone. With
    // two threads one took the 113 cheap cases and sat idle for two thirds of the run while
    // the other did the 37 dearest (1.29 CPUs busy: 1.4 s at two threads for 1.7 s at one).
    let work: Vec<(Family, &GenCase)> = cases
        .exact
        .iter()
        .map(|c| (Family::Exact, c))
        .chain(cases.float.iter().map(|c| (Family::Float, c)))
        .collect();
    let mut observed: Vec<Vec<Observation>> = work
        .par_iter()
        .with_max_len(1)
        .map(|(f, c)| f.observe(c, engines, cfg))
        .collect();
    let float = observed.split_off(cases.exact.len());
    Observations {
        float,
        exact: observed,
        singular: dense_skipping_avoids_nan(),
        zoo: engines.iter().flat_map(|e| e.zoo()).collect(),
        fixed: engines.par_iter().flat_map(|e| e.fixed()).collect(),
    }
}

/// The report's rows: the observations aggregated per claim × engine × kind, in that order.
pub fn aggregate_rows(obs: &Observations) -> Vec<Row> {
    let mut rows: BTreeMap<(Claim, String, &'static str), Row> = BTreeMap::new();
    for o in obs.iter() {
        for &k in &o.kinds {
            let r = rows
                .entry((o.claim, o.engine.clone(), k))
                .or_insert_with(|| Row::new(o.claim, &o.engine, k, o.mode));
            r.add(o.measure);
        }
    }
    rows.into_values().collect()
}

/// The indices of one family's failing cases, per (claim, engine), in case order.
fn failing_cases(obs: &[Vec<Observation>]) -> BTreeMap<(Claim, String), Vec<usize>> {
    let mut failing: BTreeMap<(Claim, String), Vec<usize>> = BTreeMap::new();
    for (i, case_obs) in obs.iter().enumerate() {
        for o in case_obs.iter().filter(|o| !o.measure.pass) {
            let v = failing.entry((o.claim, o.engine.clone())).or_default();
            if v.last() != Some(&i) {
                v.push(i);
            }
        }
    }
    failing
}

/// A failing claim on one engine, shrunk to a minimal case.
#[derive(Clone, Debug)]
pub struct Shrunk {
    pub claim: Claim,
    pub engine: String,
    /// The index (in its family) of the case that was shrunk.
    pub index: usize,
    pub case: GenCase,
    /// Why the minimal case fails.
    pub detail: Option<Arc<EquivError>>,
}

/// Shrinks one failure of `claim` on `engine`. `failing` are the indices of the family's
/// failing cases in `cases` (in case order); the first is shrunk — for engine claims, the
/// first (of the first 20) whose disagreement reaches the whole graph's outputs or gradients,
/// so that the counterexample reproduces in `torchlean conform`. `None` when `failing` is
/// empty or the case's choice vector cannot be regenerated.
pub fn shrink_failure(
    cfg: &CheckConfig,
    family: Family,
    cases: &[GenCase],
    failing: &[usize],
    claim: Claim,
    engine: &str,
    engines: &[&dyn EngineUnderTest],
) -> Option<Shrunk> {
    let under_test = engines.iter().find(|e| e.name() == engine);
    let &first = failing.first()?;
    let i = failing
        .iter()
        .take(20)
        .copied()
        .find(|&i| {
            is_engine_claim(claim) && under_test.is_some_and(|e| graph_level_differs(*e, &cases[i]))
        })
        .unwrap_or(first);
    let fails = |case: &GenCase| {
        family
            .observe(case, engines, cfg)
            .iter()
            .any(|o| is_failure_of(o, claim, engine))
    };
    let tree = trees(cfg.seed, family.salt(), i + 1).pop()?;
    let minimal = shrink(
        tree,
        &|choices: &[u32]| family.build(i, choices),
        cfg.shrink_steps,
        &fails,
        engines,
        claim,
        engine,
    );
    let detail = family
        .observe(&minimal, engines, cfg)
        .into_iter()
        .find(|o| is_failure_of(o, claim, engine))
        .and_then(|o| o.detail);
    Some(Shrunk {
        claim,
        engine: engine.to_string(),
        index: i,
        case: minimal,
        detail,
    })
}

/// Every failure of the run: each failing (claim, engine) once (float cases first), shrunk
/// and, when `cfg.out_dir` is set, written out (or the write's error kept); then the singular
/// case's, if it failed.
fn collect_failures(
    cfg: &CheckConfig,
    cases: &Cases,
    obs: &Observations,
    engines: &[&dyn EngineUnderTest],
) -> Vec<Failure> {
    let mut failures = Vec::new();
    let mut done: BTreeSet<(Claim, String)> = BTreeSet::new();
    for family in [Family::Float, Family::Exact] {
        for ((claim, engine), failing) in failing_cases(obs.of(family)) {
            if !done.insert((claim, engine.clone())) {
                continue;
            }
            let shrunk = shrink_failure(
                cfg,
                family,
                cases.of(family),
                &failing,
                claim,
                &engine,
                engines,
            );
            let Some(shrunk) = shrunk else {
                continue;
            };
            let case_file = match &cfg.out_dir {
                None => CaseFile::NotRequested,
                Some(dir) => {
                    let provenance = Provenance {
                        claim,
                        engine: engine.clone(),
                        family,
                        finite_differences: cfg.finite_differences,
                        threads: rayon::current_num_threads(),
                        seed: cfg.seed,
                        cases: cfg.cases,
                        case_index: shrunk.index,
                        detail: shrunk
                            .detail
                            .as_ref()
                            .map(|d| d.to_string())
                            .unwrap_or_default(),
                    };
                    match write_counterexample(dir, &provenance, &shrunk.case, engines) {
                        Ok(path) => CaseFile::Written(path),
                        Err(e) => CaseFile::NotWritten(Arc::new(e)),
                    }
                }
            };
            failures.push(Failure {
                claim,
                engine,
                detail: shrunk.detail,
                nodes: shrunk.case.graph.len(),
                case_file,
            });
        }
    }
    // the fixed cases: the constructed singular graph (3 nodes), the zoo's models, the local
    // sums (2 nodes) and the defaults (2 nodes)
    let fixed = std::iter::once((&obs.singular, 3))
        .chain(obs.zoo.iter().map(|o| (o, 0)))
        .chain(obs.fixed.iter().map(|o| (o, 2)));
    for (o, nodes) in fixed {
        if !o.measure.pass {
            failures.push(Failure {
                claim: o.claim,
                engine: o.engine.clone(),
                detail: o.detail.clone(),
                nodes,
                case_file: CaseFile::NotRequested,
            });
        }
    }
    failures
}

/// Runs the checker: generates the cases, observes every claim on them, aggregates the rows,
/// and shrinks (and writes) every failure. `engines` should include the reference f64 engine
/// (its node-by-node comparison is the finite-difference baseline). A counterexample that
/// could not be written is its failure's [`CaseFile::NotWritten`] (see
/// [`Report::write_errors`]), shown in the report.
pub fn check(cfg: &CheckConfig, engines: &[&dyn EngineUnderTest]) -> Report {
    let start = Instant::now();
    let cases = generate_cases(cfg);
    let obs = run_observations(cfg, &cases, engines);
    report_of(cfg, &cases, &obs, engines, start.elapsed().as_secs_f64())
}

/// The report of a run whose every observation is in: rows, coverage, the failures shrunk
/// (the end of [`check`], and of a sharded check on rank 0).
pub(crate) fn report_of(
    cfg: &CheckConfig,
    cases: &Cases,
    obs: &Observations,
    engines: &[&dyn EngineUnderTest],
    seconds: f64,
) -> Report {
    let rows = aggregate_rows(obs);
    let (claims, uncovered) = coverage(cases, obs, &rows, engines);
    Report {
        claims,
        uncovered,
        kinds_total: torchlean_spec::ops::desc::names().count(),
        regimes_total: targets().len(),
        failures: collect_failures(cfg, cases, obs, engines),
        rows,
        graphs: cases.len(),
        seconds,
    }
}

/// Each claim's line (the random graphs it was observed on and the `(kind, regime)` pairs
/// they cover, read off the graphs), and the labels of the pairs no graph covered and of the
/// dtypes no engine computed in.
pub fn coverage(
    cases: &Cases,
    obs: &Observations,
    rows: &[Row],
    engines: &[&dyn EngineUnderTest],
) -> (Vec<ClaimSummary>, Vec<String>) {
    let mut per_claim: BTreeMap<Claim, (usize, BTreeSet<Target>)> = BTreeMap::new();
    let mut all: BTreeSet<Target> = BTreeSet::new();
    for family in [Family::Float, Family::Exact] {
        for (case, case_obs) in cases.of(family).iter().zip(obs.of(family)) {
            let pairs = covered(&case.graph);
            let claims: BTreeSet<Claim> = case_obs.iter().map(|o| o.claim).collect();
            for claim in claims {
                let entry = per_claim.entry(claim).or_default();
                entry.0 += 1;
                entry.1.extend(pairs.iter().copied());
            }
            all.extend(pairs);
        }
    }
    let claims = Claim::ALL
        .iter()
        .map(|&claim| {
            let (graphs, pairs) = per_claim.remove(&claim).unwrap_or_default();
            ClaimSummary::of(claim, rows, graphs, pairs.len())
        })
        .collect();
    let mut uncovered: Vec<String> = targets()
        .into_iter()
        .filter(|t| !all.contains(t))
        .map(Target::label)
        .collect();
    for dtype in ["f32", "f64"] {
        if !engines.iter().any(|e| e.name().ends_with(dtype)) {
            uncovered.push(format!("dtype {dtype} (no engine)"));
        }
    }
    (claims, uncovered)
}

/// Proptest's shrinking loop on the choice vector: simplify while the claim still fails,
/// complicate back when a step made it pass. For engine claims (node by node, finite
/// differences), the shrunk case must also show the disagreement on the whole graph's output or
/// gradients (so `torchlean conform` reproduces it), when the original case does.
fn shrink(
    mut tree: impl ValueTree<Value = Vec<u32>>,
    build: &dyn Fn(&[u32]) -> GenCase,
    max_steps: usize,
    fails: &dyn Fn(&GenCase) -> bool,
    engines: &[&dyn EngineUnderTest],
    claim: Claim,
    engine: &str,
) -> GenCase {
    let whole_graph = |case: &GenCase| -> bool {
        engines
            .iter()
            .find(|e| e.name() == engine)
            .is_none_or(|e| graph_level_differs(*e, case))
    };
    let original = build(&tree.current());
    let need_graph_level = is_engine_claim(claim) && whole_graph(&original);
    let pred = |case: &GenCase| fails(case) && (!need_graph_level || whole_graph(case));
    let mut best = original;
    let mut steps = 0;
    if !tree.simplify() {
        return best;
    }
    while steps < max_steps {
        steps += 1;
        let candidate = build(&tree.current());
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
    let r = run_grad::<Tensor<f64>>(&case.graph, &case.payload, &case.inputs, Some(&seed))?;
    Ok((
        seed,
        Expect {
            output: Some(r.output),
            grad_inputs: Some(r.grad_inputs),
            grad_payload: Some(r.grad_payload),
        },
    ))
}

/// The tolerance a counterexample case file is written with for an engine compared in `mode`.
fn case_tolerance(mode: Mode) -> Tolerance {
    match mode {
        Mode::Tolerance(t) | Mode::Measured(t) => Tolerance { rtol: t, atol: t },
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
    let Ok(got) = e.run_grad(&case.graph, &case.payload, &case.inputs, Some(&seed)) else {
        return true;
    };
    let tol = case_tolerance(e.mode());
    let cmp = |g: &Tensor<f64>, w: &Option<Tensor<f64>>| {
        w.as_ref().is_some_and(|w| !tol.compare(g, w).pass)
    };
    let inputs_differ = expect.grad_inputs.as_ref().is_some_and(|want| {
        want.len() != got.grad_inputs.len()
            || want
                .iter()
                .zip(&got.grad_inputs)
                .any(|(w, g)| !tol.compare(g, w).pass)
    });
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
    cmp(&got.output, &expect.output) || inputs_differ || payload_differs
}

/// Writes the minimized counterexample as a `torchlean.case.v1` file whose expectations are the
/// reference engine's (f64) and whose tolerance is the engine's, with `provenance` (what the
/// failure depended on, so that [`crate::counterexample::replay`] repeats it) as its `checker` member,
/// atomically (a temporary file in `dir`, synced, renamed into place); returns its path.
/// Creates `dir` if needed.
pub fn write_counterexample(
    dir: &Path,
    provenance: &Provenance,
    case: &GenCase,
    engines: &[&dyn EngineUnderTest],
) -> Result<PathBuf, EquivError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| EquivError::io("create the counterexample directory", dir, e))?;
    let (seed, expect) = reference_expect(case)?;
    let engine = provenance.engine.as_str();
    let mode = engines
        .iter()
        .find(|e| e.name() == engine)
        .map(|e| e.mode())
        .unwrap_or(Mode::Bitwise);
    let tolerance = case_tolerance(mode);
    let name = format!("{}-{}", provenance.claim.id(), engine);
    let file = Case {
        name: name.clone(),
        graph: case.graph.clone(),
        payload: case.payload.clone(),
        inputs: case.inputs.clone(),
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
    let mut doc = file.to_json();
    if let Some(obj) = doc.as_object_mut() {
        obj.insert(counterexample::MEMBER.to_string(), provenance.to_json());
    }
    let text = serde_json::to_string_pretty(&doc).map_err(|source| EquivError::Json {
        path: path.clone(),
        source,
    })?;
    write_atomically(&path, text.as_bytes())?;
    Ok(path)
}

/// [`torchlean_ir::write_atomically`] (a reader sees the old file or the whole new one), with
/// the error naming `path`.
fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), EquivError> {
    torchlean_ir::write_atomically(path, contents)
        .map_err(|e| EquivError::io("write counterexample", path, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::engines::EngineOf;
    use crate::gen::build;

    fn a_case() -> GenCase {
        build(
            GenConfig::FLOAT,
            &[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3],
        )
    }

    fn provenance() -> Provenance {
        Provenance {
            claim: Claim::EngineVsReference,
            engine: "reference-f64".into(),
            family: Family::Float,
            finite_differences: true,
            threads: 2,
            seed: 7,
            cases: 24,
            case_index: 3,
            detail: "node %2 (sin): …".into(),
        }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_written_counterexample_is_complete_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let reference = EngineOf::<Tensor<f64>>::bitwise();
        let engines: [&dyn EngineUnderTest; 1] = [&reference];
        let case = a_case();
        let path = write_counterexample(dir.path(), &provenance(), &case, &engines).unwrap();
        assert_eq!(
            path,
            dir.path().join("engine_vs_reference-reference-f64.json")
        );
        assert_eq!(
            entries(dir.path()),
            ["engine_vs_reference-reference-f64.json"]
        );
        let written = Case::from_json_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written.graph.len(), case.graph.len());
        // it reads back as a counterexample: the same graph, input bit for bit, provenance
        let cx = crate::Counterexample::read(&path).unwrap();
        assert_eq!(cx.provenance, provenance());
        assert_eq!(cx.case.graph, case.graph);
        let bits = |ts: &[Tensor<f64>]| {
            ts.iter()
                .flat_map(|t| t.data().iter().map(|v| v.to_bits()))
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&cx.case.inputs), bits(&case.inputs));
        // writing again replaces the file, still without a temporary file left behind
        write_counterexample(dir.path(), &provenance(), &case, &engines).unwrap();
        assert_eq!(
            entries(dir.path()),
            ["engine_vs_reference-reference-f64.json"]
        );
    }

    #[test]
    fn a_directory_that_cannot_be_created_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "").unwrap();
        let out = blocker.join("sub");
        let reference = EngineOf::<Tensor<f64>>::bitwise();
        let e = write_counterexample(&out, &provenance(), &a_case(), &[&reference]).unwrap_err();
        let EquivError::Io { path, .. } = &e else {
            panic!("expected an Io error, got {e:?}");
        };
        assert_eq!(path, &out);
        assert!(std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some());
        assert_eq!(entries(dir.path()), ["file"]);
    }

    #[test]
    fn a_failed_rename_is_an_io_error_and_removes_the_temporary_file() {
        // a directory where the file should go: the temporary file is written, the rename fails
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("engine_vs_reference-reference-f64.json");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), "").unwrap();
        let reference = EngineOf::<Tensor<f64>>::bitwise();
        let e =
            write_counterexample(dir.path(), &provenance(), &a_case(), &[&reference]).unwrap_err();
        assert!(
            matches!(&e, EquivError::Io { path, .. } if path == &target),
            "{e:?}"
        );
        assert_eq!(
            entries(dir.path()),
            ["engine_vs_reference-reference-f64.json"]
        );
        assert!(target.is_dir());
    }
}
