//! The layout family on the CUDA engine: data movement without arithmetic, and broadcast's
//! summing adjoint (`kernels/layout.cu`).
//!
//! Broadcast, permute, slice and concat's VJP are one strided gather (`tl_layout_gather`): the
//! host describes the source offset of each output element as dims and strides
//! ([`GatherPlan`]: size-1 axes dropped, contiguous axes merged, so the kernel's index
//! arithmetic is as short as the layout allows); concat places each operand with one launch,
//! slice's VJP pads with zeros in one launch, and broadcast's VJP sums each source element's
//! targets in row-major order in `double` in one thread ([`SumPlan`]), or, for few sources with
//! long sums, in a fixed two-pass split ([`split_plan`]). A layout op that moves nothing
//! (identity permutation, broadcast or slice to the same shape) shares the operand's buffer.
//! Every op checks its shapes with the op's own rule first (`Op::infer_shape`): the kernels have
//! no bounds checks.

use super::{launch_into, launch_new};
use crate::buffer::Buffer;
use crate::device::{Arg, Device};
use crate::error::{CudaError, Result};
use crate::geometry::{index, index_table, row_major_strides, Launch};
use crate::kernels::LAYOUT;
use crate::tensor::CudaTensor;
use torchlean_spec::ops::desc;
use torchlean_spec::{Op, Shape, SpecError};

/// `out[i] = src[offset + Σ_k idx_k(i) · strides[k]]` with `idx(i)` the row-major multi-index
/// of `i` over `dims`, simplified.
///
/// Invariant: `dims.len() == strides.len()`, no extent is 1, and no two neighbouring axes `k`,
/// `k + 1` satisfy `strides[k] == strides[k + 1] · dims[k + 1]` (they would have been merged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatherPlan {
    pub dims: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
}

/// Drops size-1 axes and merges each axis into its outer neighbour when the two are contiguous
/// in the source (`strides[k] == strides[k + 1] · dims[k + 1]`); the visiting order and each
/// element's source offset are unchanged.
fn simplify(dims: &[usize], strides: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut d: Vec<usize> = Vec::with_capacity(dims.len());
    let mut s: Vec<usize> = Vec::with_capacity(dims.len());
    for (&dim, &stride) in dims.iter().zip(strides) {
        if dim == 1 {
            continue;
        }
        match (d.last_mut(), s.last_mut()) {
            (Some(pd), Some(ps)) if *ps == stride.saturating_mul(dim) => {
                *pd = pd.saturating_mul(dim);
                *ps = stride;
            }
            _ => {
                d.push(dim);
                s.push(stride);
            }
        }
    }
    (d, s)
}

impl GatherPlan {
    /// The plan reading `dims` (row-major) at `strides` from `offset`.
    pub fn new(dims: &[usize], strides: &[usize], offset: usize) -> GatherPlan {
        let (dims, strides) = simplify(dims, strides);
        GatherPlan {
            dims,
            strides,
            offset,
        }
    }

    /// PyTorch's right-aligned `expand` from `from` to `to`: stride 0 on new and broadcast
    /// axes.
    pub fn broadcast(from: &Shape, to: &Shape) -> GatherPlan {
        let lead = to.rank() - from.rank();
        let fs = row_major_strides(from.dims());
        let strides: Vec<usize> = (0..to.rank())
            .map(|t| {
                if t < lead || from.dims()[t - lead] == 1 {
                    0
                } else {
                    fs[t - lead]
                }
            })
            .collect();
        GatherPlan::new(to.dims(), &strides, 0)
    }

    /// `out[i₀, …] = x[j]` with `j[perm[k]] = i[k]`.
    pub fn permute(input: &Shape, perm: &[usize]) -> GatherPlan {
        let is = row_major_strides(input.dims());
        let dims: Vec<usize> = perm.iter().map(|&p| input.dims()[p]).collect();
        let strides: Vec<usize> = perm.iter().map(|&p| is[p]).collect();
        GatherPlan::new(&dims, &strides, 0)
    }

