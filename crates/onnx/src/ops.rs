//! One mapping per ONNX op type, to IR kinds (the table is `docs/onnx.md`). Every output shape
//! comes from the IR op's shape rule ([`Builder::apply`] calls `Op::infer_shape`); the only
//! shape arithmetic here is ONNX's own operand conventions (numpy broadcasting, Reshape's `0`
//! and `-1`, Flatten's two factors, Slice's clamping).

use crate::attrs::Ctx;
use crate::error::{Problem, ProblemKind};
use crate::import::{Builder, Operand};
use crate::tensor::{decode, Constant, Values};
use torchlean_spec::ops::desc::{self, Onnx, OpDesc};
use torchlean_spec::ops::{dilated_extent, BATCH_NORM_DEFAULT_EPS};
use torchlean_spec::ops::{AttrMut, AttrVisitor};
use torchlean_spec::{Arity, BinaryOp, Conv2dSpec, Op, PoolKind, PoolSpec, Shape, Tensor, UnaryOp};

type Many<T> = std::result::Result<T, Vec<Problem>>;
type Mapped = Many<()>;
type One<T> = std::result::Result<T, Problem>;

/// The op types mapped by a function of their own here (default domain only); the op types
/// that an op's row names (`spec::ops::desc::Onnx`) are mapped through that row
/// ([`supported_op_types`] lists both).
const MAPPED: &[&str] = &[
    "Gather",
    "Gemm",
    "MatMul",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Softmax",
    "LogSoftmax",
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalAveragePool",
    "BatchNormalization",
    "LayerNormalization",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Expand",
    "Flatten",
    "Transpose",
    "Concat",
    "Slice",
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSumExp",
    "Sum",
    "Mean",
    "Max",
    "Min",
    "HardSigmoid",
    "HardSwish",
    "Mish",
    "LRN",
    "Selu",
    "Softsign",
    "PRelu",
    "Pow",
    "GlobalMaxPool",
    "Where",
    "Celu",
    "Trilu",
    "Tile",
    "Pad",
    "InstanceNormalization",
    "GroupNormalization",
    "Split",
    "Clip",
    "Constant",
    "Shape",
    "Identity",
    "Dropout",
    "Cast",
];

/// Every op type the importer maps (default domain only), sorted.
pub fn supported_op_types() -> Vec<&'static str> {
    let rows = desc::OPS.iter().filter_map(|d| d.onnx.map(|o| o.op));
    let mut all: Vec<&'static str> = MAPPED
        .iter()
        .chain(crate::fold::ONLY_FOLDED)
        .copied()
        .chain(rows)
        .collect();
    all.sort_unstable();
    all
}

/// The row whose ONNX operator is `op_type`.
fn row_of(op_type: &str) -> Option<(&'static OpDesc, Onnx)> {
    desc::OPS
        .iter()
        .find_map(|d| d.onnx.filter(|o| o.op == op_type).map(|o| (*d, o)))
}

pub(crate) fn supported(ctx: &Ctx<'_>) -> bool {
    matches!(ctx.node.domain(), "" | "ai.onnx")
        && (MAPPED.contains(&ctx.op)
            || crate::fold::ONLY_FOLDED.contains(&ctx.op)
            || row_of(ctx.op).is_some())
}

/// The ops whose lowering computes an integer result exactly on integer-valued floats (while
/// they stay below 2^53 in magnitude): moves, selections, comparisons by value, sums and
/// products. An integer graph input flows through them as data; any other op refuses it.
const INTEGER_EXACT: &[&str] = &[
    "Identity",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Concat",
    "Slice",
    "Expand",
    "Tile",
    "Pad",
    "Trilu",
    "Where",
    "Max",
    "Min",
    "Sum",
    "Add",
    "Sub",
    "Mul",
    "Neg",
    "Abs",
    "Relu",
    "ReduceMax",
    "ReduceMin",
    "ReduceSum",
];

/// Maps one node: its outputs are defined in `b`, or every problem found is returned. A node
/// of [`INTEGER_EXACT`] over integer values maps with them as data, and its outputs are
/// integer values.
pub(crate) fn map_node(b: &mut Builder, ctx: &Ctx<'_>) -> Mapped {
    // every operand integer: an integer value, or an integer or BOOL constant (axes, shapes,
    // a condition); a float beside an integer value is no ONNX model, and stays refused
    let integer_operand = |x: &String| {
        x.is_empty()
            || b.ids(x).is_some()
            || b.constant(x)
                .is_some_and(|c| c.ints().is_some() || c.bools().is_some())
    };
    let integer = INTEGER_EXACT.contains(&ctx.op)
        && ctx.node.input.iter().any(|x| b.ids(x).is_some())
        && ctx.node.input.iter().all(integer_operand);
    if integer {
        return b.map_with_integer_data(ctx, |b| map_node_as_given(b, ctx));
    }
    map_node_as_given(b, ctx)
}

/// [`map_node`] with every operand as the model gives it.
fn map_node_as_given(b: &mut Builder, ctx: &Ctx<'_>) -> Mapped {
    if let Some(folded) = crate::fold::try_fold(b, ctx) {
        return folded.map_err(|p| vec![p]);
    }
    let out = ctx.node.output.first().cloned().unwrap_or_default();
    let sliced_constant = (ctx.op == "Slice")
        .then(|| ctx.node.input.first().and_then(|x| b.folded(x)).cloned())
        .flatten();
    if let Some(c) = sliced_constant {
        return slice_folded(b, ctx, &out, c);
    }
    let result: Mapped = match ctx.op {
        "Identity" => {
            only(ctx, &[])?;
            alias(b, ctx, &out)
        }
        "Dropout" => dropout(b, ctx, &out),
        "Constant" => constant(b, ctx, &out),
        "Shape" => shape(b, ctx, &out),
        "Cast" => cast(b, ctx, &out),
        "Split" => split(b, ctx),
        "Squeeze" | "Unsqueeze" => squeeze(b, ctx, &out),
        "Concat" => concat(b, ctx, &out),
        "LayerNormalization" => layer_norm(b, ctx),
        "Where" => where_op(b, ctx, &out),
        _ => {
            extra_outputs(ctx)?;
            let o = match ctx.op {
                "Gemm" => gemm(b, ctx)?,
                "MatMul" => {
                    one(ctx, &[])?;
                    matmul(b, ctx)?
                }
                "Add" | "Sub" | "Mul" | "Div" => {
                    one(ctx, &[])?;
                    binary(b, ctx)?
                }
                "Softmax" | "LogSoftmax" => softmax(b, ctx)?,
                "Conv" => conv(b, ctx)?,
                "ConvTranspose" => conv_transpose(b, ctx)?,
                "MaxPool" | "AveragePool" | "LpPool" => pool(b, ctx)?,
                "GlobalAveragePool" => global_average_pool(b, ctx)?,
                "BatchNormalization" => batch_norm(b, ctx)?,
                "Reshape" => reshape_op(b, ctx)?,
                "Expand" => expand(b, ctx)?,
                "Flatten" => flatten(b, ctx)?,
                "Transpose" => transpose(b, ctx)?,
                "Gather" => gather(b, ctx)?,
                "Slice" => slice(b, ctx)?,
                "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceL2"
                | "ReduceSumSquare" | "ReduceLogSumExp" => reduce(b, ctx)?,
                "Sum" | "Mean" | "Max" | "Min" => variadic(b, ctx)?,
                "HardSigmoid" => hard_sigmoid(b, ctx)?,
                "HardSwish" => hard_swish(b, ctx)?,
                "Mish" => mish(b, ctx)?,
                "LRN" => lrn(b, ctx)?,
                "Selu" => selu(b, ctx)?,
                "Softsign" => softsign(b, ctx)?,
                "PRelu" => prelu(b, ctx)?,
                "Pow" => pow(b, ctx)?,
                "GlobalMaxPool" => global_max_pool(b, ctx)?,
                "Celu" => celu(b, ctx)?,
                "Trilu" => trilu(b, ctx)?,
                "Tile" => tile(b, ctx)?,
                "Pad" => pad(b, ctx)?,
                "InstanceNormalization" | "GroupNormalization" => group_norm(b, ctx)?,
                "Clip" => clip(b, ctx)?,
                other => match row_of(other) {
                    Some((d, onnx)) => by_row(b, ctx, d, onnx)?,
                    None => {
                        // `supported` lists exactly the arms above
                        return Err(vec![
                            ctx.unsupported("op_type", format!("no mapping for {other}"))
                        ]);
                    }
                },
            };
            b.define(&out, o);
            Ok(())
        }
    };
    result
}

// ---- helpers ----

fn only(ctx: &Ctx<'_>, known: &[&str]) -> Mapped {
    let ps = ctx.only(known);
    if ps.is_empty() {
        Ok(())
    } else {
        Err(ps)
    }
}

/// [`only`] for mappings that return a single problem.
fn one(ctx: &Ctx<'_>, known: &[&str]) -> One<()> {
    ctx.only(known).into_iter().next().map_or(Ok(()), Err)
}

/// Outputs past the first that the model uses are not supported (batch norm's running
/// statistics, max pool's indices, layer norm's mean).
fn extra_outputs(ctx: &Ctx<'_>) -> Mapped {
    let ps: Vec<Problem> = ctx
        .node
        .output
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, o)| !o.is_empty())
        .map(|(i, _)| {
            ctx.unsupported(
                &format!("output[{i}]"),
                "only the first output is supported",
            )
        })
        .collect();
    if ps.is_empty() {
        Ok(())
    } else {
        Err(ps)
    }
}

/// The follow-on of an earlier problem (never reported).
fn upstream(ctx: &Ctx<'_>, name: &str) -> Problem {
    ctx.problem(
        crate::error::ProblemKind::Upstream,
        "input",
        format!("`{name}` could not be imported"),
    )
}

fn input<'a>(ctx: &Ctx<'a>, i: usize) -> One<&'a str> {
    ctx.input(i)
        .ok_or_else(|| ctx.unsupported(&format!("input[{i}]"), "required input missing"))
}

fn data(b: &mut Builder, ctx: &Ctx<'_>, i: usize) -> One<Operand> {
    let name = input(ctx, i)?;
    b.value(ctx, name)
}

/// A constant input (initializer or `Constant` output), as the mapping needs it at import time.
fn const_input<'b>(b: &'b Builder, ctx: &Ctx<'_>, i: usize) -> One<Option<&'b Constant>> {
    match ctx.input(i) {
        None => Ok(None),
        Some(name) if b.poisoned(name) => Err(upstream(ctx, name)),
        Some(name) if b.ids(name).is_some() => Err(ctx.problem(
            crate::error::ProblemKind::MustBeBound,
            &format!("input[{i}]"),
            format!(
                "`{}` is an integer graph input; this operand must be known at import: bind it (--bind NAME=FILE)",
                torchlean_ir::shorten(name)
            ),
        )),
        Some(name) => b.constant(name).map(Some).ok_or_else(|| {
            ctx.unsupported(
                &format!("input[{i}]"),
                format!("`{name}` must be a constant (an initializer or a Constant node)"),
            )
        }),
    }
}

fn const_ints(b: &Builder, ctx: &Ctx<'_>, i: usize) -> One<Option<Vec<i64>>> {
    match const_input(b, ctx, i)? {
        None => Ok(None),
        Some(c) => c
            .ints()
            .map(|v| Some(v.to_vec()))
            .ok_or_else(|| ctx.unsupported(&format!("input[{i}]"), "expected an integer tensor")),
    }
}

fn const_scalar(b: &Builder, ctx: &Ctx<'_>, i: usize) -> One<Option<f64>> {
    match const_input(b, ctx, i)? {
        None => Ok(None),
        Some(c) => c
            .single()
            .map(Some)
            .ok_or_else(|| ctx.unsupported(&format!("input[{i}]"), "expected a single value")),
    }
}

/// A number attribute (or bound) the IR stores: finite (the graph's JSON has no infinities in
/// attributes), `default` when absent.
fn finite(ctx: &Ctx<'_>, field: &str, v: Option<f64>, default: f64) -> One<f64> {
    match v {
        None => Ok(default),
        Some(v) if v.is_finite() => Ok(v),
        Some(v) => Err(ctx.unsupported(field, format!("{v}: only finite values"))),
    }
}

/// An ONNX axis (negative counts from the end) as an index below `rank`.
pub(crate) fn axis(ctx: &Ctx<'_>, field: &str, a: i64, rank: usize) -> One<usize> {
    let r = i64::try_from(rank).unwrap_or(i64::MAX);
    let a2 = if a < 0 { a + r } else { a };
    if (0..r).contains(&a2) {
        Ok(usize::try_from(a2).unwrap_or(0))
    } else {
        Err(ctx.unsupported(field, format!("axis {a} is outside rank {rank}")))
    }
}

fn weight_tensor(c: &Constant, ctx: &Ctx<'_>, field: &str) -> One<Tensor<f64>> {
    Tensor::new(c.shape.clone(), c.floats()).map_err(|e| ctx.unsupported(field, "").because(e))
}

/// A weight operand: an initializer (or a bound input) used only here, lifted to a payload
/// tensor; an initializer's gradient is reported under its name.
fn weight(b: &Builder, ctx: &Ctx<'_>, i: usize) -> One<(Option<String>, Tensor<f64>)> {
    let name = input(ctx, i)?;
    if b.poisoned(name) {
        return Err(upstream(ctx, name));
    }
    let field = format!("input[{i}]");
    let (initializer, c) = b.weight(name).ok_or_else(|| {
        ctx.problem(
            ProblemKind::NotAWeight,
            &field,
            format!("`{name}` must be an initializer (or an input bound with --bind NAME=FILE) used by this node only (it becomes the node's payload)"),
        )
    })?;
    Ok((
        initializer.map(str::to_string),
        weight_tensor(c, ctx, &field)?,
    ))
}

fn reshape(b: &mut Builder, ctx: &Ctx<'_>, x: &Operand, to: Shape) -> One<Operand> {
    if x.shape == to {
        return Ok(x.clone());
    }
    b.apply(
        ctx,
        Op::Reshape {
            from: x.shape.clone(),
            to,
        },
        &[x],
    )
}

fn broadcast(b: &mut Builder, ctx: &Ctx<'_>, x: &Operand, to: &Shape) -> One<Operand> {
    if &x.shape == to {
        return Ok(x.clone());
    }
    b.apply(
        ctx,
        Op::BroadcastTo {
            from: x.shape.clone(),
            to: to.clone(),
        },
        &[x],
    )
}

/// ONNX's (numpy's) multidirectional broadcast of two shapes.
pub(crate) fn broadcast_shape(a: &Shape, b: &Shape) -> Option<Shape> {
    let r = a.rank().max(b.rank());
    let dim = |s: &Shape, i: usize| -> usize {
        let lead = r - s.rank();
        if i < lead {
            1
        } else {
            s.dims()[i - lead]
        }
    };
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let (x, y) = (dim(a, i), dim(b, i));
        out.push(match (x, y) {
            _ if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        });
    }
    // each side reaches it through a `broadcast_to` node, whose shape rule checks it
    Some(Shape::new(out))
}

