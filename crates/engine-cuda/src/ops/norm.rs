//! The norm family on the CUDA engine: softmax and log-softmax along an axis (one thread per
//! line), layer norm over a suffix (one thread per row), batch norm in evaluation and training
//! mode (elementwise kernels over per-channel sums from [`super::reduce::sum_into`], so the
//! statistics over `N·H·W` spread over the device in a fixed order).
//!
//! Arithmetic is in double inside the kernels, rounded once to `f32` (batch norm's statistics
//! are kept as doubles between launches, the reference's accumulation type).

use super::reduce::{sum_into, Emit, Item, Segments};
use super::{launch_into, launch_new};
use crate::buffer::Buffer;
use crate::device::{Arg, Device};
use crate::error::Result;
use crate::geometry::{index, Launch};
use crate::kernels::NORM;
use crate::tensor::CudaTensor;
use torchlean_spec::Shape;

/// The lines along `axis`: `(lines, n, inner)`; no lines when the axis is empty (nothing to
/// write).
pub fn lines_of(shape: &Shape, axis: usize) -> (usize, usize, usize) {
    let (outer, n, inner) = shape.split_at_axis(axis);
    let lines = if n == 0 { 0 } else { outer * inner };
    (lines, n, inner)
}

/// The rows of layer norm over `axis..`: `(rows, inner)`, `inner` the suffix's size; no rows
/// when the tensor is empty.
pub fn suffix_rows(shape: &Shape, axis: usize) -> (usize, usize) {
    let inner: usize = shape.dims()[axis..].iter().product();
    let rows = shape.size().checked_div(inner).unwrap_or(0);
    (rows, inner)
}

/// `(N, C, rest)` of a validated batch-norm input (channels on axis 1, `rest` the product of
/// the axes after it).
pub fn bn_dims(x: &Shape) -> (usize, usize, usize) {
    let d = x.dims();
    (d[0], d[1], d[2..].iter().product())
}

fn softmax_launch<D: Device>(
    op: &'static str,
    kernel: &'static str,
    out: &mut Buffer<D>,
    inputs: &[&CudaTensor<D>],
    axis: usize,
    log: bool,
) -> Result<()> {
    let (lines, n, inner) = lines_of(inputs[0].shape(), axis);
    let mut args: Vec<Arg<'_, D>> = inputs.iter().map(|t| Arg::In(t.mem())).collect();
    args.extend([
        Arg::Index(index(op, "lines", lines)?),
        Arg::Index(index(op, "n", n)?),
        Arg::Index(index(op, "inner", inner)?),
        Arg::Index(i64::from(log)),
    ]);
    launch_into(NORM.kernel(kernel), Launch::for_items(lines), [out], args)
}

pub fn softmax<D: Device>(x: &CudaTensor<D>, axis: usize, log: bool) -> Result<CudaTensor<D>> {
    let mut y = Buffer::<D>::uninit(x.len())?;
    // tl_norm_softmax(float* y, const float* x, ll lines, ll n, ll inner, ll log_form)
    softmax_launch("softmax", "tl_norm_softmax", &mut y, &[x], axis, log)?;
    CudaTensor::from_buffer(x.shape().clone(), y)
}

pub fn softmax_vjp<D: Device>(
    y: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    axis: usize,
    log: bool,
) -> Result<CudaTensor<D>> {
    let mut dx = Buffer::<D>::uninit(y.len())?;
    // tl_norm_softmax_vjp(float* dx, const float* y, const float* dy, ll lines, ll n,
    //   ll inner, ll log_form)
    softmax_launch(
        "softmax_vjp",
        "tl_norm_softmax_vjp",
        &mut dx,
        &[y, dy],
        axis,
        log,
    )?;
    CudaTensor::from_buffer(y.shape().clone(), dx)
}

