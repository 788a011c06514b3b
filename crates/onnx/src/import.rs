//! The import: the model's inputs become `input` nodes (in its order), its nodes IR nodes in
//! their (topological) order, each through the op's shape rule (`Op::infer_shape`), and every
//! problem of every node is collected before failing.

use crate::attrs::Ctx;
use crate::error::{OnnxError, Problem, ProblemKind, Result};
use crate::ops;
use crate::proto::{
    tensor_proto::DataType, tensor_shape_proto::dimension, type_proto, GraphProto, ModelProto,
    TensorProto, ValueInfoProto,
};
use crate::tensor::{decode, dtype_name, Constant};
use prost::Message;
use std::collections::HashMap;
use torchlean_ir::{
    check_payload, check_shapes, Diagnostic, Graph, IrError, Node, OpKind, Payload,
};
use torchlean_spec::{ops::desc, Op, Shape, Tensor};

/// The element type of the model's inputs (and so of its computation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemType {
    F32,
    F64,
}

impl ElemType {
    /// ONNX's name of the type.
    pub fn onnx_name(self) -> &'static str {
        match self {
            ElemType::F32 => "FLOAT",
            ElemType::F64 => "DOUBLE",
        }
    }
}

/// Where an ONNX initializer went: payload tensor `tensor` of IR node `node` (so
/// `torchlean grad` reports its gradient there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub onnx_name: String,
    pub node: usize,
    pub tensor: &'static str,
}

/// An imported model.
#[derive(Clone, Debug)]
pub struct Imported {
    pub graph: Graph,
    pub payload: Payload,
    /// Every initializer that became a payload tensor, in the order they were placed.
    pub params: Vec<Param>,
    pub elem_type: ElemType,
    /// The default-domain opset the model was read at.
    pub opset: i64,
}

impl Imported {
    /// Writes the graph in `dialect` to `graph` and its weights to `payload` — safetensors
    /// when its name ends in `.safetensors` (keys `"<node id>.<name>"`), Payload JSON
    /// otherwise — each through [`torchlean_ir::write_atomically`]. The September dialect carries
    /// the weights inline in the graph, so then `payload` is written only if some weights stay
    /// outside it (and may be `None` if none do); the return value says whether it was written.
    /// Weights with nowhere to go ([`OnnxError::PayloadFileNeeded`]) and a node the dialect has
    /// no counterpart for (all listed) are errors, and nothing is written.
    pub fn save(
        &self,
        dialect: torchlean_ir::Dialect,
        graph: &std::path::Path,
        payload: Option<&std::path::Path>,
    ) -> Result<bool> {
        let written = dialect
            .write(&self.graph, &self.payload)
            .map_err(|source| OnnxError::Ir { source })?;
        let outside = written.payload.entries.len();
        let payload = match payload {
            None if outside > 0 => {
                return Err(OnnxError::PayloadFileNeeded {
                    dialect,
                    nodes: outside,
                })
            }
            Some(_) if outside == 0 && dialect == torchlean_ir::Dialect::September2026 => None,
            payload => payload,
        };
        let payload_bytes = match payload {
            None => None,
            Some(path) if path.extension().is_some_and(|x| x == "safetensors") => Some(
                written
                    .payload
                    .to_safetensors()
                    .map_err(|source| OnnxError::Ir { source })?,
            ),
            Some(_) => Some(written.payload.to_json().to_string().into_bytes()),
        };
        write(graph, written.graph.to_string().as_bytes())?;
        match (payload, payload_bytes) {
            (Some(path), Some(bytes)) => write(path, &bytes).map(|()| true),
            _ => Ok(false),
        }
    }

    /// The payload tensor an ONNX initializer became.
    pub fn param(&self, onnx_name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.onnx_name == onnx_name)
    }
}

