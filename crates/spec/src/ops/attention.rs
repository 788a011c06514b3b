//! Causal self-attention on packed projections: nanoGPT's `CausalSelfAttention` between its
//! `c_attn` and `c_proj` layers. The operand `qkv` `[.., T, 3C]` holds the queries, keys and
//! values side by side along its last axis (`c_attn`'s output); each of the `heads` heads
//! takes `hd = C / heads` consecutive columns of each. Position `i` of a head attends to the
//! positions `j ≤ i`:
//!
//! ```text
//! s_ij = (q_i · k_j)·(1/√hd)      p_i = softmax over j ≤ i of s_i·      y_i = Σ_{j ≤ i} p_ij v_j
//! ```
//!
//! and the heads' outputs sit side by side again, `[.., T, C]`. This is the composition
//! `softmax(Q·Kᵀ·(1/√hd) + M)·V` with `M` = −∞ above the diagonal
//! ([`crate::backend::compose::causal_attention`], which engines without a kernel of their own
//! run): for finite operands the two agree, each dot product and sum folding left from zero in
//! index order (the masked terms of the composition add exact zeros). A non-finite key or value
//! at a later position reaches no earlier output here (in the composition `0·∞` makes NaN).
//!
//! The VJP recomputes the weights from `qkv` (nothing `T × T` is kept between the passes):
//! `dP = dY·Vᵀ`, `dS = P ⊙ (dP − Σ_j dP ⊙ P)·(1/√hd)`, `dQ = dS·K`, `dK = dSᵀ·Q`, `dV = Pᵀ·dY`.

use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// The extents of a validated `causal_attention` (every engine's kernels use this one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionDims {
    /// The product of the leading axes.
    pub batch: usize,
    /// Positions (the second-to-last axis).
    pub t: usize,
    /// Output width `C` (a third of the operand's last extent).
    pub c: usize,
    pub heads: usize,
    /// Columns per head, `C / heads`.
    pub hd: usize,
}

impl AttentionDims {
    /// The extents of `qkv` `[.., T, 3C]`, whose shape the rule accepted.
    pub fn of(qkv: &Shape, heads: usize) -> AttentionDims {
        let dims = qkv.dims();
        let r = dims.len();
        let c = dims[r - 1] / 3;
        AttentionDims {
            batch: dims[..r - 2].iter().product(),
            t: dims[r - 2],
            c,
            heads,
            hd: c / heads,
        }
    }

    /// The scores' factor `1/√hd`.
    pub fn scale(&self) -> f64 {
        1.0 / (self.hd as f64).sqrt()
    }

    /// Offset in `qkv` of part `part` (0 queries, 1 keys, 2 values) of head `h` at position
    /// `i` of batch entry `b`: `hd` consecutive elements.
    pub fn qkv_at(&self, b: usize, i: usize, part: usize, h: usize) -> usize {
        (b * self.t + i) * 3 * self.c + part * self.c + h * self.hd
    }

    /// Offset in the output (and its cotangent) of head `h` at position `i` of entry `b`.
    pub fn out_at(&self, b: usize, i: usize, h: usize) -> usize {
        (b * self.t + i) * self.c + h * self.hd
    }
}

