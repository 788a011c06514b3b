//! Anomaly mode in IR terms: the runtime finds the tape node where a NaN or an infinity
//! originates ([`torchlean_runtime::Anomaly`]); here that position becomes the user's IR node
//! (or the payload tensor it holds), with its kind, shape and parents.

use crate::error::{CompiledError, Result};
use crate::graph::{GraphData, Pos};
use crate::lower::{ExecGraph, InputSlot};
use std::fmt;
use torchlean_ir::Graph;
use torchlean_runtime::{Anomaly, Direction, GradValue, RuntimeError, Site};
use torchlean_spec::{NonFinite, Scalar, Shape, Tensor};

/// An IR node, or one payload tensor of it (`linear`'s `weight`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IrRef {
    pub node: usize,
    pub kind: &'static str,
    /// The payload tensor, when the value is one of the node's payload tensors rather than its
    /// output (a `const` node's value is its output).
    pub tensor: Option<&'static str>,
}

impl fmt::Display for IrRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({})", self.node, self.kind)?;
        if let Some(t) = self.tensor {
            write!(f, " payload `{t}`")?;
        }
        Ok(())
    }
}

/// Which value of the IR node anomaly mode found non-finite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IrSite {
    /// Its forward value, from finite operands (or a given input / payload value).
    Value,
    /// Its VJP's gradient for operand `to`, from a finite incoming gradient.
    Contribution { to: IrRef },
    /// Its gradient after summing contributions that were each finite (overflow).
    Accumulated,
    /// The seed (cotangent of the output) given to the backward.
    Seed,
}

/// Where a NaN or an infinity originates, in IR terms.
#[derive(Clone, Debug, PartialEq)]
pub struct IrAnomaly {
    pub at: IrRef,
    pub shape: Shape,
    /// The node's operands (IR parents and payload tensors) with their shapes.
    pub parents: Vec<(IrRef, Shape)>,
    pub site: IrSite,
    pub found: NonFinite,
}

impl IrAnomaly {
    pub fn direction(&self) -> Direction {
        match self.site {
            IrSite::Value => Direction::Forward,
            _ => Direction::Backward,
        }
    }
}

impl fmt::Display for IrAnomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "anomaly in the {}: IR {}, shape {}, parents [",
            self.direction(),
            self.at,
            self.shape
        )?;
        for (i, (p, s)) in self.parents.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{p} {s}")?;
        }
        f.write_str("]: ")?;
        let found = &self.found;
        match &self.site {
            IrSite::Value if self.parents.is_empty() => write!(f, "its value is {found}"),
            IrSite::Value => write!(f, "its output is {found}, from finite operands"),
            IrSite::Contribution { to } => write!(
                f,
                "its gradient for {to} is {found}, from a finite incoming gradient"
            ),
            IrSite::Accumulated => write!(
                f,
                "its gradient is {found} after summing finite contributions (overflow)"
            ),
            IrSite::Seed => write!(f, "the seed of the backward is {found}"),
        }
    }
}

impl ExecGraph {
    /// The IR node (or payload tensor) whose value sits at context position `pos`.
    pub fn ir_ref(&self, g: &Graph, pos: Pos) -> IrRef {
        let kind = |n: usize| g.node(n).map_or("unknown", |n| n.kind.name());
        if pos >= self.graph.n_inputs() {
            let node = self
                .ir_positions
                .iter()
                .position(|&p| p == pos)
                .unwrap_or(usize::MAX);
            return IrRef {
                node,
                kind: kind(node),
                tensor: None,
            };
        }
        match self.slots.get(pos) {
            Some(InputSlot::GraphInput { index }) => {
                let node = g.inputs().nth(*index).unwrap_or(g.input_id);
                IrRef {
                    node,
                    kind: kind(node),
                    tensor: None,
                }
            }
            None => IrRef {
                node: g.input_id,
                kind: kind(g.input_id),
                tensor: None,
            },
            Some(InputSlot::Payload { node, name }) => {
                let is_const = self.ir_positions.get(*node) == Some(&pos);
                IrRef {
                    node: *node,
                    kind: kind(*node),
                    tensor: (!is_const).then_some(*name),
                }
            }
        }
    }

