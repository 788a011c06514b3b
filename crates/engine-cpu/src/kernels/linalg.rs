//! Matrix products through the `gemm` crate: `matmul` (2-D and batched) and `linear`, forward
//! and VJP. Transposed operands are passed as strides, never copied.
//!
//! `gemm` computes `dst := α·dst + β·lhs·rhs` (α scales the existing destination and is read
//! only when `read_dst`; β scales the product — swapped with respect to BLAS). Its kernels are
//! chosen at run time (AVX-512 with the `x86-v4` feature, else AVX2/FMA, else SSE), so the fast
//! path is in the default build. A product runs on the current rayon pool
//! when it is large enough, else single-threaded: cut into blocks of output rows or columns,
//! one per thread (`split_for_threads`: `gemm`'s own split leaves short, wide products on one
//! core), or split by `gemm` (`Parallelism::Rayon(n)`). Neither splits the contracted
//! dimension, and the blocks stay on `gemm`'s general path, whose sum order depends on `k`
//! alone, so each element's sum is formed in the same order for any thread count.

use super::layout::gather_tiled;
use super::linear_narrow;
use crate::error::{CpuError, GemmMisfit};
use crate::scalar::CpuScalar;
use crate::tensor::CpuTensor;
use crate::threads::should_par;
use gemm::Parallelism;
use rayon::prelude::*;
use torchlean_spec::ops::{
    desc, linear_dims, linear_is_narrow, linear_transposes_output, matmul_dims,
};
use torchlean_spec::Shape;

/// The cotangents of an `(input, weight, bias)` op.
pub(crate) type Grads3<T> = (CpuTensor<T>, CpuTensor<T>, CpuTensor<T>);

/// A read-only strided matrix operand: element `(i, j)` is `data[i·rs + j·cs]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mat<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T> Mat<'a, T> {
    /// Row-major, `cols` columns.
    pub fn rows(data: &'a [T], cols: usize) -> Self {
        Mat {
            data,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of a row-major matrix with `cols` columns.
    pub fn transposed(data: &'a [T], cols: usize) -> Self {
        Mat {
            data,
            rs: 1,
            cs: cols,
        }
    }

    /// The block that starts at row `r`, column `c` (the same strides). Panics where that
    /// element lies past the data, as slicing does.
    pub fn at(&self, r: usize, c: usize) -> Self {
        Mat {
            data: &self.data[r * self.rs + c * self.cs..],
            rs: self.rs,
            cs: self.cs,
        }
    }
}

/// What a product's destination starts from: `dst = start + lhs·rhs`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Start<'a, T> {
    /// Zero: the destination's old values are not read.
    Zero,
    /// The destination's values.
    Dst,
    /// The same `n` values in every row (a bias), written by the thread that computes the row
    /// just before its product, so a split product's halves each stay in their own core's
    /// caches. Written over the whole output first, by one thread, then read by two, it made
    /// GPT's widest `linear` (768 × 128 → 512) take 688–703 µs at two threads against 560–566
    /// (2-vCPU AMD EPYC, 2026-12-07), where one thread takes 1,080–1,095.
    Rows(&'a [T]),
}

/// `true` is [`Start::Dst`] (accumulate), `false` [`Start::Zero`].
impl<T> From<bool> for Start<'_, T> {
    fn from(accumulate: bool) -> Self {
        if accumulate {
            Start::Dst
        } else {
            Start::Zero
        }
    }
}

/// Multiply-adds below which a product stays on one thread: a split costs a wake-up and
/// synchronisation per product (tens of microseconds) and packs the shared operand once per
/// half. At 2^24 (the earlier value, set on a 2-core Xeon where splitting the 64-row MLP's
/// products made its step slower) GPT's attention projection (768 × 128 × 128, 12.6M) stayed
/// on one core; at 2^22, on the 2-vCPU AMD EPYC of 2026-12-07, `gpt_train_step` took 39.5
/// against 41.8 ms at two threads, `conv_train` 3.54 against 3.76 and `mlp_train_b512` 4.45
/// against 4.61 (medians, two rounds alternating), `mlp_train_b64` 0.98–1.00 against 0.97.
/// At 2^21, once a pool's threads stayed awake between splits (`threads::Warmth`), on the
/// 2-vCPU AMD EPYC Zen 4: `conv_train` 1.34–1.40 against 1.40–1.43 ms at two threads (its
/// classifier's products, 2.9M each, split), `gpt_train_step` 27.7–27.9 against 27.9–28.3,
/// `mlp_train_b64` the same (rounds alternating, three and two; 2^20 gained nothing more).
const GEMM_PAR_MIN: usize = 1 << 21;

