//! A small MLP-like chain recorded with `torchlean_runtime::record` on the CPU engine: the
//! releasing sweep (`backward_sparse`) and the dense sweep (`backward_dense`) agree with each
//! other bit for bit, and with the reference engine (`torchlean_spec::Tensor<f64>`) within the
//! f32 tolerance; on `CpuF64` they agree with the reference within the f64 tolerance.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cpu::{CpuF32, CpuF64};
use torchlean_engine_suite::norm_rel_error;
use torchlean_runtime::{record, Kernels, Tape};
use torchlean_spec::{ops, BinaryOp, Op, Shape, Tensor, UnaryOp};

fn values(shape: &[usize], salt: u64, scale: f64) -> Tensor<f64> {
    let mut s = salt;
    Tensor::from_fn(Shape::from(shape), |_| {
        s = ops::splitmix64(s);
        scale * ((s >> 11) as f64 / (1u64 << 52) as f64 - 1.0)
    })
    .unwrap()
}

/// Leaves (id, requires_grad) and the output id of the chain
/// `x → linear → relu → linear → tanh → (+ skip) → layernorm → linear → log_softmax → mse`.
fn build<V: Kernels>(tape: &mut Tape<V>) -> (Vec<usize>, usize) {
    let leaf = |tape: &mut Tape<V>, shape: &[usize], salt: u64, grad: bool| {
        tape.leaf(V::from_f64(&values(shape, salt, 1.0)).unwrap(), grad, None)
    };
    let x = leaf(tape, &[8, 12], 1, true);
    let w1 = leaf(tape, &[16, 12], 2, true);
    let b1 = leaf(tape, &[16], 3, true);
    let w2 = leaf(tape, &[16, 16], 4, true);
    let b2 = leaf(tape, &[16], 5, true);
    let w3 = leaf(tape, &[5, 16], 6, true);
    let b3 = leaf(tape, &[5], 7, true);
    let target = leaf(tape, &[8, 5], 8, false);
    let h = record(tape, Op::Linear, &[x, w1, b1], Some("fc1".into())).unwrap();
    let h = record(tape, Op::Unary(UnaryOp::Relu), &[h], None).unwrap();
    let g = record(tape, Op::Linear, &[h, w2, b2], Some("fc2".into())).unwrap();
    let g = record(tape, Op::Unary(UnaryOp::Tanh), &[g], None).unwrap();
    let h = record(tape, Op::Binary(BinaryOp::Add), &[g, h], None).unwrap();
    let h = record(
        tape,
        Op::LayerNorm {
            axis: 1,
            eps: Some(1e-5),
        },
        &[h],
        None,
    )
    .unwrap();
    let h = record(tape, Op::Binary(BinaryOp::Mul), &[h, h], None).unwrap();
    let z = record(tape, Op::Linear, &[h, w3, b3], Some("fc3".into())).unwrap();
    let z = record(tape, Op::LogSoftmax { axis: 1 }, &[z], None).unwrap();
    let loss = record(tape, Op::MseLoss, &[z, target], None).unwrap();
    (vec![x, w1, b1, w2, b2, w3, b3, target], loss)
}

/// Output value and, per leaf, `(dense gradient, sparse gradient)` as f64.
#[allow(clippy::type_complexity)]
fn run<V: Kernels>() -> (Tensor<f64>, Vec<(Option<Tensor<f64>>, Option<Tensor<f64>>)>) {
    let mut tape = Tape::empty();
    let (leaves, out) = build::<V>(&mut tape);
    let value = tape.get_value(out).unwrap().to_f64().unwrap();
    let seed = || V::full(&Shape::scalar(), 1.0).unwrap();
    let dense = tape.backward_dense(out, seed()).unwrap();
    let sparse = tape
        .backward_sparse(out, seed(), |id| leaves.contains(&id))
        .unwrap();
    let grads = leaves
        .iter()
        .map(|&id| {
            (
                dense[id].as_ref().map(|g| g.to_f64().unwrap()),
                sparse.get(id).map(|g| g.to_f64().unwrap()),
            )
        })
        .collect();
    sparse.release();
    for g in dense.into_iter().flatten() {
        g.drop_value();
    }
    tape.release();
    (value, grads)
}

trait DropValue {
    fn drop_value(self);
}

impl<V: torchlean_runtime::GradValue> DropValue for V {
    fn drop_value(self) {
        torchlean_runtime::GradValue::drop(self);
    }
}

fn check<V: Kernels>(tol: f64) {
    let (want_value, want) = run::<Tensor<f64>>();
    let (value, got) = run::<V>();
    let e = norm_rel_error(&value, &want_value);
    assert!(e <= tol, "{}: output error {e:e}", V::ENGINE);
    for (k, ((dense, sparse), (want_dense, _))) in got.iter().zip(&want).enumerate() {
        match (dense, sparse, want_dense) {
            (Some(d), Some(s), Some(w)) => {
                assert_eq!(
                    d.to_f64s(),
                    s.to_f64s(),
                    "leaf {k}: dense and sparse differ"
                );
                let e = norm_rel_error(d, w);
                assert!(e <= tol, "{}: leaf {k} gradient error {e:e}", V::ENGINE);
            }
            (None, None, None) => {}
            other => panic!("leaf {k}: reached by one sweep only: {other:?}"),
        }
    }
    // the target does not take gradients; everything else does
    assert!(got[7].0.is_none() && got[0].0.is_some());
}

