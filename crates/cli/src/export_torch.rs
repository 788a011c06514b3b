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
//! come from the op descriptors, and the op a node applies from `ir::node_sem`. The one table
//! of its own is [`op_expr`], the PyTorch call of each op, a `match` the compiler keeps
//! exhaustive; a test runs it on every descriptor of `spec::ops::desc::OPS`.

use std::fmt::Write as _;
use torchlean_ir::{node_sem, Diagnostic, Graph, NodeSem, Payload, TensorData};
use torchlean_spec::ops::{
    uniform_at, PoolKind, PoolSpec, Reduction, BATCH_NORM_DEFAULT_EPS, LAYER_NORM_DEFAULT_EPS,
};
use torchlean_spec::{BinaryOp, GeluApprox, Op, UnaryOp};

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
    let mut problems = Vec::new();
    let mut init = String::new();
    let mut forward = String::new();
    let mut weights = Vec::new();
    let mut uses_bn_eval = false;
    for node in &g.nodes {
        let kind = node.kind.name();
        let held_line = |init: &mut String, key: &str, attr: &str, held: Held| {
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
            let _ = writeln!(init, "        {line}");
        };
        let args: Vec<String> = node.parents.iter().map(|p| format!("v{p}")).collect();
        let desc = node.kind.desc();
        let mut refs = Vec::new();
        let parents = node.parents.len();
        for (i, name) in desc.payload_names().iter().enumerate() {
            let key = format!("{}.{name}", node.id);
            let attr = format!("n{}_{name}", node.id);
            let Some(t) = payload.entry(node.id).and_then(|e| e.tensor(name)) else {
                problems.push(
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
            held_line(&mut init, &key, &attr, held);
            weights.push(WeightTensor {
                key,
                shape: t.shape().dims().to_vec(),
                data: TensorData::F64(t.data().to_vec()),
            });
            refs.push(format!("self.{attr}"));
        }
        let expr = match node_sem(node, Some(payload)) {
            NodeSem::Input => Ok("x".to_string()),
            NodeSem::Const => Ok(refs.first().cloned().unwrap_or_default()),
            NodeSem::Apply(op) => {
                if let Some(draws) = draws(&op) {
                    let key = format!("{}.{DRAWS}", node.id);
                    let attr = format!("n{}_{DRAWS}", node.id);
                    held_line(&mut init, &key, &attr, Held::Draws);
                    weights.push(WeightTensor {
                        key,
                        shape: node.shape.dims().to_vec(),
                        data: TensorData::F64(draws),
                    });
                    refs.push(format!("self.{attr}"));
                }
                uses_bn_eval |= matches!(op, Op::BatchNormEval { .. });
                op_expr(&op, &args, &refs)
            }
        };
        match expr {
            Ok(e) => {
                let _ = writeln!(forward, "        v{} = {e}  # {} {kind}", node.id, node.id);
            }
            Err(d) => problems.push(d.at(node.id, kind)),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
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
    if uses_bn_eval {
        source.push_str(BN_EVAL_HELPER);
    }
    // several outputs: a tuple, in output order (as a PyTorch module returns them)
    let returned = g
        .outputs()
        .map(|id| format!("v{id}"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        source,
        r#"

class Model(torch.nn.Module):
    def __init__(self, weights=WEIGHTS, dtype=torch.float64):
        super().__init__()
        w = load_file(str(weights))
{init}
    def forward(self, x):
{forward}        return {returned}
"#,
    );
    Ok(TorchModule { source, weights })
}

/// `batch_norm2d_nchw_eval` written out rather than `F.batch_norm(training=False)`, whose
/// running statistics get no gradient (torchlean's payload gradients include them).
const BN_EVAL_HELPER: &str = r#"

def _per_channel(t, x):
    return t.reshape((1, -1) + (1,) * (x.dim() - 2))


def batch_norm_eval(x, gamma, beta, mean, var, eps):
    """(x - mean) / sqrt(max(var, 0) + eps) * gamma + beta, channels on axis 1 (torchlean's
    batch_norm2d_nchw_eval: F.batch_norm(training=False), with gradients for mean and var)."""
    var = torch.clamp(var, min=0)
    return ((x - _per_channel(mean, x)) / torch.sqrt(_per_channel(var, x) + eps)
            * _per_channel(gamma, x) + _per_channel(beta, x))
"#;

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

/// A Python float literal (`float("inf")` and `float("nan")` for the non-finite ones).
fn py_float(x: f64) -> String {
    if x.is_nan() {
        "float(\"nan\")".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "float(\"inf\")"
        } else {
            "-float(\"inf\")"
        }
        .into()
    } else {
        format!("{x:?}")
    }
}

/// A Python tuple of ints: `()`, `(3,)`, `(2, 3)`.
fn py_tuple(dims: &[usize]) -> String {
    match dims {
        [d] => format!("({d},)"),
        _ => {
            let parts: Vec<String> = dims.iter().map(usize::to_string).collect();
            format!("({})", parts.join(", "))
        }
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

/// The PyTorch expression of `op` on parents `a` and payload tensors (then draws) `p`, with
/// PyTorch's semantics equal to torchlean's (SPEC 3).
fn op_expr(op: &Op, a: &[String], p: &[String]) -> Result<String, Diagnostic> {
    let arg = |i: usize| -> Result<&str, Diagnostic> {
        a.get(i)
            .map(String::as_str)
            .ok_or_else(|| Diagnostic::error(format!("needs parent {i}")).field("parents"))
    };
    let pay = |i: usize| -> Result<&str, Diagnostic> {
        p.get(i)
            .map(String::as_str)
            .ok_or_else(|| Diagnostic::error(format!("needs payload tensor {i}")).field("payload"))
    };
    let x = || arg(0);
    Ok(match op {
        Op::Unary(u) => {
            let x = x()?;
            match u {
                UnaryOp::Abs => format!("torch.abs({x})"),
                UnaryOp::Sqrt => format!("torch.sqrt({x})"),
                UnaryOp::Inv => format!("torch.reciprocal({x})"),
                UnaryOp::Relu => format!("torch.relu({x})"),
                UnaryOp::Tanh => format!("torch.tanh({x})"),
                UnaryOp::Sigmoid => format!("torch.sigmoid({x})"),
                UnaryOp::Exp => format!("torch.exp({x})"),
                UnaryOp::Log => format!("torch.log({x})"),
                UnaryOp::Sin => format!("torch.sin({x})"),
                UnaryOp::Cos => format!("torch.cos({x})"),
                UnaryOp::Neg => format!("torch.neg({x})"),
                // stable and without F.softplus's threshold cut; its gradient is sigmoid(x)
                UnaryOp::Softplus => format!("torch.logaddexp({x}, torch.zeros_like({x}))"),
                UnaryOp::Silu => format!("F.silu({x})"),
                UnaryOp::Gelu(GeluApprox::None) => format!("F.gelu({x}, approximate=\"none\")"),
                UnaryOp::Gelu(GeluApprox::Tanh) => format!("F.gelu({x}, approximate=\"tanh\")"),
            }
        }
        Op::Binary(b) => {
            let (l, r) = (arg(0)?, arg(1)?);
            match b {
                BinaryOp::Add => format!("{l} + {r}"),
                BinaryOp::Sub => format!("{l} - {r}"),
                BinaryOp::Mul => format!("{l} * {r}"),
                BinaryOp::Div => format!("{l} / {r}"),
                // PyTorch splits a tie's gradient in half, as torchlean does
                BinaryOp::Max => format!("torch.maximum({l}, {r})"),
                BinaryOp::Min => format!("torch.minimum({l}, {r})"),
            }
        }
        Op::Scale { c } => format!("{} * {}", x()?, py_float(*c)),
        Op::AddScalar { c } => format!("{} + {}", x()?, py_float(*c)),
        Op::Clamp { min, max } => {
            let mut bounds = Vec::new();
            if let Some(m) = min {
                bounds.push(format!("min={}", py_float(*m)));
            }
            if let Some(m) = max {
                bounds.push(format!("max={}", py_float(*m)));
            }
            if bounds.is_empty() {
                // no bound: the identity (torch.clamp refuses to be called without one)
                format!("{}.clone()", x()?)
            } else {
                format!("torch.clamp({}, {})", x()?, bounds.join(", "))
            }
        }
        Op::Detach => format!("{}.detach()", x()?),
        Op::Softmax { axis } => format!("F.softmax({}, dim={axis})", x()?),
        Op::LogSoftmax { axis } => format!("F.log_softmax({}, dim={axis})", x()?),
        Op::LayerNorm { axis, eps } => format!(
            "F.layer_norm({x}, {x}.shape[{axis}:], eps={})",
            py_float(eps.unwrap_or(LAYER_NORM_DEFAULT_EPS)),
            x = x()?
        ),
        // right-aligned, as PyTorch's expand (SPEC 3)
        Op::BroadcastTo { to, .. } => format!("{}.expand({})", x()?, py_tuple(to.dims())),
        Op::Reshape { to, .. } => format!("{}.reshape({})", x()?, py_tuple(to.dims())),
        Op::Flatten { .. } => format!("{}.reshape(-1)", x()?),
        Op::Permute { perm } => format!("{}.permute({})", x()?, py_tuple(perm)),
        Op::SwapFirstTwo => format!("{}.transpose(0, 1)", x()?),
        Op::Transpose3dLastTwo => format!("{}.transpose(1, 2)", x()?),
        Op::Transpose { dim0, dim1 } => format!("{}.transpose({dim0}, {dim1})", x()?),
        Op::Slice { axis, start, len } => format!("{}.narrow({axis}, {start}, {len})", x()?),
        Op::ReduceSum { axis } => format!("{}.sum(dim={axis})", x()?),
        Op::ReduceMean { axis } => format!("{}.mean(dim={axis})", x()?),
        Op::Sum => format!("{}.sum()", x()?),
        Op::MatMul => format!("torch.matmul({}, {})", arg(0)?, arg(1)?),
        Op::Linear => format!("F.linear({}, {}, {})", x()?, pay(0)?, pay(1)?),
        Op::Conv2d(c) => format!(
            "F.conv2d({}, {}, {}, stride={}, padding={})",
            x()?,
            pay(0)?,
            pay(1)?,
            c.stride,
            c.padding
        ),
        Op::Pool(ps) => {
            check_pool_padding(ps)?;
            let window = format!(
                "({}, {}), stride={}, padding={}",
                ps.kernel_h, ps.kernel_w, ps.stride, ps.padding
            );
            match ps.kind {
                // PyTorch pads a max pool with -inf: padded cells never win
                PoolKind::Max => format!("F.max_pool2d({}, {window})", x()?),
                // padded zeros counted in the divisor kH·kW, as torchlean does
                PoolKind::Avg => {
                    format!("F.avg_pool2d({}, {window}, count_include_pad=True)", x()?)
                }
            }
        }
        Op::BatchNormEval { eps, .. } => format!(
            "batch_norm_eval({}, {}, {}, {}, {}, {})",
            x()?,
            pay(0)?,
            pay(1)?,
            pay(2)?,
            pay(3)?,
            py_float(*eps)
        ),
        Op::BatchNormTrain { eps, .. } => format!(
            "F.batch_norm({}, None, None, {}, {}, training=True, eps={})",
            x()?,
            pay(0)?,
            pay(1)?,
            py_float(eps.unwrap_or(BATCH_NORM_DEFAULT_EPS))
        ),
        Op::Concat { axis } => format!("torch.cat([{}], dim={axis})", a.join(", ")),
        Op::MseLoss => format!("F.mse_loss({}, {})", arg(0)?, arg(1)?),
        Op::CrossEntropy { reduction } => {
            let r = match reduction {
                Reduction::Mean => "mean",
                Reduction::Sum => "sum",
            };
            format!("F.cross_entropy({}, {}, reduction=\"{r}\")", x()?, pay(0)?)
        }
        Op::RandUniform { .. } => pay(0)?.to_string(),
        Op::BernoulliMask { .. } => {
            let u = pay(0)?;
            format!("({} > {u}).to({u}.dtype)", x()?)
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use torchlean_ir::{Node, OpKind};
    use torchlean_spec::ops::desc::OPS;
    use torchlean_spec::{Shape, Tensor};

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

    #[test]
    fn python_literals() {
        assert_eq!(py_float(1e-5), "1e-5");
        assert_eq!(py_float(-1.5), "-1.5");
        assert_eq!(py_float(f64::INFINITY), "float(\"inf\")");
        assert_eq!(py_float(f64::NEG_INFINITY), "-float(\"inf\")");
        assert_eq!(py_float(f64::NAN), "float(\"nan\")");
        assert_eq!(py_tuple(&[]), "()");
        assert_eq!(py_tuple(&[3]), "(3,)");
        assert_eq!(py_tuple(&[2, 3]), "(2, 3)");
    }
}
