//! The random family on the CUDA engine.

use crate::device::Device;
use crate::error::{CudaError, Result};
use crate::tensor::CudaTensor;
#[allow(unused_imports)]
use torchlean_spec::{BinaryOp, Conv2dSpec, PoolSpec, Shape, UnaryOp};

pub fn rand_uniform<D: Device>(_seed: u64, _key: u64, _out: &Shape) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet { op: "rand_uniform" })
}

pub fn bernoulli_mask<D: Device>(
    _seed: u64,
    _key: u64,
    _keep_prob: &CudaTensor<D>,
    _out: &Shape,
) -> Result<CudaTensor<D>> {
    Err(CudaError::NotYet {
        op: "bernoulli_mask",
    })
}
