//! The model zoo (so far: an MLP and a CNN) written with the typed layers: PyTorch's parameter
//! names, eager == compiled, the exported IR passes `torchlean check`, is an insta snapshot of
//! its lowering, and `torchlean grad`'s path on it reproduces the Session's gradients for every
//! parameter.
#![allow(clippy::unwrap_used)]

use torchlean_compiled::{exec_graph_of_ir, lower_text, run_grad};
use torchlean_engine_cpu::CpuF64;
use torchlean_ir::{check_payload, check_shapes};
use torchlean_nn::layers::{self, Conv2d, Flatten, Linear};
use torchlean_nn::zoo::Model;
use torchlean_nn::{seq, Layer, LeafKind, Mode, Ops, Recorder, Session, Sweep, Var};
use torchlean_runtime::Kernels;
use torchlean_spec::Tensor;

fn input(shape: &[usize]) -> Tensor<f64> {
    let n: usize = shape.iter().product();
    Tensor::new(
        shape.to_vec(),
        (0..n).map(|i| ((i * 7 % 11) as f64 - 5.0) / 6.0).collect(),
    )
    .unwrap()
}

fn run<O: Ops>(ops: &mut O, model: Model, mode: Mode) -> Var {
    let x = ops.input("x", &model.input().unwrap(), false).unwrap();
    model.loss(ops, &x, mode).unwrap()
}

/// Eager on `V` against recorded + compiled, parameter by parameter; the exported IR's
/// lowering text; `run_grad` on the export against the Session.
fn check_model(model: Model, mode: Mode) -> Vec<String> {
    let name = model.name();
    let x = model.input().unwrap();
    let mut r = Recorder::new();
    let out = run(&mut r, model, mode);
    let rec = r.finish(&out).unwrap();
    let compiled = rec.run::<CpuF64>().unwrap();
    let mut s = Session::<CpuF64>::new();
    let loss = run(&mut s, model, mode);
    s.backward(&loss, Sweep::Releasing).unwrap();
    assert!(
        s.value(&loss).unwrap().bit_eq(&compiled.output),
        "{name}: output"
    );
    let mut names = Vec::new();
    for (leaf, g) in rec.leaves.iter().zip(&compiled.grads) {
        if leaf.kind == LeafKind::Param {
            let e = s.param_grad(&leaf.name).unwrap();
            assert!(e.bit_eq(g), "{name}: {}", leaf.name);
            names.push(leaf.name.clone());
        }
    }
    // the export: checked, snapshotted, and differentiated by `torchlean grad`'s path
    let ir = rec.to_ir().unwrap();
    assert!(
        check_shapes(&ir.graph).iter().all(|d| !d.is_error()),
        "{name}"
    );
    assert!(check_payload(&ir.graph, &ir.payload)
        .iter()
        .all(|d| !d.is_error()));
    let exec = exec_graph_of_ir(&ir.graph, &ir.payload).unwrap();
    insta::assert_snapshot!(format!("zoo_{name}"), lower_text(&exec));
    let grads = run_grad::<CpuF64>(&ir.graph, &ir.payload, &x, None).unwrap();
    for (param, places) in &ir.params {
        let [(node, slot)] = places[..] else {
            panic!("{param} used more than once")
        };
        let g = grads
            .grad_payload
            .entry(node)
            .unwrap()
            .tensor(slot)
            .unwrap();
        assert!(
            CpuF64::from_f64(g)
                .unwrap()
                .bit_eq(s.param_grad(param).unwrap()),
            "{name}: {param} through the exported graph"
        );
    }
    names
}

#[test]
fn mlp_names_agreement_and_export() {
    let names = check_model(Model::Mlp, Mode::Eval);
    assert_eq!(
        names,
        ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    );
    let described = seq![
        Linear::<6, 8>::new(1).unwrap(),
        layers::relu(),
        Linear::<8, 3>::new(3).unwrap(),
        layers::log_softmax(),
    ]
    .describe();
    assert_eq!(described, "Linear(6 → 8), Relu, Linear(8 → 3), LogSoftmax");
}

#[test]
fn cnn_names_agreement_and_export() {
    let names = check_model(Model::Cnn, Mode::Eval);
    assert_eq!(names, ["0.weight", "0.bias", "4.weight", "4.bias"]);
}

