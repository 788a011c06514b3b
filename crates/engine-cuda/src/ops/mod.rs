//! Each op family's host logic: validated operands in (the dispatch in `torchlean_spec::Op`
//! checked them), output buffers allocated, kernels launched or products described.

pub mod conv;
pub mod elementwise;
pub mod layout;
pub mod linalg;
pub mod norm;
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

/// The common launch: a new tensor of `shape` that one launch of `kernel` writes whole. Its
/// fresh buffer is the kernel's first argument (`float* y`), `args` the rest.
pub(crate) fn launch_new<'a, D: Device>(
    kernel: Kernel,
    launch: Launch,
    shape: Shape,
    args: impl IntoIterator<Item = Arg<'a, D>>,
) -> Result<CudaTensor<D>> {
    let mut out = Buffer::<D>::uninit(shape.checked_size()?)?;
    let mut all = vec![Arg::Out(out.mem_mut())];
    for arg in args {
        // each argument's borrow shortened to the output's (`extend` would not)
        all.push(arg);
    }
    D::launch(kernel, launch, &mut all)?;
    drop(all);
    CudaTensor::from_buffer(shape, out)
}