/// `op(a, b)` with ONNX broadcasting made explicit.
fn binary_of(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    op: BinaryOp,
    x: &Operand,
    y: &Operand,
) -> One<Operand> {
    let to = broadcast_shape(&x.shape, &y.shape).ok_or_else(|| {
        ctx.problem(
            crate::error::ProblemKind::Shape,
            "",
            format!("{} and {} do not broadcast", x.shape, y.shape),
        )
    })?;
    let x = broadcast(b, ctx, x, &to)?;
    let y = broadcast(b, ctx, y, &to)?;
    b.apply(ctx, Op::Binary(op), &[&x, &y])
}

fn product(dims: &[usize]) -> usize {
    dims.iter().product()
}

// ---- the ops ----

fn alias(b: &mut Builder, ctx: &Ctx<'_>, out: &str) -> Mapped {
    let x = input(ctx, 0).map_err(|p| vec![p])?;
    b.alias(out, x);
    Ok(())
}

fn dropout(b: &mut Builder, ctx: &Ctx<'_>, out: &str) -> Mapped {
    only(ctx, &["seed", "is_test", "ratio"])?;
    let mut ps = Vec::new();
    if ctx.node.output.get(1).is_some_and(|o| !o.is_empty()) {
        ps.push(ctx.unsupported("output[1]", "the mask output is not supported"));
    }
    match const_input(b, ctx, 2) {
        Ok(None) => {}
        Ok(Some(c)) if c.single() == Some(0.0) => {}
        Ok(Some(_)) => {
            ps.push(ctx.unsupported("training_mode", "only inference (false) is supported"))
        }
        Err(p) => ps.push(p),
    }
    if !ps.is_empty() {
        return Err(ps);
    }
    alias(b, ctx, out)
}

/// `Shape`: every shape is static at import, so the dims (from `start` to `end`, negative
/// values counted from the end, both clamped to the rank, as ONNX says) are an INT64 constant,
/// folded into whatever computes with it.
fn shape(b: &mut Builder, ctx: &Ctx<'_>, out: &str) -> Mapped {
    only(ctx, &["start", "end"])?;
    let x = input(ctx, 0).map_err(|p| vec![p])?;
    if b.poisoned(x) {
        return Err(vec![upstream(ctx, x)]);
    }
    let Some(dims) = b.shape_of(x) else {
        return Err(vec![ctx.problem(
            ProblemKind::Model,
            "input",
            format!(
                "`{}` is not produced by any earlier node",
                torchlean_ir::shorten(x)
            ),
        )]);
    };
    let rank = dims.rank() as i64;
    let at = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
    let (start, end) = (
        at(ctx.int("start").unwrap_or(0)),
        at(ctx.int("end").unwrap_or(rank)),
    );
    let kept: Vec<i64> = dims.dims()[start..end.max(start)]
        .iter()
        .map(|&d| d as i64)
        .collect();
    let c = Constant {
        shape: Shape::from([kept.len()]),
        values: Values::Int(kept),
    };
    b.define_const(out, c, None);
    Ok(())
}

fn constant(b: &mut Builder, ctx: &Ctx<'_>, out: &str) -> Mapped {
    only(
        ctx,
        &[
            "value",
            "value_float",
            "value_floats",
            "value_int",
            "value_ints",
        ],
    )?;
    let scalar = |v: Values| Constant {
        shape: Shape::scalar(),
        values: v,
    };
    let vector = |v: Values, n: usize| Constant {
        shape: Shape::from([n]),
        values: v,
    };
    let c = if let Some(t) = ctx.tensor("value") {
        decode(t).map_err(|i| {
            vec![i.onto(ctx.problem(crate::error::ProblemKind::BadTensor, "value", ""))]
        })?
    } else if let Some(f) = ctx.float("value_float") {
        scalar(Values::Float(vec![f]))
    } else if let Some(i) = ctx.int("value_int") {
        scalar(Values::Int(vec![i]))
    } else if let Some(fs) = ctx.floats("value_floats") {
        vector(
            Values::Float(fs.iter().map(|&x| f64::from(x)).collect()),
            fs.len(),
        )
    } else if let Some(is) = ctx.ints("value_ints") {
        vector(Values::Int(is.to_vec()), is.len())
    } else {
        return Err(vec![
            ctx.unsupported("value", "a Constant without a supported value")
        ]);
    };
    b.define_const(out, c, None);
    Ok(())
}

/// Cast to a floating type is the identity on values (the graph is evaluated in one dtype);
/// a constant is re-typed at import.
fn cast(b: &mut Builder, ctx: &Ctx<'_>, out: &str) -> Mapped {
    use crate::proto::tensor_proto::DataType;
    only(ctx, &["to", "saturate", "round_mode"])?;
    let to = DataType::try_from(ctx.int_or("to", 0) as i32).ok();
    let x = input(ctx, 0).map_err(|p| vec![p])?;
    let c = b.constant(x).cloned();
    match (to, c) {
        (Some(DataType::Float | DataType::Double), Some(c)) => {
            let shape = c.shape.clone();
            let values = Values::Float(c.floats());
            b.define_const(out, Constant { shape, values }, None);
            Ok(())
        }
        (Some(DataType::Int64 | DataType::Int32), Some(c)) if c.ints().is_some() => {
            b.define_const(out, c, None);
            Ok(())
        }
        (Some(DataType::Int64 | DataType::Int32), Some(c)) if c.bools().is_some() => {
            let shape = c.shape.clone();
            let values = Values::Int(c.floats().iter().map(|&v| v as i64).collect());
            b.define_const(out, Constant { shape, values }, None);
            Ok(())
        }
        (Some(DataType::Bool), Some(c)) => {
            let shape = c.shape.clone();
            let values = Values::Bool(c.floats().iter().map(|&v| v != 0.0).collect());
            b.define_const(out, Constant { shape, values }, None);
            Ok(())
        }
        (Some(DataType::Float | DataType::Double), None) => {
            b.alias(out, x);
            Ok(())
        }
        _ => Err(vec![ctx.unsupported(
            "to",
            format!(
                "cast to {} of a non-constant value",
                crate::tensor::dtype_name(ctx.int_or("to", 0) as i32)
            ),
        )]),
    }
}

/// A node whose op type an op's row names: the row's op, with the node's attributes renamed
/// onto the op's (an attribute the row does not list is refused; one absent keeps the op's
/// default, which is ONNX's), applied to the node's inputs in order.
fn by_row(b: &mut Builder, ctx: &Ctx<'_>, d: &'static OpDesc, onnx: Onnx) -> Many<Operand> {
    let known: Vec<&str> = onnx.attrs.iter().map(|(k, _)| *k).collect();
    only(ctx, &known)?;
    let Some(mut op) = d.prototype() else {
        return Err(vec![ctx.unsupported("op_type", "a graph kind")]);
    };
    let mut attrs = RowAttrs {
        ctx,
        renames: onnx.attrs,
        problems: Vec::new(),
    };
    op.visit_attrs(&mut attrs);
    if !attrs.problems.is_empty() {
        return Err(attrs.problems);
    }
    let Arity::Exact(n) = d.parents() else {
        return Err(vec![ctx.unsupported("op_type", "a variadic op")]);
    };
    let operands = (0..n)
        .map(|i| data(b, ctx, i))
        .collect::<One<Vec<Operand>>>()
        .map_err(|p| vec![p])?;
    let refs: Vec<&Operand> = operands.iter().collect();
    Ok(b.apply(ctx, op, &refs)?)
}

/// Writes a node's attributes onto a row's op, under the names the row gives them.
struct RowAttrs<'c, 'a> {
    ctx: &'c Ctx<'a>,
    renames: &'static [(&'static str, &'static str)],
    problems: Vec<Problem>,
}

impl AttrVisitor for RowAttrs<'_, '_> {
    fn visit(&mut self, key: &'static str, value: AttrMut<'_>) {
        let Some(&(onnx_key, _)) = self.renames.iter().find(|(_, ours)| *ours == key) else {
            return;
        };
        match value {
            AttrMut::Float(v) | AttrMut::FloatOr { value: v, .. } => {
                if let Some(f) = self.ctx.float(onnx_key) {
                    *v = f;
                }
            }
            AttrMut::Choice { value, options, .. } => match self.ctx.string(onnx_key) {
                None => {}
                Some(s) => match options.iter().find(|o| **o == s) {
                    Some(o) => *value = o,
                    None => self.problems.push(self.ctx.unsupported(
                        onnx_key,
                        format!(
                            "`{}`; one of {}",
                            torchlean_ir::shorten(&s),
                            options
                                .iter()
                                .map(|o| format!("\"{o}\""))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )),
                },
            },
            other => self.problems.push(self.ctx.unsupported(
                onnx_key,
                format!("a {} attribute is not read from ONNX", other.ty()),
            )),
        }
    }
}

fn binary(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    let op = match ctx.op {
        "Add" => BinaryOp::Add,
        "Sub" => BinaryOp::Sub,
        "Mul" => BinaryOp::Mul,
        _ => BinaryOp::Div,
    };
    let x = data(b, ctx, 0)?;
    let y = data(b, ctx, 1)?;
    binary_of(b, ctx, op, &x, &y)
}

/// `Gemm`: a `linear` node when it is one (`transB`, `alpha = beta = 1`, weight and bias
/// initializers used only here); otherwise transposes, `matmul`, `scale` and a broadcast `add`.
fn gemm(b: &mut Builder, ctx: &Ctx<'_>) -> Many<Operand> {
    only(ctx, &["alpha", "beta", "transA", "transB"])?;
    let alpha = finite(ctx, "alpha", ctx.float("alpha"), 1.0)?;
    let beta = finite(ctx, "beta", ctx.float("beta"), 1.0)?;
    let trans_a = ctx.int_or("transA", 0) != 0;
    let trans_b = ctx.int_or("transB", 0) != 0;
    let go = |b: &mut Builder| -> One<Operand> {
        let a = data(b, ctx, 0)?;
        let bias_ok = match ctx.input(2) {
            None => true,
            Some(c) => b.weight(c).is_some_and(|(_, c)| c.shape.rank() == 1),
        };
        let linear = !trans_a
            && trans_b
            && alpha == 1.0
            && beta == 1.0
            && bias_ok
            && ctx.input(1).is_some_and(|w| b.weight(w).is_some());
        if linear {
            let w = weight(b, ctx, 1)?;
            let bias = match ctx.input(2) {
                Some(_) => weight(b, ctx, 2)?,
                None => {
                    let out = w.1.shape().dims().first().copied().unwrap_or(0);
                    let zeros = Tensor::zeros([out])
                        .map_err(|e| ctx.unsupported("input[1]", "").because(e))?;
                    (None, zeros)
                }
            };
            return b.apply_with(ctx, Op::Linear, &[&a], vec![w, bias], None);
        }
        let t = |b: &mut Builder, x: Operand, yes: bool| -> One<Operand> {
            if yes {
                b.apply(ctx, Op::Permute { perm: vec![1, 0] }, &[&x])
            } else {
                Ok(x)
            }
        };
        let a = t(b, a, trans_a)?;
        let w = data(b, ctx, 1)?;
        let w = t(b, w, trans_b)?;
        let mut y = b.apply(ctx, Op::MatMul, &[&a, &w])?;
        if alpha != 1.0 {
            y = b.apply(ctx, Op::Scale { c: alpha }, &[&y])?;
        }
        if ctx.input(2).is_some() {
            let mut c = data(b, ctx, 2)?;
            if beta != 1.0 {
                c = b.apply(ctx, Op::Scale { c: beta }, &[&c])?;
            }
            y = binary_of(b, ctx, BinaryOp::Add, &y, &c)?;
        }
        Ok(y)
    };
    Ok(go(b)?)
}

/// `MatMul` (numpy semantics) through the IR's `matmul` (`[m,n]·[n,p]`, `[b,m,n]·[b,n,p]`):
/// a matrix right operand multiplies the left one's rows flattened; otherwise the batch axes
/// are broadcast and flattened into one.
/// A rank-1 operand is promoted as numpy does (`[n]` to `[1, n]` on the left, `[n, 1]` on
/// the right) and the promoted axis removed from the product.
fn matmul(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    let x = data(b, ctx, 0)?;
    let y = data(b, ctx, 1)?;
    let (rx, ry) = (x.shape.rank(), y.shape.rank());
    if rx == 0 || ry == 0 {
        return Err(ctx.unsupported(
            "input",
            format!("a scalar operand ({} · {})", x.shape, y.shape),
        ));
    }
    if rx > 1 && ry > 1 {
        return matmul_of(b, ctx, &x, &y);
    }
    let xp = match rx {
        1 => reshape(b, ctx, &x, Shape::from([1, x.shape.dims()[0]]))?,
        _ => x.clone(),
    };
    let yp = match ry {
        1 => reshape(b, ctx, &y, Shape::from([y.shape.dims()[0], 1]))?,
        _ => y.clone(),
    };
    let z = matmul_of(b, ctx, &xp, &yp)?;
    let mut dims = z.shape.dims().to_vec();
    if ry == 1 {
        dims.pop();
    }
    if rx == 1 {
        dims.remove(dims.len() - 1 - usize::from(ry != 1));
    }
    reshape(b, ctx, &z, Shape::new(dims))
}

/// [`matmul`] of two operands of rank 2 or more.
fn matmul_of(b: &mut Builder, ctx: &Ctx<'_>, x: &Operand, y: &Operand) -> One<Operand> {
    let (x, y) = (x.clone(), y.clone());
    let (rx, ry) = (x.shape.rank(), y.shape.rank());
    let (m, n) = (x.shape.dims()[rx - 2], x.shape.dims()[rx - 1]);
    let p = y.shape.dims()[ry - 1];
    if rx == 2 && ry == 2 {
        return b.apply(ctx, Op::MatMul, &[&x, &y]);
    }
    let lead_x = &x.shape.dims()[..rx - 2];
    if ry == 2 {
        let rows = reshape(b, ctx, &x, Shape::from([product(lead_x) * m, n]))?;
        let z = b.apply(ctx, Op::MatMul, &[&rows, &y])?;
        let mut dims = lead_x.to_vec();
        dims.extend([m, p]);
        return reshape(b, ctx, &z, Shape::new(dims));
    }
    let lead_y = Shape::from_slice(&y.shape.dims()[..ry - 2]);
    let lead = broadcast_shape(&Shape::from_slice(lead_x), &lead_y).ok_or_else(|| {
        ctx.problem(
            crate::error::ProblemKind::Shape,
            "",
            format!("batch axes of {} and {} do not broadcast", x.shape, y.shape),
        )
    })?;
    let full = |last: [usize; 2]| {
        let mut d = lead.dims().to_vec();
        d.extend(last);
        Shape::new(d)
    };
    let batch = product(lead.dims());
    let k = y.shape.dims()[ry - 2];
    let xb = broadcast(b, ctx, &x, &full([m, n]))?;
    let yb = broadcast(b, ctx, &y, &full([k, p]))?;
    let x3 = reshape(b, ctx, &xb, Shape::from([batch, m, n]))?;
    let y3 = reshape(b, ctx, &yb, Shape::from([batch, k, p]))?;
    let z = b.apply(ctx, Op::MatMul, &[&x3, &y3])?;
    reshape(b, ctx, &z, full([m, p]))
}

/// `Softmax`/`LogSoftmax`: from opset 13 along `axis` (default -1); before, over the axes from
/// `axis` (default 1) flattened together.
fn softmax(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["axis"])?;
    let x = data(b, ctx, 0)?;
    let rank = x.shape.rank();
    let make = |axis| {
        if ctx.op == "Softmax" {
            Op::Softmax { axis }
        } else {
            Op::LogSoftmax { axis }
        }
    };
    if b.opset >= 13 {
        let a = axis(ctx, "axis", ctx.int_or("axis", -1), rank)?;
        return b.apply(ctx, make(a), &[&x]);
    }
    let a = axis(ctx, "axis", ctx.int_or("axis", 1), rank)?;
    if a + 1 == rank {
        return b.apply(ctx, make(a), &[&x]);
    }
    let d = x.shape.dims();
    let flat = reshape(
        b,
        ctx,
        &x,
        Shape::from([product(&d[..a]), product(&d[a..])]),
    )?;
    let y = b.apply(ctx, make(1), &[&flat])?;
    reshape(b, ctx, &y, x.shape.clone())
}

