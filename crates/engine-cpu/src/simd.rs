//! Run-time instruction-set dispatch for the hand-written loops.
//!
//! The default build targets baseline x86-64 (SSE2). [`vectorized`] runs a loop compiled for
//! the widest instruction set the CPU has — AVX-512 (x86-64-v4), AVX2 + FMA (v3) or the
//! baseline — chosen once per process by `pulp` (safe `#[target_feature]` dispatch). The
//! arithmetic is the same IEEE operations on every path (Rust never fuses `a·b + c` on its
//! own), so results are bitwise identical whichever path runs; only the speed differs.
//!
//! The wider code generation reaches only what is inlined into the dispatched function, so a
//! loop is a [`Kernel`]: a marker type whose `run` is `#[inline(always)]` and is called
//! statically. (A closure, or a function item called through its `FnOnce` shim, can be left
//! out of line by LLVM and is then compiled for the baseline.)

use pulp::{Simd, WithSimd};
use std::marker::PhantomData;

/// Loops shorter than this run on the baseline path (dispatch costs a few nanoseconds).
const MIN_LEN: usize = 64;

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

/// [`vectorized`] for a loop over `len` elements, without the dispatch for short ones.
#[inline(always)]
pub(crate) fn vectorized_if<K: Kernel<A>, A>(len: usize, args: A) -> K::Out {
    if len < MIN_LEN {
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
