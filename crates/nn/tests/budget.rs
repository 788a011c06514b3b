//! The eager session's memory budget: each leaf and op is counted (value, gradient, the op's
//! engine workspace, 8 bytes per element) before its value is made, and the node that would
//! take the tape over the budget is refused, named by tape node, op, layer and shape.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cpu::CpuF64;
use torchlean_nn::*;
use torchlean_spec::{Budget, Conv2dSpec, Op, OverBudget, Pass, Shape, Tensor};

fn vec1(data: &[f64]) -> Tensor<f64> {
    Tensor::new([data.len()], data.to_vec()).unwrap()
}

/// The budget error's fields.
#[track_caller]
fn over(e: NnError) -> (usize, &'static str, String, Shape, OverBudget) {
    match e {
        NnError::OverBudget {
            node,
            op,
            layer,
            shape,
            source,
        } => (node, op, layer, shape, source),
        other => panic!("expected an over-budget error, got {other}"),
    }
}

#[test]
fn the_op_that_crosses_the_budget_is_refused_before_it_runs() {
    // an input of 4 and its relu: 4 values + 4 gradients each, 64 bytes; 128 bytes hold both
    let mut s = Session::<CpuF64>::with_budget(Budget::bytes(128));
    let x = s.input("x", &vec1(&[1.0, -2.0, 3.0, -4.0]), false).unwrap();
    let y = s.scoped("block", |s| s.relu(&x)).unwrap();
    let e = s.scoped("block", |s| s.relu(&y)).unwrap_err();
    let msg = e.to_string();
    let (node, op, layer, shape, source) = over(e);
    assert_eq!((node, op, layer.as_str()), (2, "relu", "block"));
    assert_eq!(shape, Shape::from([4]));
    assert_eq!(
        source,
        OverBudget {
            node_bytes: 64,
            workspace_bytes: 0,
            total_bytes: 192,
            limit: 128
        }
    );
    assert!(
        msg.starts_with("layer `block`: tape node 2 (relu): output [4] needs 64 bytes"),
        "{msg}"
    );
    assert!(msg.contains("over the memory budget of 128 bytes"), "{msg}");
    // nothing was recorded for it
    assert_eq!(s.tape_len(), 2);
    // reset starts the count again
    s.reset();
    let x = s.input("x", &vec1(&[1.0, -2.0, 3.0, -4.0]), false).unwrap();
    s.relu(&x).unwrap();
}

#[test]
fn no_grad_counts_values_only() {
    // 4 values each, 32 bytes: three fit in 96 bytes without gradients, not with them
    let mut s = Session::<CpuF64>::with_budget(Budget::bytes(96));
    let y = s
        .no_grad(|s| {
            let x = s.input("x", &vec1(&[1.0, -2.0, 3.0, -4.0]), false)?;
            let y = s.relu(&x)?;
            s.relu(&y)
        })
        .unwrap();
    assert_eq!(y.shape(), &Shape::from([4]));
    let mut s = Session::<CpuF64>::with_budget(Budget::bytes(96));
    let x = s.input("x", &vec1(&[1.0, -2.0, 3.0, -4.0]), false).unwrap();
    let (node, op, ..) = over(s.relu(&x).unwrap_err());
    assert_eq!((node, op), (1, "relu"));
}

#[test]
fn a_leaf_over_the_budget_is_refused_and_not_kept() {
    let mut s = Session::<CpuF64>::with_budget(Budget::bytes(100));
    let e = s
        .scoped("fc", |s| s.param("weight", &Tensor::zeros([10]).unwrap()))
        .unwrap_err();
    let (node, op, layer, shape, source) = over(e);
    assert_eq!((node, op, layer.as_str()), (0, "param", "fc"));
    assert_eq!(shape, Shape::from([10]));
    assert_eq!(source.node_bytes, 160);
    assert_eq!(s.tape_len(), 0);
}

#[test]
fn a_convolution_counts_its_engine_workspace() {
    // the values of a 3×3 convolution over 1×40×40 fit 1 MiB, its patch matrix does not
    let spec = Conv2dSpec::ungrouped(1, 1, (3, 3), 1, 60);
    let mut s = Session::<CpuF64>::with_budget(Budget::bytes(1 << 20));
    let x = s
        .input("x", &Tensor::zeros([1, 1, 4, 4]).unwrap(), false)
        .unwrap();
    let w = s.param("w", &Tensor::zeros([1, 1, 3, 3]).unwrap()).unwrap();
    let b = s.param("b", &Tensor::zeros([1]).unwrap()).unwrap();
    let (node, op, _, shape, source) = over(s.conv2d(spec, &x, &w, &b).unwrap_err());
    assert_eq!((node, op), (3, "conv2d"));
    assert_eq!(shape, Shape::from([1, 1, 122, 122]));
    let ws = Op::Conv2d(spec).workspace_elements(
        &[x.shape().clone(), w.shape().clone(), b.shape().clone()],
        &shape,
        Pass::Grad,
    );
    assert!(ws > 0);
    assert_eq!(source.workspace_bytes, 8 * ws as u64);
    assert_eq!(source.node_bytes, 8 * (2 * 122 * 122 + ws as u64));
    // with room for it, it runs
    let mut s = Session::<CpuF64>::with_budget(Budget::bytes(64 << 20));
    let x = s
        .input("x", &Tensor::zeros([1, 1, 4, 4]).unwrap(), false)
        .unwrap();
    let w = s.param("w", &Tensor::zeros([1, 1, 3, 3]).unwrap()).unwrap();
    let b = s.param("b", &Tensor::zeros([1]).unwrap()).unwrap();
    s.conv2d(spec, &x, &w, &b).unwrap();
}
