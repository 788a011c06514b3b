//! Each op family's host logic: validated operands in (the dispatch in `torchlean_spec::Op`
//! checked them), output buffers allocated, kernels launched or products described.

pub mod conv;
pub mod elementwise;
pub mod layout;
pub mod linalg;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod random;
pub mod reduce;

use crate::buffer::Buffer;
use crate::device::{Arg, Device};
use crate::error::Result;
use crate::geometry::Launch;
use crate::kernels::Kernel;
use crate::tensor::CudaTensor;
use torchlean_spec::Shape;

/// One launch of `kernel` writing `outs` (its first arguments, a `float*` each, in order);
/// `args` are the rest. Nothing is launched when every output is empty (a grid-stride kernel
/// would write nothing). Every launch of the engine's ops goes through here.
pub(crate) fn launch_into<'a, 'b, D: Device>(
    kernel: Kernel,
    launch: Launch,
    outs: impl IntoIterator<Item = &'b mut Buffer<D>>,
    args: impl IntoIterator<Item = Arg<'a, D>>,
) -> Result<()> {
    let mut all = Vec::new();
    let mut writes = false;
    for out in outs {
        writes |= !out.is_empty();
        all.push(Arg::Out(out.mem_mut()));
    }
    for arg in args {
        // each argument's borrow shortened to the outputs' (`extend` would not)
        all.push(arg);
    }
    if writes {
        D::launch(kernel, launch, &mut all)?;
    }
    Ok(())
}

/// The common launch: a new tensor of `shape` that one launch of `kernel` writes whole. Its
/// fresh buffer is the kernel's first argument (`float* y`), `args` the rest.
pub(crate) fn launch_new<'a, D: Device>(
    kernel: Kernel,
    launch: Launch,
    shape: Shape,
    args: impl IntoIterator<Item = Arg<'a, D>>,
) -> Result<CudaTensor<D>> {
    let mut out = Buffer::<D>::uninit(shape.checked_size()?)?;
    launch_into(kernel, launch, [&mut out], args)?;
    CudaTensor::from_buffer(shape, out)
}

/// [`launch_new`] for a kernel with two outputs (`float* a, float* b`, then `args`), new
/// tensors of the two shapes.
pub(crate) fn launch_new2<'a, D: Device>(
    kernel: Kernel,
    launch: Launch,
    [sa, sb]: [Shape; 2],
    args: impl IntoIterator<Item = Arg<'a, D>>,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    let mut a = Buffer::<D>::uninit(sa.checked_size()?)?;
    let mut b = Buffer::<D>::uninit(sb.checked_size()?)?;
    launch_into(kernel, launch, [&mut a, &mut b], args)?;
    Ok((
        CudaTensor::from_buffer(sa, a)?,
        CudaTensor::from_buffer(sb, b)?,
    ))
}
