//! The recording interpreter (TorchLean's `Compiled.M` / linked `SessionIR`): every op is
//! validated and appended to a graph, nothing runs. [`Recorder::finish`] gives the typed SSA
//! [`GraphData`] — the graph every check of the project applies to — which
//! [`Recorded::run`] compiles and differentiates through `compile` + `backward_dense_all` (the
//! path TorchLean's compile/backprop link theorem is about), and [`Recorded::to_ir`] writes as
//! `torchlean.ir.v1` with its payload.

use crate::error::{ExportProblem, NnError, Result};
use crate::ops::{check_call, new_owner, BufferUpdate, Ops, Scopes, Var};
use std::borrow::Cow;
use torchlean_compiled::{compile, compile_detecting, GraphData, Origin, Pos};
use torchlean_ir::{Graph, Node, OpKind, Payload};
use torchlean_runtime::{AnomalyMode, Kernels, RuntimeError};
use torchlean_spec::{Op, Shape, Tensor};

/// What a leaf of the recorded program is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeafKind {
    /// Data; `requires_grad` asks for its gradient.
    Input { requires_grad: bool },
    /// A parameter (gets a gradient).
    Param,
    /// A buffer (state without a gradient: running statistics).
    Buffer,
    /// A constant.
    Const,
}

/// A leaf of the recorded program: a graph input of the GraphData.
#[derive(Clone, Debug, PartialEq)]
pub struct Leaf {
    /// The full name (a parameter's `state_dict` name; an input's name; `""` for constants).
    pub name: String,
    pub kind: LeafKind,
    pub value: Tensor<f64>,
}

/// Where a value lives before the graph is laid out: leaves become the input context Γ, ops
/// the nodes after it.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Leaf(usize),
    Node(usize),
}

/// Records a program without running it.
#[derive(Debug)]
pub struct Recorder {
    owner: u64,
    scopes: Scopes,
    leaves: Vec<Leaf>,
    ops: Vec<(Op, Vec<Slot>, Shape)>,
    /// The slot of every value handed out, by `Var::index`.
    slots: Vec<Slot>,
    /// Random keys handed out.
    keys: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Recorder {
            owner: new_owner(),
            scopes: Scopes::default(),
            leaves: Vec::new(),
            ops: Vec::new(),
            slots: Vec::new(),
            keys: 0,
        }
    }

    /// Number of ops recorded so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no op was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn hand_out(&mut self, slot: Slot, shape: Shape) -> Var {
        self.slots.push(slot);
        Var {
            index: self.slots.len() - 1,
            shape,
            owner: self.owner,
        }
    }

    fn add_leaf(&mut self, leaf: Leaf) -> Var {
        let shape = leaf.value.shape().clone();
        self.leaves.push(leaf);
        self.hand_out(Slot::Leaf(self.leaves.len() - 1), shape)
    }

    /// Lays the program out as GraphData (leaves first, in creation order, then every op) with
    /// `output` as its result.
    pub fn finish(self, output: &Var) -> Result<Recorded> {
        if output.owner != self.owner {
            return Err(NnError::ForeignValue {
                op: "finish",
                layer: String::new(),
                operand: 0,
            });
        }
        let n = self.leaves.len();
        let pos = |s: Slot| match s {
            Slot::Leaf(i) => i,
            Slot::Node(k) => n + k,
        };
        let mut graph = GraphData::new(
            self.leaves
                .iter()
                .map(|l| l.value.shape().clone())
                .collect(),
        )?;
        for (k, (op, args, _)) in self.ops.into_iter().enumerate() {
            let args: Vec<Pos> = args.into_iter().map(pos).collect();
            graph.push(op, args, Some(Origin::Op(k)))?;
        }
        Ok(Recorded {
            graph,
            leaves: self.leaves,
            output: pos(self.slots[output.index]),
        })
    }
}

impl Ops for Recorder {
    fn apply(&mut self, op: Op, args: &[&Var]) -> Result<Var> {
        let shape = check_call(self.owner, &self.scopes, &op, args)?;
        let slots = args.iter().map(|a| self.slots[a.index]).collect();
        self.ops.push((op, slots, shape.clone()));
        Ok(self.hand_out(Slot::Node(self.ops.len() - 1), shape))
    }

    fn constant(&mut self, value: &Tensor<f64>) -> Result<Var> {
        Ok(self.add_leaf(Leaf {
            name: String::new(),
            kind: LeafKind::Const,
            value: value.clone(),
        }))
    }

