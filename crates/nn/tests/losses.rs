//! The losses of `torchlean_nn::loss` against PyTorch: the value and the gradient w.r.t. the
//! logits of every case of `tests/fixtures/losses.json` (made by
//! `tools/pytorch/loss_fixture.py`, float64 PyTorch) on the reference engine, on the CPU
//! engine in f64 and in f32; the recorded program (compiled, and exported as
//! `torchlean.ir.v1` then run through `torchlean grad`'s path) gives the eager session's
//! value and gradient bit for bit; bad input is refused, by the session and the recorder
//! alike, with an error naming the loss, the layer and the shapes.
//!
//! Gradients are compared normwise: `max |a − b| / max |b|` over the tensor. Elementwise
//! relative error is not a fair test at the large logits: where a gradient element is a
//! difference of two nearly equal numbers (`σ(30) − 1`, `softmax − 1` for a confident correct
//! class), PyTorch's formula and ours round differently and each is right only to an
//! absolute `~1e-16` (PyTorch even gives exactly `0` for `σ(40) − 1`, whose value is
//! `−4.2e-18`). So elements are also checked one by one, relatively, where they are at least
//! 1e-6 of the largest. The test prints what it observes (`--nocapture`; with
//! `TORCHLEAN_LOSS_DETAIL` set, every smaller element that differs).
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use torchlean_compiled::run_grad;
use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_ir::{check_payload, check_shapes};
use torchlean_nn::*;
use torchlean_runtime::Kernels;
use torchlean_spec::{Reduction, Shape, Tensor};

const FIXTURE: &str = include_str!("fixtures/losses.json");

/// One fixture case.
struct Case {
    name: String,
    loss: Loss,
    reduction: Reduction,
    output: Tensor<f64>,
    labels: Option<Vec<usize>>,
    target: Option<Tensor<f64>>,
    value: f64,
    grad: Tensor<f64>,
}

impl Case {
    fn target(&self) -> Target<'_> {
        match (&self.labels, &self.target) {
            (Some(l), None) => Target::Labels(l),
            (None, Some(t)) => Target::Values(t),
            _ => panic!("{}: labels or a target", self.name),
        }
    }

    fn apply<O: Ops>(&self, ops: &mut O, x: &Var) -> Result<Var> {
        ops.scoped("loss", |ops| {
            self.loss.apply(ops, x, &self.target(), self.reduction)
        })
    }
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn cases() -> Vec<Case> {
    let doc: Value = serde_json::from_str(FIXTURE).unwrap();
    assert_eq!(doc["dtype"], "float64");
    let cases: Vec<Case> = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let shape: Vec<usize> = c["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let mut loss: Loss = c["loss"].as_str().unwrap().parse().unwrap();
            if let Loss::CrossEntropy { label_smoothing } = &mut loss {
                *label_smoothing = c["label_smoothing"].as_f64().unwrap();
            }
            Case {
                name: c["name"].as_str().unwrap().to_string(),
                loss,
                reduction: Reduction::from_wire(c["reduction"].as_str().unwrap()).unwrap(),
                output: Tensor::new(shape.clone(), floats(&c["output"])).unwrap(),
                labels: c.get("labels").map(|l| {
                    l.as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_u64().unwrap() as usize)
                        .collect()
                }),
                target: c
                    .get("target")
                    .map(|t| Tensor::new(shape.clone(), floats(t)).unwrap()),
                value: c["value"].as_f64().unwrap(),
                grad: Tensor::new(shape, floats(&c["grad"])).unwrap(),
            }
        })
        .collect();
    // every loss × reduction, cross-entropy with three smoothings
    for name in Loss::NAMES {
        let n = cases.iter().filter(|c| c.loss.name() == name).count();
        let want = if name == "cross-entropy" { 18 } else { 6 };
        assert_eq!(n, want, "{name}");
    }
    cases
}

/// The loss value and the gradient w.r.t. the logits, eagerly on engine `V`.
fn eager<V: Kernels>(c: &Case, sweep: Sweep) -> (Session<V>, Var, Var) {
    let mut s = Session::<V>::new();
    let x = s.input("logits", &c.output, true).unwrap();
    let loss = c.apply(&mut s, &x).unwrap();
    assert_eq!(loss.shape(), &Shape::scalar(), "{}", c.name);
    s.backward(&loss, sweep).unwrap();
    (s, x, loss)
}

fn value_and_grad<V: Kernels>(c: &Case, sweep: Sweep) -> (f64, Tensor<f64>) {
    let (s, x, loss) = eager::<V>(c, sweep);
    let value = *s.value_f64(&loss).unwrap().item().unwrap();
    let grad = s.grad(&x).unwrap().unwrap().to_f64().unwrap();
    (value, grad)
}

