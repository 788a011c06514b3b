//! The claims of SPEC 2.3, each an executable check against its reference.

use crate::error::EquivError;
use crate::gen::GenCase;
use crate::measure::{compare_all_detail, compare_detail, Measure, Mode};
use std::sync::Arc;
use torchlean_compiled::{
    backprop_all_ctx, backprop_ctx, backprop_ctx_reference, compile, compile_with, eager_tape,
    exec_graph_of_ir, CompileMode, ExecGraph, GraphData, PreparedNode, SavedGraph,
};
use torchlean_ir::denote_all;
use torchlean_nn::{IrProgram, LeafKind, Ops, Recorded, Recorder, Session, Sweep, Var};
use torchlean_runtime::{record, GradZero, Kernels, Saved, Tape};
use torchlean_spec::{ops::splitmix64, Op, Scalar, Shape, Tensor};

/// The claims, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Claim {
    /// IR lowering agrees with the IR denotation on every node.
    LoweringVsDenote,
    /// Compiled tape values equal GraphData evaluation.
    TapeValuesVsEval,
    /// `backward_dense_from` on the compiled tape equals `backprop_all_ctx`.
    DenseFromVsAllCtx,
    /// `backward_dense_all` equals `backward_dense_from` from a one-hot seed (zero-preserving).
    DenseAllVsDenseFrom,
    /// Dense skipping avoids NaN at a singular point where `backward_dense_from` does not.
    DenseSkippingAvoidsNan,
    /// `backprop_array`, `backprop_stored`, `backprop_inputs_*`, `backprop_ctx`,
    /// `backprop_from` equal their dense references, also with opaque VJPs.
    SavedVsDense,
    /// Every op's VJP agrees with central finite differences of its forward (f64).
    VjpVsFiniteDifferences,
    /// Every engine agrees with the reference engine, node by node.
    EngineVsReference,
    /// Eager recording and compiled execution of one program agree (values and gradients).
    EagerVsCompiled,
    /// A repeated parent's gradient on every path equals the local-sum rule written out
    /// (fixed cases, [`crate::fixed`]).
    LocalSum,
    /// A graph leaving out an attribute evaluates as the graph with SPEC's default literal.
    SpecDefaults,
}

impl Claim {
    pub const ALL: [Claim; 11] = [
        Claim::LoweringVsDenote,
        Claim::TapeValuesVsEval,
        Claim::DenseFromVsAllCtx,
        Claim::DenseAllVsDenseFrom,
        Claim::DenseSkippingAvoidsNan,
        Claim::SavedVsDense,
        Claim::VjpVsFiniteDifferences,
        Claim::EngineVsReference,
        Claim::EagerVsCompiled,
        Claim::LocalSum,
        Claim::SpecDefaults,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Claim::LoweringVsDenote => "lowering == denote_all",
            Claim::TapeValuesVsEval => "tape values == eval",
            Claim::DenseFromVsAllCtx => "backward_dense_from == backprop_all_ctx",
            Claim::DenseAllVsDenseFrom => "backward_dense_all == dense_from(one-hot)",
            Claim::DenseSkippingAvoidsNan => "dense skipping avoids NaN",
            Claim::SavedVsDense => "saved passes == dense references",
            Claim::VjpVsFiniteDifferences => "VJP == finite differences",
            Claim::EngineVsReference => "engine == reference",
            Claim::EagerVsCompiled => "eager == compiled",
            Claim::LocalSum => "local sums == written-out order",
            Claim::SpecDefaults => "omitted attribute == SPEC default",
        }
    }

    /// The claim whose [`Claim::id`] is `id`.
    pub fn from_id(id: &str) -> Option<Claim> {
        Claim::ALL.into_iter().find(|c| c.id() == id)
    }

    /// A short identifier (file names, JSON).
    pub fn id(self) -> &'static str {
        match self {
            Claim::LoweringVsDenote => "lowering_vs_denote",
            Claim::TapeValuesVsEval => "tape_values_vs_eval",
            Claim::DenseFromVsAllCtx => "dense_from_vs_all_ctx",
            Claim::DenseAllVsDenseFrom => "dense_all_vs_dense_from",
            Claim::DenseSkippingAvoidsNan => "dense_skipping_avoids_nan",
            Claim::SavedVsDense => "saved_vs_dense",
            Claim::VjpVsFiniteDifferences => "vjp_vs_fd",
            Claim::EngineVsReference => "engine_vs_reference",
            Claim::EagerVsCompiled => "eager_vs_compiled",
            Claim::LocalSum => "local_sum",
            Claim::SpecDefaults => "spec_defaults",
        }
    }
}

