//! Running a `torchlean.case.v1` case on an engine: lower, evaluate, sweep, compare — through
//! any of the paths a user can differentiate a graph by ([`GradPath`]).

use crate::compile::{check_grad_budget, compile_tape_with, eager_tape};
use crate::error::{CompiledError, Result};
use crate::lower::{exec_graph_of_ir, ExecGraph};
use crate::saved::SavedGraph;
use torchlean_ir::{Case, Comparison, DType, InputValues, Payload, Tolerance};
use torchlean_runtime::{AnomalyMode, Kernels};
use torchlean_spec::{Shape, Tensor};

/// The tolerance at which f32 runs are compared with a case's float64 expectations (SPEC 3;
/// the CUDA engines' too), unless the case declares `"dtype": "f32"` (its own tolerance is then
/// written for f32: [`tolerance_for`]).
///
/// Derived once: `rtol = 1e-4` is about 840 f32 ulps (`f32::EPSILON` = 1.19e-7), headroom for
/// the rounding a chain of f32 operations accumulates (a convolution's or a matmul's sums,
/// softmax, layer and batch norm), and `atol = 1e-5` covers gradients that cancel to near zero,
/// where an f32 result's error is a few ulps of the terms that cancelled, not of the result.
/// Measured: the worst f32 error over every shipped case, every path, on the CPU and the
/// reference engines, is 0.62 of this tolerance (`bn_train_channels_last_permute`: batch
/// norm's batch statistics; the next worst is below 0.1) (`torchlean conform tests/cases
/// --paths all --dtype f32 --json`); a wrong rule (a wrong axis, a transposed operand, a
/// dropped term) is off by the size of a gradient, hundreds of times more.
pub const F32_TOLERANCE: Tolerance = Tolerance {
    rtol: 1e-4,
    atol: 1e-5,
};

/// The tolerance a case is compared at when run in `dtype`: its own, except an f32 run of a
/// case written for f64 (the default), which is compared at [`F32_TOLERANCE`].
pub fn tolerance_for(case: &Case, dtype: DType) -> Tolerance {
    match (dtype, case.dtype) {
        (DType::F32, DType::F64) => F32_TOLERANCE,
        _ => case.tolerance,
    }
}

/// A route by which a user differentiates a graph; `torchlean conform --paths` runs each case
/// through the ones it is given. All three end in gradients of the lowered graph's inputs (the
/// graph input and every payload tensor) from a seed at the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GradPath {
    /// The compiled tape ([`compile_tape`](crate::compile_tape): `record_compiled`, a repeated
    /// operand's cotangents folded by the local-sum rule before the sweep adds them) and the
    /// releasing sweep: what `torchlean grad` and `train --backend compiled` run.
    Compiled,
    /// An eager tape ([`eager_tape`]: each node `record`ed as `nn::Session` records an op, a
    /// repeated parent getting one contribution per use, which the sweep adds one by one) and
    /// the releasing sweep: what `train --backend eager` runs.
    Eager,
    /// The saved-graph executor: [`SavedGraph::of_graph`] and
    /// [`SavedGraph::backprop_from`] (only the output's dependencies, through compact supports).
    Saved,
}

impl GradPath {
    /// Every path, in the order `conform` runs them.
    pub const ALL: [GradPath; 3] = [GradPath::Compiled, GradPath::Eager, GradPath::Saved];

    /// The name `--paths` takes and reports print.
    pub fn name(self) -> &'static str {
        match self {
            GradPath::Compiled => "compiled",
            GradPath::Eager => "eager",
            GradPath::Saved => "saved",
        }
    }
}

/// What running a graph forward and backward produced, in `f64`.
#[derive(Clone, Debug)]
pub struct GradResult {
    /// The (first) output's value.
    pub output: Tensor<f64>,
    /// The values of the outputs after the first, in order (empty for one output).
    pub extra_outputs: Vec<Tensor<f64>>,
    /// The gradient of each graph input, in input order.
    pub grad_inputs: Vec<Tensor<f64>>,
    pub grad_payload: Payload,
}

impl GradResult {
    /// The first input's gradient (a case file's `grad_input`; the only one for a
    /// single-input graph).
    pub fn grad_input(&self) -> &Tensor<f64> {
        self.grad_inputs
            .first()
            .expect("a graph has at least one input (`input_id`)")
    }

    /// Every output's value, in order.
    pub fn outputs(&self) -> impl Iterator<Item = &Tensor<f64>> {
        std::iter::once(&self.output).chain(&self.extra_outputs)
    }
}

