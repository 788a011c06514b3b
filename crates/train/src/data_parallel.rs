//! Data-parallel steps: what the trainers do with a [`World`] of several ranks.
//!
//! Every rank holds the whole model. A step's global batch is drawn from the one seeded stream
//! as a single process would, and rank `r` computes the loss and gradients of its share of the
//! rows ([`World::share`]); [`all_reduce_mean`] then weights each rank's mean by its share of
//! the rows and sums them, so every rank holds the global batch's mean loss and gradients: the
//! step one process would take on the whole batch (up to the order of the additions), the
//! same bits on every rank.
//!
//! Invariant: every rank calls the same collectives in the same order (the trainers decide
//! from values every rank has: the step, the configuration, an all-reduced flag).

use std::any::Any;
use std::collections::BTreeMap;

use num_traits::{Float, FromPrimitive, ToPrimitive};
use torchlean_distributed::{first_difference, hash_bits, World};
use torchlean_runtime::{Element, TrainValue};

use crate::error::{Result, TrainError};

/// Ranks compare their parameters every this many steps (and at the end of a run).
pub const SYNC_CHECK_EVERY: u64 = 100;

/// [`check_in_sync`] after step `step` on several ranks: every [`SYNC_CHECK_EVERY`] steps, and
/// when the run stops (its last step, or an agreed early stop).
pub fn check_in_sync_if_due<V: TrainValue>(
    world: &World,
    params: &BTreeMap<String, V>,
    step: u64,
    stopping: bool,
) -> Result<()> {
    if world.size() > 1 && (stopping || step.is_multiple_of(SYNC_CHECK_EVERY)) {
        check_in_sync(world, params, step)?;
    }
    Ok(())
}

/// `grads` (this rank's mean gradients over `rows` of the global batch's `total` rows) and
/// `loss` become the global batch's mean gradients and loss on every rank. They travel in the
/// engine's own precision (an f32 engine's in f32: half the bytes), weighted by the rank's
/// share of the rows and summed in rank order, with the loss as one more element. A world of
/// one changes nothing.
pub fn all_reduce_mean<V: TrainValue>(
    world: &World,
    grads: &mut BTreeMap<String, V>,
    loss: f64,
    rows: usize,
    total: usize,
) -> Result<f64> {
    if world.size() == 1 {
        return Ok(loss);
    }
    let elem = |x: f64| -> V::Elem { FromPrimitive::from_f64(x).unwrap_or_else(Float::nan) };
    let weight = elem(rows as f64 / total as f64);
    let mut values: Vec<&mut V> = grads.values_mut().collect();
    V::update_all(&mut values, |slices| {
        let len: usize = slices.iter().map(|s| s.len()).sum();
        let mut flat: Vec<V::Elem> = Vec::with_capacity(len + 1);
        for s in slices.iter() {
            flat.extend(s.iter().map(|&x| x * weight));
        }
        flat.push(elem(loss) * weight);
        all_reduce_elements(world, &mut flat)?;
        for (x, &sum) in slices.iter_mut().flat_map(|s| s.iter_mut()).zip(&flat) {
            *x = sum;
        }
        Ok::<_, TrainError>(flat[len].to_f64().unwrap_or(f64::NAN))
    })
}

/// [`World::all_reduce_sum`] on an engine's elements: as they are for `f32` and `f64` (the
/// engines' two), through `f64` for an [`Element`] of another crate.
// a `Vec`, not a slice: `Any` downcasts sized types only
#[allow(clippy::ptr_arg)]
fn all_reduce_elements<E: Element>(world: &World, flat: &mut Vec<E>) -> Result<()> {
    const WHAT: &str = "the gradients";
    let any: &mut dyn Any = flat;
    if let Some(v) = any.downcast_mut::<Vec<f32>>() {
        return Ok(world.all_reduce_sum(WHAT, v)?);
    }
    if let Some(v) = any.downcast_mut::<Vec<f64>>() {
        return Ok(world.all_reduce_sum(WHAT, v)?);
    }
    let mut wide: Vec<f64> = flat
        .iter()
        .map(|x| x.to_f64().unwrap_or(f64::NAN))
        .collect();
    world.all_reduce_sum(WHAT, &mut wide)?;
    for (x, &w) in flat.iter_mut().zip(&wide) {
        *x = FromPrimitive::from_f64(w).unwrap_or_else(Float::nan);
    }
    Ok(())
}

/// The mean of each group of `values` (this rank's weighted terms, `groups` equal groups laid
/// end to end) summed over the ranks: one all-reduce for a whole evaluation.
pub fn all_reduce_group_means(
    world: &World,
    mut values: Vec<f64>,
    groups: usize,
) -> Result<Vec<f64>> {
    world.all_reduce_sum("the evaluation losses", &mut values)?;
    let n = values.len() / groups.max(1);
    Ok(values
        .chunks(n.max(1))
        .map(|g| g.iter().sum::<f64>() / n as f64)
        .collect())
}

/// Every parameter becomes rank 0's (the start of a run: the seeded initialisation or the
/// checkpoint read by every rank, made certainly the same).
pub fn broadcast_params<'a, V: TrainValue + 'a>(
    world: &World,
    params: impl Iterator<Item = &'a mut V>,
) -> Result<()> {
    if world.size() == 1 {
        return Ok(());
    }
    let mut values: Vec<&mut V> = params.collect();
    V::update_all(&mut values, |slices| {
        let mut flat: Vec<f64> = slices
            .iter()
            .flat_map(|s| s.iter().map(|x| x.to_f64().unwrap_or(f64::NAN)))
            .collect();
        world.broadcast("the parameters", &mut flat)?;
        for (x, &v) in slices.iter_mut().flat_map(|s| s.iter_mut()).zip(&flat) {
            *x = FromPrimitive::from_f64(v).unwrap_or_else(Float::nan);
        }
        Ok::<_, TrainError>(())
    })
}

/// Whether the ranks still hold the same parameters, bit for bit: a hash of each parameter,
/// gathered from every rank; the first parameter (in name order) where a rank differs from
/// rank 0 is an error on every rank.
pub fn check_in_sync<V: TrainValue>(
    world: &World,
    params: &BTreeMap<String, V>,
    step: u64,
) -> Result<()> {
    if world.size() == 1 {
        return Ok(());
    }
    let mut hashes = Vec::with_capacity(params.len());
    for v in params.values() {
        hashes.push(hash_bits(
            v.read()?.iter().map(|x| x.to_f64().unwrap_or(f64::NAN)),
        ));
    }
    let all = world.all_gather(&hashes)?;
    match first_difference(&all) {
        None => Ok(()),
        Some((i, rank)) => Err(TrainError::RanksDiverged {
            step,
            param: params.keys().nth(i).cloned().unwrap_or_default(),
            rank,
        }),
    }
}

/// A run of `batch` rows on `world` is refused if some rank would get no rows.
pub fn check_batch(world: &World, batch: usize) -> Result<()> {
    if batch < world.size() {
        return Err(TrainError::BatchBelowRanks {
            batch,
            ranks: world.size(),
        });
    }
    Ok(())
}
