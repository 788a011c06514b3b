//! The reverse sweeps (SPEC 2.1), with exactly TorchLean's semantics.
//!
//! Accumulation order, everywhere: nodes are visited in decreasing id; a node's contributions
//! are folded in the order its VJP returns them; a slot's first contribution is kept as is in
//! the `Option` arrays (`backward_dense`, `backward_sparse`), and every later one is
//! `existing + new`. In the total arrays (`backward_dense_from`) every slot starts with a value
//! and every contribution is `existing + new`.
//!
//! Releases: every value a sweep consumes and does not return is handed to
//! [`GradValue::drop`] — contributions to `requires_grad = false` parents, the operands of each
//! accumulation, the upstream gradients the releasing sweep is done with, and on error everything
//! still held.

use crate::anomaly::{check_gradient, AnomalyMode, Site};
use crate::error::{Result, RuntimeError};
use crate::tape::{Backward, Node, Tape};
use crate::value::{GradValue, GradZero};

fn release_all<V: GradValue>(vals: impl IntoIterator<Item = V>) {
    for v in vals {
        v.drop();
    }
}

fn release_slots<V: GradValue>(slots: Vec<Option<V>>) {
    release_all(slots.into_iter().flatten());
}

/// Node `id`'s value and a gradient `g` meant for it (`what`) have different shapes.
fn shape_mismatch<V: GradValue>(
    tape: &Tape<V>,
    id: usize,
    node: &Node<V>,
    what: &'static str,
    g: &V,
) -> RuntimeError {
    RuntimeError::ShapeMismatch {
        node: id,
        name: tape.node_label(id).map(str::to_string),
        what,
        expected: Box::new(node.value.shape().clone()),
        got: Box::new(g.shape().clone()),
    }
}

/// Validates a contribution from node `node` to `parent`: returns `Ok(None)` (after releasing
/// it) when the parent does not take gradients.
fn validate_contribution<V: GradValue>(
    tape: &Tape<V>,
    node: usize,
    parent: usize,
    g: V,
) -> Result<Option<V>> {
    let size = tape.size();
    let name = || tape.node_label(node).map(str::to_string);
    let Ok(p) = tape.get_node(parent) else {
        g.drop();
        return Err(RuntimeError::BadParent {
            node,
            name: name(),
            parent,
            size,
        });
    };
    if !p.requires_grad {
        g.drop();
        return Ok(None);
    }
    if g.shape() != p.value.shape() {
        let err = shape_mismatch(tape, parent, p, "a gradient contribution", &g);
        g.drop();
        return Err(err);
    }
    Ok(Some(g))
}

/// `grads[parent] ← g` if empty, else `existing + g`, for a contribution produced by `node`.
/// Contributions to `requires_grad = false` parents are released; a bad parent id or shape is an
/// error naming the node.
pub fn add_grad_dense<V: GradValue>(
    tape: &Tape<V>,
    grads: &mut [Option<V>],
    node: usize,
    parent: usize,
    g: V,
) -> Result<()> {
    let Some(g) = validate_contribution(tape, node, parent, g)? else {
        return Ok(());
    };
    grads[parent] = Some(match grads[parent].take() {
        None => g,
        Some(existing) => existing.add(g)?,
    });
    Ok(())
}

/// How one contribution is folded into a gradient array (`add_grad_dense` / `add_grad_all`).
type Accumulate<V> = fn(&Tape<V>, &mut [Option<V>], usize, usize, V) -> Result<()>;

