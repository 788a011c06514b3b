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
    pub output: Tensor<f64>,
    pub grad_input: Tensor<f64>,
    pub grad_payload: Payload,
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
    let inputs: Vec<V> = exec.inputs(input, payload)?;
    let tape = compile_tape_with(&exec.graph, inputs, AnomalyMode::Off)?;
    let ExecGraph {
        graph,
        slots,
        output,
        ir_output,
        ..
    } = exec;
    let input_shapes = graph.inputs().to_vec();
    drop(graph);
    let at = Sweep {
        output,
        ir_output,
        input_shapes,
        mode: AnomalyMode::Off,
    };
    at.run(tape, seed, &slots)
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
    if !mode.is_on() {
        return run_grad::<V>(graph, payload, input, seed);
    }
    let exec = exec_graph_of_ir(graph, payload)?;
    let detected = || {
        let inputs: Vec<V> = exec.inputs(input, payload)?;
        let tape = compile_tape_with(&exec.graph, inputs, mode)?;
        let at = Sweep {
            output: exec.output,
            ir_output: exec.ir_output,
            input_shapes: exec.graph.inputs().to_vec(),
            mode,
        };
        at.run(tape, seed, &exec.slots)
    };
    detected().map_err(|e| exec.in_ir_terms(graph, e))
}

/// What the releasing sweep of [`run_grad_lowered`] and [`run_grad_with`] needs of the lowered
/// graph once its tape is built.
struct Sweep {
    output: crate::Pos,
    ir_output: usize,
    input_shapes: Vec<torchlean_spec::Shape>,
    mode: AnomalyMode,
}

impl Sweep {
    /// The output's value, then the releasing sweep from it with `seed` (ones when absent),
    /// retaining only the inputs' gradients; every value and gradient released at the end.
    fn run<V: Kernels>(
        self,
        tape: torchlean_runtime::Tape<V>,
        seed: Option<&Tensor<f64>>,
        slots: &[crate::InputSlot],
    ) -> Result<GradResult> {
        let out_v = tape
            .get_value(self.output)
            .map_err(CompiledError::Runtime)?;
        let output = out_v.to_f64()?;
        let seed_v = match seed {
            Some(s) if s.shape() != out_v.shape() => {
                return Err(CompiledError::SeedShape {
                    node: self.ir_output,
                    expected: out_v.shape().clone(),
                    got: s.shape().clone(),
                })
            }
            Some(s) => V::from_f64(s)?,
            None => V::full(out_v.shape(), 1.0)?,
        };
        let n_inputs = self.input_shapes.len();
        let mut grads =
            tape.backward_sparse_with(self.output, seed_v, |id| id < n_inputs, self.mode)?;
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
        Ok(GradResult {
            output,
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
