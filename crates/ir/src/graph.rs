//! `Graph` and `Node`: the IR as data. Reading and writing them is [`crate::format`]'s job
//! (`torchlean.ir.v1` JSON in TorchLean's two dialects, [`crate::format::august`] and
//! [`crate::format::september`]).

use crate::kind::OpKind;
use torchlean_spec::Shape;

/// One node: its id (= its index), kind with attributes, parent ids and declared output shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub id: usize,
    pub kind: OpKind,
    pub parents: Vec<usize>,
    pub shape: Shape,
}

/// An op-tagged DAG in topological order: `nodes[i].id == i` and every parent id is smaller
/// (checked by [`crate::check_well_formed`], not by construction, so that a bad graph can be
/// loaded and every problem in it reported).
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub input_id: usize,
    /// The first (or only) output.
    pub output_id: usize,
    /// The outputs after the first, in order (the September dialect's `output_ids[1..]`); empty
    /// for a single-output graph, which is every August-dialect graph.
    pub extra_outputs: Vec<usize>,
    pub nodes: Vec<Node>,
}

impl Graph {
    /// A single-output graph (the August dialect's shape of a graph).
    pub fn new(input_id: usize, output_id: usize, nodes: Vec<Node>) -> Graph {
        Graph {
            input_id,
            output_id,
            extra_outputs: Vec::new(),
            nodes,
        }
    }

    /// Every output, in order: `output_id`, then `extra_outputs`.
    pub fn outputs(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.output_id).chain(self.extra_outputs.iter().copied())
    }

    /// How many outputs the graph has (at least one).
    pub fn output_count(&self) -> usize {
        1 + self.extra_outputs.len()
    }

    /// The node with id `id`, if the index exists.
    pub fn node(&self, id: usize) -> Option<&Node> {
        self.nodes.get(id)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether any node uses a kind outside TorchLean's wire format.
    pub fn uses_extensions(&self) -> bool {
        self.nodes.iter().any(|n| n.kind.is_extension())
    }
}
