//! Default compositions: what a family method computes from its family's primitives when an
//! engine writes no kernel of its own. Each is the reference's formula in the reference's order
//! of operations where the primitives allow it, so on the reference engine most agree with
//! the naive kernels bit for bit (and exactly on the rational scalar); the tests beside them
//! say which. `softmax_vjp` is the reference engine's own VJP too (it was the same computation
//! twice): `ops/tests.rs` checks it against finite differences, the conformance cases against
//! PyTorch.
//!
//! Means divide once, in [`Reduce::reduce_axis`] or [`Reduce::spread`], so an exact engine
//! stays exact and a mean over zero elements is the engine's own (NaN on floats).

use super::{ConvPool, Grads3, KernelResult, Layout, Linalg, Reduce};
use crate::ops::{causal_mask, AttentionDims, BinaryOp, Conv2dSpec, GroupedConv, UnaryOp};
use crate::shape::Shape;

/// `x` as `[outer, inner]` around `axis`: the axes before it, and it with the ones after it.
fn rows_from<B: Layout>(x: &B, axis: usize) -> KernelResult<B> {
    let dims = x.shape_of().dims();
    let outer = dims[..axis].iter().product::<usize>();
    B::relabel(x, &Shape::from([outer, dims[axis..].iter().product()]))
}

/// One value per row of an `[outer, inner]` matrix, repeated along the row.
fn per_row<B: Reduce>(v: &B, rows: &Shape) -> KernelResult<B> {
    B::spread(v, rows, 1, false)
}

/// `Σ x` over every element: the elements as one axis, reduced.
pub fn sum_all<B: Reduce>(x: &B) -> KernelResult<B> {
    let flat = B::relabel(x, &Shape::from([x.shape_of().size()]))?;
    B::reduce_axis(&flat, 0, false, &Shape::scalar())
}

/// `mean((y − t)²)`.
pub fn mse_loss<B: Reduce>(y: &B, t: &B) -> KernelResult<B> {
    let d = B::binary(BinaryOp::Sub, y, t)?;
    let sq = B::binary(BinaryOp::Mul, &d, &d)?;
    let flat = B::relabel(&sq, &Shape::from([sq.shape_of().size()]))?;
    B::reduce_axis(&flat, 0, true, &Shape::scalar())
}

/// `(2·(dy/n)·(y − t), −that)`.
pub fn mse_loss_vjp<B: Reduce>(y: &B, t: &B, dy: &B) -> KernelResult<B, (B, B)> {
    let n = Shape::from([y.shape_of().size()]);
    let each = B::relabel(&B::spread(dy, &n, 0, true)?, y.shape_of())?;
    let d = B::binary(BinaryOp::Sub, y, t)?;
    let gy = B::binary(BinaryOp::Mul, &B::scale(&each, 2.0)?, &d)?;
    let gt = B::unary(UnaryOp::Neg, &gy)?;
    Ok((gy, gt))
}

/// `y·(dy − Σ dy·y)`, or for log-softmax `dy − exp(y)·Σ dy`, the sums along `axis`.
pub fn softmax_vjp<B: Reduce>(y: &B, dy: &B, axis: usize, log: bool) -> KernelResult<B> {
    let shape = y.shape_of();
    let along = |v: &B| -> KernelResult<B> {
        let s = B::reduce_axis(v, axis, false, &shape.remove_axis(axis))?;
        B::spread(&s, shape, axis, false)
    };
    if log {
        let e = B::unary(UnaryOp::Exp, y)?;
        let t = B::binary(BinaryOp::Mul, &e, &along(dy)?)?;
        B::binary(BinaryOp::Sub, dy, &t)
    } else {
        let dot = along(&B::binary(BinaryOp::Mul, dy, y)?)?;
        B::binary(BinaryOp::Mul, &B::binary(BinaryOp::Sub, dy, &dot)?, y)
    }
}

