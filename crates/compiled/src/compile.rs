//! `compile`: GraphData + inputs → a runtime tape and all values (TorchLean's
//! `compileAuxData`), for any value type implementing the kernel trait.

use crate::error::Result;
use crate::graph::GraphData;
use crate::pack::{compact_pack, dense_pack};
use std::sync::Arc;
use torchlean_runtime::{
    check_forward, forward, record, record_compiled, AnomalyMode, Backward, Kernels, Node, Parents,
    Saved, Tape,
};
use torchlean_spec::Shape;

/// What a compiled node's VJP returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompileMode {
    /// One contribution per distinct argument (the support). Linear-time sweeps; the mode to run.
    Compact,
    /// TorchLean's literal `compileAuxData`: a contribution for **every** earlier id (zeros
    /// outside the support), so `backward_dense_from` on the tape is `backprop_all_ctx` bit for
    /// bit for every seed. Quadratic; for checking.
    FullContext,
}

/// [`compile_with`] in [`CompileMode::Compact`].
pub fn compile<V: Kernels>(g: &GraphData, inputs: Vec<V>) -> Result<(Tape<V>, Vec<V>)> {
    compile_with(g, inputs, CompileMode::Compact)
}

/// [`compile`] without the copy of every value: the tape alone (its nodes hold the values).
/// Compiled nodes carry no name string (a recorded node's label is its op's name,
/// [`Tape::node_label`]), so a node costs its tape entry and its op-table entry only.
pub fn compile_tape<V: Kernels>(g: &GraphData, inputs: Vec<V>) -> Result<Tape<V>> {
    compile_tape_with(g, inputs, AnomalyMode::Off)
}

/// [`compile_tape`]; with [`AnomalyMode::Detect`], each value is checked as it is recorded
/// (inputs first) and the first NaN or infinite one stops with a `RuntimeError::Anomaly` naming
/// its tape node (= context position, named by its origin, e.g. `IR node 7`); its operands,
/// checked before it, are finite. The tape is released on that error.
pub fn compile_tape_with<V: Kernels>(
    g: &GraphData,
    inputs: Vec<V>,
    mode: AnomalyMode,
) -> Result<Tape<V>> {
    check_grad_budget(g)?;
    g.check_inputs(&inputs)?;
    let mut tape = Tape::with_capacity(g.len());
    let detect = mode.is_on();
    for (i, v) in inputs.into_iter().enumerate() {
        let id = tape.leaf(v, true, Some(format!("input {i}")));
        if detect {
            if let Err(e) = check_forward(&tape, id, Some("input")) {
                tape.release();
                return Err(e.into());
            }
        }
    }
    for node in g.nodes() {
        // a name only when detecting: a report says where the node came from
        let name = if detect {
            node.origin.map(|o| o.to_string())
        } else {
            None
        };
        let id = record_compiled(&mut tape, node.op.clone(), &node.args, name)?;
        if detect {
            if let Err(e) = check_forward(&tape, id, None) {
                tape.release();
                return Err(e.into());
            }
        }
    }
    Ok(tape)
}

/// `g` recorded as an eager program records it (`nn::Session`): a leaf per input (requiring
/// grad), then each node through [`record`] (`RecordMode::Eager`), so a repeated parent gets one
/// contribution per use, each added to its gradient by the sweep, where the compiled tape
/// folds them first (the local-sum rule). Node ids are context positions, as on the compiled
/// tape; the memory budget is checked first, as for [`compile_tape`].
pub fn eager_tape<V: Kernels>(g: &GraphData, inputs: Vec<V>) -> Result<Tape<V>> {
    check_grad_budget(g)?;
    g.check_inputs(&inputs)?;
    let mut tape = Tape::with_capacity(g.len());
    for v in inputs {
        tape.leaf(v, true, None);
    }
    for node in g.nodes() {
        if let Err(e) = record(&mut tape, node.op.clone(), &node.args, None) {
            tape.release();
            return Err(e.into());
        }
    }
    Ok(tape)
}

/// [`compile`] with anomaly mode ([`compile_tape_with`]), returning every value too.
pub fn compile_detecting<V: Kernels>(
    g: &GraphData,
    inputs: Vec<V>,
    mode: AnomalyMode,
) -> Result<(Tape<V>, Vec<V>)> {
    let tape = compile_tape_with(g, inputs, mode)?;
    let values = tape.nodes().iter().map(|n| n.value.clone()).collect();
    Ok((tape, values))
}

/// Evaluates `g` on `inputs` and records one tape node per context position: a leaf per input
/// (`requires_grad`, no parents, no contributions), then one node per op whose id is its context
/// position and whose VJP returns the node's contribution under the local-sum rule. Returns the
/// tape and every value in context order (the tape's values are the same).
///
/// `Compact` nodes go through the tape's op table ([`record_compiled`]), the route eager
/// recording takes too; `FullContext` nodes (a checking mode) are closures building the dense
/// pack.
pub fn compile_with<V: Kernels>(
    g: &GraphData,
    inputs: Vec<V>,
    mode: CompileMode,
) -> Result<(Tape<V>, Vec<V>)> {
    let tape = match mode {
        CompileMode::Compact => compile_tape(g, inputs)?,
        CompileMode::FullContext => {
            check_grad_budget(g)?;
            g.check_inputs(&inputs)?;
            let mut tape = Tape::with_capacity(g.len());
            for (i, v) in inputs.into_iter().enumerate() {
                tape.leaf(v, true, Some(format!("input {i}")));
            }
            let shapes: Arc<Vec<Shape>> =
                Arc::new((0..g.len()).map(|p| g.shape(p).clone()).collect());
            for (k, node) in g.nodes().iter().enumerate() {
                let p = g.n_inputs() + k;
                let args: Vec<&V> = node
                    .args
                    .iter()
                    .map(|&a| tape.get_value(a))
                    .collect::<std::result::Result<_, _>>()?;
                let value = forward(&node.op, &args).map_err(|e| e.at_node(p))?;
                let saved = Saved::for_op(&node.op, &args, &value);
                let (op, arg_ids, shapes) = (node.op.clone(), node.args.clone(), shapes.clone());
                let backward = Backward::closure(move |cot| {
                    let compact = compact_pack(&op, &arg_ids, &saved, cot)?;
                    Ok(dense_pack(compact, &shapes[..p])?
                        .into_iter()
                        .enumerate()
                        .collect())
                });
                tape.add_node(Node {
                    name: node_name(node),
                    value,
                    owns_value: true,
                    requires_grad: true,
                    parents: Parents::from_slice(&node.args),
                    cleanup: Vec::new(),
                    backward,
                });
            }
            tape
        }
    };
    let values = tape.nodes().iter().map(|n| n.value.clone()).collect();
    Ok((tape, values))
}

/// Tapes exist to be differentiated: values, gradients and backward workspaces must fit the
/// process's memory budget, checked before anything is allocated.
pub(crate) fn check_grad_budget(g: &GraphData) -> Result<()> {
    g.check_budget(
        torchlean_spec::Budget::process_default(),
        crate::graph::BUDGET_ELEM_BYTES,
        torchlean_spec::Pass::Grad,
    )
}

fn node_name(node: &crate::graph::GNode) -> Option<String> {
    Some(node.op.name().to_string())
}
