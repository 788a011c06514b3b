//! Malformed or unsupported models: each is rejected with every one of its problems (ONNX node
//! name, op type, field), never only the first, and nothing panics. One helper,
//! [`check_rejected`], runs the table.

mod common;

use common::{float_attr, floats, int_attr, ints_attr, model, node, value};
use prost::Message;
use torchlean_onnx::proto::ModelProto;
use torchlean_onnx::{import_onnx, OnnxError, ProblemKind};

const MLP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zoo/mlp.onnx");

/// What one rejection must contain: the problem's kind, ONNX node (or value) name, op type and
/// field.
type Want = (ProblemKind, &'static str, &'static str, &'static str);

/// Imports `bytes` and checks it is rejected with exactly the problems `want` (in any order);
/// `None`: rejected as an undecodable protobuf.
fn check_rejected(case: &str, bytes: &[u8], want: Option<&[Want]>) {
    let err = match import_onnx(bytes) {
        Ok(_) => panic!("{case}: imported, expected a rejection"),
        Err(e) => e,
    };
    match (want, &err) {
        (None, OnnxError::Decode { .. }) => {}
        (Some(want), OnnxError::Problems(got)) => {
            let got_keys: Vec<Want> = got
                .iter()
                .map(|p| (p.kind, leak(&p.node), leak(&p.op_type), leak(&p.field)))
                .collect();
            for w in want {
                assert!(got_keys.contains(w), "{case}: missing {w:?} in {got:#?}");
            }
            assert_eq!(got.len(), want.len(), "{case}: {got:#?}");
            // every line of the report names its node and op type
            for (line, p) in err.lines().iter().zip(got) {
                assert!(
                    line.contains(&p.node) && line.contains(&p.op_type),
                    "{case}: {line}"
                );
            }
        }
        _ => panic!("{case}: unexpected error {err:?}"),
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

#[test]
fn every_problem_of_a_model_is_listed_at_once() {
    use ProblemKind::*;
    let x = || value("x", &[Ok(1), Ok(2), Ok(4), Ok(4)]);
    let w = floats("w", &[2, 1, 3, 3], &[0.5; 18]);

    // three unsupported ops and an unsupported attribute value, all in one error
    let mut grouped = node("conv", "Conv", &["x", "w"], &["c"]);
    grouped.attribute.push(int_attr("group", 2));
    grouped.attribute.push(ints_attr("dilations", &[1, 2]));
    let many = model(
        x(),
        vec![
            node("round", "Round", &["x"], &["e"]),
            grouped,
            node("det", "Det", &["e", "c"], &["g"]),
            node("topk", "TopK", &["g"], &["y"]),
        ],
        vec![w.clone()],
        &["y"],
    );
    check_rejected(
        "unsupported ops and attribute",
        &many,
        Some(&[
            (UnsupportedOp, "round", "Round", "op_type"),
            (UnsupportedAttribute, "conv", "Conv", "dilations"),
            (UnsupportedOp, "det", "Det", "op_type"),
            (UnsupportedOp, "topk", "TopK", "op_type"),
        ]),
    );

    // a symbolic batch and an unknown width: both dims named
    let dynamic = model(
        value("x", &[Err("batch"), Ok(2), Ok(4), Err("")]),
        vec![node("relu", "Relu", &["x"], &["y"])],
        vec![],
        &["y"],
    );
    check_rejected(
        "dynamic dims",
        &dynamic,
        Some(&[
            (DynamicDim, "x", "input", "shape[0]"),
            (DynamicDim, "x", "input", "shape[3]"),
        ]),
    );

    // batch norm whose scale and mean are no initializers: both operands named at once
    let bn = model(
        x(),
        vec![node(
            "bn",
            "BatchNormalization",
            &["x", "scale", "bias", "mean", "var"],
            &["y"],
        )],
        vec![
            floats("bias", &[2], &[0.0; 2]),
            floats("var", &[2], &[1.0; 2]),
        ],
        &["y"],
    );
    check_rejected(
        "batch norm operands",
        &bn,
        Some(&[
            (NotAWeight, "bn", "BatchNormalization", "input[1]"),
            (NotAWeight, "bn", "BatchNormalization", "input[3]"),
        ]),
    );

    // an initializer whose raw data is one float short of its dims
    let short = model(
        x(),
        vec![node("conv", "Conv", &["x", "w"], &["y"])],
        vec![floats("w", &[2, 2, 3, 3], &[0.5; 35])],
        &["y"],
    );
    check_rejected(
        "initializer length",
        &short,
        Some(&[(BadTensor, "w", "initializer", "data")]),
    );

    // attribute values the IR cannot express, in several nodes
    let mut pool = node("pool", "AveragePool", &["x"], &["p"]);
    pool.attribute.extend([
        ints_attr("kernel_shape", &[2, 2]),
        ints_attr("dilations", &[2, 0]),
    ]);
    let mut strided = node("maxpool", "MaxPool", &["p"], &["q"]);
    strided.attribute.extend([
        ints_attr("kernel_shape", &[2, 2]),
        ints_attr("strides", &[1, 2, 1]),
        int_attr("storage_order", 1),
    ]);
    let attrs = model(
        x(),
        vec![
            pool,
            strided,
            node("reshape", "Reshape", &["q", "x"], &["y"]),
        ],
        vec![],
        &["y"],
    );
    check_rejected(
        "attribute values",
        &attrs,
        Some(&[
            (UnsupportedAttribute, "pool", "AveragePool", "dilations"),
            (UnsupportedAttribute, "maxpool", "MaxPool", "storage_order"),
            (UnsupportedAttribute, "maxpool", "MaxPool", "strides"),
            // the shape operand of a Reshape must be a constant
            (UnsupportedAttribute, "reshape", "Reshape", "input[1]"),
        ]),
    );

    // non-finite numbers the graph's attributes cannot hold (found by fuzzing: Gemm's alpha
    // became a `scale` whose `c` did not print as a number)
    let mut gemm = node("gemm", "Gemm", &["m", "w2"], &["g"]);
    gemm.attribute.push(float_attr("alpha", f32::INFINITY));
    let mut clip = node("clip", "Clip", &["g"], &["y"]);
    clip.attribute.push(float_attr("min", f32::NAN));
    let mut non_finite = ModelProto::decode(
        model(
            value("m", &[Ok(2), Ok(3)]),
            vec![gemm, clip],
            vec![floats("w2", &[3, 3], &[0.5; 9])],
            &["y"],
        )
        .as_slice(),
    )
    .expect("decodes");
    non_finite.opset_import[0].version = Some(10); // Clip's bounds are attributes before 11
    check_rejected(
        "non-finite attributes",
        &non_finite.encode_to_vec(),
        Some(&[
            (UnsupportedAttribute, "gemm", "Gemm", "alpha"),
            (UnsupportedAttribute, "clip", "Clip", "min"),
        ]),
    );

    // two outputs (supported), an input that nothing defines, and an output whose declared
    // shape (`model` declares every output a scalar) disagrees with the inferred one
    let outputs = model(
        x(),
        vec![
            node("relu", "Relu", &["x"], &["a"]),
            node("add", "Add", &["a", "nowhere"], &["b"]),
        ],
        vec![],
        &["a", "b"],
    );
    check_rejected(
        "outputs",
        &outputs,
        Some(&[
            (Model, "add", "Add", "input"),
            (Shape, "relu", "Relu", "output"),
        ]),
    );
}

#[test]
fn truncated_and_corrupt_protobufs_are_errors_not_panics() {
    let bytes = std::fs::read(MLP).expect("the zoo's MLP is committed");
    check_rejected("empty", &[0xff], None);
    check_rejected("truncated", &bytes[..bytes.len() / 2], None);
    // every truncation and a byte flip at every position: an error or an import, never a panic
    for cut in (0..bytes.len()).step_by(7) {
        let _ = import_onnx(&bytes[..cut]);
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        let _ = import_onnx(&b);
    }
}

#[test]
fn the_zoo_mlp_imports_and_places_every_initializer() {
    let bytes = std::fs::read(MLP).expect("the zoo's MLP is committed");
    let imp = import_onnx(&bytes).expect("the MLP imports");
    for name in [
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
        "fc3.weight",
        "fc3.bias",
    ] {
        let p = imp.param(name).unwrap_or_else(|| panic!("{name} placed"));
        let kind = imp.graph.nodes[p.node].kind.name();
        assert_eq!(kind, "linear", "{name}: Gemm with transB becomes linear");
    }
}

#[test]
fn a_shape_rule_problem_keeps_the_spec_error_as_its_cause() {
    // [2, 3]·[4, 5]: the IR's matmul rule refuses the inner extents
    let bad = model(
        value("x", &[Ok(2), Ok(3)]),
        vec![node("mm", "MatMul", &["x", "w"], &["y"])],
        vec![floats("w", &[4, 5], &[0.5; 20])],
        &["y"],
    );
    let Err(OnnxError::Problems(problems)) = import_onnx(&bad) else {
        panic!("a [2, 3]·[4, 5] product imported");
    };
    let p = problems
        .iter()
        .find(|p| p.kind == ProblemKind::Shape && p.node == "mm")
        .unwrap_or_else(|| panic!("no shape problem at `mm`: {problems:#?}"));
    assert!(
        matches!(
            &p.cause,
            Some(torchlean_spec::SpecError::OpShape { op: "matmul", .. })
        ),
        "{p:?}"
    );
    let source = std::error::Error::source(p).expect("the cause is the source");
    assert!(p.to_string().ends_with(&source.to_string()), "{p}");
}