/// One measured observation: a claim on one kind (or the whole graph) of one case.
#[derive(Clone, Debug)]
pub struct Observation {
    pub claim: Claim,
    /// Engine/dtype the observation is about (`reference-f64`, `reference-rational`, `cpu-f32`, …).
    pub engine: String,
    pub mode: Mode,
    /// The kinds this observation is attributed to.
    pub kinds: Vec<&'static str>,
    pub measure: Measure,
    /// Why it failed, when it did (shared: observations and failures are cloned into the
    /// report).
    pub detail: Option<Arc<EquivError>>,
}

fn obs(
    claim: Claim,
    engine: &str,
    mode: Mode,
    kinds: &[&'static str],
    m: Measure,
    detail: Option<EquivError>,
) -> Observation {
    Observation {
        claim,
        engine: engine.to_string(),
        mode,
        kinds: kinds.to_vec(),
        measure: m,
        detail: if m.pass { None } else { detail.map(Arc::new) },
    }
}

/// A deterministic seed with mixed signs, including `-0.0`.
pub fn seed_values(shape: &Shape, salt: u64, with_neg_zero: bool) -> Tensor<f64> {
    let mut s = salt;
    Tensor::from_fn(shape.clone(), |_| {
        s = splitmix64(s);
        let k = (s % 17) as i64 - 8;
        if with_neg_zero && k == 0 {
            -0.0
        } else {
            k as f64 / 8.0
        }
    })
    .expect("a seed of a validated shape")
}

fn values_seed<V: Kernels>(values: &[V], salt: u64, neg_zero: bool) -> Result<Vec<V>, EquivError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            V::from_f64(&seed_values(
                v.shape(),
                salt.wrapping_add(i as u64),
                neg_zero,
            ))
            .map_err(EquivError::from)
        })
        .collect()
}

/// Runs the runtime-path claims (tape values, the dense sweeps, the saved passes, eager vs
/// compiled) on engine `V`: exactly on the rational engine, bit for bit on floats (every path
/// uses the same kernels in the same order).
pub fn semantic_claims<V: Kernels>(case: &GenCase) -> Vec<Observation> {
    let engine = V::ENGINE;
    let mode = if V::EXACT { Mode::Exact } else { Mode::Bitwise };
    let kinds = case.kinds();
    let mut out = Vec::new();
    let fail = |claim, e: EquivError| obs(claim, engine, mode, &kinds, Measure::FAIL, Some(e));
    let exec = match exec_graph_of_ir(&case.graph, &case.payload) {
        Ok(e) => e,
        Err(e) => {
            out.push(fail(Claim::TapeValuesVsEval, EquivError::Lowering(e)));
            return out;
        }
    };
    let inputs: Vec<V> = match exec.inputs(&case.inputs, &case.payload) {
        Ok(i) => i,
        Err(e) => {
            out.push(fail(Claim::TapeValuesVsEval, EquivError::Inputs(e)));
            return out;
        }
    };
    let run = |claim: Claim, r: ClaimResult| match r {
        Ok((m, detail)) => obs(claim, engine, claim_mode(claim, mode), &kinds, m, detail),
        Err(e) => obs(
            claim,
            engine,
            claim_mode(claim, mode),
            &kinds,
            Measure::FAIL,
            Some(e),
        ),
    };
    out.push(run(
        Claim::TapeValuesVsEval,
        tape_values_vs_eval(&exec, &inputs, mode),
    ));
    out.push(run(
        Claim::DenseFromVsAllCtx,
        dense_from_vs_all_ctx(&exec, &inputs, mode),
    ));
    out.push(run(
        Claim::DenseAllVsDenseFrom,
        dense_all_vs_dense_from(&exec, &inputs, claim_mode(Claim::DenseAllVsDenseFrom, mode)),
    ));
    out.push(run(
        Claim::SavedVsDense,
        saved_vs_dense(&exec, &inputs, mode),
    ));
    out.push(run(
        Claim::EagerVsCompiled,
        eager_vs_compiled::<V>(case, mode),
    ));
    out
}

