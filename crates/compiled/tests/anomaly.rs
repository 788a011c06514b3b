//! Anomaly mode through the compiled paths users run (`run_grad_with`, `GraphData::eval_with`,
//! `check_denotation`): the IR node where a NaN or an infinity originates, its kind, shapes,
//! parents and direction, on every engine and dtype; and nothing changes with it off.
#![allow(clippy::unwrap_used)]

use serde_json::json;
use torchlean_compiled::{
    check_denotation, exec_graph_of_ir, run_grad, run_grad_with, CompiledError, IrAnomaly, IrRef,
    IrSite,
};
use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_ir::{Graph, Payload};
use torchlean_runtime::{AnomalyMode, Direction, GradValue, Kernels};
use torchlean_spec::{Shape, Tensor};

const DETECT: AnomalyMode = AnomalyMode::Detect;

/// A chain graph: node 0 the `[n]` input, then `(kind, parents)` per node; the last is the output.
fn graph(n: usize, nodes: &[(&str, &[usize])]) -> Graph {
    let mut js = vec![json!({"id": 0, "kind": "input", "parents": [], "shape": [n]})];
    for (i, (kind, parents)) in nodes.iter().enumerate() {
        js.push(json!({"id": i + 1, "kind": kind, "parents": parents, "shape": [n]}));
    }
    Graph::from_json(&json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": nodes.len(), "nodes": js
    }))
    .unwrap()
}

fn x(data: &[f64]) -> Tensor<f64> {
    Tensor::new([data.len()], data.to_vec()).unwrap()
}

fn anomaly_of<V: Kernels>(g: &Graph, p: &Payload, input: &Tensor<f64>) -> IrAnomaly {
    match run_grad_with::<V>(g, p, input, None, DETECT) {
        Err(CompiledError::Anomaly { at, source }) => {
            assert!(
                source.is_some(),
                "the runtime's finding is kept as the source"
            );
            *at
        }
        other => panic!("{}: expected an anomaly, got {other:?}", V::ENGINE),
    }
}

fn node(id: usize, kind: &'static str) -> IrRef {
    IrRef {
        node: id,
        kind,
        tensor: None,
    }
}

/// Runs `check` on the anomaly every engine and dtype reports (`grad` of the graph).
fn on_every_engine(g: &Graph, p: &Payload, input: &Tensor<f64>, check: impl Fn(&IrAnomaly)) {
    check(&anomaly_of::<CpuF64>(g, p, input));
    check(&anomaly_of::<CpuF32>(g, p, input));
    check(&anomaly_of::<Tensor<f64>>(g, p, input));
    check(&anomaly_of::<Tensor<f32>>(g, p, input));
}

#[test]
fn log_of_zero_is_found_at_the_log_node_in_the_forward() {
    // node 1 = x − x = 0 exactly, node 2 = log(0) = −inf
    let g = graph(2, &[("sub", &[0, 0]), ("log", &[1])]);
    on_every_engine(&g, &Payload::new(), &x(&[3.0, -1.5]), |a| {
        assert_eq!(a.at, node(2, "log"));
        assert_eq!(a.direction(), Direction::Forward);
        assert_eq!(a.site, IrSite::Value);
        assert_eq!(a.shape, Shape::from([2]));
        assert_eq!(a.parents, vec![(node(1, "sub"), Shape::from([2]))]);
        assert_eq!(
            (a.found.index, a.found.value, a.found.count),
            (0, f64::NEG_INFINITY, 2)
        );
    });
}

#[test]
fn zero_over_zero_is_found_at_the_div_node_in_the_forward() {
    let g = graph(3, &[("sub", &[0, 0]), ("div", &[1, 1]), ("tanh", &[2])]);
    on_every_engine(&g, &Payload::new(), &x(&[1.0, 2.0, 3.0]), |a| {
        assert_eq!(
            a.at,
            node(2, "div"),
            "the origin, not the tanh it propagates to"
        );
        assert_eq!(a.direction(), Direction::Forward);
        assert!(a.found.value.is_nan());
        assert_eq!(a.found.count, 3);
        assert_eq!(
            a.parents,
            vec![
                (node(1, "sub"), Shape::from([3])),
                (node(1, "sub"), Shape::from([3]))
            ]
        );
    });
}

