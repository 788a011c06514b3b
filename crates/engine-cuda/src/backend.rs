//! The families (`torchlean_spec::Backend`) for `CudaTensor`: one line per method, each the
//! op's host logic in `ops::<family>` (argument lists, launch geometry, products), on the
//! kernels of `kernels/`; and host access to its data for optimizers (`TrainValue`).

use crate::device::Device;
use crate::error::CudaError;
use crate::ops;
use crate::tensor::CudaTensor;
use std::borrow::Cow;
use torchlean_runtime::{RuntimeError, TrainValue, UpdateRule};
use torchlean_spec::backend::compose;
use torchlean_spec::{
    BinaryOp, Conv2dSpec, ConvPool, Elementwise, EngineValue, Layout, Linalg, Norm, PoolSpec,
    Random, Reduce, Shape, UnaryOp,
};

/// A pair of results (two operands' gradients).
type Pair<D> = Result<(CudaTensor<D>, CudaTensor<D>), CudaError>;
/// One gradient per operand of a batch norm.
type Grads<D, const N: usize> = Result<[CudaTensor<D>; N], CudaError>;

impl<D: Device> EngineValue for CudaTensor<D> {
    type Error = CudaError;

    fn shape_of(&self) -> &Shape {
        self.shape()
    }
    fn values_f64(x: &Self) -> Result<Vec<f64>, CudaError> {
        ops::reduce::values_f64(x)
    }
}

impl<D: Device> Elementwise for CudaTensor<D> {
    fn unary(op: UnaryOp, x: &Self) -> Result<Self, CudaError> {
        ops::elementwise::unary(op, x)
    }
    fn unary_vjp(
        op: UnaryOp,
        x: Option<&Self>,
        y: Option<&Self>,
        dy: &Self,
    ) -> Result<Self, CudaError> {
        ops::elementwise::unary_vjp(op, x, y, dy)
    }
    fn binary(op: BinaryOp, a: &Self, b: &Self) -> Result<Self, CudaError> {
        ops::elementwise::binary(op, a, b)
    }
    fn binary_vjp(op: BinaryOp, a: Option<&Self>, b: Option<&Self>, dy: &Self) -> Pair<D> {
        ops::elementwise::binary_vjp(op, a, b, dy)
    }
    fn scale(x: &Self, c: f64) -> Result<Self, CudaError> {
        ops::elementwise::scale(x, c)
    }
    fn add_scalar(x: &Self, c: f64) -> Result<Self, CudaError> {
        ops::elementwise::add_scalar(x, c)
    }
    fn clamp(x: &Self, min: Option<f64>, max: Option<f64>) -> Result<Self, CudaError> {
        ops::elementwise::clamp(x, min, max)
    }
    fn clamp_vjp(
        x: &Self,
        dy: &Self,
        min: Option<f64>,
        max: Option<f64>,
    ) -> Result<Self, CudaError> {
        ops::elementwise::clamp_vjp(x, dy, min, max)
    }
}

impl<D: Device> Layout for CudaTensor<D> {
    fn relabel(x: &Self, shape: &Shape) -> Result<Self, CudaError> {
        ops::elementwise::relabel(x, shape)
    }
    fn broadcast(x: &Self, out: &Shape) -> Result<Self, CudaError> {
        ops::layout::broadcast(x, out)
    }
    fn broadcast_vjp(dy: &Self, from: &Shape) -> Result<Self, CudaError> {
        ops::layout::broadcast_vjp(dy, from)
    }
    fn permute(x: &Self, perm: &[usize], out: &Shape) -> Result<Self, CudaError> {
        ops::layout::permute(x, perm, out)
    }
    fn slice(x: &Self, axis: usize, start: usize, out: &Shape) -> Result<Self, CudaError> {
        ops::layout::slice(x, axis, start, out)
    }
    fn slice_vjp(
        dy: &Self,
        in_shape: &Shape,
        axis: usize,
        start: usize,
    ) -> Result<Self, CudaError> {
        ops::layout::slice_vjp(dy, in_shape, axis, start)
    }
    fn concat(args: &[&Self], axis: usize, out: &Shape) -> Result<Self, CudaError> {
        ops::layout::concat(args, axis, out)
    }
    fn concat_vjp(dy: &Self, shapes: &[Shape], axis: usize) -> Result<Vec<Self>, CudaError> {
        ops::layout::concat_vjp(dy, shapes, axis)
    }
    fn gather_rows(table: &Self, ids: &[usize], out: &Shape) -> Result<Self, CudaError> {
        ops::layout::gather_rows(table, ids, out)
    }
    fn gather_rows_vjp(dy: &Self, ids: &[usize], table: &Shape) -> Result<Self, CudaError> {
        ops::layout::gather_rows_vjp(dy, ids, table)
    }
    fn constant(values: &[f64], out: &Shape) -> Result<Self, CudaError> {
        let host: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        CudaTensor::from_host(out.clone(), &host)
    }
}