/// Runs node `id`'s VJP on its current gradient (if it has one and requires grad) and folds each
/// contribution in with `accumulate`, in the order the VJP returns them; on error the remaining
/// contributions are released.
fn run_vjp<V: GradValue>(
    tape: &Tape<V>,
    grads: &mut [Option<V>],
    id: usize,
    accumulate: Accumulate<V>,
    anomaly: Option<usize>,
) -> Result<()> {
    let node = tape.get_node(id)?;
    if !node.requires_grad {
        return Ok(());
    }
    let Some(upstream) = grads[id].take() else {
        return Ok(());
    };
    if let Some(out_id) = anomaly {
        if let Err(e) = check_upstream(tape, id, out_id, &upstream) {
            grads[id] = Some(upstream);
            return Err(e);
        }
    }
    let contributions = tape.contributions(id, &upstream);
    grads[id] = Some(upstream);
    let mut contributions = contributions?;
    while let Some((parent, g)) = contributions.next() {
        let checked = match anomaly {
            Some(_) if takes_grad(tape, parent) => {
                check_gradient(tape, id, Site::Contribution { parent }, &g)
            }
            _ => Ok(()),
        };
        let result = match checked {
            Ok(()) => accumulate(tape, grads, id, parent, g),
            Err(e) => {
                g.drop();
                Err(e)
            }
        };
        if let Err(e) = result {
            release_all(contributions.map(|(_, g)| g));
            return Err(e);
        }
    }
    Ok(())
}

/// Whether contributions to `parent` are kept (anomaly mode checks only those).
fn takes_grad<V: GradValue>(tape: &Tape<V>, parent: usize) -> bool {
    tape.get_node(parent).is_ok_and(|p| p.requires_grad)
}

/// Anomaly mode's check of node `id`'s gradient before its VJP runs: non-finite there means the
/// seed was (at `out_id`) or finite contributions overflowed when summed.
fn check_upstream<V: GradValue>(tape: &Tape<V>, id: usize, out_id: usize, g: &V) -> Result<()> {
    let site = if id == out_id {
        Site::Seed
    } else {
        Site::Accumulated
    };
    check_gradient(tape, id, site, g)
}

/// Runs node `id`'s VJP if its slot is filled and it requires grad, accumulating into `grads`.
pub fn backward_dense_step<V: GradValue>(
    tape: &Tape<V>,
    grads: &mut [Option<V>],
    id: usize,
) -> Result<()> {
    run_vjp(tape, grads, id, add_grad_dense, None)
}

fn check_seed<V: GradValue>(tape: &Tape<V>, out_id: usize, seed: &V) -> Result<()> {
    let out = tape.get_node(out_id)?;
    if seed.shape() != out.value.shape() {
        return Err(RuntimeError::SeedShape {
            node: out_id,
            expected: Box::new(out.value.shape().clone()),
            got: Box::new(seed.shape().clone()),
        });
    }
    seed.check()
}

impl<V: GradValue> Tape<V> {
    /// Reachable-only reverse sweep: `grads[out_id] = seed`, then for ids `n−1 … 0` a node's VJP
    /// runs only if its slot is filled. `None` marks nodes the output does not depend on.
    pub fn backward_dense(&self, out_id: usize, seed: V) -> Result<Vec<Option<V>>> {
        self.backward_dense_with(out_id, seed, AnomalyMode::Off)
    }

    /// [`Tape::backward_dense`]; with [`AnomalyMode::Detect`], stops with
    /// [`RuntimeError::Anomaly`] at the first node (in the sweep's order) whose VJP makes a
    /// non-finite contribution from a finite gradient (or whose gradient overflows).
    pub fn backward_dense_with(
        &self,
        out_id: usize,
        seed: V,
        mode: AnomalyMode,
    ) -> Result<Vec<Option<V>>> {
        if let Err(e) = check_seed(self, out_id, &seed) {
            seed.drop();
            return Err(e);
        }
        let mut grads: Vec<Option<V>> = (0..self.size()).map(|_| None).collect();
        grads[out_id] = Some(seed);
        let anomaly = mode.is_on().then_some(out_id);
        for id in (0..self.size()).rev() {
            if let Err(e) = run_vjp(self, &mut grads, id, add_grad_dense, anomaly) {
                release_slots(grads);
                return Err(e);
            }
        }
        Ok(grads)
    }