/// The one value of a per-axis attribute pair (strides, pads) the IR's single field can hold.
fn uniform(ctx: &Ctx<'_>, field: &str, values: &[i64], default: i64) -> One<usize> {
    let v = values.first().copied().unwrap_or(default);
    if values.iter().any(|&x| x != v) {
        return Err(ctx.unsupported(
            field,
            format!("{values:?}: the IR takes one value for every axis and side"),
        ));
    }
    usize::try_from(v).map_err(|_| ctx.unsupported(field, format!("{values:?}: negative")))
}

fn rank4(ctx: &Ctx<'_>, x: &Operand) -> One<()> {
    if x.shape.rank() == 4 {
        Ok(())
    } else {
        Err(ctx.unsupported("input[0]", format!("{}: only [N, C, H, W] inputs", x.shape)))
    }
}

/// `Conv` on `[N, C, H, W]` (or `[N, C, L]`, as `1 × L`): the IR's `conv2d` with `group` and one `dilations` value; `pads`
/// that differ by side or axis, and `auto_pad`'s, are applied by an explicit zero pad first.
fn conv(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    if let Some(p) = ctx
        .only(&[
            "auto_pad",
            "dilations",
            "group",
            "kernel_shape",
            "pads",
            "strides",
        ])
        .into_iter()
        .next()
    {
        return Err(p);
    }
    let mut x = data(b, ctx, 0)?;
    let mut w = weight(b, ctx, 1)?;
    if let Some(k) = ctx.ints("kernel_shape") {
        let wd = w.1.shape().dims();
        if k.iter()
            .map(|&v| usize::try_from(v).ok())
            .ne(wd.iter().skip(2).map(|&v| Some(v)))
        {
            return Err(ctx.unsupported(
                "kernel_shape",
                format!("{k:?} disagrees with the weight {}", w.1.shape()),
            ));
        }
    }
    let one_d;
    (x, w.1, one_d) = conv_as_2d(b, ctx, x, w.1)?;
    rank4(ctx, &x)?;
    let wd = w.1.shape().dims().to_vec();
    if wd.len() != 4 {
        return Err(ctx.unsupported(
            "input[1]",
            format!("weight {}: only 1-D and 2-D kernels", w.1.shape()),
        ));
    }
    let groups = usize::try_from(ctx.int_or("group", 1))
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| ctx.unsupported("group", format!("{}", ctx.int_or("group", 1))))?;
    let stride = uniform(ctx, "strides", ctx.ints("strides").unwrap_or(&[]), 1)?;
    let dilation = uniform(ctx, "dilations", ctx.ints("dilations").unwrap_or(&[]), 1)?;
    // the windows are the dilated kernel's extents; `PoolWindow` reads `pads` and `auto_pad`
    let span = |k: usize| {
        dilated_extent(k, dilation).ok_or_else(|| ctx.unsupported("dilations", "a zero dilation"))
    };
    let dims = x.shape.dims();
    let spans = [span(wd[2])?, span(wd[3])?];
    let window = PoolWindow::of(ctx, &dims[2..4], &spans, &[1, 1], &[stride, stride])?;
    // a bias the node cannot own (an initializer other nodes use too, as exporters make of
    // equal folded biases, or a computed value) is added after a zero bias, as data
    let zeros = || Tensor::zeros([wd[0]]).map_err(|e| ctx.unsupported("input[1]", "").because(e));
    let (bias, late_bias) = match ctx.input(2) {
        None => ((None, zeros()?), None),
        Some(name) if b.weight(name).is_some() => (weight(b, ctx, 2)?, None),
        Some(_) => ((None, zeros()?), Some(data(b, ctx, 2)?)),
    };
    let (x, padding) = match window.symmetric() {
        Some(p) => (x, p),
        None => (window.pad(b, ctx, &x, 0.0)?, 0),
    };
    let spec = Conv2dSpec {
        in_channels: wd[1] * groups,
        out_channels: wd[0],
        kernel_h: wd[2],
        kernel_w: wd[3],
        stride,
        padding,
        groups,
        dilation,
    };
    let mut y = b.apply_with(ctx, Op::Conv2d(spec), &[&x], vec![w, bias], None)?;
    if let Some(bias) = late_bias {
        let column = reshape(b, ctx, &bias, Shape::from([wd[0], 1, 1]))?;
        y = binary_of(b, ctx, BinaryOp::Add, &y, &column)?;
    }
    if one_d {
        y = drop_unit_height(b, ctx, &y)?;
    }
    Ok(y)
}

/// A 2-D result `[N, C, 1, L]` of a 1-D convolution or pool, as the 1-D `[N, C, L]`.
fn drop_unit_height(b: &mut Builder, ctx: &Ctx<'_>, y: &Operand) -> One<Operand> {
    let d = y.shape.dims().to_vec();
    reshape(b, ctx, y, Shape::from([d[0], d[1], d[3]]))
}

/// A 1-D convolution's input `[N, C, L]` and kernel `[A, B, k]` as a 2-D one's over a height
/// of 1 (`[N, C, 1, L]`, `[A, B, 1, k]`: the payload holds the weight so); anything else as
/// given. The flag says which.
fn conv_as_2d(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    x: Operand,
    w: Tensor<f64>,
) -> One<(Operand, Tensor<f64>, bool)> {
    if x.shape.rank() != 3 || w.shape().rank() != 3 {
        return Ok((x, w, false));
    }
    let (d, k) = (x.shape.dims().to_vec(), w.shape().dims().to_vec());
    let x = reshape(b, ctx, &x, Shape::from([d[0], d[1], 1, d[2]]))?;
    let w = w
        .reshaped(Shape::from([k[0], k[1], 1, k[2]]))
        .map_err(|e| ctx.unsupported("input[1]", "").because(e))?;
    Ok((x, w, true))
}

/// `ConvTranspose` (2-D, or 1-D as `1 × L`) as a convolution: `stride − 1` zeros inserted
/// between the input's elements along each axis, the result padded by `dilation·(k − 1) −
/// pad_begin` before and `dilation·(k − 1) − pad_end + output_padding` after (a negative amount
/// crops), then `conv2d` at stride 1 with the kernel flipped and its channel axes swapped per
/// group. The weight is transformed at import, so it is held as the convolution's payload and
/// no gradient is reported under the initializer's name.
fn conv_transpose(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    if let Some(p) = ctx
        .only(&[
            "auto_pad",
            "dilations",
            "group",
            "kernel_shape",
            "output_padding",
            "output_shape",
            "pads",
            "strides",
        ])
        .into_iter()
        .next()
    {
        return Err(p);
    }
    let x = data(b, ctx, 0)?;
    let (_, w) = weight(b, ctx, 1)?;
    let (x, w, one_d) = conv_as_2d(b, ctx, x, w)?;
    // per-axis attribute values over (H, W): a 1-D node's one value is W's, H's the default
    // (the identity: stride 1, no output padding)
    let per_axis = |field: &str, default: i64| -> One<[i64; 2]> {
        let v = ctx.ints(field).unwrap_or(&[]);
        match (v.len(), one_d) {
            (0, _) => Ok([default, default]),
            (1, true) => Ok([default, v[0]]),
            (2, false) => Ok([v[0], v[1]]),
            _ => Err(ctx.unsupported(field, format!("{v:?}: one value per spatial axis"))),
        }
    };
    rank4(ctx, &x)?;
    let wd = w.shape().dims().to_vec();
    let xd = x.shape.dims().to_vec();
    let groups = usize::try_from(ctx.int_or("group", 1))
        .ok()
        .filter(|&g| g > 0 && xd[1] % g == 0)
        .ok_or_else(|| ctx.unsupported("group", format!("{}", ctx.int_or("group", 1))))?;
    if wd.len() != 4 || wd[0] != xd[1] {
        return Err(ctx.unsupported(
            "input[1]",
            format!(
                "weight {} for {} input channels: [C_in, C_out/group, kH, kW] expected",
                w.shape(),
                xd[1]
            ),
        ));
    }
    if let Some(k) = ctx.ints("kernel_shape") {
        let want: Vec<i64> = wd[2..]
            .iter()
            .skip(usize::from(one_d))
            .map(|&v| v as i64)
            .collect();
        if k != want.as_slice() {
            return Err(ctx.unsupported(
                "kernel_shape",
                format!("{k:?} disagrees with the weight {}", w.shape()),
            ));
        }
    }
    let dilation = uniform(ctx, "dilations", ctx.ints("dilations").unwrap_or(&[]), 1)?;
    let strides = per_axis("strides", 1)?;
    let out_pad = per_axis("output_padding", 0)?;
    if strides.iter().any(|&s| s < 1)
        || out_pad
            .iter()
            .zip(&strides)
            .any(|(&o, &s)| o < 0 || o >= s.max(dilation as i64))
    {
        return Err(ctx.unsupported(
            "output_padding",
            format!("{out_pad:?} with strides {strides:?}"),
        ));
    }
    let kernel = [wd[2] as i64, wd[3] as i64];
    let span = |a: usize| (kernel[a] - 1) * dilation as i64 + 1;
    let full = |a: usize| strides[a] * (xd[2 + a] as i64 - 1) + out_pad[a] + span(a);
    let auto = ctx.string("auto_pad").unwrap_or_else(|| "NOTSET".into());
    // (begin, end) per axis from the padding the output drops in total (Python's floor
    // division, as ONNX's reference computes it)
    let split = |total: i64| {
        let half = total.div_euclid(2);
        if auto == "SAME_UPPER" {
            (half, total - half)
        } else {
            (total - half, half)
        }
    };
    // `output_shape` (its spatial extents) fixes the output; the padding then follows from
    // it: split as `auto_pad` says, or, without, the given begin and whatever end makes it
    let target: Option<[i64; 2]> = ctx.ints("output_shape").map(|out| {
        let spatial: Vec<i64> = out
            .iter()
            .rev()
            .take(2 - usize::from(one_d))
            .rev()
            .copied()
            .collect();
        if one_d {
            [1, spatial.first().copied().unwrap_or(0)]
        } else {
            [
                spatial.first().copied().unwrap_or(0),
                spatial.get(1).copied().unwrap_or(0),
            ]
        }
    });
    let mut pads: [(i64, i64); 2] = match auto.as_str() {
        "NOTSET" | "VALID" => {
            let p = if auto == "VALID" {
                &[][..]
            } else {
                ctx.ints("pads").unwrap_or(&[])
            };
            match (p.len(), one_d) {
                (0, _) => [(0, 0); 2],
                (2, true) => [(0, 0), (p[0], p[1])],
                (4, false) => [(p[0], p[2]), (p[1], p[3])],
                _ => {
                    return Err(
                        ctx.unsupported("pads", format!("{p:?}: begin and end per spatial axis"))
                    )
                }
            }
        }
        "SAME_UPPER" | "SAME_LOWER" => {
            let out = target.unwrap_or([xd[2] as i64 * strides[0], xd[3] as i64 * strides[1]]);
            [split(full(0) - out[0]), split(full(1) - out[1])]
        }
        other => {
            return Err(ctx.unsupported("auto_pad", format!("`{}`", torchlean_ir::shorten(other))))
        }
    };
    if let Some(out) = target {
        if out.iter().any(|&n| n < 1) {
            return Err(ctx.unsupported("output_shape", format!("{out:?}")));
        }
        for a in 0..2 {
            pads[a].1 = full(a) - pads[a].0 - out[a];
        }
    }
    let mut y = x;
    for a in 0..2 {
        y = insert_zeros(b, ctx, &y, 2 + a, strides[a] as usize)?;
        let grow = span(a) - 1;
        let (begin, end) = pads[a];
        let zero = ("constant", &PadValue::Constant(0.0));
        y = pad_axis(
            b,
            ctx,
            &y,
            2 + a,
            (grow - begin, grow - end + out_pad[a]),
            zero,
        )?;
    }
    // the convolution's kernel: [C_out, C_in/group, kH, kW], flipped, per group
    let (cin_g, cout_g) = (xd[1] / groups, wd[1]);
    let (kh, kw) = (wd[2], wd[3]);
    let wt = w.data();
    let flipped = Tensor::from_fn([cout_g * groups, cin_g, kh, kw], |i| {
        let (g, co) = (i[0] / cout_g, i[0] % cout_g);
        let ci = g * cin_g + i[1];
        wt[((ci * cout_g + co) * kh + (kh - 1 - i[2])) * kw + (kw - 1 - i[3])]
    })
    .map_err(|e| ctx.unsupported("input[1]", "").because(e))?;
    let bias = match ctx.input(2) {
        None => (
            None,
            Tensor::zeros([cout_g * groups])
                .map_err(|e| ctx.unsupported("input[1]", "").because(e))?,
        ),
        Some(_) => weight(b, ctx, 2)?,
    };
    let spec = Conv2dSpec {
        in_channels: xd[1],
        out_channels: cout_g * groups,
        kernel_h: kh,
        kernel_w: kw,
        stride: 1,
        padding: 0,
        groups,
        dilation,
    };
    let mut y = b.apply_with(
        ctx,
        Op::Conv2d(spec),
        &[&y],
        vec![(None, flipped), bias],
        None,
    )?;
    if one_d {
        y = drop_unit_height(b, ctx, &y)?;
    }
    Ok(y)
}

/// `x` with `s − 1` zeros after each element along `axis` but the last (a transposed
/// convolution's input at stride `s`): a unit axis beside `axis`, zeros concatenated on it,
/// the two axes merged, the trailing zeros sliced off.
fn insert_zeros(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    x: &Operand,
    axis: usize,
    s: usize,
) -> One<Operand> {
    if s <= 1 {
        return Ok(x.clone());
    }
    let dims = x.shape.dims().to_vec();
    let n = dims[axis];
    let mut split = dims.clone();
    split.insert(axis + 1, 1);
    let column = reshape(b, ctx, x, Shape::new(split.clone()))?;
    split[axis + 1] = s - 1;
    let zeros =
        Tensor::zeros(Shape::new(split)).map_err(|e| ctx.unsupported("strides", "").because(e))?;
    let zeros = b.constant_tensor(zeros);
    let spread = b.apply(ctx, Op::Concat { axis: axis + 1 }, &[&column, &zeros])?;
    let mut merged = dims;
    merged[axis] = n * s;
    let flat = reshape(b, ctx, &spread, Shape::new(merged))?;
    b.apply(
        ctx,
        Op::Slice {
            axis,
            start: 0,
            len: s * (n - 1) + 1,
        },
        &[&flat],
    )
}