/// The parallelism for an `m × n × k` product issued from the top level (not from inside a
/// parallel loop).
pub(crate) fn gemm_par(m: usize, n: usize, k: usize) -> Parallelism {
    par_for_work(m.saturating_mul(n).saturating_mul(k))
}

/// The parallelism for a product of `work` multiply-adds issued from the top level.
pub(crate) fn par_for_work(work: usize) -> Parallelism {
    if work >= GEMM_PAR_MIN && should_par(work) {
        Parallelism::Rayon(rayon::current_num_threads())
    } else {
        Parallelism::None
    }
}

/// Whether `m × k` operand `a` stays inside its buffer: `(m−1)·rs + (k−1)·cs < len`.
fn fits<T>(a: &Mat<'_, T>, rows: usize, cols: usize) -> bool {
    let last = (rows - 1)
        .checked_mul(a.rs)
        .and_then(|r| (cols - 1).checked_mul(a.cs).and_then(|c| r.checked_add(c)));
    matches!(last, Some(l) if l < a.data.len())
        && isize::try_from(a.rs).is_ok()
        && isize::try_from(a.cs).is_ok()
}

/// `dst = (accumulate ? dst : 0) + lhs · rhs`, with `dst` row-major and contiguous, `m × n`,
/// `lhs` `m × k`, `rhs` `k × n`.
///
/// Every extent and stride is checked against the buffers first, so a wrong call is an error,
/// never an out-of-bounds access.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<'s, T: CpuScalar>(
    op: &'static str,
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    start: impl Into<Start<'s, T>>,
    lhs: Mat<'_, T>,
    rhs: Mat<'_, T>,
    par: Parallelism,
) -> Result<(), CpuError> {
    if m.checked_mul(n) != Some(dst.len()) {
        let misfit = GemmMisfit::Destination {
            len: dst.len(),
            row_stride: n,
        };
        return Err(CpuError::Gemm {
            op,
            m,
            n,
            k,
            misfit,
        });
    }
    gemm_rows(op, m, n, k, dst, n, start, lhs, rhs, par)
}

/// [`gemm`] into an `m × n` block of a row-major matrix whose rows are `dst_rs` apart (`dst`
/// starts at the block's first element): a range of columns, as the convolution's chunks
/// write.
#[allow(unsafe_code, clippy::too_many_arguments)]
pub(crate) fn gemm_rows<'s, T: CpuScalar>(
    op: &'static str,
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    dst_rs: usize,
    start: impl Into<Start<'s, T>>,
    lhs: Mat<'_, T>,
    rhs: Mat<'_, T>,
    par: Parallelism,
) -> Result<(), CpuError> {
    let start = start.into();
    let err = |misfit| CpuError::Gemm {
        op,
        m,
        n,
        k,
        misfit,
    };
    if let Start::Rows(row) = start {
        if row.len() != n {
            return Err(err(GemmMisfit::StartRow { len: row.len() }));
        }
    }
    let last = m
        .checked_sub(1)
        .and_then(|r| r.checked_mul(dst_rs))
        .and_then(|r| r.checked_add(n));
    let short_destination = GemmMisfit::Destination {
        len: dst.len(),
        row_stride: dst_rs,
    };
    if dst_rs < n || (m > 0 && !matches!(last, Some(l) if l <= dst.len())) {
        return Err(err(short_destination));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        for r in 0..m {
            let row = &mut dst[r * dst_rs..r * dst_rs + n];
            match start {
                Start::Zero => row.fill(T::ZERO),
                Start::Dst => {}
                Start::Rows(v) => row.copy_from_slice(v),
            }
        }
        return Ok(());
    }
    for (name, a, rows, cols) in [("left operand", &lhs, m, k), ("right operand", &rhs, k, n)] {
        if !fits(a, rows, cols) {
            return Err(err(GemmMisfit::Operand {
                name,
                rows,
                cols,
                rs: a.rs,
                cs: a.cs,
                len: a.data.len(),
            }));
        }
    }
    let rs_isize = isize::try_from(dst_rs).map_err(|_| err(short_destination))?;
    let whole = Block {
        rows: 0..m,
        cols: 0..n,
    };
    let parts = match par {
        Parallelism::Rayon(t) => split_for_threads(m, n, k, t),
        Parallelism::None => None,
    };
    let Some(parts) = parts else {
        // SAFETY: see `run_block`; `whole` is the checked `m × n` block itself.
        unsafe { run_block(&whole, k, dst.as_mut_ptr(), rs_isize, start, lhs, rhs, par) };
        return Ok(());
    };
    let shared = SharedDst(dst.as_mut_ptr());
    parts.into_par_iter().for_each(|b| {
        let d = &shared;
        // SAFETY: see `run_block`. Each block lies inside the checked `m × n` block, and the
        // blocks of one split are disjoint (`split_for_threads` cuts one extent into
        // non-overlapping ranges), so no two threads write one element; `dst`'s `&mut`
        // borrow is held until every block is done (`for_each` returns after all of them).
        unsafe { run_block(&b, k, d.0, rs_isize, start, lhs, rhs, Parallelism::None) }
    });
    Ok(())
}

