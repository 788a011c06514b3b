//! The ONNX operators the importer lowers into several IR kinds (variadic ops, reductions,
//! activations, `Split`, `Pow`, `Clip` with computed bounds, layer norm's statistics outputs),
//! and models of several inputs and outputs: each checked by the one [`check`] helper against
//! values worked out by hand.
#![allow(clippy::unwrap_used)]

mod common;

use common::{float_attr, int_attr, ints_attr, model_with_inputs, node};
use torchlean_onnx::proto::{NodeProto, TensorProto};
use torchlean_onnx::{import_onnx, OnnxError};
use torchlean_spec::{Shape, Tensor};

/// One lowering case: a one-node model over the named inputs (FLOAT, their dims) and
/// initializers, at `opset`, run on the given values.
struct Case<'a> {
    inputs: &'a [(&'a str, &'a [i64], &'a [f64])],
    node: NodeProto,
    inits: Vec<TensorProto>,
    outputs: &'a [&'a str],
    opset: i64,
}

impl Case<'_> {
    fn run(self) -> Result<Vec<Tensor<f64>>, OnnxError> {
        let shapes: Vec<(&str, &[i64])> = self.inputs.iter().map(|(n, d, _)| (*n, *d)).collect();
        let bytes = model_with_inputs(
            &shapes,
            vec![self.node],
            self.inits,
            self.outputs,
            self.opset,
        );
        let imported = import_onnx(&bytes)?;
        let xs: Vec<Tensor<f64>> = self
            .inputs
            .iter()
            .map(|(_, d, v)| {
                let dims: Vec<usize> = d.iter().map(|&n| n as usize).collect();
                Tensor::new(Shape::new(dims), v.to_vec()).unwrap()
            })
            .collect();
        Ok(torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &xs).unwrap())
    }

    /// The first output of a case that imports.
    fn first(self) -> Tensor<f64> {
        self.run().unwrap().remove(0)
    }
}

/// Runs `case` and compares every output with `want` (`(dims, values)` each, within 1e-12 of
/// the value, relative).
#[track_caller]
fn check(case: Case<'_>, want: &[(&[usize], &[f64])]) {
    let what = case.node.op_type().to_string();
    let got = case.run().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (k, (g, (dims, values))) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape().dims(), *dims, "{what}: output {k} shape");
        for (i, (a, b)) in g.data().iter().zip(values.iter()).enumerate() {
            assert!(
                (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                "{what}: output {k} element {i}: {a} vs {b} ({:?})",
                g.data()
            );
        }
    }
}

fn with_attrs(mut n: NodeProto, attrs: Vec<torchlean_onnx::proto::AttributeProto>) -> NodeProto {
    n.attribute = attrs;
    n
}

fn unary(op: &str, x: &[f64], attrs: Vec<torchlean_onnx::proto::AttributeProto>, want: &[f64]) {
    let dims = [x.len() as i64];
    check(
        Case {
            inputs: &[("x", &dims, x)],
            node: with_attrs(node("n", op, &["x"], &["y"]), attrs),
            inits: vec![],
            outputs: &["y"],
            opset: 17,
        },
        &[(&[x.len()], want)],
    );
}

#[test]
fn variadic_ops_fold_pairwise_with_broadcasting() {
    // x [2, 2], y [2] (broadcast over rows), z [2, 2]
    let inputs: &[(&str, &[i64], &[f64])] = &[
        ("x", &[2, 2], &[1.0, -2.0, 3.0, 4.0]),
        ("y", &[2], &[0.5, 5.0]),
        ("z", &[2, 2], &[-1.0, 0.0, 6.0, 1.0]),
    ];
    let run = |op: &str, want: &[f64]| {
        check(
            Case {
                inputs,
                node: node("n", op, &["x", "y", "z"], &["s"]),
                inits: vec![],
                outputs: &["s"],
                opset: 17,
            },
            &[(&[2, 2], want)],
        )
    };
    run("Sum", &[0.5, 3.0, 9.5, 10.0]);
    run("Mean", &[0.5 / 3.0, 1.0, 9.5 / 3.0, 10.0 / 3.0]);
    run("Max", &[1.0, 5.0, 6.0, 5.0]);
    run("Min", &[-1.0, -2.0, 0.5, 1.0]);
}

#[test]
fn activations_lower_to_existing_kinds() {
    unary("HardSigmoid", &[-5.0, 0.0, 1.0], vec![], &[0.0, 0.5, 0.7]);
    unary(
        "HardSigmoid",
        &[1.0],
        vec![float_attr("alpha", 0.5), float_attr("beta", 0.25)],
        &[0.75],
    );
    // ONNX's defaults, f32 values: 1.67326319217681884765625 and 1.05070102214813232421875
    let (alpha, gamma) = (f64::from(1.673_263_2_f32), f64::from(1.050_701_f32));
    assert_eq!(alpha, 1.673_263_192_176_818_8);
    assert_eq!(gamma, 1.050_701_022_148_132_3);
    unary(
        "Selu",
        &[-1.0, 0.0, 2.0],
        vec![],
        &[gamma * alpha * ((-1.0f64).exp() - 1.0), 0.0, 2.0 * gamma],
    );
    unary("Softsign", &[-1.0, 0.0, 3.0], vec![], &[-0.5, 0.0, 0.75]);
}

#[test]
fn prelu_takes_a_broadcast_slope() {
    check(
        Case {
            inputs: &[
                ("x", &[2, 2], &[-2.0, 3.0, -4.0, 0.0]),
                ("slope", &[2], &[0.5, 0.25]),
            ],
            node: node("n", "PRelu", &["x", "slope"], &["y"]),
            inits: vec![],
            outputs: &["y"],
            opset: 17,
        },
        &[(&[2, 2], &[-1.0, 3.0, -2.0, 0.0])],
    );
}