/// `MaxPool` / `AveragePool` / `LpPool` over 1, 2 or 3 spatial axes. A max or average pool of
/// 1 or 2 axes with one stride and no dilation is the IR's 2-D pool kind ([`pool_window`]; a
/// 1-D one over a height of 1); any other ([`pool_by_offsets`]: dilations, 3-D, a stride per
/// axis, an Lp norm) folds the input's strided slices, one per kernel position.
fn pool(b: &mut Builder, ctx: &Ctx<'_>) -> Many<Operand> {
    let windows = [
        "auto_pad",
        "ceil_mode",
        "dilations",
        "kernel_shape",
        "pads",
        "strides",
    ];
    let own: &[&str] = match ctx.op {
        "MaxPool" => &["storage_order"],
        "AveragePool" => &["count_include_pad"],
        _ => &["p"],
    };
    let known: Vec<&str> = windows.iter().chain(own).copied().collect();
    let mut ps = ctx.only(&known);
    if ctx.int_or("storage_order", 0) != 0 {
        ps.push(ctx.unsupported("storage_order", "only 0 (row major)"));
    }
    let fold = match ctx.op {
        "MaxPool" => Fold::Max,
        "AveragePool" => Fold::Average {
            count_pads: ctx.int_or("count_include_pad", 0) != 0,
        },
        _ => match ctx.int_or("p", 2) {
            p @ 1..=4 => Fold::Norm { p: p as u32 },
            p => {
                ps.push(ctx.unsupported("p", format!("{p}: 1, 2, 3 or 4")));
                Fold::Norm { p: 2 }
            }
        },
    };
    let k = ctx.ints("kernel_shape").unwrap_or(&[]);
    let kernel: Vec<usize> = k.iter().filter_map(|&v| usize::try_from(v).ok()).collect();
    if !matches!(kernel.len(), 1..=3) || k.len() != kernel.len() {
        ps.push(ctx.unsupported(
            "kernel_shape",
            format!("{k:?}: a 1-D, 2-D or 3-D kernel is required"),
        ));
    }
    let per_axis = |field: &str| per_axis(ctx, field, kernel.len());
    let (strides, dilations) = match (per_axis("strides"), per_axis("dilations")) {
        (Ok(s), Ok(d)) if ps.is_empty() => (s, d),
        (s, d) => {
            ps.extend(s.err());
            ps.extend(d.err());
            return Err(ps);
        }
    };
    let x = data(b, ctx, 0)?;
    let r = kernel.len();
    if x.shape.rank() != r + 2 {
        return Err(vec![ctx.unsupported(
            "input[0]",
            format!(
                "{}: a {r}-D pool takes [N, C] and {r} spatial axes",
                x.shape
            ),
        )]);
    }
    let window = PoolWindow::of(ctx, &x.shape.dims()[2..], &kernel, &dilations, &strides)?;
    let stride = strides[0];
    let ir_kind = !matches!(fold, Fold::Norm { .. })
        && r <= 2
        && dilations.iter().all(|&d| d == 1)
        && strides.iter().all(|&s| s == stride);
    if !ir_kind {
        return Ok(pool_by_offsets(b, ctx, &x, &window, fold)?);
    }
    if r == 2 {
        return Ok(pool_window(b, ctx, &x, &window, stride, fold)?);
    }
    // a 1-D pool over `[N, C, L]` is a 2-D one over `[N, C, 1, L]` with a `1 × k` window
    let d = x.shape.dims().to_vec();
    let x = reshape(b, ctx, &x, Shape::from([d[0], d[1], 1, d[2]]))?;
    let window = window.under_a_unit_axis();
    let y = pool_window(b, ctx, &x, &window, stride, fold)?;
    Ok(drop_unit_height(b, ctx, &y)?)
}

/// A pool attribute with one positive value per spatial axis (`strides`, `dilations`; 1 for
/// each when absent).
fn per_axis(ctx: &Ctx<'_>, field: &str, rank: usize) -> One<Vec<usize>> {
    let values = ctx.ints(field).unwrap_or(&[]);
    if values.is_empty() {
        return Ok(vec![1; rank]);
    }
    let positive: Vec<usize> = values
        .iter()
        .filter_map(|&v| usize::try_from(v).ok().filter(|&v| v > 0))
        .collect();
    if positive.len() != values.len() || values.len() != rank {
        return Err(ctx.unsupported(
            field,
            format!("{values:?}: one positive value per spatial axis ({rank})"),
        ));
    }
    Ok(positive)
}

/// A 2-D max or average pool (`fold`) of `x` over `window` (undilated, one `stride`).
fn pool_window(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    x: &Operand,
    window: &PoolWindow,
    stride: usize,
    fold: Fold,
) -> One<Operand> {
    let max = fold == Fold::Max;
    let [h, w] = [window.axes[0], window.axes[1]];
    let count_pads = matches!(fold, Fold::Average { count_pads: true });
    let kind = if max { PoolKind::Max } else { PoolKind::Avg };
    if let Some(padding) = window.symmetric() {
        // the IR's own padded pools (padding at most half the kernel): max pads with −∞, the
        // average counts padded zeros
        let within = 2 * padding <= h.kernel.min(w.kernel);
        if within && (max || padding == 0 || count_pads) {
            let spec = PoolSpec {
                kind,
                kernel_h: h.kernel,
                kernel_w: w.kernel,
                stride,
                padding,
                padded: padding > 0,
            };
            return b.apply(ctx, Op::Pool(spec), &[x]);
        }
    }
    // otherwise: pad explicitly (−∞ for max, 0 for the average), pool unpadded, and rescale
    // each average from the full window to the elements it counts
    let y = window.pad(b, ctx, x, pool_fill(max))?;
    let spec = PoolSpec {
        kind,
        kernel_h: h.kernel,
        kernel_w: w.kernel,
        stride,
        padding: 0,
        padded: false,
    };
    let pooled = b.apply(ctx, Op::Pool(spec), &[&y])?;
    if max {
        return Ok(pooled);
    }
    let full = (h.kernel * w.kernel) as f64;
    let s = b.constant_tensor(window.average_scale(count_pads, full));
    binary_of(b, ctx, BinaryOp::Mul, &pooled, &s)
}

/// How a pool folds the elements of each window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fold {
    /// `MaxPool`: the largest.
    Max,
    /// `AveragePool`: the mean over the counted elements (with the declared padding, as
    /// zeros, when `count_pads`).
    Average { count_pads: bool },
    /// `LpPool`: `(Σ |x|^p)^(1/p)`.
    Norm { p: u32 },
}

/// A pool of any windows as the IR's elementwise kinds: the input padded explicitly (−∞ for
/// max, zeros otherwise), then for each kernel position the strided slice of the elements it
/// sees at every output position; the max of those slices, their sum scaled by each window's
/// count, or the `p`-th root of the sum of their `|x|^p` ([`power`]: a root other than a
/// square's needs a positive sum). Exact where its kinds are, and differentiable as `max_elem`
/// and `add` are (a tie splits the cotangent, as `torch.maximum` does).
fn pool_by_offsets(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    x: &Operand,
    window: &PoolWindow,
    fold: Fold,
) -> One<Operand> {
    let y = window.pad(b, ctx, x, pool_fill(fold == Fold::Max))?;
    let kernel: Vec<usize> = window.axes.iter().map(|a| a.kernel).collect();
    let mut acc: Option<Operand> = None;
    let mut offset = vec![0; kernel.len()];
    loop {
        let mut part = y.clone();
        for (a, (w, &j)) in window.axes.iter().zip(&offset).enumerate() {
            part = strided_take(b, ctx, &part, 2 + a, j * w.dilation, w.stride, w.out)?;
        }
        if let Fold::Norm { p } = fold {
            let abs = b.apply(ctx, Op::Unary(UnaryOp::Abs), &[&part])?;
            part = power(b, ctx, &abs, f64::from(p), "p")?;
        }
        acc = Some(match acc {
            None => part,
            Some(sum) => {
                let op = if fold == Fold::Max {
                    BinaryOp::Max
                } else {
                    BinaryOp::Add
                };
                b.apply(ctx, Op::Binary(op), &[&sum, &part])?
            }
        });
        // the next kernel position, the last axis fastest
        let Some(a) = (0..kernel.len()).rev().find(|&a| offset[a] + 1 < kernel[a]) else {
            break;
        };
        offset[a] += 1;
        offset[a + 1..].iter_mut().for_each(|o| *o = 0);
    }
    let acc = acc.expect("a kernel has at least one position");
    match fold {
        Fold::Max => Ok(acc),
        Fold::Average { count_pads } => {
            let s = b.constant_tensor(window.average_scale(count_pads, 1.0));
            binary_of(b, ctx, BinaryOp::Mul, &acc, &s)
        }
        Fold::Norm { p } => power(b, ctx, &acc, 1.0 / f64::from(p), "p"),
    }
}

/// What a pool pads with: `−∞` for max (it never wins), 0 for the average (its count leaves
/// the padding out, or counts it as zeros).
fn pool_fill(max: bool) -> f64 {
    if max {
        f64::NEG_INFINITY
    } else {
        0.0
    }
}

/// Positions `start, start + stride, …` (`count` of them) of axis `a`: a slice, and for a
/// stride above 1 that slice (zero-padded at the end to whole strides) viewed as `[count,
/// stride]` with the first column kept.
fn strided_take(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    x: &Operand,
    a: usize,
    start: usize,
    stride: usize,
    count: usize,
) -> One<Operand> {
    let slice = |b: &mut Builder, x: &Operand, axis, start, len| {
        b.apply(ctx, Op::Slice { axis, start, len }, &[x])
    };
    if stride == 1 || count == 1 {
        return slice(b, x, a, start, count);
    }
    let len = stride * count;
    let n = x.shape.dims()[a];
    let mut y = x.clone();
    if start + len > n {
        let zero = ("constant", &PadValue::Constant(0.0));
        y = pad_axis(b, ctx, &y, a, (0, (start + len - n) as i64), zero)?;
    }
    let y = slice(b, &y, a, start, len)?;
    let mut split = y.shape.dims().to_vec();
    split[a] = count;
    split.insert(a + 1, stride);
    let y = reshape(b, ctx, &y, Shape::new(split.clone()))?;
    let y = slice(b, &y, a + 1, 0, 1)?;
    split.remove(a + 1);
    reshape(b, ctx, &y, Shape::new(split))
}

/// One spatial axis of a pool's (or a convolution's) windows.
#[derive(Clone, Copy, Debug)]
struct AxisWindow {
    input: usize,
    kernel: usize,
    dilation: usize,
    stride: usize,
    /// All padding (declared and `ceil_mode`'s), `(before, after)`.
    pads: (usize, usize),
    /// The declared padding (what `count_include_pad` counts).
    declared: (usize, usize),
    out: usize,
}

impl AxisWindow {
    /// How many of the window's kernel positions at output `o` fall in `[lo, hi)` (padded
    /// coordinates).
    fn count_within(&self, o: usize, (lo, hi): (usize, usize)) -> usize {
        let start = o * self.stride;
        (0..self.kernel)
            .map(|j| start + j * self.dilation)
            .filter(|p| (lo..hi).contains(p))
            .count()
    }
}

/// A pool's windows over its spatial axes: per axis the padding before and after (from
/// `pads`, `auto_pad` and, with `ceil_mode`, the extra end padding that makes a partial last
/// window), the declared padding alone, and the output extent.
struct PoolWindow {
    axes: Vec<AxisWindow>,
}

impl PoolWindow {
    /// The windows of `kernel` (dilated by `dilation`) at `stride` over spatial extents
    /// `input`, one value of each per axis.
    fn of(
        ctx: &Ctx<'_>,
        input: &[usize],
        kernel: &[usize],
        dilation: &[usize],
        stride: &[usize],
    ) -> One<PoolWindow> {
        if stride.contains(&0) || kernel.contains(&0) || dilation.contains(&0) {
            return Err(ctx.unsupported("strides", "a zero stride, dilation or kernel extent"));
        }
        let r = input.len();
        let span = |a: usize| (kernel[a] - 1) * dilation[a] + 1;
        let auto = ctx.string("auto_pad").unwrap_or_else(|| "NOTSET".into());
        let declared: Vec<(usize, usize)> = match auto.as_str() {
            "VALID" => vec![(0, 0); r],
            "NOTSET" => {
                let p = ctx.ints("pads").unwrap_or(&[]);
                let get = |i: usize| -> One<usize> {
                    usize::try_from(p.get(i).copied().unwrap_or(0))
                        .map_err(|_| ctx.unsupported("pads", format!("{p:?}: negative")))
                };
                // a 1-D convolution's window (embedded as `1 × k` over a height of 1) has two
                let one_d = r == 2 && input[0] == 1 && kernel[0] == 1;
                match p.len() {
                    0 => vec![(0, 0); r],
                    2 if one_d => vec![(0, 0), (get(0)?, get(1)?)],
                    n if n == 2 * r => (0..r)
                        .map(|a| Ok((get(a)?, get(r + a)?)))
                        .collect::<One<_>>()?,
                    _ => {
                        return Err(ctx.unsupported(
                            "pads",
                            format!("{p:?}: two values per spatial axis ({r})"),
                        ))
                    }
                }
            }
            "SAME_UPPER" | "SAME_LOWER" => (0..r)
                .map(|a| {
                    let out = input[a].div_ceil(stride[a]);
                    let total =
                        ((out.saturating_sub(1)) * stride[a] + span(a)).saturating_sub(input[a]);
                    let small = total / 2;
                    if auto == "SAME_UPPER" {
                        (small, total - small)
                    } else {
                        (total - small, small)
                    }
                })
                .collect(),
            other => {
                return Err(
                    ctx.unsupported("auto_pad", format!("`{}`", torchlean_ir::shorten(other)))
                )
            }
        };
        let ceil = ctx.int_or("ceil_mode", 0) != 0;
        let mut axes = Vec::with_capacity(r);
        for a in 0..r {
            let (s, extent) = (stride[a], span(a));
            let padded = input[a] + declared[a].0 + declared[a].1;
            if padded < extent {
                return Err(ctx.unsupported(
                    "kernel_shape",
                    format!("{kernel:?} is larger than the padded input"),
                ));
            }
            let steps = padded - extent;
            let mut n = if ceil { steps.div_ceil(s) } else { steps / s } + 1;
            // a last window that starts in the end padding is dropped (ONNX's and PyTorch's rule)
            if ceil && (n - 1) * s >= input[a] + declared[a].0 {
                n -= 1;
            }
            let needed = (n - 1) * s + extent;
            axes.push(AxisWindow {
                input: input[a],
                kernel: kernel[a],
                dilation: dilation[a],
                stride: s,
                pads: (declared[a].0, declared[a].1 + needed.saturating_sub(padded)),
                declared: declared[a],
                out: n,
            });
        }
        Ok(PoolWindow { axes })
    }

    /// The windows of a 1-D pool as a 2-D pool's over a height of 1.
    fn under_a_unit_axis(&self) -> PoolWindow {
        let w = self.axes[0];
        let unit = AxisWindow {
            input: 1,
            kernel: 1,
            dilation: 1,
            stride: w.stride,
            pads: (0, 0),
            declared: (0, 0),
            out: 1,
        };
        PoolWindow {
            axes: vec![unit, w],
        }
    }

    /// The one padding of every side, when the windows are the IR's padded pool's.
    fn symmetric(&self) -> Option<usize> {
        let p = self.axes[0].pads.0;
        (self.axes.iter().all(|a| a.pads == (p, p))).then_some(p)
    }

