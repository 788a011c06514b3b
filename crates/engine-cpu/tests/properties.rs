//! Random geometries (proptest) on `CpuF64` against the reference engine: convolutions of every
//! stride/padding/kernel combination (all three patch layouts), pooling, permutations,
//! broadcasts, reductions, normalisers, concat and products, forward and VJP. The reference
//! rejecting a case means the engine must reject it too.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use torchlean_engine_cpu::CpuF64;
use torchlean_engine_suite::{cotangent, norm_rel_error, Tolerance};
use torchlean_runtime::{Kernels, Saved};
use torchlean_spec::{ops, Conv2dSpec, Op, PoolKind, PoolSpec, Shape, Tensor};

fn values(shape: &[usize], salt: u64) -> Tensor<f64> {
    let mut s = salt;
    Tensor::from_fn(Shape::from(shape), |_| {
        s = ops::splitmix64(s);
        (s >> 11) as f64 / (1u64 << 52) as f64 * 4.0 - 2.0
    })
    .unwrap()
}

/// Runs `op` on both engines; `Err` describes the first disagreement.
fn agree(op: &Op, inputs: &[Tensor<f64>]) -> Result<(), String> {
    let refs: Vec<&Tensor<f64>> = inputs.iter().collect();
    let cpu: Vec<CpuF64> = inputs
        .iter()
        .map(|t| CpuF64::from_f64(t).unwrap())
        .collect();
    let cpu_refs: Vec<&CpuF64> = cpu.iter().collect();
    let want = match op.forward(&refs) {
        Ok(w) => w,
        Err(_) => {
            return match torchlean_runtime::forward::<CpuF64>(op, &cpu_refs) {
                Ok(_) => Err(format!(
                    "{}: the reference rejects, the engine accepts",
                    op.name()
                )),
                Err(_) => Ok(()),
            };
        }
    };
    let got = torchlean_runtime::forward::<CpuF64>(op, &cpu_refs).map_err(|e| e.to_string())?;
    let e = norm_rel_error(&got.to_f64().unwrap(), &want);
    if e > Tolerance::F64.rel {
        return Err(format!("{} forward: {e:e}", op.name()));
    }
    let cot = cotangent(want.shape(), 17);
    let want_g = op
        .vjp(&ops::Saved::for_op(op, &refs, &want), &cot)
        .map_err(|e| e.to_string())?;
    let got_g = torchlean_runtime::vjp::<CpuF64>(
        op,
        &Saved::for_op(op, &cpu_refs, &got),
        &CpuF64::from_f64(&cot).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    if got_g.len() != want_g.len() {
        return Err(format!("{}: cotangent count", op.name()));
    }
    for (k, (g, w)) in got_g.iter().zip(&want_g).enumerate() {
        match (g, w) {
            (Some(g), Some(w)) => {
                let e = norm_rel_error(&g.to_f64().unwrap(), w);
                if e > Tolerance::F64.rel {
                    return Err(format!("{} cotangent {k}: {e:e}", op.name()));
                }
            }
            (None, None) => {}
            _ => return Err(format!("{} cotangent {k}: structural zero", op.name())),
        }
    }
    Ok(())
}

fn dims(max_rank: usize, max_extent: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=max_extent, 0..=max_rank)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn conv2d(
        batch in prop::option::of(0usize..3),
        c in 1usize..4, oc in 1usize..4,
        h in 0usize..9, w in 0usize..9,
        kh in 1usize..4, kw in 1usize..4,
        stride in 1usize..4, padding in 0usize..3,
        salt in any::<u64>(),
    ) {
        let spec = Conv2dSpec::ungrouped(c, oc, (kh, kw), stride, padding);
        let x: Vec<usize> = match batch { Some(n) => vec![n, c, h, w], None => vec![c, h, w] };
        let inputs = [values(&x, salt), values(&[oc, c, kh, kw], salt ^ 1), values(&[oc], salt ^ 2)];
        prop_assert_eq!(agree(&Op::Conv2d(spec), &inputs), Ok(()));
    }

    #[test]
    fn pooling(
        max in any::<bool>(), batch in any::<bool>(),
        c in 1usize..3, h in 0usize..9, w in 0usize..9,
        kh in 1usize..4, kw in 1usize..4, stride in 1usize..4, padding in 0usize..2,
        salt in any::<u64>(),
    ) {
        let spec = PoolSpec {
            kind: if max { PoolKind::Max } else { PoolKind::Avg },
            kernel_h: kh, kernel_w: kw, stride, padding, padded: padding > 0,
        };
        let x: Vec<usize> = if batch { vec![2, c, h, w] } else { vec![c, h, w] };
        prop_assert_eq!(agree(&Op::Pool(spec), &[values(&x, salt)]), Ok(()));
    }

    #[test]
    fn permutations(shape in dims(5, 5), seed in any::<u64>(), salt in any::<u64>()) {
        let mut perm: Vec<usize> = (0..shape.len()).collect();
        let mut s = seed;
        for i in (1..perm.len()).rev() {
            s = ops::splitmix64(s);
            perm.swap(i, (s % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(agree(&Op::Permute { perm }, &[values(&shape, salt)]), Ok(()));
    }

    #[test]
    fn transposes(b in 1usize..3, m in 1usize..40, n in 1usize..40, salt in any::<u64>()) {
        prop_assert_eq!(agree(&Op::Transpose3dLastTwo, &[values(&[b, m, n], salt)]), Ok(()));
        prop_assert_eq!(agree(&Op::SwapFirstTwo, &[values(&[m, n], salt)]), Ok(()));
    }

    #[test]
    fn broadcasts(to in dims(4, 4), keep in prop::collection::vec(any::<bool>(), 4),
                  drop_lead in 0usize..3, salt in any::<u64>()) {
        let lead = drop_lead.min(to.len());
        let from: Vec<usize> = to[lead..]
            .iter()
            .zip(&keep)
            .map(|(&d, &k)| if k { d } else { 1 })
            .collect();
        let op = Op::BroadcastTo { from: Shape::from(from.as_slice()), to: Shape::from(to.as_slice()) };
        prop_assert_eq!(agree(&op, &[values(&from, salt)]), Ok(()));
    }

    #[test]
    fn reductions_and_normalisers(shape in dims(4, 6), axis in 0usize..4, salt in any::<u64>()) {
        let x = [values(&shape, salt)];
        for op in [
            Op::ReduceSum { axis },
            Op::ReduceMean { axis },
            Op::Softmax { axis },
            Op::LogSoftmax { axis },
            Op::LayerNorm { axis, eps: Some(1e-5) },
            Op::Sum,
        ] {
            prop_assert_eq!(agree(&op, &x), Ok(()));
        }
    }

    #[test]
    fn concats(shape in prop::collection::vec(1usize..4, 1..4), axis in 0usize..3,
               extents in prop::collection::vec(0usize..4, 2..4), salt in any::<u64>()) {
        let axis = axis.min(shape.len() - 1);
        let inputs: Vec<Tensor<f64>> = extents
            .iter()
            .enumerate()
            .map(|(k, &e)| {
                let mut s = shape.clone();
                s[axis] = e;
                values(&s, salt ^ k as u64)
            })
            .collect();
        let op = Op::Concat { axis };
        prop_assert_eq!(agree(&op, &inputs), Ok(()));
    }

    #[test]
    fn products(b in prop::option::of(1usize..3), m in 0usize..20, k in 0usize..20,
                n in 0usize..20, salt in any::<u64>()) {
        let (a, c): (Vec<usize>, Vec<usize>) = match b {
            Some(b) => (vec![b, m, k], vec![b, k, n]),
            None => (vec![m, k], vec![k, n]),
        };
        prop_assert_eq!(agree(&Op::MatMul, &[values(&a, salt), values(&c, salt ^ 1)]), Ok(()));
        let x: Vec<usize> = match b { Some(b) => vec![b, m, k], None => vec![m, k] };
        let lin = [values(&x, salt), values(&[n, k], salt ^ 2), values(&[n], salt ^ 3)];
        prop_assert_eq!(agree(&Op::Linear, &lin), Ok(()));
    }
}
