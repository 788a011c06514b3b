//! `Kernels` for `CpuTensor`: validation and dispatch of every `torchlean_spec::Op`, forward and
//! VJP, to the per-family kernel modules.
//!
//! Forward: the op's own shape rule (`Op::infer_shape`) validates the operands first, so every
//! kernel works on shapes it can trust. VJP: the same rule on the saved operand shapes, then the
//! cotangent's shape and the shape of every saved value it reads are checked; a kernel reads
//! only what `Op::saves_input` / `Op::saves_output` declare (anything else is an error, never a
//! guess).

mod conv;
mod elementwise;
mod layout;
mod linalg;
mod norm;
mod pool;
mod random;
mod reduce;

use crate::error::CpuError;
use crate::scalar::CpuScalar;
use crate::tensor::CpuTensor;
use smallvec::smallvec;
use torchlean_runtime::{Kernels, Operands, Result, Saved};
use torchlean_spec::{Op, PoolKind, Shape, Tensor};

/// One cotangent per operand.
type Grads<T> = Operands<Option<CpuTensor<T>>>;

/// The output shape of `op` on `args`, by the op's own shape rule (no allocation for up to
/// three operands).
fn infer<T: CpuScalar>(op: &Op, args: &[&CpuTensor<T>]) -> Result<Shape> {
    let out = match args {
        [] => op.infer_shape(&[])?,
        [a] => op.infer_shape(std::slice::from_ref(a.shape()))?,
        [a, b] => op.infer_shape(&[a.shape().clone(), b.shape().clone()])?,
        [a, b, c] => op.infer_shape(&[a.shape().clone(), b.shape().clone(), c.shape().clone()])?,
        _ => {
            let shapes: Vec<Shape> = args.iter().map(|a| a.shape().clone()).collect();
            op.infer_shape(&shapes)?
        }
    };
    Ok(out)
}

/// Whether `op`'s shape rule is `output = operand` for any single operand (the elementwise
/// unary family). `Op::infer_shape` agrees (unit test `identity_rule_matches_the_shape_rule`);
/// applying the rule directly keeps a full rule evaluation off the per-op path of tiny tensors.
fn identity_rule(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_) | Op::Scale { .. } | Op::AddScalar { .. } | Op::Detach
    )
}

/// What a VJP may read, checked against the shapes the op declares.
struct SavedView<'a, T: CpuScalar> {
    op: &'a Op,
    saved: &'a Saved<CpuTensor<T>>,
}

impl<'a, T: CpuScalar> SavedView<'a, T> {
    /// Shape of operand `i` (present: the arity was checked by the shape rule).
    fn shape(&self, i: usize) -> Result<&'a Shape> {
        self.saved.input_shapes.get(i).ok_or_else(|| {
            CpuError::MissingSaved {
                op: self.op.name(),
                what: format!("shape of operand {i}"),
            }
            .into()
        })
    }

    /// Operand `i`'s value, which must have been saved with its declared shape.
    fn input(&self, i: usize) -> Result<&'a CpuTensor<T>> {
        let v = self
            .saved
            .inputs
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| CpuError::MissingSaved {
                op: self.op.name(),
                what: format!("operand {i}"),
            })?;
        let want = self.shape(i)?;
        if v.shape() != want {
            return Err(CpuError::Shape {
                op: self.op.name(),
                shapes: vec![want.clone(), v.shape().clone()],
                reason: format!("saved operand {i} does not have its declared shape"),
            }
            .into());
        }
        Ok(v)
    }

    /// The output value, which must have been saved with the output's shape.
    fn output(&self, want: &Shape) -> Result<&'a CpuTensor<T>> {
        let v = self
            .saved
            .output
            .as_ref()
            .ok_or_else(|| CpuError::MissingSaved {
                op: self.op.name(),
                what: "output".into(),
            })?;
        if v.shape() != want {
            return Err(CpuError::Shape {
                op: self.op.name(),
                shapes: vec![want.clone(), v.shape().clone()],
                reason: "the saved output does not have the output's shape".into(),
            }
            .into());
        }
        Ok(v)
    }
}