#[test]
fn pow_is_exact_for_its_small_exponents_and_exp_of_log_otherwise() {
    let run = |e: f32| {
        Case {
            inputs: &[("x", &[3], &[4.0, 0.25, 9.0])],
            node: node("n", "Pow", &["x", "e"], &["y"]),
            inits: vec![common::floats("e", &[], &[e])],
            outputs: &["y"],
            opset: 17,
        }
        .run()
        .map(|o| o[0].data().to_vec())
    };
    assert_eq!(run(2.0).unwrap(), [16.0, 0.0625, 81.0]);
    assert_eq!(run(3.0).unwrap(), [64.0, 0.015625, 729.0]);
    assert_eq!(run(0.5).unwrap(), [2.0, 0.5, 3.0]);
    assert_eq!(run(-1.0).unwrap(), [0.25, 4.0, 1.0 / 9.0]);
    assert_eq!(run(-0.5).unwrap(), [0.5, 2.0, 1.0 / 3.0]);
    // any other exponent is exp(e·log x), for x > 0
    for (e, want) in [
        (2.5, [32.0, 0.03125, 243.0]),
        (-2.0, [0.0625, 16.0, 1.0 / 81.0]),
    ] {
        let got = run(e).unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-13 * w, "{e}: {got:?}");
        }
    }
    let e = run(f32::INFINITY).expect_err("an infinite exponent");
    assert!(e.to_string().contains("exponent inf"), "{e}");
    // an exponent that is a graph input, broadcast: exp(y·log x)
    let computed = |x: &[f64]| {
        Case {
            inputs: &[("x", &[2, 3], x), ("e", &[3], &[1.0, 2.0, 3.0])],
            node: node("n", "Pow", &["x", "e"], &["y"]),
            inits: vec![],
            outputs: &["y"],
            opset: 17,
        }
        .run()
        .map(|o| o[0].data().to_vec())
    };
    let got = computed(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    for (g, want) in got.iter().zip([1.0, 4.0, 27.0, 4.0, 25.0, 216.0]) {
        assert!((g - want).abs() <= 1e-13 * want, "{got:?}");
    }
    // a base of 0 is outside log's domain: refused when it runs, not a wrong value
    let bytes = model_with_inputs(
        &[("x", &[2]), ("e", &[2])],
        vec![node("n", "Pow", &["x", "e"], &["y"])],
        vec![],
        &["y"],
        17,
    );
    let imported = import_onnx(&bytes).unwrap();
    let xs: Vec<Tensor<f64>> = vec![
        Tensor::new([2], vec![0.0, 2.0]).unwrap(),
        Tensor::new([2], vec![2.0, 2.0]).unwrap(),
    ];
    let e = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &xs)
        .expect_err("log of 0");
    assert!(e.to_string().contains("log"), "{e}");
}

#[test]
fn clip_with_computed_bounds_is_max_then_min() {
    check(
        Case {
            inputs: &[
                ("x", &[4], &[-3.0, -0.5, 0.5, 3.0]),
                ("lo", &[], &[-1.0]),
                ("hi", &[], &[1.0]),
            ],
            node: node("n", "Clip", &["x", "lo", "hi"], &["y"]),
            inits: vec![],
            outputs: &["y"],
            opset: 13,
        },
        &[(&[4], &[-1.0, -0.5, 0.5, 1.0])],
    );
}

/// `x [2, 3] = [[1, 5, -2], [4, 0, 3]]` reduced by `op` over axis 1, keeping it.
fn reduced(op: &str) -> Vec<f64> {
    Case {
        inputs: &[("x", &[2, 3], &[1.0, 5.0, -2.0, 4.0, 0.0, 3.0])],
        node: with_attrs(
            node("n", op, &["x"], &["y"]),
            vec![ints_attr("axes", &[1]), int_attr("keepdims", 1)],
        ),
        inits: vec![],
        outputs: &["y"],
        opset: 17,
    }
    .run()
    .map(|o| {
        assert_eq!(o[0].shape().dims(), [2, 1], "{op}");
        o[0].data().to_vec()
    })
    .unwrap()
}

#[test]
fn reductions_the_ir_lacks_are_lowered() {
    assert_eq!(reduced("ReduceMax"), [5.0, 4.0]);
    assert_eq!(reduced("ReduceMin"), [-2.0, 0.0]);
    assert_eq!(reduced("ReduceSumSquare"), [30.0, 25.0]);
    assert_eq!(reduced("ReduceL2"), [30f64.sqrt(), 5.0]);
    let lse = reduced("ReduceLogSumExp");
    let want = [
        (1f64.exp() + 5f64.exp() + (-2f64).exp()).ln(),
        (4f64.exp() + 1.0 + 3f64.exp()).ln(),
    ];
    for (g, w) in lse.iter().zip(want) {
        assert!((g - w).abs() < 1e-14, "{lse:?} vs {want:?}");
    }
    // without keepdims, over every axis
    let all = Case {
        inputs: &[("x", &[2, 2], &[1.0, 7.0, -3.0, 2.0])],
        node: with_attrs(
            node("n", "ReduceMax", &["x"], &["y"]),
            vec![int_attr("keepdims", 0)],
        ),
        inits: vec![],
        outputs: &["y"],
        opset: 17,
    }
    .run()
    .unwrap();
    assert_eq!(all[0].shape().dims(), &[] as &[usize]);
    assert_eq!(all[0].data(), [7.0]);
}

