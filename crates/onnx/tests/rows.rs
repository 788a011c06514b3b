//! The ONNX operators an op's row names (`spec::ops::desc::Onnx`): each imports as that row's
//! kind, and the attributes the row renames reach the op.
#![allow(clippy::unwrap_used)]

mod common;

use common::{float_attr, model, node, str_attr, value};
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
