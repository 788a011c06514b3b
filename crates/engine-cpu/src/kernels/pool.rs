//! Max and average pooling over the last two axes of `[C,H,W]` or `[N,C,H,W]`, and their VJPs.
//!
//! Windows are clipped to the real cells (padding is never read) and scanned in row-major
//! order. Max: the first maximum wins, except that a NaN always takes over (PyTorch's rule;
//! with several NaNs the last one is the winner, as in the reference scan). Average: the sum
//! over real cells divided by `kH·kW` (padded cells count in the divisor). VJPs route or spread
//! each output cotangent in output row-major order. Planes are independent, so they go to
//! threads freely.

use crate::error::CpuError;
use crate::scalar::CpuScalar;
use crate::simd::{kernel, vectorized};
use crate::tensor::CpuTensor;
use crate::threads::par_rows;
use torchlean_spec::{PoolSpec, Shape};

/// `(planes, h, w, ho, wo)` of a validated pooling.
fn dims(x: &Shape, out: &Shape) -> (usize, usize, usize, usize, usize) {
    let (xd, od) = (x.dims(), out.dims());
    let r = xd.len();
    let planes = xd[..r - 2].iter().product();
    (planes, xd[r - 2], xd[r - 1], od[r - 2], od[r - 1])
}

/// Clipped window `[lo, hi)` along one axis for output index `i`.
fn window(i: usize, k: usize, s: usize, pad: usize, extent: usize) -> (usize, usize) {
    let start = i * s;
    let lo = start.saturating_sub(pad).min(extent);
    let hi = (start + k).saturating_sub(pad).min(extent);
    (lo, hi.max(lo))
}

/// Per-axis window ranges for every output index.
fn windows(out: usize, k: usize, s: usize, pad: usize, extent: usize) -> Vec<(usize, usize)> {
    (0..out).map(|i| window(i, k, s, pad, extent)).collect()
}

/// The max scan's one rule: a later cell `v` takes over from the winner so far when greater or
/// NaN (so the first maximum wins, and the last NaN).
#[inline(always)]
fn takes_over<T: CpuScalar>(v: T, best: T) -> bool {
    v > best || v.is_nan()
}

/// Offset (within the plane) of the winner of one window, if the window has a real cell.
#[inline]
fn argmax<T: CpuScalar>(
    plane: &[T],
    w: usize,
    (r0, r1): (usize, usize),
    (c0, c1): (usize, usize),
) -> Option<usize> {
    let mut best: Option<(usize, T)> = None;
    for r in r0..r1 {
        for (dc, &v) in plane[r * w + c0..r * w + c1].iter().enumerate() {
            let take = match best {
                None => true,
                Some((_, b)) => takes_over(v, b),
            };
            if take {
                best = Some((r * w + c0 + dc, v));
            }
        }
    }
    best.map(|(k, _)| k)
}

/// The winner's value of one window ([`argmax`]'s, by the same rule: a later cell wins when
/// greater or NaN), without tracking where it is: the forward's loop.
#[inline]
fn window_max<T: CpuScalar>(
    plane: &[T],
    w: usize,
    (r0, r1): (usize, usize),
    (c0, c1): (usize, usize),
) -> Option<T> {
    if r0 >= r1 || c0 >= c1 {
        return None;
    }
    // folding the first cell onto itself changes nothing (`v > v` is false; a NaN stays), so
    // every cell is scanned from it: plain nested loops (a `flat_map` does not unroll)
    let mut best = plane[r0 * w + c0];
    for r in r0..r1 {
        for &v in &plane[r * w + c0..r * w + c1] {
            if takes_over(v, best) {
                best = v;
            }
        }
    }
    Some(best)
}

