//! The implicit-product convolution kernel: a forward's wide output computed in registers
//! straight from the zero-padded image, without a patch matrix.
//!
//! Wide row `(c, u, v)` of the patch matrix ([`super::conv`]'s wide layout) is the padded
//! image shifted by `c·Hp·Wp + u·Wp + v` (with a stride `s`, the padded image split into its
//! `s²` phases, [`torchlean_spec::ops::ConvGeometry::implicit_shift`]: each tap reads one phase
//! at a fixed shift), so a tile of `R` output channels × `NV` vectors of
//! wide columns is `Σ_t W[o, t] · Xp[shift_t + p]` over the taps `t = (c, u, v)` in order: per
//! tap, `NV` unaligned vector loads of the image, `R` broadcast weights and `R·NV` fused
//! multiply-adds into accumulators that stay in registers for the whole sum (6 × 4, 8 × 3 or
//! 4 × 6 vectors, whichever recomputes least: 24 of AVX-512's 32; 3 × 4 with AVX2's 16). The
//! weights are read in place (row `o` of `W` is contiguous over the taps) and the image through
//! each tap's shift, so nothing is packed or copied.
//!
//! Why it replaced the patch matrix and `gemm` for these convolutions (ResNet-18's 3×3 layers,
//! one 224×224 image, one thread, fastest of 30, Intel Xeon with AVX-512; `gemm`-based paths
//! measured the same way): 56×56 × 64 channels 1.95 ms (the fastest `gemm` route, one product
//! per tap, 2.4), 28×28 × 128 1.95 (2.3), 14×14 × 256 2.08 (2.1), 7×7 × 512 2.2 (2.4); 118,
//! 118, 111 and 105 GFLOP/s of real work against this machine's 174 GFLOP/s of peak FMA
//! throughput. The loop order matters: all the taps of one tile at once (no channel
//! blocking), output-channel tiles innermost, so the image's rows under one strip of columns
//! stay in cache while every tile's weights stream past (with the tiles outermost the image
//! was reread per tile: 77 GFLOP/s on the 56×56 layer).
//!
//! Bits: every output element is the same sequence of multiply-adds, taps in order, whatever
//! its tile, its strip, its lane, the chunking or the thread count. Tiles at the edges
//! overlap the previous one (recomputing identical values) rather than running a narrower
//! kernel.

use crate::scalar::CpuScalar;
use crate::simd::SimdLanes;
use pulp::{Simd, WithSimd};

/// One block of the wide output: output channels × `cols` wide columns starting at image
/// offset `start`, stored row-major in `out` (`channels × cols`). `w` holds those channels'
/// weight rows (`channels × taps`), `shifts[t]` is tap `t`'s offset into `xp`
/// ([`torchlean_spec::ops::ConvGeometry::implicit_shift`]). The caller guarantees `xp` holds
/// `start + cols + max(shifts)` elements and `cols` is a whole number of the widest vectors
/// ([`torchlean_spec::ops::IMPLICIT_VECTOR_COLUMNS`]).
pub(super) struct ImplicitBlock<'a, T> {
    pub xp: &'a [T],
    pub w: &'a [T],
    pub shifts: &'a [usize],
    pub start: usize,
    pub out: &'a mut [T],
    pub cols: usize,
}

impl<T: SimdLanes> WithSimd for ImplicitBlock<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let channels = self.out.len().checked_div(self.cols).unwrap_or(0);
        let vectors = self.cols / T::lanes::<S>();
        match channels {
            0 => {}
            1 | 2 => strips::<T, S, 1, 4>(simd, self),
            _ if S::REGISTER_COUNT < 32 || channels < 6 => strips::<T, S, 3, 4>(simd, self),
            // 24 of the 32 registers: the shape that computes the fewest vectors, among those
            // whose tiles and strips fit the block (a narrower block runs one-vector strips,
            // which are bound by their loads; 6 × 4 has at least its 6 channels)
            _ => match [(6, 4), (8, 3), (4, 6)]
                .into_iter()
                .filter(|&(r, nv)| channels >= r && vectors >= nv)
                .min_by_key(|&(r, nv)| tile_cost(channels, vectors, r, nv))
            {
                Some((8, 3)) => strips::<T, S, 8, 3>(simd, self),
                Some((4, 6)) => strips::<T, S, 4, 6>(simd, self),
                _ => strips::<T, S, 6, 4>(simd, self),
            },
        }
    }
}

