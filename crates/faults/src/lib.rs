//! `torchlean-faults`: fault-injecting engines, wrappers that break one rule on purpose, to show
//! that the equivalence checker (`torchlean-equiv`) catches it and to reproduce its
//! counterexamples (`torchlean conform --inject-fault`). `Faulty<V, F>` behaves exactly like `V`
//! except for fault `F`: it decorates `V` at the op level ([`Engine`]), so it names only the
//! ops it breaks and forwards no kernel by hand.
//!
//! A crate of its own (on `spec` and `runtime` only) so that the CLI gets the faulty engines
//! without the checker and its generators.

use std::borrow::Borrow;
use torchlean_runtime::{
    forward, vjp_for, GradValue, GradZero, Kernels, Result, RuntimeError, TrainValue,
};
use torchlean_spec::{
    BinaryOp, Cotangents, Engine, EngineValue, Op, Operands, Saved, Shape, Tensor, UnaryOp,
};

/// The faults' ids, the const parameter of [`Faulty`].
pub mod fault {
    /// The VJP of `mul_elem` returns the first operand's cotangent with its sign flipped.
    pub const FLIP_SIGN: u8 = 1;
    /// The VJP of `add` drops the second operand's contribution.
    pub const DROP_CONTRIBUTION: u8 = 2;
    /// Sums (`sum`, `reduce_sum`, `reduce_mean`) accumulate in reverse order.
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
    /// Whether this fault changes what `op` computes (its forward or its VJP): the ops
    /// [`Faulty`]'s `forward_op` and `vjp_op` intercept. A model none of whose ops it touches
    /// trains exactly as on the plain engine, so `train --inject-fault` refuses it.
    pub fn touches(self, op: &Op) -> bool {
        match self {
            Fault::FlipSign => matches!(op, Op::Binary(BinaryOp::Mul)),
            Fault::DropContribution => matches!(op, Op::Binary(BinaryOp::Add)),
            Fault::AccumulationOrder => {
                matches!(op, Op::Sum | Op::ReduceSum { .. } | Op::ReduceMean { .. })
            }
            Fault::BroadcastReduction => matches!(op, Op::BroadcastTo { .. }),
            Fault::PoolOffByOne => matches!(op, Op::Pool(_)),
        }
    }

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

impl<V: Kernels, const F: u8> EngineValue for Faulty<V, F> {
    type Error = RuntimeError;

    fn shape_of(&self) -> &Shape {
        self.0.shape_of()
    }
    fn values_f64(x: &Self) -> Result<Vec<f64>> {
        V::values_f64(&x.0).map_err(Into::into)
    }
}

/// `V`'s ops, except the one rule the fault breaks: a decorator at the op level, so every op
/// it does not touch is `V`'s own dispatch and kernels.
impl<V: Kernels, const F: u8> Engine for Faulty<V, F> {
    fn forward_op(op: &Op, args: &[&Self]) -> Result<Self> {
        let inner: Operands<&V> = args.iter().map(|a| &a.0).collect();
        // `V` validates the operands and computes the output first, whatever the fault
        let y = forward::<V>(op, &inner)?;
        Ok(Faulty(match (F, op) {
            (fault::ACCUMULATION_ORDER, Op::Sum) => {
                V::from_f64(&reversed_sum(&inner[0].to_f64()?, None)?)?
            }
            (fault::ACCUMULATION_ORDER, Op::ReduceSum { axis } | Op::ReduceMean { axis }) => {
                let x = inner[0].to_f64()?;
                let n = match op {
                    Op::ReduceMean { .. } => x.shape().dims()[*axis].max(1) as f64,
                    _ => 1.0,
                };
                let s = reversed_sum(&x, Some(*axis))?;
                V::from_f64(&s.map(|e| Ok(e / n))?)?
            }
            (fault::POOL_OFF_BY_ONE, Op::Pool(_)) => {
                let shifted = V::from_f64(&shift_left(&inner[0].to_f64()?)?)?;
                forward::<V>(op, &[&shifted])?
            }
            _ => y,
        }))
    }