/// One output row of a max pooling whose windows all hold a real cell, row by row: each window
/// row's maximum across its columns (`across`, one per output column), folded into the output
/// row by the scan's rule in row order. The scan is row-major, and folding a row onto the
/// running winner equals folding the row's own winner (a later cell wins when greater or NaN,
/// whichever cells came before it), so the values are [`window_max`]'s bits; the fold across
/// rows runs over whole output rows, which vectorises.
#[inline(always)]
fn max_by_rows<T: CpuScalar>(
    plane: &[T],
    w: usize,
    geom: Across,
    (r0, r1): (usize, usize),
    cols: &[(usize, usize)],
    yrow: &mut [T],
    scratch: &mut RowScratch<T>,
) {
    let RowScratch { across, strided } = scratch;
    for r in r0..r1 {
        let row = &plane[r * w..(r + 1) * w];
        let dst = if r == r0 { &mut *yrow } else { &mut *across };
        across_row(row, geom, cols, dst, strided);
        if r > r0 {
            fold_into(yrow, across);
        }
    }
}

/// One plane's max pooling, row by row ([`max_by_rows`]), compiled for the widest
/// instruction set: the windows are the output rows' and columns' ranges and the columns'
/// [`Across`].
#[inline(always)]
fn plane_max<T: CpuScalar>((plane, w, (rows, cols, geom), yplane, scratch): PlaneMaxArgs<'_, T>) {
    for (yrow, &rr) in yplane.chunks_exact_mut(cols.len().max(1)).zip(rows) {
        max_by_rows(plane, w, geom, rr, cols, yrow, scratch);
    }
}

/// [`plane_max`]'s arguments: the plane and its width, the windows, the output plane, the
/// scratch.
type PlaneMaxArgs<'a, T> = (
    &'a [T],
    usize,
    (&'a [(usize, usize)], &'a [(usize, usize)], Across),
    &'a mut [T],
    &'a mut RowScratch<T>,
);

kernel!(PlaneMax => plane_max<'a> [T: (CpuScalar)] (PlaneMaxArgs<'a, T>) -> ());

/// [`max_by_rows`]'s buffers: one row of window maxima (`across`, the output's width) and the
/// maxima of a strided pooling's windows at every column (`strided`, the input's width).
struct RowScratch<T> {
    across: Vec<T>,
    strided: Vec<T>,
}

/// The column windows of a max pooling along one row: width `k`, stride `s`, the output
/// columns `full` whose windows lie wholly inside the row (`j·s − pad ..` `+ k`).
#[derive(Clone, Copy)]
struct Across {
    k: usize,
    s: usize,
    pad: usize,
    full: (usize, usize),
}

impl Across {
    fn new(k: usize, s: usize, pad: usize, w: usize, cols: &[(usize, usize)]) -> Self {
        let whole = |j: usize| j * s >= pad && j * s - pad + k <= w;
        let lo = (0..cols.len()).find(|&j| whole(j)).unwrap_or(cols.len());
        let hi = (lo..cols.len()).find(|&j| !whole(j)).unwrap_or(cols.len());
        Across {
            k,
            s,
            pad,
            full: (lo, hi),
        }
    }
}

/// Each column window's winner along one row (`dst[j]` for window `cols[j]`, scanned left to
/// right). The whole windows go tap by tap across all of them (`dst[j]` folds
/// `row[j·s − pad + t]` for `t` in order: the same scan per window, in a loop over `j` that
/// vectorises); the clipped ones at the edges cell by cell. With a stride `s`, the windows
/// starting at every column between are folded too (into `strided`, scratch of the row's
/// length) and every `s`-th kept: contiguous loads instead of strided ones, `s` times the
/// compares (ResNet-18's 3×3 stride-2 pooling of 64 × 112 × 112, one thread, with the loops
/// compiled for AVX-512 ([`PlaneMax`]): 1.7–2.6 → 0.77 ms alone, 1.8 → 1.0 ms in the network).
#[inline(always)]
fn across_row<T: CpuScalar>(
    row: &[T],
    a: Across,
    cols: &[(usize, usize)],
    dst: &mut [T],
    strided: &mut [T],
) {
    let fold = |(c0, c1): (usize, usize)| {
        let mut best = row[c0];
        for &v in &row[c0..c1] {
            if takes_over(v, best) {
                best = v;
            }
        }
        best
    };
    let (lo, hi) = a.full;
    for j in (0..lo).chain(hi..cols.len()) {
        dst[j] = fold(cols[j]);
    }
    if lo >= hi {
        return;
    }
    let first = lo * a.s - a.pad;
    let mid = &mut dst[lo..hi];
    if a.s == 1 {
        fold_taps(&row[first..], a.k, mid);
        return;
    }
    // every start's window (stride 1), then every s-th of them
    let starts = &mut strided[..(mid.len() - 1) * a.s + 1];
    fold_taps(&row[first..], a.k, starts);
    for (j, d) in mid.iter_mut().enumerate() {
        *d = starts[j * a.s];
    }
}

