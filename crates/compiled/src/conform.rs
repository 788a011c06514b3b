//! Running a `torchlean.case.v1` case on an engine: lower, evaluate, sweep, compare.

use crate::compile::compile_tape_with;
use crate::error::{CompiledError, Result};
use crate::lower::{exec_graph_of_ir, ExecGraph};
use torchlean_ir::{Case, Comparison, Payload, Tolerance};
use torchlean_runtime::{AnomalyMode, Kernels};
use torchlean_spec::Tensor;

/// What running a graph forward and backward produced, in `f64`.
#[derive(Clone, Debug)]
pub struct GradResult {
    /// The (first) output's value.
    pub output: Tensor<f64>,
    /// The values of the outputs after the first, in order (empty for one output).
    pub extra_outputs: Vec<Tensor<f64>>,
    pub grad_input: Tensor<f64>,
    pub grad_payload: Payload,
}

impl GradResult {
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
    input: &Tensor<f64>,
    seed: Option<&Tensor<f64>>,
) -> Result<GradResult> {
    run_grad_lowered::<V>(exec_graph_of_ir(graph, payload)?, payload, input, seed)
}

/// [`run_grad`] on a lowered graph, which it consumes: the GraphData is dropped as soon as the
/// tape is built, so the sweep runs with only the tape (no copy of every value, no name string
/// per node) and the gradient slots in memory.
pub fn run_grad_lowered<V: Kernels>(
    exec: ExecGraph,
    payload: &Payload,
    input: &Tensor<f64>,
    seed: Option<&Tensor<f64>>,
) -> Result<GradResult> {
    let seeds = one_seed(seed, 1 + exec.extra_outputs.len())?;
    run_grad_seeds_lowered::<V>(exec, payload, input, &seeds)
}

/// [`run_grad_lowered`] with one seed per output, in output order (none: ones for every
/// output): the gradients are the sum of each output's pullback, from one sweep.
pub fn run_grad_seeds_lowered<V: Kernels>(
    exec: ExecGraph,
    payload: &Payload,
    input: &Tensor<f64>,
    seeds: &[Tensor<f64>],
) -> Result<GradResult> {
    let inputs: Vec<V> = exec.inputs(input, payload)?;
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

/// [`run_grad`]; with [`AnomalyMode::Detect`], stops at the first IR node whose forward value
/// or backward gradient contribution is NaN or infinite while what it was computed from was
/// finite, with a [`CompiledError::Anomaly`] naming the IR node, its kind, shapes and parents.
/// (The lowered graph is kept to the end, to state a finding in IR terms.)
pub fn run_grad_with<V: Kernels>(
    graph: &torchlean_ir::Graph,
    payload: &Payload,
    input: &Tensor<f64>,
    seed: Option<&Tensor<f64>>,
    mode: AnomalyMode,
) -> Result<GradResult> {
    let seeds = one_seed(seed, graph.output_count())?;
    run_grad_seeds_with::<V>(graph, payload, input, &seeds, mode)
}

/// [`run_grad_with`] with one seed per output, in output order (none: ones for every output).
pub fn run_grad_seeds_with<V: Kernels>(
    graph: &torchlean_ir::Graph,
    payload: &Payload,
    input: &Tensor<f64>,
    seeds: &[Tensor<f64>],
    mode: AnomalyMode,
) -> Result<GradResult> {
    let exec = exec_graph_of_ir(graph, payload)?;
    if !mode.is_on() {
        return run_grad_seeds_lowered::<V>(exec, payload, input, seeds);
    }
    let detected = || {
        let inputs: Vec<V> = exec.inputs(input, payload)?;
        let tape = compile_tape_with(&exec.graph, inputs, mode)?;
        let at = Sweep {
            outputs: exec.outputs(),
            input_shapes: exec.graph.inputs().to_vec(),
            mode,
        };
        at.run(tape, seeds, &exec.slots)
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
            let seed_v = match seeds.get(k) {
                Some(s) if s.shape() != out_v.shape() => {
                    seed_vs.into_iter().for_each(|(_, v): (_, V)| v.drop());
                    return Err(CompiledError::SeedShape {
                        node: ir,
                        expected: out_v.shape().clone(),
                        got: s.shape().clone(),
                    });
                }
                Some(s) => V::from_f64(s)?,
                None => V::full(out_v.shape(), 1.0)?,
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
            grad_input: input_grads[0].clone(),
            grad_payload: crate::lower::grad_payload(slots, &input_grads),
        })
    }
}

/// One compared quantity of a case.
#[derive(Clone, Debug)]
pub struct Check {
    /// `output`, `grad_input` or `grad_payload.<node>.<name>`.
    pub what: String,
    pub comparison: Comparison,
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
/// tolerance when `None`).
pub fn run_case<V: Kernels>(case: &Case, tol: Option<Tolerance>) -> Result<CaseOutcome> {
    let tol = tol.unwrap_or(case.tolerance);
    let r = run_grad::<V>(&case.graph, &case.payload, &case.input, case.seed.as_ref())?;
    let mut checks = Vec::new();
    if let Some(want) = &case.expect.output {
        checks.push(Check {
            what: "output".into(),
            comparison: tol.compare(&r.output, want),
        });
    }
    if let Some(want) = &case.expect.grad_input {
        checks.push(Check {
            what: "grad_input".into(),
            comparison: tol.compare(&r.grad_input, want),
        });
    }
    if let Some(want) = &case.expect.grad_payload {
        for (node, entry) in &want.entries {
            for (name, t) in &entry.tensors {
                let got = r.grad_payload.entry(*node).and_then(|e| e.tensor(name));
                let comparison = match got {
                    Some(g) => tol.compare(g, t),
                    None => Comparison::failed(),
                };
                checks.push(Check {
                    what: format!("grad_payload.{node}.{name}"),
                    comparison,
                });
            }
        }
    }
    Ok(CaseOutcome {
        name: case.name.clone(),
        checks,
    })
}
