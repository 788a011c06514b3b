//! Unit tests of each sweep on small hand-built tapes.
#![allow(clippy::unwrap_used)]

use torchlean_runtime::*;
use torchlean_spec::{BinaryOp, Op, Shape, Tensor, UnaryOp};

type T = Tensor<f64>;

fn t(data: &[f64]) -> T {
    Tensor::new([data.len()], data.to_vec()).unwrap()
}

fn leaf(tape: &mut Tape<T>, data: &[f64]) -> usize {
    tape.leaf(t(data), true, None)
}

fn op(tape: &mut Tape<T>, op: Op, parents: &[usize]) -> usize {
    record(tape, op, parents, None).unwrap()
}

fn data(v: &Option<T>) -> Vec<f64> {
    v.as_ref().unwrap().data().to_vec()
}

#[test]
fn chain_gives_the_chain_rule() {
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[0.5, -1.0]);
    let y = op(&mut tape, Op::Scale { c: 2.0 }, &[x]);
    let z = op(&mut tape, Op::Unary(UnaryOp::Tanh), &[y]);
    let g = tape.backward_dense(z, t(&[1.0, 1.0])).unwrap();
    let want: Vec<f64> = [0.5f64, -1.0]
        .iter()
        .map(|&v| 2.0 * (1.0 - (2.0 * v).tanh().powi(2)))
        .collect();
    assert_eq!(data(&g[x]), want);
    assert_eq!(tape.size(), 3);
    assert_eq!(tape.get_value(y).unwrap().data(), &[1.0, -2.0]);
}

#[test]
fn fan_out_sums_contributions_in_the_order_produced() {
    // a = 3x, b = 5x, out = a + b: x receives b's contribution first (higher id), then a's
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[1.0]);
    let a = op(&mut tape, Op::Scale { c: 3.0 }, &[x]);
    let b = op(&mut tape, Op::Scale { c: 5.0 }, &[x]);
    let out = op(&mut tape, Op::Binary(BinaryOp::Add), &[a, b]);
    let g = tape.backward_dense(out, t(&[1.0])).unwrap();
    assert_eq!(data(&g[x]), vec![8.0]);
    assert_eq!(data(&g[a]), vec![1.0]);
    assert_eq!(data(&g[b]), vec![1.0]);
}

#[test]
fn a_node_using_the_same_parent_twice_receives_both_contributions() {
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[3.0]);
    let sq = op(&mut tape, Op::Binary(BinaryOp::Mul), &[x, x]);
    let g = tape.backward_dense(sq, t(&[1.0])).unwrap();
    assert_eq!(data(&g[x]), vec![6.0]);
    // eager scatter-twice: the node's closure returns two pairs for the same parent
    let pairs = tape.run_backward(sq, &t(&[1.0])).unwrap();
    assert_eq!(pairs.iter().map(|p| p.0).collect::<Vec<_>>(), vec![x, x]);
}

#[test]
fn requires_grad_false_subgraphs_get_nothing_and_run_no_vjp() {
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[2.0]);
    let c = tape.leaf(t(&[4.0]), false, Some("frozen".into()));
    let c2 = op(&mut tape, Op::Unary(UnaryOp::Exp), &[c]);
    assert!(!tape.get_node(c2).unwrap().requires_grad);
    // nothing is kept for a backward pass that can never run
    assert!(matches!(
        tape.get_node(c2).unwrap().backward,
        Backward::Nothing
    ));
    assert!(tape.run_backward(c2, &t(&[1.0])).unwrap().is_empty());
    let out = op(&mut tape, Op::Binary(BinaryOp::Mul), &[x, c2]);
    assert!(matches!(
        tape.get_node(out).unwrap().backward,
        Backward::Recorded(_)
    ));
    let g = tape.backward_dense(out, t(&[1.0])).unwrap();
    assert_eq!(data(&g[x]), vec![4f64.exp()]);
    assert!(g[c].is_none() && g[c2].is_none());
    // detach stops the gradient
    let d = op(&mut tape, Op::Detach, &[x]);
    let out2 = op(&mut tape, Op::Binary(BinaryOp::Mul), &[x, d]);
    let g = tape.backward_dense(out2, t(&[1.0])).unwrap();
    assert_eq!(
        data(&g[x]),
        vec![2.0],
        "only the non-detached path contributes"
    );
}

#[test]
fn unreached_nodes_are_none_then_zero_when_totalized() {
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[1.0, 2.0]);
    let y = leaf(&mut tape, &[3.0, 4.0]);
    let unused = op(&mut tape, Op::Unary(UnaryOp::Sin), &[y]);
    let out = op(&mut tape, Op::Scale { c: -1.0 }, &[x]);
    let g = tape.backward_dense(out, t(&[1.0, 1.0])).unwrap();
    assert!(g[y].is_none() && g[unused].is_none());
    let all = tape.backward_dense_all(out, t(&[1.0, 1.0])).unwrap();
    assert_eq!(all[y].data(), &[0.0, 0.0]);
    assert_eq!(all[unused].data(), &[0.0, 0.0]);
    assert_eq!(all[x].data(), &[-1.0, -1.0]);
}