    /// [`Tape::backward_dense`], then [`totalize`].
    pub fn backward_dense_all(&self, out_id: usize, seed: V) -> Result<Vec<V>>
    where
        V: GradZero,
    {
        self.backward_dense_all_with(out_id, seed, AnomalyMode::Off)
    }

    /// [`Tape::backward_dense_all`] with anomaly mode as in [`Tape::backward_dense_with`].
    pub fn backward_dense_all_with(
        &self,
        out_id: usize,
        seed: V,
        mode: AnomalyMode,
    ) -> Result<Vec<V>>
    where
        V: GradZero,
    {
        let grads = self.backward_dense_with(out_id, seed, mode)?;
        Ok(totalize(self, grads))
    }

    /// Total reverse sweep from a full gradient array (one entry per node): **every** node that
    /// requires grad runs its VJP, in decreasing id, whatever its gradient is.
    pub fn backward_dense_from(&self, grads0: Vec<V>) -> Result<Vec<V>> {
        if grads0.len() != self.size() {
            let err = RuntimeError::GradArrayLength {
                expected: self.size(),
                got: grads0.len(),
            };
            release_all(grads0);
            return Err(err);
        }
        for (id, (g, node)) in grads0.iter().zip(self.nodes()).enumerate() {
            if g.shape() != node.value.shape() {
                let err = shape_mismatch(self, id, node, "the initial gradient", g);
                release_all(grads0);
                return Err(err);
            }
        }
        let mut grads: Vec<Option<V>> = grads0.into_iter().map(Some).collect();
        let n = self.size();
        if let Err(e) = backward_dense_from_loop(self, &mut grads, n) {
            release_slots(grads);
            return Err(e);
        }
        Ok(grads.into_iter().flatten().collect())
    }

    /// The releasing sweep (TorchLean's CUDA `backwardSparse`, generic): consumes `seed`, stores
    /// each contribution as an owned value on first store, releases each node's gradient as soon
    /// as its VJP has run unless `retain(id)`, and releases everything it holds on error. Peak
    /// live gradients are the frontier plus the retained ones ([`SparseGrads::peak_live`]).
    ///
    /// Work whose result nothing observes is skipped: a node's gradient is *needed* when the
    /// node is retained or requires grad and has a needed parent ([`needed_nodes`]); the VJP of
    /// a node that is not needed is not run, and a VJP is told which of its parents are
    /// needed, so it may skip the others' cotangents (the input gradient of a model's first
    /// layer). The retained gradients are the same, bit for bit, as without the skipping:
    /// every contribution to them is formed and accumulated in the same order.
    pub fn backward_sparse(
        &self,
        out_id: usize,
        seed: V,
        retain: impl Fn(usize) -> bool,
    ) -> Result<SparseGrads<V>> {
        self.backward_sparse_with(out_id, seed, retain, AnomalyMode::Off)
    }

    /// [`Tape::backward_sparse`]; with [`AnomalyMode::Detect`], stops with
    /// [`RuntimeError::Anomaly`] (releasing everything) at the first node whose VJP makes a
    /// non-finite contribution to a needed parent from a finite gradient, or whose gradient is
    /// non-finite before its VJP runs (a non-finite seed, or an overflowing sum).
    pub fn backward_sparse_with(
        &self,
        out_id: usize,
        seed: V,
        retain: impl Fn(usize) -> bool,
        mode: AnomalyMode,
    ) -> Result<SparseGrads<V>> {
        self.backward_sparse_seeds_with(vec![(out_id, seed)], retain, mode)
    }

    /// [`Tape::backward_sparse_with`] from several outputs at once, each with its own seed:
    /// the gradients of `Σ_k ⟨seed_k, out_k⟩`, i.e. the sum of each output's pullback. A node
    /// seeded twice gets the sum of its seeds (in the order given). With one seed it is
    /// [`Tape::backward_sparse_with`], bit for bit.
    pub fn backward_sparse_seeds_with(
        &self,
        seeds: Vec<(usize, V)>,
        retain: impl Fn(usize) -> bool,
        mode: AnomalyMode,
    ) -> Result<SparseGrads<V>> {
        self.backward_sparse_observed(seeds, retain, mode, |_, _| ())
    }