#[test]
fn split_defines_every_output() {
    let x: &[f64] = &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
    // sizes from the `split` input (opset 13 on)
    check(
        Case {
            inputs: &[("x", &[2, 5], x)],
            node: with_attrs(
                node("n", "Split", &["x", "sizes"], &["a", "b"]),
                vec![int_attr("axis", 1)],
            ),
            inits: vec![common::int64s("sizes", &[2], &[2, 3])],
            outputs: &["a", "b"],
            opset: 17,
        },
        &[
            (&[2, 2], &[0.0, 1.0, 5.0, 6.0]),
            (&[2, 3], &[2.0, 3.0, 4.0, 7.0, 8.0, 9.0]),
        ],
    );
    // equal parts from the output count
    check(
        Case {
            inputs: &[("x", &[2, 5], x)],
            node: node("n", "Split", &["x"], &["a", "b"]),
            inits: vec![],
            outputs: &["b", "a"],
            opset: 17,
        },
        &[(&[1, 5], &x[5..]), (&[1, 5], &x[..5])],
    );
}

#[test]
fn layer_norm_gives_its_mean_and_inverse_deviation_when_asked() {
    let x: &[f64] = &[1.0, 3.0, -2.0, 2.0];
    let eps = 1e-5f32;
    let inv = |var: f64| 1.0 / (var + f64::from(eps)).sqrt();
    let (inv0, inv1) = (inv(1.0), inv(4.0));
    check(
        Case {
            inputs: &[("x", &[2, 2], x)],
            node: with_attrs(
                node(
                    "n",
                    "LayerNormalization",
                    &["x", "s"],
                    &["y", "mean", "isd"],
                ),
                vec![float_attr("epsilon", eps)],
            ),
            inits: vec![common::floats("s", &[2], &[1.0, 1.0])],
            outputs: &["y", "mean", "isd"],
            opset: 17,
        },
        &[
            (&[2, 2], &[-inv0, inv0, -2.0 * inv1, 2.0 * inv1]),
            (&[2, 1], &[2.0, 0.0]),
            (&[2, 1], &[inv0, inv1]),
        ],
    );
}

#[test]
fn global_max_pool_keeps_the_spatial_axes_as_ones() {
    check(
        Case {
            inputs: &[(
                "x",
                &[1, 2, 2, 2],
                &[1.0, 4.0, -1.0, 2.0, 0.0, -3.0, 7.0, 5.0],
            )],
            node: node("n", "GlobalMaxPool", &["x"], &["y"]),
            inits: vec![],
            outputs: &["y"],
            opset: 17,
        },
        &[(&[1, 2, 1, 1], &[4.0, 7.0])],
    );
}

#[test]
fn every_input_and_output_of_a_model_is_kept_by_name() {
    let bytes = model_with_inputs(
        &[("ids", &[2]), ("mask", &[2])],
        vec![
            node("a", "Mul", &["ids", "mask"], &["m"]),
            node("b", "Add", &["ids", "mask"], &["s"]),
        ],
        vec![],
        &["m", "s"],
        17,
    );
    let imported = import_onnx(&bytes).unwrap();
    let g = &imported.graph;
    assert_eq!(g.input_count(), 2);
    assert_eq!(g.input_names, ["ids", "mask"]);
    assert_eq!(g.output_count(), 2);
    let xs = vec![
        Tensor::new([2], vec![2.0, 3.0]).unwrap(),
        Tensor::new([2], vec![0.5, -1.0]).unwrap(),
    ];
    let out = torchlean_ir::denote_outputs(g, &imported.payload, &xs).unwrap();
    assert_eq!(out[0].data(), [1.0, -3.0]);
    assert_eq!(out[1].data(), [2.5, 2.0]);
}

/// A model whose input `ids` is INT64 (the others FLOAT).
fn with_int64_ids(bytes: Vec<u8>) -> Vec<u8> {
    use prost::Message;
    use torchlean_onnx::proto::{tensor_proto::DataType, type_proto, ModelProto};
    let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
    for v in &mut m.graph.as_mut().unwrap().input {
        if v.name() == "ids" {
            if let Some(type_proto::Value::TensorType(t)) =
                v.r#type.as_mut().and_then(|t| t.value.as_mut())
            {
                t.elem_type = Some(DataType::Int64 as i32);
            }
        }
    }
    m.encode_to_vec()
}

#[test]
fn an_int64_input_of_token_ids_feeds_an_embedding_and_nothing_else() {
    // Gather(table [3, 2], ids [2, 2]): a GPT's token embedding
    let bytes = with_int64_ids(model_with_inputs(
        &[("ids", &[2, 2])],
        vec![node("wte", "Gather", &["table", "ids"], &["e"])],
        vec![common::floats(
            "table",
            &[3, 2],
            &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0],
        )],
        &["e"],
        17,
    ));
    let imported = import_onnx(&bytes).unwrap();
    assert_eq!(imported.graph.input_count(), 1);
    let ids = Tensor::new([2, 2], vec![2.0, 0.0, 1.0, 1.0]).unwrap();
    let out = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &ids).unwrap();
    assert_eq!(out[0].shape().dims(), [2, 2, 2]);
    assert_eq!(
        out[0].data(),
        [20.0, 21.0, 0.0, 1.0, 10.0, 11.0, 10.0, 11.0]
    );
    // an id outside the table is the embedding's error, naming the position
    let bad = Tensor::new([2, 2], vec![0.0, 3.0, 0.0, 0.0]).unwrap();
    let e = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &bad)
        .expect_err("row 3 of 3");
    assert!(e.to_string().contains("embedding"), "{e}");
    // used as data by another op: refused, naming the way to bind it
    let added = with_int64_ids(model_with_inputs(
        &[("ids", &[2]), ("x", &[2])],
        vec![node("add", "Add", &["x", "ids"], &["y"])],
        vec![],
        &["y"],
        17,
    ));
    let e = import_onnx(&added).expect_err("ids used by Add");
    assert!(
        e.to_string().contains("token ids for Gather")
            && e.to_string().contains("Add is not here")
            && e.to_string().contains("--bind"),
        "{e}"
    );
}

