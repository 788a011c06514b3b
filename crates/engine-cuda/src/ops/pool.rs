//! The pool family on the CUDA engine: max and average pooling over the last two axes, one
//! thread per output; their VJPs gather (one thread per input cell over the windows holding
//! it, in output order), so no cell has two writers and no atomics are needed.

use super::launch_new;
use crate::device::{Arg, Device};
use crate::error::Result;
use crate::geometry::{index, Launch};
use crate::kernels::POOL;
use crate::tensor::CudaTensor;
use torchlean_spec::{PoolKind, PoolSpec, Shape};

/// The geometry of a pooling over a validated `[C, H, W]` or `[N, C, H, W]` input, as the
/// kernels take it: `[planes, h, w, ho, wo, kh, kw, stride, pad]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGeometry {
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    pub ho: usize,
    pub wo: usize,
}

impl PoolGeometry {
    /// The planes (every axis before the last two) and the spatial sizes in and out (the
    /// spec's output rule, [`PoolSpec::output_hw`]).
    pub fn of(spec: &PoolSpec, input: &Shape) -> Result<PoolGeometry> {
        let d = input.dims();
        let (h, w) = (d[d.len() - 2], d[d.len() - 1]);
        let planes = d[..d.len() - 2].iter().product();
        let (ho, wo) = spec.output_hw(h, w)?;
        Ok(PoolGeometry {
            planes,
            h,
            w,
            ho,
            wo,
        })
    }

    /// The nine geometry arguments, in the kernels' order.
    fn args<'a, D: Device>(&self, op: &'static str, spec: &PoolSpec) -> Result<[Arg<'a, D>; 9]> {
        Ok([
            Arg::Index(index(op, "planes", self.planes)?),
            Arg::Index(index(op, "H", self.h)?),
            Arg::Index(index(op, "W", self.w)?),
            Arg::Index(index(op, "Ho", self.ho)?),
            Arg::Index(index(op, "Wo", self.wo)?),
            Arg::Index(index(op, "kH", spec.kernel_h)?),
            Arg::Index(index(op, "kW", spec.kernel_w)?),
            Arg::Index(index(op, "stride", spec.stride)?),
            Arg::Index(index(op, "padding", spec.padding)?),
        ])
    }

    fn outputs(&self) -> usize {
        self.planes * self.ho * self.wo
    }

    fn inputs(&self) -> usize {
        self.planes * self.h * self.w
    }
}

/// The average's divisor `kH·kW` (the spec's) as the kernels' `unsigned long long`.
fn area(spec: &PoolSpec) -> Result<u64> {
    // usize is at most 64 bits on every target the engine builds for
    Ok(spec.divisor()? as u64)
}

pub fn pool<D: Device>(spec: &PoolSpec, x: &CudaTensor<D>, out: &Shape) -> Result<CudaTensor<D>> {
    let op = spec.name();
    let g = PoolGeometry::of(spec, x.shape())?;
    let n = g.outputs();
    let mut args = vec![Arg::In(x.mem())];
    args.extend(g.args(op, spec)?);
    let kernel = match spec.kind {
        // tl_pool_max(float* y, const float* x, ll planes, ll h, ll w, ll ho, ll wo, ll kh,
        //   ll kw, ll stride, ll pad)
        PoolKind::Max => "tl_pool_max",
        // tl_pool_avg(float* y, const float* x, ll planes, ll h, ll w, ll ho, ll wo, ll kh,
        //   ll kw, ll stride, ll pad, ull area)
        PoolKind::Avg => {
            args.push(Arg::U64(area(spec)?));
            "tl_pool_avg"
        }
    };
    launch_new(POOL.kernel(kernel), Launch::for_items(n), out.clone(), args)
}

pub fn max_pool_vjp<D: Device>(
    spec: &PoolSpec,
    x: &CudaTensor<D>,
    dy: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    let op = spec.name();
    let g = PoolGeometry::of(spec, x.shape())?;
    let n = g.inputs();
    // tl_pool_max_vjp(float* dx, const float* x, const float* dy, ll planes, ll h, ll w,
    //   ll ho, ll wo, ll kh, ll kw, ll stride, ll pad)
    let mut args = vec![Arg::In(x.mem()), Arg::In(dy.mem())];
    args.extend(g.args(op, spec)?);
    launch_new(
        POOL.kernel("tl_pool_max_vjp"),
        Launch::for_items(n),
        x.shape().clone(),
        args,
    )
}

pub fn avg_pool_vjp<D: Device>(
    spec: &PoolSpec,
    in_shape: &Shape,
    dy: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    let op = spec.name();
    let g = PoolGeometry::of(spec, in_shape)?;
    let n = g.inputs();
    // tl_pool_avg_vjp(float* dx, const float* dy, ll planes, ll h, ll w, ll ho, ll wo, ll kh,
    //   ll kw, ll stride, ll pad, ull area)
    let mut args = vec![Arg::In(dy.mem())];
    args.extend(g.args(op, spec)?);
    args.push(Arg::U64(area(spec)?));
    launch_new(
        POOL.kernel("tl_pool_avg_vjp"),
        Launch::for_items(n),
        in_shape.clone(),
        args,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: PoolKind, k: usize, stride: usize, padding: usize) -> PoolSpec {
        PoolSpec {
            kind,
            kernel_h: k,
            kernel_w: k,
            stride,
            padding,
            padded: padding > 0,
        }
    }

    #[test]
    fn planes_are_every_axis_before_the_last_two() {
        let s = spec(PoolKind::Max, 2, 2, 0);
        let g = PoolGeometry::of(&s, &Shape::from([2, 3, 7, 6])).unwrap();
        assert_eq!(
            g,
            PoolGeometry {
                planes: 6,
                h: 7,
                w: 6,
                ho: 3,
                wo: 3
            }
        );
        let g = PoolGeometry::of(&s, &Shape::from([3, 4, 4])).unwrap();
        assert_eq!((g.planes, g.ho, g.wo), (3, 2, 2));
        assert_eq!((g.inputs(), g.outputs()), (48, 12));
    }

    #[test]
    fn a_bad_spec_is_the_spec_error_naming_the_attribute() {
        let e =
            PoolGeometry::of(&spec(PoolKind::Avg, 0, 1, 0), &Shape::from([1, 2, 2])).unwrap_err();
        assert!(e.to_string().contains("kH"), "{e}");
    }
}
