//! 2-D convolution (`[C,H,W]` or `[N,C,H,W]`, zero padding, no dilation, one group) as patch
//! matrix + GEMM, and its VJP as GEMMs + the adjoint scatter.
//!
//! Per image, the patch matrix has one row per weight tap `(c, u, v)`; the forward is
//! `y = W·col + b`, the backward `dW = Σ_images dy·colᵀ`, `dcol = Wᵀ·dy` scattered back onto the
//! input, `db = Σ dy`. Three layouts of `col`:
//!
//! - **direct** (1×1, stride 1, no padding): the image is its own patch matrix;
//! - **wide** (stride 1): the image is zero-padded to `Hp × Wp` and the patch matrix spans the
//!   *padded* width, `Ho·Wp` columns instead of `Ho·Wo`. Row `(c, u, v)` is then one contiguous
//!   run of the padded image starting at `(c, u, v)`, so building it is `C·kH·kW` `memcpy`s
//!   (and the scatter as many vector adds) instead of `C·kH·kW·Ho` short copies. The extra
//!   `Wp − Wo` columns per output row are computed and dropped (forward) or carry zero
//!   cotangents (backward): about `(Wp − Wo)/Wo` more multiply-adds, far cheaper than the
//!   short copies they replace;
//! - **compact** (any stride): classic im2col over the `Ho·Wo` output positions.
//!
//! Most stride-1 products build no patch matrix at all: the wide patch matrix's row
//! `(c, u, v)` is the padded image itself shifted by `c·Hp·Wp + u·Wp + v`, so a
//! register-blocked kernel ([`super::conv_implicit`]) reads it in place:
//!
//! - the **forward** ([`implicit_forward`], [`ConvGeometry::forward_implicit`]): every stride-1
//!   convolution but the 1×1 direct one;
//! - the **input gradient** as the transposed convolution ([`ConvGeometry::transposed`]: the same
//!   forward over the cotangent, weights transposed and flipped, padding `k − 1 − pad`), for
//!   square kernels with `pad < k` and at least 3 input channels;
//! - the **weight gradient** ([`implicit_weight_grad`]) when the input gradient is not needed or
//!   taken as above and the image has at least [`IMPLICIT_GRAD_MIN_COLS`] wide columns.
//!
//! The forward of a 3×3 stride-1 convolution with many channels and outputs of at least 12 a
//! side takes Winograd's F(m×m, 3×3) instead (`m` = 4 or 2, [`ConvGeometry::winograd_tile`];
//! [`super::conv_winograd`], [`winograd_images`]) when its image and weights are finite.
//!
//! Each output's sum runs over the taps in order (the weight gradient's over the columns per
//! lane, then across the lanes): other bits than the patch matrix's product, the same for any
//! thread count and cut.
//!
//! Non-finite values: products meet the zero padding (`0·inf = NaN`) where the reference skips
//! padded cells, as in every GEMM-based convolution. The wide backward would also multiply the
//! dropped columns' zero cotangents by real inputs and weights, so it is used only when both are
//! finite (checked per call); otherwise the backward takes the compact layout.
//!
//! Parallelism and determinism: images are processed in parallel (each product single-threaded)
//! when there are several, or one image with threaded products (implicit: row chunks and
//! channel groups, one thread each; the compact patch matrix is built by row groups in
//! parallel). The weight gradient is
//! accumulated per fixed group of images (the grouping depends only on the batch size) and the
//! group sums are added in group order, so the result does not depend on the thread count.
//! Each group also sums its cotangent rows (the bias gradient, the rows then added in image
//! order) and takes its images' input gradients before their weight gradient, so that a
//! group's cotangents come from memory once.

use super::conv_implicit::{ImplicitBlock, ImplicitWeightGrad};
use super::conv_lanes;
use super::conv_winograd;
use super::elementwise::{relu, relu_vjp};
use super::linalg::{gemm, gemm_rows, par_for_work, Mat};
use super::reduce::{blocks_sum, RowSums};
use crate::buffers::{self, Buffer};
use crate::derived::{self, DerivedKey};
use crate::error::CpuError;
use crate::scalar::CpuScalar;
use crate::simd::{kernel, vectorized_if};
use crate::tensor::CpuTensor;
use crate::threads::should_par;
use gemm::Parallelism;
use rayon::prelude::*;
use std::sync::Arc;
use torchlean_spec::ops::{
    BackwardChunks, Chunks, ConvGeometry, PARALLEL_IMAGES, PATCH_CHUNK_ELEMENTS,
};
use torchlean_spec::{Conv2dSpec, Shape};

const OP: &str = torchlean_spec::ops::desc::CONV2D.name;

/// Most weight-gradient groups (and so partial sums) per batch.
const MAX_GROUPS: usize = 8;

/// How the patch matrix is laid out (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Direct,
    Wide,
    Compact,
}

/// Geometry of one validated convolution (the spec's sizes; the CPU's layouts below).
type Geo = ConvGeometry;

/// What the CPU engine's patch layouts add to the spec's geometry.
trait CpuGeo {
    fn layout(&self) -> Layout;
    /// Columns of the patch matrix in `layout`.
    fn cols(&self, layout: Layout) -> usize;
    /// Multiply-adds of one image's forward product.
    fn work(&self) -> usize;
}

impl CpuGeo for Geo {
    fn layout(&self) -> Layout {
        if self.direct() {
            Layout::Direct
        } else if self.s == 1 {
            Layout::Wide
        } else {
            Layout::Compact
        }
    }

    /// Columns of the patch matrix in `layout`.
    fn cols(&self, layout: Layout) -> usize {
        match layout {
            Layout::Wide => self.wide_cols(),
            _ => self.p(),
        }
    }

    /// Multiply-adds of one image's forward product.
    fn work(&self) -> usize {
        self.oc * self.kk() * self.p()
    }
}

/// What a forward applies to each output after its bias: nothing (`conv2d`) or the ReLU
/// (`conv2d_relu`). The implicit route applies it where it stores the output; the others in
/// place right after each image (or batch) is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Epilogue {
    Bias,
    BiasRelu,
}

impl Epilogue {
    /// The ReLU in place over a stored output (the routes that do not fuse it).
    fn finish<T: CpuScalar>(self, y: &mut [T]) {
        if self == Epilogue::BiasRelu {
            for v in y {
                *v = relu(*v);
            }
        }
    }
}

/// A work buffer taken from the engine's scratch list ([`crate::buffers::alloc_scratch`]) and
/// handed back when dropped: a convolution's patch matrices, padded images and transforms cost
/// neither `malloc`, page faults nor zeroing once a step of the same shapes has run, and they
/// reuse the memory the previous kernel just worked in. Its contents are unspecified: every
/// caller overwrites what it reads.
struct Work<T: CpuScalar>(Option<Buffer<T>>);

impl<T: CpuScalar> Default for Work<T> {
    fn default() -> Self {
        Work(None)
    }
}

impl<T: CpuScalar> Work<T> {
    /// `n` elements of unspecified contents: the first of the held buffer when it is long
    /// enough (so taking the same `n` again keeps the contents), else of a scratch buffer.
    fn take(&mut self, n: usize) -> &mut [T] {
        if self.0.as_ref().is_some_and(|b| b.len() < n) {
            if let Some(b) = self.0.take() {
                buffers::recycle_scratch(b);
            }
        }
        let b = self.0.get_or_insert_with(|| buffers::alloc_scratch(n));
        // the buffer is never shared (`alloc_scratch` hands out unique ones and this is its
        // only handle), so this never copies
        &mut Arc::make_mut(b)[..n]
    }
}

impl<T: CpuScalar> Drop for Work<T> {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            buffers::recycle_scratch(b);
        }
    }
}

/// Per-task work buffers, taken on first use and reused across images.
#[derive(Default)]
struct Scratch<T: CpuScalar> {
    xp: Work<T>,
    col: Work<T>,
    out: Work<T>,
    grad: Work<T>,
    /// The padded image's gradient (wide backward with padding).
    dxp: Work<T>,
    /// Each tap's start in the phase-split image ([`ConvGeometry::implicit_shift`]), computed
    /// once per scratch: a scratch serves one convolution (one geometry).
    shifts: Vec<usize>,
}

/// The taps' starts of the implicit product, computed into `shifts` unless there already.
fn implicit_shifts<'a>(g: &Geo, shifts: &'a mut Vec<usize>) -> &'a [usize] {
    if shifts.len() != g.kk() {
        *shifts = (0..g.kk()).map(|t| g.implicit_shift(t)).collect();
    }
    shifts
}

/// Whether every element is finite (a vectorised reduction: `v · 0` is ±0 exactly when `v` is
/// finite, NaN otherwise).
fn all_finite<T: CpuScalar>(x: &[T]) -> bool {
    if should_par(x.len()) {
        return x.par_chunks(FINITE_CHUNK).all(all_finite_seq);
    }
    all_finite_seq(x)
}

/// Elements per task of a parallel [`all_finite`].
const FINITE_CHUNK: usize = 1 << 14;

/// [`all_finite`] on the current thread.
fn all_finite_seq<T: CpuScalar>(x: &[T]) -> bool {
    let mut acc = [T::ZERO; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            acc[k] += c[k] * T::ZERO;
        }
    }
    acc.iter().all(|a| *a == T::ZERO) && rest.iter().all(|v| v.is_finite())
}

/// Output indices `[lo, hi)` whose input coordinate `i·s + k − pad` lies in `[0, extent)`.
fn valid(out: usize, k: usize, s: usize, pad: usize, extent: usize) -> (usize, usize) {
    let lo = if pad > k { (pad - k).div_ceil(s) } else { 0 };
    let hi = if extent + pad > k {
        (extent + pad - k).div_ceil(s)
    } else {
        0
    };
    let lo = lo.min(out);
    (lo, hi.min(out).max(lo))
}

/// `dst[i] = src[i]` for a short run: fixed-size block moves the compiler inlines (a
/// `copy_from_slice` of unknown length is a `memmove` call, which dominates for runs of a few
/// dozen elements).
#[inline(always)]
fn copy_run<T: Copy>(dst: &mut [T], src: &[T]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        d.copy_from_slice(s);
    }
    let (mut d, mut s) = (d.into_remainder(), s.remainder());
    for k in [4, 2, 1] {
        if d.len() >= k {
            let (dh, dt) = d.split_at_mut(k);
            dh.copy_from_slice(&s[..k]);
            d = dt;
            s = &s[k..];
        }
    }
}

/// `dst[i] = src[i·s]`: a run of the patch matrix from one image row at stride `s` (the last
/// read is `src[(len − 1)·s]`). Stride 1 and 2 (every strided layer of the common networks)
/// have loops the compiler vectorises; `step_by` does not.
#[inline(always)]
fn strided_copy<T: Copy>(dst: &mut [T], src: &[T], s: usize) {
    match s {
        1 => copy_run(dst, src),
        2 => {
            let n = dst.len();
            let (full, src) = (n.min(src.len() / 2), &src[..(2 * n).min(src.len())]);
            for (d, pair) in dst[..full].iter_mut().zip(src.chunks_exact(2)) {
                *d = pair[0];
            }
            if full < n {
                // the last element's pair is cut short by the row's end
                dst[full] = src[2 * full];
            }
        }
        _ => {
            for (t, d) in dst.iter_mut().enumerate() {
                *d = src[t * s];
            }
        }
    }
}

