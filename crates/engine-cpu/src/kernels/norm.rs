//! Normalisers: softmax and log-softmax along an axis, layer norm over a suffix of axes, batch
//! norm in evaluation and in training mode, and their VJPs — the reference's formulas. Sums along a contiguous
//! row use eight interleaved accumulators (fixed order, vectorised); sums across rows add whole
//! rows in index order.
//!
//! An axis splits a tensor into `outer × n × inner`. When `inner = 1` every line is a
//! contiguous row; otherwise a slab of `n` rows of `inner` elements is processed with all its
//! lines side by side (vectorised along `inner`). Lines are independent, so slabs go to threads
//! freely without changing any result.

use super::elementwise::POLY;
use super::reduce::{lane_max, lane_sum, lane_sum2};
use crate::scalar::CpuScalar;
use crate::simd::{kernel, vectorized_if, Kernel};
use crate::tensor::CpuTensor;
use crate::threads::{par_map, par_rows};

/// `if m > v then m else v` (TorchLean's decidable max, NaN-faithful).
#[inline(always)]
fn max_of<T: CpuScalar>(m: T, v: T) -> T {
    if m > v {
        m
    } else {
        v
    }
}

/// Runs `f(slab index, output slab, scratch)` over every `n × inner` output slab, in parallel
/// when large (slabs are independent).
fn slabs<T: CpuScalar>(
    out: &mut CpuTensor<T>,
    n: usize,
    inner: usize,
    cost_per_elem: usize,
    f: impl Fn(usize, &mut [T], &mut Vec<T>) + Sync + Send,
) {
    let slab = n * inner;
    par_rows(out.data_mut(), slab, slab * cost_per_elem, |first, rows| {
        let mut scratch = Vec::new();
        for (g, y) in rows.chunks_exact_mut(slab).enumerate() {
            f(first + g, y, &mut scratch);
        }
    });
}

/// Arguments of a slab kernel: input slab(s), output slab, `inner`, scratch.
type Slab1<'a, T> = (&'a [T], &'a mut [T], usize, &'a mut Vec<T>);
type Slab2<'a, T> = (&'a [T], &'a [T], &'a mut [T], usize, &'a mut Vec<T>);

kernel!(SoftmaxSlab => softmax_slab<'a> [T: (CpuScalar)] (Slab1<'a, T>) -> ());
kernel!(SoftmaxVjpSlab => softmax_vjp_slab<'a> [T: (CpuScalar)] (Slab2<'a, T>) -> ());
kernel!(LogSoftmaxSlab => log_softmax_slab<'a> [T: (CpuScalar)] (Slab1<'a, T>) -> ());
kernel!(LogSoftmaxVjpSlab => log_softmax_vjp_slab<'a> [T: (CpuScalar)] (Slab2<'a, T>) -> ());
kernel!(LayerNormRows => layer_norm_rows<'a> [T: (CpuScalar)] ((&'a [T], &'a mut [T], usize, T)) -> ());
kernel!(LayerNormVjpRows => layer_norm_vjp_rows<'a> [T: (CpuScalar)] ((&'a [T], &'a [T], &'a mut [T], usize, T)) -> ());

/// Softmax of one `n × inner` slab along `n`.
#[inline(always)]
fn softmax_slab<T: CpuScalar>((xs, y, inner, scratch): Slab1<'_, T>) {
    if inner == 1 {
        let m = lane_max(xs);
        for (e, &v) in y.iter_mut().zip(xs) {
            *e = (v - m).vexp();
        }
        let sum = lane_sum(y, |e| e);
        for e in y.iter_mut() {
            *e = *e / sum;
        }
        return;
    }
    scratch.clear();
    scratch.extend_from_slice(&xs[..inner]);
    scratch.resize(2 * inner, T::ZERO);
    let (m, sum) = scratch.split_at_mut(inner);
    for row in xs[inner..].chunks_exact(inner) {
        for (m, &v) in m.iter_mut().zip(row) {
            *m = max_of(*m, v);
        }
    }
    for (yrow, xrow) in y.chunks_exact_mut(inner).zip(xs.chunks_exact(inner)) {
        for (((e, &v), &m), s) in yrow.iter_mut().zip(xrow).zip(m.iter()).zip(sum.iter_mut()) {
            *e = (v - m).vexp();
            *s += *e;
        }
    }
    for yrow in y.chunks_exact_mut(inner) {
        for (e, &s) in yrow.iter_mut().zip(sum.iter()) {
            *e = *e / s;
        }
    }
}