    /// [`Tape::backward_sparse_seeds_with`], calling `observe(id, retained)` right after the
    /// sweep's step at each node `id`, in the sweep's order (decreasing id), with the node's
    /// gradient when it is retained. That gradient is final then: every contribution to node
    /// `id` comes from a node after it, already swept. A caller can start working on each
    /// retained gradient as soon as it is done (the data-parallel trainers all-reduce
    /// parameters' gradients in buckets while the sweep goes on); the gradients, and the order
    /// of every addition, are those of the sweep without an observer.
    pub fn backward_sparse_observed(
        &self,
        seeds: Vec<(usize, V)>,
        retain: impl Fn(usize) -> bool,
        mode: AnomalyMode,
        mut observe: impl FnMut(usize, Option<&V>),
    ) -> Result<SparseGrads<V>> {
        let bad = seeds
            .iter()
            .find_map(|(out_id, seed)| check_seed(self, *out_id, seed).err());
        let Some(&last) = seeds.iter().map(|(id, _)| id).max() else {
            return Err(RuntimeError::NoSeed);
        };
        if let Some(e) = bad {
            release_all(seeds.into_iter().map(|(_, s)| s));
            return Err(e);
        }
        let mut map: SparseGrads<V> = SparseGrads {
            slots: (0..self.size()).map(|_| None).collect(),
            live: 0,
            peak_live: 0,
            live_elements: 0,
            peak_live_elements: 0,
        };
        let mut seeds = seeds.into_iter();
        while let Some((out_id, seed)) = seeds.next() {
            let sum = match map.take(out_id) {
                None => Ok(seed.into_owned()),
                Some(old) => old.add(seed),
            };
            match sum {
                Ok(v) => map.put(out_id, v),
                Err(e) => {
                    release_all(seeds.map(|(_, s)| s));
                    map.release();
                    return Err(e);
                }
            }
        }
        let needed = needed_nodes(self, last, &retain);
        let anomaly = mode.is_on().then_some(last);
        for id in (0..self.size()).rev() {
            let retained = retain(id);
            if let Err(e) = sparse_step(self, &mut map, id, retained, &needed, anomaly) {
                map.release();
                return Err(e);
            }
            observe(id, map.slots[id].as_ref().filter(|_| retained));
        }
        Ok(map)
    }
}

