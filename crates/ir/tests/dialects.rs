//! Reading and writing TorchLean's two dialects: detection, the lowering of the September forms,
//! and every refusal naming the file's node and field.
#![allow(clippy::unwrap_used)]

use serde_json::{json, Value};
use torchlean_ir::*;
use torchlean_spec::{Op, Shape, Tensor};

fn n(id: usize, kind: &str, parents: &[usize], shape: &[usize]) -> Value {
    json!({"id": id, "kind": kind, "parents": parents, "shape": shape, "value_kind": "tensor"})
}

fn with(mut v: Value, attrs: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    for (k, x) in attrs.as_object().unwrap() {
        o.insert(k.clone(), x.clone());
    }
    v
}

fn september(nodes: Vec<Value>, outputs: &[usize]) -> Value {
    json!({"format": "torchlean.ir.v1", "input_id": 0, "output_ids": outputs, "nodes": nodes})
}

fn read(v: &Value) -> Result<GraphDoc> {
    // both routes: the value, and the text (streamed detection)
    let a = GraphDoc::from_json(v);
    let b = GraphDoc::from_json_str(&v.to_string());
    assert_eq!(
        a.as_ref().map_err(|e| e.diagnostics().to_vec()),
        b.as_ref().map_err(|e| e.diagnostics().to_vec())
    );
    a
}

/// The error's lines; each must name a node and a field.
fn rejected(v: &Value) -> Vec<String> {
    let e = read(v).unwrap_err();
    e.diagnostics().iter().map(|d| d.to_string()).collect()
}

fn has(lines: &[String], want: &str) {
    assert!(
        lines.iter().any(|l| l.contains(want)),
        "{want:?} not in {lines:#?}"
    );
}

#[test]
fn the_root_key_decides_and_a_file_with_both_or_neither_is_refused() {
    let aug = json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 0,
        "nodes": [{"id": 0, "kind": "input", "parents": [], "shape": [2]}]});
    assert_eq!(read(&aug).unwrap().dialect, Dialect::August2026);
    let new = september(vec![n(0, "input", &[], &[2])], &[0]);
    assert_eq!(read(&new).unwrap().dialect, Dialect::September2026);
    let mut both = new.clone();
    both["output_id"] = json!(0);
    let lines: Vec<String> = Graph::from_json(&both)
        .unwrap_err()
        .diagnostics()
        .iter()
        .map(|d| d.to_string())
        .collect();
    has(
        &lines,
        "field `output_ids`: both `output_id` (August dialect) and `output_ids`",
    );
    let mut neither = aug.clone();
    neither.as_object_mut().unwrap().remove("output_id");
    let lines: Vec<String> = Graph::from_json(&neither)
        .unwrap_err()
        .diagnostics()
        .iter()
        .map(|d| d.to_string())
        .collect();
    has(
        &lines,
        "`output_id` (August dialect) or `output_ids` (September dialect)",
    );
}

#[test]
fn a_file_mixing_the_dialects_names_the_conflicting_fields() {
    // September forms in an August file
    let aug = json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 2, "nodes": [
        {"id": 0, "kind": "input", "parents": [], "shape": [1, 1, 3, 3]},
        {"id": 1, "kind": "max_pool", "parents": [0], "shape": [1, 1, 1, 1],
         "spatial_rank": 2, "kernel": [2, 2], "stride": [2, 2], "padding": [0, 0]},
        {"id": 2, "kind": "reduce_sum", "parents": [1], "shape": [1, 1, 1], "axes": [3],
         "keepdim": false}]});
    let lines: Vec<String> = Graph::from_json(&aug)
        .unwrap_err()
        .diagnostics()
        .iter()
        .map(|d| d.to_string())
        .collect();
    has(&lines, "node 1 (max_pool), field `kind`: kind `max_pool` is the September dialect's, but this file is August-dialect");
    has(&lines, "node 2 (reduce_sum), field `axes`");
    // August forms in a September file
    let new = september(
        vec![
            n(0, "input", &[], &[1, 1, 4, 4]),
            with(
                n(1, "max_pool2d", &[0], &[1, 1, 2, 2]),
                json!({"kH": 2, "kW": 2, "stride": 2}),
            ),
            with(n(2, "reduce_sum", &[1], &[1, 1, 2]), json!({"axis": 3})),
        ],
        &[2],
    );
    let lines = rejected(&new);
    has(
        &lines,
        "node 1 (max_pool2d), field `kind`: kind `max_pool2d` is the August dialect's",
    );
    has(
        &lines,
        "field `axis`: `reduce_sum` with `axis` is the August dialect's",
    );
}

