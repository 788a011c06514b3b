//! 2-D convolution over `[C,H,W]` or `[N,C,H,W]`: zero padding on both sides, weight
//! `[O,C/groups,kH,kW]`, bias `[O]`; `groups` splits the channels into groups convolved
//! separately (output channel `o` reads input channels of group `o / (O/groups)`), `dilation`
//! spaces the kernel's taps (PyTorch's `F.conv2d` and ONNX's `Conv` attributes of those names).
//! TorchLean's `conv2d` is the case of one group and no dilation, which the engines' patch
//! kernels compute; other cases the engines compose ([`crate::backend::compose`]).

use crate::budget::Pass;
use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// Geometry of a 2-D convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv2dSpec {
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride: usize,
    pub padding: usize,
    /// Channel groups (≥ 1, dividing `in_channels` and `out_channels`); 1 when the node leaves
    /// it out (TorchLean's kind).
    pub groups: usize,
    /// Spacing of the kernel's taps (≥ 1); 1 when the node leaves it out.
    pub dilation: usize,
}

/// `groups` and `dilation` when a node leaves them out: TorchLean's `conv2d`.
pub const CONV_DEFAULT_GROUPS: usize = 1;
pub const CONV_DEFAULT_DILATION: usize = 1;

/// Most elements of one chunk of the CPU engine's patch matrix (im2col), 2^22 (32 MiB of f64):
/// the forward builds it a range of output columns at a time, the backward a range of weight
/// taps at a time, each chunk at least [`PATCH_CHUNK_MIN_UNITS`] columns or taps.
pub const PATCH_CHUNK_ELEMENTS: usize = 1 << 22;

/// The fewest columns (forward) or taps (backward) a chunk holds when the whole has more. The
/// CPU engine's GEMM (the `gemm` crate) picks its kernel and its blocking of the contracted
/// dimension by size class: a product with one column, at most 64 columns and rows, or at most
/// 256 outputs takes another route with other rounding. A chunk of 257 or more stays in the
/// class of the whole product, so chunked results are the whole's bits.
pub const PATCH_CHUNK_MIN_UNITS: usize = 257;

/// The most images the CPU engine convolves at once (its weight-gradient groups), each with its
/// own workspace: the factor of [`Conv2dSpec::workspace_elements`].
pub const PARALLEL_IMAGES: usize = 8;

/// How `units` (columns, taps) of `per_unit` elements each are split into chunks of at most
/// `cap` elements: the one chunking rule (the CPU engine builds its patch matrices chunk by
/// chunk, the budget's workspace estimate reads [`Chunks::largest`]). Chunks are as even as
/// possible and each holds at least [`PATCH_CHUNK_MIN_UNITS`] units (all of them when there
/// are fewer), so a chunk may exceed `cap` by up to twice the minimum's worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunks {
    units: usize,
    count: usize,
}

impl Chunks {
    pub fn new(units: usize, per_unit: usize, cap: usize) -> Self {
        let want = (cap / per_unit.max(1)).max(PATCH_CHUNK_MIN_UNITS);
        Chunks {
            units,
            count: (units / want).max(1),
        }
    }

    /// All `units` in one chunk.
    pub fn whole(units: usize) -> Self {
        Chunks { units, count: 1 }
    }

    /// How many chunks.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The units of the largest chunk.
    pub fn largest(&self) -> usize {
        self.units.div_ceil(self.count)
    }

    /// The chunks' unit ranges, in order, covering `0..units`.
    pub fn ranges(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let at = |i: usize| (i as u128 * self.units as u128 / self.count as u128) as usize;
        (0..self.count).map(move |i| at(i)..at(i + 1))
    }
}

/// How much smaller than the cap a chunk of a split backward is: 2^22 / 16 = 2^18 elements
/// (1 or 2 MiB, a core's L2 cache), so a chunk built, multiplied and scattered stays in cache.
/// Measured on the 772×772-output relative of the reviewers' convolution (debug build, one
/// image, f64): 8.0 s with chunks of 2^22 elements, 4.8 s with 2^18.
pub const SPLIT_CHUNK_DIVISOR: usize = 16;

/// How the CPU engine's convolution backward splits one image's patch matrix (`taps` rows ×
/// `cols` columns): the one rule, which the engine follows and
/// [`Conv2dSpec::workspace_elements`] counts.
///
/// While a tap chunk of [`PATCH_CHUNK_MIN_UNITS`] rows (or every tap, when there are fewer)
/// over all columns fits `cap`, the columns are one block and the taps are chunked as the
/// forward's columns are: output dimensions of every product, so the bits are the unchunked
/// ones. Past that (a huge output plane), the columns — output positions, the dimension the
/// weight gradient `dW = dy·colᵀ` sums over — are split into [`Chunks`] of at least 257
/// columns, and each block's taps into chunks, both sized for `cap /`
/// [`SPLIT_CHUNK_DIVISOR`]. The blocks depend only on the shapes (and the constant cap), and
/// the engine adds their partial weight gradients in block order, so the result is
/// deterministic, though not the unsplit sum's bits (that sum could not be held in memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardChunks {
    /// Ranges of columns (output positions), visited in order.
    pub cols: Chunks,
    /// Ranges of taps within each column block.
    pub taps: Chunks,
}

impl BackwardChunks {
    /// The split of a `taps × cols` patch matrix for chunks of about `cap` elements.
    pub fn new(taps: usize, cols: usize, cap: usize) -> Self {
        let b = Self::with_caps(taps, cols, cap, cap);
        if b.cols.count() > 1 {
            Self::with_caps(taps, cols, cap, cap / SPLIT_CHUNK_DIVISOR)
        } else {
            b
        }
    }

    /// The columns split when a minimal tap chunk over all of them exceeds `col_cap`, into
    /// blocks for `col_cap /` [`SPLIT_CHUNK_DIVISOR`]; each block's taps chunked by `tap_cap`
    /// (the engine's tests vary one with the other fixed).
    pub fn with_caps(taps: usize, cols: usize, col_cap: usize, tap_cap: usize) -> Self {
        let min_taps = taps.min(PATCH_CHUNK_MIN_UNITS);
        let blocks = if min_taps.saturating_mul(cols) > col_cap {
            Chunks::new(cols, min_taps, col_cap / SPLIT_CHUNK_DIVISOR)
        } else {
            Chunks::whole(cols)
        };
        BackwardChunks {
            cols: blocks,
            taps: Chunks::new(taps, blocks.largest(), tap_cap),
        }
    }

    /// Elements of the largest chunk (tap rows × block columns). Saturating.
    pub fn largest_elements(&self) -> usize {
        self.taps.largest().saturating_mul(self.cols.largest())
    }
}

