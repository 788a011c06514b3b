//! One program, two interpreters: the eager `Session` and the `Recorder` (compiled and
//! differentiated) agree on values and gradients — exactly over the rationals, bit for bit in
//! f64 where the accumulation order is the same — on hand-written programs and on every shipped
//! conformance graph run as a program; the exported IR reproduces the Session's gradients
//! through `torchlean grad`'s path; bad input is an error naming the op, the layer and the
//! shapes.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use torchlean_compiled::run_grad;
use torchlean_engine_cpu::CpuF64;
use torchlean_ir::{check_payload, check_shapes, Case};
use torchlean_nn::*;
use torchlean_runtime::Kernels;
use torchlean_spec::{Rational, Scalar, Shape, Tensor};

fn t(shape: &[usize], f: impl Fn(usize) -> f64) -> Tensor<f64> {
    let n: usize = shape.iter().product();
    Tensor::new(shape.to_vec(), (0..n).map(f).collect()).unwrap()
}

/// A two-layer perceptron with a shared bias use and a detached branch, written once.
fn mlp<O: Ops>(ops: &mut O, x: &Var) -> Result<Var> {
    let h = ops.scoped("0", |ops| {
        let w = ops.param("weight", &t(&[4, 3], |i| (i as f64 - 5.0) / 8.0))?;
        let b = ops.param("bias", &t(&[4], |i| i as f64 / 16.0))?;
        ops.linear(x, &w, &b)
    })?;
    let h = ops.tanh(&h)?;
    let stop = ops.detach(&h)?;
    let h = ops.mul(&h, &stop)?;
    let y = ops.scoped("2", |ops| {
        let w = ops.param("weight", &t(&[2, 4], |i| (3.0 - i as f64) / 8.0))?;
        let b = ops.param("bias", &t(&[2], |_| 0.25))?;
        ops.linear(&h, &w, &b)
    })?;
    let y = ops.log_softmax(&y, 1)?;
    ops.sum(&y)
}

/// An algebraic program (exact over the rationals).
fn algebraic<O: Ops>(ops: &mut O, x: &Var) -> Result<Var> {
    let w = ops.param("w", &t(&[3, 2], |i| (i as f64 - 2.0) / 4.0))?;
    let h = ops.matmul(x, &w)?;
    let h = ops.relu(&h)?;
    let c = ops.constant(&t(&[2, 2], |i| 1.0 + i as f64 / 3.0))?;
    let h = ops.div(&h, &c)?;
    let h = ops.add(&h, &h)?;
    let s = ops.scale(&h, 1.5)?;
    ops.mse_loss(&s, &c)
}

fn eager<V: Kernels, F>(x: &Tensor<f64>, sweep: Sweep, f: F) -> (Session<V>, Var, Var)
where
    F: FnOnce(&mut Session<V>, &Var) -> Result<Var>,
{
    let mut s = Session::<V>::new();
    let input = s.input("x", x, true).unwrap();
    let out = f(&mut s, &input).unwrap();
    // the conformance graphs' outputs are not all scalars: seeded with ones, as `torchlean grad`
    let ones = Tensor::full(out.shape().clone(), 1.0).unwrap();
    s.backward_with_seed(&out, &ones, sweep).unwrap();
    (s, input, out)
}

fn recorded<F>(x: &Tensor<f64>, f: F) -> Recorded
where
    F: FnOnce(&mut Recorder, &Var) -> Result<Var>,
{
    let mut r = Recorder::new();
    let input = r.input("x", x, true).unwrap();
    let out = f(&mut r, &input).unwrap();
    r.finish(&out).unwrap()
}