#[test]
fn the_august_reader_takes_transpose_with_either_spelling() {
    let g = |attrs: Value| {
        Graph::from_json(&json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 1,
            "nodes": [{"id": 0, "kind": "input", "parents": [], "shape": [2, 3]},
                with(json!({"id": 1, "kind": "transpose", "parents": [0], "shape": [3, 2]}), attrs)]}))
        .unwrap()
    };
    assert_eq!(
        g(json!({"dim0": 0, "dim1": 1})),
        g(json!({"axis1": 0, "axis2": 1}))
    );
}

#[test]
fn reductions_lower_one_axis_at_a_time_largest_first_with_keepdim_reshapes() {
    let v = september(
        vec![
            n(0, "input", &[], &[2, 3, 4]),
            with(
                n(1, "reduce_mean", &[0], &[1, 3, 1]),
                json!({"axes": [0, 2], "keepdim": true}),
            ),
            with(n(2, "relu", &[1], &[1, 3, 1]), json!({})),
        ],
        &[2],
    );
    let doc = read(&v).unwrap();
    let kinds: Vec<&str> = doc.graph.nodes.iter().map(|n| n.kind.name()).collect();
    assert_eq!(
        doc.graph
            .nodes
            .iter()
            .map(|n| n.kind.op().cloned())
            .collect::<Vec<_>>(),
        vec![
            None,
            Some(Op::ReduceMean { axis: 2 }),
            Some(Op::Reshape {
                from: Shape::from(vec![2, 3]),
                to: Shape::from(vec![2, 3, 1])
            }),
            Some(Op::ReduceMean { axis: 0 }),
            Some(Op::Reshape {
                from: Shape::from(vec![3, 1]),
                to: Shape::from(vec![1, 3, 1])
            }),
            Some(Op::Unary(torchlean_spec::UnaryOp::Relu)),
        ],
        "{kinds:?}"
    );
    // the file's ids are kept: the output is remapped, every lowered node names file node 1
    assert_eq!(doc.graph.output_id, 5);
    let files: Vec<usize> = doc.origin.iter().map(|o| o.id).collect();
    assert_eq!(files, vec![0, 1, 1, 1, 1, 2]);
}

#[test]
fn bad_reduction_axes_and_shapes_name_the_file_node() {
    let v = september(
        vec![
            n(0, "input", &[], &[2, 0]),
            with(
                n(1, "reduce_sum", &[0], &[]),
                json!({"axes": [0, 0, 2, 1], "keepdim": false}),
            ),
            with(
                n(2, "reduce_sum", &[0], &[5]),
                json!({"axes": [0], "keepdim": false}),
            ),
            with(n(3, "reduce_sum", &[0], &[2, 0]), json!({"axes": [0]})),
        ],
        &[1],
    );
    let lines = rejected(&v);
    has(
        &lines,
        "node 1 (reduce_sum), field `axes`: axis 0 is repeated",
    );
    has(
        &lines,
        "node 1 (reduce_sum), field `axes`: axis 2 is not below the rank 2",
    );
    has(
        &lines,
        "node 1 (reduce_sum), field `axes`: axis 1 has extent 0",
    );
    has(
        &lines,
        "node 2 (reduce_sum), field `shape`: declared [5], but the node computes [0]",
    );
    has(
        &lines,
        "node 3 (reduce_sum), field `keepdim`: missing required attribute",
    );
}

