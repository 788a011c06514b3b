//! The reference reverse semantics (TorchLean's `backpropAllCtx` / `backpropCtx`), written
//! directly on `GraphData`, independently of the tape and of the saved-graph passes.

use crate::error::{CompiledError, Result};
use crate::graph::{GraphData, Pos};
use crate::pack::{compact_pack, dense_pack};
use crate::saved::SavedGraph;
use torchlean_runtime::{Kernels, Saved};

/// The all-context cotangent: nodes in reverse creation order; at each node, its dense
/// contribution (zeros outside its support, repeated arguments summed locally first) is added to
/// **every** earlier position, `running + contribution`. Each position keeps the cotangent it
/// had when it was finalized. `seed` covers the whole context.
pub fn backprop_all_ctx<V: Kernels>(g: &GraphData, inputs: Vec<V>, seed: Vec<V>) -> Result<Vec<V>> {
    let ctx = g.eval(inputs)?;
    if seed.len() != ctx.len() {
        return Err(CompiledError::Length {
            what: "the seed",
            expected: ctx.len(),
            got: seed.len(),
        });
    }
    for (p, (s, v)) in seed.iter().zip(&ctx).enumerate() {
        if s.shape() != v.shape() {
            return Err(CompiledError::ValueShape {
                what: "the seed",
                position: p,
                expected: v.shape().clone(),
                got: s.shape().clone(),
            });
        }
    }
    let shapes: Vec<_> = ctx.iter().map(|v| v.shape().clone()).collect();
    let mut running = seed;
    for (k, node) in g.nodes().iter().enumerate().rev() {
        let p: Pos = g.n_inputs() + k;
        let args: Vec<&V> = node.args.iter().map(|&a| &ctx[a]).collect();
        let saved = Saved::for_op(&node.op, &args, &ctx[p]);
        let contrib = dense_pack(
            compact_pack(&node.op, &node.args, &saved, &running[p])?,
            &shapes[..p],
        )?;
        let tail = running.split_off(p);
        let mut next = Vec::with_capacity(running.len() + tail.len());
        for (r, c) in running.into_iter().zip(contrib) {
            next.push(r.add(c)?);
        }
        next.extend(tail);
        running = next;
    }
    Ok(running)
}

/// The inputs-only cotangent. Runs through the saved-graph implementation (TorchLean's `csimp`
/// lemma `backpropCtx_eq_saved`): `SavedGraph::of_graph(g, inputs).backprop_inputs_stored(seed)`.
pub fn backprop_ctx<V: Kernels>(g: &GraphData, inputs: Vec<V>, seed: Vec<V>) -> Result<Vec<V>> {
    SavedGraph::of_graph(g, inputs)?.backprop_inputs_stored(seed)
}

/// The input prefix of [`backprop_all_ctx`] (what [`backprop_ctx`] must equal).
pub fn backprop_ctx_reference<V: Kernels>(
    g: &GraphData,
    inputs: Vec<V>,
    seed: Vec<V>,
) -> Result<Vec<V>> {
    let mut all = backprop_all_ctx(g, inputs, seed)?;
    all.truncate(g.n_inputs());
    Ok(all)
}
