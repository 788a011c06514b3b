//! Running a `torchlean.case.v1` case on an engine: lower, evaluate, sweep, compare.

use crate::compile::compile_detecting;
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
    run_grad_with::<V>(graph, payload, input, seed, AnomalyMode::Off)
}

/// [`run_grad`]; with [`AnomalyMode::Detect`], stops at the first IR node whose forward value
/// or backward gradient contribution is NaN or infinite while what it was computed from was
/// finite, with a [`CompiledError::Anomaly`] naming the IR node, its kind, shapes and parents.
pub fn run_grad_with<V: Kernels>(
    graph: &torchlean_ir::Graph,
    payload: &Payload,
    input: &Tensor<f64>,
    seed: Option<&Tensor<f64>>,
    mode: AnomalyMode,
) -> Result<GradResult> {
    let exec = exec_graph_of_ir(graph, payload)?;
    differentiate::<V>(&exec, payload, input, seed, mode).map_err(|e| exec.in_ir_terms(graph, e))
}

/// The forward and the releasing sweep of [`run_grad_with`] on a lowered graph.
fn differentiate<V: Kernels>(
    exec: &ExecGraph,
    payload: &Payload,
    input: &Tensor<f64>,
    seed: Option<&Tensor<f64>>,
    mode: AnomalyMode,
) -> Result<GradResult> {
    let inputs: Vec<V> = exec.inputs(input, payload)?;
    let (tape, values) = compile_detecting(&exec.graph, inputs, mode)?;
    let out_v = &values[exec.output];
    let output = out_v.to_f64()?;
    let seed_v = match seed {
        Some(s) => V::from_f64(s)?,
        None => V::full(out_v.shape(), 1.0)?,
    };
    let n_inputs = exec.graph.n_inputs();
    let mut grads = tape.backward_sparse_with(exec.output, seed_v, |id| id < n_inputs, mode)?;
    let mut input_grads = Vec::with_capacity(n_inputs);
    for (i, shape) in exec.graph.inputs().iter().enumerate() {
        input_grads.push(match grads.take(i) {
            Some(g) => {
                let t = g.to_f64()?;
                g.drop();
                t
            }
            None => Tensor::zeros(shape.clone()).map_err(|e| CompiledError::Runtime(e.into()))?,
        });
    }
    grads.release();
    tape.release();
    Ok(GradResult {
        output,
        grad_input: input_grads[0].clone(),
        grad_payload: exec.grad_payload(&input_grads),
    })
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
    pub fn pass(&self) -> bool {
        self.checks.iter().all(|c| c.comparison.pass)
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
                    None => Comparison {
                        max_abs: f64::INFINITY,
                        max_rel: f64::INFINITY,
                        pass: false,
                    },
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
