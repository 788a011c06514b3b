//! `Tape<V>` and `Node<V>`: a grow-only array of nodes; a node's id is its index.

use crate::error::{Result, RuntimeError};
use crate::kernel::{fold_repeated_operands, has_repeats, Cotangents, RecordMode};
use crate::value::GradValue;
use smallvec::SmallVec;
use std::fmt;
use torchlean_spec::Op;

/// A local VJP written as a closure: from the node's upstream gradient, `(parent id,
/// contribution)` pairs in the order they are to be accumulated.
pub type VjpClosure<V> = Box<dyn Fn(&V) -> Result<Vec<(usize, V)>> + Send + Sync>;

/// A node's `(parent id, contribution)` pairs collected in accumulation order
/// ([`Tape::run_backward`]; inline up to two). The sweeps consume [`ContributionIter`] instead.
pub type Contributions<V> = SmallVec<[(usize, V); 2]>;

/// An engine's VJP entry point (`runtime::vjp`, the dispatch), kept as a plain function pointer so the sweeps
/// need only `GradValue`: `(op, operand values, output value, cotangent, needs)`, the values
/// being the tape's own (read through a borrowed `Saved`, `crate::kernel::vjp_on_values`).
/// The last argument says which operands need a cotangent (by operand index).
pub(crate) type VjpFn<V> = fn(&Op, &[&V], &V, &V, &dyn Fn(usize) -> bool) -> Result<Cotangents<V>>;

/// A node's local VJP (SPEC's `backward: &V -> Result<Vec<(usize, V)>>`), run through
/// [`Tape::contributions`] or [`Tape::run_backward`].
pub enum Backward<V> {
    /// Contributes nothing (leaves).
    Nothing,
    /// Any closure (tests, custom ops, and the checking-only `FullContext` compile mode), boxed
    /// once more so that the variant is one pointer, not two: every node carries a `Backward`,
    /// and closures are rare.
    Closure(Box<VjpClosure<V>>),
    /// An op put on the tape by [`crate::record`] or [`crate::record_compiled`]: the engine's
    /// VJP of the op on what the op saved, one pair per operand in operand order, the operands
    /// being the node's `parents` (with the local-sum rule for compiled nodes). The op lives in
    /// the tape's op table, not in a per-node allocation; what it saves is not copied at all:
    /// its operands and output are the values of the node and its parents, which the tape
    /// keeps until it is released, and each VJP reads them through a borrowed [`Saved`](torchlean_spec::Saved).
    Recorded(RecordedSlot),
}

/// An index into the op table of the tape that holds the node; only [`crate::record`] makes one.
///
/// Invariant: a `RecordedSlot` only ever sits in a node of the tape whose table it indexes (the
/// field is private, the type is neither `Copy` nor `Clone`, nodes cannot be moved out of a
/// tape, and [`Tape::add_node`] rejects nodes that carry one).
#[derive(Debug, PartialEq, Eq)]
pub struct RecordedSlot(usize);

/// One recorded op. What its VJP reads is borrowed from the tape's nodes when it runs (a
/// borrowed `Saved`), and the VJP entry is the tape's ([`Tape`]'s `vjp`), so an entry is the
/// op and a flag (96 bytes).
///
/// Invariant: the values a recorded op's VJP reads are the node's and its parents' values,
/// which no tape operation changes or releases before [`Tape::clear`] empties the op table.
pub(crate) struct RecordedOp {
    pub(crate) op: Op,
    /// Whether repeated operands are folded by the local-sum rule (compiled nodes).
    pub(crate) local_sum: bool,
}

// the per-node cost of a tape (`docs/ARCHITECTURE.md`, "Memory per node"): an op-table entry,
// and a node on the reference engine (its value: a 40-byte shape and a `Vec`)
const _: () = assert!(std::mem::size_of::<RecordedOp>() <= 96);
const _: () = assert!(std::mem::size_of::<Backward<torchlean_spec::Tensor<f64>>>() <= 16);
const _: () = assert!(std::mem::size_of::<Node<torchlean_spec::Tensor<f64>>>() <= 160);

impl<V> Backward<V> {
    /// Wraps a closure.
    pub fn closure(f: impl Fn(&V) -> Result<Vec<(usize, V)>> + Send + Sync + 'static) -> Self {
        Backward::Closure(Box::new(Box::new(f)))
    }
}

impl<V> fmt::Debug for Backward<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backward::Nothing => f.write_str("Nothing"),
            Backward::Closure(_) => f.write_str("Closure"),
            Backward::Recorded(slot) => write!(f, "Recorded({})", slot.0),
        }
    }
}

/// The list of a node's parent ids (inline up to two).
pub type Parents = SmallVec<[usize; 2]>;

