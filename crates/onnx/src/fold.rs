//! Shape arithmetic evaluated at import: the integer and BOOL subgraphs exporters compute at run
//! time (`ConstantOfShape`, `Range`, comparisons, `Not`/`And`/`Or`, integer `Add`/`Sub`/`Mul`/
//! `Div`/`Mod`, `Gather` of constants) become constants when every input is one that may fold
//! ([`Builder::folded`]: never a float initializer, which is a parameter). With static input
//! shapes these are constants; what remains of the graph is made of IR kinds.

use crate::attrs::Ctx;
use crate::error::Problem;
use crate::import::Builder;
use crate::ops::{axis, broadcast_shape, broadcast_values};
use crate::tensor::{decode, Constant, Values};
use torchlean_spec::Shape;

type One<T> = std::result::Result<T, Problem>;

/// The op types that exist here only as folds of constants (refused on computed values).
pub(crate) const ONLY_FOLDED: &[&str] = &[
    "ConstantOfShape",
    "Range",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "Not",
    "And",
    "Or",
    "Xor",
    "Mod",
];

/// Whether `ctx`'s node is shape arithmetic this module evaluates.
fn foldable(op: &str) -> bool {
    ONLY_FOLDED.contains(&op)
        || matches!(op, "Add" | "Sub" | "Mul" | "Div" | "Max" | "Min" | "Gather")
}

/// Folds the node when it is shape arithmetic on constants that may fold: `Some` with the
/// outcome (its output defined as a constant, or the problem), `None` when it is not (map it as
/// usual). An `ONLY_FOLDED` op on a computed value is a problem here.
pub(crate) fn try_fold(b: &mut Builder, ctx: &Ctx<'_>) -> Option<One<()>> {
    if !foldable(ctx.op) {
        return None;
    }
    let inputs: Option<Vec<Constant>> = ctx
        .node
        .input
        .iter()
        .filter(|n| !n.is_empty())
        .map(|n| b.folded(n).cloned())
        .collect();
    let Some(inputs) = inputs else {
        return ONLY_FOLDED.contains(&ctx.op).then(|| {
            Err(ctx.unsupported(
                "input",
                format!(
                    "{} is imported as shape arithmetic on constants only (every input an integer or BOOL constant, or a `Constant` node's)",
                    ctx.op
                ),
            ))
        });
    };
    // float arithmetic on constants stays in the graph (its rounding is the model's dtype's)
    let int_or_bool = |c: &Constant| c.ints().is_some() || c.bools().is_some();
    let arithmetic = matches!(ctx.op, "Add" | "Sub" | "Mul" | "Div" | "Max" | "Min");
    // variadic Max/Min of other than two inputs maps as usual
    if arithmetic && (!inputs.iter().all(int_or_bool) || inputs.len() != 2) {
        return None;
    }
    if ctx.op == "Gather" && inputs.len() == 2 && inputs[0].ints().is_none() {
        return None;
    }
    let out = ctx.node.output.first().cloned().unwrap_or_default();
    Some(fold(ctx, &inputs).map(|c| b.define_const(&out, c, None)))
}

