//! Ops that move data without arithmetic (broadcast, reshape, permutations, concat), and their
//! VJPs (the adjoint data movement; broadcast's adjoint sums).

use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

pub(crate) fn check_axis(
    op: &'static str,
    attr: &'static str,
    axis: usize,
    s: &Shape,
) -> Result<()> {
    if axis >= s.rank() {
        return Err(SpecError::AxisOutOfRange {
            op,
            attr,
            axis,
            shape: s.clone(),
        });
    }
    Ok(())
}

pub(crate) fn rank_err(op: &'static str, s: &Shape, reason: &str) -> SpecError {
    SpecError::OpShape {
        op,
        shapes: vec![s.clone()],
        reason: reason.to_string(),
    }
}

/// PyTorch's `expand` rule: align `from` with the trailing axes of `to`; each aligned source
/// extent equals the target extent or is 1.
pub fn broadcast_compatible(from: &Shape, to: &Shape) -> bool {
    if from.rank() > to.rank() {
        return false;
    }
    let lead = to.rank() - from.rank();
    from.dims()
        .iter()
        .enumerate()
        .all(|(i, &d)| d == 1 || d == to.dims()[lead + i])
}

pub(crate) fn infer_broadcast(from: &Shape, to: &Shape, input: &Shape) -> Result<Shape> {
    const OP: &str = super::desc::BROADCAST_TO.name;
    check_declared(OP, "from_shape", from, input)?;
    if !broadcast_compatible(from, to) {
        return Err(SpecError::OpAttr {
            op: OP,
            attr: "to_shape",
            reason: format!(
                "{to} is not reachable from {from} (right-aligned: each source extent must \
                 equal the target extent or be 1)"
            ),
        });
    }
    Ok(to.clone())
}

/// The source offset read by each target offset.
fn broadcast_source_offset(from: &Shape, to: &Shape, target: &[usize]) -> usize {
    let lead = to.rank() - from.rank();
    let mut off = 0;
    for (i, &d) in from.dims().iter().enumerate() {
        let idx = if d == 1 { 0 } else { target[lead + i] };
        off = off * d + idx;
    }
    off
}

pub(crate) fn broadcast<A: Scalar>(x: &Tensor<A>, to: &Shape) -> Result<Tensor<A>> {
    let from = x.shape().clone();
    Tensor::from_fn(to.clone(), |idx| {
        x.data()[broadcast_source_offset(&from, to, idx)].clone()
    })
}

/// Sums the cotangent back onto the source shape, visiting target elements in row-major order.
pub(crate) fn broadcast_vjp<A: Scalar>(cot: &Tensor<A>, from: &Shape) -> Result<Tensor<A>> {
    let to = cot.shape();
    let mut acc = Tensor::<A>::zeros(from.clone())?;
    let (d, sums) = (cot.data(), acc.data_mut());
    to.for_each_index(|off, idx| {
        let slot = &mut sums[broadcast_source_offset(from, to, idx)];
        *slot = slot.add(&d[off]);
    });
    Ok(acc)
}

/// An attribute that restates the operand's shape (`in_shape`, `value_shape`) must equal it.
pub(crate) fn check_declared(
    op: &'static str,
    attr: &'static str,
    declared: &Shape,
    input: &Shape,
) -> Result<()> {
    if declared != input {
        return Err(SpecError::OpAttr {
            op,
            attr,
            reason: format!("is {declared} but the operand has shape {input}"),
        });
    }
    Ok(())
}

pub(crate) fn infer_reshape(to: &Shape, input: &Shape) -> Result<Shape> {
    let n = to.checked_size()?;
    if n != input.size() {
        return Err(SpecError::OpShape {
            op: super::desc::RESHAPE.name,
            shapes: vec![input.clone()],
            reason: format!("cannot reshape {} elements into {to}", input.size()),
        });
    }
    Ok(to.clone())
}

