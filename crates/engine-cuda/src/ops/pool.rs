//! The pool family on the CUDA engine.

use crate::device::Device;
use crate::error::{CudaError, Result};
use crate::tensor::CudaTensor;
#[allow(unused_imports)]
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolSpec, Shape, UnaryOp};

pub fn pool<D: Device>(
    _spec: &PoolSpec,
    _x: &CudaTensor<D>,
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "pool" })
}

pub fn max_pool_vjp<D: Device>(
    _spec: &PoolSpec,
    _x: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "max_pool_vjp" })
}

pub fn avg_pool_vjp<D: Device>(
    _spec: &PoolSpec,
    _in_shape: &Shape,
    _dy: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "avg_pool_vjp" })
}