/// Per row of `x` as `[outer, inner]`: `(x − mean, sigma)`, both `[outer, inner]`, with the
/// population variance clamped at 0 and `sigma = sqrt(var + eps)`.
fn centred_and_sigma<B: Reduce>(rows: &B, eps: f64) -> KernelResult<B, (B, B)> {
    let shape = rows.shape_of();
    let outer = Shape::from([shape.dims()[0]]);
    let mean = B::reduce_axis(rows, 1, true, &outer)?;
    let centred = B::binary(BinaryOp::Sub, rows, &per_row(&mean, shape)?)?;
    let sq = B::binary(BinaryOp::Mul, &centred, &centred)?;
    let var = B::clamp(&B::reduce_axis(&sq, 1, true, &outer)?, Some(0.0), None)?;
    let sigma = B::unary(UnaryOp::Sqrt, &B::add_scalar(&var, eps)?)?;
    Ok((centred, per_row(&sigma, shape)?))
}

/// `(x − mean)/sigma` over the axes `axis..`.
pub fn layer_norm<B: Reduce>(x: &B, axis: usize, eps: f64) -> KernelResult<B> {
    let (centred, sigma) = centred_and_sigma(&rows_from(x, axis)?, eps)?;
    B::relabel(&B::binary(BinaryOp::Div, &centred, &sigma)?, x.shape_of())
}

/// `dx = (dy − mean(dy) − x̂·mean(dy·x̂)) / sigma` per row.
pub fn layer_norm_vjp<B: Reduce>(x: &B, dy: &B, axis: usize, eps: f64) -> KernelResult<B> {
    let rows = rows_from(x, axis)?;
    let shape = rows.shape_of();
    let outer = Shape::from([shape.dims()[0]]);
    let (centred, sigma) = centred_and_sigma(&rows, eps)?;
    let xhat = B::binary(BinaryOp::Div, &centred, &sigma)?;
    let d = B::relabel(dy, shape)?;
    let row_mean = |v: &B| per_row(&B::reduce_axis(v, 1, true, &outer)?, shape);
    let mean_d = row_mean(&d)?;
    let mean_dx = row_mean(&B::binary(BinaryOp::Mul, &d, &xhat)?)?;
    let t = B::binary(BinaryOp::Sub, &d, &mean_d)?;
    let t = B::binary(
        BinaryOp::Sub,
        &t,
        &B::binary(BinaryOp::Mul, &xhat, &mean_dx)?,
    )?;
    B::relabel(&B::binary(BinaryOp::Div, &t, &sigma)?, x.shape_of())
}

/// A per-channel `[C]` value across `x`'s shape `[N, C, …]`.
fn per_channel<B: Layout>(v: &B, x: &Shape) -> KernelResult<B> {
    let mut dims = vec![1; x.rank()];
    dims[1] = x.dims()[1];
    B::broadcast(&B::relabel(v, &Shape::new(dims))?, x)
}

/// `(x − mean)/sqrt(max(var, 0) + eps)·gamma + beta`, per channel (axis 1).
pub fn batch_norm<B: Reduce>(args: [&B; 5], eps: f64) -> KernelResult<B> {
    let [x, gamma, beta, mean, var] = args;
    let shape = x.shape_of();
    let var = B::clamp(var, Some(0.0), None)?;
    let sigma = B::unary(UnaryOp::Sqrt, &B::add_scalar(&var, eps)?)?;
    let centred = B::binary(BinaryOp::Sub, x, &per_channel(mean, shape)?)?;
    let norm = B::binary(BinaryOp::Div, &centred, &per_channel(&sigma, shape)?)?;
    let scaled = B::binary(BinaryOp::Mul, &norm, &per_channel(gamma, shape)?)?;
    B::binary(BinaryOp::Add, &scaled, &per_channel(beta, shape)?)
}

/// `x` as the rows `[R, in]` that `linear` multiplies, and `dy` (or any `[.., out]`) alike.
fn linear_rows<B: Layout>(v: &B) -> KernelResult<B> {
    let dims = v.shape_of().dims();
    let last = dims[dims.len() - 1];
    let rows = dims[..dims.len() - 1].iter().product::<usize>();
    B::relabel(v, &Shape::from([rows, last]))
}

/// `Wᵀ` of a `[out, in]` weight.
fn transposed<B: Layout>(w: &B) -> KernelResult<B> {
    let d = w.shape_of().dims();
    B::permute(w, &[1, 0], &Shape::from([d[1], d[0]]))
}

