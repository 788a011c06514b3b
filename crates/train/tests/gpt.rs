//! The GPT trainer: it learns, a resumed run takes the steps the uninterrupted one took, the
//! checkpoint is nanoGPT's `state_dict` plus the run, and sampling is reproducible and checked.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cpu::CpuF64;
use torchlean_nn::GptConfig;
use torchlean_train::data::TextCorpus;
use torchlean_train::gpt::GptCheckpoint;
use torchlean_train::{
    CheckpointProblem, GptEvent, GptTrainConfig, GptTrainer, Sampling, TrainError,
};

/// A small text with structure to learn: a repeated verse.
fn corpus(block: usize) -> TextCorpus {
    let verse = "to be, or not to be: that is the question.\n";
    TextCorpus::from_text("verse", &verse.repeat(40), block).unwrap()
}

fn small() -> GptTrainConfig {
    GptTrainConfig {
        model: GptConfig {
            vocab: 0,
            block: 16,
            n_layer: 2,
            n_head: 2,
            n_embd: 16,
            dropout: 0.0,
        },
        batch: 4,
        iters: 60,
        eval_interval: 20,
        eval_iters: 2,
        lr: 1e-2,
        min_lr: 1e-3,
        warmup: 5,
        ..GptTrainConfig::shakespeare_char()
    }
}

fn losses(t: &mut GptTrainer<CpuF64>, steps: usize) -> Vec<f64> {
    (0..steps)
        .map(|_| match t.step().unwrap() {
            GptEvent::Step { loss, .. } => loss,
            other => unreachable!("step() reports its step, not {other:?}"),
        })
        .collect()
}

#[test]
fn a_small_gpt_learns_a_verse() {
    let mut t = GptTrainer::<CpuF64>::new(small(), corpus(16)).unwrap();
    let first = t.evaluate().unwrap();
    let mut steps = 0;
    let mut lrs = Vec::new();
    let last = t
        .run(|e| {
            if let GptEvent::Step { lr, grad_norm, .. } = e {
                steps += 1;
                lrs.push(*lr);
                assert!(grad_norm.is_finite());
            }
            true
        })
        .unwrap()
        .unwrap();
    assert_eq!(steps, 60);
    assert_eq!(last.step, 60);
    assert!((lrs[0] - 1e-2 / 6.0).abs() < 1e-15, "{}", lrs[0]);
    // the vocabulary is 17 characters: ln 17 ≈ 2.83 at first
    assert!(first.val_loss > 2.5, "{first:?}");
    assert!(last.val_loss < 1.5, "{first:?} → {last:?}");
}

#[test]
fn a_resumed_run_takes_the_same_steps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt.safetensors");
    let mut a = GptTrainer::<CpuF64>::new(small(), corpus(16)).unwrap();
    losses(&mut a, 7);
    a.save(&path).unwrap();
    let ahead = losses(&mut a, 5);
    let mut b = GptTrainer::<CpuF64>::resume(&path, corpus(16)).unwrap();
    assert_eq!(b.steps_done(), 7);
    let resumed = losses(&mut b, 5);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&resumed), bits(&ahead));
    // another text's vocabulary is refused
    let other = TextCorpus::from_text("x", &"abcdefgh".repeat(40), 16).unwrap();
    let e = GptTrainer::<CpuF64>::resume(&path, other).unwrap_err();
    assert!(
        matches!(
            &e,
            TrainError::Checkpoint {
                path: p,
                problem: CheckpointProblem::Vocabulary { saved: 17, text: 8 },
            } if p == &path
        ),
        "{e:?}"
    );
}