    fn input(&mut self, name: &str, value: &Tensor<f64>, requires_grad: bool) -> Result<Var> {
        Ok(self.add_leaf(Leaf {
            name: name.to_string(),
            kind: LeafKind::Input { requires_grad },
            value: value.clone(),
        }))
    }

    fn param(&mut self, name: &str, init: &Tensor<f64>) -> Result<Var> {
        let full = self.scopes.qualify(name);
        if let Some(i) = self
            .leaves
            .iter()
            .position(|l| l.kind == LeafKind::Param && l.name == full)
        {
            let have = self.leaves[i].value.shape().clone();
            if &have != init.shape() {
                return Err(NnError::ParamShape {
                    name: full,
                    have,
                    want: init.shape().clone(),
                });
            }
            return Ok(self.hand_out(Slot::Leaf(i), have));
        }
        Ok(self.add_leaf(Leaf {
            name: full,
            kind: LeafKind::Param,
            value: init.clone(),
        }))
    }

    fn buffer(&mut self, name: &str, init: &Tensor<f64>) -> Result<Var> {
        let full = self.scopes.qualify(name);
        if let Some(i) = self
            .leaves
            .iter()
            .position(|l| l.kind == LeafKind::Buffer && l.name == full)
        {
            return Ok(self.hand_out(Slot::Leaf(i), self.leaves[i].value.shape().clone()));
        }
        Ok(self.add_leaf(Leaf {
            name: full,
            kind: LeafKind::Buffer,
            value: init.clone(),
        }))
    }

    fn update_buffer(
        &mut self,
        _name: &str,
        _input: &Var,
        _update: BufferUpdate<'_>,
    ) -> Result<()> {
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

/// A recorded program: its GraphData, its leaves (the GraphData's inputs, in order) and the
/// position of its output.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub graph: GraphData,
    pub leaves: Vec<Leaf>,
    pub output: Pos,
}

/// The result of running a recorded program: its output and the gradient of every leaf (in
/// leaf order) under a ones seed.
#[derive(Clone, Debug)]
pub struct RecordedRun<V> {
    pub output: V,
    pub grads: Vec<V>,
}

impl Recorded {
    /// The leaves' values on engine `V`.
    pub fn inputs<V: Kernels>(&self) -> Result<Vec<V>> {
        Ok(self
            .leaves
            .iter()
            .map(|l| V::from_f64(&l.value))
            .collect::<std::result::Result<_, RuntimeError>>()?)
    }

    /// The graph a run compiles, and its output's position there: the recorded graph fused
    /// ([`torchlean_compiled::fuse`]: a convolution read only by its ReLU is one `conv2d_relu`
    /// node, whose kernels apply the ReLU and its mask where they store and read), the same
    /// values and gradients to the bit. Anomaly detection compiles the recorded graph itself,
    /// whose positions its findings name. The graph itself (exports, printing) stays unfused.
    fn compiled_graph(&self, mode: AnomalyMode) -> Result<(Cow<'_, GraphData>, Pos)> {
        if mode == AnomalyMode::Off {
            if let Some(f) = torchlean_compiled::fuse::conv_relu(&self.graph, &[self.output])? {
                return Ok((Cow::Owned(f.graph), f.position[self.output]));
            }
        }
        Ok((Cow::Borrowed(&self.graph), self.output))
    }

    /// Compiles the graph on engine `V` and differentiates the output, seeded with ones, with
    /// `backward_dense_all`.
    pub fn run<V: Kernels>(&self) -> Result<RecordedRun<V>> {
        let seed = Tensor::full(self.graph.shape(self.output).clone(), 1.0)?;
        self.run_with_seed(&seed)
    }

    /// [`Recorded::run`] from the cotangent `seed` of the output.
    pub fn run_with_seed<V: Kernels>(&self, seed: &Tensor<f64>) -> Result<RecordedRun<V>> {
        let want = self.graph.shape(self.output);
        if seed.shape() != want {
            return Err(NnError::SeedShape {
                want: want.clone(),
                got: seed.shape().clone(),
            });
        }
        let (graph, output) = self.compiled_graph(AnomalyMode::Off)?;
        let (tape, values) = compile::<V>(&graph, self.inputs()?)?;
        drop(graph);
        let out = values[output].clone();
        let seed = V::from_f64(seed)?;
        let all = tape.backward_dense_all(output, seed)?;
        let grads = all.into_iter().take(self.leaves.len()).collect();
        tape.release();
        Ok(RecordedRun { output: out, grads })
    }