/// `x·Wᵀ + b` over the rows of `x`: a product, then the bias added to each row.
pub fn linear<B: Linalg>(x: &B, w: &B, b: &B, out: &Shape) -> KernelResult<B> {
    let rows = linear_rows(x)?;
    let wt = transposed(w)?;
    let prod_shape = Shape::from([rows.shape_of().dims()[0], w.shape_of().dims()[0]]);
    let prod = B::matmul(&rows, &wt, &prod_shape)?;
    let y = B::binary(BinaryOp::Add, &prod, &B::broadcast(b, &prod_shape)?)?;
    B::relabel(&y, out)
}

/// `(dx, dW, db)`: `dx = dy·W`, `dW = dyᵀ·x`, `db = Σ_rows dy`.
pub fn linear_vjp<B: Linalg>(x: &B, w: &B, dy: &B) -> KernelResult<B, (B, B, B)> {
    let rows = linear_rows(x)?;
    let d = linear_rows(dy)?;
    let (r, outf) = (d.shape_of().dims()[0], d.shape_of().dims()[1]);
    let inp = w.shape_of().dims()[1];
    let dx = B::relabel(&B::matmul(&d, w, &Shape::from([r, inp]))?, x.shape_of())?;
    let dw = B::matmul(&transposed(&d)?, &rows, w.shape_of())?;
    let db = B::reduce_axis(&d, 0, false, &Shape::from([outf]))?;
    Ok((dx, dw, db))
}

/// The patch matrices `[N·groups, K, P]` of a grouped or dilated convolution: the input
/// zero-padded (the adjoint of a slice puts it inside zeros, height then width), as a
/// one-column table, gathered.
fn conv_patches<B: Layout>(gc: &GroupedConv, x: &B) -> KernelResult<B> {
    let mut padded = B::relabel(x, &gc.input4())?;
    if gc.padding() > 0 {
        padded = B::slice_vjp(&padded, &gc.padded(1), 2, gc.padding())?;
        padded = B::slice_vjp(&padded, &gc.padded(2), 3, gc.padding())?;
    }
    let table = B::relabel(&padded, &gc.table())?;
    let column = B::gather_rows(&table, &gc.patch_ids(), &gc.patch_column())?;
    B::relabel(&column, &gc.patches())
}

/// The weight as the products' left operand `[N·groups, O/groups, K]`, repeated per image.
fn conv_weights<B: Layout>(gc: &GroupedConv, w: &B) -> KernelResult<B> {
    let per_group = B::relabel(w, &gc.weights())?;
    let per_image = match gc.n {
        1 => per_group,
        _ => B::broadcast(&per_group, &gc.weights_per_image())?,
    };
    B::relabel(&per_image, &gc.weights_batched())
}

/// A `conv2d` with several groups or a dilation ([`GroupedConv`]): per image and group, the
/// group's weight matrix times its patch matrix, then the bias added. The reference sums each
/// output's taps in the same order (channel, tap row, tap column) then adds the bias; the
/// product's own order of summation is the engine's.
pub fn grouped_conv2d<B: Linalg>(
    spec: &Conv2dSpec,
    x: &B,
    w: &B,
    b: &B,
    out: &Shape,
) -> KernelResult<B> {
    let gc = GroupedConv::new(spec, x.shape_of())?;
    let products = B::matmul(
        &conv_weights(&gc, w)?,
        &conv_patches(&gc, x)?,
        &gc.products(),
    )?;
    let y = B::relabel(&products, &gc.output4())?;
    let bias = B::broadcast(&B::relabel(b, &gc.bias_column())?, &gc.output4())?;
    B::relabel(&B::binary(BinaryOp::Add, &y, &bias)?, out)
}

