//! `linear` with few outputs over long rows ([`torchlean_spec::ops::linear_is_narrow`]: a
//! classifier head on flattened features, 9,216 → 10) on the implicit convolution kernels
//! ([`super::conv_implicit`]) instead of `gemm`. Each of its three products is an implicit
//! product over a row-major matrix read in place, its taps the matrix's rows (tap `t` at
//! shift `t·in`), so nothing is packed, transposed (but `dy`, for the weight gradient) or
//! allocated:
//!
//! - the forward `y[b, j] = bias[j] + Σ_i x[b, i]·W[j, i]`: [`ImplicitWeightGrad`] with the rows
//!   of `x` as its cotangent rows and the rows of `W` as its taps, added onto the bias;
//! - the input gradient `dx[b, i] = Σ_j dy[b, j]·W[j, i]`: [`ImplicitBlock`] with `dy`'s rows as
//!   its weight rows and the rows of `W` as its taps;
//! - the weight gradient `dW[j, i] = Σ_b dy[b, j]·x[b, i]`: [`ImplicitBlock`] with `dyᵀ`'s rows
//!   as its weight rows and the rows of `x` as its taps.
//!
//! The output rows are split into groups, one task each, when the caller's `par` allows
//! ([`super::linalg::gemm_par`] for a product from the top level). Bits: each element is one sum in a fixed order (the
//! gradients' over the taps; the forward's per vector lane along the row, then across the
//! lanes, so other bits for another vector width), whatever the groups or the thread count.

use super::conv_implicit::{ImplicitBlock, ImplicitWeightGrad};
use crate::scalar::CpuScalar;
use gemm::Parallelism;
use rayon::prelude::*;

/// `(rows, in, out)` of the layer ([`torchlean_spec::ops::linear_dims`]).
pub(super) type Dims = (usize, usize, usize);

/// `y = x·Wᵀ + b` (`y` is `rows × out`).
pub(super) fn forward<T: CpuScalar>(
    x: &[T],
    w: &[T],
    bias: &[T],
    y: &mut [T],
    dims: Dims,
    par: Parallelism,
) {
    let (rows, inp, outf) = dims;
    let shifts = row_shifts(outf, inp);
    // whole 4-row tiles of the kernel per task
    let group = rows_per_task(rows, par, 4);
    in_groups(y, group * outf, |k, yg| {
        for row in yg.chunks_exact_mut(outf) {
            row.copy_from_slice(bias);
        }
        let first = k * group;
        ImplicitWeightGrad {
            xp: w,
            dy: &x[first * inp..(first + yg.len() / outf) * inp],
            shifts: &shifts,
            cols: inp,
            dw: yg,
            accumulate: true,
        }
        .run();
    });
}

/// `dx = dy·W` (`dx` is `rows × in`).
pub(super) fn input_grad<T: CpuScalar>(
    dy: &[T],
    w: &[T],
    dx: &mut [T],
    dims: Dims,
    par: Parallelism,
) {
    let (_, inp, outf) = dims;
    rows_times_matrix(dy, w, (outf, inp), dx, par);
}

/// `dW = dyᵀ·x` (`dW` is `out × in`).
pub(super) fn weight_grad<T: CpuScalar>(
    x: &[T],
    dy: &[T],
    dw: &mut [T],
    dims: Dims,
    par: Parallelism,
) {
    let (rows, inp, outf) = dims;
    let dyt: Vec<T> = (0..outf)
        .flat_map(|j| dy.iter().skip(j).step_by(outf.max(1)).copied())
        .collect();
    rows_times_matrix(&dyt, x, (rows, inp), dw, par);
}

/// `out = a·m` for `m` row-major, `taps × len` ([`ImplicitBlock`] with tap `t` at `t·len`: `m`
/// read in place), `a` row-major with `taps` columns and `out` its rows of `len`, the rows
/// split into groups, one task each, when `par` allows.
fn rows_times_matrix<T: CpuScalar>(
    a: &[T],
    m: &[T],
    (taps, len): (usize, usize),
    out: &mut [T],
    par: Parallelism,
) {
    if taps == 0 {
        // an empty sum (the kernel would still read the empty matrix)
        out.fill(T::ZERO);
        return;
    }
    let shifts = row_shifts(taps, len);
    let group = rows_per_task(out.len() / len.max(1), par, 1);
    in_groups(out, group * len, |k, rows| {
        let first = k * group;
        ImplicitBlock {
            xp: m,
            w: &a[first * taps..(first + rows.len() / len) * taps],
            shifts: &shifts,
            start: 0,
            out: rows,
            cols: len,
        }
        .run();
    });
}

