//! `OpKind`: the node kinds of `torchlean.ir.v1` with their wire names and attributes.
//!
//! The wire format is TorchLean's; the *meaning* of each kind lives in `torchlean_spec::ops`
//! and is reached through [`crate::semantics`]. Kinds marked *extension* are ours; a graph that
//! uses none of them is a TorchLean graph.

use crate::error::Diagnostic;
use serde_json::{Map, Value};
use torchlean_spec::tensor::parse_shape;
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolKind, PoolSpec, Shape, UnaryOp};

/// A node kind with its attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// The graph input (every `input` node evaluates to the one input tensor).
    Input,
    /// A constant from the payload (`{"value": T}`); `value_shape` defaults to the node shape.
    Const {
        value_shape: Option<Shape>,
    },
    Detach,
    Permute {
        perm: Vec<usize>,
    },
    /// `abs sqrt inv relu tanh sigmoid exp log sin cos`, and the extensions `neg softplus`.
    Unary(UnaryOp),
    /// `add sub mul_elem max_elem min_elem`, and the extension `div`.
    Binary(BinaryOp),
    /// Extension: `c · x`.
    Scale {
        c: f64,
    },
    /// Extension: `x + c`.
    AddScalar {
        c: f64,
    },
    Softmax {
        axis: usize,
    },
    /// Extension.
    LogSoftmax {
        axis: usize,
    },
    LayerNorm {
        axis: usize,
        eps: Option<f64>,
    },
    BroadcastTo {
        from_shape: Shape,
        to_shape: Shape,
    },
    Reshape {
        in_shape: Shape,
        out_shape: Shape,
    },
    Flatten {
        value_shape: Shape,
    },
    ReduceSum {
        axis: usize,
    },
    ReduceMean {
        axis: usize,
    },
    Sum,
    MatMul,
    Linear,
    Conv2d(Conv2dSpec),
    /// `max_pool2d`, `avg_pool2d` (`padded = false`, padding 0) and their `_pad` variants.
    Pool {
        spec: PoolSpec,
        padded: bool,
    },
    BatchNorm2dNchwEval {
        channels: usize,
    },
    Concat {
        axis: usize,
    },
    SwapFirstTwo,
    Transpose3dLastTwo,
    /// Extension: swap two axes.
    Transpose {
        dim0: usize,
        dim1: usize,
    },
    MseLoss,
    RandUniform {
        seed: u64,
    },
    BernoulliMask {
        seed: u64,
    },
}

/// An attribute value, for printing and serialisation.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Int(u64),
    Float(f64),
    Shape(Shape),
    List(Vec<usize>),
}

impl std::fmt::Display for Attr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Attr::Int(v) => write!(f, "{v}"),
            Attr::Float(v) => write!(f, "{v:e}"),
            Attr::Shape(s) => write!(f, "{s}"),
            Attr::List(v) => write!(f, "{v:?}"),
        }
    }
}

impl Attr {
    fn to_json(&self) -> Value {
        match self {
            Attr::Int(v) => Value::from(*v),
            Attr::Float(v) => torchlean_spec::tensor::f64_to_json(*v),
            Attr::Shape(s) => Value::from(s.dims().to_vec()),
            Attr::List(v) => Value::from(v.clone()),
        }
    }
}

/// Every wire name, in the order of `docs/ir-format.md`.
pub const WIRE_NAMES: &[&str] = &[
    "input",
    "const",
    "detach",
    "permute",
    "add",
    "sub",
    "mul_elem",
    "max_elem",
    "min_elem",
    "div",
    "abs",
    "sqrt",
    "inv",
    "relu",
    "tanh",
    "sigmoid",
    "exp",
    "log",
    "sin",
    "cos",
    "neg",
    "softplus",
    "scale",
    "add_scalar",
    "softmax",
    "log_softmax",
    "layernorm",
    "broadcast_to",
    "reshape",
    "flatten",
    "reduce_sum",
    "reduce_mean",
    "sum",
    "matmul",
    "linear",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "max_pool2d_pad",
    "avg_pool2d_pad",
    "batch_norm2d_nchw_eval",
    "concat",
    "swap_first_two",
    "transpose3d_last_two",
    "transpose",
    "mse_loss",
    "rand_uniform",
    "bernoulli_mask",
];