/// `dst[i] += src[i]` for a run (vectorised, no call).
#[inline(always)]
fn add_run<T: CpuScalar>(dst: &mut [T], src: &[T]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

/// Fills `col` (rows `r0..` of the `kk × p` patch matrix) with the patches of one image `x`
/// (`c × h × w`).
fn im2col<T: CpuScalar>(g: &Geo, x: &[T], col: &mut [T], r0: usize) {
    let (p, wo) = (g.p(), g.wo);
    for (r, crow) in col.chunks_exact_mut(p).enumerate() {
        let r = r0 + r;
        let v = r % g.kw;
        let u = (r / g.kw) % g.kh;
        let ci = r / (g.kw * g.kh);
        let plane = &x[ci * g.h * g.w..][..g.h * g.w];
        let (i0, i1) = valid(g.ho, u, g.s, g.pad, g.h);
        let (j0, j1) = valid(g.wo, v, g.s, g.pad, g.w);
        crow[..i0 * wo].fill(T::ZERO);
        crow[i1 * wo..].fill(T::ZERO);
        for i in i0..i1 {
            let seg = &mut crow[i * wo..(i + 1) * wo];
            let rr = i * g.s + u - g.pad;
            let xrow = &plane[rr * g.w..(rr + 1) * g.w];
            seg[..j0].fill(T::ZERO);
            seg[j1..].fill(T::ZERO);
            if j1 > j0 {
                let c0 = j0 * g.s + v - g.pad;
                strided_copy(&mut seg[j0..j1], &xrow[c0..], g.s);
            }
        }
    }
}

/// Patch-matrix rows each task of [`im2col_split`] fills.
const IM2COL_TASK_ROWS: usize = 8;

/// [`im2col`] of the whole matrix, its rows shared among the pool's threads when `par` allows
/// (rows are independent copies, so the split changes no value).
fn im2col_split<T: CpuScalar>(g: &Geo, x: &[T], col: &mut [T], par: Parallelism) {
    let p = g.p();
    if matches!(par, Parallelism::Rayon(_)) && p > 0 {
        col.par_chunks_mut(IM2COL_TASK_ROWS * p)
            .enumerate()
            .for_each(|(k, rows)| im2col(g, x, rows, k * IM2COL_TASK_ROWS));
    } else {
        im2col(g, x, col, 0);
    }
}

/// Fills `col` (rows `r0..`, `len` columns) with columns `c0..c0 + len` of the compact patch
/// matrix of one image `x`: the chunked builder (element by element; only used when the whole
/// matrix would exceed the chunk cap).
fn im2col_cols<T: CpuScalar>(g: &Geo, x: &[T], col: &mut [T], r0: usize, c0: usize, len: usize) {
    for (r, crow) in col.chunks_exact_mut(len).enumerate() {
        let r = r0 + r;
        let v = r % g.kw;
        let u = (r / g.kw) % g.kh;
        let ci = r / (g.kw * g.kh);
        let plane = &x[ci * g.h * g.w..][..g.h * g.w];
        for (t, d) in crow.iter_mut().enumerate() {
            let (i, j) = ((c0 + t) / g.wo, (c0 + t) % g.wo);
            let rr = (i * g.s + u).checked_sub(g.pad).filter(|&rr| rr < g.h);
            let cc = (j * g.s + v).checked_sub(g.pad).filter(|&cc| cc < g.w);
            *d = match (rr, cc) {
                (Some(rr), Some(cc)) => plane[rr * g.w + cc],
                _ => T::ZERO,
            };
        }
    }
}

/// Adds rows `r0..` of the patch matrix (`col`, `p` columns) back onto the image gradient `dx`
/// (`c × h × w`).
fn col2im<T: CpuScalar>(g: &Geo, col: &[T], dx: &mut [T], r0: usize) {
    let (p, wo) = (g.p(), g.wo);
    for (r, crow) in col.chunks_exact(p).enumerate() {
        let r = r0 + r;
        let v = r % g.kw;
        let u = (r / g.kw) % g.kh;
        let ci = r / (g.kw * g.kh);
        let plane = &mut dx[ci * g.h * g.w..][..g.h * g.w];
        let (i0, i1) = valid(g.ho, u, g.s, g.pad, g.h);
        let (j0, j1) = valid(g.wo, v, g.s, g.pad, g.w);
        if j1 <= j0 {
            continue;
        }
        for i in i0..i1 {
            let seg = &crow[i * wo + j0..i * wo + j1];
            let rr = i * g.s + u - g.pad;
            let xrow = &mut plane[rr * g.w..(rr + 1) * g.w];
            let c0 = j0 * g.s + v - g.pad;
            if g.s == 1 {
                add_run(&mut xrow[c0..c0 + seg.len()], seg);
            } else {
                for (d, &c) in xrow[c0..].iter_mut().step_by(g.s).zip(seg) {
                    *d += c;
                }
            }
        }
    }
}

/// [`col2im`] for columns `c0..c0 + len` of the patch matrix (`dcol`: rows `r0..`, `len`
/// columns), element by element: the scatter of a column block. Each tap adds at most once to
/// a cell, so a cell's additions come in tap order, as in [`col2im`].
fn col2im_cols<T: CpuScalar>(g: &Geo, dcol: &[T], dx: &mut [T], r0: usize, c0: usize, len: usize) {
    for (r, crow) in dcol.chunks_exact(len).enumerate() {
        let r = r0 + r;
        let v = r % g.kw;
        let u = (r / g.kw) % g.kh;
        let ci = r / (g.kw * g.kh);
        let plane = &mut dx[ci * g.h * g.w..][..g.h * g.w];
        for (t, &d) in crow.iter().enumerate() {
            let (i, j) = ((c0 + t) / g.wo, (c0 + t) % g.wo);
            let rr = (i * g.s + u).checked_sub(g.pad).filter(|&rr| rr < g.h);
            let cc = (j * g.s + v).checked_sub(g.pad).filter(|&cc| cc < g.w);
            if let (Some(rr), Some(cc)) = (rr, cc) {
                plane[rr * g.w + cc] += d;
            }
        }
    }
}

/// The image zero-padded to `C × Hp × Wp` (the image itself without padding).
fn padded<'a, T: CpuScalar>(g: &Geo, x: &'a [T], buf: &'a mut Work<T>) -> &'a [T] {
    if g.pad == 0 {
        return x;
    }
    pad_into(g, x, buf.take(g.c * g.hp() * g.wp()))
}

/// Writes the image zero-padded to `C × Hp × Wp` at the start of `buf` (zeros after it) and
/// returns `buf`; compiled for the widest instruction set (rows of a few tens of elements).
fn pad_into<'a, T: CpuScalar>(g: &Geo, x: &[T], buf: &'a mut [T]) -> &'a [T] {
    vectorized_if::<PadInto, _>(buf.len(), (g, x, buf))
}

type PadIntoArgs<'g, 'x, 'a, T> = (&'g Geo, &'x [T], &'a mut [T]);

kernel!(PadInto => pad_into_loop<'g, 'x, 'a> [T: (CpuScalar)] (PadIntoArgs<'g, 'x, 'a, T>) -> &'a [T]);

/// [`pad_into`]'s loop.
#[inline(always)]
fn pad_into_loop<'a, T: CpuScalar>((g, x, buf): PadIntoArgs<'_, '_, 'a, T>) -> &'a [T] {
    let (hp, wp) = (g.hp(), g.wp());
    if g.pad == 0 {
        // the image as it is, then zeros
        let n = x.len().min(buf.len());
        copy_run(&mut buf[..n], x);
        buf[n..].fill(T::ZERO);
        return buf;
    }
    if g.h * g.w == 0 {
        buf.fill(T::ZERO);
        return buf;
    }
    // each cell written once: the border runs between the rows, then the rows
    let (planes, slack) = buf.split_at_mut(g.c * hp * wp);
    slack.fill(T::ZERO);
    for (dst, plane) in planes
        .chunks_exact_mut(hp * wp)
        .zip(x.chunks_exact(g.h * g.w))
    {
        let row_at = |r: usize| (r + g.pad) * wp + g.pad;
        dst[..row_at(0)].fill(T::ZERO);
        for (r, row) in plane.chunks_exact(g.w).enumerate() {
            let at = row_at(r);
            copy_run(&mut dst[at..at + g.w], row);
            let next = if r + 1 < g.h { row_at(r + 1) } else { hp * wp };
            dst[at + g.w..next].fill(T::ZERO);
        }
    }
    buf
}

/// The image (the first [`ConvGeometry::image`] elements of `x`, which may run on into the
/// batch's next images) as the implicit product reads it: at stride 1 without padding `x`
/// itself when it holds the [`ConvGeometry::implicit_slack`] past the image (what the next
/// image holds there feeds only dropped columns: discarded by the forward, times a zero
/// cotangent in the weight gradient, which runs on finite inputs only), else
/// [`phase_split`]'s copy. Copying every image of `conv_train`'s 8 → 16 layer twice a step
/// (forward, weight gradient) took 3 % of it at one thread.
fn implicit_image<'a, T: CpuScalar>(g: &Geo, x: &'a [T], buf: &'a mut Work<T>) -> &'a [T] {
    let needed = g.implicit_image_elements();
    if g.s == 1 && g.pad == 0 && x.len() >= needed {
        return &x[..needed];
    }
    phase_split(g, &x[..g.image().min(x.len())], buf)
}

/// The image zero-padded and split into the stride's phases (`s² × C × ⌈Hp/s⌉ × ⌈Wp/s⌉`,
/// [`ConvGeometry::implicit_shift`]; at stride 1 the padded image itself), then
/// [`ConvGeometry::implicit_slack`] zeros: a copy even without padding, so that every tap's
/// shifted view of the last channel ([`implicit_forward`]) stays inside the buffer (what it
/// reads there feeds only dropped columns).
fn phase_split<'a, T: CpuScalar>(g: &Geo, x: &[T], buf: &'a mut Work<T>) -> &'a [T] {
    let buf = buf.take(g.implicit_image_elements());
    if g.s == 1 {
        return pad_into(g, x, buf);
    }
    buf.fill(T::ZERO);
    let (s, pad, wq) = (g.s, g.pad, g.phase_w());
    let plane = g.phase_h() * wq;
    if g.h * g.w == 0 {
        return buf;
    }
    for (ci, image) in x.chunks_exact(g.h * g.w).enumerate() {
        for (hr, row) in image.chunks_exact(g.w).enumerate() {
            let (a, r) = ((hr + pad) % s, (hr + pad) / s);
            for b in 0..s {
                // the input columns landing in column phase b: wc + pad ≡ b (mod s)
                let wc0 = (b + s - pad % s) % s;
                if wc0 >= g.w {
                    continue;
                }
                let n = (g.w - wc0).div_ceil(s);
                let q0 = (wc0 + pad) / s;
                let at = ((a * s + b) * g.c + ci) * plane + r * wq + q0;
                strided_copy(&mut buf[at..at + n], &row[wc0..], s);
            }
        }
    }
    buf
}

/// Offset in the padded image where wide row `r = (c, u, v)` starts.
fn wide_start(g: &Geo, r: usize) -> usize {
    let v = r % g.kw;
    let u = (r / g.kw) % g.kh;
    let ci = r / (g.kw * g.kh);
    (ci * g.hp() + u) * g.wp() + v
}

/// Fills `col` with rows `r0..` and columns `c0..c0 + cols` of the wide patch matrix (`kk × q`)
/// from the padded image: one contiguous run per row.
fn im2col_wide<T: CpuScalar>(g: &Geo, xp: &[T], col: &mut [T], r0: usize, c0: usize, cols: usize) {
    for (r, crow) in col.chunks_exact_mut(cols).enumerate() {
        // wide_start < xp.len(): u < kH ≤ Hp and v < kW ≤ Wp (the window fits the padded input)
        let start = wide_start(g, r0 + r) + c0;
        let len = cols.min(xp.len().saturating_sub(start));
        if len > 0 {
            crow[..len].copy_from_slice(&xp[start..start + len]);
        }
        // past the end of the image: only dropped columns, never a real output position
        crow[len..].fill(T::ZERO);
    }
}

/// Adds rows `r0..` and columns `c0..c0 + len` of the wide patch-matrix gradient (`dcol`, `len`
/// columns) onto the padded image gradient.
fn col2im_wide<T: CpuScalar>(g: &Geo, dcol: &[T], dxp: &mut [T], r0: usize, c0: usize, len: usize) {
    for (r, crow) in dcol.chunks_exact(len).enumerate() {
        let start = wide_start(g, r0 + r) + c0;
        // past the end of the image: only dropped columns (zero cotangents)
        let n = len.min(dxp.len().saturating_sub(start));
        if n > 0 {
            add_run(&mut dxp[start..start + n], &crow[..n]);
        }
    }
}

/// One image forward (the image at the start of `x_on`, the rest of the batch after it): `y =
/// W·col + b`, as an implicit product ([`implicit_forward`]) when
/// [`ConvGeometry::forward_implicit`] says so,
/// else with the patch matrix built at most `cap` elements (at least
/// [`torchlean_spec::ops::PATCH_CHUNK_MIN_UNITS`] columns) at a time ([`Chunks`]). A chunk is
/// a range of the product's output columns (the contracted dimension is never split), so
/// chunked and whole results are the same bits.
#[allow(clippy::too_many_arguments)]
fn image_forward<T: CpuScalar>(
    g: &Geo,
    x_on: &[T],
    w: &[T],
    b: &[T],
    ep: Epilogue,
    y: &mut [T],
    sc: &mut Scratch<T>,
    par: Parallelism,
    cap: usize,
) -> Result<(), CpuError> {
    let (p, kk, oc) = (g.p(), g.kk(), g.oc);
    let x = &x_on[..g.image()];
    match forward_route(g) {
        ForwardRoute::Implicit => implicit_forward(g, x_on, w, b, ep, y, sc, par),
        ForwardRoute::Patches(Layout::Wide) => {
            wide_patch_forward(g, x, w, b, y, sc, par, cap)?;
            ep.finish(y);
            Ok(())
        }
        ForwardRoute::Patches(layout) => {
            let col = &mut sc.col;
            for (row, &bias) in y.chunks_exact_mut(p).zip(b) {
                row.fill(bias);
            }
            let chunks = Chunks::new(p, kk, cap);
            if layout == Layout::Direct || chunks.count() == 1 {
                let col: &[T] = if layout == Layout::Direct {
                    x
                } else {
                    let col = col.take(kk * p);
                    im2col_split(g, x, col, par);
                    col
                };
                gemm(
                    OP,
                    oc,
                    p,
                    kk,
                    y,
                    true,
                    Mat::rows(w, kk),
                    Mat::rows(col, p),
                    par,
                )?;
                ep.finish(y);
                return Ok(());
            }
            for range in chunks.ranges() {
                let (c0, len) = (range.start, range.len());
                let col = col.take(kk * len);
                im2col_cols(g, x, col, 0, c0, len);
                let (wm, cm) = (Mat::rows(w, kk), Mat::rows(&col[..], len));
                gemm_rows(OP, oc, len, kk, &mut y[c0..], p, true, wm, cm, par)?;
            }
            ep.finish(y);
            Ok(())
        }
    }
}

/// How one image's forward runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ForwardRoute {
    /// [`implicit_forward`], whatever the stride, when [`ConvGeometry::forward_implicit`] says
    /// so (the rule the workspace estimate counts).
    Implicit,
    /// Through the layout's patch matrix.
    Patches(Layout),
}

fn forward_route(g: &Geo) -> ForwardRoute {
    if g.forward_implicit() {
        ForwardRoute::Implicit
    } else {
        ForwardRoute::Patches(g.layout())
    }
}

/// One image's stride-1 forward through the wide patch matrix, built `cap` elements at a time.
#[allow(clippy::too_many_arguments)]
fn wide_patch_forward<T: CpuScalar>(
    g: &Geo,
    x: &[T],
    w: &[T],
    b: &[T],
    y: &mut [T],
    sc: &mut Scratch<T>,
    par: Parallelism,
    cap: usize,
) -> Result<(), CpuError> {
    let (kk, oc) = (g.kk(), g.oc);
    let Scratch { xp, col, out, .. } = sc;
    let xp = padded(g, x, xp);
    for range in Chunks::new(g.wide_cols(), kk, cap).ranges() {
        let (c0, len) = (range.start, range.len());
        let col = col.take(kk * len);
        im2col_wide(g, xp, col, 0, c0, len);
        let out = out.take(oc * len);
        let (wm, cm) = (Mat::rows(w, kk), Mat::rows(&col[..], len));
        gemm(OP, oc, len, kk, out, false, wm, cm, par)?;
        keep_real_columns(g, out, y, b, c0, len);
    }
    Ok(())
}

/// Output channels per task of one image's implicit forward: all of them when its row chunks
/// alone make [`PARALLEL_IMAGES`] tasks, else groups of at least
/// [`IMPLICIT_GROUP_MIN_CHANNELS`] channels, about that many tasks in all (the 14×14 and 7×7
/// layers of ResNet have one row chunk). Any grouping gives the same bits.
fn implicit_channel_group(g: &Geo, row_chunks: usize) -> usize {
    let groups = PARALLEL_IMAGES
        .div_ceil(row_chunks)
        .min(g.oc / IMPLICIT_GROUP_MIN_CHANNELS)
        .max(1);
    g.oc.div_ceil(groups)
}

