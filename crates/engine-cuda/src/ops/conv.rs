//! The conv family on the CUDA engine: 2-D convolution (`[C,H,W]` or `[N,C,H,W]`, zero padding,
//! no dilation, one group) as a patch matrix (im2col kernel) and cuBLAS products, its VJP as
//! products and the adjoint gather (col2im kernel).
//!
//! Per image the patch matrix has one row per weight tap `(c, u, v)` (`kk = C·kH·kW` rows) and
//! one column per output position (`P = Ho·Wo`): the forward is `y = W·col + b` (bias rows
//! first, then a `beta = 1` product batched over the images of a chunk with `W` shared), the
//! backward `dW = Σ_images dy·colᵀ` (batched products into per-image partials over groups of
//! images, each group summed onto `dW` in image order: [`WeightGrad`]),
//! `dcol = Wᵀ·dy` gathered back onto the input by `tl_conv_col2im` (each input cell sums its
//! taps in a fixed order: no scatter, no atomics), `db` by fixed-order row then column sums.
//! A 1×1 convolution with stride 1 and no padding uses the image itself as its patch matrix.
//!
//! Workspace: the patch matrix is built a chunk at a time ([`plan`]), whole images while they
//! fit [`PATCH_CAP`] elements, else column ranges of one image ([`Chunks`], the spec's chunking
//! rule); one workspace buffer, sized for the largest chunk, is reused by every chunk and freed
//! when the op returns.
//!
//! Non-finite values: products meet the zero padding (`0·inf = NaN`) where the reference skips
//! padded cells, as in every GEMM-based convolution (the CPU engine's compact layout alike).

use super::launch_into;
use super::linalg::{bias_buffer, column_sums};
use crate::blas::{RowMajor, RowMajorGemm};
use crate::buffer::Buffer;
use crate::device::{Arg, Device};
use crate::error::Result;
use crate::geometry::{index, Launch};
use crate::kernels::PRODUCTS;
use crate::tensor::CudaTensor;
use torchlean_spec::ops::{Chunks, ConvGeometry};
use torchlean_spec::{Conv2dSpec, Shape};

const OP: &str = torchlean_spec::ops::desc::CONV2D.name;

/// Most elements of one chunk of the patch matrix (64 MiB of `f32`): large enough that the
/// products of a chunk fill the device, bounded whatever the convolution. A chunk of one image's
/// columns may exceed it by [`Chunks`]'s minimum of 257 columns.
pub const PATCH_CAP: usize = 1 << 24;

/// Geometry of one validated convolution (the spec's one reading of the sizes).
type Geo = ConvGeometry;

/// One chunk of the patch matrix: `images` images from image `n0`, output positions
/// `p0 .. p0 + pc` of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub n0: usize,
    pub images: usize,
    pub p0: usize,
    pub pc: usize,
}

impl Chunk {
    /// Elements of its patch matrix.
    fn elements(&self, kk: usize) -> usize {
        self.images * kk * self.pc
    }
}

/// The chunks covering `n` images of `p` positions with `kk` taps, in order: groups of whole
/// images while one image's `kk·p` fits `cap` (as many as fit), else each image's positions in
/// [`Chunks`] of about `cap / kk` columns.
pub(crate) fn plan(n: usize, kk: usize, p: usize, cap: usize) -> Vec<Chunk> {
    let per_image = kk.saturating_mul(p);
    if per_image <= cap {
        let per = (cap / per_image.max(1)).clamp(1, n.max(1));
        return (0..n)
            .step_by(per)
            .map(|n0| Chunk {
                n0,
                images: per.min(n - n0),
                p0: 0,
                pc: p,
            })
            .collect();
    }
    let cols = Chunks::new(p, kk, cap);
    (0..n)
        .flat_map(|n0| {
            cols.ranges().map(move |r| Chunk {
                n0,
                images: 1,
                p0: r.start,
                pc: r.len(),
            })
        })
        .collect()
}

pub fn conv2d<D: Device>(
    spec: &Conv2dSpec,
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    b: &CudaTensor<D>,
    out: &Shape,
) -> Result<CudaTensor<D>> {
    conv2d_capped(spec, x, w, b, out, PATCH_CAP)
}