    /// `x` padded on every spatial axis (axes 2, 3, …) as the windows say, with `fill` (a max
    /// pool's `−∞`, zeros for an average pool or a convolution).
    fn pad(&self, b: &mut Builder, ctx: &Ctx<'_>, x: &Operand, fill: f64) -> One<Operand> {
        let fill = PadValue::Constant(fill);
        let mut y = x.clone();
        for (a, w) in self.axes.iter().enumerate() {
            let pads = (w.pads.0 as i64, w.pads.1 as i64);
            y = pad_axis(b, ctx, &y, 2 + a, pads, ("constant", &fill))?;
        }
        Ok(y)
    }

    /// Per output position, `numerator / count`, `count` the window's counted elements (the
    /// input's alone, or with the declared padding when `count_pads`), as `[1, 1, out…]`: with
    /// the kernel's size as numerator it turns an unpadded average over the explicitly padded
    /// input into the average over the counted elements; with 1, a window's sum into it.
    fn average_scale(&self, count_pads: bool, numerator: f64) -> Tensor<f64> {
        let region = |w: &AxisWindow| {
            if count_pads {
                (0, w.declared.0 + w.input + w.declared.1)
            } else {
                (w.pads.0, w.pads.0 + w.input)
            }
        };
        let mut dims = vec![1, 1];
        dims.extend(self.axes.iter().map(|w| w.out));
        Tensor::from_fn(dims, |ix| {
            let count: usize = self
                .axes
                .iter()
                .enumerate()
                .map(|(a, w)| w.count_within(ix[2 + a], region(w)))
                .product();
            numerator / count.max(1) as f64
        })
        .expect("the output extents are checked sizes")
    }
}

/// `GlobalAveragePool` is an average pool whose window is the whole image.
fn global_average_pool(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let x = data(b, ctx, 0)?;
    rank4(ctx, &x)?;
    let spec = PoolSpec {
        kind: PoolKind::Avg,
        kernel_h: x.shape.dims()[2],
        kernel_w: x.shape.dims()[3],
        stride: 1,
        padding: 0,
        padded: false,
    };
    b.apply(ctx, Op::Pool(spec), &[&x])
}

fn batch_norm(b: &mut Builder, ctx: &Ctx<'_>) -> Many<Operand> {
    one(ctx, &["epsilon", "momentum", "training_mode", "spatial"])?;
    if ctx.int_or("training_mode", 0) != 0 {
        return Err(vec![ctx.unsupported("training_mode", "only inference (0)")]);
    }
    if ctx.int_or("spatial", 1) != 1 {
        return Err(vec![ctx.unsupported("spatial", "only 1")]);
    }
    let eps = finite(ctx, "epsilon", ctx.float("epsilon"), 1e-5)?;
    let x = data(b, ctx, 0)?;
    // every operand that is no weight, at once
    let (weights, problems): (Vec<_>, Vec<_>) =
        (1..5).map(|i| weight(b, ctx, i)).partition(Result::is_ok);
    if !problems.is_empty() {
        return Err(problems.into_iter().filter_map(Result::err).collect());
    }
    let weights: Vec<_> = weights.into_iter().filter_map(Result::ok).collect();
    let channels = weights[0].1.len();
    let o = b.apply_with(
        ctx,
        Op::BatchNormEval { channels, eps },
        &[&x],
        weights,
        Some(eps),
    )?;
    // batch norm's eps lives in the payload (`node_sem` reads it there, `check_payload`
    // validates it); the node's kind holds what its wire form parses to
    b.set_op(
        o.id,
        Op::BatchNormEval {
            channels,
            eps: BATCH_NORM_DEFAULT_EPS,
        },
    );
    Ok(o)
}

/// `LayerNormalization`: the IR's `layernorm` (no affine), then `Scale` and `B` broadcast,
/// multiplied and added (their gradients come out as the `const` nodes' payload). The optional
/// `Mean` and `InvStdDev` outputs are computed beside it from reductions (`reduce_mean`, `sqrt`,
/// `inv`) when the model uses them.
fn layer_norm(b: &mut Builder, ctx: &Ctx<'_>) -> Mapped {
    only(ctx, &["axis", "epsilon", "stash_type"])?;
    let go = |b: &mut Builder| -> One<()> {
        let x = data(b, ctx, 0)?;
        let rank = x.shape.rank();
        let a = axis(ctx, "axis", ctx.int_or("axis", -1), rank)?;
        let eps = finite(ctx, "epsilon", ctx.float("epsilon"), 1e-5)?;
        let mut y = b.apply(
            ctx,
            Op::LayerNorm {
                axis: a,
                eps: Some(eps),
            },
            &[&x],
        )?;
        let scale = data(b, ctx, 1)?;
        y = binary_of(b, ctx, BinaryOp::Mul, &y, &scale)?;
        if ctx.input(2).is_some() {
            let bias = data(b, ctx, 2)?;
            y = binary_of(b, ctx, BinaryOp::Add, &y, &bias)?;
        }
        let out = |k: usize| ctx.node.output.get(k).filter(|o| !o.is_empty());
        if let Some(name) = out(0) {
            b.define(name, y);
        }
        if out(1).is_none() && out(2).is_none() {
            return Ok(());
        }
        // the statistics outputs: the mean and 1/sqrt(var + eps) over axes `a..`, kept as 1s
        let axes: Vec<usize> = (a..rank).collect();
        let kept = kept_dims(&x.shape, &axes);
        let mean = reduce_each(b, ctx, &x, &axes, Reduction::Mean)?;
        let mean = reshape(b, ctx, &mean, kept.clone())?;
        let wide = broadcast(b, ctx, &mean, &x.shape)?;
        let centred = b.apply(ctx, Op::Binary(BinaryOp::Sub), &[&x, &wide])?;
        let sq = b.apply(ctx, Op::Binary(BinaryOp::Mul), &[&centred, &centred])?;
        let var = reduce_each(b, ctx, &sq, &axes, Reduction::Mean)?;
        let var = reshape(b, ctx, &var, kept)?;
        let shifted = b.apply(ctx, Op::AddScalar { c: eps }, &[&var])?;
        let sd = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Sqrt), &[&shifted])?;
        let inv_sd = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Inv), &[&sd])?;
        if let Some(name) = out(1) {
            b.define(name, mean);
        }
        if let Some(name) = out(2) {
            b.define(name, inv_sd);
        }
        Ok(())
    };
    go(b).map_err(|p| vec![p])
}

fn reshape_op(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["allowzero"])?;
    let allow_zero = ctx.int_or("allowzero", 0) != 0;
    let spec = const_ints(b, ctx, 1)?
        .ok_or_else(|| ctx.unsupported("input[1]", "the shape input is required"))?;
    let x = data(b, ctx, 0)?;
    let mut dims = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                dims.push(1);
            }
            0 if !allow_zero => dims.push(x.shape.dim(i).ok_or_else(|| {
                ctx.unsupported("input[1]", format!("{spec:?}: a 0 past the input's rank"))
            })?),
            d => dims.push(
                usize::try_from(d)
                    .map_err(|_| ctx.unsupported("input[1]", format!("{spec:?}: dim {d}")))?,
            ),
        }
    }
    if let Some(i) = infer {
        let known = product(&dims);
        if known == 0 || x.shape.size() % known != 0 {
            return Err(ctx.unsupported(
                "input[1]",
                format!("{spec:?}: -1 cannot be inferred from {}", x.shape),
            ));
        }
        dims[i] = x.shape.size() / known;
    }
    reshape(b, ctx, &x, Shape::new(dims))
}

/// `Squeeze` and `Unsqueeze`: a `reshape` that removes or inserts size-1 dims (a constant
/// that is not a parameter folds: the same values, the new shape). The axes are an
/// attribute before opset 13 and a constant input from it; Squeeze without axes removes every
/// size-1 dim, and an axis whose dim is not 1 is refused.
fn squeeze(b: &mut Builder, ctx: &Ctx<'_>, out: &str) -> Mapped {
    let go = |b: &mut Builder| -> One<()> {
        let axes = if b.opset >= 13 {
            one(ctx, &[])?;
            const_ints(b, ctx, 1)?
        } else {
            one(ctx, &["axes"])?;
            ctx.ints("axes").map(<[i64]>::to_vec)
        };
        if let Some(c) = b.folded(input(ctx, 0)?).cloned() {
            let dims = squeezed_dims(ctx, c.shape.dims(), axes.as_deref())?;
            let folded = Constant {
                shape: Shape::new(dims),
                values: c.values,
            };
            b.define_const(out, folded, None);
            return Ok(());
        }
        let x = data(b, ctx, 0)?;
        let dims = squeezed_dims(ctx, x.shape.dims(), axes.as_deref())?;
        let y = reshape(b, ctx, &x, Shape::new(dims))?;
        b.define(out, y);
        Ok(())
    };
    go(b).map_err(|p| vec![p])
}

/// The dims `Squeeze` or `Unsqueeze` (`ctx.op`) makes of `dims` with `axes`.
fn squeezed_dims(ctx: &Ctx<'_>, dims: &[usize], axes: Option<&[i64]>) -> One<Vec<usize>> {
    if ctx.op == "Unsqueeze" {
        let axes = axes.ok_or_else(|| ctx.unsupported("axes", "Unsqueeze needs its axes"))?;
        let rank = dims.len() + axes.len();
        let mut at = axes
            .iter()
            .map(|&a| axis(ctx, "axes", a, rank))
            .collect::<One<Vec<_>>>()?;
        at.sort_unstable();
        if at.windows(2).any(|w| w[0] == w[1]) {
            return Err(ctx.unsupported("axes", format!("{axes:?} repeats an axis")));
        }
        let mut rest = dims.iter();
        return Ok((0..rank)
            .map(|i| {
                if at.contains(&i) {
                    1
                } else {
                    rest.next().copied().unwrap_or(1)
                }
            })
            .collect());
    }
    let drop: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&v| axis(ctx, "axes", v, dims.len()))
            .collect::<One<_>>()?,
        None => (0..dims.len()).filter(|&i| dims[i] == 1).collect(),
    };
    if let Some(&a) = drop.iter().find(|&&a| dims[a] != 1) {
        return Err(ctx.unsupported(
            "axes",
            format!("axis {a} has extent {} (only 1 can be squeezed)", dims[a]),
        ));
    }
    Ok((0..dims.len())
        .filter(|i| !drop.contains(i))
        .map(|i| dims[i])
        .collect())
}

/// `Expand`: `broadcast_to` the numpy broadcast of the input's shape and the constant shape
/// input (both ways: a 1 in either side takes the other's extent).
fn expand(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let spec = const_ints(b, ctx, 1)?
        .ok_or_else(|| ctx.unsupported("input[1]", "the shape input is required"))?;
    let to = spec
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| ctx.unsupported("input[1]", format!("{spec:?}: a negative extent")))?;
    let x = data(b, ctx, 0)?;
    let out = broadcast_shape(&x.shape, &Shape::new(to)).ok_or_else(|| {
        ctx.unsupported(
            "input[1]",
            format!("{spec:?} does not broadcast with the input's {}", x.shape),
        )
    })?;
    broadcast(b, ctx, &x, &out)
}

fn flatten(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["axis"])?;
    let x = data(b, ctx, 0)?;
    let rank = x.shape.rank();
    let raw = ctx.int_or("axis", 1);
    // Flatten's axis may equal the rank (everything in the first factor)
    let a = if raw == i64::try_from(rank).unwrap_or(i64::MAX) {
        rank
    } else {
        axis(ctx, "axis", raw, rank)?
    };
    let d = x.shape.dims();
    let to = Shape::from([product(&d[..a]), product(&d[a..])]);
    reshape(b, ctx, &x, to)
}

fn transpose(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["perm"])?;
    let x = data(b, ctx, 0)?;
    let rank = x.shape.rank();
    let perm: Vec<usize> = match ctx.ints("perm") {
        Some(p) => p
            .iter()
            .map(|&a| axis(ctx, "perm", a, rank))
            .collect::<One<_>>()?,
        None => (0..rank).rev().collect(),
    };
    if perm.iter().enumerate().all(|(i, &p)| i == p) && perm.len() == rank {
        return Ok(x);
    }
    b.apply(ctx, Op::Permute { perm }, &[&x])
}

/// `Concat` → `concat`; constants that are not parameters (shape arithmetic, masks) fold into
/// one constant of their kind.
fn concat(b: &mut Builder, ctx: &Ctx<'_>, out: &str) -> Mapped {
    let go = |b: &mut Builder| -> One<()> {
        one(ctx, &["axis"])?;
        let names = (0..ctx.node.input.len())
            .map(|i| input(ctx, i))
            .collect::<One<Vec<_>>>()?;
        let raw_axis = ctx
            .int("axis")
            .ok_or_else(|| ctx.unsupported("axis", "required"))?;
        let folded: Option<Vec<Constant>> = names.iter().map(|n| b.folded(n).cloned()).collect();
        if let Some(cs) = folded.filter(|cs| !cs.is_empty()) {
            let a = axis(ctx, "axis", raw_axis, cs[0].shape.rank())?;
            let tensors = cs
                .iter()
                .map(|c| Tensor::new(c.shape.clone(), c.floats()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ctx.unsupported("input", "").because(e))?;
            let refs: Vec<&Tensor<f64>> = tensors.iter().collect();
            let joined = Op::Concat { axis: a }
                .forward(&refs)
                .map_err(|e| ctx.unsupported("axis", "").because(e))?;
            let values = same_kind(&cs, joined.data());
            b.define_const(
                out,
                Constant {
                    shape: joined.shape().clone(),
                    values,
                },
                None,
            );
            return Ok(());
        }
        let xs = (0..names.len())
            .map(|i| data(b, ctx, i))
            .collect::<One<Vec<_>>>()?;
        let Some(first) = xs.first() else {
            return Err(ctx.unsupported("input", "no inputs"));
        };
        let y = if xs.len() == 1 {
            first.clone()
        } else {
            let a = axis(ctx, "axis", raw_axis, first.shape.rank())?;
            let refs: Vec<&Operand> = xs.iter().collect();
            b.apply(ctx, Op::Concat { axis: a }, &refs)?
        };
        b.define(out, y);
        Ok(())
    };
    go(b).map_err(|p| vec![p])
}

/// `values` (computed in `f64` from `cs`) in the kind of `cs`: integers when every one is an
/// integer tensor, bools when every one is BOOL, floats otherwise.
fn same_kind(cs: &[Constant], values: &[f64]) -> Values {
    if cs.iter().all(|c| c.ints().is_some()) {
        Values::Int(values.iter().map(|&v| v as i64).collect())
    } else if cs.iter().all(|c| c.bools().is_some()) {
        Values::Bool(values.iter().map(|&v| v != 0.0).collect())
    } else {
        Values::Float(values.to_vec())
    }
}

/// `Gather` of whole rows (`axis` 0) of a 2-D tensor — an embedding lookup — with constant
/// indices: the `embedding` kind. Negative indices count from the end, as ONNX says; one
/// outside `[−V, V)` is refused naming its position.
fn gather(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["axis"])?;
    let table = data(b, ctx, 0)?;
    let rows = match (ctx.int("axis").unwrap_or(0), table.shape.dims()) {
        (0, &[rows, _]) => rows,
        _ => return gather_slices(b, ctx, &table),
    };
    if let Some(ids) = ctx.input(1).and_then(|name| b.ids(name)) {
        // token ids from an integer graph input: `embedding` checks each is a row
        return b.apply(ctx, Op::Embedding, &[&ids, &table]);
    }
    let Some(ids) = const_ints(b, ctx, 1)? else {
        return Err(ctx.unsupported("input[1]", "required input missing"));
    };
    let v = rows as i64;
    if let Some((p, &id)) = ids.iter().enumerate().find(|(_, &i)| i < -v || i >= v) {
        return Err(ctx.unsupported(
            "input[1]",
            format!("index {id} at position {p} is outside [-{v}, {v})"),
        ));
    }
    let ids = if ids.iter().any(|&i| i < 0) {
        let shape = b
            .constant(input(ctx, 1)?)
            .map(|c| c.shape.clone())
            .unwrap_or_default();
        let wrapped = ids.iter().map(|&i| i.rem_euclid(v) as f64).collect();
        let t = torchlean_spec::Tensor::new(shape, wrapped).map_err(|e| {
            ctx.unsupported("input[1]", "its shape and values disagree")
                .because(e)
        })?;
        b.constant_tensor(t)
    } else {
        data(b, ctx, 1)?
    };
    b.apply(ctx, Op::Embedding, &[&ids, &table])
}