/// The fewest output channels of one task of the implicit forward (a few of its 6-channel
/// tiles).
const IMPLICIT_GROUP_MIN_CHANNELS: usize = 16;

/// One image's stride-1 forward as an implicit product ([`super::conv_implicit`]; no patch
/// matrix): the wide output in chunks of whole output rows
/// ([`ConvGeometry::implicit_row_chunks`]), each chunk's block of it (`oc ×`
/// [`ConvGeometry::implicit_block_cols`]) split into groups of output channels, one task each
/// — in parallel when `par` allows — that computes its block in its thread's scratch and at
/// once writes the real columns and the bias into `y` (while the block is in cache: through
/// one whole-image wide buffer, ResNet-18's 112×112 stem wrote and reread 3.3 MB of memory
/// a forward had not touched since the last one). The image is at the start of `x`
/// ([`implicit_image`]).
fn implicit_forward<T: CpuScalar>(
    g: &Geo,
    x: &[T],
    w: &[T],
    b: &[T],
    ep: Epilogue,
    y: &mut [T],
    sc: &mut Scratch<T>,
    par: Parallelism,
) -> Result<(), CpuError> {
    let (p, wq, wo, oc, kk) = (g.p(), g.phase_w(), g.wo, g.oc, g.kk());
    let Scratch { xp, shifts, .. } = sc;
    let xp = implicit_image(g, x, xp);
    let shifts = implicit_shifts(g, shifts);
    let chunks = g.implicit_row_chunks();
    let group = implicit_channel_group(g, chunks.len());
    // a block reads up to its start + columns + the largest shift (the last tap's); without
    // taps (no input channels) it reads nothing
    let reach = |&(i0, n): &(usize, usize)| {
        let last = shifts.last()?;
        Some(i0 * wq + g.implicit_block_cols(n) + last)
    };
    if let Some(needed) = chunks
        .iter()
        .filter_map(reach)
        .max()
        .filter(|&r| r > xp.len())
    {
        return Err(CpuError::Workspace {
            op: OP,
            what: "padded image",
            needed,
            got: xp.len(),
        });
    }
    // each channel's output rows, cut at the row chunks: task (chunk, channel group) writes
    // its channels' rows of its chunk
    let mut rows_by_chunk: Vec<Vec<&mut [T]>> = chunks.iter().map(|_| Vec::new()).collect();
    for yrow in y.chunks_mut(p) {
        let mut rest = yrow;
        for (&(_, n), rows) in chunks.iter().zip(rows_by_chunk.iter_mut()) {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(n * wo);
            rows.push(mine);
            rest = tail;
        }
    }
    let mut tasks = Vec::new();
    for (&(i0, n), rows) in chunks.iter().zip(rows_by_chunk) {
        let cols = g.implicit_block_cols(n);
        let mut rows = rows.into_iter();
        for o0 in (0..oc).step_by(group.max(1)) {
            let y_rows: Vec<&mut [T]> = rows.by_ref().take(group).collect();
            tasks.push(ImplicitTask {
                o0,
                i0,
                n,
                cols,
                y_rows,
            });
        }
    }
    // each task's wide block in its thread's scratch (cache-warm, small), then its real
    // columns and the bias into `y` at once
    let task = |block: &mut Work<T>, task: ImplicitTask<'_, T>| {
        let ImplicitTask {
            o0,
            i0,
            n,
            cols,
            mut y_rows,
        } = task;
        let channels = y_rows.len();
        if cols == 0 {
            return;
        }
        let out = block.take(channels * cols);
        ImplicitBlock {
            xp,
            w: &w[o0 * kk..(o0 + channels) * kk],
            shifts,
            start: i0 * wq,
            out,
            cols,
        }
        .run();
        let out = block.take(channels * cols);
        for (r, yrow) in y_rows.iter_mut().enumerate() {
            keep_rows(g, &out[r * cols..][..n * wq], yrow, b[o0 + r], ep);
        }
    };
    if matches!(par, Parallelism::Rayon(_)) && tasks.len() > 1 {
        tasks.into_par_iter().for_each_init(Work::default, task);
    } else {
        let mut block = Work::default();
        tasks.into_iter().for_each(|t| task(&mut block, t));
    }
    Ok(())
}

/// One task of [`implicit_forward`]: a group of output channels over one row chunk.
struct ImplicitTask<'a, T> {
    /// The group's first channel.
    o0: usize,
    /// The chunk's first output row and its row count.
    i0: usize,
    n: usize,
    /// The chunk's wide columns ([`ConvGeometry::implicit_block_cols`]).
    cols: usize,
    /// The group's channels' output rows of the chunk.
    y_rows: Vec<&'a mut [T]>,
}

/// Whole output rows of one channel: each wide row's real columns (`j < Wo` of its
/// [`ConvGeometry::phase_w`], which is `Wp` at stride 1), plus the bias, into the output rows `y`.
/// Compiled for the widest instruction set ([`vectorized_if`]): rows of a few tens of
/// elements, which the baseline build copies four `f32` at a time.
fn keep_rows<T: CpuScalar>(g: &Geo, wide: &[T], y: &mut [T], bias: T, ep: Epilogue) {
    vectorized_if::<KeepRows, _>(y.len(), (g.wo, g.phase_w(), wide, y, bias, ep));
}

type KeepRowsArgs<'a, T> = (usize, usize, &'a [T], &'a mut [T], T, Epilogue);

kernel!(KeepRows => keep_rows_loop<'a> [T: (CpuScalar)] (KeepRowsArgs<'a, T>) -> ());

#[inline(always)]
fn keep_rows_loop<T: CpuScalar>((wo, wq, wide, y, bias, ep): KeepRowsArgs<'_, T>) {
    let rows = y.chunks_exact_mut(wo).zip(wide.chunks_exact(wq));
    match ep {
        Epilogue::Bias => {
            for (seg, src) in rows {
                for (d, &v) in seg.iter_mut().zip(src) {
                    *d = v + bias;
                }
            }
        }
        Epilogue::BiasRelu => {
            for (seg, src) in rows {
                for (d, &v) in seg.iter_mut().zip(src) {
                    *d = relu(v + bias);
                }
            }
        }
    }
}

/// Writes columns `c0..c0 + len` of the wide output (`out`, one row of `len` per output
/// channel) into `y` (`oc × Ho·Wo`), keeping the real columns (`j < Wo` of each padded-width
/// row) and adding the bias.
fn keep_real_columns<T: CpuScalar>(
    g: &Geo,
    out: &[T],
    y: &mut [T],
    b: &[T],
    c0: usize,
    len: usize,
) {
    let (p, q, wp, wo) = (g.p(), g.wide_cols(), g.wp(), g.wo);
    for ((yrow, wide), &bias) in y.chunks_exact_mut(p).zip(out.chunks_exact(len)).zip(b) {
        if len == q {
            keep_rows(g, wide, yrow, bias, Epilogue::Bias);
            continue;
        }
        for (t, &v) in wide.iter().enumerate() {
            let (i, j) = ((c0 + t) / wp, (c0 + t) % wp);
            if j < wo {
                yrow[i * wo + j] = v + bias;
            }
        }
    }
}

/// `conv2d` (`ep` = [`Epilogue::Bias`]) or `conv2d_relu` ([`Epilogue::BiasRelu`]).
pub(crate) fn forward<T: CpuScalar>(
    spec: &Conv2dSpec,
    x: &CpuTensor<T>,
    w: &CpuTensor<T>,
    b: &CpuTensor<T>,
    ep: Epilogue,
    out_shape: Shape,
) -> Result<CpuTensor<T>, CpuError> {
    forward_capped(spec, x, w, b, ep, out_shape, PATCH_CHUNK_ELEMENTS)
}

/// [`forward`] with patch-matrix chunks of at most `cap` elements.
fn forward_capped<T: CpuScalar>(
    spec: &Conv2dSpec,
    x: &CpuTensor<T>,
    w: &CpuTensor<T>,
    b: &CpuTensor<T>,
    ep: Epilogue,
    out_shape: Shape,
    cap: usize,
) -> Result<CpuTensor<T>, CpuError> {
    let g = spec.geometry(x.shape())?;
    let mut out = CpuTensor::uninit(out_shape);
    let weights = Weights {
        values: w.as_slice(),
        buffer: Some(w.buffer()),
    };
    convolve_images(
        &g,
        x.as_slice(),
        weights,
        b.as_slice(),
        ep,
        out.data_mut(),
        cap,
    )?;
    Ok(out)
}

/// A convolution's weights: their values, and their buffer when they are a tensor's (so that
/// the Winograd and lanes forwards keep their transformed or packed weights per buffer,
/// [`derived`]); computed weights (the backward's flipped ones) have none.
#[derive(Clone, Copy)]
struct Weights<'a, T: CpuScalar> {
    values: &'a [T],
    buffer: Option<&'a Buffer<T>>,
}

impl<T: CpuScalar> Weights<'_, T> {
    /// Their form under `key`: kept per buffer when the weights are a tensor's ([`derived`]),
    /// else `derive()`'s for this call only.
    fn derived(
        &self,
        key: DerivedKey,
        derive: impl FnOnce() -> Option<Buffer<T>>,
    ) -> Option<Buffer<T>> {
        match self.buffer {
            Some(source) => derived::derived(source, key, derive),
            None => derive(),
        }
    }
}

impl<'a, T: CpuScalar> From<&'a [T]> for Weights<'a, T> {
    fn from(values: &'a [T]) -> Self {
        Weights {
            values,
            buffer: None,
        }
    }
}

/// Every image's forward ([`image_forward`]) from `xs` into `y`: images in parallel (each on
/// one thread) when there are several and the work pays, else one at a time with threaded
/// products.
fn convolve_images<T: CpuScalar>(
    g: &Geo,
    xs: &[T],
    weights: Weights<'_, T>,
    bs: &[T],
    ep: Epilogue,
    y: &mut [T],
    cap: usize,
) -> Result<(), CpuError> {
    let (img_in, img_out) = (g.image(), g.oc * g.p());
    if img_out == 0 {
        return Ok(());
    }
    if let Some(m) = g.winograd_tile() {
        if let Some(u) = winograd_weights(g, m, weights) {
            if all_finite(&xs[..g.n * img_in]) {
                winograd_images(g, m, xs, &u, bs, y)?;
                // a transform computed for this call only goes back to the pool
                buffers::recycle_unshared(u);
                ep.finish(y);
                return Ok(());
            }
        }
    }
    if g.forward_lanes() {
        let lanes = conv_lanes::lanes::<T>();
        if let Some(packed) = lanes_weights(g, lanes, weights) {
            lanes_images(g, lanes, xs, &packed, bs, y);
            buffers::recycle_unshared(packed);
            ep.finish(y);
            return Ok(());
        }
    }
    let ws = weights.values;
    if g.n > 1 && should_par(g.n.saturating_mul(g.work())) {
        y.par_chunks_mut(img_out)
            .enumerate()
            .try_for_each_init(Scratch::default, |sc, (i, yi)| {
                image_forward(
                    g,
                    &xs[i * img_in..],
                    ws,
                    bs,
                    ep,
                    yi,
                    sc,
                    Parallelism::None,
                    cap,
                )
            })
    } else {
        let mut sc = Scratch::default();
        for (i, yi) in y.chunks_exact_mut(img_out).enumerate() {
            image_forward(
                g,
                &xs[i * img_in..],
                ws,
                bs,
                ep,
                yi,
                &mut sc,
                par_for_work(g.work()),
                cap,
            )?;
        }
        Ok(())
    }
}

/// The weights' Winograd transform for tiles of `m × m` ([`conv_winograd::weights`]; `None`
/// when a weight is not finite): kept per buffer when the weights are a tensor's
/// ([`derived`]: an inference session transforms each layer's weights once), else computed
/// for this call.
fn winograd_weights<T: CpuScalar>(g: &Geo, m: usize, weights: Weights<'_, T>) -> Option<Buffer<T>> {
    let derive = || {
        if !all_finite(weights.values) {
            return None;
        }
        let mut work = Work::default();
        let work = work.take(g.winograd_weight_elements(m));
        let parallel = should_par(g.n.saturating_mul(g.work()));
        let u = conv_winograd::weights(g, m, weights.values, work, parallel);
        let mut form = buffers::alloc(u.len());
        Arc::make_mut(&mut form).copy_from_slice(u);
        Some(form)
    };
    let key = DerivedKey::Winograd {
        oc: g.oc,
        c: g.c,
        tile: m,
    };
    weights.derived(key, derive)
}

/// The weights packed in blocks of `lanes` output channels ([`conv_lanes::pack`]; always
/// `Some`): kept per buffer when they are a tensor's ([`derived`]), else packed for this call.
fn lanes_weights<T: CpuScalar>(
    g: &Geo,
    lanes: usize,
    weights: Weights<'_, T>,
) -> Option<Buffer<T>> {
    let (oc, row) = (g.oc, g.kk());
    let derive = || {
        let mut form = buffers::alloc(conv_lanes::packed_len(oc, row, lanes));
        conv_lanes::pack(
            weights.values,
            oc,
            row,
            lanes,
            &mut Arc::make_mut(&mut form)[..],
        );
        Some(form)
    };
    weights.derived(DerivedKey::Lanes { oc, row, lanes }, derive)
}

/// Every image's forward with output channels in lanes ([`conv_lanes`]; `packed` the weights,
/// [`lanes_weights`]): each image zero-padded, its blocks of channels split into one task per
/// thread when the work pays.
fn lanes_images<T: CpuScalar>(
    g: &Geo,
    lanes: usize,
    xs: &[T],
    packed: &[T],
    bs: &[T],
    y: &mut [T],
) {
    let p = g.p();
    let shifts = lanes_shifts(g);
    let blocks = g.oc.div_ceil(lanes);
    let tasks = match par_for_work(g.work()) {
        Parallelism::Rayon(_) => rayon::current_num_threads().clamp(1, blocks.max(1)),
        _ => 1,
    };
    let per = blocks.div_ceil(tasks.max(1)).max(1);
    let mut buf = Work::default();
    for (i, yi) in y.chunks_exact_mut(g.oc * p).enumerate() {
        let xp = padded(g, &xs[i * g.image()..(i + 1) * g.image()], &mut buf);
        let task = |(k, y): (usize, &mut [T])| {
            conv_lanes::LanesTask {
                g,
                xp,
                packed,
                b: bs,
                shifts: &shifts,
                blocks: (k * per, (y.len() / p).div_ceil(lanes)),
                y,
            }
            .run()
        };
        if tasks > 1 {
            yi.par_chunks_mut(per * lanes * p)
                .enumerate()
                .for_each(task);
        } else {
            yi.chunks_mut(per * lanes * p).enumerate().for_each(task);
        }
    }
}

