//! Matrix products: `matmul` (2-D and batched 3-D) and `linear` (`x Wᵀ + b` over the last
//! axis). Every dot product folds left from zero over the contracted index in order.

use super::conv::IMPLICIT_VECTOR_COLUMNS;
use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

pub(crate) fn infer_matmul(a: &Shape, b: &Shape) -> Result<Shape> {
    let err = |reason: &str| SpecError::OpShape {
        op: super::desc::MATMUL.name,
        shapes: vec![a.clone(), b.clone()],
        reason: reason.to_string(),
    };
    match (a.dims(), b.dims()) {
        ([m, n], [n2, p]) => {
            if n != n2 {
                return Err(err("inner dimensions differ"));
            }
            Ok(Shape::from([*m, *p]))
        }
        ([bt, m, n], [bt2, n2, p]) => {
            if bt != bt2 {
                return Err(err("batch dimensions differ"));
            }
            if n != n2 {
                return Err(err("inner dimensions differ"));
            }
            Ok(Shape::from([*bt, *m, *p]))
        }
        _ => Err(err("expects [m,n]·[n,p] or [b,m,n]·[b,n,p]")),
    }
}

/// `(batch, m, n, p)` of a validated matmul (every engine's kernels use this one).
pub fn matmul_dims(a: &Shape, b: &Shape) -> (usize, usize, usize, usize) {
    let (ad, bd) = (a.dims(), b.dims());
    if ad.len() == 3 {
        (ad[0], ad[1], ad[2], bd[2])
    } else {
        (1, ad[0], ad[1], bd[1])
    }
}

pub(crate) fn matmul<A: Scalar>(a: &Tensor<A>, b: &Tensor<A>, out: &Shape) -> Result<Tensor<A>> {
    let (bt, m, n, p) = matmul_dims(a.shape(), b.shape());
    let (ad, bd) = (a.data(), b.data());
    let mut data = Vec::with_capacity(bt * m * p);
    for t in 0..bt {
        let a_t = &ad[t * m * n..][..m * n];
        data.extend(combine_rows(
            a_t,
            (m, n),
            (n, 1),
            &bd[t * n * p..][..n * p],
            p,
        ));
    }
    Tensor::new(out.clone(), data)
}

/// `out[r][·] = Σₖ c(r, k)·rows[k][·]` for `r < nr`, with `c(r, k) = coef[r·rs + k·ks]`
/// (`rs, ks` its strides: `(nk, 1)` for a row-major `nr × nk` matrix, `(1, nr)` for the
/// transpose of a row-major `nk × nr` one) and `rows` a row-major `nk × len` matrix: every
/// element's sum over `k` in order from 0, each product `c·row`. The plain definition of every
/// product here; the loops take 8 output rows at a time so that each row of `rows` is read once
/// per 8, which changes no sum's order. The groups of rows are independent, so large products
/// share them out over the current rayon pool: the same sums, the same bits, at any thread
/// count. Measured on a verified GPT step (2 threads): 0.73 s serial, 0.68 s with the rows
/// shared, 0.61 s with the inner loop vectorised as well.
fn combine_rows<A: Scalar>(
    coef: &[A],
    (nr, nk): (usize, usize),
    (rs, ks): (usize, usize),
    rows: &[A],
    len: usize,
) -> Vec<A> {
    const GROUP: usize = 8;
    /// Multiply-adds below which a product stays on the calling thread.
    const PAR_MIN: usize = 1 << 18;
    let mut out = vec![A::zero(); nr * len];
    if len == 0 {
        return out;
    }
    let group = |(g, block): (usize, &mut [A])| {
        let r0 = g * GROUP;
        for k in 0..nk {
            let src = &rows[k * len..][..len];
            for (i, dst) in block.chunks_exact_mut(len).enumerate() {
                A::add_scaled(dst, &coef[(r0 + i) * rs + k * ks], src);
            }
        }
    };
    if nr * nk * len >= PAR_MIN && rayon::current_num_threads() > 1 {
        use rayon::prelude::*;
        out.par_chunks_mut(GROUP * len).enumerate().for_each(group);
    } else {
        out.chunks_mut(GROUP * len).enumerate().for_each(group);
    }
    out
}