/// `(relative error of the value, normwise relative error of the gradient, largest
/// elementwise relative error of the gradient over its elements of at least 1e-6 of its
/// largest)` against the fixture.
fn errors(c: &Case, value: f64, grad: &Tensor<f64>) -> (f64, f64, f64) {
    assert_eq!(grad.shape(), c.grad.shape(), "{}", c.name);
    let value_err = (value - c.value).abs() / c.value.abs();
    let scale = c.grad.data().iter().fold(0.0f64, |m, g| m.max(g.abs()));
    let mut norm_err = 0.0f64;
    let mut elem_err = 0.0f64;
    for (a, b) in grad.data().iter().zip(c.grad.data()) {
        let d = (a - b).abs();
        norm_err = norm_err.max(d / scale);
        if b.abs() >= 1e-6 * scale {
            elem_err = elem_err.max(d / b.abs());
        } else if std::env::var_os("TORCHLEAN_LOSS_DETAIL").is_some() && d > 0.0 {
            println!("  {}: tiny element {a:e} vs PyTorch {b:e}", c.name);
        }
    }
    (value_err, norm_err, elem_err)
}

/// Checks every case on engine `V` within `tol` (value: relative; gradient: normwise) and
/// `elem_tol` (gradient elements of at least 1e-6 of the largest: relative), and returns the
/// largest errors seen.
fn check_engine<V: Kernels>(engine: &str, tol: f64, elem_tol: f64) -> (f64, f64, f64) {
    let mut worst = (0.0f64, 0.0f64, 0.0f64);
    for c in cases() {
        for sweep in [Sweep::DenseAll, Sweep::Releasing] {
            let (value, grad) = value_and_grad::<V>(&c, sweep);
            let (v, g, e) = errors(&c, value, &grad);
            assert!(
                v <= tol,
                "{engine} {}: value {value} vs PyTorch {} (relative error {v:e})",
                c.name,
                c.value
            );
            assert!(
                g <= tol,
                "{engine} {}: gradient {:?} vs PyTorch {:?} (normwise error {g:e})",
                c.name,
                grad.data(),
                c.grad.data()
            );
            assert!(
                e <= elem_tol,
                "{engine} {}: gradient {:?} vs PyTorch {:?} (elementwise error {e:e})",
                c.name,
                grad.data(),
                c.grad.data()
            );
            worst = (worst.0.max(v), worst.1.max(g), worst.2.max(e));
        }
    }
    println!(
        "{engine}: largest relative error of a value {:e}, of a gradient normwise {:e}, \
         of a gradient element (of at least 1e-6 of its largest) {:e}",
        worst.0, worst.1, worst.2
    );
    worst
}

#[test]
fn values_and_gradients_match_pytorch_in_f64_on_the_reference_and_cpu_engines() {
    // observed: values within 4e-16, gradients within 4.4e-16 normwise and 7.5e-15
    // elementwise (over the elements of at least 1e-6 of the largest)
    check_engine::<Tensor<f64>>("reference f64", 1e-12, 1e-12);
    check_engine::<CpuF64>("cpu f64", 1e-12, 1e-12);
}

#[test]
fn values_and_gradients_match_pytorch_in_f32_on_the_cpu_engine() {
    // observed: values within 1.1e-7, gradients within 4.5e-7 normwise and 2.2e-6
    // elementwise (f32's ε is 6e-8)
    check_engine::<CpuF32>("cpu f32", 2e-6, 2e-5);
}

