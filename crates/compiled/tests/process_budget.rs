//! The compiled paths read the process's memory budget (`Budget::process_default`), which is set
//! once per process: this binary sets a small one, so it shares a process with nothing else.
#![allow(clippy::unwrap_used)]

use serde_json::json;
use torchlean_compiled::{run_grad_on, CompiledError, GradPath};
use torchlean_ir::{Graph, Payload};
use torchlean_spec::{Budget, Tensor};

#[test]
fn every_path_refuses_a_graph_over_the_process_budget_before_it_allocates() {
    assert!(Budget::set_process_default(Budget { max_bytes: 4096 }));
    // a [1000] input and its negation: values and gradients of 2 x 1000 f64 are 32,000 bytes
    let g = Graph::from_json(&json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1, "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [1000]},
            {"id": 1, "kind": "neg", "parents": [0], "shape": [1000]}
        ]
    }))
    .unwrap();
    let x = Tensor::zeros([1000]).unwrap();
    for path in GradPath::ALL {
        let e = run_grad_on::<Tensor<f64>>(path, &g, &Payload::new(), &x, None).unwrap_err();
        assert!(
            matches!(e, CompiledError::OverBudget { .. }),
            "{}: {e}",
            path.name()
        );
    }
}
