//! The PyTorch expression of an op: its row's template ([`OpDesc::torch`]) filled in with the
//! node's operands and attributes as Python. `torchlean export-torch` writes one per node; the
//! templates are the one place that says which PyTorch call has torchlean's semantics.
//!
//! A template's placeholders, each `{name}`:
//! - an operand name of the row (`{x}`, `{lhs}`, `{weight}`): that operand's Python value, a
//!   graph parent or a payload tensor;
//! - `{parents}`: every parent, comma-separated (a variadic op such as `concat`);
//! - `{draw}`: a random op's uniform draws (the value after the payload tensors);
//! - an attribute key: its value as a Python literal (an optional number left out is its
//!   default, a bound left out is `None`, a choice is a string, a shape or list a tuple);
//! - a field of [`Op::context_values`] (`batch_norm2d_nchw_eval`'s `eps`).
//!
//! A template may call a helper of [`HELPERS`] (Python defined beside the module that uses it),
//! where no single PyTorch call has the semantics.

use super::desc::{AttrMut, AttrValue, AttrVisitor, OpDesc};
use super::Op;
use crate::error::{Result, SpecError};

/// Python functions a template may call, by name, with their source: defined once in a module
/// whose expressions call them ([`helpers_of`]).
pub const HELPERS: &[(&str, &str)] = &[
    (
        "batch_norm_eval",
        r#"
def _per_channel(t, x):
    return t.reshape((1, -1) + (1,) * (x.dim() - 2))


def batch_norm_eval(x, gamma, beta, mean, var, eps):
    """(x - mean) / sqrt(max(var, 0) + eps) * gamma + beta, channels on axis 1 (torchlean's
    batch_norm2d_nchw_eval: F.batch_norm(training=False), with gradients for mean and var)."""
    var = torch.clamp(var, min=0)
    return ((x - _per_channel(mean, x)) / torch.sqrt(_per_channel(var, x) + eps)
            * _per_channel(gamma, x) + _per_channel(beta, x))
"#,
    ),
    (
        "causal_attention",
        r#"
def causal_attention(qkv, heads):
    """nanoGPT's causal self-attention between c_attn and c_proj (torchlean's causal_attention):
    qkv [..., T, 3C] holds queries, keys and values side by side, each of the `heads` heads
    hd = C/heads consecutive columns of each; position i attends to j <= i with weights
    softmax_j(q_i.k_j/sqrt(hd)); the output [..., T, C] has the heads side by side."""
    *lead, t, c3 = qkv.shape
    c = c3 // 3
    q, k, v = (p.reshape(*lead, t, heads, c // heads).transpose(-3, -2)
               for p in qkv.split(c, dim=-1))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(-3, -2).reshape(*lead, t, c)
"#,
    ),
    (
        "clamp",
        r#"
def clamp(x, min, max):
    """torch.clamp, and the identity when both bounds are absent (torchlean's clamp;
    torch.clamp refuses to be called without a bound)."""
    if min is None and max is None:
        return x.clone()
    return torch.clamp(x, min=min, max=max)
"#,
    ),
];

/// The helpers of [`HELPERS`] that `desc`'s template calls.
pub fn helpers_of(desc: &OpDesc) -> impl Iterator<Item = &'static str> + '_ {
    HELPERS
        .iter()
        .filter(|(name, _)| calls(desc.torch, name))
        .map(|(_, source)| *source)
}

/// Whether `template` calls the function `name` (not a method or a longer name ending in it).
fn calls(template: &str, name: &str) -> bool {
    template.match_indices(name).any(|(i, _)| {
        let before = template[..i].chars().next_back();
        let after = template[i + name.len()..].chars().next();
        after == Some('(') && !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
    })
}

/// The PyTorch expression of `op` on the Python values of its graph parents and of its payload
/// tensors followed by its draws (a random op's). An operand the template names that the
/// caller did not pass is an [`SpecError::Arity`]; a placeholder that names nothing the op has
/// is [`SpecError::TorchTemplate`] (a row's mistake: a test expands every row).
pub fn expression(op: &Op, parents: &[String], payload: &[String]) -> Result<String> {
    let desc = op.desc();
    let attrs = python_attrs(op);
    let context = op.context_values();
    let n_parents = desc.operands.len() - desc.payload;
    let missing = |got: usize| SpecError::Arity {
        op: desc.name,
        expected: format!("{} operand(s) for its PyTorch expression", got + 1),
        got,
    };
    let resolve = |key: &str| -> Result<String> {
        if key == "parents" {
            return Ok(parents.join(", "));
        }
        if key == "draw" {
            return payload
                .get(desc.payload)
                .cloned()
                .ok_or_else(|| missing(payload.len()));
        }
        if let Some(i) = desc.operands.iter().position(|o| *o == key) {
            return if i < n_parents {
                parents
                    .get(i)
                    .cloned()
                    .ok_or_else(|| missing(parents.len()))
            } else {
                let j = i - n_parents;
                payload
                    .get(j)
                    .cloned()
                    .ok_or_else(|| missing(payload.len()))
            };
        }
        if let Some((_, v)) = attrs.iter().find(|(k, _)| *k == key) {
            return Ok(v.clone());
        }
        if let Some((_, v)) = context.iter().find(|(k, _)| *k == key) {
            return Ok(match v {
                AttrValue::Float(f) => py_float(*f),
                other => other.to_string(),
            });
        }
        Err(SpecError::TorchTemplate {
            op: desc.name,
            placeholder: key.to_string(),
        })
    };
    let mut out = String::new();
    let mut rest = desc.torch;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close =
            rest[open..]
                .find('}')
                .map(|c| open + c)
                .ok_or_else(|| SpecError::TorchTemplate {
                    op: desc.name,
                    placeholder: rest[open..].to_string(),
                })?;
        out.push_str(&resolve(&rest[open + 1..close])?);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Every attribute of `op` as a Python literal, by key.
fn python_attrs(op: &Op) -> Vec<(&'static str, String)> {
    struct Python(Vec<(&'static str, String)>);
    impl AttrVisitor for Python {
        fn visit(&mut self, key: &'static str, value: AttrMut<'_>) {
            let text = match value {
                AttrMut::Int(v) | AttrMut::IntOr { value: v, .. } => v.to_string(),
                AttrMut::Seed(v) => v.to_string(),
                AttrMut::Float(v) | AttrMut::FloatOr { value: v, .. } => py_float(*v),
                AttrMut::OptFloat { value, default } => py_float(value.unwrap_or(default)),
                AttrMut::MaybeFloat(v) => v.map_or("None".into(), py_float),
                AttrMut::Shape(s) => py_tuple(s.dims()),
                AttrMut::List(l) => py_tuple(l),
                AttrMut::Choice { value, .. } => format!("\"{value}\""),
            };
            self.0.push((key, text));
        }
    }
    let mut p = Python(Vec::new());
    op.clone().visit_attrs(&mut p);
    p.0
}

/// A Python float literal that reads back as `x` (`float("inf")` and `float("nan")` for the
/// non-finite ones).
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        "float(\"nan\")".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "float(\"inf\")"
        } else {
            "-float(\"inf\")"
        }
        .into()
    } else {
        format!("{x:?}")
    }
}

/// A Python tuple of ints: `()`, `(3,)`, `(2, 3)`.
pub fn py_tuple(dims: &[usize]) -> String {
    match dims {
        [d] => format!("({d},)"),
        _ => {
            let parts: Vec<String> = dims.iter().map(usize::to_string).collect();
            format!("({})", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ops::desc::OPS;
    use crate::Arity;

    /// Every row with an op has a template, and every placeholder of it resolves.
    #[test]
    fn every_row_expands() {
        for d in OPS {
            let Some(op) = d.prototype() else {
                assert!(d.torch.is_empty(), "{}", d.name);
                continue;
            };
            assert!(!d.torch.is_empty(), "{} has no PyTorch expression", d.name);
            let parents = match d.parents() {
                Arity::Exact(n) | Arity::AtLeast(n) => n,
            };
            let a: Vec<String> = (0..parents).map(|i| format!("v{i}")).collect();
            let p: Vec<String> = (0..=d.payload).map(|i| format!("p{i}")).collect();
            let e = expression(&op, &a, &p).unwrap_or_else(|e| panic!("{}: {e}", d.name));
            assert!(!e.contains(['{', '}']), "{}: {e}", d.name);
        }
    }

    #[test]
    fn operand_names_and_attribute_keys_are_distinct() {
        for d in OPS {
            for a in d.attributes() {
                assert!(
                    !d.operands.contains(&a.key) && !["parents", "draw"].contains(&a.key),
                    "{}: `{}` is an operand and an attribute",
                    d.name,
                    a.key
                );
            }
        }
    }

    #[test]
    fn attributes_are_python_literals() {
        let clamp = Op::Clamp {
            min: Some(-1.5),
            max: None,
        };
        let e = expression(&clamp, &["v0".into()], &[]).unwrap();
        assert_eq!(e, "clamp(v0, -1.5, None)");
        let ln = Op::LayerNorm { axis: 1, eps: None };
        let e = expression(&ln, &["v0".into()], &[]).unwrap();
        assert_eq!(e, "F.layer_norm(v0, v0.shape[1:], eps=1e-6)");
        let cat = Op::Concat { axis: 2 };
        let e = expression(&cat, &["v0".into(), "v1".into(), "v2".into()], &[]).unwrap();
        assert_eq!(e, "torch.cat([v0, v1, v2], dim=2)");
        let attn = Op::CausalAttention { heads: 2 };
        let e = expression(&attn, &["v0".into()], &[]).unwrap();
        assert_eq!(e, "causal_attention(v0, 2)");
        assert_eq!(py_float(1e-5), "1e-5");
        assert_eq!(py_float(f64::INFINITY), "float(\"inf\")");
        assert_eq!(py_float(f64::NEG_INFINITY), "-float(\"inf\")");
        assert_eq!(py_float(f64::NAN), "float(\"nan\")");
        assert_eq!(py_tuple(&[]), "()");
        assert_eq!(py_tuple(&[3]), "(3,)");
        assert_eq!(py_tuple(&[2, 3]), "(2, 3)");
    }

    #[test]
    fn a_missing_operand_is_an_arity_error() {
        let e = expression(&Op::MatMul, &["v0".into()], &[]).unwrap_err();
        assert!(matches!(e, SpecError::Arity { op: "matmul", .. }), "{e}");
    }

    #[test]
    fn helpers_are_found_by_call() {
        use crate::ops::desc::{BATCH_NORM2D_NCHW_EVAL, CAUSAL_ATTENTION, CLAMP, MATMUL};
        assert_eq!(helpers_of(&CLAMP).count(), 1);
        assert_eq!(helpers_of(&BATCH_NORM2D_NCHW_EVAL).count(), 1);
        assert_eq!(helpers_of(&CAUSAL_ATTENTION).count(), 1);
        assert_eq!(helpers_of(&MATMUL).count(), 0);
        assert!(!calls("torch.clamp(x)", "clamp"));
        assert!(!calls("my_clamp(x)", "clamp"));
    }
}
