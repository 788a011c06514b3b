//! The executable versions of TorchLean's theorems about compiled graphs (SPEC 2.2/2.3), on the
//! shipped graphs and on hand-written graphs covering the remaining kinds:
//! - lowering agrees with `denote_all` on every node;
//! - compiled tape values equal `GraphData::eval`;
//! - `backward_dense_from` on the compiled tape equals `backprop_all_ctx` (rational: exactly;
//!   f64: bit for bit, for arbitrary seeds in `FullContext` mode and for seeds without `-0` in
//!   `Compact` mode);
//! - `backprop_array`, `backprop_inputs_array`, `backprop_stored` equal their dense references
//!   bit for bit, also for opaque (arbitrary) VJPs;
//! - `backprop_ctx` runs through the saved path and equals the reference;
//! - `backprop_from` equals `backward_dense_all` on the compact tape.
#![allow(clippy::unwrap_used)]

use crate::common;

use serde_json::json;
use torchlean_compiled::*;
use torchlean_ir::{denote_all, Case, Graph, Payload};
use torchlean_runtime::Kernels;
use torchlean_spec::{ops::splitmix64, Op, Rational, Scalar, Shape, Tensor};

/// A deterministic seed tensor with mixed signs, including `-0.0` when `with_neg_zero`.
fn seed_tensor<A: Scalar>(shape: &Shape, salt: u64, with_neg_zero: bool) -> Tensor<A> {
    let mut s = salt;
    Tensor::from_fn(shape.clone(), |_| {
        s = splitmix64(s);
        let k = (s % 9) as i64 - 4;
        if with_neg_zero && k == 0 {
            A::from_f64(-0.0).unwrap()
        } else {
            A::from_f64(k as f64 / 4.0).unwrap()
        }
    })
    .unwrap()
}

fn full_seed<V: Kernels>(values: &[V], salt: u64, with_neg_zero: bool) -> Vec<V> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            V::from_f64(&seed_tensor::<f64>(
                v.shape(),
                salt + i as u64,
                with_neg_zero,
            ))
            .unwrap()
        })
        .collect()
}

fn inputs<V: Kernels>(case: &Case) -> (ExecGraph, Vec<V>) {
    let exec = exec_graph_of_ir(&case.graph, &case.payload).unwrap();
    let x = exec.inputs::<V>(&case.inputs, &case.payload).unwrap();
    (exec, x)
}

fn all_bit_eq<V: Kernels>(a: &[V], b: &[V]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.bit_eq(y))
}

/// Hand-written graphs for the kinds and shapes the shipped cases do not cover, all algebraic
/// so they also run over the rationals.
fn extra_cases() -> Vec<Case> {
    let g = json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 16,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2, 3]},
            {"id": 1, "kind": "const", "parents": [], "shape": [3], "value_shape": [3]},
            {"id": 2, "kind": "broadcast_to", "parents": [1], "shape": [2, 3], "from_shape": [3], "to_shape": [2, 3]},
            {"id": 3, "kind": "div", "parents": [0, 2], "shape": [2, 3]},
            {"id": 4, "kind": "add", "parents": [3, 3], "shape": [2, 3]},
            {"id": 5, "kind": "detach", "parents": [4], "shape": [2, 3]},
            {"id": 6, "kind": "mul_elem", "parents": [4, 5], "shape": [2, 3]},
            {"id": 7, "kind": "swap_first_two", "parents": [6], "shape": [3, 2]},
            {"id": 8, "kind": "matmul", "parents": [7, 0], "shape": [3, 3]},
            {"id": 9, "kind": "reduce_sum", "parents": [8], "shape": [3], "axis": 0},
            {"id": 10, "kind": "reduce_mean", "parents": [8], "shape": [3], "axis": 1},
            {"id": 11, "kind": "concat", "parents": [9, 10, 9], "shape": [9], "axis": 0},
            {"id": 12, "kind": "reshape", "parents": [11], "shape": [3, 3], "in_shape": [9], "out_shape": [3, 3]},
            {"id": 13, "kind": "permute", "parents": [12], "shape": [3, 3], "perm": [1, 0]},
            {"id": 14, "kind": "max_elem", "parents": [13, 12], "shape": [3, 3]},
            {"id": 15, "kind": "abs", "parents": [14], "shape": [3, 3]},
            {"id": 16, "kind": "sum", "parents": [15], "shape": []}
        ]
    });
    let mut payload = Payload::new();
    payload.insert(1, "value", Tensor::new([3], vec![0.5, -2.0, 4.0]).unwrap());
    let x = Tensor::new([2, 3], vec![0.25, -1.5, 2.0, 3.0, -0.75, 1.0]).unwrap();
    vec![Case {
        name: "algebraic_kinds".into(),
        graph: Graph::from_json(&g).unwrap(),
        payload,
        inputs: vec![x],
        seed: None,
        expect: Default::default(),
        tolerance: Default::default(),
        dtype: torchlean_ir::DType::F64,
    }]
}

