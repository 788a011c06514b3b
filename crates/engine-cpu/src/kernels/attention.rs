//! Causal self-attention (`causal_attention`, `torchlean_spec::AttentionDims`) one head at a
//! time: a head's scores and weights stay in a `T × T` scratch in cache, its products read the
//! packed projections in place (`gemm` with their strides) and write the output or the
//! gradient where the heads sit side by side — instead of the composition's slices,
//! permutations, mask, scale, softmax and products as separate passes over every head's scores.
//!
//! Position `i` reads the positions `j ≤ i` only. The products run by blocks of rows, each up to
//! its last row's column (`CAUSAL_BLOCK`), over weights zero above the diagonal inside the
//! block: that keeps `j ≤ i` only where every operand is finite (`0·∞` is NaN), so a batch
//! entry with a non-finite projection or cotangent takes the exact path: loops over `j ≤ i`
//! alone, in the reference's order. Each batch entry is one task (its rows
//! are contiguous) and runs in a fixed order, so the bits do not depend on the thread count.

use super::linalg::{gemm_rows, Mat};
use super::reduce::{lane_max, lane_sum, lane_sum2};
use crate::scalar::CpuScalar;
use crate::simd::{kernel, vectorized};
use crate::tensor::CpuTensor;
use crate::threads::par_rows;
use gemm::Parallelism;
use torchlean_spec::{AttentionDims, Shape};

/// `acc[·] += w·src[·]`.
#[inline(always)]
fn axpy<T: CpuScalar>(acc: &mut [T], w: T, src: &[T]) {
    for (a, &s) in acc.iter_mut().zip(src) {
        *a += w * s;
    }
}

/// Part `part` (0 queries, 1 keys, 2 values) of head `h` of entry `b`, `T × hd`, in place.
fn part<'a, T>(x: &'a [T], d: &AttentionDims, b: usize, h: usize, part: usize) -> Mat<'a, T> {
    Mat {
        data: &x[d.qkv_at(b, 0, part, h)..],
        rs: 3 * d.c,
        cs: 1,
    }
}

/// The same part transposed, `hd × T`.
fn part_t<'a, T>(x: &'a [T], d: &AttentionDims, b: usize, h: usize, p: usize) -> Mat<'a, T> {
    let m = part(x, d, b, h, p);
    Mat {
        data: m.data,
        rs: 1,
        cs: m.rs,
    }
}

/// Head `h` of entry `b` of the output (or its cotangent) `[.., T, C]`, `T × hd`.
fn out_part<'a, T>(y: &'a [T], d: &AttentionDims, b: usize, h: usize) -> Mat<'a, T> {
    Mat {
        data: &y[d.out_at(b, 0, h)..],
        rs: d.c,
        cs: 1,
    }
}

/// Row `i` of the weights from the unscaled scores `s[..=i]`, in place: scaled, max-shifted,
/// exponentiated, normalised; `s[i + 1..]` zeroed.
#[inline(always)]
fn softmax_row<T: CpuScalar>(s: &mut [T], i: usize, scale: T) {
    let (live, masked) = s.split_at_mut(i + 1);
    masked.fill(T::ZERO);
    for v in live.iter_mut() {
        *v = *v * scale;
    }
    let m = lane_max(live);
    for v in live.iter_mut() {
        *v = (*v - m).vexp();
    }
    let sum = lane_sum(live, |v| v);
    for v in live.iter_mut() {
        *v = *v / sum;
    }
}

/// Every row of a head's `T × T` scores into weights.
#[inline(always)]
fn softmax_rows<T: CpuScalar>((p, t, scale): (&mut [T], usize, T)) {
    for (i, row) in p.chunks_exact_mut(t).enumerate() {
        softmax_row(row, i, scale);
    }
}

kernel!(SoftmaxRows => softmax_rows<'a> [T: (CpuScalar)] ((&'a mut [T], usize, T)) -> ());