/// Output extent of a sliding window: `(input + 2·padding − kernel) / stride + 1`, or `None`
/// when the kernel or stride is 0 or the window does not fit in the padded input (checked
/// before any subtraction, so nothing saturates).
pub fn window_out(input: usize, kernel: usize, stride: usize, padding: usize) -> Option<usize> {
    if kernel == 0 || stride == 0 {
        return None;
    }
    let padded = input.checked_add(padding.checked_mul(2)?)?;
    if padded < kernel {
        return None;
    }
    Some((padded - kernel) / stride + 1)
}

/// The extent a kernel of `kernel` taps spaced `dilation` apart covers: `dilation·(kernel − 1)
/// + 1` (`None` past `usize`, or for an empty kernel or a dilation of 0).
pub fn dilated_extent(kernel: usize, dilation: usize) -> Option<usize> {
    if kernel == 0 || dilation == 0 {
        return None;
    }
    dilation.checked_mul(kernel - 1)?.checked_add(1)
}

/// Splits `[C,H,W]` / `[N,C,H,W]` into `(N, C, H, W)`.
pub(crate) fn nchw(op: &'static str, x: &Shape) -> Result<(usize, usize, usize, usize)> {
    match x.dims() {
        [c, h, w] => Ok((1, *c, *h, *w)),
        [n, c, h, w] => Ok((*n, *c, *h, *w)),
        _ => Err(SpecError::OpShape {
            op,
            shapes: vec![x.clone()],
            reason: "expects [C,H,W] or [N,C,H,W]".into(),
        }),
    }
}

/// One convolution's sizes on one input ([`Conv2dSpec::geometry`]): images `n`, channels
/// `c`, input extents `h × w`, output channels `oc`, kernel `kh × kw`, stride `s`, padding
/// `pad`, output extents `ho × wo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub oc: usize,
    pub kh: usize,
    pub kw: usize,
    pub s: usize,
    pub pad: usize,
    pub ho: usize,
    pub wo: usize,
}

impl ConvGeometry {
    /// Rows of the patch matrix: `C·kH·kW`.
    pub fn kk(&self) -> usize {
        self.c * self.kh * self.kw
    }

    /// Output positions per image: `Ho·Wo`.
    pub fn p(&self) -> usize {
        self.ho * self.wo
    }

    /// Input elements per image: `C·H·W`.
    pub fn image(&self) -> usize {
        self.c * self.h * self.w
    }

    /// Padded input height.
    pub fn hp(&self) -> usize {
        self.h + 2 * self.pad
    }

    /// Padded input width.
    pub fn wp(&self) -> usize {
        self.w + 2 * self.pad
    }

    /// Rows of each phase of the padded image split by the stride (`⌈Hp / s⌉`; `Hp` at stride
    /// 1): phase `(a, b)` holds the padded rows `a, a + s, …` and columns `b, b + s, …`.
    pub fn phase_h(&self) -> usize {
        self.hp().div_ceil(self.s.max(1))
    }

    /// Columns of each phase of the padded image (`⌈Wp / s⌉`; `Wp` at stride 1): the implicit
    /// product's wide row width.
    pub fn phase_w(&self) -> usize {
        self.wp().div_ceil(self.s.max(1))
    }

    /// Where tap `t = (c, u, v)` of the implicit product starts in the phase-split padded image
    /// (`s² × C × phase_h × phase_w`, phases `(a, b)` in row-major order): output `(i, j)`
    /// reads padded cell `(i·s + u, j·s + v)`, which is phase `(u mod s, v mod s)`'s cell
    /// `(i + u / s, j + v / s)`, so wide column `i·phase_w + j` reads this start plus itself.
    /// At stride 1 the one phase is the padded image and the start `c·Hp·Wp + u·Wp + v`.
    pub fn implicit_shift(&self, t: usize) -> usize {
        let s = self.s.max(1);
        let (taps, plane) = (self.kh * self.kw, self.phase_h() * self.phase_w());
        let (c, u, v) = (t / taps, (t % taps) / self.kw, t % self.kw);
        let phase = (u % s) * s + v % s;
        (phase * self.c + c) * plane + (u / s) * self.phase_w() + v / s
    }

    /// Elements of the phase-split padded image with its slack
    /// ([`ConvGeometry::implicit_slack`]).
    pub fn implicit_image_elements(&self) -> usize {
        let m = usize::saturating_mul;
        let s = self.s.max(1);
        m(m(m(s, s), self.c), m(self.phase_h(), self.phase_w()))
            .saturating_add(self.implicit_slack())
    }

    /// Whether the image is its own patch matrix (1×1 kernel, stride 1, no padding).
    pub fn direct(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.s == 1 && self.pad == 0
    }

    /// Columns of the CPU engine's wide patch matrix (stride 1): `Ho·Wp`, the output rows at the
    /// padded width.
    pub fn wide_cols(&self) -> usize {
        self.ho * self.wp()
    }

    /// Whether the CPU engine runs this forward as an implicit product: a register-blocked
    /// kernel reading the patch matrix's entries straight from the zero-padded image split into
    /// the stride's phases ([`ConvGeometry::implicit_shift`]: each tap's entries are one shifted
    /// run of it), so no patch matrix is built or packed. Stride 1 (not the 1×1
    /// image-is-its-own-patch-matrix case), or a larger stride whose patch matrix would be at
    /// least 4 times the image (`kH·kW ≥ 4·s²`: ResNet's 7×7 stride-2 stem, 2.7 ms against 3.5
    /// through the patch matrix, one thread; its 3×3 and 1×1 stride-2 layers, with patch
    /// matrices of 2.25 and 0.25 images, stay there: 1.65 against 1.18 ms and 0.25 against
    /// 0.13), and a wide output ([`ConvGeometry::implicit_output_elements`]) within
    /// [`PATCH_CHUNK_ELEMENTS`]. The engine's kernel (`engine_cpu::kernels::conv_implicit`)
    /// says more, with measurements.
    pub fn forward_implicit(&self) -> bool {
        let m = usize::saturating_mul;
        let big_patches = m(self.kh, self.kw) >= m(4, m(self.s, self.s));
        // the rows at the phase width first (bounds the row chunks), then the rounded blocks
        let small_output = m(self.oc, m(self.ho, self.phase_w())) <= PATCH_CHUNK_ELEMENTS;
        !self.direct()
            && (self.s == 1 || big_patches)
            && small_output
            && self.implicit_output_elements() <= PATCH_CHUNK_ELEMENTS
    }

