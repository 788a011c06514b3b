//! The norm family on the CUDA engine.

use crate::device::Device;
use crate::error::{CudaError, Result};
use crate::tensor::CudaTensor;
#[allow(unused_imports)]
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolSpec, Shape, UnaryOp};

pub fn softmax<D: Device>(_x: &CudaTensor<D>, _axis: usize, _log: bool) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "softmax" })
}

pub fn softmax_vjp<D: Device>(
    _y: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
    _axis: usize,
    _log: bool,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "softmax_vjp" })
}

pub fn layer_norm<D: Device>(_x: &CudaTensor<D>, _axis: usize, _eps: f64) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "layer_norm" })
}

pub fn layer_norm_vjp<D: Device>(
    _x: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
    _axis: usize,
    _eps: f64,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet {
        op: "layer_norm_vjp",
    })
}

pub fn batch_norm<D: Device>(_args: [&CudaTensor<D>; 5], _eps: f64) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "batch_norm" })
}

pub fn batch_norm_vjp<D: Device>(
    _x: &CudaTensor<D>,
    _gamma: &CudaTensor<D>,
    _mean: &CudaTensor<D>,
    _var: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
    _eps: f64,
) -> Result<[CudaTensor<D>; 5]> {
    Err(CudaError::NotYet {
        op: "batch_norm_vjp",
    })
}

pub fn batch_norm_train<D: Device>(
    _x: &CudaTensor<D>,
    _gamma: &CudaTensor<D>,
    _beta: &CudaTensor<D>,
    _eps: f64,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet {
        op: "batch_norm_train",
    })
}

pub fn batch_norm_train_vjp<D: Device>(
    _x: &CudaTensor<D>,
    _gamma: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
    _eps: f64,
) -> Result<[CudaTensor<D>; 3]> {
    Err(CudaError::NotYet {
        op: "batch_norm_train_vjp",
    })
}