/// `Gather` along any axis with constant indices (negative from the end): one one-element
/// `slice` per index, `concat`, `reshape` to `dims[..axis] + indices' shape + dims[axis+1..]`.
fn gather_slices(b: &mut Builder, ctx: &Ctx<'_>, x: &Operand) -> One<Operand> {
    let rank = x.shape.rank();
    let a = axis(ctx, "axis", ctx.int_or("axis", 0), rank)?;
    let name = input(ctx, 1)?;
    let idx_shape = b.shape_of(name).unwrap_or_default();
    let ids = const_ints(b, ctx, 1)?
        .ok_or_else(|| ctx.unsupported("input[1]", "required input missing"))?;
    let extent = x.shape.dims()[a] as i64;
    let mut picked = Vec::with_capacity(ids.len());
    for (p, &i) in ids.iter().enumerate() {
        let j = if i < 0 { i + extent } else { i };
        if j < 0 || j >= extent {
            return Err(ctx.unsupported(
                "input[1]",
                format!("index {i} at position {p} is outside an axis of {extent}"),
            ));
        }
        picked.push(j as usize);
    }
    if picked.is_empty() {
        return Err(ctx.unsupported("input[1]", "no indices"));
    }
    let joined = take(b, ctx, x, a, &picked)?;
    let mut dims = x.shape.dims()[..a].to_vec();
    dims.extend_from_slice(idx_shape.dims());
    dims.extend_from_slice(&x.shape.dims()[a + 1..]);
    reshape(b, ctx, &joined, Shape::new(dims))
}

/// The positions `at` (valid, at least one) of axis `a` of `x`, in order: one one-element
/// `slice` each, then `concat` (runs of consecutive positions as one slice).
fn take(b: &mut Builder, ctx: &Ctx<'_>, x: &Operand, a: usize, at: &[usize]) -> One<Operand> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &j in at {
        match runs.last_mut() {
            Some((start, len)) if *start + *len == j => *len += 1,
            _ => runs.push((j, 1)),
        }
    }
    let mut parts = Vec::with_capacity(runs.len());
    for (start, len) in runs {
        parts.push(b.apply(
            ctx,
            Op::Slice {
                axis: a,
                start,
                len,
            },
            &[x],
        )?);
    }
    if parts.len() == 1 {
        return Ok(parts.remove(0));
    }
    let refs: Vec<&Operand> = parts.iter().collect();
    b.apply(ctx, Op::Concat { axis: a }, &refs)
}

/// `Slice`'s ranges, one per sliced axis: `(axis, start, end, step)` as given, the axis
/// resolved against `rank`. From opset 10 `starts`, `ends`, `axes`, `steps` are inputs
/// (constants here); before, attributes.
fn slice_ranges(b: &Builder, ctx: &Ctx<'_>, rank: usize) -> One<Vec<(usize, i64, i64, i64)>> {
    let (starts, ends, axes, steps) = if b.opset >= 10 {
        one(ctx, &[])?;
        let req = |i: usize, name: &str| -> One<Vec<i64>> {
            const_ints(b, ctx, i)?.ok_or_else(|| ctx.unsupported(name, "required"))
        };
        (
            req(1, "starts")?,
            req(2, "ends")?,
            const_ints(b, ctx, 3)?,
            const_ints(b, ctx, 4)?,
        )
    } else {
        one(ctx, &["starts", "ends", "axes"])?;
        let attr = |n: &str| ctx.ints(n).map(<[i64]>::to_vec);
        (
            attr("starts").ok_or_else(|| ctx.unsupported("starts", "required"))?,
            attr("ends").ok_or_else(|| ctx.unsupported("ends", "required"))?,
            attr("axes"),
            None,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    if starts.len() != ends.len() || axes.len() != starts.len() {
        return Err(ctx.unsupported("starts", "starts, ends and axes differ in length"));
    }
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if steps.len() != starts.len() {
        return Err(ctx.unsupported("steps", "starts and steps differ in length"));
    }
    starts
        .iter()
        .zip(&ends)
        .zip(&axes)
        .zip(&steps)
        .map(|(((&s, &e), &a), &step)| Ok((axis(ctx, "axes", a, rank)?, s, e, step)))
        .collect()
}

/// `Slice`: each axis becomes one IR `slice` (step 1), or the pieces of its steps ([`take`]).
fn slice(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    let x = data(b, ctx, 0)?;
    let mut y = x;
    for (a, s, e, step) in slice_ranges(b, ctx, y.shape.rank())? {
        if step != 1 {
            y = slice_stepped(b, ctx, &y, a, (s, e, step))?;
            continue;
        }
        let dim = y.shape.dims()[a];
        let clampi = |v: i64| -> usize {
            let d = i64::try_from(dim).unwrap_or(i64::MAX);
            let v = if v < 0 { v.saturating_add(d) } else { v };
            usize::try_from(v.clamp(0, d)).unwrap_or(0)
        };
        let (start, end) = (clampi(s), clampi(e));
        let len = end.saturating_sub(start);
        if start == 0 && len == dim {
            continue;
        }
        y = b.apply(
            ctx,
            Op::Slice {
                axis: a,
                start,
                len,
            },
            &[&y],
        )?;
    }
    Ok(y)
}

/// `Slice` of a constant that may fold (shape arithmetic: `Shape` → `Slice` → …): the sliced
/// constant, any step.
fn slice_folded(b: &mut Builder, ctx: &Ctx<'_>, out: &str, c: Constant) -> Mapped {
    let mut c = c;
    for (a, s, e, step) in slice_ranges(b, ctx, c.shape.rank())? {
        let at = slice_positions(ctx, c.shape.dims()[a], (s, e, step))?;
        c = crate::fold::take_along(&c, a, &at, &[at.len()]);
    }
    b.define_const(out, c, None);
    Ok(())
}

/// The positions `Slice` visits along an axis of extent `dim` (ONNX's clamping: `start` into
/// `[0, dim]` for a positive step, `[0, dim − 1]` for a negative one, `end` into `[0, dim]`
/// or `[−1, dim − 1]`); an empty slice or step 0 is refused.
fn slice_positions(
    ctx: &Ctx<'_>,
    dim: usize,
    (start, end, step): (i64, i64, i64),
) -> One<Vec<usize>> {
    if step == 0 {
        return Err(ctx.unsupported("steps", "step 0"));
    }
    let dim = i64::try_from(dim).unwrap_or(i64::MAX);
    let wrap = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
    let (lo, hi) = if step > 0 { (0, dim) } else { (-1, dim - 1) };
    let (mut i, end) = (wrap(start).clamp(lo.max(0), hi), wrap(end).clamp(lo, hi));
    let mut at = Vec::new();
    while (step > 0 && i < end) || (step < 0 && i > end) {
        at.push(i as usize);
        i = i.saturating_add(step);
    }
    if at.is_empty() {
        return Err(ctx.unsupported(
            "steps",
            "the slice is empty (the IR has no empty tensors here)",
        ));
    }
    Ok(at)
}

/// One axis of `Slice` with a step other than 1, as the positions it visits ([`take`]).
fn slice_stepped(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    x: &Operand,
    a: usize,
    range: (i64, i64, i64),
) -> One<Operand> {
    let at = slice_positions(ctx, x.shape.dims()[a], range)?;
    take(b, ctx, x, a, &at)
}

/// The longest axis `ReduceMax`/`ReduceMin` unroll into pairwise `max_elem`/`min_elem` of
/// one-element slices (the IR has no max reduction); a longer one is refused.
const MAX_UNROLLED_AXIS: usize = 256;

/// The `Reduce*` ops: axes from the attribute, or (ReduceSum from opset 13, the others from 18)
/// a constant input; one IR reduction per axis, innermost first, then `keepdims` restores the
/// reduced axes as 1s. `ReduceSum`/`ReduceMean` are the IR's reductions; `ReduceSumSquare` and
/// `ReduceL2` square first (and take the root after); `ReduceMax`/`ReduceMin` are pairwise
/// `max_elem`/`min_elem` over the axis's one-element slices (exact; a tie splits the cotangent
/// as `torch.maximum` does); `ReduceLogSumExp` is `m + log(Σ exp(x − m))` with `m` the max.
fn reduce(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    let from_input = if ctx.op == "ReduceSum" {
        b.opset >= 13
    } else {
        b.opset >= 18
    };
    let axes = if from_input {
        one(ctx, &["keepdims", "noop_with_empty_axes"])?;
        const_ints(b, ctx, 1)?
    } else {
        one(ctx, &["keepdims", "axes"])?;
        ctx.ints("axes").map(<[i64]>::to_vec)
    };
    let keep = ctx.int_or("keepdims", 1) != 0;
    let x = data(b, ctx, 0)?;
    let rank = x.shape.rank();
    let mut axes: Vec<usize> = match axes {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&v| axis(ctx, "axes", v, rank))
            .collect::<One<_>>()?,
        _ if ctx.int_or("noop_with_empty_axes", 0) != 0 => return Ok(x),
        _ => (0..rank).collect(),
    };
    axes.sort_unstable();
    axes.dedup();
    let y = match ctx.op {
        "ReduceSum" => reduce_each(b, ctx, &x, &axes, Reduction::Sum)?,
        "ReduceMean" => reduce_each(b, ctx, &x, &axes, Reduction::Mean)?,
        "ReduceMax" => reduce_each(b, ctx, &x, &axes, Reduction::Extreme(BinaryOp::Max))?,
        "ReduceMin" => reduce_each(b, ctx, &x, &axes, Reduction::Extreme(BinaryOp::Min))?,
        "ReduceSumSquare" | "ReduceL2" => {
            let sq = b.apply(ctx, Op::Binary(BinaryOp::Mul), &[&x, &x])?;
            let sum = reduce_each(b, ctx, &sq, &axes, Reduction::Sum)?;
            if ctx.op == "ReduceL2" {
                b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Sqrt), &[&sum])?
            } else {
                sum
            }
        }
        _ => log_sum_exp(b, ctx, &x, &axes)?,
    };
    if keep {
        reshape(b, ctx, &y, kept_dims(&x.shape, &axes))
    } else {
        Ok(y)
    }
}

/// `x`'s shape with each of `axes` made 1 (a reduction's `keepdims` shape).
fn kept_dims(x: &Shape, axes: &[usize]) -> Shape {
    Shape::new(
        x.dims()
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
            .collect::<Vec<usize>>(),
    )
}

/// One reduction over a single axis, which it removes.
#[derive(Clone, Copy)]
enum Reduction {
    Sum,
    Mean,
    /// Pairwise `max_elem` (Max) or `min_elem` (Min) of the axis's slices.
    Extreme(BinaryOp),
}

/// `x` reduced over every one of `axes` (sorted), the largest first so the others keep their
/// index.
fn reduce_each(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    x: &Operand,
    axes: &[usize],
    how: Reduction,
) -> One<Operand> {
    let mut y = x.clone();
    for &a in axes.iter().rev() {
        y = match how {
            Reduction::Sum => b.apply(ctx, Op::ReduceSum { axis: a }, &[&y])?,
            Reduction::Mean => b.apply(ctx, Op::ReduceMean { axis: a }, &[&y])?,
            Reduction::Extreme(op) => extreme(b, ctx, &y, a, op)?,
        };
    }
    Ok(y)
}

/// The max (or min) of `x` over axis `a`, which is removed: `op` folded over its one-element
/// slices.
fn extreme(b: &mut Builder, ctx: &Ctx<'_>, x: &Operand, a: usize, op: BinaryOp) -> One<Operand> {
    let n = x.shape.dims()[a];
    if n == 0 || n > MAX_UNROLLED_AXIS {
        return Err(ctx.unsupported(
            "axes",
            format!(
                "axis {a} has {n} elements: a max/min reduction is unrolled over 1 to {MAX_UNROLLED_AXIS}"
            ),
        ));
    }
    let mut y: Option<Operand> = None;
    for start in 0..n {
        let part = if n == 1 {
            x.clone()
        } else {
            b.apply(
                ctx,
                Op::Slice {
                    axis: a,
                    start,
                    len: 1,
                },
                &[x],
            )?
        };
        y = Some(match y {
            None => part,
            Some(acc) => b.apply(ctx, Op::Binary(op), &[&acc, &part])?,
        });
    }
    let y = y.expect("n >= 1 slices");
    let mut dims = x.shape.dims().to_vec();
    dims.remove(a);
    reshape(b, ctx, &y, Shape::new(dims))
}

/// `log Σ exp(x)` over `axes` without overflow: `m + log(Σ exp(x − m))`, `m` the max.
fn log_sum_exp(b: &mut Builder, ctx: &Ctx<'_>, x: &Operand, axes: &[usize]) -> One<Operand> {
    let m = reduce_each(b, ctx, x, axes, Reduction::Extreme(BinaryOp::Max))?;
    let m_kept = reshape(b, ctx, &m, kept_dims(&x.shape, axes))?;
    let m_wide = broadcast(b, ctx, &m_kept, &x.shape)?;
    let centred = b.apply(ctx, Op::Binary(BinaryOp::Sub), &[x, &m_wide])?;
    let e = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Exp), &[&centred])?;
    let s = reduce_each(b, ctx, &e, axes, Reduction::Sum)?;
    let l = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Log), &[&s])?;
    b.apply(ctx, Op::Binary(BinaryOp::Add), &[&l, &m])
}

/// Variadic `Sum`, `Mean`, `Max`, `Min`: the inputs folded pairwise with ONNX broadcasting
/// (`add`, `max_elem`, `min_elem`), `Mean` then scaled by `1/n`.
fn variadic(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let op = match ctx.op {
        "Max" => BinaryOp::Max,
        "Min" => BinaryOp::Min,
        _ => BinaryOp::Add,
    };
    let n = ctx.node.input.len();
    let mut acc = data(b, ctx, 0)?;
    for i in 1..n {
        let next = data(b, ctx, i)?;
        acc = binary_of(b, ctx, op, &acc, &next)?;
    }
    if ctx.op == "Mean" && n > 1 {
        acc = b.apply(ctx, Op::Scale { c: 1.0 / n as f64 }, &[&acc])?;
    }
    Ok(acc)
}