/// How to import: graph inputs bound to constants, and inputs given other dims than the
/// model declares. The default imports the model as it is.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Graph inputs bound to constants (`torchlean import --bind`): the inputs that fix shapes,
    /// axes, indices or pads (INT64 mostly), as `(input name, tensor)`. A bound input is a
    /// constant of the graph, never a parameter; the inputs left are the IR's `input` nodes. A
    /// name that is no graph input, or a tensor whose dims disagree with the input's declared
    /// ones, is a problem like any other.
    pub bound: Vec<(String, TensorProto)>,
    /// Graph inputs given these dims instead of their declared ones (`torchlean import
    /// --input-shape`): a symbolic dimension (an export's `dynamic_axes`) fixed, or a batch
    /// size changed. The rank must be the declared one. The model's declared shapes of other
    /// values are then not checked, since they were declared for the old dims; the ops' own
    /// shape rules still are, so a size the export baked in (a `Reshape` to a constant
    /// `[1, 512]`) is reported where it no longer fits.
    pub input_shapes: Vec<(String, Vec<usize>)>,
}

impl ImportOptions {
    /// Options binding `bound` and nothing else.
    pub fn bound(bound: &[(String, TensorProto)]) -> ImportOptions {
        ImportOptions {
            bound: bound.to_vec(),
            input_shapes: Vec::new(),
        }
    }
}

/// Imports an ONNX model (the bytes of a `.onnx` file).
pub fn import_onnx(bytes: &[u8]) -> Result<Imported> {
    let model = ModelProto::decode(bytes).map_err(|source| OnnxError::Decode { source })?;
    import_model(&model)
}

/// Imports a decoded model.
pub fn import_model(model: &ModelProto) -> Result<Imported> {
    import_model_with(model, &ImportOptions::default())
}

/// [`import_onnx`] with some graph inputs bound to constants ([`ImportOptions::bound`]).
pub fn import_onnx_bound(bytes: &[u8], bound: &[(String, TensorProto)]) -> Result<Imported> {
    let model = ModelProto::decode(bytes).map_err(|source| OnnxError::Decode { source })?;
    import_model_bound(&model, bound)
}

/// Imports the model file at `path` with some graph inputs bound ([`import_onnx_bound`]).
pub fn import_file(path: &std::path::Path, bound: &[(String, TensorProto)]) -> Result<Imported> {
    import_file_with(path, &ImportOptions::bound(bound))
}

/// Reads the model file at `path` ([`OnnxError::Read`], [`OnnxError::Decode`]) with its
/// initializers stored as external data (beside the model, as `torch.onnx.export` writes a
/// large model) read from the model's directory; an external tensor that cannot be read is a
/// problem naming it.
pub fn read_model(path: &std::path::Path) -> Result<ModelProto> {
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut model =
        ModelProto::decode(bytes.as_slice()).map_err(|source| OnnxError::Decode { source })?;
    let dir = path.parent().unwrap_or_else(|| std::path::Path::new("."));
    let problems = crate::external::resolve(&mut model, dir);
    if !problems.is_empty() {
        return Err(OnnxError::Problems(problems));
    }
    Ok(model)
}

/// Imports the model file at `path` ([`read_model`]) as `options` say.
pub fn import_file_with(path: &std::path::Path, options: &ImportOptions) -> Result<Imported> {
    import_model_with(&read_model(path)?, options)
}

/// [`import_model`] with some graph inputs bound to constants ([`ImportOptions::bound`]).
pub fn import_model_bound(model: &ModelProto, bound: &[(String, TensorProto)]) -> Result<Imported> {
    import_model_with(model, &ImportOptions::bound(bound))
}