/// The comparison a claim uses given the scalar's base mode.
pub fn claim_mode(claim: Claim, base: Mode) -> Mode {
    match (claim, base) {
        // first-store vs zero-init differ exactly in the sign of zero on floats
        (Claim::DenseAllVsDenseFrom, Mode::Bitwise) => Mode::BitwiseUpToSignedZero,
        _ => base,
    }
}

/// A claim's measure and, when it fails, why; an error when it could not be run.
type ClaimResult = Result<(Measure, Option<EquivError>), EquivError>;

/// Comparisons merged into one measure, keeping the first failure's detail.
struct Findings {
    measure: Measure,
    detail: Option<EquivError>,
}

impl Findings {
    fn new() -> Self {
        Findings {
            measure: Measure::OK,
            detail: None,
        }
    }

    fn add(&mut self, (m, detail): (Measure, Option<EquivError>)) {
        if !m.pass && self.detail.is_none() {
            self.detail = detail;
        }
        self.measure = self.measure.merge(m);
    }

    /// Compares two lists (see [`compare_all_detail`]) and adds the result.
    fn compare<V: Kernels>(&mut self, what: &'static str, got: &[V], want: &[V], mode: Mode) {
        self.add(compare_all_detail(what, got, want, mode));
    }

    fn finish(self) -> (Measure, Option<EquivError>) {
        (self.measure, self.detail)
    }
}

/// IR lowering agrees with the IR denotation on every node, on the reference engine over
/// scalar `A` (the same op semantics on both sides, so bit for bit / exactly).
pub fn lowering_vs_denote<A: Scalar>(case: &GenCase) -> Observation {
    let engine = <Tensor<A> as Kernels>::ENGINE;
    let mode = base_mode::<A>();
    let kinds = case.kinds();
    let result = (|| -> ClaimResult {
        let exec = exec_graph_of_ir(&case.graph, &case.payload)?;
        let inputs: Vec<Tensor<A>> = exec.inputs(&case.inputs, &case.payload)?;
        let ctx = exec.graph.eval(inputs.clone())?;
        // the lowered graph's first inputs are the graph's, in input order
        let denoted = denote_all(
            &case.graph,
            &case.payload,
            &inputs[..case.graph.input_count()],
        )?;
        let got: Vec<Tensor<A>> = exec.ir_positions.iter().map(|&p| ctx[p].clone()).collect();
        Ok(compare_all_detail(
            "lowered value vs denote_all",
            &got,
            &denoted,
            mode,
        ))
    })();
    match result {
        Ok((m, d)) => obs(Claim::LoweringVsDenote, engine, mode, &kinds, m, d),
        Err(e) => obs(
            Claim::LoweringVsDenote,
            engine,
            mode,
            &kinds,
            Measure::FAIL,
            Some(e),
        ),
    }
}

fn tape_values_vs_eval<V: Kernels>(exec: &ExecGraph, inputs: &[V], mode: Mode) -> ClaimResult {
    let evaluated = exec.graph.eval(inputs.to_vec())?;
    let (tape, values) = compile(&exec.graph, inputs.to_vec())?;
    let mut found = Findings::new();
    found.compare("compiled value vs eval", &values, &evaluated, mode);
    for (i, v) in evaluated.iter().enumerate() {
        let t = tape.get_value(i)?;
        found.add(compare_detail("compiled tape value vs eval", i, t, v, mode));
    }
    Ok(found.finish())
}

