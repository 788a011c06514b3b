//! The layout family on the CUDA engine.

use crate::device::Device;
use crate::error::{CudaError, Result};
use crate::tensor::CudaTensor;
#[allow(unused_imports)]
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolSpec, Shape, UnaryOp};

pub fn broadcast<D: Device>(_x: &CudaTensor<D>, _out: &Shape) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "broadcast" })
}

pub fn broadcast_vjp<D: Device>(_dy: &CudaTensor<D>, _from: &Shape) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet {
        op: "broadcast_vjp",
    })
}

pub fn permute<D: Device>(
    _x: &CudaTensor<D>,
    _perm: &[usize],
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "permute" })
}

pub fn slice<D: Device>(
    _x: &CudaTensor<D>,
    _axis: usize,
    _start: usize,
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "slice" })
}

pub fn slice_vjp<D: Device>(
    _dy: &CudaTensor<D>,
    _in_shape: &Shape,
    _axis: usize,
    _start: usize,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "slice_vjp" })
}

pub fn concat<D: Device>(
    _args: &[&CudaTensor<D>],
    _axis: usize,
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "concat" })
}

pub fn concat_vjp<D: Device>(
    _dy: &CudaTensor<D>,
    _shapes: &[Shape],
    _axis: usize,
) -> Result<Vec<CudaTensor<D>>> {
    Err(CudaError::NotYet { op: "concat_vjp" })
}
