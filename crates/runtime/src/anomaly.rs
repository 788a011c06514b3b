//! Anomaly mode: finding the node where a NaN or an infinity *originates*, forward or backward.
//!
//! Forward: every node's value is checked in evaluation order, so the first non-finite one has
//! finite operands (they were checked before it). Backward: at each node the sweep checks the
//! incoming gradient, then each contribution its VJP produces; the first non-finite
//! contribution made from a finite cotangent is the origin. A non-finite gradient whose every
//! contribution was finite overflowed while contributions were summed ([`Site::Accumulated`]),
//! and a non-finite seed is reported as such ([`Site::Seed`]). With anomaly mode off nothing
//! here runs.
//!
//! Compared with PyTorch's `torch.autograd.detect_anomaly`, which checks each backward
//! function's outputs and prints the traceback of the forward call that made it: this also
//! checks forward values (so `log(0)` is caught where it happens, not at its gradient), names
//! the node with its op, shape and parents (the compiled crate restates it as the user's IR
//! node, the eager session adds the layer path), tells a non-finite seed and an overflowing
//! sum from a VJP's own result, and gives the first bad element and how many there are.

use crate::error::RuntimeError;
use crate::tape::{Backward, Tape};
use crate::value::GradValue;
use std::fmt;
use torchlean_spec::{NonFinite, Shape};

/// Whether a sweep or an evaluation checks every value it forms for NaN and infinities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AnomalyMode {
    /// Nothing is checked (the default; costs nothing).
    #[default]
    Off,
    /// Stop at the first node whose value or gradient contribution is NaN or infinite.
    Detect,
}

impl AnomalyMode {
    /// `Detect` when `on`.
    pub fn detect_if(on: bool) -> Self {
        if on {
            AnomalyMode::Detect
        } else {
            AnomalyMode::Off
        }
    }

    pub fn is_on(self) -> bool {
        self == AnomalyMode::Detect
    }
}

/// Forward or backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
        })
    }
}

/// Which value of the node was found non-finite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Site {
    /// The node's own value, computed from finite operands (or a leaf's given value).
    Value,
    /// The node's VJP contribution to tape node `parent`, from a finite cotangent.
    Contribution { parent: usize },
    /// The node's gradient, after summing contributions that were each finite (overflow).
    Accumulated,
    /// The seed of the sweep.
    Seed,
}

impl Site {
    pub fn direction(&self) -> Direction {
        match self {
            Site::Value => Direction::Forward,
            _ => Direction::Backward,
        }
    }
}

/// What anomaly mode found, in tape terms (the compiled crate translates it to IR node ids).
#[derive(Clone, Debug, PartialEq)]
pub struct Anomaly {
    /// Tape id of the node.
    pub node: usize,
    /// The node's name on the tape (a compiled node's op, an eager op's layer path), if any.
    pub name: Option<String>,
    /// The op's wire name, `leaf` for a leaf, `closure` for a closure node.
    pub kind: &'static str,
    /// The node's value shape.
    pub shape: Shape,
    /// Tape ids of the node's parents, and their value shapes.
    pub parents: Vec<(usize, Shape)>,
    pub site: Site,
    pub found: NonFinite,
}

impl Anomaly {
    pub fn direction(&self) -> Direction {
        self.site.direction()
    }