/// One recorded value with its local VJP.
pub struct Node<V> {
    pub name: Option<String>,
    pub value: V,
    /// Whether the node owns `value` (a view or a detached reference borrows its parent's
    /// buffer and must not release it).
    pub owns_value: bool,
    /// Whether gradients flow into (and through) this node. Contributions to a node without it
    /// are dropped, and its VJP never runs.
    pub requires_grad: bool,
    pub parents: Parents,
    /// Forward workspace kept only for the backward pass, released with the tape.
    pub cleanup: Vec<V>,
    pub backward: Backward<V>,
}

impl<V> Node<V> {
    /// A parentless node whose VJP contributes nothing.
    pub fn leaf(value: V, requires_grad: bool, name: Option<String>) -> Self {
        Node {
            name,
            value,
            owns_value: true,
            requires_grad,
            parents: Parents::new(),
            cleanup: Vec::new(),
            backward: Backward::Nothing,
        }
    }
}

impl<V: GradValue> fmt::Debug for Node<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("shape", self.value.shape())
            .field("owns_value", &self.owns_value)
            .field("requires_grad", &self.requires_grad)
            .field("parents", &self.parents)
            .field("cleanup", &self.cleanup.len())
            .field("backward", &self.backward)
            .finish()
    }
}

/// A grow-only tape.
pub struct Tape<V> {
    nodes: Vec<Node<V>>,
    /// The op table of [`Backward::Recorded`] nodes, in recording order.
    recorded: Vec<RecordedOp>,
    /// The VJP entry of every op in the table: one per tape, not one per op (set by
    /// [`Tape::record`], which knows the engine; `None` while the table is empty).
    vjp: Option<VjpFn<V>>,
}

impl<V: GradValue> fmt::Debug for Tape<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.nodes).finish()
    }
}

impl<V> Default for Tape<V> {
    fn default() -> Self {
        Tape {
            nodes: Vec::new(),
            recorded: Vec::new(),
            vjp: None,
        }
    }
}

impl<V: GradValue> Tape<V> {
    /// The empty tape.
    pub fn empty() -> Self {
        Tape::default()
    }

    /// An empty tape with room for `n` nodes.
    pub fn with_capacity(n: usize) -> Self {
        Tape {
            nodes: Vec::with_capacity(n),
            recorded: Vec::with_capacity(n),
            vjp: None,
        }
    }

    /// Number of nodes.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// The node with id `id`.
    pub fn get_node(&self, id: usize) -> Result<&Node<V>> {
        // a `match`, not `ok_or`: building (and dropping) the error on every lookup shows up in
        // the per-op cost
        match self.nodes.get(id) {
            Some(node) => Ok(node),
            None => Err(RuntimeError::NoSuchNode {
                id,
                size: self.nodes.len(),
            }),
        }
    }

    /// What errors call node `id`: its name, or for an unnamed recorded node its op's wire
    /// name (compiled tapes keep no name string per node).
    pub fn node_label(&self, id: usize) -> Option<&str> {
        let node = self.nodes.get(id)?;
        match (&node.name, &node.backward) {
            (Some(name), _) => Some(name),
            (None, Backward::Recorded(RecordedSlot(k))) => {
                self.recorded.get(*k).map(|r| r.op.name())
            }
            (None, _) => None,
        }
    }

    /// The value of node `id`.
    pub fn get_value(&self, id: usize) -> Result<&V> {
        self.get_node(id).map(|n| &n.value)
    }

    /// Appends a node and returns its id (the size before the append).
    ///
    /// # Panics
    /// If the node carries a [`Backward::Recorded`] slot, which only [`crate::record`] can
    /// create for its own tape (no public path produces such a node by value).
    pub fn add_node(&mut self, node: Node<V>) -> usize {
        assert!(
            !matches!(node.backward, Backward::Recorded(_)),
            "a recorded VJP belongs to the tape that recorded it"
        );
        let id = self.nodes.len();
        self.nodes.push(node);
        id
    }

