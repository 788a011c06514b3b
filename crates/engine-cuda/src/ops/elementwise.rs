//! The elementwise family on the CUDA engine: one kernel for every unary function and one for
//! every binary one (the function is an integer code, `kernels::codes`), their
//! VJPs, `scale`, `add_scalar`, `clamp` and its VJP, all in `kernels/elementwise.cu`, with the
//! reference's edge policies and order of operations (`torchlean_spec::ops::elementwise`).
//!
//! Every launch is one pass, one thread per element (grid-stride), one output written per
//! element; `add`'s VJP and `relabel` share buffers instead of copying.

use super::{launch_new, launch_new2};
use crate::device::{Arg, Device};
use crate::error::{CudaError, Result};
use crate::geometry::{index, Launch};
use crate::kernels::codes::{binary_code, unary_code};
use crate::kernels::ELEMENTWISE;
use crate::tensor::CudaTensor;
use torchlean_spec::ops::gelu_consts as gc;
use torchlean_spec::ops::{desc, AttrValue};
use torchlean_spec::{BinaryOp, GeluApprox, Op, Shape, SpecError, UnaryOp};

/// The constants `(c0, c1, c2)` the kernels take for `op`: gelu's, from
/// `torchlean_spec::ops::gelu_consts` rounded to `f32` as the CPU engine rounds them; for any
/// other function its number attributes in wire order (`leaky_relu`'s `negative_slope`, …),
/// zeros past them.
fn unary_consts(op: UnaryOp) -> (f32, f32, f32) {
    match op {
        UnaryOp::Gelu(GeluApprox::None) => (gc::SQRT1_2 as f32, gc::ALPHA as f32, 0.0),
        UnaryOp::Gelu(GeluApprox::Tanh) => {
            (gc::BETA as f32, gc::KAPPA as f32, gc::THREE_KAPPA as f32)
        }
        _ => {
            let mut c = [0.0f32; 3];
            let numbers = Op::Unary(op)
                .attr_values()
                .into_iter()
                .filter_map(|(_, v)| match v {
                    AttrValue::Float(f) => Some(f as f32),
                    _ => None,
                });
            for (slot, v) in c.iter_mut().zip(numbers) {
                *slot = v;
            }
            (c[0], c[1], c[2])
        }
    }
}

fn missing(op: &'static str, what: &str) -> CudaError {
    CudaError::Spec(SpecError::MissingSaved {
        op,
        what: what.to_string(),
    })
}

/// Both operands agree in length with the cotangent (the dispatch checked the shapes; this
/// keeps a kernel from ever reading past a buffer).
fn same_len<D: Device>(op: &'static str, t: &CudaTensor<D>, like: &CudaTensor<D>) -> Result<()> {
    if t.len() != like.len() {
        return Err(CudaError::Spec(SpecError::ShapeMismatch {
            op,
            shapes: vec![t.shape().clone(), like.shape().clone()],
        }));
    }
    Ok(())
}

pub fn unary<D: Device>(op: UnaryOp, x: &CudaTensor<D>) -> Result<CudaTensor<D>> {
    let n = x.len();
    let (code, _) = unary_code(op);
    let (c0, c1, _) = unary_consts(op);
    // tl_ew_unary(float* y, const float* x, long long op, float c0, float c1, long long n)
    launch_new(
        ELEMENTWISE.kernel("tl_ew_unary"),
        Launch::for_items(n),
        x.shape().clone(),
        [
            Arg::In(x.mem()),
            Arg::Index(code),
            Arg::F32(c0),
            Arg::F32(c1),
            Arg::Index(index(op.name(), "n", n)?),
        ],
    )
}

/// The VJP reads the value the op's descriptor saves: its output, its input, or nothing (neg,
/// sign: the kernel reads the cotangent alone, and is handed it in the saved value's place).
pub fn unary_vjp<D: Device>(
    op: UnaryOp,
    x: Option<&CudaTensor<D>>,
    y: Option<&CudaTensor<D>>,
    dy: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    let saves = op.desc().saves;
    let saved = if saves.output {
        y.ok_or_else(|| missing(op.name(), "output"))?
    } else if !saves.inputs.is_empty() {
        x.ok_or_else(|| missing(op.name(), "input"))?
    } else {
        dy
    };
    same_len(op.name(), saved, dy)?;
    let n = dy.len();
    let (code, _) = unary_code(op);
    let (c0, c1, c2) = unary_consts(op);
    // tl_ew_unary_vjp(float* dx, const float* s, const float* dy, long long op, float c0,
    //                 float c1, float c2, long long n)
    launch_new(
        ELEMENTWISE.kernel("tl_ew_unary_vjp"),
        Launch::for_items(n),
        dy.shape().clone(),
        [
            Arg::In(saved.mem()),
            Arg::In(dy.mem()),
            Arg::Index(code),
            Arg::F32(c0),
            Arg::F32(c1),
            Arg::F32(c2),
            Arg::Index(index(op.name(), "n", n)?),
        ],
    )
}

pub fn binary<D: Device>(
    op: BinaryOp,
    a: &CudaTensor<D>,
    b: &CudaTensor<D>,
) -> Result<CudaTensor<D>> {
    same_len(op.name(), b, a)?;
    let n = a.len();
    // tl_ew_binary(float* y, const float* a, const float* b, long long op, long long n)
    launch_new(
        ELEMENTWISE.kernel("tl_ew_binary"),
        Launch::for_items(n),
        a.shape().clone(),
        [
            Arg::In(a.mem()),
            Arg::In(b.mem()),
            Arg::Index(binary_code(op).0),
            Arg::Index(index(op.name(), "n", n)?),
        ],
    )
}

