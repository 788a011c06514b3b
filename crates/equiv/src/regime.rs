//! The attribute regimes that change an op's maths, in one table: what each one means (a
//! predicate on an IR node), which kinds it applies to, and the `(kind, regime)` pairs the
//! generator guarantees at every budget ([`targets`], built round-robin into the first cases
//! of a run by [`crate::gen::build_targeted`]).
//!
//! A regime is read off the graph itself ([`Regime::holds`]), never off what the generator meant
//! to build, so the report's coverage is a measurement.

use std::collections::BTreeSet;
use torchlean_ir::{Graph, Node, OpKind};
use torchlean_spec::ops::desc::{self, CheckRegime};
use torchlean_spec::Op;
use CheckRegime::*;

/// An attribute regime of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Regime {
    /// The kind at all.
    Any,
    /// A regime an op's row lists (`OpDesc::regimes`: padding, strides, a repeated parent, a
    /// square right operand, a broadcast's axes; each documented in `spec`).
    Row(CheckRegime),
    /// Every attribute that has a default at it, left out where the IR can say so
    /// (`Op::at_defaults`: `layernorm` without `eps`, `gelu` "none", …), for every kind with
    /// such an attribute (`OpDesc::has_defaults`).
    Default,
    /// Some attribute that has a default written with another value.
    Explicit,
}

impl Regime {
    /// A short label (report, JSON).
    pub fn label(self) -> &'static str {
        match self {
            Regime::Any => "any",
            Regime::Row(Padded) => "padded",
            Regime::Row(Strided) => "stride>1",
            Regime::Row(RepeatedParent) => "repeated parent",
            Regime::Row(ThriceRepeated) => "parent x3",
            Regime::Row(SquareRhs) => "square rhs",
            Regime::Row(BatchedSquareRhs) => "batched square rhs",
            Regime::Row(BroadcastLastAxis) => "last axis",
            Regime::Row(BroadcastLeadingAxes) => "leading axes",
            Regime::Row(RepeatedIds) => "repeated ids",
            Regime::Default => "default left out",
            Regime::Explicit => "explicit",
        }
    }

    /// Whether `node` of `graph` is in this regime.
    pub fn holds(self, graph: &Graph, node: &Node) -> bool {
        let OpKind::Op(op) = &node.kind else {
            return self == Regime::Any;
        };
        let shape_of = |i: usize| node.parents.get(i).map(|&p| &graph.nodes[p].shape);
        let times = |n: usize| {
            node.parents
                .iter()
                .any(|p| node.parents.iter().filter(|q| *q == p).count() >= n)
        };
        match (self, op) {
            (Regime::Any, _) => true,
            (Regime::Row(Padded), Op::Pool(s)) => s.padding > 0,
            (Regime::Row(Padded), Op::Conv2d(s) | Op::Conv2dRelu(s)) => s.padding > 0,
            (Regime::Row(Strided), Op::Pool(s)) => s.stride > 1,
            (Regime::Row(Strided), Op::Conv2d(s) | Op::Conv2dRelu(s)) => s.stride > 1,
            (Regime::Row(RepeatedParent), _) => times(2),
            (Regime::Row(ThriceRepeated), _) => times(3),
            (Regime::Row(SquareRhs) | Regime::Row(BatchedSquareRhs), Op::MatMul) => {
                let rank = if self == Regime::Row(SquareRhs) { 2 } else { 3 };
                shape_of(1).is_some_and(|s| {
                    let d = s.dims();
                    d.len() == rank && d[rank - 1] == d[rank - 2] && d[rank - 1] >= 2
                })
            }
            (Regime::Row(BroadcastLastAxis), Op::BroadcastTo { from, to }) => {
                from.dims().last() == Some(&1)
                    && to.dims().last().is_some_and(|&k| k > 1)
                    && from.size() > 1
            }
            (Regime::Row(BroadcastLeadingAxes), Op::BroadcastTo { from, to }) => {
                to.rank() > from.rank()
            }
            // more positions than rows: some id repeats, whatever the values
            (Regime::Row(RepeatedIds), Op::Embedding) => shape_of(0)
                .zip(shape_of(1))
                .is_some_and(|(ids, table)| table.rank() == 2 && ids.size() > table.dims()[0]),
            (Regime::Default, op) => op.desc().has_defaults() && op.at_defaults(),
            (Regime::Explicit, op) => op.desc().has_defaults() && !op.at_defaults(),
            _ => false,
        }
    }
}