/// The seeds of a sweep from `outputs` outputs: `seed` for a single output, ones when absent;
/// a seed given for a graph with several outputs is refused (use the `_seeds` functions).
fn one_seed(seed: Option<&Tensor<f64>>, outputs: usize) -> Result<Vec<Tensor<f64>>> {
    match seed {
        None => Ok(Vec::new()),
        Some(s) if outputs == 1 => Ok(vec![s.clone()]),
        Some(_) => Err(CompiledError::SeedCount { outputs, seeds: 1 }),
    }
}

/// Lowers `graph`, compiles it on engine `V`, and runs the releasing sweep from the output with
/// `seed` (ones when absent), retaining only the lowered graph's inputs (graph input and payload).
pub fn run_grad<V: Kernels>(
    graph: &torchlean_ir::Graph,
    payload: &Payload,
    inputs: &(impl InputValues<f64> + ?Sized),
    seed: Option<&Tensor<f64>>,
) -> Result<GradResult> {
    run_grad_lowered::<V>(exec_graph_of_ir(graph, payload)?, payload, inputs, seed)
}

/// [`run_grad`] through `path`: lowers `graph` and differentiates it on engine `V` the way
/// that path does, from the output with `seed` (ones when absent).
pub fn run_grad_on<V: Kernels>(
    path: GradPath,
    graph: &torchlean_ir::Graph,
    payload: &Payload,
    inputs: &(impl InputValues<f64> + ?Sized),
    seed: Option<&Tensor<f64>>,
) -> Result<GradResult> {
    let exec = exec_graph_of_ir(graph, payload)?;
    match path {
        GradPath::Compiled => run_grad_lowered::<V>(exec, payload, inputs, seed),
        GradPath::Eager => {
            let inputs: Vec<V> = exec.inputs(inputs, payload)?;
            let seeds = one_seed(seed, 1 + exec.extra_outputs.len())?;
            let tape = eager_tape(&exec.graph, inputs)?;
            Sweep::of(&exec, AnomalyMode::Off).run(tape, &seeds, &exec.slots)
        }
        GradPath::Saved => run_saved::<V>(&exec, payload, inputs, seed),
    }
}

/// The [`GradPath::Saved`] route: the saved graph, its reachable-only pass from the output,
/// the inputs' gradients kept and every other value released.
fn run_saved<V: Kernels>(
    exec: &ExecGraph,
    payload: &Payload,
    inputs: &(impl InputValues<f64> + ?Sized),
    seed: Option<&Tensor<f64>>,
) -> Result<GradResult> {
    if !exec.extra_outputs.is_empty() {
        return Err(CompiledError::SingleOutputPath {
            path: GradPath::Saved.name(),
            outputs: 1 + exec.extra_outputs.len(),
        });
    }
    check_grad_budget(&exec.graph)?;
    let saved = SavedGraph::of_graph(&exec.graph, exec.inputs::<V>(inputs, payload)?)?;
    let out_v = &saved.values()[exec.output];
    let output = out_v.to_f64()?;
    let seed_v = seed_value::<V>(seed, out_v.shape(), exec.ir_output)?;
    let grads = saved.backprop_from(exec.output, seed_v);
    for v in saved.into_values() {
        v.drop();
    }
    // the inputs' gradients come first; every gradient is released, converted or not (the
    // ones after a failed conversion too)
    let mut grads = grads?.into_iter();
    let input_grads: std::result::Result<Vec<Tensor<f64>>, _> = grads
        .by_ref()
        .take(exec.graph.n_inputs())
        .map(|g| {
            let t = g.to_f64();
            g.drop();
            t
        })
        .collect();
    grads.for_each(V::drop);
    let input_grads = input_grads?;
    Ok(GradResult {
        output,
        extra_outputs: Vec::new(),
        grad_inputs: crate::lower::grad_inputs(&exec.slots, &input_grads),
        grad_payload: crate::lower::grad_payload(&exec.slots, &input_grads),
    })
}

/// [`run_grad`] on a lowered graph, which it consumes: the GraphData is dropped as soon as the
/// tape is built, so the sweep runs with only the tape (no copy of every value, no name string
/// per node) and the gradient slots in memory.
pub fn run_grad_lowered<V: Kernels>(
    exec: ExecGraph,
    payload: &Payload,
    inputs: &(impl InputValues<f64> + ?Sized),
    seed: Option<&Tensor<f64>>,
) -> Result<GradResult> {
    let seeds = one_seed(seed, 1 + exec.extra_outputs.len())?;
    run_grad_seeds_lowered::<V>(exec, payload, inputs, &seeds)
}

