//! The direct convolution kernel with output channels in SIMD lanes: for convolutions whose
//! outputs are too small or too strided for the implicit product's wide columns
//! ([`super::conv_implicit`]) to fill its vectors, as ResNet-18's 7×7 layers (a 7-wide output
//! row in 9-wide padded rows: a quarter of every vector wasted) and its stride-2 layers.
//!
//! The weights are packed once per buffer ([`pack`], kept by [`crate::derived`]) as blocks of
//! `L` output channels (`L` the vector's lanes; zeros past the last channel), tap-major within a
//! block: `P[blk][t][l] = W[blk·L + l][t]` over the taps `t = (c, u, v)`. A tile of `R` blocks ×
//! `Q` output positions (flattened row-major, across row ends) is `Σ_t P[blk][t] · xp[shift_t +
//! at_j]`: per tap, `R` vector loads of weights, `Q` broadcasts of the zero-padded image and
//! `R·Q` fused multiply-adds into accumulators that stay in registers for the whole sum (20 to
//! 24 of AVX-512's 32; 8 with AVX2's 16). Nothing of the image is copied but its padding.
//! The 7×7 × 512 layer on two threads (16 blocks each) took 1.20 ms in 4×6 tiles (49 positions
//! computed as 54) and 1.15 in 4×5 (50).
//!
//! Bits: every output is `(Σ_t fma over the taps in order, from zero) + bias`, the implicit
//! product's own sequence, so the two kernels agree to the bit; tiles, splits and thread counts
//! do not change it. Edge tiles overlap the previous one (recomputing identical values).

use super::conv_implicit::tile_starts;
use crate::scalar::CpuScalar;
use crate::simd::SimdLanes;
use pulp::{Simd, WithSimd};
use torchlean_spec::ops::ConvGeometry;

/// The lanes of the widest vectors the CPU has for `T`: the block width [`pack`] lays out and
/// [`LanesTask`] reads.
pub(super) fn lanes<T: CpuScalar>() -> usize {
    struct Lanes<T>(std::marker::PhantomData<T>);
    impl<T: CpuScalar> WithSimd for Lanes<T> {
        type Output = usize;
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) -> usize {
            T::lanes::<S>()
        }
    }
    pulp::Arch::new().dispatch(Lanes::<T>(std::marker::PhantomData))
}

/// Elements of the packed weights of `oc` output channels with `row` taps each (`C·kH·kW`) in
/// blocks of `lanes`.
pub(super) fn packed_len(oc: usize, row: usize, lanes: usize) -> usize {
    oc.div_ceil(lanes.max(1)) * lanes * row
}

/// `w` (`oc × row`, row-major) packed in blocks of `lanes` output channels, tap-major within a
/// block, zeros past the last channel, into `dst` ([`packed_len`] elements).
pub(super) fn pack<T: CpuScalar>(w: &[T], oc: usize, row: usize, lanes: usize, dst: &mut [T]) {
    // no taps (no input channels): nothing to pack
    let Some(block_len) = Some(lanes * row).filter(|&n| n > 0) else {
        return;
    };
    for (blk, block) in dst.chunks_exact_mut(block_len).enumerate() {
        for (l, o) in (blk * lanes..(blk + 1) * lanes).enumerate() {
            let src = (o < oc).then(|| &w[o * row..(o + 1) * row]);
            for (t, d) in block.iter_mut().skip(l).step_by(lanes).enumerate() {
                *d = src.map_or(T::ZERO, |s| s[t]);
            }
        }
    }
}

/// One task of an image's forward: the output rows of blocks `blocks` (their channels' rows of
/// `y`, `y` starting at the first block's first channel), every output position.
pub(super) struct LanesTask<'a, T> {
    pub g: &'a ConvGeometry,
    /// The zero-padded image, `C × Hp × Wp`.
    pub xp: &'a [T],
    /// The packed weights, every block ([`pack`]).
    pub packed: &'a [T],
    /// The bias, every channel.
    pub b: &'a [T],
    /// Tap `t`'s offset into `xp` from an output position's window corner.
    pub shifts: &'a [usize],
    /// The first block and the count.
    pub blocks: (usize, usize),
    pub y: &'a mut [T],
}

impl<T: CpuScalar> LanesTask<'_, T> {
    /// Computes the task with the widest instruction set the CPU has.
    pub fn run(self) {
        pulp::Arch::new().dispatch(self);
    }
}

