//! `torchlean export-torch`: a `torchlean.ir.v1` graph as a standalone PyTorch module.
//!
//! The module imports only `torch` and `safetensors`; its `forward` follows the graph node by
//! node, one line per node commented with the node id and kind (the descriptor's wire name),
//! and its weights come from a safetensors file written beside it, under the payload's keys
//! (`"<node id>.<name>"`). Payload tensors are `torch.nn.Parameter`s (so `torch.autograd`
//! gives the gradients `torchlean grad` reports under `grad_payload`), except data operands
//! (`cross_entropy`'s class ids: an `int64` buffer).
//!
//! The random kinds (`rand_uniform`, `bernoulli_mask`) draw from torchlean's SplitMix64 stream
//! (`spec::ops::uniform_at`, keyed by seed, node id and element index), which PyTorch's
//! generator cannot reproduce: their draws are computed here and stored in the weights file
//! under `"<node id>.draws"`, so the module reproduces the graph bit for bit.
//!
//! Nothing here names an op a second time: the kind in each comment and every payload name
//! come from the op descriptors, the op a node applies from `ir::node_sem`, and its PyTorch
//! expression from its row's template (`spec::ops::torch`); a test runs it on every descriptor
//! of `spec::ops::desc::OPS`. What PyTorch refuses (a pool padded by more than half its window)
//! is checked here.

use std::fmt::Write as _;
use torchlean_ir::{node_sem, Diagnostic, Graph, NodeSem, Payload, TensorData};
use torchlean_spec::ops::{torch, uniform_at, PoolSpec};
use torchlean_spec::Op;
use torchlean_train::Classify;

/// The weights-file name of the random kinds' draws (`"<node id>.draws"`).
pub const DRAWS: &str = "draws";

/// One tensor of the weights file.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightTensor {
    /// `"<node id>.<name>"`.
    pub key: String,
    pub shape: Vec<usize>,
    pub data: TensorData,
}

/// The emitted module and the tensors of its weights file.
#[derive(Clone, Debug, PartialEq)]
pub struct TorchModule {
    /// The Python source.
    pub source: String,
    pub weights: Vec<WeightTensor>,
}

/// How a payload tensor is held by the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// A `torch.nn.Parameter` in the module's dtype (it gets a gradient).
    Parameter,
    /// An `int64` buffer (class ids: data, no gradient).
    Ids,
    /// A buffer in the module's dtype (the random kinds' draws).
    Draws,
}

/// The module for graph `g` (already checked: shapes and payload), whose weights file is
/// `weights_name` beside it. Every node that PyTorch cannot run as torchlean does is one
/// diagnostic (node, kind, field), all of them together.
pub fn emit(
    g: &Graph,
    payload: &Payload,
    weights_name: &str,
) -> Result<TorchModule, Vec<Diagnostic>> {
    let mut m = ModuleParts::default();
    for node in &g.nodes {
        m.node(g, payload, node);
    }
    if !m.problems.is_empty() {
        return Err(m.problems);
    }
    let source = m.source(g, weights_name);
    Ok(TorchModule {
        source,
        weights: m.weights,
    })
}

/// The pieces of the module as the nodes are emitted: `__init__`'s lines, `forward`'s lines,
/// the weights file's tensors, the helper functions used, and the nodes PyTorch cannot run.
#[derive(Default)]
struct ModuleParts {
    init: String,
    forward: String,
    weights: Vec<WeightTensor>,
    helpers: Vec<&'static str>,
    problems: Vec<Diagnostic>,
}

