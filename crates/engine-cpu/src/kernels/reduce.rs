//! Reductions: along one axis (removed), over everything, and the mean-squared-error loss.
//!
//! Determinism: a sum over a contiguous run is computed in fixed blocks of [`BLOCK`] elements,
//! each with 32 interleaved accumulators combined in a fixed tree, and the block sums are
//! folded left from zero. Blocks may be summed on different threads, but the arithmetic is the
//! same for every thread count (the sequential path does exactly the same operations). A sum
//! across rows (reducing a non-last axis) adds whole rows in index order, vectorised along the
//! row: the reference's own order. A mean over zero elements is `0/0 = NaN`, as in PyTorch (and
//! the reference); its VJP has no elements.

use super::elementwise::POLY;
use crate::scalar::CpuScalar;
use crate::simd::{kernel, vectorized, vectorized_if};
use crate::tensor::CpuTensor;
use crate::threads::{par_rows, should_par};
use rayon::prelude::*;
use torchlean_spec::Shape;

/// Elements per summation block.
pub(crate) const BLOCK: usize = 1024;

/// Interleaved accumulators of the fixed-order sums: enough independent chains to keep the
/// adders busy at AVX-512 width. A constant, so the order never depends on the machine.
const LANES: usize = 32;

/// Combines the lane accumulators in a fixed tree.
#[inline(always)]
fn combine<T: CpuScalar>(acc: &[T; LANES]) -> T {
    let mut v = *acc;
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for k in 0..n {
            v[k] += v[k + n];
        }
    }
    v[0]
}

/// `Σ f(x_i)` over at most one block, `LANES` interleaved accumulators (vectorises), fixed
/// order.
#[inline(always)]
fn block_sum<T: CpuScalar>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            acc[k] += f(c[k]);
        }
    }
    let mut s = combine(&acc);
    for &v in rest {
        s += f(v);
    }
    s
}

/// `Σ f(x_i)` over a row with interleaved accumulators (vectorises; fixed order).
#[inline(always)]
pub(crate) fn lane_sum<T: CpuScalar>(x: &[T], f: impl Fn(T) -> T) -> T {
    block_sum(x, f)
}

/// `Σ f(a_i, b_i)` over two rows with interleaved accumulators (vectorises; fixed order).
#[inline(always)]
pub(crate) fn lane_sum2<T: CpuScalar>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let ca = a.chunks_exact(LANES);
    let cb = b.chunks_exact(LANES);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..LANES {
            acc[k] += f(x[k], y[k]);
        }
    }
    let mut s = combine(&acc);
    for (&x, &y) in ra.iter().zip(rb) {
        s += f(x, y);
    }
    s
}

/// The largest element of a non-empty row by `if m > v then m else v`, lanes at a time.
///
/// Without NaNs this is the maximum, whatever the order. With a NaN the sequential fold and
/// this one may pick different values, which is harmless where it is used (a softmax shift:
/// the NaN reaches every output through the normaliser either way).
#[inline(always)]
pub(crate) fn lane_max<T: CpuScalar>(x: &[T]) -> T {
    let pick = |m: T, v: T| if m > v { m } else { v };
    let Some(&first) = x.first() else {
        return T::ZERO;
    };
    let mut acc = [first; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            acc[k] = pick(acc[k], c[k]);
        }
    }
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for k in 0..n {
            acc[k] = pick(acc[k], acc[k + n]);
        }
    }
    let mut m = acc[0];
    for &v in rest {
        m = pick(m, v);
    }
    m
}

/// [`sum_seq`]'s arithmetic, for kernels that inline it.
#[inline(always)]
pub(crate) fn blocks_sum<T: CpuScalar>(x: &[T]) -> T {
    x.chunks(BLOCK)
        .fold(T::ZERO, |acc, b| acc + block_sum(b, |v| v))
}