/// [`conv2d`] with patch chunks of about `cap` elements (tests use small caps).
pub(crate) fn conv2d_capped<D: Device>(
    spec: &Conv2dSpec,
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    b: &CudaTensor<D>,
    out: &Shape,
    cap: usize,
) -> Result<CudaTensor<D>> {
    let g = spec.geometry(x.shape())?;
    let (kk, p) = (g.kk(), g.p());
    let total = out.checked_size()?;
    let mut y = bias_buffer(OP, b, g.oc, p, total)?;
    if kk == 0 || total == 0 {
        return CudaTensor::from_buffer(out.clone(), y);
    }
    if g.direct() {
        // y[img][oc×P] += W[oc×C] · x[img][C×P], W shared by every image
        let mut prod = RowMajorGemm::packed(OP, g.n, (g.oc, p, kk), false, false);
        prod.a.stride = 0;
        prod.beta = 1.0;
        prod.run::<D>(w.mem(), x.mem(), y.mem_mut())?;
        return CudaTensor::from_buffer(out.clone(), y);
    }
    let chunks = plan(g.n, kk, p, cap);
    let mut col = workspace::<D>(&chunks, kk)?;
    for ch in &chunks {
        im2col(&g, ch, x, &mut col)?;
        // y[n0 + img][:, p0..p0+pc] += W[oc×kk] · col[img][kk×pc]
        let prod = RowMajorGemm {
            op: OP,
            batch: ch.images,
            m: g.oc,
            n: ch.pc,
            k: kk,
            trans_a: false,
            trans_b: false,
            alpha: 1.0,
            beta: 1.0,
            a: RowMajor {
                offset: 0,
                ld: kk,
                stride: 0,
            },
            b: RowMajor {
                offset: 0,
                ld: ch.pc,
                stride: kk * ch.pc,
            },
            c: RowMajor {
                offset: ch.n0 * g.oc * p + ch.p0,
                ld: p,
                stride: g.oc * p,
            },
        };
        prod.run::<D>(w.mem(), col.mem(), y.mem_mut())?;
    }
    CudaTensor::from_buffer(out.clone(), y)
}

/// One buffer for the largest chunk's patch matrix.
fn workspace<D: Device>(chunks: &[Chunk], kk: usize) -> Result<Buffer<D>> {
    let largest = chunks.iter().map(|c| c.elements(kk)).max().unwrap_or(0);
    Buffer::uninit(largest)
}

/// Builds chunk `ch`'s patch matrix into `col`.
fn im2col<D: Device>(g: &Geo, ch: &Chunk, x: &CudaTensor<D>, col: &mut Buffer<D>) -> Result<()> {
    let n = ch.elements(g.kk());
    let i = |what, v| index(OP, what, v);
    // tl_conv_im2col(float* col, const float* x, long long c, long long h, long long w,
    //                long long kh, long long kw, long long s, long long pad, long long wo,
    //                long long n0, long long p0, long long pc, long long n)
    launch_into(
        PRODUCTS.kernel("tl_conv_im2col"),
        Launch::for_items(n),
        [col],
        [
            Arg::In(x.mem()),
            Arg::Index(i("C", g.c)?),
            Arg::Index(i("H", g.h)?),
            Arg::Index(i("W", g.w)?),
            Arg::Index(i("kH", g.kh)?),
            Arg::Index(i("kW", g.kw)?),
            Arg::Index(i("stride", g.s)?),
            Arg::Index(i("padding", g.pad)?),
            Arg::Index(i("Wo", g.wo)?),
            Arg::Index(i("image", ch.n0)?),
            Arg::Index(i("position", ch.p0)?),
            Arg::Index(i("positions", ch.pc)?),
            Arg::Index(i("patch elements", n)?),
        ],
    )
}

/// Adds chunk `ch`'s patch-matrix gradient `dcol` onto `dx` (the gather adjoint of
/// [`im2col`]).
fn col2im<D: Device>(g: &Geo, ch: &Chunk, dcol: &Buffer<D>, dx: &mut Buffer<D>) -> Result<()> {
    let n = ch.images * g.c * g.h * g.w;
    let i = |what, v| index(OP, what, v);
    // tl_conv_col2im(float* dx, const float* dcol, long long c, long long h, long long w,
    //                long long kh, long long kw, long long s, long long pad, long long ho,
    //                long long wo, long long n0, long long p0, long long pc, long long n)
    launch_into(
        PRODUCTS.kernel("tl_conv_col2im"),
        Launch::for_items(n),
        [dx],
        [
            Arg::In(dcol.mem()),
            Arg::Index(i("C", g.c)?),
            Arg::Index(i("H", g.h)?),
            Arg::Index(i("W", g.w)?),
            Arg::Index(i("kH", g.kh)?),
            Arg::Index(i("kW", g.kw)?),
            Arg::Index(i("stride", g.s)?),
            Arg::Index(i("padding", g.pad)?),
            Arg::Index(i("Ho", g.ho)?),
            Arg::Index(i("Wo", g.wo)?),
            Arg::Index(i("image", ch.n0)?),
            Arg::Index(i("position", ch.p0)?),
            Arg::Index(i("positions", ch.pc)?),
            Arg::Index(i("input elements", n)?),
        ],
    )
}

