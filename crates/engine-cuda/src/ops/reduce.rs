//! The reduce family on the CUDA engine.

use crate::device::Device;
use crate::error::{CudaError, Result};
use crate::tensor::CudaTensor;
#[allow(unused_imports)]
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolSpec, Shape, UnaryOp};

pub fn reduce_axis<D: Device>(
    _x: &CudaTensor<D>,
    _axis: usize,
    _mean: bool,
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "reduce_axis" })
}

pub fn spread<D: Device>(
    _dy: &CudaTensor<D>,
    _in_shape: &Shape,
    _axis: usize,
    _mean: bool,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "spread" })
}

pub fn sum_all<D: Device>(_x: &CudaTensor<D>) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "sum_all" })
}

pub fn sum_all_vjp<D: Device>(_dy: &CudaTensor<D>, _in_shape: &Shape) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "sum_all_vjp" })
}

pub fn mse_loss<D: Device>(_y: &CudaTensor<D>, _t: &CudaTensor<D>) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "mse_loss" })
}

pub fn mse_loss_vjp<D: Device>(
    _y: &CudaTensor<D>,
    _t: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    Err(CudaError::NotYet { op: "mse_loss_vjp" })
}

pub fn cross_entropy<D: Device>(
    _logits: &CudaTensor<D>,
    _target: &[usize],
    _mean: bool,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet {
        op: "cross_entropy",
    })
}

pub fn cross_entropy_vjp<D: Device>(
    _logits: &CudaTensor<D>,
    _target: &[usize],
    _dy: &CudaTensor<D>,
    _mean: bool,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet {
        op: "cross_entropy_vjp",
    })
}

/// The elements as `f64` (exact: every `f32` is an `f64`); small operands only.
pub fn values_f64<D: Device>(x: &CudaTensor<D>) -> Result<Vec<f64>> {
    Ok(x.to_host()?.into_iter().map(f64::from).collect())
}