/// A block of the product's output: rows `rows` and columns `cols` of the `m × n` result.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Block {
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
}

/// The destination's pointer, shared by the threads writing disjoint blocks of it.
struct SharedDst<T>(*mut T);

// SAFETY: the pointer is only written through in disjoint blocks (`gemm_rows`' split), while
// the `&mut` slice it came from is borrowed; `T` is `f32` or `f64`.
#[allow(unsafe_code)]
unsafe impl<T: Send> Sync for SharedDst<T> {}

/// Whether `gemm` computes an `m × n × k` product on its general path, whose per-element sum
/// order depends on `k` alone: not its gemv (`m` or `n` at most 1), outer-product (`k ≤ 2`),
/// tiny (`m·n ≤ 256`) or small (`m, n ≤ 64`: another `kc`) paths. Blocks of a product on
/// this path, each on it too, give exactly the whole product's bits.
fn on_general_path(m: usize, n: usize, k: usize) -> bool {
    k > 2 && m > 1 && n > 1 && m * n > 256 && (m > 64 || n > 64)
}

/// The blocks an `m × n × k` product on `threads` threads is cut into, or `None` to leave the
/// split to `gemm`: the longer extent of the output cut into up to `threads` near-equal
/// ranges (rows in multiples of 64, the f32 kernel's height; columns of 16), every block on
/// `gemm`'s general path as the whole is. `gemm`'s own split leaves a 64-row, 3,136-column
/// product (ResNet's first stage) on one core; this one runs it 1.8× faster on two.
fn split_for_threads(m: usize, n: usize, k: usize, threads: usize) -> Option<Vec<Block>> {
    if threads < 2 || !on_general_path(m, n, k) {
        return None;
    }
    let (extent, align) = if n >= m { (n, 16) } else { (m, 64) };
    let parts = threads.min(extent / align);
    if parts < 2 {
        return None;
    }
    let step = extent.div_ceil(parts).next_multiple_of(align);
    let blocks: Vec<Block> = (0..extent)
        .step_by(step)
        .map(|start| {
            let r = start..(start + step).min(extent);
            if n >= m {
                Block {
                    rows: 0..m,
                    cols: r,
                }
            } else {
                Block {
                    rows: r,
                    cols: 0..n,
                }
            }
        })
        .collect();
    let all_general = blocks
        .iter()
        .all(|b| on_general_path(b.rows.len(), b.cols.len(), k));
    (blocks.len() > 1 && all_general).then_some(blocks)
}

/// `gemm::gemm` on block `b` of the product whose destination starts at `dst` (rows `dst_rs`
/// apart).
///
/// # Safety
///
/// `gemm::gemm` reads `lhs` at `i·lhs_rs + l·lhs_cs` for `i` in `b.rows`, `l < k`, reads `rhs`
/// at `l·rhs_rs + j·rhs_cs` for `l < k`, `j` in `b.cols`, and reads/writes the destination at
/// `i·dst_rs + j`. The caller (`gemm_rows`) checked, for the whole `m × n` block with `b`
/// inside it, that `(m−1)·dst_rs + n` is at most the destination's length without overflow
/// (so the largest destination offset is inside it), and `fits` checked that the largest
/// offset of each operand is inside its slice and that every stride fits `isize`. All strides
/// are non-negative. The destination is a `&mut` slice (or disjoint blocks of one, each written
/// by one thread), so it cannot overlap `lhs` or `rhs` (shared borrows), and distinct `(i, j)`
/// map to distinct elements (column stride 1, row stride `dst_rs ≥ n`). `T` is `f32` or `f64`
/// (sealed `CpuScalar`), the types `gemm` dispatches on.
#[allow(unsafe_code, clippy::too_many_arguments)]
unsafe fn run_block<T: CpuScalar>(
    b: &Block,
    k: usize,
    dst: *mut T,
    dst_rs: isize,
    start: Start<'_, T>,
    lhs: Mat<'_, T>,
    rhs: Mat<'_, T>,
    par: Parallelism,
) {
    let (r0, c0) = (b.rows.start, b.cols.start);
    if let Start::Rows(v) = start {
        let v = &v[b.cols.clone()];
        for r in b.rows.clone() {
            // SAFETY: row `r`, columns `b.cols` of the destination, inside the block (see
            // above); `v` is a shared borrow, so it cannot overlap the `&mut` destination.
            unsafe {
                std::slice::from_raw_parts_mut(dst.add(r * dst_rs as usize + c0), v.len())
                    .copy_from_slice(v)
            };
        }
    }
    let accumulate = !matches!(start, Start::Zero);
    unsafe {
        gemm::gemm(
            b.rows.len(),
            b.cols.len(),
            k,
            dst.add(r0 * dst_rs as usize + c0),
            1,
            dst_rs,
            accumulate,
            lhs.data.as_ptr().add(r0 * lhs.rs),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr().add(c0 * rhs.cs),
            rhs.cs as isize,
            rhs.rs as isize,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            par,
        );
    }
}