    /// A runtime anomaly (tape ids are context positions) in terms of IR graph `g`.
    pub fn locate(&self, g: &Graph, a: &Anomaly) -> IrAnomaly {
        IrAnomaly {
            at: self.ir_ref(g, a.node),
            shape: a.shape.clone(),
            parents: a
                .parents
                .iter()
                .map(|(p, s)| (self.ir_ref(g, *p), s.clone()))
                .collect(),
            site: match a.site {
                Site::Value => IrSite::Value,
                Site::Contribution { parent } => IrSite::Contribution {
                    to: self.ir_ref(g, parent),
                },
                Site::Accumulated => IrSite::Accumulated,
                Site::Seed => IrSite::Seed,
            },
            found: a.found,
        }
    }

    /// `e` with a runtime anomaly restated in terms of IR graph `g` (the runtime's anomaly is
    /// kept as the source); any other error unchanged.
    pub fn in_ir_terms(&self, g: &Graph, e: CompiledError) -> CompiledError {
        match e {
            CompiledError::Runtime(RuntimeError::Anomaly(a)) => CompiledError::Anomaly {
                at: Box::new(self.locate(g, &a)),
                source: Some(Box::new(RuntimeError::Anomaly(a))),
            },
            other => other,
        }
    }
}

/// Anomaly mode's forward check of the value `v` at context position `pos` of `graph`.
pub(crate) fn check_position<V: GradValue>(graph: &GraphData, pos: Pos, v: &V) -> Result<()> {
    let Some(found) = v.non_finite() else {
        return Ok(());
    };
    let node = graph.node_at(pos);
    let parents = node.map_or_else(Vec::new, |n| {
        n.args
            .iter()
            .map(|&a| (a, graph.shape(a).clone()))
            .collect()
    });
    Err(RuntimeError::Anomaly(Box::new(Anomaly {
        node: pos,
        name: node.and_then(|n| n.origin.map(|o| o.to_string())),
        kind: node.map_or("input", |n| n.op.name()),
        shape: v.shape().clone(),
        parents,
        site: Site::Value,
        found,
    }))
    .into())
}

/// Anomaly mode on the IR denotation (`torchlean_ir::denote_all`'s values, in node order): the
/// first node whose value is NaN or infinite; its parents, earlier in the order, are finite.
pub fn check_denotation<A: Scalar>(g: &Graph, values: &[Tensor<A>]) -> Result<()> {
    for (n, v) in g.nodes.iter().zip(values) {
        let Some(found) = v.non_finite() else {
            continue;
        };
        let ir = |id: usize| IrRef {
            node: id,
            kind: g.node(id).map_or("unknown", |n| n.kind.name()),
            tensor: None,
        };
        let parents = n
            .parents
            .iter()
            .map(|&p| {
                let shape = values
                    .get(p)
                    .map_or_else(Shape::scalar, |v| v.shape().clone());
                (ir(p), shape)
            })
            .collect();
        return Err(CompiledError::Anomaly {
            at: Box::new(IrAnomaly {
                at: ir(n.id),
                shape: v.shape().clone(),
                parents,
                site: IrSite::Value,
                found,
            }),
            source: None,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anomaly_lists_its_operands_comma_separated_in_order() {
        let node = |node, kind| IrRef {
            node,
            kind,
            tensor: None,
        };
        let a = IrAnomaly {
            at: node(3, "mul_elem"),
            shape: Shape::new(vec![2]),
            parents: vec![
                (node(1, "input"), Shape::new(vec![2])),
                (node(2, "log"), Shape::new(vec![2])),
            ],
            site: IrSite::Value,
            found: NonFinite {
                index: 1,
                value: f64::NAN,
                count: 1,
            },
        };
        let text = a.to_string();
        let parents = "parents [node 1 (input) [2], node 2 (log) [2]]: ";
        assert!(text.contains(parents), "{text}");
        assert!(
            text.starts_with("anomaly in the forward: IR node 3 (mul_elem)"),
            "{text}"
        );
        assert!(
            text.contains("its output is") && text.ends_with("from finite operands"),
            "{text}"
        );
        // a value with no operands (an input, a payload tensor) is just a value
        let leaf = IrAnomaly {
            parents: Vec::new(),
            ..a
        };
        assert!(leaf.to_string().contains("]: its value is "), "{leaf}");
    }
}