#[test]
fn conv_and_pools_without_a_counterpart_name_every_field() {
    let conv = |attrs: Value| {
        with(
            n(1, "conv", &[0], &[1, 2, 3, 3]),
            with(
                json!({"spatial_rank": 2, "kernel": [3, 3], "stride": [1, 1], "padding": [1, 1],
                    "dilation": [1, 1], "padding_after": [1, 1], "groups": 1, "channel_axis": 1,
                    "in_channels": 1, "out_channels": 2}),
                attrs,
            ),
        )
    };
    let x = n(0, "input", &[], &[1, 1, 3, 3]);
    assert!(read(&september(vec![x.clone(), conv(json!({}))], &[1])).is_ok());
    let lines = rejected(&september(
        vec![
            x.clone(),
            conv(
                json!({"dilation": [2, 1], "padding_after": [0, 1], "stride": [1, 2],
                "channel_axis": 0, "input_spatial": [4, 4]}),
            ),
        ],
        &[1],
    ));
    for field in [
        "dilation",
        "padding_after",
        "stride",
        "channel_axis",
        "input_spatial",
    ] {
        has(&lines, &format!("node 1 (conv), field `{field}`"));
    }
    let lines = rejected(&september(
        vec![x.clone(), conv(json!({"kernel": [3]}))],
        &[1],
    ));
    has(
        &lines,
        "node 1 (conv), field `kernel`: has 1 entries, expected `spatial_rank` = 2",
    );
    let mut missing = conv(json!({}));
    missing.as_object_mut().unwrap().remove("groups");
    has(
        &rejected(&september(vec![x.clone(), missing], &[1])),
        "field `groups`: missing required attribute",
    );
    let pool = with(
        n(1, "avg_pool", &[0], &[1, 1, 1, 1]),
        json!({"spatial_rank": 2, "kernel": [2, 2], "stride": [2, 1], "padding": [0, 1]}),
    );
    let lines = rejected(&september(vec![x, pool], &[1]));
    has(&lines, "node 1 (avg_pool), field `stride`: unequal strides");
    has(
        &lines,
        "node 1 (avg_pool), field `padding`: unequal paddings",
    );
}

#[test]
fn broadcasting_matmul_lowers_to_our_product_with_the_shapes_torch_matmul_gives() {
    for (a, b, out) in [
        (vec![2, 4, 3], vec![3, 2], vec![2, 4, 2]),
        (vec![3], vec![3, 2], vec![2]),
        (vec![2, 3], vec![3], vec![2]),
        (vec![3], vec![3], vec![]),
        (vec![5, 1, 2, 3], vec![4, 3, 2], vec![5, 4, 2, 2]),
        (vec![2, 2, 3], vec![2, 3, 2], vec![2, 2, 2]),
    ] {
        let v = september(
            vec![
                n(0, "input", &[], &a),
                with(n(1, "const", &[], &b), json!({"value_shape": b})),
                n(2, "matmul", &[0, 1], &out),
            ],
            &[2],
        );
        let doc = read(&v).unwrap_or_else(|e| panic!("{a:?}·{b:?}: {e}"));
        let last = &doc.graph.nodes[doc.graph.output_id];
        assert_eq!(last.shape.dims(), out.as_slice(), "{a:?}·{b:?}");
        // evaluates against a hand-computed product of ones: every entry is the inner extent
        let x = Tensor::ones(Shape::from(a.clone())).unwrap();
        let mut p = doc.payload.clone();
        p.insert(1, "value", Tensor::ones(Shape::from(b.clone())).unwrap());
        let y = denote::<f64>(&doc.graph, &p, &x).unwrap();
        assert!(y.data().iter().all(|&v| v == 3.0), "{a:?}·{b:?}: {y:?}");
    }
    let bad = september(
        vec![
            n(0, "input", &[], &[2, 2, 3]),
            with(
                n(1, "const", &[], &[3, 3, 2]),
                json!({"value_shape": [3, 3, 2]}),
            ),
            n(2, "matmul", &[0, 1], &[2, 2, 2]),
        ],
        &[2],
    );
    has(
        &rejected(&bad),
        "node 2 (matmul), field `parents`: batch axes [2] and [3] do not broadcast",
    );
}

