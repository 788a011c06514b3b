//! Deterministic randomness: every element is `torchlean_spec::ops::uniform_at(seed, key,
//! index)` (SplitMix64 keyed by the stream and the row-major index), so values do not depend
//! on the thread count or on how the tensor is split.

use crate::scalar::CpuScalar;
use crate::tensor::CpuTensor;
use crate::threads::par_rows;
use torchlean_spec::ops::uniform_at;
use torchlean_spec::Shape;

/// Cost of one element (three SplitMix64 rounds).
const COST: usize = 8;

pub(crate) fn rand_uniform<T: CpuScalar>(seed: u64, key: u64, shape: Shape) -> CpuTensor<T> {
    let mut out = CpuTensor::uninit(shape);
    par_rows(out.data_mut(), 1, COST, |first, dst| {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = T::from_f64(uniform_at(seed, key, (first + i) as u64));
        }
    });
    out
}

/// `1` where `keep_prob > u` (with `u` rounded to the engine's precision first), else `0`.
pub(crate) fn bernoulli_mask<T: CpuScalar>(
    seed: u64,
    key: u64,
    keep_prob: T,
    shape: Shape,
) -> CpuTensor<T> {
    let mut out = CpuTensor::uninit(shape);
    par_rows(out.data_mut(), 1, COST, |first, dst| {
        for (i, d) in dst.iter_mut().enumerate() {
            let u = T::from_f64(uniform_at(seed, key, (first + i) as u64));
            *d = if keep_prob > u { T::ONE } else { T::ZERO };
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::with_threads;

    #[test]
    fn streams_do_not_depend_on_the_thread_count() {
        let shape = Shape::from([300, 301]);
        let a: CpuTensor<f32> = with_threads(1, || rand_uniform(3, 4, shape.clone()));
        let b: CpuTensor<f32> = with_threads(2, || rand_uniform(3, 4, shape.clone()));
        assert!(a.bit_eq(&b));
        assert_eq!(a.as_slice()[17] as f64, uniform_at(3, 4, 17));
        let m: CpuTensor<f64> = bernoulli_mask(3, 4, 0.5, Shape::from([1000]));
        let kept: f64 = m.as_slice().iter().sum();
        assert!((400.0..600.0).contains(&kept));
    }

    #[test]
    fn a_cell_is_kept_only_when_the_keep_probability_exceeds_its_draw() {
        // keep_prob equal to element 0's draw: `keep_prob > u` drops it, as the reference does
        let u0 = uniform_at(3, 4, 0);
        let m: CpuTensor<f64> = bernoulli_mask(3, 4, u0, Shape::from([1]));
        assert_eq!(m.as_slice(), &[0.0]);
        let m: CpuTensor<f64> = bernoulli_mask(3, 4, u0 + 1e-9, Shape::from([1]));
        assert_eq!(m.as_slice(), &[1.0]);
    }
}
