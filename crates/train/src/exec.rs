//! The two ways a training step runs (`--backend`): the eager [`Session`] (record on a tape as
//! the ops run, releasing sweep) and the compiled program (record once per batch size with the
//! [`Recorder`](torchlean_nn::Recorder), then per step [`Recorded::step`]: `compile` the GraphData on the batch and run
//! the releasing sweep over its tape). Both hold the parameters as engine values and hand the optimizer mutable
//! access to them; both compute the same numbers bit for bit at a fixed thread count (the
//! models have no repeated operands, so the compiled graph's local sums are single terms).

use crate::error::Result;
use crate::model::Classify;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use torchlean_nn::{LeafKind, Mode, Ops, Recorded, Session, Sweep};
use torchlean_runtime::{AnomalyMode, Kernels};
use torchlean_spec::{Reduction, Tensor};

/// Which interpreter runs a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpreter {
    /// `nn::Session`: eager tape, releasing sweep.
    #[default]
    Eager,
    /// `nn::Recorder` once per batch size, `compile` + releasing sweep per step.
    Compiled,
}

impl Interpreter {
    pub fn name(self) -> &'static str {
        match self {
            Interpreter::Eager => "eager",
            Interpreter::Compiled => "compiled",
        }
    }
}

/// The labels of a batch as the `[N]` data input cross-entropy takes.
pub fn labels_tensor(labels: &[usize]) -> Result<Tensor<f64>> {
    Ok(Tensor::new(
        [labels.len()],
        labels.iter().map(|&l| l as f64).collect(),
    )?)
}

/// One step's result: the loss and every parameter's gradient, by name.
#[derive(Debug)]
pub struct StepOut<V> {
    pub loss: f64,
    pub grads: BTreeMap<String, V>,
}

/// An interpreter that owns the parameters and runs steps on engine `V`.
pub trait Exec<V: Kernels, M: Classify> {
    /// Loss and parameter gradients of `model` on the batch `(x, labels)`, at the current
    /// parameters; nothing of the step stays alive afterwards except the gradients.
    fn step(&mut self, model: &M, x: &Tensor<f64>, labels: &[usize]) -> Result<StepOut<V>>;

    /// The parameters, by name.
    fn params(&self) -> &BTreeMap<String, V>;

    /// The parameters, mutable (an optimizer step; no buffer is shared at this point).
    fn params_mut(&mut self) -> Vec<(&str, &mut V)>;

    /// Anomaly mode for the steps (evaluation is not checked: it computes nothing a step
    /// did not).
    fn set_anomaly_mode(&mut self, mode: AnomalyMode);

    /// `(summed loss, correct predictions)` of `model` on `(x, labels)`, without gradients.
    fn evaluate(&mut self, model: &M, x: &Tensor<f64>, labels: &[usize]) -> Result<(f64, usize)>;
}

/// Index of the largest logit of each row (the first on ties).
pub fn argmax_rows(logits: &Tensor<f64>) -> Vec<usize> {
    let c = logits.shape().dims().last().copied().unwrap_or(1).max(1);
    logits
        .data()
        .chunks(c)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &v)| {
                    if v > bv {
                        (i, v)
                    } else {
                        (bi, bv)
                    }
                })
                .0
        })
        .collect()
}

/// Evaluation through an eager session (both backends: a forward pass is the same program).
fn evaluate_in<V: Kernels, M: Classify>(
    s: &mut Session<V>,
    model: &M,
    x: &Tensor<f64>,
    labels: &[usize],
) -> Result<(f64, usize)> {
    let labels_t = labels_tensor(labels)?;
    let out = s.no_grad(|s| {
        let xv = s.input("x", x, false)?;
        let lv = s.input("labels", &labels_t, false)?;
        let logits = model.logits(s, &xv, Mode::Eval)?;
        let loss = s.apply(
            torchlean_spec::Op::CrossEntropy {
                reduction: Reduction::Sum,
            },
            &[&logits, &lv],
        )?;
        Ok((s.value_f64(&loss)?, s.value_f64(&logits)?))
    });
    s.reset();
    let (loss, logits) = out?;
    let correct = argmax_rows(&logits)
        .iter()
        .zip(labels)
        .filter(|(p, l)| p == l)
        .count();
    Ok((*loss.item()?, correct))
}

/// The eager backend.
#[derive(Debug)]
pub struct EagerExec<V: Kernels> {
    session: Session<V>,
}

impl<V: Kernels> EagerExec<V> {
    /// A session holding `params`.
    pub fn new(params: &BTreeMap<String, Tensor<f64>>) -> Result<Self> {
        let mut session = Session::new();
        session.load_params(params)?;
        Ok(EagerExec { session })
    }

    /// The class id (the largest logit's, the first on ties) of each example of `x`.
    pub fn predict<M: Classify>(&mut self, model: &M, x: &Tensor<f64>) -> Result<Vec<usize>> {
        let s = &mut self.session;
        let logits = s.no_grad(|s| {
            let xv = s.input("x", x, false)?;
            let logits = model.logits(s, &xv, Mode::Eval)?;
            s.value_f64(&logits)
        });
        s.reset();
        Ok(argmax_rows(&logits?))
    }
}

