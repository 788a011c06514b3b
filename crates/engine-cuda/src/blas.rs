//! Matrix products: one call description, cuBLAS's `sgemmStridedBatched` in its own
//! (column-major) terms, which the real device hands to cuBLAS and the host emulation
//! computes naively — so the row-major ↔ column-major mapping the ops build on top of it is
//! tested without a GPU.
//!
//! The ops describe their products row-major ([`RowMajorGemm`]); [`RowMajorGemm::call`] is
//! the one place that maps them onto cuBLAS's column-major terms, and [`RowMajorGemm::run`] the
//! one place that hands them to a device. Every call is checked against its buffers
//! ([`GemmCall::check`]) before anything touches memory, on both devices.
//!
//! Invariant: a [`GemmCall`] reaches a device only after [`GemmCall::check`] accepted it for
//! the buffers it is given (`gemm_host` checks it itself; `Gpu::gemm` checks before cuBLAS).

use crate::device::Device;
use crate::error::{CudaError, Result};

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

impl GemmCall {
    /// Checks that every element the call reads or writes lies inside buffers of `a_len`,
    /// `b_len` and `c_len` elements, that each leading dimension covers its operand's stored
    /// rows, and that the output matrices of distinct batches do not overlap. A call that
    /// writes nothing (`batch`, `m` or `n` zero) is always accepted.
    pub fn check(&self, a_len: usize, b_len: usize, c_len: usize) -> Result<()> {
        if self.batch == 0 || self.m == 0 || self.n == 0 {
            return Ok(());
        }
        let (m, n, k) = (self.m, self.n, self.k);
        let a = if self.trans_a { (k, m) } else { (m, k) };
        let b = if self.trans_b { (n, k) } else { (k, n) };
        self.operand("A", a, self.lda, self.offset_a, self.stride_a, a_len)?;
        self.operand("B", b, self.ldb, self.offset_b, self.stride_b, b_len)?;
        let extent = self.operand("C", (m, n), self.ldc, self.offset_c, self.stride_c, c_len)?;
        if self.batch > 1 && self.stride_c < extent {
            return Err(CudaError::GemmOverlap {
                op: self.op,
                stride: self.stride_c,
                extent,
            });
        }
        Ok(())
    }

    /// Checks one column-major operand stored `rows × cols` with leading dimension `ld`, its
    /// batches `stride` apart from `offset`, against a buffer of `len`; returns one matrix's
    /// extent (`(cols − 1)·ld + rows`, 0 when it has no element).
    fn operand(
        &self,
        operand: &'static str,
        (rows, cols): (usize, usize),
        ld: usize,
        offset: usize,
        stride: usize,
        len: usize,
    ) -> Result<usize> {
        if offset > len {
            return Err(CudaError::GemmBounds {
                op: self.op,
                operand,
                needed: offset,
                len,
            });
        }
        if ld < rows {
            return Err(CudaError::GemmLeading {
                op: self.op,
                operand,
                ld,
                rows,
            });
        }
        if rows == 0 || cols == 0 {
            return Ok(0);
        }
        let extent = (cols - 1).checked_mul(ld).and_then(|e| e.checked_add(rows));
        let needed = extent
            .and_then(|e| (self.batch - 1).checked_mul(stride)?.checked_add(e))
            .and_then(|e| e.checked_add(offset))
            .unwrap_or(usize::MAX);
        match extent {
            Some(extent) if needed <= len => Ok(extent),
            _ => Err(CudaError::GemmBounds {
                op: self.op,
                operand,
                needed,
                len,
            }),
        }
    }
}

/// Where one operand of a [`RowMajorGemm`] lies in its buffer: the first matrix's `offset`,
/// its leading dimension `ld` (elements from one stored row to the next) and the `stride`
/// between batches (0: every batch uses the same matrix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowMajor {
    pub offset: usize,
    pub ld: usize,
    pub stride: usize,
}

/// A product in the ops' own (row-major) terms: `C[b] = alpha · op(A[b]) · op(B[b]) + beta ·
/// C[b]` for `b < batch`, `op(A)` `m × k`, `op(B)` `k × n`, `C` `m × n`, every matrix row-major;
/// `trans_a` means `A` is stored `k × m` and used transposed (likewise `trans_b`: `B` stored
/// `n × k`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowMajorGemm {
    pub op: &'static str,
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub alpha: f32,
    pub beta: f32,
    pub a: RowMajor,
    pub b: RowMajor,
    pub c: RowMajor,
}