/// `(dx if need_dx, dW, db)` of [`grouped_conv2d`], through the VJPs of its steps.
pub fn grouped_conv2d_vjp<B: Linalg>(
    spec: &Conv2dSpec,
    x: &B,
    w: &B,
    dy: &B,
    need_dx: bool,
) -> KernelResult<B, Grads3<B>> {
    let gc = GroupedConv::new(spec, x.shape_of())?;
    let dy4 = B::relabel(dy, &gc.output4())?;
    let db = B::broadcast_vjp(&dy4, &gc.bias_column())?;
    let db = B::relabel(&db, &Shape::from([spec.out_channels]))?;
    let dproducts = B::relabel(&dy4, &gc.products())?;
    let (dweights, dpatches) =
        B::matmul_vjp(&conv_weights(&gc, w)?, &conv_patches(&gc, x)?, &dproducts)?;
    let dw = match gc.n {
        1 => dweights,
        _ => B::broadcast_vjp(
            &B::relabel(&dweights, &gc.weights_per_image())?,
            &gc.weights(),
        )?,
    };
    let dw = B::relabel(&dw, w.shape_of())?;
    if !need_dx {
        return Ok((None, dw, db));
    }
    let dcolumn = B::relabel(&dpatches, &gc.patch_column())?;
    let dtable = B::gather_rows_vjp(&dcolumn, &gc.patch_ids(), &gc.table())?;
    let mut dx = B::relabel(&dtable, &gc.padded(2))?;
    if gc.padding() > 0 {
        dx = B::slice(&dx, 3, gc.padding(), &gc.padded(1))?;
        dx = B::slice(&dx, 2, gc.padding(), &gc.input4())?;
    }
    Ok((Some(B::relabel(&dx, x.shape_of())?), dw, db))
}

/// Part `part` (0 queries, 1 keys, 2 values; each `C` wide, at `part·C` of a last axis `width`
/// wide) of `x` `[.., T, width]` as `[B·heads, T, hd]`: the heads apart.
fn heads_apart<B: Layout>(x: &B, d: &AttentionDims, width: usize, part: usize) -> KernelResult<B> {
    let (b, t, c, h, hd) = (d.batch, d.t, d.c, d.heads, d.hd);
    let rows = B::relabel(x, &Shape::from([b, t, width]))?;
    let z = if width == c {
        rows
    } else {
        B::slice(&rows, 2, part * c, &Shape::from([b, t, c]))?
    };
    let z = B::relabel(&z, &Shape::from([b, t, h, hd]))?;
    let z = B::permute(&z, &[0, 2, 1, 3], &Shape::from([b, h, t, hd]))?;
    B::relabel(&z, &Shape::from([b * h, t, hd]))
}

/// `[B·heads, T, hd]` back to `[B, T, C]`: the heads side by side.
fn heads_together<B: Layout>(y: &B, d: &AttentionDims) -> KernelResult<B> {
    let (b, t, h, hd) = (d.batch, d.t, d.heads, d.hd);
    let z = B::relabel(y, &Shape::from([b, h, t, hd]))?;
    let z = B::permute(&z, &[0, 2, 1, 3], &Shape::from([b, t, h, hd]))?;
    B::relabel(&z, &Shape::from([b, t, d.c]))
}

/// The queries, the transposed keys, the values and the weights
/// `softmax(Q·Kᵀ·(1/√hd) + M)` (`M` −∞ above the diagonal) of every head.
fn attention_weights<B: Linalg>(qkv: &B, d: &AttentionDims) -> KernelResult<B, [B; 4]> {
    let (bh, t) = (d.batch * d.heads, d.t);
    let width = 3 * d.c;
    let q = heads_apart(qkv, d, width, 0)?;
    let k = heads_apart(qkv, d, width, 1)?;
    let v = heads_apart(qkv, d, width, 2)?;
    let kt = B::permute(&k, &[0, 2, 1], &Shape::from([bh, d.hd, t]))?;
    let scores = Shape::from([bh, t, t]);
    let s = B::scale(&B::matmul(&q, &kt, &scores)?, d.scale())?;
    let mask = B::constant(&causal_mask(t), &Shape::from([t, t]))?;
    let mask = B::broadcast(&mask, &scores)?;
    let p = B::softmax(&B::binary(BinaryOp::Add, &s, &mask)?, 2, false)?;
    Ok([q, kt, v, p])
}

/// `conv2d_relu`: the convolution, then the ReLU.
pub fn conv2d_relu<B: ConvPool>(
    spec: &Conv2dSpec,
    x: &B,
    w: &B,
    b: &B,
    out: &Shape,
) -> KernelResult<B> {
    B::unary(UnaryOp::Relu, &B::conv2d(spec, x, w, b, out)?)
}

