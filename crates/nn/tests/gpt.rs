//! The GPT: nanoGPT's parameter names, the tied head, causality, the loss at initialisation,
//! the eager and the recorded program agreeing, and gradients against finite differences.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use torchlean_engine_cpu::CpuF64;
use torchlean_nn::{
    Gpt, GptConfig, LeafKind, Mode, NnError, Recorder, Session, Sweep, Swept, ValueProblem,
};
use torchlean_runtime::Kernels;
use torchlean_spec::Tensor;

fn tiny() -> GptConfig {
    GptConfig {
        vocab: 11,
        block: 6,
        n_layer: 2,
        n_head: 2,
        n_embd: 8,
        dropout: 0.0,
    }
}

/// Two rows of five tokens and their next tokens.
const IDS: [usize; 10] = [1, 4, 4, 0, 10, 7, 3, 3, 9, 2];
const TARGETS: [usize; 10] = [4, 4, 0, 10, 5, 3, 3, 9, 2, 2];

fn loss_and_grads(
    gpt: &Gpt,
    params: Option<&BTreeMap<String, Tensor<f64>>>,
) -> (f64, BTreeMap<String, Tensor<f64>>) {
    let mut s = Session::<CpuF64>::new();
    if let Some(p) = params {
        s.load_params(p).unwrap();
    }
    let loss = gpt.loss(&mut s, &IDS, &TARGETS, 2, Mode::Train).unwrap();
    s.backward(&loss, Sweep::DenseAll).unwrap();
    let value = s.value_f64(&loss).unwrap().data()[0];
    let grads = s
        .params()
        .keys()
        .map(|n| (n.clone(), s.param_grad(n).unwrap().to_f64().unwrap()))
        .collect();
    (value, grads)
}

#[test]
fn the_parameters_are_nanogpts_and_the_head_is_tied_to_wte() {
    let gpt = Gpt::new(tiny(), 5).unwrap();
    let mut s = Session::<CpuF64>::new();
    gpt.logits(&mut s, &IDS, 2, Mode::Eval).unwrap();
    let names: Vec<&str> = s.params().keys().map(String::as_str).collect();
    let mut want = vec![
        "transformer.ln_f.bias",
        "transformer.ln_f.weight",
        "transformer.wpe.weight",
        "transformer.wte.weight",
    ];
    for i in 0..2 {
        for p in [
            "attn.c_attn.bias",
            "attn.c_attn.weight",
            "attn.c_proj.bias",
            "attn.c_proj.weight",
            "ln_1.bias",
            "ln_1.weight",
            "ln_2.bias",
            "ln_2.weight",
            "mlp.c_fc.bias",
            "mlp.c_fc.weight",
            "mlp.c_proj.bias",
            "mlp.c_proj.weight",
        ] {
            want.push(Box::leak(format!("transformer.h.{i}.{p}").into_boxed_str()));
        }
    }
    want.sort_unstable();
    assert_eq!(names, want);
    let shape = |n: &str| s.params()[n].shape().dims().to_vec();
    assert_eq!(shape("transformer.wte.weight"), [11, 8]);
    assert_eq!(shape("transformer.wpe.weight"), [6, 8]);
    assert_eq!(shape("transformer.h.1.attn.c_attn.weight"), [24, 8]);
    assert_eq!(shape("transformer.h.0.mlp.c_proj.weight"), [8, 32]);
}

#[test]
fn the_initial_loss_is_close_to_that_of_a_uniform_guess() {
    // N(0, 0.02²) weights give logits near 0: the loss is near ln(vocab)
    let cfg = GptConfig {
        vocab: 65,
        ..tiny()
    };
    let gpt = Gpt::new(cfg, 1).unwrap();
    let mut s = Session::<CpuF64>::new();
    let loss = gpt.loss(&mut s, &IDS, &TARGETS, 2, Mode::Train).unwrap();
    let loss = s.value_f64(&loss).unwrap().data()[0];
    assert!((loss - 65f64.ln()).abs() < 0.05, "{loss}");
}

#[test]
fn a_position_sees_only_itself_and_the_past() {
    let gpt = Gpt::new(tiny(), 2).unwrap();
    let logits = |ids: &[usize]| {
        let mut s = Session::<CpuF64>::new();
        let l = gpt.logits(&mut s, ids, 1, Mode::Eval).unwrap();
        s.value_f64(&l).unwrap()
    };
    let a = logits(&[1, 2, 3, 4, 5]);
    let b = logits(&[1, 2, 3, 9, 0]);
    let row = 11;
    // the first three positions are unchanged bit for bit; the fourth is not
    assert_eq!(a.data()[..3 * row], b.data()[..3 * row]);
    assert_ne!(a.data()[3 * row..4 * row], b.data()[3 * row..4 * row]);
}

#[test]
fn the_recorded_program_computes_the_eager_steps_bits() {
    let gpt = Gpt::new(tiny(), 3).unwrap();
    let (loss, grads) = loss_and_grads(&gpt, None);
    let mut r = Recorder::new();
    let out = gpt.loss(&mut r, &IDS, &TARGETS, 2, Mode::Train).unwrap();
    let rec = r.finish(&out).unwrap();
    let run = rec.run::<CpuF64>().unwrap();
    assert_eq!(
        run.output.to_f64().unwrap().data()[0].to_bits(),
        loss.to_bits()
    );
    let mut seen = 0;
    for (leaf, g) in rec.leaves.iter().zip(&run.grads) {
        if leaf.kind == LeafKind::Param {
            let g = g.to_f64().unwrap();
            assert!(g.bit_eq(&grads[&leaf.name]), "{}", leaf.name);
            seen += 1;
        }
    }
    assert_eq!(seen, grads.len());
}