/// The causal mask `[t, t]` row-major: 0 on and below the diagonal, −∞ above (a position sees
/// itself and the past): what the composition adds to the scores.
pub fn causal_mask(t: usize) -> Vec<f64> {
    (0..t * t)
        .map(|n| {
            if n % t > n / t {
                f64::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect()
}

/// The shape rule: rank ≥ 2, `heads ≥ 1`, the last extent `3·heads·hd` with `hd ≥ 1`; the
/// output has a third of it.
pub(crate) fn infer_causal_attention(x: &Shape, heads: usize) -> Result<Shape> {
    let name = super::desc::CAUSAL_ATTENTION.name;
    if heads == 0 {
        return Err(SpecError::OpAttr {
            op: name,
            attr: "heads",
            reason: "must be at least 1".into(),
        });
    }
    let err = |reason: String| SpecError::OpShape {
        op: name,
        shapes: vec![x.clone()],
        reason,
    };
    let dims = x.dims();
    if dims.len() < 2 {
        return Err(err("needs rank at least 2 ([.., T, 3C])".into()));
    }
    let last = dims[dims.len() - 1];
    if last == 0 || !last.is_multiple_of(3 * heads) {
        return Err(err(format!(
            "the last extent {last} must be 3·heads·head_dim with head_dim ≥ 1 (heads = {heads})"
        )));
    }
    let mut out = dims.to_vec();
    *out.last_mut().expect("rank ≥ 2") = last / 3;
    Ok(Shape::new(out))
}

/// `Σ_d a[d]·b[d]`, folding left from zero.
fn dot<A: Scalar>(a: &[A], b: &[A]) -> A {
    a.iter()
        .zip(b)
        .fold(A::zero(), |acc, (x, y)| acc.add(&x.mul(y)))
}

/// The attention weights of head `h` of entry `b` at position `i`: `p_ij` for `j ≤ i`.
fn weights<A: Scalar>(x: &[A], d: &AttentionDims, b: usize, h: usize, i: usize) -> Result<Vec<A>> {
    let c = A::from_f64(d.scale())?;
    let q = &x[d.qkv_at(b, i, 0, h)..][..d.hd];
    let s: Vec<A> = (0..=i)
        .map(|j| c.mul(&dot(q, &x[d.qkv_at(b, j, 1, h)..][..d.hd])))
        .collect();
    let m = s[1..].iter().fold(s[0].clone(), |m, v| m.max_of(v));
    let e = s
        .iter()
        .map(|v| v.sub(&m).exp())
        .collect::<Result<Vec<A>>>()?;
    let sum = e.iter().fold(A::zero(), |acc, v| acc.add(v));
    e.iter().map(|v| v.div(&sum)).collect()
}

/// Rows `y[r] = Σ_k coef(r, k)·src(k)` of width `hd`, each folding left from zero over `k`.
fn combine<A: Scalar>(hd: usize, ks: impl Iterator<Item = (A, usize)>, src: &[A]) -> Vec<A> {
    let mut y = vec![A::zero(); hd];
    for (w, at) in ks {
        for (acc, v) in y.iter_mut().zip(&src[at..][..hd]) {
            *acc = acc.add(&w.mul(v));
        }
    }
    y
}

pub(crate) fn causal_attention<A: Scalar>(
    qkv: &Tensor<A>,
    heads: usize,
    out: &Shape,
) -> Result<Tensor<A>> {
    let d = AttentionDims::of(qkv.shape(), heads);
    let x = qkv.data();
    let mut y = vec![A::zero(); out.size()];
    for b in 0..d.batch {
        for h in 0..d.heads {
            for i in 0..d.t {
                let p = weights(x, &d, b, h, i)?;
                let vs = p
                    .into_iter()
                    .enumerate()
                    .map(|(j, w)| (w, d.qkv_at(b, j, 2, h)));
                let row = combine(d.hd, vs, x);
                y[d.out_at(b, i, h)..][..d.hd].clone_from_slice(&row);
            }
        }
    }
    Tensor::new(out.clone(), y)
}

/// The gradient with respect to `qkv`, from `qkv` and the output's cotangent `dy`.
pub(crate) fn causal_attention_vjp<A: Scalar>(
    qkv: &Tensor<A>,
    heads: usize,
    dy: &Tensor<A>,
) -> Result<Tensor<A>> {
    let d = AttentionDims::of(qkv.shape(), heads);
    let (x, g) = (qkv.data(), dy.data());
    let c = A::from_f64(d.scale())?;
    let mut dx = vec![A::zero(); x.len()];
    for b in 0..d.batch {
        for h in 0..d.heads {
            // per position i: its weights p_i· and the scores' cotangents ds_i·
            let mut p = Vec::with_capacity(d.t);
            let mut ds = Vec::with_capacity(d.t);
            for i in 0..d.t {
                let pi = weights(x, &d, b, h, i)?;
                let gi = &g[d.out_at(b, i, h)..][..d.hd];
                let dp: Vec<A> = (0..=i)
                    .map(|j| dot(gi, &x[d.qkv_at(b, j, 2, h)..][..d.hd]))
                    .collect();
                let along = dp
                    .iter()
                    .zip(&pi)
                    .fold(A::zero(), |acc, (a, w)| acc.add(&a.mul(w)));
                ds.push(
                    dp.iter()
                        .zip(&pi)
                        .map(|(a, w)| c.mul(&a.sub(&along).mul(w)))
                        .collect::<Vec<A>>(),
                );
                p.push(pi);
            }
            for i in 0..d.t {
                // dq_i = Σ_{j ≤ i} ds_ij k_j
                let ks = (0..=i).map(|j| (ds[i][j].clone(), d.qkv_at(b, j, 1, h)));
                let dq = combine(d.hd, ks, x);
                dx[d.qkv_at(b, i, 0, h)..][..d.hd].clone_from_slice(&dq);
                // dk_i = Σ_{r ≥ i} ds_ri q_r, dv_i = Σ_{r ≥ i} p_ri dy_r
                let qs = (i..d.t).map(|r| (ds[r][i].clone(), d.qkv_at(b, r, 0, h)));
                let dk = combine(d.hd, qs, x);
                dx[d.qkv_at(b, i, 1, h)..][..d.hd].clone_from_slice(&dk);
                let gs = (i..d.t).map(|r| (p[r][i].clone(), d.out_at(b, r, h)));
                let dv = combine(d.hd, gs, g);
                dx[d.qkv_at(b, i, 2, h)..][..d.hd].clone_from_slice(&dv);
            }
        }
    }
    Tensor::new(qkv.shape().clone(), dx)
}