pub fn layer_norm<D: Device>(x: &CudaTensor<D>, axis: usize, eps: f64) -> Result<CudaTensor<D>> {
    const OP: &str = "layer_norm";
    let (rows, inner) = suffix_rows(x.shape(), axis);
    // tl_norm_layer(float* y, const float* x, ll rows, ll inner, ull eps_bits)
    launch_new(
        NORM.kernel("tl_norm_layer"),
        Launch::for_items(rows),
        x.shape().clone(),
        [
            Arg::In(x.mem()),
            Arg::Index(index(OP, "rows", rows)?),
            Arg::Index(index(OP, "inner", inner)?),
            Arg::U64(eps.to_bits()),
        ],
    )
}

pub fn layer_norm_vjp<D: Device>(
    x: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    axis: usize,
    eps: f64,
) -> Result<CudaTensor<D>> {
    const OP: &str = "layer_norm_vjp";
    let (rows, inner) = suffix_rows(x.shape(), axis);
    // tl_norm_layer_vjp(float* dx, const float* x, const float* dy, ll rows, ll inner,
    //   ull eps_bits)
    launch_new(
        NORM.kernel("tl_norm_layer_vjp"),
        Launch::for_items(rows),
        x.shape().clone(),
        [
            Arg::In(x.mem()),
            Arg::In(dy.mem()),
            Arg::Index(index(OP, "rows", rows)?),
            Arg::Index(index(OP, "inner", inner)?),
            Arg::U64(eps.to_bits()),
        ],
    )
}

/// `(total, C, rest)` of a batch-norm input as kernel indices.
fn bn_indices(op: &'static str, x: &Shape) -> Result<[i64; 3]> {
    let (_, c, rest) = bn_dims(x);
    Ok([
        index(op, "n", x.size())?,
        index(op, "C", c)?,
        index(op, "rest", rest)?,
    ])
}

pub fn batch_norm<D: Device>(args: [&CudaTensor<D>; 5], eps: f64) -> Result<CudaTensor<D>> {
    let [x, gamma, beta, mean, var] = args;
    // tl_norm_bn_eval(float* y, const float* x, const float* gamma, const float* beta,
    //   const float* mean, const float* var, ll total, ll c, ll rest, ull eps_bits)
    let channels = [gamma.mem(), beta.mem(), mean.mem(), var.mem()];
    let eps = Some(Arg::U64(eps.to_bits()));
    per_channel_launch("batch_norm", "tl_norm_bn_eval", x, channels, eps)
}

/// Both batch norms' forward: one thread per element of `x` `[N, C, …]`, the kernel reading
/// `x`, four per-channel buffers, the sizes `(total, C, rest)` and `last` if given.
fn per_channel_launch<'a, D: Device>(
    op: &'static str,
    kernel: &'static str,
    x: &'a CudaTensor<D>,
    channels: [&'a D::Mem; 4],
    last: Option<Arg<'a, D>>,
) -> Result<CudaTensor<D>> {
    let [total, c, rest] = bn_indices(op, x.shape())?;
    let args = std::iter::once(Arg::In(x.mem()))
        .chain(channels.map(Arg::In))
        .chain([Arg::Index(total), Arg::Index(c), Arg::Index(rest)])
        .chain(last);
    launch_new(
        NORM.kernel(kernel),
        Launch::for_items(x.len()),
        x.shape().clone(),
        args,
    )
}

/// `(Σ dy, Σ dy·(x − center))` per channel, as doubles; `center` holds one double per
/// channel.
fn channel_sums<D: Device>(
    op: &'static str,
    x: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    center: &Buffer<D>,
) -> Result<(Buffer<D>, Buffer<D>)> {
    let (n, c, rest) = bn_dims(x.shape());
    let seg = Segments::per_channel(n, c, rest);
    let plain = Emit::Double { denom: 1 };
    let sd = sum_into(op, &seg, Item::Value(dy.mem()), plain)?;
    let item = Item::WeightedCentred(x.mem(), dy.mem(), center.mem());
    let sdc = sum_into(op, &seg, item, plain)?;
    Ok((sd, sdc))
}

