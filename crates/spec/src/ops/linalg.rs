//! Matrix products: `matmul` (2-D and batched 3-D) and `linear` (`x Wᵀ + b` over the last
//! axis). Every dot product folds left from zero over the contracted index in order.

use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

pub(crate) fn infer_matmul(a: &Shape, b: &Shape) -> Result<Shape> {
    let err = |reason: &str| SpecError::OpShape {
        op: super::desc::MATMUL.name,
        shapes: vec![a.clone(), b.clone()],
        reason: reason.to_string(),
    };
    match (a.dims(), b.dims()) {
        ([m, n], [n2, p]) => {
            if n != n2 {
                return Err(err("inner dimensions differ"));
            }
            Ok(Shape::from([*m, *p]))
        }
        ([bt, m, n], [bt2, n2, p]) => {
            if bt != bt2 {
                return Err(err("batch dimensions differ"));
            }
            if n != n2 {
                return Err(err("inner dimensions differ"));
            }
            Ok(Shape::from([*bt, *m, *p]))
        }
        _ => Err(err("expects [m,n]·[n,p] or [b,m,n]·[b,n,p]")),
    }
}

/// `(batch, m, n, p)` of a validated matmul (every engine's kernels use this one).
pub fn matmul_dims(a: &Shape, b: &Shape) -> (usize, usize, usize, usize) {
    let (ad, bd) = (a.dims(), b.dims());
    if ad.len() == 3 {
        (ad[0], ad[1], ad[2], bd[2])
    } else {
        (1, ad[0], ad[1], bd[1])
    }
}

pub(crate) fn matmul<A: Scalar>(a: &Tensor<A>, b: &Tensor<A>, out: &Shape) -> Result<Tensor<A>> {
    let (bt, m, n, p) = matmul_dims(a.shape(), b.shape());
    let (ad, bd) = (a.data(), b.data());
    let mut data = Vec::with_capacity(bt * m * p);
    for t in 0..bt {
        for i in 0..m {
            for j in 0..p {
                let mut acc = A::zero();
                for k in 0..n {
                    acc = acc.add(&ad[(t * m + i) * n + k].mul(&bd[(t * n + k) * p + j]));
                }
                data.push(acc);
            }
        }
    }
    Tensor::new(out.clone(), data)
}

/// `dA = dY·Bᵀ`, `dB = Aᵀ·dY`.
pub(crate) fn matmul_vjp<A: Scalar>(
    a: &Tensor<A>,
    b: &Tensor<A>,
    dy: &Tensor<A>,
) -> Result<(Tensor<A>, Tensor<A>)> {
    let (bt, m, n, p) = matmul_dims(a.shape(), b.shape());
    let (ad, bd, dd) = (a.data(), b.data(), dy.data());
    let mut da = Vec::with_capacity(bt * m * n);
    for t in 0..bt {
        for i in 0..m {
            for k in 0..n {
                let mut acc = A::zero();
                for j in 0..p {
                    acc = acc.add(&dd[(t * m + i) * p + j].mul(&bd[(t * n + k) * p + j]));
                }
                da.push(acc);
            }
        }
    }
    let mut db = Vec::with_capacity(bt * n * p);
    for t in 0..bt {
        for k in 0..n {
            for j in 0..p {
                let mut acc = A::zero();
                for i in 0..m {
                    acc = acc.add(&ad[(t * m + i) * n + k].mul(&dd[(t * m + i) * p + j]));
                }
                db.push(acc);
            }
        }
    }
    Ok((
        Tensor::new(a.shape().clone(), da)?,
        Tensor::new(b.shape().clone(), db)?,
    ))
}

