//! Claims on fixed, hand-made cases that do not compare a rule with itself: every path checked
//! against an expected value written out here from SPEC and `docs/ARCHITECTURE.md`, never
//! computed by the code under test.
//!
//! - **The local-sum rule** ([`local_sum_claims`]): a node repeating a parent
//!   (`concat(a, a, a)`, `add(a, a)`, `mul_elem(x, x)`) sends that parent its per-argument
//!   cotangents folded in argument order, first as is, then `acc + c` (ARCHITECTURE,
//!   "Local sums"; the eager tape's "first contribution stored as is, later ones
//!   `existing + new`" gives the same order here, the parent having no other reader). The
//!   expected gradient is that fold written out in the engine's scalar; the cotangents are
//!   chosen so that any other order of the three `concat` terms rounds differently.
//! - **SPEC's written defaults** ([`SPEC_DEFAULTS`], [`spec_default_claims`]): the defaults as
//!   literals; a graph leaving the attribute out must evaluate (output and every gradient)
//!   bitwise equal to the same graph with the literal written, on each engine.

use crate::claims::{Claim, Observation};
use crate::engines::EngineUnderTest;
use crate::error::EquivError;
use crate::measure::{compare_f64, Measure, Mode};
use serde_json::{json, Value};
use std::sync::Arc;
use torchlean_compiled::{
    backprop_all_ctx, compile, compile_with, exec_graph_of_ir, run_grad, CompileMode, SavedGraph,
};
use torchlean_ir::{Graph, Node, OpKind, Payload};
use torchlean_nn::{IrProgram, Ops, Program, Session, Sweep};
use torchlean_runtime::{GradZero, Kernels};
use torchlean_spec::ops::desc;
use torchlean_spec::{BinaryOp, Op, Reduction, Shape, Tensor};

/// A one-op graph: input `%0` of `in_shape`, then `op` on `parents` (output `%1`).
fn one_op(
    in_shape: Shape,
    op: Op,
    parents: Vec<usize>,
    payload: &[(&str, Tensor<f64>)],
) -> (Graph, Payload) {
    let mut shapes: Vec<Shape> = parents.iter().map(|_| in_shape.clone()).collect();
    shapes.extend(payload.iter().map(|(_, t)| t.shape().clone()));
    let out = op
        .infer_shape(&shapes)
        .expect("the fixed cases are well-shaped");
    let graph = Graph::new(
        0,
        1,
        vec![
            Node {
                id: 0,
                kind: OpKind::Input,
                parents: vec![],
                shape: in_shape,
            },
            Node {
                id: 1,
                kind: OpKind::Op(op),
                parents,
                shape: out,
            },
        ],
    );
    let mut p = Payload::new();
    for (name, t) in payload {
        p.insert(1, name, t.clone());
    }
    (graph, p)
}

/// Rounds to the engine's scalar. Adding or multiplying `f32` values in `f64` and rounding the
/// result to `f32` is the `f32` operation (53 ≥ 2·24 + 2 bits: double rounding is innocuous).
fn round(f32: bool, v: f64) -> f64 {
    if f32 {
        v as f32 as f64
    } else {
        v
    }
}

/// A local-sum case: the graph, its input, the output seed and the input's expected gradient.
#[derive(Clone, Debug)]
pub struct LocalSumCase {
    pub name: &'static str,
    pub graph: Graph,
    pub input: Tensor<f64>,
    pub seed: Tensor<f64>,
    pub expected: Tensor<f64>,
}

/// The input `a` of every local-sum case, and the seed's leading part.
const A: [f64; 4] = [0.5, 1.25, -0.75, 2.0];
const C0: [f64; 4] = [1.0, -1.0, 2.0, -0.5];

