//! Winograd's F(m×m, 3×3) for the forward of a 3×3 stride-1 convolution (Lavin & Gray, "Fast
//! Algorithms for Convolutional Neural Networks", 2016), with `m = 4` (blocks of 6) or `m = 2`
//! (blocks of 4): each `m × m` block of outputs of one channel pair comes from an `a × a` block
//! (`a = m + 2`) of the padded input as `Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A`, so the sum over input
//! channels is `a²` products of `oc × C` by `C × tiles` matrices (one per position `ξ` of the
//! block) instead of nine products per output: 36 multiply-adds per 16 outputs and channel pair
//! (`m = 4`) or 16 per 4 (`m = 2`) where the direct sum takes 144 or 36.
//!
//! Steps, for one image ([`forward_image`]), with the transformed weights `U` computed once per
//! call ([`weights`]):
//!
//! 1. `V[c][ξ][k] = (Bᵀ d B)[ξ]` for every channel `c` and tile `k` (`d` the tile's `a × a`
//!    input, read from the zero-padded image split into its phases modulo `m`, so that each
//!    cell of every tile's block is one contiguous run over the tiles: one dropped tile per tile
//!    row, [`ConvGeometry::winograd_wide_tiles`]);
//! 2. `M[ξ] = U[·][ξ][·] · V[·][ξ][·]` (`oc × tiles`), `a²` products through `gemm`;
//! 3. `y[o]` = `Aᵀ m A` of each tile's `m[ξ] = M[ξ][o][k]`, cut to the output's extent, plus
//!    the bias.
//!
//! The transforms run on SIMD vectors across tiles (input and output) or input channels
//! (weights), the last lanes one at a time with the same operations.
//!
//! Bits: other roundings than the direct sum (`m = 4`'s constants 1/6, 1/12, 1/24 are not exact
//! in binary); in `f32` the error stays within `1e-5` of the sum of the products' magnitudes
//! (the tests bound it). Each output is one fixed sequence of operations, so the result is the
//! same for any thread count. A non-finite input would spread over its whole tile (`∞ − ∞` in
//! the transforms), so the caller takes this route only for finite images and weights.
//!
//! Parallelism: when `parallel`, the transforms split channels into at most
//! [`PARALLEL_IMAGES`] groups and the `a²` products run as separate tasks, each
//! single-threaded.

use super::linalg::{gemm, Mat};
use crate::error::CpuError;
use crate::scalar::CpuScalar;
use pulp::{Simd, WithSimd};
use rayon::prelude::*;
use std::marker::PhantomData;
use torchlean_spec::ops::{ConvGeometry, PARALLEL_IMAGES};

const OP: &str = torchlean_spec::ops::desc::CONV2D.name;

/// The arithmetic of the transforms, on one element ([`One`]) or one SIMD vector of them
/// ([`Lanes`]): every lane the same IEEE operations (no fused multiply-adds), so an element's
/// bits do not depend on which.
trait Arith: Copy {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    /// `self · c`, `c` rounded to the element type.
    fn scale(self, c: f64) -> Self;
}

#[derive(Clone, Copy)]
struct One<T>(T);

impl<T: CpuScalar> Arith for One<T> {
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        One(self.0 + o.0)
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        One(self.0 - o.0)
    }
    #[inline(always)]
    fn scale(self, c: f64) -> Self {
        One(self.0 * T::from_f64(c))
    }
}

struct Lanes<S: Simd, T: CpuScalar>(S, T::Lanes<S>);

impl<S: Simd, T: CpuScalar> Clone for Lanes<S, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Simd, T: CpuScalar> Copy for Lanes<S, T> {}

impl<S: Simd, T: CpuScalar> Arith for Lanes<S, T> {
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Lanes(self.0, T::add_lanes(self.0, self.1, o.1))
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Lanes(self.0, T::sub_lanes(self.0, self.1, o.1))
    }
    #[inline(always)]
    fn scale(self, c: f64) -> Self {
        Lanes(
            self.0,
            T::mul_lanes(self.0, self.1, T::splat(self.0, T::from_f64(c))),
        )
    }
}