#[test]
fn the_losses_are_stable_at_large_logits() {
    // hand arithmetic, independent of the fixture: BCE of x = ±100 against the wrong label is
    // 100 (softplus(100) = 100 + log1p(e^-100), no overflow), against the right one e^-100
    // (or 0, for x = −100, where −100 + softplus(100) cancels, as in PyTorch): 200 in f64;
    // cross-entropy of [100, −100] with label 1 is 200 + log1p(e^-200) = 200 in f64
    let mut s = Session::<Tensor<f64>>::new();
    let x = Tensor::new([4], vec![100.0, -100.0, 100.0, -100.0]).unwrap();
    let t = Tensor::new([4], vec![0.0, 1.0, 1.0, 0.0]).unwrap();
    let xv = s.input("x", &x, true).unwrap();
    let l = Loss::BceWithLogits
        .apply(&mut s, &xv, &Target::Values(&t), Reduction::Sum)
        .unwrap();
    assert_eq!(*s.value(&l).unwrap().item().unwrap(), 200.0);
    s.backward(&l, Sweep::Releasing).unwrap();
    let g = s.grad(&xv).unwrap().unwrap();
    // σ(x) − t: 1, −1 and ∓e^-100 (to an ulp of 1 where the formula subtracts from 1)
    assert_eq!(&g.data()[..2], &[1.0, -1.0]);
    assert!(
        g.data()[2] <= 0.0 && g.data()[2].abs() < 1e-16,
        "{:?}",
        g.data()
    );
    assert!(
        g.data()[3] >= 0.0 && g.data()[3].abs() < 1e-16,
        "{:?}",
        g.data()
    );
    let z = Tensor::new([1, 2], vec![100.0, -100.0]).unwrap();
    let zv = s.input("z", &z, false).unwrap();
    let loss = Loss::CrossEntropy {
        label_smoothing: 0.0,
    };
    let l = loss
        .apply(&mut s, &zv, &Target::Labels(&[1]), Reduction::Mean)
        .unwrap();
    assert_eq!(*s.value(&l).unwrap().item().unwrap(), 200.0);
}

#[test]
fn label_smoothing_by_hand() {
    // logits all equal: −log p = log C for every class, so the loss is log C whatever ε is;
    // logits [0, log 3] with label 0: nll = log 4, smooth = (log 4 + log 4 − log 3) / 2 per
    // class; ε = 0.5, sum over the one row: 0.5·log 4 + 0.25·(2 log 4 − log 3)
    let mut s = Session::<Tensor<f64>>::new();
    let flat = s
        .input(
            "flat",
            &Tensor::full(Shape::from([2, 5]), 0.7).unwrap(),
            false,
        )
        .unwrap();
    for eps in [0.0, 0.1, 1.0] {
        let l = Loss::CrossEntropy {
            label_smoothing: eps,
        }
        .apply(&mut s, &flat, &Target::Labels(&[0, 3]), Reduction::Mean)
        .unwrap();
        let v = s.value(&l).unwrap().item().unwrap();
        assert!((v - 5f64.ln()).abs() < 1e-15, "ε = {eps}: {v}");
    }
    let x = s
        .input(
            "x",
            &Tensor::new([1, 2], vec![0.0, 3f64.ln()]).unwrap(),
            false,
        )
        .unwrap();
    let l = Loss::CrossEntropy {
        label_smoothing: 0.5,
    }
    .apply(&mut s, &x, &Target::Labels(&[0]), Reduction::Sum)
    .unwrap();
    let want = 0.5 * 4f64.ln() + 0.25 * (2.0 * 4f64.ln() - 3f64.ln());
    let v = s.value(&l).unwrap().item().unwrap();
    assert!((v - want).abs() < 1e-15, "{v} vs {want}");
}

fn record(c: &Case) -> Recorded {
    let mut r = Recorder::new();
    let x = r.input("logits", &c.output, true).unwrap();
    let loss = c.apply(&mut r, &x).unwrap();
    r.finish(&loss).unwrap()
}

/// The recorded program's value and logits gradient on engine `V` equal the eager session's
/// on `V`, bit for bit, under both sweeps.
fn recorded_agrees<V: Kernels>(c: &Case, rec: &Recorded) {
    let run = rec.run::<V>().unwrap();
    let input = rec
        .leaves
        .iter()
        .position(|l| matches!(l.kind, LeafKind::Input { .. }))
        .unwrap();
    for sweep in [Sweep::DenseAll, Sweep::Releasing] {
        let (s, x, loss) = eager::<V>(c, sweep);
        let value = s.value(&loss).unwrap().to_f64().unwrap();
        let grad = s.grad(&x).unwrap().unwrap().to_f64().unwrap();
        assert!(
            value.bit_eq(&run.output.to_f64().unwrap()),
            "{}: value",
            c.name
        );
        assert!(
            grad.bit_eq(&run.grads[input].to_f64().unwrap()),
            "{}: gradient {:?} vs {:?}",
            c.name,
            grad.data(),
            run.grads[input].to_f64().unwrap().data()
        );
    }
}