/// `dA = dY·Bᵀ`, `dB = Aᵀ·dY`.
pub(crate) fn matmul_vjp<A: Scalar>(
    a: &Tensor<A>,
    b: &Tensor<A>,
    dy: &Tensor<A>,
) -> Result<(Tensor<A>, Tensor<A>)> {
    let (bt, m, n, p) = matmul_dims(a.shape(), b.shape());
    let (ad, bd, dd) = (a.data(), b.data(), dy.data());
    let (mut da, mut db) = (
        Vec::with_capacity(bt * m * n),
        Vec::with_capacity(bt * n * p),
    );
    for t in 0..bt {
        let (a_t, b_t, d_t) = (
            &ad[t * m * n..][..m * n],
            &bd[t * n * p..][..n * p],
            &dd[t * m * p..][..m * p],
        );
        // dA[i][k] = Σⱼ dY[i][j]·B[k][j]: dY times Bᵀ
        da.extend(combine_rows(d_t, (m, p), (p, 1), &transposed(b_t, n, p), n));
        // dB[k][j] = Σᵢ A[i][k]·dY[i][j]: Aᵀ times dY
        db.extend(combine_rows(a_t, (n, m), (1, n), d_t, p));
    }
    Ok((
        Tensor::new(a.shape().clone(), da)?,
        Tensor::new(b.shape().clone(), db)?,
    ))
}

/// The payload shapes of a `linear` node: weight `[out, in]` and bias `[out]`, from its input
/// and declared output shapes.
pub(crate) fn linear_payload_shapes(x: &Shape, out: &Shape) -> Result<Vec<Shape>> {
    let err = |reason: &str| SpecError::OpShape {
        op: super::desc::LINEAR.name,
        shapes: vec![x.clone(), out.clone()],
        reason: reason.to_string(),
    };
    let inp = *x
        .dims()
        .last()
        .ok_or_else(|| err("the input needs at least one axis"))?;
    let outf = *out
        .dims()
        .last()
        .ok_or_else(|| err("the output needs at least one axis"))?;
    Ok(vec![Shape::from([outf, inp]), Shape::from([outf])])
}

pub(crate) fn infer_linear(x: &Shape, w: &Shape, b: &Shape) -> Result<Shape> {
    let err = |reason: String| SpecError::OpShape {
        op: super::desc::LINEAR.name,
        shapes: vec![x.clone(), w.clone(), b.clone()],
        reason,
    };
    let [out, inp] = w.dims() else {
        return Err(err("the weight must be [out, in]".into()));
    };
    let Some(&last) = x.dims().last() else {
        return Err(err("the input needs at least one axis".into()));
    };
    if last != *inp {
        return Err(err(format!(
            "the input's last extent {last} differs from the weight's in-features {inp}"
        )));
    }
    if b.dims() != [*out] {
        return Err(err(format!("the bias must be [{out}]")));
    }
    let mut dims = x.dims().to_vec();
    let last_axis = dims.len() - 1;
    dims[last_axis] = *out;
    Ok(Shape::new(dims))
}

/// `(rows, in, out)` of a validated linear (every engine's kernels use this one).
pub fn linear_dims(x: &Shape, w: &Shape) -> (usize, usize, usize) {
    let rows = x.dims()[..x.rank() - 1].iter().product();
    (rows, w.dims()[1], w.dims()[0])
}

/// Whether an engine whose products run along the destination's unit stride (the CPU
/// engine's `gemm`) computes `linear` over `rows` rows as `yᵀ = W·xᵀ` into a workspace of the
/// output's size and transposes it back: where packing all of `W` (`outf × inp` strided reads,
/// which `y = x·Wᵀ` needs) costs more than packing `x` and transposing `yᵀ` (`rows × (inp +
/// outf)`). One row is a matrix-vector product either way.
pub fn linear_transposes_output(rows: usize, inp: usize, outf: usize) -> bool {
    rows > 1
        && !linear_is_narrow(inp, outf)
        && rows.saturating_mul(inp.saturating_add(outf)) < outf.saturating_mul(inp)
}