/// The cases, for an engine computing in `f32` or `f64`.
pub fn local_sum_cases(f32: bool) -> Vec<LocalSumCase> {
    let r = |v: f64| round(f32, v);
    let eps = if f32 {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    };
    // below half an ulp of `c0` each, above it together: `(c0 + c1) + c2` is `c0`, and
    // `c0 + (c1 + c2)` or `(c2 + c1) + c0` is not
    let c1: Vec<f64> = C0.iter().map(|c| 0.375 * eps * c).collect();
    let t = |v: Vec<f64>| Tensor::new([v.len()], v).expect("a vector");
    let input = t(A.to_vec());
    let mut cases = Vec::new();
    // concat(a, a, a): the three slices of the cotangent, folded in argument order
    let (graph, _) = one_op(Shape::from([4]), Op::Concat { axis: 0 }, vec![0, 0, 0], &[]);
    let seed: Vec<f64> = C0.iter().chain(&c1).chain(&c1).copied().collect();
    let expected = (0..4).map(|i| r(r(C0[i] + c1[i]) + c1[i])).collect();
    cases.push(LocalSumCase {
        name: "concat(a, a, a)",
        graph,
        input: input.clone(),
        seed: t(seed),
        expected: t(expected),
    });
    // add(a, a): both cotangents are the seed
    let (graph, _) = one_op(Shape::from([4]), Op::Binary(BinaryOp::Add), vec![0, 0], &[]);
    cases.push(LocalSumCase {
        name: "add(a, a)",
        graph,
        input: input.clone(),
        seed: t(C0.to_vec()),
        expected: t(C0.iter().map(|c| r(c + c)).collect()),
    });
    // mul_elem(x, x): each cotangent is seed·x
    let (graph, _) = one_op(Shape::from([4]), Op::Binary(BinaryOp::Mul), vec![0, 0], &[]);
    let expected = (0..4)
        .map(|i| {
            let p = r(C0[i] * A[i]);
            r(p + p)
        })
        .collect();
    cases.push(LocalSumCase {
        name: "mul_elem(x, x)",
        graph,
        input,
        seed: t(C0.to_vec()),
        expected: t(expected),
    });
    cases
}

/// The local-sum claim on engine `V`: each case's input gradient through every path (eager tape
/// dense and releasing, compiled tape dense, dense-from and full-context, the releasing
/// `run_grad`, `backprop_all_ctx`, every `SavedGraph` pass) bitwise against its written-out
/// expected value. One observation per case.
pub fn local_sum_claims<V: Kernels>() -> Vec<Observation> {
    if V::EXACT {
        return Vec::new();
    }
    let f32 = V::ENGINE.ends_with("f32");
    local_sum_cases(f32)
        .into_iter()
        .map(|case| {
            let kinds = vec![case.graph.nodes[1].kind.name()];
            let (measure, detail) = match local_sum_paths::<V>(&case) {
                Ok(found) => found,
                Err(e) => (Measure::FAIL, Some(e)),
            };
            Observation {
                claim: Claim::LocalSum,
                engine: V::ENGINE.into(),
                mode: Mode::Bitwise,
                kinds,
                measure,
                detail: if measure.pass {
                    None
                } else {
                    detail.map(Arc::new)
                },
            }
        })
        .collect()
}