/// `dst[i]` = the winner of `row[i..i + k]`, scanned left to right: tap by tap over all the
/// windows ([`fold_into`]). The windows lie inside the row.
#[inline(always)]
fn fold_taps<T: CpuScalar>(row: &[T], k: usize, dst: &mut [T]) {
    let n = dst.len();
    dst.copy_from_slice(&row[..n]);
    for t in 1..k {
        fold_into(dst, &row[t..t + n]);
    }
}

/// `dst[i]` = the winner of `dst[i]` then `src[i]` (a select per element, which vectorises).
#[inline(always)]
fn fold_into<T: CpuScalar>(dst: &mut [T], src: &[T]) {
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = if takes_over(v, *d) { v } else { *d };
    }
}

/// Work of `planes`' windows (at most the real cells each), saturating: the parallel split's
/// estimate, never a loop bound.
fn cost(spec: &PoolSpec, (h, w, ho, wo): (usize, usize, usize, usize)) -> usize {
    let cells = spec.kernel_h.min(h).saturating_mul(spec.kernel_w.min(w));
    (ho * wo).saturating_mul(cells).saturating_add(h * w)
}

pub(crate) fn forward<T: CpuScalar>(
    spec: &PoolSpec,
    x: &CpuTensor<T>,
    out_shape: Shape,
) -> Result<CpuTensor<T>, CpuError> {
    let (_, h, w, ho, wo) = dims(x.shape(), &out_shape);
    let rows = windows(ho, spec.kernel_h, spec.stride, spec.padding, h);
    let cols = windows(wo, spec.kernel_w, spec.stride, spec.padding, w);
    let is_max = spec.kind == torchlean_spec::PoolKind::Max;
    let area = T::from_usize(if is_max { 1 } else { spec.divisor()? });
    let mut out = CpuTensor::uninit(out_shape);
    let src = x.as_slice();
    let cost = cost(spec, (h, w, ho, wo));
    let nonempty = |ws: &[(usize, usize)]| ws.iter().all(|&(lo, hi)| lo < hi);
    let by_rows = is_max && nonempty(&rows) && nonempty(&cols);
    let geom = Across::new(spec.kernel_w, spec.stride, spec.padding, w, &cols);
    par_rows(out.data_mut(), ho * wo, cost, |first, planes| {
        let mut scratch = RowScratch {
            across: vec![T::ZERO; if by_rows { wo } else { 0 }],
            strided: vec![T::ZERO; if by_rows { w } else { 0 }],
        };
        for (k, yplane) in planes.chunks_exact_mut(ho * wo).enumerate() {
            let plane = &src[(first + k) * h * w..][..h * w];
            if by_rows {
                let windows = (&rows[..], &cols[..], geom);
                vectorized::<PlaneMax, _>((plane, w, windows, yplane, &mut scratch));
                continue;
            }
            for (yrow, &rr) in yplane.chunks_exact_mut(wo).zip(&rows) {
                for (y, &cc) in yrow.iter_mut().zip(&cols) {
                    *y = if is_max {
                        window_max(plane, w, rr, cc).unwrap_or(T::ZERO)
                    } else {
                        let mut acc = T::ZERO;
                        for r in rr.0..rr.1 {
                            for &v in &plane[r * w + cc.0..r * w + cc.1] {
                                acc += v;
                            }
                        }
                        acc / area
                    };
                }
            }
        }
    });
    Ok(out)
}

