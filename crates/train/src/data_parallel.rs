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

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use num_traits::{Float, FromPrimitive, ToPrimitive};
use torchlean_distributed::{first_difference, hash_bits, Summand, World};
use torchlean_nn::{Session, Sweep, Swept, Var};
use torchlean_runtime::{Element, TrainValue};
use torchlean_spec::Shape;

use crate::error::{Result, TrainError};
use crate::trainer::chunk_sizes;

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
    let weight: V::Elem = elem(rows as f64 / total as f64);
    let mut values: Vec<&mut V> = grads.values_mut().collect();
    V::update_all(&mut values, |slices| {
        let len: usize = slices.iter().map(|s| s.len()).sum();
        let mut flat: Vec<V::Elem> = Vec::with_capacity(len + 1);
        for s in slices.iter() {
            flat.extend(s.iter().map(|&x| x * weight));
        }
        flat.push(elem::<V::Elem>(loss) * weight);
        all_reduce_elements(world, &mut flat)?;
        for (x, &sum) in slices.iter_mut().flat_map(|s| s.iter_mut()).zip(&flat) {
            *x = sum;
        }
        Ok::<_, TrainError>(flat[len].to_f64().unwrap_or(f64::NAN))
    })
}

/// The gradients of one training step as buckets of about `bucket_bytes` ([`BucketPlan`]),
/// each sent to the other ranks as soon as the releasing sweep has finished it, while the
/// sweep goes on: the backward of `loss` (this rank's mean over `rows` of the global batch's
/// `total`) and [`all_reduce_mean`] at once, with the same result, bit for bit. Returns the
/// global batch's mean gradients and loss ([`Reduced`]). `bucket_bytes` 0, or a world of one,
/// sweeps first and sums after, in one piece. A world of one reads nothing back: the loss
/// stays where the engine computed it.
pub fn backward_all_reduced<V: TrainValue>(
    world: &World,
    session: &mut Session<V>,
    loss: &Var,
    rows: usize,
    total: usize,
    bucket_bytes: usize,
) -> Result<Reduced<V>> {
    if world.size() == 1 {
        let value = session.value(loss)?.clone();
        session.backward(loss, Sweep::Releasing)?;
        return Ok(Reduced {
            grads: session.take_param_grads(),
            loss: value,
            exposed: Duration::ZERO,
        });
    }
    let local = *session.value_f64(loss)?.item()?;
    if bucket_bytes == 0 {
        session.backward(loss, Sweep::Releasing)?;
        let mut grads = session.take_param_grads();
        let started = Instant::now();
        let loss = all_reduce_mean(world, &mut grads, local, rows, total)?;
        return Ok(Reduced {
            grads,
            loss: V::full(&Shape::scalar(), loss)?,
            exposed: started.elapsed(),
        });
    }
    let (weight, weighted_loss): (V::Elem, V::Elem) =
        (elem(rows as f64 / total as f64), elem(local));
    let plan = BucketPlan::new(
        session,
        bucket_bytes / std::mem::size_of::<V::Elem>().max(1),
    );
    let weighted_loss = weighted_loss * weight;
    let (sums, loss_sum, exposed) = if TypeId::of::<V::Elem>() == TypeId::of::<f32>() {
        plan.sweep_and_sum::<V, f32>(world, session, loss, weight, weighted_loss)?
    } else {
        plan.sweep_and_sum::<V, f64>(world, session, loss, weight, weighted_loss)?
    };
    let mut grads = session.take_param_grads();
    let (names, mut values): (Vec<&String>, Vec<&mut V>) = grads.iter_mut().unzip();
    V::update_all(&mut values, |slices| {
        for (name, slice) in names.iter().zip(slices.iter_mut()) {
            if let Some(&(b, at)) = plan.place.get(name.as_str()) {
                for (x, &sum) in slice.iter_mut().zip(&sums[b][at..]) {
                    *x = elem(sum);
                }
            }
        }
        Ok::<_, TrainError>(())
    })?;
    Ok(Reduced {
        grads,
        loss: V::full(
            &Shape::scalar(),
            elem::<V::Elem>(loss_sum).to_f64().unwrap_or(f64::NAN),
        )?,
        exposed,
    })
}

/// What [`backward_all_reduced`] returns.
#[derive(Debug)]
pub struct Reduced<V> {
    /// The global batch's mean gradients, by parameter name.
    pub grads: BTreeMap<String, V>,
    /// The global batch's mean loss, a value of one element on the engine (read it with
    /// [`TrainValue::scalars`]).
    pub loss: V,
    /// The time spent waiting for the other ranks once this rank's sweep was done: the
    /// communication the sweep did not hide (all of it without buckets).
    pub exposed: Duration,
}

