//! The eager interpreter (TorchLean's `EagerSession`): every op runs now on engine `V` and is
//! recorded on the session's tape (`runtime::record`), parameters are leaves, and `backward`
//! runs one of the runtime's sweeps. Ownership follows SPEC 2.1: [`Session::reset`] releases
//! every value of the tape, and the releasing sweep frees each activation gradient once used.

use crate::error::{NnError, Result};
use crate::ops::{check_call, new_owner, BufferUpdate, Ops, Scopes, Var};
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet};
use torchlean_compiled::BUDGET_ELEM_BYTES;
use torchlean_runtime::{check_forward, forward, record, AnomalyMode, Kernels, Tape};
use torchlean_spec::{Budget, NodeCost, Op, Pass, Shape, Tally, Tensor};

/// Which reverse sweep [`Session::backward`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sweep {
    /// `backward_dense_all`: a gradient for every node, then those of the leaves are kept.
    DenseAll,
    /// `backward_sparse`: each gradient is released as soon as its VJP has run; only the
    /// parameters' and watched inputs' are kept (the training default: lowest peak memory).
    #[default]
    Releasing,
}

/// What [`Session::backward_observed`] reports after each node of the sweep.
#[derive(Debug)]
pub enum Swept<'g, V> {
    /// Parameter `name`'s gradient, final: no later node of the sweep adds to it.
    Param { name: &'g str, grad: &'g V },
    /// Any other node.
    Node,
}

/// The seed of a loss's backward: 1, for a loss of one element, made on the engine (no
/// upload); any other output is refused ([`NnError::NonScalarBackward`], as PyTorch refuses it).
fn unit_seed<V: Kernels>(loss: &Var) -> Result<V> {
    let numel = loss.shape.size();
    if numel != 1 {
        return Err(NnError::NonScalarBackward {
            shape: loss.shape.clone(),
            numel,
        });
    }
    Ok(V::full(&loss.shape, 1.0)?)
}

/// An eager session on engine `V`.
pub struct Session<V: Kernels> {
    owner: u64,
    tape: Tape<V>,
    scopes: Scopes,
    /// Parameter values by full name; they outlive [`Session::reset`].
    params: BTreeMap<String, V>,
    /// Buffer values by full name (no gradient); they outlive [`Session::reset`].
    buffers: BTreeMap<String, V>,
    /// The leaf of each parameter on the current tape.
    param_leaves: BTreeMap<String, usize>,
    /// Tape ids whose gradient `backward` keeps (parameters, inputs that require grad).
    watched: BTreeSet<usize>,
    /// Gradients of the last `backward`, by tape id.
    grads: BTreeMap<usize, V>,
    /// Depth of `no_grad` scopes.
    no_grad: usize,
    /// Random keys handed out (they go on across resets: each step draws new masks).
    keys: u64,
    /// Anomaly mode: every value and gradient contribution checked for NaN and infinities.
    anomaly: AnomalyMode,
    /// The memory budget of one tape.
    budget: Budget,
    /// The current tape's memory estimate against `budget` (restarted by `reset`).
    tally: Tally,
}

