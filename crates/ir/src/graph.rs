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
    /// The first (or only) input.
    pub input_id: usize,
    /// The inputs after the first, in order (the wire's `input_ids[1..]`, an extension of
    /// TorchLean's format); empty for a single-input graph, which is every TorchLean graph.
    /// An `input` node listed in neither denotes the first input, as in TorchLean, where every
    /// `input` node is the one graph input.
    pub extra_inputs: Vec<usize>,
    /// The inputs' names (`input_names` on the wire, what `--input NAME=FILE` matches): empty,
    /// or one per input in input order. Imported models keep their ONNX input names here.
    pub input_names: Vec<String>,
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
            extra_inputs: Vec::new(),
            input_names: Vec::new(),
            output_id,
            extra_outputs: Vec::new(),
            nodes,
        }
    }

    /// Every input, in order: `input_id`, then `extra_inputs`.
    pub fn inputs(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.input_id).chain(self.extra_inputs.iter().copied())
    }

    /// How many inputs the graph has (at least one).
    pub fn input_count(&self) -> usize {
        1 + self.extra_inputs.len()
    }

    /// Which input an `input` node with id `id` denotes: its position in [`Graph::inputs`], or
    /// 0 (the first input) for an `input` node the graph does not list.
    pub fn input_position(&self, id: usize) -> usize {
        self.inputs().position(|i| i == id).unwrap_or(0)
    }

    /// The name of input `k` (by position): its `input_names` entry, else the node id in
    /// decimal.
    pub fn input_name(&self, k: usize) -> String {
        match self.input_names.get(k) {
            Some(name) => name.clone(),
            None => self
                .inputs()
                .nth(k)
                .map_or_else(String::new, |id| id.to_string()),
        }
    }

    /// The position of the input called `name` ([`Graph::input_name`]): an `input_names` entry,
    /// or an input node's id in decimal.
    pub fn find_input(&self, name: &str) -> Option<usize> {
        self.input_names
            .iter()
            .position(|n| n == name)
            .or_else(|| self.inputs().position(|id| id.to_string() == name))
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
        !self.extra_inputs.is_empty() || self.nodes.iter().any(|n| n.kind.is_extension())
    }
}