/// Every path's input gradient on one case, compared bitwise with the expected one.
fn local_sum_paths<V: Kernels>(
    case: &LocalSumCase,
) -> Result<(Measure, Option<EquivError>), EquivError> {
    let payload = Payload::new();
    let exec = exec_graph_of_ir(&case.graph, &payload)?;
    let inputs: Vec<V> = exec.inputs(&case.input, &payload)?;
    let (x, out) = (exec.ir_positions[0], exec.output);
    let seed = V::from_f64(&case.seed)?;
    let (tape, values) = compile(&exec.graph, inputs.clone())?;
    let mut seed_all: Vec<V> = values.iter().map(GradZero::zeros_like).collect();
    seed_all[out] = seed.clone();
    let mut got: Vec<(&'static str, Tensor<f64>)> = Vec::new();
    let mut put = |what: &'static str, v: &V| -> Result<(), EquivError> {
        got.push((what, v.to_f64()?));
        Ok(())
    };
    put(
        "compiled tape, backward_dense_all",
        &tape.backward_dense_all(out, seed.clone())?[x],
    )?;
    put(
        "compiled tape, backward_dense_from",
        &tape.backward_dense_from(seed_all.clone())?[x],
    )?;
    let (full, _) = compile_with(&exec.graph, inputs.clone(), CompileMode::FullContext)?;
    put(
        "full-context tape, backward_dense_from",
        &full.backward_dense_from(seed_all.clone())?[x],
    )?;
    put(
        "backprop_all_ctx",
        &backprop_all_ctx(&exec.graph, inputs.clone(), seed_all.clone())?[x],
    )?;
    let saved = SavedGraph::of_graph(&exec.graph, inputs)?;
    put(
        "SavedGraph::backprop_dense",
        &saved.backprop_dense(seed_all.clone())?[x],
    )?;
    put(
        "SavedGraph::backprop_array",
        &saved.backprop_array(seed_all.clone())?[x],
    )?;
    put(
        "SavedGraph::backprop_stored",
        &saved.backprop_stored(seed_all.clone())?[x],
    )?;
    put(
        "SavedGraph::backprop_inputs_array",
        &saved.backprop_inputs_array(seed_all)?[x],
    )?;
    put(
        "SavedGraph::backprop_from",
        &saved.backprop_from(out, seed)?[x],
    )?;
    let program = IrProgram {
        graph: &case.graph,
        payload: &payload,
        naming: torchlean_nn::ParamNaming::ByNode,
    };
    for (what, sweep) in [
        ("eager tape, dense", Sweep::DenseAll),
        ("eager tape, releasing", Sweep::Releasing),
    ] {
        let mut session = Session::<V>::new();
        let sx = session.input("x", &case.input, true)?;
        let y = program.run(&mut session, &sx)?;
        session.backward_with_seed(&y, &case.seed, sweep)?;
        match session.grad(&sx)? {
            Some(g) => put(what, g)?,
            None => return Err(EquivError::EmptyGraph),
        }
    }
    let released = run_grad::<V>(&case.graph, &payload, &case.input, Some(&case.seed))?;
    got.push(("run_grad (releasing sweep)", released.grad_input().clone()));
    let mut measure = Measure::OK;
    let mut detail = None;
    for (what, g) in got {
        let m = compare_f64(&g, &case.expected, Mode::Bitwise);
        if !m.pass && detail.is_none() {
            detail = Some(EquivError::LocalSum {
                case: case.name,
                path: what,
                got: g.data().to_vec(),
                want: case.expected.data().to_vec(),
            });
        }
        measure = measure.merge(m);
    }
    Ok((measure, detail))
}

/// A default SPEC writes down, as a literal.
#[derive(Clone, Copy, Debug)]
pub struct SpecDefault {
    /// The kind (the descriptor's wire name).
    pub kind: fn() -> &'static str,
    /// The attribute's key on the wire.
    pub attr: &'static str,
    /// Its default, as SPEC writes it.
    pub literal: Literal,
}

/// A default's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Literal {
    Number(f64),
    Text(&'static str),
}

impl Literal {
    fn json(self) -> Value {
        match self {
            Literal::Number(x) => json!(x),
            Literal::Text(s) => json!(s),
        }
    }
}

/// SPEC's written defaults (section 3's kinds list and the extension-kinds table), keyed by
/// kind: `layernorm` "optional `eps`, default 1e-6"; `batch_norm2d_nchw_train` "`eps`
/// (default `1e-5`)"; `gelu` "`approximate`: `"none"` (default)"; `cross_entropy`
/// "`reduction`: `"mean"` (default)"; and for the extensions that follow PyTorch, PyTorch's
/// documented defaults: `F.leaky_relu`'s `negative_slope=0.01`, `F.elu`'s `alpha=1.0`.
pub const SPEC_DEFAULTS: [SpecDefault; 6] = [
    SpecDefault {
        kind: || desc::LAYERNORM.name,
        attr: "eps",
        literal: Literal::Number(1e-6),
    },
    SpecDefault {
        kind: || desc::BATCH_NORM2D_NCHW_TRAIN.name,
        attr: "eps",
        literal: Literal::Number(1e-5),
    },
    SpecDefault {
        kind: || desc::GELU.name,
        attr: "approximate",
        literal: Literal::Text("none"),
    },
    SpecDefault {
        kind: || desc::CROSS_ENTROPY.name,
        attr: "reduction",
        literal: Literal::Text("mean"),
    },
    SpecDefault {
        kind: || desc::LEAKY_RELU.name,
        attr: "negative_slope",
        literal: Literal::Number(0.01),
    },
    SpecDefault {
        kind: || desc::ELU.name,
        attr: "alpha",
        literal: Literal::Number(1.0),
    },
];