/// The starts of the `n` rows (each `len` long) of a row-major matrix: the taps of an
/// implicit product that reads the matrix in place.
fn row_shifts(n: usize, len: usize) -> Vec<usize> {
    (0..n).map(|r| r * len).collect()
}

/// Output rows per task: all `rows` on one thread, else a near-equal share per thread in
/// multiples of `align` (at least one).
fn rows_per_task(rows: usize, par: Parallelism, align: usize) -> usize {
    match par {
        Parallelism::Rayon(threads) if threads > 1 => {
            rows.div_ceil(threads).next_multiple_of(align).max(1)
        }
        _ => rows.max(1),
    }
}

/// `f(k, chunk)` for the `k`-th chunk of `out` of `len` elements (whole output rows), in
/// parallel when there are several.
fn in_groups<T: CpuScalar>(out: &mut [T], len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if len == 0 || out.is_empty() {
        return;
    }
    if out.len() > len {
        out.par_chunks_mut(len)
            .enumerate()
            .for_each(|(k, chunk)| f(k, chunk));
    } else {
        f(0, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Σ` in f64 of the definitions, for a `rows × in → out` layer of small integers (exact
    /// in f32 too, so every route must give these values exactly).
    fn definition(x: &[f64], w: &[f64], b: &[f64], dy: &[f64], dims: Dims) -> [Vec<f64>; 3] {
        let (rows, inp, outf) = dims;
        let y = (0..rows * outf)
            .map(|e| {
                let (r, j) = (e / outf, e % outf);
                b[j] + (0..inp)
                    .map(|i| x[r * inp + i] * w[j * inp + i])
                    .sum::<f64>()
            })
            .collect();
        let dx = (0..rows * inp)
            .map(|e| {
                let (r, i) = (e / inp, e % inp);
                (0..outf).map(|j| dy[r * outf + j] * w[j * inp + i]).sum()
            })
            .collect();
        let dw = (0..outf * inp)
            .map(|e| {
                let (j, i) = (e / inp, e % inp);
                (0..rows).map(|r| dy[r * outf + j] * x[r * inp + i]).sum()
            })
            .collect();
        [y, dx, dw]
    }

    fn ints(n: usize, seed: usize) -> Vec<f64> {
        (0..n)
            .map(|i| ((i * 7 + seed * 13) % 9) as f64 - 4.0)
            .collect()
    }

    /// Every product equals its definition for widths that exercise the kernels' edge tiles
    /// (rows and outputs not multiples of the tiles), on one thread and split among four
    /// (groups of rows that are not multiples of the tiles either), in f32 and f64.
    #[test]
    fn the_three_products_are_their_definitions_on_any_thread_count() {
        definitions_on_any_thread_count::<f32>();
        definitions_on_any_thread_count::<f64>();
    }

    fn definitions_on_any_thread_count<T: CpuScalar>() {
        for dims in [
            (32, 512, 10),
            (5, 528, 1),
            (13, 1024, 16),
            (1, 512, 7),
            (0, 512, 3),
        ] {
            let (rows, inp, outf) = dims;
            assert!(torchlean_spec::ops::linear_is_narrow(inp, outf));
            let (x, w, b, dy) = (
                ints(rows * inp, 1),
                ints(outf * inp, 2),
                ints(outf, 3),
                ints(rows * outf, 4),
            );
            let want = definition(&x, &w, &b, &dy, dims);
            let cast = |v: &[f64]| v.iter().map(|&e| T::from_f64(e)).collect::<Vec<T>>();
            let (xt, wt, bt, dyt) = (cast(&x), cast(&w), cast(&b), cast(&dy));
            for threads in [1, 4] {
                let par = match threads {
                    1 => Parallelism::None,
                    n => Parallelism::Rayon(n),
                };
                let got = crate::threads::with_threads(threads, || {
                    let nan = T::from_f64(f64::NAN);
                    let mut y = vec![nan; rows * outf];
                    let mut dx = vec![nan; rows * inp];
                    let mut dw = vec![nan; outf * inp];
                    forward(&xt, &wt, &bt, &mut y, dims, par);
                    input_grad(&dyt, &wt, &mut dx, dims, par);
                    weight_grad(&xt, &dyt, &mut dw, dims, par);
                    [y, dx, dw]
                });
                for (name, (got, want)) in ["y", "dx", "dW"].iter().zip(got.iter().zip(&want)) {
                    let got: Vec<f64> = got.iter().map(|v| v.to_f64()).collect();
                    assert_eq!(&got, want, "{name} of {dims:?} on {threads} threads");
                }
            }
        }
    }
}