    /// Indices `start..start + len` of `axis` of `input` (`len` from the output shape).
    pub fn slice(input: &Shape, axis: usize, start: usize, len: usize) -> GatherPlan {
        let (outer, n, inner) = input.split_at_axis(axis);
        GatherPlan::new(&[outer, len, inner], &[n * inner, inner, 1], start * inner)
    }

    /// The kernel's table: dims, then strides.
    fn table(&self, op: &'static str) -> Result<Vec<i64>> {
        let mut t = Vec::with_capacity(2 * self.dims.len());
        for &d in &self.dims {
            t.push(index(op, "extent", d)?);
        }
        for &s in &self.strides {
            t.push(index(op, "stride", s)?);
        }
        Ok(t)
    }

    /// A new tensor of `out` gathered from `x` by this plan.
    fn run<D: Device>(
        &self,
        op: &'static str,
        x: &CudaTensor<D>,
        out: Shape,
    ) -> Result<CudaTensor<D>> {
        let n = out.checked_size()?;
        let table = self.table(op)?;
        // tl_layout_gather(float* y, const float* x, const long long* table,
        //                  long long rank, long long offset, long long n)
        launch_new(
            LAYOUT.kernel("tl_layout_gather"),
            Launch::for_items(n),
            out,
            [
                Arg::In(x.mem()),
                Arg::Table(&table),
                Arg::Index(index(op, "rank", self.dims.len())?),
                Arg::Index(index(op, "offset", self.offset)?),
                Arg::Index(index(op, "n", n)?),
            ],
        )
    }
}

/// Broadcast's adjoint from `to` back onto `from`: each source element (row-major over the
/// `kept` axes, the target axes the source has) sums the cotangent over the `summed` axes (new
/// and broadcast ones), in row-major target order. Both lists are `(extent, target stride)`,
/// simplified like [`GatherPlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SumPlan {
    pub kept: Vec<(usize, usize)>,
    pub summed: Vec<(usize, usize)>,
}

impl SumPlan {
    pub fn new(from: &Shape, to: &Shape) -> SumPlan {
        let lead = to.rank() - from.rank();
        let ts = row_major_strides(to.dims());
        let (mut kd, mut ks, mut sd, mut ss) = (vec![], vec![], vec![], vec![]);
        for (t, (&d, &s)) in to.dims().iter().zip(&ts).enumerate() {
            let broadcast = t < lead || from.dims()[t - lead] == 1;
            // a size-1 target axis is dropped by `simplify`; keep it in either list
            let (dims, strides) = if broadcast {
                (&mut sd, &mut ss)
            } else {
                (&mut kd, &mut ks)
            };
            dims.push(d);
            strides.push(s);
        }
        let (kd, ks) = simplify(&kd, &ks);
        let (sd, ss) = simplify(&sd, &ss);
        SumPlan {
            kept: kd.into_iter().zip(ks).collect(),
            summed: sd.into_iter().zip(ss).collect(),
        }
    }

    /// How many cotangent elements each source element sums.
    pub fn count(&self) -> usize {
        self.summed.iter().map(|&(d, _)| d).product()
    }

    /// The kernel's table: kept dims, kept strides, summed dims, summed strides.
    fn table(&self, op: &'static str) -> Result<Vec<i64>> {
        let mut t = Vec::with_capacity(2 * (self.kept.len() + self.summed.len()));
        for list in [&self.kept, &self.summed] {
            for &(d, _) in list {
                t.push(index(op, "extent", d)?);
            }
            for &(_, s) in list {
                t.push(index(op, "stride", s)?);
            }
        }
        Ok(t)
    }
}

/// The op's own shape rule must give `out` from `inputs`: the kernels index buffers by these
/// shapes with no bounds checks, so a call the dispatch did not validate is refused here rather
/// than read or written past a buffer.
fn check_rule(op: Op, inputs: &[Shape], out: &Shape) -> Result<()> {
    let got = op.infer_shape(inputs)?;
    if &got != out {
        return Err(CudaError::Spec(SpecError::OpShape {
            op: op.name(),
            shapes: inputs.to_vec(),
            reason: format!("the output shape is {got}, not the {out} asked for"),
        }));
    }
    Ok(())
}