/// An integer graph input that no `Gather` reads is integer data: it flows through the ops
/// that are exact on integers (here `Trilu`, `Max` with an INT64 constant, `Mul`), and the
/// output is its integer values; an op that is not exact on integers (`Div` truncates) still
/// refuses it.
#[test]
fn integer_data_flows_through_exact_ops_and_division_refuses_it() {
    let bytes = with_int64_ids(model_with_inputs(
        &[("ids", &[2, 3])],
        vec![
            node("tri", "Trilu", &["ids"], &["t"]),
            node("max", "Max", &["t", "floor"], &["m"]),
            node("mul", "Mul", &["m", "m"], &["y"]),
        ],
        vec![common::int64s("floor", &[1], &[-2])],
        &["y"],
        17,
    ));
    let imported = import_onnx(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let x = Tensor::new([2, 3], vec![-5.0, 3.0, 4.0, 7.0, -1.0, 9.0]).unwrap();
    let out = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &x).unwrap();
    // triu: [[-5, 3, 4], [0, -1, 9]]; max with -2: [[-2, 3, 4], [0, -1, 9]]; squared
    assert_eq!(out[0].data(), [4.0, 9.0, 16.0, 0.0, 1.0, 81.0]);
    let divided = with_int64_ids(model_with_inputs(
        &[("ids", &[2])],
        vec![node("div", "Div", &["ids", "two"], &["y"])],
        vec![common::int64s("two", &[1], &[2])],
        &["y"],
        17,
    ));
    let e = import_onnx(&divided).expect_err("integer Div");
    assert!(e.to_string().contains("integer graph input"), "{e}");
}

/// A BOOL initializer.
fn bools(name: &str, dims: &[i64], v: &[bool]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(torchlean_onnx::proto::tensor_proto::DataType::Bool as i32),
        raw_data: Some(v.iter().map(|&b| u8::from(b)).collect()),
        ..Default::default()
    }
}

#[test]
fn where_with_a_constant_condition_selects_exactly_even_an_infinite_fill() {
    // masked_fill(x, mask, -inf): Where(mask [2, 2], -inf, x), the condition broadcast
    let got = Case {
        inputs: &[("x", &[2, 2], &[1.5, -2.0, 3.0, -0.0])],
        node: node("n", "Where", &["c", "fill", "x"], &["y"]),
        inits: vec![
            bools("c", &[2, 2], &[false, true, true, false]),
            common::floats("fill", &[], &[f32::NEG_INFINITY]),
        ],
        outputs: &["y"],
        opset: 17,
    }
    .run()
    .unwrap();
    assert_eq!(got[0].data()[0], 1.5);
    assert_eq!(got[0].data()[1], f64::NEG_INFINITY);
    assert_eq!(got[0].data()[2], f64::NEG_INFINITY);
    assert_eq!(got[0].data()[3], 0.0);
    // both sides data, the condition a broadcast row
    check(
        Case {
            inputs: &[
                ("a", &[2, 2], &[1.0, 2.0, 3.0, 4.0]),
                ("b", &[2], &[-1.0, -2.0]),
            ],
            node: node("n", "Where", &["c", "a", "b"], &["y"]),
            inits: vec![bools("c", &[2], &[true, false])],
            outputs: &["y"],
            opset: 17,
        },
        &[(&[2, 2], &[1.0, -2.0, 3.0, -2.0])],
    );
    // a condition that is data is refused
    let e = Case {
        inputs: &[("c", &[2], &[1.0, 0.0]), ("a", &[2], &[1.0, 2.0])],
        node: node("n", "Where", &["c", "a", "a"], &["y"]),
        inits: vec![],
        outputs: &["y"],
        opset: 17,
    }
    .run()
    .expect_err("a computed condition");
    assert!(e.to_string().contains("must be a constant"), "{e}");
}

#[test]
fn shape_arithmetic_on_constants_folds_into_a_reshape_target() {
    // Reshape(x [2, 3], Concat(Unsqueeze(3), Unsqueeze(2))): what exporters emit for `view`
    let scalar = |name: &str, v: i64| common::int64s(name, &[], &[v]);
    let nodes = vec![
        node("u0", "Unsqueeze", &["d0", "axes"], &["s0"]),
        node("u1", "Unsqueeze", &["d1", "axes"], &["s1"]),
        with_attrs(
            node("cat", "Concat", &["s0", "s1"], &["shape"]),
            vec![int_attr("axis", 0)],
        ),
        node("r", "Reshape", &["x", "shape"], &["y"]),
    ];
    let bytes = model_with_inputs(
        &[("x", &[2, 3])],
        nodes,
        vec![
            scalar("d0", 3),
            scalar("d1", 2),
            common::int64s("axes", &[1], &[0]),
        ],
        &["y"],
        17,
    );
    let imported = import_onnx(&bytes).unwrap();
    // nothing of the shape arithmetic is left in the graph: input, reshape
    assert_eq!(
        imported.graph.len(),
        2,
        "{}",
        torchlean_ir::pretty(&imported.graph)
    );
    let x = Tensor::new([2, 3], (0..6).map(f64::from).collect()).unwrap();
    let out = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &x).unwrap();
    assert_eq!(out[0].shape().dims(), [3, 2]);
    // a float initializer stays a parameter: Unsqueeze of a weight is a node, not a fold
    let w = Case {
        inputs: &[("x", &[1, 2], &[1.0, 2.0])],
        node: node("u", "Unsqueeze", &["w", "axes"], &["y"]),
        inits: vec![
            common::floats("w", &[2], &[0.5, 0.25]),
            common::int64s("axes", &[1], &[0]),
        ],
        outputs: &["y"],
        opset: 17,
    };
    let shapes: Vec<(&str, &[i64])> = w.inputs.iter().map(|(n, d, _)| (*n, *d)).collect();
    let bytes = model_with_inputs(&shapes, vec![w.node], w.inits, w.outputs, w.opset);
    let imported = import_onnx(&bytes).unwrap();
    assert!(
        imported.param("w").is_some(),
        "the weight is a payload tensor"
    );
}

