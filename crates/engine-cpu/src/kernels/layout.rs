//! Data movement: broadcast (and its summing adjoint), permutations, concat (and its split).
//! Reshape and detach share their operand's buffer and never reach this module.
//!
//! Broadcast and permute are one strided gather: the output is walked row by row in row-major
//! order with an odometer over the outer axes, and each innermost run is a `memcpy` (source
//! stride 1), a fill (stride 0) or a strided read. The broadcast adjoint is the matching
//! scatter-add, visiting target elements in row-major order as the reference does.

use crate::scalar::CpuScalar;
use crate::tensor::CpuTensor;
use crate::threads::par_rows;
use torchlean_spec::Shape;

/// Source strides, per target axis, of PyTorch's right-aligned `expand` from `from` to `to`
/// (0 on new and broadcast axes).
fn broadcast_strides(from: &Shape, to: &Shape) -> Vec<usize> {
    let lead = to.rank() - from.rank();
    let fs = from.strides();
    (0..to.rank())
        .map(|t| {
            if t < lead || from.dims()[t - lead] == 1 {
                0
            } else {
                fs[t - lead]
            }
        })
        .collect()
}

/// Source offset of the first element of output row `row` (rows = all axes but the last).
fn row_base(dims: &[usize], strides: &[usize], mut row: usize) -> usize {
    let mut off = 0;
    for k in (0..dims.len().saturating_sub(1)).rev() {
        let d = dims[k];
        if d > 0 {
            off += (row % d) * strides[k];
            row /= d;
        }
    }
    off
}

/// `out[i] = src[Σ idx_k · strides_k]` over `out` in row-major order of `dims`.
fn gather<T: CpuScalar>(src: &[T], dims: &[usize], strides: &[usize], out: &mut [T]) {
    let Some((&inner, outer_dims)) = dims.split_last() else {
        // rank 0: one element
        if let (Some(o), Some(&s)) = (out.first_mut(), src.first()) {
            *o = s;
        }
        return;
    };
    let istride = strides[dims.len() - 1];
    let outer_strides = &strides[..outer_dims.len()];
    par_rows(out, inner, inner, |first, rows| {
        let mut idx = vec![0usize; outer_dims.len()];
        // odometer start
        let mut r = first;
        for k in (0..outer_dims.len()).rev() {
            idx[k] = r % outer_dims[k];
            r /= outer_dims[k];
        }
        let mut base = row_base(dims, strides, first);
        for orow in rows.chunks_exact_mut(inner) {
            match istride {
                1 => orow.copy_from_slice(&src[base..base + inner]),
                0 => orow.fill(src[base]),
                s => {
                    for (o, &v) in orow.iter_mut().zip(src[base..].iter().step_by(s)) {
                        *o = v;
                    }
                }
            }
            // advance the odometer
            for k in (0..outer_dims.len()).rev() {
                idx[k] += 1;
                base += outer_strides[k];
                if idx[k] < outer_dims[k] {
                    break;
                }
                base -= outer_strides[k] * outer_dims[k];
                idx[k] = 0;
            }
        }
    });
}

/// Tile edge of the blocked transpose.
const TILE: usize = 16;

/// [`gather`] when the second-to-last output axis is contiguous in the source (a transpose of
/// the two innermost axes, possibly batched): `TILE × TILE` tiles, so that each source cache
/// line is used whole while it is in L1, instead of one element per line.
pub(crate) fn gather_tiled<T: CpuScalar>(
    src: &[T],
    dims: &[usize],
    strides: &[usize],
    out: &mut [T],
) {
    let r = dims.len();
    let (an, ln, ls) = (dims[r - 2], dims[r - 1], strides[r - 1]);
    let (outer_dims, outer_strides) = (&dims[..r - 2], &strides[..r - 2]);
    let base_of = |mut o: usize| {
        let mut off = 0;
        for k in (0..outer_dims.len()).rev() {
            off += (o % outer_dims[k]) * outer_strides[k];
            o /= outer_dims[k];
        }
        off
    };
    par_rows(out, ln, ln, |first, rows| {
        let nrows = rows.len() / ln;
        let mut r0 = 0;
        while r0 < nrows {
            let row = first + r0;
            let (o, a0) = (row / an, row % an);
            let cnt = TILE.min(an - a0).min(nrows - r0);
            let base = base_of(o) + a0;
            for l0 in (0..ln).step_by(TILE) {
                let l1 = (l0 + TILE).min(ln);
                for k in 0..cnt {
                    let orow = &mut rows[(r0 + k) * ln + l0..(r0 + k) * ln + l1];
                    let col = src[base + k + l0 * ls..].iter().step_by(ls);
                    for (o, &v) in orow.iter_mut().zip(col) {
                        *o = v;
                    }
                }
            }
            r0 += cnt;
        }
    });
}

