//! `GraphData`: typed SSA. An input context Γ (shapes), then one node per op whose arguments are
//! earlier context positions with checked shapes. Construction validates; once built, every
//! index and shape is known good.

use crate::error::{CompiledError, Result};
use torchlean_runtime::{forward, AnomalyMode, Kernels, Parents};
use torchlean_spec::{Budget, NodeCost, Op, Pass, Shape, Tally};

/// A context position: an input (`< n_inputs`) or the value of node `position − n_inputs`.
pub type Pos = usize;

/// Where a node came from, for printing (a number, not a string: one per node adds up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Lowered from this IR node.
    IrNode(usize),
    /// The `k`-th op recorded by a program (`torchlean-nn`).
    Op(usize),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::IrNode(n) => write!(f, "IR node {n}"),
            Origin::Op(k) => write!(f, "op {k}"),
        }
    }
}

/// One SSA node (168 bytes: a graph of a million nodes is lowered, then held while its tape is
/// built, so every field counts; `docs/ARCHITECTURE.md`, "Memory per node").
#[derive(Clone, Debug, PartialEq)]
pub struct GNode {
    pub op: Op,
    /// The arguments' positions, inline up to two (no allocation per unary or binary node).
    pub args: Parents,
    pub shape: Shape,
    /// Where the node came from (printed "IR node 7"), for printing.
    pub origin: Option<Origin>,
}

const _: () = assert!(std::mem::size_of::<GNode>() <= 168);