    /// How the implicit forward splits one image's output rows into chunks: evenly, as many as
    /// hold at least [`PATCH_CHUNK_MIN_UNITS`] wide columns each (at least one), fixed by the
    /// shape. Returns `(first row, rows)` per chunk.
    pub fn implicit_row_chunks(&self) -> Vec<(usize, usize)> {
        let rows_min = PATCH_CHUNK_MIN_UNITS.div_ceil(self.phase_w().max(1));
        let count = (self.ho / rows_min).max(1);
        (0..count)
            .map(|k| {
                let (a, b) = (k * self.ho / count, (k + 1) * self.ho / count);
                (a, b - a)
            })
            .collect()
    }

    /// Wide columns the implicit forward computes for `rows` output rows: `rows ·`
    /// [`ConvGeometry::phase_w`] rounded up to whole [`IMPLICIT_VECTOR_COLUMNS`] (the widest
    /// SIMD vector), so that its kernel never stores a partial vector.
    pub fn implicit_block_cols(&self, rows: usize) -> usize {
        rows.saturating_mul(self.phase_w())
            .checked_next_multiple_of(IMPLICIT_VECTOR_COLUMNS)
            .unwrap_or(usize::MAX)
    }

    /// The implicit forward's wide output for one image: `oc` rows of every row chunk's block
    /// columns ([`ConvGeometry::implicit_block_cols`]). Saturating.
    pub fn implicit_output_elements(&self) -> usize {
        let cols = self
            .implicit_row_chunks()
            .iter()
            .fold(0usize, |acc, &(_, n)| {
                acc.saturating_add(self.implicit_block_cols(n))
            });
        self.oc.saturating_mul(cols)
    }

    /// The input gradient of this stride-1 convolution as a convolution the implicit forward
    /// runs: `dx[c] = Σ_o dy[o] ⋆ W[o, c]` flipped, i.e. the forward over `dy` (`oc` channels
    /// of `Ho × Wo`) with the weights transposed and flipped (`W'[c, o, u, v] = W[o, c, kH−1−u,
    /// kW−1−v]`) and padding `k − 1 − pad`, whose output is `C × H × W`. Needs a square kernel
    /// with `pad < k` (else the padding would be negative) and at least 3 input channels (the
    /// CPU kernel's narrowest many-channel tile; with one or two it runs one-channel tiles,
    /// bound by their loads: `conv_train`'s first layer, 0.21 ms against 0.13 through the patch
    /// matrix).
    pub fn transposed(&self) -> Option<ConvGeometry> {
        let eligible = self.kh == self.kw && self.s == 1 && self.pad < self.kh && self.c >= 3;
        let t = ConvGeometry {
            n: self.n,
            c: self.oc,
            h: self.ho,
            w: self.wo,
            oc: self.c,
            kh: self.kh,
            kw: self.kw,
            s: 1,
            pad: self.kh.checked_sub(1 + self.pad)?,
            ho: self.h,
            wo: self.w,
        };
        (eligible && t.forward_implicit()).then_some(t)
    }

    /// Elements of the CPU engine's implicit backward buffers for one image (stride 1, not the
    /// 1×1 direct case; otherwise none), the larger of its two passes: the input gradient's
    /// ([`ConvGeometry::transposed`]: the padded cotangent with slack and the wide input
    /// gradient) and the weight gradient's (the padded image with slack and the wide
    /// cotangent, `oc ×` [`ConvGeometry::implicit_block_cols`]`(Ho)`). Saturating.
    pub fn implicit_backward_elements(&self) -> usize {
        if self.s != 1 || self.direct() {
            return 0;
        }
        let (m, a) = (usize::saturating_mul, usize::saturating_add);
        let input = self.transposed().map_or(0, |t| {
            a(t.implicit_image_elements(), t.implicit_output_elements())
        });
        let weight = a(
            self.implicit_image_elements(),
            m(self.oc, self.implicit_block_cols(self.ho)),
        );
        input.max(weight)
    }

    /// The tile side `m` of the CPU engine's Winograd forward F(m×m, 3×3) of this convolution
    /// (`engine_cpu::kernels::conv_winograd`, for finite images and weights; the implicit
    /// product otherwise), if it takes one: a 3×3 kernel at stride 1 with at most 2 of padding
    /// and at least [`WINOGRAD_MIN_CHANNELS`] input and output channels; 4 for outputs of at
    /// least [`WINOGRAD_MIN_EXTENT`] on each side (ResNet-18's 56 × 56 and 28 × 28 layers), 2
    /// for outputs of at least [`WINOGRAD_F2_MIN_EXTENT`] (its 14 × 14 ones: fewer positions, so
    /// fewer transformed weights per call, and more tiles per product).
    pub fn winograd_tile(&self) -> Option<usize> {
        let eligible = self.kh == 3
            && self.kw == 3
            && self.s == 1
            && self.pad <= 2
            && self.c >= WINOGRAD_MIN_CHANNELS
            && self.oc >= WINOGRAD_MIN_CHANNELS;
        let extent = self.ho.min(self.wo);
        if !eligible || extent < WINOGRAD_F2_MIN_EXTENT {
            None
        } else if extent < WINOGRAD_MIN_EXTENT {
            Some(2)
        } else {
            Some(4)
        }
    }

    /// Whether the CPU engine runs this forward with output channels in SIMD lanes
    /// (`engine_cpu::kernels::conv_lanes`; unless [`ConvGeometry::winograd_tile`] takes it): at
    /// least [`LANES_MIN_CHANNELS`] output channels and at most [`LANES_MAX_POSITIONS`] output
    /// positions, where the implicit product's wide rows and the patch matrix leave vectors
    /// part empty. ResNet-18's layers, one image, one thread, 2-vCPU AMD EPYC (Zen 4), the
    /// previous route → lanes: 7×7 × 512 2.83 → 2.12 ms; its stride-2 3×3 layers to 7×7 1.45 →
    /// 1.07 and to 14×14 1.19 → 1.06; but to 28×28 1.17 → 1.35 and the 112×112 stem 2.5 → 3.0,
    /// which stay.
    pub fn forward_lanes(&self) -> bool {
        self.oc >= LANES_MIN_CHANNELS && self.ho.saturating_mul(self.wo) <= LANES_MAX_POSITIONS
    }

    /// Elements of the weights packed for a forward with channels in lanes
    /// ([`ConvGeometry::forward_lanes`]): blocks of the widest vector's lanes
    /// ([`IMPLICIT_VECTOR_COLUMNS`]) or fewer, zeros past the last channel. Saturating.
    pub fn lanes_weight_elements(&self) -> usize {
        let blocks = self.oc.div_ceil(IMPLICIT_VECTOR_COLUMNS);
        blocks
            .saturating_mul(IMPLICIT_VECTOR_COLUMNS)
            .saturating_mul(self.kk())
    }

    /// Whether the CPU engine runs this forward by Winograd's algorithm
    /// ([`ConvGeometry::winograd_tile`]).
    pub fn forward_winograd(&self) -> bool {
        self.winograd_tile().is_some()
    }