/// How many parents a kind takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParentCount {
    pub min: usize,
    /// `None`: unbounded (`concat`).
    pub max: Option<usize>,
}

impl ParentCount {
    pub fn accepts(self, n: usize) -> bool {
        n >= self.min && self.max.is_none_or(|m| n <= m)
    }
}

impl std::fmt::Display for ParentCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.max {
            Some(m) if m == self.min => write!(f, "{m}"),
            Some(m) => write!(f, "{}..{m}", self.min),
            None => write!(f, "at least {}", self.min),
        }
    }
}

impl OpKind {
    /// The wire name.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Input => "input",
            OpKind::Const { .. } => "const",
            OpKind::Detach => "detach",
            OpKind::Permute { .. } => "permute",
            OpKind::Unary(u) => u.name(),
            OpKind::Binary(b) => b.name(),
            OpKind::Scale { .. } => "scale",
            OpKind::AddScalar { .. } => "add_scalar",
            OpKind::Softmax { .. } => "softmax",
            OpKind::LogSoftmax { .. } => "log_softmax",
            OpKind::LayerNorm { .. } => "layernorm",
            OpKind::BroadcastTo { .. } => "broadcast_to",
            OpKind::Reshape { .. } => "reshape",
            OpKind::Flatten { .. } => "flatten",
            OpKind::ReduceSum { .. } => "reduce_sum",
            OpKind::ReduceMean { .. } => "reduce_mean",
            OpKind::Sum => "sum",
            OpKind::MatMul => "matmul",
            OpKind::Linear => "linear",
            OpKind::Conv2d(_) => "conv2d",
            OpKind::Pool { spec, padded } => match (spec.kind, padded) {
                (PoolKind::Max, false) => "max_pool2d",
                (PoolKind::Avg, false) => "avg_pool2d",
                (PoolKind::Max, true) => "max_pool2d_pad",
                (PoolKind::Avg, true) => "avg_pool2d_pad",
            },
            OpKind::BatchNorm2dNchwEval { .. } => "batch_norm2d_nchw_eval",
            OpKind::Concat { .. } => "concat",
            OpKind::SwapFirstTwo => "swap_first_two",
            OpKind::Transpose3dLastTwo => "transpose3d_last_two",
            OpKind::Transpose { .. } => "transpose",
            OpKind::MseLoss => "mse_loss",
            OpKind::RandUniform { .. } => "rand_uniform",
            OpKind::BernoulliMask { .. } => "bernoulli_mask",
        }
    }

    /// Whether this kind is one of our extensions (not in TorchLean's wire format).
    pub fn is_extension(&self) -> bool {
        matches!(
            self,
            OpKind::Unary(UnaryOp::Neg | UnaryOp::Softplus)
                | OpKind::Binary(BinaryOp::Div)
                | OpKind::Scale { .. }
                | OpKind::AddScalar { .. }
                | OpKind::LogSoftmax { .. }
                | OpKind::Transpose { .. }
        )
    }

    /// Number of parents (graph edges; payload weights are not parents).
    pub fn parent_count(&self) -> ParentCount {
        let exact = |n| ParentCount {
            min: n,
            max: Some(n),
        };
        match self {
            OpKind::Input | OpKind::Const { .. } | OpKind::RandUniform { .. } => exact(0),
            OpKind::Binary(_) | OpKind::MatMul | OpKind::MseLoss => exact(2),
            OpKind::Concat { .. } => ParentCount { min: 2, max: None },
            _ => exact(1),
        }
    }

    /// The attributes, with their wire keys, in wire order.
    pub fn attributes(&self) -> Vec<(&'static str, Attr)> {
        let int = |v: usize| Attr::Int(v as u64);
        match self {
            OpKind::Const {
                value_shape: Some(s),
            } => vec![("value_shape", Attr::Shape(s.clone()))],
            OpKind::Permute { perm } => vec![("perm", Attr::List(perm.clone()))],
            OpKind::Scale { c } | OpKind::AddScalar { c } => vec![("c", Attr::Float(*c))],
            OpKind::Softmax { axis }
            | OpKind::LogSoftmax { axis }
            | OpKind::ReduceSum { axis }
            | OpKind::ReduceMean { axis }
            | OpKind::Concat { axis } => vec![("axis", int(*axis))],
            OpKind::LayerNorm { axis, eps } => {
                let mut v = vec![("axis", int(*axis))];
                if let Some(e) = eps {
                    v.push(("eps", Attr::Float(*e)));
                }
                v
            }
            OpKind::BroadcastTo {
                from_shape,
                to_shape,
            } => vec![
                ("from_shape", Attr::Shape(from_shape.clone())),
                ("to_shape", Attr::Shape(to_shape.clone())),
            ],
            OpKind::Reshape {
                in_shape,
                out_shape,
            } => vec![
                ("in_shape", Attr::Shape(in_shape.clone())),
                ("out_shape", Attr::Shape(out_shape.clone())),
            ],
            OpKind::Flatten { value_shape } => {
                vec![("value_shape", Attr::Shape(value_shape.clone()))]
            }
            OpKind::Conv2d(c) => vec![
                ("inC", int(c.in_channels)),
                ("outC", int(c.out_channels)),
                ("kH", int(c.kernel_h)),
                ("kW", int(c.kernel_w)),
                ("stride", int(c.stride)),
                ("padding", int(c.padding)),
            ],
            OpKind::Pool { spec, padded } => {
                let mut v = vec![
                    ("kH", int(spec.kernel_h)),
                    ("kW", int(spec.kernel_w)),
                    ("stride", int(spec.stride)),
                ];
                if *padded {
                    v.push(("padding", int(spec.padding)));
                }
                v
            }
            OpKind::BatchNorm2dNchwEval { channels } => vec![("channels", int(*channels))],
            OpKind::Transpose { dim0, dim1 } => vec![("dim0", int(*dim0)), ("dim1", int(*dim1))],
            OpKind::RandUniform { seed } | OpKind::BernoulliMask { seed } => {
                vec![("seed", Attr::Int(*seed))]
            }
            _ => vec![],
        }
    }

    /// Writes the attributes into a node object.
    pub(crate) fn write_attributes(&self, obj: &mut Map<String, Value>) {
        for (k, v) in self.attributes() {
            obj.insert(k.to_string(), v.to_json());
        }
    }

    /// Parses a kind and its attributes from a node object. Unknown keys are ignored; a
    /// missing or ill-typed attribute is a diagnostic naming the field.
    pub(crate) fn parse(name: &str, obj: &Map<String, Value>) -> Result<OpKind, Vec<Diagnostic>> {
        let mut r = AttrReader {
            obj,
            errors: vec![],
        };
        let kind = match name {
            "input" => OpKind::Input,
            "const" => OpKind::Const {
                value_shape: r.opt_shape("value_shape"),
            },
            "detach" => OpKind::Detach,
            "permute" => OpKind::Permute {
                perm: r.list("perm"),
            },
            "scale" => OpKind::Scale { c: r.float("c") },
            "add_scalar" => OpKind::AddScalar { c: r.float("c") },
            "softmax" => OpKind::Softmax {
                axis: r.int("axis"),
            },
            "log_softmax" => OpKind::LogSoftmax {
                axis: r.int("axis"),
            },
            "layernorm" => OpKind::LayerNorm {
                axis: r.int("axis"),
                eps: r.opt_float("eps"),
            },
            "broadcast_to" => OpKind::BroadcastTo {
                from_shape: r.shape("from_shape"),
                to_shape: r.shape("to_shape"),
            },
            "reshape" => OpKind::Reshape {
                in_shape: r.shape("in_shape"),
                out_shape: r.shape("out_shape"),
            },
            "flatten" => OpKind::Flatten {
                value_shape: r.shape("value_shape"),
            },
            "reduce_sum" => OpKind::ReduceSum {
                axis: r.int("axis"),
            },
            "reduce_mean" => OpKind::ReduceMean {
                axis: r.int("axis"),
            },
            "sum" => OpKind::Sum,
            "matmul" => OpKind::MatMul,
            "linear" => OpKind::Linear,
            "conv2d" => OpKind::Conv2d(Conv2dSpec {
                in_channels: r.int("inC"),
                out_channels: r.int("outC"),
                kernel_h: r.int("kH"),
                kernel_w: r.int("kW"),
                stride: r.int("stride"),
                padding: r.int("padding"),
            }),
            "max_pool2d" | "avg_pool2d" | "max_pool2d_pad" | "avg_pool2d_pad" => {
                let padded = name.ends_with("_pad");
                OpKind::Pool {
                    spec: PoolSpec {
                        kind: if name.starts_with("max") {
                            PoolKind::Max
                        } else {
                            PoolKind::Avg
                        },
                        kernel_h: r.int("kH"),
                        kernel_w: r.int("kW"),
                        stride: r.int("stride"),
                        padding: if padded { r.int("padding") } else { 0 },
                    },
                    padded,
                }
            }
            "batch_norm2d_nchw_eval" => OpKind::BatchNorm2dNchwEval {
                channels: r.int("channels"),
            },
            "concat" => OpKind::Concat {
                axis: r.int("axis"),
            },
            "swap_first_two" => OpKind::SwapFirstTwo,
            "transpose3d_last_two" => OpKind::Transpose3dLastTwo,
            "transpose" => OpKind::Transpose {
                dim0: r.int("dim0"),
                dim1: r.int("dim1"),
            },
            "mse_loss" => OpKind::MseLoss,
            "rand_uniform" => OpKind::RandUniform {
                seed: r.u64("seed"),
            },
            "bernoulli_mask" => OpKind::BernoulliMask {
                seed: r.u64("seed"),
            },
            other => {
                if let Some(u) = UnaryOp::ALL.iter().find(|u| u.name() == other) {
                    OpKind::Unary(*u)
                } else if let Some(b) = BinaryOp::ALL.iter().find(|b| b.name() == other) {
                    OpKind::Binary(*b)
                } else {
                    return Err(vec![Diagnostic::error(format!(
                        "unknown kind `{other}` (known kinds: {})",
                        WIRE_NAMES.join(", ")
                    ))
                    .field("kind")]);
                }
            }
        };
        if r.errors.is_empty() {
            Ok(kind)
        } else {
            Err(r.errors)
        }
    }
}