impl RowMajorGemm {
    /// Densely packed matrices, batches back to back from offset 0, `alpha = 1`, `beta = 0`
    /// (change the fields for offsets, shared operands or accumulation).
    pub fn packed(
        op: &'static str,
        batch: usize,
        (m, n, k): (usize, usize, usize),
        trans_a: bool,
        trans_b: bool,
    ) -> Self {
        let dense = |ld: usize, size: usize| RowMajor {
            offset: 0,
            ld,
            stride: size,
        };
        RowMajorGemm {
            op,
            batch,
            m,
            n,
            k,
            trans_a,
            trans_b,
            alpha: 1.0,
            beta: 0.0,
            a: dense(if trans_a { m } else { k }, m * k),
            b: dense(if trans_b { k } else { n }, k * n),
            c: dense(n, m * n),
        }
    }

    /// The same product in cuBLAS's column-major terms. A row-major matrix is the column-major
    /// matrix of its transpose (same memory, same leading dimension), so `C` row-major is `Cᵀ`
    /// column-major and the call computes `Cᵀ = op(B)ᵀ · op(A)ᵀ`: the operands swap (the
    /// call's `A` is our `B`), `m` and `n` swap, and each keeps its own transpose flag.
    pub fn call(&self) -> GemmCall {
        GemmCall {
            op: self.op,
            trans_a: self.trans_b,
            trans_b: self.trans_a,
            m: self.n,
            n: self.m,
            k: self.k,
            alpha: self.alpha,
            beta: self.beta,
            lda: self.b.ld,
            ldb: self.a.ld,
            ldc: self.c.ld,
            batch: self.batch,
            stride_a: self.b.stride,
            stride_b: self.a.stride,
            stride_c: self.c.stride,
            offset_a: self.b.offset,
            offset_b: self.a.offset,
            offset_c: self.c.offset,
        }
    }

    /// Runs the product on device `D` (`a`, `b`, `c` hold this description's `A`, `B`, `C`).
    /// Nothing runs when there is no output element; with `k = 0` the caller fills `C` itself
    /// (the ops never describe an empty contraction).
    pub fn run<D: Device>(&self, a: &D::Mem, b: &D::Mem, c: &mut D::Mem) -> Result<()> {
        if self.batch == 0 || self.m == 0 || self.n == 0 {
            return Ok(());
        }
        D::gemm(&self.call(), b, a, c).map_err(row_major_names)
    }
}

/// A product error in the call's (column-major) operand names, renamed to the row-major
/// description's: the call's `A` is our `B` and the reverse.
fn row_major_names(e: CudaError) -> CudaError {
    let swap = |operand: &'static str| match operand {
        "A" => "B",
        "B" => "A",
        other => other,
    };
    match e {
        CudaError::GemmBounds {
            op,
            operand,
            needed,
            len,
        } => CudaError::GemmBounds {
            op,
            operand: swap(operand),
            needed,
            len,
        },
        CudaError::GemmLeading {
            op,
            operand,
            ld,
            rows,
        } => CudaError::GemmLeading {
            op,
            operand: swap(operand),
            ld,
            rows,
        },
        other => other,
    }
}

