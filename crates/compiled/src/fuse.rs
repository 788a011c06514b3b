//! Fusions: a pattern of nodes becomes one node of a fused kind whose reference meaning is the
//! pattern's (its row in `spec::ops::desc` and its default kernel are the composition), so a
//! fused graph has the unfused graph's values and gradients, and an engine that overrides the
//! fused kernel saves the passes between them.
//!
//! One fusion today: `relu(conv2d(x, W, b))` → `conv2d_relu(x, W, b)` where the convolution's
//! only consumer is the ReLU and the caller does not keep the convolution's value. The CPU
//! engine applies the ReLU where the convolution stores its output and masks the cotangent
//! where the backward reads it (two passes over the activation fewer each way).
//!
//! Invariant: a fused graph's values at every kept position, and the gradients of its inputs,
//! are the unfused graph's bits on every engine (`tests/fuse.rs` on the CPU engine; the fused
//! kernels sum in the unfused kernels' order).

use crate::error::Result;
use crate::graph::{GraphData, Pos};
use torchlean_spec::{Op, UnaryOp};

/// A fused graph and where each position of the unfused one went.
#[derive(Clone, Debug)]
pub struct Fused {
    pub graph: GraphData,
    /// `position[p]`: the fused graph's position of the unfused position `p`'s value (a fused
    /// pattern's inner node maps to the fused node, whose value is the pattern's output: only
    /// positions the caller kept, and inputs, are values it may read there).
    pub position: Vec<Pos>,
}

/// `graph` with every `relu(conv2d(..))` whose convolution has no other consumer and is not in
/// `kept` as one `conv2d_relu` node; `None` when there is none (the graph as it is).
pub fn conv_relu(graph: &GraphData, kept: &[Pos]) -> Result<Option<Fused>> {
    let n_inputs = graph.n_inputs();
    let mut uses = vec![0usize; graph.len()];
    for node in graph.nodes() {
        for &a in &node.args {
            uses[a] += 1;
        }
    }
    for &k in kept {
        if let Some(u) = uses.get_mut(k) {
            *u += 1;
        }
    }
    // the convolutions (by position) whose one use is a ReLU
    let mut fused_conv = vec![false; graph.len()];
    for node in graph.nodes() {
        if let (Op::Unary(UnaryOp::Relu), [a]) = (&node.op, node.args.as_slice()) {
            let conv = graph.node_at(*a).map(|c| &c.op);
            if matches!(conv, Some(Op::Conv2d(_))) && uses[*a] == 1 {
                fused_conv[*a] = true;
            }
        }
    }
    if !fused_conv.contains(&true) {
        return Ok(None);
    }
    let mut out = GraphData::new(graph.inputs().to_vec())?;
    let mut position: Vec<Pos> = (0..n_inputs).collect();
    for (k, node) in graph.nodes().iter().enumerate() {
        let p = n_inputs + k;
        let args: Vec<Pos> = node.args.iter().map(|&a| position[a]).collect();
        let at = match (&node.op, args.as_slice()) {
            (Op::Conv2d(spec), _) if fused_conv[p] => {
                out.push(Op::Conv2dRelu(*spec), args, node.origin)?
            }
            // the ReLU of a fused convolution: its value is the fused node's
            (Op::Unary(UnaryOp::Relu), &[a]) if fused_conv[node.args[0]] => a,
            _ => out.push(node.op.clone(), args, node.origin)?,
        };
        position.push(at);
    }
    Ok(Some(Fused {
        graph: out,
        position,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlean_spec::{Conv2dSpec, Shape};

    fn conv() -> Op {
        Op::Conv2d(Conv2dSpec::ungrouped(1, 2, (3, 3), 1, 0))
    }

    const RELU: Op = Op::Unary(UnaryOp::Relu);

    /// inputs x [1,1,5,5], W [2,1,3,3], b [2]
    fn inputs() -> GraphData {
        GraphData::new(vec![
            Shape::from([1, 1, 5, 5]),
            Shape::from([2, 1, 3, 3]),
            Shape::from([2]),
        ])
        .unwrap()
    }

    fn kinds(g: &GraphData) -> Vec<&'static str> {
        g.nodes().iter().map(|n| n.op.name()).collect()
    }

    #[test]
    fn a_convolution_read_only_by_its_relu_becomes_one_node() {
        let mut g = inputs();
        let y = g.push(conv(), vec![0, 1, 2], None).unwrap();
        let r = g.push(RELU, vec![y], None).unwrap();
        let s = g.push(Op::Sum, vec![r], None).unwrap();
        let f = conv_relu(&g, &[s]).unwrap().unwrap();
        assert_eq!(kinds(&f.graph), ["conv2d_relu", "sum"]);
        assert_eq!(f.position, [0, 1, 2, 3, 3, 4]);
        assert_eq!(f.graph.nodes()[1].args.as_slice(), [3]);
    }

    #[test]
    fn a_convolution_with_another_consumer_or_kept_stays() {
        // read by the ReLU and by a sum
        let mut g = inputs();
        let y = g.push(conv(), vec![0, 1, 2], None).unwrap();
        let r = g.push(RELU, vec![y], None).unwrap();
        g.push(Op::Binary(torchlean_spec::BinaryOp::Add), vec![r, y], None)
            .unwrap();
        assert!(conv_relu(&g, &[]).unwrap().is_none());
        // kept by the caller
        let mut g = inputs();
        let y = g.push(conv(), vec![0, 1, 2], None).unwrap();
        let r = g.push(RELU, vec![y], None).unwrap();
        assert!(conv_relu(&g, &[y, r]).unwrap().is_none());
        // a ReLU of an input, a leaky ReLU of a convolution
        let mut g = inputs();
        g.push(RELU, vec![2], None).unwrap();
        let y = g.push(conv(), vec![0, 1, 2], None).unwrap();
        let leaky = UnaryOp::LeakyRelu {
            negative_slope: 0.1,
        };
        g.push(Op::Unary(leaky), vec![y], None).unwrap();
        assert!(conv_relu(&g, &[]).unwrap().is_none());
    }
}