    /// One differentiated run of the program on engine `V` with the given leaf values (one per
    /// leaf, in leaf order: the current parameters, this batch, the constants), the training
    /// step of the compiled backend: `compile`, then the releasing sweep
    /// (`Tape::backward_sparse`) from a ones seed of the output, keeping the gradient of leaf
    /// `i` only where `keep(i)`. Returns the output and, per leaf, its gradient (`None` where
    /// not kept or not reached). Every other value of the run is released before it returns, so
    /// the caller's parameter buffers are no longer shared (an in-place update copies nothing).
    ///
    /// The gradients equal those of the eager [`crate::Session`] with
    /// [`crate::Sweep::Releasing`] bit for bit: both record the same ops in the same order and
    /// sweep them in decreasing id.
    pub fn step<V: Kernels>(
        &self,
        leaf_values: Vec<V>,
        keep: impl Fn(usize) -> bool,
    ) -> Result<(V, Vec<Option<V>>)> {
        self.step_with(leaf_values, keep, AnomalyMode::Off)
    }

    /// [`Recorded::step`]; with [`AnomalyMode::Detect`], the compile checks each value and the
    /// sweep each gradient contribution, and the first NaN or infinite one fails the step with
    /// a `RuntimeError::Anomaly` naming its tape node (= GraphData position: leaves first).
    pub fn step_with<V: Kernels>(
        &self,
        leaf_values: Vec<V>,
        keep: impl Fn(usize) -> bool,
        mode: AnomalyMode,
    ) -> Result<(V, Vec<Option<V>>)> {
        let n = self.leaves.len();
        let (graph, out) = self.compiled_graph(mode)?;
        let (tape, values) = compile_detecting::<V>(&graph, leaf_values, mode)?;
        drop(graph);
        let output = values[out].clone();
        for v in values {
            v.drop();
        }
        let seed = match V::full(self.graph.shape(self.output), 1.0) {
            Ok(s) => s,
            Err(e) => {
                tape.release();
                return Err(e.into());
            }
        };
        let swept = tape.backward_sparse_with(out, seed, |id| id < n && keep(id), mode);
        let mut kept = match swept {
            Ok(k) => k,
            Err(e) => {
                tape.release();
                return Err(e.into());
            }
        };
        let grads = (0..n).map(|i| kept.take(i)).collect();
        kept.release();
        tape.release();
        Ok((output, grads))
    }