/// A node whose VJP returns the given contributions.
fn custom(tape: &mut Tape<T>, value: T, parents: Vec<usize>, out: Vec<(usize, T)>) -> usize {
    tape.add_node(Node {
        name: Some("custom".into()),
        value,
        owns_value: true,
        requires_grad: true,
        parents: parents.into(),
        cleanup: vec![],
        backward: Backward::closure(move |_| Ok(out.clone())),
    })
}

#[test]
fn errors_name_the_node() {
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[1.0]);
    let bad = custom(
        &mut tape,
        t(&[1.0]),
        vec![x],
        vec![(x, t(&[1.0])), (99, t(&[1.0]))],
    );
    let e = tape.backward_dense(bad, t(&[1.0])).unwrap_err();
    assert!(
        matches!(e, RuntimeError::BadParent { node, parent: 99, .. } if node == bad),
        "{e}"
    );
    assert!(e.to_string().contains("(custom)"), "{e}");

    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[1.0]);
    let bad = custom(&mut tape, t(&[1.0]), vec![x], vec![(x, t(&[1.0, 2.0]))]);
    let e = tape.backward_dense(bad, t(&[1.0])).unwrap_err();
    assert!(
        matches!(e, RuntimeError::ShapeMismatch { node: 0, .. }),
        "{e}"
    );
    let e = tape
        .backward_dense_from(vec![t(&[0.0]), t(&[1.0])])
        .unwrap_err();
    assert!(
        matches!(e, RuntimeError::ShapeMismatch { node: 0, .. }),
        "{e}"
    );

    let e = tape.backward_dense(bad, t(&[1.0, 1.0])).unwrap_err();
    assert!(
        matches!(e, RuntimeError::SeedShape { node, .. } if node == bad),
        "{e}"
    );
    let e = tape.backward_dense(7, t(&[1.0])).unwrap_err();
    assert!(matches!(e, RuntimeError::NoSuchNode { id: 7, .. }));
    let e = tape.backward_dense_from(vec![t(&[1.0])]).unwrap_err();
    assert!(matches!(
        e,
        RuntimeError::GradArrayLength {
            expected: 2,
            got: 1
        }
    ));
    let e = tape
        .backward_sparse(bad, t(&[1.0, 2.0]), |_| true)
        .unwrap_err();
    assert!(matches!(e, RuntimeError::SeedShape { .. }));
}

#[test]
fn kernel_errors_carry_the_node_id() {
    // a VJP that fails: log over rationals is a typed error, attached to the node
    use torchlean_spec::Rational;
    let mut tape: Tape<Tensor<Rational>> = Tape::empty();
    let x = tape.leaf(
        Tensor::full([1], Rational::from_integer(2.into())).unwrap(),
        true,
        None,
    );
    let e = record(&mut tape, Op::Unary(UnaryOp::Log), &[x], None).unwrap_err();
    assert!(e.to_string().starts_with("node 1:"), "{e}");
}

#[test]
fn backward_dense_from_runs_every_vjp_and_backward_dense_all_only_reached_ones() {
    // The constructed singular case: x = 0, a = inv(x) = inf is disconnected from the output.
    // The total sweep runs a's VJP on a zero cotangent: -(0 · inf²) = NaN flows into x.
    // The reachable-only sweep never runs it. This is why both sweeps exist.
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[0.0]);
    let a = op(&mut tape, Op::Unary(UnaryOp::Inv), &[x]);
    assert_eq!(tape.get_value(a).unwrap().data(), &[f64::INFINITY]);
    let out = op(&mut tape, Op::Scale { c: 3.0 }, &[x]);
    let all = tape.backward_dense_all(out, t(&[1.0])).unwrap();
    assert_eq!(all[x].data(), &[3.0]);
    let seed = vec![t(&[0.0]), t(&[0.0]), t(&[1.0])];
    let from = tape.backward_dense_from(seed).unwrap();
    assert!(from[x].data()[0].is_nan(), "{:?}", from[x]);
}

#[test]
fn backward_sparse_releases_unretained_gradients_and_keeps_retained_ones() {
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[1.0]);
    let w = leaf(&mut tape, &[2.0]);
    let h = op(&mut tape, Op::Binary(BinaryOp::Mul), &[x, w]);
    let out = op(&mut tape, Op::Unary(UnaryOp::Tanh), &[h]);
    let g = tape.backward_sparse(out, t(&[1.0]), |id| id == w).unwrap();
    assert_eq!(g.ids(), vec![w]);
    let dense = tape.backward_dense(out, t(&[1.0])).unwrap();
    assert!(g.get(w).unwrap().bit_eq(dense[w].as_ref().unwrap()));
    assert!(g.peak_live() <= 3, "{}", g.peak_live());
    g.release();
}