impl<V: Kernels> std::fmt::Debug for Session<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("engine", &V::ENGINE)
            .field("nodes", &self.tape.size())
            .field("params", &self.params.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<V: Kernels> Default for Session<V> {
    fn default() -> Self {
        Session::new()
    }
}

impl<V: Kernels> Session<V> {
    /// An empty session under the process's memory budget ([`Budget::process_default`]:
    /// `--max-memory`, else sized to the machine).
    pub fn new() -> Self {
        Session::with_budget(Budget::process_default())
    }

    /// An empty session whose tape may take `budget`: each leaf and each op is counted before
    /// its value is made ([`torchlean_spec::budget`]: value, gradient unless in
    /// [`Session::no_grad`], and the op's `workspace_elements`, at 8 bytes per element as on
    /// the compiled path), and the one that would take the tape over it fails with
    /// [`NnError::OverBudget`]. [`Session::reset`] starts the count again.
    pub fn with_budget(budget: Budget) -> Self {
        Session {
            owner: new_owner(),
            tape: Tape::empty(),
            scopes: Scopes::default(),
            params: BTreeMap::new(),
            buffers: BTreeMap::new(),
            param_leaves: BTreeMap::new(),
            watched: BTreeSet::new(),
            grads: BTreeMap::new(),
            no_grad: 0,
            keys: 0,
            anomaly: AnomalyMode::Off,
            budget,
            tally: Tally::new(budget, BUDGET_ELEM_BYTES),
        }
    }

    /// Turns anomaly mode on or off (PyTorch's `detect_anomaly`, naming the node). With
    /// [`AnomalyMode::Detect`], each op's output and each leaf is checked as it is made, and the
    /// first NaN or infinite one fails the call with a `RuntimeError::Anomaly` naming its tape
    /// node, op, layer (the node's name), shapes and parents, forward; `backward` stops at the
    /// first node whose VJP makes a non-finite contribution from a finite gradient, backward.
    /// Off (the default), nothing is checked and nothing is named.
    pub fn set_anomaly_mode(&mut self, mode: AnomalyMode) {
        self.anomaly = mode;
    }

    pub fn anomaly_mode(&self) -> AnomalyMode {
        self.anomaly
    }

    /// Runs `f` with gradient recording off: its ops run but record nothing to differentiate
    /// (their nodes are constants).
    pub fn no_grad<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        self.no_grad += 1;
        let r = f(self);
        self.no_grad -= 1;
        r
    }

    /// The value of `v` on the engine.
    pub fn value(&self, v: &Var) -> Result<&V> {
        self.own(v)?;
        Ok(self.tape.get_value(v.index)?)
    }

    /// The value of `v` as `f64` data.
    pub fn value_f64(&self, v: &Var) -> Result<Tensor<f64>> {
        Ok(self.value(v)?.to_f64()?)
    }

    /// Differentiates `loss`, a value of one element (seeded with 1), with `sweep`, keeping the
    /// gradients of the parameters and of the inputs that require grad ([`Session::grad`]).
    /// An output of more than one element is refused ([`NnError::NonScalarBackward`], as
    /// PyTorch refuses it): give its cotangent to [`Session::backward_with_seed`].
    pub fn backward(&mut self, loss: &Var, sweep: Sweep) -> Result<()> {
        self.own(loss)?;
        let seed = unit_seed(loss)?;
        self.backward_from(loss, seed, sweep)
    }

    /// [`Session::backward`] from the cotangent `seed` of `out` (its shape).
    pub fn backward_with_seed(
        &mut self,
        out: &Var,
        seed: &Tensor<f64>,
        sweep: Sweep,
    ) -> Result<()> {
        self.own(out)?;
        if seed.shape() != &out.shape {
            return Err(NnError::SeedShape {
                want: out.shape.clone(),
                got: seed.shape().clone(),
            });
        }
        let seed = V::from_f64(seed)?;
        self.backward_from(out, seed, sweep)
    }

    /// The backward of `loss` (this session's) from its cotangent `seed` on the engine.
    fn backward_from(&mut self, loss: &Var, seed: V, sweep: Sweep) -> Result<()> {
        self.release_grads();
        let mode = self.anomaly;
        match sweep {
            Sweep::DenseAll => {
                let all = self.tape.backward_dense_all_with(loss.index, seed, mode)?;
                for (id, g) in all.into_iter().enumerate() {
                    if self.watched.contains(&id) {
                        self.grads.insert(id, g);
                    } else {
                        g.drop();
                    }
                }
            }
            Sweep::Releasing => self.releasing_sweep(loss, seed, |_, _| ())?,
        }
        Ok(())
    }

    /// [`Session::backward`] with the releasing sweep, telling `observe` about each parameter's
    /// gradient the moment it is final ([`Swept::Param`]: the sweep has passed every use of
    /// the parameter) and about every other node swept ([`Swept::Node`]), in the sweep's
    /// order. The gradients kept are [`Session::backward`]'s, bit for bit. A data-parallel
    /// trainer sends each bucket of gradients to the other ranks while the sweep goes on.
    pub fn backward_observed(
        &mut self,
        loss: &Var,
        mut observe: impl FnMut(Swept<'_, V>),
    ) -> Result<()> {
        self.own(loss)?;
        let seed = unit_seed(loss)?;
        self.release_grads();
        let names: BTreeMap<usize, String> = self
            .param_leaves
            .iter()
            .map(|(name, &id)| (id, name.clone()))
            .collect();
        self.releasing_sweep(loss, seed, |id, grad| match (names.get(&id), grad) {
            (Some(name), Some(grad)) => observe(Swept::Param { name, grad }),
            _ => observe(Swept::Node),
        })
    }

    /// The releasing sweep from `out` seeded with `seed`, `observe` told of each node swept
    /// ([`torchlean_runtime::Tape::backward_sparse_observed`]); keeps the watched gradients.
    fn releasing_sweep(
        &mut self,
        out: &Var,
        seed: V,
        observe: impl FnMut(usize, Option<&V>),
    ) -> Result<()> {
        let watched = &self.watched;
        let kept = self.tape.backward_sparse_observed(
            vec![(out.index, seed)],
            |id| watched.contains(&id),
            self.anomaly,
            observe,
        )?;
        self.keep_grads(kept);
        Ok(())
    }

    fn keep_grads(&mut self, mut kept: torchlean_runtime::SparseGrads<V>) {
        for id in kept.ids() {
            if let Some(g) = kept.take(id) {
                self.grads.insert(id, g);
            }
        }
        kept.release();
    }

    /// The gradient of `v` from the last [`Session::backward`] (`None`: not reached, or `v` is
    /// neither a parameter nor an input that requires grad).
    pub fn grad(&self, v: &Var) -> Result<Option<&V>> {
        self.own(v)?;
        Ok(self.grads.get(&v.index))
    }

    /// The gradient of parameter `name` from the last backward pass.
    pub fn param_grad(&self, name: &str) -> Option<&V> {
        self.param_leaves
            .get(name)
            .and_then(|id| self.grads.get(id))
    }

    /// Every parameter, by full name (PyTorch's `state_dict` names).
    pub fn params(&self) -> &BTreeMap<String, V> {
        &self.params
    }

    /// Every parameter's value, mutable, by full name (an optimizer's in-place step; the set of
    /// names and the shapes are the model's, so a step changes values only). Call it after
    /// [`Session::reset`], which releases the tape's references, so no buffer is shared and an
    /// in-place update copies nothing.
    pub fn params_mut(&mut self) -> impl Iterator<Item = (&str, &mut V)> {
        self.params.iter_mut().map(|(k, v)| (k.as_str(), v))
    }

    /// Sets parameters from `f64` data by full name (a checkpoint's, or another engine's
    /// values), before or between steps: the model's next `param` call gets them, and its shape
    /// must then match. A name the session already holds must keep its shape.
    pub fn load_params(&mut self, values: &BTreeMap<String, Tensor<f64>>) -> Result<()> {
        for (name, t) in values {
            self.check_param_shape(name, t.shape())?;
            self.put_param(name, V::from_f64(t)?);
        }
        Ok(())
    }

    /// Sets parameters to engine values as they are (no conversion: on a device they stay
    /// there, and a buffer is shared, not copied), by full name; a parameter the session
    /// already has must keep its shape.
    pub fn set_params(&mut self, values: &BTreeMap<String, V>) -> Result<()> {
        for (name, v) in values {
            self.check_param_shape(name, v.shape())?;
            self.put_param(name, v.clone());
        }
        Ok(())
    }

    /// A parameter the session holds keeps its shape.
    fn check_param_shape(&self, name: &str, want: &Shape) -> Result<()> {
        match self.params.get(name) {
            Some(old) if old.shape() != want => Err(NnError::ParamShape {
                name: name.to_string(),
                have: old.shape().clone(),
                want: want.clone(),
            }),
            _ => Ok(()),
        }
    }

    fn put_param(&mut self, name: &str, v: V) {
        if let Some(old) = self.params.insert(name.to_string(), v) {
            old.drop();
        }
    }

    /// Moves the gradients of the parameters out of the last backward pass, by full name (a
    /// parameter the loss did not reach has none). Other gradients stay for [`Session::grad`].
    pub fn take_param_grads(&mut self) -> BTreeMap<String, V> {
        let mut out = BTreeMap::new();
        for (name, id) in &self.param_leaves {
            if let Some(g) = self.grads.remove(id) {
                out.insert(name.clone(), g);
            }
        }
        out
    }

    /// The parameters on the current tape, in the order the releasing sweep finishes their
    /// gradients ([`Swept::Param`]): the last one used first comes first.
    pub fn params_in_sweep_order(&self) -> Vec<&str> {
        let mut by_leaf: Vec<(usize, &str)> = self
            .param_leaves
            .iter()
            .map(|(name, &id)| (id, name.as_str()))
            .collect();
        by_leaf.sort_unstable_by_key(|&(id, _)| std::cmp::Reverse(id));
        by_leaf.into_iter().map(|(_, name)| name).collect()
    }

    /// PyTorch's `state_dict`: every parameter and buffer by its full name, as `f64` data.
    pub fn state_dict(&self) -> Result<BTreeMap<String, Tensor<f64>>> {
        self.params
            .iter()
            .chain(&self.buffers)
            .map(|(k, v)| Ok((k.clone(), v.to_f64()?)))
            .collect()
    }

    /// The names and shapes [`Session::state_dict`] has: every parameter and buffer the model
    /// has made so far (run it once, a forward pass in [`Session::no_grad`] will do, before
    /// loading a `state_dict` into it).
    pub fn state_shapes(&self) -> Vec<(String, Vec<usize>)> {
        self.params
            .iter()
            .chain(&self.buffers)
            .map(|(k, v)| (k.clone(), v.shape().dims().to_vec()))
            .collect()
    }

    /// PyTorch's `load_state_dict`: sets every parameter and buffer from `state` by its full
    /// name (PyTorch's). With `strict`, the names must be exactly the model's; without, names
    /// missing from `state` keep their values and names the model lacks are ignored. Either
    /// way every shape must be the model's. One [`NnError::StateDictNames`] lists every
    /// problem at once, and on any error nothing is changed.
    pub fn load_state_dict(
        &mut self,
        state: &BTreeMap<String, Tensor<f64>>,
        strict: bool,
    ) -> Result<()> {
        self.load_state_dict_from(state, strict, None)
    }

    /// [`Session::load_state_dict`] from a safetensors file, as
    /// `safetensors.torch.save_file(model.state_dict(), path)` writes it: F32 or F64 tensors
    /// (PyTorch's batch-norm `num_batches_tracked` counters, `int64`, are skipped: our batch
    /// norm keeps none). Errors name the file.
    pub fn load_state_dict_file(
        &mut self,
        path: impl AsRef<std::path::Path>,
        strict: bool,
    ) -> Result<()> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| NnError::StateDictRead {
            path: path.to_path_buf(),
            source,
        })?;
        let names: Vec<String> = self.state_shapes().into_iter().map(|(n, _)| n).collect();
        let state = crate::state::read_state_dict(&bytes, path, |counter| {
            crate::state::is_batch_norm_counter(counter, names.iter().map(String::as_str))
        })?;
        self.load_state_dict_from(&state, strict, Some(path))
    }

    fn load_state_dict_from(
        &mut self,
        state: &BTreeMap<String, Tensor<f64>>,
        strict: bool,
        path: Option<&std::path::Path>,
    ) -> Result<()> {
        let expected = self.state_shapes();
        let report = crate::state::NameReport::compare(
            expected.iter().map(|(n, s)| (n.as_str(), s.as_slice())),
            state.iter().map(|(n, t)| (n.as_str(), t.shape().dims())),
        );
        let report = if strict { report } else { report.lenient() };
        if !report.is_empty() {
            return Err(NnError::StateDictNames {
                path: path.map(std::path::Path::to_path_buf),
                report,
            });
        }
        // every value converted before any is replaced: an engine error changes nothing
        let mut converted = Vec::new();
        for (name, t) in state {
            let is_param = self.params.contains_key(name);
            if is_param || self.buffers.contains_key(name) {
                converted.push((name.clone(), is_param, V::from_f64(t)?));
            }
        }
        for (name, is_param, v) in converted {
            let map = if is_param {
                &mut self.params
            } else {
                &mut self.buffers
            };
            if let Some(old) = map.insert(name, v) {
                old.drop();
            }
        }
        Ok(())
    }

    /// Every buffer, by full name (`running_mean`, `running_var`, …).
    pub fn buffers(&self) -> &BTreeMap<String, V> {
        &self.buffers
    }

    /// A parameter's value, to update it in place (an optimizer step between resets).
    pub fn param_mut(&mut self, name: &str) -> Result<&mut V> {
        self.params
            .get_mut(name)
            .ok_or_else(|| NnError::NoSuchParam {
                name: name.to_string(),
            })
    }

    /// Releases every value of the tape and every gradient; parameters stay. Values made
    /// before the reset are refused afterwards.
    pub fn reset(&mut self) {
        self.release_grads();
        self.tape.clear();
        self.param_leaves.clear();
        self.watched.clear();
        self.owner = new_owner();
        self.tally = Tally::new(self.budget, BUDGET_ELEM_BYTES);
    }

    /// A model input given as an engine value (a batch already on the engine): [`Ops::input`]
    /// without the conversion from `f64` data, which on a training batch costs as much as a
    /// small layer. Cloning a value shares its buffer, so a batch can be fed step after step.
    pub fn input_value(&mut self, name: &str, value: V, requires_grad: bool) -> Result<Var> {
        self.leaf(value, requires_grad, "input", name)
    }

    /// Number of nodes on the tape.
    pub fn tape_len(&self) -> usize {
        self.tape.size()
    }

    fn release_grads(&mut self) {
        for (_, g) in std::mem::take(&mut self.grads) {
            g.drop();
        }
    }

    fn own(&self, v: &Var) -> Result<()> {
        if v.owner != self.owner {
            return Err(NnError::ForeignValue {
                op: "value",
                layer: self.scopes.path(),
                operand: 0,
            });
        }
        Ok(())
    }

    fn var(&self, index: usize) -> Result<Var> {
        Ok(Var {
            index,
            shape: self.tape.get_value(index)?.shape().clone(),
            owner: self.owner,
        })
    }

    /// A leaf; in anomaly mode named `name` and checked (`kind`: what it is, for the report).
    fn leaf(
        &mut self,
        value: V,
        requires_grad: bool,
        kind: &'static str,
        name: &str,
    ) -> Result<Var> {
        let requires_grad = requires_grad && self.no_grad == 0;
        let cost = NodeCost::new(value.shape().size(), 0, self.pass());
        if let Err(e) = self.charge(kind, value.shape(), cost) {
            value.drop();
            return Err(e);
        }
        let name = self.anomaly.is_on().then(|| name.to_string());
        let id = self.tape.leaf(value, requires_grad, name);
        self.check_anomaly(id, kind)?;
        if requires_grad {
            self.watched.insert(id);
        }
        self.var(id)
    }

    /// Anomaly mode's forward check of tape node `id` (nothing when off).
    fn check_anomaly(&self, id: usize, kind: &'static str) -> Result<()> {
        if !self.anomaly.is_on() {
            return Ok(());
        }
        check_forward(&self.tape, id, Some(kind)).map_err(|source| NnError::Runtime {
            layer: self.scopes.path(),
            source,
        })
    }

    /// What the budget counts for a node made now: gradients too, unless in `no_grad`.
    fn pass(&self) -> Pass {
        if self.no_grad > 0 {
            Pass::Eval
        } else {
            Pass::Grad
        }
    }

    /// Counts the next tape node (`op`, output `shape`) against the budget, before it is made.
    fn charge(&mut self, op: &'static str, shape: &Shape, cost: NodeCost) -> Result<()> {
        self.tally.add(cost).map_err(|source| NnError::OverBudget {
            node: self.tape.size(),
            op,
            layer: self.scopes.path(),
            shape: shape.clone(),
            source,
        })
    }

    /// The tape name of an op node: its layer path in anomaly mode (so a report names the
    /// layer), none otherwise.
    fn op_node_name(&self) -> Option<String> {
        self.anomaly.is_on().then(|| self.scopes.path())
    }
}