/// The permutation a permutation-like op performs on an operand of shape `s` (validated by the
/// shape rule before this is called).
fn permutation(op: &Op, s: &Shape) -> Vec<usize> {
    let rank = s.rank();
    let mut p: Vec<usize> = (0..rank).collect();
    match op {
        Op::Permute { perm } => return perm.clone(),
        Op::SwapFirstTwo => p.swap(0, 1),
        Op::Transpose3dLastTwo => p.swap(1, 2),
        Op::Transpose { dim0, dim1 } => p.swap(*dim0, *dim1),
        _ => {}
    }
    p
}

fn forward<T: CpuScalar>(op: &Op, args: &[&CpuTensor<T>]) -> Result<CpuTensor<T>> {
    // the elementwise family on its one operand: the output takes the operand's (already
    // validated) shape — the rule `identity_rule` documents — so nothing is recomputed here
    match (op, args) {
        (Op::Unary(u), [x]) => return Ok(elementwise::unary(*u, x)),
        (Op::Scale { c }, [x]) => return Ok(elementwise::scale(x, T::from_f64(*c))),
        (Op::AddScalar { c }, [x]) => return Ok(elementwise::add_scalar(x, T::from_f64(*c))),
        (Op::Detach, [x]) => return Ok((*x).clone()),
        _ => {}
    }
    let out = infer(op, args)?;
    Ok(match op {
        Op::Unary(u) => elementwise::unary(*u, args[0]),
        Op::Binary(b) => elementwise::binary(*b, args[0], args[1]),
        Op::Scale { c } => elementwise::scale(args[0], T::from_f64(*c)),
        Op::AddScalar { c } => elementwise::add_scalar(args[0], T::from_f64(*c)),
        Op::Detach => args[0].clone(),
        Op::Softmax { axis } => norm::softmax(args[0], *axis),
        Op::LogSoftmax { axis } => norm::log_softmax(args[0], *axis),
        Op::LayerNorm { axis, eps } => norm::layer_norm(args[0], *axis, T::from_f64(*eps)),
        Op::BroadcastTo { .. } => layout::broadcast(args[0], out),
        Op::Reshape { .. } => args[0].share(out),
        Op::Permute { .. } | Op::SwapFirstTwo | Op::Transpose3dLastTwo | Op::Transpose { .. } => {
            layout::permute(args[0], &permutation(op, args[0].shape()), out)
        }
        Op::ReduceSum { axis } => reduce::reduce_axis(args[0], *axis, out, false),
        Op::ReduceMean { axis } => reduce::reduce_axis(args[0], *axis, out, true),
        Op::Sum => reduce::sum_all(args[0]),
        Op::MatMul => linalg::matmul(args[0], args[1], out)?,
        Op::Linear => linalg::linear(args[0], args[1], args[2], out)?,
        Op::Conv2d(spec) => conv::forward(spec, args[0], args[1], args[2], out)?,
        Op::Pool(spec) => pool::forward(spec, args[0], out),
        Op::BatchNormEval { eps, .. } => norm::batch_norm(args, T::from_f64(*eps)),
        Op::Concat { axis, .. } => layout::concat(args, *axis, out),
        Op::MseLoss => reduce::mse_loss(args[0], args[1]),
        Op::RandUniform { seed, key, .. } => random::rand_uniform(*seed, *key, out),
        Op::BernoulliMask { seed, key, .. } => {
            random::bernoulli_mask(*seed, *key, args[0].as_slice()[0], out)
        }
    })
}