#[test]
fn dense_steps_are_usable_on_their_own() {
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[2.0]);
    let y = op(&mut tape, Op::Scale { c: 4.0 }, &[x]);
    let mut grads: Vec<Option<T>> = vec![None, Some(t(&[1.0]))];
    backward_dense_step(&tape, &mut grads, y).unwrap();
    assert_eq!(data(&grads[x]), vec![4.0]);
    add_grad_dense(&tape, &mut grads, y, x, t(&[1.0])).unwrap();
    assert_eq!(data(&grads[x]), vec![5.0]);
    let total = totalize(&tape, vec![None, Some(t(&[1.0]))]);
    assert_eq!(total[x].data(), &[0.0]);
    let mut all: Vec<Option<T>> = total.into_iter().map(Some).collect();
    backward_dense_from_loop(&tape, &mut all, 2).unwrap();
    assert_eq!(data(&all[x]), vec![4.0]);
    add_grad_all(&tape, &mut all, y, x, t(&[0.5])).unwrap();
    backward_dense_from_step(&tape, &mut all, x).unwrap();
    assert_eq!(data(&all[x]), vec![4.5]);
    let _ = Shape::scalar();
}

#[test]
fn the_total_step_refuses_an_array_with_a_hole_where_the_dense_step_stores() {
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[2.0]);
    let y = op(&mut tape, Op::Scale { c: 4.0 }, &[x]);
    let mut holed: Vec<Option<T>> = vec![None, Some(t(&[1.0]))];
    let e = add_grad_all(&tape, &mut holed, y, x, t(&[1.0])).unwrap_err();
    assert!(
        matches!(e, RuntimeError::EmptyTotalSlot { node } if node == x),
        "{e}"
    );
    add_grad_dense(&tape, &mut holed, y, x, t(&[1.0])).unwrap();
    assert_eq!(data(&holed[x]), vec![1.0]);
}

#[test]
fn a_sweep_from_several_outputs_sums_their_pullbacks() {
    // y = 3x (an output), z = tanh(y) (an output, after y): dx = 3·s_y + 3·(1 − tanh²(3x))·s_z
    let mut tape = Tape::empty();
    let x = leaf(&mut tape, &[0.25, -0.5]);
    let y = op(&mut tape, Op::Scale { c: 3.0 }, &[x]);
    let z = op(&mut tape, Op::Unary(UnaryOp::Tanh), &[y]);
    let (sy, sz) = ([2.0, -1.0], [0.5, 4.0]);
    let g = tape
        .backward_sparse_seeds_with(
            vec![(y, t(&sy)), (z, t(&sz))],
            |id| id == x,
            AnomalyMode::Off,
        )
        .unwrap();
    let want: Vec<f64> = [0.25f64, -0.5]
        .iter()
        .zip(sy.iter().zip(sz))
        .map(|(&v, (&a, b))| 3.0 * (a + (1.0 - (3.0 * v).tanh().powi(2)) * b))
        .collect();
    assert_eq!(g.get(x).unwrap().data(), want.as_slice());
    g.release();
    // the same node seeded twice gets the sum of its seeds
    let twice = tape
        .backward_sparse_seeds_with(
            vec![(z, t(&sz)), (z, t(&sz))],
            |id| id == x,
            AnomalyMode::Off,
        )
        .unwrap();
    let once = tape
        .backward_sparse(z, t(&[1.0, 8.0]), |id| id == x)
        .unwrap();
    assert!(twice.get(x).unwrap().bit_eq(once.get(x).unwrap()));
    // one seed: exactly `backward_sparse`
    let one = tape
        .backward_sparse_seeds_with(vec![(z, t(&sz))], |id| id == x, AnomalyMode::Off)
        .unwrap();
    let plain = tape.backward_sparse(z, t(&sz), |id| id == x).unwrap();
    assert!(one.get(x).unwrap().bit_eq(plain.get(x).unwrap()));
    // no seed, or a seed of the wrong shape: errors
    let none = tape.backward_sparse_seeds_with(vec![], |_| true, AnomalyMode::Off);
    assert!(matches!(none, Err(RuntimeError::NoSeed)));
    let bad = tape.backward_sparse_seeds_with(
        vec![(y, t(&sy)), (z, t(&[1.0]))],
        |_| true,
        AnomalyMode::Off,
    );
    assert!(matches!(bad, Err(RuntimeError::SeedShape { node, .. }) if node == z));
}