/// A `(kind, regime)` pair the generator guarantees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// The wire name (the descriptor's).
    pub kind: &'static str,
    pub regime: Regime,
}

impl Target {
    pub fn label(self) -> String {
        if self.regime == Regime::Any {
            self.kind.to_string()
        } else {
            format!("{} ({})", self.kind, self.regime.label())
        }
    }
}

/// The regimes beyond [`Regime::Any`] that change the maths, per kind, read off the rows: each
/// row's own (`OpDesc::regimes`), and for every kind with a defaulted attribute, at its
/// defaults and off them.
fn special() -> Vec<(&'static str, Regime)> {
    let mut v = Vec::new();
    for d in desc::OPS.iter() {
        v.extend(d.regimes.iter().map(|&r| (d.name, Regime::Row(r))));
        if d.has_defaults() {
            v.push((d.name, Regime::Default));
            v.push((d.name, Regime::Explicit));
        }
    }
    v
}

/// Every pair the checker must cover: each kind of the descriptor table at all, then each
/// special regime.
pub fn targets() -> Vec<Target> {
    let mut v: Vec<Target> = desc::names()
        .map(|kind| Target {
            kind,
            regime: Regime::Any,
        })
        .collect();
    v.extend(
        special()
            .into_iter()
            .map(|(kind, regime)| Target { kind, regime }),
    );
    v
}

/// The pairs of [`targets`] that `graph` covers.
pub fn covered(graph: &Graph) -> BTreeSet<Target> {
    let all = targets();
    let mut seen = BTreeSet::new();
    for node in &graph.nodes {
        let kind = node.kind.name();
        for t in all.iter().filter(|t| t.kind == kind) {
            if t.regime.holds(graph, node) {
                seen.insert(*t);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_each_pair_once_and_only_known_kinds() {
        let all = targets();
        let set: BTreeSet<Target> = all.iter().copied().collect();
        assert_eq!(set.len(), all.len(), "a pair is listed twice");
        for t in &all {
            assert!(desc::lookup(t.kind).is_some(), "unknown kind {}", t.kind);
        }
    }

    #[test]
    fn the_rows_list_the_regimes_the_hand_written_table_had() {
        // the table as it was written here before the rows carried it
        use torchlean_spec::BinaryOp;
        let mut want: BTreeSet<(&str, Regime)> = [
            (desc::AVG_POOL2D_PAD.name, Padded),
            (desc::MAX_POOL2D_PAD.name, Padded),
            (desc::CONV2D.name, Padded),
            (desc::CONV2D.name, Strided),
            (desc::MAX_POOL2D.name, Strided),
            (desc::AVG_POOL2D.name, Strided),
            (desc::MAX_POOL2D_PAD.name, Strided),
            (desc::AVG_POOL2D_PAD.name, Strided),
            (desc::CONCAT.name, ThriceRepeated),
            (desc::MATMUL.name, SquareRhs),
            (desc::MATMUL.name, BatchedSquareRhs),
            (desc::BROADCAST_TO.name, BroadcastLastAxis),
            (desc::BROADCAST_TO.name, BroadcastLeadingAxes),
        ]
        .into_iter()
        .map(|(kind, r)| (kind, Regime::Row(r)))
        .collect();
        // every binary function but `div` (whose divisor is made positive, a new node)
        for b in BinaryOp::ALL.iter().filter(|&&b| b != BinaryOp::Div) {
            want.insert((b.name(), Regime::Row(RepeatedParent)));
        }
        // added since, with their kinds
        want.insert((desc::EMBEDDING.name, Regime::Row(RepeatedIds)));
        want.insert((desc::CONV2D_RELU.name, Regime::Row(Padded)));
        want.insert((desc::CONV2D_RELU.name, Regime::Row(Strided)));
        for d in desc::OPS.iter().filter(|d| d.has_defaults()) {
            want.insert((d.name, Regime::Default));
            want.insert((d.name, Regime::Explicit));
        }
        let got: BTreeSet<(&str, Regime)> = special().into_iter().collect();
        assert_eq!(got, want);
    }
}