    /// The gradient of parameter `name` in a run.
    pub fn param_grad<'r, V>(&self, run: &'r RecordedRun<V>, name: &str) -> Option<&'r V> {
        self.leaves
            .iter()
            .position(|l| l.kind == LeafKind::Param && l.name == name)
            .and_then(|i| run.grads.get(i))
    }

    /// The program as a `torchlean.ir.v1` graph and its payload. The input leaves are the
    /// graph's inputs, in recording order (IR nodes `0..k`; with several, named by their leaf
    /// names, as `--input NAME=FILE` matches them); a parameter or constant passed as a payload operand (a linear's, conv's or
    /// batch norm's weights) goes into that node's payload entry, any other leaf becomes a
    /// `const` node. Returns, for every parameter, the `(IR node, payload name)` places it was
    /// written to (one for each use; `torchlean grad` reports one gradient per place, which sum
    /// to the parameter's).
    pub fn to_ir(&self) -> Result<IrExport> {
        let inputs: Vec<usize> = (0..self.leaves.len())
            .filter(|&i| matches!(self.leaves[i].kind, LeafKind::Input { .. }))
            .collect();
        if inputs.is_empty() {
            return Err(NnError::Export {
                problem: ExportProblem::NoInput,
            });
        }
        // the inputs first, in recording order: IR nodes 0..k
        let mut nodes: Vec<Node> = inputs
            .iter()
            .enumerate()
            .map(|(id, &leaf)| Node {
                id,
                kind: OpKind::Input,
                parents: vec![],
                shape: self.leaves[leaf].value.shape().clone(),
            })
            .collect();
        let mut payload = Payload::new();
        let mut places: Vec<Vec<(usize, &'static str)>> = vec![Vec::new(); self.leaves.len()];
        // the IR node holding each position's value (leaves other than the inputs on first use)
        let n = self.leaves.len();
        let mut ir_of: Vec<Option<usize>> = vec![None; self.graph.len()];
        for (id, &leaf) in inputs.iter().enumerate() {
            ir_of[leaf] = Some(id);
        }
        for (k, gnode) in self.graph.nodes().iter().enumerate() {
            let desc = gnode.op.desc();
            let n_parents = gnode.args.len() - desc.payload;
            let mut parents = Vec::with_capacity(n_parents);
            for &a in &gnode.args[..n_parents] {
                parents.push(match ir_of[a] {
                    Some(id) => id,
                    None => {
                        // a leaf used as a parent: a `const` node with its value
                        let id = nodes.len();
                        let value = &self.leaves[a].value;
                        nodes.push(Node {
                            id,
                            kind: OpKind::Const {
                                value_shape: Some(value.shape().clone()),
                            },
                            parents: vec![],
                            shape: value.shape().clone(),
                        });
                        payload.insert(id, "value", value.clone());
                        places[a].push((id, "value"));
                        ir_of[a] = Some(id);
                        id
                    }
                });
            }
            let id = nodes.len();
            for (&a, &name) in gnode.args[n_parents..].iter().zip(desc.payload_names()) {
                if a >= n {
                    return Err(NnError::Export {
                        problem: ExportProblem::ComputedPayload {
                            index: k,
                            op: desc.name,
                            operand: name,
                        },
                    });
                }
                payload.insert(id, name, self.leaves[a].value.clone());
                places[a].push((id, name));
            }
            let op = gnode.op.clone();
            match &op {
                Op::BatchNormEval { eps, .. } => {
                    if let Some(e) = payload.entries.get_mut(&id) {
                        e.eps = Some(*eps);
                    }
                }
                Op::RandUniform { key, .. } | Op::BernoulliMask { key, .. }
                    if *key != id as u64 =>
                {
                    return Err(NnError::Export {
                        problem: ExportProblem::RandomKey {
                            index: k,
                            op: desc.name,
                            key: *key,
                            node: id,
                        },
                    });
                }
                _ => {}
            }
            nodes.push(Node {
                id,
                kind: OpKind::Op(op),
                parents,
                shape: gnode.shape.clone(),
            });
            ir_of[n + k] = Some(id);
        }
        let output_id = ir_of[self.output].ok_or(NnError::Export {
            problem: ExportProblem::OutputNotComputed,
        })?;
        let mut graph = Graph::new(0, output_id, nodes);
        if inputs.len() > 1 {
            // the wire's extension; a one-input graph stays TorchLean's
            graph.extra_inputs = (1..inputs.len()).collect();
            graph.input_names = inputs
                .iter()
                .map(|&i| self.leaves[i].name.clone())
                .collect();
        }
        let params = self
            .leaves
            .iter()
            .zip(places)
            .filter(|(l, _)| l.kind == LeafKind::Param)
            .map(|(l, p)| (l.name.clone(), p))
            .collect();
        Ok(IrExport {
            graph,
            payload,
            params,
        })
    }
}

/// A recorded program as `torchlean.ir.v1` ([`Recorded::to_ir`]).
#[derive(Clone, Debug)]
pub struct IrExport {
    pub graph: Graph,
    pub payload: Payload,
    /// For every parameter (by name), the `(IR node, payload name)` places holding it.
    pub params: Vec<(String, Vec<(usize, &'static str)>)>,
}

impl IrExport {
    /// Writes the graph JSON to `graph` and the payload to `payload` — safetensors when its
    /// name ends in `.safetensors` (keys `"<node id>.<name>"`), Payload JSON otherwise — each
    /// atomically (a temporary file in the same directory, synced, renamed, the directory synced).
    pub fn save(&self, graph: &std::path::Path, payload: &std::path::Path) -> Result<()> {
        write_atomically(graph, self.graph.to_json().to_string().as_bytes())?;
        let bytes = if payload.extension().is_some_and(|x| x == "safetensors") {
            self.payload.to_safetensors()?
        } else {
            self.payload.to_json().to_string().into_bytes()
        };
        write_atomically(payload, &bytes)
    }

    /// Writes the graph in TorchLean's September dialect ([`torchlean_ir::Dialect::September2026`]): one
    /// file, the weights inline, written atomically. A layer with no counterpart in that
    /// dialect is an error naming its node (every one at once).
    pub fn save_september(&self, graph: &std::path::Path) -> Result<()> {
        let written = torchlean_ir::Dialect::September2026.write(&self.graph, &self.payload)?;
        write_atomically(graph, written.graph.to_string().as_bytes())
    }
}

/// [`torchlean_ir::write_atomically`], with the error naming `path`.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    torchlean_ir::write_atomically(path, bytes).map_err(|source| NnError::Io {
        path: path.to_path_buf(),
        source,
    })
}
