//! The saved-graph executor (SPEC 2.2; TorchLean's `SavedGraph`): one primal execution saved with
//! each node's prepared VJP programs, and the reverse passes over it.
//!
//! A [`PreparedNode`] has a dense VJP (a cotangent for every earlier context position) and may
//! carry a compact one (the support: the positions it touches, with a uniform value of zero
//! everywhere else) that must give exactly the dense VJP. Every built-in op has both; a custom
//! node may be opaque (dense only).
//!
//! The passes and their contracts:
//!
//! | pass | result | contract |
//! | --- | --- | --- |
//! | [`SavedGraph::backprop_dense`] | every position | the reference: at each node, `running + contribution` on *every* earlier position (zeros included) |
//! | [`SavedGraph::backprop_array`] | every position | identical to `backprop_dense` bit for bit, with no associativity or zero-identity assumption: the uniform zero additions are deferred and replayed per position, stopping at a checked fixed point |
//! | [`SavedGraph::backprop_stored`] | every position | `backprop_array` when the value type has decidable bitwise equality, else `backprop_dense` |
//! | [`SavedGraph::backprop_from`] | every position | reachable-only from one seeded output, through compact supports (an opaque VJP reaches its whole prefix); unreached positions get zeros |
//! | [`SavedGraph::backprop_inputs_dense`] / `_array` / `_stored` | the inputs | the input prefix of the above; the array form drops each finalized intermediate gradient at once |

use crate::error::{CompiledError, Result};
use crate::graph::{GraphData, Pos};
use crate::pack::{compact_pack, dense_pack};
use std::sync::Arc;
use torchlean_runtime::{GradZero, Kernels, Saved};
use torchlean_spec::{Op, Shape};

/// A dense VJP: from the node's cotangent and the shapes of the positions before it, one
/// contribution per earlier position.
pub type DenseVjp<V> = Box<dyn Fn(&V, &[Shape]) -> Result<Vec<V>> + Send + Sync>;

/// A compact VJP: the support, `(position, contribution)` with distinct positions; every other
/// earlier position receives the uniform value zero.
pub type CompactVjp<V> = Box<dyn Fn(&V) -> Result<Vec<(Pos, V)>> + Send + Sync>;

/// A node's prepared programs, with the values they need already captured.
pub struct PreparedNode<V> {
    pub label: String,
    pub dense: DenseVjp<V>,
    pub compact: Option<CompactVjp<V>>,
}

impl<V> std::fmt::Debug for PreparedNode<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedNode")
            .field("label", &self.label)
            .field("compact", &self.compact.is_some())
            .finish()
    }
}

impl<V: Kernels> PreparedNode<V> {
    /// The programs of a built-in op: compact and dense, from the same VJP and local-sum rule.
    pub fn of_op(op: Op, args: Vec<Pos>, saved: Saved<V>) -> Self {
        let label = op.name().to_string();
        let shared = Arc::new((op, args, saved));
        let for_compact = shared.clone();
        PreparedNode {
            label,
            dense: Box::new(move |cot, prefix| {
                let (op, args, saved) = &*shared;
                Ok(dense_pack(compact_pack(op, args, saved, cot)?, prefix)?)
            }),
            compact: Some(Box::new(move |cot| {
                let (op, args, saved) = &*for_compact;
                Ok(compact_pack(op, args, saved, cot)?)
            })),
        }
    }

    /// An opaque node: dense VJP only.
    pub fn opaque(label: impl Into<String>, dense: DenseVjp<V>) -> Self {
        PreparedNode {
            label: label.into(),
            dense,
            compact: None,
        }
    }
}

/// One saved primal execution.
///
/// Invariant: `values.len() == n_inputs + nodes.len()`, and `values[p]` is the value of position
/// `p`.
pub struct SavedGraph<V> {
    n_inputs: usize,
    values: Vec<V>,
    shapes: Vec<Shape>,
    nodes: Vec<PreparedNode<V>>,
}