/// `dS = P ⊙ (dP − Σ_j dP ⊙ P)·scale` row by row over `j ≤ i`, in place of `dP`; zero above
/// the diagonal.
#[inline(always)]
fn softmax_rows_vjp<T: CpuScalar>((ds, p, t, scale): (&mut [T], &[T], usize, T)) {
    for (i, (row, w)) in ds.chunks_exact_mut(t).zip(p.chunks_exact(t)).enumerate() {
        let (live, masked) = row.split_at_mut(i + 1);
        masked.fill(T::ZERO);
        let along = lane_sum2(live, &w[..=i], |a, w| a * w);
        for (a, &w) in live.iter_mut().zip(&w[..=i]) {
            *a = scale * ((*a - along) * w);
        }
    }
}

kernel!(SoftmaxRowsVjp => softmax_rows_vjp<'a> [T: (CpuScalar)] ((&'a mut [T], &'a [T], usize, T)) -> ());

/// Rows per block of the causal products. Rows `r0..r1` of the scores and weights are zero past
/// column `r1 − 1`, so a block's products stop there: for `n` blocks they do `(n + 1)/(2n)` of
/// the whole `T × T` work (three quarters for GPT's `T = 64`). `gpt_train_step` at one thread
/// took 63.5–63.9 ms with blocks of 32 rows, 64.0–64.4 with whole matrices and 64.5–64.8 with
/// blocks of 16 (more, smaller `gemm` calls; medians, 2-vCPU AMD EPYC, 2026-12-07).
const CAUSAL_BLOCK: usize = 32;

/// The row blocks `r0..r1` of a causal `T × T` matrix.
fn causal_blocks(t: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..t)
        .step_by(CAUSAL_BLOCK)
        .map(move |r0| (r0, (r0 + CAUSAL_BLOCK).min(t)))
}

/// The weights of head `h` of entry `b` into `p` (`T × T`): `Q·Kᵀ` by row blocks (each up to
/// its last row's column), then [`softmax_rows`], which zeroes the rest.
fn head_weights<T: CpuScalar>(x: &[T], d: &AttentionDims, b: usize, h: usize, p: &mut [T]) {
    let (t, hd) = (d.t, d.hd);
    let (q, kt) = (part(x, d, b, h, 0), part_t(x, d, b, h, 1));
    for (r0, r1) in causal_blocks(t) {
        run((r1 - r0, r1, hd), &mut p[r0 * t..], t, q.at(r0, 0), kt);
    }
    vectorized::<SoftmaxRows, _>((p, t, T::from_f64(d.scale())));
}

/// `dst = lhs·rhs`, `m × n` with rows `rs` apart, on the calling thread.
fn run<T: CpuScalar>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    rs: usize,
    lhs: Mat<'_, T>,
    rhs: Mat<'_, T>,
) {
    gemm_rows(
        "causal_attention",
        m,
        n,
        k,
        dst,
        rs,
        false,
        lhs,
        rhs,
        Parallelism::None,
    )
    // invariant: as in `head_weights`, every block lies inside tensors of validated shapes
    .expect("the head's operands and block lie inside the validated tensors");
}

/// One batch entry's forward into `out` (its `T × C` rows) through the products, by row
/// blocks: `Y[r0..r1] = P[r0..r1, ..r1]·V[..r1]`.
fn entry_forward<T: CpuScalar>(x: &[T], d: &AttentionDims, b: usize, out: &mut [T]) {
    let t = d.t;
    let mut p = vec![T::ZERO; t * t];
    for h in 0..d.heads {
        head_weights(x, d, b, h, &mut p);
        let (w, v) = (Mat::rows(&p, t), part(x, d, b, h, 2));
        for (r0, r1) in causal_blocks(t) {
            let dst = &mut out[d.out_at(0, r0, h)..];
            run((r1 - r0, d.hd, r1), dst, d.c, w.at(r0, 0), v);
        }
    }
}