#[test]
fn the_checkpoint_is_nanogpts_state_dict_and_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt.safetensors");
    let mut t = GptTrainer::<CpuF64>::new(small(), corpus(16)).unwrap();
    losses(&mut t, 2);
    let ck = t.checkpoint().unwrap();
    assert_eq!(
        ck.tensors["lm_head.weight"],
        ck.tensors["transformer.wte.weight"]
    );
    assert_eq!(ck.tensors["transformer.wte.weight"].shape, [17, 16]);
    assert!(ck
        .tensors
        .contains_key("optimizer.state.transformer.h.1.mlp.c_fc.weight.exp_avg_sq"));
    t.save(&path).unwrap();
    let back = GptCheckpoint::load(&path).unwrap();
    assert_eq!(back.step, 2);
    assert_eq!(
        back.vocabulary,
        " ,.:\nabehinoqrstu"
            .chars()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<String>()
    );
    assert_eq!(back.params.len(), t.params().len());

    // a configuration of the wrong type is refused with the JSON parser's error as the source
    let mut ck = torchlean_train::Checkpoint::load(&path).unwrap();
    let mut meta: serde_json::Value = serde_json::from_str(&ck.metadata["torchlean"]).unwrap();
    meta["config"] = serde_json::json!(5);
    ck.metadata.insert("torchlean".into(), meta.to_string());
    ck.save(&path).unwrap();
    let e = GptCheckpoint::load(&path).map(|_| ()).unwrap_err();
    assert!(
        matches!(
            &e,
            TrainError::CheckpointMetadata {
                field: "config",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(std::error::Error::source(&e).is_some(), "{e}");
}

#[test]
fn sampling_is_reproducible_and_refuses_a_stranger() {
    let mut t = GptTrainer::<CpuF64>::new(small(), corpus(16)).unwrap();
    losses(&mut t, 30);
    let sampling = Sampling {
        tokens: 40,
        temperature: 0.8,
        top_k: Some(5),
        seed: 7,
    };
    let mut streamed = String::new();
    let a = t.sample("to be", sampling, |c| streamed.push(c)).unwrap();
    assert_eq!(a, streamed);
    assert_eq!(a.chars().count(), 40);
    let b = t.sample("to be", sampling, |_| {}).unwrap();
    assert_eq!(a, b);
    let e = t.sample("to bE", sampling, |_| {}).unwrap_err();
    assert!(
        matches!(
            e,
            TrainError::UnknownChar {
                ch: 'E',
                position: 4,
                ..
            }
        ),
        "{e:?}"
    );
    let e = t.sample("", sampling, |_| {}).unwrap_err();
    assert!(e.to_string().contains("prompt"), "{e}");
}

#[test]
fn verified_steps_agree_on_a_correct_engine_and_stop_a_faulty_one() {
    use torchlean_faults::{fault, Faulty};
    use torchlean_spec::Tensor;
    let mut t = GptTrainer::<CpuF64>::new(small(), corpus(16)).unwrap();
    t.set_verify_every(Some(2));
    losses(&mut t, 4);
    let v = t.verify_summary().unwrap();
    assert_eq!(v.checks, 2);
    assert!(v.worst < 1e-12, "{v:?}");
    // a fault the GPT's ops meet is caught at the first verified step, naming where
    fn caught<const F: u8>() -> Option<String> {
        let mut t = GptTrainer::<Faulty<Tensor<f64>, F>>::new(small(), corpus(16)).unwrap();
        t.set_verify_every(Some(1));
        match t.step() {
            Err(TrainError::VerifyFailed { step: 1, param, .. }) => Some(param),
            Err(e) => panic!("{e}"),
            Ok(_) => None,
        }
    }
    let found = [
        ("flip-sign", caught::<{ fault::FLIP_SIGN }>()),
        (
            "drop-contribution",
            caught::<{ fault::DROP_CONTRIBUTION }>(),
        ),
        (
            "accumulation-order",
            caught::<{ fault::ACCUMULATION_ORDER }>(),
        ),
        (
            "broadcast-reduction",
            caught::<{ fault::BROADCAST_REDUCTION }>(),
        ),
        ("pool-off-by-one", caught::<{ fault::POOL_OFF_BY_ONE }>()),
    ];
    // the GPT has no pools, and a changed summation order stays within f64's tolerance
    let want = [
        ("flip-sign", Some("transformer.h.0.attn.c_proj.weight")),
        (
            "drop-contribution",
            Some("transformer.h.0.attn.c_attn.bias"),
        ),
        ("accumulation-order", None),
        ("broadcast-reduction", Some("transformer.h.0.ln_1.bias")),
        ("pool-off-by-one", None),
    ];
    for ((fault, got), (_, want)) in found.iter().zip(want) {
        assert_eq!(got.as_deref(), want, "{fault}");
    }
}