/// Each tap's offset in the zero-padded image (`C × Hp × Wp`) from an output's window corner,
/// taps `(c, u, v)` in order: what [`conv_lanes::LanesTask`] reads.
fn lanes_shifts(g: &Geo) -> Vec<usize> {
    let (hp, wp) = (g.hp(), g.wp());
    (0..g.c)
        .flat_map(|c| (0..g.kh).flat_map(move |u| (0..g.kw).map(move |v| (c * hp + u) * wp + v)))
        .collect()
}

/// Every image's forward by Winograd's F(m×m, 3×3) ([`conv_winograd`]; finite operands, `m`
/// the geometry's [`ConvGeometry::winograd_tile`], `u` the transformed weights,
/// [`winograd_weights`]): images in parallel (each on one thread) when there are several and
/// the work pays, else one at a time with its transforms and products split across the pool.
fn winograd_images<T: CpuScalar>(
    g: &Geo,
    m: usize,
    xs: &[T],
    u: &[T],
    bs: &[T],
    y: &mut [T],
) -> Result<(), CpuError> {
    let (img_in, img_out) = (g.image(), g.oc * g.p());
    let total = g.n.saturating_mul(g.work());
    let image = |work: &mut Work<T>, (i, yi): (usize, &mut [T]), parallel: bool| {
        let work = work.take(g.winograd_image_elements(m));
        let x = &xs[i * img_in..(i + 1) * img_in];
        conv_winograd::forward_image(g, m, x, u, bs, yi, work, parallel)
    };
    if g.n > 1 && should_par(total) {
        y.par_chunks_mut(img_out)
            .enumerate()
            .try_for_each_init(Work::default, |work, iy| image(work, iy, false))
    } else {
        let parallel = matches!(par_for_work(g.work()), Parallelism::Rayon(_));
        let mut work = Work::default();
        y.chunks_exact_mut(img_out)
            .enumerate()
            .try_for_each(|iy| image(&mut work, iy, parallel))
    }
}

/// `W'` of [`ConvGeometry::transposed`]: `C × oc × kH × kW` from `W` (`oc × C × kH × kW`).
fn transposed_flipped<T: CpuScalar>(g: &Geo, w: &[T]) -> Vec<T> {
    let taps = g.kh * g.kw;
    let mut out = Vec::with_capacity(w.len());
    for c in 0..g.c {
        for o in 0..g.oc {
            let src = &w[(o * g.c + c) * taps..][..taps];
            out.extend(src.iter().rev());
        }
    }
    out
}

/// How the backward chunks its patch matrix: by the rule ([`BackwardChunks::new`] at this cap;
/// [`PATCH_CHUNK_ELEMENTS`] outside tests), or with the column split and the tap chunks set
/// apart ([`BackwardChunks::with_caps`]), so tests can vary one with the other fixed.
#[derive(Clone, Copy, Debug)]
enum Caps {
    Rule(usize),
    #[cfg(test)]
    Split {
        cols: usize,
        taps: usize,
    },
}

impl Caps {
    fn plan(self, taps: usize, cols: usize) -> BackwardChunks {
        match self {
            Caps::Rule(cap) => BackwardChunks::new(taps, cols, cap),
            #[cfg(test)]
            Caps::Split { cols: c, taps: t } => BackwardChunks::with_caps(taps, cols, c, t),
        }
    }
}

/// Columns `c0..c0 + len` of one image's cotangent (`oc × Ho·Wo`) in the wide layout
/// (`oc × len`): zero at the dropped columns (`j ≥ Wo` of each padded-width row).
fn wide_cotangent<T: CpuScalar>(g: &Geo, dy: &[T], out: &mut [T], c0: usize, len: usize) {
    vectorized_if::<WideCotangent, _>(out.len(), (g, dy, out, c0, len));
}

type WideCotangentArgs<'a, T> = (&'a Geo, &'a [T], &'a mut [T], usize, usize);

kernel!(WideCotangent => wide_cotangent_loop<'a> [T: (CpuScalar)] (WideCotangentArgs<'a, T>) -> ());

/// [`wide_cotangent`]'s loop.
#[inline(always)]
fn wide_cotangent_loop<T: CpuScalar>((g, dy, out, c0, len): WideCotangentArgs<'_, T>) {
    let (wp, wo, p) = (g.wp(), g.wo, g.p());
    if c0 == 0 && len == g.wide_cols() && wo > 0 {
        // whole rows: no division per run
        for (row, src) in out.chunks_exact_mut(len).zip(dy.chunks_exact(p)) {
            for (dst, src) in row.chunks_exact_mut(wp).zip(src.chunks_exact(wo)) {
                copy_run(&mut dst[..wo], src);
                dst[wo..].fill(T::ZERO);
            }
        }
        return;
    }
    for (row, src) in out.chunks_exact_mut(len).zip(dy.chunks_exact(p)) {
        let mut q = c0;
        while q < c0 + len {
            let (i, j) = (q / wp, q % wp);
            let run = (wp - j).min(c0 + len - q);
            let dst = &mut row[q - c0..q - c0 + run];
            let real = wo.saturating_sub(j).min(run);
            if real > 0 {
                copy_run(&mut dst[..real], &src[i * wo + j..][..real]);
            }
            dst[real..].fill(T::ZERO);
            q += run;
        }
    }
}

/// One group of images backward: accumulates the group's weight gradient into `dw` and writes
/// the images' input gradients into `dx` (skipped when `dx` is `None`: an input that needs no
/// gradient). The patch matrix is built a chunk at a time ([`BackwardChunks`]): blocks of
/// columns in order, and within a block ranges of taps. A tap range is a range of output columns
/// of `dW` and of output rows of `dcol`, scattered in tap order, so tap chunks never change the
/// bits. A column block is a range of `dW`'s contracted dimension: each block's product is
/// added onto `dW` in block order (one block, the usual case, is the unsplit product), and the
/// scatter adds each input cell's contributions in (block, tap) order, whatever the tap chunks
/// and thread count.
#[allow(clippy::too_many_arguments)]
fn group_backward<T: CpuScalar>(
    g: &Geo,
    layout: Layout,
    x: &[T],
    w: &[T],
    dy: &[T],
    mut dx: Option<&mut [T]>,
    dw: &mut [T],
    par: Parallelism,
    caps: Caps,
) -> Result<(), CpuError> {
    if layout == Layout::Wide && dx.is_none() && g.wide_cols() >= IMPLICIT_GRAD_MIN_COLS {
        return implicit_weight_grad(g, x, dy, dw, par);
    }
    let (p, kk, oc) = (g.p(), g.kk(), g.oc);
    let (img_in, img_out) = (g.image(), oc * p);
    let cols = g.cols(layout);
    let plan = match layout {
        // no patch matrix is built: one chunk
        Layout::Direct => BackwardChunks {
            cols: Chunks::whole(cols),
            taps: Chunks::whole(kk),
        },
        _ => caps.plan(kk, cols),
    };
    // where the patch-matrix gradient is scattered: the image, or its padded copy (wide)
    let wide_padded = layout == Layout::Wide && g.pad > 0;
    let dxp_len = g.c * g.hp() * g.wp();
    let mut sc = Scratch::default();
    let Scratch {
        xp,
        col,
        out: dcol,
        grad,
        dxp,
        ..
    } = &mut sc;
    for k in 0..x.len() / img_in {
        let xi = &x[k * img_in..(k + 1) * img_in];
        let dyi = &dy[k * img_out..(k + 1) * img_out];
        // the padded image (wide)
        let xpad = match layout {
            Layout::Wide => padded(g, xi, xp),
            _ => xi,
        };
        let mut dxi = dx
            .as_deref_mut()
            .map(|dx| &mut dx[k * img_in..(k + 1) * img_in]);
        if let Some(dxi) = dxi.as_deref_mut() {
            if layout != Layout::Direct {
                dxi.fill(T::ZERO);
            }
        }
        if wide_padded && dxi.is_some() {
            dxp.take(dxp_len).fill(T::ZERO);
        }
        for (b, block) in plan.cols.ranges().enumerate() {
            let (c0, len) = (block.start, block.len());
            let whole = len == cols;
            // the block of the cotangent in the patch matrix's column layout (oc rows)
            let dm = match layout {
                Layout::Wide => {
                    let grad = grad.take(oc * len);
                    wide_cotangent(g, dyi, grad, c0, len);
                    Mat::rows(&grad[..], len)
                }
                _ => Mat {
                    data: &dyi[c0..],
                    rs: p,
                    cs: 1,
                },
            };
            for range in plan.taps.ranges() {
                let (t0, nt) = (range.start, range.len());
                let c: &[T] = match layout {
                    Layout::Direct => xi,
                    Layout::Compact => {
                        let col = col.take(nt * len);
                        if whole {
                            im2col(g, xi, col, t0);
                        } else {
                            im2col_cols(g, xi, col, t0, c0, len);
                        }
                        col
                    }
                    Layout::Wide => {
                        let col = col.take(nt * len);
                        im2col_wide(g, xpad, col, t0, c0, len);
                        col
                    }
                };
                // dW[:, t0..t0 + nt] (+)= dy[:, block] · col[taps, block]ᵀ
                let cm = Mat::transposed(c, len);
                let acc = k > 0 || b > 0;
                gemm_rows(OP, oc, nt, len, &mut dw[t0..], kk, acc, dm, cm, par)?;
                // dcol = Wᵀ · dy (taps t0..t0 + nt, the block's columns), scattered back
                let Some(dxi) = dxi.as_deref_mut() else {
                    continue;
                };
                let wt = Mat {
                    data: &w[t0..],
                    rs: 1,
                    cs: kk,
                };
                match layout {
                    Layout::Direct => gemm(OP, kk, p, oc, dxi, false, wt, dm, par)?,
                    Layout::Compact => {
                        let dcol = dcol.take(nt * len);
                        gemm(OP, nt, len, oc, dcol, false, wt, dm, par)?;
                        if whole {
                            col2im(g, dcol, dxi, t0);
                        } else {
                            col2im_cols(g, dcol, dxi, t0, c0, len);
                        }
                    }
                    Layout::Wide => {
                        let dcol = dcol.take(nt * len);
                        gemm(OP, nt, len, oc, dcol, false, wt, dm, par)?;
                        let target = if wide_padded { dxp.take(dxp_len) } else { dxi };
                        col2im_wide(g, dcol, target, t0, c0, len);
                    }
                }
            }
        }
        if let (true, Some(dxi)) = (wide_padded, dxi) {
            let (hp, wp) = (g.hp(), g.wp());
            for (ci, plane) in dxi.chunks_exact_mut(g.h * g.w).enumerate() {
                for (r, row) in plane.chunks_exact_mut(g.w).enumerate() {
                    copy_run(
                        row,
                        &dxp.take(dxp_len)[(ci * hp + r + g.pad) * wp + g.pad..][..g.w],
                    );
                }
            }
        }
    }
    Ok(())
}

/// The fewest wide columns for [`implicit_weight_grad`]: each of its tiles ends in 24 sums
/// across the lanes, which a short image does not repay. Measured (one thread, fastest of
/// 40): ResNet's 56×56 × 64 layer 3.3 ms against 4 through the patch matrix, `conv_train`'s
/// 8 → 16 (624 columns, 32 images) 0.68 against 1.45, but its 14×14 × 256 layer (224
/// columns) 4.0 against 2.4.
const IMPLICIT_GRAD_MIN_COLS: usize = 512;

/// A group of images' weight gradient for the wide layout without a patch matrix
/// ([`ImplicitWeightGrad`], one image at a time, accumulated in image order): each image read
/// in place or padded with slack ([`implicit_image`]), its cotangent laid out wide (zero at the
/// dropped columns and the rounding), the output channels split into groups of whole 4-channel
/// tiles, one task each, in parallel when `par` allows. The same bits for any thread count.
fn implicit_weight_grad<T: CpuScalar>(
    g: &Geo,
    x: &[T],
    dy: &[T],
    dw: &mut [T],
    par: Parallelism,
) -> Result<(), CpuError> {
    let (p, q, kk, oc) = (g.p(), g.wide_cols(), g.kk(), g.oc);
    let (img_in, img_out) = (g.image(), oc * p);
    let cols = g.implicit_block_cols(g.ho);
    let shifts: Vec<usize> = (0..kk).map(|t| g.implicit_shift(t)).collect();
    let threads = match par {
        Parallelism::Rayon(n) if oc >= 8 => n.max(1),
        _ => 1,
    };
    let group = oc.div_ceil(threads).next_multiple_of(4);
    let mut sc = Scratch::default();
    for k in 0..x.len() / img_in.max(1) {
        let xp = implicit_image(g, &x[k * img_in..], &mut sc.xp);
        let needed = cols + shifts.last().copied().unwrap_or(0);
        if needed > xp.len() {
            return Err(CpuError::Workspace {
                op: OP,
                what: "padded image",
                needed,
                got: xp.len(),
            });
        }
        let dyw = sc.grad.take(oc * cols);
        for (row, src) in dyw
            .chunks_exact_mut(cols)
            .zip(dy[k * img_out..].chunks_exact(p))
        {
            wide_cotangent(g, src, &mut row[..q], 0, q);
            row[q..].fill(T::ZERO);
        }
        let dyw = &dyw[..];
        let task = |(dw, dy): (&mut [T], &[T])| {
            ImplicitWeightGrad {
                xp,
                dy,
                shifts: &shifts,
                cols,
                dw,
                accumulate: k > 0,
            }
            .run()
        };
        let parts = dw.chunks_mut(group * kk).zip(dyw.chunks(group * cols));
        if threads > 1 {
            parts.collect::<Vec<_>>().into_par_iter().for_each(task);
        } else {
            parts.for_each(task);
        }
    }
    Ok(())
}

/// Each `p`-long row's sum of `ds` into `out` (one per row), in one dispatch
/// ([`reduce::RowSums`]).
fn row_sums<T: CpuScalar>(ds: &[T], p: usize, out: &mut [T]) {
    vectorized_if::<RowSums, _>(ds.len(), (ds, out, p));
}

