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

#[test]
fn a_case_that_checks_nothing_does_not_pass() {
    let mut case = common::case("residual_block");
    case.expect = Default::default();
    let out = run_case::<Tensor<f64>>(&case, None).unwrap();
    assert!(out.checks.is_empty());
    assert!(!out.pass());
}

#[test]
fn a_seed_of_the_wrong_shape_names_the_ir_output_node() {
    let case = common::case("residual_block");
    let out = case.graph.output_id;
    let bad = Tensor::new([1], vec![1.0]).unwrap();
    let e = torchlean_compiled::run_grad::<Tensor<f64>>(
        &case.graph,
        &case.payload,
        &case.input,
        Some(&bad),
    )
    .unwrap_err();
    let torchlean_compiled::CompiledError::SeedShape { node, got, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!((*node, got.dims()), (out, &[1][..]));
    assert!(
        e.to_string().starts_with(&format!(
            "the seed has shape [1], but the output (node {out})"
        )),
        "{e}"
    );
}
