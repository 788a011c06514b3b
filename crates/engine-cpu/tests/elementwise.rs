//! Elementwise kernels at the values where IEEE arithmetic has choices a tolerance cannot see:
//! the sign of a zero result (relu, clamp, and max and min on tied zeros), and NaN, compared
//! bit for bit with the reference engine.

use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_runtime::Kernels;
use torchlean_spec::{BinaryOp, Op, Tensor, UnaryOp};

fn bits(t: &Tensor<f64>) -> Vec<u64> {
    t.data().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn relu_of_signed_zeros_and_nan_is_the_references_bits() {
    let x = Tensor::new([5], vec![-0.0, 0.0, f64::NAN, -1.5, 2.5]).unwrap();
    let op = Op::Unary(UnaryOp::Relu);
    let want = torchlean_runtime::forward::<Tensor<f64>>(&op, &[&x]).unwrap();
    // torch.relu: `if x < 0 then 0 else x`, so −0 and NaN pass unchanged
    assert_eq!(bits(&want)[..2], bits(&x)[..2]);
    assert!(want.data()[2].is_nan());
    assert_eq!(&want.data()[3..], &[0.0, 2.5]);
    let f64_y = torchlean_runtime::forward::<CpuF64>(&op, &[&CpuF64::from_f64(&x).unwrap()]);
    assert_eq!(bits(&f64_y.unwrap().to_f64().unwrap()), bits(&want), "f64");
    let f32_y = torchlean_runtime::forward::<CpuF32>(&op, &[&CpuF32::from_f64(&x).unwrap()]);
    assert_eq!(bits(&f32_y.unwrap().to_f64().unwrap()), bits(&want), "f32");
}

#[test]
fn clamp_keeps_a_zero_of_either_sign_and_nan_as_the_reference_does() {
    let x = Tensor::new([5], vec![-0.0, 0.0, f64::NAN, -1.5, 2.5]).unwrap();
    // the reference: `if lo > x then lo else if x > hi then hi else x`: a zero at a zero bound
    // keeps its sign, NaN passes
    for (min, max) in [(Some(0.0), Some(0.0)), (Some(0.0), None), (None, Some(0.0))] {
        let op = Op::Clamp { min, max };
        let want = torchlean_runtime::forward::<Tensor<f64>>(&op, &[&x]).unwrap();
        assert_eq!(want.data()[0].to_bits(), (-0.0f64).to_bits());
        let f64_y = torchlean_runtime::forward::<CpuF64>(&op, &[&CpuF64::from_f64(&x).unwrap()]);
        assert_eq!(
            bits(&f64_y.unwrap().to_f64().unwrap()),
            bits(&want),
            "f64 {min:?} {max:?}"
        );
        let f32_y = torchlean_runtime::forward::<CpuF32>(&op, &[&CpuF32::from_f64(&x).unwrap()]);
        assert_eq!(
            bits(&f32_y.unwrap().to_f64().unwrap()),
            bits(&want),
            "f32 {min:?} {max:?}"
        );
    }
}

#[test]
fn max_and_min_of_tied_signed_zeros_take_the_first_operand_as_the_reference_does() {
    // torch.maximum / torch.minimum: on a tie (±0 against ∓0) both answer a, whose sign a
    // tolerance cannot see
    let a = Tensor::new([4], vec![0.0, -0.0, 0.0, -0.0]).unwrap();
    let b = Tensor::new([4], vec![-0.0, 0.0, 0.0, -0.0]).unwrap();
    for kind in [BinaryOp::Max, BinaryOp::Min] {
        let op = Op::Binary(kind);
        let want = torchlean_runtime::forward::<Tensor<f64>>(&op, &[&a, &b]).unwrap();
        assert_eq!(bits(&want), bits(&a), "{kind:?}: the reference takes a");
        let (a64, b64) = (CpuF64::from_f64(&a).unwrap(), CpuF64::from_f64(&b).unwrap());
        let f64_y = torchlean_runtime::forward::<CpuF64>(&op, &[&a64, &b64]).unwrap();
        assert_eq!(bits(&f64_y.to_f64().unwrap()), bits(&want), "{kind:?} f64");
        let (a32, b32) = (CpuF32::from_f64(&a).unwrap(), CpuF32::from_f64(&b).unwrap());
        let f32_y = torchlean_runtime::forward::<CpuF32>(&op, &[&a32, &b32]).unwrap();
        assert_eq!(bits(&f32_y.to_f64().unwrap()), bits(&want), "{kind:?} f32");
    }
}