fn dense_from_vs_all_ctx<V: Kernels>(exec: &ExecGraph, inputs: &[V], mode: Mode) -> ClaimResult {
    let values = exec.graph.eval(inputs.to_vec())?;
    let mut found = Findings::new();
    for (salt, neg_zero) in [(17u64, true), (29, false)] {
        let seed = values_seed(&values, salt, neg_zero)?;
        let reference = backprop_all_ctx(&exec.graph, inputs.to_vec(), seed.clone())?;
        let (full, _) = compile_with(&exec.graph, inputs.to_vec(), CompileMode::FullContext)?;
        let got = full.backward_dense_from(seed.clone())?;
        found.compare(
            "full-context tape vs backprop_all_ctx",
            &got,
            &reference,
            mode,
        );
        if !neg_zero {
            let (compact, _) = compile(&exec.graph, inputs.to_vec())?;
            let got = compact.backward_dense_from(seed)?;
            found.compare(
                "compact tape vs backprop_all_ctx (seed without -0)",
                &got,
                &reference,
                mode,
            );
        }
    }
    Ok(found.finish())
}

fn all_finite<V: Kernels>(values: &[V]) -> bool {
    values.iter().all(|v| {
        v.to_f64()
            .is_ok_and(|t| t.data().iter().all(|x| x.is_finite()))
    })
}

fn dense_all_vs_dense_from<V: Kernels>(exec: &ExecGraph, inputs: &[V], mode: Mode) -> ClaimResult {
    let (tape, values) = compile(&exec.graph, inputs.to_vec())?;
    // the theorem needs zero-preserving VJPs: with an infinite or NaN value, 0·inf is NaN
    if !all_finite(&values) {
        return Ok((Measure::OK, None));
    }
    let out = exec.output;
    let seed = V::from_f64(&seed_values(values[out].shape(), 41, false))?;
    let all = tape.backward_dense_all(out, seed.clone())?;
    let mut one_hot: Vec<V> = values.iter().map(GradZero::zeros_like).collect();
    one_hot[out] = seed;
    let from = tape.backward_dense_from(one_hot)?;
    Ok(compare_all_detail(
        "backward_dense_all vs backward_dense_from(one-hot)",
        &all,
        &from,
        mode,
    ))
}

/// An opaque node: its dense VJP sends multiples of the cotangent's sum to every earlier
/// position, including non-parents (a VJP no op produces).
fn opaque<V: Kernels>(k: usize) -> PreparedNode<V> {
    PreparedNode::opaque(
        format!("opaque{k}"),
        Box::new(move |cot: &V, prefix: &[Shape]| {
            let s: f64 = cot.to_f64()?.data().iter().sum();
            prefix
                .iter()
                .enumerate()
                .map(|(j, sh)| {
                    let v = if j % 3 == 0 {
                        -0.0
                    } else {
                        s * ((j + k) as f64 / 4.0 - 1.0)
                    };
                    Ok(V::full(sh, v)?)
                })
                .collect()
        }),
    )
}