/// `x [2, 3] = [[0, 1, 2], [3, 4, 5]]` through a one-node model of `op` with `attrs` and
/// initializers, at opset 17.
fn on_2x3(
    op: &str,
    extra: &[&str],
    attrs: Vec<torchlean_onnx::proto::AttributeProto>,
    inits: Vec<TensorProto>,
) -> Tensor<f64> {
    let mut names = vec!["x"];
    names.extend_from_slice(extra);
    Case {
        inputs: &[("x", &[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0])],
        node: with_attrs(node("n", op, &names, &["y"]), attrs),
        inits,
        outputs: &["y"],
        opset: 17,
    }
    .first()
}

#[test]
fn layout_ops_lower_to_slices_and_concats() {
    let t = on_2x3(
        "Tile",
        &["r"],
        vec![],
        vec![common::int64s("r", &[2], &[1, 2])],
    );
    assert_eq!(t.shape().dims(), [2, 6]);
    assert_eq!(t.data(), [0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5.]);
    // pads [begin axis 0, begin axis 1, end axis 0, end axis 1]
    let pad = |mode: &str, pads: &[i64]| {
        on_2x3(
            "Pad",
            &["p"],
            vec![common::str_attr("mode", mode)],
            vec![common::int64s("p", &[4], pads)],
        )
    };
    let c = pad("constant", &[0, 1, 0, 2]);
    assert_eq!(c.shape().dims(), [2, 6]);
    assert_eq!(c.data(), [0., 0., 1., 2., 0., 0., 0., 3., 4., 5., 0., 0.]);
    let e = pad("edge", &[1, 0, 0, 1]);
    assert_eq!(e.data(), [0., 1., 2., 2., 0., 1., 2., 2., 3., 4., 5., 5.]);
    let r = pad("reflect", &[0, 2, 0, 1]);
    assert_eq!(r.data(), [2., 1., 0., 1., 2., 1., 5., 4., 3., 4., 5., 4.]);
    // negative pads crop
    let crop = pad("constant", &[0, -1, 0, 0]);
    assert_eq!(crop.data(), [1., 2., 4., 5.]);
    // Gather along axis 1, indices [2] with a negative one
    let g = on_2x3(
        "Gather",
        &["i"],
        vec![int_attr("axis", 1)],
        vec![common::int64s("i", &[2], &[-1, 0])],
    );
    assert_eq!(g.shape().dims(), [2, 2]);
    assert_eq!(g.data(), [2., 0., 5., 3.]);
    let upper = on_2x3("Trilu", &[], vec![], vec![]);
    assert_eq!(upper.data(), [0., 1., 2., 0., 4., 5.]);
    let lower = on_2x3(
        "Trilu",
        &["k"],
        vec![int_attr("upper", 0)],
        vec![common::int64s("k", &[], &[-1])],
    );
    assert_eq!(lower.data(), [0., 0., 0., 3., 0., 0.]);
}

#[test]
fn celu_and_the_normalizations_lower_exactly_enough() {
    let celu = on_2x3("Celu", &[], vec![float_attr("alpha", 2.0)], vec![]);
    assert_eq!(celu.data(), [0., 1., 2., 3., 4., 5.]);
    unary(
        "Celu",
        &[-2.0],
        vec![float_attr("alpha", 2.0)],
        &[2.0 * ((-1f64).exp() - 1.0)],
    );
    // x [1, 2, 2] (N, C, L): each channel normalised over L, then scale and bias per channel
    let eps = 1e-5f32;
    let inv = 1.0 / (1.0 + f64::from(eps)).sqrt();
    let norm = |op: &str, attrs| {
        Case {
            inputs: &[("x", &[1, 2, 2], &[1.0, 3.0, -1.0, 1.0])],
            node: with_attrs(node("n", op, &["x", "s", "b"], &["y"]), attrs),
            inits: vec![
                common::floats("s", &[2], &[2.0, 1.0]),
                common::floats("b", &[2], &[0.5, -0.5]),
            ],
            outputs: &["y"],
            opset: 21,
        }
        .first()
    };
    let want = [0.5 - 2.0 * inv, 0.5 + 2.0 * inv, -0.5 - inv, -0.5 + inv];
    let close = |got: &Tensor<f64>| {
        for (g, w) in got.data().iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{:?} vs {want:?}", got.data());
        }
    };
    close(&norm(
        "InstanceNormalization",
        vec![float_attr("epsilon", eps)],
    ));
    // two groups of one channel each: the same as the instance norm
    close(&norm(
        "GroupNormalization",
        vec![float_attr("epsilon", eps), int_attr("num_groups", 2)],
    ));
}

/// A pool of `op` over `x [1, 1, h, w]` (values 0, 1, …) with `attrs`.
fn pooled(
    op: &str,
    hw: [usize; 2],
    attrs: Vec<torchlean_onnx::proto::AttributeProto>,
) -> Tensor<f64> {
    let values: Vec<f64> = (0..hw[0] * hw[1]).map(|v| v as f64).collect();
    let dims = [1, 1, hw[0] as i64, hw[1] as i64];
    Case {
        inputs: &[("x", &dims, &values)],
        node: with_attrs(node("n", op, &["x"], &["y"]), attrs),
        inits: vec![],
        outputs: &["y"],
        opset: 17,
    }
    .first()
}

