//! A program written once (TorchLean's `Program`): generic code over [`Ops`], run by either
//! interpreter. [`IrProgram`] runs a `torchlean.ir.v1` graph as a program, so every graph the
//! generators of `equiv` make, and every conformance case, is also a program.

use crate::error::{NnError, ProgramProblem, Result};
use crate::ops::{Ops, Var};
use std::collections::HashMap;
use torchlean_ir::{
    check_shapes, node_sem, payload_names, Diagnostic, Graph, IrError, NodeSem, Payload,
};
use torchlean_spec::Tensor;

/// A model: `run` builds its output from an input, through `ops` only.
pub trait Program {
    fn run<O: Ops>(&self, ops: &mut O, x: &Var) -> Result<Var>;
}

/// An IR graph as a program. Its payload tensors are parameters named as `torchlean grad`
/// reports their gradients (`"<node id>.<name>"`, e.g. `"3.weight"`, `"5.value"` for a
/// constant), declared in IR node order before any op runs — the order `exec_graph_of_ir`
/// lifts them to GraphData inputs — so the eager tape and the compiled graph number their
/// values alike.
#[derive(Clone, Debug)]
pub struct IrProgram<'g> {
    pub graph: &'g Graph,
    pub payload: &'g Payload,
    pub naming: ParamNaming<'g>,
}

/// Which payload tensors of an [`IrProgram`] are parameters, and their names.
#[derive(Clone, Copy, Debug)]
pub enum ParamNaming<'g> {
    /// Every payload tensor, named `"<node id>.<name>"` ([`IrProgram::param_name`]): what
    /// `torchlean grad` reports.
    ByNode,
    /// Only the payload tensors in the map, under its names (an imported model's initializers
    /// under their ONNX names); the others are constants.
    Only(&'g HashMap<(usize, &'static str), String>),
}

impl IrProgram<'_> {
    /// The parameter name of payload tensor `name` of IR node `node`.
    pub fn param_name(node: usize, name: &str) -> String {
        format!("{node}.{name}")
    }
}

impl Program for IrProgram<'_> {
    /// Fails (naming every problem) on a graph that does not pass `check_shapes`, before any
    /// op runs, and on a graph of several inputs ([`IrProgram::run_inputs`] takes them).
    fn run<O: Ops>(&self, ops: &mut O, x: &Var) -> Result<Var> {
        self.run_inputs(ops, std::slice::from_ref(x))
    }
}

impl IrProgram<'_> {
    /// [`Program::run`] with one value per graph input, in input order.
    pub fn run_inputs<O: Ops>(&self, ops: &mut O, xs: &[Var]) -> Result<Var> {
        if xs.len() != self.graph.input_count() {
            return Err(NnError::Program {
                problem: ProgramProblem::Inputs {
                    expected: self.graph.input_count(),
                    given: xs.len(),
                },
            });
        }
        let problems: Vec<Diagnostic> = check_shapes(self.graph)
            .into_iter()
            .filter(Diagnostic::is_error)
            .collect();
        if !problems.is_empty() {
            return Err(IrError::Invalid(problems).into());
        }
        let mut params: Vec<Vec<Var>> = Vec::with_capacity(self.graph.len());
        for n in &self.graph.nodes {
            let mut own = Vec::new();
            for &name in payload_names(&n.kind) {
                let t: &Tensor<f64> = self
                    .payload
                    .entry(n.id)
                    .and_then(|e| e.tensor(name))
                    .ok_or(NnError::Program {
                        problem: ProgramProblem::MissingPayload { node: n.id, name },
                    })?;
                own.push(match self.naming {
                    ParamNaming::ByNode => ops.param(&IrProgram::param_name(n.id, name), t)?,
                    ParamNaming::Only(names) => match names.get(&(n.id, name)) {
                        Some(param) => ops.param(param, t)?,
                        None => ops.constant(t)?,
                    },
                });
            }
            params.push(own);
        }
        let mut vals: Vec<Var> = Vec::with_capacity(self.graph.len());
        for n in &self.graph.nodes {
            let v = match node_sem(n, Some(self.payload)) {
                NodeSem::Input => xs[self.graph.input_position(n.id)].clone(),
                NodeSem::Const => params[n.id][0].clone(),
                NodeSem::Apply(op) => {
                    let mut args: Vec<&Var> = n.parents.iter().map(|&p| &vals[p]).collect();
                    args.extend(params[n.id].iter());
                    ops.apply(op, &args)?
                }
            };
            vals.push(v);
        }
        Ok(vals.swap_remove(self.graph.output_id))
    }
}
