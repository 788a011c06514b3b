//! The linalg family on the CUDA engine: matmul (2-D and batched), linear, their VJPs — every
//! product a cuBLAS call described row-major ([`RowMajorGemm`]); bias rows and bias-gradient
//! column sums are kernels of the products module.
//!
//! Empty contractions (`k = 0`) never reach cuBLAS: their products are zeros (or the bias).

use super::launch_into;
use crate::blas::RowMajorGemm;
use crate::buffer::Buffer;
use crate::device::{Arg, Device};
use crate::error::Result;
use crate::geometry::{index, Launch};
use crate::kernels::PRODUCTS;
use crate::tensor::CudaTensor;
use torchlean_spec::ops::{linear_dims, matmul_dims};
use torchlean_spec::Shape;

const MATMUL: &str = torchlean_spec::ops::desc::MATMUL.name;
const LINEAR: &str = torchlean_spec::ops::desc::LINEAR.name;

/// Rows per partial sum of a bias gradient: longer columns are summed in two fixed-order passes
/// (chunks of this many rows, then the chunks in order), so no thread walks a whole batch.
pub(crate) const SUM_CHUNK: usize = 256;

/// `C = op(A)·op(B)` into a fresh tensor of `shape` (`g` describes it with `beta = 0`): zeros
/// without a product when the contraction is empty.
fn product<D: Device>(
    g: &RowMajorGemm,
    a: &CudaTensor<D>,
    b: &CudaTensor<D>,
    shape: Shape,
) -> Result<CudaTensor<D>> {
    let n = shape.checked_size()?;
    if g.k == 0 {
        return CudaTensor::from_buffer(shape, Buffer::zeros(n)?);
    }
    let mut c = Buffer::<D>::uninit(n)?;
    g.run::<D>(a.mem(), b.mem(), c.mem_mut())?;
    CudaTensor::from_buffer(shape, c)
}

pub fn matmul<D: Device>(
    a: &CudaTensor<D>,
    b: &CudaTensor<D>,
    out: &Shape,
) -> Result<CudaTensor<D>> {
    let (bt, m, n, p) = matmul_dims(a.shape(), b.shape());
    // C[m×p] = A[m×n] · B[n×p] per batch
    let g = RowMajorGemm::packed(MATMUL, bt, (m, p, n), false, false);
    product(&g, a, b, out.clone())
}

/// `dA = dY·Bᵀ`, `dB = Aᵀ·dY` (per batch).
pub fn matmul_vjp<D: Device>(
    a: &CudaTensor<D>,
    b: &CudaTensor<D>,
    dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    let (bt, m, n, p) = matmul_dims(a.shape(), b.shape());
    // dA[m×n] = dY[m×p] · (B[n×p])ᵀ
    let ga = RowMajorGemm::packed(MATMUL, bt, (m, n, p), false, true);
    let da = product(&ga, dy, b, a.shape().clone())?;
    // dB[n×p] = (A[m×n])ᵀ · dY[m×p]
    let gb = RowMajorGemm::packed(MATMUL, bt, (n, p, m), true, false);
    let db = product(&gb, a, dy, b.shape().clone())?;
    Ok((da, db))
}

/// `y[r, j] = b[(r·cols + j) / inner % channels]`-style bias broadcast (see the kernel) into a
/// fresh buffer of `n` elements.
pub(crate) fn bias_buffer<D: Device>(
    op: &'static str,
    b: &CudaTensor<D>,
    channels: usize,
    inner: usize,
    n: usize,
) -> Result<Buffer<D>> {
    let mut y = Buffer::<D>::uninit(n)?;
    // tl_prod_bias(float* y, const float* b, long long channels, long long inner, long long n)
    launch_into(
        PRODUCTS.kernel("tl_prod_bias"),
        Launch::for_items(n),
        [&mut y],
        [
            Arg::In(b.mem()),
            Arg::Index(index(op, "channels", channels)?),
            Arg::Index(index(op, "inner", inner)?),
            Arg::Index(index(op, "n", n)?),
        ],
    )?;
    Ok(y)
}