pub fn broadcast<D: Device>(x: &CudaTensor<D>, out: &Shape) -> Result<CudaTensor<D>> {
    if x.shape() == out {
        return x.share(out.clone());
    }
    let from = x.shape().clone();
    check_rule(
        Op::BroadcastTo {
            from: from.clone(),
            to: out.clone(),
        },
        std::slice::from_ref(&from),
        out,
    )?;
    GatherPlan::broadcast(&from, out).run(desc::BROADCAST_TO.name, x, out.clone())
}

/// Threads a split broadcast VJP aims for (a fraction of an H200's resident threads is enough
/// for a memory-bound pass).
const SPLIT_THREADS: usize = 1 << 18;
/// The fewest targets a chunk of a split broadcast VJP sums.
const SPLIT_MIN_CHUNK: usize = 256;

/// How a broadcast VJP with `n` source elements of `count` targets each is split: `None` for
/// one thread per source element (enough of them, or short sums), else `(chunks, len)` — each
/// source's targets in `chunks` consecutive runs of `len` (the last one shorter), summed by
/// their own threads and then combined in order.
pub fn split_plan(n: usize, count: usize) -> Option<(usize, usize)> {
    if n == 0 || n >= SPLIT_THREADS {
        return None;
    }
    let chunks = SPLIT_THREADS.div_ceil(n).min(count / SPLIT_MIN_CHUNK);
    if chunks < 2 {
        return None;
    }
    let len = count.div_ceil(chunks);
    Some((count.div_ceil(len), len))
}

/// Sums the cotangent back onto `from`, each source element's targets in row-major order, in
/// double: one thread per source element, or (few sources with long sums, [`split_plan`]) a
/// fixed two-pass split whose partial sums keep double precision (two floats each). Either way
/// deterministic.
pub fn broadcast_vjp<D: Device>(dy: &CudaTensor<D>, from: &Shape) -> Result<CudaTensor<D>> {
    const OP: &str = desc::BROADCAST_TO.name;
    if dy.shape() == from {
        return Ok(dy.clone());
    }
    check_rule(
        Op::BroadcastTo {
            from: from.clone(),
            to: dy.shape().clone(),
        },
        std::slice::from_ref(from),
        dy.shape(),
    )?;
    let plan = SumPlan::new(from, dy.shape());
    let n = from.checked_size()?;
    let count = plan.count();
    let table = plan.table(OP)?;
    let (n_kept, n_sum) = (
        index(OP, "rank", plan.kept.len())?,
        index(OP, "rank", plan.summed.len())?,
    );
    let Some((chunks, len)) = split_plan(n, count) else {
        // tl_layout_broadcast_vjp(float* dx, const float* dy, const long long* table,
        //                         long long n_kept, long long n_sum, long long count,
        //                         long long n)
        return launch_new(
            LAYOUT.kernel("tl_layout_broadcast_vjp"),
            Launch::for_items(n),
            from.clone(),
            [
                Arg::In(dy.mem()),
                Arg::Table(&table),
                Arg::Index(n_kept),
                Arg::Index(n_sum),
                Arg::Index(index(OP, "count", count)?),
                Arg::Index(index(OP, "n", n)?),
            ],
        );
    };
    let items = n * chunks;
    let mut partials = Buffer::<D>::uninit(2 * items)?;
    // tl_layout_broadcast_vjp_partial(float* partials, const float* dy,
    //                                 const long long* table, long long n_kept,
    //                                 long long n_sum, long long count, long long len,
    //                                 long long n, long long items)
    launch_into(
        LAYOUT.kernel("tl_layout_broadcast_vjp_partial"),
        Launch::for_items(items),
        [&mut partials],
        [
            Arg::In(dy.mem()),
            Arg::Table(&table),
            Arg::Index(n_kept),
            Arg::Index(n_sum),
            Arg::Index(index(OP, "count", count)?),
            Arg::Index(index(OP, "chunk", len)?),
            Arg::Index(index(OP, "n", n)?),
            Arg::Index(index(OP, "items", items)?),
        ],
    )?;
    // tl_layout_sum_partials(float* dx, const float* partials, long long chunks, long long n)
    launch_new(
        LAYOUT.kernel("tl_layout_sum_partials"),
        Launch::for_items(n),
        from.clone(),
        [
            Arg::In(partials.mem()),
            Arg::Index(index(OP, "chunks", chunks)?),
            Arg::Index(index(OP, "n", n)?),
        ],
    )
}

