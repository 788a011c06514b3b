//! The ONNX operators an op's row names (`spec::ops::desc::Onnx`): each imports as that row's
//! kind, and the attributes the row renames reach the op.
#![allow(clippy::unwrap_used)]

mod common;

use common::{float_attr, int64s, model, node, str_attr, value};
use torchlean_ir::OpKind;
use torchlean_onnx::proto::NodeProto;
use torchlean_onnx::{import_onnx, supported_op_types, OnnxError, ProblemKind};
use torchlean_spec::ops::desc::OPS;
use torchlean_spec::{GeluApprox, Op, UnaryOp};

/// The op of the one node that a model of `onnx_node` alone (input `x`, output `y`) imports to.
fn imported_op(onnx_node: NodeProto) -> Result<Op, OnnxError> {
    let bytes = model(value("x", &[]), vec![onnx_node], vec![], &["y"]);
    let imported = import_onnx(&bytes)?;
    let ops: Vec<Op> = imported
        .graph
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            OpKind::Op(op) => Some(op.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ops.len(), 1, "{ops:?}");
    Ok(ops[0].clone())
}

#[test]
fn every_row_with_an_onnx_operator_imports_as_its_kind() {
    let mut n = 0;
    for d in OPS {
        let Some(onnx) = d.onnx else { continue };
        let op = imported_op(node("n", onnx.op, &["x"], &["y"]))
            .unwrap_or_else(|e| panic!("{}: {e}", onnx.op));
        assert_eq!(op.name(), d.name, "{}", onnx.op);
        assert!(supported_op_types().contains(&onnx.op), "{}", onnx.op);
        n += 1;
    }
    assert!(n >= 10, "only {n} rows name an ONNX operator");
}

#[test]
fn a_renamed_attribute_reaches_the_op() {
    let mut gelu = node("g", "Gelu", &["x"], &["y"]);
    gelu.attribute.push(str_attr("approximate", "tanh"));
    assert_eq!(
        imported_op(gelu).unwrap(),
        Op::Unary(UnaryOp::Gelu(GeluApprox::Tanh))
    );
    // ONNX's `alpha` is leaky_relu's `negative_slope`
    let mut leaky = node("l", "LeakyRelu", &["x"], &["y"]);
    leaky.attribute.push(float_attr("alpha", 0.25));
    assert_eq!(
        imported_op(leaky).unwrap(),
        Op::Unary(UnaryOp::LeakyRelu {
            negative_slope: 0.25
        })
    );
    let mut elu = node("e", "Elu", &["x"], &["y"]);
    elu.attribute.push(float_attr("alpha", 0.5));
    assert_eq!(
        imported_op(elu).unwrap(),
        Op::Unary(UnaryOp::Elu { alpha: 0.5 })
    );
}

#[test]
fn a_choice_outside_the_options_and_an_unknown_attribute_are_refused() {
    let mut gelu = node("g", "Gelu", &["x"], &["y"]);
    gelu.attribute.push(str_attr("approximate", "fast"));
    let mut relu = node("r", "Relu", &["x"], &["y"]);
    relu.attribute.push(str_attr("mode", "fast"));
    for (n, field) in [(gelu, "approximate"), (relu, "mode")] {
        let Err(OnnxError::Problems(p)) = imported_op(n) else {
            panic!("{field}: imported")
        };
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(
            (p[0].kind, p[0].field.as_str()),
            (ProblemKind::UnsupportedAttribute, field)
        );
    }
}

#[test]
fn gather_of_rows_imports_as_an_embedding_with_negative_indices_wrapped() {
    let gather = |ids: &[i64], axis: Option<i64>| {
        let mut n = node("g", "Gather", &["x", "ids"], &["y"]);
        if let Some(a) = axis {
            n.attribute.push(common::int_attr("axis", a));
        }
        let bytes = common::model_declaring(
            value("x", &[Ok(4), Ok(3)]),
            vec![n],
            vec![int64s("ids", &[2, 2], ids)],
            vec![value("y", &[Ok(2), Ok(2), Ok(3)])],
        );
        import_onnx(&bytes)
    };
    let imported = gather(&[1, -1, 0, 3], None).unwrap();
    let g = &imported.graph;
    let emb = g
        .nodes
        .iter()
        .find(|n| n.kind == OpKind::Op(Op::Embedding))
        .unwrap();
    assert_eq!(emb.shape.dims(), [2, 2, 3]);
    let ids_node = emb.parents[0];
    let ids = imported
        .payload
        .entry(ids_node)
        .unwrap()
        .tensor("value")
        .unwrap();
    assert_eq!(ids.data(), [1.0, 3.0, 0.0, 3.0]);
    assert_eq!(emb.parents[1], g.input_id);
    // outside [-4, 4): refused, naming why
    let e = gather(&[1, 4, 0, 0], None).unwrap_err().to_string();
    assert!(
        e.contains("index 4 at position 1 is outside [-4, 4)"),
        "{e}"
    );
    // along axis 1 the rows are no embedding (a gather of columns, [4, 2, 2]): the declared
    // [2, 2, 3] is refused, naming both shapes
    let e = gather(&[0, 0, 0, 0], Some(1)).unwrap_err().to_string();
    assert!(
        e.contains("declares `y` as [2, 2, 3]; its inferred shape is [4, 2, 2]"),
        "{e}"
    );
}

