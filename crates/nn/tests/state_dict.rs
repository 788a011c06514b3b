//! Loading a PyTorch `state_dict` (safetensors) into a Session by PyTorch's names: the rejected
//! inputs (each with nothing changed), and, with `TORCHLEAN_PYTHON` naming a Python with torch
//! and safetensors, PyTorch models' state_dicts giving PyTorch's outputs and gradients (skipped
//! visibly otherwise).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use torchlean_ir::{safetensors_bytes, TensorData};
use torchlean_nn::state::ShapeMismatch;
use torchlean_nn::zoo::Model;
use torchlean_nn::{Mode, NnError, Ops, Session, Sweep};
use torchlean_spec::Tensor;

type S = Session<Tensor<f64>>;

/// A session that has run `model` once, so it holds its parameters and buffers.
fn session(model: Model) -> S {
    let mut s = S::new();
    let x = s.input("x", &model.input().unwrap(), false).unwrap();
    model.loss(&mut s, &x, Mode::Eval).unwrap();
    s.reset();
    s
}

fn file(dir: &Path, name: &str, tensors: &[(&str, Vec<usize>, TensorData)]) -> PathBuf {
    let bytes = safetensors_bytes(
        tensors.iter().map(|(n, s, d)| (*n, s.as_slice(), d)),
        &BTreeMap::new(),
    )
    .unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The session's state_dict as file tensors, with `f` applied to each (name, shape, data).
fn state_tensors(s: &S) -> Vec<(String, Vec<usize>, TensorData)> {
    s.state_dict()
        .unwrap()
        .into_iter()
        .map(|(n, t)| {
            (
                n,
                t.shape().dims().to_vec(),
                TensorData::F64(t.data().to_vec()),
            )
        })
        .collect()
}

fn as_refs(v: &[(String, Vec<usize>, TensorData)]) -> Vec<(&str, Vec<usize>, TensorData)> {
    v.iter()
        .map(|(n, s, d)| (n.as_str(), s.clone(), d.clone()))
        .collect()
}

#[test]
fn loads_by_pytorch_names_f32_and_f64_and_skips_the_batch_norm_counter() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(Model::CnnBatchNorm);
    let mut tensors = state_tensors(&s);
    // new values: f32 for the conv weight, f64 elsewhere
    for (name, _, data) in &mut tensors {
        *data = match std::mem::replace(data, TensorData::F64(vec![])) {
            TensorData::F64(v) if name == "0.weight" => {
                TensorData::F32(v.iter().map(|x| (x * 2.0) as f32).collect())
            }
            TensorData::F64(v) => TensorData::F64(v.iter().map(|x| x + 0.25).collect()),
            other => other,
        };
    }
    let mut with_counter = as_refs(&tensors);
    // PyTorch's BatchNorm2d counter (int64): skipped. As I64 bytes, written raw below.
    let p = file(dir.path(), "state.safetensors", &with_counter);
    let p = add_i64(&p, "1.num_batches_tracked");
    s.load_state_dict_file(&p, true).unwrap();
    let loaded = s.state_dict().unwrap();
    for (name, shape, data) in with_counter.drain(..) {
        let t = &loaded[name];
        assert_eq!(t.shape().dims(), shape.as_slice(), "{name}");
        let want: Vec<f64> = match data {
            TensorData::F32(v) => v.into_iter().map(f64::from).collect(),
            TensorData::F64(v) => v,
        };
        assert_eq!(t.data(), want.as_slice(), "{name}");
    }
}