impl<T: CpuScalar> WithSimd for LanesTask<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let (blocks, positions) = (self.blocks.1, self.g.p());
        if blocks == 0 || positions == 0 {
            return;
        }
        // the shape that computes the fewest accumulators for this task (overlapping edge
        // tiles recompute), among those that fit it
        let cost = |r: usize, q: usize| blocks.div_ceil(r) * r * positions.div_ceil(q) * q;
        let fits = |&(r, q): &(usize, usize)| blocks >= r && positions >= q;
        if S::REGISTER_COUNT < 32 {
            match [(2, 4), (1, 8)]
                .into_iter()
                .filter(fits)
                .min_by_key(|&(r, q)| cost(r, q))
            {
                Some((2, 4)) => tiles::<T, S, 2, 4>(simd, self),
                Some(_) => tiles::<T, S, 1, 8>(simd, self),
                None => tiles::<T, S, 1, 1>(simd, self),
            }
            return;
        }
        match [(4, 6), (4, 5), (3, 8), (3, 7), (2, 12), (1, 16)]
            .into_iter()
            .filter(fits)
            .min_by_key(|&(r, q)| cost(r, q))
        {
            Some((4, 6)) => tiles::<T, S, 4, 6>(simd, self),
            Some((4, 5)) => tiles::<T, S, 4, 5>(simd, self),
            Some((3, 8)) => tiles::<T, S, 3, 8>(simd, self),
            Some((3, 7)) => tiles::<T, S, 3, 7>(simd, self),
            Some((2, 12)) => tiles::<T, S, 2, 12>(simd, self),
            Some(_) => tiles::<T, S, 1, 16>(simd, self),
            None => tiles::<T, S, 1, 1>(simd, self),
        }
    }
}

/// Every `R × Q` tile of the task (blocks outermost, so a tile's weights stay in cache while
/// the positions stream past), each written where it is the first to cover.
#[inline(always)]
fn tiles<T: CpuScalar, S: Simd, const R: usize, const Q: usize>(simd: S, task: LanesTask<'_, T>) {
    let LanesTask {
        g,
        xp,
        packed,
        b,
        shifts,
        blocks: (first, count),
        y,
    } = task;
    let lanes = T::lanes::<S>();
    let (positions, taps) = (g.p(), shifts.len());
    let block_len = lanes * taps;
    // an output position's window corner in `xp`
    let corner = |p: usize| (p / g.wo) * g.s * g.wp() + (p % g.wo) * g.s;
    let mut lane_vals = vec![T::ZERO; lanes];
    for (r0, r_new) in tile_starts(count, R) {
        let wk = &packed[(first + r0) * block_len..(first + r0 + R) * block_len];
        for (p0, p_new) in tile_starts(positions, Q) {
            let at: [usize; Q] = std::array::from_fn(|j| corner(p0 + j));
            let acc = tile::<T, S, R, Q>(simd, xp, wk, block_len, shifts, &at);
            for (r, acc_r) in acc.iter().enumerate().skip(r_new - r0) {
                let o0 = (first + r0 + r) * lanes;
                for (j, &v) in acc_r.iter().enumerate().skip(p_new - p0) {
                    T::store::<S>(&mut lane_vals, v);
                    for (l, &s) in lane_vals.iter().enumerate() {
                        let o = o0 + l;
                        if o < g.oc {
                            y[(o - first * lanes) * positions + p0 + j] = s + b[o];
                        }
                    }
                }
            }
        }
    }
}

/// One tile's sums: `Σ_t wk[r][t] · xp[shifts[t] + at[j]]` for blocks `r` (`wk` their packed
/// weights, `block_len` apart) and positions `j`, the taps in order.
#[inline(always)]
fn tile<T: SimdLanes, S: Simd, const R: usize, const Q: usize>(
    simd: S,
    xp: &[T],
    wk: &[T],
    block_len: usize,
    shifts: &[usize],
    at: &[usize; Q],
) -> [[T::Lanes<S>; Q]; R] {
    let lanes = T::lanes::<S>();
    let blocks: [&[T]; R] = std::array::from_fn(|r| &wk[r * block_len..(r + 1) * block_len]);
    let mut acc = [[T::splat(simd, T::zeroed()); Q]; R];
    for (t, &shift) in shifts.iter().enumerate() {
        let wv: [T::Lanes<S>; R] = std::array::from_fn(|r| T::load::<S>(&blocks[r][t * lanes..]));
        let x = &xp[shift..];
        for (j, &a) in at.iter().enumerate() {
            let xb = T::splat(simd, x[a]);
            for (acc_r, &w) in acc.iter_mut().zip(&wv) {
                acc_r[j] = T::mul_add(simd, w, xb, acc_r[j]);
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_puts_a_block_of_channels_in_each_taps_lanes_and_zeros_past_the_last() {
        // 3 channels × 2 taps in blocks of 2: block 0 holds channels 0 and 1 tap by tap,
        // block 1 channel 2 and a zero channel
        let w = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut dst = vec![f32::NAN; packed_len(3, 2, 2)];
        assert_eq!(dst.len(), 8);
        pack(&w, 3, 2, 2, &mut dst);
        assert_eq!(dst, [1.0, 3.0, 2.0, 4.0, 5.0, 0.0, 6.0, 0.0]);
    }
}