impl<D: Device> Reduce for CudaTensor<D> {
    fn reduce_axis(x: &Self, axis: usize, mean: bool, out: &Shape) -> Result<Self, CudaError> {
        ops::reduce::reduce_axis(x, axis, mean, out)
    }
    fn spread(dy: &Self, in_shape: &Shape, axis: usize, mean: bool) -> Result<Self, CudaError> {
        ops::reduce::spread(dy, in_shape, axis, mean)
    }
    fn sum_all(x: &Self) -> Result<Self, CudaError> {
        ops::reduce::sum_all(x)
    }
    fn sum_all_vjp(dy: &Self, in_shape: &Shape) -> Result<Self, CudaError> {
        ops::reduce::sum_all_vjp(dy, in_shape)
    }
    fn mse_loss(y: &Self, t: &Self) -> Result<Self, CudaError> {
        ops::reduce::mse_loss(y, t)
    }
    fn mse_loss_vjp(y: &Self, t: &Self, dy: &Self) -> Pair<D> {
        ops::reduce::mse_loss_vjp(y, t, dy)
    }
    fn cross_entropy(logits: &Self, target: &[usize], mean: bool) -> Result<Self, CudaError> {
        ops::reduce::cross_entropy(logits, target, mean)
    }
    fn cross_entropy_vjp(
        logits: &Self,
        target: &[usize],
        dy: &Self,
        mean: bool,
    ) -> Result<Self, CudaError> {
        ops::reduce::cross_entropy_vjp(logits, target, dy, mean)
    }
}

impl<D: Device> Norm for CudaTensor<D> {
    fn softmax(x: &Self, axis: usize, log: bool) -> Result<Self, CudaError> {
        ops::norm::softmax(x, axis, log)
    }
    fn softmax_vjp(y: &Self, dy: &Self, axis: usize, log: bool) -> Result<Self, CudaError> {
        ops::norm::softmax_vjp(y, dy, axis, log)
    }
    fn layer_norm(x: &Self, axis: usize, eps: f64) -> Result<Self, CudaError> {
        ops::norm::layer_norm(x, axis, eps)
    }
    fn layer_norm_vjp(x: &Self, dy: &Self, axis: usize, eps: f64) -> Result<Self, CudaError> {
        ops::norm::layer_norm_vjp(x, dy, axis, eps)
    }
    fn batch_norm(args: [&Self; 5], eps: f64) -> Result<Self, CudaError> {
        ops::norm::batch_norm(args, eps)
    }
    fn batch_norm_vjp(saved: [&Self; 4], dy: &Self, eps: f64) -> Grads<D, 5> {
        let [x, gamma, mean, var] = saved;
        ops::norm::batch_norm_vjp(x, gamma, mean, var, dy, eps)
    }
    fn batch_norm_train(x: &Self, gamma: &Self, beta: &Self, eps: f64) -> Result<Self, CudaError> {
        ops::norm::batch_norm_train(x, gamma, beta, eps)
    }
    fn batch_norm_train_vjp(saved: [&Self; 2], dy: &Self, eps: f64) -> Grads<D, 3> {
        let [x, gamma] = saved;
        ops::norm::batch_norm_train_vjp(x, gamma, dy, eps)
    }
}

impl<D: Device> Linalg for CudaTensor<D> {
    fn matmul(a: &Self, b: &Self, out: &Shape) -> Result<Self, CudaError> {
        ops::linalg::matmul(a, b, out)
    }
    fn matmul_vjp(a: &Self, b: &Self, dy: &Self) -> Pair<D> {
        ops::linalg::matmul_vjp(a, b, dy)
    }
    fn linear(x: &Self, w: &Self, b: &Self, out: &Shape) -> Result<Self, CudaError> {
        ops::linalg::linear(x, w, b, out)
    }
    fn linear_vjp(x: &Self, w: &Self, dy: &Self) -> Result<(Self, Self, Self), CudaError> {
        ops::linalg::linear_vjp(x, w, dy)
    }
    #[allow(clippy::type_complexity)]
    fn linear_vjp_for(
        x: &Self,
        w: &Self,
        dy: &Self,
        need_dx: bool,
    ) -> Result<(Option<Self>, Self, Self), CudaError> {
        ops::linalg::linear_vjp_for(x, w, dy, need_dx)
    }
}