/// One of the transforms' matrices applied to `I` values: `O` values.
trait Transform<const I: usize, const O: usize> {
    fn apply<X: Arith>(z: [X; I]) -> [X; O];
}

/// A variant F(M×M, 3×3): blocks of `A = M + 2`, its matrices `Bᵀ` (`A × A`), `Aᵀ` (`M × A`)
/// and `G` (`A × 3`).
trait Variant<const M: usize, const A: usize> {
    type Bt: Transform<A, A>;
    type At: Transform<A, M>;
    type G: Transform<3, A>;
}

/// F(4×4, 3×3), interpolation points 0, ±1, ±2.
struct F4;

impl Variant<4, 6> for F4 {
    type Bt = Bt4;
    type At = At4;
    type G = G4;
}

/// F(2×2, 3×3), interpolation points 0, ±1.
struct F2;

impl Variant<2, 4> for F2 {
    type Bt = Bt2;
    type At = At2;
    type G = G2;
}

struct G4;

impl Transform<3, 6> for G4 {
    #[inline(always)]
    fn apply<X: Arith>(g: [X; 3]) -> [X; 6] {
        let outer = g[0].add(g[2]);
        let edge = g[0].scale(1.0 / 24.0).add(g[2].scale(1.0 / 6.0));
        let mid = g[1].scale(1.0 / 12.0);
        [
            g[0].scale(0.25),
            outer.add(g[1]).scale(-1.0 / 6.0),
            outer.sub(g[1]).scale(-1.0 / 6.0),
            edge.add(mid),
            edge.sub(mid),
            g[2],
        ]
    }
}

struct Bt4;

impl Transform<6, 6> for Bt4 {
    #[inline(always)]
    fn apply<X: Arith>(z: [X; 6]) -> [X; 6] {
        let (s12, d12) = (z[1].add(z[2]), z[1].sub(z[2]));
        let (s34, d43) = (z[3].add(z[4]), z[4].sub(z[3]));
        let d42 = z[4].sub(z[2]);
        let d31 = z[3].sub(z[1]).scale(2.0);
        [
            z[0].scale(4.0).sub(z[2].scale(5.0)).add(z[4]),
            s34.sub(s12.scale(4.0)),
            d43.add(d12.scale(4.0)),
            d42.add(d31),
            d42.sub(d31),
            z[1].scale(4.0).sub(z[3].scale(5.0)).add(z[5]),
        ]
    }
}

struct At4;

impl Transform<6, 4> for At4 {
    #[inline(always)]
    fn apply<X: Arith>(m: [X; 6]) -> [X; 4] {
        let (s12, d12) = (m[1].add(m[2]), m[1].sub(m[2]));
        let (s34, d34) = (m[3].add(m[4]), m[3].sub(m[4]));
        [
            m[0].add(s12).add(s34),
            d12.add(d34.scale(2.0)),
            s12.add(s34.scale(4.0)),
            d12.add(d34.scale(8.0)).add(m[5]),
        ]
    }
}

struct G2;

impl Transform<3, 4> for G2 {
    #[inline(always)]
    fn apply<X: Arith>(g: [X; 3]) -> [X; 4] {
        let outer = g[0].add(g[2]);
        [
            g[0],
            outer.add(g[1]).scale(0.5),
            outer.sub(g[1]).scale(0.5),
            g[2],
        ]
    }
}

struct Bt2;

impl Transform<4, 4> for Bt2 {
    #[inline(always)]
    fn apply<X: Arith>(z: [X; 4]) -> [X; 4] {
        [
            z[0].sub(z[2]),
            z[1].add(z[2]),
            z[2].sub(z[1]),
            z[1].sub(z[3]),
        ]
    }
}

struct At2;

impl Transform<4, 2> for At2 {
    #[inline(always)]
    fn apply<X: Arith>(m: [X; 4]) -> [X; 2] {
        [m[0].add(m[1]).add(m[2]), m[1].sub(m[2]).sub(m[3])]
    }
}

