//! `compile`: GraphData + inputs → a runtime tape and all values (TorchLean's
//! `compileAuxData`), for any value type implementing the kernel trait.

use crate::error::Result;
use crate::graph::GraphData;
use crate::pack::{compact_pack, dense_pack};
use std::sync::Arc;
use torchlean_runtime::{Backward, Kernels, Node, Parents, Saved, Tape};
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

/// Evaluates `g` on `inputs` and records one tape node per context position: a leaf per input
/// (`requires_grad`, no parents, no contributions), then one node per op whose id is its context
/// position and whose VJP returns the node's contribution ([`crate::pack`]'s local-sum rule).
/// Returns the tape and every value in context order (the tape's values are the same).
pub fn compile_with<V: Kernels>(
    g: &GraphData,
    inputs: Vec<V>,
    mode: CompileMode,
) -> Result<(Tape<V>, Vec<V>)> {
    let values = g.eval(inputs)?;
    let shapes: Arc<Vec<Shape>> = Arc::new(values.iter().map(|v| v.shape().clone()).collect());
    let mut tape = Tape::with_capacity(values.len());
    for (i, v) in values.iter().take(g.n_inputs()).enumerate() {
        tape.leaf(v.clone(), true, Some(format!("input {i}")));
    }
    for (k, node) in g.nodes().iter().enumerate() {
        let p = g.n_inputs() + k;
        let args: Vec<&V> = node.args.iter().map(|&a| &values[a]).collect();
        let saved = Saved::for_op(&node.op, &args, &values[p]);
        let (op, arg_ids) = (node.op.clone(), node.args.clone());
        let shapes = shapes.clone();
        let backward = match mode {
            CompileMode::Compact => Backward::closure(move |cot| {
                compact_pack(&op, &arg_ids, &saved, cot).map_err(into_runtime)
            }),
            CompileMode::FullContext => Backward::closure(move |cot| {
                let compact = compact_pack(&op, &arg_ids, &saved, cot).map_err(into_runtime)?;
                let dense = dense_pack(compact, &shapes[..p]).map_err(into_runtime)?;
                Ok(dense.into_iter().enumerate().collect())
            }),
        };
        let mut parents = Parents::from_slice(&node.args);
        parents.dedup();
        tape.add_node(Node {
            name: Some(node.op.name().to_string()),
            value: values[p].clone(),
            owns_value: true,
            requires_grad: true,
            parents,
            cleanup: Vec::new(),
            backward,
        });
    }
    Ok((tape, values))
}

fn into_runtime(e: crate::error::CompiledError) -> torchlean_runtime::RuntimeError {
    match e {
        crate::error::CompiledError::Runtime(r) => r,
        other => torchlean_runtime::RuntimeError::Invalid(other.to_string()),
    }
}