/// `HardSigmoid` → `clamp(alpha·x + beta, 0, 1)` (`scale`, `add_scalar`, `clamp`).
fn hard_sigmoid(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["alpha", "beta"])?;
    let alpha = finite(ctx, "alpha", ctx.float("alpha"), 0.2)?;
    let beta = finite(ctx, "beta", ctx.float("beta"), 0.5)?;
    let x = data(b, ctx, 0)?;
    let ax = b.apply(ctx, Op::Scale { c: alpha }, &[&x])?;
    let axb = b.apply(ctx, Op::AddScalar { c: beta }, &[&ax])?;
    b.apply(
        ctx,
        Op::Clamp {
            min: Some(0.0),
            max: Some(1.0),
        },
        &[&axb],
    )
}

/// `HardSwish` → `x · clamp(x/6 + 1/2, 0, 1)`.
fn hard_swish(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let x = data(b, ctx, 0)?;
    let ax = b.apply(ctx, Op::Scale { c: 1.0 / 6.0 }, &[&x])?;
    let axb = b.apply(ctx, Op::AddScalar { c: 0.5 }, &[&ax])?;
    let gate = b.apply(
        ctx,
        Op::Clamp {
            min: Some(0.0),
            max: Some(1.0),
        },
        &[&axb],
    )?;
    binary_of(b, ctx, BinaryOp::Mul, &x, &gate)
}

/// `Mish` → `x · tanh(softplus(x))`.
fn mish(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let x = data(b, ctx, 0)?;
    let sp = b.apply(ctx, Op::Unary(UnaryOp::Softplus), &[&x])?;
    let t = b.apply(ctx, Op::Unary(UnaryOp::Tanh), &[&sp])?;
    binary_of(b, ctx, BinaryOp::Mul, &x, &t)
}

/// ONNX's `LRN` defaults (its operator schema's f32 values).
const LRN_ALPHA: f32 = 1e-4;
const LRN_BETA: f32 = 0.75;

/// `LRN` (local response normalisation across channels, axis 1) →
/// `x · exp(−beta · log(bias + alpha/size · Σ x²))`: the sum over `size` channels, ⌊(size−1)/2⌋
/// before and ⌈(size−1)/2⌉ after each (zeros past the edges), as `size` shifted slices of the
/// zero-padded square. `bias` must be positive (the power's base is then positive).
fn lrn(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["alpha", "beta", "bias", "size"])?;
    let alpha = finite(ctx, "alpha", ctx.float("alpha"), f64::from(LRN_ALPHA))?;
    let beta = finite(ctx, "beta", ctx.float("beta"), f64::from(LRN_BETA))?;
    let bias = finite(ctx, "bias", ctx.float("bias"), 1.0)?;
    if bias <= 0.0 {
        return Err(ctx.unsupported(
            "bias",
            format!("{bias}: only positive (a zero base has no power)"),
        ));
    }
    let size = ctx
        .int("size")
        .filter(|&n| n >= 1)
        .ok_or_else(|| ctx.unsupported("size", "required, at least 1"))?;
    let x = data(b, ctx, 0)?;
    let channels = *x
        .shape
        .dims()
        .get(1)
        .ok_or_else(|| ctx.unsupported("input[0]", format!("{}: no channel axis", x.shape)))?;
    let sq = b.apply(ctx, Op::Binary(BinaryOp::Mul), &[&x, &x])?;
    let (before, after) = ((size - 1) / 2, size - 1 - (size - 1) / 2);
    let padded = pad_axis(
        b,
        ctx,
        &sq,
        1,
        (before, after),
        ("constant", &PadValue::Constant(0.0)),
    )?;
    let mut sum: Option<Operand> = None;
    for k in 0..size as usize {
        let window = b.apply(
            ctx,
            Op::Slice {
                axis: 1,
                start: k,
                len: channels,
            },
            &[&padded],
        )?;
        sum = Some(match sum {
            None => window,
            Some(acc) => b.apply(ctx, Op::Binary(BinaryOp::Add), &[&acc, &window])?,
        });
    }
    let sum = sum.unwrap_or(sq);
    let scaled = b.apply(
        ctx,
        Op::Scale {
            c: alpha / size as f64,
        },
        &[&sum],
    )?;
    let base = b.apply(ctx, Op::AddScalar { c: bias }, &[&scaled])?;
    let log = b.apply(ctx, Op::Unary(UnaryOp::Log), &[&base])?;
    let power = b.apply(ctx, Op::Scale { c: -beta }, &[&log])?;
    let factor = b.apply(ctx, Op::Unary(UnaryOp::Exp), &[&power])?;
    binary_of(b, ctx, BinaryOp::Mul, &x, &factor)
}

/// ONNX's `Selu` defaults (its operator schema's f32 values).
const SELU_ALPHA: f32 = 1.673_263_2;
const SELU_GAMMA: f32 = 1.050_701;

/// `Selu` → `gamma · elu(x, alpha)`.
fn selu(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["alpha", "gamma"])?;
    let alpha = finite(ctx, "alpha", ctx.float("alpha"), f64::from(SELU_ALPHA))?;
    let gamma = finite(ctx, "gamma", ctx.float("gamma"), f64::from(SELU_GAMMA))?;
    let x = data(b, ctx, 0)?;
    let e = b.apply(
        ctx,
        Op::Unary(torchlean_spec::UnaryOp::Elu { alpha }),
        &[&x],
    )?;
    b.apply(ctx, Op::Scale { c: gamma }, &[&e])
}

/// `Split` → one `slice` per output along `axis`: the sizes from `split` (an attribute before
/// opset 13, a constant input from it), else `num_outputs` (opset 18) or the output count,
/// equal parts with a smaller last one.
fn split(b: &mut Builder, ctx: &Ctx<'_>) -> Mapped {
    let sizes = if b.opset >= 13 {
        only(ctx, &["axis", "num_outputs"])?;
        const_ints(b, ctx, 1).map_err(|p| vec![p])?
    } else {
        only(ctx, &["axis", "split"])?;
        ctx.ints("split").map(<[i64]>::to_vec)
    };
    let x = data(b, ctx, 0).map_err(|p| vec![p])?;
    let rank = x.shape.rank();
    let a = axis(ctx, "axis", ctx.int_or("axis", 0), rank).map_err(|p| vec![p])?;
    let dim = x.shape.dims()[a];
    let outputs = ctx.node.output.len();
    let sizes: Vec<usize> = match sizes {
        Some(s) => s
            .iter()
            .map(|&v| {
                usize::try_from(v).map_err(|_| ctx.unsupported("split", format!("{v}: negative")))
            })
            .collect::<One<_>>()
            .map_err(|p| vec![p])?,
        None => {
            let parts = usize::try_from(ctx.int_or("num_outputs", outputs as i64))
                .unwrap_or(0)
                .max(1);
            let each = dim.div_ceil(parts);
            (0..parts)
                .map(|k| each.min(dim.saturating_sub(k * each)))
                .collect()
        }
    };
    if sizes.len() != outputs || sizes.iter().sum::<usize>() != dim {
        return Err(vec![ctx.unsupported(
            "split",
            format!(
                "sizes {sizes:?} for {outputs} outputs of an axis of {dim}: one size per output, summing to the axis"
            ),
        )]);
    }
    let mut start = 0;
    for (name, &len) in ctx.node.output.iter().zip(&sizes) {
        let part = b
            .apply(
                ctx,
                Op::Slice {
                    axis: a,
                    start,
                    len,
                },
                &[&x],
            )
            .map_err(|p| vec![p])?;
        start += len;
        if !name.is_empty() {
            b.define(name, part);
        }
    }
    Ok(())
}

/// `Clip` → `clamp` when its bounds are constants (attributes before opset 11, constant inputs
/// from it); a bound that is a computed value is `max_elem`/`min_elem` with it, broadcast.
fn clip(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    let constant_bounds = if b.opset < 11 {
        one(ctx, &["min", "max"])?;
        Some((ctx.float("min"), ctx.float("max")))
    } else {
        one(ctx, &[])?;
        let computed = |b: &Builder, i: usize| {
            ctx.input(i)
                .is_some_and(|name| !b.poisoned(name) && b.constant(name).is_none())
        };
        if computed(b, 1) || computed(b, 2) {
            None
        } else {
            Some((const_scalar(b, ctx, 1)?, const_scalar(b, ctx, 2)?))
        }
    };
    if let Some((min, max)) = constant_bounds {
        // the bounds are checked before the data, so a bad bound is reported after a failed
        // parent too
        let (min, max) = finite_bounds(ctx, min, max)?;
        let x = data(b, ctx, 0)?;
        return b.apply(ctx, Op::Clamp { min, max }, &[&x]);
    }
    let mut y = data(b, ctx, 0)?;
    for (i, op) in [(1, BinaryOp::Max), (2, BinaryOp::Min)] {
        if ctx.input(i).is_some() {
            let bound = data(b, ctx, i)?;
            y = binary_of(b, ctx, op, &y, &bound)?;
        }
    }
    Ok(y)
}

/// A `clamp`'s constant bounds, each finite when given.
fn finite_bounds(
    ctx: &Ctx<'_>,
    min: Option<f64>,
    max: Option<f64>,
) -> One<(Option<f64>, Option<f64>)> {
    let bound = |field: &str, v: Option<f64>| -> One<Option<f64>> {
        v.map(|v| finite(ctx, field, Some(v), v)).transpose()
    };
    Ok((bound("min", min)?, bound("max", max)?))
}

/// `Softsign` → `x / (1 + |x|)` (`abs`, `add_scalar`, `div`).
fn softsign(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let x = data(b, ctx, 0)?;
    let a = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Abs), &[&x])?;
    let d = b.apply(ctx, Op::AddScalar { c: 1.0 }, &[&a])?;
    b.apply(ctx, Op::Binary(BinaryOp::Div), &[&x, &d])
}

/// `PRelu` → `relu(x) + slope · (−relu(−x))`, the slope broadcast as ONNX broadcasts it.
fn prelu(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let x = data(b, ctx, 0)?;
    let slope = data(b, ctx, 1)?;
    let pos = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Relu), &[&x])?;
    let neg_x = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Neg), &[&x])?;
    let r = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Relu), &[&neg_x])?;
    let neg = b.apply(ctx, Op::Unary(torchlean_spec::UnaryOp::Neg), &[&r])?;
    let scaled = binary_of(b, ctx, BinaryOp::Mul, &slope, &neg)?;
    // `x`'s shape wins: PRelu's output has the data's shape
    binary_of(b, ctx, BinaryOp::Add, &pos, &scaled)
}

/// `Pow`: a constant scalar exponent through [`power`] (exact products and roots where the IR's
/// kinds have them); any other exponent (computed, or a constant of several values) as
/// `exp(y·log x)` with numpy broadcasting, which needs `x > 0` when it runs (`log`'s domain;
/// PyTorch computes `(−2)^2` and `0^y`, we refuse them). There is no `pow` kind.
fn pow(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    // a constant of one value is a scalar exponent
    let e = ctx
        .input(1)
        .and_then(|name| b.constant(name))
        .and_then(|c| c.single());
    let x = data(b, ctx, 0)?;
    match e {
        Some(e) => power(b, ctx, &x, e, "input[1]"),
        // a computed exponent (or a constant one of several values): exp(y·log x), x > 0
        None => {
            let y = data(b, ctx, 1)?;
            let log = b.apply(ctx, Op::Unary(UnaryOp::Log), &[&x])?;
            let scaled = binary_of(b, ctx, BinaryOp::Mul, &log, &y)?;
            b.apply(ctx, Op::Unary(UnaryOp::Exp), &[&scaled])
        }
    }
}

/// `x^e` for a constant exponent: products for 1 to 4, `sqrt` and `inv` for ±1/2, 1/4 and −1
/// (exact where those kinds are), and any other finite exponent as `exp(e·log x)`, which needs
/// `x > 0` (`log`'s domain; an evaluation at 0 or below is refused, where PyTorch gives a
/// number, ∞ or NaN). `field` is the attribute or input the exponent came from.
fn power(b: &mut Builder, ctx: &Ctx<'_>, x: &Operand, e: f64, field: &str) -> One<Operand> {
    let unary = |b: &mut Builder, u: UnaryOp, v: &Operand| b.apply(ctx, Op::Unary(u), &[v]);
    let mul = |b: &mut Builder, l: &Operand, r: &Operand| {
        b.apply(ctx, Op::Binary(BinaryOp::Mul), &[l, r])
    };
    if e == 1.0 {
        return Ok(x.clone());
    }
    if e == 2.0 {
        return mul(b, x, x);
    }
    if e == 3.0 {
        let sq = mul(b, x, x)?;
        return mul(b, &sq, x);
    }
    if e == 4.0 {
        let sq = mul(b, x, x)?;
        return mul(b, &sq, &sq);
    }
    if e == 0.5 {
        return unary(b, UnaryOp::Sqrt, x);
    }
    if e == 0.25 {
        let r = unary(b, UnaryOp::Sqrt, x)?;
        return unary(b, UnaryOp::Sqrt, &r);
    }
    if e == -1.0 {
        return unary(b, UnaryOp::Inv, x);
    }
    if e == -0.5 {
        let r = unary(b, UnaryOp::Sqrt, x)?;
        return unary(b, UnaryOp::Inv, &r);
    }
    if !e.is_finite() {
        return Err(ctx.unsupported(field, format!("exponent {e}: a finite one")));
    }
    let log = unary(b, UnaryOp::Log, x)?;
    let scaled = b.apply(ctx, Op::Scale { c: e }, &[&log])?;
    unary(b, UnaryOp::Exp, &scaled)
}

/// The values of `c` (shape `from`) broadcast to `to`, numpy's way (`to` is their broadcast).
pub(crate) fn broadcast_values(c: &[f64], from: &Shape, to: &Shape) -> Tensor<f64> {
    let lead = to.rank() - from.rank();
    let src_dims = from.dims();
    Tensor::from_fn(to.clone(), |idx| {
        let mut flat = 0;
        for (axis, &d) in src_dims.iter().enumerate() {
            let i = if d == 1 { 0 } else { idx[lead + axis] };
            flat = flat * d + i;
        }
        c[flat]
    })
    .expect("a broadcast shape has a checked size")
}