fn algebraic_cases() -> Vec<Case> {
    let mut v: Vec<Case> = common::ALGEBRAIC.iter().map(|n| common::case(n)).collect();
    v.extend(extra_cases());
    v
}

fn all_cases() -> Vec<Case> {
    let mut v = common::cases();
    v.extend(extra_cases());
    v
}

#[test]
fn lowering_agrees_with_denote_all_on_every_node() {
    for case in all_cases() {
        let denoted = denote_all::<f64>(&case.graph, &case.payload, &case.inputs).unwrap();
        let (exec, x) = inputs::<Tensor<f64>>(&case);
        let ctx = exec.graph.eval(x).unwrap();
        for (id, d) in denoted.iter().enumerate() {
            assert!(
                d.bit_eq(&ctx[exec.ir_positions[id]]),
                "{} node {id}",
                case.name
            );
        }
    }
    for case in algebraic_cases() {
        let x = case.inputs[0].convert::<Rational>().unwrap();
        let denoted = denote_all::<Rational>(&case.graph, &case.payload, &x).unwrap();
        let (exec, xs) = inputs::<Tensor<Rational>>(&case);
        let ctx = exec.graph.eval(xs).unwrap();
        for (id, d) in denoted.iter().enumerate() {
            assert_eq!(d, &ctx[exec.ir_positions[id]], "{} node {id}", case.name);
        }
    }
}

#[test]
fn compiled_tape_values_equal_eval() {
    for case in all_cases() {
        let (exec, x) = inputs::<Tensor<f64>>(&case);
        let evaluated = exec.graph.eval(x.clone()).unwrap();
        let (tape, values) = compile(&exec.graph, x).unwrap();
        assert!(all_bit_eq(&values, &evaluated), "{}", case.name);
        for (i, v) in evaluated.iter().enumerate() {
            assert!(
                tape.get_value(i).unwrap().bit_eq(v),
                "{} position {i}",
                case.name
            );
        }
    }
}

fn check_tape_vs_reference<V: Kernels>(case: &Case, exact: impl Fn(&[V], &[V]) -> bool) {
    let (exec, x) = inputs::<V>(case);
    let values = exec.graph.eval(x.clone()).unwrap();
    for (salt, neg_zero) in [(1u64, true), (2, false)] {
        let seed = full_seed(&values, salt, neg_zero);
        let reference = backprop_all_ctx(&exec.graph, x.clone(), seed.clone()).unwrap();
        let (full, _) = compile_with(&exec.graph, x.clone(), CompileMode::FullContext).unwrap();
        let got = full.backward_dense_from(seed.clone()).unwrap();
        assert!(
            exact(&got, &reference),
            "{}: full-context tape vs backprop_all_ctx",
            case.name
        );
        if !neg_zero {
            let (compact, _) = compile(&exec.graph, x.clone()).unwrap();
            let got = compact.backward_dense_from(seed).unwrap();
            assert!(
                exact(&got, &reference),
                "{}: compact tape vs backprop_all_ctx",
                case.name
            );
        }
    }
}

#[test]
fn backward_dense_from_on_the_compiled_tape_is_backprop_all_ctx() {
    for case in all_cases() {
        check_tape_vs_reference::<Tensor<f64>>(&case, all_bit_eq);
    }
    for case in algebraic_cases() {
        check_tape_vs_reference::<Tensor<Rational>>(&case, |a, b| a == b);
    }
}