/// Row `o` of `dst` (`O` rows of `n`, `n` its length / `O`) is output `o` of `F` applied, lane
/// by lane, to the column of the `I` sources (rows of at least `n`): whole SIMD vectors, then
/// the last lanes one at a time with the same operations. (Written over the slices as one loop,
/// the compiler could not rule out that sources and destinations overlap, more pairs than it
/// checks at run time, and ran it scalar: 0.29 against 0.16 ms for the weights of a
/// 128-channel layer.)
#[inline(always)]
fn rows_map<T: CpuScalar, S: Simd, F: Transform<I, O>, const I: usize, const O: usize>(
    simd: S,
    src: [&[T]; I],
    dst: &mut [T],
) {
    let n = dst.len() / O;
    let lanes = T::lanes::<S>();
    let src = src.map(|s| &s[..n]);
    let whole = n - n % lanes;
    for k in (0..whole).step_by(lanes) {
        let z = std::array::from_fn(|i| Lanes::<S, T>(simd, T::load::<S>(&src[i][k..])));
        for (o, v) in F::apply(z).into_iter().enumerate() {
            T::store::<S>(&mut dst[o * n + k..], v.1);
        }
    }
    for k in whole..n {
        let z = std::array::from_fn(|i| One(src[i][k]));
        for (o, v) in F::apply(z).into_iter().enumerate() {
            dst[o * n + k] = v.0;
        }
    }
}

/// The transformed weights `U` (`oc × (m + 2)² × C`) for tiles of `m × m` (4, else 2; the
/// geometry's [`ConvGeometry::winograd_tile`]) into `work`'s first elements, the rest of `work`
/// ([`ConvGeometry::winograd_weight_elements`] in all) scratch. Returns `U`.
pub(super) fn weights<'a, T: CpuScalar>(
    g: &ConvGeometry,
    m: usize,
    w: &[T],
    work: &'a mut [T],
    parallel: bool,
) -> &'a [T] {
    if m == 4 {
        weights_by::<T, F4, 4, 6>(g, w, work, parallel)
    } else {
        weights_by::<T, F2, 2, 4>(g, w, work, parallel)
    }
}

/// One image's forward: the image `x` (`C × H × W`), the transformed weights `u` ([`weights`]),
/// the bias `b`, into `y` (`oc × Ho × Wo`). `work` holds
/// [`ConvGeometry::winograd_image_elements`]: the transformed inputs `V` (`C × (m + 2)² × n`,
/// `n` the wide tiles), the transformed sums `M` (`(m + 2)² × oc × n`) and the tasks' scratch,
/// for tiles of `m × m` (as [`weights`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_image<T: CpuScalar>(
    g: &ConvGeometry,
    m: usize,
    x: &[T],
    u: &[T],
    b: &[T],
    y: &mut [T],
    work: &mut [T],
    parallel: bool,
) -> Result<(), CpuError> {
    let io = Image { x, u, b, y, work };
    if m == 4 {
        forward_by::<T, F4, 4, 6>(g, io, parallel)
    } else {
        forward_by::<T, F2, 2, 4>(g, io, parallel)
    }
}

/// [`forward_image`]'s operands and buffers.
struct Image<'a, T> {
    x: &'a [T],
    u: &'a [T],
    b: &'a [T],
    y: &'a mut [T],
    work: &'a mut [T],
}

/// [`weights`] for variant `V`: one output channel at a time, in groups ([`by_groups`]).
fn weights_by<'a, T: CpuScalar, V: Variant<M, A>, const M: usize, const A: usize>(
    g: &ConvGeometry,
    w: &[T],
    work: &'a mut [T],
    parallel: bool,
) -> &'a [T] {
    let c = g.c;
    let (u, scratch) = work.split_at_mut(A * A * g.oc * c);
    by_groups(
        u,
        A * A * c,
        g.winograd_task_elements(M),
        scratch,
        parallel,
        |o, uo, tmp| {
            let w = &w[o * c * 9..(o + 1) * c * 9];
            pulp::Arch::new().dispatch(WeightChannel::<T, V, M, A> {
                w,
                u: uo,
                tmp,
                c,
                variant: PhantomData,
            });
        },
    );
    u
}