/// One step of the releasing sweep at node `id`: runs its VJP on its gradient, releases that
/// gradient unless `retain`, then stores each contribution (owned) into its parent's slot.
///
/// The node's gradient is released *before* the contributions are stored, so a contribution
/// that shares the upstream buffer (a pass-through VJP: `add`, `add_scalar`, reshape) is unique
/// by then and `into_owned` does not copy it. Peak accounting still counts the moment when the
/// upstream gradient and the fresh contributions are all alive.
fn sparse_step<V: GradValue>(
    tape: &Tape<V>,
    map: &mut SparseGrads<V>,
    id: usize,
    retain: bool,
    needed: &[bool],
    anomaly: Option<usize>,
) -> Result<()> {
    let node = tape.get_node(id)?;
    let release_own = |map: &mut SparseGrads<V>| {
        if !retain {
            if let Some(g) = map.take(id) {
                g.drop();
            }
        }
    };
    if !node.requires_grad || !needed[id] {
        release_own(map);
        return Ok(());
    }
    let Some(upstream) = map.slots[id].as_ref() else {
        return Ok(());
    };
    if upstream.shape() != node.value.shape() {
        return Err(shape_mismatch(
            tape,
            id,
            node,
            "the upstream gradient",
            upstream,
        ));
    }
    if let Some(out_id) = anomaly {
        check_upstream(tape, id, out_id, upstream)?;
    }
    let needs = |p: usize| needed.get(p).copied().unwrap_or(true);
    let mut contributions = tape.contributions_for(id, upstream, &needs)?;
    map.note_transient(contributions.pending());
    release_own(map);
    while let Some((parent, g)) = contributions.next() {
        let result = validate_contribution(tape, id, parent, g).and_then(|g| {
            if let Some(g) = g {
                if anomaly.is_some() && needs(parent) {
                    if let Err(e) = check_gradient(tape, id, Site::Contribution { parent }, &g) {
                        g.drop();
                        return Err(e);
                    }
                }
                match map.take(parent) {
                    None => map.put(parent, g.into_owned()),
                    Some(old) => map.put(parent, old.add(g)?),
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            release_all(contributions.map(|(_, g)| g));
            return Err(e);
        }
    }
    Ok(())
}

/// Which nodes' gradients the releasing sweep from `out_id` needs: node `id ≤ out_id` is needed
/// when `retain(id)`, or when it requires grad and one of its parents is needed (its
/// contributions can reach a retained gradient). A node whose VJP is a closure may contribute
/// to any node, so it is needed whenever it requires grad. One pass in increasing id (a recorded
/// node's parents come before it; a parent not yet decided counts as needed). Nodes after
/// `out_id` are never reached.
pub fn needed_nodes<V: GradValue>(
    tape: &Tape<V>,
    out_id: usize,
    retain: &impl Fn(usize) -> bool,
) -> Vec<bool> {
    let nodes = tape.nodes();
    let mut needed = vec![false; nodes.len()];
    for (id, node) in nodes.iter().enumerate().take(out_id.saturating_add(1)) {
        needed[id] = retain(id)
            || (node.requires_grad
                && (matches!(node.backward, Backward::Closure(_))
                    || node.parents.iter().any(|&p| p >= id || needed[p])));
    }
    needed
}

/// Replaces every `None` (unreached node) with zeros of the node's shape.
pub fn totalize<V: GradZero>(tape: &Tape<V>, grads: Vec<Option<V>>) -> Vec<V> {
    grads
        .into_iter()
        .zip(tape.nodes())
        .map(|(g, node)| g.unwrap_or_else(|| node.value.zeros_like()))
        .collect()
}

/// `grads[parent] ← existing + g` on a total array (TorchLean's `addGradAll`, the step of
/// [`Tape::backward_dense_from`]). Both names exist because the two sweeps are different
/// theorems in TorchLean: [`add_grad_dense`] stores a first contribution as is into an
/// `Option` array; here every slot is filled by contract, and an empty one is an error rather
/// than a silent first store.
pub fn add_grad_all<V: GradValue>(
    tape: &Tape<V>,
    grads: &mut [Option<V>],
    node: usize,
    parent: usize,
    g: V,
) -> Result<()> {
    let Some(g) = validate_contribution(tape, node, parent, g)? else {
        return Ok(());
    };
    match grads[parent].take() {
        Some(existing) => grads[parent] = Some(existing.add(g)?),
        None => {
            g.drop();
            return Err(RuntimeError::EmptyTotalSlot { node: parent });
        }
    }
    Ok(())
}

/// Runs node `id`'s VJP on its current total gradient (if it requires grad).
pub fn backward_dense_from_step<V: GradValue>(
    tape: &Tape<V>,
    grads: &mut [Option<V>],
    id: usize,
) -> Result<()> {
    run_vjp(tape, grads, id, add_grad_all, None)
}

/// Visits ids `n−1 … 0` with [`backward_dense_from_step`].
pub fn backward_dense_from_loop<V: GradValue>(
    tape: &Tape<V>,
    grads: &mut [Option<V>],
    n: usize,
) -> Result<()> {
    for id in (0..n).rev() {
        backward_dense_from_step(tape, grads, id)?;
    }
    Ok(())
}

/// The result of [`Tape::backward_sparse`]: the retained gradients and the peak number of live
/// gradients during the sweep.
pub struct SparseGrads<V> {
    slots: Vec<Option<V>>,
    live: usize,
    peak_live: usize,
    live_elements: usize,
    peak_live_elements: usize,
}

impl<V: GradValue> std::fmt::Debug for SparseGrads<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseGrads")
            .field("ids", &self.ids())
            .field("peak_live", &self.peak_live)
            .finish()
    }
}

impl<V: GradValue> SparseGrads<V> {
    /// Counts values that are alive but not yet stored (a VJP's fresh contributions, while the
    /// upstream gradient is still held) towards the peaks.
    fn note_transient<'a>(&mut self, pending: impl Iterator<Item = &'a V>)
    where
        V: 'a,
    {
        let (count, elements) = pending.fold((0, 0), |(n, e), g| (n + 1, e + g.shape().size()));
        self.peak_live = self.peak_live.max(self.live + count);
        self.peak_live_elements = self.peak_live_elements.max(self.live_elements + elements);
    }

    fn put(&mut self, id: usize, v: V) {
        let elements = v.shape().size();
        match self.slots[id].replace(v) {
            None => self.live += 1,
            Some(old) => {
                self.live_elements -= old.shape().size();
                old.drop();
            }
        }
        self.live_elements += elements;
        self.peak_live = self.peak_live.max(self.live);
        self.peak_live_elements = self.peak_live_elements.max(self.live_elements);
    }

    /// Removes and returns the gradient of `id` (the caller then owns it).
    pub fn take(&mut self, id: usize) -> Option<V> {
        let v = self.slots.get_mut(id)?.take();
        if let Some(v) = &v {
            self.live -= 1;
            self.live_elements -= v.shape().size();
        }
        v
    }

    /// The gradient of `id`, if retained and reached.
    pub fn get(&self, id: usize) -> Option<&V> {
        self.slots.get(id)?.as_ref()
    }

    /// Ids holding a gradient, increasing.
    pub fn ids(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].is_some())
            .collect()
    }

    /// Number of gradients held.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The largest number of gradients held at once during the sweep.
    pub fn peak_live(&self) -> usize {
        self.peak_live
    }

    /// The largest number of gradient elements held at once during the sweep (times the
    /// element size: peak live gradient bytes).
    pub fn peak_live_elements(&self) -> usize {
        self.peak_live_elements
    }

    /// Releases every gradient held (after the optimizer step).
    pub fn release(self) {
        release_slots(self.slots);
    }

    /// The held gradients as `(id, gradient)` pairs, increasing id.
    pub fn into_pairs(self) -> Vec<(usize, V)> {
        self.slots
            .into_iter()
            .enumerate()
            .filter_map(|(i, g)| g.map(|g| (i, g)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    //! Exact counts of the releasing sweep's accounting on small hand-built tapes. Every
    //! expected value is worked out by hand in the comment beside it, not read from the code.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::kernel::record;
    use torchlean_spec::{BinaryOp, Op, Tensor};

    type T = Tensor<f64>;

    fn t3(v: f64) -> T {
        Tensor::new([3], vec![v; 3]).unwrap()
    }

    /// `x` (0, `[3]`) → `a = 2x` (1), `b = 3x` (2) → `s = a + b` (3): a fan-out, so `x`
    /// receives two contributions (b's first, then a's).
    fn fan_out() -> Tape<T> {
        let mut tape = Tape::empty();
        let x = tape.leaf(t3(1.0), true, None);
        let a = record(&mut tape, Op::Scale { c: 2.0 }, &[x], None).unwrap();
        let b = record(&mut tape, Op::Scale { c: 3.0 }, &[x], None).unwrap();
        record(&mut tape, Op::Binary(BinaryOp::Add), &[a, b], None).unwrap();
        tape
    }

    fn pairs(g: SparseGrads<T>) -> Vec<(usize, Vec<f64>)> {
        g.into_pairs()
            .into_iter()
            .map(|(i, v)| (i, v.data().to_vec()))
            .collect()
    }

    #[test]
    fn retaining_one_leaf_counts_the_frontier_and_the_transient_contributions() {
        // seed at 3: live 1 (3 elements). Node 3's VJP makes 2 contributions while its own
        // gradient is held: 1 + 2 = 3 live, 3 + 6 = 9 elements (the peak). Then 3 is released
        // and a, b stored: 2 live (6). Node 2: 2 + 1 transient = 3 (9); releases b, stores x:
        // 2 (6). Node 1: 2 + 1 = 3 (9); releases a, x = 3 + 2: 1 live (3). Leaf 0: nothing.
        let g = fan_out().backward_sparse(3, t3(1.0), |id| id == 0).unwrap();
        assert_eq!(g.len(), 1);
        assert!(!g.is_empty());
        assert_eq!(g.ids(), vec![0]);
        assert_eq!(g.get(0).map(|v| v.data().to_vec()), Some(vec![5.0; 3]));
        assert!(g.get(1).is_none() && g.get(99).is_none());
        assert_eq!(g.peak_live(), 3);
        assert_eq!(g.peak_live_elements(), 9);
        assert_eq!(format!("{g:?}"), "SparseGrads { ids: [0], peak_live: 3 }");
        assert_eq!(pairs(g), vec![(0, vec![5.0; 3])]);
    }

    #[test]
    fn retaining_everything_keeps_every_gradient_in_increasing_id() {
        // seed at 3: 1 (3). Node 3: 1 + 2 transient = 3 (9); kept, a and b stored: 3 (9).
        // Node 2: 3 + 1 = 4 (12); kept, x stored: 4 (12). Node 1: 4 + 1 = 5 (15), the peak;
        // x taken and stored again as 3 + 2: 4 (12).
        let g = fan_out().backward_sparse(3, t3(1.0), |_| true).unwrap();
        assert_eq!(g.len(), 4);
        assert!(!g.is_empty());
        assert_eq!(g.ids(), vec![0, 1, 2, 3]);
        assert_eq!(g.peak_live(), 5);
        assert_eq!(g.peak_live_elements(), 15);
        assert_eq!(
            format!("{g:?}"),
            "SparseGrads { ids: [0, 1, 2, 3], peak_live: 5 }"
        );
        assert_eq!(
            pairs(g),
            vec![
                (0, vec![5.0; 3]),
                (1, vec![1.0; 3]),
                (2, vec![1.0; 3]),
                (3, vec![1.0; 3]),
            ]
        );
    }

    #[test]
    fn retaining_nothing_runs_no_vjp_and_holds_nothing() {
        // no node is needed: the seed (1 live, 3 elements) is released at node 3, unread.
        let mut g = fan_out().backward_sparse(3, t3(1.0), |_| false).unwrap();
        assert_eq!(g.len(), 0);
        assert!(g.is_empty());
        assert_eq!(g.ids(), Vec::<usize>::new());
        assert_eq!(g.peak_live(), 1);
        assert_eq!(g.peak_live_elements(), 3);
        assert!(g.take(0).is_none() && g.take(99).is_none());
        assert_eq!(format!("{g:?}"), "SparseGrads { ids: [], peak_live: 1 }");
        assert_eq!(pairs(g), vec![]);
    }

    #[test]
    fn take_hands_over_a_gradient_and_uncounts_it() {
        let mut g = fan_out().backward_sparse(3, t3(1.0), |_| true).unwrap();
        assert_eq!(g.take(2).map(|v| v.data().to_vec()), Some(vec![1.0; 3]));
        assert_eq!((g.len(), g.ids()), (3, vec![0, 1, 3]));
        assert!(g.take(2).is_none());
        assert_eq!(g.len(), 3);
        g.release();
    }
}