impl<V: Kernels> Ops for Session<V> {
    fn apply(&mut self, op: Op, args: &[&Var]) -> Result<Var> {
        let shape = check_call(self.owner, &self.scopes, &op, args)?;
        let operands: SmallVec<[Shape; 3]> = args.iter().map(|a| a.shape.clone()).collect();
        let pass = self.pass();
        let workspace = op.workspace_elements(&operands, &shape, pass);
        self.charge(
            op.name(),
            &shape,
            NodeCost::new(shape.size(), workspace, pass),
        )?;
        let layer = || self.scopes.path();
        let ids: torchlean_runtime::Operands<usize> = args.iter().map(|a| a.index).collect();
        let kind = op.name();
        let index = if self.no_grad > 0 {
            let vals: Vec<&V> = ids
                .iter()
                .map(|&i| self.tape.get_value(i))
                .collect::<std::result::Result<_, _>>()?;
            let value = forward::<V>(&op, &vals).map_err(|source| NnError::Runtime {
                layer: layer(),
                source,
            })?;
            self.tape.leaf(value, false, self.op_node_name())
        } else {
            let name = self.op_node_name();
            record(&mut self.tape, op, &ids, name).map_err(|source| NnError::Runtime {
                layer: self.scopes.path(),
                source,
            })?
        };
        self.check_anomaly(index, kind)?;
        Ok(Var {
            index,
            shape,
            owner: self.owner,
        })
    }

