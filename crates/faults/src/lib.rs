//! `torchlean-faults`: fault-injecting engines, wrappers that break one rule on purpose, to show
//! that the equivalence checker (`torchlean-equiv`) catches it and to reproduce its
//! counterexamples (`torchlean conform --inject-fault`). `Faulty<V, F>` behaves exactly like `V`
//! except for fault `F`.
//!
//! A crate of its own (on `spec` and `runtime` only) so that the CLI gets the faulty engines
//! without the checker and its generators.

use torchlean_runtime::{GradValue, GradZero, Kernels, Result, RuntimeError};
use torchlean_spec::{Backend, BinaryOp, Conv2dSpec, PoolSpec, Shape, Tensor, UnaryOp};

/// The faults' ids, the const parameter of [`Faulty`].
pub mod fault {
    /// The VJP of `mul_elem` returns the first operand's cotangent with its sign flipped.
    pub const FLIP_SIGN: u8 = 1;
    /// The VJP of `add` drops the second operand's contribution.
    pub const DROP_CONTRIBUTION: u8 = 2;
    /// Sums (`sum`, `reduce_sum`, `reduce_mean`, `mse_loss`) accumulate in reverse order.
    pub const ACCUMULATION_ORDER: u8 = 3;
    /// The VJP of `broadcast_to` averages over the broadcast axes instead of summing.
    pub const BROADCAST_REDUCTION: u8 = 4;
    /// Pooling windows read one column to the right.
    pub const POOL_OFF_BY_ONE: u8 = 5;
}

