//! The conv family on the CUDA engine.

use crate::device::Device;
use crate::error::{CudaError, Result};
use crate::tensor::CudaTensor;
#[allow(unused_imports)]
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolSpec, Shape, UnaryOp};

pub fn conv2d<D: Device>(
    _spec: &Conv2dSpec,
    _x: &CudaTensor<D>,
    _w: &CudaTensor<D>,
    _b: &CudaTensor<D>,
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "conv2d" })
}

pub fn conv2d_vjp<D: Device>(
    _spec: &Conv2dSpec,
    _x: &CudaTensor<D>,
    _w: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>, CudaTensor<D>)> {
    Err(CudaError::NotYet { op: "conv2d_vjp" })
}

#[allow(clippy::type_complexity)]
pub fn conv2d_vjp_for<D: Device>(
    _spec: &Conv2dSpec,
    _x: &CudaTensor<D>,
    _w: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
    _need_dx: bool,
) -> Result<(Option<CudaTensor<D>>, CudaTensor<D>, CudaTensor<D>)> {
    Err(CudaError::NotYet {
        op: "conv2d_vjp_for",
    })
}