#[test]
fn the_recorded_and_exported_program_gives_the_eager_value_and_gradient_bitwise() {
    for c in cases() {
        let rec = record(&c);
        recorded_agrees::<Tensor<f64>>(&c, &rec);
        recorded_agrees::<CpuF64>(&c, &rec);
        recorded_agrees::<CpuF32>(&c, &rec);
        // exported as torchlean.ir.v1: well formed, and `torchlean grad`'s path reproduces it
        let IrExport { graph, payload, .. } = rec.to_ir().unwrap();
        assert!(
            check_shapes(&graph).iter().all(|d| !d.is_error()),
            "{}",
            c.name
        );
        assert!(
            check_payload(&graph, &payload)
                .iter()
                .all(|d| !d.is_error()),
            "{}",
            c.name
        );
        let back = torchlean_ir::Graph::from_json(&graph.to_json()).unwrap();
        assert_eq!(back, graph, "{}", c.name);
        let want = run_grad::<Tensor<f64>>(&graph, &payload, &c.output, None).unwrap();
        let (s, x, loss) = eager::<Tensor<f64>>(&c, Sweep::Releasing);
        assert!(want.output.bit_eq(s.value(&loss).unwrap()), "{}", c.name);
        assert!(
            want.grad_input().bit_eq(s.grad(&x).unwrap().unwrap()),
            "{}: exported gradient",
            c.name
        );
    }
}

/// Applies `loss` to an input of shape `output` in scope `head`, in a session and in a
/// recorder; both must refuse it, with the same [`NnError::Loss`] naming the loss, the layer
/// and the two shapes, before applying any op. Returns the problem and the message with its
/// source, as the command line prints it.
fn refused(
    loss: Loss,
    output: &[usize],
    target: Target<'_>,
    reduction: Reduction,
) -> (LossProblem, String) {
    let x = Tensor::full(Shape::from(output), 0.5).unwrap();
    let mut s = Session::<Tensor<f64>>::new();
    let xv = s.input("x", &x, true).unwrap();
    let before = s.tape_len();
    let e = s
        .scoped("head", |s| loss.apply(s, &xv, &target, reduction))
        .unwrap_err();
    assert_eq!(s.tape_len(), before, "{e}: nothing was applied");
    let problem = match &e {
        NnError::Loss {
            loss: name,
            layer,
            output: o,
            target: t,
            problem,
        } => {
            assert_eq!(*name, loss.name());
            assert_eq!(layer, "head");
            assert_eq!(o, &Shape::from(output));
            assert_eq!(t, &target.shape());
            problem.clone()
        }
        other => panic!("not a loss error: {other:?}"),
    };
    let msg = e.to_string();
    assert_eq!(
        msg,
        format!(
            "layer `head`: loss `{}` on output {} and target {}",
            loss.name(),
            Shape::from(output),
            target.shape()
        )
    );
    let mut r = Recorder::new();
    let xv = r.input("x", &x, true).unwrap();
    let e = r
        .scoped("head", |r| loss.apply(r, &xv, &target, reduction))
        .unwrap_err();
    assert_eq!(r.len(), 0, "{e}: nothing was recorded");
    assert_eq!(e.to_string(), msg, "the recorder says the same");
    // (by the debug text: a NaN setting is not equal to itself)
    assert!(
        matches!(&e, NnError::Loss { problem: p, .. } if format!("{p:?}") == format!("{problem:?}")),
        "{e:?}"
    );
    (problem.clone(), format!("{msg}: {problem}"))
}

/// A loss, its output's shape, a target and a reduction, with the problem and the words it is
/// refused with.
type Refusal<'a> = (
    Loss,
    &'a [usize],
    Target<'a>,
    Reduction,
    LossProblem,
    &'a str,
);