/// Imports a decoded model as `options` say.
pub fn import_model_with(model: &ModelProto, options: &ImportOptions) -> Result<Imported> {
    let mut problems = Vec::new();
    let opset = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain(), "" | "ai.onnx"))
        .map(|o| o.version());
    let opset = opset.unwrap_or_else(|| {
        problems.push(model_problem(
            "opset_import",
            "no default-domain (ai.onnx) opset",
        ));
        0
    });
    let Some(graph) = &model.graph else {
        problems.push(model_problem("graph", "the model has no graph"));
        return Err(OnnxError::Problems(problems));
    };
    let mut b = Builder::new(graph, opset);
    b.problems = problems;
    b.run(graph, options);
    b.finish(graph)
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    torchlean_ir::write_atomically(path, bytes).map_err(|source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn model_problem(field: &str, message: impl Into<String>) -> Problem {
    Problem::new(ProblemKind::Model, "model", "model", field, message)
}

/// An IR value: its node id and shape.
#[derive(Clone, Debug)]
pub(crate) struct Operand {
    pub id: usize,
    pub shape: Shape,
}

/// What an ONNX value name refers to.
#[derive(Clone, Debug)]
enum Val {
    /// Computed by an IR node.
    Node(Operand),
    /// An integer graph input (INT64 or INT32): an `input` node of float ids, usable only as
    /// `Gather`'s indices (token ids into an embedding), whose range `embedding` checks.
    Ids(Operand),
    /// A constant (initializer or `Constant` node output), materialised as a `const` node on
    /// its first use as data.
    Const(usize),
    /// Produced by a node that could not be mapped (already reported).
    Poisoned,
}

#[derive(Debug)]
struct ConstEntry {
    c: Constant,
    /// The initializer's name (`None` for a `Constant` node's output or a bound input).
    initializer: Option<String>,
    /// A graph input bound to a constant (`--bind`).
    bound: bool,
    /// The `const` node made for it, once used as data.
    node: Option<Operand>,
}

/// The graph being built.
pub(crate) struct Builder {
    nodes: Vec<Node>,
    payload: Payload,
    params: Vec<Param>,
    values: HashMap<String, Val>,
    consts: Vec<ConstEntry>,
    /// How many node inputs name each value.
    uses: HashMap<String, usize>,
    /// Declared shapes of values (`value_info`, outputs) to check the inferred ones against.
    declared: HashMap<String, Vec<Option<usize>>>,
    pub problems: Vec<Problem>,
    pub opset: i64,
    /// The IR `input` node of each graph input, in the model's order, and its ONNX name.
    inputs: Vec<(usize, String)>,
    /// The element type of the first graph input, which every other must share.
    elem_type: Option<ElemType>,
    /// Mapping a node whose integer operands are data ([`Builder::map_with_integer_data`]): an integer
    /// graph input reads as its float node.
    ids_as_data: bool,
    /// Inputs given other dims than declared ([`ImportOptions::input_shapes`]).
    input_shapes: Vec<(String, Vec<usize>)>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("nodes", &self.nodes.len())
            .field("problems", &self.problems)
            .finish()
    }
}

impl Builder {
    fn new(graph: &GraphProto, opset: i64) -> Self {
        let mut uses = HashMap::new();
        for n in &graph.node {
            for i in n.input.iter().filter(|i| !i.is_empty()) {
                *uses.entry(i.clone()).or_insert(0) += 1;
            }
        }
        let mut declared = HashMap::new();
        for v in graph.value_info.iter().chain(&graph.output) {
            if let Some(dims) = declared_dims(v) {
                declared.insert(v.name().to_string(), dims);
            }
        }
        Builder {
            nodes: Vec::new(),
            payload: Payload::new(),
            params: Vec::new(),
            values: HashMap::new(),
            consts: Vec::new(),
            uses,
            declared,
            problems: Vec::new(),
            opset,
            inputs: Vec::new(),
            elem_type: None,
            ids_as_data: false,
            input_shapes: Vec::new(),
        }
    }

    fn run(&mut self, graph: &GraphProto, options: &ImportOptions) {
        self.initializers(graph);
        self.bind(graph, &options.bound);
        self.reshape_inputs(graph, &options.input_shapes);
        self.inputs(graph);
        for (i, node) in graph.node.iter().enumerate() {
            let ctx = Ctx::new(node, i);
            if !ops::supported(&ctx) {
                self.problems.push(ctx.problem(
                    ProblemKind::UnsupportedOp,
                    "op_type",
                    match node.domain() {
                        "" | "ai.onnx" => "op not supported by the importer".to_string(),
                        d => format!("op of domain `{d}` not supported by the importer"),
                    },
                ));
                self.poison(&ctx);
                continue;
            }
            // a node after a failed one is still mapped, for its own attribute problems
            match ops::map_node(self, &ctx) {
                Ok(()) => self.check_declared(&ctx),
                Err(ps) => {
                    let own = ps.into_iter().filter(|p| p.kind != ProblemKind::Upstream);
                    self.problems.extend(own);
                    self.poison(&ctx);
                }
            }
        }
    }

