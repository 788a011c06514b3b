//! `CpuTensor`'s public surface as users and the runtime see it: the `Kernels` and `GradValue`
//! traits (equality, shape, the non-finite scan), the copy out, in-place access and the `Debug`
//! text.

use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_runtime::{GradValue, Kernels, NonFinite};

#[test]
fn the_kernels_equality_is_bitwise_on_shape_and_data() {
    let a = CpuF64::from_vec([2], vec![1.0, -0.0]).unwrap();
    assert!(Kernels::bit_eq(&a, &a.clone()));
    let nan = CpuF64::from_vec([1], vec![f64::NAN]).unwrap();
    assert!(Kernels::bit_eq(&nan, &nan.clone()), "a NaN equals itself");
    let zero = CpuF64::from_vec([2], vec![1.0, 0.0]).unwrap();
    assert!(!Kernels::bit_eq(&a, &zero), "-0 and 0 differ");
    let column = CpuF64::from_vec([2, 1], vec![1.0, -0.0]).unwrap();
    assert!(!Kernels::bit_eq(&a, &column), "same data, another shape");
}

#[test]
fn to_vec_copies_the_data_in_row_major_order() {
    let a = CpuF32::from_vec([2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let v = a.to_vec();
    assert_eq!(v, [1.0, 2.0, 3.0, 4.0]);
    assert_ne!(v.as_ptr(), a.as_slice().as_ptr(), "a copy, not the buffer");
}

#[test]
fn debug_shows_the_shape_and_at_most_eight_values() {
    let short = CpuF64::from_vec([3], vec![1.0, 2.0, 3.5]).unwrap();
    let want = format!(
        "CpuTensor {{ shape: {:?}, data: [1.0, 2.0, 3.5] }}",
        short.shape()
    );
    assert_eq!(format!("{short:?}"), want);
    let long = CpuF64::from_vec([2, 5], (0..10).map(f64::from).collect()).unwrap();
    let want = format!(
        "CpuTensor {{ shape: {:?}, data: [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0] … (10 elements) }}",
        long.shape()
    );
    assert_eq!(format!("{long:?}"), want);
}

#[test]
fn make_mut_writes_in_place_and_copies_a_shared_buffer_first() {
    let mut a = CpuF64::from_vec([2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let shared = a.clone();
    let data = a.make_mut();
    assert_eq!(data.len(), 4, "the whole tensor");
    assert_eq!(data, [1.0, 2.0, 3.0, 4.0], "its data, not a fresh buffer");
    data[3] = -4.0;
    assert_eq!(a.as_slice(), [1.0, 2.0, 3.0, -4.0]);
    assert_eq!(
        shared.as_slice(),
        [1.0, 2.0, 3.0, 4.0],
        "the other owner is untouched"
    );
}

#[test]
fn the_gradient_view_reports_the_shape_and_the_first_non_finite_element() {
    let t = CpuF32::from_vec([2, 3], vec![1.0, f32::INFINITY, 0.0, f32::NAN, 2.0, 3.0]).unwrap();
    assert_eq!(GradValue::shape(&t), t.shape());
    assert_eq!(GradValue::shape(&t).dims(), [2, 3]);
    assert_eq!(
        GradValue::non_finite(&t),
        Some(NonFinite {
            index: 1,
            value: f64::INFINITY,
            count: 2
        })
    );
    let finite = CpuF64::from_vec([70], vec![0.5; 70]).unwrap();
    assert_eq!(GradValue::non_finite(&finite), None);
    assert!(GradValue::check(&finite).is_ok());
}