/// Values and every leaf gradient of the two interpreters, compared by `same`.
fn agree<V: Kernels>(
    s: &Session<V>,
    input: &Var,
    out: &Var,
    rec: &Recorded,
    same: impl Fn(&V, &V) -> bool,
) {
    let run = rec.run::<V>().unwrap();
    assert!(same(s.value(out).unwrap(), &run.output), "output");
    for (i, leaf) in rec.leaves.iter().enumerate() {
        let eager = match leaf.kind {
            LeafKind::Param => s.param_grad(&leaf.name),
            LeafKind::Input { .. } => s.grad(input).unwrap(),
            LeafKind::Const | LeafKind::Buffer => continue,
        };
        let eager = eager.unwrap_or_else(|| panic!("no eager gradient for {}", leaf.name));
        assert!(same(eager, &run.grads[i]), "gradient of `{}`", leaf.name);
    }
}

#[test]
fn eager_and_compiled_agree_bitwise_in_f64_on_every_engine() {
    let x = t(&[5, 3], |i| (i as f64 * 0.37).sin());
    let rec = recorded(&x, mlp);
    for sweep in [Sweep::DenseAll, Sweep::Releasing] {
        let (s, input, out) = eager::<Tensor<f64>, _>(&x, sweep, mlp);
        agree(&s, &input, &out, &rec, |a, b| a.bit_eq(b));
        let (s, input, out) = eager::<CpuF64, _>(&x, sweep, mlp);
        agree(&s, &input, &out, &rec, |a, b| a.bit_eq(b));
    }
    // the parameters carry PyTorch's state_dict names
    let names: Vec<&str> = rec
        .leaves
        .iter()
        .filter(|l| l.kind == LeafKind::Param)
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
}

#[test]
fn eager_and_compiled_agree_exactly_over_the_rationals() {
    let x = t(&[2, 3], |i| (i as f64 - 2.5) / 3.0);
    let rec = recorded(&x, algebraic);
    let (s, input, out) = eager::<Tensor<Rational>, _>(&x, Sweep::DenseAll, algebraic);
    // `add(h, h)`: the eager tape scatters twice, the compiled graph sums locally — over the
    // rationals the two are the same number
    agree(&s, &input, &out, &rec, |a, b| a == b);
    let g = s.param_grad("w").unwrap();
    assert!(g.data().iter().any(|v| *v != Rational::zero()));
}

#[test]
fn every_conformance_graph_runs_as_a_program_with_torchlean_grads_gradients() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let case = Case::from_json_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let program = IrProgram {
            graph: &case.graph,
            payload: &case.payload,
            naming: torchlean_nn::ParamNaming::ByNode,
        };
        let (s, input, out) =
            eager::<Tensor<f64>, _>(&case.inputs[0], Sweep::Releasing, |s, x| program.run(s, x));
        let want = run_grad::<Tensor<f64>>(&case.graph, &case.payload, &case.inputs, None).unwrap();
        let close = |a: &Tensor<f64>, b: &Tensor<f64>, what: &str| {
            assert_eq!(a.shape(), b.shape(), "{}: {what}", case.name);
            for (x, y) in a.data().iter().zip(b.data()) {
                assert!(
                    x.to_bits() == y.to_bits() || (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                    "{}: {what}: {x} vs {y}",
                    case.name
                );
            }
        };
        close(s.value(&out).unwrap(), &want.output, "output");
        close(
            s.grad(&input).unwrap().unwrap(),
            want.grad_input(),
            "input gradient",
        );
        for (node, entry) in &want.grad_payload.entries {
            for (name, g) in &entry.tensors {
                let eager = s
                    .param_grad(&IrProgram::param_name(*node, name))
                    .cloned()
                    .unwrap_or_else(|| Tensor::zeros(g.shape().clone()).unwrap());
                close(&eager, g, &format!("{node}.{name}"));
            }
        }
        n += 1;
    }
    assert!(n >= 20, "only {n} cases");
}