#[test]
fn pools_the_ir_lacks_pad_explicitly_and_rescale_their_averages() {
    // ceil_mode: a partial last window (kernel 3, stride 2 over 4: windows at 0 and 2)
    let ceil = pooled(
        "MaxPool",
        [4, 4],
        vec![
            ints_attr("kernel_shape", &[3, 3]),
            ints_attr("strides", &[2, 2]),
            int_attr("ceil_mode", 1),
        ],
    );
    assert_eq!(ceil.shape().dims(), [1, 1, 2, 2]);
    assert_eq!(ceil.data(), [10.0, 11.0, 14.0, 15.0]);
    // count_include_pad=0 with padding: each average over the real elements only
    let avg = pooled(
        "AveragePool",
        [2, 2],
        vec![
            ints_attr("kernel_shape", &[2, 2]),
            ints_attr("pads", &[1, 1, 1, 1]),
        ],
    );
    assert_eq!(avg.shape().dims(), [1, 1, 3, 3]);
    let want = [0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0];
    for (g, w) in avg.data().iter().zip(want) {
        assert!((g - w).abs() < 1e-15, "{:?}", avg.data());
    }
    // SAME_UPPER, stride 1, kernel 2 over 3: one padded column and row at the end
    let same = pooled(
        "MaxPool",
        [3, 3],
        vec![
            ints_attr("kernel_shape", &[2, 2]),
            common::str_attr("auto_pad", "SAME_UPPER"),
        ],
    );
    assert_eq!(same.shape().dims(), [1, 1, 3, 3]);
    assert_eq!(same.data(), [4.0, 5.0, 5.0, 7.0, 8.0, 8.0, 7.0, 8.0, 8.0]);
    // asymmetric pads on a max pool: −∞ never wins
    let asym = pooled(
        "MaxPool",
        [2, 2],
        vec![
            ints_attr("kernel_shape", &[2, 2]),
            ints_attr("pads", &[1, 0, 0, 0]),
        ],
    );
    assert_eq!(asym.shape().dims(), [1, 1, 2, 1]);
    assert_eq!(asym.data(), [1.0, 3.0]);
}

#[test]
fn hard_swish_and_mish_are_their_formulas() {
    // x · clamp(x/6 + 1/2, 0, 1): 0 below −3, x above 3
    unary(
        "HardSwish",
        &[-4.0, 0.0, 1.5, 4.0],
        vec![],
        &[0.0, 0.0, 1.125, 4.0],
    );
    let mish = |x: f64| x * (x.exp().ln_1p()).tanh();
    unary(
        "Mish",
        &[-1.0, 0.0, 2.0],
        vec![],
        &[mish(-1.0), 0.0, mish(2.0)],
    );
}

#[test]
fn matmul_promotes_rank_1_operands_as_numpy() {
    let mm = |a: (&[i64], &[f64]), b: (&[i64], &[f64])| {
        Case {
            inputs: &[("a", a.0, a.1), ("b", b.0, b.1)],
            node: node("n", "MatMul", &["a", "b"], &["y"]),
            inits: vec![],
            outputs: &["y"],
            opset: 17,
        }
        .first()
    };
    // [3]·[3]: a scalar
    let dot = mm((&[3], &[1.0, 2.0, 3.0]), (&[3], &[4.0, 5.0, 6.0]));
    assert_eq!((dot.shape().dims(), dot.data()), (&[][..], &[32.0][..]));
    // [2]·[2, 2, 3]: [2, 3], the vector times each matrix
    let left = mm(
        (&[2], &[1.0, -1.0]),
        (
            &[2, 2, 3],
            &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.],
        ),
    );
    assert_eq!(left.shape().dims(), [2, 3]);
    assert_eq!(left.data(), [-3., -3., -3., -3., -3., -3.]);
    // [2, 3]·[3]: [2], each row times the vector
    let right = mm(
        (&[2, 3], &[1., 2., 3., 4., 5., 6.]),
        (&[3], &[1.0, 0.0, -1.0]),
    );
    assert_eq!(
        (right.shape().dims(), right.data()),
        (&[2][..], &[-2.0, -2.0][..])
    );
}

#[test]
fn slices_with_steps_take_every_visited_position() {
    // axis 1 of [[0 1 2] [3 4 5]]: step 2 from 0, step −1 from the end, step −2 from 2 to 0
    let stepped = |starts: i64, ends: i64, step: i64| {
        on_2x3(
            "Slice",
            &["s", "e", "a", "t"],
            vec![],
            vec![
                common::int64s("s", &[1], &[starts]),
                common::int64s("e", &[1], &[ends]),
                common::int64s("a", &[1], &[1]),
                common::int64s("t", &[1], &[step]),
            ],
        )
    };
    assert_eq!(stepped(0, 3, 2).data(), [0., 2., 3., 5.]);
    assert_eq!(stepped(-1, i64::MIN, -1).data(), [2., 1., 0., 5., 4., 3.]);
    let back = stepped(2, 0, -2);
    assert_eq!(
        (back.shape().dims(), back.data()),
        (&[2, 1][..], &[2., 5.][..])
    );
}

#[test]
fn a_1d_pool_is_a_2d_pool_over_one_row() {
    // [1, 1, 5], kernel 2, stride 2, pads [1, 0]: windows over (pad, 0), (1, 2), (3, 4)
    let x = [1.0, 2.0, 3.0, 4.0, 5.0];
    let run = |op: &str| {
        Case {
            inputs: &[("x", &[1, 1, 5], &x)],
            node: with_attrs(
                node("n", op, &["x"], &["y"]),
                vec![
                    ints_attr("kernel_shape", &[2]),
                    ints_attr("strides", &[2]),
                    ints_attr("pads", &[1, 0]),
                ],
            ),
            inits: vec![],
            outputs: &["y"],
            opset: 17,
        }
        .first()
    };
    let max = run("MaxPool");
    assert_eq!(
        (max.shape().dims(), max.data()),
        (&[1, 1, 3][..], &[1., 3., 5.][..])
    );
    // count_include_pad = 0: the first window averages its one real element
    assert_eq!(run("AveragePool").data(), [1.0, 2.5, 4.5]);
}