pub fn batch_norm_vjp<D: Device>(
    x: &CudaTensor<D>,
    gamma: &CudaTensor<D>,
    mean: &CudaTensor<D>,
    var: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    eps: f64,
) -> Result<[CudaTensor<D>; 5]> {
    const OP: &str = "batch_norm_vjp";
    let [total, c, rest] = bn_indices(OP, x.shape())?;
    let channels = mean.len();
    let mut dx = Buffer::<D>::uninit(x.len())?;
    // tl_norm_bn_eval_dx(float* dx, const float* dy, const float* gamma, const float* var,
    //   ll total, ll c, ll rest, ull eps_bits)
    launch_into(
        NORM.kernel("tl_norm_bn_eval_dx"),
        Launch::for_items(x.len()),
        [&mut dx],
        [
            Arg::In(dy.mem()),
            Arg::In(gamma.mem()),
            Arg::In(var.mem()),
            Arg::Index(total),
            Arg::Index(c),
            Arg::Index(rest),
            Arg::U64(eps.to_bits()),
        ],
    )?;
    let mut center = Buffer::<D>::uninit(2 * channels)?;
    // tl_norm_doubles_of(float* out, const float* x, ll n)
    launch_into(
        NORM.kernel("tl_norm_doubles_of"),
        Launch::for_items(channels),
        [&mut center],
        [Arg::In(mean.mem()), Arg::Index(c)],
    )?;
    let (sd, sdc) = channel_sums(OP, x, dy, &center)?;
    let mut dgamma = Buffer::<D>::uninit(channels)?;
    let mut dbeta = Buffer::<D>::uninit(channels)?;
    let mut dmean = Buffer::<D>::uninit(channels)?;
    let mut dvar = Buffer::<D>::uninit(channels)?;
    // tl_norm_bn_eval_grads(float* dgamma, float* dbeta, float* dmean, float* dvar,
    //   const float* sd, const float* sdc, const float* gamma, const float* var, ll c,
    //   ull eps_bits)
    launch_into(
        NORM.kernel("tl_norm_bn_eval_grads"),
        Launch::for_items(channels),
        [&mut dgamma, &mut dbeta, &mut dmean, &mut dvar],
        [
            Arg::In(sd.mem()),
            Arg::In(sdc.mem()),
            Arg::In(gamma.mem()),
            Arg::In(var.mem()),
            Arg::Index(c),
            Arg::U64(eps.to_bits()),
        ],
    )?;
    let cshape = Shape::from([channels]);
    Ok([
        CudaTensor::from_buffer(x.shape().clone(), dx)?,
        CudaTensor::from_buffer(cshape.clone(), dgamma)?,
        CudaTensor::from_buffer(cshape.clone(), dbeta)?,
        CudaTensor::from_buffer(cshape.clone(), dmean)?,
        CudaTensor::from_buffer(cshape, dvar)?,
    ])
}

/// Per channel of `[N, C, H, W]`: `(mean, sigma)` as doubles over `N·H·W` (biased variance,
/// two passes, `M = max(N·H·W, 1)`).
/// The batch statistics' denominator: the `N·H·W` elements per channel, 1 for an empty batch
/// (the reference's `max(count, 1)`, spec ops/norm.rs).
fn batch_count(n: usize, rest: usize) -> usize {
    (n * rest).max(1)
}

fn batch_stats<D: Device>(
    op: &'static str,
    x: &CudaTensor<D>,
    eps: f64,
) -> Result<(Buffer<D>, Buffer<D>)> {
    let (n, c, rest) = bn_dims(x.shape());
    let seg = Segments::per_channel(n, c, rest);
    let count = batch_count(n, rest);
    let mean = sum_into(
        op,
        &seg,
        Item::Value(x.mem()),
        Emit::Double { denom: count },
    )?;
    let item = Item::CentredSquare(x.mem(), mean.mem());
    let sigma = sum_into(op, &seg, item, Emit::Sigma { denom: count, eps })?;
    Ok((mean, sigma))
}

pub fn batch_norm_train<D: Device>(
    x: &CudaTensor<D>,
    gamma: &CudaTensor<D>,
    beta: &CudaTensor<D>,
    eps: f64,
) -> Result<CudaTensor<D>> {
    const OP: &str = "batch_norm_train";
    let (mean, sigma) = batch_stats(OP, x, eps)?;
    // tl_norm_bn_train(float* y, const float* x, const float* gamma, const float* beta,
    //   const float* mean, const float* sigma, ll total, ll c, ll rest)
    let channels = [gamma.mem(), beta.mem(), mean.mem(), sigma.mem()];
    per_channel_launch(OP, "tl_norm_bn_train", x, channels, None)
}