fn saved_vs_dense<V: Kernels>(exec: &ExecGraph, inputs: &[V], mode: Mode) -> ClaimResult {
    let g = &exec.graph;
    let saved = SavedGraph::of_graph(g, inputs.to_vec())?;
    let n = g.n_inputs();
    let mut found = Findings::new();
    let mut check =
        |what: &'static str, got: &[V], want: &[V]| found.compare(what, got, want, mode);
    let seed = values_seed(saved.values(), 53, true)?;
    let dense = saved.backprop_dense(seed.clone())?;
    let reference = backprop_all_ctx(g, inputs.to_vec(), seed.clone())?;
    check("backprop_dense vs backprop_all_ctx", &dense, &reference);
    let array = saved.backprop_array(seed.clone())?;
    check("backprop_array vs backprop_dense", &array, &dense);
    let stored = saved.backprop_stored(seed.clone())?;
    check("backprop_stored vs backprop_dense", &stored, &dense);
    let in_dense = saved.backprop_inputs_dense(seed.clone())?;
    check("backprop_inputs_dense vs prefix", &in_dense, &dense[..n]);
    let in_array = saved.backprop_inputs_array(seed.clone())?;
    check(
        "backprop_inputs_array vs backprop_inputs_dense",
        &in_array,
        &in_dense,
    );
    let in_stored = saved.backprop_inputs_stored(seed.clone())?;
    check(
        "backprop_inputs_stored vs backprop_inputs_dense",
        &in_stored,
        &in_dense,
    );
    let ctx = backprop_ctx(g, inputs.to_vec(), seed.clone())?;
    let ctx_ref = backprop_ctx_reference(g, inputs.to_vec(), seed)?;
    check("backprop_ctx (saved path) vs reference", &ctx, &ctx_ref);
    // reachable-only: backprop_from vs backward_dense_all on the compact tape
    let out = exec.output;
    let s_out = V::from_f64(&seed_values(saved.values()[out].shape(), 59, true))?;
    let from = saved.backprop_from(out, s_out.clone())?;
    let (tape, _) = compile(g, inputs.to_vec())?;
    let all = tape.backward_dense_all(out, s_out)?;
    check("backprop_from vs backward_dense_all", &from, &all);
    // arbitrary VJPs: the same saved graph with opaque nodes appended
    let mut values = saved.values().to_vec();
    let mut nodes: Vec<PreparedNode<V>> = Vec::new();
    for (k, node) in g.nodes().iter().enumerate() {
        let args: Vec<&V> = node.args.iter().map(|&a| &values[a]).collect();
        nodes.push(PreparedNode::of_op(
            node.op.clone(),
            node.args.to_vec(),
            Saved::for_op(&node.op, &args, &values[n + k]),
        ));
    }
    for k in 0..2 {
        let last = values.last().cloned().ok_or(EquivError::EmptyGraph)?;
        values.push(last);
        nodes.push(opaque(k));
    }
    let mixed = SavedGraph::from_parts(n, values, nodes)?;
    let seed = values_seed(mixed.values(), 61, true)?;
    let dense = mixed.backprop_dense(seed.clone())?;
    let array = mixed.backprop_array(seed.clone())?;
    check("backprop_array vs dense with opaque VJPs", &array, &dense);
    let in_array = mixed.backprop_inputs_array(seed)?;
    check(
        "backprop_inputs_array vs dense with opaque VJPs",
        &in_array,
        &dense[..n],
    );
    Ok(found.finish())
}

/// The session name of graph input `k` in [`eager_vs_compiled`].
fn input_name(k: usize) -> String {
    format!("x{k}")
}

/// The case's inputs as `ops`'s input leaves (each asking for its gradient), in input order.
fn graph_inputs<O: Ops>(ops: &mut O, case: &GenCase) -> Result<Vec<Var>, torchlean_nn::NnError> {
    case.inputs
        .iter()
        .enumerate()
        .map(|(k, x)| ops.input(&input_name(k), x, true))
        .collect()
}