/// The input gradients of consecutive images, one at a time on this thread, as the transposed
/// convolution `t` ([`ConvGeometry::transposed`]) of their cotangents `dys` with the
/// transposed, flipped weights `wt` ([`transposed_flipped`]) and a zero bias.
fn transposed_images<T: CpuScalar>(
    t: &Geo,
    dys: &[T],
    wt: &[T],
    zero: &[T],
    dx: &mut [T],
) -> Result<(), CpuError> {
    let (img_dy, img_dx) = (t.image(), t.oc * t.p());
    let mut sc = Scratch::default();
    for (i, dxi) in dx.chunks_exact_mut(img_dx.max(1)).enumerate() {
        let dy = &dys[i * img_dy..];
        image_forward(
            t,
            dy,
            wt,
            zero,
            Epilogue::Bias,
            dxi,
            &mut sc,
            Parallelism::None,
            PATCH_CHUNK_ELEMENTS,
        )?;
    }
    Ok(())
}

/// `(dx, dW, db)`, `dx` only when `need_dx` (`dW` and `db` are the same either way).
///
/// With `relu_output` (`conv2d_relu`'s output), `dy` is first masked by it (ReLU's VJP): one
/// group of images at a time into a scratch buffer, its rows summed for `db` as they are
/// masked ([`masked_rows`]), which the group's products then read while it is in cache (the
/// same bits as masking the whole cotangent first).
#[allow(clippy::type_complexity)]
pub(crate) fn vjp<T: CpuScalar>(
    spec: &Conv2dSpec,
    x: &CpuTensor<T>,
    w: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    relu_output: Option<&CpuTensor<T>>,
    need_dx: bool,
) -> Result<(Option<CpuTensor<T>>, CpuTensor<T>, CpuTensor<T>), CpuError> {
    let caps = Caps::Rule(PATCH_CHUNK_ELEMENTS);
    vjp_capped(spec, x, w, dy, relu_output, need_dx, caps)
}

/// Each `p`-long row of `dy` masked by ReLU's output `y` ([`relu_vjp`]) into `out`, and the
/// row's sum into `sums` (as [`row_sums`] sums it) while the row is in L1; compiled for the
/// widest instruction set.
fn masked_rows<T: CpuScalar>(dy: &[T], y: &[T], out: &mut [T], p: usize, sums: &mut [T]) {
    vectorized_if::<MaskedRows, _>(out.len(), (dy, y, out, p, sums));
}

type MaskedRowsArgs<'a, T> = (&'a [T], &'a [T], &'a mut [T], usize, &'a mut [T]);

kernel!(MaskedRows => masked_rows_loop<'a> [T: (CpuScalar)] (MaskedRowsArgs<'a, T>) -> ());

/// [`masked_rows`]'s loop.
#[inline(always)]
fn masked_rows_loop<T: CpuScalar>((dy, y, out, p, sums): MaskedRowsArgs<'_, T>) {
    if p == 0 {
        sums.fill(T::ZERO);
        return;
    }
    let rows = out.chunks_exact_mut(p).zip(dy.chunks_exact(p));
    for ((o, d), (y, s)) in rows.zip(y.chunks_exact(p).zip(sums)) {
        for ((o, &d), &y) in o.iter_mut().zip(d).zip(y) {
            *o = relu_vjp(y, d);
        }
        *s = blocks_sum(o);
    }
}