/// The graph a default is checked on (the attribute at its default; small values, so that an
/// `eps` matters), its payload and input.
fn default_case(kind: &str) -> (Graph, Payload, Tensor<f64>) {
    let x = |dims: &[usize], v: Vec<f64>| Tensor::new(Shape::new(dims.to_vec()), v).expect("sized");
    let small = vec![0.01, 0.02, -0.015, 0.003, 0.0, -0.02, 0.011, -0.004];
    if kind == desc::LAYERNORM.name {
        let (g, p) = one_op(
            Shape::from([2, 4]),
            Op::LayerNorm { axis: 1, eps: None },
            vec![0],
            &[],
        );
        (g, p, x(&[2, 4], small))
    } else if kind == desc::BATCH_NORM2D_NCHW_TRAIN.name {
        let gamma = x(&[2], vec![1.5, -0.5]);
        let beta = x(&[2], vec![0.25, 0.125]);
        let (g, p) = one_op(
            Shape::from([2, 2, 1, 2]),
            Op::BatchNormTrain {
                channels: 2,
                eps: None,
            },
            vec![0],
            &[("gamma", gamma), ("beta", beta)],
        );
        (g, p, x(&[2, 2, 1, 2], small))
    } else if let Some(op @ Op::Unary(_)) = desc::lookup(kind).and_then(|d| d.prototype()) {
        // gelu, leaky_relu, elu: both signs, and both sides of the kinks
        let (g, p) = one_op(Shape::from([8]), op, vec![0], &[]);
        (
            g,
            p,
            x(&[8], vec![-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 3.0]),
        )
    } else {
        let target = x(&[2], vec![0.0, 3.0]);
        let (g, p) = one_op(
            Shape::from([2, 4]),
            Op::CrossEntropy {
                reduction: Reduction::Mean,
            },
            vec![0],
            &[("target", target)],
        );
        (
            g,
            p,
            x(&[2, 4], vec![0.5, -1.0, 2.0, 0.25, 1.5, 0.0, -0.5, 1.0]),
        )
    }
}

/// The graph's JSON with `attr` on node 1 removed (`None`) or set to `value`, read back.
fn with_attr(g: &Graph, attr: &str, value: Option<Value>) -> Result<Graph, EquivError> {
    let mut j = g.to_json();
    if let Some(node) = j
        .get_mut("nodes")
        .and_then(|n| n.get_mut(1))
        .and_then(Value::as_object_mut)
    {
        match value {
            Some(v) => {
                node.insert(attr.to_string(), v);
            }
            None => {
                node.remove(attr);
            }
        }
    }
    Ok(Graph::from_json(&j)?)
}

/// The defaults claim on one engine: per default, the graph without the attribute and the graph
/// with SPEC's literal evaluate (output, input and payload gradients) bitwise equal.
pub fn spec_default_claims(engine: &dyn EngineUnderTest) -> Vec<Observation> {
    SPEC_DEFAULTS
        .iter()
        .map(|d| {
            let kind = (d.kind)();
            let (measure, detail) = match default_agrees(engine, kind, d) {
                Ok(None) => (Measure::OK, None),
                Ok(Some(e)) | Err(e) => (Measure::FAIL, Some(e)),
            };
            Observation {
                claim: Claim::SpecDefaults,
                engine: engine.name().into(),
                mode: Mode::Bitwise,
                kinds: vec![kind],
                measure,
                detail: detail.map(Arc::new),
            }
        })
        .collect()
}