/// Where each parameter's gradient goes in the buckets of [`backward_all_reduced`]: the
/// parameters in the order the sweep finishes them, cut into buckets of at least
/// `bucket_elems` values (the last may be smaller), the loss one more value at the end of the
/// last bucket.
#[derive(Debug)]
struct BucketPlan {
    /// Each parameter's bucket and offset there.
    place: BTreeMap<String, (usize, usize)>,
    /// Each bucket's length.
    lens: Vec<usize>,
    /// How many parameters each bucket holds.
    params: Vec<usize>,
}

impl BucketPlan {
    fn new<V: TrainValue>(session: &Session<V>, bucket_elems: usize) -> Self {
        let mut plan = BucketPlan {
            place: BTreeMap::new(),
            lens: vec![0],
            params: vec![0],
        };
        for name in session.params_in_sweep_order() {
            let Some(value) = session.params().get(name) else {
                continue;
            };
            let b = plan.lens.len() - 1;
            plan.place.insert(name.to_string(), (b, plan.lens[b]));
            plan.lens[b] += value.shape().size();
            plan.params[b] += 1;
            if plan.lens[b] >= bucket_elems.max(1) {
                plan.lens.push(0);
                plan.params.push(0);
            }
        }
        if plan.lens.len() > 1 && plan.params[plan.lens.len() - 1] == 0 {
            plan.lens.pop();
            plan.params.pop();
        }
        let last = plan.lens.len() - 1;
        plan.lens[last] += 1;
        plan
    }

    /// The sweep, each parameter's gradient times `weight` written to its bucket as the sweep
    /// finishes it, each bucket sent once full, in `T` (the engine's precision); returns the
    /// buckets' sums, and the loss's.
    fn sweep_and_sum<V, T>(
        &self,
        world: &World,
        session: &mut Session<V>,
        loss: &Var,
        weight: V::Elem,
        weighted_loss: V::Elem,
    ) -> Result<(Vec<Vec<f64>>, f64, Duration)>
    where
        V: TrainValue,
        T: Summand + FromPrimitive + ToPrimitive,
    {
        /// A bucket's progress is checked every this many nodes of the sweep.
        const PROGRESS_EVERY: usize = 16;
        let to_t = |x: V::Elem| -> T {
            FromPrimitive::from_f64(x.to_f64().unwrap_or(f64::NAN)).unwrap_or_else(T::default)
        };
        let mut waiting = self.params.clone();
        let mut failed: Option<TrainError> = None;
        let (swept, sums) = world.sum_in_buckets("the gradients", &self.lens, |buckets| {
            let last = self.lens.len() - 1;
            if let Some(values) = buckets.values_mut(last) {
                if let Some(x) = values.last_mut() {
                    *x = to_t(weighted_loss);
                }
            }
            let mut swept = 0usize;
            let result = session.backward_observed(loss, |event| {
                swept += 1;
                if let Swept::Param { name, grad } = event {
                    let Some(&(b, at)) = self.place.get(name) else {
                        return;
                    };
                    match (grad.read(), buckets.values_mut(b)) {
                        (Ok(data), Some(values)) => {
                            for (v, &g) in values[at..].iter_mut().zip(data.iter()) {
                                *v = to_t(g * weight);
                            }
                        }
                        (Err(e), _) => {
                            failed.get_or_insert(e.into());
                        }
                        (Ok(_), None) => {}
                    }
                    if waiting[b] == 1 {
                        buckets.ready(b);
                    }
                    waiting[b] = waiting[b].saturating_sub(1);
                }
                if swept.is_multiple_of(PROGRESS_EVERY) {
                    buckets.progress();
                }
            });
            if let Err(e) = result {
                failed.get_or_insert(e.into());
            }
            Instant::now()
        })?;
        let exposed = swept.elapsed();
        if let Some(e) = failed {
            return Err(e);
        }
        // every value of T is exactly an f64, and back in the engine's precision exactly T's
        let sums: Vec<Vec<f64>> = sums
            .iter()
            .map(|b| b.iter().map(|x| x.to_f64().unwrap_or(f64::NAN)).collect())
            .collect();
        let loss = sums.last().and_then(|b| b.last()).copied();
        Ok((sums, loss.unwrap_or(f64::NAN), exposed))
    }
}