/// The reference meaning of a [`GemmCall`] on host slices (the emulation's implementation, and
/// the oracle of the mapping tests): f32 products accumulated in f32, `k` ascending.
/// The call is checked first ([`GemmCall::check`]): a description reaching past a slice is an
/// error naming `call.op`, never a panic.
pub fn gemm_host(call: &GemmCall, a: &[f32], b: &[f32], c: &mut [f32]) -> Result<()> {
    call.check(a.len(), b.len(), c.len())?;
    if call.batch == 0 || call.m == 0 || call.n == 0 {
        return Ok(());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emu::Emu;

    /// The oracle: the row-major product computed straight from its own description (no
    /// column-major mapping), accumulating like `gemm_host` (f32, `k` ascending).
    fn naive(g: &RowMajorGemm, a: &[f32], b: &[f32], c: &mut [f32]) {
        for t in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let mut acc = 0.0f32;
                    for p in 0..g.k {
                        let ab = g.a.offset + t * g.a.stride;
                        let bb = g.b.offset + t * g.b.stride;
                        let av = if g.trans_a {
                            a[ab + p * g.a.ld + i]
                        } else {
                            a[ab + i * g.a.ld + p]
                        };
                        let bv = if g.trans_b {
                            b[bb + j * g.b.ld + p]
                        } else {
                            b[bb + p * g.b.ld + j]
                        };
                        acc += av * bv;
                    }
                    let ci = g.c.offset + t * g.c.stride + i * g.c.ld + j;
                    c[ci] = if g.beta == 0.0 {
                        g.alpha * acc
                    } else {
                        g.alpha * acc + g.beta * c[ci]
                    };
                }
            }
        }
    }

    /// Small integers: every product and sum is exact, so any misplaced element shows.
    fn data(len: usize, salt: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + salt * 13) % 11) as f32 - 5.0)
            .collect()
    }

    /// The last element one operand touches, plus one.
    fn span(op: &RowMajor, batch: usize, rows: usize, cols: usize) -> usize {
        op.offset + (batch - 1) * op.stride + (rows - 1) * op.ld + cols
    }

    /// A layout of `g`'s operands: packed, or padded (offsets, leading dimensions above the
    /// stored width, gaps between batches), with `A` shared by every batch if `shared_a`.
    fn layout(mut g: RowMajorGemm, padded: bool, shared_a: bool) -> RowMajorGemm {
        if padded {
            for (op, off) in [(&mut g.a, 3), (&mut g.b, 5), (&mut g.c, 2)] {
                let rows = op.stride / op.ld.max(1);
                op.offset = off;
                op.ld += 2;
                op.stride = rows * op.ld + 4;
            }
        }
        if shared_a {
            g.a.stride = 0;
        }
        g
    }

    #[test]
    fn the_row_major_mapping_matches_the_naive_product_for_every_layout() {
        let mut cases = 0;
        for (m, n, k) in [(2, 3, 4), (1, 5, 1), (4, 1, 3), (3, 3, 3)] {
            for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
                for batch in [1, 3] {
                    for (padded, shared_a, beta) in
                        [(false, false, 0.0), (true, false, 1.0), (true, true, 0.5)]
                    {
                        let base = RowMajorGemm::packed("test", batch, (m, n, k), trans_a, trans_b);
                        let mut g = layout(base, padded, shared_a);
                        g.alpha = 2.0;
                        g.beta = beta;
                        let (ar, ac) = if trans_a { (k, m) } else { (m, k) };
                        let (br, bc) = if trans_b { (n, k) } else { (k, n) };
                        let a = data(span(&g.a, batch, ar, ac) + 1, 1);
                        let b = data(span(&g.b, batch, br, bc) + 2, 2);
                        let c0 = data(span(&g.c, batch, m, n) + 3, 3);
                        let mut want = c0.clone();
                        naive(&g, &a, &b, &mut want);
                        let mut got = c0.clone();
                        g.run::<Emu>(&a, &b, &mut got).unwrap();
                        assert_eq!(got, want, "{g:?}");
                        // the slack around the matrices is left alone
                        assert_eq!(got[..g.c.offset], c0[..g.c.offset], "{g:?}");
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 4 * 4 * 2 * 3);
    }

    /// A stored matrix of `rows × cols` with `extra` elements of row padding, batches `gap`
    /// elements apart beyond one matrix (or shared), from `offset`; and a buffer length holding
    /// every batch.
    fn operand(
        (rows, cols): (usize, usize),
        (offset, extra, gap): (usize, usize, usize),
        shared: bool,
        batch: usize,
    ) -> (RowMajor, usize) {
        let ld = cols + extra;
        let stride = if shared { 0 } else { rows * ld + gap };
        let len = offset + batch.max(1) * (rows * ld + gap) + ld + 1;
        (RowMajor { offset, ld, stride }, len)
    }

    proptest::proptest! {
        /// The law behind every product of the engine: a row-major description run through
        /// its column-major call on a device is the row-major product, for any sizes
        /// (including empty ones), transposes, offsets, padded rows, batch gaps and shared
        /// operands.
        #[test]
        fn every_row_major_description_is_its_naive_product(
            (m, n, k, batch) in (0..5usize, 0..5usize, 0..5usize, 0..4usize),
            (trans_a, trans_b, shared_a, shared_b) in
                proptest::prelude::any::<(bool, bool, bool, bool)>(),
            la in (0..4usize, 0..3usize, 0..5usize),
            lb in (0..4usize, 0..3usize, 0..5usize),
            lc in (0..4usize, 0..3usize, 0..5usize),
            beta in proptest::sample::select(vec![0.0f32, 1.0, 0.5]),
        ) {
            let (a_dims, b_dims) = (
                if trans_a { (k, m) } else { (m, k) },
                if trans_b { (n, k) } else { (k, n) },
            );
            let (a, a_len) = operand(a_dims, la, shared_a, batch);
            let (b, b_len) = operand(b_dims, lb, shared_b, batch);
            let (c, c_len) = operand((m, n), lc, false, batch);
            let g = RowMajorGemm {
                op: "law",
                batch,
                m,
                n,
                k,
                trans_a,
                trans_b,
                alpha: 1.5,
                beta,
                a,
                b,
                c,
            };
            let (av, bv, c0) = (data(a_len, 1), data(b_len, 2), data(c_len, 3));
            let mut want = c0.clone();
            naive(&g, &av, &bv, &mut want);
            let mut got = c0;
            g.run::<Emu>(&av, &bv, &mut got).unwrap();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn packed_describes_dense_row_major_matrices() {
        let g = RowMajorGemm::packed("t", 2, (2, 3, 4), false, true);
        assert_eq!(
            (g.a, g.b, g.c),
            (
                RowMajor {
                    offset: 0,
                    ld: 4,
                    stride: 8
                },
                RowMajor {
                    offset: 0,
                    ld: 4,
                    stride: 12
                },
                RowMajor {
                    offset: 0,
                    ld: 3,
                    stride: 6
                },
            )
        );
        let call = g.call();
        // Cᵀ = op(B)ᵀ op(A)ᵀ: operands and m/n swap
        assert_eq!((call.m, call.n, call.k), (3, 2, 4));
        assert_eq!((call.trans_a, call.trans_b), (true, false));
        assert_eq!((call.lda, call.ldb, call.ldc), (4, 4, 3));
    }

    fn call(m: usize, n: usize, k: usize, batch: usize) -> GemmCall {
        GemmCall {
            op: "bounds",
            trans_a: false,
            trans_b: false,
            m,
            n,
            k,
            alpha: 1.0,
            beta: 0.0,
            lda: m,
            ldb: k,
            ldc: m,
            batch,
            stride_a: m * k,
            stride_b: k * n,
            stride_c: m * n,
            offset_a: 0,
            offset_b: 0,
            offset_c: 0,
        }
    }

    #[test]
    fn a_call_reaching_past_a_slice_is_an_error_naming_the_op_and_operand() {
        let g = call(2, 3, 4, 2);
        let (a, b, mut c) = (vec![1.0; 16], vec![1.0; 24], vec![0.0; 12]);
        gemm_host(&g, &a, &b, &mut c).unwrap();
        assert!(c.iter().all(|&v| v == 4.0));
        for (which, (al, bl, cl)) in [
            ("A", (15, 24, 12)),
            ("B", (16, 23, 12)),
            ("C", (16, 24, 11)),
        ] {
            let (a, b, mut c) = (vec![1.0; al], vec![1.0; bl], vec![0.0; cl]);
            match gemm_host(&g, &a, &b, &mut c) {
                Err(CudaError::GemmBounds {
                    op,
                    operand,
                    needed,
                    len,
                }) => {
                    assert_eq!((op, operand, needed), ("bounds", which, len + 1))
                }
                other => panic!("{which}: expected a bounds error, got {other:?}"),
            }
        }
        // an offset past the buffer is refused; a stride near usize::MAX saturates instead of
        // wrapping into range
        let past = GemmCall {
            offset_b: usize::MAX - 1,
            ..g
        };
        assert!(matches!(
            past.check(16, 24, 12),
            Err(CudaError::GemmBounds { operand: "B", needed, .. }) if needed == usize::MAX - 1
        ));
        let far = GemmCall {
            stride_b: usize::MAX - 5,
            ..g
        };
        match far.check(16, 24, 12) {
            Err(CudaError::GemmBounds {
                operand: "B",
                needed: usize::MAX,
                ..
            }) => {}
            other => panic!("expected a saturated bounds error, got {other:?}"),
        }
    }

    #[test]
    fn short_leading_dimensions_and_overlapping_batches_are_errors() {
        let short = GemmCall {
            lda: 1,
            ..call(2, 3, 4, 1)
        };
        assert!(matches!(
            short.check(100, 100, 100),
            Err(CudaError::GemmLeading {
                operand: "A",
                ld: 1,
                rows: 2,
                ..
            })
        ));
        let overlap = GemmCall {
            stride_c: 5,
            ..call(2, 3, 4, 2)
        };
        assert!(matches!(
            overlap.check(100, 100, 100),
            Err(CudaError::GemmOverlap {
                stride: 5,
                extent: 6,
                ..
            })
        ));
        // a shared input (stride 0) is fine; so is a call that writes nothing
        let shared = GemmCall {
            stride_a: 0,
            ..call(2, 3, 4, 2)
        };
        shared.check(8, 24, 12).unwrap();
        call(0, 3, 4, 2).check(0, 0, 0).unwrap();
        let mut none: Vec<f32> = Vec::new();
        gemm_host(&call(2, 0, 4, 2), &[], &[], &mut none).unwrap();
    }
}