#[test]
fn shape_folds_to_the_static_dims_between_start_and_end() {
    let dims_of = |start: Option<i64>, end: Option<i64>| {
        let mut n = node("s", "Shape", &["x"], &["y"]);
        if let Some(s) = start {
            n.attribute.push(common::int_attr("start", s));
        }
        if let Some(e) = end {
            n.attribute.push(common::int_attr("end", e));
        }
        let bytes = common::model(value("x", &[Ok(2), Ok(3), Ok(4)]), vec![n], vec![], &["y"]);
        let imported = import_onnx(&bytes).unwrap();
        let x =
            torchlean_spec::Tensor::<f64>::zeros(torchlean_spec::Shape::from([2, 3, 4])).unwrap();
        let out = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &x).unwrap();
        out[0].data().to_vec()
    };
    assert_eq!(dims_of(None, None), [2.0, 3.0, 4.0]);
    assert_eq!(dims_of(Some(1), None), [3.0, 4.0]);
    assert_eq!(dims_of(Some(-2), Some(-1)), [3.0]);
    // clamped to the rank, and empty when start passes end
    assert_eq!(dims_of(Some(-10), Some(10)), [2.0, 3.0, 4.0]);
    assert_eq!(dims_of(Some(2), Some(1)), Vec::<f64>::new());
}

/// The output of a one-node model `op(x, [k])` (x `[2, 1, 3]`, k an INT64 initializer), run on
/// `0, 1, …, 5`.
fn run_with_ints(op: &str, k: &[i64]) -> Result<torchlean_spec::Tensor<f64>, OnnxError> {
    let n = node("n", op, &["x", "k"], &["y"]);
    // the output declared without a type: its shape is the importer's to infer
    let y = torchlean_onnx::proto::ValueInfoProto {
        name: Some("y".into()),
        ..Default::default()
    };
    let bytes = common::model_declaring(
        value("x", &[Ok(2), Ok(1), Ok(3)]),
        vec![n],
        vec![int64s("k", &[k.len() as i64], k)],
        vec![y],
    );
    let imported = import_onnx(&bytes)?;
    let x = torchlean_spec::Tensor::new(
        torchlean_spec::Shape::from([2, 1, 3]),
        (0..6).map(f64::from).collect(),
    )
    .unwrap();
    let out = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &x).unwrap();
    Ok(out[0].clone())
}

#[test]
fn squeeze_unsqueeze_and_expand_import_as_reshapes_and_broadcasts() {
    let dims = |op: &str, k: &[i64]| run_with_ints(op, k).unwrap().shape().dims().to_vec();
    assert_eq!(dims("Squeeze", &[1]), [2, 3]);
    assert_eq!(dims("Squeeze", &[-2]), [2, 3]);
    assert_eq!(dims("Unsqueeze", &[0, 4]), [1, 2, 1, 3, 1]);
    assert_eq!(dims("Unsqueeze", &[-1]), [2, 1, 3, 1]);
    assert_eq!(dims("Expand", &[4, 1, 1, 1]), [4, 2, 1, 3]);
    assert_eq!(dims("Expand", &[5, 1]), [2, 5, 3]);
    let expanded = run_with_ints("Expand", &[2, 2, 3]).unwrap();
    assert_eq!(
        expanded.data(),
        [0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5.]
    );
    // refused: squeezing an axis of extent 3, a repeated axis, a shape that does not broadcast
    let refused = |op: &str, k: &[i64], what: &str| {
        let e = run_with_ints(op, k).expect_err(what);
        assert!(e.to_string().contains(what), "{e}");
    };
    refused("Squeeze", &[2], "only 1 can be squeezed");
    refused("Unsqueeze", &[1, 1], "repeats an axis");
    refused("Expand", &[4], "does not broadcast");
}