/// Runs `batch` independent products `dst_t = f(t)`, each writing a contiguous `len` slice of
/// `dst`: one after the other with threaded products when each is large, else products in
/// parallel across the batch.
fn batched<T: CpuScalar>(
    dst: &mut [T],
    len: usize,
    batch: usize,
    work_each: usize,
    f: impl Fn(usize, &mut [T], Parallelism) -> Result<(), CpuError> + Sync + Send,
) -> Result<(), CpuError> {
    if len == 0 {
        // nothing to write; still nothing to compute
        return Ok(());
    }
    if batch > 1 && work_each < GEMM_PAR_MIN && should_par(work_each.saturating_mul(batch)) {
        dst.par_chunks_mut(len)
            .enumerate()
            .try_for_each(|(t, d)| f(t, d, Parallelism::None))
    } else {
        for (t, d) in dst.chunks_mut(len).enumerate() {
            f(t, d, par_for_work(work_each))?;
        }
        Ok(())
    }
}

pub(crate) fn matmul<T: CpuScalar>(
    a: &CpuTensor<T>,
    b: &CpuTensor<T>,
    out_shape: Shape,
) -> Result<CpuTensor<T>, CpuError> {
    let (bt, m, n, p) = matmul_dims(a.shape(), b.shape());
    let mut out = CpuTensor::uninit(out_shape);
    let (ad, bd) = (a.as_slice(), b.as_slice());
    batched(out.data_mut(), m * p, bt, m * n * p, |t, dst, par| {
        gemm(
            desc::MATMUL.name,
            m,
            p,
            n,
            dst,
            false,
            Mat::rows(&ad[t * m * n..(t + 1) * m * n], n),
            Mat::rows(&bd[t * n * p..(t + 1) * n * p], p),
            par,
        )
    })?;
    Ok(out)
}

/// `dA = dY·Bᵀ`, `dB = Aᵀ·dY`.
pub(crate) fn matmul_vjp<T: CpuScalar>(
    a: &CpuTensor<T>,
    b: &CpuTensor<T>,
    dy: &CpuTensor<T>,
) -> Result<(CpuTensor<T>, CpuTensor<T>), CpuError> {
    let (bt, m, n, p) = matmul_dims(a.shape(), b.shape());
    let (ad, bd, dd) = (a.as_slice(), b.as_slice(), dy.as_slice());
    let mut da = CpuTensor::uninit(a.shape().clone());
    batched(da.data_mut(), m * n, bt, m * n * p, |t, dst, par| {
        gemm(
            desc::MATMUL.name,
            m,
            n,
            p,
            dst,
            false,
            Mat::rows(&dd[t * m * p..(t + 1) * m * p], p),
            Mat::transposed(&bd[t * n * p..(t + 1) * n * p], p),
            par,
        )
    })?;
    let mut db = CpuTensor::uninit(b.shape().clone());
    batched(db.data_mut(), n * p, bt, m * n * p, |t, dst, par| {
        gemm(
            desc::MATMUL.name,
            n,
            p,
            m,
            dst,
            false,
            Mat::transposed(&ad[t * m * n..(t + 1) * m * n], n),
            Mat::rows(&dd[t * m * p..(t + 1) * m * p], p),
            par,
        )
    })?;
    Ok((da, db))
}

/// `y = x·Wᵀ + b` over the last axis: the bias is written first and the product accumulated
/// onto it (Wᵀ by strides).
pub(crate) fn linear<T: CpuScalar>(
    x: &CpuTensor<T>,
    w: &CpuTensor<T>,
    b: &CpuTensor<T>,
    out_shape: Shape,
) -> Result<CpuTensor<T>, CpuError> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    let mut out = CpuTensor::uninit(out_shape);
    let y = out.data_mut();
    let bias = b.as_slice();
    if linear_is_narrow(inp, outf) {
        let par = gemm_par(rows, outf, inp);
        linear_narrow::forward(x.as_slice(), w.as_slice(), bias, y, (rows, inp, outf), par);
        return Ok(out);
    }
    if linear_transposes_output(rows, inp, outf) {
        return linear_by_transposed_product(x, w, bias, (rows, inp, outf), out);
    }
    gemm(
        desc::LINEAR.name,
        rows,
        outf,
        inp,
        y,
        Start::Rows(bias),
        Mat::rows(x.as_slice(), inp),
        Mat::transposed(w.as_slice(), inp),
        gemm_par(rows, outf, inp),
    )?;
    Ok(out)
}