/// The payload shapes of a `linear` node: weight `[out, in]` and bias `[out]`, from its input
/// and declared output shapes.
pub(crate) fn linear_payload_shapes(x: &Shape, out: &Shape) -> Result<Vec<Shape>> {
    let err = |reason: &str| SpecError::OpShape {
        op: super::desc::LINEAR.name,
        shapes: vec![x.clone(), out.clone()],
        reason: reason.to_string(),
    };
    let inp = *x
        .dims()
        .last()
        .ok_or_else(|| err("the input needs at least one axis"))?;
    let outf = *out
        .dims()
        .last()
        .ok_or_else(|| err("the output needs at least one axis"))?;
    Ok(vec![Shape::from([outf, inp]), Shape::from([outf])])
}

pub(crate) fn infer_linear(x: &Shape, w: &Shape, b: &Shape) -> Result<Shape> {
    let err = |reason: String| SpecError::OpShape {
        op: super::desc::LINEAR.name,
        shapes: vec![x.clone(), w.clone(), b.clone()],
        reason,
    };
    let [out, inp] = w.dims() else {
        return Err(err("the weight must be [out, in]".into()));
    };
    let Some(&last) = x.dims().last() else {
        return Err(err("the input needs at least one axis".into()));
    };
    if last != *inp {
        return Err(err(format!(
            "the input's last extent {last} differs from the weight's in-features {inp}"
        )));
    }
    if b.dims() != [*out] {
        return Err(err(format!("the bias must be [{out}]")));
    }
    let mut dims = x.dims().to_vec();
    let last_axis = dims.len() - 1;
    dims[last_axis] = *out;
    Ok(Shape::new(dims))
}

/// `(rows, in, out)` of a validated linear (every engine's kernels use this one).
pub fn linear_dims(x: &Shape, w: &Shape) -> (usize, usize, usize) {
    let rows = x.dims()[..x.rank() - 1].iter().product();
    (rows, w.dims()[1], w.dims()[0])
}

pub(crate) fn linear<A: Scalar>(
    x: &Tensor<A>,
    w: &Tensor<A>,
    b: &Tensor<A>,
    out: &Shape,
) -> Result<Tensor<A>> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    let (xd, wd, bd) = (x.data(), w.data(), b.data());
    let mut data = Vec::with_capacity(rows * outf);
    for r in 0..rows {
        for o in 0..outf {
            let mut acc = A::zero();
            for i in 0..inp {
                acc = acc.add(&xd[r * inp + i].mul(&wd[o * inp + i]));
            }
            data.push(acc.add(&bd[o]));
        }
    }
    Tensor::new(out.clone(), data)
}

/// `dx = dy·W`, `dW = dyᵀ·x` (summed over rows in order), `db = Σ_rows dy`.
pub(crate) fn linear_vjp<A: Scalar>(
    x: &Tensor<A>,
    w: &Tensor<A>,
    dy: &Tensor<A>,
) -> Result<(Tensor<A>, Tensor<A>, Tensor<A>)> {
    let (rows, inp, outf) = linear_dims(x.shape(), w.shape());
    let (xd, wd, dd) = (x.data(), w.data(), dy.data());
    let mut dx = Vec::with_capacity(rows * inp);
    for r in 0..rows {
        for i in 0..inp {
            let mut acc = A::zero();
            for o in 0..outf {
                acc = acc.add(&dd[r * outf + o].mul(&wd[o * inp + i]));
            }
            dx.push(acc);
        }
    }
    let mut dw = Vec::with_capacity(outf * inp);
    for o in 0..outf {
        for i in 0..inp {
            let mut acc = A::zero();
            for r in 0..rows {
                acc = acc.add(&dd[r * outf + o].mul(&xd[r * inp + i]));
            }
            dw.push(acc);
        }
    }
    let mut db = Vec::with_capacity(outf);
    for o in 0..outf {
        let mut acc = A::zero();
        for r in 0..rows {
            acc = acc.add(&dd[r * outf + o]);
        }
        db.push(acc);
    }
    Ok((
        Tensor::new(x.shape().clone(), dx)?,
        Tensor::new(w.shape().clone(), dw)?,
        Tensor::new(Shape::from([outf]), db)?,
    ))
}
