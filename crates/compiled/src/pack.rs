//! A node's cotangent contribution to the context, in the two forms the passes use: compact
//! (the support: one entry per distinct argument position) and dense (one entry per earlier
//! position, zeros outside the support).
//!
//! The local-sum rule — the one place it is written: a node whose arguments repeat a position
//! (`add(a, a)`, `concat(a, b, a)`) forms that position's contribution *locally first*, folding
//! the per-argument cotangents in argument order (first as is, then `acc + c`), and the passes
//! then apply one `running + contribution` per position. Structural zeros (`None` from the VJP,
//! e.g. through `detach`) are skipped; a position whose every cotangent is a structural zero is
//! not in the support.

use crate::error::{CompiledError, Result};
use crate::graph::Pos;
use torchlean_runtime::{Kernels, Saved};
use torchlean_spec::{Op, Shape};

/// Runs `op`'s VJP and folds it into `(position, contribution)` pairs, positions in
/// first-occurrence order.
pub fn compact_pack<V: Kernels>(
    op: &Op,
    args: &[Pos],
    saved: &Saved<V>,
    cot: &V,
) -> Result<Vec<(Pos, V)>> {
    let grads = V::vjp(op, saved, cot)?;
    if grads.len() != args.len() {
        return Err(CompiledError::Length {
            what: "the VJP's cotangents",
            expected: args.len(),
            got: grads.len(),
        });
    }
    let mut out: Vec<(Pos, Option<V>)> = Vec::with_capacity(args.len());
    for (&pos, g) in args.iter().zip(grads) {
        let Some(g) = g else { continue };
        match out.iter().position(|(p, _)| *p == pos) {
            None => out.push((pos, Some(g))),
            Some(i) => {
                // invariant: every entry is filled between iterations
                let acc = out[i].1.take().expect("filled slot");
                out[i].1 = Some(acc.add(g)?);
            }
        }
    }
    Ok(out
        .into_iter()
        .filter_map(|(p, v)| v.map(|v| (p, v)))
        .collect())
}

/// The dense form: one contribution per position `0..prefix.len()`, zeros outside `compact`.
pub fn dense_pack<V: Kernels>(compact: Vec<(Pos, V)>, prefix: &[Shape]) -> Result<Vec<V>> {
    let mut slots: Vec<Option<V>> = (0..prefix.len()).map(|_| None).collect();
    for (p, v) in compact {
        let len = slots.len();
        let slot = slots
            .get_mut(p)
            .ok_or(CompiledError::NoSuchPosition { position: p, len })?;
        *slot = Some(v);
    }
    slots
        .into_iter()
        .zip(prefix)
        .map(|(s, shape)| match s {
            Some(v) => Ok(v),
            None => Ok(V::full(shape, 0.0)?),
        })
        .collect()
}