#[test]
fn the_exported_ir_passes_check_and_reproduces_the_session_gradients() {
    let x = t(&[5, 3], |i| (i as f64 * 0.37).cos());
    let rec = recorded(&x, mlp);
    let IrExport {
        graph,
        payload,
        params: places,
    } = rec.to_ir().unwrap();
    assert!(check_shapes(&graph).iter().all(|d| !d.is_error()));
    assert!(check_payload(&graph, &payload)
        .iter()
        .all(|d| !d.is_error()));
    // a JSON round trip keeps it
    let back = torchlean_ir::Graph::from_json(&graph.to_json()).unwrap();
    assert_eq!(back, graph);
    // saved to files (safetensors payload), read back unchanged; a failed write is an error
    let dir = std::env::temp_dir().join(format!("torchlean-nn-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let export = IrExport {
        graph: graph.clone(),
        payload: payload.clone(),
        params: places.clone(),
    };
    export
        .save(&dir.join("g.json"), &dir.join("p.safetensors"))
        .unwrap();
    let read_back =
        torchlean_ir::Payload::from_safetensors(&std::fs::read(dir.join("p.safetensors")).unwrap())
            .unwrap();
    assert_eq!(read_back, payload);
    let e = export
        .save(&dir.join("no/such/dir/g.json"), &dir.join("p.json"))
        .unwrap_err();
    assert!(matches!(e, NnError::Io { .. }), "{e}");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");
    std::fs::remove_dir_all(&dir).unwrap();
    let grads = run_grad::<Tensor<f64>>(&graph, &payload, &x, None).unwrap();
    let (s, _, out) = eager::<Tensor<f64>, _>(&x, Sweep::Releasing, mlp);
    assert!(grads.output.bit_eq(s.value(&out).unwrap()));
    for (name, at) in places {
        assert_eq!(at.len(), 1, "{name} is used once");
        let (node, slot) = at[0];
        let g = grads
            .grad_payload
            .entry(node)
            .unwrap()
            .tensor(slot)
            .unwrap();
        assert!(g.bit_eq(s.param_grad(&name).unwrap()), "{name}");
    }
}

#[test]
fn a_wrong_shape_names_the_op_the_layer_and_the_shapes() {
    let mut s = Session::<Tensor<f64>>::new();
    let x = s.input("x", &t(&[5, 7], |_| 1.0), false).unwrap();
    let e = mlp(&mut s, &x).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(&e, NnError::Shape { op: "linear", layer, .. } if layer == "0"),
        "{e:?}"
    );
    assert!(
        msg.contains("layer `0`") && msg.contains("[5, 7]") && msg.contains("[4, 3]"),
        "{msg}"
    );
    // the recorder reports the same, before anything runs
    let mut r = Recorder::new();
    let x = r.input("x", &t(&[5, 7], |_| 1.0), false).unwrap();
    assert_eq!(mlp(&mut r, &x).unwrap_err().to_string(), msg);
}

#[test]
fn cross_entropy_with_integer_labels_agrees_and_a_bad_label_names_the_op_and_layer() {
    use torchlean_spec::Reduction;
    let logits = t(&[4, 3], |i| (i as f64 * 0.7).sin());
    let model = |labels: &'static [usize]| {
        move |ops: &mut Session<Tensor<f64>>, x: &Var| -> Result<Var> {
            let h = ops.scoped("head", |ops| {
                let w = ops.param("weight", &t(&[3, 3], |i| (i as f64 - 4.0) / 5.0))?;
                let b = ops.param("bias", &t(&[3], |_| 0.0))?;
                ops.linear(x, &w, &b)
            })?;
            ops.scoped("loss", |ops| ops.cross_entropy(&h, labels, Reduction::Mean))
        }
    };
    let (s, _, out) = eager::<Tensor<f64>, _>(&logits, Sweep::Releasing, model(&[0, 2, 1, 2]));
    let mut r = Recorder::new();
    let x = r.input("x", &logits, true).unwrap();
    let h = r
        .scoped("head", |ops| {
            let w = ops.param("weight", &t(&[3, 3], |i| (i as f64 - 4.0) / 5.0))?;
            let b = ops.param("bias", &t(&[3], |_| 0.0))?;
            ops.linear(&x, &w, &b)
        })
        .unwrap();
    let y = r.cross_entropy(&h, &[0, 2, 1, 2], Reduction::Mean).unwrap();
    let rec = r.finish(&y).unwrap();
    let run = rec.run::<Tensor<f64>>().unwrap();
    assert!(run.output.bit_eq(s.value(&out).unwrap()));
    let g = rec.param_grad(&run, "head.weight").unwrap();
    assert!(g.bit_eq(s.param_grad("head.weight").unwrap()));
    // a label outside [0, C): an error naming the op and the layer, not a panic
    let mut s = Session::<Tensor<f64>>::new();
    let x = s.input("x", &logits, false).unwrap();
    let e = model(&[0, 3, 1, 2])(&mut s, &x).unwrap_err().to_string();
    assert!(e.contains("cross_entropy") && e.contains("loss"), "{e}");
}

