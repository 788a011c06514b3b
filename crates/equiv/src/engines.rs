//! Engines under test: every engine is run through the same checks.

use crate::claims::{semantic_claims, Claim, Observation};
use crate::error::EquivError;
use crate::gen::GenCase;
use crate::measure::{Measure, Mode};
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use torchlean_compiled::{exec_graph_of_ir, run_grad, GradResult};
use torchlean_engine_suite::{check_case, cotangent, Conditioning, OpCase, Tolerance};
use torchlean_ir::{Graph, Payload};
use torchlean_runtime::{forward, vjp, Kernels, RuntimeError, Saved};
use torchlean_spec::{Op, Tensor};

/// An engine as the checker sees it (object safe, so the list of engines is data).
pub trait EngineUnderTest: Send + Sync {
    /// The engine/dtype label (`Kernels::ENGINE`).
    fn name(&self) -> &'static str;
    /// How the engine is compared with the reference engine node by node.
    fn mode(&self) -> Mode;
    /// Whether the engine computes in `f64` (finite differences run on such engines).
    fn is_f64(&self) -> bool;
    /// The runtime-path claims on this engine.
    fn semantic(&self, case: &GenCase) -> Vec<Observation>;
    /// Node by node against the reference engine, and (f64 engines) VJPs against finite
    /// differences of the engine's own forward.
    fn per_node(&self, case: &GenCase, fd: bool) -> Vec<Observation>;
    /// Eager == compiled on every model of the zoo (float engines; the models are not
    /// algebraic).
    fn zoo(&self) -> Vec<Observation>;
    /// The fixed cases' claims on this engine (local sums on every path; SPEC's defaults).
    fn fixed(&self) -> Vec<Observation>;
    /// Output and gradients of a whole graph (one tensor per graph input), in f64.
    fn run_grad(
        &self,
        g: &Graph,
        p: &Payload,
        x: &[Tensor<f64>],
        seed: Option<&Tensor<f64>>,
    ) -> Result<GradResult, EquivError>;
}

/// The engine of value type `V`, compared in `mode`.
pub struct EngineOf<V> {
    mode: Mode,
    /// The conditioning part of [`Mode::Measured`], measured through the engine on first use.
    conditioning: OnceLock<Option<Conditioning>>,
    _v: PhantomData<fn() -> V>,
}

impl<V: Kernels> std::fmt::Debug for EngineOf<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOf")
            .field("engine", &V::ENGINE)
            .field("mode", &self.mode)
            .finish()
    }
}

impl<V: Kernels> EngineOf<V> {
    /// An engine that must agree with the reference bit for bit (a reference engine, or a
    /// variant of one that claims the reference's accumulation order).
    pub fn bitwise() -> Self {
        EngineOf {
            mode: Mode::Bitwise,
            conditioning: OnceLock::new(),
            _v: PhantomData,
        }
    }

    /// An engine compared node by node at a norm-wise relative tolerance plus the reference's
    /// conditioning at the engine's precision (`torchlean_engine_suite::Conditioning`).
    pub fn with_tolerance(rel: f64) -> Self {
        EngineOf {
            mode: Mode::Measured(rel),
            conditioning: OnceLock::new(),
            _v: PhantomData,
        }
    }

    /// The node-by-node tolerance of [`EngineUnderTest::per_node`].
    fn tolerance(&self) -> Tolerance {
        match self.mode {
            Mode::Tolerance(t) => Tolerance::norm_wise(t),
            Mode::Measured(t) => Tolerance {
                rel: t,
                conditioning: *self.conditioning.get_or_init(Conditioning::of::<V>),
            },
            _ => Tolerance::norm_wise(0.0),
        }
    }
}

