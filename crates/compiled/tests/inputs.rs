//! Multi-input graphs through every differentiation path: each input's gradient lands in its
//! own place, and a wrong number of input tensors is refused.

use serde_json::json;
use torchlean_compiled::{run_grad_on, CompiledError, GradPath};
use torchlean_engine_cpu::CpuF64;
use torchlean_ir::{Graph, Payload};
use torchlean_spec::Tensor;

/// `sum((x + y) · w)` with `x`, `y`, `w` the inputs `[0, 1, 3]`, then `tanh` of the sum so the
/// gradient is not constant.
fn graph() -> Graph {
    Graph::from_json(&json!({
        "format": "torchlean.ir.v1", "input_ids": [0, 1, 3], "output_id": 6,
        "input_names": ["x", "y", "w"],
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [3]},
            {"id": 1, "kind": "input", "parents": [], "shape": [3]},
            {"id": 2, "kind": "add", "parents": [0, 1], "shape": [3]},
            {"id": 3, "kind": "input", "parents": [], "shape": [3]},
            {"id": 4, "kind": "mul_elem", "parents": [2, 3], "shape": [3]},
            {"id": 5, "kind": "sum", "parents": [4], "shape": []},
            {"id": 6, "kind": "tanh", "parents": [5], "shape": []}
        ]
    }))
    .expect("a graph")
}

fn t(data: &[f64]) -> Tensor<f64> {
    Tensor::new([data.len()], data.to_vec()).expect("a vector")
}

#[test]
fn every_path_gives_each_input_its_own_gradient() {
    let (x, y, w) = ([0.5, -1.0, 0.25], [0.1, 0.2, -0.3], [1.5, -0.5, 2.0]);
    let s: f64 = (0..3).map(|i| (x[i] + y[i]) * w[i]).sum();
    let d = 1.0 - s.tanh().powi(2);
    // d tanh(s) / dx = d·w, / dy = d·w, / dw = d·(x + y): computed here, not by the engine
    let want_xy: Vec<f64> = w.iter().map(|w| d * w).collect();
    let want_w: Vec<f64> = (0..3).map(|i| d * (x[i] + y[i])).collect();
    let inputs = vec![t(&x), t(&y), t(&w)];
    for path in GradPath::ALL {
        for (engine, r) in [
            (
                "reference",
                run_grad_on::<Tensor<f64>>(path, &graph(), &Payload::new(), &inputs, None),
            ),
            (
                "cpu",
                run_grad_on::<CpuF64>(path, &graph(), &Payload::new(), &inputs, None),
            ),
        ] {
            let r = r.unwrap_or_else(|e| panic!("{engine} {}: {e}", path.name()));
            assert_eq!(r.grad_inputs.len(), 3, "{engine} {}", path.name());
            for (k, want) in [&want_xy, &want_xy, &want_w].into_iter().enumerate() {
                for (g, w) in r.grad_inputs[k].data().iter().zip(want) {
                    assert!(
                        (g - w).abs() <= 1e-15 * w.abs().max(1.0),
                        "{engine} {}: input {k}: {:?} vs {want:?}",
                        path.name(),
                        r.grad_inputs[k].data()
                    );
                }
            }
            assert!((r.output.data()[0] - s.tanh()).abs() < 1e-15);
        }
    }
}

#[test]
fn a_wrong_number_of_input_tensors_is_refused_with_both_counts() {
    let err = run_grad_on::<CpuF64>(
        GradPath::Compiled,
        &graph(),
        &Payload::new(),
        &t(&[1.0, 2.0, 3.0]),
        None,
    )
    .expect_err("one tensor for three inputs");
    assert!(
        matches!(
            err,
            CompiledError::InputCount {
                expected: 3,
                got: 1
            }
        ),
        "{err}"
    );
}