fn vjp<T: CpuScalar>(op: &Op, saved: &Saved<CpuTensor<T>>, cot: &CpuTensor<T>) -> Result<Grads<T>> {
    let inferred;
    let out: &Shape = match saved.input_shapes.as_slice() {
        [x] if identity_rule(op) => x,
        shapes => {
            inferred = op.infer_shape(shapes)?;
            &inferred
        }
    };
    if cot.shape() != out {
        return Err(CpuError::Shape {
            op: op.name(),
            shapes: vec![out.clone(), cot.shape().clone()],
            reason: "the cotangent must have the output's shape".into(),
        }
        .into());
    }
    let s = SavedView { op, saved };
    let one = |t: CpuTensor<T>| Ok(smallvec![Some(t)]);
    match op {
        Op::Unary(u) => {
            let x = if u.saves_input() {
                Some(s.input(0)?)
            } else {
                None
            };
            let y = if u.saves_output() {
                Some(s.output(out)?)
            } else {
                None
            };
            one(elementwise::unary_vjp(*u, x, y, cot)?)
        }
        Op::Binary(b) => {
            let (x, y) = if b.saves_inputs() {
                (Some(s.input(0)?), Some(s.input(1)?))
            } else {
                (None, None)
            };
            let (dx, dy) = elementwise::binary_vjp(*b, x, y, cot)?;
            Ok(smallvec![Some(dx), Some(dy)])
        }
        Op::Scale { c } => one(elementwise::scale(cot, T::from_f64(*c))),
        Op::AddScalar { .. } => one(cot.clone()),
        Op::Detach => Ok(smallvec![None]),
        Op::Softmax { axis } => one(norm::softmax_vjp(s.output(out)?, cot, *axis)),
        Op::LogSoftmax { axis } => one(norm::log_softmax_vjp(s.output(out)?, cot, *axis)),
        Op::LayerNorm { axis, eps } => one(norm::layer_norm_vjp(
            s.input(0)?,
            cot,
            *axis,
            T::from_f64(*eps),
        )),
        Op::BroadcastTo { from, .. } => one(layout::broadcast_vjp(cot, from)),
        Op::Reshape { .. } => one(cot.share(s.shape(0)?.clone())),
        Op::Permute { .. } | Op::SwapFirstTwo | Op::Transpose3dLastTwo | Op::Transpose { .. } => {
            let in_shape = s.shape(0)?;
            let perm = permutation(op, in_shape);
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            one(layout::permute(cot, &inv, in_shape.clone()))
        }
        Op::ReduceSum { axis } => one(reduce::spread(cot, s.shape(0)?, *axis, false)),
        Op::ReduceMean { axis } => one(reduce::spread(cot, s.shape(0)?, *axis, true)),
        Op::Sum => one(CpuTensor::filled(s.shape(0)?.clone(), cot.as_slice()[0])?),
        Op::MatMul => {
            let (da, db) = linalg::matmul_vjp(s.input(0)?, s.input(1)?, cot)?;
            Ok(smallvec![Some(da), Some(db)])
        }
        Op::Linear => {
            let (dx, dw, db) = linalg::linear_vjp(s.input(0)?, s.input(1)?, cot)?;
            Ok(smallvec![Some(dx), Some(dw), Some(db)])
        }
        Op::Conv2d(spec) => {
            let (dx, dw, db) = conv::vjp(spec, s.input(0)?, s.input(1)?, cot)?;
            Ok(smallvec![Some(dx), Some(dw), Some(db)])
        }
        Op::Pool(spec) => one(match spec.kind {
            PoolKind::Max => pool::max_vjp(spec, s.input(0)?, cot),
            PoolKind::Avg => pool::avg_vjp(spec, s.shape(0)?, cot),
        }),
        Op::BatchNormEval { eps, .. } => {
            let grads = norm::batch_norm_vjp(
                s.input(0)?,
                s.input(1)?,
                s.input(3)?,
                s.input(4)?,
                cot,
                T::from_f64(*eps),
            );
            Ok(grads.into_iter().map(Some).collect())
        }
        Op::Concat { axis, .. } => Ok(layout::concat_vjp(cot, &saved.input_shapes, *axis)
            .into_iter()
            .map(Some)
            .collect()),
        Op::MseLoss => {
            let (da, db) = reduce::mse_loss_vjp(s.input(0)?, s.input(1)?, cot);
            Ok(smallvec![Some(da), Some(db)])
        }
        Op::RandUniform { .. } => Ok(Operands::new()),
        Op::BernoulliMask { .. } => Ok(smallvec![None]),
    }
}

impl<T: CpuScalar> Kernels for CpuTensor<T> {
    const ENGINE: &'static str = T::ENGINE;

    fn forward(op: &Op, args: &[&Self]) -> Result<Self> {
        forward(op, args)
    }

    fn vjp(op: &Op, saved: &Saved<Self>, cot: &Self) -> Result<Operands<Option<Self>>> {
        vjp(op, saved, cot)
    }

    fn from_f64(t: &Tensor<f64>) -> Result<Self> {
        let data = t.data().iter().map(|&x| T::from_f64(x)).collect();
        Ok(CpuTensor::from_vec(t.shape().clone(), data)?)
    }

    fn to_f64(&self) -> Result<Tensor<f64>> {
        let data = self.as_slice().iter().map(|&x| x.to_f64()).collect();
        Ok(Tensor::new(self.shape().clone(), data)?)
    }

