//! Launch geometry: how many blocks of how many threads a kernel launch uses. Plain Rust, tested
//! on the CPU.
//!
//! Every kernel is one-dimensional with a grid-stride loop (see `kernels`), so any geometry
//! covers any size; the geometry only decides how the work spreads over the device.

use crate::error::{CudaError, Result};

/// Threads per block for element-parallel kernels.
pub const BLOCK: u32 = 256;

/// The most blocks a launch uses: enough to fill an H200 (132 SMs × 16 blocks of 256) several
/// times; larger sizes loop inside the kernel.
pub const MAX_GRID: u32 = 132 * 16 * 4;

/// A one-dimensional launch: `grid` blocks of `block` threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub grid: u32,
    pub block: u32,
}

impl Launch {
    /// One thread per item (elements, rows, output cells) for `n` items, capped at
    /// [`MAX_GRID`] blocks; at least one block, so a launch over zero items is valid (and does
    /// nothing).
    pub fn for_items(n: usize) -> Launch {
        let blocks = n.div_ceil(BLOCK as usize).clamp(1, MAX_GRID as usize);
        Launch {
            grid: blocks as u32,
            block: BLOCK,
        }
    }

    /// The number of threads launched.
    pub fn threads(&self) -> u64 {
        u64::from(self.grid) * u64::from(self.block)
    }
}

/// `n` as a kernel's `long long` size, or an error naming `op` and `what`.
pub fn index(op: &'static str, what: &'static str, n: usize) -> Result<i64> {
    i64::try_from(n).map_err(|_| CudaError::TooLarge {
        op,
        what,
        value: n,
        limit: "signed 64-bit index",
    })
}

/// Validated ids (class ids, row ids) as the `long long` table a kernel reads.
pub fn index_table(op: &'static str, what: &'static str, ids: &[usize]) -> Result<Vec<i64>> {
    ids.iter().map(|&i| index(op, what, i)).collect()
}

/// `n` as a cuBLAS `int` dimension, or an error naming `op` and `what`.
pub fn blas_dim(op: &'static str, what: &'static str, n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| CudaError::TooLarge {
        op,
        what,
        value: n,
        limit: "32-bit cuBLAS dimension",
    })
}

/// Row-major strides of `dims` (the last axis has stride 1; a scalar has none).
pub fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; dims.len()];
    let mut s = 1usize;
    for (st, &d) in strides.iter_mut().zip(dims).rev() {
        *st = s;
        s = s.saturating_mul(d);
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grid-stride loop of the kernels, run on the host: which indices a launch visits.
    fn visits(launch: Launch, n: usize) -> Vec<u32> {
        let mut count = vec![0u32; n];
        let stride = launch.threads() as usize;
        for t in 0..launch.threads() as usize {
            let mut i = t;
            while i < n {
                count[i] += 1;
                i += stride;
            }
        }
        count
    }

    #[test]
    fn a_launch_visits_every_index_exactly_once() {
        for n in [0, 1, 255, 256, 257, 1000, 70_000] {
            let l = Launch::for_items(n);
            assert!(l.grid >= 1 && l.grid <= MAX_GRID, "{n}: {l:?}");
            assert!(visits(l, n).iter().all(|&c| c == 1), "{n}: {l:?}");
        }
    }

    #[test]
    fn large_sizes_are_capped_and_loop_inside_the_kernel() {
        let l = Launch::for_items(1 << 40);
        assert_eq!(l.grid, MAX_GRID);
        assert_eq!(l.block, BLOCK);
        assert_eq!(Launch::for_items(0).grid, 1);
        assert_eq!(Launch::for_items(513).grid, 3);
    }

    #[test]
    fn sizes_beyond_the_call_types_are_errors_naming_the_op() {
        assert_eq!(index("sum", "n", 7).unwrap_or(-1), 7);
        let e = blas_dim("matmul", "k", 1 << 31).map(|_| ()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "op `matmul`: k = 2147483648 does not fit the 32-bit cuBLAS dimension a CUDA call takes"
        );
    }

    #[test]
    fn row_major_strides_end_in_one() {
        assert_eq!(row_major_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(row_major_strides(&[5]), vec![1]);
        assert!(row_major_strides(&[]).is_empty());
    }
}