#[test]
fn compact_mode_differs_from_the_reference_only_through_negative_zero_seeds() {
    // the documented boundary of the compact claim: a seed of -0 at a position that receives no
    // contribution stays -0 on the compact tape, but becomes +0 in the reference, where every
    // later node adds zero to it (-0 + 0 = +0)
    let g = json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 2,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "abs", "parents": [0], "shape": [2]},
            {"id": 2, "kind": "neg", "parents": [0], "shape": [2]}
        ]
    });
    let exec = exec_graph_of_ir(&Graph::from_json(&g).unwrap(), &Payload::new()).unwrap();
    let x = vec![Tensor::new([2], vec![1.0, -2.0]).unwrap()];
    let seed: Vec<Tensor<f64>> = vec![
        Tensor::new([2], vec![0.0, 0.0]).unwrap(),
        Tensor::new([2], vec![-0.0, -0.0]).unwrap(),
        Tensor::new([2], vec![1.0, 1.0]).unwrap(),
    ];
    let reference = backprop_all_ctx(&exec.graph, x.clone(), seed.clone()).unwrap();
    let (compact, _) = compile(&exec.graph, x.clone()).unwrap();
    let got = compact.backward_dense_from(seed.clone()).unwrap();
    assert!(!all_bit_eq(&got, &reference));
    assert!(
        got.iter().zip(&reference).all(|(a, b)| a == b),
        "equal as numbers"
    );
    let (full, _) = compile_with(&exec.graph, x, CompileMode::FullContext).unwrap();
    assert!(all_bit_eq(
        &full.backward_dense_from(seed).unwrap(),
        &reference
    ));
}

fn check_saved_passes<V: Kernels>(case: &Case, exact: impl Fn(&[V], &[V]) -> bool) {
    let (exec, x) = inputs::<V>(case);
    let saved = SavedGraph::of_graph(&exec.graph, x.clone()).unwrap();
    for salt in [3u64, 4] {
        let seed = full_seed(saved.values(), salt, true);
        let dense = saved.backprop_dense(seed.clone()).unwrap();
        let reference = backprop_all_ctx(&exec.graph, x.clone(), seed.clone()).unwrap();
        assert!(
            exact(&dense, &reference),
            "{}: backprop_dense = backprop_all_ctx",
            case.name
        );
        let array = saved.backprop_array(seed.clone()).unwrap();
        assert!(exact(&array, &dense), "{}: backprop_array", case.name);
        let stored = saved.backprop_stored(seed.clone()).unwrap();
        assert!(exact(&stored, &dense), "{}: backprop_stored", case.name);
        let n = exec.graph.n_inputs();
        let inputs_dense = saved.backprop_inputs_dense(seed.clone()).unwrap();
        assert!(exact(&inputs_dense, &dense[..n]), "{}", case.name);
        let inputs_array = saved.backprop_inputs_array(seed.clone()).unwrap();
        assert!(
            exact(&inputs_array, &inputs_dense),
            "{}: backprop_inputs_array",
            case.name
        );
        let inputs_stored = saved.backprop_inputs_stored(seed.clone()).unwrap();
        assert!(exact(&inputs_stored, &inputs_dense), "{}", case.name);
        // backprop_ctx goes through the saved path and equals the reference prefix
        let ctx = backprop_ctx(&exec.graph, x.clone(), seed.clone()).unwrap();
        let ctx_ref = backprop_ctx_reference(&exec.graph, x.clone(), seed).unwrap();
        assert!(exact(&ctx, &ctx_ref), "{}: backprop_ctx", case.name);
    }
}

#[test]
fn saved_graph_passes_equal_their_dense_references() {
    for case in all_cases() {
        check_saved_passes::<Tensor<f64>>(&case, all_bit_eq);
    }
    for case in algebraic_cases() {
        check_saved_passes::<Tensor<Rational>>(&case, |a, b| a == b);
    }
}

#[test]
fn backprop_from_equals_backward_dense_all_on_the_compact_tape() {
    for case in all_cases() {
        let (exec, x) = inputs::<Tensor<f64>>(&case);
        let saved = SavedGraph::of_graph(&exec.graph, x.clone()).unwrap();
        let out_shape = saved.values()[exec.output].shape().clone();
        let seed = seed_tensor::<f64>(&out_shape, 9, true);
        let from = saved.backprop_from(exec.output, seed.clone()).unwrap();
        let (tape, _) = compile(&exec.graph, x).unwrap();
        let all = tape.backward_dense_all(exec.output, seed).unwrap();
        assert!(all_bit_eq(&from, &all), "{}", case.name);
    }
}