pub(crate) fn softmax<T: CpuScalar>(x: &CpuTensor<T>, axis: usize) -> CpuTensor<T> {
    slab_map::<T, SoftmaxSlab>(x, axis)
}

/// A slab kernel `K` of one operand along `axis`, slab by slab (in parallel where they are
/// big).
fn slab_map<T: CpuScalar, K>(x: &CpuTensor<T>, axis: usize) -> CpuTensor<T>
where
    K: for<'a> Kernel<Slab1<'a, T>, Out = ()>,
{
    let (_, n, inner) = x.shape().split_at_axis(axis);
    let mut out = CpuTensor::uninit(x.shape().clone());
    let src = x.as_slice();
    slabs(&mut out, n, inner, POLY, |o, y, scratch| {
        let xs = &src[o * n * inner..][..n * inner];
        vectorized_if::<K, _>(y.len() * POLY, (xs, y, inner, scratch));
    });
    out
}

/// The VJP of a softmax along the slab's axis from its output `y`: `s = Σ term(dy, y)` per
/// line of the axis, then `dx = grad(dy, y, s)` — softmax's and log-softmax's, one loop.
#[inline(always)]
fn along_axis_vjp<T: CpuScalar>(
    (yv, dv, dx, inner, scratch): Slab2<'_, T>,
    term: impl Fn(T, T) -> T,
    grad: impl Fn(T, T, T) -> T,
) {
    if inner == 1 {
        let s = lane_sum2(dv, yv, &term);
        for ((g, &d), &y) in dx.iter_mut().zip(dv).zip(yv) {
            *g = grad(d, y, s);
        }
        return;
    }
    scratch.clear();
    scratch.resize(inner, T::ZERO);
    for (yrow, drow) in yv.chunks_exact(inner).zip(dv.chunks_exact(inner)) {
        for ((s, &d), &y) in scratch.iter_mut().zip(drow).zip(yrow) {
            *s += term(d, y);
        }
    }
    for ((grow, yrow), drow) in dx
        .chunks_exact_mut(inner)
        .zip(yv.chunks_exact(inner))
        .zip(dv.chunks_exact(inner))
    {
        for (((g, &d), &y), &s) in grow.iter_mut().zip(drow).zip(yrow).zip(scratch.iter()) {
            *g = grad(d, y, s);
        }
    }
}

/// `dx = (dy − Σ dy·y)·y` on one slab.
#[inline(always)]
fn softmax_vjp_slab<T: CpuScalar>(slab: Slab2<'_, T>) {
    along_axis_vjp(slab, |d, y| d * y, |d, y, dot| (d - dot) * y);
}

/// `dx = dy − exp(y)·Σ dy` on one slab.
#[inline(always)]
fn log_softmax_vjp_slab<T: CpuScalar>(slab: Slab2<'_, T>) {
    along_axis_vjp(slab, |d, _| d, |d, y, total| d - y.vexp() * total);
}

/// A slab kernel `K` of the VJP along `axis`, slab by slab (in parallel where they are big).
fn slab_vjp<T: CpuScalar, K>(
    y: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    axis: usize,
    cost: usize,
) -> CpuTensor<T>
where
    K: for<'a> Kernel<Slab2<'a, T>, Out = ()>,
{
    let (_, n, inner) = y.shape().split_at_axis(axis);
    let mut out = CpuTensor::uninit(y.shape().clone());
    let (ys, ds) = (y.as_slice(), dy.as_slice());
    slabs(&mut out, n, inner, cost, |o, dx, scratch| {
        let yv = &ys[o * n * inner..][..n * inner];
        let dv = &ds[o * n * inner..][..n * inner];
        vectorized_if::<K, _>(dx.len() * cost, (yv, dv, dx, inner, scratch));
    });
    out
}