/// Calls `f(i, row, scratch)` for each row `i` of `rows` (rows of `len`), in at most
/// [`PARALLEL_IMAGES`] groups of consecutive rows, each group on one task of the pool when
/// `parallel` with its own `task` elements of `scratch` ([`ConvGeometry::winograd_task_elements`]).
fn by_groups<T: CpuScalar>(
    rows: &mut [T],
    len: usize,
    task: usize,
    scratch: &mut [T],
    parallel: bool,
    f: impl Fn(usize, &mut [T], &mut [T]) + Sync,
) {
    let count = rows.len() / len.max(1);
    if count == 0 {
        return;
    }
    let groups = if parallel {
        PARALLEL_IMAGES.min(count)
    } else {
        1
    };
    let per = count.div_ceil(groups);
    let group = |(k, (rows, tmp)): (usize, (&mut [T], &mut [T]))| {
        for (i, row) in rows.chunks_mut(len).enumerate() {
            f(k * per + i, row, tmp);
        }
    };
    let tasks = rows.chunks_mut(per * len).zip(scratch.chunks_mut(task));
    if groups > 1 {
        tasks
            .enumerate()
            .collect::<Vec<_>>()
            .into_par_iter()
            .for_each(group);
    } else {
        tasks.enumerate().for_each(group);
    }
}

/// One output channel's weights transformed, input channels in lanes: `w` its `C × 3 × 3`
/// weights, `u` its `A² × C` transforms, `tmp` `(9 + 3·A)·C` of scratch.
struct WeightChannel<'a, T, V, const M: usize, const A: usize> {
    w: &'a [T],
    u: &'a mut [T],
    tmp: &'a mut [T],
    c: usize,
    variant: PhantomData<V>,
}

impl<T: CpuScalar, V: Variant<M, A>, const M: usize, const A: usize> WithSimd
    for WeightChannel<'_, T, V, M, A>
{
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let WeightChannel { w, u, tmp, c, .. } = self;
        let (taps, gg) = tmp.split_at_mut(9 * c);
        // tap by tap (contiguous stores; the 9-strided loads need no bounds checks)
        for (k, dst) in taps.chunks_exact_mut(c).enumerate() {
            for (d, g) in dst.iter_mut().zip(w.chunks_exact(9)) {
                *d = g[k];
            }
        }
        let tap = |k: usize| &taps[k * c..(k + 1) * c];
        // G g: for each kernel column `v`, its three taps down the rows to `A` (layout [v][a][c])
        for v in 0..3 {
            let dst = &mut gg[v * A * c..(v + 1) * A * c];
            rows_map::<T, S, V::G, 3, A>(simd, [tap(v), tap(3 + v), tap(6 + v)], dst);
        }
        // (G g) Gᵀ: row `a` across the three columns to `A`
        for a in 0..A {
            let row = |v: usize| &gg[(v * A + a) * c..(v * A + a + 1) * c];
            let dst = &mut u[a * A * c..(a + 1) * A * c];
            rows_map::<T, S, V::G, 3, A>(simd, [row(0), row(1), row(2)], dst);
        }
    }
}

/// The sizes of one image's transform: tile rows, tiles per row, and the wide tile count
/// `th·(tw + 1)` (each tile row has one more, dropped, so that every source of the transform is
/// one contiguous run of a phase plane; [`ConvGeometry::winograd_wide_tiles`]).
#[derive(Clone, Copy)]
struct Tiles {
    th: usize,
    tw: usize,
    n: usize,
}

impl Tiles {
    fn of(g: &ConvGeometry, m: usize) -> Self {
        let (th, tw) = g.winograd_tiles(m);
        Tiles {
            th,
            tw,
            n: g.winograd_wide_tiles(m),
        }
    }

    /// Columns of a phase plane (`tw + 1`).
    fn pw(&self) -> usize {
        self.tw + 1
    }

    /// Elements of one phase plane: `(th + 2)·(tw + 1)`, what the transform's reads reach.
    fn plane(&self) -> usize {
        (self.th + 2) * self.pw()
    }
}

