//! The CPU engine's kernels, one module per op family, and its family implementations
//! ([`torchlean_spec::Backend`]), each method calling its module's kernel. Validation (the op's shape rule, the
//! cotangent's shape, the saved values' shapes) and the choice of what a VJP reads happen once,
//! in the dispatch (`torchlean_spec::Op::forward` / `Op::vjp`), before any kernel runs.

mod attention;
mod conv;
mod conv_implicit;
mod conv_lanes;
mod conv_winograd;
mod elementwise;
mod layout;
mod linalg;
mod linear_narrow;
mod norm;
mod pool;
mod random;
mod reduce;

use crate::error::CpuError;
use crate::scalar::CpuScalar;
use crate::tensor::CpuTensor;
use std::borrow::Cow;
use torchlean_runtime::{Kernels, Result, RuntimeError, TrainValue};
use torchlean_spec::backend::compose;
use torchlean_spec::{
    BinaryOp, Conv2dSpec, ConvPool, Elementwise, EngineValue, KernelResult, Layout, Linalg, Norm,
    PoolSpec, Random, Reduce, Shape, Tensor, UnaryOp,
};

type R<T> = std::result::Result<CpuTensor<T>, CpuError>;
type R2<T> = std::result::Result<(CpuTensor<T>, CpuTensor<T>), CpuError>;
type R3<T> = std::result::Result<(CpuTensor<T>, CpuTensor<T>, CpuTensor<T>), CpuError>;
/// One gradient per operand of a batch norm.
type Grads<T, const N: usize> = std::result::Result<[CpuTensor<T>; N], CpuError>;
/// `(dx if asked for, dW, db)`.
type R3o<T> = std::result::Result<(Option<CpuTensor<T>>, CpuTensor<T>, CpuTensor<T>), CpuError>;

impl<T: CpuScalar> EngineValue for CpuTensor<T> {
    type Error = CpuError;

    #[inline]
    fn shape_of(&self) -> &Shape {
        self.shape()
    }
    fn values_f64(x: &Self) -> KernelResult<Self, Vec<f64>> {
        Ok(x.as_slice().iter().map(|v| v.to_f64()).collect())
    }
}

impl<T: CpuScalar> Elementwise for CpuTensor<T> {
    #[inline]
    fn unary(op: UnaryOp, x: &Self) -> R<T> {
        Ok(elementwise::unary(op, x))
    }
    #[inline]
    fn unary_vjp(op: UnaryOp, x: Option<&Self>, y: Option<&Self>, dy: &Self) -> R<T> {
        elementwise::unary_vjp(op, x, y, dy)
    }
    fn binary(op: BinaryOp, a: &Self, b: &Self) -> R<T> {
        Ok(elementwise::binary(op, a, b))
    }
    fn binary_vjp(op: BinaryOp, a: Option<&Self>, b: Option<&Self>, dy: &Self) -> R2<T> {
        elementwise::binary_vjp(op, a, b, dy)
    }
    #[inline]
    fn scale(x: &Self, c: f64) -> R<T> {
        Ok(elementwise::scale(x, T::from_f64(c)))
    }
    #[inline]
    fn add_scalar(x: &Self, c: f64) -> R<T> {
        Ok(elementwise::add_scalar(x, T::from_f64(c)))
    }
    fn clamp(x: &Self, min: Option<f64>, max: Option<f64>) -> R<T> {
        Ok(elementwise::clamp(x, min, max))
    }
    fn clamp_vjp(x: &Self, dy: &Self, min: Option<f64>, max: Option<f64>) -> R<T> {
        Ok(elementwise::clamp_vjp(x, dy, min, max))
    }
}

impl<T: CpuScalar> Layout for CpuTensor<T> {
    #[inline]
    fn relabel(x: &Self, shape: &Shape) -> R<T> {
        Ok(x.share(shape.clone()))
    }
    fn broadcast(x: &Self, out: &Shape) -> R<T> {
        Ok(layout::broadcast(x, out.clone()))
    }
    fn broadcast_vjp(dy: &Self, from: &Shape) -> R<T> {
        Ok(layout::broadcast_vjp(dy, from))
    }
    fn permute(x: &Self, perm: &[usize], out: &Shape) -> R<T> {
        Ok(layout::permute(x, perm, out.clone()))
    }
    fn slice(x: &Self, axis: usize, start: usize, out: &Shape) -> R<T> {
        Ok(layout::slice(x, axis, start, out.clone()))
    }
    fn slice_vjp(dy: &Self, in_shape: &Shape, axis: usize, start: usize) -> R<T> {
        Ok(layout::slice_vjp(dy, in_shape, axis, start))
    }
    fn concat(args: &[&Self], axis: usize, out: &Shape) -> R<T> {
        Ok(layout::concat(args, axis, out.clone()))
    }
    fn concat_vjp(dy: &Self, shapes: &[Shape], axis: usize) -> KernelResult<Self, Vec<Self>> {
        Ok(layout::concat_vjp(dy, shapes, axis))
    }
    fn gather_rows(table: &Self, ids: &[usize], out: &Shape) -> R<T> {
        Ok(layout::gather_rows(table, ids, out.clone()))
    }
    fn gather_rows_vjp(dy: &Self, ids: &[usize], table: &Shape) -> R<T> {
        Ok(layout::gather_rows_vjp(dy, ids, table))
    }
    fn constant(values: &[f64], out: &Shape) -> R<T> {
        CpuTensor::from_vec(
            out.clone(),
            values.iter().map(|&v| T::from_f64(v)).collect(),
        )
    }
}