/// [`run_grad_lowered`] with one seed per output, in output order (none: ones for every
/// output): the gradients are the sum of each output's pullback, from one sweep.
pub fn run_grad_seeds_lowered<V: Kernels>(
    exec: ExecGraph,
    payload: &Payload,
    inputs: &(impl InputValues<f64> + ?Sized),
    seeds: &[Tensor<f64>],
) -> Result<GradResult> {
    let inputs: Vec<V> = exec.inputs(inputs, payload)?;
    let tape = compile_tape_with(&exec.graph, inputs, AnomalyMode::Off)?;
    let outputs = exec.outputs();
    let ExecGraph { graph, slots, .. } = exec;
    let input_shapes = graph.inputs().to_vec();
    drop(graph);
    let at = Sweep {
        outputs,
        input_shapes,
        mode: AnomalyMode::Off,
    };
    at.run(tape, seeds, &slots)
}

/// The engine value of a case's seed for an output of shape `out` (ones when absent); a seed
/// of another shape is an error naming the IR output node.
fn seed_value<V: Kernels>(seed: Option<&Tensor<f64>>, out: &Shape, ir_output: usize) -> Result<V> {
    match seed {
        Some(s) if s.shape() != out => Err(CompiledError::SeedShape {
            node: ir_output,
            expected: out.clone(),
            got: s.shape().clone(),
        }),
        Some(s) => Ok(V::from_f64(s)?),
        None => Ok(V::full(out, 1.0)?),
    }
}

/// [`run_grad`]; with [`AnomalyMode::Detect`], stops at the first IR node whose forward value
/// or backward gradient contribution is NaN or infinite while what it was computed from was
/// finite, with a [`CompiledError::Anomaly`] naming the IR node, its kind, shapes and parents.
/// (The lowered graph is kept to the end, to state a finding in IR terms.)
pub fn run_grad_with<V: Kernels>(
    graph: &torchlean_ir::Graph,
    payload: &Payload,
    inputs: &(impl InputValues<f64> + ?Sized),
    seed: Option<&Tensor<f64>>,
    mode: AnomalyMode,
) -> Result<GradResult> {
    let seeds = one_seed(seed, graph.output_count())?;
    run_grad_seeds_with::<V>(graph, payload, inputs, &seeds, mode)
}

/// [`run_grad_with`] with one seed per output, in output order (none: ones for every output).
pub fn run_grad_seeds_with<V: Kernels>(
    graph: &torchlean_ir::Graph,
    payload: &Payload,
    inputs: &(impl InputValues<f64> + ?Sized),
    seeds: &[Tensor<f64>],
    mode: AnomalyMode,
) -> Result<GradResult> {
    let exec = exec_graph_of_ir(graph, payload)?;
    if !mode.is_on() {
        return run_grad_seeds_lowered::<V>(exec, payload, inputs, seeds);
    }
    let detected = || {
        let inputs: Vec<V> = exec.inputs(inputs, payload)?;
        let tape = compile_tape_with(&exec.graph, inputs, mode)?;
        Sweep::of(&exec, mode).run(tape, seeds, &exec.slots)
    };
    detected().map_err(|e| exec.in_ir_terms(graph, e))
}

/// What the releasing sweep of [`run_grad_seeds_lowered`] and [`run_grad_seeds_with`] needs
/// of the lowered graph once its tape is built.
struct Sweep {
    /// Context position and IR node of every output, in order.
    outputs: Vec<(crate::Pos, usize)>,
    input_shapes: Vec<torchlean_spec::Shape>,
    mode: AnomalyMode,
}

impl Sweep {
    /// What the sweep needs of `exec` (which stays alive).
    fn of(exec: &ExecGraph, mode: AnomalyMode) -> Self {
        Sweep {
            outputs: exec.outputs(),
            input_shapes: exec.graph.inputs().to_vec(),
            mode,
        }
    }

    /// The outputs' values, then the releasing sweep from all of them with `seeds` (one per
    /// output; none: ones for each), retaining only the inputs' gradients; every value and
    /// gradient released at the end.
    fn run<V: Kernels>(
        self,
        tape: torchlean_runtime::Tape<V>,
        seeds: &[Tensor<f64>],
        slots: &[crate::InputSlot],
    ) -> Result<GradResult> {
        if !seeds.is_empty() && seeds.len() != self.outputs.len() {
            return Err(CompiledError::SeedCount {
                outputs: self.outputs.len(),
                seeds: seeds.len(),
            });
        }
        let mut values = Vec::with_capacity(self.outputs.len());
        let mut seed_vs = Vec::with_capacity(self.outputs.len());
        for (k, &(pos, ir)) in self.outputs.iter().enumerate() {
            let out_v = tape.get_value(pos).map_err(CompiledError::Runtime)?;
            values.push(out_v.to_f64()?);
            let seed_v = match seed_value::<V>(seeds.get(k), out_v.shape(), ir) {
                Ok(v) => v,
                Err(e) => {
                    seed_vs.into_iter().for_each(|(_, v): (_, V)| v.drop());
                    return Err(e);
                }
            };
            seed_vs.push((pos, seed_v));
        }
        let n_inputs = self.input_shapes.len();
        let mut grads = tape.backward_sparse_seeds_with(seed_vs, |id| id < n_inputs, self.mode)?;
        let mut input_grads = Vec::with_capacity(n_inputs);
        for (i, shape) in self.input_shapes.into_iter().enumerate() {
            input_grads.push(match grads.take(i) {
                Some(g) => {
                    let t = g.to_f64()?;
                    g.drop();
                    t
                }
                None => Tensor::zeros(shape).map_err(|e| CompiledError::Runtime(e.into()))?,
            });
        }
        grads.release();
        tape.release();
        let mut values = values.into_iter();
        let output = values.next().expect("a graph has at least one output");
        Ok(GradResult {
            output,
            extra_outputs: values.collect(),
            grad_inputs: crate::lower::grad_inputs(slots, &input_grads),
            grad_payload: crate::lower::grad_payload(slots, &input_grads),
        })
    }
}