fn fold(ctx: &Ctx<'_>, xs: &[Constant]) -> One<Constant> {
    let arity = |n: usize| -> One<()> {
        if xs.len() == n {
            Ok(())
        } else {
            Err(ctx.unsupported("input", format!("{} inputs, {n} expected", xs.len())))
        }
    };
    match ctx.op {
        "ConstantOfShape" => {
            arity(1)?;
            let dims = xs[0]
                .ints()
                .and_then(|d| {
                    d.iter()
                        .map(|&v| usize::try_from(v).ok())
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    ctx.unsupported("input[0]", "the shape must be non-negative integers")
                })?;
            let shape = Shape::new(dims);
            let n = shape
                .checked_size()
                .map_err(|e| ctx.unsupported("input[0]", "").because(e))?;
            let fill = match ctx.tensor("value") {
                None => Constant {
                    shape: Shape::scalar(),
                    values: Values::Float(vec![0.0]),
                },
                Some(t) => decode(t).map_err(|i| i.onto(ctx.unsupported("value", "")))?,
            };
            let values = match fill.values {
                Values::Float(v) => Values::Float(vec![v.first().copied().unwrap_or(0.0); n]),
                Values::Int(v) => Values::Int(vec![v.first().copied().unwrap_or(0); n]),
                Values::Bool(v) => Values::Bool(vec![v.first().copied().unwrap_or(false); n]),
            };
            Ok(Constant { shape, values })
        }
        "Range" => {
            arity(3)?;
            let all_int = xs.iter().all(|c| c.ints().is_some());
            let [start, limit, delta] = [0, 1, 2].map(|i| xs[i].single());
            let (Some(start), Some(limit), Some(delta)) = (start, limit, delta) else {
                return Err(ctx.unsupported("input", "start, limit and delta must be scalars"));
            };
            if delta == 0.0 {
                return Err(ctx.unsupported("input[2]", "delta 0"));
            }
            let n = ((limit - start) / delta).ceil().max(0.0) as usize;
            let v: Vec<f64> = (0..n).map(|i| start + i as f64 * delta).collect();
            let shape = Shape::new(vec![n]);
            let values = if all_int {
                Values::Int(v.iter().map(|&x| x as i64).collect())
            } else {
                Values::Float(v)
            };
            Ok(Constant { shape, values })
        }
        "Not" => {
            arity(1)?;
            let v = xs[0]
                .bools()
                .ok_or_else(|| ctx.unsupported("input[0]", "Not takes a BOOL tensor"))?;
            Ok(Constant {
                shape: xs[0].shape.clone(),
                values: Values::Bool(v.iter().map(|b| !b).collect()),
            })
        }
        "Gather" => gather(ctx, xs),
        op => {
            arity(2)?;
            let (a, b) = (&xs[0], &xs[1]);
            let to = broadcast_shape(&a.shape, &b.shape).ok_or_else(|| {
                ctx.unsupported(
                    "input",
                    format!("{} and {} do not broadcast", a.shape, b.shape),
                )
            })?;
            let av = broadcast_values(&a.floats(), &a.shape, &to);
            let bv = broadcast_values(&b.floats(), &b.shape, &to);
            let pairs = av.data().iter().zip(bv.data());
            let values = match op {
                "Equal" => Values::Bool(pairs.map(|(x, y)| x == y).collect()),
                "Less" => Values::Bool(pairs.map(|(x, y)| x < y).collect()),
                "Greater" => Values::Bool(pairs.map(|(x, y)| x > y).collect()),
                "LessOrEqual" => Values::Bool(pairs.map(|(x, y)| x <= y).collect()),
                "GreaterOrEqual" => Values::Bool(pairs.map(|(x, y)| x >= y).collect()),
                "And" => Values::Bool(pairs.map(|(x, y)| *x != 0.0 && *y != 0.0).collect()),
                "Or" => Values::Bool(pairs.map(|(x, y)| *x != 0.0 || *y != 0.0).collect()),
                "Xor" => Values::Bool(pairs.map(|(x, y)| (*x != 0.0) != (*y != 0.0)).collect()),
                _ => {
                    // integer arithmetic, exact (shape values are far below 2^53)
                    let ints: Vec<(i64, i64)> =
                        pairs.map(|(x, y)| (*x as i64, *y as i64)).collect();
                    if matches!(op, "Div" | "Mod") && ints.iter().any(|&(_, y)| y == 0) {
                        return Err(ctx.unsupported("input[1]", "integer division by 0"));
                    }
                    let c_fmod = ctx.int_or("fmod", 0) != 0;
                    Values::Int(
                        ints.iter()
                            .map(|&(x, y)| match op {
                                "Add" => x.saturating_add(y),
                                "Sub" => x.saturating_sub(y),
                                "Mul" => x.saturating_mul(y),
                                "Max" => x.max(y),
                                "Min" => x.min(y),
                                // ONNX's integer Div truncates
                                "Div" => x / y,
                                // Mod: C's fmod (the dividend's sign) with `fmod=1`, else the
                                // divisor's sign, as Python's `%`
                                _ if c_fmod => x % y,
                                _ => ((x % y) + y) % y,
                            })
                            .collect(),
                    )
                }
            };
            Ok(Constant { shape: to, values })
        }
    }
}

/// `Gather` of a constant along any axis with constant indices (negative ones from the end).
fn gather(ctx: &Ctx<'_>, xs: &[Constant]) -> One<Constant> {
    let (data, idx) = (&xs[0], &xs[1]);
    let rank = data.shape.rank();
    let a = axis(ctx, "axis", ctx.int_or("axis", 0), rank)?;
    let extent = data.shape.dims()[a] as i64;
    let ids = idx
        .ints()
        .ok_or_else(|| ctx.unsupported("input[1]", "indices must be integers"))?;
    let ids: Vec<usize> = ids
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + extent } else { i };
            usize::try_from(j)
                .ok()
                .filter(|&j| (j as i64) < extent)
                .ok_or_else(|| {
                    ctx.unsupported("input[1]", format!("index {i} outside an axis of {extent}"))
                })
        })
        .collect::<One<_>>()?;
    Ok(take_along(data, a, &ids, idx.shape.dims()))
}

