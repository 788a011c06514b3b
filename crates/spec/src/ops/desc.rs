//! The op descriptors: for every node kind of `torchlean.ir.v1`, in one place, its wire name,
//! family, one-line meaning, operands (parents first, then payload tensors), arity and what its
//! VJP saves. Attributes are listed once per op by [`Op::visit_attrs`] (key, type, default);
//! the shape rule, forward and VJP are [`Op::infer_shape`], [`Op::forward`] and [`Op::vjp`].
//!
//! Everything else reads this table: the IR's parser, printer and checks, the lowering text,
//! the equivalence checker's generators, the engine suite's coverage test and the kinds table
//! of `docs/ir-format.md` (regenerated from [`markdown_table`] by a test). Adding an op is one
//! row here, one arm in each of `visit_attrs`, the shape rule, forward and VJP (the compiler
//! lists every match that needs one), and one kernel per engine.

use super::conv::{CONV_DEFAULT_DILATION, CONV_DEFAULT_GROUPS};
use super::elementwise::{ELU_DEFAULT_ALPHA, LEAKY_RELU_DEFAULT_SLOPE};
use super::{Arity, BinaryOp, Conv2dSpec, GeluApprox, Op, PoolKind, PoolSpec, Reduction, UnaryOp};
use crate::shape::Shape;

/// Layer norm's `eps` when the node carries none (TorchLean's `Numbers.epsilon`; SPEC 3).
pub const LAYER_NORM_DEFAULT_EPS: f64 = 1e-6;
/// Batch norm's `eps` when the payload (`batch_norm2d_nchw_eval`) or the node
/// (`batch_norm2d_nchw_train`) carries none (PyTorch's default; SPEC 3).
pub const BATCH_NORM_DEFAULT_EPS: f64 = 1e-5;

/// The family an op belongs to (one module of `spec::ops` and of every engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `input`, `const`: graph structure, not functions.
    Graph,
    Elementwise,
    Layout,
    Reduce,
    Linalg,
    Conv,
    Pool,
    Norm,
    Random,
}

/// What a VJP reads besides the operand shapes and the cotangent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saves {
    /// Operand positions whose values the VJP reads.
    pub inputs: &'static [usize],
    /// Whether the VJP reads the output value.
    pub output: bool,
}

impl Saves {
    pub const NOTHING: Saves = Saves {
        inputs: &[],
        output: false,
    };
    pub const INPUT: Saves = Saves {
        inputs: &[0],
        output: false,
    };
    pub const OUTPUT: Saves = Saves {
        inputs: &[],
        output: true,
    };
    pub const BOTH_OPERANDS: Saves = Saves {
        inputs: &[0, 1],
        output: false,
    };
}

/// How a descriptor's op is built.
#[derive(Clone, Copy)]
enum Proto {
    /// The graph input.
    Input,
    /// A constant from the payload.
    Const,
    /// An op, with every attribute at its default (or zero where it has none).
    Op(fn() -> Op),
}

/// One node kind: everything about it that is not maths.
#[derive(Clone, Copy)]
pub struct OpDesc {
    /// The wire name (TorchLean's tag where one exists).
    pub name: &'static str,
    pub family: Family,
    /// Ours, not in TorchLean's wire format (SPEC 3, "Extension kinds").
    pub extension: bool,
    /// The meaning in one line (the kinds table of `docs/ir-format.md`).
    pub summary: &'static str,
    /// The output shape in words (`s` is the first parent's shape).
    pub output: &'static str,
    /// Operand names: the graph parents first, then the payload tensors. A variadic op has one
    /// name, repeated.
    pub operands: &'static [&'static str],
    /// How many trailing operands come from the payload (the IR) or are lifted to graph inputs
    /// (`compiled`).
    pub payload: usize,
    /// How many operands the op takes, payload included.
    pub arity: Arity,
    /// What the VJP reads.
    pub saves: Saves,
    /// Operand positions that are data, not differentiable values (`cross_entropy`'s class
    /// ids): the VJP gives them a structural zero, [`Op::check_data`] validates their values,
    /// and finite differences never perturb them.
    pub data: &'static [usize],
    /// The PyTorch expression with torchlean's semantics (SPEC 3) that `torchlean export-torch`
    /// writes for a node of this kind: a template read by [`super::torch::expression`], whose
    /// placeholders are the operand names, the attribute keys, the context fields of
    /// [`Op::context_values`], `{parents}` (a variadic op's parents) and `{draw}` (a random
    /// op's draws). Empty for the graph kinds `input` and `const`.
    pub torch: &'static str,
    /// The ONNX operator of the default domain that means this op, where one does (the
    /// importer maps it through this row: `torchlean-onnx`).
    pub onnx: Option<Onnx>,
    /// The regimes beyond the op at all that change its maths, which the equivalence checker
    /// (`torchlean-equiv`) must cover for this op (padding, strides, a repeated parent, …;
    /// what each means and how a graph gets it is the checker's). Attribute defaults are
    /// derived ([`OpDesc::has_defaults`]), not listed.
    pub regimes: &'static [CheckRegime],
    proto: Proto,
}

/// A regime of an op's operands or attributes that changes its maths (see [`OpDesc::regimes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CheckRegime {
    /// Padding > 0: windows that cross the border.
    Padded,
    /// Stride > 1: windows that skip cells.
    Strided,
    /// A parent appearing twice (`add(a, a)`): the local-sum rule.
    RepeatedParent,
    /// A parent appearing three times (`concat(a, a, a)`): the local sum's order is observable.
    ThriceRepeated,
    /// A square right operand `[n, n]`, `n ≥ 2`: `B` and `Bᵀ` have the same shape.
    SquareRhs,
    /// A batched square right operand `[b, n, n]`, `n ≥ 2`.
    BatchedSquareRhs,
    /// A size-1 last axis expanded (`[…, 1] → […, k]`, k > 1, more than one row).
    BroadcastLastAxis,
    /// New leading axes (to a higher rank).
    BroadcastLeadingAxes,
    /// An id at two or more positions (`embedding`): the weight's gradient sums their rows.
    RepeatedIds,
}

/// An ONNX operator that means one op: its `op_type` and how its attributes are named here
/// (ONNX key, this op's key; an attribute not listed is refused when present).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Onnx {
    pub op: &'static str,
    pub attrs: &'static [(&'static str, &'static str)],
}

impl Onnx {
    /// An operator without attributes.
    pub const fn named(op: &'static str) -> Onnx {
        Onnx { op, attrs: &[] }
    }
}

impl std::fmt::Debug for OpDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpDesc")
            .field("name", &self.name)
            .field("family", &self.family)
            .field("operands", &self.operands)
            .finish_non_exhaustive()
    }
}

impl PartialEq for OpDesc {
    /// Descriptors are identified by their wire name (unique: a test checks it).
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// The type of an attribute, for the docs and for readers that need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrType {
    /// A non-negative integer.
    Int,
    /// A 64-bit seed.
    Seed,
    /// A number.
    Float,
    /// A shape (a list of extents).
    Shape,
    /// A list of axis indices.
    List,
    /// One of a fixed set of strings.
    Choice(&'static [&'static str]),
}

impl std::fmt::Display for AttrType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttrType::Int => "int",
            AttrType::Seed => "u64",
            AttrType::Float => "number",
            AttrType::Shape => "shape",
            AttrType::List => "int list",
            AttrType::Choice(options) => {
                let quoted: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
                return f.write_str(&quoted.join(" | "));
            }
        })
    }
}