#[test]
fn inline_weights_become_payload_and_malformed_ones_are_named() {
    let lin = |w: Value| {
        september(
            vec![
                n(0, "input", &[], &[2]),
                with(
                    n(1, "linear", &[0], &[1]),
                    json!({"out_dim": 1, "in_dim": 2, "weight": w, "bias": [0.5]}),
                ),
            ],
            &[1],
        )
    };
    let doc = read(&lin(json!([[1.0, 2.0]]))).unwrap();
    let w = doc.payload.entry(1).unwrap().tensor("weight").unwrap();
    assert_eq!(
        (w.shape().dims(), w.data()),
        ([1usize, 2].as_slice(), [1.0, 2.0].as_slice())
    );
    let y = denote::<f64>(
        &doc.graph,
        &doc.payload,
        &Tensor::new([2], vec![3.0, 4.0]).unwrap(),
    )
    .unwrap();
    assert_eq!(y.data(), [11.5]);
    has(
        &rejected(&lin(json!([[1.0], [2.0, 3.0]]))),
        "node 1 (linear), field `weight`: is not a rectangular",
    );
    has(
        &rejected(&lin(json!([["nan", 2.0]]))),
        "node 1 (linear), field `weight`: holds \"nan\"",
    );
    let mut bad_dim = lin(json!([[1.0, 2.0]]));
    bad_dim["nodes"][1]["in_dim"] = json!(3);
    has(
        &rejected(&bad_dim),
        "node 1 (linear), field `in_dim`: is 3, but the node's shapes give 2",
    );
    let c = september(
        vec![
            n(0, "input", &[], &[2]),
            with(n(1, "const", &[], &[2]), json!({"values": [1.0]})),
        ],
        &[1],
    );
    has(
        &rejected(&c),
        "node 1 (const), field `values`: has 1 values, the shape [2] holds 2",
    );
}

#[test]
fn layernorm_inline_affine_lowers_to_constants_named_by_their_key() {
    let ln = |gamma: Value, beta: Value| {
        september(
            vec![
                n(0, "input", &[], &[2, 2]),
                with(
                    n(1, "layernorm", &[0], &[2, 2]),
                    json!({"axis": 1, "gamma": gamma, "beta": beta, "eps": 1e-5}),
                ),
            ],
            &[1],
        )
    };
    // the exporter's identity affine: our layer norm alone, ε from the file
    let plain = read(&ln(json!([1.0, 1.0]), json!([0.0, 0.0]))).unwrap();
    assert_eq!(plain.graph.len(), 2);
    assert_eq!(
        plain.graph.nodes[1].kind.op(),
        Some(&Op::LayerNorm {
            axis: 1,
            eps: Some(1e-5)
        })
    );
    let affine = read(&ln(json!([2.0, 3.0]), json!([0.0, 0.0]))).unwrap();
    let x = Tensor::new([2, 2], vec![1.0, 3.0, 5.0, 5.0]).unwrap();
    let y = denote::<f64>(&affine.graph, &affine.payload, &x).unwrap();
    // row 1: (±1)/sqrt(1 + 1e-5) times γ; row 2: zeros
    let s = 1.0 / (1.0f64 + 1e-5).sqrt();
    for (got, want) in y.data().iter().zip([-2.0 * s, 3.0 * s, 0.0, 0.0]) {
        assert!((got - want).abs() < 1e-15, "{:?}", y.data());
    }
    // a gradient of the γ constant comes back as the file node's `gamma`
    let gamma_node = affine
        .origin
        .iter()
        .position(|o| o.tensor == Some("gamma"))
        .unwrap();
    let mut g = Payload::new();
    g.insert(gamma_node, "value", Tensor::ones([2]).unwrap());
    assert!(affine
        .to_file_payload(&g)
        .entry(1)
        .unwrap()
        .tensor("gamma")
        .is_some());
    // no ε at all: TorchLean's normalizationEpsilon
    let mut no_eps = ln(json!([1.0, 1.0]), json!([0.0, 0.0]));
    no_eps["nodes"][1].as_object_mut().unwrap().remove("eps");
    let d = read(&no_eps).unwrap();
    assert_eq!(
        d.graph.nodes[1].kind.op(),
        Some(&Op::LayerNorm {
            axis: 1,
            eps: Some(1e-5)
        })
    );
}

#[test]
fn safe_log_needs_a_scalar_epsilon_and_unsupported_kinds_are_all_listed() {
    let v = september(
        vec![
            n(0, "input", &[], &[2]),
            n(1, "safe_log", &[0, 0], &[2]),
            n(2, "hard_masked_softmax", &[0], &[2]),
            n(3, "multihead_attention", &[0], &[2]),
            with(n(4, "tanh", &[0], &[2]), json!({"value_kind": "tuple"})),
        ],
        &[1],
    );
    let lines = rejected(&v);
    has(
        &lines,
        "node 1 (safe_log), field `parents`: epsilon must be scalar",
    );
    has(
        &lines,
        "node 2 (hard_masked_softmax), field `kind`: kind `hard_masked_softmax` is not supported",
    );
    has(&lines, "node 3 (multihead_attention), field `kind`");
    has(&lines, "node 4 (tanh), field `value_kind`");
}