    /// Tiles of `m × m` outputs per column and per row.
    pub fn winograd_tiles(&self, m: usize) -> (usize, usize) {
        let m = m.max(1);
        (self.ho.div_ceil(m), self.wo.div_ceil(m))
    }

    /// The Winograd forward's wide tile count with tiles of `m × m`: `th·(tw + 1)`, one dropped
    /// tile per tile row (each transform reads contiguous runs across tile rows). Saturating.
    pub fn winograd_wide_tiles(&self, m: usize) -> usize {
        let (th, tw) = self.winograd_tiles(m);
        th.saturating_mul(tw.saturating_add(1))
    }

    /// Scratch of one task of the Winograd forward's transforms with tiles of `m × m` (blocks of
    /// `a = m + 2`; a group of channels, one at a time), the largest of: an input channel's `m²`
    /// phase planes (`(th + 2)·(tw + 1)` each), its columns' transforms (`a²·n`, `n` the wide
    /// tiles) and one padded row (`m·(tw + 1)`); an output channel's (`(a·m + m²)·n`); an output
    /// channel's weights (`(9 + 3·a)·C`). Saturating.
    pub fn winograd_task_elements(&self, m: usize) -> usize {
        let (mul, add) = (usize::saturating_mul, usize::saturating_add);
        let (th, tw) = self.winograd_tiles(m);
        let (n, pw, a) = (self.winograd_wide_tiles(m), tw.saturating_add(1), m + 2);
        let input = add(
            add(mul(m * m, mul(th.saturating_add(2), pw)), mul(a * a, n)),
            mul(m, pw),
        );
        let output = mul(a * m + m * m, n);
        input.max(output).max(mul(9 + 3 * a, self.c))
    }

    /// Elements of the Winograd forward's buffers for one image with tiles of `m × m`: the
    /// transformed inputs (`C × (m + 2)² ×` [`ConvGeometry::winograd_wide_tiles`]), the
    /// transformed sums (`(m + 2)² × oc ×` the same) and [`PARALLEL_IMAGES`] tasks' scratch
    /// ([`ConvGeometry::winograd_task_elements`]). Saturating.
    pub fn winograd_image_elements(&self, m: usize) -> usize {
        let mul = usize::saturating_mul;
        mul(
            (m + 2) * (m + 2),
            mul(self.c.saturating_add(self.oc), self.winograd_wide_tiles(m)),
        )
        .saturating_add(mul(PARALLEL_IMAGES, self.winograd_task_elements(m)))
    }

    /// Elements of the Winograd forward's transformed weights with tiles of `m × m` (`oc × (m +
    /// 2)² × C`) and their transform's scratch ([`PARALLEL_IMAGES`] tasks'), once per call.
    /// Saturating.
    pub fn winograd_weight_elements(&self, m: usize) -> usize {
        let mul = usize::saturating_mul;
        mul((m + 2) * (m + 2), mul(self.oc, self.c))
            .saturating_add(mul(PARALLEL_IMAGES, self.winograd_task_elements(m)))
    }

    /// Zeros after the phase-split padded image for the implicit product: its last block reads
    /// up to `(kW − 1) / s` columns past the last phase's last real cell through the last tap's
    /// shift (at most the output rows' reach, `Ho + (kH − 1) / s ≤ ⌈Hp / s⌉`), plus up to
    /// [`IMPLICIT_VECTOR_COLUMNS`]` − 1` of rounding (dropped columns either way).
    pub fn implicit_slack(&self) -> usize {
        self.kw.saturating_sub(1) / self.s.max(1) + IMPLICIT_VECTOR_COLUMNS - 1
    }
}

/// The fewest input and output channels of a Winograd forward
/// ([`ConvGeometry::forward_winograd`]).
pub const WINOGRAD_MIN_CHANNELS: usize = 16;

/// The smallest output extent of a Winograd forward with 4 × 4 tiles
/// ([`ConvGeometry::winograd_tile`]).
pub const WINOGRAD_MIN_EXTENT: usize = 16;

/// The smallest output extent of a Winograd forward with 2 × 2 tiles
/// ([`ConvGeometry::winograd_tile`]).
pub const WINOGRAD_F2_MIN_EXTENT: usize = 12;

/// The fewest output channels of a forward with channels in lanes
/// ([`ConvGeometry::forward_lanes`]): one vector of AVX-512's `f32`.
pub const LANES_MIN_CHANNELS: usize = 16;

/// The most output positions (`Ho·Wo`) of a forward with channels in lanes
/// ([`ConvGeometry::forward_lanes`]): ResNet's 14×14 outputs, not its 28×28.
pub const LANES_MAX_POSITIONS: usize = 256;

/// The widest SIMD vector, in elements, that the CPU engine's implicit convolution kernel
/// stores (16 `f32` in an AVX-512 register): its wide output blocks are whole multiples of it.
pub const IMPLICIT_VECTOR_COLUMNS: usize = 16;

/// The output shape with the leading batch axis kept if the input had one.
pub(crate) fn with_batch(x: &Shape, c: usize, h: usize, w: usize) -> Shape {
    if x.rank() == 4 {
        Shape::from([x.dims()[0], c, h, w])
    } else {
        Shape::from([c, h, w])
    }
}

impl Conv2dSpec {
    const OP: &'static str = super::desc::CONV2D.name;

    /// TorchLean's `conv2d`: one channel group, no dilation, a `kernel_h × kernel_w` kernel
    /// from `in_channels` to `out_channels` channels.
    pub fn ungrouped(
        in_channels: usize,
        out_channels: usize,
        (kernel_h, kernel_w): (usize, usize),
        stride: usize,
        padding: usize,
    ) -> Self {
        Conv2dSpec {
            in_channels,
            out_channels,
            kernel_h,
            kernel_w,
            stride,
            padding,
            groups: CONV_DEFAULT_GROUPS,
            dilation: CONV_DEFAULT_DILATION,
        }
    }

    fn attr_err(attr: &'static str, reason: String) -> SpecError {
        SpecError::OpAttr {
            op: Self::OP,
            attr,
            reason,
        }
    }