/// Log-softmax of one slab.
#[inline(always)]
fn log_softmax_slab<T: CpuScalar>((xs, y, inner, scratch): Slab1<'_, T>) {
    if inner == 1 {
        let m = lane_max(xs);
        // the exponentials go through the output buffer so that every pass is a plain loop
        for (e, &v) in y.iter_mut().zip(xs) {
            *e = (v - m).vexp();
        }
        let lse = lane_sum(y, |e| e).ln();
        for (e, &v) in y.iter_mut().zip(xs) {
            *e = (v - m) - lse;
        }
        return;
    }
    scratch.clear();
    scratch.extend_from_slice(&xs[..inner]);
    scratch.resize(2 * inner, T::ZERO);
    let (m, sum) = scratch.split_at_mut(inner);
    for row in xs[inner..].chunks_exact(inner) {
        for (m, &v) in m.iter_mut().zip(row) {
            *m = max_of(*m, v);
        }
    }
    for xrow in xs.chunks_exact(inner) {
        for ((s, &v), &m) in sum.iter_mut().zip(xrow).zip(m.iter()) {
            *s += (v - m).vexp();
        }
    }
    for s in sum.iter_mut() {
        *s = s.ln();
    }
    for (yrow, xrow) in y.chunks_exact_mut(inner).zip(xs.chunks_exact(inner)) {
        for (((e, &v), &m), &lse) in yrow.iter_mut().zip(xrow).zip(m.iter()).zip(sum.iter()) {
            *e = (v - m) - lse;
        }
    }
}

pub(crate) fn log_softmax<T: CpuScalar>(x: &CpuTensor<T>, axis: usize) -> CpuTensor<T> {
    slab_map::<T, LogSoftmaxSlab>(x, axis)
}

/// Softmax's (`dx = (dy − Σ dy·y)·y`) or log-softmax's (`dx = dy − exp(y)·Σ dy`) VJP along
/// the axis.
pub(crate) fn softmax_vjp<T: CpuScalar>(
    y: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    axis: usize,
    log: bool,
) -> CpuTensor<T> {
    if log {
        slab_vjp::<T, LogSoftmaxVjpSlab>(y, dy, axis, POLY)
    } else {
        slab_vjp::<T, SoftmaxVjpSlab>(y, dy, axis, 4)
    }
}

/// `(mean, sigma)` of one row: population variance clamped at 0 (`if var > 0 then var else 0`),
/// `sigma = sqrt(var + eps)`; sums in a fixed lane order.
#[inline(always)]
fn row_stats<T: CpuScalar>(row: &[T], eps: T) -> (T, T) {
    let n = T::from_usize(row.len().max(1));
    let mean = lane_sum(row, |v| v) / n;
    let sq = lane_sum(row, |v| (v - mean) * (v - mean));
    let var = max_of(sq / n, T::ZERO);
    (mean, (var + eps).sqrt())
}

fn suffix_len(shape: &torchlean_spec::Shape, axis: usize) -> usize {
    shape.dims()[axis..].iter().product()
}

/// Layer norm of consecutive rows.
#[inline(always)]
fn layer_norm_rows<T: CpuScalar>((src, out, inner, eps): (&[T], &mut [T], usize, T)) {
    for (yrow, row) in out.chunks_exact_mut(inner).zip(src.chunks_exact(inner)) {
        let (mean, sigma) = row_stats(row, eps);
        for (y, &v) in yrow.iter_mut().zip(row) {
            *y = (v - mean) / sigma;
        }
    }
}

pub(crate) fn layer_norm<T: CpuScalar>(x: &CpuTensor<T>, axis: usize, eps: T) -> CpuTensor<T> {
    let inner = suffix_len(x.shape(), axis);
    let mut out = CpuTensor::uninit(x.shape().clone());
    let src = x.as_slice();
    par_rows(out.data_mut(), inner, 6 * inner, |first, rows| {
        let xs = &src[first * inner..][..rows.len()];
        vectorized_if::<LayerNormRows, _>(rows.len(), (xs, rows, inner, eps));
    });
    out
}

/// `dx = (dy − mean(dy) − x̂·mean(dy·x̂)) / sigma` per row.
pub(crate) fn layer_norm_vjp<T: CpuScalar>(
    x: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    axis: usize,
    eps: T,
) -> CpuTensor<T> {
    let inner = suffix_len(x.shape(), axis);
    let mut out = CpuTensor::uninit(x.shape().clone());
    let (src, ds) = (x.as_slice(), dy.as_slice());
    par_rows(out.data_mut(), inner, 12 * inner, |first, rows| {
        let xs = &src[first * inner..][..rows.len()];
        let dv = &ds[first * inner..][..rows.len()];
        vectorized_if::<LayerNormVjpRows, _>(rows.len(), (xs, dv, rows, inner, eps));
    });
    out
}