/// `(da, db)`. `add` passes the cotangent through to both (shared, no copy), `sub` negates it
/// for `b`; the others are one launch writing both gradients.
pub fn binary_vjp<D: Device>(
    op: BinaryOp,
    a: Option<&CudaTensor<D>>,
    b: Option<&CudaTensor<D>>,
    dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    let (a, b) = match op {
        BinaryOp::Add => return Ok((dy.clone(), dy.clone())),
        BinaryOp::Sub => return Ok((dy.clone(), unary(UnaryOp::Neg, dy)?)),
        _ => (
            a.ok_or_else(|| missing(op.name(), "operand 0"))?,
            b.ok_or_else(|| missing(op.name(), "operand 1"))?,
        ),
    };
    same_len(op.name(), a, dy)?;
    same_len(op.name(), b, dy)?;
    let n = dy.len();
    // tl_ew_binary_vjp(float* da, float* db, const float* a, const float* b, const float* dy,
    //                  long long op, long long n)
    launch_new2(
        ELEMENTWISE.kernel("tl_ew_binary_vjp"),
        Launch::for_items(n),
        [dy.shape().clone(), dy.shape().clone()],
        [
            Arg::In(a.mem()),
            Arg::In(b.mem()),
            Arg::In(dy.mem()),
            Arg::Index(binary_code(op).0),
            Arg::Index(index(op.name(), "n", n)?),
        ],
    )
}

/// `y = x ∘ c` for a kernel `(float* y, const float* x, float c, long long n)`.
fn with_scalar<D: Device>(
    kernel: &'static str,
    op: &'static str,
    x: &CudaTensor<D>,
    c: f32,
) -> Result<CudaTensor<D>> {
    let n = x.len();
    launch_new(
        ELEMENTWISE.kernel(kernel),
        Launch::for_items(n),
        x.shape().clone(),
        [
            Arg::In(x.mem()),
            Arg::F32(c),
            Arg::Index(index(op, "n", n)?),
        ],
    )
}

/// `c · x` (`c` rounded to `f32`).
pub fn scale<D: Device>(x: &CudaTensor<D>, c: f64) -> Result<CudaTensor<D>> {
    // tl_scale(float* y, const float* x, float c, long long n)
    with_scalar("tl_scale", desc::SCALE.name, x, c as f32)
}

/// `x + c` (`c` rounded to `f32`).
pub fn add_scalar<D: Device>(x: &CudaTensor<D>, c: f64) -> Result<CudaTensor<D>> {
    // tl_ew_add_scalar(float* y, const float* x, float c, long long n)
    with_scalar("tl_ew_add_scalar", desc::ADD_SCALAR.name, x, c as f32)
}

/// The bounds as the kernels take them: an absent bound is an infinite one (the same result:
/// `x < −inf` never holds and NaN stays NaN).
fn clamp_bounds(min: Option<f64>, max: Option<f64>) -> (f32, f32) {
    (
        min.unwrap_or(f64::NEG_INFINITY) as f32,
        max.unwrap_or(f64::INFINITY) as f32,
    )
}

pub fn clamp<D: Device>(
    x: &CudaTensor<D>,
    min: Option<f64>,
    max: Option<f64>,
) -> Result<CudaTensor<D>> {
    let (lo, hi) = clamp_bounds(min, max);
    let n = x.len();
    // tl_ew_clamp(float* y, const float* x, float lo, float hi, long long n)
    launch_new(
        ELEMENTWISE.kernel("tl_ew_clamp"),
        Launch::for_items(n),
        x.shape().clone(),
        [
            Arg::In(x.mem()),
            Arg::F32(lo),
            Arg::F32(hi),
            Arg::Index(index(desc::CLAMP.name, "n", n)?),
        ],
    )
}

pub fn clamp_vjp<D: Device>(
    x: &CudaTensor<D>,
    dy: &CudaTensor<D>,
    min: Option<f64>,
    max: Option<f64>,
) -> Result<CudaTensor<D>> {
    same_len(desc::CLAMP.name, x, dy)?;
    let (lo, hi) = clamp_bounds(min, max);
    let n = dy.len();
    // tl_ew_clamp_vjp(float* dx, const float* x, const float* dy, float lo, float hi,
    //                 long long n)
    launch_new(
        ELEMENTWISE.kernel("tl_ew_clamp_vjp"),
        Launch::for_items(n),
        dy.shape().clone(),
        [
            Arg::In(x.mem()),
            Arg::In(dy.mem()),
            Arg::F32(lo),
            Arg::F32(hi),
            Arg::Index(index(desc::CLAMP.name, "n", n)?),
        ],
    )
}

/// The same buffer under another shape of the same size (reshape, detach: no copy).
pub fn relabel<D: Device>(x: &CudaTensor<D>, shape: &Shape) -> Result<CudaTensor<D>> {
    x.share(shape.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_clamp_bounds_are_infinite() {
        assert_eq!(clamp_bounds(None, None), (f32::NEG_INFINITY, f32::INFINITY));
        assert_eq!(clamp_bounds(Some(-1.5), Some(1e300)), (-1.5, f32::INFINITY));
    }
}
