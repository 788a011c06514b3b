//! The elementwise family on the CUDA engine.

use crate::device::Device;
use crate::error::{CudaError, Result};
use crate::tensor::CudaTensor;
#[allow(unused_imports)]
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolSpec, Shape, UnaryOp};

pub fn unary<D: Device>(_op: UnaryOp, _x: &CudaTensor<D>) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "unary" })
}

pub fn unary_vjp<D: Device>(
    _op: UnaryOp,
    _x: Option<&CudaTensor<D>>,
    _y: Option<&CudaTensor<D>>,
    _dy: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "unary_vjp" })
}

pub fn binary<D: Device>(
    _op: BinaryOp,
    _a: &CudaTensor<D>,
    _b: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "binary" })
}

pub fn binary_vjp<D: Device>(
    _op: BinaryOp,
    _a: Option<&CudaTensor<D>>,
    _b: Option<&CudaTensor<D>>,
    _dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    Err(CudaError::NotYet { op: "binary_vjp" })
}

pub fn scale<D: Device>(_x: &CudaTensor<D>, _c: f64) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "scale" })
}

pub fn add_scalar<D: Device>(_x: &CudaTensor<D>, _c: f64) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "add_scalar" })
}

pub fn clamp<D: Device>(
    _x: &CudaTensor<D>,
    _min: Option<f64>,
    _max: Option<f64>,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "clamp" })
}

pub fn clamp_vjp<D: Device>(
    _x: &CudaTensor<D>,
    _dy: &CudaTensor<D>,
    _min: Option<f64>,
    _max: Option<f64>,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "clamp_vjp" })
}

pub fn relabel<D: Device>(_x: &CudaTensor<D>, _shape: &Shape) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "relabel" })
}