impl<V: Kernels> std::fmt::Debug for SavedGraph<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedGraph")
            .field("n_inputs", &self.n_inputs)
            .field("shapes", &self.shapes)
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl<V: Kernels> SavedGraph<V> {
    /// Evaluates `g` once and saves each node's programs with what its op saves.
    pub fn of_graph(g: &GraphData, inputs: Vec<V>) -> Result<Self> {
        let values = g.eval(inputs)?;
        let nodes = g
            .nodes()
            .iter()
            .enumerate()
            .map(|(k, node)| {
                let args: Vec<&V> = node.args.iter().map(|&a| &values[a]).collect();
                let out = &values[g.n_inputs() + k];
                PreparedNode::of_op(
                    node.op.clone(),
                    node.args.to_vec(),
                    Saved::for_op(&node.op, &args, out),
                )
            })
            .collect();
        Self::from_parts(g.n_inputs(), values, nodes)
    }

    /// A saved graph from explicit parts (custom or opaque nodes).
    pub fn from_parts(
        n_inputs: usize,
        values: Vec<V>,
        nodes: Vec<PreparedNode<V>>,
    ) -> Result<Self> {
        if values.len() != n_inputs + nodes.len() {
            return Err(CompiledError::Length {
                what: "the saved values",
                expected: n_inputs + nodes.len(),
                got: values.len(),
            });
        }
        let shapes = values.iter().map(|v| v.shape().clone()).collect();
        Ok(SavedGraph {
            n_inputs,
            values,
            shapes,
            nodes,
        })
    }

    pub fn n_inputs(&self) -> usize {
        self.n_inputs
    }

    /// The saved context (inputs, then node values).
    pub fn values(&self) -> &[V] {
        &self.values
    }

    pub fn into_values(self) -> Vec<V> {
        self.values
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// A full seed: `seed` at `output`, zeros elsewhere.
    pub fn one_hot(&self, output: Pos, seed: V) -> Result<Vec<V>> {
        self.check_position(output)?;
        self.check_shape("the seed", output, &seed)?;
        let mut out: Vec<V> = self.values.iter().map(GradZero::zeros_like).collect();
        std::mem::replace(&mut out[output], seed).drop();
        Ok(out)
    }

    fn check_position(&self, p: Pos) -> Result<()> {
        if p >= self.len() {
            return Err(CompiledError::NoSuchPosition {
                position: p,
                len: self.len(),
            });
        }
        Ok(())
    }

    fn check_shape(&self, what: &'static str, p: Pos, v: &V) -> Result<()> {
        if v.shape() != &self.shapes[p] {
            return Err(CompiledError::ValueShape {
                what,
                position: p,
                expected: self.shapes[p].clone(),
                got: v.shape().clone(),
            });
        }
        Ok(())
    }

    fn check_seed(&self, seed: &[V]) -> Result<()> {
        if seed.len() != self.len() {
            return Err(CompiledError::Length {
                what: "the seed",
                expected: self.len(),
                got: seed.len(),
            });
        }
        for (p, v) in seed.iter().enumerate() {
            self.check_shape("the seed", p, v)?;
        }
        Ok(())
    }

    fn check_pack(&self, p: Pos, pack: &[V]) -> Result<()> {
        if pack.len() != p {
            return Err(CompiledError::Length {
                what: "a dense VJP pack",
                expected: p,
                got: pack.len(),
            });
        }
        for (j, v) in pack.iter().enumerate() {
            self.check_shape("a dense VJP contribution", j, v)?;
        }
        Ok(())
    }

    fn check_support(&self, p: Pos, support: &[(Pos, V)]) -> Result<()> {
        for (j, v) in support {
            if *j >= p {
                return Err(CompiledError::NoSuchPosition {
                    position: *j,
                    len: p,
                });
            }
            self.check_shape("a compact VJP contribution", *j, v)?;
        }
        Ok(())
    }

    /// The reference pass (TorchLean's `backpropDense` = `backpropAllCtx`): nodes in reverse,
    /// and at each node `running + contribution` on every earlier position.
    pub fn backprop_dense(&self, seed: Vec<V>) -> Result<Vec<V>> {
        self.check_seed(&seed)?;
        let mut running: Vec<Option<V>> = seed.into_iter().map(Some).collect();
        for k in (0..self.nodes.len()).rev() {
            let p = self.n_inputs + k;
            let up = running[p]
                .take()
                .expect("invariant: dense slots are filled");
            let pack = (self.nodes[k].dense)(&up, &self.shapes[..p]);
            running[p] = Some(up);
            let pack = pack?;
            self.check_pack(p, &pack)?;
            for (slot, c) in running.iter_mut().zip(pack) {
                let r = slot.take().expect("invariant: dense slots are filled");
                *slot = Some(r.add(c)?);
            }
        }
        Ok(running.into_iter().flatten().collect())
    }

    /// The array pass, bit for bit equal to [`SavedGraph::backprop_dense`].
    pub fn backprop_array(&self, seed: Vec<V>) -> Result<Vec<V>> {
        self.array_pass(seed, true)
    }

    /// `backprop_array` when `V` has decidable bitwise equality, else `backprop_dense`.
    pub fn backprop_stored(&self, seed: Vec<V>) -> Result<Vec<V>> {
        if V::DECIDABLE_EQ {
            self.backprop_array(seed)
        } else {
            self.backprop_dense(seed)
        }
    }

    /// The input prefix of [`SavedGraph::backprop_dense`].
    pub fn backprop_inputs_dense(&self, seed: Vec<V>) -> Result<Vec<V>> {
        let mut all = self.backprop_dense(seed)?;
        all.truncate(self.n_inputs);
        Ok(all)
    }

    /// The input prefix of [`SavedGraph::backprop_array`], dropping each finalized intermediate
    /// gradient as soon as its node has run.
    pub fn backprop_inputs_array(&self, seed: Vec<V>) -> Result<Vec<V>> {
        self.array_pass(seed, false)
    }

    /// `backprop_inputs_array` when `V` has decidable bitwise equality, else
    /// `backprop_inputs_dense`.
    pub fn backprop_inputs_stored(&self, seed: Vec<V>) -> Result<Vec<V>> {
        if V::DECIDABLE_EQ {
            self.backprop_inputs_array(seed)
        } else {
            self.backprop_inputs_dense(seed)
        }
    }

    fn array_pass(&self, seed: Vec<V>, keep_all: bool) -> Result<Vec<V>> {
        self.check_seed(&seed)?;
        let mut ctx = GradientContext::new(seed);
        let mut finalized: Vec<Option<V>> = (0..self.len()).map(|_| None).collect();
        for k in (0..self.nodes.len()).rev() {
            let p = self.n_inputs + k;
            let up = ctx.pop_finalized(p)?;
            let node = &self.nodes[k];
            match &node.compact {
                Some(compact) => {
                    let support = compact(&up)?;
                    self.check_support(p, &support)?;
                    ctx.tick();
                    // all contributions were computed before any write
                    for (j, c) in support {
                        let old = ctx.materialize_before_tick(j)?;
                        ctx.store(j, old.add(c)?);
                    }
                }
                None => {
                    let pack = (node.dense)(&up, &self.shapes[..p])?;
                    self.check_pack(p, &pack)?;
                    ctx.tick();
                    for (j, c) in pack.into_iter().enumerate() {
                        let old = ctx.materialize_before_tick(j)?;
                        ctx.store(j, old.add(c)?);
                    }
                }
            }
            if keep_all {
                finalized[p] = Some(up);
            } else {
                up.drop();
            }
        }
        for j in 0..self.n_inputs {
            finalized[j] = Some(ctx.pop_finalized(j)?);
        }
        if !keep_all {
            finalized.truncate(self.n_inputs);
        }
        Ok(finalized.into_iter().flatten().collect())
    }

    /// The reachable-only pass from one output: only nodes the output depends on (through compact
    /// supports; an opaque node reaches its whole prefix) run their VJP; contributions are stored
    /// as is on first arrival, then `existing + new`; unreached positions get zeros. On graphs
    /// built from ops it equals `backward_dense_all` on the compact compiled tape, bit for bit.
    pub fn backprop_from(&self, output: Pos, seed: V) -> Result<Vec<V>> {
        self.check_position(output)?;
        self.check_shape("the seed", output, &seed)?;
        let mut grads: Vec<Option<V>> = (0..self.len()).map(|_| None).collect();
        grads[output] = Some(seed);
        for k in (0..self.nodes.len()).rev() {
            let p = self.n_inputs + k;
            let Some(up) = grads[p].take() else { continue };
            let node = &self.nodes[k];
            let contributions: Result<Vec<(Pos, V)>> = match &node.compact {
                Some(compact) => compact(&up).and_then(|s| {
                    self.check_support(p, &s)?;
                    Ok(s)
                }),
                None => (node.dense)(&up, &self.shapes[..p]).and_then(|pack| {
                    self.check_pack(p, &pack)?;
                    Ok(pack.into_iter().enumerate().collect())
                }),
            };
            grads[p] = Some(up);
            for (j, c) in contributions? {
                grads[j] = Some(match grads[j].take() {
                    None => c,
                    Some(existing) => existing.add(c)?,
                });
            }
        }
        Ok(grads
            .into_iter()
            .zip(&self.values)
            .map(|(g, v)| g.unwrap_or_else(|| v.zeros_like()))
            .collect())
    }
}

/// TorchLean's `GradientContext`, specialised to uniform value zero: a gradient array where
/// adding zero to every active position is O(1). `epoch[j]` is the clock at which position `j`
/// was last brought up to date; reading it replays the `clock − epoch[j]` pending zero additions,
/// stopping as soon as one leaves the value unchanged bit for bit (a checked fixed point: after
/// that, every further `+ 0` is the identity too).
struct GradientContext<V> {
    slots: Vec<Option<V>>,
    epoch: Vec<usize>,
    clock: usize,
}

impl<V: Kernels> GradientContext<V> {
    fn new(seed: Vec<V>) -> Self {
        let n = seed.len();
        GradientContext {
            slots: seed.into_iter().map(Some).collect(),
            epoch: vec![0; n],
            clock: 0,
        }
    }

    /// One node's uniform zero addition to every active position.
    fn tick(&mut self) {
        self.clock += 1;
    }

    fn replay(mut v: V, count: usize) -> Result<V> {
        for _ in 0..count {
            let zero = v.zeros_like();
            let w = v.clone().add(zero)?;
            let fixed = w.bit_eq(&v);
            v.drop();
            v = w;
            if fixed {
                break;
            }
        }
        Ok(v)
    }

    fn take(&mut self, j: Pos) -> Result<V> {
        self.slots
            .get_mut(j)
            .and_then(Option::take)
            .ok_or(CompiledError::NoSuchPosition {
                position: j,
                len: self.slots.len(),
            })
    }

    /// The value of `j` with every zero addition issued before the current node applied (the
    /// current node's own addition is the explicit contribution that follows).
    fn materialize_before_tick(&mut self, j: Pos) -> Result<V> {
        let v = self.take(j)?;
        let pending = (self.clock - 1).saturating_sub(self.epoch[j]);
        Self::replay(v, pending)
    }

    fn store(&mut self, j: Pos, v: V) {
        self.slots[j] = Some(v);
        self.epoch[j] = self.clock;
    }

    /// Removes position `p` with all its pending additions applied (its gradient is final: no
    /// node left to run can contribute to it).
    fn pop_finalized(&mut self, p: Pos) -> Result<V> {
        let v = self.take(p)?;
        let pending = self.clock - self.epoch[p];
        Self::replay(v, pending)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use torchlean_spec::Tensor;

    #[test]
    fn a_saved_graph_counts_its_values() {
        let empty = SavedGraph::<Tensor<f64>>::from_parts(0, vec![], vec![]).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.len(), 0);
        let one = SavedGraph::from_parts(1, vec![Tensor::scalar(2.0f64)], vec![]).unwrap();
        assert!(!one.is_empty());
        assert_eq!((one.len(), one.n_inputs()), (1, 1));
        let two = SavedGraph::from_parts(2, vec![Tensor::scalar(2.0f64); 2], vec![]).unwrap();
        assert_eq!((two.len(), two.n_inputs()), (2, 2));
        // the values must be the inputs and one per node
        assert!(SavedGraph::<Tensor<f64>>::from_parts(1, vec![], vec![]).is_err());
        let node =
            || PreparedNode::<Tensor<f64>>::opaque("id", Box::new(|c, _| Ok(vec![c.clone()])));
        let e = SavedGraph::from_parts(1, vec![Tensor::scalar(1.0f64)], vec![node(), node()])
            .unwrap_err();
        assert!(
            matches!(
                e,
                CompiledError::Length {
                    expected: 3,
                    got: 1,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_dense_vjp_with_the_wrong_number_of_contributions_is_refused() {
        // one input, one opaque node whose VJP forgets its contribution to the input
        let node = PreparedNode::opaque(
            "forgetful",
            Box::new(|_: &Tensor<f64>, _: &[Shape]| Ok(vec![])),
        );
        let values = vec![Tensor::scalar(1.0f64), Tensor::scalar(2.0)];
        let g = SavedGraph::from_parts(1, values, vec![node]).unwrap();
        let seed = vec![Tensor::scalar(0.0), Tensor::scalar(1.0)];
        let e = g.backprop_dense(seed).unwrap_err();
        assert!(
            matches!(
                e,
                CompiledError::Length {
                    expected: 1,
                    got: 0,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_compact_vjp_may_reach_only_earlier_positions_with_their_shapes() {
        let node = |pos: Pos, value: Tensor<f64>| PreparedNode {
            label: "custom".into(),
            dense: Box::new(|c: &Tensor<f64>, _: &[Shape]| Ok(vec![c.clone()])),
            compact: Some(Box::new(move |_: &Tensor<f64>| {
                Ok(vec![(pos, value.clone())])
            })),
        };
        let values = || vec![Tensor::scalar(1.0f64), Tensor::scalar(2.0)];
        let seed = || vec![Tensor::scalar(0.0), Tensor::scalar(1.0)];
        let ok = SavedGraph::from_parts(1, values(), vec![node(0, Tensor::scalar(3.0))]).unwrap();
        assert_eq!(ok.backprop_stored(seed()).unwrap()[0], Tensor::scalar(3.0));
        // a contribution to itself (position 1) or beyond is refused
        let g = SavedGraph::from_parts(1, values(), vec![node(1, Tensor::scalar(3.0))]).unwrap();
        assert!(
            matches!(
                g.backprop_stored(seed()).unwrap_err(),
                CompiledError::NoSuchPosition {
                    position: 1,
                    len: 1
                }
            ),
            "a contribution to a later position"
        );
        // and one of another shape than its position's
        let wrong = Tensor::new([2], vec![1.0, 1.0]).unwrap();
        let g = SavedGraph::from_parts(1, values(), vec![node(0, wrong)]).unwrap();
        assert!(matches!(
            g.backprop_stored(seed()).unwrap_err(),
            CompiledError::ValueShape { position: 0, .. }
        ));
        assert!(matches!(
            g.one_hot(1, Tensor::new([2], vec![1.0, 1.0]).unwrap()),
            Err(CompiledError::ValueShape { position: 1, .. })
        ));
        let text = format!("{g:?}");
        assert!(
            text.starts_with("SavedGraph { n_inputs: 1, shapes: ["),
            "{text}"
        );
        assert!(text.contains("label: \"custom\""), "{text}");
    }

    #[test]
    fn a_prepared_node_debugs_as_its_label() {
        let node =
            PreparedNode::<Tensor<f64>>::opaque("custom", Box::new(|c, _| Ok(vec![c.clone()])));
        assert_eq!(
            format!("{node:?}"),
            "PreparedNode { label: \"custom\", compact: false }"
        );
    }

    #[test]
    fn a_one_hot_seed_is_zeros_but_at_its_position_and_the_values_come_back() {
        let values = vec![
            Tensor::scalar(2.0f64),
            Tensor::new([2], vec![3.0, 4.0]).unwrap(),
        ];
        let node = PreparedNode::opaque(
            "id",
            Box::new(|c: &Tensor<f64>, _: &[Shape]| Ok(vec![c.clone()])),
        );
        let g = SavedGraph::from_parts(1, values.clone(), vec![node]).unwrap();
        let seed = g
            .one_hot(1, Tensor::new([2], vec![5.0, 6.0]).unwrap())
            .unwrap();
        assert_eq!(
            seed,
            vec![
                Tensor::scalar(0.0),
                Tensor::new([2], vec![5.0, 6.0]).unwrap()
            ]
        );
        assert!(g.one_hot(2, Tensor::scalar(1.0)).is_err());
        assert_eq!(g.into_values(), values);
    }
}