/// Whether the CPU engine runs a `linear` of few outputs over long rows (a classifier head on
/// flattened features: 9,216 → 10) on its implicit convolution kernels, every operand read in
/// place and no workspace, instead of `gemm`, whose kernels for a product at most 16 wide ran
/// `conv_train`'s 32 × 9,216 → 10 layer at 38–58 GFLOP/s: at most [`NARROW_LINEAR_MAX_OUT`]
/// outputs, and inputs a whole number of [`IMPLICIT_VECTOR_COLUMNS`], at least
/// [`NARROW_LINEAR_MIN_IN`] of them (its forward ends each sum across a vector's lanes, which
/// short rows do not repay).
pub fn linear_is_narrow(inp: usize, outf: usize) -> bool {
    (1..=NARROW_LINEAR_MAX_OUT).contains(&outf)
        && inp >= NARROW_LINEAR_MIN_IN
        && inp.is_multiple_of(IMPLICIT_VECTOR_COLUMNS)
}

/// The most outputs of a [`linear_is_narrow`] layer.
pub const NARROW_LINEAR_MAX_OUT: usize = 16;

/// The fewest inputs of a [`linear_is_narrow`] layer.
pub const NARROW_LINEAR_MIN_IN: usize = 512;

/// The workspace of one `linear` forward: `yᵀ` where [`linear_transposes_output`], else none.
pub(crate) fn linear_workspace_elements(x: &Shape, w: &Shape) -> usize {
    let (rows, inp, outf) = linear_dims(x, w);
    if linear_transposes_output(rows, inp, outf) {
        rows * outf
    } else {
        0
    }
}

pub(crate) fn linear<A: Scalar>(
    x: &Tensor<A>,
    w: &Tensor<A>,
    b: &Tensor<A>,
    out: &Shape,
) -> Result<Tensor<A>> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    // y[r][o] = (Σᵢ x[r][i]·W[o][i]) + b[o]: x times Wᵀ, then the bias
    let wt = transposed(w.data(), outf, inp);
    let xw = combine_rows(x.data(), (rows, inp), (inp, 1), &wt, outf);
    let data = xw
        .chunks(outf.max(1))
        .flat_map(|row| row.iter().zip(b.data()).map(|(acc, bo)| acc.add(bo)))
        .collect();
    Tensor::new(out.clone(), data)
}

/// The `cols × rows` transpose of a row-major `rows × cols` matrix.
fn transposed<A: Scalar>(m: &[A], rows: usize, cols: usize) -> Vec<A> {
    (0..cols * rows)
        .map(|k| m[(k % rows) * cols + k / rows].clone())
        .collect()
}

/// `dx = dy·W`, `dW = dyᵀ·x` (summed over rows in order), `db = Σ_rows dy`.
pub(crate) fn linear_vjp<A: Scalar>(
    x: &Tensor<A>,
    w: &Tensor<A>,
    dy: &Tensor<A>,
) -> Result<(Tensor<A>, Tensor<A>, Tensor<A>)> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    let (xd, wd, dd) = (x.data(), w.data(), dy.data());
    // dx = dY·W, dW = dYᵀ·x, db[o] = Σ_r dY[r][o] (r in order)
    let dx = combine_rows(dd, (rows, outf), (outf, 1), wd, inp);
    let dw = combine_rows(dd, (outf, rows), (1, outf), xd, inp);
    let mut db = vec![A::zero(); outf];
    for row in dd.chunks(outf.max(1)) {
        for (acc, d) in db.iter_mut().zip(row) {
            *acc = acc.add(d);
        }
    }
    Ok((
        Tensor::new(x.shape().clone(), dx)?,
        Tensor::new(w.shape().clone(), dw)?,
        Tensor::new(Shape::from([outf]), db)?,
    ))
}