/// One batch entry's gradient into `dx` (its `T × 3C` rows) through the products, by row
/// blocks as in the forward: the weights again, `dP = dY·Vᵀ`, `dS` ([`softmax_rows_vjp`]),
/// `dQ = dS·K` (rows `r0..r1` from the columns `..r1`), `dK = dSᵀ·Q` and `dV = Pᵀ·dY` (rows
/// `r0..r1` from the rows `r0..` of `dS` and `P`, zero above the diagonal).
fn entry_vjp<T: CpuScalar>(x: &[T], dy: &[T], d: &AttentionDims, b: usize, dx: &mut [T]) {
    let (t, hd, c) = (d.t, d.hd, d.c);
    let mut p = vec![T::ZERO; t * t];
    let mut ds = vec![T::ZERO; t * t];
    for h in 0..d.heads {
        head_weights(x, d, b, h, &mut p);
        let g = out_part(dy, d, b, h);
        let vt = part_t(x, d, b, h, 2);
        for (r0, r1) in causal_blocks(t) {
            run((r1 - r0, r1, hd), &mut ds[r0 * t..], t, g.at(r0, 0), vt);
        }
        vectorized::<SoftmaxRowsVjp, _>((&mut ds[..], &p[..], t, T::from_f64(d.scale())));
        let (q, k) = (part(x, d, b, h, 0), part(x, d, b, h, 1));
        let (ds_m, ds_t, pt) = (
            Mat::rows(&ds, t),
            Mat::transposed(&ds, t),
            Mat::transposed(&p, t),
        );
        for (r0, r1) in causal_blocks(t) {
            let m = r1 - r0;
            let at = |part| d.qkv_at(0, r0, part, h);
            run((m, hd, r1), &mut dx[at(0)..], 3 * c, ds_m.at(r0, 0), k);
            // dK, dV: rows r0..r1 of dSᵀ·Q and Pᵀ·dY, from their rows r0..
            for (part, lhs, rhs) in [(1, ds_t, q), (2, pt, g)] {
                let (lhs, rhs) = (lhs.at(r0, r0), rhs.at(r0, 0));
                run((m, hd, t - r0), &mut dx[at(part)..], 3 * c, lhs, rhs);
            }
        }
    }
}

/// The keys (or values) of head `h` of entry `b`, transposed: `kt[d·T + j] = k_j[d]`.
#[inline(always)]
fn transpose_part<T: CpuScalar>(
    x: &[T],
    d: &AttentionDims,
    (b, h, part): (usize, usize, usize),
    kt: &mut [T],
) {
    for j in 0..d.t {
        let k = &x[d.qkv_at(b, j, part, h)..][..d.hd];
        for (c, &v) in k.iter().enumerate() {
            kt[c * d.t + j] = v;
        }
    }
}

/// Row `i` of the weights into `p[..=i]` from the transposed keys, over `j ≤ i` alone.
#[inline(always)]
fn exact_weights_row<T: CpuScalar>(q: &[T], kt: &[T], t: usize, i: usize, scale: T, p: &mut [T]) {
    let s = &mut p[..=i];
    s.fill(T::ZERO);
    for (c, &qc) in q.iter().enumerate() {
        axpy(s, qc, &kt[c * t..][..=i]);
    }
    softmax_row(s, i, scale);
}

/// One batch entry's operands and output (or cotangent) rows.
type EntryArgs<'a, T> = (&'a [T], &'a AttentionDims, usize, &'a mut [T]);

/// [`entry_forward`] over `j ≤ i` alone (the exact path).
#[inline(always)]
fn exact_forward<T: CpuScalar>((x, d, b, out): EntryArgs<'_, T>) {
    let scale = T::from_f64(d.scale());
    let (t, hd) = (d.t, d.hd);
    let mut kt = vec![T::ZERO; hd * t];
    let mut p = vec![T::ZERO; t];
    for h in 0..d.heads {
        transpose_part(x, d, (b, h, 1), &mut kt);
        for i in 0..t {
            exact_weights_row(&x[d.qkv_at(b, i, 0, h)..][..hd], &kt, t, i, scale, &mut p);
            let y = &mut out[d.out_at(0, i, h)..][..hd];
            y.fill(T::ZERO);
            for (j, &w) in p[..=i].iter().enumerate() {
                axpy(y, w, &x[d.qkv_at(b, j, 2, h)..][..hd]);
            }
        }
    }
}

kernel!(ExactForward => exact_forward<'a> [T: (CpuScalar)] (EntryArgs<'a, T>) -> ());

/// One batch entry's operands, output cotangent rows and gradient rows.
type EntryVjpArgs<'a, T> = (&'a [T], &'a [T], &'a AttentionDims, usize, &'a mut [T]);