/// Reads attributes, collecting every problem instead of stopping at the first.
struct AttrReader<'a> {
    obj: &'a Map<String, Value>,
    errors: Vec<Diagnostic>,
}

impl AttrReader<'_> {
    fn fail(&mut self, key: &str, msg: String) {
        self.errors.push(Diagnostic::error(msg).field(key));
    }

    fn get(&mut self, key: &str) -> Option<&Value> {
        let v = self.obj.get(key);
        if v.is_none() {
            self.fail(key, "missing required attribute".into());
        }
        v
    }

    fn u64(&mut self, key: &str) -> u64 {
        match self.get(key).map(|v| (v.as_u64(), v.to_string())) {
            Some((Some(x), _)) => x,
            Some((None, text)) => {
                self.fail(key, format!("is {text}, expected a non-negative integer"));
                0
            }
            None => 0,
        }
    }

    fn int(&mut self, key: &str) -> usize {
        let v = self.u64(key);
        usize::try_from(v).unwrap_or_else(|_| {
            self.fail(key, format!("{v} is too large"));
            0
        })
    }

    fn float(&mut self, key: &str) -> f64 {
        match self.get(key).map(|v| (v.as_f64(), v.to_string())) {
            Some((Some(x), _)) => x,
            Some((None, text)) => {
                self.fail(key, format!("is {text}, expected a number"));
                0.0
            }
            None => 0.0,
        }
    }

    fn opt_float(&mut self, key: &str) -> Option<f64> {
        if self.obj.contains_key(key) {
            Some(self.float(key))
        } else {
            None
        }
    }

    fn shape(&mut self, key: &str) -> Shape {
        match self.get(key).cloned() {
            Some(v) => match parse_shape(&v) {
                Ok(s) => s,
                Err(e) => {
                    self.fail(key, e);
                    Shape::scalar()
                }
            },
            None => Shape::scalar(),
        }
    }

    fn opt_shape(&mut self, key: &str) -> Option<Shape> {
        if self.obj.contains_key(key) {
            Some(self.shape(key))
        } else {
            None
        }
    }

    fn list(&mut self, key: &str) -> Vec<usize> {
        self.shape(key).dims().to_vec()
    }
}