/// `conv2d_relu`'s `(dx if need_dx, dW, db)`: the cotangent masked by the output `y` (ReLU's
/// VJP), then the convolution's.
pub fn conv2d_relu_vjp_for<B: ConvPool>(
    spec: &Conv2dSpec,
    x: &B,
    w: &B,
    y: &B,
    dy: &B,
    need_dx: bool,
) -> KernelResult<B, Grads3<B>> {
    let masked = B::unary_vjp(UnaryOp::Relu, None, Some(y), dy)?;
    B::conv2d_vjp_for(spec, x, w, &masked, need_dx)
}

/// `causal_attention` from products, a mask and softmax (`crate::ops::AttentionDims`).
pub fn causal_attention<B: Linalg>(qkv: &B, heads: usize, out: &Shape) -> KernelResult<B> {
    let d = AttentionDims::of(qkv.shape_of(), heads);
    let [_, _, v, p] = attention_weights(qkv, &d)?;
    let y = B::matmul(&p, &v, &Shape::from([d.batch * d.heads, d.t, d.hd]))?;
    B::relabel(&heads_together(&y, &d)?, out)
}

/// The VJP of [`causal_attention`], through its steps' VJPs (the mask passes the cotangent).
pub fn causal_attention_vjp<B: Linalg>(qkv: &B, heads: usize, dy: &B) -> KernelResult<B> {
    let d = AttentionDims::of(qkv.shape_of(), heads);
    let [q, kt, v, p] = attention_weights(qkv, &d)?;
    let dyh = heads_apart(dy, &d, d.c, 0)?;
    let (dp, dv) = B::matmul_vjp(&p, &v, &dyh)?;
    let ds = B::scale(&B::softmax_vjp(&p, &dp, 2, false)?, d.scale())?;
    let (dq, dkt) = B::matmul_vjp(&q, &kt, &ds)?;
    let dk = B::permute(
        &dkt,
        &[0, 2, 1],
        &Shape::from([d.batch * d.heads, d.t, d.hd]),
    )?;
    let parts = [
        heads_together(&dq, &d)?,
        heads_together(&dk, &d)?,
        heads_together(&dv, &d)?,
    ];
    let packed = Shape::from([d.batch, d.t, 3 * d.c]);
    let dx = B::concat(&[&parts[0], &parts[1], &parts[2]], 2, &packed)?;
    B::relabel(&dx, qkv.shape_of())
}