/// One row per fault: the variant, its id in [`fault`] and its name.
macro_rules! faults {
    ($($variant:ident = $id:ident, $name:literal;)*) => {
        /// A fault by name: `--inject-fault NAME` on the command line, `faulty-NAME-f64` as an
        /// engine's label. Parsed once ([`FromStr`](std::str::FromStr)); [`Fault::with`] is the
        /// one place where a fault becomes the type [`Faulty`]`<Tensor<f64>, ID>`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Fault {
            $($variant = fault::$id,)*
        }

        impl Fault {
            /// Every fault, in id order.
            pub const ALL: &'static [Fault] = &[$(Fault::$variant,)*];

            /// The name on the command line.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Fault::$variant => $name,)*
                }
            }

            /// The label of the reference f64 engine with this fault ([`Kernels::ENGINE`]).
            pub const fn label(self) -> &'static str {
                match self {
                    $(Fault::$variant => concat!("faulty-", $name, "-f64"),)*
                }
            }

            /// Runs `job` on the reference f64 engine with this fault injected.
            pub fn with<J: WithFault>(self, job: J) -> J::Output {
                match self {
                    $(Fault::$variant => job.run::<{ fault::$id }>(),)*
                }
            }

            const fn of_id(id: u8) -> Option<Fault> {
                match id {
                    $(fault::$id => Some(Fault::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

faults! {
    FlipSign = FLIP_SIGN, "flip-sign";
    DropContribution = DROP_CONTRIBUTION, "drop-contribution";
    AccumulationOrder = ACCUMULATION_ORDER, "accumulation-order";
    BroadcastReduction = BROADCAST_REDUCTION, "broadcast-reduction";
    PoolOffByOne = POOL_OFF_BY_ONE, "pool-off-by-one";
}

/// Work generic over the faulty engine: [`Fault::with`] calls `run` with the fault's id, and
/// the work uses `Faulty<Tensor<f64>, F>` (or wraps another engine).
pub trait WithFault {
    type Output;
    fn run<const F: u8>(self) -> Self::Output;
}

impl Fault {
    /// The fault whose engine label is `label` (`faulty-NAME-f64`).
    pub fn of_label(label: &str) -> Option<Fault> {
        Fault::ALL.iter().copied().find(|f| f.label() == label)
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no fault's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault `{name}` (one of {})", Fault::ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(", "))]
pub struct UnknownFault {
    pub name: String,
}

impl std::str::FromStr for Fault {
    type Err = UnknownFault;

    fn from_str(name: &str) -> std::result::Result<Fault, UnknownFault> {
        Fault::ALL
            .iter()
            .copied()
            .find(|f| f.name() == name)
            .ok_or_else(|| UnknownFault {
                name: name.to_string(),
            })
    }
}

/// `V` with fault `F` injected.
#[derive(Clone, Debug)]
pub struct Faulty<V, const F: u8>(pub V);

const fn label(f: u8) -> &'static str {
    match Fault::of_id(f) {
        Some(fault) => fault.label(),
        None => "faulty-f64",
    }
}

impl<V: GradValue, const F: u8> GradValue for Faulty<V, F> {
    fn shape(&self) -> &Shape {
        self.0.shape()
    }
    fn retag(self, shape: Shape) -> Result<Self> {
        Ok(Faulty(self.0.retag(shape)?))
    }
    fn check(&self) -> Result<()> {
        self.0.check()
    }
    fn add(self, other: Self) -> Result<Self> {
        Ok(Faulty(self.0.add(other.0)?))
    }
    fn drop(self) {
        self.0.drop()
    }
    fn into_owned(self) -> Self {
        Faulty(self.0.into_owned())
    }
    fn non_finite(&self) -> Option<torchlean_runtime::NonFinite> {
        self.0.non_finite()
    }
}

impl<V: GradZero, const F: u8> GradZero for Faulty<V, F> {
    fn zeros_like(&self) -> Self {
        Faulty(self.0.zeros_like())
    }
}

/// Sum in reverse order along the lines of `axis` (all axes for `None`).
fn reversed_sum(x: &Tensor<f64>, axis: Option<usize>) -> Result<Tensor<f64>> {
    match axis {
        None => Ok(Tensor::scalar(
            x.data().iter().rev().fold(0.0, |a, v| a + v),
        )),
        Some(axis) => {
            let (outer, n, inner) = x.shape().split_at_axis(axis);
            let mut out = Vec::with_capacity(outer * inner);
            for o in 0..outer {
                for i in 0..inner {
                    out.push(
                        (0..n)
                            .rev()
                            .fold(0.0, |a, k| a + x.data()[(o * n + k) * inner + i]),
                    );
                }
            }
            Ok(Tensor::new(x.shape().remove_axis(axis), out)?)
        }
    }
}

/// The input with every row shifted one column left (last column repeated).
fn shift_left(x: &Tensor<f64>) -> Result<Tensor<f64>> {
    let w = x.shape().dims().last().copied().unwrap_or(1).max(1);
    let data: Vec<f64> = x
        .data()
        .chunks(w)
        .flat_map(|row| (0..row.len()).map(move |j| row[(j + 1).min(row.len() - 1)]))
        .collect();
    Ok(Tensor::new(x.shape().clone(), data)?)
}

/// `V`'s kernel result, wrapped.
fn wrap<V: Kernels, const F: u8>(r: std::result::Result<V, V::Error>) -> Result<Faulty<V, F>> {
    r.map(Faulty).map_err(Into::into)
}

fn wrap2<V: Kernels, const F: u8>(
    r: std::result::Result<(V, V), V::Error>,
) -> Result<(Faulty<V, F>, Faulty<V, F>)> {
    r.map(|(a, b)| (Faulty(a), Faulty(b))).map_err(Into::into)
}

fn wrap3<V: Kernels, const F: u8>(
    r: std::result::Result<(V, V, V), V::Error>,
) -> Result<(Faulty<V, F>, Faulty<V, F>, Faulty<V, F>)> {
    r.map(|(a, b, c)| (Faulty(a), Faulty(b), Faulty(c)))
        .map_err(Into::into)
}

fn inner<V, const F: u8>(v: Option<&Faulty<V, F>>) -> Option<&V> {
    v.map(|f| &f.0)
}

/// `V`'s kernels, except the one the fault breaks.
impl<V: Kernels, const F: u8> Backend for Faulty<V, F> {
    type Error = RuntimeError;

    fn shape_of(&self) -> &Shape {
        self.0.shape_of()
    }
    fn values_f64(x: &Self) -> Result<Vec<f64>> {
        V::values_f64(&x.0).map_err(Into::into)
    }
    fn unary(op: UnaryOp, x: &Self) -> Result<Self> {
        wrap(V::unary(op, &x.0))
    }
    fn unary_vjp(op: UnaryOp, x: Option<&Self>, y: Option<&Self>, dy: &Self) -> Result<Self> {
        wrap(V::unary_vjp(op, inner(x), inner(y), &dy.0))
    }
    fn binary(op: BinaryOp, a: &Self, b: &Self) -> Result<Self> {
        wrap(V::binary(op, &a.0, &b.0))
    }
    fn binary_vjp(
        op: BinaryOp,
        a: Option<&Self>,
        b: Option<&Self>,
        dy: &Self,
    ) -> Result<(Self, Self)> {
        let (da, db) = wrap2(V::binary_vjp(op, inner(a), inner(b), &dy.0))?;
        Ok(match (F, op) {
            (fault::FLIP_SIGN, BinaryOp::Mul) => (Self::unary(UnaryOp::Neg, &da)?, db),
            (fault::DROP_CONTRIBUTION, BinaryOp::Add) => {
                let zero = Faulty(V::full(db.shape(), 0.0)?);
                (da, zero)
            }
            _ => (da, db),
        })
    }
    fn scale(x: &Self, c: f64) -> Result<Self> {
        wrap(V::scale(&x.0, c))
    }
    fn add_scalar(x: &Self, c: f64) -> Result<Self> {
        wrap(V::add_scalar(&x.0, c))
    }
    fn clamp(x: &Self, min: Option<f64>, max: Option<f64>) -> Result<Self> {
        wrap(V::clamp(&x.0, min, max))
    }
    fn clamp_vjp(x: &Self, dy: &Self, min: Option<f64>, max: Option<f64>) -> Result<Self> {
        wrap(V::clamp_vjp(&x.0, &dy.0, min, max))
    }
    fn relabel(x: &Self, shape: &Shape) -> Result<Self> {
        wrap(V::relabel(&x.0, shape))
    }
    fn softmax(x: &Self, axis: usize, log: bool) -> Result<Self> {
        wrap(V::softmax(&x.0, axis, log))
    }
    fn softmax_vjp(y: &Self, dy: &Self, axis: usize, log: bool) -> Result<Self> {
        wrap(V::softmax_vjp(&y.0, &dy.0, axis, log))
    }
    fn layer_norm(x: &Self, axis: usize, eps: f64) -> Result<Self> {
        wrap(V::layer_norm(&x.0, axis, eps))
    }
    fn layer_norm_vjp(x: &Self, dy: &Self, axis: usize, eps: f64) -> Result<Self> {
        wrap(V::layer_norm_vjp(&x.0, &dy.0, axis, eps))
    }
    fn batch_norm(args: [&Self; 5], eps: f64) -> Result<Self> {
        wrap(V::batch_norm(args.map(|a| &a.0), eps))
    }
    fn batch_norm_vjp(
        x: &Self,
        gamma: &Self,
        mean: &Self,
        var: &Self,
        dy: &Self,
        eps: f64,
    ) -> Result<[Self; 5]> {
        let g =
            V::batch_norm_vjp(&x.0, &gamma.0, &mean.0, &var.0, &dy.0, eps).map_err(Into::into)?;
        Ok(g.map(Faulty))
    }
    fn batch_norm_train(x: &Self, gamma: &Self, beta: &Self, eps: f64) -> Result<Self> {
        wrap(V::batch_norm_train(&x.0, &gamma.0, &beta.0, eps))
    }
    fn batch_norm_train_vjp(x: &Self, gamma: &Self, dy: &Self, eps: f64) -> Result<[Self; 3]> {
        let g = V::batch_norm_train_vjp(&x.0, &gamma.0, &dy.0, eps).map_err(Into::into)?;
        Ok(g.map(Faulty))
    }
    fn broadcast(x: &Self, out: &Shape) -> Result<Self> {
        wrap(V::broadcast(&x.0, out))
    }
    fn broadcast_vjp(dy: &Self, from: &Shape) -> Result<Self> {
        let g = wrap(V::broadcast_vjp(&dy.0, from))?;
        if F == fault::BROADCAST_REDUCTION && dy.shape().size() > from.size() {
            // averages over the broadcast axes instead of summing
            return Self::scale(&g, from.size() as f64 / dy.shape().size() as f64);
        }
        Ok(g)
    }
    fn permute(x: &Self, perm: &[usize], out: &Shape) -> Result<Self> {
        wrap(V::permute(&x.0, perm, out))
    }
    fn slice(x: &Self, axis: usize, start: usize, out: &Shape) -> Result<Self> {
        wrap(V::slice(&x.0, axis, start, out))
    }
    fn slice_vjp(dy: &Self, in_shape: &Shape, axis: usize, start: usize) -> Result<Self> {
        wrap(V::slice_vjp(&dy.0, in_shape, axis, start))
    }
    fn concat(args: &[&Self], axis: usize, out: &Shape) -> Result<Self> {
        let args: Vec<&V> = args.iter().map(|a| &a.0).collect();
        wrap(V::concat(&args, axis, out))
    }
    fn concat_vjp(dy: &Self, shapes: &[Shape], axis: usize) -> Result<Vec<Self>> {
        let parts = V::concat_vjp(&dy.0, shapes, axis).map_err(Into::into)?;
        Ok(parts.into_iter().map(Faulty).collect())
    }
    fn reduce_axis(x: &Self, axis: usize, mean: bool, out: &Shape) -> Result<Self> {
        if F == fault::ACCUMULATION_ORDER {
            let v = x.0.to_f64()?;
            let n = if mean {
                v.shape().dims()[axis].max(1) as f64
            } else {
                1.0
            };
            let s = reversed_sum(&v, Some(axis))?;
            return Ok(Faulty(V::from_f64(&s.map(|e| Ok(e / n))?)?));
        }
        wrap(V::reduce_axis(&x.0, axis, mean, out))
    }
    fn spread(dy: &Self, in_shape: &Shape, axis: usize, mean: bool) -> Result<Self> {
        wrap(V::spread(&dy.0, in_shape, axis, mean))
    }
    fn sum_all(x: &Self) -> Result<Self> {
        if F == fault::ACCUMULATION_ORDER {
            return Ok(Faulty(V::from_f64(&reversed_sum(&x.0.to_f64()?, None)?)?));
        }
        wrap(V::sum_all(&x.0))
    }
    fn sum_all_vjp(dy: &Self, in_shape: &Shape) -> Result<Self> {
        wrap(V::sum_all_vjp(&dy.0, in_shape))
    }
    fn mse_loss(y: &Self, t: &Self) -> Result<Self> {
        wrap(V::mse_loss(&y.0, &t.0))
    }
    fn mse_loss_vjp(y: &Self, t: &Self, dy: &Self) -> Result<(Self, Self)> {
        wrap2(V::mse_loss_vjp(&y.0, &t.0, &dy.0))
    }
    fn cross_entropy(logits: &Self, target: &[usize], mean: bool) -> Result<Self> {
        wrap(V::cross_entropy(&logits.0, target, mean))
    }
    fn cross_entropy_vjp(logits: &Self, target: &[usize], dy: &Self, mean: bool) -> Result<Self> {
        wrap(V::cross_entropy_vjp(&logits.0, target, &dy.0, mean))
    }
    fn matmul(a: &Self, b: &Self, out: &Shape) -> Result<Self> {
        wrap(V::matmul(&a.0, &b.0, out))
    }
    fn matmul_vjp(a: &Self, b: &Self, dy: &Self) -> Result<(Self, Self)> {
        wrap2(V::matmul_vjp(&a.0, &b.0, &dy.0))
    }
    fn linear(x: &Self, w: &Self, b: &Self, out: &Shape) -> Result<Self> {
        wrap(V::linear(&x.0, &w.0, &b.0, out))
    }
    fn linear_vjp(x: &Self, w: &Self, dy: &Self) -> Result<(Self, Self, Self)> {
        wrap3(V::linear_vjp(&x.0, &w.0, &dy.0))
    }
    fn conv2d(spec: &Conv2dSpec, x: &Self, w: &Self, b: &Self, out: &Shape) -> Result<Self> {
        wrap(V::conv2d(spec, &x.0, &w.0, &b.0, out))
    }
    fn conv2d_vjp(spec: &Conv2dSpec, x: &Self, w: &Self, dy: &Self) -> Result<(Self, Self, Self)> {
        wrap3(V::conv2d_vjp(spec, &x.0, &w.0, &dy.0))
    }
    fn pool(spec: &PoolSpec, x: &Self, out: &Shape) -> Result<Self> {
        if F == fault::POOL_OFF_BY_ONE {
            let shifted = V::from_f64(&shift_left(&x.0.to_f64()?)?)?;
            return wrap(V::pool(spec, &shifted, out));
        }
        wrap(V::pool(spec, &x.0, out))
    }
    fn max_pool_vjp(spec: &PoolSpec, x: &Self, dy: &Self) -> Result<Self> {
        wrap(V::max_pool_vjp(spec, &x.0, &dy.0))
    }
    fn avg_pool_vjp(spec: &PoolSpec, in_shape: &Shape, dy: &Self) -> Result<Self> {
        wrap(V::avg_pool_vjp(spec, in_shape, &dy.0))
    }
    fn rand_uniform(seed: u64, key: u64, out: &Shape) -> Result<Self> {
        wrap(V::rand_uniform(seed, key, out))
    }
    fn bernoulli_mask(seed: u64, key: u64, keep_prob: &Self, out: &Shape) -> Result<Self> {
        wrap(V::bernoulli_mask(seed, key, &keep_prob.0, out))
    }
}

impl<V: Kernels, const F: u8> Kernels for Faulty<V, F> {
    const ENGINE: &'static str = label(F);

    fn from_f64(t: &Tensor<f64>) -> Result<Self> {
        Ok(Faulty(V::from_f64(t)?))
    }

    fn to_f64(&self) -> Result<Tensor<f64>> {
        self.0.to_f64()
    }

    fn full(shape: &Shape, value: f64) -> Result<Self> {
        Ok(Faulty(V::full(shape, value)?))
    }

    fn bit_eq(&self, other: &Self) -> bool {
        self.0.bit_eq(&other.0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use torchlean_runtime::{forward, vjp, Saved};
    use torchlean_spec::Op;

    /// The engine label of the type [`Fault::with`] picks.
    struct EngineLabel;

    impl WithFault for EngineLabel {
        type Output = &'static str;
        fn run<const F: u8>(self) -> &'static str {
            <Faulty<Tensor<f64>, F> as Kernels>::ENGINE
        }
    }

    #[test]
    fn every_fault_parses_from_its_name_and_runs_as_its_own_engine() {
        // `torchlean conform --inject-fault NAME` and the checker's replay rely on the label
        // `faulty-NAME-f64` of the engine the name selects
        let mut labels = std::collections::HashSet::new();
        for &f in Fault::ALL {
            assert_eq!(f.name().parse::<Fault>(), Ok(f));
            assert_eq!(f.label(), format!("faulty-{}-f64", f.name()));
            assert_eq!(f.with(EngineLabel), f.label());
            assert_eq!(Fault::of_label(f.label()), Some(f));
            assert!(labels.insert(f.label()), "{f} shares its label");
        }
        assert_eq!(Fault::ALL.len(), 5);
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_known_ones() {
        let e = "nope".parse::<Fault>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown fault `nope` (one of flip-sign, drop-contribution, accumulation-order, \
             broadcast-reduction, pool-off-by-one)"
        );
        assert_eq!(Fault::of_label("faulty-nope-f64"), None);
        assert_eq!(Fault::of_label("flip-sign"), None);
    }

    #[test]
    fn a_fault_changes_only_its_rule() {
        type F = Faulty<Tensor<f64>, { fault::FLIP_SIGN }>;
        let a = F::from_f64(&Tensor::new([2], vec![1.0, 2.0]).unwrap()).unwrap();
        let b = F::from_f64(&Tensor::new([2], vec![3.0, 4.0]).unwrap()).unwrap();
        let cot = F::from_f64(&Tensor::new([2], vec![1.0, 1.0]).unwrap()).unwrap();
        // forward is the inner engine's
        let mul = Op::Binary(BinaryOp::Mul);
        let y = forward::<F>(&mul, &[&a, &b]).unwrap();
        assert_eq!(y.to_f64().unwrap().data(), &[3.0, 8.0]);
        // the first operand's cotangent has its sign flipped, the second's is intact
        let saved = Saved::for_op(&mul, &[&a, &b], &y);
        let g = vjp::<F>(&mul, &saved, &cot).unwrap();
        let g0 = g[0].as_ref().unwrap().to_f64().unwrap();
        let g1 = g[1].as_ref().unwrap().to_f64().unwrap();
        assert_eq!(g0.data(), &[-3.0, -4.0]);
        assert_eq!(g1.data(), &[1.0, 2.0]);
        // other ops are untouched
        let add = Op::Binary(BinaryOp::Add);
        let y = forward::<F>(&add, &[&a, &b]).unwrap();
        let g = vjp::<F>(&add, &Saved::for_op(&add, &[&a, &b], &y), &cot).unwrap();
        assert!(g
            .iter()
            .all(|g| g.as_ref().unwrap().to_f64().unwrap().data() == [1.0, 1.0]));
    }
}