/// The positions `at` of `data` along axis `a`, in order, as an axis of dims `index_dims` in
/// its place (`[at.len()]` for a slice; the indices' own shape for a gather).
pub(crate) fn take_along(
    data: &Constant,
    a: usize,
    at: &[usize],
    index_dims: &[usize],
) -> Constant {
    let dims = data.shape.dims();
    let outer: usize = dims[..a].iter().product();
    let inner: usize = dims[a + 1..].iter().product();
    let values = data.floats();
    let mut out = Vec::with_capacity(outer * at.len() * inner);
    for o in 0..outer {
        for &i in at {
            let start = (o * dims[a] + i) * inner;
            out.extend_from_slice(&values[start..start + inner]);
        }
    }
    let mut shape: Vec<usize> = dims[..a].to_vec();
    shape.extend_from_slice(index_dims);
    shape.extend_from_slice(&dims[a + 1..]);
    let values = match &data.values {
        Values::Int(_) => Values::Int(out.iter().map(|&v| v as i64).collect()),
        Values::Bool(_) => Values::Bool(out.iter().map(|&v| v != 0.0).collect()),
        Values::Float(_) => Values::Float(out),
    };
    Constant {
        shape: Shape::new(shape),
        values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{AttributeProto, NodeProto};

    fn ints(dims: &[usize], v: &[i64]) -> Constant {
        Constant {
            shape: Shape::new(dims.to_vec()),
            values: Values::Int(v.to_vec()),
        }
    }

    /// Folds a node of `op` (with `attrs`) over `xs`.
    fn run(op: &str, attrs: Vec<AttributeProto>, xs: &[Constant]) -> One<Constant> {
        let node = NodeProto {
            op_type: Some(op.into()),
            output: vec!["y".into()],
            attribute: attrs,
            ..Default::default()
        };
        fold(&Ctx::new(&node, 0), xs)
    }

    fn int_attr(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            name: Some(name.into()),
            i: Some(i),
            ..Default::default()
        }
    }

    #[test]
    fn integer_arithmetic_is_onnxs() {
        let (a, b) = (ints(&[4], &[-3, 3, 7, -7]), ints(&[4], &[2, -2, 3, -3]));
        let values = |c: One<Constant>| c.unwrap().ints().unwrap().to_vec();
        assert_eq!(
            values(run("Div", vec![], &[a.clone(), b.clone()])),
            [-1, -1, 2, 2]
        );
        // Mod takes the divisor's sign (Python's %), fmod=1 the dividend's (C's fmod)
        assert_eq!(
            values(run("Mod", vec![], &[a.clone(), b.clone()])),
            [1, -1, 1, -1]
        );
        assert_eq!(
            values(run(
                "Mod",
                vec![int_attr("fmod", 1)],
                &[a.clone(), b.clone()]
            )),
            [-1, 1, 1, -1]
        );
        assert_eq!(
            values(run("Mul", vec![], &[a.clone(), ints(&[], &[2])])),
            [-6, 6, 14, -14]
        );
        assert!(run("Div", vec![], &[a, ints(&[], &[0])]).is_err());
    }

    #[test]
    fn range_comparisons_and_gather_make_a_causal_mask() {
        let r = run(
            "Range",
            vec![],
            &[ints(&[], &[0]), ints(&[], &[3]), ints(&[], &[1])],
        )
        .unwrap();
        assert_eq!(r.ints().unwrap(), [0, 1, 2]);
        let col = Constant {
            shape: Shape::new(vec![1, 3]),
            values: r.values.clone(),
        };
        let row = Constant {
            shape: Shape::new(vec![3, 1]),
            values: r.values.clone(),
        };
        let mask = run("LessOrEqual", vec![], &[col, row]).unwrap();
        assert_eq!(mask.shape.dims(), [3, 3]);
        let want = [true, false, false, true, true, false, true, true, true];
        assert_eq!(mask.bools().unwrap(), want);
        let not = run("Not", vec![], &[mask]).unwrap();
        assert!(not.bools().unwrap().iter().zip(want).all(|(a, b)| *a != b));
        // Gather along axis 1 with a negative index
        let g = run(
            "Gather",
            vec![int_attr("axis", 1)],
            &[ints(&[2, 3], &[0, 1, 2, 3, 4, 5]), ints(&[2], &[-1, 0])],
        )
        .unwrap();
        assert_eq!(g.shape.dims(), [2, 2]);
        assert_eq!(g.ints().unwrap(), [2, 0, 5, 3]);
        let zeros = run("ConstantOfShape", vec![], &[ints(&[2], &[2, 1])]).unwrap();
        assert_eq!(zeros.shape.dims(), [2, 1]);
        assert_eq!(zeros.floats(), [0.0, 0.0]);
    }
}