#[test]
fn an_ill_formed_graph_is_refused_before_anything_runs() {
    let g = torchlean_ir::Graph::from_json(&serde_json::json!({
        "format": "torchlean.ir.v1", "input_id": 0, "output_id": 1,
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [2]},
            {"id": 1, "kind": "relu", "parents": [5], "shape": [2]}
        ]
    }))
    .unwrap();
    let p = torchlean_ir::Payload::new();
    let mut s = Session::<Tensor<f64>>::new();
    let x = s.input("x", &t(&[2], |_| 1.0), false).unwrap();
    let e = IrProgram {
        graph: &g,
        payload: &p,
        naming: torchlean_nn::ParamNaming::ByNode,
    }
    .run(&mut s, &x)
    .unwrap_err();
    assert!(matches!(e, NnError::Ir(_)), "{e}");
    assert_eq!(s.tape_len(), 1, "nothing ran");
}

#[test]
fn values_of_another_session_and_stale_values_are_refused() {
    let mut a = Session::<Tensor<f64>>::new();
    let mut b = Session::<Tensor<f64>>::new();
    let x = a.input("x", &t(&[2], |_| 1.0), false).unwrap();
    let e = b.relu(&x).unwrap_err();
    assert!(matches!(e, NnError::ForeignValue { op: "relu", .. }), "{e}");
    a.reset();
    assert!(a.relu(&x).is_err(), "a value from before the reset");
    assert_eq!(a.tape_len(), 0);
    // a parameter asked for with another shape
    a.param("w", &t(&[2], |_| 1.0)).unwrap();
    a.reset();
    let e = a.param("w", &t(&[3], |_| 1.0)).unwrap_err();
    assert!(matches!(e, NnError::ParamShape { .. }), "{e}");
}

#[test]
fn parameters_persist_across_resets_and_no_grad_records_nothing_to_differentiate() {
    let x = t(&[5, 3], |i| i as f64 / 10.0);
    let mut s = Session::<Tensor<f64>>::new();
    let input = s.input("x", &x, false).unwrap();
    let out = mlp(&mut s, &input).unwrap();
    s.backward(&out, Sweep::Releasing).unwrap();
    let g = s.param_grad("2.bias").unwrap().clone();
    // an optimizer step, then the next step sees the updated value
    let w = s.param_mut("2.bias").unwrap();
    *w = Tensor::add(w, &g).unwrap();
    let updated = w.clone();
    s.reset();
    let input = s.input("x", &x, false).unwrap();
    let b = s
        .scoped("2", |s| s.param("bias", &t(&[2], |_| 0.25)))
        .unwrap();
    assert!(s.value(&b).unwrap().bit_eq(&updated));
    let _ = mlp(&mut s, &input).unwrap();
    s.reset();
    let input = s.input("x", &x, false).unwrap();
    let out = s.no_grad(|s| mlp(s, &input)).unwrap();
    s.backward(&out, Sweep::DenseAll).unwrap();
    assert!(s.param_grad("0.weight").is_none());
}