/// `Where(c, a, b)` with a constant BOOL condition: a constant when `a` and `b` are too,
/// otherwise `a ⊙ c + b ⊙ ¬c` with each constant side folded into a constant term (`c ? a : 0`),
/// so an infinite constant (a `masked_fill` with −∞) stays exact: `b ⊙ 1 + 0 = b`,
/// `b ⊙ 0 + (−∞) = −∞`. Every operand is broadcast to the three's numpy broadcast.
fn where_op(b: &mut Builder, ctx: &Ctx<'_>, out: &str) -> Mapped {
    only(ctx, &[])?;
    let go = |b: &mut Builder| -> One<()> {
        let cond = const_input(b, ctx, 0)?
            .ok_or_else(|| ctx.unsupported("input[0]", "required input missing"))?;
        let mask = cond
            .bools()
            .ok_or_else(|| ctx.unsupported("input[0]", "the condition must be a BOOL constant"))?;
        let mask: Vec<f64> = mask.iter().map(|&m| f64::from(u8::from(m))).collect();
        let cond_shape = cond.shape.clone();
        let side = |b: &Builder, i: usize| -> One<(Shape, Option<Vec<f64>>)> {
            let name = input(ctx, i)?;
            if b.poisoned(name) {
                return Err(upstream(ctx, name));
            }
            let shape = b.shape_of(name).ok_or_else(|| {
                ctx.problem(
                    ProblemKind::Model,
                    "input",
                    format!(
                        "`{}` is not produced by any earlier node",
                        torchlean_ir::shorten(name)
                    ),
                )
            })?;
            Ok((shape, b.constant(name).map(Constant::floats)))
        };
        let (a_shape, a_const) = side(b, 1)?;
        let (b_shape, b_const) = side(b, 2)?;
        let to = broadcast_shape(&cond_shape, &a_shape)
            .and_then(|s| broadcast_shape(&s, &b_shape))
            .ok_or_else(|| {
                ctx.problem(
                    crate::error::ProblemKind::Shape,
                    "",
                    format!("{cond_shape}, {a_shape} and {b_shape} do not broadcast"),
                )
            })?;
        let pick = broadcast_values(&mask, &cond_shape, &to);
        let keep_b = pick.map(|m| Ok(1.0 - m)).expect("same shape");
        let masked = |values: &[f64], from: &Shape, on: &Tensor<f64>| -> Tensor<f64> {
            let wide = broadcast_values(values, from, &to);
            let data = wide
                .data()
                .iter()
                .zip(on.data())
                .map(|(&v, &m)| if m == 1.0 { v } else { 0.0 })
                .collect();
            Tensor::new(to.clone(), data).expect("same shape")
        };
        // each side: its data times its mask, or its constant values where it is picked
        let mut terms: Vec<Operand> = Vec::new();
        let mut constant =
            Tensor::zeros(to.clone()).map_err(|e| ctx.unsupported("", "").because(e))?;
        for (i, shape, values, on) in [
            (1, &a_shape, &a_const, &pick),
            (2, &b_shape, &b_const, &keep_b),
        ] {
            match values {
                Some(v) => {
                    let part = masked(v, shape, on);
                    constant = constant
                        .add(&part)
                        .map_err(|e| ctx.unsupported("", "").because(e))?;
                }
                None => {
                    let x = data(b, ctx, i)?;
                    let m = b.constant_tensor(on.clone());
                    terms.push(binary_of(b, ctx, BinaryOp::Mul, &x, &m)?);
                }
            }
        }
        let y = match terms.len() {
            0 => {
                let o = b.constant_tensor(constant);
                b.define(out, o);
                return Ok(());
            }
            1 => terms.remove(0),
            _ => {
                let (l, r) = (terms.remove(0), terms.remove(0));
                b.apply(ctx, Op::Binary(BinaryOp::Add), &[&l, &r])?
            }
        };
        let y = if a_const.is_some() || b_const.is_some() {
            let k = b.constant_tensor(constant);
            b.apply(ctx, Op::Binary(BinaryOp::Add), &[&y, &k])?
        } else {
            y
        };
        b.define(out, y);
        Ok(())
    };
    go(b).map_err(|p| vec![p])
}

/// `Celu` → `alpha · elu(x / alpha)` (`scale`, `elu` with alpha 1, `scale`).
fn celu(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["alpha"])?;
    let alpha = finite(ctx, "alpha", ctx.float("alpha"), 1.0)?;
    if alpha == 0.0 {
        return Err(ctx.unsupported("alpha", "0 (Celu divides by it)"));
    }
    let x = data(b, ctx, 0)?;
    let scaled = b.apply(ctx, Op::Scale { c: 1.0 / alpha }, &[&x])?;
    let e = b.apply(
        ctx,
        Op::Unary(torchlean_spec::UnaryOp::Elu { alpha: 1.0 }),
        &[&scaled],
    )?;
    b.apply(ctx, Op::Scale { c: alpha }, &[&e])
}

/// `Trilu` → `mul_elem` by a constant 0/1 mask over the last two axes (`upper`: keep
/// `j − i ≥ k`, else `j − i ≤ k`; `k` a constant input, default 0).
fn trilu(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &["upper"])?;
    let upper = ctx.int_or("upper", 1) != 0;
    let k = const_ints(b, ctx, 1)?
        .map(|v| v.first().copied().unwrap_or(0))
        .unwrap_or(0);
    let x = data(b, ctx, 0)?;
    let dims = x.shape.dims();
    if dims.len() < 2 {
        return Err(ctx.unsupported("input[0]", format!("{}: rank 2 at least", x.shape)));
    }
    let (rows, cols) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let mask = Tensor::from_fn([rows, cols], |ix| {
        let d = ix[1] as i64 - ix[0] as i64;
        let keep = if upper { d >= k } else { d <= k };
        f64::from(u8::from(keep))
    })
    .map_err(|e| ctx.unsupported("input[0]", "").because(e))?;
    let m = b.constant_tensor(mask);
    binary_of(b, ctx, BinaryOp::Mul, &x, &m)
}

/// `Tile` → per axis, `concat` of `repeats` copies (constant repeats).
fn tile(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let repeats = const_ints(b, ctx, 1)?
        .ok_or_else(|| ctx.unsupported("input[1]", "the repeats input is required"))?;
    let mut y = data(b, ctx, 0)?;
    if repeats.len() != y.shape.rank() {
        return Err(ctx.unsupported(
            "input[1]",
            format!("{repeats:?}: one repeat per axis of {}", y.shape),
        ));
    }
    for (a, &r) in repeats.iter().enumerate() {
        let r = usize::try_from(r)
            .ok()
            .filter(|&r| r >= 1)
            .ok_or_else(|| ctx.unsupported("input[1]", format!("repeat {r}: at least 1")))?;
        if r > 1 {
            let copies: Vec<&Operand> = std::iter::repeat_n(&y, r).collect();
            y = b.apply(ctx, Op::Concat { axis: a }, &copies)?;
        }
    }
    Ok(y)
}

/// `Pad` → per axis, `concat` of the padding around the data (`slice` for negative pads):
/// `constant` blocks of the constant value, `edge` copies of the border slice, `reflect` the
/// slices mirrored about it. Pads, the constant value and `axes` must be constants.
fn pad(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    let mode = ctx.string("mode").unwrap_or_else(|| "constant".into());
    let (pads, value, axes) = if b.opset >= 11 {
        one(ctx, &["mode"])?;
        let pads = const_ints(b, ctx, 1)?
            .ok_or_else(|| ctx.unsupported("input[1]", "the pads input is required"))?;
        let value = match ctx.input(2) {
            // a computed constant value: its blocks are broadcasts of it
            Some(name) if !b.poisoned(name) && b.constant(name).is_none() => {
                PadValue::Computed(data(b, ctx, 2)?)
            }
            _ => PadValue::Constant(const_scalar(b, ctx, 2)?.unwrap_or(0.0)),
        };
        (pads, value, const_ints(b, ctx, 3)?)
    } else {
        one(ctx, &["mode", "pads", "value"])?;
        let pads = ctx
            .ints("pads")
            .map(<[i64]>::to_vec)
            .ok_or_else(|| ctx.unsupported("pads", "required"))?;
        (
            pads,
            PadValue::Constant(ctx.float("value").unwrap_or(0.0)),
            None,
        )
    };
    if !matches!(mode.as_str(), "constant" | "edge" | "reflect") {
        return Err(ctx.unsupported("mode", format!("`{mode}`: constant, edge or reflect")));
    }
    let mut y = data(b, ctx, 0)?;
    let rank = y.shape.rank();
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&v| axis(ctx, "axes", v, rank))
            .collect::<One<_>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(ctx.unsupported(
            "pads",
            format!(
                "{pads:?}: a begin and an end per padded axis ({})",
                axes.len()
            ),
        ));
    }
    for (k, &a) in axes.iter().enumerate() {
        let (before, after) = (pads[k], pads[k + axes.len()]);
        y = pad_axis(b, ctx, &y, a, (before, after), (&mode, &value))?;
    }
    Ok(y)
}

/// What `constant` padding fills with.
enum PadValue {
    Constant(f64),
    /// A scalar the graph computes (a graph input, say).
    Computed(Operand),
}

/// One axis of [`pad`]: `before` and `after` elements (cropping when negative).
fn pad_axis(
    b: &mut Builder,
    ctx: &Ctx<'_>,
    x: &Operand,
    a: usize,
    (before, after): (i64, i64),
    (mode, value): (&str, &PadValue),
) -> One<Operand> {
    let n = x.shape.dims()[a] as i64;
    // cropping first
    let (lo, hi) = ((-before).max(0), (-after).max(0));
    let mut y = x.clone();
    if lo + hi > 0 {
        let len = usize::try_from(n - lo - hi)
            .map_err(|_| ctx.unsupported("pads", format!("crops {lo} + {hi} of an axis of {n}")))?;
        y = b.apply(
            ctx,
            Op::Slice {
                axis: a,
                start: lo as usize,
                len,
            },
            &[&y],
        )?;
    }
    let (before, after) = (before.max(0) as usize, after.max(0) as usize);
    if before + after == 0 {
        return Ok(y);
    }
    let extent = y.shape.dims()[a];
    if mode != "constant" && extent == 0 {
        return Err(ctx.unsupported("mode", format!("`{mode}` padding of an empty axis")));
    }
    if mode == "reflect" && (before >= extent || after >= extent) {
        return Err(ctx.unsupported(
            "pads",
            format!(
                "reflect padding of {before}/{after} needs an axis longer than both ({extent})"
            ),
        ));
    }
    let mut parts: Vec<Operand> = Vec::new();
    let slice_at = |b: &mut Builder, i: usize| {
        b.apply(
            ctx,
            Op::Slice {
                axis: a,
                start: i,
                len: 1,
            },
            &[&y],
        )
    };
    let block = |b: &mut Builder, len: usize| -> One<Operand> {
        let mut dims = y.shape.dims().to_vec();
        dims[a] = len;
        match value {
            PadValue::Constant(v) => {
                let t = Tensor::full(Shape::new(dims), *v)
                    .map_err(|e| ctx.unsupported("pads", "").because(e))?;
                Ok(b.constant_tensor(t))
            }
            PadValue::Computed(v) => broadcast(b, ctx, v, &Shape::new(dims)),
        }
    };
    // the indices each side copies, nearest the data last (before) or first (after)
    let side = |count: usize, first: bool| -> Vec<usize> {
        (0..count)
            .map(|j| match (mode, first) {
                ("edge", true) => 0,
                ("edge", false) => extent - 1,
                (_, true) => count - j,
                (_, false) => extent - 2 - j,
            })
            .collect()
    };
    if before > 0 {
        if mode == "constant" {
            parts.push(block(b, before)?);
        } else {
            for i in side(before, true) {
                parts.push(slice_at(b, i)?);
            }
        }
    }
    parts.push(y.clone());
    if after > 0 {
        if mode == "constant" {
            parts.push(block(b, after)?);
        } else {
            for i in side(after, false) {
                parts.push(slice_at(b, i)?);
            }
        }
    }
    let refs: Vec<&Operand> = parts.iter().collect();
    b.apply(ctx, Op::Concat { axis: a }, &refs)
}

/// `InstanceNormalization` → `layernorm` from axis 2 (each image and channel over its spatial
/// axes); `GroupNormalization` → `reshape` to `[N, G, C/G, …]`, `layernorm` from axis 2,
/// `reshape` back. Then the scale and bias, per channel (`[C]`) or, for GroupNormalization's
/// opset-18 form, per group (`[G]`), broadcast.
fn group_norm(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    let instance = ctx.op == "InstanceNormalization";
    if instance {
        one(ctx, &["epsilon"])?;
    } else {
        one(ctx, &["epsilon", "num_groups", "stash_type"])?;
    }
    let eps = finite(ctx, "epsilon", ctx.float("epsilon"), 1e-5)?;
    let x = data(b, ctx, 0)?;
    let dims = x.shape.dims().to_vec();
    if dims.len() < 3 {
        return Err(ctx.unsupported(
            "input[0]",
            format!("{}: [N, C, …] with a spatial axis", x.shape),
        ));
    }
    let c = dims[1];
    let groups = if instance {
        c
    } else {
        usize::try_from(
            ctx.int("num_groups")
                .ok_or_else(|| ctx.unsupported("num_groups", "required"))?,
        )
        .ok()
        .filter(|&g| g > 0 && c % g == 0)
        .ok_or_else(|| ctx.unsupported("num_groups", format!("must divide the {c} channels")))?
    };
    let norm = Op::LayerNorm {
        axis: 2,
        eps: Some(eps),
    };
    let y = if instance {
        b.apply(ctx, norm, &[&x])?
    } else {
        let mut grouped = vec![dims[0], groups, c / groups];
        grouped.extend_from_slice(&dims[2..]);
        let g = reshape(b, ctx, &x, Shape::new(grouped))?;
        let n = b.apply(ctx, norm, &[&g])?;
        reshape(b, ctx, &n, x.shape.clone())?
    };
    let spatial = dims.len() - 2;
    let mut y = y;
    for (i, op) in [(1, BinaryOp::Mul), (2, BinaryOp::Add)] {
        let p = data(b, ctx, i)?;
        let len = p.shape.size();
        let per = if len == c {
            c
        } else if len == groups {
            groups
        } else {
            return Err(ctx.unsupported(
                &format!("input[{i}]"),
                format!(
                    "{}: one value per channel ({c}) or per group ({groups})",
                    p.shape
                ),
            ));
        };
        if per == c {
            let mut shape = vec![c];
            shape.extend(std::iter::repeat_n(1, spatial));
            let p = reshape(b, ctx, &p, Shape::new(shape))?;
            y = binary_of(b, ctx, op, &y, &p)?;
        } else {
            // per group: applied in the grouped view
            let mut grouped = vec![dims[0], groups, c / groups];
            grouped.extend_from_slice(&dims[2..]);
            let g = reshape(b, ctx, &y, Shape::new(grouped))?;
            let mut shape = vec![groups];
            shape.extend(std::iter::repeat_n(1, spatial + 1));
            let p = reshape(b, ctx, &p, Shape::new(shape))?;
            let gy = binary_of(b, ctx, op, &g, &p)?;
            y = reshape(b, ctx, &gy, x.shape.clone())?;
        }
    }
    Ok(y)
}

/// `GlobalMaxPool` → the max over every spatial axis (`reduce`'s unrolled max), kept as 1s.
fn global_max_pool(b: &mut Builder, ctx: &Ctx<'_>) -> One<Operand> {
    one(ctx, &[])?;
    let x = data(b, ctx, 0)?;
    let axes: Vec<usize> = (2..x.shape.rank()).collect();
    if axes.is_empty() {
        return Err(ctx.unsupported("input[0]", format!("{}: no spatial axis", x.shape)));
    }
    let m = reduce_each(b, ctx, &x, &axes, Reduction::Extreme(BinaryOp::Max))?;
    reshape(b, ctx, &m, kept_dims(&x.shape, &axes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_shape_is_numpys() {
        let s = |d: &[usize]| Shape::from_slice(d);
        assert_eq!(
            broadcast_shape(&s(&[2, 1, 3]), &s(&[4, 1])),
            Some(s(&[2, 4, 3]))
        );
        assert_eq!(broadcast_shape(&s(&[]), &s(&[2, 2])), Some(s(&[2, 2])));
        assert_eq!(broadcast_shape(&s(&[3]), &s(&[4])), None);
    }
}