kernel!(BlocksSum => blocks_sum<'a> [T: (CpuScalar)] (&'a [T]) -> T);
kernel!(BlockSums => block_sums<'a> [T: (CpuScalar)] (&'a [T]) -> Vec<T>);
kernel!(RowSums => row_sums<'a> [T: (CpuScalar)] ((&'a [T], &'a mut [T], usize)) -> ());

/// Blocked sum of `x`, single-threaded.
pub(crate) fn sum_seq<T: CpuScalar>(x: &[T]) -> T {
    vectorized_if::<BlocksSum, _>(x.len(), x)
}

/// Blocked sum of `x`: the same arithmetic as [`sum_seq`], runs of blocks in parallel when
/// long.
pub(crate) fn sum<T: CpuScalar>(x: &[T]) -> T {
    if should_par(x.len()) {
        let parts: Vec<T> = x
            .par_chunks(BLOCK * 16)
            .flat_map_iter(vectorized::<BlockSums, _>)
            .collect();
        parts.into_iter().fold(T::ZERO, |acc, s| acc + s)
    } else {
        sum_seq(x)
    }
}

/// The sum of each block of a run.
#[inline(always)]
fn block_sums<T: CpuScalar>(run: &[T]) -> Vec<T> {
    run.chunks(BLOCK).map(|b| block_sum(b, |v| v)).collect()
}

/// The mean denominator `n` (0 for no elements: the mean is then `0/0 = NaN`).
fn denominator<T: CpuScalar>(n: usize) -> T {
    T::from_usize(n)
}

/// Sum (or mean) over `axis`, which is removed.
pub(crate) fn reduce_axis<T: CpuScalar>(
    x: &CpuTensor<T>,
    axis: usize,
    out_shape: Shape,
    mean: bool,
) -> CpuTensor<T> {
    let (outer, n, inner) = x.shape().split_at_axis(axis);
    let denom = denominator::<T>(n);
    let mut out = CpuTensor::uninit(out_shape);
    let src = x.as_slice();
    if inner == 1 {
        let finish = |s: T| if mean { s / denom } else { s };
        if outer == 1 {
            out.data_mut()[0] = finish(sum(src));
            return out;
        }
        par_rows(out.data_mut(), 1, n, |start, dst| {
            let rows = &src[start * n..][..dst.len() * n];
            vectorized_if::<RowSums, _>(rows.len(), (rows, &mut *dst, n));
            for d in dst.iter_mut() {
                *d = finish(*d);
            }
        });
        return out;
    }
    // rows of `inner` added in index order, per outer slab
    par_rows(out.data_mut(), inner, n * inner, |start, dst| {
        for (g, orow) in dst.chunks_exact_mut(inner).enumerate() {
            let slab = &src[(start + g) * n * inner..][..n * inner];
            orow.fill(T::ZERO);
            for row in slab.chunks_exact(inner) {
                for (a, &v) in orow.iter_mut().zip(row) {
                    *a += v;
                }
            }
            if mean {
                for a in orow.iter_mut() {
                    *a = *a / denom;
                }
            }
        }
    });
    out
}

/// `dst[r] = Σ rows[r]` for consecutive rows of `n`.
#[inline(always)]
fn row_sums<T: CpuScalar>((rows, dst, n): (&[T], &mut [T], usize)) {
    if n == 0 {
        dst.fill(T::ZERO);
        return;
    }
    for (d, row) in dst.iter_mut().zip(rows.chunks_exact(n)) {
        *d = blocks_sum(row);
    }
}

/// The VJP of a reduction over `axis`: the cotangent spread back over the axis (divided by the
/// mean denominator for a mean).
pub(crate) fn spread<T: CpuScalar>(
    cot: &CpuTensor<T>,
    in_shape: &Shape,
    axis: usize,
    mean: bool,
) -> CpuTensor<T> {
    let (_, n, inner) = in_shape.split_at_axis(axis);
    let denom = denominator::<T>(n);
    let mut out = CpuTensor::uninit(in_shape.clone());
    let c = cot.as_slice();
    par_rows(out.data_mut(), n * inner, n * inner, |start, dst| {
        for (g, slab) in dst.chunks_exact_mut(n * inner).enumerate() {
            let crow = &c[(start + g) * inner..][..inner];
            for row in slab.chunks_exact_mut(inner) {
                if mean {
                    for (o, &d) in row.iter_mut().zip(crow) {
                        *o = d / denom;
                    }
                } else {
                    row.copy_from_slice(crow);
                }
            }
        }
    });
    out
}

/// Sum of every element, to a scalar.
pub(crate) fn sum_all<T: CpuScalar>(x: &CpuTensor<T>) -> CpuTensor<T> {
    CpuTensor::scalar(sum(x.as_slice()))
}

/// `Σ (y − t)² / n`.
pub(crate) fn mse_loss<T: CpuScalar>(y: &CpuTensor<T>, t: &CpuTensor<T>) -> CpuTensor<T> {
    let (a, b) = (y.as_slice(), t.as_slice());
    let block = |i: usize| {
        let lo = i * BLOCK;
        let hi = (lo + BLOCK).min(a.len());
        vectorized_if::<SqDiffSum, _>(hi - lo, (&a[lo..hi], &b[lo..hi]))
    };
    let blocks = a.len().div_ceil(BLOCK);
    let total = if should_par(a.len()) {
        let parts: Vec<T> = (0..blocks).into_par_iter().map(block).collect();
        parts.into_iter().fold(T::ZERO, |acc, s| acc + s)
    } else {
        (0..blocks).fold(T::ZERO, |acc, i| acc + block(i))
    };
    CpuTensor::scalar(total / denominator(a.len()))
}

/// `Σ (a − b)²` over one block, interleaved accumulators.
#[inline(always)]
fn sq_diff_sum<T: CpuScalar>((a, b): (&[T], &[T])) -> T {
    lane_sum2(a, b, |x, y| (x - y) * (x - y))
}

kernel!(SqDiffSum => sq_diff_sum<'a> [T: (CpuScalar)] ((&'a [T], &'a [T])) -> T);

/// `d/dy = (2/n)·(y − t)·δ`, `d/dt = −d/dy` (PyTorch's order of operations).
pub(crate) fn mse_loss_vjp<T: CpuScalar>(
    y: &CpuTensor<T>,
    t: &CpuTensor<T>,
    cot: &CpuTensor<T>,
) -> (CpuTensor<T>, CpuTensor<T>) {
    let delta = cot.as_slice()[0];
    let norm = (T::ONE + T::ONE) / denominator(y.len());
    let dy = super::elementwise::zip(y, t, 2, |a, b| norm * (a - b) * delta);
    let dt = super::elementwise::map(&dy, 1, |d| -d);
    (dy, dt)
}

/// Rows per block of the cross-entropy sum: blocks are fixed, so the order of the sum (rows left
/// to right within a block, blocks left to right) never depends on the thread count.
const CE_ROWS: usize = 64;

/// `Σ −log_softmax(row)[t]` over consecutive rows of `c` logits, left to right; each row is
/// max-shifted, its sums in the fixed lane order.
#[inline(always)]
fn ce_rows<T: CpuScalar>((xs, ids, c): (&[T], &[usize], usize)) -> T {
    let mut total = T::ZERO;
    for (row, &t) in xs.chunks_exact(c).zip(ids) {
        let m = lane_max(row);
        let sum = lane_sum(row, |v| (v - m).vexp());
        total += -((row[t] - m) - sum.ln());
    }
    total
}

kernel!(CeRows => ce_rows<'a> [T: (CpuScalar)] ((&'a [T], &'a [usize], usize)) -> T);

/// Cross entropy of `[N, C]` logits with validated class ids: summed, or divided by `N`.
pub(crate) fn cross_entropy<T: CpuScalar>(
    logits: &CpuTensor<T>,
    ids: &[usize],
    mean: bool,
) -> CpuTensor<T> {
    let (n, c) = (logits.shape().dims()[0], logits.shape().dims()[1]);
    let xs = logits.as_slice();
    let block = |b: usize| {
        let (lo, hi) = (b * CE_ROWS, ((b + 1) * CE_ROWS).min(n));
        let args = (&xs[lo * c..hi * c], &ids[lo..hi], c);
        vectorized_if::<CeRows, _>((hi - lo) * c * POLY, args)
    };
    let blocks = if c == 0 { 0 } else { n.div_ceil(CE_ROWS) };
    let total = if should_par(n.saturating_mul(c).saturating_mul(POLY)) {
        let parts: Vec<T> = (0..blocks).into_par_iter().map(block).collect();
        parts.into_iter().fold(T::ZERO, |acc, s| acc + s)
    } else {
        (0..blocks).fold(T::ZERO, |acc, b| acc + block(b))
    };
    CpuTensor::scalar(if mean { total / denominator(n) } else { total })
}

/// `g·(softmax(row) − onehot(t))` for consecutive rows.
#[inline(always)]
fn ce_vjp_rows<T: CpuScalar>((xs, ids, dx, c, g): (&[T], &[usize], &mut [T], usize, T)) {
    for ((row, drow), &t) in xs.chunks_exact(c).zip(dx.chunks_exact_mut(c)).zip(ids) {
        let m = lane_max(row);
        let sum = lane_sum(row, |v| (v - m).vexp());
        for (d, &v) in drow.iter_mut().zip(row) {
            *d = ((v - m).vexp() / sum) * g;
        }
        drow[t] = drow[t] - g;
    }
}

kernel!(CeVjpRows => ce_vjp_rows<'a> [T: (CpuScalar)] ((&'a [T], &'a [usize], &'a mut [T], usize, T)) -> ());

/// `d/dlogits = g·(softmax − onehot(t))`, `g = δ / N` for the mean, `δ` for the sum.
pub(crate) fn cross_entropy_vjp<T: CpuScalar>(
    logits: &CpuTensor<T>,
    ids: &[usize],
    cot: &CpuTensor<T>,
    mean: bool,
) -> CpuTensor<T> {
    let (n, c) = (logits.shape().dims()[0], logits.shape().dims()[1]);
    let delta = cot.as_slice()[0];
    let g = if mean { delta / denominator(n) } else { delta };
    let xs = logits.as_slice();
    let mut dx = CpuTensor::uninit(logits.shape().clone());
    par_rows(dx.data_mut(), c, 24 * c, |first, rows| {
        let k = rows.len() / c;
        let args = (
            &xs[first * c..][..rows.len()],
            &ids[first..first + k],
            rows,
            c,
            g,
        );
        vectorized_if::<CeVjpRows, _>(args.2.len() * POLY, args)
    });
    dx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::with_threads;

    #[test]
    fn blocked_sums_do_not_depend_on_the_thread_count() {
        let x: Vec<f32> = (0..300_001u64)
            .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
            .collect();
        let one = with_threads(1, || sum(&x));
        let two = with_threads(2, || sum(&x));
        let three = with_threads(3, || sum(&x));
        assert_eq!(one.to_bits(), two.to_bits());
        assert_eq!(one.to_bits(), three.to_bits());
        assert_eq!(one.to_bits(), sum_seq(&x).to_bits());
        let exact: f64 = x.iter().map(|&v| v as f64).sum();
        assert!((one as f64 - exact).abs() < 1e-3);
    }

    #[test]
    fn empty_sums_are_zero_and_empty_means_nan() {
        let x = CpuTensor::<f64>::zeros([3, 0]).unwrap();
        let m = reduce_axis(&x, 1, Shape::from([3]), true);
        assert!(m.as_slice().iter().all(|v| v.is_nan()));
        let s = reduce_axis(&x, 1, Shape::from([3]), false);
        assert_eq!(s.as_slice(), &[0.0, 0.0, 0.0]);
        let e = CpuTensor::<f64>::zeros([0]).unwrap();
        assert_eq!(sum_all(&e).as_slice(), &[0.0]);
        assert!(mse_loss(&e, &e).as_slice()[0].is_nan());
        let none = CpuTensor::<f64>::zeros([0, 3]).unwrap();
        assert!(cross_entropy(&none, &[], true).as_slice()[0].is_nan());
        assert_eq!(cross_entropy(&none, &[], false).as_slice(), &[0.0]);
    }

    #[test]
    fn cross_entropy_is_stable_and_independent_of_the_thread_count() {
        // logits far beyond exp's range: the max shift keeps the loss finite
        let x =
            CpuTensor::<f64>::from_vec([2, 3], vec![1000.0, 0.0, -1000.0, 5.0, 5.0, 5.0]).unwrap();
        let l = cross_entropy(&x, &[0, 2], false);
        assert!(
            (l.as_slice()[0] - 3f64.ln()).abs() < 1e-12,
            "{:?}",
            l.as_slice()
        );
        let n = 5000;
        let big: Vec<f32> = (0..n * 7)
            .map(|i| ((i * 31) % 97) as f32 * 0.05 - 2.0)
            .collect();
        let ids: Vec<usize> = (0..n).map(|i| i % 7).collect();
        let x = CpuTensor::<f32>::from_vec([n, 7], big).unwrap();
        let one = with_threads(1, || cross_entropy(&x, &ids, true));
        let two = with_threads(2, || cross_entropy(&x, &ids, true));
        assert!(one.bit_eq(&two));
    }

    #[test]
    fn reduce_over_a_middle_axis() {
        let x = CpuTensor::<f64>::from_vec([2, 3, 2], (0..12).map(f64::from).collect()).unwrap();
        let s = reduce_axis(&x, 1, Shape::from([2, 2]), false);
        assert_eq!(s.as_slice(), &[6.0, 9.0, 24.0, 27.0]);
        let m = reduce_axis(&x, 2, Shape::from([2, 3]), true);
        assert_eq!(m.as_slice(), &[0.5, 2.5, 4.5, 6.5, 8.5, 10.5]);
        let back = spread(&s, x.shape(), 1, false);
        assert_eq!(&back.as_slice()[..6], &[6.0, 9.0, 6.0, 9.0, 6.0, 9.0]);
    }
}