impl<T: CpuScalar> Reduce for CpuTensor<T> {
    fn reduce_axis(x: &Self, axis: usize, mean: bool, out: &Shape) -> R<T> {
        Ok(reduce::reduce_axis(x, axis, out.clone(), mean))
    }
    fn spread(dy: &Self, in_shape: &Shape, axis: usize, mean: bool) -> R<T> {
        Ok(reduce::spread(dy, in_shape, axis, mean))
    }
    fn sum_all(x: &Self) -> R<T> {
        Ok(reduce::sum_all(x))
    }
    fn sum_all_vjp(dy: &Self, in_shape: &Shape) -> R<T> {
        CpuTensor::filled(in_shape.clone(), dy.as_slice()[0])
    }
    fn mse_loss(y: &Self, t: &Self) -> R<T> {
        Ok(reduce::mse_loss(y, t))
    }
    fn mse_loss_vjp(y: &Self, t: &Self, dy: &Self) -> R2<T> {
        Ok(reduce::mse_loss_vjp(y, t, dy))
    }
    fn cross_entropy(logits: &Self, target: &[usize], mean: bool) -> R<T> {
        Ok(reduce::cross_entropy(logits, target, mean))
    }
    fn cross_entropy_vjp(logits: &Self, target: &[usize], dy: &Self, mean: bool) -> R<T> {
        Ok(reduce::cross_entropy_vjp(logits, target, dy, mean))
    }
}

impl<T: CpuScalar> Norm for CpuTensor<T> {
    fn softmax(x: &Self, axis: usize, log: bool) -> R<T> {
        Ok(if log {
            norm::log_softmax(x, axis)
        } else {
            norm::softmax(x, axis)
        })
    }
    fn softmax_vjp(y: &Self, dy: &Self, axis: usize, log: bool) -> R<T> {
        Ok(norm::softmax_vjp(y, dy, axis, log))
    }
    fn layer_norm(x: &Self, axis: usize, eps: f64) -> R<T> {
        Ok(norm::layer_norm(x, axis, T::from_f64(eps)))
    }
    fn layer_norm_vjp(x: &Self, dy: &Self, axis: usize, eps: f64) -> R<T> {
        Ok(norm::layer_norm_vjp(x, dy, axis, T::from_f64(eps)))
    }
    fn batch_norm(args: [&Self; 5], eps: f64) -> R<T> {
        Ok(norm::batch_norm(args, T::from_f64(eps)))
    }
    fn batch_norm_vjp(saved: [&Self; 4], dy: &Self, eps: f64) -> Grads<T, 5> {
        let [x, gamma, mean, var] = saved;
        Ok(norm::batch_norm_vjp(
            x,
            gamma,
            mean,
            var,
            dy,
            T::from_f64(eps),
        ))
    }
    fn batch_norm_train(x: &Self, gamma: &Self, beta: &Self, eps: f64) -> R<T> {
        Ok(norm::batch_norm_train(x, gamma, beta, eps))
    }
    fn batch_norm_train_vjp(saved: [&Self; 2], dy: &Self, eps: f64) -> Grads<T, 3> {
        let [x, gamma] = saved;
        Ok(norm::batch_norm_train_vjp(x, gamma, dy, eps))
    }
}