#[test]
fn inv_of_x_minus_x_is_found_at_the_inv_node_in_the_forward() {
    // the reviewers' graph: `torchlean grad` printed inf and NaN gradients with exit 0
    let g = graph(2, &[("sub", &[0, 0]), ("inv", &[1])]);
    on_every_engine(&g, &Payload::new(), &x(&[1.0, 0.0]), |a| {
        assert_eq!(a.at, node(2, "inv"));
        assert_eq!(a.direction(), Direction::Forward);
        assert_eq!(a.found.value, f64::INFINITY);
    });
}

#[test]
fn a_finite_forward_with_an_infinite_gradient_is_found_in_the_backward() {
    // inv(t) = 1/t is finite for a tiny t; its derivative −1/t² overflows. 1e-200 in f64,
    // 1e-30 in f32 (1e-200 would round to 0 there and fail in the forward).
    let g = graph(
        2,
        &[
            ("tanh", &[0]),
            ("inv", &[1]),
            ("exp", &[0]),
            ("add", &[2, 3]),
        ],
    );
    let check = |a: &IrAnomaly| {
        assert_eq!(a.at, node(2, "inv"));
        assert_eq!(a.direction(), Direction::Backward);
        assert_eq!(
            a.site,
            IrSite::Contribution {
                to: node(1, "tanh")
            }
        );
        assert_eq!((a.found.index, a.found.value), (1, f64::NEG_INFINITY));
    };
    let tiny64 = x(&[0.5, 1e-200]);
    check(&anomaly_of::<CpuF64>(&g, &Payload::new(), &tiny64));
    check(&anomaly_of::<Tensor<f64>>(&g, &Payload::new(), &tiny64));
    let tiny32 = x(&[0.5, 1e-30]);
    check(&anomaly_of::<CpuF32>(&g, &Payload::new(), &tiny32));
    check(&anomaly_of::<Tensor<f32>>(&g, &Payload::new(), &tiny32));
}

#[test]
fn a_non_finite_seed_and_an_overflowing_sum_are_told_apart_from_a_vjp() {
    let g = graph(1, &[("add", &[0, 0])]);
    let p = Payload::new();
    let big = x(&[1e308]);
    // the forward overflows first: 1e308 + 1e308
    let a = anomaly_of::<Tensor<f64>>(&g, &p, &big);
    assert_eq!(
        (a.at.clone(), a.direction()),
        (node(1, "add"), Direction::Forward)
    );
    // seeded with 1e308: a repeated operand's cotangents are summed inside the node's VJP
    // (the local-sum rule), so the overflow is the add node's contribution
    let seed = x(&[1e308]);
    let Err(CompiledError::Anomaly { at, .. }) =
        run_grad_with::<Tensor<f64>>(&g, &p, &x(&[1.0]), Some(&seed), DETECT)
    else {
        panic!("expected an anomaly");
    };
    let to_x = IrSite::Contribution {
        to: node(0, "input"),
    };
    assert_eq!((at.at.clone(), at.site.clone()), (node(1, "add"), to_x));
    // two nodes each sending x a finite 1e308: the sum at x overflows
    let two = graph(1, &[("relu", &[0]), ("relu", &[0]), ("add", &[1, 2])]);
    let Err(CompiledError::Anomaly { at, .. }) =
        run_grad_with::<CpuF64>(&two, &p, &x(&[1.0]), Some(&seed), DETECT)
    else {
        panic!("expected an anomaly");
    };
    assert_eq!(
        (at.at.clone(), at.site.clone()),
        (node(0, "input"), IrSite::Accumulated)
    );
    assert!(
        at.to_string()
            .contains("after summing finite contributions"),
        "{at}"
    );
    let seed = x(&[f64::NAN]);
    let Err(CompiledError::Anomaly { at, .. }) =
        run_grad_with::<CpuF64>(&g, &p, &x(&[1.0]), Some(&seed), DETECT)
    else {
        panic!("expected an anomaly");
    };
    assert_eq!(
        (at.at.clone(), at.site.clone()),
        (node(1, "add"), IrSite::Seed)
    );
}