/// [`vjp`] with patch-matrix chunks by `caps`.
#[allow(clippy::type_complexity)]
fn vjp_capped<T: CpuScalar>(
    spec: &Conv2dSpec,
    x: &CpuTensor<T>,
    w: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    relu_output: Option<&CpuTensor<T>>,
    need_dx: bool,
    caps: Caps,
) -> Result<(Option<CpuTensor<T>>, CpuTensor<T>, CpuTensor<T>), CpuError> {
    let g = spec.geometry(x.shape())?;
    let (xs, ws, mut ds) = (x.as_slice(), w.as_slice(), dy.as_slice());
    let ys = relu_output.map(|y| y.as_slice());
    let (p, kk, oc) = (g.p(), g.kk(), g.oc);
    let (img_in, img_out) = (g.image(), oc * p);
    let mut dx = need_dx.then(|| CpuTensor::uninit(x.shape().clone()));
    let mut dw = CpuTensor::uninit(w.shape().clone());
    let mut db = CpuTensor::uninit(Shape::from([oc]));

    // db[o] = Σ_images Σ_positions dy: each (image, channel) row's sum, then the images' in
    // order; the rows are summed by the groups below when there are several (each group's
    // cotangents read while they are in its core's cache), else here
    let mut rows = vec![T::ZERO; g.n * oc];
    let wlen = oc * kk;
    let trivial = g.n == 0 || img_in == 0 || wlen == 0 || p == 0;
    let groups = g.n.clamp(1, MAX_GROUPS);
    let per = g.n.div_ceil(groups).max(1);
    let groups = g.n.div_ceil(per);
    // one group (or no product): the whole cotangent masked at once; else each group's below
    let masked_whole;
    if trivial || groups == 1 {
        match ys {
            Some(ys) => {
                let mut m = vec![T::ZERO; ds.len()];
                masked_rows(ds, ys, &mut m, p, &mut rows);
                masked_whole = m;
                ds = &masked_whole;
            }
            None => row_sums(ds, p, &mut rows),
        }
    }
    let add_rows = |db: &mut CpuTensor<T>, rows: &[T]| {
        let dbs = db.data_mut();
        dbs.fill(T::ZERO);
        for img in rows.chunks_exact(oc.max(1)) {
            for (a, &r) in dbs.iter_mut().zip(img) {
                *a += r;
            }
        }
    };
    if trivial {
        // no product has a nonzero term
        add_rows(&mut db, &rows);
        dw.data_mut().fill(T::ZERO);
        if let Some(dx) = dx.as_mut() {
            dx.data_mut().fill(T::ZERO);
        }
        return Ok((dx, dw, db));
    }
    let layout = match g.layout() {
        Layout::Wide if !(all_finite(xs) && all_finite(ws)) => Layout::Compact,
        l => l,
    };
    // the input gradient as the transposed convolution when the implicit kernel runs it (the
    // wide layout: finite weights, so its zero padding contributes zeros); the groups then
    // compute the weight gradient alone
    let flipped = match g.transposed().filter(|_| need_dx && layout == Layout::Wide) {
        Some(t) => Some((t, transposed_flipped(&g, ws), vec![T::ZERO; g.c])),
        None => None,
    };
    if groups == 1 {
        // one image: its products threaded
        let mut dx_rest = dx.as_mut().map(|d| d.data_mut());
        if let (Some(d), Some((t, wt, zero))) = (dx_rest.as_mut(), &flipped) {
            let wt = wt.as_slice().into();
            convolve_images(t, ds, wt, zero, Epilogue::Bias, d, PATCH_CHUNK_ELEMENTS)?;
            dx_rest = None;
        }
        group_backward(
            &g,
            layout,
            xs,
            ws,
            ds,
            dx_rest,
            dw.data_mut(),
            par_for_work(g.work()),
            caps,
        )?;
        add_rows(&mut db, &rows);
        return Ok((dx, dw, db));
    }
    let mut partial = vec![T::ZERO; groups * wlen];
    // one task per group: its images' row sums, their input gradients (the transposed
    // convolution, or the scatter in `group_backward`) and its partial weight gradient
    type Task<'a, T> = (usize, ((&'a mut [T], &'a mut [T]), Option<&'a mut [T]>));
    let job = |(k, ((dwg, rowg), dxg)): Task<'_, T>| {
        let first = k * per;
        let imgs = per.min(g.n - first);
        let range = first * img_out..(first + imgs) * img_out;
        let mut masked = Work::default();
        let dsg = match ys {
            Some(ys) => {
                let m = masked.take(range.len());
                masked_rows(&ds[range.clone()], &ys[range], m, p, rowg);
                &*m
            }
            None => {
                row_sums(&ds[range.clone()], p, rowg);
                &ds[range]
            }
        };
        let dxg = match (dxg, &flipped) {
            (Some(d), Some((t, wt, zero))) => {
                transposed_images(t, dsg, wt, zero, d)?;
                None
            }
            (d, _) => d,
        };
        group_backward(
            &g,
            layout,
            &xs[first * img_in..(first + imgs) * img_in],
            ws,
            dsg,
            dxg,
            dwg,
            Parallelism::None,
            caps,
        )
    };
    let mut dx_groups: Vec<Option<&mut [T]>> = match dx.as_mut() {
        Some(d) => d.data_mut().chunks_mut(per * img_in).map(Some).collect(),
        None => (0..groups).map(|_| None).collect(),
    };
    if should_par(g.n.saturating_mul(g.work())) {
        partial
            .par_chunks_mut(wlen)
            .zip(rows.par_chunks_mut(per * oc))
            .zip(dx_groups.par_drain(..))
            .enumerate()
            .try_for_each(job)?;
    } else {
        partial
            .chunks_mut(wlen)
            .zip(rows.chunks_mut(per * oc))
            .zip(dx_groups.drain(..))
            .enumerate()
            .try_for_each(job)?;
    }
    add_rows(&mut db, &rows);
    let dws = dw.data_mut();
    dws.copy_from_slice(&partial[..wlen]);
    for part in partial[wlen..].chunks_exact(wlen) {
        for (a, &v) in dws.iter_mut().zip(part) {
            *a += v;
        }
    }
    Ok((dx, dw, db))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-group, undilated convolution with a square kernel.
    fn square(c: usize, oc: usize, k: usize, stride: usize, padding: usize) -> Conv2dSpec {
        Conv2dSpec::ungrouped(c, oc, (k, k), stride, padding)
    }

    #[test]
    fn a_padding_only_image_gives_the_bias() {
        use crate::CpuF32;
        use torchlean_runtime::{forward, vjp, Saved};
        use torchlean_spec::Op;
        let spec = square(1, 2, 2, 1, 1);
        let op = Op::Conv2d(spec);
        let x = CpuF32::zeros([1, 1, 0, 0]).unwrap();
        let w = CpuF32::filled([2, 1, 2, 2], 1.0).unwrap();
        let b = CpuF32::from_vec([2], vec![0.5, -1.0]).unwrap();
        let y = forward::<CpuF32>(&op, &[&x, &w, &b]).unwrap();
        assert_eq!(y.shape(), &Shape::from([1, 2, 1, 1]));
        assert_eq!(y.as_slice(), &[0.5, -1.0]);
        let saved = Saved::for_op(&op, &[&x, &w, &b], &y);
        let g = vjp::<CpuF32>(&op, &saved, &y).unwrap();
        assert_eq!(g[1].as_ref().unwrap().as_slice(), &[0.0; 8]);
        assert_eq!(g[2].as_ref().unwrap().as_slice(), &[0.5, -1.0]);
    }

    /// No input channels, 16 output channels on a small image (the lanes route, with nothing
    /// to pack): every output is its channel's bias.
    #[test]
    fn an_image_without_channels_gives_the_bias_in_lanes() {
        use crate::CpuF32;
        let spec = square(0, 16, 3, 1, 1);
        let x = CpuF32::zeros([1, 0, 4, 4]).unwrap();
        let g = spec.geometry(x.shape()).unwrap();
        assert!(g.forward_lanes());
        let w = CpuF32::zeros([16, 0, 3, 3]).unwrap();
        let b = CpuF32::from_vec([16], (0..16).map(|o| o as f32).collect()).unwrap();
        let y = forward(
            &spec,
            &x,
            &w,
            &b,
            Epilogue::Bias,
            Shape::from([1, 16, 4, 4]),
        )
        .unwrap();
        for (o, plane) in y.as_slice().chunks(16).enumerate() {
            assert!(plane.iter().all(|&v| v == o as f32), "channel {o}");
        }
    }

    /// A tensor of `shape` from [`values`] (seeded, `bad` poisoned), in `T`.
    fn tensor<T: CpuScalar>(shape: Vec<usize>, seed: u64, bad: Option<usize>) -> CpuTensor<T> {
        let len = shape.iter().product();
        let data = values(len, seed, bad)
            .into_iter()
            .map(T::from_f64)
            .collect();
        CpuTensor::<T>::from_vec(shape, data).unwrap()
    }

    /// Deterministic values in [-1, 1) (an LCG), with `inf` at `bad` if given.
    fn values(n: usize, seed: u64, bad: Option<usize>) -> Vec<f64> {
        let mut st = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut v: Vec<f64> = (0..n)
            .map(|_| {
                st = st
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((st >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect();
        if let Some(i) = bad.filter(|&i| i < n) {
            v[i] = f64::INFINITY;
        }
        v
    }

    fn bits<T: CpuScalar>(t: &CpuTensor<T>) -> Vec<u64> {
        t.as_slice().iter().map(|v| v.to_f64().to_bits()).collect()
    }

    /// A Winograd geometry's forward ([`winograd_images`]) is the implicit product's within
    /// rounding (relative to the largest output), the same bits on one thread and on two, for
    /// one image and three (images in parallel); with an infinite input or weight it is the
    /// implicit product's bits (the fallback).
    fn winograd_is_the_implicit_product_within_rounding<T: CpuScalar>(tol: f64) {
        use crate::threads::with_threads;
        // (C, outC, H × W, padding): ResNet's 28 × 28 layer at 16 channels, edge tiles with
        // and without padding (4 × 4 tiles); its 14 × 14 layer at 16 channels, and 13 × 13
        // outputs (2 × 2 tiles)
        let geos = [
            (16, 16, 28, 1),
            (17, 20, 19, 0),
            (16, 24, 17, 2),
            (16, 16, 14, 1),
            (18, 17, 15, 0),
        ];
        for (gi, &(c, oc, hw, pad)) in geos.iter().enumerate() {
            let spec = square(c, oc, 3, 1, pad);
            for n in [1usize, 3] {
                let g = spec.geometry(&Shape::from([n, c, hw, hw])).unwrap();
                let tile = if gi < 3 { 4 } else { 2 };
                assert_eq!(g.winograd_tile(), Some(tile), "geometry {gi}");
                assert!(g.forward_implicit(), "geometry {gi}");
                let out = Shape::from([n, oc, g.ho, g.wo]);
                for (bad_x, bad_w) in [(None, None), (Some(5), None), (None, Some(7))] {
                    let seed = (gi * 10 + n) as u64;
                    let x = tensor::<T>(vec![n, c, hw, hw], seed, bad_x);
                    let wt = tensor::<T>(vec![oc, c, 3, 3], seed + 1, bad_w);
                    let b = tensor::<T>(vec![oc], seed + 2, None);
                    let what = format!("geometry {gi}, n {n}, bad {bad_x:?} {bad_w:?}");
                    let mut implicit = CpuTensor::<T>::uninit(out.clone());
                    let mut sc = Scratch::default();
                    for (i, yi) in implicit.data_mut().chunks_exact_mut(oc * g.p()).enumerate() {
                        let xi = &x.as_slice()[i * g.image()..];
                        image_forward(
                            &g,
                            xi,
                            wt.as_slice(),
                            b.as_slice(),
                            Epilogue::Bias,
                            yi,
                            &mut sc,
                            Parallelism::None,
                            usize::MAX,
                        )
                        .unwrap();
                    }
                    let run = |t| {
                        with_threads(t, || {
                            forward(&spec, &x, &wt, &b, Epilogue::Bias, out.clone()).unwrap()
                        })
                    };
                    let (one, two) = (run(1), run(2));
                    assert_eq!(bits(&one), bits(&two), "threads, {what}");
                    if bad_x.is_some() || bad_w.is_some() {
                        assert_eq!(bits(&one), bits(&implicit), "fallback, {what}");
                        continue;
                    }
                    // the Winograd route ran: its roundings are not the implicit product's
                    assert_ne!(bits(&one), bits(&implicit), "{what}");
                    let largest = implicit
                        .as_slice()
                        .iter()
                        .fold(0.0f64, |m, v| m.max(v.to_f64().abs()));
                    for (k, (a, e)) in one.as_slice().iter().zip(implicit.as_slice()).enumerate() {
                        let err = (a.to_f64() - e.to_f64()).abs() / largest;
                        assert!(err <= tol, "{what}, output {k}: {a} against {e}");
                    }
                }
            }
        }
    }

    /// A forward with channels in lanes ([`conv_lanes`]) is the implicit product's bits (the
    /// same multiply-adds in the same order): strides 1 and 2, padding 0 to 2, kernels 1×1 to
    /// 5×5, channels that are not whole blocks, fewer positions than a tile; on 1 and 2
    /// threads, one image or two, the weights packed afresh or kept.
    fn lanes_are_the_implicit_product_bits<T: CpuScalar>() {
        use crate::threads::with_threads;
        // (C, outC, H × W, k, stride, padding)
        let geos = [
            (5, 20, 7, 3, 1, 1),
            (16, 32, 14, 3, 2, 1),
            (3, 17, 9, 5, 1, 2),
            (8, 16, 15, 1, 2, 0),
            (4, 48, 5, 3, 1, 0),
            (6, 40, 12, 3, 2, 0),
        ];
        let bits_of = |v: &[T]| v.iter().map(|v| v.to_f64().to_bits()).collect::<Vec<_>>();
        for (gi, &(c, oc, hw, k, s, pad)) in geos.iter().enumerate() {
            let spec = square(c, oc, k, s, pad);
            for n in [1usize, 2] {
                let g = spec.geometry(&Shape::from([n, c, hw, hw])).unwrap();
                assert!(g.forward_lanes(), "geometry {gi}");
                assert_eq!(g.winograd_tile(), None, "geometry {gi}");
                let seed = (gi * 10 + n) as u64;
                let x = tensor::<T>(vec![n, c, hw, hw], seed, None);
                let w = tensor::<T>(vec![oc, c, k, k], seed + 1, None);
                let b = tensor::<T>(vec![oc], seed + 2, None);
                let mut implicit = vec![T::ZERO; n * oc * g.p()];
                let mut sc = Scratch::default();
                for (i, yi) in implicit.chunks_exact_mut(oc * g.p()).enumerate() {
                    let xi = &x.as_slice()[i * g.image()..];
                    let (ws, bs) = (w.as_slice(), b.as_slice());
                    implicit_forward(
                        &g,
                        xi,
                        ws,
                        bs,
                        Epilogue::Bias,
                        yi,
                        &mut sc,
                        Parallelism::None,
                    )
                    .unwrap();
                }
                let out = Shape::from([n, oc, g.ho, g.wo]);
                for t in [1, 2, 1] {
                    let y = with_threads(t, || {
                        forward(&spec, &x, &w, &b, Epilogue::Bias, out.clone()).unwrap()
                    });
                    let what = format!("geometry {gi}, n {n}, threads {t}");
                    assert_eq!(bits_of(y.as_slice()), bits_of(&implicit), "{what}");
                }
            }
        }
    }

    #[test]
    fn lanes_are_the_implicit_product_bits_f32() {
        lanes_are_the_implicit_product_bits::<f32>();
    }

    #[test]
    fn lanes_are_the_implicit_product_bits_f64() {
        lanes_are_the_implicit_product_bits::<f64>();
    }

    /// A Winograd forward keeps its weights' transform per buffer ([`derived`]): the same
    /// weight tensor again gives the bits a copy of it (transformed afresh) gives, and after a
    /// write into the tensor, the new weights' result.
    #[test]
    fn a_winograd_forward_keeps_its_weights_transform_until_they_change() {
        let (c, hw) = (16, 16);
        let spec = square(c, c, 3, 1, 1);
        let g = spec.geometry(&Shape::from([1, c, hw, hw])).unwrap();
        assert_eq!(g.winograd_tile(), Some(4));
        let out = Shape::from([1, c, g.ho, g.wo]);
        let x = tensor::<f32>(vec![1, c, hw, hw], 1, None);
        let mut w = tensor::<f32>(vec![c, c, 3, 3], 2, None);
        let b = tensor::<f32>(vec![c], 3, None);
        let key = DerivedKey::Winograd { oc: c, c, tile: 4 };
        let kept = |w: &CpuTensor<f32>| {
            <f32 as crate::scalar::Sealed>::with_derived(|d| d.holds(w.buffer(), key))
        };
        let run =
            |w: &CpuTensor<f32>| forward(&spec, &x, w, &b, Epilogue::Bias, out.clone()).unwrap();
        assert!(!kept(&w));
        let first = run(&w);
        assert!(kept(&w));
        let again = run(&w);
        assert_eq!(bits(&first), bits(&again));
        assert_eq!(bits(&first), bits(&run(&w.deep_copy())));
        // written in place (`w` is its buffer's only holder): the kept transform is dropped
        for v in w.make_mut() {
            *v = -*v;
        }
        assert!(!kept(&w));
        let negated = run(&w);
        assert_eq!(bits(&negated), bits(&run(&w.deep_copy())));
        assert_ne!(bits(&negated), bits(&first));
    }

    #[test]
    fn winograd_is_the_implicit_product_within_rounding_f32() {
        winograd_is_the_implicit_product_within_rounding::<f32>(1e-5);
    }

    #[test]
    fn winograd_is_the_implicit_product_within_rounding_f64() {
        winograd_is_the_implicit_product_within_rounding::<f64>(1e-13);
    }

    /// Forward and VJP with patch chunks of the fewest units equal the unchunked ones bit for
    /// bit, on every layout (wide, with and without padding; compact; direct; the stride-1
    /// forwards are implicit products, whose cut is tested on its own), with more than
    /// 257 columns and taps (so chunks happen), more than 512 of them (GEMM's blocking of the
    /// contracted dimension), few and many output channels (GEMM's size classes), one image
    /// and several (the parallel weight-gradient groups), with and without the input gradient,
    /// and with a non-finite input (the wide backward's compact fallback).
    fn chunked_equals_whole<T: CpuScalar>() {
        let geos = [
            // (C, H, W, outC, k, stride, padding)
            (60, 24, 24, 3, 3, 1, 1),
            (60, 24, 24, 2, 3, 1, 0),
            (60, 56, 56, 3, 3, 2, 1),
            (60, 24, 24, 70, 3, 1, 1),
            (300, 16, 17, 3, 1, 1, 0),
            // a 5×5 kernel with two taps' worth of padding
            (24, 24, 24, 3, 5, 1, 2),
        ];
        for (gi, &(c, h, w, oc, k, st, pad)) in geos.iter().enumerate() {
            // the geometries chunk at the smallest cap (else the test would prove nothing)
            let g = square(c, oc, k, st, pad)
                .geometry(&Shape::from([c, h, w]))
                .unwrap();
            let (ho, wo) = (g.ho, g.wo);
            let cols = if st == 1 { g.wide_cols() } else { g.p() };
            let implicit = forward_route(&g) == ForwardRoute::Implicit;
            assert_eq!(implicit, matches!(gi, 0 | 1 | 3 | 5), "geometry {gi}");
            let kk = c * k * k;
            assert!(
                gi == 4 || Chunks::new(cols, kk, 1).count() > 1,
                "geometry {gi}"
            );
            assert!(
                gi == 4 || Chunks::new(kk, cols, 1).count() > 1,
                "geometry {gi}"
            );
            for n in [1usize, 3] {
                for bad in [None, Some(5)] {
                    let spec = square(c, oc, k, st, pad);
                    let seed = (gi * 100 + n) as u64;
                    let x = tensor::<T>(vec![n, c, h, w], seed, bad);
                    let wt = tensor::<T>(vec![oc, c, k, k], seed + 1, None);
                    let b = tensor::<T>(vec![oc], seed + 2, None);
                    let out = Shape::from([n, oc, ho, wo]);
                    let dy = tensor::<T>(vec![n, oc, ho, wo], seed + 3, None);
                    let whole =
                        forward_capped(&spec, &x, &wt, &b, Epilogue::Bias, out.clone(), usize::MAX)
                            .unwrap();
                    let whole_vjp =
                        vjp_capped(&spec, &x, &wt, &dy, None, true, Caps::Rule(usize::MAX))
                            .unwrap();
                    for cap in [1, 300 * c * k * k] {
                        let what = format!("geometry {gi}, n {n}, bad {bad:?}, cap {cap}");
                        let y =
                            forward_capped(&spec, &x, &wt, &b, Epilogue::Bias, out.clone(), cap)
                                .unwrap();
                        assert_eq!(bits(&y), bits(&whole), "forward, {what}");
                        for need_dx in [true, false] {
                            // tap chunks only (the columns whole): the unchunked bits
                            let caps = Caps::Split {
                                cols: usize::MAX,
                                taps: cap,
                            };
                            let (dx, dw, db) =
                                vjp_capped(&spec, &x, &wt, &dy, None, need_dx, caps).unwrap();
                            assert_eq!(bits(&dw), bits(&whole_vjp.1), "dW, {what}");
                            assert_eq!(bits(&db), bits(&whole_vjp.2), "db, {what}");
                            match dx {
                                Some(dx) => assert_eq!(
                                    bits(&dx),
                                    bits(whole_vjp.0.as_ref().unwrap()),
                                    "dx, {what}"
                                ),
                                None => assert!(!need_dx),
                            }
                        }
                    }
                }
            }
        }
    }

    /// The backward with its columns split (a summed dimension of `dW`): the same bits whatever
    /// the tap chunks and with 1 or 2 threads, for a fixed column split, on every layout that
    /// builds a patch matrix (wide, compact, the wide's compact fallback), one image and several;
    /// and within the engine suite's tolerance of the reference engine. `db` is never split.
    fn column_blocks_are_deterministic<T: CpuScalar>(tol: f64) {
        use crate::threads::with_threads;
        use torchlean_engine_suite::norm_rel_error;
        use torchlean_runtime::Kernels;
        use torchlean_spec::{Op, Tensor};
        // Sizes: C·k² ≥ 2·PATCH_CHUNK_MIN_UNITS taps and as many columns, the least that splits
        // both; few output channels, since the reference engine's conv at `opt-level = 0` (the
        // mutation profile) is the cost of this test (70 output channels took 8 s there).
        let geos = [
            // (C, H, W, outC, k, stride, padding)
            (60, 24, 24, 3, 3, 1, 1),
            (60, 30, 30, 16, 3, 1, 0),
            (60, 56, 56, 3, 3, 2, 1),
        ];
        for (gi, &(c, h, w, oc, k, st, pad)) in geos.iter().enumerate() {
            let g = square(c, oc, k, st, pad)
                .geometry(&Shape::from([c, h, w]))
                .unwrap();
            let (ho, wo) = (g.ho, g.wo);
            for cols in [g.wide_cols(), g.p()] {
                let b = BackwardChunks::with_caps(c * k * k, cols, 1, usize::MAX);
                assert!(b.cols.count() > 1, "geometry {gi}: one column block");
            }
            for n in [1usize, 3] {
                for bad in [None, Some(5)] {
                    let spec = square(c, oc, k, st, pad);
                    let seed = (gi * 100 + n) as u64 + 7;
                    let x = tensor::<T>(vec![n, c, h, w], seed, bad);
                    let wt = tensor::<T>(vec![oc, c, k, k], seed + 1, None);
                    let dy = tensor::<T>(vec![n, oc, ho, wo], seed + 3, None);
                    let run = |caps: Caps, threads: usize| {
                        with_threads(threads, || {
                            vjp_capped(&spec, &x, &wt, &dy, None, true, caps)
                        })
                        .unwrap()
                    };
                    let all = |r: &(Option<CpuTensor<T>>, CpuTensor<T>, CpuTensor<T>)| {
                        [bits(r.0.as_ref().unwrap()), bits(&r.1), bits(&r.2)]
                    };
                    let split = run(
                        Caps::Split {
                            cols: 1,
                            taps: usize::MAX,
                        },
                        1,
                    );
                    for (taps, threads) in [(usize::MAX, 2), (1, 1), (1, 2)] {
                        let again = run(Caps::Split { cols: 1, taps }, threads);
                        assert_eq!(
                            all(&again),
                            all(&split),
                            "geometry {gi}, n {n}, bad {bad:?}, tap cap {taps}, {threads} threads"
                        );
                    }
                    let whole = run(Caps::Rule(usize::MAX), 1);
                    assert_eq!(bits(&split.2), bits(&whole.2), "db, geometry {gi}");
                    if bad.is_some() {
                        continue;
                    }
                    // the reference engine, from the same (rounded) values
                    let f = |t: &CpuTensor<T>| t.to_f64().unwrap();
                    let op = Op::Conv2d(spec);
                    let bias = Tensor::<f64>::zeros(Shape::from([oc])).unwrap();
                    let (xr, wr) = (f(&x), f(&wt));
                    let y =
                        torchlean_runtime::forward::<Tensor<f64>>(&op, &[&xr, &wr, &bias]).unwrap();
                    let saved = torchlean_runtime::Saved::for_op(&op, &[&xr, &wr, &bias], &y);
                    let want = torchlean_runtime::vjp::<Tensor<f64>>(&op, &saved, &f(&dy)).unwrap();
                    let got = [split.0.as_ref().unwrap(), &split.1, &split.2];
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        let e = norm_rel_error(&f(g), w.as_ref().unwrap());
                        assert!(e <= tol, "cotangent {i}, geometry {gi}, n {n}: error {e:e}");
                    }
                }
            }
        }
    }

    #[test]
    fn column_blocks_are_deterministic_f64() {
        column_blocks_are_deterministic::<f64>(1e-12);
    }

    #[test]
    fn column_blocks_are_deterministic_f32() {
        column_blocks_are_deterministic::<f32>(1e-5);
    }

    #[test]
    fn chunked_patch_matrices_give_the_same_bits_f64() {
        chunked_equals_whole::<f64>();
    }

    #[test]
    fn chunked_patch_matrices_give_the_same_bits_f32() {
        chunked_equals_whole::<f32>();
    }

    /// The convolution as its definition, in f64: `y[o, i, j] = b[o] + Σ w[o, c, u, v] ·
    /// x[c, i + u − pad, j + v − pad]` over the cells inside the image (stride 1).
    fn direct_sum(g: &Geo, x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
        let mut y = vec![0.0; g.oc * g.p()];
        for o in 0..g.oc {
            for i in 0..g.ho {
                for j in 0..g.wo {
                    let mut acc = b[o];
                    for c in 0..g.c {
                        for u in 0..g.kh {
                            for v in 0..g.kw {
                                let (r, q) = (
                                    (i * g.s + u).checked_sub(g.pad),
                                    (j * g.s + v).checked_sub(g.pad),
                                );
                                if let (Some(r), Some(q)) = (r, q) {
                                    if r < g.h && q < g.w {
                                        acc += w[((o * g.c + c) * g.kh + u) * g.kw + v]
                                            * x[(c * g.h + r) * g.w + q];
                                    }
                                }
                            }
                        }
                    }
                    y[(o * g.ho + i) * g.wo + j] = acc;
                }
            }
        }
        y
    }

    /// `(C, H, W, outC, k, stride, padding)` of the implicit product's test geometries: square
    /// and not, several taps' worth of padding, slack read past the last channel, fewer output
    /// channels than a tile (1, 2, 4, and 7 in three vectors of columns, where 8 × 3 tiles
    /// compute the fewest), fewer wide columns than a strip, one input channel,
    /// several chunks of output rows (1,680 wide columns), a 7×7 layer in channel groups; then
    /// strides 2 and 3 with kernels of at least 4·s² taps (a 7×7 stem, odd and even padded
    /// sizes and kernels, a kernel that does not divide by the stride).
    const IMPLICIT_GEOMETRIES: [(usize, usize, usize, usize, usize, usize, usize); 17] = [
        (40, 12, 14, 40, 3, 1, 1),
        (33, 9, 11, 20, 2, 1, 0),
        (32, 20, 20, 70, 3, 1, 2),
        (48, 30, 26, 16, 5, 1, 2),
        (32, 40, 40, 16, 3, 1, 1),
        (3, 5, 6, 1, 3, 1, 1),
        (5, 4, 4, 2, 2, 1, 0),
        (7, 9, 8, 4, 3, 1, 1),
        (3, 6, 10, 7, 3, 1, 0),
        (1, 28, 28, 8, 3, 1, 0),
        (8, 26, 26, 16, 3, 1, 0),
        (64, 7, 7, 48, 3, 1, 1),
        (3, 31, 30, 16, 7, 2, 3),
        (16, 14, 15, 12, 5, 2, 1),
        (8, 9, 9, 16, 4, 2, 0),
        (5, 11, 10, 6, 6, 3, 1),
        (4, 13, 12, 8, 7, 3, 0),
    ];

    /// The implicit product ([`implicit_forward`]) and (at stride 1) the wide patch matrix
    /// ([`wide_patch_forward`]) both give the convolution's definition (`f64` to 1e-12, `f32`
    /// to 1e-5 of the terms' magnitude) on [`IMPLICIT_GEOMETRIES`], and the implicit product
    /// gives the same bits on one thread and two.
    fn implicit_and_patch_give_the_definition<T: CpuScalar>(tol: f64) {
        use crate::threads::with_threads;
        for (gi, &(c, h, w, oc, k, st, pad)) in IMPLICIT_GEOMETRIES.iter().enumerate() {
            let spec = square(c, oc, k, st, pad);
            let g = spec.geometry(&Shape::from([c, h, w])).unwrap();
            assert!(g.forward_implicit(), "geometry {gi}");
            let seed = 7 + gi as u64;
            let (x, wt, b) = (
                values(c * h * w, seed, None),
                values(oc * g.kk(), seed + 1, None),
                values(oc, seed + 2, None),
            );
            let want = direct_sum(&g, &x, &wt, &b);
            let magnitude = direct_sum(&g, &abs(&x), &abs(&wt), &abs(&b));
            let (x, wt, b): (Vec<T>, Vec<T>, Vec<T>) = (cast(&x), cast(&wt), cast(&b));
            let close = |y: &[T], what: &str| {
                for (i, ((a, e), m)) in y.iter().zip(&want).zip(&magnitude).enumerate() {
                    let a = a.to_f64();
                    assert!(
                        (a - e).abs() <= tol * (1.0 + m),
                        "{what}, geometry {gi}, output {i}: {a} against {e}"
                    );
                }
            };
            let run = |par: Parallelism| {
                let mut y = vec![T::ZERO; oc * g.p()];
                let ep = Epilogue::Bias;
                implicit_forward(&g, &x, &wt, &b, ep, &mut y, &mut Scratch::default(), par)
                    .unwrap();
                y
            };
            let one = run(Parallelism::None);
            close(&one, "implicit");
            let two = with_threads(2, || run(Parallelism::Rayon(2)));
            assert_eq!(bits_of(&two), bits_of(&one), "geometry {gi}: two threads");
            // the engine's forward takes this path (the rule the workspace estimate counts)
            assert_eq!(forward_route(&g), ForwardRoute::Implicit, "geometry {gi}");
            if st > 1 {
                continue;
            }
            let mut patch = vec![T::ZERO; oc * g.p()];
            let (sc, par) = (&mut Scratch::default(), Parallelism::None);
            wide_patch_forward(&g, &x, &wt, &b, &mut patch, sc, par, usize::MAX).unwrap();
            close(&patch, "patch matrix");
            // the patch matrix in chunks of the fewest columns: the whole's bits
            let mut chunked = vec![T::ZERO; oc * g.p()];
            wide_patch_forward(&g, &x, &wt, &b, &mut chunked, sc, par, 1).unwrap();
            assert_eq!(bits_of(&chunked), bits_of(&patch), "geometry {gi}: chunked");
        }
    }

    /// The padded image is written whole over a stale buffer: every cell is the image's or
    /// zero, the slack after it zero (with and without padding, one channel and several).
    #[test]
    fn the_padded_image_overwrites_every_cell_of_a_stale_buffer() {
        for (c, h, w, pad, slack) in [
            (3, 4, 5, 1, 7),
            (2, 3, 3, 2, 0),
            (1, 6, 2, 0, 5),
            (4, 1, 1, 3, 2),
        ] {
            let g = square(c, 1, 1, 1, pad)
                .geometry(&Shape::from([c, h, w]))
                .unwrap();
            let (hp, wp) = (h + 2 * pad, w + 2 * pad);
            let x: Vec<f64> = (0..c * h * w).map(|i| i as f64 + 1.0).collect();
            let mut buf = vec![f64::NAN; c * hp * wp + slack];
            let got = pad_into(&g, &x, &mut buf).to_vec();
            let want: Vec<f64> = (0..c * hp * wp + slack)
                .map(|i| {
                    let (ci, r, q) = (i / (hp * wp), i % (hp * wp) / wp, i % wp);
                    let inside =
                        ci < c && (pad..pad + h).contains(&r) && (pad..pad + w).contains(&q);
                    if inside {
                        x[(ci * h + r - pad) * w + q - pad]
                    } else {
                        0.0
                    }
                })
                .collect();
            assert_eq!(bits_of(&got), bits_of(&want), "{c}×{h}×{w}, padding {pad}");
        }
    }

    /// Without padding at stride 1, an image with the slack after it in the batch is read in
    /// place (only the batch's last image is copied), and what the next image holds there
    /// reaches no output: a batch whose middle image is NaN gives its neighbours the bits of
    /// their forwards alone, on one thread and two.
    #[test]
    fn images_read_in_place_are_not_touched_by_the_next_image() {
        use crate::threads::with_threads;
        let (c, h, w, oc) = (3, 9, 11, 8);
        let g1 = square(c, oc, 3, 1, 0)
            .geometry(&Shape::from([c, h, w]))
            .unwrap();
        let img = c * h * w;
        let mut batch = values(3 * img, 5, None);
        batch[img..2 * img].fill(f64::NAN);
        let (wt, b) = (values(oc * g1.kk(), 6, None), values(oc, 7, None));
        // the choice: a view into the batch while the slack fits, else the buffer
        let mut buf = Work::default();
        assert!(std::ptr::eq(
            implicit_image(&g1, &batch, &mut buf).as_ptr(),
            batch.as_ptr()
        ));
        let last = &batch[2 * img..];
        assert!(!std::ptr::eq(
            implicit_image(&g1, last, &mut buf).as_ptr(),
            last.as_ptr()
        ));
        let padded = square(c, oc, 3, 1, 1)
            .geometry(&Shape::from([c, h, w]))
            .unwrap();
        assert!(!std::ptr::eq(
            implicit_image(&padded, &batch, &mut buf).as_ptr(),
            batch.as_ptr()
        ));

        let g = square(c, oc, 3, 1, 0)
            .geometry(&Shape::from([3, c, h, w]))
            .unwrap();
        let out = oc * g.p();
        let alone = |i: usize| {
            let mut y = vec![0.0; out];
            let x = batch[i * img..(i + 1) * img].to_vec();
            convolve_images(
                &g1,
                &x,
                wt.as_slice().into(),
                &b,
                Epilogue::Bias,
                &mut y,
                PATCH_CHUNK_ELEMENTS,
            )
            .unwrap();
            y
        };
        for threads in [1, 2] {
            let y = with_threads(threads, || {
                let mut y = vec![0.0; 3 * out];
                convolve_images(
                    &g,
                    &batch,
                    wt.as_slice().into(),
                    &b,
                    Epilogue::Bias,
                    &mut y,
                    PATCH_CHUNK_ELEMENTS,
                )
                .unwrap();
                y
            });
            for i in [0, 2] {
                let got = &y[i * out..(i + 1) * out];
                assert_eq!(
                    bits_of(got),
                    bits_of(&alone(i)),
                    "image {i}, {threads} threads"
                );
            }
            assert!(y[out..2 * out].iter().all(|v| v.is_nan()));
        }
    }

    /// The cotangent laid out wide is the same whole (the row-by-row path) and by column
    /// ranges (the general path), and its dropped columns are zero.
    #[test]
    fn the_wide_cotangent_is_the_same_whole_and_by_ranges() {
        let (c, h, w, oc) = (2, 7, 9, 3);
        let g = square(c, oc, 3, 1, 1)
            .geometry(&Shape::from([c, h, w]))
            .unwrap();
        let (p, q) = (g.p(), g.wide_cols());
        let dy = values(oc * p, 9, None);
        let mut whole = vec![f64::NAN; oc * q];
        wide_cotangent(&g, &dy, &mut whole, 0, q);
        let cut = g.wp() + 4;
        let mut ranges = vec![f64::NAN; oc * q];
        for (c0, len) in [(0, cut), (cut, q - cut)] {
            let mut part = vec![f64::NAN; oc * len];
            wide_cotangent(&g, &dy, &mut part, c0, len);
            for (o, row) in part.chunks_exact(len).enumerate() {
                ranges[o * q + c0..o * q + c0 + len].copy_from_slice(row);
            }
        }
        assert_eq!(bits_of(&whole), bits_of(&ranges));
        for (o, row) in whole.chunks_exact(q).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                let (i, j) = (t / g.wp(), t % g.wp());
                let want = if j < g.wo {
                    dy[o * p + i * g.wo + j]
                } else {
                    0.0
                };
                assert_eq!(v.to_bits(), want.to_bits(), "channel {o}, column {t}");
            }
        }
    }

    #[test]
    fn the_implicit_product_and_the_patch_matrix_give_the_definition_f64() {
        implicit_and_patch_give_the_definition::<f64>(1e-12);
    }

    #[test]
    fn the_implicit_product_and_the_patch_matrix_give_the_definition_f32() {
        implicit_and_patch_give_the_definition::<f32>(1e-5);
    }

    /// The implicit kernel's tiles give each output the same bits however the output is cut:
    /// one block of the whole wide output in one channel group against the row chunks and
    /// groups of [`implicit_forward`], on every instruction set this CPU has (the scalar path
    /// adds without fusing, so only within 1e-5 of the fused ones).
    #[test]
    fn the_implicit_tiles_do_not_depend_on_the_cut_nor_the_vector_width() {
        use pulp::Simd;
        for (gi, &(c, h, w, oc, k, st, pad)) in IMPLICIT_GEOMETRIES.iter().enumerate() {
            let g = square(c, oc, k, st, pad)
                .geometry(&Shape::from([c, h, w]))
                .unwrap();
            let seed = 40 + gi as u64;
            let (x, wt): (Vec<f32>, Vec<f32>) = (
                cast(&values(c * h * w, seed, None)),
                cast(&values(oc * g.kk(), seed + 1, None)),
            );
            let b = vec![0.0f32; oc];
            let mut cut = vec![0.0f32; oc * g.p()];
            implicit_forward(
                &g,
                &x,
                &wt,
                &b,
                Epilogue::Bias,
                &mut cut,
                &mut Scratch::default(),
                Parallelism::None,
            )
            .unwrap();
            let mut xp = Work::default();
            let xp = phase_split(&g, &x, &mut xp);
            let shifts: Vec<usize> = (0..g.kk()).map(|t| g.implicit_shift(t)).collect();
            let cols = g.implicit_block_cols(g.ho);
            let whole_with = |simd: &dyn Fn(ImplicitBlock<'_, f32>)| {
                let mut out = vec![f32::NAN; oc * cols];
                simd(ImplicitBlock {
                    xp,
                    w: &wt,
                    shifts: &shifts,
                    start: 0,
                    out: &mut out,
                    cols,
                });
                let mut y = vec![0.0f32; oc * g.p()];
                for (yrow, wide) in y.chunks_exact_mut(g.p()).zip(out.chunks_exact(cols)) {
                    keep_rows(&g, &wide[..g.ho * g.phase_w()], yrow, 0.0, Epilogue::Bias);
                }
                y
            };
            let best = whole_with(&|blk| blk.run());
            assert_eq!(bits_of(&best), bits_of(&cut), "geometry {gi}: cut");
            let scalar = whole_with(&|blk| pulp::Scalar::new().vectorize(blk));
            for (i, (a, e)) in scalar.iter().zip(&best).enumerate() {
                assert!(
                    (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                    "geometry {gi}, {i}"
                );
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(v3) = pulp::x86::V3::try_new() {
                let avx2 = whole_with(&|blk| Simd::vectorize(v3, blk));
                assert_eq!(bits_of(&avx2), bits_of(&best), "geometry {gi}: AVX2");
            }
        }
    }

    /// The lanes kernel on every instruction set this CPU has, each with the weights packed for
    /// its own vector width: AVX2's bits are AVX-512's; the scalar path (which adds without
    /// fusing) is within 1e-5.
    #[test]
    fn the_lanes_tiles_do_not_depend_on_the_vector_width() {
        use conv_lanes::LanesTask;
        use pulp::Simd;
        for (gi, &(c, oc, hw, k, st, pad)) in [(5, 20, 7, 3, 1, 1), (16, 40, 14, 3, 2, 1)]
            .iter()
            .enumerate()
        {
            let g = square(c, oc, k, st, pad)
                .geometry(&Shape::from([1, c, hw, hw]))
                .unwrap();
            let seed = 70 + 3 * gi as u64;
            let x: Vec<f32> = cast(&values(c * hw * hw, seed, None));
            let w: Vec<f32> = cast(&values(oc * g.kk(), seed + 1, None));
            let b: Vec<f32> = cast(&values(oc, seed + 2, None));
            let mut buf = Work::default();
            let xp = padded(&g, &x, &mut buf);
            let shifts = lanes_shifts(&g);
            let run = |lanes: usize, simd: &dyn Fn(LanesTask<'_, f32>)| {
                let mut packed = vec![0.0f32; conv_lanes::packed_len(oc, g.kk(), lanes)];
                conv_lanes::pack(&w, oc, g.kk(), lanes, &mut packed);
                let mut y = vec![f32::NAN; oc * g.p()];
                simd(LanesTask {
                    g: &g,
                    xp,
                    packed: &packed,
                    b: &b,
                    shifts: &shifts,
                    blocks: (0, oc.div_ceil(lanes)),
                    y: &mut y,
                });
                y
            };
            let best = run(conv_lanes::lanes::<f32>(), &|t| t.run());
            let scalar = run(1, &|t| pulp::Scalar::new().vectorize(t));
            for (i, (a, e)) in scalar.iter().zip(&best).enumerate() {
                let what = format!("geometry {gi}, {i}: {a} against {e}");
                assert!((a - e).abs() <= 1e-5 * (1.0 + e.abs()), "{what}");
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(v3) = pulp::x86::V3::try_new() {
                let avx2 = run(8, &|t| Simd::vectorize(v3, t));
                assert_eq!(bits_of(&avx2), bits_of(&best), "geometry {gi}: AVX2");
            }
        }
    }

    /// The input gradient as the transposed convolution ([`ConvGeometry::transposed`], taken by
    /// [`vjp`] for these geometries) equals the patch matrix's scatter (the compact layout) to
    /// 1e-12, on one image and three, with padding from none to `k − 1` (which geometries
    /// qualify is the spec's rule, tested there).
    #[test]
    fn the_input_gradient_as_a_transposed_convolution_is_the_scatters() {
        // (C, H, W, outC, k, padding)
        for (gi, &(c, h, w, oc, k, pad)) in [
            (8, 26, 26, 16, 3, 0),
            (3, 9, 11, 7, 3, 1),
            (5, 12, 10, 4, 5, 2),
            (3, 6, 7, 3, 2, 1),
            (3, 10, 10, 8, 3, 2),
        ]
        .iter()
        .enumerate()
        {
            let spec = square(c, oc, k, 1, pad);
            let g1 = spec.geometry(&Shape::from([c, h, w])).unwrap();
            assert!(g1.transposed().is_some(), "geometry {gi}");
            for n in [1usize, 3] {
                let seed = 90 + (gi * 10 + n) as u64;
                let x = tensor::<f64>(vec![n, c, h, w], seed, None);
                let wt = tensor::<f64>(vec![oc, c, k, k], seed + 1, None);
                let dy = tensor::<f64>(vec![n, oc, g1.ho, g1.wo], seed + 2, None);
                let (dx, dw, _) = vjp(&spec, &x, &wt, &dy, None, true).unwrap();
                let g = spec.geometry(x.shape()).unwrap();
                let mut want = vec![0.0; n * c * h * w];
                let mut dw_want = vec![0.0; oc * g.kk()];
                let caps = Caps::Rule(PATCH_CHUNK_ELEMENTS);
                let (xs, ws, ds) = (x.as_slice(), wt.as_slice(), dy.as_slice());
                group_backward(
                    &g,
                    Layout::Compact,
                    xs,
                    ws,
                    ds,
                    Some(&mut want),
                    &mut dw_want,
                    Parallelism::None,
                    caps,
                )
                .unwrap();
                let dx = dx.unwrap();
                for (i, (a, e)) in dx.as_slice().iter().zip(&want).enumerate() {
                    assert!(
                        (a - e).abs() <= 1e-12 * (1.0 + e.abs()),
                        "geometry {gi}, n {n}, dx {i}: {a} against {e}"
                    );
                }
                for (i, (a, e)) in dw.as_slice().iter().zip(&dw_want).enumerate() {
                    assert!(
                        (a - e).abs() <= 1e-12 * (1.0 + e.abs()),
                        "geometry {gi}, n {n}, dW {i}: {a} against {e}"
                    );
                }
            }
        }
    }

    /// The weight gradient without a patch matrix ([`implicit_weight_grad`]) equals the
    /// compact patch matrix's product to `tol` of the terms' magnitude on
    /// [`IMPLICIT_GEOMETRIES`], one image and three, and gives the same bits on one thread
    /// and two.
    fn implicit_weight_grad_is_the_patch_matrix_s<T: CpuScalar>(tol: f64) {
        use crate::threads::with_threads;
        let stride_1 = IMPLICIT_GEOMETRIES.iter().filter(|geo| geo.5 == 1);
        for (gi, &(c, h, w, oc, k, _, pad)) in stride_1.enumerate() {
            for n in [1usize, 3] {
                let g = square(c, oc, k, 1, pad)
                    .geometry(&Shape::from([n, c, h, w]))
                    .unwrap();
                let seed = 300 + (gi * 10 + n) as u64;
                let (x, dy) = (
                    values(n * g.image(), seed, None),
                    values(n * oc * g.p(), seed + 1, None),
                );
                let wt = vec![0.0; oc * g.kk()];
                let caps = Caps::Rule(PATCH_CHUNK_ELEMENTS);
                let mut want = vec![0.0; oc * g.kk()];
                group_backward(
                    &g,
                    Layout::Compact,
                    &x,
                    &wt,
                    &dy,
                    None,
                    &mut want,
                    Parallelism::None,
                    caps,
                )
                .unwrap();
                let abs_x: Vec<f64> = x.iter().map(|v| v.abs()).collect();
                let abs_dy: Vec<f64> = dy.iter().map(|v| v.abs()).collect();
                let mut magnitude = vec![0.0; oc * g.kk()];
                group_backward(
                    &g,
                    Layout::Compact,
                    &abs_x,
                    &wt,
                    &abs_dy,
                    None,
                    &mut magnitude,
                    Parallelism::None,
                    caps,
                )
                .unwrap();
                let (xt, dyt): (Vec<T>, Vec<T>) = (cast(&x), cast(&dy));
                let run = |par: Parallelism| {
                    let mut dw = vec![T::ZERO; oc * g.kk()];
                    implicit_weight_grad(&g, &xt, &dyt, &mut dw, par).unwrap();
                    dw
                };
                let one = run(Parallelism::None);
                for (i, ((a, e), m)) in one.iter().zip(&want).zip(&magnitude).enumerate() {
                    let a = a.to_f64();
                    assert!(
                        (a - e).abs() <= tol * (1.0 + m),
                        "geometry {gi}, n {n}, dW {i}: {a} against {e}"
                    );
                }
                let two = with_threads(2, || run(Parallelism::Rayon(2)));
                assert_eq!(
                    bits_of(&two),
                    bits_of(&one),
                    "geometry {gi}, n {n}: two threads"
                );
            }
        }
    }

    #[test]
    fn the_implicit_weight_gradient_is_the_patch_matrix_s_f64() {
        implicit_weight_grad_is_the_patch_matrix_s::<f64>(1e-12);
    }

    #[test]
    fn the_implicit_weight_gradient_is_the_patch_matrix_s_f32() {
        implicit_weight_grad_is_the_patch_matrix_s::<f32>(1e-5);
    }

    fn abs(v: &[f64]) -> Vec<f64> {
        v.iter().map(|x| x.abs()).collect()
    }

    fn cast<T: CpuScalar>(v: &[f64]) -> Vec<T> {
        v.iter().map(|&x| T::from_f64(x)).collect()
    }

    fn bits_of<T: CpuScalar>(v: &[T]) -> Vec<u64> {
        v.iter().map(|x| x.bits()).collect()
    }

    /// `conv2d_relu`'s kernels give the bits of `conv2d` then ReLU, and of ReLU's VJP then
    /// `conv2d`'s, on every forward route (implicit, lanes, Winograd, patches, 1×1 direct; one
    /// image and several, whose groups mask their own cotangents), at one and two threads, with
    /// an infinite input (NaN outputs: the cotangent passes there) and a cotangent whose zeros
    /// the mask must not turn into anything else.
    fn check_relu_fused<T: CpuScalar>() {
        use crate::threads::with_threads;
        use torchlean_spec::backend::{ConvPool, Elementwise};
        use torchlean_spec::{Op, UnaryOp};
        // (c, oc, k, stride, padding, extent): implicit; lanes (16 channels, 6×6 outputs);
        // Winograd; strided patches; the 1×1 direct route
        let geometries = [
            (3, 4, 3, 1, 0, 9),
            (4, 16, 3, 1, 1, 6),
            (16, 16, 3, 1, 1, 16),
            (2, 5, 3, 2, 1, 9),
            (6, 7, 1, 1, 0, 5),
        ];
        for (gi, &(c, oc, k, stride, pad, hw)) in geometries.iter().enumerate() {
            let spec = square(c, oc, k, stride, pad);
            for (n, bad) in [(1, None), (5, None), (5, Some(3))] {
                let seed = (gi * 10 + n) as u64;
                let x = tensor::<T>(vec![n, c, hw, hw], seed, bad);
                let w = tensor::<T>(vec![oc, c, k, k], seed + 1, None);
                let b = tensor::<T>(vec![oc], seed + 2, None);
                let shapes = [x.shape().clone(), w.shape().clone(), b.shape().clone()];
                let out = Op::Conv2d(spec).infer_shape(&shapes).unwrap();
                let mut dy = tensor::<T>(out.dims().to_vec(), seed + 3, None);
                dy.data_mut()[1] = T::ZERO;
                let what = format!("geometry {gi}, n {n}, bad {bad:?}");
                for threads in [1, 2] {
                    with_threads(threads, || {
                        let y = CpuTensor::conv2d(&spec, &x, &w, &b, &out).unwrap();
                        let y = CpuTensor::unary(UnaryOp::Relu, &y).unwrap();
                        let fused = CpuTensor::conv2d_relu(&spec, &x, &w, &b, &out).unwrap();
                        assert_eq!(bits_of(fused.as_slice()), bits_of(y.as_slice()), "{what}");
                        let masked =
                            CpuTensor::unary_vjp(UnaryOp::Relu, None, Some(&y), &dy).unwrap();
                        let want = CpuTensor::conv2d_vjp_for(&spec, &x, &w, &masked, true);
                        let got =
                            CpuTensor::conv2d_relu_vjp_for(&spec, &x, &w, &y, &dy, true).unwrap();
                        let (dx, dw, db) = want.unwrap();
                        let dx = dx.unwrap();
                        assert_eq!(bits_of(got.0.unwrap().as_slice()), bits_of(dx.as_slice()));
                        assert_eq!(bits_of(got.1.as_slice()), bits_of(dw.as_slice()), "{what}");
                        assert_eq!(bits_of(got.2.as_slice()), bits_of(db.as_slice()), "{what}");
                    });
                }
            }
        }
    }

    #[test]
    fn relu_fused_kernels_give_the_unfused_bits() {
        check_relu_fused::<f32>();
        check_relu_fused::<f64>();
    }

    #[test]
    fn valid_ranges_clip_the_padding() {
        // extent 5, kernel offset 0, pad 1, stride 1: output i reads i − 1
        assert_eq!(valid(5, 0, 1, 1, 5), (1, 5));
        assert_eq!(valid(5, 2, 1, 1, 5), (0, 4));
        // stride 2, pad 1, k = 0: i·2 − 1 ∈ [0, 6) for i ∈ [1, 3)
        assert_eq!(valid(3, 0, 2, 1, 6), (1, 3));
        // nothing valid
        assert_eq!(valid(2, 0, 1, 3, 1), (2, 2));
    }

    #[test]
    fn im2col_then_col2im_counts_each_input_once_per_window() {
        let spec = square(1, 1, 3, 1, 1);
        let g = spec.geometry(&Shape::from([1, 4, 4])).unwrap();
        let x = vec![1.0f64; 16];
        let mut col = vec![0.0; g.kk() * g.p()];
        im2col(&g, &x, &mut col, 0);
        let mut dx = vec![0.0; 16];
        col2im(&g, &col, &mut dx, 0);
        // corners are in 4 windows, edges in 6, interior cells in 9
        assert_eq!(dx[0], 4.0);
        assert_eq!(dx[1], 6.0);
        assert_eq!(dx[5], 9.0);
    }
}