/// Rewrites the safetensors file at `p` with tensor `name` an I64 scalar (replacing one of
/// that name).
fn add_i64(p: &Path, name: &str) -> PathBuf {
    let bytes = std::fs::read(p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .iter()
        .filter(|(n, _)| *n != name)
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let counter = 2i64.to_le_bytes();
    views.push((
        name.to_string(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![], &counter).unwrap(),
    ));
    let out = safetensors::serialize(views, &None).unwrap();
    let q = p.with_extension("i64.safetensors");
    std::fs::write(&q, out).unwrap();
    q
}

/// Every rejected input, and after each the session's state is what it was.
#[test]
fn rejected_inputs_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(Model::Mlp);
    let before = s.state_dict().unwrap();
    let good = state_tensors(&s);
    let mut wrong = as_refs(&good);
    // `0.bias` missing, `4.weight` mis-shaped, `9.weight` unexpected, all at once
    wrong.retain(|(n, _, _)| *n != "0.bias");
    for (n, shape, data) in &mut wrong {
        if *n == "4.weight" {
            *shape = vec![8, 3];
            *data = TensorData::F64(vec![0.0; 24]);
        }
    }
    wrong.push(("9.weight", vec![2], TensorData::F64(vec![1.0, 2.0])));
    let names = file(dir.path(), "names.safetensors", &wrong);
    let lenient_ok = {
        let mut v = as_refs(&good);
        v.retain(|(n, _, _)| *n != "0.bias");
        v.push(("9.weight", vec![2], TensorData::F64(vec![1.0, 2.0])));
        v
    };
    let garbage = dir.path().join("garbage.safetensors");
    std::fs::write(&garbage, b"not a safetensors file at all").unwrap();
    let full = std::fs::read(&names).unwrap();
    let cut = dir.path().join("cut.safetensors");
    std::fs::write(&cut, &full[..full.len() - 5]).unwrap();
    let i64_weight = add_i64(
        &file(dir.path(), "x.safetensors", &as_refs(&good)),
        "2.weight",
    );

    type Check = fn(&NnError) -> bool;
    let table: Vec<(&str, PathBuf, bool, Check)> = vec![
        ("every name problem at once", names.clone(), true, |e| {
            matches!(e, NnError::StateDictNames { report, .. }
                if report.missing == ["0.bias"]
                    && report.unexpected == ["9.weight"]
                    && report.mismatched == [ShapeMismatch {
                        name: "4.weight".into(), checkpoint: vec![8, 3], expected: vec![3, 8] }])
        }),
        ("not strict: the shape mismatch still", names, false, |e| {
            matches!(e, NnError::StateDictNames { report, .. }
                if report.missing.is_empty() && report.unexpected.is_empty()
                    && report.mismatched.len() == 1)
        }),
        ("not safetensors", garbage, true, |e| {
            matches!(e, NnError::StateDictFormat { .. })
        }),
        ("truncated", cut, true, |e| {
            matches!(e, NnError::StateDictFormat { .. })
        }),
        (
            "an int64 parameter",
            i64_weight,
            true,
            |e| matches!(e, NnError::StateDictDtype { name, .. } if name == "2.weight"),
        ),
        (
            "no such file",
            dir.path().join("absent.safetensors"),
            true,
            |e| matches!(e, NnError::StateDictRead { .. }),
        ),
    ];
    for (what, path, strict, check) in table {
        let e = s.load_state_dict_file(&path, strict).unwrap_err();
        assert!(check(&e), "{what}: {e:?}");
        let text = e.to_string();
        assert!(text.contains(&path.display().to_string()), "{what}: {text}");
        assert_eq!(s.state_dict().unwrap(), before, "{what}: the state changed");
    }
    // the message names every problem, with both shapes
    let e = s
        .load_state_dict_file(dir.path().join("names.safetensors"), true)
        .unwrap_err()
        .to_string();
    for want in [
        "\"0.bias\"",
        "\"9.weight\"",
        "\"4.weight\"",
        "[8, 3]",
        "[3, 8]",
    ] {
        assert!(e.contains(want), "{want} not in {e}");
    }
    // without strict, missing and unexpected names are fine
    let p = file(dir.path(), "lenient.safetensors", &lenient_ok);
    s.load_state_dict_file(&p, false).unwrap();
    assert_eq!(s.state_dict().unwrap(), before);
}

fn rel(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

#[path = "../../train/tests/common/mod.rs"]
mod python;

/// PyTorch models' state_dicts (`tools/pytorch/state_dict_fixture.py`) loaded strictly: the
/// eval-mode loss and every parameter gradient equal PyTorch's (1e-9 relative, f64).
#[test]
fn pytorch_state_dicts_give_pytorchs_outputs() {
    let Some(py) = python::python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = python::script("tools/pytorch/state_dict_fixture.py");
    let o = std::process::Command::new(&py)
        .arg(&script)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for model in [Model::Mlp, Model::CnnBatchNorm] {
        let name = model.name();
        let mut s = session(model);
        s.load_state_dict_file(dir.path().join(format!("{name}.safetensors")), true)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let expect = std::fs::read(dir.path().join(format!("{name}.expect.safetensors"))).unwrap();
        let expect = torchlean_nn::state::read_state_dict(&expect, dir.path(), |_| false).unwrap();
        let x = s.input("x", &expect["input"], false).unwrap();
        let loss = model.loss(&mut s, &x, Mode::Eval).unwrap();
        let got = s.value_f64(&loss).unwrap();
        let r = rel(got.data(), expect["loss"].data());
        assert!(r <= 1e-9, "{name}: loss {got:?} vs {:?}", expect["loss"]);
        s.backward(&loss, Sweep::Releasing).unwrap();
        let mut grads = 0;
        for (key, want) in &expect {
            let Some(param) = key.strip_prefix("grad.") else {
                continue;
            };
            let g = s
                .param_grad(param)
                .unwrap_or_else(|| panic!("{name}: no grad {param}"));
            let r = rel(g.data(), want.data());
            assert!(r <= 1e-9, "{name}: grad {param} off by {r:e}");
            grads += 1;
        }
        assert!(grads >= 4, "{name}: {grads} gradients compared");
        eprintln!(
            "{name}: PyTorch's state_dict loaded; loss and {grads} gradients equal PyTorch's"
        );
    }
}
