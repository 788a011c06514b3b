//! What `torchlean train --from` asks of the importer: inputs given other dims than declared
//! (`ImportOptions::input_shapes`), and a classifier's head found and replaced
//! (`torchlean_onnx::head`), each checked against values worked out by hand.
#![allow(clippy::unwrap_used)]

mod common;

use common::{floats, int_attr, model, model_declaring, node, value};
use prost::Message;
use torchlean_onnx::head::{find_head, replace_head};
use torchlean_onnx::proto::ModelProto;
use torchlean_onnx::{import_model_with, ImportOptions, OnnxError, ProblemKind};
use torchlean_spec::{Shape, Tensor};

fn shaped(name: &str, dims: &[usize]) -> ImportOptions {
    ImportOptions {
        bound: Vec::new(),
        input_shapes: vec![(name.to_string(), dims.to_vec())],
    }
}

fn problems(r: Result<torchlean_onnx::Imported, OnnxError>) -> Vec<(ProblemKind, String, String)> {
    match r {
        Err(OnnxError::Problems(ps)) => ps
            .into_iter()
            .map(|p| (p.kind, p.field, p.message))
            .collect(),
        other => panic!("expected problems, got {other:?}"),
    }
}

#[test]
fn a_symbolic_or_fixed_batch_takes_the_dims_given() {
    let relu = |batch| {
        let bytes = model_declaring(
            value("x", &[batch, Ok(3)]),
            vec![node("relu", "Relu", &["x"], &["y"])],
            vec![],
            // declared for batch 2: given other dims, the declaration no longer applies
            vec![value("y", &[Ok(2), Ok(3)])],
        );
        ModelProto::decode(bytes.as_slice()).unwrap()
    };
    for batch in [Err("batch"), Ok(2)] {
        let imported = import_model_with(&relu(batch), &shaped("x", &[5, 3])).unwrap();
        let g = &imported.graph;
        assert_eq!(g.node(g.input_id).unwrap().shape, Shape::new(vec![5, 3]));
        assert_eq!(g.node(g.output_id).unwrap().shape, Shape::new(vec![5, 3]));
    }
    // without the option a symbolic dim is refused, and the message says what to give
    let refused = problems(import_model_with(
        &relu(Err("batch")),
        &ImportOptions::default(),
    ));
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].0, ProblemKind::DynamicDim);
    assert!(refused[0].2.contains("--input-shape"), "{refused:?}");
    // another rank, or no such input: problems naming the option
    let rank = problems(import_model_with(&relu(Ok(2)), &shaped("x", &[5, 3, 1])));
    assert_eq!(rank[0].0, ProblemKind::Shape);
    assert_eq!(rank[0].1, "input_shape");
    let unknown = problems(import_model_with(&relu(Ok(2)), &shaped("z", &[5, 3])));
    assert_eq!(unknown[0].0, ProblemKind::Model);
    assert_eq!(unknown[0].1, "input_shape");
}

/// `y = x · W + b` with `W` stored `[features, classes]` (a `MatMul` head, as some exporters
/// write it), given 4 features and 3 classes.
fn matmul_head() -> ModelProto {
    let w: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let bytes = model(
        value("x", &[Ok(2), Ok(4)]),
        vec![
            node("mm", "MatMul", &["x", "head.w"], &["z"]),
            node("add", "Add", &["z", "head.b"], &["y"]),
        ],
        vec![
            floats("head.w", &[4, 3], &w),
            floats("head.b", &[3], &[0.0; 3]),
        ],
        &["y"],
    );
    ModelProto::decode(bytes.as_slice()).unwrap()
}

#[test]
fn a_matmul_head_is_replaced_in_its_own_layout() {
    let mut m = matmul_head();
    let h = find_head(&m, "head.w").unwrap();
    assert_eq!((h.features, h.classes), (4, 3));
    assert!(h.features_first);
    assert_eq!(h.bias.as_deref(), Some("head.b"));
    // PyTorch's layout [classes, features]: rows [1 2 3 4] and [5 6 7 8]
    let w: Vec<f64> = (1..=8).map(f64::from).collect();
    replace_head(&mut m, &h, 2, &w, &[10.0, 20.0]).unwrap();
    let imported = import_model_with(&m, &ImportOptions::default()).unwrap();
    let x: Tensor<f64> = Tensor::new(
        Shape::new(vec![2, 4]),
        vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
    )
    .unwrap();
    let y =
        torchlean_ir::denote_outputs(&imported.graph, &imported.payload, std::slice::from_ref(&x))
            .unwrap();
    // row 0 picks feature 0 of each class: 1 + 10, 5 + 20; row 1 feature 3: 4 + 10, 8 + 20
    assert_eq!(y[0].shape().dims(), &[2, 2]);
    assert_eq!(y[0].data(), &[11.0, 25.0, 14.0, 28.0]);
}

#[test]
fn a_gemm_head_is_found_by_its_layer_name_and_other_weights_are_refused() {
    let bytes = model(
        value("x", &[Ok(2), Ok(4)]),
        vec![
            {
                let mut n = node("fc", "Gemm", &["x", "fc.weight", "fc.bias"], &["z"]);
                n.attribute.push(int_attr("transB", 1));
                n
            },
            node("relu", "Relu", &["z"], &["y"]),
        ],
        vec![
            floats("fc.weight", &[3, 4], &[0.5; 12]),
            floats("fc.bias", &[3], &[0.0; 3]),
        ],
        &["y"],
    );
    let m = ModelProto::decode(bytes.as_slice()).unwrap();
    let h = find_head(&m, "fc").unwrap();
    assert_eq!(h.weight, "fc.weight");
    assert_eq!((h.features, h.classes, h.features_first), (4, 3, false));
    assert_eq!(h.bias.as_deref(), Some("fc.bias"));
    let refused = |name: &str| match find_head(&m, name) {
        Err(OnnxError::Problems(ps)) => ps[0].message.clone(),
        other => panic!("{name}: {other:?}"),
    };
    assert!(
        refused("fc.bias").contains("read by a Gemm node"),
        "{}",
        refused("fc.bias")
    );
    assert!(refused("nope").contains("fc.weight"), "{}", refused("nope"));
    // a new head of the wrong size is refused before anything changes
    let mut changed = m.clone();
    assert!(replace_head(&mut changed, &h, 2, &[0.0; 6], &[0.0; 2]).is_err());
    assert_eq!(changed, m);
}