/// `None` when the omitted and the literal graphs agree bit for bit, else why not.
fn default_agrees(
    engine: &dyn EngineUnderTest,
    kind: &'static str,
    d: &SpecDefault,
) -> Result<Option<EquivError>, EquivError> {
    let (g, p, x) = default_case(kind);
    let omitted = with_attr(&g, d.attr, None)?;
    let literal = with_attr(&g, d.attr, Some(d.literal.json()))?;
    let seed = crate::claims::seed_values(&g.nodes[1].shape, 71, false);
    let a = engine.run_grad(&omitted, &p, std::slice::from_ref(&x), Some(&seed))?;
    let b = engine.run_grad(&literal, &p, std::slice::from_ref(&x), Some(&seed))?;
    let same = compare_f64(&a.output, &b.output, Mode::Bitwise).pass
        && compare_f64(a.grad_input(), b.grad_input(), Mode::Bitwise).pass
        && a.grad_payload.to_json() == b.grad_payload.to_json();
    Ok((!same).then(|| EquivError::SpecDefault {
        kind,
        attr: d.attr,
        literal: format!("{:?}", d.literal),
        omitted: a.output.data().to_vec(),
        written: b.output.data().to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::engines::EngineOf;

    #[test]
    fn the_concat_case_tells_the_orders_apart() {
        // the expected fold differs from every other order of the three terms, in both scalars,
        // so a reversed (or reassociated) local sum fails the claim
        for f32 in [false, true] {
            let eps = if f32 {
                f32::EPSILON as f64
            } else {
                f64::EPSILON
            };
            let r = |v: f64| round(f32, v);
            for &c0 in &C0 {
                let c1 = 0.375 * eps * c0;
                let forward = r(r(c0 + c1) + c1);
                assert_eq!(forward, c0);
                assert_ne!(r(r(c1 + c1) + c0), forward, "f32: {f32}, c0 {c0}");
                assert_ne!(r(c0 + r(c1 + c1)), forward);
            }
        }
    }

    #[test]
    fn the_reference_engines_follow_the_written_out_local_sums_on_every_path() {
        for o in local_sum_claims::<Tensor<f64>>()
            .into_iter()
            .chain(local_sum_claims::<Tensor<f32>>())
        {
            assert!(o.measure.pass, "{:?}", o.detail);
        }
    }

    #[test]
    fn a_dropped_contribution_fails_the_claim() {
        // `add`'s VJP dropping its second operand's cotangent: `add(a, a)` fails
        use torchlean_faults::{fault, Faulty};
        let dropped = local_sum_claims::<Faulty<Tensor<f64>, { fault::DROP_CONTRIBUTION }>>();
        let failed: Vec<&str> = dropped
            .iter()
            .filter(|o| !o.measure.pass)
            .map(|o| o.kinds[0])
            .collect();
        assert_eq!(failed, ["add"]);
    }

    #[test]
    fn omitted_defaults_evaluate_as_spec_s_literals_on_the_reference_engines() {
        let f64e = EngineOf::<Tensor<f64>>::bitwise();
        let f32e = EngineOf::<Tensor<f32>>::with_tolerance(1e-5);
        for e in [&f64e as &dyn EngineUnderTest, &f32e] {
            let obs = spec_default_claims(e);
            assert_eq!(obs.len(), SPEC_DEFAULTS.len());
            for o in obs {
                assert!(o.measure.pass, "{}: {:?}", o.kinds[0], o.detail);
            }
        }
    }

    #[test]
    fn a_different_literal_would_be_caught() {
        // the check can fail: each case tells its default from a neighbouring value
        let f64e = EngineOf::<Tensor<f64>>::bitwise();
        let others = [
            Literal::Number(1e-5),
            Literal::Number(1e-3),
            Literal::Text("tanh"),
            Literal::Text("sum"),
            Literal::Number(0.02),
            Literal::Number(0.5),
        ];
        for (d, other) in SPEC_DEFAULTS.iter().zip(others) {
            let kind = d.kind;
            let wrong = SpecDefault {
                literal: other,
                ..*d
            };
            assert!(
                default_agrees(&f64e, kind(), &wrong).unwrap().is_some(),
                "{}: {other:?} is indistinguishable from the default",
                kind()
            );
        }
    }
}