/// `db[o] = Σ_images Σ_positions dy[img, o, ·]`: row sums over each `(image, channel)` plane,
/// then column sums over the images (both fixed-order, in double).
fn bias_grad<D: Device>(g: &Geo, dy: &CudaTensor<D>) -> Result<CudaTensor<D>> {
    let rows = g.n * g.oc;
    let mut planes = Buffer::<D>::uninit(rows)?;
    // tl_prod_row_sums(float* y, const float* x, long long rows, long long len)
    launch_into(
        PRODUCTS.kernel("tl_prod_row_sums"),
        Launch::for_items(rows),
        [&mut planes],
        [
            Arg::In(dy.mem()),
            Arg::Index(index(OP, "planes", rows)?),
            Arg::Index(index(OP, "plane", g.p())?),
        ],
    )?;
    column_sums(OP, planes.mem(), g.n, g.oc)
}

/// `(dx, dW, db)`.
pub fn conv2d_vjp<D: Device>(
    spec: &Conv2dSpec,
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>, CudaTensor<D>)> {
    let mut dx = Buffer::<D>::zeros(x.len())?;
    let (dw, db) = vjp_into(spec, x, w, dy, Some(&mut dx), PATCH_CAP)?;
    Ok((CudaTensor::from_buffer(x.shape().clone(), dx)?, dw, db))
}

/// [`conv2d_vjp`] where `dx` is computed only if `need_dx`.
#[allow(clippy::type_complexity)]
pub fn conv2d_vjp_for<D: Device>(
    spec: &Conv2dSpec,
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    need_dx: bool,
) -> Result<(Option<CudaTensor<D>>, CudaTensor<D>, CudaTensor<D>)> {
    conv2d_vjp_capped(spec, x, w, dy, need_dx, PATCH_CAP)
}

/// [`conv2d_vjp_for`] with patch chunks of about `cap` elements (tests use small caps).
#[allow(clippy::type_complexity)]
pub(crate) fn conv2d_vjp_capped<D: Device>(
    spec: &Conv2dSpec,
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    need_dx: bool,
    cap: usize,
) -> Result<(Option<CudaTensor<D>>, CudaTensor<D>, CudaTensor<D>)> {
    let mut dx = if need_dx {
        Some(Buffer::<D>::zeros(x.len())?)
    } else {
        None
    };
    let (dw, db) = vjp_into(spec, x, w, dy, dx.as_mut(), cap)?;
    let dx = dx
        .map(|buf| CudaTensor::from_buffer(x.shape().clone(), buf))
        .transpose()?;
    Ok((dx, dw, db))
}

/// `(dW, db)`, adding `dx` onto the zeros in `dx` when given.
fn vjp_into<D: Device>(
    spec: &Conv2dSpec,
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    dx: Option<&mut Buffer<D>>,
    cap: usize,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    let g = spec.geometry(x.shape())?;
    let db = bias_grad(&g, dy)?;
    // an empty contraction (no channel out) leaves dx zero; no tap or no image leaves dW zero
    let dx = dx.filter(|_| g.oc > 0);
    let dw = if g.kk() == 0 || g.n == 0 {
        Buffer::<D>::zeros(w.len())?
    } else if g.direct() {
        direct_vjp(&g, x, w, dy, dx, cap)?
    } else {
        patch_vjp(&g, x, w, dy, dx, cap)?
    };
    Ok((CudaTensor::from_buffer(w.shape().clone(), dw)?, db))
}

/// The weight gradient's accumulator: `dW` and a workspace for per-image partial products.
///
/// `dW += Σ_img dy[img][:, p0..p0+pc] · col[img]ᵀ` for the images of each chunk, in order: the
/// images of a chunk go in groups of at most `group` (so the partials stay within the patch
/// cap), each group one batched product into `partial` (`oc × kk` per image) and one
/// fixed-order sum over the group's images added onto `dW`; a group of one image is a single
/// accumulating product.
struct WeightGrad<D: Device> {
    dw: Buffer<D>,
    partial: Option<Buffer<D>>,
    group: usize,
}