/// The layer-norm VJP of consecutive rows.
#[inline(always)]
fn layer_norm_vjp_rows<T: CpuScalar>((src, ds, out, inner, eps): (&[T], &[T], &mut [T], usize, T)) {
    let n = T::from_usize(inner);
    for ((dxrow, row), drow) in out
        .chunks_exact_mut(inner)
        .zip(src.chunks_exact(inner))
        .zip(ds.chunks_exact(inner))
    {
        let (mean, sigma) = row_stats(row, eps);
        let sum_d = lane_sum(drow, |d| d);
        let sum_dx = lane_sum2(drow, row, |d, v| d * ((v - mean) / sigma));
        let mean_d = sum_d / n;
        let mean_dx = sum_dx / n;
        for ((g, &d), &v) in dxrow.iter_mut().zip(drow).zip(row) {
            let h = (v - mean) / sigma;
            *g = ((d - mean_d) - h * mean_dx) / sigma;
        }
    }
}

/// `(N, C, rest)` of a validated batch-norm input.
fn bn_dims(x: &CpuTensor<impl CpuScalar>) -> (usize, usize, usize) {
    let d = x.shape().dims();
    (d[0], d[1], d[2..].iter().product())
}

/// `sqrt(max(var, 0) + eps)`.
fn bn_sigma<T: CpuScalar>(var: T, eps: T) -> T {
    (max_of(var, T::ZERO) + eps).sqrt()
}

/// `(x − mean)/sqrt(max(var, 0) + eps)·γ + β`, channels on axis 1.
pub(crate) fn batch_norm<T: CpuScalar>(args: [&CpuTensor<T>; 5], eps: T) -> CpuTensor<T> {
    let (x, gamma, beta, mean, var) = (args[0], args[1], args[2], args[3], args[4]);
    let (_, c, rest) = bn_dims(x);
    let sigmas: Vec<T> = var.as_slice().iter().map(|&v| bn_sigma(v, eps)).collect();
    let (g, b, m) = (gamma.as_slice(), beta.as_slice(), mean.as_slice());
    map_channel_rows(
        [x, x],
        (c, rest, 4),
        |ch| (m[ch], sigmas[ch], g[ch], b[ch]),
        |(m, s, g, b), v, _| ((v - m) / s) * g + b,
    )
}

/// `out = f(p(ch), a, b)` element by element over two `[N, C, rest]` operands, where `p(ch)`
/// is channel `ch`'s parameters, formed once per row of `rest` elements; rows in parallel
/// (`cost` operations per element).
fn map_channel_rows<T: CpuScalar, P: Copy>(
    [a, b]: [&CpuTensor<T>; 2],
    (c, rest, cost): (usize, usize, usize),
    p: impl Fn(usize) -> P + Sync,
    f: impl Fn(P, T, T) -> T + Sync,
) -> CpuTensor<T> {
    let (a_src, b_src) = (a.as_slice(), b.as_slice());
    let mut out = CpuTensor::uninit(b.shape().clone());
    par_rows(out.data_mut(), rest, cost * rest, |first, rows| {
        for (k, orow) in rows.chunks_exact_mut(rest).enumerate() {
            let row = first + k;
            let params = p(row % c);
            let (arow, brow) = (&a_src[row * rest..][..rest], &b_src[row * rest..][..rest]);
            for ((o, &u), &v) in orow.iter_mut().zip(arow).zip(brow) {
                *o = f(params, u, v);
            }
        }
    });
    out
}