    /// An anomaly at tape node `id` (`kind` overrides what the tape knows of the node's op:
    /// an eager node that records no VJP keeps no op).
    pub fn at<V: GradValue>(
        tape: &Tape<V>,
        id: usize,
        kind: Option<&'static str>,
        site: Site,
        found: NonFinite,
    ) -> Self {
        let Ok(node) = tape.get_node(id) else {
            return Anomaly {
                node: id,
                name: None,
                kind: kind.unwrap_or("unknown"),
                shape: Shape::scalar(),
                parents: Vec::new(),
                site,
                found,
            };
        };
        let kind = kind.unwrap_or_else(|| match &node.backward {
            Backward::Recorded(_) => tape.op_name(id).unwrap_or("op"),
            Backward::Closure(_) => "closure",
            Backward::Nothing if node.parents.is_empty() => "leaf",
            Backward::Nothing => "op",
        });
        let parents = node
            .parents
            .iter()
            .map(|&p| {
                let shape = tape
                    .get_value(p)
                    .map(|v| v.shape().clone())
                    .unwrap_or_else(|_| Shape::scalar());
                (p, shape)
            })
            .collect();
        Anomaly {
            node: id,
            name: node.name.clone(),
            kind,
            shape: node.value.shape().clone(),
            parents,
            site,
            found,
        }
    }
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "anomaly: tape node {} ({}", self.node, self.kind)?;
        if let Some(n) = &self.name {
            write!(f, ", `{n}`")?;
        }
        write!(f, ", shape {}, parents [", self.shape)?;
        for (i, (p, s)) in self.parents.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{p} {s}")?;
        }
        f.write_str("]): ")?;
        match &self.site {
            Site::Value => write!(
                f,
                "forward value is {}; its operands are finite",
                self.found
            ),
            Site::Contribution { parent } => write!(
                f,
                "backward: its gradient for parent {parent} is {}; the incoming gradient is finite",
                self.found
            ),
            Site::Accumulated => write!(
                f,
                "backward: its gradient is {} after summing finite contributions",
                self.found
            ),
            Site::Seed => write!(f, "backward: the seed is {}", self.found),
        }
    }
}

/// Anomaly mode's forward check of tape node `id`'s value.
pub fn check_forward<V: GradValue>(
    tape: &Tape<V>,
    id: usize,
    kind: Option<&'static str>,
) -> Result<(), RuntimeError> {
    let value = tape.get_value(id)?;
    match value.non_finite() {
        None => Ok(()),
        Some(found) => Err(RuntimeError::Anomaly(Box::new(Anomaly::at(
            tape,
            id,
            kind,
            Site::Value,
            found,
        )))),
    }
}

/// Anomaly mode's check of a gradient `g` at node `id` (`site` says which one it is).
pub(crate) fn check_gradient<V: GradValue>(
    tape: &Tape<V>,
    id: usize,
    site: Site,
    g: &V,
) -> Result<(), RuntimeError> {
    match g.non_finite() {
        None => Ok(()),
        Some(found) => Err(RuntimeError::Anomaly(Box::new(Anomaly::at(
            tape, id, None, site, found,
        )))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_a_value_is_a_forward_finding() {
        assert_eq!(Site::Value.direction(), Direction::Forward);
        for site in [
            Site::Contribution { parent: 0 },
            Site::Accumulated,
            Site::Seed,
        ] {
            assert_eq!(site.direction(), Direction::Backward, "{site:?}");
        }
        assert_eq!(Direction::Forward.to_string(), "forward");
        assert_eq!(Direction::Backward.to_string(), "backward");
    }

    #[test]
    fn detect_if_follows_its_flag() {
        // the default is `Off`, so a `detect_if` that ignored its flag passes any test that
        // only asks for `Off`
        assert_eq!(AnomalyMode::detect_if(true), AnomalyMode::Detect);
        assert_eq!(AnomalyMode::detect_if(false), AnomalyMode::Off);
        assert!(AnomalyMode::Detect.is_on());
        assert!(!AnomalyMode::Off.is_on());
    }

    #[test]
    fn a_node_with_parents_and_no_vjp_is_an_op_and_its_parents_are_listed_in_order() {
        // two constants (no gradient) and their sum: the sum keeps no VJP but has parents
        let mut tape = Tape::empty();
        let c = tape.leaf(
            torchlean_spec::Tensor::new([2], vec![1.0f64, 2.0]).unwrap(),
            false,
            None,
        );
        let d = tape.leaf(
            torchlean_spec::Tensor::new([2], vec![3.0f64, 4.0]).unwrap(),
            false,
            None,
        );
        let op = torchlean_spec::Op::Binary(torchlean_spec::BinaryOp::Add);
        let z = crate::kernel::record(&mut tape, op, &[c, d], None).unwrap();
        let found = NonFinite {
            index: 1,
            value: f64::INFINITY,
            count: 1,
        };
        let a = Anomaly::at(&tape, z, None, Site::Value, found);
        assert_eq!(a.kind, "op");
        assert_eq!(Anomaly::at(&tape, c, None, Site::Value, found).kind, "leaf");
        assert_eq!(
            a.to_string(),
            "anomaly: tape node 2 (op, shape [2], parents [0 [2], 1 [2]]): forward value is inf at \
             flat index 1 (1 non-finite element); its operands are finite"
        );
    }
}