#[cfg(test)]
mod tests {
    //! Each composition against the reference engine's own kernel: bit for bit on `f64` where
    //! the composition performs the reference's operations in its order, within a few ulps
    //! where it reorders (noted), and exactly on the rational scalar where no transcendental
    //! is involved.
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Norm, Rational, Scalar, Tensor};
    use proptest::prelude::*;

    /// A tensor of `shape` with values in `[-2, 2]` from `seed`, dyadic so that the rational
    /// scalar reads them exactly.
    fn tensor<A: Scalar>(shape: &[usize], seed: u64) -> Tensor<A> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let data = (0..shape.iter().product::<usize>())
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                A::from_f64((s % 257) as f64 / 64.0 - 2.0).unwrap()
            })
            .collect();
        Tensor::new(shape.to_vec(), data).unwrap()
    }

    /// `got` equals `want` bit for bit (`ulps = 0`) or within `ulps` units of `want`'s scale.
    fn check(what: &str, got: &Tensor<f64>, want: &Tensor<f64>, ulps: f64) {
        assert_eq!(got.shape(), want.shape(), "{what}");
        let scale = want.data().iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (g, w)) in got.data().iter().zip(want.data()).enumerate() {
            let ok = if ulps == 0.0 {
                g.to_bits() == w.to_bits()
            } else {
                (g - w).abs() <= ulps * f64::EPSILON * scale
            };
            assert!(
                ok,
                "{what}: element {i}: {g:e} against the reference's {w:e}"
            );
        }
    }

    fn check_exact(what: &str, got: &Tensor<Rational>, want: &Tensor<Rational>) {
        assert_eq!(got.shape(), want.shape(), "{what}");
        assert!(
            got.data().iter().zip(want.data()).all(|(g, w)| g.bit_eq(w)),
            "{what}: not the reference's exact value"
        );
    }

    type T = Tensor<f64>;
    type Q = Tensor<Rational>;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn sums_and_mse_are_the_references(
            dims in proptest::collection::vec(0usize..4, 1..4),
            seed in any::<u64>(),
        ) {
            let (y, t, dy) = (tensor::<f64>(&dims, seed), tensor(&dims, seed ^ 1), tensor(&[], seed ^ 2));
            check("sum_all", &sum_all(&y).unwrap(), &<T as Reduce>::sum_all(&y).unwrap(), 0.0);
            let want = <T as Reduce>::mse_loss(&y, &t).unwrap();
            check("mse_loss", &mse_loss(&y, &t).unwrap(), &want, 0.0);
            // the reference multiplies (2/n)·(y − t)·dy; the composition 2·(dy/n)·(y − t)
            let (gy, gt) = mse_loss_vjp(&y, &t, &dy).unwrap();
            let (wy, wt) = <T as Reduce>::mse_loss_vjp(&y, &t, &dy).unwrap();
            check("mse_loss_vjp dy", &gy, &wy, 4.0);
            check("mse_loss_vjp dt", &gt, &wt, 4.0);
            let (qy, qt, qd) = (tensor::<Rational>(&dims, seed), tensor(&dims, seed ^ 1), tensor(&[], seed ^ 2));
            check_exact("sum_all", &sum_all(&qy).unwrap(), &<Q as Reduce>::sum_all(&qy).unwrap());
            if !dims.contains(&0) {
                check_exact("mse_loss", &mse_loss(&qy, &qt).unwrap(), &<Q as Reduce>::mse_loss(&qy, &qt).unwrap());
            }
            let (gy, gt) = mse_loss_vjp(&qy, &qt, &qd).unwrap();
            let (wy, wt) = <Q as Reduce>::mse_loss_vjp(&qy, &qt, &qd).unwrap();
            check_exact("mse_loss_vjp dy", &gy, &wy);
            check_exact("mse_loss_vjp dt", &gt, &wt);
        }

        #[test]
        fn norms_are_the_references(
            dims in proptest::collection::vec(1usize..5, 2..4),
            seed in any::<u64>(),
            axis_pick in any::<usize>(),
        ) {
            let axis = axis_pick % dims.len();
            let x = tensor::<f64>(&dims, seed);
            let dy = tensor::<f64>(&dims, seed ^ 3);
            let want = <T as Norm>::layer_norm(&x, axis, 1e-5).unwrap();
            check("layer_norm", &layer_norm(&x, axis, 1e-5).unwrap(), &want, 0.0);
            let want = <T as Norm>::layer_norm_vjp(&x, &dy, axis, 1e-5).unwrap();
            check("layer_norm_vjp", &layer_norm_vjp(&x, &dy, axis, 1e-5).unwrap(), &want, 0.0);
            let c = dims[1];
            let var = tensor::<f64>(&[c], seed ^ 4);
            let args = [&x, &tensor(&[c], seed ^ 5), &tensor(&[c], seed ^ 6), &tensor(&[c], seed ^ 7), &var];
            let want = <T as Norm>::batch_norm(args, 1e-5).unwrap();
            check("batch_norm", &batch_norm(args, 1e-5).unwrap(), &want, 0.0);
        }

        #[test]
        fn linear_is_the_references(
            lead in proptest::collection::vec(0usize..4, 0..3),
            inp in 1usize..5,
            outf in 1usize..5,
            seed in any::<u64>(),
        ) {
            let mut xd = lead.clone();
            xd.push(inp);
            let mut yd = lead;
            yd.push(outf);
            let out = Shape::new(yd.clone());
            let (x, w, b, dy) = (
                tensor::<f64>(&xd, seed),
                tensor::<f64>(&[outf, inp], seed ^ 1),
                tensor::<f64>(&[outf], seed ^ 2),
                tensor::<f64>(&yd, seed ^ 3),
            );
            let want = <T as Linalg>::linear(&x, &w, &b, &out).unwrap();
            check("linear", &linear(&x, &w, &b, &out).unwrap(), &want, 0.0);
            let (gx, gw, gb) = linear_vjp(&x, &w, &dy).unwrap();
            let (wx, ww, wb) = <T as Linalg>::linear_vjp(&x, &w, &dy).unwrap();
            check("linear_vjp dx", &gx, &wx, 0.0);
            check("linear_vjp dW", &gw, &ww, 0.0);
            check("linear_vjp db", &gb, &wb, 0.0);
            let (x, w, b) = (tensor::<Rational>(&xd, seed), tensor::<Rational>(&[outf, inp], seed ^ 1), tensor::<Rational>(&[outf], seed ^ 2));
            check_exact("linear", &linear(&x, &w, &b, &out).unwrap(), &<Q as Linalg>::linear(&x, &w, &b, &out).unwrap());
        }

        /// Grouped and dilated convolutions, composed, against the reference's loops: exact on
        /// the rational scalar (sums and products only, in another order), forward and VJP.
        #[test]
        fn grouped_conv_is_the_references(
            images in 0usize..3,
            (groups, cg, og) in (1usize..4, 1usize..3, 1usize..3),
            (kernel_h, kernel_w) in (1usize..4, 1usize..4),
            (stride, padding, dilation) in (1usize..3, 0usize..3, 1usize..3),
            (extra_h, extra_w) in (0usize..3, 0usize..3),
            seed in any::<u64>(),
        ) {
            let spec = Conv2dSpec {
                in_channels: groups * cg,
                out_channels: groups * og,
                kernel_h,
                kernel_w,
                stride,
                padding,
                groups,
                dilation,
            };
            // the smallest input the dilated kernel fits, plus a little
            let fit = |k: usize| (dilation * (k - 1) + 1).saturating_sub(2 * padding).max(1);
            let (h, w) = (fit(kernel_h) + extra_h, fit(kernel_w) + extra_w);
            // 0 images: an unbatched `[C,H,W]` input
            let xd = match images {
                0 => vec![spec.in_channels, h, w],
                n => vec![n, spec.in_channels, h, w],
            };
            let op = crate::Op::Conv2d(spec);
            let shapes = op.payload_shapes(&[Shape::new(xd.clone())], &Shape::scalar()).unwrap();
            let out = op
                .infer_shape(&[Shape::new(xd.clone()), shapes[0].clone(), shapes[1].clone()])
                .unwrap();
            let x = tensor::<Rational>(&xd, seed);
            let wt = tensor::<Rational>(shapes[0].dims(), seed ^ 1);
            let b = tensor::<Rational>(shapes[1].dims(), seed ^ 2);
            let dy = tensor::<Rational>(out.dims(), seed ^ 3);
            let want = <Q as crate::ConvPool>::conv2d(&spec, &x, &wt, &b, &out).unwrap();
            check_exact("conv2d", &grouped_conv2d(&spec, &x, &wt, &b, &out).unwrap(), &want);
            let (gx, gw, gb) = grouped_conv2d_vjp(&spec, &x, &wt, &dy, true).unwrap();
            let (wx, ww, wb) = <Q as crate::ConvPool>::conv2d_vjp(&spec, &x, &wt, &dy).unwrap();
            check_exact("conv2d_vjp dx", &gx.unwrap(), &wx);
            check_exact("conv2d_vjp dW", &gw, &ww);
            check_exact("conv2d_vjp db", &gb, &wb);
            let (none, gw, _) = grouped_conv2d_vjp(&spec, &x, &wt, &dy, false).unwrap();
            prop_assert!(none.is_none());
            check_exact("conv2d_vjp dW without dx", &gw, &ww);
        }
    }

    #[test]
    fn a_mean_over_no_elements_is_the_engines_own() {
        // NaN on floats, the typed error on the exact scalar: the reference's policy, reached
        // through reduce_axis
        let y = tensor::<f64>(&[0, 3], 1);
        let loss = mse_loss(&y, &y).unwrap();
        assert!(loss.data()[0].is_nan());
        let q = tensor::<Rational>(&[0, 3], 1);
        assert!(matches!(
            mse_loss(&q, &q),
            Err(crate::SpecError::EmptyMean { .. })
        ));
    }
}