/// One program, two interpreters (SPEC 2.3's last row): the graph run as a program
/// (`torchlean_nn::IrProgram`) by the eager `Session` on engine `V` (each op recorded as it
/// runs) and by the `Recorder`, whose graph is compiled and differentiated (`compile` +
/// `backward_dense_all`). Values bit for bit. Gradients (the input's and every parameter's):
///
/// - exactly on an exact engine: the two accumulation rules agree over the rationals;
/// - on floats, bit for bit against the recorded graph swept under the eager tape's rule
///   (`eager_tape`: a repeated parent's contributions added one by one, where the compiled
///   graph sums them locally first), the same float operations in the same order; and bit for
///   bit against the compiled graph itself wherever the two rules perform the same operations
///   ([`local_sums_reassociate`] is false). Where they do not, the two round differently by
///   design: `(g + c₁) + c₂` against `g + (c₁ + c₂)`, as in TorchLean, whose regression suite
///   tells them apart (docs/checker.md).
fn eager_vs_compiled<V: Kernels>(case: &GenCase, mode: Mode) -> ClaimResult {
    let program = IrProgram {
        graph: &case.graph,
        payload: &case.payload,
        naming: torchlean_nn::ParamNaming::ByNode,
    };
    let mut session = Session::<V>::new();
    let xs = graph_inputs(&mut session, case)?;
    let out = program.run_inputs(&mut session, &xs)?;
    let mut recorder = Recorder::new();
    let rxs = graph_inputs(&mut recorder, case)?;
    let rout = program.run_inputs(&mut recorder, &rxs)?;
    let rec = recorder.finish(&rout)?;
    let seed = seed_values(out.shape(), 67, false);
    session.backward_with_seed(&out, &seed, Sweep::DenseAll)?;
    let run = rec.run_with_seed::<V>(&seed)?;
    let mut found = Findings::new();
    found.compare(
        "eager vs compiled output",
        std::slice::from_ref(session.value(&out)?),
        std::slice::from_ref(&run.output),
        Mode::Bitwise,
    );
    let scattered = if V::EXACT {
        None
    } else {
        Some(scattered_grads::<V>(&rec, &seed)?)
    };
    let mut eager = Vec::with_capacity(rec.leaves.len());
    let mut compiled = Vec::with_capacity(rec.leaves.len());
    let mut same_rule = Vec::with_capacity(rec.leaves.len());
    let mut scattered = scattered.map(Vec::into_iter);
    for (leaf, g) in rec.leaves.iter().zip(run.grads) {
        let s = scattered.as_mut().and_then(Iterator::next);
        let e = match leaf.kind {
            LeafKind::Input { .. } => {
                let k = (0..xs.len()).find(|&k| input_name(k) == leaf.name);
                match k {
                    Some(k) => session.grad(&xs[k])?,
                    None => None,
                }
            }
            LeafKind::Param => session.param_grad(&leaf.name),
            LeafKind::Const | LeafKind::Buffer => continue,
        };
        eager.push(match e {
            Some(e) => e.clone(),
            None => g.zeros_like(),
        });
        compiled.push(g);
        same_rule.extend(s);
    }
    if V::EXACT || !local_sums_reassociate(&rec.graph, rec.output) {
        found.compare(
            "eager vs compiled input and parameter gradients",
            &eager,
            &compiled,
            mode,
        );
    }
    if !V::EXACT {
        found.compare(
            "eager vs the recorded graph swept as the eager tape sums (input and parameter gradients)",
            &eager,
            &same_rule,
            Mode::Bitwise,
        );
    }
    Ok(found.finish())
}

/// Every leaf's gradient (in leaf order) from the recorded graph taped as the eager `Session`
/// tapes a program (`torchlean_compiled::eager_tape`) and swept from `seed` with
/// `backward_dense_all`.
fn scattered_grads<V: Kernels>(rec: &Recorded, seed: &Tensor<f64>) -> Result<Vec<V>, EquivError> {
    let tape = eager_tape::<V>(&rec.graph, rec.inputs()?)?;
    let all = tape.backward_dense_all(rec.output, V::from_f64(seed)?);
    tape.release();
    Ok(all?.into_iter().take(rec.leaves.len()).collect())
}

/// Whether the compiled graph's local sums and the eager tape's scattered contributions can
/// perform different float additions on graph `g` swept from `output`: some node repeats an
/// argument position that may already hold a gradient when that node's VJP runs (the seeded
/// output, or a position a later node also reads). Otherwise the repeated argument's first
/// contribution is stored as is on both routes and the rest are added in argument order on
/// both, so the two rules are the same operations (concat(a, a, a) included).
pub fn local_sums_reassociate(g: &GraphData, output: usize) -> bool {
    let n = g.n_inputs();
    // the last node reading each position (nodes in increasing position: the last write wins)
    let mut last_reader: Vec<Option<usize>> = vec![None; g.len()];
    for (k, node) in g.nodes().iter().enumerate() {
        for &a in node.args.iter() {
            if let Some(slot) = last_reader.get_mut(a) {
                *slot = Some(n + k);
            }
        }
    }
    g.nodes().iter().enumerate().any(|(k, node)| {
        node.args.iter().enumerate().any(|(i, &a)| {
            node.args[..i].contains(&a)
                && (a == output || last_reader.get(a).copied().flatten() != Some(n + k))
        })
    })
}