impl ModuleParts {
    /// Node `node`'s held tensors and its `forward` line (or its diagnostics).
    fn node(&mut self, g: &Graph, payload: &Payload, node: &torchlean_ir::Node) {
        let kind = node.kind.name();
        let args: Vec<String> = node.parents.iter().map(|p| format!("v{p}")).collect();
        let desc = node.kind.desc();
        let mut refs = Vec::new();
        let parents = node.parents.len();
        for (i, name) in desc.payload_names().iter().enumerate() {
            let Some(t) = payload.entry(node.id).and_then(|e| e.tensor(name)) else {
                self.problems.push(
                    Diagnostic::error("missing from the payload")
                        .at(node.id, kind)
                        .field(*name),
                );
                continue;
            };
            let held = if desc.data.contains(&(parents + i)) {
                Held::Ids
            } else {
                Held::Parameter
            };
            refs.push(self.hold(node.id, name, held, t.shape().dims(), t.data().to_vec()));
        }
        let expr = match node_sem(node, Some(payload)) {
            NodeSem::Input => Ok(input_param(g, g.input_position(node.id))),
            NodeSem::Const => Ok(refs.first().cloned().unwrap_or_default()),
            NodeSem::Apply(op) => {
                if let Some(draws) = draws(&op) {
                    refs.push(self.hold(node.id, DRAWS, Held::Draws, node.shape.dims(), draws));
                }
                for h in torch::helpers_of(op.desc()) {
                    if !self.helpers.contains(&h) {
                        self.helpers.push(h);
                    }
                }
                op_expr(&op, &args, &refs)
            }
        };
        match expr {
            Ok(e) => {
                let _ = writeln!(
                    self.forward,
                    "        v{} = {e}  # {} {kind}",
                    node.id, node.id
                );
            }
            Err(d) => self.problems.push(d.at(node.id, kind)),
        }
    }

    /// Holds tensor `name` of node `id` (key `"<id>.<name>"` in the weights file) as `held`;
    /// returns the expression `forward` reads it by.
    fn hold(
        &mut self,
        id: usize,
        name: &str,
        held: Held,
        dims: &[usize],
        data: Vec<f64>,
    ) -> String {
        let key = format!("{id}.{name}");
        let attr = format!("n{id}_{name}");
        let line = match held {
            Held::Parameter => {
                format!("self.{attr} = torch.nn.Parameter(w[\"{key}\"].to(dtype))")
            }
            Held::Ids => format!(
                "self.register_buffer(\"{attr}\", w[\"{key}\"].to(torch.int64))  # class ids (data)"
            ),
            Held::Draws => format!(
                "self.register_buffer(\"{attr}\", w[\"{key}\"].to(dtype))  # torchlean's SplitMix64 draws"
            ),
        };
        let _ = writeln!(self.init, "        {line}");
        self.weights.push(WeightTensor {
            key,
            shape: dims.to_vec(),
            data: TensorData::F64(data),
        });
        format!("self.{attr}")
    }