/// [`forward_image`] for variant `V`.
fn forward_by<T: CpuScalar, V: Variant<M, A>, const M: usize, const A: usize>(
    g: &ConvGeometry,
    io: Image<'_, T>,
    parallel: bool,
) -> Result<(), CpuError> {
    let Image { x, u, b, y, work } = io;
    let t = Tiles::of(g, M);
    let task = g.winograd_task_elements(M);
    let (v, rest) = work.split_at_mut(A * A * g.c * t.n);
    let (m, scratch) = rest.split_at_mut(A * A * g.oc * t.n);
    // V[c][ξ][k], by channels
    by_groups(v, A * A * t.n, task, scratch, parallel, |c, vc, tmp| {
        pulp::Arch::new().dispatch(InputChannel::<T, V, M, A> {
            x: &x[c * g.h * g.w..(c + 1) * g.h * g.w],
            v: vc,
            tmp,
            dims: (g.h, g.w, g.pad),
            t,
            variant: PhantomData,
        });
    });
    products(g, A * A, t.n, u, v, m, parallel)?;
    // y[o], by output channels
    let m = &*m;
    by_groups(y, g.p(), task, scratch, parallel, |o, yo, tmp| {
        pulp::Arch::new().dispatch(OutputChannel::<T, V, M, A> {
            m: &m[o * t.n..],
            stride: g.oc * t.n,
            bias: b[o],
            y: yo,
            tmp,
            out: (g.ho, g.wo),
            t,
            variant: PhantomData,
        });
    });
    Ok(())
}

/// One channel's input transform, tiles in lanes: `x` its image, `v` its `A² × n`
/// transforms, `tmp` scratch, `dims` the image's extents and padding. The zero-padded image is
/// split into its `M²` phases modulo `M` in both directions (`P[qr][qc][ri][rj]` = padded cell
/// `(M·ri + qr, M·rj + qc)`), so that cell `(a, b)` of every tile's `A × A` block, over the wide
/// tiles `k = ti·(tw + 1) + tj`, is one contiguous run of phase `(a mod M, b mod M)` from
/// `(a / M)·(tw + 1) + b / M`.
struct InputChannel<'a, T, V, const M: usize, const A: usize> {
    x: &'a [T],
    v: &'a mut [T],
    tmp: &'a mut [T],
    dims: (usize, usize, usize),
    t: Tiles,
    variant: PhantomData<V>,
}

impl<T: CpuScalar, V: Variant<M, A>, const M: usize, const A: usize> WithSimd
    for InputChannel<'_, T, V, M, A>
{
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let InputChannel {
            x, v, tmp, dims, t, ..
        } = self;
        let (h, w, pad) = dims;
        let (plane, pw, n) = (t.plane(), t.pw(), t.n);
        let (phases, rest) = tmp.split_at_mut(M * M * plane);
        let (cols, prow) = rest.split_at_mut(A * A * n);
        // one padded row at a time (zero outside the image's columns), dealt to its `M`
        // column phases
        let prow = &mut prow[..M * pw];
        prow.fill(T::ZERO);
        for r in 0..M * (t.th + 2) {
            let at = (r % M) * M * plane + (r / M) * pw;
            let i = r.wrapping_sub(pad);
            if i >= h {
                for q in 0..M {
                    phases[at + q * plane..][..pw].fill(T::ZERO);
                }
                continue;
            }
            prow[pad..pad + w].copy_from_slice(&x[i * w..(i + 1) * w]);
            for (k, cell) in prow.chunks_exact(M).enumerate() {
                for (q, &val) in cell.iter().enumerate() {
                    phases[at + q * plane + k] = val;
                }
            }
        }
        let src = |a: usize, b: usize| {
            let at = ((a % M) * M + b % M) * plane + (a / M) * pw + b / M;
            &phases[at..at + n]
        };
        // Bᵀ d: for each block column `b`, its `A` cells down the rows (layout [b][a'][k])
        for b in 0..A {
            let dst = &mut cols[b * A * n..(b + 1) * A * n];
            rows_map::<T, S, V::Bt, A, A>(simd, std::array::from_fn(|a| src(a, b)), dst);
        }
        // (Bᵀ d) B: row `a'` across the `A` columns, into V[a'·A + b']
        for a in 0..A {
            let row = |b: usize| &cols[(b * A + a) * n..(b * A + a + 1) * n];
            let dst = &mut v[a * A * n..(a + 1) * A * n];
            rows_map::<T, S, V::Bt, A, A>(simd, std::array::from_fn(row), dst);
        }
    }
}