#[test]
fn gradients_agree_with_finite_differences_and_the_reference_engine() {
    let gpt = Gpt::new(tiny(), 4).unwrap();
    let (_, grads) = loss_and_grads(&gpt, None);
    // the reference engine, to rounding
    let mut s = Session::<Tensor<f64>>::new();
    let loss = gpt.loss(&mut s, &IDS, &TARGETS, 2, Mode::Train).unwrap();
    s.backward(&loss, Sweep::DenseAll).unwrap();
    for (name, g) in &grads {
        let r = s.param_grad(name).unwrap();
        let scale = r.data().iter().fold(1e-3f64, |m, v| m.max(v.abs()));
        for (a, b) in g.data().iter().zip(r.data()) {
            assert!((a - b).abs() <= 1e-12 * scale, "{name}: {a} vs {b}");
        }
    }
    // central differences on a few elements of each kind of parameter; wte is read by the
    // embedding and by the head, so its gradient is the sum of both
    let params: BTreeMap<String, Tensor<f64>> = s
        .params()
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let h = 1e-5;
    for (name, index) in [
        ("transformer.wte.weight", 4 * 8 + 3),
        ("transformer.wte.weight", 5 * 8 + 1),
        ("transformer.wpe.weight", 2 * 8 + 6),
        ("transformer.h.0.attn.c_attn.weight", 7),
        ("transformer.h.1.attn.c_attn.bias", 20),
        ("transformer.h.1.mlp.c_fc.weight", 100),
        ("transformer.h.0.ln_1.weight", 2),
        ("transformer.ln_f.bias", 5),
    ] {
        let at = |d: f64| {
            let mut p = params.clone();
            let t = p.get_mut(name).unwrap();
            t.data_mut()[index] += d;
            loss_and_grads(&gpt, Some(&p)).0
        };
        let fd = (at(h) - at(-h)) / (2.0 * h);
        let g = grads[name].data()[index];
        assert!(
            (fd - g).abs() <= 1e-6 * g.abs().max(1e-3),
            "{name}[{index}]: finite difference {fd}, gradient {g}"
        );
    }
}

#[test]
fn bad_sizes_and_inputs_are_errors_naming_them() {
    let problem = |e: NnError| match e {
        NnError::Invalid { problem, .. } => problem,
        other => panic!("not an invalid value: {other:?}"),
    };
    let bad = |cfg: GptConfig| problem(Gpt::new(cfg, 0).unwrap_err());
    assert_eq!(
        bad(GptConfig {
            n_head: 3,
            ..tiny()
        }),
        ValueProblem::HeadSplit {
            features: tiny().n_embd,
            heads: 3
        }
    );
    assert_eq!(
        bad(GptConfig { vocab: 0, ..tiny() }),
        ValueProblem::ZeroSize { name: "vocab" }
    );
    assert_eq!(
        bad(GptConfig {
            dropout: 1.0,
            ..tiny()
        }),
        ValueProblem::Probability {
            name: "dropout",
            value: 1.0
        }
    );
    let gpt = Gpt::new(tiny(), 0).unwrap();
    let mut s = Session::<CpuF64>::new();
    let e = gpt.logits(&mut s, &[1; 14], 2, Mode::Eval).unwrap_err();
    assert_eq!(
        problem(e),
        ValueProblem::Context {
            tokens: 7,
            block: 6
        }
    );
    let e = gpt
        .logits(&mut s, &[1, 11, 2], 1, Mode::Eval)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("element 1 is 11") && e.contains("[0, 11)"),
        "{e}"
    );
    let e = gpt.loss(&mut s, &[1, 2], &[3], 1, Mode::Eval).unwrap_err();
    assert_eq!(problem(e), ValueProblem::Targets { targets: 1, ids: 2 });
}

#[test]
fn an_observed_backward_reports_each_final_parameter_gradient_once_in_sweep_order() {
    let gpt = Gpt::new(tiny(), 5).unwrap();
    let mut plain = Session::<CpuF64>::new();
    let loss = gpt
        .loss(&mut plain, &IDS, &TARGETS, 2, Mode::Train)
        .unwrap();
    plain.backward(&loss, Sweep::Releasing).unwrap();

    let mut s = Session::<CpuF64>::new();
    let loss = gpt.loss(&mut s, &IDS, &TARGETS, 2, Mode::Train).unwrap();
    let order: Vec<String> = s
        .params_in_sweep_order()
        .into_iter()
        .map(str::to_string)
        .collect();
    let (mut reported, mut nodes) = (Vec::new(), 0);
    s.backward_observed(&loss, |swept| match swept {
        Swept::Param { name, grad } => reported.push((name.to_string(), grad.to_f64().unwrap())),
        Swept::Node => nodes += 1,
    })
    .unwrap();
    let names: Vec<&String> = reported.iter().map(|(n, _)| n).collect();
    assert_eq!(names, order.iter().collect::<Vec<_>>());
    assert_eq!(reported.len(), s.params().len(), "each parameter once");
    assert!(nodes > 0);
    // the tied head's weight is used first and last: final only at the end of the sweep
    assert_eq!(
        order.last().map(String::as_str),
        Some("transformer.wte.weight")
    );
    for (name, seen) in &reported {
        let kept = s.param_grad(name).unwrap().to_f64().unwrap();
        let want = plain.param_grad(name).unwrap().to_f64().unwrap();
        let bits = |t: &Tensor<f64>| t.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(seen),
            bits(&kept),
            "{name}: reported before the sweep ended"
        );
        assert_eq!(bits(&kept), bits(&want), "{name}: as backward's");
    }
}