/// One compared quantity of a case.
#[derive(Clone, Debug)]
pub struct Check {
    /// `output`, `grad_input` (`grad_inputs[k]`) or `grad_payload.<node>.<name>`.
    pub what: String,
    pub comparison: Comparison,
    /// Where the worst error is (`None` when nothing differs or nothing could be compared).
    pub worst: Option<Element>,
}

/// One element of a compared tensor: its index and both values.
#[derive(Clone, Debug, PartialEq)]
pub struct Element {
    /// The multi-index, outermost axis first (empty for a scalar).
    pub index: Vec<usize>,
    pub got: f64,
    pub want: f64,
}

impl Check {
    /// Compares `got` (`None`: the run produced no such tensor) with `want` at `tol`.
    fn of(what: String, tol: Tolerance, got: Option<&Tensor<f64>>, want: &Tensor<f64>) -> Check {
        let Some(got) = got else {
            return Check {
                what,
                comparison: Comparison::failed(),
                worst: None,
            };
        };
        let comparison = tol.compare(got, want);
        let worst = comparison.worst_at.map(|i| Element {
            index: want.shape().unravel(i),
            got: got.data()[i],
            want: want.data()[i],
        });
        Check {
            what,
            comparison,
            worst,
        }
    }
}

/// The outcome of one case.
#[derive(Clone, Debug)]
pub struct CaseOutcome {
    pub name: String,
    pub checks: Vec<Check>,
}

impl CaseOutcome {
    /// Every check passed, and there was at least one: a case that checks nothing does not
    /// pass (case files without expectations are refused when parsed).
    pub fn pass(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.comparison.pass)
    }

    /// The worst comparison over all checks.
    pub fn worst(&self) -> Comparison {
        self.checks
            .iter()
            .fold(Comparison::exact(), |a, c| a.merge(c.comparison))
    }
}

/// Runs `case` on engine `V` and compares every expected member with `tol` (the case's own
/// tolerance when `None`): [`run_case_on`] the compiled path.
pub fn run_case<V: Kernels>(case: &Case, tol: Option<Tolerance>) -> Result<CaseOutcome> {
    run_case_on::<V>(GradPath::Compiled, case, tol)
}

/// Runs `case` on engine `V` through `path` and compares every expected member with `tol`
/// (the case's own tolerance when `None`).
pub fn run_case_on<V: Kernels>(
    path: GradPath,
    case: &Case,
    tol: Option<Tolerance>,
) -> Result<CaseOutcome> {
    let tol = tol.unwrap_or(case.tolerance);
    let r = run_grad_on::<V>(
        path,
        &case.graph,
        &case.payload,
        &case.inputs,
        case.seed.as_ref(),
    )?;
    let mut checks = Vec::new();
    if let Some(want) = &case.expect.output {
        checks.push(Check::of("output".into(), tol, Some(&r.output), want));
    }
    if let Some(want) = &case.expect.grad_inputs {
        for (k, w) in want.iter().enumerate() {
            let what = if want.len() == 1 {
                "grad_input".to_string()
            } else {
                format!("grad_inputs[{k}]")
            };
            checks.push(Check::of(what, tol, r.grad_inputs.get(k), w));
        }
    }
    if let Some(want) = &case.expect.grad_payload {
        for (node, entry) in &want.entries {
            for (name, t) in &entry.tensors {
                let got = r.grad_payload.entry(*node).and_then(|e| e.tensor(name));
                checks.push(Check::of(
                    format!("grad_payload.{node}.{name}"),
                    tol,
                    got,
                    t,
                ));
            }
        }
    }
    Ok(CaseOutcome {
        name: case.name.clone(),
        checks,
    })
}
