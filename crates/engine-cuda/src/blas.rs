//! Matrix products: one call description, cuBLAS's `sgemmStridedBatched` in its own
//! (column-major) terms, which the real device hands to cuBLAS and the host emulation
//! computes naively — so the row-major ↔ column-major mapping the ops build on top of it is
//! tested without a GPU.

use crate::error::Result;

/// `C[b] = alpha · op(A[b]) · op(B[b]) + beta · C[b]` for `b < batch`, all column-major:
/// `op(A)` is `m × k`, `op(B)` is `k × n`, `C` is `m × n` with leading dimension `ldc`;
/// `A[b]` starts at `offset_a + b · stride_a` (likewise `B`, `C`); `trans_a` means `A` is
/// stored `k × m` (leading dimension `lda`) and used transposed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmCall {
    pub op: &'static str,
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub beta: f32,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
    pub offset_a: usize,
    pub offset_b: usize,
    pub offset_c: usize,
}

/// The reference meaning of a [`GemmCall`] on host slices (the emulation's implementation, and
/// the oracle of the mapping tests): f32 products accumulated in f32, `k` ascending.
pub fn gemm_host(call: &GemmCall, a: &[f32], b: &[f32], c: &mut [f32]) -> Result<()> {
    let at = |batch: usize, i: usize, p: usize| {
        let base = call.offset_a + batch * call.stride_a;
        if call.trans_a {
            a[base + p + i * call.lda]
        } else {
            a[base + i + p * call.lda]
        }
    };
    let bt = |batch: usize, p: usize, j: usize| {
        let base = call.offset_b + batch * call.stride_b;
        if call.trans_b {
            b[base + j + p * call.ldb]
        } else {
            b[base + p + j * call.ldb]
        }
    };
    for batch in 0..call.batch {
        for j in 0..call.n {
            for i in 0..call.m {
                let mut acc = 0.0f32;
                for p in 0..call.k {
                    acc += at(batch, i, p) * bt(batch, p, j);
                }
                let ci = call.offset_c + batch * call.stride_c + i + j * call.ldc;
                c[ci] = if call.beta == 0.0 {
                    call.alpha * acc
                } else {
                    call.alpha * acc + call.beta * c[ci]
                };
            }
        }
    }
    Ok(())
}