/// [`entry_vjp`] over `j ≤ i` alone (the exact path), `dK` and `dV` accumulated over the rows
/// `i` in order.
#[inline(always)]
fn exact_vjp<T: CpuScalar>((x, dy, d, b, dx): EntryVjpArgs<'_, T>) {
    let scale = T::from_f64(d.scale());
    let (t, hd) = (d.t, d.hd);
    let mut kt = vec![T::ZERO; hd * t];
    let mut vt = vec![T::ZERO; hd * t];
    let mut p = vec![T::ZERO; t];
    let mut ds = vec![T::ZERO; t];
    let mut dk = vec![T::ZERO; t * hd];
    let mut dv = vec![T::ZERO; t * hd];
    for h in 0..d.heads {
        transpose_part(x, d, (b, h, 1), &mut kt);
        transpose_part(x, d, (b, h, 2), &mut vt);
        dk.fill(T::ZERO);
        dv.fill(T::ZERO);
        for i in 0..t {
            let q = &x[d.qkv_at(b, i, 0, h)..][..hd];
            let g = &dy[d.out_at(b, i, h)..][..hd];
            exact_weights_row(q, &kt, t, i, scale, &mut p);
            let dp = &mut ds[..=i];
            dp.fill(T::ZERO);
            for (c, &gc) in g.iter().enumerate() {
                axpy(dp, gc, &vt[c * t..][..=i]);
            }
            let along = lane_sum2(dp, &p[..=i], |a, w| a * w);
            for (a, &w) in dp.iter_mut().zip(&p[..=i]) {
                *a = scale * ((*a - along) * w);
            }
            let dq = &mut dx[d.qkv_at(0, i, 0, h)..][..hd];
            dq.fill(T::ZERO);
            for j in 0..=i {
                axpy(dq, ds[j], &x[d.qkv_at(b, j, 1, h)..][..hd]);
                axpy(&mut dk[j * hd..][..hd], ds[j], q);
                axpy(&mut dv[j * hd..][..hd], p[j], g);
            }
        }
        for j in 0..t {
            dx[d.qkv_at(0, j, 1, h)..][..hd].copy_from_slice(&dk[j * hd..][..hd]);
            dx[d.qkv_at(0, j, 2, h)..][..hd].copy_from_slice(&dv[j * hd..][..hd]);
        }
    }
}

kernel!(ExactVjp => exact_vjp<'a> [T: (CpuScalar)] (EntryVjpArgs<'a, T>) -> ());

/// Multiply-adds of one entry's forward (scores and weighted sums of every head).
fn entry_cost(d: &AttentionDims) -> usize {
    2 * d.heads * d.t * d.t * d.hd
}

/// Whether every element is finite: `Σ 0·x` is 0, or NaN where an element is infinite or
/// NaN (summed in lanes, without a branch per element).
#[inline(always)]
fn finite_sum<T: CpuScalar>(v: &[T]) -> bool {
    lane_sum(v, |x| x * T::ZERO) == T::ZERO
}

kernel!(FiniteSum => finite_sum<'a> [T: (CpuScalar)] (&'a [T]) -> bool);

fn all_finite<T: CpuScalar>(v: &[T]) -> bool {
    vectorized::<FiniteSum, _>(v)
}

pub(crate) fn causal_attention<T: CpuScalar>(
    qkv: &CpuTensor<T>,
    heads: usize,
    out: &Shape,
) -> CpuTensor<T> {
    let d = AttentionDims::of(qkv.shape(), heads);
    let mut y = CpuTensor::uninit(out.clone());
    let x = qkv.as_slice();
    let rows = d.t * 3 * d.c;
    par_rows(y.data_mut(), d.t * d.c, entry_cost(&d), |b0, entries| {
        for (k, entry) in entries.chunks_exact_mut(d.t * d.c).enumerate() {
            let b = b0 + k;
            if all_finite(&x[b * rows..][..rows]) {
                entry_forward(x, &d, b, entry);
            } else {
                vectorized::<ExactForward, _>((x, &d, b, entry));
            }
        }
    });
    y
}