    fn full(shape: &Shape, value: f64) -> Result<Self> {
        Ok(CpuTensor::filled(shape.clone(), T::from_f64(value))?)
    }

    const DECIDABLE_EQ: bool = true;

    fn bit_eq(&self, other: &Self) -> bool {
        CpuTensor::bit_eq(self, other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuF32;
    use torchlean_spec::{BinaryOp, UnaryOp};

    fn t(shape: &[usize], data: &[f32]) -> CpuF32 {
        CpuTensor::from_vec(shape, data.to_vec()).unwrap()
    }

    #[test]
    fn identity_rule_matches_the_shape_rule() {
        let mut ops: Vec<Op> = UnaryOp::ALL.iter().map(|&u| Op::Unary(u)).collect();
        ops.extend([Op::Scale { c: 2.0 }, Op::AddScalar { c: 1.0 }, Op::Detach]);
        for op in ops {
            assert!(identity_rule(&op));
            for s in [vec![], vec![0], vec![3, 1, 4], vec![1, 2, 3, 4, 5, 6, 7]] {
                let s = Shape::new(s);
                assert_eq!(op.infer_shape(std::slice::from_ref(&s)).unwrap(), s);
            }
            // and the rule still rejects a wrong operand count
            assert!(CpuF32::forward(&op, &[]).is_err());
        }
        for op in [
            Op::Sum,
            Op::Softmax { axis: 0 },
            Op::Reshape {
                to: Shape::from([1]),
            },
        ] {
            assert!(!identity_rule(&op));
        }
    }

    #[test]
    fn shape_errors_name_the_op_and_the_shapes() {
        let a = t(&[2], &[1.0, 2.0]);
        let b = t(&[3], &[1.0, 2.0, 3.0]);
        let e = CpuF32::forward(&Op::Binary(BinaryOp::Add), &[&a, &b]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("`add`") && msg.contains("[2]") && msg.contains("[3]"),
            "{msg}"
        );
        let e = CpuF32::forward(&Op::MatMul, &[&a, &b]).unwrap_err();
        assert!(e.to_string().contains("matmul"), "{e}");
        // arity
        let e = CpuF32::forward(&Op::MatMul, &[&a]).unwrap_err();
        assert!(e.to_string().contains("matmul"), "{e}");
    }

    #[test]
    fn a_vjp_reads_nothing_that_was_not_saved() {
        let x = t(&[2], &[1.0, 2.0]);
        let y = CpuF32::forward(&Op::Unary(UnaryOp::Tanh), &[&x]).unwrap();
        // tanh saves its output only: a Saved without it is an error, not a guess
        let saved = Saved {
            input_shapes: vec![x.shape().clone()].into(),
            inputs: vec![Some(x.clone())].into(),
            output: None,
        };
        let e = CpuF32::vjp(&Op::Unary(UnaryOp::Tanh), &saved, &y).unwrap_err();
        assert!(e.to_string().contains("output"), "{e}");
        // a saved value of the wrong shape is an error too
        let saved = Saved {
            input_shapes: vec![x.shape().clone()].into(),
            inputs: vec![None].into(),
            output: Some(t(&[1], &[0.5])),
        };
        assert!(CpuF32::vjp(&Op::Unary(UnaryOp::Tanh), &saved, &y).is_err());
        // and a cotangent of the wrong shape
        let saved = Saved::for_op(&Op::Unary(UnaryOp::Tanh), &[&x], &y);
        let e = CpuF32::vjp(&Op::Unary(UnaryOp::Tanh), &saved, &t(&[1], &[1.0])).unwrap_err();
        assert!(e.to_string().contains("cotangent"), "{e}");
    }

    #[test]
    fn detach_and_reshape_share_their_input() {
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let d = CpuF32::forward(&Op::Detach, &[&x]).unwrap();
        assert!(d.shares_storage_with(&x));
        let r = CpuF32::forward(
            &Op::Reshape {
                to: Shape::from([3, 2]),
            },
            &[&x],
        )
        .unwrap();
        assert!(r.shares_storage_with(&x));
        assert_eq!(r.shape(), &Shape::from([3, 2]));
        let saved = Saved::for_op(&Op::Detach, &[&x], &d);
        assert!(CpuF32::vjp(&Op::Detach, &saved, &d).unwrap()[0].is_none());
    }
}