/// Each lowered node as `(IR kind, op case with the reference operand values)`.
pub type NodeCases = Vec<(&'static str, OpCase)>;

/// `(IR kind, op case)` for every lowered node, with operand values from the reference engine in f64.
pub fn reference_nodes(case: &GenCase) -> Result<NodeCases, EquivError> {
    let exec = exec_graph_of_ir(&case.graph, &case.payload)?;
    let inputs: Vec<Tensor<f64>> = exec.inputs(&case.inputs, &case.payload)?;
    let ctx = exec.graph.eval(inputs)?;
    let mut kind_at = vec!["input"; exec.graph.len()];
    for (id, &pos) in exec.ir_positions.iter().enumerate() {
        kind_at[pos] = case.graph.nodes[id].kind.name();
    }
    let n = exec.graph.n_inputs();
    let nodes = exec
        .graph
        .nodes()
        .iter()
        .enumerate()
        .map(|(k, node)| {
            (
                kind_at[n + k],
                OpCase {
                    name: format!("node %{}", n + k),
                    op: node.op.clone(),
                    inputs: node.args.iter().map(|&a| ctx[a].clone()).collect(),
                },
            )
        })
        .collect();
    Ok(nodes)
}

impl<V: Kernels> EngineUnderTest for EngineOf<V> {
    fn name(&self) -> &'static str {
        V::ENGINE
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn is_f64(&self) -> bool {
        V::ENGINE.ends_with("f64")
    }

    fn semantic(&self, case: &GenCase) -> Vec<Observation> {
        semantic_claims::<V>(case)
    }

    fn zoo(&self) -> Vec<Observation> {
        if V::EXACT {
            return Vec::new();
        }
        crate::claims::zoo_claims::<V>()
    }

    fn fixed(&self) -> Vec<Observation> {
        let mut out = crate::fixed::local_sum_claims::<V>();
        out.extend(crate::fixed::spec_default_claims(self));
        out
    }

    fn per_node(&self, case: &GenCase, fd: bool) -> Vec<Observation> {
        let mut out = Vec::new();
        let nodes = match reference_nodes(case) {
            Ok(n) => n,
            Err(e) => {
                out.push(Observation {
                    claim: Claim::EngineVsReference,
                    engine: V::ENGINE.into(),
                    mode: self.mode,
                    kinds: case.kinds(),
                    measure: Measure::FAIL,
                    detail: Some(Arc::new(e)),
                });
                return out;
            }
        };
        let tol = self.tolerance();
        for (kind, oc) in &nodes {
            let r = check_case::<V>(oc, tol);
            out.push(Observation {
                claim: Claim::EngineVsReference,
                engine: V::ENGINE.into(),
                mode: self.mode,
                kinds: vec![kind],
                measure: Measure {
                    max_abs: r.max_rel,
                    max_rel: r.max_rel,
                    of_tolerance: r.of_tolerance,
                    pass: r.pass(),
                },
                detail: (!r.pass()).then(|| {
                    Arc::new(EquivError::EngineVsReference {
                        engine: V::ENGINE,
                        node: oc.name.clone(),
                        op: oc.op.name(),
                        failures: r.failures.clone(),
                    })
                }),
            });
            if fd && self.is_f64() {
                if let Some((m, detail)) = fd_check::<V>(&oc.name, &oc.op, &oc.inputs) {
                    out.push(Observation {
                        claim: Claim::VjpVsFiniteDifferences,
                        engine: V::ENGINE.into(),
                        mode: Mode::Measured(FD_TOLERANCE),
                        kinds: vec![kind],
                        measure: m,
                        detail: detail.filter(|_| !m.pass).map(Arc::new),
                    });
                }
            }
        }
        out
    }

    fn run_grad(
        &self,
        g: &Graph,
        p: &Payload,
        x: &[Tensor<f64>],
        seed: Option<&Tensor<f64>>,
    ) -> Result<GradResult, EquivError> {
        Ok(run_grad::<V>(g, p, x, seed)?)
    }
}

/// Norm-wise relative tolerance of a VJP against central finite differences.
pub const FD_TOLERANCE: f64 = 1e-5;
/// Elements checked per operand (evenly spread), to bound the cost on larger operands.
const FD_SAMPLES: usize = 24;

/// `⟨c, op(inputs)⟩` on engine `V`, and the sum of its terms' magnitudes `Σ |cᵢ · yᵢ|` (what its rounding scales with).
fn objective<V: Kernels>(
    op: &Op,
    inputs: &[Tensor<f64>],
    cot: &Tensor<f64>,
) -> Result<(f64, f64), RuntimeError> {
    let vals: Vec<V> = inputs.iter().map(V::from_f64).collect::<Result<_, _>>()?;
    let args: Vec<&V> = vals.iter().collect();
    let y = forward::<V>(op, &args).and_then(|y| y.to_f64())?;
    let terms = y.data().iter().zip(cot.data()).map(|(a, b)| a * b);
    Ok(terms.fold((0.0, 0.0), |(sum, size), t| (sum + t, size + t.abs())))
}

/// Operand `k`'s cotangent from `op`'s VJP on engine `V` at `inputs` (zeros for a structural
/// zero).
fn vjp_of<V: Kernels>(
    op: &Op,
    inputs: &[Tensor<f64>],
    cot: &V,
    k: usize,
) -> Result<Tensor<f64>, RuntimeError> {
    let vals: Vec<V> = inputs.iter().map(V::from_f64).collect::<Result<_, _>>()?;
    let args: Vec<&V> = vals.iter().collect();
    let out = forward::<V>(op, &args)?;
    let mut grads = vjp::<V>(op, &Saved::for_op(op, &args, &out), cot)?;
    match grads.get_mut(k).and_then(Option::take) {
        Some(g) => Ok(g.to_f64()?),
        None => Ok(Tensor::zeros(inputs[k].shape().clone())?),
    }
}

/// The VJP of `op` on engine `V` against central finite differences of `V`'s forward, at the
/// given point: Richardson's extrapolation of the steps `h` and `h/2`, within
/// [`FD_TOLERANCE`] norm-wise plus what the finite difference itself may get wrong — the gap
/// between the two steps' differences (where the function curves hard, as a layer norm of a
/// nearly constant row does) and the objective's rounding over the step (where the output
/// dwarfs the step). An element is skipped where the derivative is not a derivative: at a kink
/// (the one-sided differences disagree, by much or by as much at half the step: relu/abs and
/// leaky_relu at 0, max ties, pooling ties), at a step of the value (a change over half the
/// step as large as over the step, on either side: sign at 0) and at a point
/// where the VJP itself jumps (the VJP a step to either side differs from the VJP there: a
/// convention, such as PyTorch's `clamp` gradient 1 at a bound, and 1 even where `min == max`
/// makes the function constant; PyTorch's cases check conventions, not finite differences).
/// Data operands (`cross_entropy`'s class ids, whose values are validated, not differentiated)
/// are skipped too. `None` when there is nothing to check (no differentiable operand). The
/// detail (when the check fails) names `node` (the op's node, for the message) and the first
/// element that disagrees, or the error that stopped the check.
pub fn fd_check<V: Kernels>(
    node: &str,
    op: &Op,
    inputs: &[Tensor<f64>],
) -> Option<(Measure, Option<EquivError>)> {
    if matches!(
        op,
        Op::Detach | Op::RandUniform { .. } | Op::BernoulliMask { .. }
    ) || inputs.is_empty()
    {
        return None;
    }
    let run = || -> Result<(Measure, Option<EquivError>), RuntimeError> {
        let vals: Vec<V> = inputs.iter().map(V::from_f64).collect::<Result<_, _>>()?;
        let args: Vec<&V> = vals.iter().collect();
        let out = forward::<V>(op, &args)?;
        let cot = cotangent(out.shape(), 0xfd);
        let cot_v = V::from_f64(&cot)?;
        let grads = vjp::<V>(op, &Saved::for_op(op, &args, &out), &cot_v)?;
        let mut worst = Measure::OK;
        let mut where_ = None;
        for (k, g) in grads.iter().enumerate() {
            // a data operand (class ids) is not a point of a smooth function: never perturbed
            if op.desc().data.contains(&k) {
                continue;
            }
            // a structural zero must also be a zero derivative
            let g = match g {
                Some(g) => g.to_f64()?,
                None => Tensor::zeros(inputs[k].shape().clone())?,
            };
            let n = inputs[k].len();
            let step = (n / FD_SAMPLES).max(1);
            let scale = g.data().iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for i in (0..n).step_by(step) {
                let x0 = inputs[k].data()[i];
                let h = 1e-6 * x0.abs().max(1.0);
                let moved = |d: f64| {
                    let mut ins = inputs.to_vec();
                    ins[k].data_mut()[i] = x0 + d;
                    ins
                };
                let at = |d: f64| objective::<V>(op, &moved(d), &cot).map(|(f, _)| f);
                let (f0, size) = objective::<V>(op, &moved(0.0), &cot)?;
                let (fp, fm) = (at(h)?, at(-h)?);
                let (fp2, fm2) = (at(h / 2.0)?, at(-h / 2.0)?);
                let forward = (fp - f0) / h;
                let backward = (f0 - fm) / h;
                let central = (fp - fm) / (2.0 * h);
                let differs = |a: f64, b: f64| (a - b).abs() > 1e-3 * (1.0 + b.abs());
                // the one-sided differences disagree by about h·f″ at a smooth point, halving
                // with the step, and by the jump of the slope at a kink, whatever the step: a
                // disagreement that does not halve (beyond the objective's rounding) is a kink
                // however close its two slopes are
                let rounding = 16.0 * f64::EPSILON * size / h;
                let jump = (forward - backward).abs();
                let jump_half = ((fp2 - f0) - (f0 - fm2)).abs() / (h / 2.0);
                let kink = jump > 8.0 * rounding && jump_half > 0.75 * jump;
                // a step in the value itself (sign at 0): the change over h/2 is as large as
                // over h on that side, where a smooth function's halves
                let stepped = |change: f64, half: f64| {
                    change.abs() > 8.0 * rounding * h && half.abs() > 0.75 * change.abs()
                };
                let discontinuous = stepped(fp - f0, fp2 - f0) || stepped(f0 - fm, f0 - fm2);
                if !central.is_finite() || differs(forward, backward) || kink || discontinuous {
                    continue; // a kink, a step or a singular point: no derivative here
                }
                let here = g.data()[i];
                let vjp_beside =
                    |d: f64| vjp_of::<V>(op, &moved(d), &cot_v, k).map(|t| t.data()[i]);
                let (right, left) = (vjp_beside(h)?, vjp_beside(-h)?);
                if !(right.is_finite() && left.is_finite())
                    || differs(right, here)
                    || differs(left, here)
                {
                    continue; // the VJP jumps here: its value is a convention
                }
                // Richardson: the central difference at h/2 and the extrapolation of the two
                // (error O(h⁴)); their gap bounds what the finite difference itself gets
                // wrong where the function curves hard (a layer norm of a nearly constant row),
                // and the objective's rounding, divided by the step, what it loses where the
                // output dwarfs the step (`x·Wᵀ + b` at |x·Wᵀ| = 1e30: b's step vanishes)
                let half = (fp2 - fm2) / h;
                let fd = half + (half - central) / 3.0;
                let allowed = FD_TOLERANCE * scale + (half - central).abs() + rounding;
                let err = (fd - here).abs();
                let m = Measure {
                    max_abs: err,
                    max_rel: err / scale,
                    of_tolerance: if err == 0.0 { 0.0 } else { err / allowed },
                    pass: err <= allowed,
                };
                if !m.pass && worst.pass {
                    where_ = Some(EquivError::FiniteDifference {
                        node: node.to_string(),
                        op: op.name(),
                        operand: k,
                        element: i,
                        finite_difference: fd,
                        vjp: here,
                    });
                }
                worst = worst.merge(m);
            }
        }
        Ok((worst, where_))
    };
    Some(run().unwrap_or_else(|source| {
        let e = EquivError::Node {
            node: node.to_string(),
            op: op.name(),
            source,
        };
        (Measure::FAIL, Some(e))
    }))
}