#[test]
fn f32_sweeps_agree_with_the_reference() {
    check::<CpuF32>(1e-5);
}

#[test]
fn f64_sweeps_agree_with_the_reference() {
    check::<CpuF64>(1e-12);
}

#[test]
fn a_long_elementwise_chain_sweeps_back_with_bounded_live_gradients() {
    let mut tape: Tape<CpuF32> = Tape::empty();
    let x0 = CpuF32::from_vec([16], (0..16).map(|i| 0.1 * i as f32).collect()).unwrap();
    let mut id = tape.leaf(x0, true, None);
    for i in 0..3000 {
        let op = match i % 3 {
            0 => Op::Scale { c: 0.999 },
            1 => Op::AddScalar { c: 0.001 },
            _ => Op::Unary(UnaryOp::Tanh),
        };
        id = record(&mut tape, op, &[id], None).unwrap();
    }
    let seed = CpuF32::full(&Shape::from([16]), 1.0).unwrap();
    let grads = tape.backward_sparse(id, seed, |i| i == 0).unwrap();
    assert!(grads.peak_live() <= 3, "peak live {}", grads.peak_live());
    let g = grads.get(0).unwrap();
    assert!(g.as_slice().iter().all(|v| v.is_finite() && *v > 0.0));
    grads.release();
    tape.release();
}

/// A pass-through VJP (`add_scalar` returns its cotangent's buffer) does not cost a copy in the
/// releasing sweep: the node's own gradient is released before the contribution is stored, so
/// the contribution is unique by then and `into_owned` keeps it. The leaf ends up holding the
/// seed's buffer itself.
#[test]
fn the_releasing_sweep_does_not_copy_pass_through_gradients() {
    let mut tape: Tape<CpuF32> = Tape::empty();
    let x = tape.leaf(CpuF32::from_vec([4], vec![1.0; 4]).unwrap(), true, None);
    let mut y = x;
    for _ in 0..3 {
        y = record(&mut tape, Op::AddScalar { c: 0.5 }, &[y], None).unwrap();
    }
    let seed = CpuF32::from_vec([4], vec![2.0; 4]).unwrap();
    let seed_buffer = seed.as_slice().as_ptr();
    let grads = tape.backward_sparse(y, seed, |id| id == x).unwrap();
    let gx = grads.get(x).unwrap();
    assert_eq!(gx.as_slice(), &[2.0; 4]);
    assert_eq!(gx.as_slice().as_ptr(), seed_buffer);
    assert!(gx.is_unique());
    assert_eq!(grads.peak_live(), 2);
}

/// The releasing sweep skips what nothing keeps: a linear layer whose input does not require
/// grad never forms its input gradient (the live peak stays below the input's size), a conv
/// layer's likewise, and the kept weight and bias gradients equal the dense sweep's bit for bit.
#[test]
fn the_releasing_sweep_never_forms_the_gradient_of_an_input_nobody_keeps() {
    fn check(x_shape: &[usize], w_shape: &[usize], b: usize, op: Op) {
        let mut tape = Tape::<CpuF32>::empty();
        let leaf = |tape: &mut Tape<CpuF32>, shape: &[usize], salt, grad| {
            tape.leaf(
                CpuF32::from_f64(&values(shape, salt, 1.0)).unwrap(),
                grad,
                None,
            )
        };
        let x = leaf(&mut tape, x_shape, 1, false);
        let w = leaf(&mut tape, w_shape, 2, true);
        let bias = leaf(&mut tape, &[b], 3, true);
        let y = record(&mut tape, op, &[x, w, bias], None).unwrap();
        let y = record(&mut tape, Op::Unary(UnaryOp::Tanh), &[y], None).unwrap();
        let loss = record(&mut tape, Op::Sum, &[y], None).unwrap();
        let seed = || CpuF32::full(&Shape::scalar(), 1.0).unwrap();
        let mut sparse = tape
            .backward_sparse(loss, seed(), |id| id == w || id == bias)
            .unwrap();
        let x_size = tape.get_value(x).unwrap().shape().size();
        assert!(
            sparse.peak_live_elements() < x_size,
            "peak {} ≥ the input's {x_size} elements: its gradient was formed",
            sparse.peak_live_elements()
        );
        let dense = tape.backward_dense_all(loss, seed()).unwrap();
        for id in [w, bias] {
            assert!(sparse.take(id).unwrap().bit_eq(&dense[id]), "leaf {id}");
        }
        assert!(sparse.take(x).is_none());
    }
    check(&[4, 3000], &[2, 3000], 2, Op::Linear);
    let spec = torchlean_spec::Conv2dSpec::ungrouped(8, 1, (3, 3), 1, 0);
    // the output (and so the frontier) is 8× smaller than the input
    check(&[4, 8, 30, 30], &[1, 8, 3, 3], 1, Op::Conv2d(spec));
}