pub(crate) fn infer_permute(op: &'static str, perm: &[usize], input: &Shape) -> Result<Shape> {
    let rank = input.rank();
    let mut seen = vec![false; rank];
    if perm.len() != rank {
        return Err(SpecError::OpAttr {
            op,
            attr: "perm",
            reason: format!(
                "{perm:?} has length {}, the operand {input} has rank {rank}",
                perm.len()
            ),
        });
    }
    for &p in perm {
        if p >= rank || seen[p] {
            return Err(SpecError::OpAttr {
                op,
                attr: "perm",
                reason: format!("{perm:?} is not a permutation of 0..{rank}"),
            });
        }
        seen[p] = true;
    }
    Ok(Shape::new(
        perm.iter().map(|&p| input.dims()[p]).collect::<Vec<_>>(),
    ))
}

/// Inverse permutation.
pub(crate) fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// `out[i₀, …] = x[j]` with `j[perm[k]] = i[k]`.
pub(crate) fn permute<A: Scalar>(x: &Tensor<A>, perm: &[usize]) -> Result<Tensor<A>> {
    let out_shape = infer_permute(super::desc::PERMUTE.name, perm, x.shape())?;
    let in_strides = x.shape().strides();
    Tensor::from_fn(out_shape, |idx| {
        let off: usize = idx.iter().zip(perm).map(|(&i, &p)| i * in_strides[p]).sum();
        x.data()[off].clone()
    })
}

/// `x.narrow(axis, start, len)`: `start` and `start + len` (overflow-checked) within the
/// extent of `axis`.
pub(crate) fn infer_slice(axis: usize, start: usize, len: usize, x: &Shape) -> Result<Shape> {
    const OP: &str = "slice";
    check_axis(OP, "axis", axis, x)?;
    let extent = x.dims()[axis];
    if start > extent {
        return Err(SpecError::OpAttr {
            op: OP,
            attr: "start",
            reason: format!("is {start}, past the extent {extent} of axis {axis} (operand {x})"),
        });
    }
    let end = start.checked_add(len).ok_or_else(|| SpecError::OpAttr {
        op: OP,
        attr: "len",
        reason: format!("is {len}: start + len overflows"),
    })?;
    if end > extent {
        return Err(SpecError::OpAttr {
            op: OP,
            attr: "len",
            reason: format!(
                "is {len}: start + len = {end} is past the extent {extent} of axis {axis} \
                 (operand {x})"
            ),
        });
    }
    let mut dims = x.dims().to_vec();
    dims[axis] = len;
    Ok(Shape::new(dims))
}

/// Indices `start..start + len` of `axis` (shape validated by [`infer_slice`]).
pub(crate) fn slice<A: Scalar>(
    x: &Tensor<A>,
    axis: usize,
    start: usize,
    out: &Shape,
) -> Result<Tensor<A>> {
    let (outer, n, inner) = x.shape().split_at_axis(axis);
    let len = out.dims()[axis];
    let mut data = Vec::with_capacity(out.size());
    for o in 0..outer {
        let from = (o * n + start) * inner;
        data.extend_from_slice(&x.data()[from..from + len * inner]);
    }
    Tensor::new(out.clone(), data)
}

/// The adjoint of [`slice`]: the cotangent scattered into zeros of the input's shape.
pub(crate) fn slice_vjp<A: Scalar>(
    cot: &Tensor<A>,
    in_shape: &Shape,
    axis: usize,
    start: usize,
) -> Result<Tensor<A>> {
    let (outer, n, inner) = in_shape.split_at_axis(axis);
    let len = cot.shape().dims()[axis];
    let mut dx = Tensor::<A>::zeros(in_shape.clone())?;
    for o in 0..outer {
        let to = (o * n + start) * inner;
        let from = o * len * inner;
        dx.data_mut()[to..to + len * inner].clone_from_slice(&cot.data()[from..from + len * inner]);
    }
    Ok(dx)
}

/// `embedding`'s shape rule: ids of any shape and a table `[V, D]` give `ids' shape + [D]`.
pub(crate) fn infer_embedding(ids: &Shape, table: &Shape) -> Result<Shape> {
    if table.rank() != 2 {
        return Err(SpecError::OpShape {
            op: super::desc::EMBEDDING.name,
            shapes: vec![ids.clone(), table.clone()],
            reason: "the weight must be [V, D]".into(),
        });
    }
    let mut dims = ids.dims().to_vec();
    dims.push(table.dims()[1]);
    Ok(Shape::new(dims))
}

