//! `torchlean conform` on the reference engine, in f64 and f32, for every shipped case, through
//! every path ([`GradPath`]).
#![allow(clippy::unwrap_used)]

use crate::common;

use torchlean_compiled::{
    run_case, run_case_on, run_grad_on, tolerance_for, GradPath, F32_TOLERANCE,
};
use torchlean_ir::{Case, DType, Tolerance};
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
    for case in common::cases() {
        let out = run_case::<Tensor<f32>>(&case, Some(F32_TOLERANCE)).unwrap();
        assert!(out.pass(), "{}: {:?}", case.name, out.checks);
    }
}

#[test]
fn the_paths_are_named_as_conform_paths_takes_them() {
    let names: Vec<&str> = GradPath::ALL.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["compiled", "eager", "saved"]);
}

#[test]
fn an_f32_run_of_an_f64_case_is_compared_at_the_f32_tolerance_and_any_other_at_its_own() {
    let mut case = common::cases().into_iter().next().unwrap();
    case.tolerance = Tolerance {
        rtol: 1e-9,
        atol: 1e-12,
    };
    case.dtype = DType::F64;
    assert_eq!(tolerance_for(&case, DType::F32), F32_TOLERANCE);
    assert_eq!(tolerance_for(&case, DType::F64), case.tolerance);
    case.dtype = DType::F32;
    assert_eq!(tolerance_for(&case, DType::F32), case.tolerance);
    assert_eq!(tolerance_for(&case, DType::F64), case.tolerance);
}

#[test]
fn every_case_passes_on_the_eager_and_saved_paths_in_f64_and_f32() {
    for case in common::cases() {
        for path in [GradPath::Eager, GradPath::Saved] {
            let out = run_case_on::<Tensor<f64>>(path, &case, None).unwrap();
            assert!(out.pass(), "{} {path:?} f64: {:?}", case.name, out.checks);
            let out = run_case_on::<Tensor<f32>>(path, &case, Some(F32_TOLERANCE)).unwrap();
            assert!(out.pass(), "{} {path:?} f32: {:?}", case.name, out.checks);
        }
    }
}

/// `x + x` and `x·k` summed, `k = 1e16`: in the sweep, `x·k`'s contribution to `x` (1e16)
/// arrives first, then `x + x`'s two. The compiled tape and the saved graph fold those two
/// first (the local-sum rule: `1e16 + (1 + 1)` = 1e16 + 2, exact); the eager tape adds them one
/// by one (`(1e16 + 1) + 1` = 1e16, each `+ 1` a tie rounded to even). The bits tell which rule
/// a path ran.
fn repeated_parent_after_a_large_contribution() -> Case {
    let v = serde_json::json!({
        "format": "torchlean.case.v1", "name": "conform_repeated_parent_order",
        "graph": {"format": "torchlean.ir.v1", "input_id": 0, "output_id": 4, "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [1]},
            {"id": 1, "kind": "const", "parents": [], "shape": [1], "value_shape": [1]},
            {"id": 2, "kind": "add", "parents": [0, 0], "shape": [1]},
            {"id": 3, "kind": "mul_elem", "parents": [0, 1], "shape": [1]},
            {"id": 4, "kind": "add", "parents": [2, 3], "shape": [1]}
        ]},
        "payload": {"1": {"value": {"shape": [1], "data": [1e16]}}},
        "input": {"shape": [1], "data": [0.5]},
        "expect": {"grad_input": {"shape": [1], "data": [10000000000000002.0]}},
        "tolerance": {"rtol": 0.0, "atol": 0.0}
    });
    Case::from_json_str(&v.to_string()).unwrap()
}

#[test]
fn the_eager_path_adds_a_repeated_parents_contributions_one_by_one_the_others_fold_them() {
    let case = repeated_parent_after_a_large_contribution();
    let grad = |path| {
        run_grad_on::<Tensor<f64>>(path, &case.graph, &case.payload, &case.inputs, None)
            .unwrap()
            .grad_input()
            .data()[0]
    };
    assert_eq!(grad(GradPath::Compiled), 1e16 + 2.0);
    assert_eq!(grad(GradPath::Saved), 1e16 + 2.0);
    assert_eq!(grad(GradPath::Eager), 1e16);
    // and a case at zero tolerance tells them apart, naming the element and both values
    let eager = run_case_on::<Tensor<f64>>(GradPath::Eager, &case, None).unwrap();
    assert!(!eager.pass());
    let worst = eager.checks[0].worst.as_ref().unwrap();
    assert_eq!(
        (worst.index.as_slice(), worst.got, worst.want),
        (&[0][..], 1e16, 1e16 + 2.0)
    );
    assert!(run_case_on::<Tensor<f64>>(GradPath::Saved, &case, None)
        .unwrap()
        .pass());
}

#[test]
fn a_wrong_expectation_fails() {
    let mut case = common::case("residual_block");
    let mut g = case.expect.grad_inputs.take().unwrap();
    g[0].data_mut()[0] += 1e-3;
    case.expect.grad_inputs = Some(g);
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
        &case.inputs,
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

#[test]
fn the_square_matmul_case_is_what_its_pytorch_script_writes() {
    // unset or empty: skipped, with a line saying so (CI has no PyTorch)
    let Some(python) = std::env::var("TORCHLEAN_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
    else {
        println!(
            "SKIPPED: set TORCHLEAN_PYTHON to a Python with torch to rerun \
             tools/pytorch/conform_matmul_square.py"
        );
        return;
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(&python)
        .arg(root.join("tools/pytorch/conform_matmul_square.py"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fresh: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::cases_dir().join("conform_matmul_square.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(fresh, committed);
}
