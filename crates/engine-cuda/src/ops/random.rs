//! The random family on the CUDA engine: every element is
//! `torchlean_spec::ops::uniform_at(seed, key, index)` rounded to `f32`, computed on the device
//! by the same SplitMix64 integer arithmetic (`kernels/random.cu`), so values equal the
//! reference's bit for bit and do not depend on the launch geometry.

use super::launch_new;
use crate::device::{Arg, Device};
use crate::error::{CudaError, Result};
use crate::geometry::{index, Launch};
use crate::kernels::RANDOM;
use crate::tensor::CudaTensor;
use torchlean_spec::ops::desc;
use torchlean_spec::{Shape, SpecError};

pub fn rand_uniform<D: Device>(seed: u64, key: u64, out: &Shape) -> Result<CudaTensor<D>> {
    let n = out.checked_size()?;
    // tl_rand_uniform(float* y, unsigned long long seed, unsigned long long key, long long n)
    launch_new(
        RANDOM.kernel("tl_rand_uniform"),
        Launch::for_items(n),
        out.clone(),
        [
            Arg::U64(seed),
            Arg::U64(key),
            Arg::Index(index(desc::RAND_UNIFORM.name, "n", n)?),
        ],
    )
}

/// `1` where `keep_prob > u` (`u` rounded to `f32` first), else `0`; `keep_prob` is a scalar
/// tensor read by the kernel on the device.
pub fn bernoulli_mask<D: Device>(
    seed: u64,
    key: u64,
    keep_prob: &CudaTensor<D>,
    out: &Shape,
) -> Result<CudaTensor<D>> {
    const OP: &str = desc::BERNOULLI_MASK.name;
    if keep_prob.len() != 1 {
        return Err(CudaError::Spec(SpecError::OpShape {
            op: OP,
            shapes: vec![keep_prob.shape().clone()],
            reason: "keep_prob must be a single value".into(),
        }));
    }
    let n = out.checked_size()?;
    // tl_rand_bernoulli(float* y, const float* keep_prob, unsigned long long seed,
    //                   unsigned long long key, long long n)
    launch_new(
        RANDOM.kernel("tl_rand_bernoulli"),
        Launch::for_items(n),
        out.clone(),
        [
            Arg::In(keep_prob.mem()),
            Arg::U64(seed),
            Arg::U64(key),
            Arg::Index(index(OP, "n", n)?),
        ],
    )
}