/// A pool of `op` over `x` (values 0, 1, … in shape `dims`) with `attrs`.
fn pooled_nd(
    op: &str,
    dims: &[i64],
    attrs: Vec<torchlean_onnx::proto::AttributeProto>,
) -> Tensor<f64> {
    let values: Vec<f64> = (0..dims.iter().product::<i64>())
        .map(|v| v as f64)
        .collect();
    Case {
        inputs: &[("x", dims, &values)],
        node: with_attrs(node("n", op, &["x"], &["y"]), attrs),
        inits: vec![],
        outputs: &["y"],
        opset: 19,
    }
    .first()
}

#[test]
fn dilated_3d_and_per_axis_strided_pools_are_slices_of_the_input() {
    // dilation 2 over 4 × 4: each window sees (i, i + 2) × (j, j + 2)
    let max = pooled_nd(
        "MaxPool",
        &[1, 1, 4, 4],
        vec![
            ints_attr("kernel_shape", &[2, 2]),
            ints_attr("dilations", &[2, 2]),
        ],
    );
    assert_eq!(
        (max.shape().dims(), max.data()),
        (&[1, 1, 2, 2][..], &[10., 11., 14., 15.][..])
    );
    // dilation 2 with one padded row and column on each side, over 3 × 3: window (i, j)
    // samples input rows i − 1 and i + 1 (and the columns so), some of them padding
    let padded = |count_include_pad| {
        pooled_nd(
            "AveragePool",
            &[1, 1, 3, 3],
            vec![
                ints_attr("kernel_shape", &[2, 2]),
                ints_attr("dilations", &[2, 2]),
                ints_attr("pads", &[1, 1, 1, 1]),
                int_attr("count_include_pad", count_include_pad),
            ],
        )
    };
    // the real elements alone: (4), (3 + 5) / 2, …, (0 + 2 + 6 + 8) / 4 — all 4
    assert_eq!(padded(0).data(), [4.0; 9]);
    // padding counted as zeros: each window's sum over its four positions
    assert_eq!(
        padded(1).data(),
        [1.0, 2.0, 1.0, 2.0, 4.0, 2.0, 1.0, 2.0, 1.0]
    );
    // a stride per axis: rows one by one, column pairs two apart
    let strided = pooled_nd(
        "AveragePool",
        &[1, 1, 4, 4],
        vec![
            ints_attr("kernel_shape", &[1, 2]),
            ints_attr("strides", &[1, 2]),
        ],
    );
    assert_eq!(
        (strided.shape().dims(), strided.data()),
        (
            &[1, 1, 4, 2][..],
            &[0.5, 2.5, 4.5, 6.5, 8.5, 10.5, 12.5, 14.5][..]
        )
    );
    // 3-D: a 2 × 2 × 2 window over 2 × 2 × 3, stride 1
    let cube = |op| {
        pooled_nd(
            op,
            &[1, 1, 2, 2, 3],
            vec![ints_attr("kernel_shape", &[2, 2, 2])],
        )
    };
    let max = cube("MaxPool");
    assert_eq!(
        (max.shape().dims(), max.data()),
        (&[1, 1, 1, 1, 2][..], &[10., 11.][..])
    );
    // (0 + 1 + 3 + 4 + 6 + 7 + 9 + 10) / 8 and the window one further
    assert_eq!(cube("AveragePool").data(), [5.0, 6.0]);
}

#[test]
fn an_lp_pool_is_the_p_norm_of_each_window() {
    // windows of 2 over [3, −4, 12]: (3, −4) and (−4, 12)
    let lp = |p| {
        Case {
            inputs: &[("x", &[1, 1, 3], &[3.0, -4.0, 12.0])],
            node: with_attrs(
                node("n", "LpPool", &["x"], &["y"]),
                vec![ints_attr("kernel_shape", &[2]), int_attr("p", p)],
            ),
            inits: vec![],
            outputs: &["y"],
            opset: 18,
        }
        .run()
        .map(|o| o[0].data().to_vec())
    };
    assert_eq!(lp(1).unwrap(), [7.0, 16.0]);
    assert_eq!(lp(2).unwrap(), [5.0, 160f64.sqrt()]);
    let cubes = lp(3).unwrap();
    for (got, sum) in cubes.iter().zip([91.0f64, 1792.0]) {
        assert!((got - sum.cbrt()).abs() <= 1e-13 * got, "{cubes:?}");
    }
    let e = lp(5).expect_err("p = 5");
    assert!(e.to_string().contains("1, 2, 3 or 4"), "{e}");
}

/// Exporters merge equal initializers: two convolutions sharing one bias (BN-folded zeros in a
/// fresh torchvision model). Each conv gets a zero bias and the shared one is added as data, so
/// its gradient is the sum over both uses.
#[test]
fn convolutions_sharing_a_bias_initializer_add_it_as_data() {
    let bytes = model_with_inputs(
        &[("x", &[1, 1, 2, 2])],
        vec![
            node("c1", "Conv", &["x", "w1", "b"], &["h"]),
            node("c2", "Conv", &["h", "w2", "b"], &["y"]),
        ],
        vec![
            common::floats("w1", &[1, 1, 1, 1], &[2.0]),
            common::floats("w2", &[1, 1, 1, 1], &[3.0]),
            common::floats("b", &[1], &[1.0]),
        ],
        &["y"],
        17,
    );
    let imported = import_onnx(&bytes).unwrap();
    let x = Tensor::new(Shape::from([1, 1, 2, 2]), vec![0.0, 1.0, -1.0, 0.5]).unwrap();
    let y = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &x).unwrap();
    // 3·(2x + 1) + 1
    assert_eq!(y[0].data(), [4.0, 10.0, -2.0, 7.0]);
    // the shared bias is one tensor of the graph, under its name
    assert!(imported.param("b").is_some());
}