impl<D: Device> WeightGrad<D> {
    /// Zeros for `dW`, and a partial workspace if some chunk has several images.
    fn new(g: &Geo, most_images: usize, cap: usize) -> Result<Self> {
        let per_image = g.oc * g.kk();
        let group = (cap / per_image.max(1)).clamp(1, most_images.max(1));
        let partial = if group > 1 {
            Some(Buffer::uninit(group * per_image)?)
        } else {
            None
        };
        Ok(WeightGrad {
            dw: Buffer::zeros(per_image)?,
            partial,
            group,
        })
    }

    /// Adds chunk `ch`'s contribution (`col` holds its patch matrices, `kk × pc` per image).
    fn add(&mut self, g: &Geo, ch: &Chunk, dy: &CudaTensor<D>, col: &D::Mem) -> Result<()> {
        let (kk, p) = (g.kk(), g.p());
        for first in (0..ch.images).step_by(self.group) {
            let images = self.group.min(ch.images - first);
            // dy[n0 + first + i][:, p0..p0+pc] · (col[first + i][kk×pc])ᵀ for i < images
            let mut prod = RowMajorGemm {
                op: OP,
                batch: images,
                m: g.oc,
                n: kk,
                k: ch.pc,
                trans_a: false,
                trans_b: true,
                alpha: 1.0,
                beta: 0.0,
                a: RowMajor {
                    offset: (ch.n0 + first) * g.oc * p + ch.p0,
                    ld: p,
                    stride: g.oc * p,
                },
                b: RowMajor {
                    offset: first * kk * ch.pc,
                    ld: ch.pc,
                    stride: kk * ch.pc,
                },
                c: RowMajor {
                    offset: 0,
                    ld: kk,
                    stride: g.oc * kk,
                },
            };
            match self.partial.as_mut().filter(|_| images > 1) {
                Some(partial) => {
                    prod.run::<D>(dy.mem(), col, partial.mem_mut())?;
                    add_column_sums::<D>(self.dw.mem_mut(), partial.mem(), images, g.oc * kk)?;
                }
                None => {
                    prod.beta = 1.0;
                    prod.run::<D>(dy.mem(), col, self.dw.mem_mut())?;
                }
            }
        }
        Ok(())
    }
}

/// `y[j] += Σ_{r < rows} x[r·cols + j]` for `j < cols` (rows in order, in double).
fn add_column_sums<D: Device>(y: &mut D::Mem, x: &D::Mem, rows: usize, cols: usize) -> Result<()> {
    // tl_prod_add_col_sums(float* y, const float* x, long long rows, long long cols)
    D::launch(
        PRODUCTS.kernel("tl_prod_add_col_sums"),
        Launch::for_items(cols),
        &mut [
            Arg::Out(y),
            Arg::In(x),
            Arg::Index(index(OP, "images", rows)?),
            Arg::Index(index(OP, "weight elements", cols)?),
        ],
    )
}

/// `dcol[img] = Wᵀ[kk×oc] · dy[n0 + img][:, p0..p0+pc]` for the images of a chunk (one batched
/// product, `W` shared), into `dcol` (`kk × pc` per image, from `offset`, rows `ld` apart).
fn patch_grad<D: Device>(
    g: &Geo,
    ch: &Chunk,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    dcol: &mut D::Mem,
    c: RowMajor,
) -> Result<()> {
    let (kk, p) = (g.kk(), g.p());
    let prod = RowMajorGemm {
        op: OP,
        batch: ch.images,
        m: kk,
        n: ch.pc,
        k: g.oc,
        trans_a: true,
        trans_b: false,
        alpha: 1.0,
        beta: 0.0,
        a: RowMajor {
            offset: 0,
            ld: kk,
            stride: 0,
        },
        b: RowMajor {
            offset: ch.n0 * g.oc * p + ch.p0,
            ld: p,
            stride: g.oc * p,
        },
        c,
    };
    prod.run::<D>(w.mem(), dy.mem(), dcol)
}

