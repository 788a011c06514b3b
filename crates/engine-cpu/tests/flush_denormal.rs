//! `set_flush_denormal`: subnormal operands and results become zero on the calling thread and
//! on the engine's pool threads while the mode is on, and are IEEE's again when it is off. Its
//! own binary: the mode is process-wide, and no other test may run while it is on.

use std::hint::black_box;
use torchlean_engine_cpu::{flush_denormal, set_flush_denormal, with_threads, CpuF32};
use torchlean_runtime::{kernel::forward, Kernels};
use torchlean_spec::ops::Op;
use torchlean_spec::Shape;

/// Half of the smallest normal `f32`: a subnormal number.
const TINY: f32 = f32::MIN_POSITIVE / 2.0;

/// A subnormal result and a subnormal operand, on the calling thread.
fn here() -> (f32, f32) {
    (
        black_box(f32::MIN_POSITIVE) * black_box(0.5),
        black_box(TINY) + black_box(0.0),
    )
}

/// The same on a pool thread of a two-thread pool, and a product the engine's `gemm` forms
/// there: `[TINY; 64×64] · [1; 64×64]`'s entries are `64·TINY`, normal, when subnormal operands
/// are read as such, and zero when they are read as zero.
fn on_the_pool() -> (f32, f32, f32) {
    with_threads(2, || {
        let (result, operand) = rayon::join(|| 0, here).1;
        let square = Shape::from([64, 64]);
        let a = CpuF32::full(&square, TINY as f64).expect("a 64×64 tensor");
        let b = CpuF32::full(&square, 1.0).expect("a 64×64 tensor");
        let p = forward(&Op::MatMul, &[&a, &b]).expect("a 64×64 product");
        (result, operand, p.as_slice()[0])
    })
}

#[test]
fn subnormal_numbers_are_flushed_only_while_the_mode_is_on() {
    assert!(!flush_denormal(), "off by default");
    let ieee = (TINY, TINY);
    assert_eq!(here(), ieee);
    assert_eq!(on_the_pool(), (TINY, TINY, 64.0 * TINY));

    assert!(set_flush_denormal(true), "x86-64 has the mode");
    assert!(flush_denormal());
    assert_eq!(here(), (0.0, 0.0));
    assert_eq!(on_the_pool(), (0.0, 0.0, 0.0));
    // a pool built after the mode was set starts with it
    let fresh = with_threads(3, || rayon::join(|| 0, here).1);
    assert_eq!(fresh, (0.0, 0.0));

    assert!(set_flush_denormal(false));
    assert!(!flush_denormal());
    assert_eq!(here(), ieee);
    assert_eq!(on_the_pool(), (TINY, TINY, 64.0 * TINY));
    assert_eq!(with_threads(3, || rayon::join(|| 0, here).1), ieee);
}