/// An opaque node whose dense VJP sends arbitrary multiples of the cotangent's sum to *every*
/// earlier position (including non-parents), the kind of VJP no op produces.
fn opaque_node(k: usize, weight: f64) -> PreparedNode<Tensor<f64>> {
    PreparedNode::opaque(
        format!("opaque{k}"),
        Box::new(move |cot: &Tensor<f64>, prefix: &[Shape]| {
            let s: f64 = cot.data().iter().sum();
            Ok(prefix
                .iter()
                .enumerate()
                .map(|(j, sh)| {
                    let v = if j % 3 == 0 {
                        -0.0
                    } else {
                        weight * s * (j as f64 - 1.5)
                    };
                    Tensor::full(sh.clone(), v).unwrap()
                })
                .collect())
        }),
    )
}

#[test]
fn array_pass_equals_dense_for_arbitrary_vjps_including_opaque_ones() {
    // a graph mixing op nodes with opaque nodes
    let case = common::case("residual_block");
    let (exec, x) = inputs::<Tensor<f64>>(&case);
    let op_saved = SavedGraph::of_graph(&exec.graph, x).unwrap();
    let mut values = op_saved.values().to_vec();
    let n_inputs = exec.graph.n_inputs();
    let mut nodes: Vec<PreparedNode<Tensor<f64>>> = Vec::new();
    // rebuild: op nodes first, then three opaque nodes appended (values reuse the last shape)
    for (k, node) in exec.graph.nodes().iter().enumerate() {
        let args: Vec<&Tensor<f64>> = node.args.iter().map(|&a| &values[a]).collect();
        let out = &values[n_inputs + k];
        nodes.push(PreparedNode::of_op(
            node.op.clone(),
            node.args.to_vec(),
            torchlean_runtime::Saved::for_op(&node.op, &args, out),
        ));
    }
    for k in 0..3 {
        let last = values.last().unwrap().clone();
        values.push(last);
        nodes.push(opaque_node(k, 0.5 + k as f64));
    }
    let saved = SavedGraph::from_parts(n_inputs, values, nodes).unwrap();
    for salt in [5u64, 6, 7] {
        let seed = full_seed(saved.values(), salt, true);
        let dense = saved.backprop_dense(seed.clone()).unwrap();
        let array = saved.backprop_array(seed.clone()).unwrap();
        assert!(all_bit_eq(&array, &dense));
        let inputs_array = saved.backprop_inputs_array(seed.clone()).unwrap();
        assert!(all_bit_eq(&inputs_array, &dense[..n_inputs]));
        // an opaque node makes its whole prefix reachable
        let last = saved.len() - 1;
        let from = saved.backprop_from(last, seed[last].clone()).unwrap();
        assert!(from[0].data().iter().any(|&v| v != 0.0));
    }
}

#[test]
fn deferred_zero_additions_turn_negative_zero_seeds_positive_like_the_dense_pass() {
    // y = relu(x): x's slot is seeded with -0 and receives relu's +0 contribution at
    // non-positive inputs; positions left alone by every node still see the uniform +0 additions
    let g = json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 2,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "relu", "parents": [0], "shape": [2]},
            {"id": 2, "kind": "neg", "parents": [1], "shape": [2]}
        ]
    });
    let g = Graph::from_json(&g).unwrap();
    let exec = exec_graph_of_ir(&g, &Payload::new()).unwrap();
    let x = vec![Tensor::new([2], vec![-1.0, 2.0]).unwrap()];
    let saved = SavedGraph::of_graph(&exec.graph, x).unwrap();
    let seed: Vec<Tensor<f64>> = vec![
        Tensor::new([2], vec![-0.0, -0.0]).unwrap(),
        Tensor::new([2], vec![-0.0, -0.0]).unwrap(),
        Tensor::new([2], vec![1.0, 1.0]).unwrap(),
    ];
    let dense = saved.backprop_dense(seed.clone()).unwrap();
    let array = saved.backprop_array(seed).unwrap();
    assert!(all_bit_eq(&array, &dense));
    // x: -0 seed, + 0 from neg's uniform part, + relu's contribution (0 at x = -1)
    assert_eq!(dense[0].data()[0].to_bits(), 0.0f64.to_bits());
}