#[test]
fn recording_a_long_program_and_exporting_it() {
    // 10,000 ops: recording and export are linear (no per-op scan of earlier ops)
    let mut r = Recorder::new();
    let x = r.input("x", &t(&[16], |i| i as f64 / 16.0), false).unwrap();
    let mut v = x.clone();
    for i in 0..10_000 {
        v = match i % 3 {
            0 => r.scale(&v, 0.999).unwrap(),
            1 => r.add_scalar(&v, 0.001).unwrap(),
            _ => r.tanh(&v).unwrap(),
        };
    }
    assert_eq!(r.len(), 10_000);
    let rec = r.finish(&v).unwrap();
    let graph = rec.to_ir().unwrap().graph;
    assert_eq!(graph.len(), 10_001);
}

#[test]
fn an_in_place_step_after_reset_copies_no_parameter_buffer_and_the_next_step_sees_it() {
    let x = t(&[5, 3], |i| (i as f64 * 0.37).sin());
    let mut s = Session::<CpuF64>::new();
    let input = s.input("x", &x, false).unwrap();
    let loss = mlp(&mut s, &input).unwrap();
    s.backward(&loss, Sweep::Releasing).unwrap();
    let grads = s.take_param_grads();
    let names: Vec<&str> = grads.keys().map(String::as_str).collect();
    assert_eq!(names, ["0.bias", "0.weight", "2.bias", "2.weight"]);
    // moved out: the session no longer reports them
    assert!(s.param_grad("0.weight").is_none());
    s.reset();
    let before: Vec<*const f64> = s.params().values().map(|p| p.as_slice().as_ptr()).collect();
    for (name, p) in s.params_mut() {
        let g = grads[name].as_slice();
        for (v, g) in p.make_mut().iter_mut().zip(g) {
            *v -= 0.5 * g;
        }
    }
    let after: Vec<*const f64> = s.params().values().map(|p| p.as_slice().as_ptr()).collect();
    assert_eq!(
        before, after,
        "the reset left every parameter buffer unique"
    );
    let w = s.params()["0.weight"].to_f64().unwrap();
    let input = s.input("x", &x, false).unwrap();
    let _ = mlp(&mut s, &input).unwrap();
    assert!(s.params()["0.weight"].to_f64().unwrap().bit_eq(&w));
    assert!(w.data()[0] != -5.0 / 8.0, "the step moved the weight");
}

#[test]
fn loaded_parameters_are_what_the_next_forward_uses_and_a_shape_change_is_refused() {
    let x = t(&[5, 3], |i| (i as f64 * 0.37).sin());
    let w = t(&[4, 3], |i| i as f64 / 10.0);
    let mut s = Session::<Tensor<f64>>::new();
    let mut values = std::collections::BTreeMap::new();
    values.insert("0.weight".to_string(), w.clone());
    s.load_params(&values).unwrap();
    let input = s.input("x", &x, false).unwrap();
    let _ = mlp(&mut s, &input).unwrap();
    assert!(
        s.params()["0.weight"].bit_eq(&w),
        "the model's init did not replace it"
    );
    values.insert("0.weight".to_string(), t(&[3, 4], |_| 0.0));
    let err = s.load_params(&values).unwrap_err().to_string();
    assert!(err.contains("0.weight") && err.contains("[4, 3]"), "{err}");
}