pub(crate) fn broadcast<T: CpuScalar>(x: &CpuTensor<T>, to: Shape) -> CpuTensor<T> {
    if x.shape() == &to {
        return x.share(to);
    }
    let strides = broadcast_strides(x.shape(), &to);
    let mut out = CpuTensor::uninit(to.clone());
    gather(x.as_slice(), to.dims(), &strides, out.data_mut());
    out
}

/// Sums the cotangent back onto `from`, visiting target elements in row-major order.
pub(crate) fn broadcast_vjp<T: CpuScalar>(cot: &CpuTensor<T>, from: &Shape) -> CpuTensor<T> {
    if cot.shape() == from {
        return cot.clone();
    }
    let to = cot.shape();
    let strides = broadcast_strides(from, to);
    let mut acc = CpuTensor::uninit(from.clone());
    let a = acc.data_mut();
    a.fill(T::ZERO);
    let c = cot.as_slice();
    let dims = to.dims();
    let Some((&inner, outer_dims)) = dims.split_last() else {
        return acc;
    };
    if inner == 0 || c.is_empty() {
        return acc;
    }
    let istride = strides[dims.len() - 1];
    let outer_strides = &strides[..outer_dims.len()];
    let mut idx = vec![0usize; outer_dims.len()];
    let mut base = 0usize;
    for crow in c.chunks_exact(inner) {
        match istride {
            1 => {
                for (o, &v) in a[base..base + inner].iter_mut().zip(crow) {
                    *o += v;
                }
            }
            0 => {
                let mut s = a[base];
                for &v in crow {
                    s += v;
                }
                a[base] = s;
            }
            s => {
                for (o, &v) in a[base..].iter_mut().step_by(s).zip(crow) {
                    *o += v;
                }
            }
        }
        for k in (0..outer_dims.len()).rev() {
            idx[k] += 1;
            base += outer_strides[k];
            if idx[k] < outer_dims[k] {
                break;
            }
            base -= outer_strides[k] * outer_dims[k];
            idx[k] = 0;
        }
    }
    acc
}

/// `out[i₀, …] = x[j]` with `j[perm[k]] = i[k]` (`out_shape` from the shape rule).
pub(crate) fn permute<T: CpuScalar>(
    x: &CpuTensor<T>,
    perm: &[usize],
    out_shape: Shape,
) -> CpuTensor<T> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return x.share(out_shape);
    }
    let in_strides = x.shape().strides();
    // drop size-1 axes: they do not move data and only slow the walk
    let (dims, strides): (Vec<usize>, Vec<usize>) = perm
        .iter()
        .map(|&p| (x.shape().dims()[p], in_strides[p]))
        .filter(|&(d, _)| d != 1)
        .unzip();
    let mut out = CpuTensor::uninit(out_shape);
    let r = dims.len();
    if r == 0 {
        out.data_mut().copy_from_slice(x.as_slice());
    } else if r >= 2 && strides[r - 2] == 1 && dims[r - 1] >= TILE && dims[r - 2] >= TILE {
        gather_tiled(x.as_slice(), &dims, &strides, out.data_mut());
    } else {
        gather(x.as_slice(), &dims, &strides, out.data_mut());
    }
    out
}

pub(crate) fn concat<T: CpuScalar>(
    args: &[&CpuTensor<T>],
    axis: usize,
    out_shape: Shape,
) -> CpuTensor<T> {
    let (_, total, inner) = out_shape.split_at_axis(axis);
    let row = total * inner;
    let mut out = CpuTensor::uninit(out_shape);
    par_rows(out.data_mut(), row, row, |first, rows| {
        for (g, orow) in rows.chunks_exact_mut(row).enumerate() {
            let o = first + g;
            let mut at = 0;
            for t in args {
                let len = t.shape().dims()[axis] * inner;
                orow[at..at + len].copy_from_slice(&t.as_slice()[o * len..(o + 1) * len]);
                at += len;
            }
        }
    });
    out
}