/// SPEC 2.3's last row on the model zoo: each model run eagerly by the `Session` on `V` and
/// recorded, compiled and differentiated; values and every parameter's gradient bit for bit
/// (the models have no repeated parents, so the accumulation order is the same).
pub fn zoo_claims<V: Kernels>() -> Vec<Observation> {
    use torchlean_nn::zoo::Model;
    Model::ALL
        .iter()
        .map(|&model| {
            let (measure, detail) = match zoo_model::<V>(model) {
                Ok(r) => r,
                Err(e) => (Measure::FAIL, Some(e)),
            };
            obs(
                Claim::EagerVsCompiled,
                V::ENGINE,
                Mode::Bitwise,
                &[model.label()],
                measure,
                detail,
            )
        })
        .collect()
}

fn zoo_model<V: Kernels>(model: torchlean_nn::zoo::Model) -> ClaimResult {
    use torchlean_nn::Mode as Phase;
    let x = model.input()?;
    let mut session = Session::<V>::new();
    let sx = session.input("x", &x, false)?;
    let loss = model.loss(&mut session, &sx, Phase::Eval)?;
    session.backward(&loss, Sweep::Releasing)?;
    let mut recorder = Recorder::new();
    let rx = recorder.input("x", &x, false)?;
    let out = model.loss(&mut recorder, &rx, Phase::Eval)?;
    let rec = recorder.finish(&out)?;
    let run = rec.run::<V>()?;
    let mut found = Findings::new();
    found.compare(
        "eager vs compiled loss",
        std::slice::from_ref(session.value(&loss)?),
        std::slice::from_ref(&run.output),
        Mode::Bitwise,
    );
    let (mut eager, mut compiled) = (Vec::new(), Vec::new());
    for (leaf, g) in rec.leaves.iter().zip(run.grads) {
        if leaf.kind == LeafKind::Param {
            if let Some(e) = session.param_grad(&leaf.name) {
                eager.push(e.clone());
                compiled.push(g);
            }
        }
    }
    found.compare(
        "eager vs compiled parameter gradients",
        &eager,
        &compiled,
        Mode::Bitwise,
    );
    Ok(found.finish())
}

/// The constructed singular case: `x = 0`, `a = inv(x) = inf` disconnected from the output
/// `3·x`. The total sweep runs `a`'s VJP on a zero cotangent and gets `−(0·inf²) = NaN` in `x`;
/// the reachable-only sweep does not. Passes if exactly that happens.
pub fn dense_skipping_avoids_nan() -> Observation {
    let mut tape: Tape<Tensor<f64>> = Tape::empty();
    let result = (|| -> Result<(f64, f64), EquivError> {
        let x = tape.leaf(Tensor::new([1], vec![0.0])?, true, None);
        record(
            &mut tape,
            Op::Unary(torchlean_spec::UnaryOp::Inv),
            &[x],
            None,
        )?;
        let out = record(&mut tape, Op::Scale { c: 3.0 }, &[x], None)?;
        let all = tape.backward_dense_all(out, Tensor::new([1], vec![1.0])?)?;
        let zeros: Vec<Tensor<f64>> = (0..tape.size())
            .map(|i| tape.get_value(i).map(GradZero::zeros_like))
            .collect::<Result<_, _>>()?;
        let mut seed = zeros;
        seed[out] = Tensor::new([1], vec![1.0])?;
        let from = tape.backward_dense_from(seed)?;
        Ok((all[x].data()[0], from[x].data()[0]))
    })();
    let detail = match result {
        Ok((dense_all, dense_from)) if dense_all == 3.0 && dense_from.is_nan() => None,
        Ok((dense_all, dense_from)) => Some(EquivError::SingularPoint {
            dense_all,
            dense_from,
        }),
        Err(e) => Some(e),
    };
    Observation {
        claim: Claim::DenseSkippingAvoidsNan,
        engine: "reference-f64".into(),
        mode: Mode::Exact,
        kinds: vec!["inv", "scale"],
        measure: if detail.is_none() {
            Measure::OK
        } else {
            Measure::FAIL
        },
        detail: detail.map(Arc::new),
    }
}

/// Values of `Scalar` type `A` are exact when `A::EXACT`.
pub fn base_mode<A: Scalar>() -> Mode {
    if A::EXACT {
        Mode::Exact
    } else {
        Mode::Bitwise
    }
}
