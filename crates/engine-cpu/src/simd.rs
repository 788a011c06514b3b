//! Run-time instruction-set dispatch for the hand-written loops.
//!
//! The default build targets baseline x86-64 (SSE2). [`vectorized`] runs a loop compiled for
//! the widest instruction set the CPU has — AVX-512 (x86-64-v4), AVX2 + FMA (v3) or the
//! baseline — chosen once per process by `pulp` (safe `#[target_feature]` dispatch). The
//! arithmetic is the same IEEE operations on every path (Rust never fuses `a·b + c` on its
//! own, and an explicit `mul_add` is exactly rounded everywhere: an instruction on v3 and v4,
//! a library call on the baseline), so results are bitwise identical whichever path runs; only
//! the speed differs.
//!
//! The wider code generation reaches only what is inlined into the dispatched function, so a
//! loop is a [`Kernel`]: a marker type whose `run` is `#[inline(always)]` and is called
//! statically. (A closure, or a function item called through its `FnOnce` shim, can be left
//! out of line by LLVM and is then compiled for the baseline.)

use pulp::{Simd, WithSimd};
use std::marker::PhantomData;

/// Loops with less work than this run on the baseline path: dispatch costs a few nanoseconds,
/// about 64 cheap operations. Work counts each element at its cost in cheap operations
/// (`kernels::elementwise::POLY` for `exp`, `tanh` and `erf`, whose fused multiply-adds are
/// library calls on the baseline path: a 16-element `tanh` took 0.57 µs per op of
/// `tape_overhead` undispatched, 0.38 dispatched).
const MIN_WORK: usize = 64;

/// A loop over arguments `A`. Implementations mark `run` `#[inline(always)]` and call only
/// `#[inline(always)]` code on their hot path.
pub(crate) trait Kernel<A> {
    type Out;
    fn run(args: A) -> Self::Out;
}

struct Call<A, K> {
    args: A,
    kernel: PhantomData<K>,
}

impl<A, K: Kernel<A>> WithSimd for Call<A, K> {
    type Output = K::Out;

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) -> K::Out {
        K::run(self.args)
    }
}

/// `K::run(args)` compiled for the best instruction set available.
#[inline(always)]
pub(crate) fn vectorized<K: Kernel<A>, A>(args: A) -> K::Out {
    pulp::Arch::new().dispatch(Call::<A, K> {
        args,
        kernel: PhantomData,
    })
}

/// [`vectorized`] for a loop of `work` cheap operations (its elements, each at its cost),
/// without the dispatch for small ones.
#[inline(always)]
pub(crate) fn vectorized_if<K: Kernel<A>, A>(work: usize, args: A) -> K::Out {
    if work < MIN_WORK {
        K::run(args)
    } else {
        vectorized::<K, A>(args)
    }
}

/// Declares marker `$k` running `$f` (an `#[inline(always)]` function of one tuple argument)
/// for every instantiation of `$f`'s generics:
/// `kernel!(Marker => function<'a> [T: (Bound), F: (Fn(T) -> T)] (ArgsType) -> Out);`
macro_rules! kernel {
    ($k:ident => $f:ident $(< $($lt:lifetime),* >)? [$($g:ident : ($($b:tt)+)),*] ($a:ty) -> $o:ty) => {
        pub(crate) struct $k;
        impl<$($($lt,)*)? $($g: $($b)+),*> $crate::simd::Kernel<$a> for $k {
            type Out = $o;
            #[inline(always)]
            fn run(args: $a) -> $o {
                $f(args)
            }
        }
    };
}

pub(crate) use kernel;

