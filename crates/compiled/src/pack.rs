//! A node's cotangent contribution to the context, in the two forms the passes use: compact
//! (the support: one entry per distinct argument position) and dense (one entry per earlier
//! position, zeros outside the support).
//!
//! Both apply the local-sum rule of `torchlean_runtime::fold_repeated_operands` (the one place
//! it is written, shared with compiled tapes): a node whose arguments repeat a position
//! (`add(a, a)`, `concat(a, b, a)`) forms that position's contribution *locally first*, folding
//! the per-argument cotangents in argument order (first as is, then `acc + c`), and the passes
//! then apply one `running + contribution` per position. Structural zeros (`None` from the VJP,
//! e.g. through `detach`) are skipped; a position whose every cotangent is a structural zero is
//! not in the support.

use crate::graph::Pos;
use torchlean_runtime::{fold_repeated_operands, vjp, Kernels, Result, RuntimeError, Saved};
use torchlean_spec::{Op, Shape};

/// Runs `op`'s VJP and folds it into `(position, contribution)` pairs, positions in
/// first-occurrence order.
pub fn compact_pack<V: Kernels>(
    op: &Op,
    args: &[Pos],
    saved: &Saved<V>,
    cot: &V,
) -> Result<Vec<(Pos, V)>> {
    let mut grads = vjp(op, saved, cot)?;
    if grads.len() != args.len() {
        return Err(RuntimeError::VjpArity {
            op: op.name(),
            node: None,
            expected: args.len(),
            got: grads.len(),
        });
    }
    fold_repeated_operands(args, &mut grads)?;
    Ok(args
        .iter()
        .zip(grads)
        .filter_map(|(&p, g)| g.map(|g| (p, g)))
        .collect())
}

/// The dense form: one contribution per position `0..prefix.len()`, zeros outside `compact`.
pub fn dense_pack<V: Kernels>(compact: Vec<(Pos, V)>, prefix: &[Shape]) -> Result<Vec<V>> {
    let mut slots: Vec<Option<V>> = (0..prefix.len()).map(|_| None).collect();
    for (p, v) in compact {
        let size = slots.len();
        let slot = slots
            .get_mut(p)
            .ok_or(RuntimeError::NoSuchNode { id: p, size })?;
        *slot = Some(v);
    }
    slots
        .into_iter()
        .zip(prefix)
        .map(|(s, shape)| match s {
            Some(v) => Ok(v),
            None => V::full(shape, 0.0),
        })
        .collect()
}
