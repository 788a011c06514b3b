//! Matrix products through the `gemm` crate: `matmul` (2-D and batched) and `linear`, forward
//! and VJP. Transposed operands are passed as strides, never copied.
//!
//! `gemm` computes `dst := α·dst + β·lhs·rhs` (α scales the existing destination and is read
//! only when `read_dst`; β scales the product — swapped with respect to BLAS). Its kernels are
//! chosen at run time (AVX-512 with the `x86-v4` feature, else AVX2/FMA, else SSE), so the fast
//! path is in the default build. A product runs on the current rayon pool
//! (`Parallelism::Rayon(n)`) when it is large enough, else single-threaded; `gemm` splits the
//! output, never the contracted dimension, so each element's sum is formed in the same order
//! for any thread count.

use crate::error::CpuError;
use crate::scalar::CpuScalar;
use crate::tensor::CpuTensor;
use crate::threads::should_par;
use gemm::Parallelism;
use rayon::prelude::*;
use torchlean_spec::ops::{desc, linear_dims, matmul_dims};
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
}

/// Multiply-adds below which a product stays on one thread. `gemm`'s rayon split costs tens of
/// microseconds of wake-ups and synchronisation per product (measured on the 2-core Xeon: the
/// 64-row MLP training step took 1.1 ms with products from 2^18 multiply-adds split, 0.73 ms
/// with none of its products — at most 12.8M multiply-adds — split); a product this large
/// (16M multiply-adds, about 0.1 ms on one core) amortises it.
const GEMM_PAR_MIN: usize = 1 << 24;

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
pub(crate) fn gemm<T: CpuScalar>(
    op: &'static str,
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    accumulate: bool,
    lhs: Mat<'_, T>,
    rhs: Mat<'_, T>,
    par: Parallelism,
) -> Result<(), CpuError> {
    if m.checked_mul(n) != Some(dst.len()) {
        return Err(CpuError::Gemm {
            op,
            reason: format!(
                "destination of {} elements for a {m}×{n} product",
                dst.len()
            ),
        });
    }
    gemm_rows(op, m, n, k, dst, n, accumulate, lhs, rhs, par)
}

/// [`gemm`] into an `m × n` block of a row-major matrix whose rows are `dst_rs` apart (`dst`
/// starts at the block's first element): a range of columns, as the convolution's chunks
/// write.
#[allow(unsafe_code, clippy::too_many_arguments)]
pub(crate) fn gemm_rows<T: CpuScalar>(
    op: &'static str,
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    dst_rs: usize,
    accumulate: bool,
    lhs: Mat<'_, T>,
    rhs: Mat<'_, T>,
    par: Parallelism,
) -> Result<(), CpuError> {
    let err = |reason: String| CpuError::Gemm { op, reason };
    let last = m
        .checked_sub(1)
        .and_then(|r| r.checked_mul(dst_rs))
        .and_then(|r| r.checked_add(n));
    if dst_rs < n || (m > 0 && !matches!(last, Some(l) if l <= dst.len())) {
        return Err(err(format!(
            "destination of {} elements (row stride {dst_rs}) for a {m}×{n} product",
            dst.len()
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * dst_rs..r * dst_rs + n].fill(T::ZERO);
            }
        }
        return Ok(());
    }
    if !fits(&lhs, m, k) || !fits(&rhs, k, n) {
        return Err(err(format!(
            "operands {m}×{k} (strides {}, {}; {} elements) · {k}×{n} (strides {}, {}; {} \
             elements) do not fit their buffers",
            lhs.rs,
            lhs.cs,
            lhs.data.len(),
            rhs.rs,
            rhs.cs,
            rhs.data.len()
        )));
    }
    let rs_isize = isize::try_from(dst_rs).map_err(|_| err(format!("row stride {dst_rs}")))?;
    // SAFETY: `gemm::gemm` reads `lhs` at `i·lhs_rs + l·lhs_cs` for `i < m`, `l < k`, reads
    // `rhs` at `l·rhs_rs + j·rhs_cs` for `l < k`, `j < n`, and reads/writes `dst` at
    // `i·dst_rs + j`. Above we checked `(m−1)·dst_rs + n ≤ dst.len()` without overflow (so the
    // largest dst offset, `(m−1)·dst_rs + n−1`, is inside `dst`), and `fits` checked that the
    // largest offset of each operand is inside its slice and that every stride fits `isize`.
    // All strides are non-negative. `dst` is a `&mut` slice, so it cannot overlap `lhs` or
    // `rhs` (shared borrows), and distinct `(i, j)` map to distinct dst elements (column
    // stride 1, row stride `dst_rs ≥ n`). `T` is `f32` or `f64` (sealed `CpuScalar`), the
    // types `gemm` dispatches on.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            rs_isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
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
    Ok(())
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
    if outf > 0 {
        for row in y.chunks_exact_mut(outf) {
            row.copy_from_slice(bias);
        }
    }
    gemm(
        desc::LINEAR.name,
        rows,
        outf,
        inp,
        y,
        true,
        Mat::rows(x.as_slice(), inp),
        Mat::transposed(w.as_slice(), inp),
        gemm_par(rows, outf, inp),
    )?;
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
    let dx = if need_dx {
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
        assert!(matches!(run(&mut [0.0; 6], 2), Err(CpuError::Gemm { .. })));
        assert!(matches!(run(&mut [0.0; 5], 3), Err(CpuError::Gemm { .. })));
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
        assert!(e.to_string().contains("do not fit"), "{e}");
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
        assert!(e.to_string().contains("destination"), "{e}");
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
