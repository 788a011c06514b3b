//! The eager `Session`'s backward contract: a scalar (one-element) loss is seeded with 1; any
//! other output needs its cotangent, as in PyTorch, and a refused call changes nothing.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cpu::CpuF64;
use torchlean_nn::*;
use torchlean_runtime::Kernels;
use torchlean_spec::{Shape, Tensor};

/// `y = 2 · x · w` elementwise, over a `[2, 3]` input and parameter `w`.
fn doubled_product(s: &mut Session<CpuF64>) -> (Var, Var) {
    let x = Tensor::new([2, 3], (0..6).map(f64::from).collect()).unwrap();
    let input = s.input("x", &x, true).unwrap();
    let w = s
        .param("w", &Tensor::full(Shape::from([2, 3]), 0.5).unwrap())
        .unwrap();
    let y = s.mul(&input, &w).unwrap();
    (input, s.scale(&y, 2.0).unwrap())
}

#[test]
fn backward_refuses_an_output_of_more_than_one_element_without_a_seed() {
    let mut s = Session::<CpuF64>::new();
    let (input, y) = doubled_product(&mut s);
    let err = s.backward(&y, Sweep::Releasing).unwrap_err();
    assert!(
        matches!(&err, NnError::NonScalarBackward { shape, numel: 6 } if shape == &Shape::from([2, 3])),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "backward from an output of shape [2, 3] (6 elements) needs a seed: reduce it to one \
         element (a loss), or call backward_with_seed with a cotangent of its shape"
    );
    assert!(
        s.param_grad("w").is_none(),
        "a refused backward computes nothing"
    );
    assert!(s.grad(&input).unwrap().is_none());

    // with its cotangent it runs: d(2·x·w)/dw = 2·x times the seed (ones)
    let ones = Tensor::full(Shape::from([2, 3]), 1.0).unwrap();
    s.backward_with_seed(&y, &ones, Sweep::Releasing).unwrap();
    let gw = s.param_grad("w").unwrap().to_f64().unwrap();
    assert_eq!(gw.data(), &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
}

#[test]
fn backward_seeds_a_one_element_loss_of_any_rank_with_one() {
    let mut s = Session::<CpuF64>::new();
    let (_, y) = doubled_product(&mut s);
    let total = s.sum(&y).unwrap(); // shape []
    let kept = s.reshape(&total, Shape::from([1, 1])).unwrap(); // shape [1, 1]: one element too
    s.backward(&kept, Sweep::Releasing).unwrap();
    let gw = s.param_grad("w").unwrap().to_f64().unwrap();
    assert_eq!(gw.data(), &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
}