impl<D: Device> ConvPool for CudaTensor<D> {
    fn conv2d(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        b: &Self,
        out: &Shape,
    ) -> Result<Self, CudaError> {
        // the patch kernels take one group without dilation; other convolutions are composed
        if !spec.is_ungrouped_undilated() {
            return compose::grouped_conv2d(spec, x, w, b, out);
        }
        ops::conv::conv2d(spec, x, w, b, out)
    }
    fn conv2d_vjp(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        dy: &Self,
    ) -> Result<(Self, Self, Self), CudaError> {
        if !spec.is_ungrouped_undilated() {
            let (dx, dw, db) = compose::grouped_conv2d_vjp(spec, x, w, dy, true)?;
            return Ok((dx.expect("dx is computed when asked for"), dw, db));
        }
        ops::conv::conv2d_vjp(spec, x, w, dy)
    }
    #[allow(clippy::type_complexity)]
    fn conv2d_vjp_for(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        dy: &Self,
        need_dx: bool,
    ) -> Result<(Option<Self>, Self, Self), CudaError> {
        if !spec.is_ungrouped_undilated() {
            return compose::grouped_conv2d_vjp(spec, x, w, dy, need_dx);
        }
        ops::conv::conv2d_vjp_for(spec, x, w, dy, need_dx)
    }
    fn pool(spec: &PoolSpec, x: &Self, out: &Shape) -> Result<Self, CudaError> {
        ops::pool::pool(spec, x, out)
    }
    fn max_pool_vjp(spec: &PoolSpec, x: &Self, dy: &Self) -> Result<Self, CudaError> {
        ops::pool::max_pool_vjp(spec, x, dy)
    }
    fn avg_pool_vjp(spec: &PoolSpec, in_shape: &Shape, dy: &Self) -> Result<Self, CudaError> {
        ops::pool::avg_pool_vjp(spec, in_shape, dy)
    }
}

impl<D: Device> Random for CudaTensor<D> {
    fn rand_uniform(seed: u64, key: u64, out: &Shape) -> Result<Self, CudaError> {
        ops::random::rand_uniform(seed, key, out)
    }
    fn bernoulli_mask(
        seed: u64,
        key: u64,
        keep_prob: &Self,
        out: &Shape,
    ) -> Result<Self, CudaError> {
        ops::random::bernoulli_mask(seed, key, keep_prob, out)
    }
}

/// The CUDA engine (on the GPU or its host emulation). An optimizer step runs on the device
/// ([`TrainValue::apply_update`]: one kernel per parameter, in place), so parameters and
/// optimizer state never cross to the host while training, nor does gradient clipping
/// ([`TrainValue::clip_to_norm`]); a step's loss and norm come down together
/// ([`TrainValue::scalars`]). `update_all` (a checkpoint restore, a data-parallel all-reduce)
/// downloads, updates on the host and uploads; every new buffer is uploaded before any value
/// is replaced, so a failed upload (device out of memory) leaves every value
/// as it was, and each replaced buffer is freed by the assignment.
impl<D: Device> TrainValue for CudaTensor<D> {
    type Elem = f32;

    fn read(&self) -> Result<Cow<'_, [f32]>, RuntimeError> {
        Ok(Cow::Owned(self.to_host()?))
    }

    fn update_all<R, E: From<RuntimeError>>(
        values: &mut [&mut Self],
        f: impl FnOnce(&mut [&mut [f32]]) -> Result<R, E>,
    ) -> Result<R, E> {
        let mut host: Vec<Vec<f32>> = values
            .iter()
            .map(|v| v.to_host().map_err(RuntimeError::from))
            .collect::<Result<_, _>>()?;
        let mut slices: Vec<&mut [f32]> = host.iter_mut().map(Vec::as_mut_slice).collect();
        let r = f(&mut slices)?;
        let uploaded: Vec<Self> = values
            .iter()
            .zip(&host)
            .map(|(v, data)| {
                CudaTensor::from_host(v.shape().clone(), data).map_err(RuntimeError::from)
            })
            .collect::<Result<_, _>>()?;
        for (v, new) in values.iter_mut().zip(uploaded) {
            **v = new;
        }
        Ok(r)
    }

    fn apply_update(
        rule: &UpdateRule,
        value: &mut Self,
        grad: &Self,
        buffers: &mut [&mut Self],
    ) -> Result<(), RuntimeError> {
        Ok(ops::optim::apply_update(rule, value, grad, buffers)?)
    }

    fn clip_to_norm(grads: &mut [&mut Self], max_norm: Option<f64>) -> Result<Self, RuntimeError> {
        Ok(ops::optim::clip_to_norm(grads, max_norm)?)
    }

    fn scalars(values: &[&Self]) -> Result<Vec<f64>, RuntimeError> {
        Ok(ops::optim::scalars(values)?)
    }
}