/// One attribute field of an op, borrowed mutably so that one visit both reads and writes it.
#[derive(Debug)]
pub enum AttrMut<'a> {
    Int(&'a mut usize),
    /// An integer that may be absent, meaning `default`; writers leave it out at its default
    /// (`conv2d`'s `groups` and `dilation`: TorchLean's files never carry them, and ours stay
    /// theirs byte for byte where they are 1).
    IntOr {
        value: &'a mut usize,
        default: usize,
    },
    Seed(&'a mut u64),
    Float(&'a mut f64),
    /// A number that may be absent, meaning `default`: the op holds the value it computes
    /// with (a reader writes `default` for an absent one; writers always write it).
    FloatOr {
        value: &'a mut f64,
        default: f64,
    },
    /// An optional number; absent means `default`, and the op remembers that it was absent.
    OptFloat {
        value: &'a mut Option<f64>,
        default: f64,
    },
    /// An optional number without a default: absent means the op does without it (`clamp`'s
    /// bounds).
    MaybeFloat(&'a mut Option<f64>),
    Shape(&'a mut Shape),
    List(&'a mut Vec<usize>),
    /// One of `options`; absent means `default`. Readers write only members of `options`
    /// (anything else is their error to report, naming the field).
    Choice {
        value: &'a mut &'static str,
        options: &'static [&'static str],
        default: &'static str,
    },
}

impl AttrMut<'_> {
    pub fn ty(&self) -> AttrType {
        match self {
            AttrMut::Int(_) | AttrMut::IntOr { .. } => AttrType::Int,
            AttrMut::Seed(_) => AttrType::Seed,
            AttrMut::Float(_)
            | AttrMut::FloatOr { .. }
            | AttrMut::OptFloat { .. }
            | AttrMut::MaybeFloat(_) => AttrType::Float,
            AttrMut::Shape(_) => AttrType::Shape,
            AttrMut::List(_) => AttrType::List,
            AttrMut::Choice { options, .. } => AttrType::Choice(options),
        }
    }
}

/// Receives an op's attributes from [`Op::visit_attrs`], in wire order.
pub trait AttrVisitor {
    fn visit(&mut self, key: &'static str, value: AttrMut<'_>);
}

/// An attribute as documented: key, type, default, and whether it may be absent.
#[derive(Clone, Debug, PartialEq)]
pub struct AttrDesc {
    pub key: &'static str,
    pub ty: AttrType,
    /// What an absent attribute means (`None`: it has no default).
    pub default: Option<String>,
    /// Whether the attribute may be absent (always, when it has a default).
    pub optional: bool,
}

impl OpDesc {
    /// How many graph parents the kind takes (payload operands are not parents).
    pub fn parents(&self) -> Arity {
        match self.arity {
            Arity::Exact(n) => Arity::Exact(n - self.payload),
            Arity::AtLeast(n) => Arity::AtLeast(n - self.payload),
        }
    }

    /// Names of the payload tensors, in operand order.
    pub fn payload_names(&self) -> &'static [&'static str] {
        &self.operands[self.operands.len() - self.payload..]
    }

    /// The op with every attribute at its default (zero where it has none); `None` for the
    /// graph kinds `input` and `const`.
    pub fn prototype(&self) -> Option<Op> {
        match self.proto {
            Proto::Op(f) => Some(f()),
            Proto::Input | Proto::Const => None,
        }
    }

    /// `input`.
    pub fn is_input(&self) -> bool {
        matches!(self.proto, Proto::Input)
    }

    /// `const`.
    pub fn is_const(&self) -> bool {
        matches!(self.proto, Proto::Const)
    }

    /// Whether the kind is an op with an attribute that has a default (the equivalence
    /// checker covers it both at its defaults and off them).
    pub fn has_defaults(&self) -> bool {
        self.prototype().is_some() && self.attributes().iter().any(|a| a.default.is_some())
    }

    /// The attributes, in wire order, as [`Op::visit_attrs`] lists them.
    pub fn attributes(&self) -> Vec<AttrDesc> {
        let mut out = Describe(Vec::new());
        match self.proto {
            Proto::Op(f) => f().visit_attrs(&mut out),
            Proto::Const => out.0.push(AttrDesc {
                key: "value_shape",
                ty: AttrType::Shape,
                default: Some("the node's shape".into()),
                optional: true,
            }),
            Proto::Input => {}
        }
        out.0
    }
}

struct Describe(Vec<AttrDesc>);

impl AttrVisitor for Describe {
    fn visit(&mut self, key: &'static str, value: AttrMut<'_>) {
        let default = match &value {
            AttrMut::OptFloat { default, .. } | AttrMut::FloatOr { default, .. } => {
                Some(format!("{default:e}"))
            }
            AttrMut::Choice { default, .. } => Some(format!("\"{default}\"")),
            AttrMut::IntOr { default, .. } => Some(default.to_string()),
            _ => None,
        };
        let optional = default.is_some() || matches!(value, AttrMut::MaybeFloat(_));
        self.0.push(AttrDesc {
            key,
            ty: value.ty(),
            default,
            optional,
        });
    }
}

/// The descriptor with wire name `name`.
pub fn lookup(name: &str) -> Option<&'static OpDesc> {
    OPS.iter().copied().find(|d| d.name == name)
}

/// Every wire name, in table order.
pub fn names() -> impl Iterator<Item = &'static str> {
    OPS.iter().map(|d| d.name)
}

macro_rules! row {
    ($id:ident, $name:literal, $family:ident, $ext:literal, $summary:literal, $output:literal,
     operands: [$($operand:literal),*], payload: $payload:literal, arity: $arity:expr,
     saves: $saves:expr, $proto:expr, torch: $torch:literal $(, onnx: $onnx:expr)?
     $(; data: [$($data:literal),*])? $(; regimes: [$($regime:ident),*])?) => {
        pub static $id: OpDesc = OpDesc {
            name: $name,
            family: Family::$family,
            extension: $ext,
            summary: $summary,
            output: $output,
            operands: &[$($operand),*],
            payload: $payload,
            arity: $arity,
            saves: $saves,
            data: &[$($($data),*)?],
            torch: $torch,
            onnx: row!(@onnx $($onnx)?),
            regimes: &[$($(CheckRegime::$regime),*)?],
            proto: $proto,
        };
    };
    (@onnx) => { None };
    (@onnx $onnx:expr) => { Some($onnx) };
}

/// A one-operand elementwise row.
macro_rules! unary {
    ($id:ident, $name:literal, $ext:literal, $summary:literal, $output:literal, $saves:expr,
     $u:ident, torch: $torch:literal $(, onnx: $onnx:expr)?) => {
        row!($id, $name, Elementwise, $ext, $summary, $output, operands: ["x"], payload: 0,
             arity: Arity::Exact(1), saves: $saves, Proto::Op(|| Op::Unary(UnaryOp::$u)),
             torch: $torch $(, onnx: $onnx)?);
    };
}

/// A two-operand elementwise row (identical shapes).
macro_rules! binary {
    ($id:ident, $name:literal, $ext:literal, $summary:literal, $output:literal, $saves:expr,
     $b:ident, torch: $torch:literal $(; regimes: [$($regime:ident),*])?) => {
        row!($id, $name, Elementwise, $ext, $summary, $output, operands: ["lhs", "rhs"], payload: 0,
             arity: Arity::Exact(2), saves: $saves, Proto::Op(|| Op::Binary(BinaryOp::$b)),
             torch: $torch $(; regimes: [$($regime),*])?);
    };
}

