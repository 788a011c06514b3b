//! The kernel trait: what a value type must implement so that compiled graphs and eager
//! sessions can run every op forward and backward on it.
//!
//! An engine implements each op family once (`torchlean_spec::Backend`, one trait per family),
//! which makes it an [`Engine`]; [`forward`] and [`vjp`] run an op through [`Engine`], whose
//! one dispatch for every backend (`torchlean_spec::Op::forward` / `Op::vjp`) validates
//! with the op's shape rule and reads only what the op's descriptor says it saves
//! ([`Saved::for_op`]), so an op whose backward needs only its output (exp, tanh, sigmoid, relu,
//! sqrt, inv, softmax) never keeps its input alive. Eager recording and compiled graphs take the
//! same route to an engine VJP: the tape's op table ([`record`], [`record_compiled`]), whose
//! VJPs borrow what they read from the tape's values ([`Saved::borrowed`]).

use crate::error::{Result, RuntimeError};
use crate::tape::Tape;
use crate::value::{GradValue, GradZero};
use std::borrow::Borrow;
use torchlean_spec::{Engine, Op, Shape, Tensor};

pub use torchlean_spec::{Cotangents, Operands, Saved};

/// Releases the values a [`Saved`] holds through [`GradValue::drop`], leaving none (shapes stay).
pub fn release_saved<V: GradValue>(saved: &mut Saved<V>) {
    for v in saved.inputs.iter_mut().filter_map(Option::take) {
        v.drop();
    }
    if let Some(v) = saved.output.take() {
        v.drop();
    }
}

/// `op` applied to `args` on engine `V` (weights included, in the op's operand order): the one
/// dispatch ([`Engine::forward_op`]: [`Op::forward`] on a backend), with the engine's error
/// converted.
#[inline]
pub fn forward<V: Kernels>(op: &Op, args: &[&V]) -> Result<V> {
    V::forward_op(op, args).map_err(Into::into)
}

/// One cotangent per operand (`None` = structurally zero), reading only `saved`: the one
/// dispatch ([`Engine::vjp_op`]: [`Op::vjp`] on a backend), with the engine's error converted.
#[inline]
pub fn vjp<V: Kernels>(op: &Op, saved: &Saved<impl Borrow<V>>, cot: &V) -> Result<Cotangents<V>> {
    V::vjp_op(op, saved, cot, &|_| true).map_err(Into::into)
}

/// [`vjp`] where only the operands `i` with `needs(i)` need a cotangent (the others may be
/// `None`): [`Engine::vjp_op`], with the engine's error converted.
#[inline]
pub fn vjp_for<V: Kernels>(
    op: &Op,
    saved: &Saved<impl Borrow<V>>,
    cot: &V,
    needs: &dyn Fn(usize) -> bool,
) -> Result<Cotangents<V>> {
    V::vjp_op(op, saved, cot, needs).map_err(Into::into)
}

/// The VJP a tape runs for a recorded op ([`record`], [`record_compiled`]): [`vjp_for`] on a
/// view of the values the tape keeps (`operands`, the parents' values, and `output`, the
/// node's), borrowing what the op saves instead of copying it at record time.
pub(crate) fn vjp_on_values<V: Kernels>(
    op: &Op,
    operands: &[&V],
    output: &V,
    cot: &V,
    needs: &dyn Fn(usize) -> bool,
) -> Result<Cotangents<V>> {
    vjp_for(op, &Saved::borrowed(op, operands, output), cot, needs)
}

/// The local-sum rule of compiled graphs — the one place it is written: a node whose operands
/// repeat a position (`add(a, a)`, `concat(a, b, a)`) forms that position's contribution
/// locally first, folding the per-operand cotangents in operand order (the first present one
/// as is, then `acc + c`) into the slot of the position's first occurrence; the other slots
/// become `None`. Structural zeros (`None`) are skipped.
pub fn fold_repeated_operands<V: GradValue>(
    operands: &[usize],
    grads: &mut [Option<V>],
) -> Result<()> {
    let n = operands.len().min(grads.len());
    for (i, first) in first_occurrences(&operands[..n]).into_iter().enumerate() {
        if first == i {
            continue;
        }
        if let Some(g) = grads[i].take() {
            grads[first] = Some(match grads[first].take() {
                None => g,
                Some(acc) => acc.add(g)?,
            });
        }
    }
    Ok(())
}

/// Operand lists up to this length are scanned pairwise (no allocation); longer ones (a
/// `concat` of many parents) go through a map, so the rule stays linear in the operand count.
const SCAN_LIMIT: usize = 8;

/// For each operand, the index of the first operand with the same id.
fn first_occurrences(operands: &[usize]) -> Operands<usize> {
    if operands.len() <= SCAN_LIMIT {
        return (0..operands.len())
            .map(|i| {
                operands[..i]
                    .iter()
                    .position(|&a| a == operands[i])
                    .unwrap_or(i)
            })
            .collect();
    }
    let mut seen = std::collections::HashMap::with_capacity(operands.len());
    operands
        .iter()
        .enumerate()
        .map(|(i, &a)| *seen.entry(a).or_insert(i))
        .collect()
}