fn linear_graph() -> (Graph, Payload) {
    let g = Graph::from_json(&json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 2,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [1, 2]},
            {"id": 1, "kind": "linear", "parents": [0], "shape": [1, 2]},
            {"id": 2, "kind": "relu", "parents": [1], "shape": [1, 2]}
        ]
    }))
    .unwrap();
    let mut p = Payload::new();
    p.insert(
        1,
        "weight",
        Tensor::new([2, 2], vec![1.0, f64::INFINITY, 0.0, 1.0]).unwrap(),
    );
    p.insert(1, "bias", Tensor::new([2], vec![0.0, 0.0]).unwrap());
    (g, p)
}

#[test]
fn a_non_finite_payload_tensor_is_named_as_the_origin() {
    let (g, p) = linear_graph();
    on_every_engine(&g, &p, &Tensor::new([1, 2], vec![1.0, 1.0]).unwrap(), |a| {
        assert_eq!(
            a.at,
            IrRef {
                node: 1,
                kind: "linear",
                tensor: Some("weight")
            }
        );
        assert!(a.parents.is_empty());
        assert_eq!(a.shape, Shape::from([2, 2]));
        assert_eq!((a.found.index, a.found.value), (1, f64::INFINITY));
        let line = a.to_string();
        assert!(
            line.contains("IR node 1 (linear) payload `weight`"),
            "{line}"
        );
    });
}

#[test]
fn with_anomaly_mode_off_the_results_are_unchanged_non_finite_values_and_all() {
    let g = graph(2, &[("sub", &[0, 0]), ("inv", &[1])]);
    let input = x(&[1.0, 0.0]);
    let off = run_grad_with::<CpuF64>(&g, &Payload::new(), &input, None, AnomalyMode::Off).unwrap();
    let plain = run_grad::<CpuF64>(&g, &Payload::new(), &input, None).unwrap();
    assert_eq!(off.output.data(), &[f64::INFINITY, f64::INFINITY]);
    assert!(off.grad_input().data().iter().all(|v| v.is_nan()));
    assert_eq!(off.output.data(), plain.output.data());
    // and a finite graph is not reported by anomaly mode
    let fine = graph(2, &[("tanh", &[0]), ("exp", &[1])]);
    let on = run_grad_with::<CpuF64>(&fine, &Payload::new(), &input, None, DETECT).unwrap();
    let plain = run_grad::<CpuF64>(&fine, &Payload::new(), &input, None).unwrap();
    assert_eq!(on.output.data(), plain.output.data());
    assert_eq!(on.grad_input().data(), plain.grad_input().data());
}

#[test]
fn eval_with_and_the_denotation_find_the_same_forward_origin() {
    let g = graph(2, &[("sub", &[0, 0]), ("inv", &[1]), ("tanh", &[2])]);
    let p = Payload::new();
    let exec = exec_graph_of_ir(&g, &p).unwrap();
    let inputs: Vec<CpuF32> = exec.inputs(&x(&[1.0, 2.0]), &p).unwrap();
    let err = exec.graph.eval_with(inputs, DETECT).unwrap_err();
    let Err(CompiledError::Anomaly { at: from_eval, .. }) = Err::<(), _>(exec.in_ir_terms(&g, err))
    else {
        panic!("expected an anomaly");
    };
    let values = torchlean_ir::denote_all(&g, &p, &x(&[1.0, 2.0])).unwrap();
    let Err(CompiledError::Anomaly {
        at: from_ir,
        source,
    }) = check_denotation(&g, &values)
    else {
        panic!("expected an anomaly");
    };
    assert!(source.is_none());
    assert_eq!(from_eval.at, node(2, "inv"));
    assert_eq!(from_ir.at, from_eval.at);
    assert_eq!(from_ir.parents, from_eval.parents);
    assert_eq!(from_ir.found, from_eval.found);
    // anomaly mode off: the evaluation completes with the infinities in it
    let inputs: Vec<CpuF32> = exec.inputs(&x(&[1.0, 2.0]), &p).unwrap();
    let values = exec.graph.eval_with(inputs, AnomalyMode::Off).unwrap();
    assert!(values[exec.ir_positions[2]].non_finite().is_some());
    assert!(values[exec.output].non_finite().is_none(), "tanh(inf) = 1");
}