/// `[dx, dγ, dβ, dmean, dvar]`; `d max(var, 0)/d var` is 0 for `var < 0`, else 1. Channel sums
/// run over the batch in order, each image's positions in a fixed lane order.
pub(crate) fn batch_norm_vjp<T: CpuScalar>(
    x: &CpuTensor<T>,
    gamma: &CpuTensor<T>,
    mean: &CpuTensor<T>,
    var: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    eps: T,
) -> [CpuTensor<T>; 5] {
    let (n, c, rest) = bn_dims(x);
    let (g, m, v) = (gamma.as_slice(), mean.as_slice(), var.as_slice());
    let sigmas: Vec<T> = v.iter().map(|&v| bn_sigma(v, eps)).collect();
    // d sigma^-1 / d var = -1/2 · sigma^-3
    let var_coef: Vec<T> = v
        .iter()
        .zip(&sigmas)
        .map(|(&v, &s)| {
            if T::ZERO > v {
                T::ZERO
            } else {
                -T::HALF / (s * s * s)
            }
        })
        .collect();
    let (xs, ds) = (x.as_slice(), dy.as_slice());
    let dx = map_channel_rows(
        [dy, dy],
        (c, rest, 2),
        |ch| (g[ch], sigmas[ch]),
        |(gc, sc), d, _| (d * gc) / sc,
    );
    let sums = par_map(c, 8 * n * rest, |ch| {
        let (gc, sc, mc, vc) = (g[ch], sigmas[ch], m[ch], var_coef[ch]);
        let (mut dg, mut db, mut dm, mut dv) = (T::ZERO, T::ZERO, T::ZERO, T::ZERO);
        for b in 0..n {
            let off = (b * c + ch) * rest;
            let (drow, xrow) = (&ds[off..off + rest], &xs[off..off + rest]);
            dg += lane_sum2(drow, xrow, |d, x| d * ((x - mc) / sc));
            db += lane_sum(drow, |d| d);
            dm += lane_sum(drow, |d| (d * gc) / sc);
            dv += lane_sum2(drow, xrow, |d, x| ((d * gc) * (x - mc)) * vc);
        }
        [dg, db, -dm, dv]
    });
    let per_channel = |k: usize| {
        let data: Vec<T> = sums.iter().map(|s| s[k]).collect();
        // invariant: c channels, shape [c] (validated by the shape rule)
        CpuTensor::from_vec([c], data).expect("one value per channel")
    };
    [
        dx,
        per_channel(0),
        per_channel(1),
        per_channel(2),
        per_channel(3),
    ]
}

/// Per channel of `[N, C, H, W]`, in `f64` (PyTorch's CPU accumulation type for `f32`):
/// `(mean, sigma)` over `N, H, W` (biased variance, two passes, `M = max(N·H·W, 1)`).
///
/// The sums run in the reference's order, one element after the other (channels in parallel):
/// normalising by batch statistics amplifies the rounding of the mean by `|mean|/sigma`, which
/// for a channel with a large offset and a small spread turned a lane-order sum's last-bit
/// difference into a 2e-12 relative difference (the checker's `f64` tolerance is 1e-12). With
/// the reference's order the `f64` engine matches it bit for bit here.
fn batch_stats<T: CpuScalar>(
    xs: &[T],
    n: usize,
    c: usize,
    rest: usize,
    eps: f64,
) -> Vec<(f64, f64)> {
    let count = (n * rest).max(1) as f64;
    par_map(c, 4 * n * rest, |ch| {
        let row = |b: usize| &xs[(b * c + ch) * rest..][..rest];
        let mut sum = 0.0;
        for b in 0..n {
            for &v in row(b) {
                sum += v.to_f64();
            }
        }
        let mean = sum / count;
        let mut sq = 0.0;
        for b in 0..n {
            for &v in row(b) {
                let d = v.to_f64() - mean;
                sq += d * d;
            }
        }
        (mean, (sq / count + eps).sqrt())
    })
}

/// Batch norm with the batch's own statistics, `(x − mean)/sigma·γ + β`, computed in `f64` and
/// rounded once (the reference's accumulation type).
pub(crate) fn batch_norm_train<T: CpuScalar>(
    x: &CpuTensor<T>,
    gamma: &CpuTensor<T>,
    beta: &CpuTensor<T>,
    eps: f64,
) -> CpuTensor<T> {
    let (n, c, rest) = bn_dims(x);
    let stats = batch_stats(x.as_slice(), n, c, rest, eps);
    let (g, b) = (gamma.as_slice(), beta.as_slice());
    map_channel_rows(
        [x, x],
        (c, rest, 4),
        |ch| (stats[ch], g[ch].to_f64(), b[ch].to_f64()),
        |((m, s), g, b), v, _| T::from_f64(((v.to_f64() - m) / s) * g + b),
    )
}