/// An element type's SIMD vector for instruction set `S` (pulp's `f32s` / `f64s`), for the
/// register-blocked kernels that name their vectors (the implicit convolution): loads and
/// stores are unaligned reads and writes of `lanes` elements, `mul_add` is a fused
/// multiply-add where `S` has one (every lane alike, so the lanes of one vector give the same
/// bits as any other grouping of the same elements). Public only inside this private module:
/// a bound of [`crate::CpuScalar`], sealed with it.
pub trait SimdLanes: Copy + pulp::bytemuck::Pod {
    type Lanes<S: Simd>: Copy;
    /// Elements per vector.
    fn lanes<S: Simd>() -> usize;
    fn splat<S: Simd>(simd: S, v: Self) -> Self::Lanes<S>;
    /// `a·b + c`.
    fn mul_add<S: Simd>(
        simd: S,
        a: Self::Lanes<S>,
        b: Self::Lanes<S>,
        c: Self::Lanes<S>,
    ) -> Self::Lanes<S>;
    /// `a + b`, `a − b`, `a · b`, lane by lane (each exactly rounded, as on one element).
    fn add_lanes<S: Simd>(simd: S, a: Self::Lanes<S>, b: Self::Lanes<S>) -> Self::Lanes<S>;
    fn sub_lanes<S: Simd>(simd: S, a: Self::Lanes<S>, b: Self::Lanes<S>) -> Self::Lanes<S>;
    fn mul_lanes<S: Simd>(simd: S, a: Self::Lanes<S>, b: Self::Lanes<S>) -> Self::Lanes<S>;
    /// The first `lanes` elements of `src`.
    fn load<S: Simd>(src: &[Self]) -> Self::Lanes<S>;
    /// Writes `v` over the first `lanes` elements of `dst`.
    fn store<S: Simd>(dst: &mut [Self], v: Self::Lanes<S>);
    /// The sum of the lanes (pulp's fixed pairwise order).
    fn reduce_sum<S: Simd>(simd: S, v: Self::Lanes<S>) -> Self;
}

macro_rules! simd_lanes {
    ($t:ty, $v:ident, $splat:ident, $fma:ident, $sum:ident, $add:ident, $sub:ident, $mul:ident) => {
        impl SimdLanes for $t {
            type Lanes<S: Simd> = S::$v;

            #[inline(always)]
            fn lanes<S: Simd>() -> usize {
                std::mem::size_of::<S::$v>() / std::mem::size_of::<$t>()
            }

            #[inline(always)]
            fn splat<S: Simd>(simd: S, v: Self) -> S::$v {
                simd.$splat(v)
            }

            #[inline(always)]
            fn mul_add<S: Simd>(simd: S, a: S::$v, b: S::$v, c: S::$v) -> S::$v {
                simd.$fma(a, b, c)
            }

            #[inline(always)]
            fn add_lanes<S: Simd>(simd: S, a: S::$v, b: S::$v) -> S::$v {
                simd.$add(a, b)
            }

            #[inline(always)]
            fn sub_lanes<S: Simd>(simd: S, a: S::$v, b: S::$v) -> S::$v {
                simd.$sub(a, b)
            }

            #[inline(always)]
            fn mul_lanes<S: Simd>(simd: S, a: S::$v, b: S::$v) -> S::$v {
                simd.$mul(a, b)
            }

            #[inline(always)]
            fn load<S: Simd>(src: &[Self]) -> S::$v {
                let n = Self::lanes::<S>();
                pulp::bytemuck::pod_read_unaligned(pulp::bytemuck::cast_slice(&src[..n]))
            }

            #[inline(always)]
            fn store<S: Simd>(dst: &mut [Self], v: S::$v) {
                let n = Self::lanes::<S>();
                dst[..n].copy_from_slice(pulp::bytemuck::cast_slice(std::slice::from_ref(&v)));
            }

            #[inline(always)]
            fn reduce_sum<S: Simd>(simd: S, v: S::$v) -> Self {
                simd.$sum(v)
            }
        }
    };
}

simd_lanes!(
    f32,
    f32s,
    splat_f32s,
    mul_add_e_f32s,
    reduce_sum_f32s,
    add_f32s,
    sub_f32s,
    mul_f32s
);
simd_lanes!(
    f64,
    f64s,
    splat_f64s,
    mul_add_e_f64s,
    reduce_sum_f64s,
    add_f64s,
    sub_f64s,
    mul_f64s
);