#[test]
fn bad_input_is_refused_naming_the_loss_the_layer_and_the_shapes() {
    let ce = |label_smoothing| Loss::CrossEntropy { label_smoothing };
    let t23 = Tensor::full(Shape::from([2, 3]), 0.5).unwrap();
    let t32 = Tensor::full(Shape::from([3, 2]), 0.5).unwrap();
    let above = Tensor::new([2, 3], vec![0.0, 1.0, 1.5, 0.0, 0.0, 0.0]).unwrap();
    let below = Tensor::new([2, 3], vec![0.0, 1.0, 0.5, -0.25, 0.0, 0.0]).unwrap();
    let nan = Tensor::new([2, 3], vec![0.0, 1.0, 0.5, 0.0, f64::NAN, 0.0]).unwrap();
    let empty = Tensor::full(Shape::from([0, 3]), 0.0).unwrap();
    use LossProblem as P;
    use Reduction::{Mean, Sum};
    #[rustfmt::skip]
    let table: Vec<Refusal<'_>> = vec![
        (ce(0.0), &[2, 3], Target::Labels(&[0, 3]), Mean, P::Label { row: 1, label: 3, classes: 3 }, "row 1's label is 3, but the logits have 3 classes (labels 0 to 2)"),
        (ce(0.1), &[2, 3], Target::Labels(&[7, 0]), Sum, P::Label { row: 0, label: 7, classes: 3 }, "row 0's label is 7, but the logits have 3 classes (labels 0 to 2)"),
        (ce(0.0), &[2, 3], Target::Labels(&[0, 1, 2]), Mean, P::LabelCount { labels: 3, rows: 2 }, "3 labels for 2 rows of logits"),
        (ce(0.0), &[3], Target::Labels(&[0]), Mean, P::LogitsRank, "the logits must be [N, C]"),
        (ce(0.0), &[2, 3, 4], Target::Labels(&[0, 1]), Sum, P::LogitsRank, "the logits must be [N, C]"),
        (ce(-0.1), &[2, 3], Target::Labels(&[0, 1]), Mean, P::Smoothing { value: -0.1 }, "label smoothing -0.1 is outside [0, 1]"),
        (ce(1.5), &[2, 3], Target::Labels(&[0, 1]), Mean, P::Smoothing { value: 1.5 }, "label smoothing 1.5 is outside [0, 1]"),
        (ce(f64::NAN), &[2, 3], Target::Labels(&[0, 1]), Sum, P::Smoothing { value: f64::NAN }, "label smoothing NaN is outside [0, 1]"),
        (ce(0.0), &[2, 3], Target::Values(&t23), Mean, P::ValuesGiven, "must be integer class labels"),
        (Loss::Mse, &[2, 3], Target::Labels(&[0, 1]), Mean, P::LabelsGiven, "not class labels"),
        (Loss::Mse, &[2, 3], Target::Values(&t32), Sum, P::TargetShape, "the target must have the output's shape"),
        (Loss::Mse, &[0, 3], Target::Values(&empty), Mean, P::EmptyMean, "the mean over no elements"),
        (Loss::BceWithLogits, &[2, 3], Target::Labels(&[0, 1]), Sum, P::LabelsGiven, "not class labels"),
        (Loss::BceWithLogits, &[3, 2], Target::Values(&t23), Mean, P::TargetShape, "the target must have the output's shape"),
        (Loss::BceWithLogits, &[2, 3], Target::Values(&above), Mean, P::TargetRange { element: 2, value: 1.5 }, "target element 2 is 1.5, outside [0, 1]"),
        (Loss::BceWithLogits, &[2, 3], Target::Values(&below), Sum, P::TargetRange { element: 3, value: -0.25 }, "target element 3 is -0.25, outside [0, 1]"),
        (Loss::BceWithLogits, &[2, 3], Target::Values(&nan), Mean, P::TargetRange { element: 4, value: f64::NAN }, "target element 4 is NaN, outside [0, 1]"),
        (Loss::BceWithLogits, &[0, 3], Target::Values(&empty), Mean, P::EmptyMean, "the mean over no elements"),
    ];
    for (loss, shape, target, reduction, problem, want) in table {
        let (got, msg) = refused(loss, shape, target, reduction);
        // NaN settings compare by their text
        assert_eq!(format!("{got:?}"), format!("{problem:?}"), "{msg}");
        assert!(msg.contains(want), "{msg:?} does not say {want:?}");
    }
    // the edges of what is accepted: ε = 0 and 1, targets exactly 0 and 1, a sum over nothing
    let mut s = Session::<Tensor<f64>>::new();
    let x = s.input("x", &t23, false).unwrap();
    for eps in [0.0, 1.0] {
        ce(eps)
            .apply(&mut s, &x, &Target::Labels(&[0, 2]), Mean)
            .unwrap();
    }
    let edges = Tensor::new([2, 3], vec![0.0, 1.0, 0.0, 1.0, 1.0, 0.0]).unwrap();
    Loss::BceWithLogits
        .apply(&mut s, &x, &Target::Values(&edges), Mean)
        .unwrap();
    let e = s.input("e", &empty, false).unwrap();
    let l = Loss::Mse
        .apply(&mut s, &e, &Target::Values(&empty), Sum)
        .unwrap();
    assert_eq!(*s.value(&l).unwrap().item().unwrap(), 0.0);
}

#[test]
fn the_committed_fixture_is_what_the_script_writes() {
    // unset or empty: skipped (as the train tests' `python()` does)
    let Some(python) = std::env::var("TORCHLEAN_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
    else {
        eprintln!(
            "SKIPPED: set TORCHLEAN_PYTHON to a Python with torch to rerun \
             tools/pytorch/loss_fixture.py"
        );
        return;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/pytorch/loss_fixture.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fresh: Value = serde_json::from_slice(&out.stdout).unwrap();
    let committed: Value = serde_json::from_str(FIXTURE).unwrap();
    assert_eq!(fresh["cases"], committed["cases"]);
}