/// `[dx, dγ, dβ]`: `dβ = Σ dy`, `dγ = Σ dy·x̂`, `dx = γ·((dy − dβ/M) − x̂·dγ/M)/sigma`, in `f64`
/// (the reference's formula, order and accumulation type).
pub(crate) fn batch_norm_train_vjp<T: CpuScalar>(
    x: &CpuTensor<T>,
    gamma: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    eps: f64,
) -> [CpuTensor<T>; 3] {
    let (n, c, rest) = bn_dims(x);
    let (xs, ds, g) = (x.as_slice(), dy.as_slice(), gamma.as_slice());
    let stats = batch_stats(xs, n, c, rest, eps);
    let count = (n * rest).max(1) as f64;
    let sums = par_map(c, 4 * n * rest, |ch| {
        let (m, s) = stats[ch];
        // the reference's order, as in `batch_stats`
        let (mut dg, mut db) = (0.0, 0.0);
        for b in 0..n {
            let off = (b * c + ch) * rest;
            for (&d, &v) in ds[off..off + rest].iter().zip(&xs[off..off + rest]) {
                let d = d.to_f64();
                db += d;
                dg += d * ((v.to_f64() - m) / s);
            }
        }
        (dg, db)
    });
    let dx = map_channel_rows(
        [dy, x],
        (c, rest, 6),
        |ch| {
            let ((m, s), (dg, db)) = (stats[ch], sums[ch]);
            (m, s, g[ch].to_f64(), db / count, dg / count)
        },
        |(m, s, gc, mean_d, mean_dh), d, v| {
            let h = (v.to_f64() - m) / s;
            T::from_f64((gc * ((d.to_f64() - mean_d) - h * mean_dh)) / s)
        },
    );
    let per_channel = |data: Vec<T>| {
        // invariant: c channels, shape [c] (validated by the shape rule)
        CpuTensor::from_vec([c], data).expect("one value per channel")
    };
    let dgamma = per_channel(sums.iter().map(|s| T::from_f64(s.0)).collect());
    let dbeta = per_channel(sums.iter().map(|s| T::from_f64(s.1)).collect());
    [dx, dgamma, dbeta]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_rows_sum_to_one_on_both_layouts() {
        let x = CpuTensor::<f64>::from_vec([2, 3], vec![1.0, 2.0, 3.0, -1.0, 0.0, 1000.0]).unwrap();
        let y = softmax(&x, 1);
        let s: f64 = y.as_slice()[..3].iter().sum();
        assert!((s - 1.0).abs() < 1e-15);
        assert_eq!(y.as_slice()[5], 1.0);
        let y0 = softmax(&x, 0);
        for j in 0..3 {
            let s = y0.as_slice()[j] + y0.as_slice()[3 + j];
            assert!((s - 1.0).abs() < 1e-15);
        }
    }
    #[test]
    fn training_batch_norm_matches_the_reference_bit_for_bit_at_a_constant_batch() {
        // a batch whose values are all equal up to rounding: the normalisation divides the
        // rounding noise of the mean by sqrt(eps), so any reassociation of the sums shows (the
        // lane-order sums differed from the reference by 2e-12 here)
        use torchlean_spec::{Norm, Shape, Tensor};
        let vals: Vec<f64> = (0..18)
            .map(|i| -1.3333333333333333 + 0.1 * (i as f64) * 1e-16)
            .collect();
        let shape = Shape::from([2, 1, 3, 3]);
        let x = Tensor::new(shape.clone(), vals.clone()).unwrap();
        let g = Tensor::new([1], vec![0.75]).unwrap();
        let b = Tensor::new([1], vec![-0.5]).unwrap();
        let dy = Tensor::new(
            shape.clone(),
            (0..18).map(|i| (i as f64 * 0.37).sin()).collect(),
        )
        .unwrap();
        let want = <Tensor<f64> as Norm>::batch_norm_train(&x, &g, &b, 1e-5).unwrap();
        let want_g = <Tensor<f64> as Norm>::batch_norm_train_vjp([&x, &g], &dy, 1e-5).unwrap();
        let cpu = |t: &Tensor<f64>| {
            CpuTensor::<f64>::from_vec(t.shape().clone(), t.data().to_vec()).unwrap()
        };
        let got = batch_norm_train(&cpu(&x), &cpu(&g), &cpu(&b), 1e-5);
        assert_eq!(got.as_slice(), want.data());
        let got_g = batch_norm_train_vjp(&cpu(&x), &cpu(&g), &cpu(&dy), 1e-5);
        for (k, (gg, w)) in got_g.iter().zip(&want_g).enumerate() {
            let bits = |s: &[f64]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(gg.as_slice()), bits(w.data()), "cotangent {k}");
        }
    }
}