/// `M[ξ] = U[·][ξ][·] · V[·][ξ][·]` for the `positions` positions.
fn products<T: CpuScalar>(
    g: &ConvGeometry,
    positions: usize,
    n: usize,
    u: &[T],
    v: &[T],
    m: &mut [T],
    parallel: bool,
) -> Result<(), CpuError> {
    let (c, oc) = (g.c, g.oc);
    let one = |(xi, mx): (usize, &mut [T])| {
        let lhs = Mat {
            data: &u[xi * c..],
            rs: positions * c,
            cs: 1,
        };
        let rhs = Mat {
            data: &v[xi * n..],
            rs: positions * n,
            cs: 1,
        };
        gemm(OP, oc, n, c, mx, false, lhs, rhs, gemm::Parallelism::None)
    };
    if parallel {
        m.par_chunks_mut(oc * n).enumerate().try_for_each(one)
    } else {
        m.chunks_mut(oc * n).enumerate().try_for_each(one)
    }
}

/// One output channel's plane from its tiles' transformed sums, tiles in lanes: `m` the sums
/// from the channel's first (position `ξ`'s at `ξ·stride`), its `bias`, its plane `y` of
/// extents `out`, `tmp` `(A·M + M²)·n` of scratch.
struct OutputChannel<'a, T, V, const M: usize, const A: usize> {
    m: &'a [T],
    stride: usize,
    bias: T,
    y: &'a mut [T],
    tmp: &'a mut [T],
    out: (usize, usize),
    t: Tiles,
    variant: PhantomData<V>,
}