/// `x.narrow(axis, start, len)`: one copy per outer row; the whole extent shares the input's
/// buffer.
pub(crate) fn slice<T: CpuScalar>(
    x: &CpuTensor<T>,
    axis: usize,
    start: usize,
    out_shape: Shape,
) -> CpuTensor<T> {
    if out_shape == *x.shape() {
        return x.share(out_shape);
    }
    let (_, n, inner) = x.shape().split_at_axis(axis);
    let row = out_shape.dims()[axis] * inner;
    let src = x.as_slice();
    let mut out = CpuTensor::uninit(out_shape);
    par_rows(out.data_mut(), row, row, |first, rows| {
        for (g, orow) in rows.chunks_exact_mut(row).enumerate() {
            let from = ((first + g) * n + start) * inner;
            orow.copy_from_slice(&src[from..from + row]);
        }
    });
    out
}

/// The adjoint of [`slice`]: each input row is zeros around the cotangent's row (every element
/// written once).
pub(crate) fn slice_vjp<T: CpuScalar>(
    cot: &CpuTensor<T>,
    in_shape: &Shape,
    axis: usize,
    start: usize,
) -> CpuTensor<T> {
    if cot.shape() == in_shape {
        return cot.clone();
    }
    let (_, n, inner) = in_shape.split_at_axis(axis);
    let (row, piece) = (n * inner, cot.shape().dims()[axis] * inner);
    let (lo, c) = (start * inner, cot.as_slice());
    let mut dx = CpuTensor::uninit(in_shape.clone());
    par_rows(dx.data_mut(), row, row, |first, rows| {
        for (g, drow) in rows.chunks_exact_mut(row).enumerate() {
            let from = (first + g) * piece;
            drow[..lo].fill(T::ZERO);
            drow[lo..lo + piece].copy_from_slice(&c[from..from + piece]);
            drow[lo + piece..].fill(T::ZERO);
        }
    });
    dx
}

/// Splits the cotangent back into the operands' pieces.
pub(crate) fn concat_vjp<T: CpuScalar>(
    cot: &CpuTensor<T>,
    shapes: &[Shape],
    axis: usize,
) -> Vec<CpuTensor<T>> {
    let (_, total, inner) = cot.shape().split_at_axis(axis);
    let c = cot.as_slice();
    let mut offset = 0;
    shapes
        .iter()
        .map(|s| {
            let len = s.dims()[axis] * inner;
            let mut part = CpuTensor::uninit(s.clone());
            let at = offset;
            par_rows(part.data_mut(), len, len, |first, rows| {
                for (g, prow) in rows.chunks_exact_mut(len).enumerate() {
                    let o = first + g;
                    let start = o * total * inner + at;
                    prow.copy_from_slice(&c[start..start + len]);
                }
            });
            offset += len;
            part
        })
        .collect()
}

/// Row `ids[p]` of `table` `[V, D]` for each position `p` (ids validated), rows in parallel.
pub(crate) fn gather_rows<T: CpuScalar>(
    table: &CpuTensor<T>,
    ids: &[usize],
    out_shape: Shape,
) -> CpuTensor<T> {
    let d = table.shape().dims()[1];
    let src = table.as_slice();
    let mut out = CpuTensor::uninit(out_shape);
    par_rows(out.data_mut(), d, d, |first, rows| {
        for (g, orow) in rows.chunks_exact_mut(d).enumerate() {
            let i = ids[first + g];
            orow.copy_from_slice(&src[i * d..(i + 1) * d]);
        }
    });
    out
}