#[test]
fn the_september_rules_on_format_and_input_id_are_enforced() {
    let mut v = september(
        vec![n(0, "input", &[], &[2]), n(1, "input", &[], &[2])],
        &[1],
    );
    has(
        &rejected(&v),
        "field `input_id`: 0 must name the only `input` node",
    );
    v["nodes"][1] = n(1, "relu", &[0], &[2]);
    v.as_object_mut().unwrap().remove("format");
    has(&rejected(&v), "field `format`: missing");
    v["format"] = json!("torchlean.ir.v1");
    v["output_ids"] = json!([]);
    has(&rejected(&v), "field `output_ids`: is empty");
    v["output_ids"] = json!([1, 7]);
    has(&rejected(&v), "field `output_ids`: 7 is not a node");
    v["output_ids"] = json!([1]);
    v["nodes"][1]["id"] = json!(5);
    has(
        &rejected(&v),
        "node 1 (relu), field `id`: is 5, expected its index 1",
    );
}

#[test]
fn a_graph_with_inline_weights_is_not_read_as_a_bare_graph() {
    let v = september(
        vec![
            n(0, "input", &[], &[2]),
            with(n(1, "const", &[], &[2]), json!({"values": [1.0, 2.0]})),
        ],
        &[1],
    );
    assert!(Graph::from_json(&v)
        .unwrap_err()
        .to_string()
        .contains("carries weights inline"));
    let bare = september(
        vec![n(0, "input", &[], &[2]), n(1, "relu", &[0], &[2])],
        &[1],
    );
    assert_eq!(Graph::from_json(&bare).unwrap().len(), 2);
}

#[test]
fn writing_the_september_dialect_lists_every_node_without_a_counterpart() {
    let g = Graph::from_json(
        &json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 3,
        "nodes": [{"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "gelu", "parents": [0], "shape": [2]},
            {"id": 2, "kind": "softplus", "parents": [1], "shape": [2]},
            {"id": 3, "kind": "neg", "parents": [2], "shape": [2]}]}),
    )
    .unwrap();
    let e = Dialect::September2026
        .write(&g, &Payload::new())
        .unwrap_err();
    let nodes: Vec<Option<usize>> = e.diagnostics().iter().map(|d| d.node).collect();
    assert_eq!(nodes, vec![Some(1), Some(3)], "{e}");
    assert!(
        e.to_string()
            .contains("kind `gelu` has no counterpart in TorchLean's September 2026 dialect"),
        "{e}"
    );
    // weights the payload lacks are named too
    let lin = Graph::from_json(
        &json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 1,
        "nodes": [{"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "linear", "parents": [0], "shape": [1]}]}),
    )
    .unwrap();
    let e = Dialect::September2026
        .write(&lin, &Payload::new())
        .unwrap_err();
    assert_eq!(e.diagnostics().len(), 2, "{e}");
    assert!(
        e.to_string().contains("missing payload tensor `weight`"),
        "{e}"
    );
}

#[test]
fn writing_the_august_dialect_refuses_several_outputs() {
    let v = september(
        vec![n(0, "input", &[], &[2]), n(1, "relu", &[0], &[2])],
        &[1, 0],
    );
    let doc = read(&v).unwrap();
    assert_eq!(doc.graph.outputs().collect::<Vec<_>>(), vec![1, 0]);
    let e = Dialect::August2026
        .write(&doc.graph, &doc.payload)
        .unwrap_err();
    assert!(e.to_string().contains("this graph has 2 outputs"), "{e}");
    // and the September dialect writes them back in order
    let w = Dialect::September2026
        .write(&doc.graph, &doc.payload)
        .unwrap();
    assert_eq!(w.graph["output_ids"], json!([1, 0]));
}

#[test]
fn the_dialect_names_parse_display_and_serialize() {
    for d in Dialect::ALL {
        assert_eq!(d.to_string().parse::<Dialect>().unwrap(), d);
        assert_eq!(serde_json::to_value(d).unwrap(), json!(d.name()));
        assert_eq!(
            serde_json::from_value::<Dialect>(json!(d.name())).unwrap(),
            d
        );
    }
    assert!("newest".parse::<Dialect>().is_err());
}