impl<T: CpuScalar, V: Variant<M, A>, const M: usize, const A: usize> WithSimd
    for OutputChannel<'_, T, V, M, A>
{
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let OutputChannel {
            m,
            stride,
            bias,
            y,
            tmp,
            out: (ho, wo),
            t,
            ..
        } = self;
        let n = t.n;
        let src = |xi: usize| &m[xi * stride..xi * stride + n];
        let (cols, outs) = tmp.split_at_mut(A * M * n);
        // Aᵀ m: for each block column `b`, its `A` cells down the rows to `M` (layout [b][α][k])
        for b in 0..A {
            let dst = &mut cols[b * M * n..(b + 1) * M * n];
            rows_map::<T, S, V::At, A, M>(simd, std::array::from_fn(|a| src(a * A + b)), dst);
        }
        // (Aᵀ m) A: row `α` across the `A` columns to `M` (layout [α][β][k])
        for a in 0..M {
            let row = |b: usize| &cols[(b * M + a) * n..(b * M + a + 1) * n];
            let dst = &mut outs[a * M * n..(a + 1) * M * n];
            rows_map::<T, S, V::At, A, M>(simd, std::array::from_fn(row), dst);
        }
        // each output row from its tile row's `M` column positions, interleaved
        let pw = t.pw();
        for (i, yrow) in y.chunks_exact_mut(wo).take(ho).enumerate() {
            let (ti, a) = (i / M, i % M);
            let src: [&[T]; M] = std::array::from_fn(|b| &outs[(a * M + b) * n + ti * pw..][..pw]);
            let mut cells = yrow.chunks_exact_mut(M);
            for (k, cell) in (&mut cells).enumerate() {
                for (d, s) in cell.iter_mut().zip(&src) {
                    *d = s[k] + bias;
                }
            }
            let k = wo / M;
            for (d, s) in cells.into_remainder().iter_mut().zip(&src) {
                *d = s[k] + bias;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::with_threads;
    use torchlean_spec::{Conv2dSpec, Shape};

    /// Deterministic values in about `[-1, 1]`.
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    /// The definition, in `f64`: each output and the sum of its products' magnitudes.
    fn direct(g: &ConvGeometry, x: &[f64], w: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (mut y, mut mag) = (vec![0.0; g.oc * g.p()], vec![0.0; g.oc * g.p()]);
        for o in 0..g.oc {
            for i in 0..g.ho {
                for j in 0..g.wo {
                    let (mut sum, mut abs) = (b[o], b[o].abs());
                    for c in 0..g.c {
                        for u in 0..3 {
                            for v in 0..3 {
                                let (r, col) =
                                    ((i + u).wrapping_sub(g.pad), (j + v).wrapping_sub(g.pad));
                                if r < g.h && col < g.w {
                                    let p = w[((o * g.c + c) * 3 + u) * 3 + v]
                                        * x[(c * g.h + r) * g.w + col];
                                    sum += p;
                                    abs += p.abs();
                                }
                            }
                        }
                    }
                    y[o * g.p() + i * g.wo + j] = sum;
                    mag[o * g.p() + i * g.wo + j] = abs;
                }
            }
        }
        (y, mag)
    }

    fn run<T: CpuScalar>(
        g: &ConvGeometry,
        m: usize,
        operands: [&[T]; 3],
        parallel: bool,
    ) -> Vec<T> {
        let [x, w, b] = operands;
        let mut uw = vec![T::ZERO; g.winograd_weight_elements(m)];
        let u = weights(g, m, w, &mut uw, parallel);
        let mut work = vec![T::ZERO; g.winograd_image_elements(m)];
        let mut y = vec![T::ZERO; g.oc * g.p()];
        forward_image(g, m, x, u, b, &mut y, &mut work, parallel).unwrap();
        y
    }

    /// Within `tol` of the definition relative to the sum of the products' magnitudes, and the
    /// same bits on one thread and on four, with tiles of 4 and of 2, for extents that fill the
    /// tiles and that leave edge tiles, with padding 0, 1 and 2, more channels than the SIMD
    /// lanes and fewer. Returns the worst error.
    fn check<T: CpuScalar>(m: usize, tol: f64) -> f64 {
        let geos = [
            // (C, outC, H, W, padding)
            (16, 16, 8, 8, 1),
            (3, 5, 13, 10, 1),
            (17, 18, 14, 14, 1),
            (20, 7, 11, 9, 0),
            (9, 16, 7, 12, 2),
            (33, 4, 5, 6, 1),
        ];
        let mut worst = 0.0f64;
        for (gi, &(c, oc, h, w, pad)) in geos.iter().enumerate() {
            let spec = Conv2dSpec::ungrouped(c, oc, (3, 3), 1, pad);
            let g = spec.geometry(&Shape::from([c, h, w])).unwrap();
            let seed = gi as u64 * 10 + m as u64;
            let cast = |v: Vec<f64>| v.into_iter().map(T::from_f64).collect::<Vec<T>>();
            let (x, wt, b) = (
                cast(values(c * h * w, seed)),
                cast(values(oc * c * 9, seed + 1)),
                cast(values(oc, seed + 2)),
            );
            // the definition of the rounded operands
            let back = |v: &[T]| v.iter().map(|e| e.to_f64()).collect::<Vec<f64>>();
            let (want, mag) = direct(&g, &back(&x), &back(&wt), &back(&b));
            let one = with_threads(1, || run(&g, m, [&x, &wt, &b], false));
            let four = with_threads(4, || run(&g, m, [&x, &wt, &b], true));
            let bits = |v: &[T]| v.iter().map(|e| e.bits()).collect::<Vec<_>>();
            assert_eq!(bits(&one), bits(&four), "m {m}, geometry {gi}");
            for (k, (got, (&want, &mag))) in one.iter().zip(want.iter().zip(&mag)).enumerate() {
                let err = (got.to_f64() - want).abs() / mag;
                worst = worst.max(err);
                assert!(
                    err <= tol,
                    "m {m}, geometry {gi}, output {k}: {got} against {want} (error {err:e} of {mag})"
                );
            }
        }
        worst
    }

    #[test]
    fn the_forward_is_the_convolution_within_rounding() {
        for m in [4, 2] {
            let w32 = check::<f32>(m, 1e-5);
            let w64 = check::<f64>(m, 1e-14);
            eprintln!("m {m}: worst relative errors f32 {w32:e}, f64 {w64:e}");
        }
    }
}