const fn pool(kind: PoolKind, padded: bool) -> Op {
    Op::Pool(PoolSpec {
        kind,
        kernel_h: 0,
        kernel_w: 0,
        stride: 0,
        padding: 0,
        padded,
    })
}

row!(INPUT, "input", Graph, false, "the graph input", "declared",
     operands: [], payload: 0, arity: Arity::Exact(0), saves: Saves::NOTHING, Proto::Input, torch: "");
row!(CONST, "const", Graph, false, "the payload tensor", "`value_shape`",
     operands: ["value"], payload: 1, arity: Arity::Exact(1), saves: Saves::NOTHING, Proto::Const, torch: "");
row!(DETACH, "detach", Elementwise, false, "identity; the gradient stops here", "`s`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Detach), torch: "{x}.detach()");
row!(PERMUTE, "permute", Layout, false, "`torch.permute`: output axis `i` is input axis `perm[i]`", "`s[perm[i]]`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Permute { perm: Vec::new() }), torch: "{x}.permute({perm})");
binary!(ADD, "add", false, "`a + b`", "`s`", Saves::NOTHING, Add,
    torch: "{lhs} + {rhs}"; regimes: [RepeatedParent]
);
binary!(SUB, "sub", false, "`a - b`", "`s`", Saves::NOTHING, Sub,
    torch: "{lhs} - {rhs}"; regimes: [RepeatedParent]
);
binary!(
    MUL_ELEM,
    "mul_elem",
    false,
    "`a * b`",
    "`s`",
    Saves::BOTH_OPERANDS,
    Mul,
    torch: "{lhs} * {rhs}"; regimes: [RepeatedParent]
);
binary!(
    MAX_ELEM,
    "max_elem",
    false,
    "`torch.maximum(a, b)`: NaN on either side is NaN; a tie splits the cotangent in half, NaN gives it to both",
    "`s`",
    Saves::BOTH_OPERANDS,
    Max,
    torch: "torch.maximum({lhs}, {rhs})"; regimes: [RepeatedParent]
);
binary!(
    MIN_ELEM,
    "min_elem",
    false,
    "`torch.minimum(a, b)`: NaN on either side is NaN; a tie splits the cotangent in half, NaN gives it to both",
    "`s`",
    Saves::BOTH_OPERANDS,
    Min,
    torch: "torch.minimum({lhs}, {rhs})"; regimes: [RepeatedParent]
);
binary!(
    DIV,
    "div",
    true,
    "`a / b`",
    "`s`",
    Saves::BOTH_OPERANDS,
    Div,
    torch: "{lhs} / {rhs}"
);
unary!(
    ABS,
    "abs",
    false,
    "`abs(x)`; derivative 0 at 0",
    "`s`",
    Saves::INPUT,
    Abs,
    torch: "torch.abs({x})", onnx: Onnx::named("Abs")
);
unary!(
    SQRT,
    "sqrt",
    false,
    "`sqrt(x)`; derivative 0 where `x <= 0`",
    "`s`",
    Saves::OUTPUT,
    Sqrt,
    torch: "torch.sqrt({x})", onnx: Onnx::named("Sqrt")
);
unary!(INV, "inv", false, "`1 / x`", "`s`", Saves::OUTPUT, Inv,
    torch: "torch.reciprocal({x})", onnx: Onnx::named("Reciprocal")
);
unary!(
    RELU,
    "relu",
    false,
    "`max(x, 0)`, NaN at NaN; derivative 0 at 0, 1 at NaN",
    "`s`",
    Saves::OUTPUT,
    Relu,
    torch: "torch.relu({x})", onnx: Onnx::named("Relu")
);
unary!(TANH, "tanh", false, "`tanh(x)`", "`s`", Saves::OUTPUT, Tanh,
    torch: "torch.tanh({x})", onnx: Onnx::named("Tanh")
);
unary!(
    SIGMOID,
    "sigmoid",
    false,
    "`1 / (1 + exp(-x))`",
    "`s`",
    Saves::OUTPUT,
    Sigmoid,
    torch: "torch.sigmoid({x})", onnx: Onnx::named("Sigmoid")
);
unary!(EXP, "exp", false, "`exp(x)`", "`s`", Saves::OUTPUT, Exp,
    torch: "torch.exp({x})", onnx: Onnx::named("Exp")
);
unary!(
    LOG,
    "log",
    false,
    "`log(x)`; the IR evaluator rejects `x <= 0`",
    "`s`",
    Saves::INPUT,
    Log,
    torch: "torch.log({x})", onnx: Onnx::named("Log")
);
unary!(SIN, "sin", false, "`sin(x)`", "`s`", Saves::INPUT, Sin,
    torch: "torch.sin({x})", onnx: Onnx::named("Sin")
);
unary!(COS, "cos", false, "`cos(x)`", "`s`", Saves::INPUT, Cos,
    torch: "torch.cos({x})", onnx: Onnx::named("Cos")
);
unary!(NEG, "neg", true, "`-x`", "`s`", Saves::NOTHING, Neg,
    torch: "torch.neg({x})", onnx: Onnx::named("Neg")
);
unary!(SIGN, "sign", true,
    "`torch.sign(x)`: 1, −1, or 0 for ±0 and NaN; the gradient is 0 everywhere (PyTorch's)",
    "`s`", Saves::NOTHING, Sign,
    torch: "torch.sign({x})", onnx: Onnx::named("Sign"));
unary!(
    SOFTPLUS,
    "softplus",
    true,
    "`log(1 + exp(x))`, computed stably (β = 1, no threshold)",
    "`s`",
    Saves::INPUT,
    Softplus,
    torch: "torch.logaddexp({x}, torch.zeros_like({x}))", onnx: Onnx::named("Softplus")
);
unary!(ERF, "erf", true,
    "`torch.erf(x)`; the gradient is `2/√π · exp(−x²)` (PyTorch's formula and order)",
    "`s`", Saves::INPUT, Erf,
    torch: "torch.erf({x})", onnx: Onnx::named("Erf"));
unary!(
    SILU,
    "silu",
    true,
    "`x * sigmoid(x)` (`F.silu`)",
    "`s`",
    Saves::INPUT,
    Silu,
    torch: "F.silu({x})"
);
row!(GELU, "gelu", Elementwise, true,
     "`F.gelu(x, approximate)`: `0.5·x·(1 + erf(x/√2))`, or with `\"tanh\"` `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`",
     "`s`", operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::INPUT,
     Proto::Op(|| Op::Unary(UnaryOp::Gelu(GeluApprox::None))), torch: "F.gelu({x}, approximate={approximate})", onnx: Onnx { op: "Gelu", attrs: &[("approximate", "approximate")] });
row!(LEAKY_RELU, "leaky_relu", Elementwise, true,
     "`F.leaky_relu(x, negative_slope)`: `x` where `x > 0`, else `negative_slope·x` (NaN stays NaN); the gradient is 1 where `x > 0`, else `negative_slope` (at 0 too)",
     "`s`", operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::INPUT,
     Proto::Op(|| Op::Unary(UnaryOp::LeakyRelu { negative_slope: LEAKY_RELU_DEFAULT_SLOPE })),
     torch: "F.leaky_relu({x}, negative_slope={negative_slope})",
     onnx: Onnx { op: "LeakyRelu", attrs: &[("alpha", "negative_slope")] });
row!(ELU, "elu", Elementwise, true,
     "`F.elu(x, alpha)`: `x` where `x > 0`, else `(exp(x) − 1)·alpha` (NaN stays NaN); the gradient is 1 where `x > 0` (and at NaN), else `alpha·exp(x)`",
     "`s`", operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::INPUT,
     Proto::Op(|| Op::Unary(UnaryOp::Elu { alpha: ELU_DEFAULT_ALPHA })),
     torch: "F.elu({x}, alpha={alpha})",
     onnx: Onnx { op: "Elu", attrs: &[("alpha", "alpha")] });
row!(CLAMP, "clamp", Elementwise, true,
     "`torch.clamp(x, min, max)` (an absent bound does not clamp; NaN stays NaN); the gradient passes where `min ≤ x ≤ max` (PyTorch's rule at the bounds), 0 outside; `min > max` is an error",
     "`s`", operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::INPUT,
     Proto::Op(|| Op::Clamp { min: None, max: None }), torch: "clamp({x}, {min}, {max})");
row!(SCALE, "scale", Elementwise, true, "`c * x`", "`s`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Scale { c: 0.0 }), torch: "{x} * {c}");
row!(ADD_SCALAR, "add_scalar", Elementwise, true, "`x + c`", "`s`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::AddScalar { c: 0.0 }), torch: "{x} + {c}");
row!(SOFTMAX, "softmax", Norm, false, "max-shifted softmax along `axis`", "`s`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::OUTPUT,
     Proto::Op(|| Op::Softmax { axis: 0 }), torch: "F.softmax({x}, dim={axis})");
row!(LOG_SOFTMAX, "log_softmax", Norm, true, "`x − max − log Σ e^(x−max)` along `axis`", "`s`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::OUTPUT,
     Proto::Op(|| Op::LogSoftmax { axis: 0 }), torch: "F.log_softmax({x}, dim={axis})");
row!(LAYERNORM, "layernorm", Norm, false,
     "normalise the suffix of axes from `axis` (population variance clamped at 0, `(x − mean)/sqrt(var + eps)`); γ = 1, β = 0", "`s`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::INPUT,
     Proto::Op(|| Op::LayerNorm { axis: 0, eps: None }), torch: "F.layer_norm({x}, {x}.shape[{axis}:], eps={eps})");
row!(BROADCAST_TO, "broadcast_to", Layout, false,
     "PyTorch's right-aligned `expand` (see below)", "`to_shape`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::BroadcastTo { from: Shape::scalar(), to: Shape::scalar() }), torch: "{x}.expand({to_shape})"; regimes: [BroadcastLastAxis, BroadcastLeadingAxes]);
row!(RESHAPE, "reshape", Layout, false, "row-major; sizes equal", "`out_shape`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Reshape { from: Shape::scalar(), to: Shape::scalar() }), torch: "{x}.reshape({out_shape})");
row!(FLATTEN, "flatten", Layout, false, "row-major", "`[size]`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Flatten { from: Shape::scalar() }), torch: "{x}.reshape(-1)");
row!(REDUCE_SUM, "reduce_sum", Reduce, false, "sum over `axis`, which is removed", "`s` without `axis`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::ReduceSum { axis: 0 }), torch: "{x}.sum(dim={axis})");
row!(REDUCE_MEAN, "reduce_mean", Reduce, false,
     "mean over `axis`, which is removed (over an empty axis: NaN, as PyTorch)", "`s` without `axis`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::ReduceMean { axis: 0 }), torch: "{x}.mean(dim={axis})");
row!(SUM, "sum", Reduce, false, "sum of all elements (0 for an empty tensor)", "`[]`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Sum), torch: "{x}.sum()");
row!(MATMUL, "matmul", Linalg, false, "`[m,n]·[n,p]` or batched `[b,m,n]·[b,n,p]`; other ranks are errors", "`[m,p]` / `[b,m,p]`",
     operands: ["lhs", "rhs"], payload: 0, arity: Arity::Exact(2), saves: Saves::BOTH_OPERANDS,
     Proto::Op(|| Op::MatMul), torch: "torch.matmul({lhs}, {rhs})"; regimes: [SquareRhs, BatchedSquareRhs]);
row!(LINEAR, "linear", Linalg, false,
     "`y = x·Wᵀ + b` over the last axis, leading axes kept", "`s` with last axis `out`",
     operands: ["x", "weight", "bias"], payload: 2, arity: Arity::Exact(3),
     saves: Saves::BOTH_OPERANDS, Proto::Op(|| Op::Linear), torch: "F.linear({x}, {weight}, {bias})");
row!(CAUSAL_ATTENTION, "causal_attention", Linalg, true,
     "causal self-attention of `heads` heads on packed projections (nanoGPT's between `c_attn` and `c_proj`): the last axis holds queries, keys and values side by side, each head `hd = C/heads` columns of each; position `i` attends to `j ≤ i` with weights `softmax_j(q_i·k_j/√hd)`, the heads side by side again; the VJP recomputes the weights",
     "`s` with last axis `s[-1]/3`",
     operands: ["qkv"], payload: 0, arity: Arity::Exact(1), saves: Saves::INPUT,
     Proto::Op(|| Op::CausalAttention { heads: 0 }), torch: "causal_attention({qkv}, {heads})");
row!(CONV2D, "conv2d", Conv, false,
"2-D convolution of `[C,H,W]` or `[N,C,H,W]`, zero padding on both sides (padded cells are zeros in every product, so a NaN or infinite weight reaches the border outputs, as in PyTorch); `groups` (ours) convolves channel groups separately (weight `[outC, inC/groups, kH, kW]`), `dilation` (ours) spaces the taps; `H' = (H + 2p − dilation·(kH − 1) − 1)/stride + 1`", "`[outC,H',W']` / `[N,outC,H',W']`",
operands: ["x", "weight", "bias"], payload: 2, arity: Arity::Exact(3),
saves: Saves::BOTH_OPERANDS,
Proto::Op(|| Op::Conv2d(Conv2dSpec::ungrouped(0, 0, (0, 0), 0, 0))), torch: "F.conv2d({x}, {weight}, {bias}, stride={stride}, padding={padding}, dilation={dilation}, groups={groups})"; regimes: [Padded, Strided]);
row!(CONV2D_RELU, "conv2d_relu", Conv, true,
"`relu(conv2d(x, weight, bias))` in one node, the attributes `conv2d`'s: what a compiled graph's `conv2d` whose one consumer is `relu` becomes (`compiled::fuse`), so that an engine applies the ReLU where it stores the convolution's output and masks the cotangent where it reads it; the VJP reads the output (the mask, PyTorch's `threshold_backward`: the cotangent passes at NaN)", "`[outC,H',W']` / `[N,outC,H',W']`",
operands: ["x", "weight", "bias"], payload: 2, arity: Arity::Exact(3),
saves: Saves { inputs: &[0, 1], output: true },
Proto::Op(|| Op::Conv2dRelu(Conv2dSpec::ungrouped(0, 0, (0, 0), 0, 0))), torch: "F.relu(F.conv2d({x}, {weight}, {bias}, stride={stride}, padding={padding}, dilation={dilation}, groups={groups}))"; regimes: [Padded, Strided]);
row!(MAX_POOL2D, "max_pool2d", Pool, false, "max pooling over the last two axes", "`[C,H',W']` / `[N,C,H',W']`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::INPUT,
     Proto::Op(|| pool(PoolKind::Max, false)), torch: "F.max_pool2d({x}, ({kH}, {kW}), stride={stride}, padding=0)"; regimes: [Strided]);
row!(AVG_POOL2D, "avg_pool2d", Pool, false, "average pooling over the last two axes", "`[C,H',W']` / `[N,C,H',W']`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| pool(PoolKind::Avg, false)), torch: "F.avg_pool2d({x}, ({kH}, {kW}), stride={stride}, padding=0, count_include_pad=True)"; regimes: [Strided]);
row!(MAX_POOL2D_PAD, "max_pool2d_pad", Pool, false,
     "max pooling with zero padding (padded cells never win)", "as above",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::INPUT,
     Proto::Op(|| pool(PoolKind::Max, true)), torch: "F.max_pool2d({x}, ({kH}, {kW}), stride={stride}, padding={padding})"; regimes: [Padded, Strided]);
row!(AVG_POOL2D_PAD, "avg_pool2d_pad", Pool, false,
     "average pooling with zero padding, counted in the divisor `kH·kW` (PyTorch's default)", "as above",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| pool(PoolKind::Avg, true)), torch: "F.avg_pool2d({x}, ({kH}, {kW}), stride={stride}, padding={padding}, count_include_pad=True)"; regimes: [Padded, Strided]);
row!(BATCH_NORM2D_NCHW_EVAL, "batch_norm2d_nchw_eval", Norm, false,
     "`(x − mean)/sqrt(max(var,0) + eps)·γ + β` per channel, channels on axis 1 (`[N,C,…]`)", "`s`",
     operands: ["x", "gamma", "beta", "mean", "var"], payload: 4, arity: Arity::Exact(5),
     saves: Saves { inputs: &[0, 1, 3, 4], output: false },
     Proto::Op(|| Op::BatchNormEval { channels: 0, eps: BATCH_NORM_DEFAULT_EPS }), torch: "batch_norm_eval({x}, {gamma}, {beta}, {mean}, {var}, {eps})");
row!(BATCH_NORM2D_NCHW_TRAIN, "batch_norm2d_nchw_train", Norm, true,
     "`F.batch_norm(x, None, None, γ, β, training=True, eps)`: per channel, batch mean and biased variance over `N, H, W`, `(x − mean)/sqrt(var + eps)·γ + β`; the gradient flows through the batch statistics (no running statistics)",
     "`s`",
     operands: ["x", "gamma", "beta"], payload: 2, arity: Arity::Exact(3),
     saves: Saves { inputs: &[0, 1], output: false },
     Proto::Op(|| Op::BatchNormTrain { channels: 0, eps: None }), torch: "F.batch_norm({x}, None, None, {gamma}, {beta}, training=True, eps={eps})");
row!(CONCAT, "concat", Layout, false, "parents agree on every other axis", "sum of extents along `axis`",
     operands: ["x"], payload: 0, arity: Arity::AtLeast(2), saves: Saves::NOTHING,
     Proto::Op(|| Op::Concat { axis: 0 }), torch: "torch.cat([{parents}], dim={axis})"; regimes: [ThriceRepeated]);
row!(EMBEDDING, "embedding", Layout, true,
     "`F.embedding(ids, weight)`: row `ids[p]` of `weight [V, D]` for each position; `ids` holds integral row ids in `[0, V)` (data: no gradient; anything else is an error naming the position); the weight's gradient adds each position's row into its id's, in position order",
     "`ids' shape + [D]`",
     operands: ["ids", "weight"], payload: 0, arity: Arity::Exact(2), saves: Saves::INPUT,
     Proto::Op(|| Op::Embedding), torch: "F.embedding({ids}.long(), {weight})"; data: [0]; regimes: [RepeatedIds]);
row!(SWAP_FIRST_TWO, "swap_first_two", Layout, false, "swap the two outermost axes (rank ≥ 2)", "`[n,m,…]`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::SwapFirstTwo), torch: "{x}.transpose(0, 1)");
row!(TRANSPOSE3D_LAST_TWO, "transpose3d_last_two", Layout, false,
     "swap the last two axes of a rank-3 tensor", "`[a,c,b]`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Transpose3dLastTwo), torch: "{x}.transpose(1, 2)");
row!(TRANSPOSE, "transpose", Layout, true, "`x.transpose(dim0, dim1)`", "`s` with the two axes swapped",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Transpose { dim0: 0, dim1: 0 }), torch: "{x}.transpose({dim0}, {dim1})");
row!(SLICE, "slice", Layout, true,
     "`x.narrow(axis, start, len)`; the VJP scatters into zeros; past the extent is an error",
     "`s` with extent `len` on `axis`",
     operands: ["x"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::Slice { axis: 0, start: 0, len: 0 }), torch: "{x}.narrow({axis}, {start}, {len})");
row!(MSE_LOSS, "mse_loss", Reduce, false, "`Σ(a − b)² / size` (size 0: NaN, as PyTorch)", "`[]`",
     operands: ["y", "target"], payload: 0, arity: Arity::Exact(2), saves: Saves::BOTH_OPERANDS,
     Proto::Op(|| Op::MseLoss), torch: "F.mse_loss({y}, {target})");
row!(CROSS_ENTROPY, "cross_entropy", Reduce, true,
     "`F.cross_entropy(logits, target, reduction)` with a stable log-softmax; `target` holds integral class ids in `[0, C)` (data: no gradient; anything else is an error); `\"mean\"` over zero rows is NaN, as PyTorch",
     "`[]`",
     operands: ["logits", "target"], payload: 1, arity: Arity::Exact(2), saves: Saves::BOTH_OPERANDS,
     Proto::Op(|| Op::CrossEntropy { reduction: Reduction::Mean }), torch: "F.cross_entropy({logits}, {target}, reduction={reduction})"; data: [1]);
row!(RAND_UNIFORM, "rand_uniform", Random, false,
     "deterministic uniform `[0,1)` (see below)", "declared",
     operands: [], payload: 0, arity: Arity::Exact(0), saves: Saves::NOTHING,
     Proto::Op(|| Op::RandUniform { seed: 0, key: 0, shape: Shape::scalar() }), torch: "{draw}");
row!(BERNOULLI_MASK, "bernoulli_mask", Random, false,
     "`1` where `keep > u`, else `0`", "declared",
     operands: ["keep_prob"], payload: 0, arity: Arity::Exact(1), saves: Saves::NOTHING,
     Proto::Op(|| Op::BernoulliMask { seed: 0, key: 0, shape: Shape::scalar() }), torch: "({keep_prob} > {draw}).to({draw}.dtype)");

/// Every descriptor, in the order of `docs/ir-format.md`.
pub static OPS: &[&OpDesc] = &[
    &INPUT,
    &CONST,
    &DETACH,
    &PERMUTE,
    &ADD,
    &SUB,
    &MUL_ELEM,
    &MAX_ELEM,
    &MIN_ELEM,
    &DIV,
    &ABS,
    &SQRT,
    &INV,
    &RELU,
    &TANH,
    &SIGMOID,
    &EXP,
    &LOG,
    &SIN,
    &COS,
    &NEG,
    &SIGN,
    &SOFTPLUS,
    &ERF,
    &SILU,
    &GELU,
    &LEAKY_RELU,
    &ELU,
    &CLAMP,
    &SCALE,
    &ADD_SCALAR,
    &SOFTMAX,
    &LOG_SOFTMAX,
    &LAYERNORM,
    &BROADCAST_TO,
    &RESHAPE,
    &FLATTEN,
    &REDUCE_SUM,
    &REDUCE_MEAN,
    &SUM,
    &MATMUL,
    &LINEAR,
    &CAUSAL_ATTENTION,
    &CONV2D,
    &CONV2D_RELU,
    &MAX_POOL2D,
    &AVG_POOL2D,
    &MAX_POOL2D_PAD,
    &AVG_POOL2D_PAD,
    &BATCH_NORM2D_NCHW_EVAL,
    &BATCH_NORM2D_NCHW_TRAIN,
    &CONCAT,
    &EMBEDDING,
    &SWAP_FIRST_TWO,
    &TRANSPOSE3D_LAST_TWO,
    &TRANSPOSE,
    &SLICE,
    &MSE_LOSS,
    &CROSS_ENTROPY,
    &RAND_UNIFORM,
    &BERNOULLI_MASK,
];

impl UnaryOp {
    /// The descriptor of this function's kind.
    pub fn desc(self) -> &'static OpDesc {
        match self {
            UnaryOp::Abs => &ABS,
            UnaryOp::Sqrt => &SQRT,
            UnaryOp::Inv => &INV,
            UnaryOp::Relu => &RELU,
            UnaryOp::Tanh => &TANH,
            UnaryOp::Sigmoid => &SIGMOID,
            UnaryOp::Exp => &EXP,
            UnaryOp::Log => &LOG,
            UnaryOp::Sin => &SIN,
            UnaryOp::Cos => &COS,
            UnaryOp::Neg => &NEG,
            UnaryOp::Sign => &SIGN,
            UnaryOp::Softplus => &SOFTPLUS,
            UnaryOp::Erf => &ERF,
            UnaryOp::Silu => &SILU,
            UnaryOp::Gelu(_) => &GELU,
            UnaryOp::LeakyRelu { .. } => &LEAKY_RELU,
            UnaryOp::Elu { .. } => &ELU,
        }
    }
}

impl BinaryOp {
    /// The descriptor of this function's kind.
    pub fn desc(self) -> &'static OpDesc {
        match self {
            BinaryOp::Add => &ADD,
            BinaryOp::Sub => &SUB,
            BinaryOp::Mul => &MUL_ELEM,
            BinaryOp::Div => &DIV,
            BinaryOp::Max => &MAX_ELEM,
            BinaryOp::Min => &MIN_ELEM,
        }
    }
}

impl Op {
    /// This op's descriptor.
    pub fn desc(&self) -> &'static OpDesc {
        match self {
            Op::Unary(u) => u.desc(),
            Op::Binary(b) => b.desc(),
            Op::Clamp { .. } => &CLAMP,
            Op::Scale { .. } => &SCALE,
            Op::AddScalar { .. } => &ADD_SCALAR,
            Op::Detach => &DETACH,
            Op::Softmax { .. } => &SOFTMAX,
            Op::LogSoftmax { .. } => &LOG_SOFTMAX,
            Op::LayerNorm { .. } => &LAYERNORM,
            Op::BroadcastTo { .. } => &BROADCAST_TO,
            Op::Reshape { .. } => &RESHAPE,
            Op::Flatten { .. } => &FLATTEN,
            Op::Permute { .. } => &PERMUTE,
            Op::SwapFirstTwo => &SWAP_FIRST_TWO,
            Op::Transpose3dLastTwo => &TRANSPOSE3D_LAST_TWO,
            Op::Transpose { .. } => &TRANSPOSE,
            Op::Slice { .. } => &SLICE,
            Op::ReduceSum { .. } => &REDUCE_SUM,
            Op::ReduceMean { .. } => &REDUCE_MEAN,
            Op::Sum => &SUM,
            Op::MatMul => &MATMUL,
            Op::Linear => &LINEAR,
            Op::CausalAttention { .. } => &CAUSAL_ATTENTION,
            Op::Conv2d(_) => &CONV2D,
            Op::Conv2dRelu(_) => &CONV2D_RELU,
            Op::Pool(p) => match (p.kind, p.padded) {
                (PoolKind::Max, false) => &MAX_POOL2D,
                (PoolKind::Avg, false) => &AVG_POOL2D,
                (PoolKind::Max, true) => &MAX_POOL2D_PAD,
                (PoolKind::Avg, true) => &AVG_POOL2D_PAD,
            },
            Op::BatchNormEval { .. } => &BATCH_NORM2D_NCHW_EVAL,
            Op::BatchNormTrain { .. } => &BATCH_NORM2D_NCHW_TRAIN,
            Op::Concat { .. } => &CONCAT,
            Op::Embedding => &EMBEDDING,
            Op::MseLoss => &MSE_LOSS,
            Op::CrossEntropy { .. } => &CROSS_ENTROPY,
            Op::RandUniform { .. } => &RAND_UNIFORM,
            Op::BernoulliMask { .. } => &BERNOULLI_MASK,
        }
    }

    /// The one listing of each op's wire attributes, in wire order: key, type and default.
    /// The IR's parser and printer, the lowering text and the docs all go through it. Fields
    /// an op takes from its context rather than its attributes (the random kinds' key and
    /// shape, batch norm's `eps`) are not listed.
    pub fn visit_attrs(&mut self, v: &mut dyn AttrVisitor) {
        match self {
            Op::Unary(UnaryOp::Gelu(approximate)) => {
                let mut value = approximate.wire();
                v.visit(
                    "approximate",
                    AttrMut::Choice {
                        value: &mut value,
                        options: GeluApprox::OPTIONS,
                        default: GeluApprox::None.wire(),
                    },
                );
                // a reader writes only an option (or leaves the value as it was)
                if let Some(a) = GeluApprox::from_wire(value) {
                    *approximate = a;
                }
            }
            Op::Unary(UnaryOp::LeakyRelu { negative_slope }) => v.visit(
                "negative_slope",
                AttrMut::FloatOr {
                    value: negative_slope,
                    default: LEAKY_RELU_DEFAULT_SLOPE,
                },
            ),
            Op::Unary(UnaryOp::Elu { alpha }) => v.visit(
                "alpha",
                AttrMut::FloatOr {
                    value: alpha,
                    default: ELU_DEFAULT_ALPHA,
                },
            ),
            Op::Unary(_)
            | Op::Binary(_)
            | Op::Detach
            | Op::SwapFirstTwo
            | Op::Transpose3dLastTwo
            | Op::Sum
            | Op::MatMul
            | Op::Linear
            | Op::Embedding
            | Op::MseLoss => {}
            Op::Scale { c } | Op::AddScalar { c } => v.visit("c", AttrMut::Float(c)),
            Op::Clamp { min, max } => {
                v.visit("min", AttrMut::MaybeFloat(min));
                v.visit("max", AttrMut::MaybeFloat(max));
            }
            Op::Softmax { axis }
            | Op::LogSoftmax { axis }
            | Op::ReduceSum { axis }
            | Op::ReduceMean { axis }
            | Op::Concat { axis } => v.visit("axis", AttrMut::Int(axis)),
            Op::CausalAttention { heads } => v.visit("heads", AttrMut::Int(heads)),
            Op::LayerNorm { axis, eps } => {
                v.visit("axis", AttrMut::Int(axis));
                v.visit(
                    "eps",
                    AttrMut::OptFloat {
                        value: eps,
                        default: LAYER_NORM_DEFAULT_EPS,
                    },
                );
            }
            Op::BroadcastTo { from, to } => {
                v.visit("from_shape", AttrMut::Shape(from));
                v.visit("to_shape", AttrMut::Shape(to));
            }
            Op::Reshape { from, to } => {
                v.visit("in_shape", AttrMut::Shape(from));
                v.visit("out_shape", AttrMut::Shape(to));
            }
            Op::Flatten { from } => v.visit("value_shape", AttrMut::Shape(from)),
            Op::Permute { perm } => v.visit("perm", AttrMut::List(perm)),
            Op::Transpose { dim0, dim1 } => {
                v.visit("dim0", AttrMut::Int(dim0));
                v.visit("dim1", AttrMut::Int(dim1));
            }
            Op::CrossEntropy { reduction } => {
                let mut value = reduction.wire();
                v.visit(
                    "reduction",
                    AttrMut::Choice {
                        value: &mut value,
                        options: Reduction::OPTIONS,
                        default: Reduction::Mean.wire(),
                    },
                );
                // a reader writes only an option (or leaves the value as it was)
                if let Some(r) = Reduction::from_wire(value) {
                    *reduction = r;
                }
            }
            Op::Slice { axis, start, len } => {
                v.visit("axis", AttrMut::Int(axis));
                v.visit("start", AttrMut::Int(start));
                v.visit("len", AttrMut::Int(len));
            }
            Op::Conv2d(c) | Op::Conv2dRelu(c) => {
                v.visit("inC", AttrMut::Int(&mut c.in_channels));
                v.visit("outC", AttrMut::Int(&mut c.out_channels));
                v.visit("kH", AttrMut::Int(&mut c.kernel_h));
                v.visit("kW", AttrMut::Int(&mut c.kernel_w));
                v.visit("stride", AttrMut::Int(&mut c.stride));
                v.visit("padding", AttrMut::Int(&mut c.padding));
                v.visit(
                    "groups",
                    AttrMut::IntOr {
                        value: &mut c.groups,
                        default: CONV_DEFAULT_GROUPS,
                    },
                );
                v.visit(
                    "dilation",
                    AttrMut::IntOr {
                        value: &mut c.dilation,
                        default: CONV_DEFAULT_DILATION,
                    },
                );
            }
            Op::Pool(p) => {
                v.visit("kH", AttrMut::Int(&mut p.kernel_h));
                v.visit("kW", AttrMut::Int(&mut p.kernel_w));
                v.visit("stride", AttrMut::Int(&mut p.stride));
                if p.padded {
                    v.visit("padding", AttrMut::Int(&mut p.padding));
                }
            }
            Op::BatchNormEval { channels, .. } => v.visit("channels", AttrMut::Int(channels)),
            Op::BatchNormTrain { channels, eps } => {
                v.visit("channels", AttrMut::Int(channels));
                v.visit(
                    "eps",
                    AttrMut::OptFloat {
                        value: eps,
                        default: BATCH_NORM_DEFAULT_EPS,
                    },
                );
            }
            Op::RandUniform { seed, .. } | Op::BernoulliMask { seed, .. } => {
                v.visit("seed", AttrMut::Seed(seed))
            }
        }
    }

    /// Whether every attribute that has a default is at it (left out, or equal to it bit for
    /// bit): the op computes as its kind does by default.
    pub fn at_defaults(&self) -> bool {
        struct AtDefaults(bool);
        impl AttrVisitor for AtDefaults {
            fn visit(&mut self, _key: &'static str, value: AttrMut<'_>) {
                self.0 &= match value {
                    AttrMut::OptFloat { value, .. } => value.is_none(),
                    AttrMut::FloatOr { value, default } => value.to_bits() == default.to_bits(),
                    AttrMut::Choice { value, default, .. } => *value == default,
                    AttrMut::IntOr { value, default } => *value == default,
                    _ => true,
                };
            }
        }
        let mut v = AtDefaults(true);
        self.clone().visit_attrs(&mut v);
        v.0
    }

    /// The fields an op takes from its IR node rather than from its attributes (filled in by
    /// the IR's `node_sem`): the random kinds' key, batch norm's `eps`. For printing lowered
    /// graphs.
    pub fn context_values(&self) -> Vec<(&'static str, AttrValue)> {
        match self {
            Op::RandUniform { key, .. } | Op::BernoulliMask { key, .. } => {
                vec![("key", AttrValue::Int(*key))]
            }
            Op::BatchNormEval { eps, .. } => vec![("eps", AttrValue::Float(*eps))],
            _ => vec![],
        }
    }

    /// The attributes with their current values, in wire order (for printing).
    pub fn attr_values(&self) -> Vec<(&'static str, AttrValue)> {
        struct Collect(Vec<(&'static str, AttrValue)>);
        impl AttrVisitor for Collect {
            fn visit(&mut self, key: &'static str, value: AttrMut<'_>) {
                let v = match value {
                    AttrMut::Int(v) => AttrValue::Int(*v as u64),
                    AttrMut::IntOr { value, default } if *value == default => return,
                    AttrMut::IntOr { value, .. } => AttrValue::Int(*value as u64),
                    AttrMut::Seed(v) => AttrValue::Int(*v),
                    AttrMut::Float(v) | AttrMut::FloatOr { value: v, .. } => AttrValue::Float(*v),
                    AttrMut::OptFloat { value: None, .. } | AttrMut::MaybeFloat(None) => return,
                    AttrMut::OptFloat { value: Some(v), .. } | AttrMut::MaybeFloat(Some(v)) => {
                        AttrValue::Float(*v)
                    }
                    AttrMut::Shape(s) => AttrValue::Shape(s.clone()),
                    AttrMut::List(l) => AttrValue::List(l.clone()),
                    AttrMut::Choice { value, .. } => AttrValue::Str(value),
                };
                self.0.push((key, v));
            }
        }
        let mut c = Collect(Vec::new());
        self.clone().visit_attrs(&mut c);
        c.0
    }

    /// The op with every real number it computes with replaced by `f(value)`: its float
    /// attributes (an optional one at its default where the node leaves it out, so `f` sees the
    /// value the op uses; an absent `clamp` bound stays absent) and batch norm's context `eps`.
    /// An engine computing in a narrower type computes with `map_reals(round)`: the engine suite
    /// runs the reference on that op, so that a comparison measures the engine's arithmetic
    /// only (a `clamp` bound rounded onto an input is then a bound on both sides).
    pub fn map_reals(&self, f: impl Fn(f64) -> f64) -> Op {
        struct Map<F>(F);
        impl<F: Fn(f64) -> f64> AttrVisitor for Map<F> {
            fn visit(&mut self, _key: &'static str, value: AttrMut<'_>) {
                match value {
                    AttrMut::Float(v)
                    | AttrMut::FloatOr { value: v, .. }
                    | AttrMut::MaybeFloat(Some(v)) => *v = (self.0)(*v),
                    AttrMut::OptFloat { value, default } => {
                        *value = Some((self.0)(value.unwrap_or(default)))
                    }
                    _ => {}
                }
            }
        }
        let mut op = self.clone();
        if let Op::BatchNormEval { eps, .. } = &mut op {
            *eps = f(*eps);
        }
        op.visit_attrs(&mut Map(f));
        op
    }
}

/// An attribute's value, for printing and serialisation. Optional attributes left at their
/// default are not listed.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(u64),
    Float(f64),
    Shape(Shape),
    List(Vec<usize>),
    /// A choice's value (written as a JSON string).
    Str(&'static str),
}

impl std::fmt::Display for AttrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write!(f, "{v:e}"),
            AttrValue::Shape(s) => write!(f, "{s}"),
            AttrValue::List(v) => write!(f, "{v:?}"),
            AttrValue::Str(v) => write!(f, "\"{v}\""),
        }
    }
}

/// The kinds table of `docs/ir-format.md`, generated from the descriptors (a test keeps the
/// file in sync: `UPDATE_DOCS=1 cargo test -p torchlean-spec --test docs` rewrites it).
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| kind | attributes | parents | output shape | semantics | payload | VJP saves |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let or_none = |v: Vec<String>| {
        if v.is_empty() {
            "—".to_string()
        } else {
            v.join(", ")
        }
    };
    for d in OPS {
        let attrs: Vec<String> = d
            .attributes()
            .iter()
            .map(|a| match &a.default {
                Some(def) => format!("`{}` ({}, optional, default {def})", a.key, a.ty),
                None if a.optional => format!("`{}` ({}, optional)", a.key, a.ty),
                None => format!("`{}` ({})", a.key, a.ty),
            })
            .collect();
        let parents = d.operands.len() - d.payload;
        let parent_text = match d.parents() {
            Arity::Exact(0) => "0".to_string(),
            Arity::Exact(n) => format!(
                "{n}: {}",
                d.operands[..parents]
                    .iter()
                    .map(|o| format!("`{o}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Arity::AtLeast(n) => format!("≥ {n}"),
        };
        let payload: Vec<String> = d.payload_names().iter().map(|p| format!("`{p}`")).collect();
        let mut saves: Vec<String> = d
            .saves
            .inputs
            .iter()
            .map(|&i| format!("`{}`", d.operands[i]))
            .collect();
        if d.saves.output {
            saves.push("output".into());
        }
        let name = if d.extension {
            format!("`{}` *(extension)*", d.name)
        } else {
            format!("`{}`", d.name)
        };
        s.push_str(&format!(
            "| {name} | {} | {parent_text} | {} | {} | {} | {} |\n",
            or_none(attrs),
            d.output,
            d.summary,
            or_none(payload),
            or_none(saves),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_row_is_its_prototypes_descriptor() {
        let mut seen = std::collections::BTreeSet::new();
        for d in OPS {
            assert!(seen.insert(d.name), "duplicate wire name {}", d.name);
            assert_eq!(lookup(d.name).map(|x| x.name), Some(d.name));
            if let Some(op) = d.prototype() {
                assert!(
                    std::ptr::eq(op.desc(), *d),
                    "{} -> {}",
                    d.name,
                    op.desc().name
                );
                assert_eq!(op.name(), d.name);
            }
        }
        for u in UnaryOp::ALL {
            assert!(OPS.iter().any(|d| std::ptr::eq(*d, u.desc())), "{u:?}");
        }
        for b in BinaryOp::ALL {
            assert!(OPS.iter().any(|d| std::ptr::eq(*d, b.desc())), "{b:?}");
        }
    }

    #[test]
    fn operands_agree_with_arity_and_saves() {
        for d in OPS {
            match d.arity {
                Arity::Exact(n) => assert_eq!(d.operands.len(), n, "{}", d.name),
                Arity::AtLeast(_) => assert_eq!(d.operands.len(), 1, "{}", d.name),
            }
            assert!(d.payload <= d.operands.len(), "{}", d.name);
            for &i in d.saves.inputs {
                assert!(i < d.operands.len(), "{} saves operand {i}", d.name);
            }
            for &i in d.data {
                assert!(i < d.operands.len(), "{} data operand {i}", d.name);
            }
        }
    }

    #[test]
    fn attribute_listing_round_trips_through_the_visitor() {
        // a visitor that writes distinct values, read back by `attr_values`
        struct Fill(u64);
        impl AttrVisitor for Fill {
            fn visit(&mut self, _: &'static str, value: AttrMut<'_>) {
                self.0 += 1;
                match value {
                    AttrMut::Int(v) | AttrMut::IntOr { value: v, .. } => *v = self.0 as usize,
                    AttrMut::Seed(v) => *v = self.0,
                    AttrMut::Float(v) | AttrMut::FloatOr { value: v, .. } => {
                        *v = self.0 as f64 / 4.0
                    }
                    AttrMut::OptFloat { value, .. } | AttrMut::MaybeFloat(value) => {
                        *value = Some(self.0 as f64)
                    }
                    AttrMut::Shape(s) => *s = Shape::from([self.0 as usize]),
                    AttrMut::List(l) => *l = vec![self.0 as usize],
                    AttrMut::Choice { value, options, .. } => {
                        *value = options[self.0 as usize % options.len()]
                    }
                }
            }
        }
        for d in OPS {
            let Some(mut op) = d.prototype() else {
                continue;
            };
            op.visit_attrs(&mut Fill(0));
            let values = op.attr_values();
            let keys: Vec<&str> = d.attributes().iter().map(|a| a.key).collect();
            let got: Vec<&str> = values.iter().map(|(k, _)| *k).collect();
            assert_eq!(keys, got, "{}", d.name);
        }
    }

    #[test]
    fn map_reals_maps_every_real_the_op_computes_with_and_nothing_else() {
        let half = |v: f64| v / 2.0;
        let cases = [
            (Op::Scale { c: 3.0 }, Op::Scale { c: 1.5 }),
            (Op::AddScalar { c: -1.0 }, Op::AddScalar { c: -0.5 }),
            (
                Op::Clamp {
                    min: Some(-2.0),
                    max: None,
                },
                Op::Clamp {
                    min: Some(-1.0),
                    max: None,
                },
            ),
            // a default the node leaves out is the value the op computes with
            (
                Op::LayerNorm { axis: 1, eps: None },
                Op::LayerNorm {
                    axis: 1,
                    eps: Some(LAYER_NORM_DEFAULT_EPS / 2.0),
                },
            ),
            (
                Op::BatchNormTrain {
                    channels: 3,
                    eps: Some(0.25),
                },
                Op::BatchNormTrain {
                    channels: 3,
                    eps: Some(0.125),
                },
            ),
            (
                Op::BatchNormEval {
                    channels: 3,
                    eps: 0.5,
                },
                Op::BatchNormEval {
                    channels: 3,
                    eps: 0.25,
                },
            ),
            (Op::Softmax { axis: 2 }, Op::Softmax { axis: 2 }),
        ];
        for (op, want) in cases {
            assert_eq!(op.map_reals(half), want, "{op:?}");
        }
    }

    #[test]
    fn layer_norm_default_eps_is_the_literal_of_spec_3() {
        // SPEC 3: "`layernorm` (`axis`, optional `eps`, default 1e-6 as in TorchLean)"
        let attrs = LAYERNORM.attributes();
        let eps = attrs.iter().find(|a| a.key == "eps").expect("eps listed");
        assert_eq!(eps.default.as_deref(), Some("1e-6"));
        assert_eq!(
            Op::LayerNorm { axis: 0, eps: None }.layer_norm_eps(),
            Some(1e-6)
        );
    }
}