/// Routes each output cotangent to its window's winner.
pub(crate) fn max_vjp<T: CpuScalar>(
    spec: &PoolSpec,
    x: &CpuTensor<T>,
    dy: &CpuTensor<T>,
) -> CpuTensor<T> {
    let (_, h, w, ho, wo) = dims(x.shape(), dy.shape());
    let rows = windows(ho, spec.kernel_h, spec.stride, spec.padding, h);
    let cols = windows(wo, spec.kernel_w, spec.stride, spec.padding, w);
    let mut dx = CpuTensor::uninit(x.shape().clone());
    let (src, ds) = (x.as_slice(), dy.as_slice());
    let cost = cost(spec, (h, w, ho, wo));
    par_rows(dx.data_mut(), h * w, cost, |first, planes| {
        for (k, gplane) in planes.chunks_exact_mut(h * w).enumerate() {
            let p = first + k;
            let plane = &src[p * h * w..][..h * w];
            let dplane = &ds[p * ho * wo..][..ho * wo];
            gplane.fill(T::ZERO);
            for (drow, &rr) in dplane.chunks_exact(wo.max(1)).zip(&rows) {
                for (&d, &cc) in drow.iter().zip(&cols) {
                    if let Some(i) = argmax(plane, w, rr, cc) {
                        gplane[i] += d;
                    }
                }
            }
        }
    });
    dx
}

