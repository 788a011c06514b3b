//! The linalg family on the CUDA engine.

use crate::device::Device;
use crate::error::{CudaError, Result};
use crate::tensor::CudaTensor;
#[allow(unused_imports)]
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolSpec, Shape, UnaryOp};

pub fn matmul<D: Device>(
    _a: &CudaTensor<D>,
    _b: &CudaTensor<D>,
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "matmul" })
}

pub fn matmul_vjp<D: Device>(
    _a: &CudaTensor<D>,
    _b: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    Err(CudaError::NotYet { op: "matmul_vjp" })
}

pub fn linear<D: Device>(
    _x: &CudaTensor<D>,
    _w: &CudaTensor<D>,
    _b: &CudaTensor<D>,
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "linear" })
}

pub fn linear_vjp<D: Device>(
    _x: &CudaTensor<D>,
    _w: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>, CudaTensor<D>)> {
    Err(CudaError::NotYet { op: "linear_vjp" })
}

#[allow(clippy::type_complexity)]
pub fn linear_vjp_for<D: Device>(
    _x: &CudaTensor<D>,
    _w: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
    _need_dx: bool,
) -> Result<(Option<CudaTensor<D>>, CudaTensor<D>, CudaTensor<D>)> {
    Err(CudaError::NotYet {
        op: "linear_vjp_for",
    })
}