    /// [`crate::record`] and [`crate::record_compiled`]: runs `forward` on the parents' values
    /// and appends the node; if the node requires grad (eager: a parent does and the op is not
    /// `detach`; compiled: always), the op goes into the op table (nothing is copied for the
    /// backward pass: [`RecordedOp`]), to run through the engine's VJP entry.
    #[inline]
    pub(crate) fn record(
        &mut self,
        op: Op,
        parents: &[usize],
        name: Option<String>,
        mode: RecordMode,
        forward: fn(&Op, &[&V]) -> Result<V>,
    ) -> Result<usize>
    where
        V: crate::Kernels,
    {
        let id = self.nodes.len();
        let mut args: SmallVec<[&V; 4]> = SmallVec::new();
        let mut any_requires_grad = false;
        for &p in parents {
            // not `get_node`: a method borrow of the whole tape would forbid filling the op
            // table below while `args` borrows the nodes
            let Some(node) = self.nodes.get(p) else {
                return Err(RuntimeError::NoSuchNode { id: p, size: id });
            };
            any_requires_grad |= node.requires_grad;
            args.push(&node.value);
        }
        let value = forward(&op, &args).map_err(|e| e.at_node(id))?;
        let requires_grad = match mode {
            RecordMode::Eager => any_requires_grad && op != Op::Detach,
            RecordMode::Compiled => true,
        };
        let local_sum = mode == RecordMode::Compiled && has_repeats(parents);
        let backward = if requires_grad {
            let slot = RecordedSlot(self.recorded.len());
            self.recorded.push(RecordedOp { op, local_sum });
            self.vjp = Some(crate::kernel::vjp_on_values::<V>);
            Backward::Recorded(slot)
        } else {
            Backward::Nothing
        };
        drop(args);
        self.nodes.push(Node {
            name,
            value,
            owns_value: true,
            requires_grad,
            parents: Parents::from_slice(parents),
            cleanup: Vec::new(),
            backward,
        });
        Ok(id)
    }

    /// Appends a leaf.
    pub fn leaf(&mut self, value: V, requires_grad: bool, name: Option<String>) -> usize {
        self.add_node(Node::leaf(value, requires_grad, name))
    }

    /// All nodes, in id order.
    pub fn nodes(&self) -> &[Node<V>] {
        &self.nodes
    }

    /// The wire name of the op recorded at node `id` (`None` for leaves, closures and nodes
    /// that recorded no VJP).
    pub fn op_name(&self, id: usize) -> Option<&'static str> {
        match &self.nodes.get(id)?.backward {
            Backward::Recorded(slot) => self.recorded.get(slot.0).map(|r| r.op.name()),
            _ => None,
        }
    }

    /// Runs node `id`'s local VJP on the upstream gradient `cot`: its `(parent id,
    /// contribution)` pairs in accumulation order. Errors name the node.
    pub fn run_backward(&self, id: usize, cot: &V) -> Result<Contributions<V>> {
        Ok(self.contributions(id, cot)?.collect())
    }

    /// [`Tape::run_backward`] without collecting: the pairs are produced lazily from what the VJP
    /// returned (which no longer borrows `cot`, so a sweep may release the upstream gradient
    /// before it stores them). Errors name the node.
    pub fn contributions(&self, id: usize, cot: &V) -> Result<ContributionIter<'_, V>> {
        self.contributions_for(id, cot, &|_| true)
    }

    /// [`Tape::contributions`] where only the parents `p` with `needs(p)` (by node id) need a
    /// contribution: a recorded op may skip the others (the input gradient of `linear` and
    /// `conv2d`), a closure ignores `needs`. The contributions produced are exactly
    /// [`Tape::contributions`]'s.
    pub fn contributions_for(
        &self,
        id: usize,
        cot: &V,
        needs: &dyn Fn(usize) -> bool,
    ) -> Result<ContributionIter<'_, V>> {
        let node = self.get_node(id)?;
        let iter = match &node.backward {
            Backward::Nothing => Ok(ContributionIter::Empty),
            Backward::Closure(f) => {
                f(cot).map(|pairs| ContributionIter::Closure(pairs.into_iter()))
            }
            Backward::Recorded(RecordedSlot(k)) => {
                let rec = self
                    .recorded
                    .get(*k)
                    .expect("a recorded slot indexes its own tape's op table (RecordedSlot)");
                let vjp = self
                    .vjp
                    .expect("a tape with a recorded op has its VJP entry (Tape::record sets it)");
                recorded_vjp(rec, vjp, node, &self.nodes, cot, needs)
            }
        };
        iter.map_err(|e| e.at_node(id))
    }

    /// Releases every owned value and every cleanup buffer.
    pub fn release(mut self) {
        self.clear();
    }

    /// [`Tape::release`] in place: the tape is empty afterwards but keeps its capacity, so a
    /// session that records one step after another does not regrow it every step.
    pub fn clear(&mut self) {
        self.recorded.clear();
        for n in self.nodes.drain(..) {
            if n.owns_value {
                n.value.drop();
            }
            for c in n.cleanup {
                c.drop();
            }
        }
    }
}

