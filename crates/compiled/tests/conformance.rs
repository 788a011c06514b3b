//! `torchlean conform` on the reference engine, in f64 and f32, for every shipped case.
#![allow(clippy::unwrap_used)]

mod common;

use torchlean_compiled::run_case;
use torchlean_ir::Tolerance;
use torchlean_spec::Tensor;

#[test]
fn every_case_passes_in_f64_output_input_and_payload_gradients() {
    for case in common::cases() {
        let out = run_case::<Tensor<f64>>(&case, None).unwrap();
        assert!(out.pass(), "{}: {:?}", case.name, out.checks);
        assert!(
            out.checks.iter().any(|c| c.what == "grad_input"),
            "{}",
            case.name
        );
    }
}

#[test]
fn every_case_passes_in_f32_at_f32_tolerance() {
    let tol = Tolerance {
        rtol: 1e-4,
        atol: 1e-5,
    };
    for case in common::cases() {
        let out = run_case::<Tensor<f32>>(&case, Some(tol)).unwrap();
        assert!(out.pass(), "{}: {:?}", case.name, out.checks);
    }
}

#[test]
fn a_wrong_expectation_fails() {
    let mut case = common::case("residual_block");
    let mut g = case.expect.grad_input.take().unwrap();
    g.data_mut()[0] += 1e-3;
    case.expect.grad_input = Some(g);
    let out = run_case::<Tensor<f64>>(&case, None).unwrap();
    assert!(!out.pass());
}
