//! The kernel trait: what a value type must implement so that compiled graphs and eager
//! sessions can run every op forward and backward on it.
//!
//! An engine implements each op once: [`Kernels::forward`] and [`Kernels::vjp`] dispatch on
//! `torchlean_spec::Op`, whose reference semantics they are checked against. What a VJP may read
//! is decided by the op ([`Op::saves_input`], [`Op::saves_output`]) and enforced by
//! [`Saved::for_op`], so an op whose backward needs only its output (exp, tanh, sigmoid, relu,
//! sqrt, inv, softmax) never keeps its input alive.

use crate::error::Result;
use crate::tape::Tape;
use crate::value::{GradValue, GradZero};
use smallvec::SmallVec;
use torchlean_spec::{Op, Shape, Tensor};

/// A short list kept inline up to 2 items (the operands of elementwise ops, which dominate
/// per-op overhead): no heap allocation per op for them, and small saved state.
pub type Operands<T> = SmallVec<[T; 2]>;

/// What a recorded op keeps for its backward pass.
#[derive(Clone, Debug)]
pub struct Saved<V> {
    pub input_shapes: Operands<Shape>,
    /// Operand values, `Some` exactly where the op saves them.
    pub inputs: Operands<Option<V>>,
    /// The output value, if the op saves it.
    pub output: Option<V>,
}

impl<V: GradValue + Clone> Saved<V> {
    /// Keeps exactly what `op` declares it saves.
    #[inline]
    pub fn for_op(op: &Op, inputs: &[&V], output: &V) -> Self {
        let mut saved = Saved::empty();
        saved.fill(op, inputs, output);
        saved
    }

    /// Nothing saved yet.
    #[inline]
    pub(crate) fn empty() -> Self {
        Saved {
            input_shapes: Operands::new(),
            inputs: Operands::new(),
            output: None,
        }
    }

    /// [`Saved::for_op`] into an empty `Saved`, in place (the tape's op table fills its slot
    /// without moving a whole `Saved`).
    #[inline]
    pub(crate) fn fill(&mut self, op: &Op, inputs: &[&V], output: &V) {
        for (i, v) in inputs.iter().enumerate() {
            self.input_shapes.push(v.shape().clone());
            self.inputs.push(op.saves_input(i).then(|| (*v).clone()));
        }
        self.output = op.saves_output().then(|| output.clone());
    }
}

impl<V: GradValue> Saved<V> {
    /// Releases the saved values through [`GradValue::drop`], leaving none (shapes stay).
    pub fn release_values(&mut self) {
        for v in self.inputs.iter_mut().filter_map(Option::take) {
            v.drop();
        }
        if let Some(v) = self.output.take() {
            v.drop();
        }
    }
}

/// The operations an engine's value type provides.
pub trait Kernels: GradValue + GradZero + Clone + Send + Sync + 'static {
    /// A short engine/dtype label (`"reference-f64"`, `"cpu-f32"`, …).
    const ENGINE: &'static str;

    /// Whether arithmetic is exact (the rational reference engine): equalities that hold
    /// bit for bit on floats hold exactly, and those that hold only up to reassociation too.
    const EXACT: bool = false;

    /// `op` applied to `args` (weights included, in the op's operand order).
    fn forward(op: &Op, args: &[&Self]) -> Result<Self>;

    /// One cotangent per operand (`None` = structurally zero), reading only `saved`.
    fn vjp(op: &Op, saved: &Saved<Self>, cot: &Self) -> Result<Operands<Option<Self>>>;

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
    tape.record(op, parents, name, V::forward, V::vjp)
}