/// `linear` as `yᵀ = W·xᵀ` into scratch, then `y = b + (yᵀ)ᵀ` (the blocked transpose `permute`
/// uses, then the bias along the rows), where [`linear_transposes_output`] says so.
///
/// `gemm` runs along the destination's unit stride: for `y = x·Wᵀ` (row-major, `outf` wide)
/// it reads `W` across its rows, so it first packs (transposes into panels) all of `W` on
/// every call. With few rows that costs more than the product: 14.5 % of
/// `deep_backward_memory`'s samples (64 rows, `512 × 512`) against 12 % for its forward
/// products' arithmetic. For `yᵀ` the destination runs along the rows, `W` is read in place,
/// and what is packed is `x`.
fn linear_by_transposed_product<T: CpuScalar>(
    x: &CpuTensor<T>,
    w: &CpuTensor<T>,
    bias: &[T],
    (rows, inp, outf): (usize, usize, usize),
    mut out: CpuTensor<T>,
) -> Result<CpuTensor<T>, CpuError> {
    let mut yt = CpuTensor::<T>::uninit(Shape::from([outf, rows]));
    gemm(
        desc::LINEAR.name,
        outf,
        rows,
        inp,
        yt.data_mut(),
        false,
        Mat::rows(w.as_slice(), inp),
        Mat::transposed(x.as_slice(), inp),
        gemm_par(outf, rows, inp),
    )?;
    let y = out.data_mut();
    // y[i][j] = yᵀ[j][i]: source strides 1 along y's rows, `rows` along its columns
    gather_tiled(yt.as_slice(), &[rows, outf], &[1, rows], y);
    for row in y.chunks_exact_mut(outf) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v = b + *v;
        }
    }
    Ok(out)
}

/// `dx = dy·W`, `dW = dyᵀ·x`, `db = Σ_rows dy` (rows added in order, vectorised across
/// features).
pub(crate) fn linear_vjp<T: CpuScalar>(
    x: &CpuTensor<T>,
    w: &CpuTensor<T>,
    dy: &CpuTensor<T>,
) -> Result<Grads3<T>, CpuError> {
    let (dx, dw, db) = linear_vjp_for(x, w, dy, true)?;
    let dx = dx.expect("dx is computed when asked for");
    Ok((dx, dw, db))
}