/// Shape arithmetic as DepthToSpace's and CenterCropPad's expansions write it: `Shape`, then
/// `Slice` (a negative step too), integer `Min`/`Max` and `Concat` of the pieces fold at
/// import into the constant target `Reshape` needs.
#[test]
fn sliced_shapes_and_integer_min_max_fold_into_a_reshape_target() {
    let x: Vec<f64> = (0..24).map(f64::from).collect();
    let slice = |name: &str, out: &str| {
        node(
            name,
            "Slice",
            &[
                "s",
                &format!("{name}_b"),
                &format!("{name}_e"),
                "ax",
                &format!("{name}_st"),
            ],
            &[out],
        )
    };
    let nodes = vec![
        node("shape", "Shape", &["x"], &["s"]),
        slice("n", "n"),
        slice("c", "c"),
        node("cmin", "Min", &["c", "seven"], &["c7"]),
        node("cmax", "Max", &["c7", "one"], &["c1"]),
        slice("hw", "wh"),
        with_attrs(
            node("cat", "Concat", &["n", "c1", "wh"], &["target"]),
            vec![int_attr("axis", 0)],
        ),
        node("r", "Reshape", &["x", "target"], &["y"]),
    ];
    let mut inits = vec![
        common::int64s("ax", &[1], &[0]),
        common::int64s("seven", &[1], &[7]),
        common::int64s("one", &[1], &[1]),
    ];
    // n = s[0..1], c = s[1..2], wh = s[3], s[2] (step -1)
    for (name, b, e, st) in [("n", 0, 1, 1), ("c", 1, 2, 1), ("hw", 3, 1, -1)] {
        inits.push(common::int64s(&format!("{name}_b"), &[1], &[b]));
        inits.push(common::int64s(&format!("{name}_e"), &[1], &[e]));
        inits.push(common::int64s(&format!("{name}_st"), &[1], &[st]));
    }
    let bytes = model_with_inputs(&[("x", &[1, 4, 2, 3])], nodes, inits, &["y"], 17);
    let imported = import_onnx(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let input = Tensor::new([1, 4, 2, 3], x.clone()).unwrap();
    let y = torchlean_ir::denote_outputs(&imported.graph, &imported.payload, &input)
        .unwrap()
        .remove(0);
    assert_eq!(y.shape().dims(), [1, 4, 3, 2]);
    assert_eq!(y.data(), x.as_slice());
}

/// `LRN` over 3 channels, window 3: `x / (bias + alpha/size · Σ x²)^beta`, the window's sum
/// reaching past the first and last channel into zeros.
#[test]
fn lrn_normalises_by_the_channel_window_sum_of_squares() {
    let x = [1.0, 2.0, 3.0];
    // sums 0+1+4, 1+4+9, 4+9+0; bias 1 + alpha/3·sum (alpha the f32 0.3 ONNX stores); beta 0.5
    let per_channel = f64::from(0.3f32) / 3.0;
    let want: Vec<f64> = [(1.0, 5.0), (2.0, 14.0), (3.0, 13.0)]
        .iter()
        .map(|&(v, s): &(f64, f64)| v / (1.0 + per_channel * s).sqrt())
        .collect();
    check(
        Case {
            inputs: &[("x", &[1, 3, 1, 1], &x)],
            node: with_attrs(
                node("n", "LRN", &["x"], &["y"]),
                vec![
                    int_attr("size", 3),
                    float_attr("alpha", 0.3),
                    float_attr("beta", 0.5),
                ],
            ),
            inits: vec![],
            outputs: &["y"],
            opset: 17,
        },
        &[(&[1, 3, 1, 1], &want)],
    );
}

/// A 1-D `Conv` (`[N, C, L]`, kernel `[O, C, k]`) with a dilation, asymmetric pads and a bias:
/// a 2-D convolution over a height of 1.
#[test]
fn a_1d_conv_is_a_2d_one_over_a_height_of_one() {
    // padded [0, 1, 2, 3, 4, 5]; taps 2·x[i] − x[i + 2]; + 0.5
    check(
        Case {
            inputs: &[("x", &[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0])],
            node: with_attrs(
                node("n", "Conv", &["x", "w", "b"], &["y"]),
                vec![ints_attr("pads", &[1, 0]), ints_attr("dilations", &[2])],
            ),
            inits: vec![
                common::floats("w", &[1, 1, 2], &[2.0, -1.0]),
                common::floats("b", &[1], &[0.5]),
            ],
            outputs: &["y"],
            opset: 17,
        },
        &[(&[1, 1, 4], &[-1.5, -0.5, 0.5, 1.5])],
    );
}

/// `ConvTranspose` (1-D, stride 2, one pad at the start, an output padding): each input element
/// scatters the kernel times itself at `stride` apart; the pad crops the first output.
#[test]
fn conv_transpose_scatters_the_kernel_at_stride_apart() {
    // x = [1, 2], w = [1, 10]: [1, 10, 2, 20] + one output-padding zero, first cropped; + 0.5
    check(
        Case {
            inputs: &[("x", &[1, 1, 2], &[1.0, 2.0])],
            node: with_attrs(
                node("n", "ConvTranspose", &["x", "w", "b"], &["y"]),
                vec![
                    ints_attr("strides", &[2]),
                    ints_attr("pads", &[1, 0]),
                    ints_attr("output_padding", &[1]),
                ],
            ),
            inits: vec![
                common::floats("w", &[1, 1, 2], &[1.0, 10.0]),
                common::floats("b", &[1], &[0.5]),
            ],
            outputs: &["y"],
            opset: 17,
        },
        &[(&[1, 1, 4], &[10.5, 2.5, 20.5, 0.5])],
    );
}