    fn vjp_op(
        op: &Op,
        saved: &Saved<impl Borrow<Self>>,
        cot: &Self,
        needs: &dyn Fn(usize) -> bool,
    ) -> Result<Cotangents<Self>> {
        let inner = saved.view(|v| &v.borrow().0);
        let mut g = vjp_for::<V>(op, &inner, &cot.0, needs)?;
        match (F, op, g.as_mut_slice()) {
            (fault::FLIP_SIGN, Op::Binary(BinaryOp::Mul), [Some(da), _]) => {
                *da = forward::<V>(&Op::Unary(UnaryOp::Neg), &[&*da])?;
            }
            (fault::DROP_CONTRIBUTION, Op::Binary(BinaryOp::Add), [_, Some(db)]) => {
                *db = V::full(db.shape(), 0.0)?;
            }
            (fault::BROADCAST_REDUCTION, Op::BroadcastTo { from, .. }, [Some(dx)])
                if cot.shape().size() > from.size() =>
            {
                // averages over the broadcast axes instead of summing
                let c = from.size() as f64 / cot.shape().size() as f64;
                *dx = forward::<V>(&Op::Scale { c }, &[&*dx])?;
            }
            _ => {}
        }
        Ok(g.into_iter().map(|g| g.map(Faulty)).collect())
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

/// A fault-injecting engine trains like the engine it wraps (so `--verify-every` can be shown
/// catching it).
impl<V: TrainValue, const F: u8> TrainValue for Faulty<V, F> {
    type Elem = V::Elem;
    fn read(&self) -> Result<std::borrow::Cow<'_, [V::Elem]>> {
        self.0.read()
    }
    fn update_all<R, E: From<RuntimeError>>(
        values: &mut [&mut Self],
        f: impl FnOnce(&mut [&mut [V::Elem]]) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let mut inner: Vec<&mut V> = values.iter_mut().map(|v| &mut v.0).collect();
        V::update_all(&mut inner, f)
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

    /// Forward and every cotangent of `op` on `args` (cotangent: distinct values).
    fn outputs<V: Kernels>(op: &Op, args: &[Tensor<f64>]) -> Vec<Tensor<f64>> {
        let vals: Vec<V> = args.iter().map(|t| V::from_f64(t).unwrap()).collect();
        let refs: Vec<&V> = vals.iter().collect();
        let y = forward::<V>(op, &refs).unwrap();
        let n = y.to_f64().unwrap().shape().size();
        let shape = y.to_f64().unwrap().shape().clone();
        let cot = Tensor::new(shape, (0..n).map(|i| 0.5 + i as f64).collect()).unwrap();
        let cot = V::from_f64(&cot).unwrap();
        let g = vjp::<V>(op, &Saved::for_op(op, &refs, &y), &cot).unwrap();
        let mut out = vec![y.to_f64().unwrap()];
        out.extend(g.into_iter().flatten().map(|g| g.to_f64().unwrap()));
        out
    }

    /// Runs one fault's engine on `op`.
    struct Outputs<'a>(&'a Op, &'a [Tensor<f64>]);

    impl WithFault for Outputs<'_> {
        type Output = Vec<Tensor<f64>>;
        fn run<const F: u8>(self) -> Vec<Tensor<f64>> {
            outputs::<Faulty<Tensor<f64>, F>>(self.0, self.1)
        }
    }

    #[test]
    fn a_fault_changes_exactly_the_ops_it_says_it_touches() {
        // values that expose order, sign, a dropped term, an average and a shifted window
        let t = |dims: &[usize]| {
            let n: usize = dims.iter().product();
            let v = (0..n).map(|i| ((i * 7 + 3) % 11) as f64 * 0.37 - 1.1 + 1e-9 * i as f64);
            Tensor::new(dims.to_vec(), v.collect()).unwrap()
        };
        let pool = torchlean_spec::PoolSpec {
            kind: torchlean_spec::PoolKind::Max,
            kernel_h: 2,
            kernel_w: 2,
            stride: 1,
            padding: 0,
            padded: false,
        };
        let cases: Vec<(Op, Vec<Tensor<f64>>)> = vec![
            (Op::Binary(BinaryOp::Mul), vec![t(&[2, 3]), t(&[2, 3])]),
            (Op::Binary(BinaryOp::Add), vec![t(&[2, 3]), t(&[2, 3])]),
            (Op::Binary(BinaryOp::Sub), vec![t(&[2, 3]), t(&[2, 3])]),
            (Op::Sum, vec![t(&[40])]),
            (Op::ReduceSum { axis: 1 }, vec![t(&[2, 40])]),
            (Op::ReduceMean { axis: 1 }, vec![t(&[2, 40])]),
            (
                Op::BroadcastTo {
                    from: Shape::from([1, 3]),
                    to: Shape::from([4, 3]),
                },
                vec![t(&[1, 3])],
            ),
            (Op::Pool(pool), vec![t(&[1, 4, 5])]),
            (Op::Unary(UnaryOp::Relu), vec![t(&[2, 3])]),
            (Op::Unary(UnaryOp::Tanh), vec![t(&[2, 3])]),
        ];
        for &fault in Fault::ALL {
            for (op, args) in &cases {
                let plain = outputs::<Tensor<f64>>(op, args);
                let faulty = fault.with(Outputs(op, args));
                let differs = plain.iter().zip(&faulty).any(|(a, b)| a.data() != b.data());
                assert_eq!(
                    differs,
                    fault.touches(op),
                    "{fault} on {}: changes the op {differs}, says it touches it {}",
                    op.name(),
                    fault.touches(op)
                );
            }
        }
    }
}