impl<T: CpuScalar> Linalg for CpuTensor<T> {
    fn matmul(a: &Self, b: &Self, out: &Shape) -> R<T> {
        linalg::matmul(a, b, out.clone())
    }
    fn matmul_vjp(a: &Self, b: &Self, dy: &Self) -> R2<T> {
        linalg::matmul_vjp(a, b, dy)
    }
    fn linear(x: &Self, w: &Self, b: &Self, out: &Shape) -> R<T> {
        linalg::linear(x, w, b, out.clone())
    }
    fn linear_vjp(x: &Self, w: &Self, dy: &Self) -> R3<T> {
        linalg::linear_vjp(x, w, dy)
    }
    fn linear_vjp_for(x: &Self, w: &Self, dy: &Self, need_dx: bool) -> R3o<T> {
        linalg::linear_vjp_for(x, w, dy, need_dx)
    }
    fn causal_attention(qkv: &Self, heads: usize, out: &Shape) -> R<T> {
        Ok(attention::causal_attention(qkv, heads, out))
    }
    fn causal_attention_vjp(qkv: &Self, heads: usize, dy: &Self) -> R<T> {
        Ok(attention::causal_attention_vjp(qkv, heads, dy))
    }
}

impl<T: CpuScalar> ConvPool for CpuTensor<T> {
    // the patch kernels take one group without dilation; other convolutions are composed
    fn conv2d(spec: &Conv2dSpec, x: &Self, w: &Self, b: &Self, out: &Shape) -> R<T> {
        if !spec.is_ungrouped_undilated() {
            return compose::grouped_conv2d(spec, x, w, b, out);
        }
        conv::forward(spec, x, w, b, conv::Epilogue::Bias, out.clone())
    }
    fn conv2d_relu(spec: &Conv2dSpec, x: &Self, w: &Self, b: &Self, out: &Shape) -> R<T> {
        if !spec.is_ungrouped_undilated() {
            return compose::conv2d_relu(spec, x, w, b, out);
        }
        conv::forward(spec, x, w, b, conv::Epilogue::BiasRelu, out.clone())
    }
    fn conv2d_vjp(spec: &Conv2dSpec, x: &Self, w: &Self, dy: &Self) -> R3<T> {
        let (dx, dw, db) = Self::conv2d_vjp_for(spec, x, w, dy, true)?;
        Ok((dx.expect("dx is computed when asked for"), dw, db))
    }
    fn conv2d_vjp_for(spec: &Conv2dSpec, x: &Self, w: &Self, dy: &Self, need_dx: bool) -> R3o<T> {
        if !spec.is_ungrouped_undilated() {
            return compose::grouped_conv2d_vjp(spec, x, w, dy, need_dx);
        }
        conv::vjp(spec, x, w, dy, None, need_dx)
    }
    fn conv2d_relu_vjp_for(
        spec: &Conv2dSpec,
        x: &Self,
        w: &Self,
        y: &Self,
        dy: &Self,
        need_dx: bool,
    ) -> R3o<T> {
        if !spec.is_ungrouped_undilated() {
            return compose::conv2d_relu_vjp_for(spec, x, w, y, dy, need_dx);
        }
        conv::vjp(spec, x, w, dy, Some(y), need_dx)
    }
    fn pool(spec: &PoolSpec, x: &Self, out: &Shape) -> R<T> {
        pool::forward(spec, x, out.clone())
    }
    fn max_pool_vjp(spec: &PoolSpec, x: &Self, dy: &Self) -> R<T> {
        Ok(pool::max_vjp(spec, x, dy))
    }
    fn avg_pool_vjp(spec: &PoolSpec, in_shape: &Shape, dy: &Self) -> R<T> {
        pool::avg_vjp(spec, in_shape, dy)
    }
}

impl<T: CpuScalar> Random for CpuTensor<T> {
    fn rand_uniform(seed: u64, key: u64, out: &Shape) -> R<T> {
        Ok(random::rand_uniform(seed, key, out.clone()))
    }
    fn bernoulli_mask(seed: u64, key: u64, keep_prob: &Self, out: &Shape) -> R<T> {
        Ok(random::bernoulli_mask(
            seed,
            key,
            keep_prob.as_slice()[0],
            out.clone(),
        ))
    }
}

impl<T: CpuScalar> Kernels for CpuTensor<T> {
    const ENGINE: &'static str = T::ENGINE;

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

/// The CPU engine lends its buffers: reads borrow, updates write in place (copy-on-write where
/// a buffer is shared).
macro_rules! train_value {
    ($t:ty) => {
        impl TrainValue for CpuTensor<$t> {
            type Elem = $t;
            fn read(&self) -> Result<Cow<'_, [$t]>> {
                Ok(Cow::Borrowed(self.as_slice()))
            }
            fn update_all<R, E: From<RuntimeError>>(
                values: &mut [&mut Self],
                f: impl FnOnce(&mut [&mut [$t]]) -> std::result::Result<R, E>,
            ) -> std::result::Result<R, E> {
                let mut slices: Vec<&mut [$t]> = values.iter_mut().map(|v| v.make_mut()).collect();
                f(&mut slices)
            }
        }
    };
}