    fn initializers(&mut self, graph: &GraphProto) {
        for t in &graph.initializer {
            let name = t.name().to_string();
            match decode(t) {
                Ok(c) => self.define_const(&name, c, Some(name.clone())),
                Err(issue) => {
                    self.problems.push(issue.onto(Problem::new(
                        ProblemKind::BadTensor,
                        name.clone(),
                        "initializer",
                        "data",
                        "",
                    )));
                    self.values.insert(name, Val::Poisoned);
                }
            }
        }
        for t in &graph.sparse_initializer {
            let name = t.values.as_ref().map(|v| v.name()).unwrap_or("?");
            self.problems.push(Problem::new(
                ProblemKind::BadTensor,
                name,
                "initializer",
                "sparse_initializer",
                "sparse initializers are not supported",
            ));
            self.values.insert(name.to_string(), Val::Poisoned);
        }
    }

    /// Graph inputs bound to constants ([`import_onnx_bound`]).
    fn bind(&mut self, graph: &GraphProto, bound: &[(String, TensorProto)]) {
        for (name, t) in bound {
            let problem =
                |msg: String| Problem::new(ProblemKind::Model, name, "input", "bind", msg);
            let Some(v) = graph.input.iter().find(|v| v.name() == name) else {
                self.problems
                    .push(problem("no graph input of this name to bind".into()));
                continue;
            };
            if self.values.contains_key(name) {
                self.problems.push(problem(
                    "an initializer, or bound twice: not an input to bind".into(),
                ));
                continue;
            }
            let c = match decode(t) {
                Ok(c) => c,
                Err(issue) => {
                    self.problems.push(issue.onto(Problem::new(
                        ProblemKind::BadTensor,
                        name,
                        "input",
                        "bind",
                        "",
                    )));
                    self.values.insert(name.clone(), Val::Poisoned);
                    continue;
                }
            };
            let fixed = declared_dims(v).and_then(|d| d.into_iter().collect::<Option<Vec<_>>>());
            if let Some(declared) = fixed.filter(|d| d[..] != *c.shape.dims()) {
                self.problems.push(problem(format!(
                    "the bound tensor has shape {}, the input declares {declared:?}",
                    c.shape
                )));
                self.values.insert(name.clone(), Val::Poisoned);
                continue;
            }
            self.define_const(name, c, None);
            if let Some(e) = self.consts.last_mut() {
                e.bound = true;
            }
        }
    }

    /// Inputs given other dims ([`ImportOptions::input_shapes`]): each name must be a graph
    /// input left after binding, and the declared shapes of other values are no longer checked.
    fn reshape_inputs(&mut self, graph: &GraphProto, shapes: &[(String, Vec<usize>)]) {
        for (name, dims) in shapes {
            let problem = |msg: &str| {
                Problem::new(
                    ProblemKind::Model,
                    name,
                    "input",
                    "input_shape",
                    msg.to_string(),
                )
            };
            let is_input = graph.input.iter().any(|v| v.name() == name);
            if !is_input || self.values.contains_key(name) {
                self.problems.push(problem(
                    "no graph input of this name (besides initializers and bound inputs) to reshape",
                ));
            } else if self.input_shapes.iter().any(|(n, _)| n == name) {
                self.problems.push(problem("given two shapes"));
            } else {
                self.input_shapes.push((name.clone(), dims.clone()));
            }
        }
        if !self.input_shapes.is_empty() {
            self.declared.clear();
        }
    }

    /// The graph inputs that are neither initializers nor bound: the IR's `input` nodes, in
    /// the model's order.
    fn inputs(&mut self, graph: &GraphProto) {
        let inputs: Vec<&ValueInfoProto> = graph
            .input
            .iter()
            .filter(|v| !self.values.contains_key(v.name()))
            .collect();
        if inputs.is_empty() {
            self.problems.push(model_problem(
                "input",
                "the graph has no input besides its initializers and bound inputs; the IR takes at least one",
            ));
        }
        for v in inputs {
            self.input(v);
        }
    }