pub fn batch_norm_train_vjp<D: Device>(
    x: &CudaTensor<D>,
    gamma: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    eps: f64,
) -> Result<[CudaTensor<D>; 3]> {
    const OP: &str = "batch_norm_train_vjp";
    let [total, c, rest] = bn_indices(OP, x.shape())?;
    let (n, channels, r) = bn_dims(x.shape());
    let count = index(OP, "count", batch_count(n, r))?;
    let (mean, sigma) = batch_stats(OP, x, eps)?;
    let (sd, sdc) = channel_sums(OP, x, dy, &mean)?;
    let mut dx = Buffer::<D>::uninit(x.len())?;
    // tl_norm_bn_train_dx(float* dx, const float* x, const float* dy, const float* gamma,
    //   const float* mean, const float* sigma, const float* sd, const float* sdc, ll total,
    //   ll c, ll rest, ll count)
    launch_into(
        NORM.kernel("tl_norm_bn_train_dx"),
        Launch::for_items(x.len()),
        [&mut dx],
        [
            Arg::In(x.mem()),
            Arg::In(dy.mem()),
            Arg::In(gamma.mem()),
            Arg::In(mean.mem()),
            Arg::In(sigma.mem()),
            Arg::In(sd.mem()),
            Arg::In(sdc.mem()),
            Arg::Index(total),
            Arg::Index(c),
            Arg::Index(rest),
            Arg::Index(count),
        ],
    )?;
    let mut dgamma = Buffer::<D>::uninit(channels)?;
    let mut dbeta = Buffer::<D>::uninit(channels)?;
    // tl_norm_bn_train_grads(float* dgamma, float* dbeta, const float* sigma, const float* sd,
    //   const float* sdc, ll c)
    launch_into(
        NORM.kernel("tl_norm_bn_train_grads"),
        Launch::for_items(channels),
        [&mut dgamma, &mut dbeta],
        [
            Arg::In(sigma.mem()),
            Arg::In(sd.mem()),
            Arg::In(sdc.mem()),
            Arg::Index(c),
        ],
    )?;
    let cshape = Shape::from([channels]);
    Ok([
        CudaTensor::from_buffer(x.shape().clone(), dx)?,
        CudaTensor::from_buffer(cshape.clone(), dgamma)?,
        CudaTensor::from_buffer(cshape, dbeta)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_cover_every_element_once_and_skip_empty_axes() {
        let s = Shape::from([3, 4, 5]);
        assert_eq!(lines_of(&s, 0), (20, 3, 20));
        assert_eq!(lines_of(&s, 1), (15, 4, 5));
        assert_eq!(lines_of(&s, 2), (12, 5, 1));
        assert_eq!(lines_of(&Shape::from([2, 0]), 1), (0, 0, 1));
        assert_eq!(lines_of(&Shape::from([2, 0]), 0), (0, 2, 0));
    }

    #[test]
    fn suffix_rows_split_at_the_axis() {
        let s = Shape::from([2, 3, 4]);
        assert_eq!(suffix_rows(&s, 0), (1, 24));
        assert_eq!(suffix_rows(&s, 1), (2, 12));
        assert_eq!(suffix_rows(&s, 2), (6, 4));
        assert_eq!(suffix_rows(&Shape::from([3, 0]), 1), (0, 0));
        assert_eq!(suffix_rows(&Shape::from([0, 3]), 1), (0, 3));
    }

    #[test]
    fn batch_norm_dims_put_everything_after_the_channels_in_rest() {
        assert_eq!(bn_dims(&Shape::from([2, 3, 4, 5])), (2, 3, 20));
        assert_eq!(bn_dims(&Shape::from([4, 3])), (4, 3, 1));
        assert_eq!(bn_dims(&Shape::from([0, 3, 2, 2])), (0, 3, 4));
    }
}