train_value!(f32);
train_value!(f64);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuF32;
    use torchlean_runtime::{forward, vjp, Saved};
    use torchlean_spec::Op;

    fn t(shape: &[usize], data: &[f32]) -> CpuF32 {
        CpuTensor::from_vec(shape, data.to_vec()).unwrap()
    }

    #[test]
    fn shape_errors_name_the_op_and_the_shapes() {
        let a = t(&[2], &[1.0, 2.0]);
        let b = t(&[3], &[1.0, 2.0, 3.0]);
        let e = forward::<CpuF32>(&Op::Binary(BinaryOp::Add), &[&a, &b]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("`add`") && msg.contains("[2]") && msg.contains("[3]"),
            "{msg}"
        );
        let e = forward::<CpuF32>(&Op::MatMul, &[&a, &b]).unwrap_err();
        assert!(e.to_string().contains("matmul"), "{e}");
        // arity
        let e = forward::<CpuF32>(&Op::MatMul, &[&a]).unwrap_err();
        assert!(e.to_string().contains("matmul"), "{e}");
    }

    #[test]
    fn a_vjp_reads_nothing_that_was_not_saved() {
        let x = t(&[2], &[1.0, 2.0]);
        let y = forward::<CpuF32>(&Op::Unary(UnaryOp::Tanh), &[&x]).unwrap();
        // tanh saves its output only: a Saved without it is an error, not a guess
        let saved = Saved {
            input_shapes: vec![x.shape().clone()].into(),
            inputs: vec![Some(x.clone())].into(),
            output: None,
        };
        let e = vjp::<CpuF32>(&Op::Unary(UnaryOp::Tanh), &saved, &y).unwrap_err();
        assert!(e.to_string().contains("output"), "{e}");
        // a saved value of the wrong shape is an error too
        let saved = Saved {
            input_shapes: vec![x.shape().clone()].into(),
            inputs: vec![None].into(),
            output: Some(t(&[1], &[0.5])),
        };
        assert!(vjp::<CpuF32>(&Op::Unary(UnaryOp::Tanh), &saved, &y).is_err());
        // and a cotangent of the wrong shape
        let saved = Saved::for_op(&Op::Unary(UnaryOp::Tanh), &[&x], &y);
        let e = vjp::<CpuF32>(&Op::Unary(UnaryOp::Tanh), &saved, &t(&[1], &[1.0])).unwrap_err();
        assert!(e.to_string().contains("cotangent"), "{e}");
    }

    #[test]
    fn detach_and_reshape_share_their_input() {
        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let d = forward::<CpuF32>(&Op::Detach, &[&x]).unwrap();
        assert!(d.shares_storage_with(&x));
        let r = forward::<CpuF32>(
            &Op::Reshape {
                from: Shape::from([2, 3]),
                to: Shape::from([3, 2]),
            },
            &[&x],
        )
        .unwrap();
        assert!(r.shares_storage_with(&x));
        assert_eq!(r.shape(), &Shape::from([3, 2]));
        let saved = Saved::for_op(&Op::Detach, &[&x], &d);
        assert!(vjp::<CpuF32>(&Op::Detach, &saved, &d).unwrap()[0].is_none());
    }

    fn set_first(v: &mut [&mut [f32]]) -> Result<()> {
        v[0][0] = 9.0;
        Ok(())
    }

    #[test]
    fn an_update_of_a_shared_buffer_leaves_the_other_holder_alone() {
        let a = CpuTensor::<f32>::from_vec([3], vec![1.0, 2.0, 3.0]).unwrap();
        let mut b = a.clone();
        CpuTensor::update_all(&mut [&mut b], set_first).unwrap();
        assert_eq!(&*a.read().unwrap(), &[1.0, 2.0, 3.0]);
        assert_eq!(&*b.read().unwrap(), &[9.0, 2.0, 3.0]);
    }

    #[test]
    fn the_engine_lends_its_data_without_a_copy() {
        let t = Tensor::new([2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let cpu = CpuTensor::<f64>::from_f64(&t).unwrap();
        assert!(matches!(cpu.read().unwrap(), Cow::Borrowed(_)));
        assert_eq!(&*cpu.read().unwrap(), t.data());
    }

    #[test]
    fn an_update_of_a_unique_buffer_is_in_place() {
        let mut a = CpuTensor::<f32>::from_vec([2], vec![1.0, 2.0]).unwrap();
        let before = a.as_slice().as_ptr();
        CpuTensor::update_all(&mut [&mut a], set_first).unwrap();
        assert_eq!(a.as_slice().as_ptr(), before);
        assert_eq!(a.as_slice(), &[9.0, 2.0]);
    }
}