/// Spreads `dy / (kH·kW)` over each window's real cells.
pub(crate) fn avg_vjp<T: CpuScalar>(
    spec: &PoolSpec,
    in_shape: &Shape,
    dy: &CpuTensor<T>,
) -> Result<CpuTensor<T>, CpuError> {
    let (_, h, w, ho, wo) = dims(in_shape, dy.shape());
    let rows = windows(ho, spec.kernel_h, spec.stride, spec.padding, h);
    let cols = windows(wo, spec.kernel_w, spec.stride, spec.padding, w);
    let area = T::from_usize(spec.divisor()?);
    let mut dx = CpuTensor::uninit(in_shape.clone());
    let ds = dy.as_slice();
    let cost = cost(spec, (h, w, ho, wo));
    par_rows(dx.data_mut(), h * w, cost, |first, planes| {
        for (k, gplane) in planes.chunks_exact_mut(h * w).enumerate() {
            let dplane = &ds[(first + k) * ho * wo..][..ho * wo];
            gplane.fill(T::ZERO);
            for (drow, &rr) in dplane.chunks_exact(wo.max(1)).zip(&rows) {
                for (&d, &cc) in drow.iter().zip(&cols) {
                    let g = d / area;
                    for r in rr.0..rr.1 {
                        for v in &mut gplane[r * w + cc.0..r * w + cc.1] {
                            *v += g;
                        }
                    }
                }
            }
        }
    });
    Ok(dx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlean_spec::PoolKind;

    fn spec(kind: PoolKind, k: usize, s: usize, p: usize) -> PoolSpec {
        PoolSpec {
            kind,
            kernel_h: k,
            kernel_w: k,
            stride: s,
            padding: p,
            padded: p > 0,
        }
    }

    #[test]
    fn max_pool_first_maximum_wins_but_nan_takes_over() {
        let x = CpuTensor::<f64>::from_vec([1, 2, 2], vec![3.0, 3.0, 1.0, 3.0]).unwrap();
        let sp = spec(PoolKind::Max, 2, 2, 0);
        let y = forward(&sp, &x, Shape::from([1, 1, 1])).unwrap();
        assert_eq!(y.as_slice(), &[3.0]);
        let d = CpuTensor::from_vec([1, 1, 1], vec![1.0]).unwrap();
        assert_eq!(max_vjp(&sp, &x, &d).as_slice(), &[1.0, 0.0, 0.0, 0.0]);
        let x = CpuTensor::<f64>::from_vec([1, 2, 2], vec![1.0, f64::NAN, 5.0, 2.0]).unwrap();
        assert!(forward(&sp, &x, Shape::from([1, 1, 1])).unwrap().as_slice()[0].is_nan());
        assert_eq!(max_vjp(&sp, &x, &d).as_slice(), &[0.0, 1.0, 0.0, 0.0]);
    }

    /// Cells that tell the max scan's order apart: signed zeros, ties, NaNs of two payloads,
    /// infinities.
    const TRICKY: [f64; 11] = [
        0.0,
        -0.0,
        1.5,
        1.5,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        -2.0,
        0.0,
        3.0,
    ];

    #[test]
    fn the_forwards_window_max_is_the_value_at_the_vjps_argmax() {
        // signed zeros, ties, NaNs of two payloads and infinities, in every window of a plane
        let (h, w) = (5, 6);
        let plane: Vec<f64> = (0..h * w).map(|i| TRICKY[(i * 7 + i / 5) % 9]).collect();
        for (r0, r1) in [(0, 1), (0, 3), (1, 4), (2, 5), (3, 3)] {
            for (c0, c1) in [(0, 1), (0, 3), (2, 6), (4, 4)] {
                let want = argmax(&plane, w, (r0, r1), (c0, c1)).map(|i| plane[i].to_bits());
                let got = window_max(&plane, w, (r0, r1), (c0, c1)).map(f64::to_bits);
                assert_eq!(got, want, "rows {r0}..{r1}, columns {c0}..{c1}");
            }
        }
    }

    /// The forward's row-by-row maxima ([`max_by_rows`], [`across_row`]) are the winners the
    /// VJP's cell-by-cell scan finds ([`argmax`]), bit for bit — signed zeros, ties, NaNs of
    /// two payloads — for windows of 1 to 3 cells, strides 1 to 3, with and without padding
    /// (clipped edge windows beside whole ones), windows of 4 and 5 cells at strides 1 to 5.
    #[test]
    fn the_row_by_row_maxima_are_the_scans_winners() {
        // a narrow plane and one wide enough for the vector loops' bodies
        for (h, w) in [(7, 10), (5, 53)] {
            row_by_row_maxima_are_the_scans_winners(h, w);
        }
    }

    fn row_by_row_maxima_are_the_scans_winners(h: usize, w: usize) {
        let n = TRICKY.len();
        let plane: Vec<f64> = (0..2 * h * w)
            .map(|i| TRICKY[(i * 7 + i / 9) % n])
            .collect();
        let x = CpuTensor::<f64>::from_vec([2, h, w], plane.clone()).unwrap();
        for k in 1..=5 {
            for s in 1..=k.max(3) {
                for p in 0..=k / 2 {
                    let sp = spec(PoolKind::Max, k, s, p);
                    let (ho, wo) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
                    let y = forward(&sp, &x, Shape::from([2, ho, wo])).unwrap();
                    let rows = windows(ho, k, s, p, h);
                    let cols = windows(wo, k, s, p, w);
                    for (n, yplane) in y.as_slice().chunks_exact(ho * wo).enumerate() {
                        let src = &plane[n * h * w..][..h * w];
                        for (i, &rr) in rows.iter().enumerate() {
                            for (j, &cc) in cols.iter().enumerate() {
                                let want = argmax(src, w, rr, cc).map(|c| src[c].to_bits());
                                assert_eq!(
                                    Some(yplane[i * wo + j].to_bits()),
                                    want,
                                    "k {k}, s {s}, pad {p}, plane {n}, cell ({i}, {j})"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn avg_pool_counts_padding_in_the_divisor() {
        let x = CpuTensor::<f64>::filled([1, 2, 2], 1.0).unwrap();
        let sp = spec(PoolKind::Avg, 2, 1, 1);
        let y = forward(&sp, &x, Shape::from([1, 3, 3])).unwrap();
        assert_eq!(y.as_slice()[0], 0.25);
        assert_eq!(y.as_slice()[4], 1.0);
    }
}
