//! `GraphData`: typed SSA. An input context Γ (shapes), then one node per op whose arguments are
//! earlier context positions with checked shapes. Construction validates; once built, every
//! index and shape is known good.

use crate::error::{CompiledError, Result};
use torchlean_runtime::{forward, AnomalyMode, Kernels};
use torchlean_spec::{Op, Shape};

/// A context position: an input (`< n_inputs`) or the value of node `position − n_inputs`.
pub type Pos = usize;

/// One SSA node.
#[derive(Clone, Debug, PartialEq)]
pub struct GNode {
    pub op: Op,
    pub args: Vec<Pos>,
    pub shape: Shape,
    /// Where the node came from (e.g. "IR node 7"), for printing.
    pub origin: Option<String>,
}

/// Typed SSA graph data.
///
/// Invariant: every `args[i]` of the node at position `p` is `< p`, and `nodes[k].shape` is
/// `op.infer_shape` of its arguments' shapes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphData {
    inputs: Vec<Shape>,
    nodes: Vec<GNode>,
}

impl GraphData {
    /// A graph with input context Γ and no nodes.
    pub fn new(inputs: Vec<Shape>) -> Result<Self> {
        for (i, s) in inputs.iter().enumerate() {
            s.checked_size().map_err(|e| CompiledError::Shape {
                position: i,
                op: "input",
                source: e,
            })?;
        }
        Ok(GraphData {
            inputs,
            nodes: Vec::new(),
        })
    }

    /// Appends a node; returns its position. Fails if an argument is not an earlier position or
    /// the op rejects the argument shapes.
    pub fn push(&mut self, op: Op, args: Vec<Pos>, origin: Option<String>) -> Result<Pos> {
        let position = self.len();
        let mut shapes = Vec::with_capacity(args.len());
        for (arg, &target) in args.iter().enumerate() {
            if target >= position {
                return Err(CompiledError::BadArgument {
                    position,
                    arg,
                    target,
                    len: position,
                });
            }
            shapes.push(self.shape(target).clone());
        }
        let shape = op
            .infer_shape(&shapes)
            .map_err(|source| CompiledError::Shape {
                position,
                op: op.name(),
                source,
            })?;
        self.nodes.push(GNode {
            op,
            args,
            shape,
            origin,
        });
        Ok(position)
    }

    pub fn n_inputs(&self) -> usize {
        self.inputs.len()
    }

    pub fn inputs(&self) -> &[Shape] {
        &self.inputs
    }

    pub fn nodes(&self) -> &[GNode] {
        &self.nodes
    }

    /// Number of context positions (inputs + nodes).
    pub fn len(&self) -> usize {
        self.inputs.len() + self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shape at a position (`pos < len()`).
    pub fn shape(&self, pos: Pos) -> &Shape {
        if pos < self.inputs.len() {
            &self.inputs[pos]
        } else {
            &self.nodes[pos - self.inputs.len()].shape
        }
    }

    /// The node at a position, if it is a node.
    pub fn node_at(&self, pos: Pos) -> Option<&GNode> {
        pos.checked_sub(self.inputs.len())
            .and_then(|k| self.nodes.get(k))
    }

    /// The position of the last node (the default output).
    pub fn last(&self) -> Option<Pos> {
        self.len().checked_sub(1)
    }

    /// Checks that `values` match the input context.
    pub fn check_inputs<V: Kernels>(&self, values: &[V]) -> Result<()> {
        if values.len() != self.inputs.len() {
            return Err(CompiledError::Length {
                what: "the inputs",
                expected: self.inputs.len(),
                got: values.len(),
            });
        }
        for (i, (v, s)) in values.iter().zip(&self.inputs).enumerate() {
            if v.shape() != s {
                return Err(CompiledError::ValueShape {
                    what: "input",
                    position: i,
                    expected: s.clone(),
                    got: v.shape().clone(),
                });
            }
        }
        Ok(())
    }

    /// Evaluates the graph: all values in context order (inputs, then each node).
    pub fn eval<V: Kernels>(&self, inputs: Vec<V>) -> Result<Vec<V>> {
        self.eval_with(inputs, AnomalyMode::Off)
    }

    /// [`GraphData::eval`]; with [`AnomalyMode::Detect`], every value (inputs first) is checked
    /// in order and the first NaN or infinite one stops the evaluation with a
    /// `RuntimeError::Anomaly` naming its position (its operands, checked before it, are finite).
    pub fn eval_with<V: Kernels>(&self, inputs: Vec<V>, mode: AnomalyMode) -> Result<Vec<V>> {
        self.check_inputs(&inputs)?;
        if mode.is_on() {
            for (pos, v) in inputs.iter().enumerate() {
                crate::anomaly::check_position(self, pos, v)?;
            }
        }
        let mut ctx = inputs;
        ctx.reserve(self.nodes.len());
        for (k, node) in self.nodes.iter().enumerate() {
            let pos = self.inputs.len() + k;
            let args: Vec<&V> = node.args.iter().map(|&a| &ctx[a]).collect();
            let v = forward(&node.op, &args).map_err(|e| e.at_node(pos))?;
            if mode.is_on() {
                crate::anomaly::check_position(self, pos, &v)?;
            }
            ctx.push(v);
        }
        Ok(ctx)
    }
}