    /// One graph input: an `input` node of its fixed shape, FLOAT or DOUBLE like the first, or
    /// INT64/INT32 token ids (used by `Gather` only, checked where used).
    fn input(&mut self, v: &ValueInfoProto) {
        let problem =
            |kind, field: &str, msg: String| Problem::new(kind, v.name(), "input", field, msg);
        let tensor = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(t)) => t,
            _ => {
                self.problems.push(problem(
                    ProblemKind::UnsupportedAttribute,
                    "type",
                    "not a tensor".into(),
                ));
                self.values.insert(v.name().to_string(), Val::Poisoned);
                return;
            }
        };
        let mut ok = true;
        let ids = matches!(
            DataType::try_from(tensor.elem_type()),
            Ok(DataType::Int64 | DataType::Int32)
        );
        let elem_type = match DataType::try_from(tensor.elem_type()) {
            Ok(DataType::Float) => Some(ElemType::F32),
            Ok(DataType::Double) => Some(ElemType::F64),
            _ => None,
        };
        match (elem_type, self.elem_type) {
            (None, _) if ids => {}
            (None, _) => {
                self.problems.push(problem(
                    ProblemKind::UnsupportedAttribute,
                    "elem_type",
                    format!(
                        "{} input; FLOAT or DOUBLE is supported, or INT64/INT32 token ids for Gather (an input that fixes shapes, axes or indices can be bound: --bind NAME=FILE)",
                        dtype_name(tensor.elem_type())
                    ),
                ));
                ok = false;
            }
            (Some(t), None) => self.elem_type = Some(t),
            (Some(t), Some(first)) if t != first => {
                self.problems.push(problem(
                    ProblemKind::UnsupportedAttribute,
                    "elem_type",
                    format!(
                        "{} input beside a {} one; every input has the one element type",
                        dtype_name(tensor.elem_type()),
                        first.onnx_name()
                    ),
                ));
                ok = false;
            }
            (Some(_), Some(_)) => {}
        }
        let mut dims = Vec::new();
        let given = self
            .input_shapes
            .iter()
            .find(|(n, _)| n == v.name())
            .map(|(_, d)| d.clone());
        match (&tensor.shape, given) {
            (Some(s), Some(given)) if s.dim.len() != given.len() => {
                self.problems.push(problem(
                    ProblemKind::Shape,
                    "input_shape",
                    format!(
                        "{} dims given, the input declares {}",
                        given.len(),
                        s.dim.len()
                    ),
                ));
                ok = false;
            }
            (_, Some(given)) => dims = given,
            (None, None) => {
                self.problems.push(problem(
                    ProblemKind::DynamicDim,
                    "shape",
                    "the input has no shape (every dimension must be fixed)".into(),
                ));
                ok = false;
            }
            (Some(s), None) => {
                for (i, d) in s.dim.iter().enumerate() {
                    match &d.value {
                        Some(dimension::Value::DimValue(n)) if *n >= 0 => {
                            dims.push(usize::try_from(*n).unwrap_or(usize::MAX))
                        }
                        other => {
                            let what = match other {
                                Some(dimension::Value::DimParam(p)) => {
                                    format!("symbolic `{}`", torchlean_ir::shorten(p))
                                }
                                Some(dimension::Value::DimValue(n)) => format!("{n}"),
                                None => "unknown".into(),
                            };
                            self.problems.push(problem(
                                ProblemKind::DynamicDim,
                                &format!("shape[{i}]"),
                                format!("dimension {what}; every dimension must be fixed (give the input's dims: --input-shape NAME=D0xD1x…)"),
                            ));
                            ok = false;
                        }
                    }
                }
            }
        }
        let shape = Shape::new(dims);
        if let Err(e) = shape.checked_size() {
            self.problems
                .push(problem(ProblemKind::Shape, "shape", String::new()).because(e));
            ok = false;
        }
        if !ok {
            self.values.insert(v.name().to_string(), Val::Poisoned);
            return;
        }
        let id = self.push_node(OpKind::Input, vec![], shape.clone());
        self.inputs.push((id, v.name().to_string()));
        let o = Operand { id, shape };
        let val = if ids { Val::Ids(o) } else { Val::Node(o) };
        self.values.insert(v.name().to_string(), val);
    }

    fn poison(&mut self, ctx: &Ctx<'_>) {
        for o in ctx.node.output.iter().filter(|o| !o.is_empty()) {
            self.values.insert(o.clone(), Val::Poisoned);
        }
    }

    /// The declared shape of a node's first output, if the model states one, against ours.
    fn check_declared(&mut self, ctx: &Ctx<'_>) {
        let Some(out) = ctx.node.output.first() else {
            return;
        };
        let (Some(want), Some(Val::Node(got))) = (self.declared.get(out), self.values.get(out))
        else {
            return;
        };
        let agrees = want.len() == got.shape.rank()
            && want
                .iter()
                .zip(got.shape.dims())
                .all(|(w, g)| w.is_none_or(|w| w == *g));
        if !agrees {
            let shown: Vec<String> = want
                .iter()
                .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
                .collect();
            let p = ctx.problem(
                ProblemKind::Shape,
                "output",
                format!(
                    "the model declares `{out}` as [{}]; its inferred shape is {}",
                    shown.join(", "),
                    got.shape
                ),
            );
            self.problems.push(p);
        }
    }

    fn finish(mut self, graph: &GraphProto) -> Result<Imported> {
        if graph.output.is_empty() {
            self.problems
                .push(model_problem("output", "the graph has no output"));
        }
        let mut outputs = Vec::with_capacity(graph.output.len());
        for name in graph.output.iter().map(|o| o.name().to_string()) {
            match self.values.get(&name).cloned() {
                Some(Val::Node(o) | Val::Ids(o)) => outputs.push(o.id),
                Some(Val::Const(i)) => match self.const_node(i) {
                    Ok(o) => outputs.push(o.id),
                    Err(p) => self.problems.push(p),
                },
                Some(Val::Poisoned) => {}
                None => self.problems.push(Problem::new(
                    ProblemKind::Model,
                    name,
                    "output",
                    "name",
                    "no node produces the graph output",
                )),
            }
        }
        if !self.problems.is_empty() {
            return Err(OnnxError::Problems(self.problems));
        }
        let (Some(&(input_id, _)), Some(&output_id)) = (self.inputs.first(), outputs.first())
        else {
            return Err(OnnxError::Problems(vec![model_problem(
                "graph",
                "no input or output node",
            )]));
        };
        let mut g = Graph::new(input_id, output_id, self.nodes);
        g.extra_outputs = outputs[1..].to_vec();
        if self.inputs.len() > 1 {
            // names travel with the graph only beside `input_ids` (several inputs)
            g.extra_inputs = self.inputs[1..].iter().map(|&(id, _)| id).collect();
            g.input_names = self.inputs.into_iter().map(|(_, name)| name).collect();
        }
        let mut diags: Vec<Diagnostic> = check_shapes(&g)
            .into_iter()
            .filter(Diagnostic::is_error)
            .collect();
        if diags.is_empty() {
            diags.extend(
                check_payload(&g, &self.payload)
                    .into_iter()
                    .filter(Diagnostic::is_error),
            );
        }
        if !diags.is_empty() {
            return Err(OnnxError::Ir {
                source: IrError::Invalid(diags),
            });
        }
        Ok(Imported {
            graph: g,
            payload: self.payload,
            params: self.params,
            elem_type: self.elem_type.unwrap_or(ElemType::F32),
            opset: self.opset,
        })
    }

    // ---- what the op mappings call ----

    fn push_node(&mut self, kind: OpKind, parents: Vec<usize>, shape: Shape) -> usize {
        let id = self.nodes.len();
        self.nodes.push(Node {
            id,
            kind,
            parents,
            shape,
        });
        id
    }

    /// Defines an ONNX value as a constant.
    pub(crate) fn define_const(&mut self, name: &str, c: Constant, initializer: Option<String>) {
        self.consts.push(ConstEntry {
            c,
            initializer,
            bound: false,
            node: None,
        });
        self.values
            .insert(name.to_string(), Val::Const(self.consts.len() - 1));
    }

    /// Defines an ONNX value as an IR node's output.
    pub(crate) fn define(&mut self, name: &str, o: Operand) {
        self.values.insert(name.to_string(), Val::Node(o));
    }

    /// Defines an ONNX value as another one (Identity, Dropout in inference).
    pub(crate) fn alias(&mut self, name: &str, of: &str) {
        if let Some(v) = self.values.get(of).cloned() {
            self.values.insert(name.to_string(), v);
        }
    }

    /// Whether an earlier problem left the value unavailable.
    pub(crate) fn poisoned(&self, name: &str) -> bool {
        matches!(self.values.get(name), Some(Val::Poisoned))
    }

    /// The static shape of an ONNX value (every value's shape is known at import), `None`
    /// for an unknown or poisoned one.
    pub(crate) fn shape_of(&self, name: &str) -> Option<Shape> {
        match self.values.get(name)? {
            Val::Node(o) | Val::Ids(o) => Some(o.shape.clone()),
            Val::Const(i) => Some(self.consts[*i].c.shape.clone()),
            Val::Poisoned => None,
        }
    }

    /// The constant an ONNX value is, if it is one (initializer or `Constant` output).
    pub(crate) fn constant(&self, name: &str) -> Option<&Constant> {
        match self.values.get(name) {
            Some(Val::Const(i)) => Some(&self.consts[*i].c),
            _ => None,
        }
    }

    /// The constant `name` is, if it may be folded at import: an integer or BOOL constant, or
    /// a float one that is no initializer (a `Constant` node's, or one the import computed).
    /// A float initializer is a parameter: it stays a `const` node, so it gets its gradient.
    pub(crate) fn folded(&self, name: &str) -> Option<&Constant> {
        match self.values.get(name) {
            Some(Val::Const(i)) => {
                let e = &self.consts[*i];
                (e.initializer.is_none() || e.c.ints().is_some() || e.c.bools().is_some())
                    .then_some(&e.c)
            }
            _ => None,
        }
    }

    /// The initializer named `name` (its name), or the graph input bound to a constant under
    /// it (`None`), if it is used by exactly one node input and not yet placed anywhere: the
    /// form a weight must have to become an op's payload tensor. A bound weight is payload
    /// like an initializer (an IR weight always is) but no parameter of the model: no
    /// gradient is reported under its name.
    pub(crate) fn weight(&self, name: &str) -> Option<(Option<&str>, &Constant)> {
        match self.values.get(name) {
            Some(Val::Const(i)) => {
                let e = &self.consts[*i];
                let placeable = e.node.is_none() && self.uses.get(name) == Some(&1);
                (placeable && (e.initializer.is_some() || e.bound))
                    .then_some((e.initializer.as_deref(), &e.c))
            }
            _ => None,
        }
    }

    /// A value as data: an IR node (a constant gets its `const` node on first use).
    pub(crate) fn value(
        &mut self,
        ctx: &Ctx<'_>,
        name: &str,
    ) -> std::result::Result<Operand, Problem> {
        match self.values.get(name).cloned() {
            Some(Val::Node(o)) => Ok(o),
            Some(Val::Ids(o)) if self.ids_as_data => Ok(o),
            Some(Val::Ids(_)) => Err(ctx.unsupported(
                "input",
                format!(
                    "`{}` is an integer graph input: it is token ids for Gather (an embedding), or data for the ops exact on integers, which {} is not here (a float operand beside it, or an op the IR computes in floats); bind it (--bind NAME=FILE) to use it as a constant",
                    torchlean_ir::shorten(name),
                    ctx.op
                ),
            )),
            Some(Val::Const(i)) => self.const_node(i),
            Some(Val::Poisoned) => Err(ctx.problem(
                ProblemKind::Upstream,
                "input",
                format!("`{name}` could not be imported"),
            )),
            None => Err(ctx.problem(
                ProblemKind::Model,
                "input",
                format!(
                    "`{}` is not produced by any earlier node",
                    torchlean_ir::shorten(name)
                ),
            )),
        }
    }

    /// Maps a node whose integer operands are data, as `map` does: integer values read as
    /// their float nodes, and the node's outputs are integer values in turn (exact while they
    /// stay below 2^53 in magnitude, as ONNX's int64 arithmetic is there).
    pub(crate) fn map_with_integer_data<R>(
        &mut self,
        ctx: &Ctx<'_>,
        map: impl FnOnce(&mut Self) -> R,
    ) -> R {
        self.ids_as_data = true;
        let r = map(self);
        self.ids_as_data = false;
        for out in &ctx.node.output {
            if let Some(Val::Node(o)) = self.values.get(out).cloned() {
                self.values.insert(out.clone(), Val::Ids(o));
            }
        }
        r
    }

    /// The float ids node of an integer graph input ([`Val::Ids`]), if `name` is one.
    pub(crate) fn ids(&self, name: &str) -> Option<Operand> {
        match self.values.get(name) {
            Some(Val::Ids(o)) => Some(o.clone()),
            _ => None,
        }
    }

    /// A `const` node holding `t` (a value the import computed: not a parameter).
    pub(crate) fn constant_tensor(&mut self, t: Tensor<f64>) -> Operand {
        let shape = t.shape().clone();
        let id = self.push_node(OpKind::Const { value_shape: None }, vec![], shape.clone());
        self.payload.insert(id, desc::CONST.payload_names()[0], t);
        Operand { id, shape }
    }

    fn const_node(&mut self, i: usize) -> std::result::Result<Operand, Problem> {
        if let Some(o) = &self.consts[i].node {
            return Ok(o.clone());
        }
        let shape = self.consts[i].c.shape.clone();
        let t = Tensor::new(shape.clone(), self.consts[i].c.floats()).map_err(|e| {
            Problem::new(
                ProblemKind::BadTensor,
                self.consts[i].initializer.clone().unwrap_or_default(),
                "initializer",
                "data",
                "",
            )
            .because(e)
        })?;
        let id = self.push_node(OpKind::Const { value_shape: None }, vec![], shape.clone());
        let name = desc::CONST.payload_names()[0];
        self.payload.insert(id, name, t);
        if let Some(onnx_name) = self.consts[i].initializer.clone() {
            self.params.push(Param {
                onnx_name,
                node: id,
                tensor: name,
            });
        }
        let o = Operand { id, shape };
        self.consts[i].node = Some(o.clone());
        Ok(o)
    }

    /// Applies `op` to `parents` with payload `weights` (ONNX initializer name, if any, and
    /// tensor, in the op's payload order): the output shape is the op's shape rule's.
    pub(crate) fn apply_with(
        &mut self,
        ctx: &Ctx<'_>,
        op: Op,
        parents: &[&Operand],
        weights: Vec<(Option<String>, Tensor<f64>)>,
        eps: Option<f64>,
    ) -> std::result::Result<Operand, Problem> {
        let mut shapes: Vec<Shape> = parents.iter().map(|p| p.shape.clone()).collect();
        shapes.extend(weights.iter().map(|(_, t)| t.shape().clone()));
        let shape = op.infer_shape(&shapes).map_err(|e| {
            ctx.problem(ProblemKind::Shape, "", format!("as IR `{}`", op.name()))
                .because(e)
        })?;
        let names = op.desc().payload_names();
        let ids = parents.iter().map(|p| p.id).collect();
        let id = self.push_node(OpKind::Op(op), ids, shape.clone());
        for (&tensor, (onnx_name, t)) in names.iter().zip(weights) {
            self.payload.insert(id, tensor, t);
            if let Some(onnx_name) = onnx_name {
                self.params.push(Param {
                    onnx_name,
                    node: id,
                    tensor,
                });
            }
        }
        if let Some(eps) = eps {
            self.payload.entries.entry(id).or_default().eps = Some(eps);
        }
        Ok(Operand { id, shape })
    }

    /// Replaces the op of node `id` (made by [`Builder::apply_with`]; its shape stands).
    pub(crate) fn set_op(&mut self, id: usize, op: Op) {
        if let Some(n) = self.nodes.get_mut(id) {
            n.kind = OpKind::Op(op);
        }
    }

    /// Applies an op without payload.
    pub(crate) fn apply(
        &mut self,
        ctx: &Ctx<'_>,
        op: Op,
        parents: &[&Operand],
    ) -> std::result::Result<Operand, Problem> {
        self.apply_with(ctx, op, parents, Vec::new(), None)
    }
}

/// The dims a value's type declares (`None` for a symbolic or unknown dim), if it has a shape.
fn declared_dims(v: &ValueInfoProto) -> Option<Vec<Option<usize>>> {
    let Some(type_proto::Value::TensorType(t)) = v.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    Some(
        t.shape
            .as_ref()?
            .dim
            .iter()
            .map(|d| match d.value {
                Some(dimension::Value::DimValue(n)) => usize::try_from(n).ok(),
                _ => None,
            })
            .collect(),
    )
}