pub fn permute<D: Device>(x: &CudaTensor<D>, perm: &[usize], out: &Shape) -> Result<CudaTensor<D>> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return x.share(out.clone());
    }
    check_rule(
        Op::Permute {
            perm: perm.to_vec(),
        },
        std::slice::from_ref(x.shape()),
        out,
    )?;
    GatherPlan::permute(x.shape(), perm).run(desc::PERMUTE.name, x, out.clone())
}

pub fn slice<D: Device>(
    x: &CudaTensor<D>,
    axis: usize,
    start: usize,
    out: &Shape,
) -> Result<CudaTensor<D>> {
    if out == x.shape() {
        return x.share(out.clone());
    }
    let len = out.dims().get(axis).copied().unwrap_or(0);
    check_rule(
        Op::Slice { axis, start, len },
        std::slice::from_ref(x.shape()),
        out,
    )?;
    GatherPlan::slice(x.shape(), axis, start, len).run(desc::SLICE.name, x, out.clone())
}

/// The cotangent scattered into zeros of the input's shape: one launch writing every element.
pub fn slice_vjp<D: Device>(
    dy: &CudaTensor<D>,
    in_shape: &Shape,
    axis: usize,
    start: usize,
) -> Result<CudaTensor<D>> {
    const OP: &str = desc::SLICE.name;
    if dy.shape() == in_shape {
        return Ok(dy.clone());
    }
    let len = dy.shape().dims().get(axis).copied().unwrap_or(0);
    check_rule(
        Op::Slice { axis, start, len },
        std::slice::from_ref(in_shape),
        dy.shape(),
    )?;
    let (_, n_axis, inner) = in_shape.split_at_axis(axis);
    let (row, piece) = (n_axis * inner, dy.shape().dims()[axis] * inner);
    let n = in_shape.checked_size()?;
    // tl_layout_pad(float* dx, const float* dy, long long row, long long lo,
    //               long long piece, long long n)
    launch_new(
        LAYOUT.kernel("tl_layout_pad"),
        Launch::for_items(n),
        in_shape.clone(),
        [
            Arg::In(dy.mem()),
            Arg::Index(index(OP, "row", row)?),
            Arg::Index(index(OP, "start", start * inner)?),
            Arg::Index(index(OP, "piece", piece)?),
            Arg::Index(index(OP, "n", n)?),
        ],
    )
}

/// Each operand placed into its columns of the output's rows (one launch per non-empty
/// operand; every output element written by exactly one of them).
pub fn concat<D: Device>(
    args: &[&CudaTensor<D>],
    axis: usize,
    out: &Shape,
) -> Result<CudaTensor<D>> {
    const OP: &str = desc::CONCAT.name;
    let shapes: Vec<Shape> = args.iter().map(|t| t.shape().clone()).collect();
    check_rule(Op::Concat { axis }, &shapes, out)?;
    let (_, total, inner) = out.split_at_axis(axis);
    let row = total * inner;
    let mut buf = Buffer::<D>::uninit(out.checked_size()?)?;
    let mut at = 0usize;
    for t in args {
        let piece = t.shape().dims()[axis] * inner;
        let n = t.len();
        if n > 0 {
            // tl_layout_place(float* y, const float* x, long long piece, long long row,
            //                 long long at, long long n)
            launch_into(
                LAYOUT.kernel("tl_layout_place"),
                Launch::for_items(n),
                [&mut buf],
                [
                    Arg::In(t.mem()),
                    Arg::Index(index(OP, "piece", piece)?),
                    Arg::Index(index(OP, "row", row)?),
                    Arg::Index(index(OP, "at", at)?),
                    Arg::Index(index(OP, "n", n)?),
                ],
            )?;
        }
        at += piece;
    }
    CudaTensor::from_buffer(out.clone(), buf)
}