#[test]
fn the_batch_norm_residual_and_transformer_models_agree_and_export() {
    let names = check_model(Model::CnnBatchNorm, Mode::Eval);
    assert_eq!(
        names,
        ["0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias"]
    );
    let names = check_model(Model::Residual, Mode::Eval);
    assert_eq!(
        names,
        [
            "0.weight",
            "0.bias",
            "1.0.weight",
            "1.0.bias",
            "1.2.weight",
            "1.2.bias",
            "2.weight",
            "2.bias"
        ]
    );
    let names = check_model(Model::Transformer, Mode::Eval);
    assert_eq!(
        names,
        [
            "self_attn.in_proj_weight",
            "self_attn.in_proj_bias",
            "self_attn.out_proj.weight",
            "self_attn.out_proj.bias",
            "norm1.weight",
            "norm1.bias",
            "linear1.weight",
            "linear1.bias",
            "linear2.weight",
            "linear2.bias",
            "norm2.weight",
            "norm2.bias"
        ]
    );
}

#[test]
fn training_mode_batch_norm_agrees_and_updates_running_statistics_as_pytorch() {
    // train mode: eager == compiled through batch_norm2d_nchw_train
    let mut r = Recorder::new();
    let out = run(&mut r, Model::CnnBatchNorm, Mode::Train);
    let rec = r.finish(&out).unwrap();
    let run_c = rec.run::<CpuF64>().unwrap();
    let mut s = Session::<CpuF64>::new();
    let loss = run(&mut s, Model::CnnBatchNorm, Mode::Train);
    s.backward(&loss, Sweep::Releasing).unwrap();
    assert!(s.value(&loss).unwrap().bit_eq(&run_c.output));
    for (leaf, g) in rec.leaves.iter().zip(&run_c.grads) {
        if leaf.kind == LeafKind::Param {
            assert!(s.param_grad(&leaf.name).unwrap().bit_eq(g), "{}", leaf.name);
        }
    }
    // running stats: (1 − 0.1)·init + 0.1·batch, with the unbiased batch variance
    let bn = layers::BatchNorm2d::<2>::new();
    let x = Tensor::new([2, 2, 1, 2], vec![1.0, 3.0, 0.0, 0.0, 5.0, 7.0, 2.0, 4.0]).unwrap();
    let mut s = Session::<Tensor<f64>>::new();
    let xv = s.input("x", &x, false).unwrap();
    bn.forward(&mut s, &xv, Mode::Train).unwrap();
    let mean = s.buffers()["running_mean"].data().to_vec();
    let var = s.buffers()["running_var"].data().to_vec();
    // channel 0: 1, 3, 5, 7 (mean 4, unbiased var 20/3); channel 1: 0, 0, 2, 4 (1.5, 11/3)
    let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
    assert!(close(mean[0], 0.4) && close(mean[1], 0.15), "{mean:?}");
    assert!(close(var[0], 0.9 + 0.1 * 20.0 / 3.0), "{var:?}");
    assert!(close(var[1], 0.9 + 0.1 * 11.0 / 3.0), "{var:?}");
    // the state_dict holds parameters and buffers under PyTorch's names
    let keys: Vec<String> = s.state_dict().unwrap().into_keys().collect();
    assert_eq!(keys, ["bias", "running_mean", "running_var", "weight"]);
    // eval mode reads them
    let y = bn.forward(&mut s, &xv, Mode::Eval).unwrap();
    let want0 = (1.0 - 0.4) / (var[0] + 1e-5).sqrt();
    assert!(close(s.value(&y).unwrap().data()[0], want0));
}

#[test]
fn causal_attention_ignores_later_tokens() {
    // changing the last token does not change the first token's output
    let mha = layers::MultiHeadAttention::<4, 2>::new(true, 3).unwrap();
    let out = |last: f64| {
        let mut data: Vec<f64> = (0..12).map(|i| (i as f64 * 0.3).sin()).collect();
        data[8..].iter_mut().for_each(|v| *v = last);
        let mut s = Session::<Tensor<f64>>::new();
        let x = s
            .input("x", &Tensor::new([1, 3, 4], data).unwrap(), false)
            .unwrap();
        let y = mha.forward(&mut s, &x, Mode::Eval).unwrap();
        s.value(&y).unwrap().data().to_vec()
    };
    let (a, b) = (out(0.5), out(-2.0));
    assert_eq!(a[..4], b[..4], "the first token sees only itself");
    assert_ne!(a[8..], b[8..]);
    assert!(layers::MultiHeadAttention::<5, 2>::new(false, 0).is_err());
}