pub(crate) fn causal_attention_vjp<T: CpuScalar>(
    qkv: &CpuTensor<T>,
    heads: usize,
    dy: &CpuTensor<T>,
) -> CpuTensor<T> {
    let d = AttentionDims::of(qkv.shape(), heads);
    let mut dx = CpuTensor::uninit(qkv.shape().clone());
    let (x, g) = (qkv.as_slice(), dy.as_slice());
    let (rows, out_rows) = (d.t * 3 * d.c, d.t * d.c);
    par_rows(dx.data_mut(), rows, 3 * entry_cost(&d), |b0, entries| {
        for (k, entry) in entries.chunks_exact_mut(rows).enumerate() {
            let b = b0 + k;
            if all_finite(&x[b * rows..][..rows]) && all_finite(&g[b * out_rows..][..out_rows]) {
                entry_vjp(x, g, &d, b, entry);
            } else {
                vectorized::<ExactVjp, _>((x, g, &d, b, entry));
            }
        }
    });
    dx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::with_threads;
    use torchlean_spec::backend::compose;
    use torchlean_spec::ops::splitmix64;

    fn random<T: CpuScalar>(shape: &[usize], seed: u64) -> CpuTensor<T> {
        let mut s = seed;
        let n = shape.iter().product();
        let data = (0..n)
            .map(|_| {
                s = splitmix64(s);
                T::from_f64((s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0)
            })
            .collect();
        CpuTensor::from_vec(shape.to_vec(), data).unwrap()
    }

    /// The largest `|a − b| / (1 + |b|)` over the elements.
    fn worst_of<T: CpuScalar>(a: &[T], b: &[T]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x.to_f64() - y.to_f64()).abs() / (1.0 + y.to_f64().abs()))
            .fold(0.0, f64::max)
    }

    fn worst<T: CpuScalar>(a: &CpuTensor<T>, b: &CpuTensor<T>) -> f64 {
        assert_eq!(a.shape(), b.shape());
        worst_of(a.as_slice(), b.as_slice())
    }

    /// The kernel against the engine's own composition (slices, products, mask, softmax), in
    /// `f32` and `f64`, forward and VJP, on shapes with one and several heads, one position,
    /// leading batch axes and rank 2.
    fn check_against_composition<T: CpuScalar>(tol: f64) {
        let shapes: [(&[usize], usize); 6] = [
            (&[2, 5, 12], 2),
            (&[3, 1, 9], 3),
            (&[7, 6], 1),
            (&[2, 2, 9, 24], 4),
            (&[12, 64, 384], 4),
            (&[1, 33, 96], 2),
        ];
        for (seed, (shape, heads)) in shapes.into_iter().enumerate() {
            let x = random::<T>(shape, seed as u64);
            let mut out = shape.to_vec();
            *out.last_mut().unwrap() /= 3;
            let out = Shape::new(out);
            let y = causal_attention(&x, heads, &out);
            let composed = compose::causal_attention(&x, heads, &out).unwrap();
            let e = worst(&y, &composed);
            assert!(e < tol, "{shape:?} / {heads}: forward off by {e}");
            let dy = random::<T>(out.dims(), 100 + seed as u64);
            let dx = causal_attention_vjp(&x, heads, &dy);
            let composed = compose::causal_attention_vjp(&x, heads, &dy).unwrap();
            let e = worst(&dx, &composed);
            assert!(e < tol, "{shape:?} / {heads}: VJP off by {e}");
        }
    }

    #[test]
    fn the_kernel_agrees_with_the_composition_in_f32_and_f64() {
        check_against_composition::<f32>(2e-5);
        check_against_composition::<f64>(1e-13);
    }

    /// The exact path (loops over `j ≤ i`) against the products, entry by entry.
    #[test]
    fn the_exact_path_agrees_with_the_products() {
        let d = AttentionDims::of(&Shape::from([3, 17, 48]), 2);
        let x = random::<f64>(&[3, 17, 48], 21);
        let dy = random::<f64>(&[3, 17, 16], 22);
        let (rows, out_rows) = (17 * 48, 17 * 16);
        for b in 0..3 {
            let (mut fast, mut exact) = (vec![0.0; out_rows], vec![0.0; out_rows]);
            entry_forward(x.as_slice(), &d, b, &mut fast);
            exact_forward((x.as_slice(), &d, b, &mut exact[..]));
            let worst = worst_of(&fast, &exact);
            assert!(worst < 1e-13, "entry {b}: forward off by {worst}");
            let (mut fast, mut exact) = (vec![0.0; rows], vec![0.0; rows]);
            entry_vjp(x.as_slice(), dy.as_slice(), &d, b, &mut fast);
            exact_vjp((x.as_slice(), dy.as_slice(), &d, b, &mut exact[..]));
            let worst = worst_of(&fast, &exact);
            assert!(worst < 1e-13, "entry {b}: VJP off by {worst}");
        }
    }

    /// A non-finite key and value at position 4 of entry 0 (and a non-finite cotangent at
    /// position 5 of entry 1) reach no earlier position: the engine agrees with the reference,
    /// NaN for NaN, and the earlier rows stay finite.
    #[test]
    fn a_non_finite_later_position_reaches_no_earlier_output() {
        use torchlean_spec::{Op, Saved, Tensor};
        let (t, c) = (7, 4);
        let mut x = random::<f64>(&[2, t, 3 * c], 31).to_vec();
        x[4 * 3 * c + c] = f64::NAN; // entry 0, position 4, a key
        x[4 * 3 * c + 2 * c + 1] = f64::INFINITY; // a value
        let mut dy = random::<f64>(&[2, t, c], 32).to_vec();
        dy[(t + 5) * c + 2] = f64::NEG_INFINITY; // entry 1, position 5
        let op = Op::CausalAttention { heads: 2 };
        let cpu = |v: &[f64], s: &[usize]| CpuTensor::from_vec(s.to_vec(), v.to_vec()).unwrap();
        let refr = |v: &[f64], s: &[usize]| Tensor::new(s.to_vec(), v.to_vec()).unwrap();
        let (xc, dyc) = (cpu(&x, &[2, t, 3 * c]), cpu(&dy, &[2, t, c]));
        let (xr, dyr) = (refr(&x, &[2, t, 3 * c]), refr(&dy, &[2, t, c]));
        let y = op.forward(&[&xc]).unwrap();
        let yr = op.forward(&[&xr]).unwrap();
        let dx = op
            .vjp::<CpuTensor<f64>>(&Saved::for_op(&op, &[&xc], &y), &dyc)
            .unwrap();
        let dxr = op
            .vjp::<Tensor<f64>>(&Saved::for_op(&op, &[&xr], &yr), &dyr)
            .unwrap();
        let same = |a: &[f64], b: &[f64], what: &str| {
            for (k, (u, v)) in a.iter().zip(b).enumerate() {
                let ok = (u.is_nan() && v.is_nan()) || u == v || (u - v).abs() < 1e-12;
                assert!(ok, "{what} element {k}: {u} against the reference's {v}");
            }
        };
        same(y.as_slice(), yr.data(), "forward");
        let (dx, dxr) = (dx[0].as_ref().unwrap(), dxr[0].as_ref().unwrap());
        same(dx.as_slice(), dxr.data(), "VJP");
        assert!(y.as_slice()[..4 * c].iter().all(|v| v.is_finite()));
        // entry 0's query gradients before position 4 see nothing of it
        for i in 0..4 {
            assert!(
                dx.as_slice()[i * 3 * c..][..c]
                    .iter()
                    .all(|v| v.is_finite()),
                "row {i}"
            );
        }
    }

    #[test]
    fn the_bits_do_not_depend_on_the_thread_count() {
        let x = random::<f32>(&[12, 64, 384], 7);
        let dy = random::<f32>(&[12, 64, 128], 8);
        let out = Shape::from([12, 64, 128]);
        let run = |n| {
            with_threads(n, || {
                (
                    causal_attention(&x, 4, &out),
                    causal_attention_vjp(&x, 4, &dy),
                )
            })
        };
        let (y1, dx1) = run(1);
        let (y2, dx2) = run(2);
        assert!(y1.bit_eq(&y2) && dx1.bit_eq(&dx2));
    }
}