/// Column sums of the row-major `rows × cols` matrix in `x`, as a `[cols]` tensor: one pass
/// when `rows ≤ SUM_CHUNK`, else partial sums over chunks of `SUM_CHUNK` rows, then the
/// partials in chunk order (both passes fixed-order, in double: deterministic).
pub(crate) fn column_sums<D: Device>(
    op: &'static str,
    x: &D::Mem,
    rows: usize,
    cols: usize,
) -> Result<CudaTensor<D>> {
    let shape = Shape::from([cols]);
    if rows <= SUM_CHUNK {
        let mut y = Buffer::<D>::uninit(cols)?;
        col_sums_launch::<D>(op, y.mem_mut(), x, rows, cols, rows.max(1), 1)?;
        return CudaTensor::from_buffer(shape, y);
    }
    let chunks = rows.div_ceil(SUM_CHUNK);
    let mut partial = Buffer::<D>::uninit(chunks * cols)?;
    col_sums_launch::<D>(op, partial.mem_mut(), x, rows, cols, SUM_CHUNK, chunks)?;
    let mut y = Buffer::<D>::uninit(cols)?;
    col_sums_launch::<D>(op, y.mem_mut(), partial.mem(), chunks, cols, chunks, 1)?;
    CudaTensor::from_buffer(shape, y)
}

/// One `tl_prod_col_sums` launch: `y` holds `chunks × cols` sums of `chunk` rows each.
fn col_sums_launch<D: Device>(
    op: &'static str,
    y: &mut D::Mem,
    x: &D::Mem,
    rows: usize,
    cols: usize,
    chunk: usize,
    chunks: usize,
) -> Result<()> {
    if cols == 0 {
        return Ok(());
    }
    // tl_prod_col_sums(float* y, const float* x, long long rows, long long cols,
    //                  long long chunk, long long chunks)
    D::launch(
        PRODUCTS.kernel("tl_prod_col_sums"),
        Launch::for_items(chunks * cols),
        &mut [
            Arg::Out(y),
            Arg::In(x),
            Arg::Index(index(op, "rows", rows)?),
            Arg::Index(index(op, "cols", cols)?),
            Arg::Index(index(op, "chunk", chunk)?),
            Arg::Index(index(op, "chunks", chunks)?),
        ],
    )
}

/// `y = x·Wᵀ + b` over the last axis: the bias rows first, then one product with `beta = 1`.
pub fn linear<D: Device>(
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    b: &CudaTensor<D>,
    out: &Shape,
) -> Result<CudaTensor<D>> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    let n = out.checked_size()?;
    let mut y = bias_buffer(LINEAR, b, outf, 1, n)?;
    if inp > 0 {
        // y[rows×out] += x[rows×in] · (W[out×in])ᵀ
        let mut g = RowMajorGemm::packed(LINEAR, 1, (rows, outf, inp), false, true);
        g.beta = 1.0;
        g.run::<D>(x.mem(), w.mem(), y.mem_mut())?;
    }
    CudaTensor::from_buffer(out.clone(), y)
}

/// `(dx, dW, db)`.
pub fn linear_vjp<D: Device>(
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>, CudaTensor<D>)> {
    let (dw, db) = linear_dw_db(x, w, dy)?;
    Ok((linear_dx(x, w, dy)?, dw, db))
}

/// `dx = dy·W` (only if `need_dx`), `dW = dyᵀ·x`, `db = Σ_rows dy`.
#[allow(clippy::type_complexity)]
pub fn linear_vjp_for<D: Device>(
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    need_dx: bool,
) -> Result<(Option<CudaTensor<D>>, CudaTensor<D>, CudaTensor<D>)> {
    let dx = if need_dx {
        Some(linear_dx(x, w, dy)?)
    } else {
        None
    };
    let (dw, db) = linear_dw_db(x, w, dy)?;
    Ok((dx, dw, db))
}

/// `dx[rows×in] = dy[rows×out] · W[out×in]`.
fn linear_dx<D: Device>(
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    let g = RowMajorGemm::packed(LINEAR, 1, (rows, inp, outf), false, false);
    product(&g, dy, w, x.shape().clone())
}

/// `dW[out×in] = (dy[rows×out])ᵀ · x[rows×in]` and `db = Σ_rows dy`.
fn linear_dw_db<D: Device>(
    x: &CudaTensor<D>,
    w: &CudaTensor<D>,
    dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    let g = RowMajorGemm::packed(LINEAR, 1, (outf, inp, rows), true, false);
    let dw = product(&g, dy, x, w.shape().clone())?;
    let db = column_sums(LINEAR, dy.mem(), rows, outf)?;
    Ok((dw, db))
}