#[test]
fn pytorch_default_initialisation_bounds() {
    // weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), seeded and reproducible
    let a = Linear::<16, 4>::new(5).unwrap();
    let b = Linear::<16, 4>::new(5).unwrap();
    let mut s = Session::<Tensor<f64>>::new();
    let x = s.input("x", &input(&[1, 16]), false).unwrap();
    a.forward(&mut s, &x, Mode::Eval).unwrap();
    let w = s.params()["weight"].clone();
    assert!(w.data().iter().all(|v| v.abs() <= 0.25));
    assert!(w.data().iter().any(|v| v.abs() > 0.2), "fills the range");
    let mut s2 = Session::<Tensor<f64>>::new();
    let x = s2.input("x", &input(&[1, 16]), false).unwrap();
    b.forward(&mut s2, &x, Mode::Eval).unwrap();
    assert!(s2.params()["weight"].bit_eq(&w), "same seed, same values");
}

#[test]
fn a_flatten_declared_with_the_wrong_size_names_the_sizes() {
    let model = seq![
        Conv2d::<1, 3, 3>::new(1, 1, 7).unwrap(),
        Flatten::<3, 10>,
        Linear::<10, 4>::new(8).unwrap(),
    ];
    let mut s = Session::<Tensor<f64>>::new();
    let x = s.input("x", &input(&[2, 1, 4, 4]), false).unwrap();
    let e = model.forward(&mut s, &x, Mode::Eval).unwrap_err();
    assert!(
        e.to_string().contains("48") && e.to_string().contains("10"),
        "{e}"
    );
}

#[test]
fn layers_that_do_not_line_up_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile-fail/*.rs");
}

/// Embedding → LayerNorm → dropout → Linear over `[2, 3]` token ids.
fn tokens<O: Ops>(ops: &mut O, mode: Mode) -> torchlean_nn::Result<Var> {
    let emb = layers::Embedding::<7, 4>::new(11)?;
    let h = ops.scoped("embed", |ops| {
        emb.forward(ops, &[1, 6, 0, 2, 2, 5], &[2, 3])
    })?;
    let body = seq![
        layers::LayerNorm::<4>::new(),
        layers::dropout(0.25, 3)?,
        Linear::<4, 2>::new(12)?,
    ];
    let y = ops.scoped("body", |ops| body.forward(ops, &h, mode))?;
    ops.sum(&y)
}

#[test]
fn embedding_layer_norm_and_dropout_agree_eagerly_and_compiled() {
    for mode in [Mode::Train, Mode::Eval] {
        let mut r = Recorder::new();
        let out = tokens(&mut r, mode).unwrap();
        let rec = r.finish(&out).unwrap();
        let run = rec.run::<CpuF64>().unwrap();
        let mut s = Session::<CpuF64>::new();
        let loss = tokens(&mut s, mode).unwrap();
        s.backward(&loss, Sweep::DenseAll).unwrap();
        assert!(s.value(&loss).unwrap().bit_eq(&run.output), "{mode:?}");
        for (leaf, g) in rec.leaves.iter().zip(&run.grads) {
            if leaf.kind == LeafKind::Param {
                assert!(s.param_grad(&leaf.name).unwrap().bit_eq(g), "{}", leaf.name);
            }
        }
        let names: Vec<&str> = rec
            .leaves
            .iter()
            .filter(|l| l.kind == LeafKind::Param)
            .map(|l| l.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "embed.weight",
                "body.0.weight",
                "body.0.bias",
                "body.2.weight",
                "body.2.bias"
            ]
        );
    }
    // an id outside the vocabulary names the layer and the id
    let mut s = Session::<Tensor<f64>>::new();
    let emb = layers::Embedding::<7, 4>::new(1).unwrap();
    let e = s
        .scoped("embed", |s| emb.forward(s, &[1, 9], &[2]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("embed") && e.contains("element 1 is 9") && e.contains("[0, 7)"),
        "{e}"
    );
    assert!(layers::dropout::<layers::Features<3>>(1.0, 0).is_err());
}
