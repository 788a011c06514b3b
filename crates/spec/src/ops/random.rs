//! Deterministic randomness: SplitMix64 keyed by `(seed, key)` (the IR uses the node id as
//! key) and the row-major element index. Values are `u / 2^24` with `u` the top 24 bits, so
//! they are exact in `f32`, `f64` and the rationals and always in `[0, 1)`.

use crate::error::Result;
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::{collect_exact, Tensor};

/// One SplitMix64 step (Steele, Lea, Flood 2014).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The uniform value of element `index` of the stream `(seed, key)`.
pub fn uniform_at(seed: u64, key: u64, index: u64) -> f64 {
    let stream = splitmix64(seed ^ splitmix64(key));
    let u = splitmix64(stream.wrapping_add(index)) >> 40;
    u as f64 / (1u64 << 24) as f64
}

pub(crate) fn rand_uniform<A: Scalar>(seed: u64, key: u64, shape: &Shape) -> Result<Tensor<A>> {
    let n = shape.checked_size()?;
    let data = collect_exact(
        n,
        (0..n as u64).map(|i| A::from_f64(uniform_at(seed, key, i))),
    )?;
    Tensor::new(shape.clone(), data)
}

pub(crate) fn bernoulli_mask<A: Scalar>(
    seed: u64,
    key: u64,
    shape: &Shape,
    keep_prob: &A,
) -> Result<Tensor<A>> {
    let n = shape.checked_size()?;
    let keep = |i| {
        let u = A::from_f64(uniform_at(seed, key, i))?;
        Ok(if keep_prob.greater(&u) {
            A::one()
        } else {
            A::zero()
        })
    };
    let data = collect_exact(n, (0..n as u64).map(keep))?;
    Tensor::new(shape.clone(), data)
}