/// Vectors of accumulators [`strips`] computes for `channels × vectors` (at least `nv`) with
/// `r × nv` tiles (overlapping tiles and strips recompute some).
fn tile_cost(channels: usize, vectors: usize, r: usize, nv: usize) -> usize {
    vectors.div_ceil(nv) * nv * channels.div_ceil(r) * r
}

impl<T: SimdLanes + Send + Sync> ImplicitBlock<'_, T> {
    /// Computes the block with the widest instruction set the CPU has.
    pub fn run(self) {
        pulp::Arch::new().dispatch(self);
    }
}

/// The starts of tiles of `step` covering `0..n` (`n ≥ step`), the last one overlapping the
/// one before, each with the first index it is the first to cover.
pub(super) fn tile_starts(n: usize, step: usize) -> impl Iterator<Item = (usize, usize)> {
    let last = n - step;
    (0..last)
        .step_by(step)
        .map(|a| (a, a))
        .chain(std::iter::once((last, last.div_ceil(step) * step)))
}

/// The block in strips of `NV` vectors (one vector when it has fewer columns; the last strip
/// overlapping the one before), each strip through every tile of `R` channels (the last tile
/// overlapping the one before).
#[inline(always)]
fn strips<T: SimdLanes, S: Simd, const R: usize, const NV: usize>(
    simd: S,
    b: ImplicitBlock<'_, T>,
) {
    let lanes = T::lanes::<S>();
    let channels = b.out.len() / b.cols;
    let wide = NV * lanes;
    let taps = b.shifts.len();
    let ImplicitBlock {
        xp,
        w,
        shifts,
        start,
        out,
        cols,
    } = b;
    if cols >= wide {
        for (p0, _) in tile_starts(cols, wide) {
            let x = &xp[start + p0..];
            for (o0, _) in tile_starts(channels, R) {
                let w = &w[o0 * taps..(o0 + R) * taps];
                let out = &mut out[o0 * cols + p0..];
                tile::<T, S, R, NV>(simd, x, w, shifts, out, cols);
            }
        }
    } else {
        for p0 in (0..cols).step_by(lanes) {
            let x = &xp[start + p0..];
            for (o0, _) in tile_starts(channels, R) {
                let w = &w[o0 * taps..(o0 + R) * taps];
                let out = &mut out[o0 * cols + p0..];
                tile::<T, S, R, 1>(simd, x, w, shifts, out, cols);
            }
        }
    }
}

/// One tile: `out[r·cols + j] = Σ_t w[r·taps + t] · x[shifts[t] + j]` for `R` rows `r` and
/// `NV` vectors of columns `j`, the taps in order.
#[inline(always)]
fn tile<T: SimdLanes, S: Simd, const R: usize, const NV: usize>(
    simd: S,
    x: &[T],
    w: &[T],
    shifts: &[usize],
    out: &mut [T],
    cols: usize,
) {
    let lanes = T::lanes::<S>();
    let taps = shifts.len();
    let rows: [&[T]; R] = std::array::from_fn(|r| &w[r * taps..(r + 1) * taps]);
    let mut acc = [[T::splat(simd, T::zeroed()); NV]; R];
    for (t, &shift) in shifts.iter().enumerate() {
        let xs = &x[shift..shift + NV * lanes];
        let xv: [T::Lanes<S>; NV] = std::array::from_fn(|j| T::load::<S>(&xs[j * lanes..]));
        for (acc_r, row) in acc.iter_mut().zip(&rows) {
            let wv = T::splat(simd, row[t]);
            for (a, &xj) in acc_r.iter_mut().zip(&xv) {
                *a = T::mul_add(simd, wv, xj, *a);
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        let dst = &mut out[r * cols..][..NV * lanes];
        for (j, &a) in acc_r.iter().enumerate() {
            T::store::<S>(&mut dst[j * lanes..], a);
        }
    }
}

/// One image's share of a stride-1 weight gradient, in registers: `dw[o, t] (+)= Σ_p dy[o, p]
/// · xp[shifts[t] + p]` over the `cols` wide columns `p`, for the output channels whose
/// cotangent rows `dy` (`channels × cols`, zero at the dropped columns) and weight-gradient rows
/// `dw` (`channels × taps`) are given. A tile of 4 channels × 6 taps keeps 24 vectors of partial
/// sums over the columns (one per lane; 4 × 3 where the instruction set has 16 registers, as
/// AVX2: 24 spilled, and `conv_train` took 4.89–4.92 ms at one thread against 4.44–4.47 with
/// 4 × 3 on a 2-vCPU AMD EPYC), then adds each one's lanes ([`SimdLanes::reduce_sum`]) onto
/// `dw` (or writes it, when not `accumulate`). Edge tiles overlap the previous one and
/// write only what it did not. The caller guarantees `xp` holds `cols + max(shifts)` elements
/// and `cols` is a whole number of the widest vectors.
///
/// Bits: each gradient element is the per-lane sums over the columns in order, then the lanes'
/// sum, then added to the images before it in image order: the same for any thread count and
/// split of the channels, other bits for another vector width.
pub(super) struct ImplicitWeightGrad<'a, T> {
    pub xp: &'a [T],
    pub dy: &'a [T],
    pub shifts: &'a [usize],
    pub cols: usize,
    pub dw: &'a mut [T],
    pub accumulate: bool,
}

impl<T: CpuScalar> WithSimd for ImplicitWeightGrad<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let channels = self.dy.len().checked_div(self.cols).unwrap_or(0);
        let wide = S::REGISTER_COUNT >= 32;
        match (channels >= 4, self.shifts.len() >= 6) {
            (true, true) if wide => grad_tiles::<T, S, 4, 6>(simd, self),
            (true, true) => grad_tiles::<T, S, 4, 3>(simd, self),
            (true, false) => grad_tiles::<T, S, 4, 1>(simd, self),
            (false, true) => grad_tiles::<T, S, 1, 6>(simd, self),
            (false, false) => grad_tiles::<T, S, 1, 1>(simd, self),
        }
    }
}