/// The VJP of a direct (1×1) convolution: the image is its patch matrix, `dx` its gradient.
fn direct_vjp<D: Device>(
    g: &Geo,
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    dx: Option<&mut Buffer<D>>,
    cap: usize,
) -> Result<Buffer<D>> {
    let (kk, p) = (g.kk(), g.p());
    let all = Chunk {
        n0: 0,
        images: g.n,
        p0: 0,
        pc: p,
    };
    let mut dw = WeightGrad::new(g, g.n, cap)?;
    dw.add(g, &all, dy, x.mem())?;
    if let Some(dx) = dx {
        let c = RowMajor {
            offset: 0,
            ld: p,
            stride: kk * p,
        };
        patch_grad(g, &all, w, dy, dx.mem_mut(), c)?;
    }
    Ok(dw.dw)
}

/// The VJP through patch matrices, chunk by chunk (see [`plan`]).
fn patch_vjp<D: Device>(
    g: &Geo,
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    mut dx: Option<&mut Buffer<D>>,
    cap: usize,
) -> Result<Buffer<D>> {
    let kk = g.kk();
    let chunks = plan(g.n, kk, g.p(), cap);
    let most_images = chunks.iter().map(|c| c.images).max().unwrap_or(0);
    let mut dw = WeightGrad::new(g, most_images, cap)?;
    let mut col = workspace::<D>(&chunks, kk)?;
    let mut dcol = match dx {
        Some(_) => Some(workspace::<D>(&chunks, kk)?),
        None => None,
    };
    for ch in &chunks {
        im2col(g, ch, x, &mut col)?;
        dw.add(g, ch, dy, col.mem())?;
        if let (Some(dx), Some(dcol)) = (dx.as_deref_mut(), dcol.as_mut()) {
            let c = RowMajor {
                offset: 0,
                ld: ch.pc,
                stride: kk * ch.pc,
            };
            patch_grad(g, ch, w, dy, dcol.mem_mut(), c)?;
            col2im(g, ch, dcol, dx)?;
        }
    }
    Ok(dw.dw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emu::{emulation_ready, Emu};
    use torchlean_runtime::Kernels;
    use torchlean_spec::{ConvPool, Tensor};

    fn values(shape: &[usize], salt: u64) -> Tensor<f64> {
        let mut s = salt;
        Tensor::from_fn(Shape::new(shape.to_vec()), |_| {
            s = torchlean_spec::ops::splitmix64(s);
            f64::from(((s >> 40) as f32) / (1u64 << 23) as f32 - 1.0)
        })
        .unwrap()
    }

    fn max_rel(got: &CudaTensor<Emu>, want: &Tensor<f64>) -> f64 {
        let got = got.to_f64().unwrap();
        assert_eq!(got.shape(), want.shape());
        let scale = want.data().iter().fold(1.0f64, |m, v| m.max(v.abs()));
        got.data()
            .iter()
            .zip(want.data())
            .map(|(g, w)| (g - w).abs() / scale)
            .fold(0.0, f64::max)
    }

    /// Chunked patch matrices (groups of images, column ranges of one image) give the
    /// reference's results: every chunk lands in its place of `y`, `dW` sums every chunk, `dx`
    /// gathers every chunk's taps.
    #[test]
    fn chunked_patches_match_the_reference() {
        emulation_ready().unwrap();
        let spec = Conv2dSpec::ungrouped(2, 3, (3, 2), 1, 1);
        // kk = 12, P = 25·24 = 600 per image: caps of one image group (two images), whole
        // images one by one, and column ranges (600 positions over a cap of 12·260)
        let x = values(&[3, 2, 25, 23], 1);
        let w = values(&[3, 2, 3, 2], 2);
        let b = values(&[3], 3);
        let out = Shape::from([3, 3, 25, 24]);
        let want = <Tensor<f64> as ConvPool>::conv2d(&spec, &x, &w, &b, &out).unwrap();
        let dy = values(out.dims(), 4);
        let (dx, dw, db) = <Tensor<f64> as ConvPool>::conv2d_vjp(&spec, &x, &w, &dy).unwrap();
        let e = |t: &Tensor<f64>| CudaTensor::<Emu>::from_f64(t).unwrap();
        for (cap, chunks) in [(2 * 12 * 600, 2), (12 * 600, 3), (12 * 260, 6)] {
            assert_eq!(plan(3, 12, 600, cap).len(), chunks, "cap {cap}");
            let y = conv2d_capped(&spec, &e(&x), &e(&w), &e(&b), &out, cap).unwrap();
            assert!(max_rel(&y, &want) < 1e-6, "y, cap {cap}");
            let (gx, gw, gb) =
                conv2d_vjp_capped(&spec, &e(&x), &e(&w), &e(&dy), true, cap).unwrap();
            assert!(max_rel(&gx.unwrap(), &dx) < 1e-6, "dx, cap {cap}");
            assert!(max_rel(&gw, &dw) < 1e-6, "dW, cap {cap}");
            assert!(max_rel(&gb, &db) < 1e-6, "db, cap {cap}");
        }
    }

    fn covered(n: usize, p: usize, chunks: &[Chunk]) -> Vec<u32> {
        let mut seen = vec![0u32; n * p];
        for ch in chunks {
            for img in ch.n0..ch.n0 + ch.images {
                for q in ch.p0..ch.p0 + ch.pc {
                    seen[img * p + q] += 1;
                }
            }
        }
        seen
    }

    /// Chunks of several images whose partial weight gradients need several groups (`P <
    /// outC`: one image's `oc·kk` partial is larger than its patch matrix), and the direct
    /// path's groups.
    #[test]
    fn grouped_weight_gradients_match_the_reference() {
        emulation_ready().unwrap();
        let e = |t: &Tensor<f64>| CudaTensor::<Emu>::from_f64(t).unwrap();
        // 3×3 padding 1 on 3×3 images: kk = 18, P = 9, oc = 16 (partials of 288 per image);
        // a cap of 1000 holds 6 images' patches but only 3 images' partials. 1×1 direct:
        // kk = 2, oc = 16, partials of 32 per image, a cap of 100 groups 3 of the 5 images.
        for (k, pad, cap) in [(3, 1, 1000), (1, 0, 100)] {
            let spec = Conv2dSpec::ungrouped(2, 16, (k, k), 1, pad);
            let g = spec.geometry(&Shape::from([5, 2, 3, 3])).unwrap();
            let wg = WeightGrad::<Emu>::new(&g, 5, cap).unwrap();
            assert_eq!(wg.group, 3, "k {k}");
            let x = values(&[5, 2, 3, 3], 5);
            let w = values(&[16, 2, k, k], 6);
            let dy = values(&[5, 16, 3, 3], 7);
            let (dx, dw, db) = <Tensor<f64> as ConvPool>::conv2d_vjp(&spec, &x, &w, &dy).unwrap();
            let (gx, gw, gb) =
                conv2d_vjp_capped(&spec, &e(&x), &e(&w), &e(&dy), true, cap).unwrap();
            assert!(max_rel(&gx.unwrap(), &dx) < 1e-6, "dx, k {k}");
            assert!(max_rel(&gw, &dw) < 1e-6, "dW, k {k}");
            assert!(max_rel(&gb, &db) < 1e-6, "db, k {k}");
        }
    }

    #[test]
    fn the_plan_covers_every_image_and_position_once_in_order() {
        for (n, kk, p, cap) in [
            (5, 9, 16, 1 << 20),
            (5, 9, 16, 300),
            (7, 9, 16, 144),
            (3, 10, 2000, 2600),
            (2, 1, 5000, 1),
            (0, 9, 16, 100),
        ] {
            let chunks = plan(n, kk, p, cap);
            assert!(
                covered(n, p, &chunks).iter().all(|&c| c == 1),
                "{n} {kk} {p} {cap}"
            );
            for pair in chunks.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                assert!((a.n0, a.p0) < (b.n0, b.p0), "{chunks:?}");
            }
        }
    }

    #[test]
    fn whole_images_are_grouped_under_the_cap_and_split_over_it() {
        // 9·16 = 144 per image: 2 per chunk under a cap of 300, 7 images in 4 chunks
        let chunks = plan(7, 9, 16, 300);
        assert_eq!(chunks.len(), 4);
        assert!(chunks.iter().all(|c| c.pc == 16 && c.elements(9) <= 300));
        assert_eq!(chunks[3].images, 1);
        // an image of 10·2000 over a cap of 2600: column ranges of at least 257
        let chunks = plan(3, 10, 2000, 2600);
        assert!(chunks.iter().all(|c| c.images == 1 && c.pc >= 257));
        assert!(chunks.len() > 3);
        // a patch matrix whose size overflows usize still plans (by columns)
        let huge = plan(1, usize::MAX / 2, 4, PATCH_CAP);
        assert!(huge.iter().all(|c| c.images == 1));
    }
}
