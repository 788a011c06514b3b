//! `torchlean-faults`: fault-injecting engines, wrappers that break one rule on purpose, to show
//! that the equivalence checker (`torchlean-equiv`) catches it and to reproduce its
//! counterexamples (`torchlean conform --inject-fault`). `Faulty<V, F>` behaves exactly like `V`
//! except for fault `F`.
//!
//! A crate of its own (on `spec` and `runtime` only) so that the CLI gets the faulty engines
//! without the checker and its generators.

use torchlean_runtime::{GradValue, GradZero, Kernels, Operands, Result, Saved};
use torchlean_spec::{BinaryOp, Op, PoolSpec, Shape, Tensor, UnaryOp};

/// The faults.
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

    /// Every fault, with its name.
    pub const ALL: [(u8, &str); 5] = [
        (FLIP_SIGN, "flip-sign"),
        (DROP_CONTRIBUTION, "drop-contribution"),
        (ACCUMULATION_ORDER, "accumulation-order"),
        (BROADCAST_REDUCTION, "broadcast-reduction"),
        (POOL_OFF_BY_ONE, "pool-off-by-one"),
    ];
}

/// `V` with fault `F` injected.
#[derive(Clone, Debug)]
pub struct Faulty<V, const F: u8>(pub V);

const fn label(f: u8) -> &'static str {
    match f {
        fault::FLIP_SIGN => "faulty-flip-sign-f64",
        fault::DROP_CONTRIBUTION => "faulty-drop-contribution-f64",
        fault::ACCUMULATION_ORDER => "faulty-accumulation-order-f64",
        fault::BROADCAST_REDUCTION => "faulty-broadcast-reduction-f64",
        fault::POOL_OFF_BY_ONE => "faulty-pool-off-by-one-f64",
        _ => "faulty-f64",
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
}

impl<V: GradZero, const F: u8> GradZero for Faulty<V, F> {
    fn zeros_like(&self) -> Self {
        Faulty(self.0.zeros_like())
    }
}

fn unwrap_args<'a, V, const F: u8>(args: &[&'a Faulty<V, F>]) -> Vec<&'a V> {
    args.iter().map(|a| &a.0).collect()
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

impl<V: Kernels, const F: u8> Kernels for Faulty<V, F> {
    const ENGINE: &'static str = label(F);

    fn forward(op: &Op, args: &[&Self]) -> Result<Self> {
        let inner = unwrap_args(args);
        let faulty = match (F, op) {
            (fault::ACCUMULATION_ORDER, Op::Sum) => {
                Some(V::from_f64(&reversed_sum(&inner[0].to_f64()?, None)?)?)
            }
            (fault::ACCUMULATION_ORDER, Op::ReduceSum { axis }) => Some(V::from_f64(
                &reversed_sum(&inner[0].to_f64()?, Some(*axis))?,
            )?),
            (fault::ACCUMULATION_ORDER, Op::ReduceMean { axis }) => {
                let x = inner[0].to_f64()?;
                let n = x.shape().dims()[*axis].max(1) as f64;
                let s = reversed_sum(&x, Some(*axis))?;
                Some(V::from_f64(&s.map(|v| Ok(v / n))?)?)
            }
            (fault::POOL_OFF_BY_ONE, Op::Pool(PoolSpec { .. })) => {
                let shifted = V::from_f64(&shift_left(&inner[0].to_f64()?)?)?;
                Some(V::forward(op, &[&shifted])?)
            }
            _ => None,
        };
        match faulty {
            Some(v) => Ok(Faulty(v)),
            None => Ok(Faulty(V::forward(op, &inner)?)),
        }
    }

    fn vjp(op: &Op, saved: &Saved<Self>, cot: &Self) -> Result<Operands<Option<Self>>> {
        let inner = Saved {
            input_shapes: saved.input_shapes.clone(),
            inputs: saved
                .inputs
                .iter()
                .map(|v| v.as_ref().map(|f| f.0.clone()))
                .collect(),
            output: saved.output.as_ref().map(|f| f.0.clone()),
        };
        let mut grads = V::vjp(op, &inner, &cot.0)?;
        match (F, op) {
            (fault::FLIP_SIGN, Op::Binary(BinaryOp::Mul)) => {
                if let Some(g) = grads[0].take() {
                    grads[0] = Some(V::forward(&Op::Unary(UnaryOp::Neg), &[&g])?);
                }
            }
            (fault::DROP_CONTRIBUTION, Op::Binary(BinaryOp::Add)) => grads[1] = None,
            (fault::BROADCAST_REDUCTION, Op::BroadcastTo { from, to })
                if to.size() > from.size() =>
            {
                if let Some(g) = grads[0].take() {
                    let c = from.size() as f64 / to.size() as f64;
                    grads[0] = Some(V::forward(&Op::Scale { c }, &[&g])?);
                }
            }
            _ => {}
        }
        Ok(grads.into_iter().map(|g| g.map(Faulty)).collect())
    }

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

    #[test]
    fn every_fault_has_its_own_label() {
        // `torchlean conform --inject-fault NAME` and the checker's rerun line rely on the label
        // `faulty-NAME-f64`
        let labels = [
            <Faulty<Tensor<f64>, { fault::FLIP_SIGN }> as Kernels>::ENGINE,
            <Faulty<Tensor<f64>, { fault::DROP_CONTRIBUTION }> as Kernels>::ENGINE,
            <Faulty<Tensor<f64>, { fault::ACCUMULATION_ORDER }> as Kernels>::ENGINE,
            <Faulty<Tensor<f64>, { fault::BROADCAST_REDUCTION }> as Kernels>::ENGINE,
            <Faulty<Tensor<f64>, { fault::POOL_OFF_BY_ONE }> as Kernels>::ENGINE,
        ];
        for ((_, name), label) in fault::ALL.iter().zip(labels) {
            assert_eq!(label, format!("faulty-{name}-f64"));
        }
    }

    #[test]
    fn a_fault_changes_only_its_rule() {
        type F = Faulty<Tensor<f64>, { fault::FLIP_SIGN }>;
        let a = F::from_f64(&Tensor::new([2], vec![1.0, 2.0]).unwrap()).unwrap();
        let b = F::from_f64(&Tensor::new([2], vec![3.0, 4.0]).unwrap()).unwrap();
        let cot = F::from_f64(&Tensor::new([2], vec![1.0, 1.0]).unwrap()).unwrap();
        // forward is the inner engine's
        let mul = Op::Binary(BinaryOp::Mul);
        let y = F::forward(&mul, &[&a, &b]).unwrap();
        assert_eq!(y.to_f64().unwrap().data(), &[3.0, 8.0]);
        // the first operand's cotangent has its sign flipped, the second's is intact
        let saved = Saved::for_op(&mul, &[&a, &b], &y);
        let g = F::vjp(&mul, &saved, &cot).unwrap();
        let g0 = g[0].as_ref().unwrap().to_f64().unwrap();
        let g1 = g[1].as_ref().unwrap().to_f64().unwrap();
        assert_eq!(g0.data(), &[-3.0, -4.0]);
        assert_eq!(g1.data(), &[1.0, 2.0]);
        // other ops are untouched
        let add = Op::Binary(BinaryOp::Add);
        let y = F::forward(&add, &[&a, &b]).unwrap();
        let g = F::vjp(&add, &Saved::for_op(&add, &[&a, &b], &y), &cot).unwrap();
        assert!(g
            .iter()
            .all(|g| g.as_ref().unwrap().to_f64().unwrap().data() == [1.0, 1.0]));
    }
}