/// The element size the evaluators' budget check counts when it does not know the engine's
/// dtype: 8 (f64; f32 runs are counted twice their size, a safe overestimate).
pub const BUDGET_ELEM_BYTES: usize = 8;

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
    pub fn push(&mut self, op: Op, args: Vec<Pos>, origin: Option<Origin>) -> Result<Pos> {
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
            args: Parents::from_vec(args),
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

    /// Evaluates the graph for the value at `output` only, releasing every value
    /// ([`GradValue::drop`](torchlean_runtime::GradValue::drop)) right after its last use, so
    /// memory holds the live values rather than all of them (a chain holds two). The values
    /// are those of [`GraphData::eval`]: the same kernels on the same operands.
    pub fn eval_output<V: Kernels>(&self, inputs: Vec<V>, output: Pos) -> Result<V> {
        // counted as [`GraphData::eval`] counts (every value): a safe overestimate
        self.check_budget(Budget::process_default(), BUDGET_ELEM_BYTES, Pass::Eval)?;
        if output >= self.len() {
            return Err(CompiledError::NoSuchPosition {
                position: output,
                len: self.len(),
            });
        }
        self.check_inputs(&inputs)?;
        // the last position reading each value (its own position when nothing reads it)
        let mut last_use: Vec<Pos> = (0..self.len()).collect();
        for (k, node) in self.nodes.iter().enumerate() {
            for &a in &node.args {
                last_use[a] = self.inputs.len() + k;
            }
        }
        last_use[output] = Pos::MAX;
        let mut ctx: Vec<Option<V>> = Vec::with_capacity(self.len());
        for (pos, v) in inputs.into_iter().enumerate() {
            ctx.push(if last_use[pos] == pos {
                v.drop();
                None
            } else {
                Some(v)
            });
        }
        for (k, node) in self.nodes.iter().enumerate() {
            let pos = self.inputs.len() + k;
            let args: Vec<&V> = node
                .args
                .iter()
                .map(|&a| ctx[a].as_ref().expect("a value lives until its last use"))
                .collect();
            let v = forward(&node.op, &args).map_err(|e| e.at_node(pos))?;
            for &a in &node.args {
                if last_use[a] == pos {
                    if let Some(dead) = ctx[a].take() {
                        dead.drop();
                    }
                }
            }
            ctx.push(if last_use[pos] == pos {
                v.drop();
                None
            } else {
                Some(v)
            });
        }
        Ok(ctx[output]
            .take()
            .expect("the output is never released (its last use is MAX)"))
    }

    /// Checks that the values (and for [`Pass::Grad`] the gradients) and workspaces of every
    /// position ([`torchlean_spec::budget`], `elem_bytes` per element) fit `budget`; the error
    /// names the first position that takes the total over it.
    pub fn check_budget(&self, budget: Budget, elem_bytes: usize, pass: Pass) -> Result<()> {
        let mut tally = Tally::new(budget, elem_bytes);
        let over = |position: usize, op: &'static str, shape: &Shape| {
            let shape = shape.clone();
            move |source| CompiledError::OverBudget {
                position,
                op,
                shape,
                source,
            }
        };
        for (i, s) in self.inputs.iter().enumerate() {
            tally
                .add(NodeCost::new(s.size(), 0, pass))
                .map_err(over(i, "input", s))?;
        }
        let mut operands: Vec<Shape> = Vec::new();
        for (k, node) in self.nodes.iter().enumerate() {
            operands.clear();
            operands.extend(node.args.iter().map(|&a| self.shape(a).clone()));
            let ws = node.op.workspace_elements(&operands, &node.shape, pass);
            tally
                .add(NodeCost::new(node.shape.size(), ws, pass))
                .map_err(over(self.inputs.len() + k, node.op.name(), &node.shape))?;
        }
        Ok(())
    }

    /// Evaluates the graph: all values in context order (inputs, then each node). Refused
    /// before anything runs when over the process's memory budget
    /// ([`GraphData::check_budget`] for [`Pass::Eval`] with [`Budget::process_default`],
    /// counting [`BUDGET_ELEM_BYTES`] per element).
    pub fn eval<V: Kernels>(&self, inputs: Vec<V>) -> Result<Vec<V>> {
        self.eval_with(inputs, AnomalyMode::Off)
    }

    /// [`GraphData::eval`]; with [`AnomalyMode::Detect`], every value (inputs first) is checked
    /// in order and the first NaN or infinite one stops the evaluation with a
    /// `RuntimeError::Anomaly` naming its position (its operands, checked before it, are finite).
    pub fn eval_with<V: Kernels>(&self, inputs: Vec<V>, mode: AnomalyMode) -> Result<Vec<V>> {
        self.check_budget(Budget::process_default(), BUDGET_ELEM_BYTES, Pass::Eval)?;
        self.check_inputs(&inputs)?;
        if mode.is_on() {
            for (pos, v) in inputs.iter().enumerate() {
                crate::ir_anomaly::check_position(self, pos, v)?;
            }
        }
        let mut ctx = inputs;
        ctx.reserve(self.nodes.len());
        for (k, node) in self.nodes.iter().enumerate() {
            let pos = self.inputs.len() + k;
            let args: Vec<&V> = node.args.iter().map(|&a| &ctx[a]).collect();
            let v = forward(&node.op, &args).map_err(|e| e.at_node(pos))?;
            if mode.is_on() {
                crate::ir_anomaly::check_position(self, pos, &v)?;
            }
            ctx.push(v);
        }
        Ok(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlean_spec::{BinaryOp, Tensor, UnaryOp};

    /// The process default of this test binary: 1 GiB. Every test that evaluates sets it first
    /// (only the first set takes effect, and a read before any set would fix the machine's
    /// default), so whichever runs first, every test sees 1 GiB.
    fn one_gib_process_budget() {
        Budget::set_process_default(Budget::bytes(1 << 30));
    }

    #[test]
    fn the_last_position_is_the_last_node_or_input() {
        let mut g = GraphData::new(vec![Shape::from([2])]).expect("valid shapes");
        assert_eq!(g.last(), Some(0));
        let n = g
            .push(Op::Unary(UnaryOp::Neg), vec![0], None)
            .expect("push");
        assert_eq!((n, g.last()), (1, Some(1)));
        assert!(!g.is_empty());
        let empty = GraphData::new(vec![]).expect("no inputs");
        assert_eq!((empty.last(), empty.is_empty()), (None, true));
    }

    #[test]
    fn compiling_with_anomaly_mode_keeps_a_node_and_a_value_per_position() {
        one_gib_process_budget();
        let mut g = GraphData::new(vec![Shape::from([2])]).expect("valid shapes");
        let n = g
            .push(Op::Unary(UnaryOp::Neg), vec![0], None)
            .expect("push");
        let x = Tensor::new([2], vec![1.5, -2.0]).expect("2 values");
        let (tape, values) =
            crate::compile_detecting(&g, vec![x.clone()], torchlean_runtime::AnomalyMode::Detect)
                .expect("compiles");
        assert_eq!(tape.nodes().len(), 2);
        // the full-context tape (a checking mode) names each node: inputs by index, ops by op
        let (full, _) = crate::compile_with(&g, vec![x.clone()], crate::CompileMode::FullContext)
            .expect("compiles");
        let names: Vec<Option<&str>> = full.nodes().iter().map(|n| n.name.as_deref()).collect();
        assert_eq!(names, [Some("input 0"), Some("neg")]);
        assert_eq!(values, g.eval(vec![x]).expect("evaluates"));
        assert_eq!(values[n].data(), &[-1.5, 2.0]);
    }

    #[test]
    fn eval_output_is_evals_value_bit_for_bit_at_every_position() {
        one_gib_process_budget();
        // a repeated argument, a value read late, an unused node and an unused input
        let s = Shape::from([3]);
        let mut g = GraphData::new(vec![s.clone(), s.clone(), s]).expect("valid shapes");
        let t = g
            .push(Op::Unary(UnaryOp::Tanh), vec![0], None)
            .expect("push");
        let m = g
            .push(Op::Binary(BinaryOp::Mul), vec![t, t], None)
            .expect("push");
        let _unused = g
            .push(Op::Unary(UnaryOp::Exp), vec![m], None)
            .expect("push");
        let a = g
            .push(Op::Binary(BinaryOp::Add), vec![m, 1], None)
            .expect("push");
        g.push(Op::Binary(BinaryOp::Sub), vec![a, t], None)
            .expect("push");
        let inputs = || -> Vec<Tensor<f64>> {
            (0..3)
                .map(|i| Tensor::new([3], vec![0.3 * i as f64, -1.7, 2.5]).expect("3 values"))
                .collect()
        };
        let all = g.eval(inputs()).expect("evaluates");
        for p in 0..g.len() {
            let one = g.eval_output(inputs(), p).expect("evaluates");
            assert!(one.bit_eq(&all[p]), "position {p}");
        }
        assert!(matches!(
            g.eval_output(inputs(), g.len()),
            Err(CompiledError::NoSuchPosition { .. })
        ));
    }

    /// `x [4]`, `relu(x)`, `broadcast_to [1000]` of `sum`.
    fn graph() -> GraphData {
        let mut g = GraphData::new(vec![Shape::from([4])]).unwrap();
        let r = g.push(Op::Unary(UnaryOp::Relu), vec![0], None).unwrap();
        let s = g.push(Op::Sum, vec![r], None).unwrap();
        let to = Shape::from([1000]);
        g.push(
            Op::BroadcastTo {
                from: Shape::scalar(),
                to,
            },
            vec![s],
            None,
        )
        .unwrap();
        g
    }

    #[test]
    fn the_budget_names_the_position_that_crosses_it() {
        let g = graph();
        // values 4 + 4 + 1 + 1000 elements, f64; twice that with gradients
        let eval = (4 + 4 + 1 + 1000) * 8;
        assert!(g.check_budget(Budget::bytes(eval), 8, Pass::Eval).is_ok());
        assert!(g
            .check_budget(Budget::bytes(2 * eval), 8, Pass::Grad)
            .is_ok());
        match g.check_budget(Budget::bytes(eval - 1), 8, Pass::Eval) {
            Err(CompiledError::OverBudget {
                position: 3,
                op: "broadcast_to",
                source,
                ..
            }) => assert_eq!((source.node_bytes, source.total_bytes), (8000, eval)),
            other => panic!("{other:?}"),
        }
        assert!(g
            .check_budget(Budget::bytes(2 * eval - 1), 8, Pass::Grad)
            .is_err());
    }

    #[test]
    fn eval_refuses_a_graph_over_the_process_budget_before_running() {
        // a 2^32-element broadcast (32 GiB) is over the test binary's 1 GiB
        one_gib_process_budget();
        assert_eq!(Budget::process_default(), Budget::bytes(1 << 30));
        let mut g = GraphData::new(vec![Shape::scalar()]).unwrap();
        let to = Shape::from([1 << 16, 1 << 16]);
        g.push(
            Op::BroadcastTo {
                from: Shape::scalar(),
                to,
            },
            vec![0],
            None,
        )
        .unwrap();
        let x = Tensor::<f64>::scalar(1.0);
        assert!(matches!(
            g.eval(vec![x]),
            Err(CompiledError::OverBudget { position: 1, .. })
        ));
    }
}