    /// The Python source: the module docstring and imports, the helpers, and `Model`.
    fn source(&self, g: &Graph, weights_name: &str) -> String {
        let mut source = String::new();
        let _ = write!(
            source,
            r#""""A torchlean.ir.v1 graph as a PyTorch module (generated by `torchlean export-torch`).

`forward` follows the graph node by node: one line per node, commented with its id and kind.
The weights are read from WEIGHTS, the safetensors file beside this one (keys "<node id>.<name>",
as in a torchlean payload); the random kinds' draws are stored there too ("<node id>.draws"),
since PyTorch's generator cannot reproduce torchlean's SplitMix64 stream.

    model = Model(dtype=torch.float64)
    y = model(x)
"""
import pathlib

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

WEIGHTS = pathlib.Path(__file__).with_name("{weights_name}")
"#
        );
        for h in &self.helpers {
            source.push('\n');
            source.push_str(h);
        }
        // several outputs: a tuple, in output order (as a PyTorch module returns them)
        let returned = g
            .outputs()
            .map(|id| format!("v{id}"))
            .collect::<Vec<_>>()
            .join(", ");
        let params = (0..g.input_count())
            .map(|k| input_param(g, k))
            .collect::<Vec<_>>()
            .join(", ");
        let (init, forward) = (&self.init, &self.forward);
        let _ = write!(
            source,
            r#"

class Model(torch.nn.Module):
    def __init__(self, weights=WEIGHTS, dtype=torch.float64):
        super().__init__()
        w = load_file(str(weights))
{init}
    def forward(self, {params}):
{forward}        return {returned}
"#,
        );
        source
    }
}

/// The Python parameter of graph input `k`: `x` for a single-input graph, else `x0`, `x1`, …
/// in input order.
fn input_param(g: &Graph, k: usize) -> String {
    if g.input_count() == 1 {
        "x".to_string()
    } else {
        format!("x{k}")
    }
}

/// The draws of a random op (its uniform values, row-major), `None` for other ops.
fn draws(op: &Op) -> Option<Vec<f64>> {
    match op {
        Op::RandUniform { seed, key, shape } | Op::BernoulliMask { seed, key, shape } => Some(
            (0..shape.size() as u64)
                .map(|i| uniform_at(*seed, *key, i))
                .collect(),
        ),
        _ => None,
    }
}

/// PyTorch's `max_pool2d`/`avg_pool2d` take a padding of at most half the kernel.
fn check_pool_padding(p: &PoolSpec) -> Result<(), Diagnostic> {
    if 2 * p.padding > p.kernel_h.min(p.kernel_w) {
        return Err(Diagnostic::error(format!(
            "padding {} is more than half the kernel {}x{}: PyTorch's pools refuse it",
            p.padding, p.kernel_h, p.kernel_w
        ))
        .field("padding"));
    }
    Ok(())
}

/// The PyTorch expression of `op` on parents `a` and payload tensors (then draws) `p`: the
/// op's row template (`spec::ops::torch`), after the checks of what PyTorch refuses.
fn op_expr(op: &Op, a: &[String], p: &[String]) -> Result<String, Diagnostic> {
    if let Op::Pool(ps) = op {
        check_pool_padding(ps)?;
    }
    torch::expression(op, a, p).map_err(Diagnostic::spec)
}

/// The module of a `torchlean train` checkpoint (`saved`, read from `source`) whose weights
/// file — the checkpoint's model file, copied — is `weights_name` beside it: an
/// `nn.Sequential` of the trained layers, after the input normalization its `input_mean` and
/// `input_scale` buffers (float64, in the training file's units) hold, so raw rows go in;
/// `Model()` loads the weights strictly and `predict` names the classes. `None` for an
/// imported model (its module is the one it was exported from).
pub fn checkpoint_module(
    saved: &torchlean_train::predict::SavedClassifier,
    source: &str,
    weights_name: &str,
) -> Option<String> {
    let model = saved.model();
    let layers = model.torch_layers()?;
    let quoted = |v: &[String]| {
        let items: Vec<String> = v
            .iter()
            .map(|c| serde_json::Value::String(c.clone()).to_string())
            .collect();
        format!("[{}]", items.join(", "))
    };
    let example: Vec<String> = model.example_shape().iter().map(usize::to_string).collect();
    let dtype = if saved.dtype() == "f64" {
        "torch.float64"
    } else {
        "torch.float32"
    };
    let stem = weights_name.trim_end_matches(".safetensors");
    let mut py = String::new();
    let _ = write!(
        py,
        r#""""The `torchlean train` checkpoint {source} as a PyTorch module (`torchlean export-torch`).

    from {stem} import Model
    model = Model()                  # loads {weights_name} beside this file, strictly
    model.predict(rows)              # class names of raw rows, as the training file holds them
"""

import os

import torch
from torch import nn
from safetensors.torch import load_file

CLASSES = {classes}
FEATURES = {features}
EXAMPLE = ({example},)
DTYPE = {dtype}
WEIGHTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{weights_name}")


class Model(nn.Sequential):
    """The trained layers after the input normalization: `input_mean` and `input_scale`
    (float64 buffers, in the training file's units) standardize each raw feature, in float64
    as the trainer did, before the layers run in DTYPE."""

    def __init__(self, weights=WEIGHTS):
        super().__init__({layers})
        self.to(DTYPE)
        self.register_buffer("input_mean", torch.zeros(FEATURES, dtype=torch.float64))
        self.register_buffer("input_scale", torch.ones(FEATURES, dtype=torch.float64))
        self.load_state_dict(load_file(weights), strict=True)
        self.eval()

    def forward(self, x):
        x = torch.as_tensor(x, dtype=torch.float64).reshape(-1, FEATURES)
        x = ((x - self.input_mean) / self.input_scale).to(DTYPE)
        return super().forward(x.reshape(-1, *EXAMPLE))

    @torch.no_grad()
    def predict(self, x):
        """The class name of each row of `x` (the largest logit's, the first on ties)."""
        return [CLASSES[i] for i in self(x).argmax(dim=1).tolist()]
"#,
        classes = quoted(saved.class_names()),
        features = saved.feature_names().len(),
        example = example.join(", "),
        layers = layers.join(", "),
    );
    Some(py)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use torchlean_ir::{Node, OpKind};
    use torchlean_spec::ops::desc::OPS;
    use torchlean_spec::{Shape, Tensor, UnaryOp};

    /// A node of each descriptor with its default attributes: every kind of the spec's table
    /// has a PyTorch expression, and its forward line names the descriptor's kind.
    #[test]
    fn every_kind_has_an_emitter() {
        for d in OPS {
            let parents = match d.parents() {
                torchlean_spec::Arity::Exact(n) => n,
                torchlean_spec::Arity::AtLeast(n) => n,
            };
            let args: Vec<String> = (0..parents).map(|i| format!("v{i}")).collect();
            let refs: Vec<String> = (0..=d.payload).map(|i| format!("self.n9_{i}")).collect();
            let expr = match d.prototype() {
                Some(mut op) => {
                    // a pool's default window is 0x0: give it one PyTorch accepts
                    if let Op::Pool(p) = &mut op {
                        (p.kernel_h, p.kernel_w, p.stride) = (2, 2, 1);
                    }
                    op_expr(&op, &args, &refs)
                }
                None => Ok("x".into()),
            };
            let expr = expr.unwrap_or_else(|e| panic!("{}: {e}", d.name));
            assert!(!expr.is_empty(), "{}", d.name);
        }
    }

    fn node(id: usize, kind: &str, parents: &[usize], shape: &[usize], extra: &str) -> String {
        format!(
            r#"{{"id": {id}, "kind": "{kind}", "parents": {parents:?}, "shape": {shape:?}{extra}}}"#
        )
    }

    /// A small graph with weights, batch norm, a loss with class ids and both random kinds.
    fn small() -> (Graph, Payload) {
        let nodes = [
            node(0, "input", &[], &[2, 3], ""),
            node(1, "linear", &[0], &[2, 4], ""),
            node(2, "gelu", &[1], &[2, 4], r#", "approximate": "tanh""#),
            node(3, "const", &[], &[], ""),
            node(4, "bernoulli_mask", &[3], &[2, 4], r#", "seed": 7"#),
            node(5, "mul_elem", &[2, 4], &[2, 4], ""),
            node(6, "rand_uniform", &[], &[2, 4], r#", "seed": 8"#),
            node(7, "add", &[5, 6], &[2, 4], ""),
            node(
                8,
                "broadcast_to",
                &[3],
                &[2, 4],
                r#", "from_shape": [], "to_shape": [2, 4]"#,
            ),
            node(9, "div", &[7, 8], &[2, 4], ""),
            node(10, "clamp", &[9], &[2, 4], r#", "min": -1.5"#),
            node(11, "cross_entropy", &[10], &[], ""),
        ];
        let g = Graph::from_json_str(&format!(
            r#"{{"format": "torchlean.ir.v1", "input_id": 0, "output_id": 11, "nodes": [{}]}}"#,
            nodes.join(", ")
        ))
        .unwrap();
        let mut p = Payload::new();
        let t =
            |dims: &[usize], data: Vec<f64>| Tensor::new(Shape::new(dims.to_vec()), data).unwrap();
        p.insert(
            1,
            "weight",
            t(&[4, 3], (0..12).map(|i| i as f64 / 10.0).collect()),
        );
        p.insert(1, "bias", t(&[4], vec![0.5, -0.5, 0.25, 0.0]));
        p.insert(3, "value", t(&[], vec![0.75]));
        p.insert(11, "target", t(&[2], vec![3.0, 0.0]));
        (g, p)
    }

    #[test]
    fn small_graph_module() {
        let (g, p) = small();
        let m = emit(&g, &p, "small.safetensors").unwrap();
        insta::assert_snapshot!("small_graph_module", m.source);
        let keys: Vec<&str> = m.weights.iter().map(|w| w.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "1.weight",
                "1.bias",
                "3.value",
                "4.draws",
                "6.draws",
                "11.target"
            ]
        );
    }

    /// The stored draws are the ones torchlean's evaluator uses: `rand_uniform`'s output.
    #[test]
    fn draws_are_the_evaluators() {
        let (g, p) = small();
        let m = emit(&g, &p, "small.safetensors").unwrap();
        let values = torchlean_ir::denote_all::<f64>(
            &g,
            &p,
            &Tensor::new(Shape::new(vec![2, 3]), vec![0.0; 6]).unwrap(),
        )
        .unwrap();
        let drawn = m.weights.iter().find(|w| w.key == "6.draws").unwrap();
        assert_eq!(drawn.data, TensorData::F64(values[6].data().to_vec()));
    }

    #[test]
    fn pytorch_pool_padding_limit_is_reported_for_every_node() {
        let nodes = [
            node(0, "input", &[], &[1, 6, 6], ""),
            node(
                1,
                "max_pool2d_pad",
                &[0],
                &[1, 5, 5],
                r#", "kH": 2, "kW": 2, "stride": 1, "padding": 2"#,
            ),
            node(
                2,
                "avg_pool2d_pad",
                &[1],
                &[1, 8, 8],
                r#", "kH": 2, "kW": 2, "stride": 1, "padding": 2"#,
            ),
        ];
        let g = Graph::from_json_str(&format!(
            r#"{{"format": "torchlean.ir.v1", "input_id": 0, "output_id": 2, "nodes": [{}]}}"#,
            nodes.join(", ")
        ))
        .unwrap();
        let d = emit(&g, &Payload::new(), "w.safetensors").unwrap_err();
        let text: Vec<String> = d.iter().map(|d| d.to_string()).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(
            text[0].contains("node 1") && text[0].contains("padding"),
            "{text:?}"
        );
        assert!(
            text[1].contains("node 2") && text[1].contains("padding"),
            "{text:?}"
        );
    }

    #[test]
    fn several_outputs_are_returned_as_a_tuple_in_output_order() {
        let mut g = Graph::new(
            0,
            2,
            vec![
                Node {
                    id: 0,
                    kind: OpKind::Input,
                    parents: vec![],
                    shape: Shape::new(vec![3]),
                },
                Node {
                    id: 1,
                    kind: OpKind::Op(Op::Unary(UnaryOp::Tanh)),
                    parents: vec![0],
                    shape: Shape::new(vec![3]),
                },
                Node {
                    id: 2,
                    kind: OpKind::Op(Op::Unary(UnaryOp::Exp)),
                    parents: vec![0],
                    shape: Shape::new(vec![3]),
                },
            ],
        );
        g.extra_outputs = vec![1];
        let m = emit(&g, &Payload::new(), "w.safetensors").unwrap();
        assert!(m.source.contains("        return v2, v1\n"), "{}", m.source);
    }
}