    fn constant(&mut self, value: &Tensor<f64>) -> Result<Var> {
        let v = V::from_f64(value)?;
        self.leaf(v, false, "constant", "constant")
    }

    fn filled(&mut self, shape: Shape, value: f64) -> Result<Var> {
        let v = V::full(&shape, value)?;
        self.leaf(v, false, "constant", "constant")
    }

    fn input(&mut self, name: &str, value: &Tensor<f64>, requires_grad: bool) -> Result<Var> {
        let v = V::from_f64(value)?;
        self.leaf(v, requires_grad, "input", name)
    }

    fn param(&mut self, name: &str, init: &Tensor<f64>) -> Result<Var> {
        let full = self.scopes.qualify(name);
        if let Some(&id) = self.param_leaves.get(&full) {
            return self.var(id);
        }
        let value = match self.params.get(&full) {
            Some(v) if v.shape() != init.shape() => {
                return Err(NnError::ParamShape {
                    name: full,
                    have: v.shape().clone(),
                    want: init.shape().clone(),
                })
            }
            Some(v) => v.clone(),
            None => {
                let v = V::from_f64(init)?;
                self.params.insert(full.clone(), v.clone());
                v
            }
        };
        let var = self.leaf(value, true, "param", &full)?;
        self.param_leaves.insert(full, var.index);
        Ok(var)
    }

