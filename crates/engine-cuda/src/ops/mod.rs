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