impl<V: Kernels, M: Classify> Exec<V, M> for EagerExec<V> {
    fn step(&mut self, model: &M, x: &Tensor<f64>, labels: &[usize]) -> Result<StepOut<V>> {
        let s = &mut self.session;
        let run = (|| {
            let xv = s.input("x", x, false)?;
            let lv = s.input("labels", &labels_tensor(labels)?, false)?;
            let loss = model.loss(s, &xv, &lv)?;
            s.backward(&loss, Sweep::Releasing)?;
            let value = *s.value_f64(&loss)?.item()?;
            Ok::<_, crate::TrainError>(value)
        })();
        let grads = s.take_param_grads();
        s.reset();
        Ok(StepOut { loss: run?, grads })
    }

    fn params(&self) -> &BTreeMap<String, V> {
        self.session.params()
    }

    fn set_anomaly_mode(&mut self, mode: AnomalyMode) {
        self.session.set_anomaly_mode(mode);
    }

    fn params_mut(&mut self) -> Vec<(&str, &mut V)> {
        self.session.params_mut().collect()
    }

    fn evaluate(&mut self, model: &M, x: &Tensor<f64>, labels: &[usize]) -> Result<(f64, usize)> {
        evaluate_in(&mut self.session, model, x, labels)
    }
}

/// A program recorded for one batch size: its GraphData and which leaf is what.
#[derive(Debug)]
struct Program {
    rec: Recorded,
    /// The leaf of the batch input, of the labels, and of each parameter (by name).
    x: usize,
    labels: usize,
    params: Vec<(usize, String)>,
}

/// The compiled backend.
#[derive(Debug)]
pub struct CompiledExec<V: Kernels> {
    params: BTreeMap<String, V>,
    programs: HashMap<usize, Program>,
    anomaly: AnomalyMode,
}

impl<V: Kernels> CompiledExec<V> {
    pub fn new(params: &BTreeMap<String, Tensor<f64>>) -> Result<Self> {
        let params = params
            .iter()
            .map(|(k, t)| Ok((k.clone(), V::from_f64(t)?)))
            .collect::<Result<_>>()?;
        Ok(CompiledExec {
            params,
            programs: HashMap::new(),
            anomaly: AnomalyMode::Off,
        })
    }
}

impl Program {
    /// The program for batches of `n` in `cache`, recorded on first use.
    fn cached<'c, M: Classify>(
        cache: &'c mut HashMap<usize, Program>,
        model: &M,
        n: usize,
    ) -> Result<&'c Program> {
        Ok(match cache.entry(n) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(Program::record(model, n)?),
        })
    }

    /// Records `model`'s loss on a batch of `n` ([`Classify::record_loss`]).
    fn record<M: Classify>(model: &M, n: usize) -> Result<Program> {
        let rec = model.record_loss(n)?;
        let leaf = |name: &str| rec.leaves.iter().position(|l| l.name == name);
        let (Some(x), Some(labels)) = (leaf("x"), leaf("labels")) else {
            return Err(crate::TrainError::Invariant {
                what: "the recorded program has its `x` and `labels` inputs",
            });
        };
        let params = rec
            .leaves
            .iter()
            .enumerate()
            .filter(|(_, l)| l.kind == LeafKind::Param)
            .map(|(i, l)| (i, l.name.clone()))
            .collect();
        Ok(Program {
            rec,
            x,
            labels,
            params,
        })
    }
}

impl<V: Kernels, M: Classify> Exec<V, M> for CompiledExec<V> {
    fn step(&mut self, model: &M, x: &Tensor<f64>, labels: &[usize]) -> Result<StepOut<V>> {
        let n = labels.len();
        let p = Program::cached(&mut self.programs, model, n)?;
        let mut inputs = Vec::with_capacity(p.rec.leaves.len());
        for (i, leaf) in p.rec.leaves.iter().enumerate() {
            let v = if i == p.x {
                V::from_f64(x)?
            } else if i == p.labels {
                V::from_f64(&labels_tensor(labels)?)?
            } else if leaf.kind == LeafKind::Param {
                self.params
                    .get(&leaf.name)
                    .ok_or_else(|| torchlean_nn::NnError::NoSuchParam {
                        name: leaf.name.clone(),
                    })?
                    .clone()
            } else {
                V::from_f64(&leaf.value)?
            };
            inputs.push(v);
        }
        let is_param = |i: usize| p.params.iter().any(|(j, _)| *j == i);
        let (output, mut grads) = p.rec.step_with::<V>(inputs, is_param, self.anomaly)?;
        let loss = *output.to_f64()?.item()?;
        output.drop();
        let grads = p
            .params
            .iter()
            .filter_map(|(i, name)| grads[*i].take().map(|g| (name.clone(), g)))
            .collect();
        Ok(StepOut { loss, grads })
    }

    fn params(&self) -> &BTreeMap<String, V> {
        &self.params
    }

    fn set_anomaly_mode(&mut self, mode: AnomalyMode) {
        self.anomaly = mode;
    }

    fn params_mut(&mut self) -> Vec<(&str, &mut V)> {
        self.params
            .iter_mut()
            .map(|(k, v)| (k.as_str(), v))
            .collect()
    }

    fn evaluate(&mut self, model: &M, x: &Tensor<f64>, labels: &[usize]) -> Result<(f64, usize)> {
        // the parameters as they are, in their dtype and place (shared, not copied); the
        // session goes with the evaluation, so the next update finds every buffer unique
        let mut eval = Session::new();
        eval.set_params(&self.params)?;
        evaluate_in(&mut eval, model, x, labels)
    }
}