    /// Output `(Ho, Wo)` for an input of spatial size `(h, w)`: the window of the dilated
    /// kernel ([`dilated_extent`]) slid over the padded input.
    fn out_hw(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        for (attr, v) in [
            ("kH", self.kernel_h),
            ("kW", self.kernel_w),
            ("stride", self.stride),
            ("groups", self.groups),
            ("dilation", self.dilation),
        ] {
            if v == 0 {
                return Err(Self::attr_err(attr, "must be positive".into()));
            }
        }
        let fit = |attr: &'static str, k: usize, extent: usize, what: &str| {
            dilated_extent(k, self.dilation)
                .and_then(|span| window_out(extent, span, self.stride, self.padding))
                .ok_or_else(|| {
                    let dilated = match self.dilation {
                        1 => String::new(),
                        d => format!(" dilated by {d}"),
                    };
                    Self::attr_err(
                        attr,
                        format!(
                            "= {k}{dilated} does not fit the input {what} {extent} padded by {}",
                            self.padding
                        ),
                    )
                })
        };
        Ok((
            fit("kH", self.kernel_h, h, "height")?,
            fit("kW", self.kernel_w, w, "width")?,
        ))
    }

    /// One group and no dilation: TorchLean's kind, which the engines' patch kernels
    /// ([`Conv2dSpec::geometry`]) compute; the others they compose.
    pub fn is_ungrouped_undilated(&self) -> bool {
        self.groups == 1 && self.dilation == 1
    }

    /// Input channels per group.
    pub fn group_in_channels(&self) -> usize {
        self.in_channels / self.groups.max(1)
    }

    /// Output channels per group.
    pub fn group_out_channels(&self) -> usize {
        self.out_channels / self.groups.max(1)
    }

    /// `groups` divides both channel counts.
    fn check_groups(&self) -> Result<()> {
        if self.groups == 0 {
            return Err(Self::attr_err("groups", "must be positive".into()));
        }
        for (what, n) in [("inC", self.in_channels), ("outC", self.out_channels)] {
            if n % self.groups != 0 {
                return Err(Self::attr_err(
                    "groups",
                    format!("= {} does not divide {what} = {n}", self.groups),
                ));
            }
        }
        Ok(())
    }

    /// Weight `[outC, inC/groups, kH, kW]` and bias `[outC]`: the one rule for a conv's payload.
    pub(crate) fn payload_shapes(&self) -> Vec<Shape> {
        self.payload_shapes_array().to_vec()
    }

    fn payload_shapes_array(&self) -> [Shape; 2] {
        [
            Shape::from([
                self.out_channels,
                self.group_in_channels(),
                self.kernel_h,
                self.kernel_w,
            ]),
            Shape::from([self.out_channels]),
        ]
    }

    /// The CPU engine's workspace, in elements, for input `x` and output `out` (validated
    /// shapes) in `pass`: per image at work, the zero-padded image and the forward chunk (patch
    /// columns and their wide output; for an implicit forward,
    /// [`ConvGeometry::forward_implicit`], the padded image with its slack and the whole wide
    /// output instead); for [`Pass::Grad`] also the padded image's gradient and
    /// the backward chunk ([`BackwardChunks`]: patch tap rows, their gradient, the column
    /// block's wide cotangent), with a partial weight gradient per image group and the
    /// bias-gradient rows. At most [`PARALLEL_IMAGES`] images at once. Forward columns are
    /// counted over the padded width (the "wide" layout, the widest); the backward's chunk is
    /// the larger of the wide and the compact layout's (each is split by its own columns).
    /// Saturating: a sum past `usize` is over any budget.
    pub fn workspace_elements(&self, x: &Shape, out: &Shape, pass: Pass) -> usize {
        let (Ok((n, c, h, w)), Ok((_, oc, ho, wo))) = (nchw(Self::OP, x), nchw(Self::OP, out))
        else {
            return 0;
        };
        let (m, a) = (usize::saturating_mul, usize::saturating_add);
        if !self.is_ungrouped_undilated() {
            // the composition ([`GroupedConv`]): the padded input, the whole patch matrix, the
            // weight repeated per image and the product; the VJP also their gradients
            let pad2 = m(self.padding, 2);
            let padded = m(m(n, c), m(a(h, pad2), a(w, pad2)));
            let patches = m(m(m(n, c), m(self.kernel_h, self.kernel_w)), m(ho, wo));
            let weights = m(
                n,
                m(
                    m(oc, self.group_in_channels()),
                    m(self.kernel_h, self.kernel_w),
                ),
            );
            let forward = a(a(padded, patches), a(weights, m(m(n, oc), m(ho, wo))));
            return if pass == Pass::Eval {
                forward
            } else {
                m(forward, 2)
            };
        }
        let pad2 = m(self.padding, 2);
        let (hp, wp) = (a(h, pad2), a(w, pad2));
        let kk = m(m(c, self.kernel_h), self.kernel_w);
        let cols = m(ho, wp);
        let padded = if self.padding > 0 { m(m(c, hp), wp) } else { 0 };
        let g = self.geometry(x).ok();
        let (padded, forward) = if let Some(g) = g.filter(|g| g.forward_implicit()) {
            // the phase-split padded image with its slack (copied even without padding or
            // stride), the wide output
            (
                padded.max(g.implicit_image_elements()),
                g.implicit_output_elements(),
            )
        } else {
            let chunk = Chunks::new(cols, kk, PATCH_CHUNK_ELEMENTS).largest();
            (padded, m(a(kk, oc), chunk))
        };
        // a Winograd forward ([`ConvGeometry::forward_winograd`]) holds its own buffers per
        // image and the transformed weights once (the implicit product's when an operand is not
        // finite)
        let winograd = g.and_then(|g| Some((g, g.winograd_tile()?)));
        let forward = forward.max(winograd.map_or(0, |(g, t)| g.winograd_image_elements(t)));
        // a forward with channels in lanes packs the weights once (kept per buffer after)
        let weights_once = match winograd {
            Some((g, t)) => g.winograd_weight_elements(t),
            None => g
                .filter(ConvGeometry::forward_lanes)
                .map_or(0, |g| g.lanes_weight_elements()),
        };
        let at_once = n.clamp(1, PARALLEL_IMAGES);
        if pass == Pass::Eval {
            return a(m(at_once, a(padded, forward)), weights_once);
        }
        // the chunk (tap rows and their gradient) and the block's wide cotangent, for the
        // widest layout's columns and the compact one's (each layout splits its own)
        let chunk = |cols: usize| {
            let b = BackwardChunks::new(kk, cols, PATCH_CHUNK_ELEMENTS);
            a(m(b.largest_elements(), 2), m(oc, b.cols.largest()))
        };
        let implicit = g.map_or(0, |g| g.implicit_backward_elements());
        let backward = a(chunk(cols).max(chunk(m(ho, wo))), padded).max(implicit);
        let per_image = a(padded, forward.max(backward));
        a(
            a(a(m(at_once, per_image), m(at_once, m(oc, kk))), m(n, oc)),
            weights_once,
        )
    }

    /// Output `(Ho, Wo)` for an input of spatial size `(h, w)` (validated attributes), for
    /// engines.
    pub fn output_hw(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        self.out_hw(h, w)
    }

    /// The sizes every engine's kernels index by, for input `x` (`[C,H,W]` or `[N,C,H,W]`;
    /// output extents from [`Conv2dSpec::output_hw`]): the one place they are read off the
    /// spec and the shape.
    /// One group and no dilation only ([`Conv2dSpec::is_ungrouped_undilated`]; others are
    /// refused, naming the attribute): the patch kernels know neither.
    pub fn geometry(&self, x: &Shape) -> Result<ConvGeometry> {
        for (attr, v) in [("groups", self.groups), ("dilation", self.dilation)] {
            if v != 1 {
                return Err(Self::attr_err(
                    attr,
                    format!("= {v}: the patch kernels take one group without dilation"),
                ));
            }
        }
        let (n, c, h, w) = nchw(Self::OP, x)?;
        let (ho, wo) = self.out_hw(h, w)?;
        Ok(ConvGeometry {
            n,
            c,
            h,
            w,
            oc: self.out_channels,
            kh: self.kernel_h,
            kw: self.kernel_w,
            s: self.stride,
            pad: self.padding,
            ho,
            wo,
        })
    }

    pub(crate) fn infer(&self, x: &Shape, w: &Shape, b: &Shape) -> Result<Shape> {
        self.check_groups()?;
        let (_, c, h, wd) = nchw(Self::OP, x)?;
        if c != self.in_channels {
            return Err(SpecError::OpShape {
                op: Self::OP,
                shapes: vec![x.clone()],
                reason: format!("the input has {c} channels, inC is {}", self.in_channels),
            });
        }
        let [want_w, want_b] = self.payload_shapes_array();
        if w != &want_w {
            return Err(SpecError::OpShape {
                op: Self::OP,
                shapes: vec![x.clone(), w.clone(), b.clone()],
                reason: format!("the weight must be {want_w} (outC, inC/groups, kH, kW)"),
            });
        }
        if b != &want_b {
            return Err(SpecError::OpShape {
                op: Self::OP,
                shapes: vec![x.clone(), w.clone(), b.clone()],
                reason: format!("the bias must be [{}]", self.out_channels),
            });
        }
        let (ho, wo) = self.out_hw(h, wd)?;
        Ok(with_batch(x, self.out_channels, ho, wo))
    }

    /// Input row/column read by output position `o` and kernel tap `k`, if not padding.
    #[inline]
    fn src(&self, o: usize, k: usize, extent: usize) -> Option<usize> {
        (o * self.stride + k * self.dilation)
            .checked_sub(self.padding)
            .filter(|&v| v < extent)
    }

    pub(crate) fn forward<A: Scalar>(
        &self,
        x: &Tensor<A>,
        w: &Tensor<A>,
        b: &Tensor<A>,
        out: &Shape,
    ) -> Result<Tensor<A>> {
        let (n, c, h, wd) = nchw(Self::OP, x.shape())?;
        let (ho, wo) = self.out_hw(h, wd)?;
        let (kh, kw, oc) = (self.kernel_h, self.kernel_w, self.out_channels);
        let (xd, wt, bd) = (x.data(), w.data(), b.data());
        // output channel `o` reads the `cg` input channels of its group from `c0`
        let (cg, og) = (self.group_in_channels(), self.group_out_channels());
        let taps = cg * kh * kw;
        let mut data = Vec::with_capacity(out.size());
        for bn in 0..n {
            for o in 0..oc {
                let c0 = o / og * cg;
                // a padded cell's term 0 · w is ±0 for a finite w, and adding ±0 leaves the
                // sum as it is (it starts at +0 and so is never −0): only a non-finite weight
                // makes the padding count, as NaN
                let skip_padding = wt[o * taps..(o + 1) * taps].iter().all(A::is_finite);
                for i in 0..ho {
                    for j in 0..wo {
                        let mut acc = A::zero();
                        for ci in 0..cg {
                            for u in 0..kh {
                                let r = self.src(i, u, h);
                                if r.is_none() && skip_padding {
                                    continue;
                                }
                                for v in 0..kw {
                                    let wv = &wt[((o * cg + ci) * kh + u) * kw + v];
                                    let term = match (r, self.src(j, v, wd)) {
                                        (Some(r), Some(s)) => {
                                            xd[((bn * c + c0 + ci) * h + r) * wd + s].mul(wv)
                                        }
                                        _ if skip_padding => continue,
                                        // a padded cell is a zero, multiplied like any other
                                        // value: 0 · NaN = NaN, as im2col and PyTorch give
                                        _ => A::zero().mul(wv),
                                    };
                                    acc = acc.add(&term);
                                }
                            }
                        }
                        data.push(acc.add(&bd[o]));
                    }
                }
            }
        }
        Tensor::new(out.clone(), data)
    }

    /// `(dx, dW, db)`, accumulated by visiting output positions in row-major order.
    pub(crate) fn vjp<A: Scalar>(
        &self,
        x: &Tensor<A>,
        w: &Tensor<A>,
        dy: &Tensor<A>,
    ) -> Result<(Tensor<A>, Tensor<A>, Tensor<A>)> {
        let (n, c, h, wd) = nchw(Self::OP, x.shape())?;
        let (ho, wo) = self.out_hw(h, wd)?;
        let (kh, kw, oc) = (self.kernel_h, self.kernel_w, self.out_channels);
        let mut dx = Tensor::<A>::zeros(x.shape().clone())?;
        let mut dw = Tensor::<A>::zeros(w.shape().clone())?;
        let mut db = Tensor::<A>::zeros(Shape::from([oc]))?;
        let (xd, wt, dd) = (x.data(), w.data(), dy.data());
        let (cg, og) = (self.group_in_channels(), self.group_out_channels());
        for bn in 0..n {
            for o in 0..oc {
                let c0 = o / og * cg;
                for i in 0..ho {
                    for j in 0..wo {
                        let d = &dd[((bn * oc + o) * ho + i) * wo + j];
                        let slot = &mut db.data_mut()[o];
                        *slot = slot.add(d);
                        // as in the forward: d · 0 adds ±0 to a weight gradient (never −0)
                        // unless the cotangent is not finite
                        let skip_padding = d.is_finite();
                        for ci in 0..cg {
                            for u in 0..kh {
                                let r = self.src(i, u, h);
                                if r.is_none() && skip_padding {
                                    continue;
                                }
                                for v in 0..kw {
                                    let wi = ((o * cg + ci) * kh + u) * kw + v;
                                    let gw = &mut dw.data_mut()[wi];
                                    let (Some(r), Some(s)) = (r, self.src(j, v, wd)) else {
                                        // a padded cell: a zero input, and no input gradient
                                        if !skip_padding {
                                            *gw = gw.add(&d.mul(&A::zero()));
                                        }
                                        continue;
                                    };
                                    let xi = ((bn * c + c0 + ci) * h + r) * wd + s;
                                    *gw = gw.add(&d.mul(&xd[xi]));
                                    let gx = &mut dx.data_mut()[xi];
                                    *gx = gx.add(&d.mul(&wt[wi]));
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok((dx, dw, db))
    }
}

/// A grouped or dilated convolution as the engines compose it
/// ([`crate::backend::compose::grouped_conv2d`]): the input zero-padded, its patch matrix
/// gathered, one batched product per image and group, the bias broadcast. Every size the
/// composition reads, from [`GroupedConv::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupedConv {
    spec: Conv2dSpec,
    /// Images, channels, input extents, output extents.
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub ho: usize,
    pub wo: usize,
}

impl GroupedConv {
    /// The sizes of `spec` on input `x` (`[C,H,W]` or `[N,C,H,W]`), its shape rule applied.
    pub fn new(spec: &Conv2dSpec, x: &Shape) -> Result<Self> {
        spec.check_groups()?;
        let (n, c, h, w) = nchw(Conv2dSpec::OP, x)?;
        let (ho, wo) = spec.out_hw(h, w)?;
        Ok(GroupedConv {
            spec: *spec,
            n,
            c,
            h,
            w,
            ho,
            wo,
        })
    }

    fn g(&self) -> usize {
        self.spec.groups
    }

    /// Taps per output of one group: `C/groups · kH · kW`.
    fn k(&self) -> usize {
        self.spec.group_in_channels() * self.spec.kernel_h * self.spec.kernel_w
    }

    fn p(&self) -> usize {
        self.ho * self.wo
    }

    /// The input as `[N,C,H,W]`.
    pub fn input4(&self) -> Shape {
        Shape::from([self.n, self.c, self.h, self.w])
    }

    /// The input padded by `padding` on both sides of its last two axes: after the height
    /// (`axis` 2), then after the width too.
    pub fn padded(&self, axes: usize) -> Shape {
        let p2 = 2 * self.spec.padding;
        match axes {
            1 => Shape::from([self.n, self.c, self.h + p2, self.w]),
            _ => Shape::from([self.n, self.c, self.h + p2, self.w + p2]),
        }
    }

    /// The padded input as the one-column table the patch matrix gathers from.
    pub fn table(&self) -> Shape {
        Shape::from([self.padded(2).size(), 1])
    }

    /// Row of [`GroupedConv::table`] of every patch element, in the order `[image, group,
    /// (channel in group, tap row, tap column), (output row, output column)]`.
    pub fn patch_ids(&self) -> Vec<usize> {
        let s = &self.spec;
        let (hp, wp) = (self.h + 2 * s.padding, self.w + 2 * s.padding);
        let mut ids = Vec::with_capacity(self.n * self.c * s.kernel_h * s.kernel_w * self.p());
        for img in 0..self.n {
            for ch in 0..self.c {
                let base = (img * self.c + ch) * hp;
                for u in 0..s.kernel_h {
                    for v in 0..s.kernel_w {
                        for i in 0..self.ho {
                            let row = (base + i * s.stride + u * s.dilation) * wp;
                            for j in 0..self.wo {
                                ids.push(row + j * s.stride + v * s.dilation);
                            }
                        }
                    }
                }
            }
        }
        ids
    }

    /// The gathered patch elements as one column.
    pub fn patch_column(&self) -> Shape {
        Shape::from([
            self.n * self.c * self.spec.kernel_h * self.spec.kernel_w * self.p(),
            1,
        ])
    }

    /// The patch matrices, one per image and group: `[N·groups, K, P]`.
    pub fn patches(&self) -> Shape {
        Shape::from([self.n * self.g(), self.k(), self.p()])
    }

    /// The weight as one matrix per group: `[groups, O/groups, K]`.
    pub fn weights(&self) -> Shape {
        Shape::from([self.g(), self.spec.group_out_channels(), self.k()])
    }

    /// The weight repeated per image: `[N, groups, O/groups, K]`.
    pub fn weights_per_image(&self) -> Shape {
        Shape::from([self.n, self.g(), self.spec.group_out_channels(), self.k()])
    }

    /// The products' operand: `[N·groups, O/groups, K]`.
    pub fn weights_batched(&self) -> Shape {
        Shape::from([self.n * self.g(), self.spec.group_out_channels(), self.k()])
    }

    /// The products: `[N·groups, O/groups, P]` (in memory, `[N, O, Ho, Wo]`).
    pub fn products(&self) -> Shape {
        Shape::from([self.n * self.g(), self.spec.group_out_channels(), self.p()])
    }

    /// The output as `[N, O, Ho, Wo]`.
    pub fn output4(&self) -> Shape {
        Shape::from([self.n, self.spec.out_channels, self.ho, self.wo])
    }

    /// The bias as a `[O, 1, 1]` column that broadcasts onto [`GroupedConv::output4`].
    pub fn bias_column(&self) -> Shape {
        Shape::from([self.spec.out_channels, 1, 1])
    }

    /// Padding on each side of the last two axes.
    pub fn padding(&self) -> usize {
        self.spec.padding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_even_cover_every_unit_and_hold_the_minimum() {
        for (units, per_unit, cap) in [
            (540, 624, 1),
            (1000, 1, 300),
            (256, 9, 1),
            (3_800_000, 10_000, PATCH_CHUNK_ELEMENTS),
        ] {
            let ch = Chunks::new(units, per_unit, cap);
            let ranges: Vec<_> = ch.ranges().collect();
            assert_eq!(ranges.len(), ch.count());
            assert_eq!(ranges.first().unwrap().start, 0);
            assert_eq!(ranges.last().unwrap().end, units);
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            let min = PATCH_CHUNK_MIN_UNITS.min(units);
            for r in &ranges {
                assert!(
                    r.len() >= min && r.len() <= ch.largest(),
                    "{r:?} of {units}"
                );
            }
        }
        // fewer units than the minimum: one chunk; a cap fitting everything: one chunk
        assert_eq!(Chunks::new(100, 1_000_000, 1).count(), 1);
        assert_eq!(Chunks::new(10_000, 10, 1 << 20).count(), 1);
        // 540 taps of 624 at the smallest cap: two chunks of 270 (no 26-tap remainder, which
        // would leave GEMM's size class)
        assert_eq!(
            Chunks::new(540, 624, 1).ranges().collect::<Vec<_>>(),
            [0..270, 270..540]
        );
    }

    #[test]
    fn the_geometry_reads_the_shape_rule_and_refuses_what_it_refuses() {
        let spec = Conv2dSpec::ungrouped(3, 8, (3, 2), 2, 1);
        let w = Shape::from([8, 3, 3, 2]);
        for (x, n) in [(Shape::from([5, 3, 9, 7]), 5), (Shape::from([3, 9, 7]), 1)] {
            let g = spec.geometry(&x).unwrap();
            let out = spec.infer(&x, &w, &Shape::from([8])).unwrap();
            let od = out.dims();
            assert_eq!((g.ho, g.wo), (od[od.len() - 2], od[od.len() - 1]));
            assert_eq!((g.n, g.c, g.h, g.w, g.oc), (n, 3, 9, 7, 8));
            assert_eq!((g.kk(), g.p(), g.image()), (18, g.ho * g.wo, 189));
            assert_eq!((g.hp(), g.wp(), g.direct()), (11, 9, false));
        }
        assert!(spec.geometry(&Shape::from([9, 7])).is_err());
        let one = Conv2dSpec {
            kernel_h: 1,
            kernel_w: 1,
            stride: 1,
            padding: 0,
            ..spec
        };
        assert!(one.geometry(&Shape::from([3, 4, 4])).unwrap().direct());
    }

    /// Only one group and no dilation is TorchLean's kind (what the patch kernels compute):
    /// a grouped or a dilated convolution alone is not.
    #[test]
    fn the_patch_kernels_take_only_ungrouped_undilated_convolutions() {
        let basic = Conv2dSpec::ungrouped(4, 4, (3, 3), 1, 1);
        assert!(basic.is_ungrouped_undilated());
        assert!(!Conv2dSpec { groups: 2, ..basic }.is_ungrouped_undilated());
        assert!(!Conv2dSpec {
            dilation: 2,
            ..basic
        }
        .is_ungrouped_undilated());
    }

    /// The reviewers' convolution: a 1×1 input, a 100×100 kernel, padding 999, output
    /// 1900×1900 (3.6M elements). The unchunked wide patch matrix was 10^4 × 1900·1999 elements
    /// (304 GB of f64); the forward's chunks stay near the cap.
    #[test]
    fn the_forward_workspace_of_a_huge_kernel_stays_near_the_chunk_cap() {
        let spec = Conv2dSpec::ungrouped(1, 1, (100, 100), 1, 999);
        let (x, out) = (Shape::from([1, 1, 1, 1]), Shape::from([1, 1, 1900, 1900]));
        assert_eq!(
            spec.infer(&x, &Shape::from([1, 1, 100, 100]), &Shape::from([1]))
                .unwrap(),
            out
        );
        let eval = spec.workspace_elements(&x, &out, Pass::Eval);
        let padded = 1999 * 1999;
        assert!(eval <= padded + 2 * PATCH_CHUNK_ELEMENTS, "{eval}");
        assert!(eval < 304_000_000_000 / 8 / 1000);
        // the backward splits the output plane into column blocks: two chunks (the patch rows
        // and their gradient) of a few caps each, the padded image and its gradient; it was
        // 257 whole output planes twice (15.6 GB)
        let grad = spec.workspace_elements(&x, &out, Pass::Grad);
        assert!(grad > 2 * padded, "{grad}");
        assert!(grad <= 2 * padded + PATCH_CHUNK_ELEMENTS, "{grad}");
    }

    /// The backward's rule: one column block while a minimal tap chunk over every column fits
    /// the cap (the old rule's tap chunks, exactly), column blocks of at least 257 columns
    /// past it, with every chunk within a few caps.
    #[test]
    fn backward_chunks_split_columns_only_past_the_cap() {
        // 600 taps × 5000 columns at a cap of 2^22: 257 × 5000 fits, so whole columns
        let b = BackwardChunks::new(600, 5000, PATCH_CHUNK_ELEMENTS);
        assert_eq!(b.cols, Chunks::whole(5000));
        assert_eq!(b.taps, Chunks::new(600, 5000, PATCH_CHUNK_ELEMENTS));
        // a cap of 1: column blocks and tap chunks of the fewest units
        let b = BackwardChunks::new(600, 5000, 1);
        assert_eq!(b.cols, Chunks::new(5000, 257, 1));
        assert!(b.cols.count() > 1 && b.taps.count() > 1);
        assert!(b.cols.ranges().all(|r| r.len() >= PATCH_CHUNK_MIN_UNITS));
        // fewer taps than the minimum: the block is sized by all of them
        let b = BackwardChunks::new(9, 10_000_000, PATCH_CHUNK_ELEMENTS);
        assert_eq!(b.taps.count(), 1);
        assert!(b.cols.count() > 1);
        assert!(b.largest_elements() <= 2 * PATCH_CHUNK_ELEMENTS / SPLIT_CHUNK_DIVISOR);
        // the reviewers' convolution: 10^4 taps × 1900·1999 columns
        let b = BackwardChunks::new(10_000, 1900 * 1999, PATCH_CHUNK_ELEMENTS);
        assert!(b.cols.count() > 1000, "{b:?}");
        assert!(b.cols.ranges().all(|r| r.len() >= PATCH_CHUNK_MIN_UNITS));
        let split = PATCH_CHUNK_ELEMENTS / SPLIT_CHUNK_DIVISOR;
        assert!(b.largest_elements() <= 4 * split, "{b:?}");
        // the two caps act separately
        let b = BackwardChunks::with_caps(600, 5000, 1, usize::MAX);
        assert_eq!(b.cols, Chunks::new(5000, 257, 1));
        assert_eq!(b.taps.count(), 1);
        // the largest chunk is its tap rows by its block columns: one chunk of each here
        let b = BackwardChunks::with_caps(10, 20, usize::MAX, usize::MAX);
        assert_eq!(b.largest_elements(), 200);
        // the column cap is inclusive: 10 taps over 600 columns fit a cap of exactly 6000
        let cols = |cap| BackwardChunks::with_caps(10, 600, cap, usize::MAX).cols;
        assert_eq!(cols(6000), Chunks::whole(600));
        assert!(cols(5999).count() > 1);
        // past the cap the blocks are sized for col_cap / SPLIT_CHUNK_DIVISOR (to within the
        // rounding of one column of 10 taps)
        let cap = 10 * 100_000 - 1;
        let b = BackwardChunks::with_caps(10, 100_000, cap, usize::MAX);
        assert!(
            b.cols.largest() * 10 <= cap / SPLIT_CHUNK_DIVISOR + 10,
            "{b:?}"
        );
        assert!(b.cols.count() <= 2 * SPLIT_CHUNK_DIVISOR + 1, "{b:?}");
    }

    #[test]
    fn the_workspace_estimate_saturates_instead_of_wrapping() {
        let spec = Conv2dSpec::ungrouped(usize::MAX / 2, 3, (usize::MAX / 2, 3), 1, usize::MAX / 4);
        let x = Shape::from([5, usize::MAX / 2, 1, 1]);
        assert_eq!(
            spec.workspace_elements(&x, &Shape::from([5, 3, 1, 1]), Pass::Grad),
            usize::MAX
        );
    }
}