    fn buffer(&mut self, name: &str, init: &Tensor<f64>) -> Result<Var> {
        let full = self.scopes.qualify(name);
        let value = match self.buffers.get(&full) {
            Some(v) => v.clone(),
            None => {
                let v = V::from_f64(init)?;
                self.buffers.insert(full.clone(), v.clone());
                v
            }
        };
        self.leaf(value, false, "buffer", &full)
    }

    fn update_buffer(&mut self, name: &str, input: &Var, update: BufferUpdate<'_>) -> Result<()> {
        let full = self.scopes.qualify(name);
        let x = self.value_f64(input)?;
        let current = self
            .buffers
            .get(&full)
            .ok_or_else(|| NnError::NoSuchParam { name: full.clone() })?
            .to_f64()?;
        let next = V::from_f64(&update(&current, &x)?)?;
        if let Some(old) = self.buffers.insert(full, next) {
            old.drop();
        }
        Ok(())
    }

    fn fresh_key(&mut self) -> u64 {
        self.keys += 1;
        self.keys - 1
    }

    fn push_scope(&mut self, name: &str) {
        self.scopes.push(name);
    }

    fn pop_scope(&mut self) {
        self.scopes.pop();
    }

    fn scope_path(&self) -> String {
        self.scopes.path()
    }
}

impl<V: Kernels> Drop for Session<V> {
    fn drop(&mut self) {
        self.release_grads();
        std::mem::take(&mut self.tape).release();
        for (_, v) in std::mem::take(&mut self.params)
            .into_iter()
            .chain(std::mem::take(&mut self.buffers))
        {
            v.drop();
        }
    }
}