/// Each operand's piece of the cotangent: a gather of its columns of every row.
pub fn concat_vjp<D: Device>(
    dy: &CudaTensor<D>,
    shapes: &[Shape],
    axis: usize,
) -> Result<Vec<CudaTensor<D>>> {
    check_rule(Op::Concat { axis }, shapes, dy.shape())?;
    let (outer, total, inner) = dy.shape().split_at_axis(axis);
    let mut at = 0usize;
    shapes
        .iter()
        .map(|s| {
            let piece = s.dims()[axis] * inner;
            let plan = GatherPlan::new(&[outer, piece], &[total * inner, 1], at);
            at += piece;
            plan.run(desc::CONCAT.name, dy, s.clone())
        })
        .collect()
}

/// `embedding`: row `ids[p]` of `table` `[V, D]` per position (ids validated), one thread per
/// output element.
pub fn gather_rows<D: Device>(
    table: &CudaTensor<D>,
    ids: &[usize],
    out: &Shape,
) -> Result<CudaTensor<D>> {
    const OP: &str = desc::EMBEDDING.name;
    let d = table.shape().dims()[1];
    let n = out.checked_size()?;
    let ids = index_table(OP, "ids", ids)?;
    // tl_layout_gather_rows(float* y, const float* table, const long long* ids, ll d, ll n)
    launch_new(
        LAYOUT.kernel("tl_layout_gather_rows"),
        Launch::for_items(n),
        out.clone(),
        [
            Arg::In(table.mem()),
            Arg::Table(&ids),
            Arg::Index(index(OP, "D", d)?),
            Arg::Index(index(OP, "n", n)?),
        ],
    )
}