/// [`linear_vjp`] computing `dx` only when `need_dx` (a first layer's input needs none: its
/// product is as large as the weight gradient's). `dW` and `db` are the same either way.
#[allow(clippy::type_complexity)]
pub(crate) fn linear_vjp_for<T: CpuScalar>(
    x: &CpuTensor<T>,
    w: &CpuTensor<T>,
    dy: &CpuTensor<T>,
    need_dx: bool,
) -> Result<(Option<CpuTensor<T>>, CpuTensor<T>, CpuTensor<T>), CpuError> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    let dd = dy.as_slice();
    let narrow = linear_is_narrow(inp, outf);
    let dx = if need_dx && narrow {
        let mut dx = CpuTensor::uninit(x.shape().clone());
        let par = gemm_par(rows, inp, outf);
        linear_narrow::input_grad(dd, w.as_slice(), dx.data_mut(), (rows, inp, outf), par);
        Some(dx)
    } else if need_dx {
        let mut dx = CpuTensor::uninit(x.shape().clone());
        gemm(
            desc::LINEAR.name,
            rows,
            inp,
            outf,
            dx.data_mut(),
            false,
            Mat::rows(dd, outf),
            Mat::rows(w.as_slice(), inp),
            gemm_par(rows, inp, outf),
        )?;
        Some(dx)
    } else {
        None
    };
    let mut dw = CpuTensor::uninit(w.shape().clone());
    if narrow {
        let par = gemm_par(outf, inp, rows);
        linear_narrow::weight_grad(x.as_slice(), dd, dw.data_mut(), (rows, inp, outf), par);
    } else {
        gemm(
            desc::LINEAR.name,
            outf,
            inp,
            rows,
            dw.data_mut(),
            false,
            Mat::transposed(dd, outf),
            Mat::rows(x.as_slice(), inp),
            gemm_par(outf, inp, rows),
        )?;
    }
    let mut db = CpuTensor::uninit(Shape::from([outf]));
    let acc = db.data_mut();
    acc.fill(T::ZERO);
    if outf > 0 {
        for row in dd.chunks_exact(outf) {
            for (a, &d) in acc.iter_mut().zip(row) {
                *a += d;
            }
        }
    }
    Ok((dx, dw, db))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::with_threads;

    #[test]
    fn a_product_is_split_along_its_longer_extent_only_onto_gemms_general_path() {
        let cols = |v: &[std::ops::Range<usize>]| -> Vec<Block> {
            v.iter()
                .map(|c| Block {
                    rows: 0..64,
                    cols: c.clone(),
                })
                .collect()
        };
        // ResNet's first stage: two column halves, aligned to 16
        assert_eq!(
            split_for_threads(64, 3136, 576, 2),
            Some(cols(&[0..1568, 1568..3136]))
        );
        // tall: rows in multiples of 64
        let rows = split_for_threads(512, 49, 4608, 2).unwrap();
        assert_eq!(
            rows.iter().map(|b| b.rows.clone()).collect::<Vec<_>>(),
            [0..256, 256..512]
        );
        // one thread, a gemv, a tiny or small product, or halves that would leave the general
        // path: left to gemm
        assert_eq!(split_for_threads(64, 3136, 576, 1), None);
        assert_eq!(split_for_threads(1000, 1, 512, 2), None);
        assert_eq!(split_for_threads(64, 64, 512, 2), None);
        assert_eq!(split_for_threads(128, 50, 10, 2), None);
        // halves of 8 × 64 and 8 × 56 would take the small path's `kc` (512 against the
        // whole's 300) and differ in the last bits
        assert_eq!(split_for_threads(8, 120, 600, 2), None);
        assert_eq!(split_for_threads(100, 3000, 2, 2), None);
    }

    /// A row-major tensor of `shape` with fixed, varied entries.
    fn varied(shape: &[usize], salt: usize) -> CpuTensor<f32> {
        let n = shape.iter().product::<usize>();
        let data = (0..n)
            .map(|i| ((i * 37 + salt) % 101) as f32 / 50.0 - 1.0)
            .collect();
        CpuTensor::from_vec(shape.to_vec(), data).unwrap()
    }

    #[test]
    fn linear_with_few_rows_is_the_transposed_product() {
        // few rows under wide weights (the transposed product), many rows (the direct one),
        // one row, and a product longer than gemm's blocks of the contracted dimension
        for (rows, inp, outf) in [
            (4, 96, 80),
            (64, 512, 512),
            (300, 40, 50),
            (1, 64, 64),
            (8, 2000, 300),
            // few outputs over long rows: the implicit kernels (`linear_narrow`)
            (8, 2000, 10),
            (33, 1024, 16),
        ] {
            let (x, w, b) = (
                varied(&[rows, inp], 5),
                varied(&[outf, inp], 6),
                varied(&[outf], 7),
            );
            let y = linear(&x, &w, &b, Shape::from([rows, outf])).unwrap();
            let (xs, ws, bs) = (x.as_slice(), w.as_slice(), b.as_slice());
            for i in 0..rows {
                for j in 0..outf {
                    let want = (0..inp).fold(bs[j] as f64, |acc, l| {
                        acc + xs[i * inp + l] as f64 * ws[j * inp + l] as f64
                    });
                    let got = y.as_slice()[i * outf + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{rows}×{inp}×{outf} at ({i}, {j}): {got} against {want}"
                    );
                }
            }
            let one = with_threads(1, || linear(&x, &w, &b, Shape::from([rows, outf])).unwrap());
            let two = with_threads(2, || linear(&x, &w, &b, Shape::from([rows, outf])).unwrap());
            assert_eq!(one.as_slice(), two.as_slice());
        }
        assert!(linear_transposes_output(64, 512, 512));
        assert!(linear_transposes_output(8, 2000, 300));
        assert!(!linear_transposes_output(300, 40, 50));
        assert!(!linear_transposes_output(1, 64, 64));
        assert!(
            !linear_transposes_output(8, 2000, 10),
            "the narrow route needs no yᵀ"
        );
        assert!(linear_is_narrow(2000, 10) && linear_is_narrow(1024, 16));
        assert!(!linear_is_narrow(2000, 17) && !linear_is_narrow(500, 10));
    }

    #[test]
    fn vjp_products_do_not_depend_on_the_thread_count() {
        // products run whole and split across threads
        for (rows, inp, outf) in [(12, 20, 9), (128, 160, 144), (64, 512, 520), (32, 9216, 10)] {
            let (x, w, dy) = (
                varied(&[rows, inp], 1),
                varied(&[outf, inp], 2),
                varied(&[rows, outf], 3),
            );
            let run = || {
                let (dx, dw, db) = linear_vjp(&x, &w, &dy).unwrap();
                let (da, db2) = matmul_vjp(&x, &varied(&[inp, outf], 4), &dy).unwrap();
                let first_layer = linear_vjp_for(&x, &w, &dy, false).unwrap();
                assert!(first_layer.0.is_none());
                assert_eq!(first_layer.1.as_slice(), dw.as_slice());
                [dx, dw, db, da, db2].map(|t| t.as_slice().to_vec())
            };
            let one = with_threads(1, run);
            for threads in [2, 3, 4] {
                assert_eq!(
                    with_threads(threads, run),
                    one,
                    "{rows}×{inp}×{outf}, {threads} threads"
                );
            }
            // and they are the products (dx = dy·W, dW = dyᵀ·x), whichever route ran them
            let f64s = |t: &CpuTensor<f32>| t.as_slice().iter().map(|&v| f64::from(v)).collect();
            let (xs, ws, dys): (Vec<f64>, Vec<f64>, Vec<f64>) = (f64s(&x), f64s(&w), f64s(&dy));
            let dyt: Vec<f64> = (0..outf * rows)
                .map(|e| dys[(e % rows) * outf + e / rows])
                .collect();
            let wants = [
                naive(&dys, &ws, rows, outf, inp),
                naive(&dyt, &xs, outf, rows, inp),
            ];
            // f32 rounding: at most a few ulps of the sum of |terms|, each at most 1
            let terms = [outf, rows];
            for (k, (what, (got, want))) in
                ["dx", "dW"].iter().zip(one.iter().zip(&wants)).enumerate()
            {
                for (e, (&g, &w)) in got.iter().zip(want).enumerate() {
                    let g = f64::from(g);
                    assert!(
                        (g - w).abs() <= 1e-6 * terms[k] as f64,
                        "{what} of {rows}×{inp}×{outf} at {e}: {g} against {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn split_products_give_the_bits_of_whole_ones() {
        // column and row splits, from zero, from the destination and from a row (each block's
        // rows written by its own thread), strided operands included
        for (m, n, k) in [(8, 200, 5), (64, 700, 600), (300, 10, 7), (257, 70, 1100)] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) / 3.0)
                .collect();
            let bias: Vec<f32> = (0..n).map(|j| (j % 11) as f32 - 5.5).collect();
            let run = |start: Start<'_, f32>, old: &(dyn Fn(usize) -> f32 + Sync), par| {
                let mut c: Vec<f32> = (0..m * n).map(old).collect();
                let (lhs, rhs) = (Mat::rows(&a, k), Mat::transposed(&b, k));
                gemm("test", m, n, k, &mut c, start, lhs, rhs, par).unwrap();
                c.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
            };
            assert!(split_for_threads(m, n, k, 2).is_some(), "{m}×{n}×{k}");
            let some = |i: usize| (i % 13) as f32;
            let biased = |i: usize| bias[i % n];
            // a row start is the bias written over the destination, then accumulated on
            let by_rows = run(Start::Dst, &biased, Parallelism::None);
            for (start, old) in [
                (Start::Zero, &some as &(dyn Fn(usize) -> f32 + Sync)),
                (Start::Dst, &some),
                (Start::Rows(&bias), &some),
            ] {
                let whole = run(start, old, Parallelism::None);
                let split = with_threads(2, || run(start, old, Parallelism::Rayon(2)));
                assert!(whole == split, "{m}×{n}×{k}, {start:?}");
                if let Start::Rows(_) = start {
                    assert!(whole == by_rows, "{m}×{n}×{k}: the row start");
                }
            }
        }
    }

    #[test]
    fn a_destination_too_small_for_the_product_is_refused_before_gemm_writes() {
        // the check stands between gemm's raw writes and the buffer (linalg.rs's SAFETY note)
        let (a, b) = ([1.0f64; 6], [1.0f64; 9]);
        let run = |dst: &mut [f64], rs: usize| {
            let (lhs, rhs) = (Mat::rows(&a, 3), Mat::rows(&b, 3));
            gemm_rows("test", 2, 3, 3, dst, rs, false, lhs, rhs, Parallelism::None)
        };
        let mut fits = [0.0; 6];
        run(&mut fits, 3).unwrap();
        assert_eq!(fits, [3.0; 6]);
        // a row stride shorter than a row, and a buffer one element short with a valid stride
        let short = |len, row_stride| {
            Err(CpuError::Gemm {
                op: "test",
                m: 2,
                n: 3,
                k: 3,
                misfit: GemmMisfit::Destination { len, row_stride },
            })
        };
        assert_eq!(run(&mut [0.0; 6], 2), short(6, 2));
        assert_eq!(run(&mut [0.0; 5], 3), short(5, 3));
        insta::assert_snapshot!(
            short(5, 3).unwrap_err().to_string(),
            @"op `test`: a 2×3 by 3×3 product: its destination of 5 elements with rows 3 apart is too short"
        );
    }

    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    c[i * n + j] += a[i * k + l] * b[l * n + j];
                }
            }
        }
        c
    }

    #[test]
    fn gemm_with_strides_matches_the_naive_product() {
        let (m, k, n) = (7, 5, 3);
        let a: Vec<f64> = (0..m * k).map(|i| i as f64 * 0.5 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| 1.0 - i as f64 * 0.25).collect();
        let want = naive(&a, &b, m, k, n);
        let mut c = vec![0.0; m * n];
        gemm(
            "t",
            m,
            n,
            k,
            &mut c,
            false,
            Mat::rows(&a, k),
            Mat::rows(&b, n),
            Parallelism::None,
        )
        .unwrap();
        assert_eq!(c, want);
        // (Bᵀ)ᵀ by strides: bt is B transposed, stored row-major
        let mut bt = vec![0.0; n * k];
        for l in 0..k {
            for j in 0..n {
                bt[j * k + l] = b[l * n + j];
            }
        }
        let mut c2 = vec![1.0; m * n];
        gemm(
            "t",
            m,
            n,
            k,
            &mut c2,
            true,
            Mat::rows(&a, k),
            Mat::transposed(&bt, k),
            Parallelism::None,
        )
        .unwrap();
        for (x, y) in c2.iter().zip(&want) {
            assert_eq!(*x, y + 1.0);
        }
    }

    #[test]
    fn gemm_rejects_operands_that_do_not_fit() {
        let a = vec![0.0f32; 5];
        let mut c = vec![0.0f32; 4];
        let e = gemm(
            "t",
            2,
            2,
            3,
            &mut c,
            false,
            Mat::rows(&a, 3),
            Mat::rows(&a, 2),
            Parallelism::None,
        )
        .unwrap_err();
        let misfit = GemmMisfit::Operand {
            name: "left operand",
            rows: 2,
            cols: 3,
            rs: 3,
            cs: 1,
            len: 5,
        };
        assert!(
            matches!(&e, CpuError::Gemm { m: 2, n: 2, k: 3, misfit: got, .. } if *got == misfit)
        );
        let e = gemm(
            "t",
            2,
            3,
            1,
            &mut c,
            false,
            Mat::rows(&a, 1),
            Mat::rows(&a, 3),
            Parallelism::None,
        )
        .unwrap_err();
        let misfit = GemmMisfit::Destination {
            len: 4,
            row_stride: 3,
        };
        assert!(matches!(&e, CpuError::Gemm { misfit: got, .. } if *got == misfit));
        // a starting row that is not one row of the destination
        let e = gemm(
            "t",
            2,
            2,
            1,
            &mut c,
            Start::Rows(&a[..3]),
            Mat::rows(&a, 1),
            Mat::rows(&a, 2),
            Parallelism::None,
        )
        .unwrap_err();
        let misfit = GemmMisfit::StartRow { len: 3 };
        assert!(matches!(&e, CpuError::Gemm { misfit: got, .. } if *got == misfit));
    }

    #[test]
    fn empty_contractions_give_zeros_and_keep_the_bias() {
        let x = CpuTensor::<f32>::zeros([3, 0]).unwrap();
        let w = CpuTensor::<f32>::zeros([2, 0]).unwrap();
        let b = CpuTensor::<f32>::from_vec([2], vec![1.5, -2.0]).unwrap();
        let y = linear(&x, &w, &b, Shape::from([3, 2])).unwrap();
        assert_eq!(y.as_slice(), &[1.5, -2.0, 1.5, -2.0, 1.5, -2.0]);
        let a = CpuTensor::<f64>::filled([4, 0], 7.0).unwrap();
        let c = CpuTensor::<f64>::filled([0, 3], 7.0).unwrap();
        let p = matmul(&a, &c, Shape::from([4, 3])).unwrap();
        assert!(p.as_slice().iter().all(|&v| v == 0.0));
    }

    #[test]
    fn gemm_results_do_not_depend_on_the_thread_count() {
        let (m, k, n) = (300, 257, 190);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 53) % 97) as f32 / 48.0 - 1.0)
            .collect();
        let run = |par: Parallelism| {
            let mut c = vec![0.0f32; m * n];
            gemm(
                "t",
                m,
                n,
                k,
                &mut c,
                false,
                Mat::rows(&a, k),
                Mat::rows(&b, n),
                par,
            )
            .unwrap();
            c
        };
        let one = run(Parallelism::None);
        let two = with_threads(2, || run(Parallelism::Rayon(2)));
        let three = with_threads(3, || run(Parallelism::Rayon(3)));
        assert!(one
            .iter()
            .zip(&two)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(one
            .iter()
            .zip(&three)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}
