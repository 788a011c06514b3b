//! `Tape<V>` and `Node<V>`: a grow-only array of nodes; a node's id is its index.

use crate::error::{Result, RuntimeError};
use crate::value::GradValue;
use std::fmt;

/// A local VJP: from the node's upstream gradient, `(parent id, contribution)` pairs in the order
/// they are to be accumulated.
pub type Backward<V> = Box<dyn Fn(&V) -> Result<Vec<(usize, V)>> + Send + Sync>;

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
    pub parents: Vec<usize>,
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
            parents: Vec::new(),
            cleanup: Vec::new(),
            backward: Box::new(|_| Ok(Vec::new())),
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
            .finish()
    }
}

/// A grow-only tape.
pub struct Tape<V> {
    nodes: Vec<Node<V>>,
}

impl<V: GradValue> fmt::Debug for Tape<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.nodes).finish()
    }
}

impl<V> Default for Tape<V> {
    fn default() -> Self {
        Tape { nodes: Vec::new() }
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
        }
    }

    /// Number of nodes.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// The node with id `id`.
    pub fn get_node(&self, id: usize) -> Result<&Node<V>> {
        self.nodes.get(id).ok_or(RuntimeError::NoSuchNode {
            id,
            size: self.nodes.len(),
        })
    }

    /// The value of node `id`.
    pub fn get_value(&self, id: usize) -> Result<&V> {
        self.get_node(id).map(|n| &n.value)
    }

    /// Appends a node and returns its id (the size before the append).
    pub fn add_node(&mut self, node: Node<V>) -> usize {
        let id = self.nodes.len();
        self.nodes.push(node);
        id
    }

    /// Appends a leaf.
    pub fn leaf(&mut self, value: V, requires_grad: bool, name: Option<String>) -> usize {
        self.add_node(Node::leaf(value, requires_grad, name))
    }

    /// All nodes, in id order.
    pub fn nodes(&self) -> &[Node<V>] {
        &self.nodes
    }

    /// Releases every owned value and every cleanup buffer.
    pub fn release(self) {
        for n in self.nodes {
            if n.owns_value {
                n.value.drop();
            }
            for c in n.cleanup {
                c.drop();
            }
        }
    }
}