/// `x` as an engine element (NaN where it has no such value).
fn elem<E: Element>(x: f64) -> E {
    FromPrimitive::from_f64(x).unwrap_or_else(Float::nan)
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
        *x = elem(w);
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
            *x = elem(v);
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

/// A run of `batch` rows on `ranks` ranks is refused if some rank would get no rows.
pub fn check_batch(ranks: usize, batch: usize) -> Result<()> {
    if batch < ranks {
        return Err(TrainError::BatchBelowRanks { batch, ranks });
    }
    Ok(())
}

/// [`check_batch`] for epochs of `examples` in batches of `batch` on `ranks` ranks: the short
/// last batch of an epoch (`examples % batch` rows, or all of them when fewer than a batch)
/// must give every rank a row too.
pub fn check_epoch_batches(ranks: usize, examples: usize, batch: usize) -> Result<()> {
    check_batch(ranks, batch)?;
    match chunk_sizes(examples, batch).first() {
        Some(&rows) if rows < ranks => Err(TrainError::ShortLastBatch {
            rows,
            examples,
            batch,
            ranks,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use torchlean_engine_cpu::{CpuF32, CpuF64};
    use torchlean_nn::{Gpt, GptConfig, Mode};

    const IDS: [usize; 8] = [1, 4, 4, 0, 7, 3, 3, 2];
    const TARGETS: [usize; 8] = [4, 4, 0, 7, 3, 3, 2, 2];

    fn gpt() -> Gpt {
        let cfg = GptConfig {
            vocab: 9,
            block: 4,
            n_layer: 2,
            n_head: 2,
            n_embd: 8,
            dropout: 0.0,
        };
        Gpt::new(cfg, 3).unwrap()
    }

    fn bits<E: Element>(values: &[E]) -> Vec<u64> {
        values
            .iter()
            .map(|x| x.to_f64().unwrap().to_bits())
            .collect()
    }

    /// Through the buckets of a world of one, weight 1: every gradient lands in its place,
    /// bit for bit what the plain sweep gives, and the loss after the last parameter.
    fn check_buckets_hold_the_sweeps_gradients<V, T>()
    where
        V: TrainValue,
        T: Summand + FromPrimitive + ToPrimitive,
    {
        let gpt = gpt();
        let mut plain = Session::<V>::new();
        let loss = gpt
            .loss(&mut plain, &IDS, &TARGETS, 2, Mode::Train)
            .unwrap();
        let want_loss = *plain.value_f64(&loss).unwrap().item().unwrap();
        plain.backward(&loss, Sweep::Releasing).unwrap();
        let want = plain.take_param_grads();
        let one: V::Elem = FromPrimitive::from_f64(1.0).unwrap();
        for bucket_elems in [1, 300, 1 << 20] {
            let mut s = Session::<V>::new();
            let loss = gpt.loss(&mut s, &IDS, &TARGETS, 2, Mode::Train).unwrap();
            let plan = BucketPlan::new(&s, bucket_elems);
            let local: V::Elem = FromPrimitive::from_f64(want_loss).unwrap();
            let (sums, loss, _) = plan
                .sweep_and_sum::<V, T>(&World::solo(), &mut s, &loss, one, local)
                .unwrap();
            assert_eq!(sums.len(), plan.lens.len());
            let (last, rest) = plan.lens.split_last().unwrap();
            assert!(
                rest.iter().all(|&len| len >= bucket_elems),
                "{:?}",
                plan.lens
            );
            assert!(*last >= 1);
            assert_eq!(
                loss.to_bits(),
                want_loss.to_bits(),
                "{bucket_elems}: the loss"
            );
            assert_eq!(plan.place.len(), want.len());
            for (name, g) in &want {
                let (b, at) = plan.place[name];
                let g = g.read().unwrap();
                let got = &sums[b][at..at + g.len()];
                assert_eq!(bits(got), bits(&g), "{bucket_elems}: {name}");
            }
        }
    }

    #[test]
    fn every_batch_of_an_epoch_the_last_included_gives_every_rank_a_row() {
        assert!(check_epoch_batches(2, 100, 10).is_ok(), "no short batch");
        assert!(check_epoch_batches(3, 101, 10).is_err());
        assert!(check_epoch_batches(1, 101, 10).is_ok());
        let err = check_epoch_batches(2, 101, 10).unwrap_err();
        assert!(
            matches!(
                err,
                TrainError::ShortLastBatch {
                    rows: 1,
                    examples: 101,
                    batch: 10,
                    ranks: 2
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the last batch of each epoch has 1 rows (101 training examples in batches of 10), \
             fewer than the 2 ranks: choose a --batch that divides 101 or leaves 2 or more rows in \
             the last batch"
        );
        // fewer examples than a batch: the one batch is the short one
        assert!(check_epoch_batches(4, 3, 10).is_err());
        assert!(matches!(
            check_epoch_batches(4, 100, 3),
            Err(TrainError::BatchBelowRanks { batch: 3, ranks: 4 })
        ));
    }

    #[test]
    fn buckets_hold_the_sweeps_gradients_in_f64_and_f32() {
        check_buckets_hold_the_sweeps_gradients::<CpuF64, f64>();
        check_buckets_hold_the_sweeps_gradients::<CpuF32, f32>();
    }
}