impl<T: CpuScalar> ImplicitWeightGrad<'_, T> {
    /// Computes the share with the widest instruction set the CPU has.
    pub fn run(self) {
        pulp::Arch::new().dispatch(self);
    }
}

/// Every `R × K` tile of the share (channels × taps), edge tiles overlapping.
#[inline(always)]
fn grad_tiles<T: CpuScalar, S: Simd, const R: usize, const K: usize>(
    simd: S,
    g: ImplicitWeightGrad<'_, T>,
) {
    let taps = g.shifts.len();
    let channels = g.dy.len().checked_div(g.cols).unwrap_or(0);
    if channels == 0 || taps == 0 {
        return;
    }
    for (o0, o_new) in tile_starts(channels, R) {
        for (t0, t_new) in tile_starts(taps, K) {
            let sums = grad_tile::<T, S, R, K>(simd, &g, o0, t0);
            for (r, row) in sums.iter().enumerate().skip(o_new - o0) {
                let dst = &mut g.dw[(o0 + r) * taps + t0..][..K];
                for (d, &v) in dst.iter_mut().zip(row).skip(t_new - t0) {
                    *d = if g.accumulate { *d + v } else { v };
                }
            }
        }
    }
}

/// One tile's sums: `Σ_p dy[o0 + r, p] · xp[shifts[t0 + k] + p]`.
#[inline(always)]
fn grad_tile<T: SimdLanes, S: Simd, const R: usize, const K: usize>(
    simd: S,
    g: &ImplicitWeightGrad<'_, T>,
    o0: usize,
    t0: usize,
) -> [[T; K]; R] {
    let lanes = T::lanes::<S>();
    let cols = g.cols;
    let dys: [&[T]; R] = std::array::from_fn(|r| &g.dy[(o0 + r) * cols..][..cols]);
    let xs: [&[T]; K] = std::array::from_fn(|k| &g.xp[g.shifts[t0 + k]..][..cols]);
    let mut acc = [[T::splat(simd, T::zeroed()); K]; R];
    for p in (0..cols).step_by(lanes) {
        let xv: [T::Lanes<S>; K] = std::array::from_fn(|k| T::load::<S>(&xs[k][p..]));
        for (acc_r, dy) in acc.iter_mut().zip(&dys) {
            let d = T::load::<S>(&dy[p..]);
            for (a, &x) in acc_r.iter_mut().zip(&xv) {
                *a = T::mul_add(simd, d, x, *a);
            }
        }
    }
    // plain loops: a closure here can be left out of line, outside the target features
    let mut sums = [[T::zeroed(); K]; R];
    for (sum_r, acc_r) in sums.iter_mut().zip(&acc) {
        for (sum, &a) in sum_r.iter_mut().zip(acc_r) {
            *sum = T::reduce_sum(simd, a);
        }
    }
    sums
}
