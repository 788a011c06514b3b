//! `torchlean-engine-cpu`: the fast CPU engine.
//!
//! [`CpuTensor<T>`] for `T = f32` ([`CpuF32`]) and `T = f64` ([`CpuF64`]) implements the
//! runtime's `GradValue`, `GradZero` and `Kernels` traits, so compiled graphs, eager tapes and
//! every reverse sweep run on it. Every op's meaning is the reference one in `torchlean_spec`
//! (shape rule, forward, VJP, edge policies); this crate only makes it fast, and the shared
//! conformance suite (`torchlean-engine-suite`) checks it op by op against the reference.
//!
//! # Design
//!
//! **Storage.** A tensor is a [`torchlean_spec::Shape`] plus an `Arc<Vec<T>>` (one pointer, so a
//! tensor is 56 bytes): one flat, C-contiguous buffer shared by
//! reference counting; [`CpuTensor::view`] gives the `n`-dimensional ndarray view. Values are immutable, so reshape, detach,
//! the copies a tape's `Saved` keeps and pass-through VJPs (`add`, `add_scalar`, reshape) share
//! buffers for free; a buffer is written in place only when its `Arc` is unique.
//! `GradValue::add` accumulates into whichever operand it owns exclusively (no allocation),
//! `into_owned` copies only a shared buffer, `retag` relabels the shape.
//!
//! **Buffer pool.** Kernel outputs come from thread-local free lists keyed by length, and a
//! tensor's `Drop` returns a uniquely owned buffer to them (so `GradValue::drop`, a tape's
//! release and plain drops all recycle). This removes the allocator round trips of a
//! buffer (`Arc` header, `Vec` data) from the per-op path and stops glibc from unmapping big
//! buffers and faulting them back in on every training step. The pool is bounded per thread
//! (`MAX_POOLED_BYTES`); see [`pooled_bytes`] and [`clear_pool`].
//!
//! **Parallelism.** Kernels run on the current rayon pool; [`with_threads`] installs a cached
//! pool of `n` threads around a closure (benchmarks compare 1 and 2). A long job runs inside
//! one ([`default_threads`] when the user names no count), so that its own thread is one of the
//! `n`: called from outside a pool, the caller sleeps through each split while the pool's idle
//! threads spin beside its serial work (a GPT step at 2 threads on 2 cores: 49 ms from the
//! main thread, 39 ms inside the pool). A kernel splits its work
//! only above [`PAR_MIN_WORK`] (≈ 32k cheap elementwise operations, weighted per function), so
//! per-op overhead on small tensors is a plain loop.
//!
//! **SIMD.** The default build targets baseline x86-64 (SSE2) and the crate has no `unsafe`
//! besides the GEMM call, so the elementwise, row (softmax, layer norm) and reduction loops are
//! dispatched at run time through `pulp` to AVX-512 or AVX2 code (`simd` module). The dispatched
//! paths perform the same IEEE operations, so the dispatch never changes a result. Fixed-order
//! sums use 32 interleaved lanes, enough to keep the vector adders busy.
//!
//! **GEMM.** `matmul` (2-D and batched), `linear` and `conv2d` go through the `gemm` crate,
//! whose kernels are selected at run time (AVX-512 via the `x86-v4` feature, AVX2/FMA
//! otherwise) — the fast path is in the default build. Transposed operands (`Wᵀ` in linear,
//! `Bᵀ`/`Aᵀ` in the matmul VJP, `colᵀ` in the conv weight gradient) are strides, never copies.
//! Products use `Parallelism::Rayon(current_num_threads())` when large, else run on one thread.
//! `gemm` runs along the destination's unit stride and packs the operand read across it, so a
//! `linear` over few rows under a wide weight forms `yᵀ = W·xᵀ` and transposes that back with
//! the bias (`torchlean_spec::ops::linear_transposes_output`) instead of packing all of `W`.
//! `conv2d` is patch matrix + GEMM per image, images in parallel; stride-1 convolutions use a
//! "wide" patch matrix over the padded width whose rows are single `memcpy`s (see
//! `kernels::conv`), 1×1 ones the image itself. Its VJP is two GEMMs per image and the adjoint
//! scatter.
//!
//! **Per-op overhead.** On tiny tensors the cost is bookkeeping, not arithmetic: outputs come
//! from the pool, the VJP passes shared buffers through where the reference copies (`add`,
//! `add_scalar`, reshape), and the elementwise family applies its shape rule (`output =
//! operand`, checked against `Op::infer_shape` by a unit test) without re-running the general
//! rule.
//!
//! **Determinism.** Results are bitwise identical run to run at a fixed thread count, and do not
//! depend on the thread count at all: elementwise and row kernels are pure per element / row;
//! sums use fixed blocks with a fixed combination order (`kernels::reduce`); `gemm` splits
//! outputs, not the contracted dimension; the conv weight gradient sums fixed groups of images
//! (chosen from the batch size only) in group order. Randomness is
//! `torchlean_spec::ops::uniform_at(seed, key, index)`.
//!
//! **Subnormals.** Kept, as IEEE says, unless the user calls [`set_flush_denormal`]`(true)`
//! (PyTorch's `torch.set_flush_denormal`): then every thread of the engine's pools reads and
//! writes them as zero, which spares Intel cores a microcode assist per subnormal operation.
//!
//! **Numerics.** `f64` uses the standard library for every function and the reference's order
//! of operations, so most elementwise ops agree with the reference to the bit. `f32` `exp` and
//! `tanh` (and so sigmoid, softmax, log-softmax) use vectorisable polynomial kernels accurate to
//! 2–3 ulp instead of scalar `libm` calls.
//!
//! # Errors
//!
//! Library code never panics on bad input: operand shapes are validated by the op's own shape
//! rule (`Op::infer_shape`), a VJP checks the cotangent and every saved value it reads (and
//! reads only what the op declares it saves), and every failure is a
//! `torchlean_runtime::RuntimeError` naming the op and shapes (or a [`CpuError`] from the
//! constructors, which converts into it).

mod buffers;
mod derived;
mod error;
mod float_mode;
mod kernels;
mod scalar;
mod simd;
mod tensor;
mod threads;

pub use buffers::{clear_pool, pooled_bytes, MAX_POOLED_BYTES};
pub use error::{CpuError, GemmMisfit};
pub use float_mode::{flush_denormal, set_flush_denormal};
pub use scalar::CpuScalar;
pub use tensor::{CpuF32, CpuF64, CpuTensor};
pub use threads::{current_threads, default_threads, with_threads, PAR_MIN_WORK};