/// A recorded op's VJP at `node`, one of `nodes`: one pair per differentiable operand, in
/// operand order, reading what the op saves from the node's and its parents' values.
fn recorded_vjp<'t, V: GradValue>(
    rec: &RecordedOp,
    vjp: VjpFn<V>,
    node: &'t Node<V>,
    nodes: &[Node<V>],
    cot: &V,
    needs: &dyn Fn(usize) -> bool,
) -> Result<ContributionIter<'t, V>> {
    let parents = &node.parents[..];
    // parents are earlier nodes (`Tape::record` checked them), and nodes are never removed
    // one by one, so every lookup succeeds; an error rather than a panic all the same
    let args = parents
        .iter()
        .map(|&p| match nodes.get(p) {
            Some(n) => Ok(&n.value),
            None => Err(RuntimeError::NoSuchNode {
                id: p,
                size: nodes.len(),
            }),
        })
        .collect::<Result<SmallVec<[&V; 4]>>>()?;
    let by_operand = |i: usize| parents.get(i).is_none_or(|&p| needs(p));
    let mut grads = vjp(&rec.op, &args, &node.value, cot, &by_operand)?;
    if grads.len() != parents.len() {
        let err = RuntimeError::VjpArity {
            op: rec.op.name(),
            node: None,
            expected: parents.len(),
            got: grads.len(),
        };
        for g in grads.into_iter().flatten() {
            g.drop();
        }
        return Err(err);
    }
    if rec.local_sum {
        fold_repeated_operands(parents, &mut grads)?;
    }
    Ok(ContributionIter::Recorded {
        parents: parents.iter(),
        grads: grads.into_iter(),
    })
}

/// The `(parent id, contribution)` pairs of one VJP run, in accumulation order
/// ([`Tape::contributions`]). Values still pending when it is dropped are dropped by Rust; the
/// sweeps release them explicitly instead.
pub enum ContributionIter<'t, V> {
    Empty,
    Closure(std::vec::IntoIter<(usize, V)>),
    Recorded {
        parents: std::slice::Iter<'t, usize>,
        grads: smallvec::IntoIter<[Option<V>; 2]>,
    },
}

impl<V> ContributionIter<'_, V> {
    /// The contributions not yet produced.
    pub fn pending(&self) -> impl Iterator<Item = &V> {
        let (pairs, grads): (&[(usize, V)], &[Option<V>]) = match self {
            ContributionIter::Empty => (&[], &[]),
            ContributionIter::Closure(it) => (it.as_slice(), &[]),
            ContributionIter::Recorded { grads, .. } => (&[], grads.as_slice()),
        };
        pairs.iter().map(|(_, g)| g).chain(grads.iter().flatten())
    }
}

impl<V> fmt::Debug for ContributionIter<'_, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContributionIter({} pending)", self.pending().count())
    }
}

impl<V> Iterator for ContributionIter<'_, V> {
    type Item = (usize, V);

    #[inline]
    fn next(&mut self) -> Option<(usize, V)> {
        match self {
            ContributionIter::Empty => None,
            ContributionIter::Closure(it) => it.next(),
            ContributionIter::Recorded { parents, grads } => loop {
                // lengths are equal (checked in `recorded_vjp`)
                let (p, g) = (parents.next()?, grads.next()?);
                if let Some(g) = g {
                    return Some((*p, g));
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use torchlean_spec::{BinaryOp, Op, Tensor};

    fn doubled() -> (Tape<Tensor<f64>>, usize) {
        let mut tape = Tape::empty();
        let x = tape.leaf(Tensor::new([2], vec![1.0, 2.0]).unwrap(), true, None);
        let y = crate::kernel::record(&mut tape, Op::Binary(BinaryOp::Add), &[x, x], None).unwrap();
        (tape, y)
    }

    #[test]
    fn a_tape_debugs_as_its_nodes() {
        let (tape, _) = doubled();
        let text = format!("{tape:?}");
        assert_eq!(text.matches("Node {").count(), 2, "{text}");
        assert!(text.contains("requires_grad: true"), "{text}");
    }

    #[test]
    fn a_backward_debugs_as_its_kind() {
        let (tape, y) = doubled();
        assert_eq!(
            format!("{:?}", tape.get_node(0).unwrap().backward),
            "Nothing"
        );
        assert_eq!(
            format!("{:?}", tape.get_node(y).unwrap().backward),
            "Recorded(0)"
        );
        let closure = Backward::<Tensor<f64>>::closure(|_| Ok(Vec::new()));
        assert_eq!(format!("{closure:?}"), "Closure");
    }

    #[test]
    fn contributions_debug_as_the_count_still_pending() {
        let (tape, y) = doubled();
        let cot = Tensor::new([2], vec![1.0, 1.0]).unwrap();
        let mut it = tape.contributions(y, &cot).unwrap();
        assert_eq!(format!("{it:?}"), "ContributionIter(2 pending)");
        it.next().unwrap();
        assert_eq!(format!("{it:?}"), "ContributionIter(1 pending)");
    }
}