#[test]
fn bad_input_names_the_node() {
    let case = common::case("cnn_small");
    let mut p = case.payload.clone();
    p.entries.remove(&5);
    let e = exec_graph_of_ir(&case.graph, &p).unwrap_err().to_string();
    assert!(e.contains("node 5 (linear): missing payload"), "{e}");
    let mut p = case.payload.clone();
    p.insert(1, "weight", Tensor::zeros([4, 2, 3, 2]).unwrap());
    let e = exec_graph_of_ir(&case.graph, &p).unwrap_err().to_string();
    assert!(
        e.contains("node 1 (conv2d), field `weight`") && e.contains("[4, 2, 3, 3]"),
        "{e}"
    );
    // wrong input shape
    let exec = exec_graph_of_ir(&case.graph, &case.payload).unwrap();
    let e = exec
        .inputs::<Tensor<f64>>(&Tensor::zeros([2, 8, 9]).unwrap(), &case.payload)
        .unwrap_err()
        .to_string();
    assert!(e.contains("input at %0"), "{e}");
    // a bad seed length
    let x = exec
        .inputs::<Tensor<f64>>(&case.inputs, &case.payload)
        .unwrap();
    let saved = SavedGraph::of_graph(&exec.graph, x).unwrap();
    assert!(saved.backprop_dense(vec![]).is_err());
    assert!(saved.backprop_from(999, Tensor::scalar(1.0)).is_err());
}

#[test]
fn graphdata_construction_validates_arguments_and_shapes() {
    use torchlean_spec::{BinaryOp, Op};
    let mut g = GraphData::new(vec![Shape::from([2]), Shape::from([3])]).unwrap();
    let e = g
        .push(Op::Binary(BinaryOp::Add), vec![0, 1], None)
        .unwrap_err();
    assert!(matches!(e, CompiledError::Shape { position: 2, .. }), "{e}");
    let e = g
        .push(Op::Binary(BinaryOp::Add), vec![0, 2], None)
        .unwrap_err();
    assert!(
        matches!(e, CompiledError::BadArgument { target: 2, .. }),
        "{e}"
    );
    assert_eq!(
        g.push(Op::Binary(BinaryOp::Add), vec![0, 0], None).unwrap(),
        2
    );
}

#[test]
fn compiled_nodes_take_the_op_table_route_with_the_local_sum_rule() {
    use torchlean_runtime::Backward;
    use torchlean_spec::BinaryOp;
    let mut g = GraphData::new(vec![Shape::from([1])]).unwrap();
    let y = g.push(Op::Binary(BinaryOp::Add), vec![0, 0], None).unwrap();
    let (tape, _) = compile::<Tensor<f64>>(&g, vec![Tensor::new([1], vec![3.0]).unwrap()]).unwrap();
    assert!(matches!(tape.nodes()[y].backward, Backward::Recorded(_)));
    // add(a, a): one contribution, locally summed (the eager tape would give two)
    let pairs = tape
        .run_backward(y, &Tensor::new([1], vec![1.5]).unwrap())
        .unwrap();
    assert_eq!(pairs.len(), 1);
    assert_eq!((pairs[0].0, pairs[0].1.data()[0]), (0, 3.0));
    // FullContext is the checking mode: a closure over every earlier position
    let (full, _) = compile_with::<Tensor<f64>>(
        &g,
        vec![Tensor::new([1], vec![3.0]).unwrap()],
        CompileMode::FullContext,
    )
    .unwrap();
    assert!(matches!(full.nodes()[y].backward, Backward::Closure(_)));
}

#[test]
fn a_layernorm_without_eps_lowers_to_the_default_of_spec_3() {
    let mut g = GraphData::new(vec![Shape::from([2, 3])]).unwrap();
    g.push(Op::LayerNorm { axis: 1, eps: None }, vec![0], None)
        .unwrap();
    let text = torchlean_compiled::graph_text(&g, None, None);
    assert!(
        text.contains("layernorm(%0) axis=1 eps=1e-6 (default)"),
        "{text}"
    );
}