/// Row `ids[p]` of `table` `[V, D]` for each position `p` (ids validated: each `< V`).
pub(crate) fn gather_rows<A: Scalar>(
    table: &Tensor<A>,
    ids: &[usize],
    out: &Shape,
) -> Result<Tensor<A>> {
    let d = table.shape().dims()[1];
    let mut data = Vec::with_capacity(ids.len() * d);
    for &i in ids {
        data.extend_from_slice(&table.data()[i * d..(i + 1) * d]);
    }
    Tensor::new(out.clone(), data)
}

/// The adjoint of [`gather_rows`]: row `p` of the cotangent added into row `ids[p]` of zeros of
/// the table's shape, positions in order (a repeated id sums its rows first to last).
pub(crate) fn gather_rows_vjp<A: Scalar>(
    cot: &Tensor<A>,
    ids: &[usize],
    table: &Shape,
) -> Result<Tensor<A>> {
    let d = table.dims()[1];
    let mut dt = Tensor::<A>::zeros(table.clone())?;
    for (p, &i) in ids.iter().enumerate() {
        let from = &cot.data()[p * d..(p + 1) * d];
        for (slot, v) in dt.data_mut()[i * d..(i + 1) * d].iter_mut().zip(from) {
            *slot = slot.add(v);
        }
    }
    Ok(dt)
}

pub(crate) fn infer_concat(axis: usize, inputs: &[Shape]) -> Result<Shape> {
    const OP: &str = super::desc::CONCAT.name;
    if inputs.len() < 2 {
        return Err(SpecError::Arity {
            op: OP,
            expected: "at least 2".into(),
            got: inputs.len(),
        });
    }
    let first = &inputs[0];
    check_axis(OP, "axis", axis, first)?;
    let mut total = 0usize;
    for s in inputs {
        let same_off_axis = s.rank() == first.rank()
            && s.dims()
                .iter()
                .zip(first.dims())
                .enumerate()
                .all(|(i, (a, b))| i == axis || a == b);
        if !same_off_axis {
            return Err(SpecError::OpShape {
                op: OP,
                shapes: inputs.to_vec(),
                reason: format!("operands must agree on every axis except {axis}"),
            });
        }
        total = total
            .checked_add(s.dims()[axis])
            .ok_or_else(|| SpecError::ShapeOverflow {
                dims: s.dims().to_vec(),
            })?;
    }
    let mut dims = first.dims().to_vec();
    dims[axis] = total;
    Ok(Shape::new(dims))
}

pub(crate) fn concat<A: Scalar>(
    args: &[&Tensor<A>],
    axis: usize,
    out: &Shape,
) -> Result<Tensor<A>> {
    let (outer, _, inner) = out.split_at_axis(axis);
    let mut data = Vec::with_capacity(out.size());
    for o in 0..outer {
        for t in args {
            let n = t.shape().dims()[axis];
            let start = o * n * inner;
            data.extend_from_slice(&t.data()[start..start + n * inner]);
        }
    }
    Tensor::new(out.clone(), data)
}

pub(crate) fn concat_vjp<A: Scalar>(
    cot: &Tensor<A>,
    shapes: &[Shape],
    axis: usize,
) -> Result<Vec<Tensor<A>>> {
    let (outer, total, inner) = cot.shape().split_at_axis(axis);
    let mut parts: Vec<Vec<A>> = shapes
        .iter()
        .map(|s| Vec::with_capacity(s.size()))
        .collect();
    for o in 0..outer {
        let mut start = o * total * inner;
        for (k, s) in shapes.iter().enumerate() {
            let len = s.dims()[axis] * inner;
            parts[k].extend_from_slice(&cot.data()[start..start + len]);
            start += len;
        }
    }
    parts
        .into_iter()
        .zip(shapes)
        .map(|(d, s)| Tensor::new(s.clone(), d))
        .collect()
}