/// The adjoint of [`gather_rows`]: row `p` of the cotangent added into row `ids[p]` of zeros.
/// The table's rows are split between threads and each thread scans every position in order,
/// so a row's sum is first position to last whatever the thread count (the reference's order).
pub(crate) fn gather_rows_vjp<T: CpuScalar>(
    cot: &CpuTensor<T>,
    ids: &[usize],
    table: &Shape,
) -> CpuTensor<T> {
    let d = table.dims()[1];
    let dy = cot.as_slice();
    let mut dt = CpuTensor::uninit(table.clone());
    let per_row_cost = ids.len().div_ceil(table.dims()[0].max(1)) * d + d;
    par_rows(dt.data_mut(), d, per_row_cost, |first, rows| {
        rows.fill(T::ZERO);
        let count = rows.len() / d.max(1);
        for (p, &i) in ids.iter().enumerate() {
            if (first..first + count).contains(&i) {
                let to = &mut rows[(i - first) * d..(i - first + 1) * d];
                for (slot, &v) in to.iter_mut().zip(&dy[p * d..(p + 1) * d]) {
                    *slot += v;
                }
            }
        }
    });
    dt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], data: Vec<f64>) -> CpuTensor<f64> {
        CpuTensor::from_vec(shape, data).unwrap()
    }

    #[test]
    fn slice_and_its_adjoint_match_the_definition() {
        let x = t(&[2, 5], (0..10).map(f64::from).collect());
        let y = slice(&x, 1, 1, Shape::from([2, 3]));
        assert_eq!(y.as_slice(), &[1.0, 2.0, 3.0, 6.0, 7.0, 8.0]);
        let dx = slice_vjp(&y, x.shape(), 1, 1);
        assert_eq!(
            dx.as_slice(),
            &[0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 6.0, 7.0, 8.0, 0.0]
        );
        // the whole extent shares storage; an empty slice has no elements
        assert!(slice(&x, 0, 0, Shape::from([2, 5])).shares_storage_with(&x));
        assert!(slice(&x, 1, 5, Shape::from([2, 0])).is_empty());
    }

    #[test]
    fn broadcast_is_right_aligned() {
        let x = t(&[3], vec![1.0, 2.0, 3.0]);
        let y = broadcast(&x, Shape::from([2, 3]));
        assert_eq!(y.as_slice(), &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        let x = t(&[2, 1], vec![1.0, 2.0]);
        let y = broadcast(&x, Shape::from([2, 3]));
        assert_eq!(y.as_slice(), &[1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        let back = broadcast_vjp(&y, x.shape());
        assert_eq!(back.as_slice(), &[3.0, 6.0]);
    }

    #[test]
    fn the_tiled_transpose_equals_the_plain_walk_for_any_extents() {
        // `permute` takes `gather_tiled` only for transposes of at least TILE × TILE, for
        // speed; on any extents (partial tiles, fewer rows than a tile) it must give the same
        // result, so that choice changes nothing but the time (xtask/mutants-equivalent.json)
        for (batch, a, b) in [
            (1, 1, 1),
            (1, 3, 5),
            (1, 16, 16),
            (2, 17, 33),
            (3, 40, 7),
            (2, 5, 40),
        ] {
            // the source [batch, a, b], row-major; the output its transpose [batch, b, a]
            let src: Vec<f64> = (0..batch * a * b).map(|v| v as f64).collect();
            let (dims, strides) = ([batch, b, a], [a * b, 1, b]);
            let mut plain = vec![0.0; src.len()];
            let mut tiled = vec![-1.0; src.len()];
            gather(&src, &dims, &strides, &mut plain);
            gather_tiled(&src, &dims, &strides, &mut tiled);
            assert_eq!(plain, tiled, "{dims:?}");
        }
    }

    #[test]
    fn permute_matches_the_definition() {
        let x = t(&[2, 3, 4], (0..24).map(f64::from).collect());
        let y = permute(&x, &[2, 0, 1], Shape::from([4, 2, 3]));
        for i in 0..4 {
            for j in 0..2 {
                for k in 0..3 {
                    // out[i, j, k] = x[j, k, i]
                    assert_eq!(
                        y.as_slice()[(i * 2 + j) * 3 + k],
                        x.as_slice()[(j * 3 + k) * 4 + i]
                    );
                }
            }
        }
    }

    #[test]
    fn tiled_transposes_match_the_definition() {
        for (b, m, n) in [(1, 40, 33), (3, 17, 70), (2, 16, 16)] {
            let x = t(&[b, m, n], (0..b * m * n).map(|i| i as f64).collect());
            let y = permute(&x, &[0, 2, 1], Shape::from([b, n, m]));
            for bb in 0..b {
                for i in 0..n {
                    for j in 0..m {
                        assert_eq!(
                            y.as_slice()[(bb * n + i) * m + j],
                            x.as_slice()[(bb * m + j) * n + i]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn concat_and_split_round_trip() {
        let a = t(&[2, 1], vec![1.0, 2.0]);
        let b = t(&[2, 2], vec![3.0, 4.0, 5.0, 6.0]);
        let c = concat(&[&a, &b], 1, Shape::from([2, 3]));
        assert_eq!(c.as_slice(), &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
        let parts = concat_vjp(&c, &[a.shape().clone(), b.shape().clone()], 1);
        assert_eq!(parts[0].as_slice(), a.as_slice());
        assert_eq!(parts[1].as_slice(), b.as_slice());
    }
}