/// The compiled training step (`Recorded::step`) on an MLP with cross-entropy: its loss and
/// parameter gradients equal the eager session's (releasing sweep) bit for bit, on a first
/// step and on a second one after an SGD update of both sides' parameters.
fn compiled_step_equals_the_eager_session<V: torchlean_runtime::Kernels>() {
    use torchlean_nn::layers::{relu, Linear};
    let model = torchlean_nn::seq![
        Linear::<6, 5>::new(1).unwrap(),
        relu(),
        Linear::<5, 4>::new(2).unwrap(),
        relu(),
        Linear::<4, 3>::new(3).unwrap()
    ];
    let x = t(&[4, 6], |i| ((i * 7) % 11) as f64 / 5.0 - 1.0);
    let labels = [2usize, 0, 1, 2];
    let mut s = Session::<V>::new();
    let mut r = Recorder::new();
    let xin = r.input("x", &x, false).unwrap();
    let logits = model.forward(&mut r, &xin, Mode::Train).unwrap();
    let loss = r
        .cross_entropy(&logits, &labels, torchlean_spec::Reduction::Mean)
        .unwrap();
    let rec = r.finish(&loss).unwrap();
    let mut leaf_values: Vec<V> = rec.inputs().unwrap();
    let is_param = |i: usize| rec.leaves[i].kind == LeafKind::Param;
    for _step in 0..2 {
        s.reset();
        let xv = s.input("x", &x, false).unwrap();
        let logits = model.forward(&mut s, &xv, Mode::Train).unwrap();
        let loss = s
            .cross_entropy(&logits, &labels, torchlean_spec::Reduction::Mean)
            .unwrap();
        let eager_loss = s.value(&loss).unwrap().clone();
        s.backward(&loss, Sweep::Releasing).unwrap();
        let eager_grads = s.take_param_grads();
        let (out, grads) = rec.step::<V>(leaf_values.clone(), is_param).unwrap();
        assert!(out.bit_eq(&eager_loss), "the loss");
        let mut n_params = 0;
        for (i, leaf) in rec.leaves.iter().enumerate() {
            if leaf.kind != LeafKind::Param {
                assert!(grads[i].is_none(), "leaf {} is not kept", leaf.name);
                continue;
            }
            n_params += 1;
            let g = grads[i].as_ref().expect("every parameter is reached");
            assert!(g.bit_eq(&eager_grads[&leaf.name]), "{}", leaf.name);
        }
        assert_eq!(n_params, 6);
        // an SGD step on both sides (in f64 data, rounded back: the same on both)
        s.reset();
        let names: Vec<String> = s.params().keys().cloned().collect();
        for name in names {
            let p = s.params()[&name].to_f64().unwrap();
            let g = eager_grads[&name].to_f64().unwrap();
            let next = Tensor::new(
                p.shape().clone(),
                p.data()
                    .iter()
                    .zip(g.data())
                    .map(|(a, b)| a - 0.5 * b)
                    .collect(),
            )
            .unwrap();
            *s.param_mut(&name).unwrap() = V::from_f64(&next).unwrap();
            let i = rec.leaves.iter().position(|l| l.name == name).unwrap();
            leaf_values[i] = V::from_f64(&next).unwrap();
        }
    }
}

#[test]
fn the_compiled_step_equals_the_eager_session_bit_for_bit() {
    compiled_step_equals_the_eager_session::<torchlean_engine_cpu::CpuF32>();
    compiled_step_equals_the_eager_session::<CpuF64>();
    compiled_step_equals_the_eager_session::<Tensor<f64>>();
}

fn linear_tanh<O: Ops>(ops: &mut O, x: &Var) -> Result<Var> {
    let h = ops.scoped("0", |ops| {
        let w = ops.param("weight", &t(&[4, 3], |i| (i as f64 - 5.0) / 8.0))?;
        let b = ops.param("bias", &t(&[4], |i| i as f64 / 16.0))?;
        ops.linear(x, &w, &b)
    })?;
    let h = ops.tanh(&h)?;
    ops.sum(&h)
}