/// Whether an operand list names a position twice (linear in its length).
pub(crate) fn has_repeats(operands: &[usize]) -> bool {
    first_occurrences(operands)
        .iter()
        .enumerate()
        .any(|(i, &first)| first != i)
}

/// What a value type must provide to run graphs: ops forward and backward ([`Engine`]: every
/// backend through the one dispatch, or a decorator of one), the gradient operations of the
/// sweeps, and conversions. Engine errors convert into [`RuntimeError`], keeping their
/// structure as a source.
pub trait Kernels:
    Engine<Error: Into<RuntimeError>> + GradValue + GradZero + Clone + Send + Sync + 'static
{
    /// A short engine/dtype label (`"reference-f64"`, `"cpu-f32"`, …).
    const ENGINE: &'static str;

    /// Whether arithmetic is exact (the rational reference engine): equalities that hold
    /// bit for bit on floats hold exactly, and those that hold only up to reassociation too.
    const EXACT: bool = false;

    /// A value from `f64` data (rounded to the engine's precision).
    fn from_f64(t: &Tensor<f64>) -> Result<Self>;

    /// The value as `f64` data.
    fn to_f64(&self) -> Result<Tensor<f64>>;

    /// A tensor filled with `value`.
    fn full(shape: &Shape, value: f64) -> Result<Self>;

    /// Whether [`Kernels::bit_eq`] decides bitwise equality (the saved-graph array pass relies
    /// on it to stop replaying deferred zero additions at a fixed point).
    const DECIDABLE_EQ: bool = true;

    /// Bitwise equality of shape and data (`-0.0 ≠ 0.0`, a NaN equals itself).
    fn bit_eq(&self, other: &Self) -> bool;
}

/// Records `op` on an eager tape: runs the forward kernel on the parents' values and appends a
/// node whose VJP returns one `(parent, contribution)` pair per differentiable operand, in
/// operand order (a repeated parent receives two separate contributions — the eager tape's
/// "scatter twice", as TorchLean's `Tape.add a a`).
///
/// A node none of whose parents requires grad keeps nothing for a backward pass: its VJP never
/// runs.
pub fn record<V: Kernels>(
    tape: &mut Tape<V>,
    op: Op,
    parents: &[usize],
    name: Option<String>,
) -> Result<usize> {
    tape.record(op, parents, name, RecordMode::Eager, forward::<V>)
}

/// Records `op` as a node of a compiled graph (TorchLean's `compileAuxData`, compact form): the
/// node requires grad, always keeps what its op saves, and its VJP applies the local-sum rule
/// ([`fold_repeated_operands`]), so a repeated operand contributes once, locally summed.
pub fn record_compiled<V: Kernels>(
    tape: &mut Tape<V>,
    op: Op,
    operands: &[usize],
    name: Option<String>,
) -> Result<usize> {
    tape.record(op, operands, name, RecordMode::Compiled, forward::<V>)
}

/// How [`Tape::record`](crate::Tape) treats a node: eagerly (gradient only where a parent needs
/// one, repeated parents scattered twice) or as a compiled node (always differentiable, the
/// local-sum rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordMode {
    Eager,
    Compiled,
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlean_spec::Tensor;

    fn t(v: f64) -> Tensor<f64> {
        Tensor::new([1], vec![v]).expect("one value")
    }

    #[test]
    fn the_local_sum_folds_in_operand_order_first_as_is() {
        // written out: slot 0 = (1e16 + 1) + (-1e16) = 0 in f64 (1e16 + 1 rounds to 1e16);
        // any other order gives 1
        let operands = [5, 7, 5, 5];
        let mut grads = vec![Some(t(1e16)), Some(t(2.0)), Some(t(1.0)), Some(t(-1e16))];
        fold_repeated_operands(&operands, &mut grads).expect("same shapes");
        assert_eq!(
            grads[0].as_ref().map(|g| g.data()[0].to_bits()),
            Some(0f64.to_bits())
        );
        assert_eq!(grads[1].as_ref().map(|g| g.data()[0]), Some(2.0));
        assert!(grads[2].is_none() && grads[3].is_none());
        // the same through the map used for long operand lists
        let operands: Vec<usize> = (0..20).chain([3, 3]).collect();
        let mut grads: Vec<Option<Tensor<f64>>> = (0..22).map(|i| Some(t(i as f64))).collect();
        grads[3] = Some(t(1e16));
        grads[20] = Some(t(1.0));
        grads[21] = Some(t(-1e16));
        fold_repeated_operands(&operands, &mut grads).expect("same shapes");
        assert_eq!(
            grads[3].as_ref().map(|g| g.data()[0].to_bits()),
            Some(0f64.to_bits())
        );
        assert!(grads[20].is_none() && grads[21].is_none());
        assert!(has_repeats(&operands) && !has_repeats(&operands[..20]));
        // a structural zero first: the first present cotangent is stored as is
        let mut grads = vec![None, Some(t(2.0)), Some(t(-0.0))];
        fold_repeated_operands(&[3, 4, 3], &mut grads).expect("same shapes");
        assert_eq!(
            grads[0].as_ref().map(|g| g.data()[0].to_bits()),
            Some((-0.0f64).to_bits())
        );
        assert!(grads[2].is_none());
    }
}