/// The adjoint of [`gather_rows`]: one thread per table element sums the cotangent's rows of
/// the positions holding its row's id, first to last (the host's order, so the same bits).
pub fn gather_rows_vjp<D: Device>(
    dy: &CudaTensor<D>,
    ids: &[usize],
    table: &Shape,
) -> Result<CudaTensor<D>> {
    const OP: &str = "embedding_vjp";
    let d = table.dims()[1];
    let n = table.checked_size()?;
    let positions = ids.len();
    let ids = index_table(OP, "ids", ids)?;
    // tl_layout_gather_rows_vjp(float* dt, const float* dy, const long long* ids,
    //                           ll positions, ll d, ll n)
    launch_new(
        LAYOUT.kernel("tl_layout_gather_rows_vjp"),
        Launch::for_items(n),
        table.clone(),
        [
            Arg::In(dy.mem()),
            Arg::Table(&ids),
            Arg::Index(index(OP, "positions", positions)?),
            Arg::Index(index(OP, "D", d)?),
            Arg::Index(index(OP, "n", n)?),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan's source offsets, in output order (what the kernel computes).
    fn offsets(p: &GatherPlan) -> Vec<usize> {
        let n: usize = p.dims.iter().product();
        (0..n)
            .map(|i| {
                let (mut rem, mut off) = (i, p.offset);
                for k in (0..p.dims.len()).rev() {
                    off += (rem % p.dims[k]) * p.strides[k];
                    rem /= p.dims[k];
                }
                off
            })
            .collect()
    }

    #[test]
    fn simplification_drops_unit_axes_and_merges_contiguous_ones() {
        assert_eq!(
            simplify(&[2, 1, 3, 4], &[12, 12, 4, 1]),
            (vec![24], vec![1])
        );
        assert_eq!(simplify(&[1, 1], &[1, 1]), (vec![], vec![]));
        // a transpose stays two axes
        assert_eq!(simplify(&[4, 3], &[1, 4]), (vec![4, 3], vec![1, 4]));
        // stride-0 axes merge with each other, not with data
        assert_eq!(simplify(&[2, 3, 5], &[0, 0, 1]), (vec![6, 5], vec![0, 1]));
    }

    #[test]
    fn broadcast_plans_read_the_right_aligned_source() {
        let p = GatherPlan::broadcast(&Shape::from([3]), &Shape::from([2, 3]));
        assert_eq!(offsets(&p), vec![0, 1, 2, 0, 1, 2]);
        let p = GatherPlan::broadcast(&Shape::from([2, 1]), &Shape::from([2, 3]));
        assert_eq!(offsets(&p), vec![0, 0, 0, 1, 1, 1]);
        let p = GatherPlan::broadcast(&Shape::from([]), &Shape::from([2, 2]));
        assert_eq!(offsets(&p), vec![0, 0, 0, 0]);
        let p = GatherPlan::broadcast(&Shape::from([2, 1, 2]), &Shape::from([2, 2, 2]));
        assert_eq!(offsets(&p), vec![0, 1, 0, 1, 2, 3, 2, 3]);
    }

    #[test]
    fn permute_plans_follow_the_definition() {
        let input = Shape::from([2, 3, 4]);
        let p = GatherPlan::permute(&input, &[2, 0, 1]);
        let off = offsets(&p);
        for i in 0..4 {
            for j in 0..2 {
                for k in 0..3 {
                    // out[i, j, k] = x[j, k, i]
                    assert_eq!(off[(i * 2 + j) * 3 + k], (j * 3 + k) * 4 + i);
                }
            }
        }
    }

    #[test]
    fn slice_plans_read_the_window_of_each_row() {
        let p = GatherPlan::slice(&Shape::from([2, 5]), 1, 1, 3);
        assert_eq!(offsets(&p), vec![1, 2, 3, 6, 7, 8]);
        let p = GatherPlan::slice(&Shape::from([3, 2]), 0, 1, 2);
        assert_eq!(offsets(&p), vec![2, 3, 4, 5]);
    }

    #[test]
    fn long_sums_of_few_sources_are_split_into_whole_chunks() {
        // many sources, or short sums: one thread each
        assert_eq!(split_plan(1 << 18, 1 << 20), None);
        assert_eq!(split_plan(4, 300), None);
        assert_eq!(split_plan(0, 1 << 20), None);
        // a scalar over 300 000 targets: runs of at least 256, covering every target once
        for (n, count) in [(1, 300_000), (3, 1000), (512, 512), (1, 513), (7, 1 << 22)] {
            let Some((chunks, len)) = split_plan(n, count) else {
                panic!("{n} x {count}: not split")
            };
            assert!(
                chunks >= 2 && len >= SPLIT_MIN_CHUNK,
                "{n} x {count}: {chunks} x {len}"
            );
            assert!(
                (chunks - 1) * len < count && chunks * len >= count,
                "{chunks} x {len}"
            );
            assert!(n * chunks <= SPLIT_THREADS + n, "{n} x {chunks}");
        }
    }

    #[test]
    fn sum_plans_split_kept_and_broadcast_axes() {
        // [3] -> [4, 3]: each source element sums a column (stride 3)
        let p = SumPlan::new(&Shape::from([3]), &Shape::from([4, 3]));
        assert_eq!(p.kept, vec![(3, 1)]);
        assert_eq!(p.summed, vec![(4, 3)]);
        assert_eq!(p.count(), 4);
        // [2, 1] -> [5, 2, 3]: kept axis 1; summed axes 0 and 2, not contiguous
        let p = SumPlan::new(&Shape::from([2, 1]), &Shape::from([5, 2, 3]));
        assert_eq!(p.kept, vec![(2, 3)]);
        assert_eq!(p.summed, vec![(5, 6), (3, 1)]);
        // a scalar sums everything, as one merged axis
        let p = SumPlan::new(&Shape::from([]), &Shape::from([2, 3]));
        assert!(p.kept.is_empty());
        assert_eq!(p.summed, vec![(6, 1)]);
        // an empty target sums nothing
        let p = SumPlan::new(&Shape::from([1]), &Shape::from([0]));
        assert_eq!(p.count(), 0);
    }
}