#[test]
fn an_export_in_the_september_dialect_reads_back_with_the_same_gradients() {
    let x = t(&[5, 3], |i| (i as f64 * 0.37).cos());
    let dir = std::env::temp_dir().join(format!("torchlean-nn-september-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("g.json");
    // `log_softmax` has no counterpart in the September dialect: named, nothing written
    let e = recorded(&x, mlp)
        .to_ir()
        .unwrap()
        .save_september(&path)
        .unwrap_err();
    assert!(e.to_string().contains("log_softmax"), "{e}");
    assert!(!path.exists());
    let export = recorded(&x, linear_tanh).to_ir().unwrap();
    export.save_september(&path).unwrap();
    let doc =
        torchlean_ir::GraphDoc::from_json_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(doc.dialect, torchlean_ir::Dialect::September2026);
    let a = run_grad::<Tensor<f64>>(&export.graph, &export.payload, &x, None).unwrap();
    let b = run_grad::<Tensor<f64>>(&doc.graph, &doc.payload, &x, None).unwrap();
    assert!(a.output.bit_eq(&b.output));
    assert!(a.grad_input().bit_eq(b.grad_input()));
    assert_eq!(a.grad_payload, b.grad_payload);
}

#[test]
fn a_program_torchlean_ir_v1_cannot_hold_is_refused_with_why() {
    let x = t(&[2], |i| i as f64);
    let export_problem = |rec: Recorded| match rec.to_ir() {
        Err(NnError::Export { problem }) => problem,
        other => panic!("expected an export error: {:?}", other.map(|_| ())),
    };
    // no input
    let mut r = Recorder::new();
    let w = r.param("w", &x).unwrap();
    let y = r.tanh(&w).unwrap();
    assert_eq!(
        export_problem(r.finish(&y).unwrap()),
        ExportProblem::NoInput
    );
    // the output is a parameter, computed by nothing
    let mut r = Recorder::new();
    r.input("x", &x, false).unwrap();
    let w = r.param("w", &x).unwrap();
    assert_eq!(
        export_problem(r.finish(&w).unwrap()),
        ExportProblem::OutputNotComputed
    );
    // a graph of one input run on two
    let export = recorded(&x, |r, v| r.tanh(v)).to_ir().unwrap();
    let mut s = Session::<Tensor<f64>>::new();
    let xs = [
        s.input("a", &x, false).unwrap(),
        s.input("b", &x, false).unwrap(),
    ];
    let e = IrProgram {
        graph: &export.graph,
        payload: &export.payload,
        naming: torchlean_nn::ParamNaming::ByNode,
    }
    .run_inputs(&mut s, &xs)
    .unwrap_err();
    assert!(
        matches!(
            e,
            NnError::Program {
                problem: ProgramProblem::Inputs {
                    expected: 1,
                    given: 2
                }
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_program_of_two_inputs_exports_them_in_order_and_by_name() {
    // it was refused (`ExportProblem::Inputs { inputs: 2 }`) while the IR took several inputs
    let a = t(&[2, 3], |i| i as f64 * 0.5 - 1.0);
    let b = t(&[3], |i| (i as f64).cos());
    let mut r = Recorder::new();
    let av = r.input("a", &a, false).unwrap();
    let bv = r.input("b", &b, false).unwrap();
    let bb = r.broadcast_to(&bv, Shape::from([2, 3])).unwrap();
    let y = r.sub(&av, &bb).unwrap();
    let y = r.tanh(&y).unwrap();
    let export = r.finish(&y).unwrap().to_ir().unwrap();
    let g = &export.graph;
    assert_eq!(g.inputs().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(g.input_names, ["a", "b"]);
    assert_eq!(g.nodes[1].shape, Shape::from([3]));
    assert!(check_shapes(g).iter().all(|d| !d.is_error()));
    // the JSON round trip keeps the inputs, and running it gives the recorded values, in order
    let g = torchlean_ir::Graph::from_json(&g.to_json()).unwrap();
    assert_eq!(&g, &export.graph);
    let mut s = Session::<Tensor<f64>>::new();
    let xs = [
        s.input("a", &a, false).unwrap(),
        s.input("b", &b, false).unwrap(),
    ];
    let out = IrProgram {
        graph: &g,
        payload: &export.payload,
        naming: torchlean_nn::ParamNaming::ByNode,
    }
    .run_inputs(&mut s, &xs)
    .unwrap();
    let got = s.value_f64(&out).unwrap();
    let want: Vec<f64> = (0..6)
        .map(|i| (a.data()[i] - b.data()[i % 3]).tanh())
        .collect();
    assert_eq!(got.data(), &want[..]);
}
