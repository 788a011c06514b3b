//! `exec_graph_of_ir`: IR graph + payload → `GraphData`, with every weight and constant lifted
//! to an input of the GraphData so that payload gradients come out of the same sweep.

use crate::error::{CompiledError, Result};
use crate::graph::{GraphData, Origin, Pos};
use torchlean_ir::{
    check_payload, check_shapes, node_sem, payload_names, Diagnostic, Graph, InputValues, IrError,
    NodeSem, Payload,
};
use torchlean_runtime::Kernels;
use torchlean_spec::Tensor;

/// Where an input of the lowered graph comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputSlot {
    /// Graph input `index` (its position in [`torchlean_ir::Graph::inputs`]).
    GraphInput { index: usize },
    /// Payload tensor `name` of IR node `node`.
    Payload { node: usize, name: &'static str },
}

/// A lowered IR graph.
#[derive(Clone, Debug)]
pub struct ExecGraph {
    pub graph: GraphData,
    /// One per GraphData input: positions `0..k` are the graph's `k` inputs in order, then
    /// payload tensors in IR node order.
    pub slots: Vec<InputSlot>,
    /// The context position holding each IR node's value.
    pub ir_positions: Vec<Pos>,
    /// The context position of the IR output.
    pub output: Pos,
    /// The IR output node's id (what errors about the output name).
    pub ir_output: usize,
    /// The outputs after the first ([`torchlean_ir::Graph::extra_outputs`]): context position
    /// and IR node id of each, in order.
    pub extra_outputs: Vec<(Pos, usize)>,
}

/// Lowers an IR graph (TorchLean's `execGraphOfIR`, extended): the graph must pass
/// `check_shapes`, its `input_id` must be an `input` node, and every `const`, `linear`, `conv2d`
/// and batch-norm node must have its payload with the right shapes. Every IR kind is covered,
/// including those TorchLean's proof leaves out (`mse_loss`, `log`, `concat`). Errors name the
/// IR node.
pub fn exec_graph_of_ir(g: &Graph, payload: &Payload) -> Result<ExecGraph> {
    let mut problems: Vec<Diagnostic> = check_shapes(g)
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    if problems.is_empty() {
        problems.extend(
            check_payload(g, payload)
                .into_iter()
                .filter(Diagnostic::is_error),
        );
    }
    if !problems.is_empty() {
        return Err(IrError::Invalid(problems).into());
    }
    let mut inputs: Vec<_> = g.inputs().map(|i| g.nodes[i].shape.clone()).collect();
    let mut slots: Vec<InputSlot> = (0..inputs.len())
        .map(|index| InputSlot::GraphInput { index })
        .collect();
    // payload positions per IR node, in the order of `payload_names`
    let mut payload_pos: Vec<Vec<Pos>> = vec![Vec::new(); g.len()];
    for n in &g.nodes {
        for &name in payload_names(&n.kind) {
            let t = payload
                .entry(n.id)
                .and_then(|e| e.tensor(name))
                .ok_or_else(|| missing(n.id, n.kind.name(), name))?;
            payload_pos[n.id].push(inputs.len());
            inputs.push(t.shape().clone());
            slots.push(InputSlot::Payload { node: n.id, name });
        }
    }
    let mut graph = GraphData::new(inputs)?;
    let mut ir_positions: Vec<Pos> = Vec::with_capacity(g.len());
    for n in &g.nodes {
        let pos = match node_sem(n, Some(payload)) {
            NodeSem::Input => g.input_position(n.id),
            NodeSem::Const => payload_pos[n.id][0],
            NodeSem::Apply(op) => {
                let mut args: Vec<Pos> = n.parents.iter().map(|&p| ir_positions[p]).collect();
                args.extend(payload_pos[n.id].iter().copied());
                graph
                    .push(op, args, Some(Origin::IrNode(n.id)))
                    .map_err(|e| CompiledError::AtIrNode {
                        node: n.id,
                        kind: n.kind.name(),
                        source: Box::new(e),
                    })?
            }
        };
        ir_positions.push(pos);
    }
    let output = ir_positions[g.output_id];
    // `check_shapes` above checked that every output is a node
    let extra_outputs = g
        .extra_outputs
        .iter()
        .map(|&o| (ir_positions[o], o))
        .collect();
    Ok(ExecGraph {
        graph,
        slots,
        ir_positions,
        output,
        ir_output: g.output_id,
        extra_outputs,
    })
}

fn missing(node: usize, kind: &str, name: &str) -> CompiledError {
    IrError::invalid(
        Diagnostic::error(format!("missing payload tensor `{name}`"))
            .at(node, kind)
            .field(name),
    )
    .into()
}

impl ExecGraph {
    /// Every output, in order: context position and IR node id.
    pub fn outputs(&self) -> Vec<(Pos, usize)> {
        std::iter::once((self.output, self.ir_output))
            .chain(self.extra_outputs.iter().copied())
            .collect()
    }

    /// How many graph inputs the lowered graph takes (its first GraphData inputs).
    pub fn graph_input_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, InputSlot::GraphInput { .. }))
            .count()
    }

    /// The GraphData inputs for the graph's input tensors (one per graph input, in order) and
    /// a payload, in engine values.
    pub fn inputs<V: Kernels>(
        &self,
        xs: &(impl InputValues<f64> + ?Sized),
        payload: &Payload,
    ) -> Result<Vec<V>> {
        let xs = xs.tensors();
        if xs.len() != self.graph_input_count() {
            return Err(CompiledError::InputCount {
                expected: self.graph_input_count(),
                got: xs.len(),
            });
        }
        self.slots
            .iter()
            .map(|slot| match slot {
                InputSlot::GraphInput { index } => Ok(V::from_f64(&xs[*index])?),
                InputSlot::Payload { node, name } => {
                    let t = payload
                        .entry(*node)
                        .and_then(|e| e.tensor(name))
                        .ok_or_else(|| missing(*node, "payload", name))?;
                    Ok(V::from_f64(t)?)
                }
            })
            .collect::<Result<Vec<V>>>()
            .and_then(|v| {
                self.graph.check_inputs(&v)?;
                Ok(v)
            })
    }
}

/// Gradients of the graph inputs (by `slots`), in input order.
pub(crate) fn grad_inputs(slots: &[InputSlot], input_grads: &[Tensor<f64>]) -> Vec<Tensor<f64>> {
    slots
        .iter()
        .zip(input_grads)
        .filter(|(slot, _)| matches!(slot, InputSlot::GraphInput { .. }))
        .map(|(_, g)| g.clone())
        .collect()
}

/// Gradients of the payload inputs (by `slots`), keyed back by IR node and name.
pub(crate) fn grad_payload(slots: &[InputSlot], input_grads: &[Tensor<f64>]) -> Payload {
    let mut p = Payload::new();
    for (slot, g) in slots.iter().zip(input_grads) {
        if let InputSlot::Payload { node, name } = slot {
            p.insert(*node, name, g.clone());
        }
    }
    p
}
