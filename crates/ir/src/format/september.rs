//! TorchLean's September dialect: reading it (lowered into our kinds, inline weights lifted into a
//! [`Payload`]) and writing it (`../shared/reference/torchlean-wire-latest.md` lists every
//! difference from the August dialect; `docs/ir-format.md` says how each is handled).
//!
//! Reading lowers each file node into one IR node where a kind corresponds (`conv` with two
//! spatial axes, equal dilations, symmetric padding and equal strides → `conv2d` (its dense
//! kernel as one group; a grouped `conv2d` is not written); `max_pool`/
//! `avg_pool` → the `*_pool2d` kinds; `batch_norm_eval` with `channel_axis` 1;
//! `transpose` `axis1`/`axis2`), or into several with identical meaning (`reduce_*` with
//! `axes`/`keepdim`: one single-axis reduction per axis, largest first, each followed by a
//! `reshape` re-inserting the 1 under `keepdim`, as TorchLean lowers them; broadcasting
//! `matmul`: `reshape`/`broadcast_to` around our 2-D or batched product; `layernorm` with a
//! non-trivial inline γ/β: our `layernorm`, then `mul_elem`/`add` with the constants;
//! `safe_log`: `log(softplus(x) + ε)`). Anything else is an error naming the node and field.

use crate::error::{shown, Diagnostic, IrError, Result};
use crate::format::august::{check_format, GraphInputs, FORMAT, INPUT_ID, INPUT_IDS};
use crate::format::dialect::{fields, tags, Dialect, FileNode, GraphDoc, OUTPUT_IDS};
use crate::graph::{Graph, Node};
use crate::kind::OpKind;
use crate::payload::Payload;
use crate::semantics::payload_names;
use serde_json::{Map, Value};
use torchlean_spec::ops::desc::{self, BATCH_NORM_DEFAULT_EPS, LAYER_NORM_DEFAULT_EPS};
use torchlean_spec::tensor::{json_to_f64, parse_shape};
use torchlean_spec::{BinaryOp, Conv2dSpec, Op, PoolKind, PoolSpec, Shape, Tensor, UnaryOp};

/// TorchLean's `normalizationEpsilon`: the September dialect's layer-norm ε when a node has none.
pub const SEPTEMBER_NORMALIZATION_EPS: f64 = 1e-5;

/// Inline keys of the September dialect that are not payload names of our kinds.
const GAMMA: &str = "gamma";
const BETA: &str = "beta";
const EPS: &str = "eps";
const VALUES: &str = "values";
const TENSOR: &str = "tensor";

type Diags = Vec<Diagnostic>;

/// A node as the file has it, checked for the id discipline before lowering.
struct Raw<'a> {
    id: usize,
    kind: &'a str,
    parents: Vec<usize>,
    shape: Shape,
    obj: &'a Map<String, Value>,
}

/// Reads a September-dialect graph object (its dialect already detected).
pub(crate) fn read(obj: &Map<String, Value>) -> Result<GraphDoc> {
    let mut errors = Vec::new();
    check_format(
        obj,
        "missing (required in the September dialect)",
        &mut errors,
    );
    let file_inputs = GraphInputs::read(obj, &mut errors);
    let listed: Vec<usize> = std::iter::once(file_inputs.first)
        .chain(file_inputs.extra.iter().copied())
        .collect();
    let outputs = match obj.get(OUTPUT_IDS).map(parse_shape) {
        Some(Ok(s)) if s.rank() > 0 => s.dims().to_vec(),
        Some(Ok(_)) => {
            errors.push(
                Diagnostic::error("is empty, expected at least one node id").field(OUTPUT_IDS),
            );
            vec![]
        }
        Some(Err(e)) => {
            errors.push(Diagnostic::spec(e).field(OUTPUT_IDS));
            vec![]
        }
        None => vec![],
    };
    // every node is looked at, the malformed ones too (as `None`), so that every problem is
    // reported: a node whose parent failed is skipped (its parent's diagnostics say why)
    let mut raws: Vec<Option<Raw<'_>>> = Vec::new();
    match obj.get("nodes").and_then(Value::as_array) {
        None => errors.push(Diagnostic::error("missing array").field("nodes")),
        Some(nodes) => {
            for (i, v) in nodes.iter().enumerate() {
                match raw_node(i, v) {
                    Ok(r) => raws.push(Some(r)),
                    Err(d) => {
                        errors.extend(d);
                        raws.push(None);
                    }
                }
            }
        }
    }
    let mut inputs: Vec<usize> = raws
        .iter()
        .flatten()
        .filter(|r| desc::lookup(r.kind).is_some_and(|d| d.is_input()))
        .map(|r| r.id)
        .collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    inputs.sort_unstable();
    if inputs != sorted {
        let (field, what) = if listed.len() == 1 {
            (
                INPUT_ID,
                format!("{} must name the only `input` node", listed[0]),
            )
        } else {
            (
                INPUT_IDS,
                format!("{listed:?} must name every `input` node once"),
            )
        };
        errors.push(
            Diagnostic::error(format!("{what} (the file's input nodes: {inputs:?})")).field(field),
        );
    }
    for &o in outputs.iter().filter(|&&o| o >= raws.len()) {
        errors.push(Diagnostic::error(format!("{o} is not a node")).field(OUTPUT_IDS));
    }
    let mut l = Lowering::default();
    for r in &raws {
        let Some(r) = r else {
            l.map.push(None);
            continue;
        };
        let problems = kind_problems(r);
        if !problems.is_empty() {
            errors.extend(problems.into_iter().map(|d| d.at(r.id, r.kind)));
            l.map.push(None);
            continue;
        }
        let lowered = match r
            .parents
            .iter()
            .map(|&p| l.map[p])
            .collect::<Option<Vec<_>>>()
        {
            // a parent failed: its own diagnostics say why
            None => None,
            Some(parents) => match l.lower(r, &parents) {
                Ok(id) => Some(id),
                Err(d) => {
                    errors.extend(d.into_iter().map(|d| d.at(r.id, r.kind)));
                    None
                }
            },
        };
        l.map.push(lowered);
    }
    if !errors.is_empty() {
        return Err(IrError::Invalid(errors));
    }
    let at = |id: usize| l.map[id].expect("every node lowered (no error was reported)");
    let mut graph = Graph {
        input_id: at(file_inputs.first),
        extra_inputs: file_inputs.extra.iter().map(|&i| at(i)).collect(),
        input_names: Vec::new(),
        output_id: at(outputs[0]),
        extra_outputs: outputs[1..].iter().map(|&o| at(o)).collect(),
        nodes: l.nodes,
    };
    graph.input_names = file_inputs.names;
    let doc = GraphDoc {
        graph,
        payload: l.payload,
        dialect: Dialect::September2026,
        origin: l.origin,
        file_kinds: raws
            .iter()
            .map(|r| r.as_ref().map_or_else(String::new, |r| r.kind.to_string()))
            .collect(),
    };
    let problems: Diags = crate::check_shapes(&doc.graph)
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    if problems.is_empty() {
        Ok(doc)
    } else {
        Err(IrError::Invalid(doc.in_file_terms(problems)))
    }
}

/// The id discipline of the raw nodes (TorchLean checks it before lowering): `id` equals the
/// index, parents are earlier nodes, a `shape` and a tensor `value_kind`.
fn raw_node(index: usize, v: &Value) -> std::result::Result<Raw<'_>, Diags> {
    let Some(obj) = v.as_object() else {
        return Err(vec![Diagnostic::error(format!(
            "nodes[{index}] is not an object"
        ))
        .at_node(index)]);
    };
    let kind = obj.get("kind").and_then(Value::as_str);
    let label = kind.unwrap_or("?");
    let mut errors = Vec::new();
    match obj.get("id").and_then(Value::as_u64) {
        Some(i) if i == index as u64 => {}
        Some(i) => errors
            .push(Diagnostic::error(format!("is {i}, expected its index {index}")).field("id")),
        None => errors.push(Diagnostic::error("missing or not a non-negative integer").field("id")),
    }
    let parents = match obj.get("parents").map(parse_shape) {
        Some(Ok(s)) => s.dims().to_vec(),
        Some(Err(e)) => {
            errors.push(Diagnostic::spec(e).field("parents"));
            vec![]
        }
        None => {
            errors.push(Diagnostic::error("missing").field("parents"));
            vec![]
        }
    };
    for &p in parents.iter().filter(|&&p| p >= index) {
        errors.push(
            Diagnostic::error(format!(
                "parent id {p} is not < {index} (parents must come earlier)"
            ))
            .field("parents"),
        );
    }
    let shape = match obj.get("shape").map(parse_shape) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            errors.push(Diagnostic::spec(e).field("shape"));
            Shape::scalar()
        }
        None => {
            errors.push(Diagnostic::error("missing").field("shape"));
            Shape::scalar()
        }
    };
    match obj.get(fields::VALUE_KIND) {
        None => {}
        Some(Value::String(s)) if s == TENSOR => {}
        Some(other) => errors.push(
            Diagnostic::error(format!(
                "is {}: only tensor values are supported (no tuple nodes)",
                shown(other)
            ))
            .field(fields::VALUE_KIND),
        ),
    }
    if kind.is_none() {
        errors.push(Diagnostic::error("missing or not a string").field("kind"));
    }
    match kind {
        Some(kind) if errors.is_empty() => Ok(Raw {
            id: index,
            kind,
            parents,
            shape,
            obj,
        }),
        _ => Err(errors.into_iter().map(|d| d.at(index, label)).collect()),
    }
}

/// The IR being built, and the IR node holding each file node's value.
#[derive(Default)]
struct Lowering {
    nodes: Vec<Node>,
    origin: Vec<FileNode>,
    payload: Payload,
    map: Vec<Option<usize>>,
}

impl Lowering {
    fn push(&mut self, file: FileNode, kind: OpKind, parents: Vec<usize>, shape: Shape) -> usize {
        let id = self.nodes.len();
        self.nodes.push(Node {
            id,
            kind,
            parents,
            shape,
        });
        self.origin.push(file);
        id
    }

    fn shape(&self, n: usize) -> &Shape {
        &self.nodes[n].shape
    }

    /// An intermediate node of a lowering, its shape from its op's rule.
    fn op(
        &mut self,
        raw: &Raw<'_>,
        op: Op,
        parents: Vec<usize>,
    ) -> std::result::Result<usize, Diags> {
        let shapes: Vec<Shape> = parents.iter().map(|&p| self.shape(p).clone()).collect();
        let shape = op
            .infer_shape(&shapes)
            .map_err(|e| vec![Diagnostic::spec_in_its_field(e)])?;
        Ok(self.push(file(raw.id), OpKind::Op(op), parents, shape))
    }

    /// `x` reshaped to `to` (no node when it already has that shape).
    fn reshape(&mut self, raw: &Raw<'_>, x: usize, to: Shape) -> std::result::Result<usize, Diags> {
        let from = self.shape(x).clone();
        if from == to {
            return Ok(x);
        }
        self.op(raw, Op::Reshape { from, to }, vec![x])
    }

    /// `x` broadcast to `to` (no node when it already has that shape).
    fn broadcast(
        &mut self,
        raw: &Raw<'_>,
        x: usize,
        to: Shape,
    ) -> std::result::Result<usize, Diags> {
        let from = self.shape(x).clone();
        if from == to {
            return Ok(x);
        }
        self.op(raw, Op::BroadcastTo { from, to }, vec![x])
    }

    /// A constant node holding `t`, made from inline tensor `key` of file node `raw`.
    fn constant(&mut self, raw: &Raw<'_>, key: &'static str, t: Tensor<f64>) -> usize {
        let kind = OpKind::Const { value_shape: None };
        let name = payload_names(&kind)[0];
        let id = self.push(
            FileNode {
                id: raw.id,
                tensor: Some(key),
            },
            kind,
            vec![],
            t.shape().clone(),
        );
        self.payload.insert(id, name, t);
        id
    }

    /// A one-to-one node with the file's declared shape (checked later by `check_shapes`).
    fn one(&mut self, raw: &Raw<'_>, kind: OpKind, parents: &[usize]) -> usize {
        self.push(file(raw.id), kind, parents.to_vec(), raw.shape.clone())
    }

    /// The last node of a lowering must have the declared shape.
    fn finish(&self, raw: &Raw<'_>, last: usize) -> std::result::Result<usize, Diags> {
        if self.shape(last) == &raw.shape {
            Ok(last)
        } else {
            Err(vec![Diagnostic::error(format!(
                "declared {}, but the node computes {}",
                raw.shape,
                self.shape(last)
            ))
            .field("shape")])
        }
    }

    /// Lowers one file node whose parents are the IR nodes `parents`; returns the IR node
    /// holding its value.
    fn lower(&mut self, raw: &Raw<'_>, parents: &[usize]) -> std::result::Result<usize, Diags> {
        let k = raw.kind;
        match k {
            tags::CONV => return self.conv(raw, parents),
            tags::MAX_POOL => return self.pool(raw, parents, PoolKind::Max),
            tags::AVG_POOL => return self.pool(raw, parents, PoolKind::Avg),
            tags::BATCH_NORM_EVAL => return self.batch_norm(raw, parents),
            tags::SAFE_LOG => return self.safe_log(raw, parents),
            _ => {}
        }
        // a known kind of the September dialect: `kind_problems` refused the others
        match desc::lookup(k).and_then(|d| d.prototype()) {
            Some(Op::ReduceSum { .. }) => self.reduce(raw, parents, true),
            Some(Op::ReduceMean { .. }) => self.reduce(raw, parents, false),
            Some(Op::MatMul) => self.matmul(raw, parents),
            Some(Op::LayerNorm { .. }) => self.layernorm(raw, parents),
            Some(Op::Transpose { .. }) if raw.obj.contains_key(fields::AXIS1) => {
                let mut a = Attrs::new(raw.obj);
                let (dim0, dim1) = (a.nat(fields::AXIS1), a.nat(fields::AXIS2));
                a.done()?;
                Ok(self.one(raw, OpKind::Op(Op::Transpose { dim0, dim1 }), parents))
            }
            _ => {
                let kind = OpKind::parse(k, raw.obj)?;
                let id = self.one(raw, kind.clone(), parents);
                match kind {
                    OpKind::Const { value_shape } => {
                        let shape = value_shape.unwrap_or_else(|| raw.shape.clone());
                        self.const_values(raw, id, shape)?;
                    }
                    OpKind::Op(Op::Linear) => self.linear(raw, id, parents)?,
                    _ => {}
                }
                Ok(id)
            }
        }
    }

    /// A `const` node's optional flat `values`.
    fn const_values(
        &mut self,
        raw: &Raw<'_>,
        id: usize,
        shape: Shape,
    ) -> std::result::Result<(), Diags> {
        let Some(v) = raw.obj.get(VALUES) else {
            return Ok(());
        };
        let err = |m: String| vec![Diagnostic::error(m).field(VALUES)];
        let Some(items) = v.as_array() else {
            return Err(err(format!(
                "is {}, expected a flat array of numbers",
                shown(v)
            )));
        };
        let data: Option<Vec<f64>> = items.iter().map(Value::as_f64).collect();
        let Some(data) = data else {
            return Err(err(
                "expected numbers only (the September dialect has no NaN or infinity)".into(),
            ));
        };
        if data.len() != shape.size() {
            return Err(err(format!(
                "has {} values, the shape {shape} holds {}",
                data.len(),
                shape.size()
            )));
        }
        let t = Tensor::new(shape, data).map_err(|e| err(e.to_string()))?;
        let kind = OpKind::Const { value_shape: None };
        self.payload.insert(id, payload_names(&kind)[0], t);
        Ok(())
    }

    /// The inline tensors of a node that takes payload (`weight`, `bias`, batch norm's four),
    /// nested arrays, each optional (a separate payload may supply them).
    fn inline(&mut self, raw: &Raw<'_>, id: usize) -> std::result::Result<(), Diags> {
        let mut errors = Vec::new();
        for &name in payload_names(&self.nodes[id].kind) {
            match raw.obj.get(name).map(nested) {
                None => {}
                Some(Ok(t)) => self.payload.insert(id, name, t),
                Some(Err(e)) => errors.push(e.field(name)),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    fn linear(
        &mut self,
        raw: &Raw<'_>,
        id: usize,
        parents: &[usize],
    ) -> std::result::Result<(), Diags> {
        self.inline(raw, id)?;
        let mut a = Attrs::new(raw.obj);
        let (out_dim, in_dim) = (a.opt_nat("out_dim"), a.opt_nat("in_dim"));
        a.done()?;
        let in_actual = parents
            .first()
            .and_then(|&p| self.shape(p).dims().last().copied());
        let out_actual = raw.shape.dims().last().copied();
        let mut errors = Vec::new();
        for (key, given, actual) in [
            ("out_dim", out_dim, out_actual),
            ("in_dim", in_dim, in_actual),
        ] {
            if let (Some(g), Some(x)) = (given, actual) {
                if g != x {
                    errors.push(
                        Diagnostic::error(format!("is {g}, but the node's shapes give {x}"))
                            .field(key),
                    );
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    fn conv(&mut self, raw: &Raw<'_>, parents: &[usize]) -> std::result::Result<usize, Diags> {
        let mut a = Attrs::new(raw.obj);
        let rank = a.nat("spatial_rank");
        let kernel = a.nats("kernel", rank);
        let stride = a.nats("stride", rank);
        let padding = a.nats("padding", rank);
        let dilation = a.nats("dilation", rank);
        let padding_after = a.nats("padding_after", rank);
        // grouped kernels are written dense (zero blocks), so any `groups` is a one-group conv
        let _groups = a.nat("groups");
        let channel_axis = a.nat("channel_axis");
        let in_channels = a.nat("in_channels");
        let out_channels = a.nat("out_channels");
        a.done()?;
        let x = self
            .shape(*parents.first().ok_or_else(|| vec![arity(1)])?)
            .clone();
        let mut errors = Vec::new();
        let mut no = |field: &str, why: String| {
            errors.push(
                Diagnostic::error(format!("{why}: no `conv2d` counterpart"))
                    .field(field.to_string()),
            )
        };
        if rank != 2 {
            no("spatial_rank", format!("{rank} spatial axes"));
        }
        if dilation.windows(2).any(|w| w[0] != w[1]) {
            no("dilation", format!("unequal dilations {dilation:?}"));
        }
        if padding_after != padding {
            no(
                "padding_after",
                format!("padding_after {padding_after:?} differs from padding {padding:?}"),
            );
        }
        if stride.windows(2).any(|w| w[0] != w[1]) {
            no("stride", format!("unequal strides {stride:?}"));
        }
        if padding.windows(2).any(|w| w[0] != w[1]) {
            no("padding", format!("unequal paddings {padding:?}"));
        }
        if !matches!(x.rank(), 3 | 4) || channel_axis + 3 != x.rank() {
            no(
                "channel_axis",
                format!("channel axis {channel_axis} of an input {x}"),
            );
        }
        if let Some(v) = raw.obj.get("input_spatial") {
            let spatial = x.dims().get(channel_axis + 1..).unwrap_or(&[]);
            if parse_shape(v).ok().as_ref().map(Shape::dims) != Some(spatial) {
                errors.push(
                    Diagnostic::error(format!(
                        "is {}, but the parent's spatial extents are {spatial:?}",
                        shown(v)
                    ))
                    .field("input_spatial"),
                );
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let spec = Conv2dSpec {
            in_channels,
            out_channels,
            kernel_h: kernel[0],
            kernel_w: kernel[1],
            stride: stride[0],
            padding: padding[0],
            groups: 1,
            dilation: dilation[0],
        };
        let id = self.one(raw, OpKind::Op(Op::Conv2d(spec)), parents);
        self.inline(raw, id)?;
        Ok(id)
    }

    fn pool(
        &mut self,
        raw: &Raw<'_>,
        parents: &[usize],
        kind: PoolKind,
    ) -> std::result::Result<usize, Diags> {
        let mut a = Attrs::new(raw.obj);
        let rank = a.nat("spatial_rank");
        let kernel = a.nats("kernel", rank);
        let stride = a.nats("stride", rank);
        let padding = a.nats("padding", rank);
        a.done()?;
        let mut errors = Vec::new();
        if rank != 2 {
            errors.push(
                Diagnostic::error(format!(
                    "{rank} spatial axes: only 2 lower to a `*_pool2d` kind"
                ))
                .field("spatial_rank"),
            );
        } else {
            if stride[0] != stride[1] {
                errors.push(
                    Diagnostic::error(format!(
                        "unequal strides {stride:?}: no `*_pool2d` counterpart"
                    ))
                    .field("stride"),
                );
            }
            if padding[0] != padding[1] {
                errors.push(
                    Diagnostic::error(format!(
                        "unequal paddings {padding:?}: no `*_pool2d` counterpart"
                    ))
                    .field("padding"),
                );
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let spec = PoolSpec {
            kind,
            kernel_h: kernel[0],
            kernel_w: kernel[1],
            stride: stride[0],
            padding: padding[0],
            padded: padding[0] != 0,
        };
        Ok(self.one(raw, OpKind::Op(Op::Pool(spec)), parents))
    }

    fn batch_norm(
        &mut self,
        raw: &Raw<'_>,
        parents: &[usize],
    ) -> std::result::Result<usize, Diags> {
        let mut a = Attrs::new(raw.obj);
        let channel_axis = a.nat("channel_axis");
        let channels = a.nat("channels");
        let eps = a.opt_number(EPS);
        a.done()?;
        if channel_axis != 1 {
            return Err(vec![Diagnostic::error(format!(
                "channel axis {channel_axis}: only axis 1 lowers to `batch_norm2d_nchw_eval`"
            ))
            .field("channel_axis")]);
        }
        let op = Op::BatchNormEval {
            channels,
            eps: eps.unwrap_or(BATCH_NORM_DEFAULT_EPS),
        };
        let id = self.one(raw, OpKind::Op(op), parents);
        self.inline(raw, id)?;
        if let Some(eps) = eps {
            self.payload.entries.entry(id).or_default().eps = Some(eps);
        }
        Ok(id)
    }

    fn reduce(
        &mut self,
        raw: &Raw<'_>,
        parents: &[usize],
        sum: bool,
    ) -> std::result::Result<usize, Diags> {
        let mut a = Attrs::new(raw.obj);
        let axes = a.list(fields::AXES);
        let keepdim = a.boolean(fields::KEEPDIM);
        a.done()?;
        let x = *parents.first().ok_or_else(|| vec![arity(1)])?;
        let shape = self.shape(x).clone();
        let mut errors = Vec::new();
        for (i, &axis) in axes.iter().enumerate() {
            match shape.dim(axis) {
                None => errors.push(format!(
                    "axis {axis} is not below the rank {}",
                    shape.rank()
                )),
                Some(0) => errors.push(format!("axis {axis} has extent 0")),
                Some(_) if axes[..i].contains(&axis) => {
                    errors.push(format!("axis {axis} is repeated"))
                }
                Some(_) => {}
            }
        }
        if !errors.is_empty() {
            return Err(errors
                .into_iter()
                .map(|e| Diagnostic::error(e).field(fields::AXES))
                .collect());
        }
        let mut sorted = axes;
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let mut cur = x;
        for axis in sorted {
            let op = if sum {
                Op::ReduceSum { axis }
            } else {
                Op::ReduceMean { axis }
            };
            cur = self.op(raw, op, vec![cur])?;
            if keepdim {
                let mut dims = self.shape(cur).dims().to_vec();
                dims.insert(axis, 1);
                cur = self.op(
                    raw,
                    Op::Reshape {
                        from: self.shape(cur).clone(),
                        to: Shape::from(dims),
                    },
                    vec![cur],
                )?;
            }
        }
        self.finish(raw, cur)
    }

    /// `torch.matmul`: rank-1 operands promoted (and the inserted axis dropped), leading batch
    /// axes broadcast right-aligned, over our 2-D or batched 3-D product.
    fn matmul(&mut self, raw: &Raw<'_>, parents: &[usize]) -> std::result::Result<usize, Diags> {
        let [pa, pb] = parents else {
            return Err(vec![arity(2)]);
        };
        let (a, b) = (self.shape(*pa).clone(), self.shape(*pb).clone());
        let direct = (a.rank() == 2 && b.rank() == 2)
            || (a.rank() == 3 && b.rank() == 3 && a.dims()[0] == b.dims()[0]);
        if direct {
            return Ok(self.one(raw, OpKind::Op(Op::MatMul), parents));
        }
        if a.rank() == 0 || b.rank() == 0 {
            return Err(vec![Diagnostic::error(format!(
                "operands {a} and {b}: scalars are rejected"
            ))
            .field("parents")]);
        }
        let xa = if a.rank() == 1 {
            self.reshape(raw, *pa, Shape::from(vec![1, a.dims()[0]]))?
        } else {
            *pa
        };
        let xb = if b.rank() == 1 {
            self.reshape(raw, *pb, Shape::from(vec![b.dims()[0], 1]))?
        } else {
            *pb
        };
        let (sa, sb) = (
            self.shape(xa).dims().to_vec(),
            self.shape(xb).dims().to_vec(),
        );
        let (ba, ma) = sa.split_at(sa.len() - 2);
        let (bb, mb) = sb.split_at(sb.len() - 2);
        let Some(batch) = broadcast_dims(ba, bb) else {
            return Err(vec![Diagnostic::error(format!(
                "batch axes {ba:?} and {bb:?} do not broadcast"
            ))
            .field("parents")]);
        };
        let mut product = if batch.is_empty() {
            self.op(raw, Op::MatMul, vec![xa, xb])?
        } else {
            let flat: usize = batch.iter().product();
            let mut three = Vec::with_capacity(2);
            for (x, m) in [(xa, ma), (xb, mb)] {
                let full = Shape::from([batch.as_slice(), m].concat());
                let x = self.broadcast(raw, x, full)?;
                three.push(self.reshape(raw, x, Shape::from(vec![flat, m[0], m[1]]))?);
            }
            let p = self.op(raw, Op::MatMul, three)?;
            self.reshape(
                raw,
                p,
                Shape::from([batch.as_slice(), &[ma[0], mb[1]]].concat()),
            )?
        };
        let mut dims = self.shape(product).dims().to_vec();
        if b.rank() == 1 {
            dims.pop();
        }
        if a.rank() == 1 {
            dims.remove(dims.len() - if b.rank() == 1 { 1 } else { 2 });
        }
        product = self.reshape(raw, product, Shape::from(dims))?;
        self.finish(raw, product)
    }

    /// `layernorm` with inline `gamma`/`beta`/`eps`: our layer norm when γ = 1 and β = 0 (the
    /// exporter's values for a module without affine parameters), else followed by the affine
    /// map with γ and β as constants (so they get gradients).
    fn layernorm(&mut self, raw: &Raw<'_>, parents: &[usize]) -> std::result::Result<usize, Diags> {
        let mut a = Attrs::new(raw.obj);
        let axis = a.nat("axis");
        let eps = a.opt_number(EPS).unwrap_or(SEPTEMBER_NORMALIZATION_EPS);
        a.done()?;
        let mut errors = Vec::new();
        let mut tensor = |key: &'static str, trivial: f64| match raw.obj.get(key).map(nested) {
            None => None,
            Some(Ok(t)) if t.data().iter().all(|&v| v == trivial) => None,
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                errors.push(e.field(key));
                None
            }
        };
        let (gamma, beta) = (tensor(GAMMA, 1.0), tensor(BETA, 0.0));
        if !errors.is_empty() {
            return Err(errors);
        }
        let op = Op::LayerNorm {
            axis,
            eps: Some(eps),
        };
        if gamma.is_none() && beta.is_none() {
            return Ok(self.one(raw, OpKind::Op(op), parents));
        }
        let x = *parents.first().ok_or_else(|| vec![arity(1)])?;
        let mut cur = self.op(raw, op, vec![x])?;
        let full = self.shape(cur).clone();
        for (key, t, bin) in [(GAMMA, gamma, BinaryOp::Mul), (BETA, beta, BinaryOp::Add)] {
            let Some(t) = t else { continue };
            let c = self.constant(raw, key, t);
            let c = self.broadcast(raw, c, full.clone()).map_err(|d| {
                d.into_iter()
                    .map(|d| Diagnostic {
                        field: Some(key.into()),
                        ..d
                    })
                    .collect::<Diags>()
            })?;
            cur = self.op(raw, Op::Binary(bin), vec![cur, c])?;
        }
        self.finish(raw, cur)
    }

    /// `safe_log(x, ε) = log(softplus(x) + ε)`, ε a scalar tensor (the second parent).
    fn safe_log(&mut self, raw: &Raw<'_>, parents: &[usize]) -> std::result::Result<usize, Diags> {
        let [x, eps] = parents else {
            return Err(vec![arity(2)]);
        };
        if self.shape(*eps).rank() != 0 {
            return Err(vec![Diagnostic::error(format!(
                "epsilon must be scalar (its parent has shape {})",
                self.shape(*eps)
            ))
            .field("parents")]);
        }
        let sp = self.op(raw, Op::Unary(UnaryOp::Softplus), vec![*x])?;
        let full = self.shape(sp).clone();
        let e = self.broadcast(raw, *eps, full)?;
        let s = self.op(raw, Op::Binary(BinaryOp::Add), vec![sp, e])?;
        let l = self.op(raw, Op::Unary(UnaryOp::Log), vec![s])?;
        self.finish(raw, l)
    }
}

/// What is wrong with a node's kind whatever its parents: a tag we cannot evaluate, an unknown
/// one, or an August-dialect form (the kind, or a reduction's `axis`).
fn kind_problems(raw: &Raw<'_>) -> Diags {
    let k = raw.kind;
    let kind = |m: String| vec![Diagnostic::error(m).field("kind")];
    if tags::UNSUPPORTED.contains(&k) {
        return kind(format!(
            "kind `{k}` is not supported (no evaluable counterpart)"
        ));
    }
    if tags::SEPTEMBER_ONLY.contains(&k) {
        return vec![];
    }
    let Some(d) = desc::lookup(k) else {
        return kind(format!("unknown kind `{}`", crate::shorten(k)));
    };
    match d.prototype() {
        Some(ref op) if august_only(op) => kind(format!(
            "kind `{k}` is the August dialect's, but this file is September-dialect (`{OUTPUT_IDS}`)"
        )),
        Some(Op::ReduceSum { .. } | Op::ReduceMean { .. })
            if raw.obj.contains_key("axis") && !raw.obj.contains_key(fields::AXES) =>
        {
            vec![Diagnostic::error(format!(
                "`{k}` with `axis` is the August dialect's; the September dialect writes `axes` and `keepdim`"
            ))
            .field("axis")]
        }
        _ => vec![],
    }
}

fn file(id: usize) -> FileNode {
    FileNode { id, tensor: None }
}

fn arity(n: usize) -> Diagnostic {
    Diagnostic::error(format!("expected {n} parent(s)")).field("parents")
}

/// The kinds only the August dialect has (the September dialect writes `conv`, `max_pool`, …,
/// `transpose`).
pub(crate) fn august_only(op: &Op) -> bool {
    matches!(
        op,
        Op::Conv2d(_)
            | Op::Pool(_)
            | Op::BatchNormEval { .. }
            | Op::SwapFirstTwo
            | Op::Transpose3dLastTwo
    )
}

/// Right-aligned broadcast of two shapes (equal extents, or 1).
fn broadcast_dims(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let at = |s: &[usize], i: usize| {
        if i + s.len() >= n {
            s[i + s.len() - n]
        } else {
            1
        }
    };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// A nested-array tensor (`[[1, 2], [3, 4]]`; a number is a scalar): rectangular, numbers
/// only.
pub(crate) fn nested(v: &Value) -> std::result::Result<Tensor<f64>, Diagnostic> {
    fn flat(v: &Value, dims: &[usize], data: &mut Vec<f64>) -> std::result::Result<(), String> {
        match (dims.split_first(), v) {
            (None, v) if v.is_number() => {
                data.push(v.as_f64().unwrap_or(f64::NAN));
                Ok(())
            }
            (Some((&n, rest)), Value::Array(items)) if items.len() == n => {
                items.iter().try_for_each(|x| flat(x, rest, data))
            }
            (None, v) if !v.is_array() => Err(format!(
                "holds {}, expected numbers only (the September dialect has no NaN or infinity)",
                shown(v)
            )),
            _ => Err("is not a rectangular nested array of numbers".into()),
        }
    }
    let mut dims = Vec::new();
    let mut first = v;
    while let Value::Array(items) = first {
        dims.push(items.len());
        match items.first() {
            Some(x) => first = x,
            None => break,
        }
    }
    let mut data = Vec::new();
    flat(v, &dims, &mut data).map_err(Diagnostic::error)?;
    Tensor::new(Shape::from(dims), data).map_err(Diagnostic::spec)
}

/// A tensor as nested arrays (the September dialect's inline form); a non-finite value is an
/// error (the September dialect has none).
fn nested_json(t: &Tensor<f64>) -> std::result::Result<Value, String> {
    if let Some(nf) = t.non_finite() {
        return Err(format!(
            "{nf}: the September dialect has no NaN or infinity"
        ));
    }
    fn build(dims: &[usize], data: &[f64]) -> Value {
        match dims.split_first() {
            None => torchlean_spec::tensor::f64_to_json(data[0]),
            Some((&n, rest)) => {
                let step: usize = rest.iter().product();
                Value::Array(
                    (0..n)
                        .map(|i| build(rest, &data[i * step..(i + 1) * step]))
                        .collect(),
                )
            }
        }
    }
    Ok(build(t.shape().dims(), t.data()))
}

/// Reads the attributes of a September-dialect form, collecting every problem.
struct Attrs<'a> {
    obj: &'a Map<String, Value>,
    errors: Diags,
}

impl<'a> Attrs<'a> {
    fn new(obj: &'a Map<String, Value>) -> Self {
        Attrs {
            obj,
            errors: vec![],
        }
    }

    fn fail(&mut self, key: &str, m: String) {
        self.errors
            .push(Diagnostic::error(m).field(key.to_string()));
    }

    fn opt_nat(&mut self, key: &str) -> Option<usize> {
        let v = self.obj.get(key)?;
        match v.as_u64().and_then(|x| usize::try_from(x).ok()) {
            Some(x) => Some(x),
            None => {
                self.fail(
                    key,
                    format!("is {}, expected a non-negative integer", shown(v)),
                );
                None
            }
        }
    }

    fn nat(&mut self, key: &str) -> usize {
        if !self.obj.contains_key(key) {
            self.fail(key, "missing required attribute".into());
            return 0;
        }
        self.opt_nat(key).unwrap_or(0)
    }

    fn list(&mut self, key: &str) -> Vec<usize> {
        match self.obj.get(key).map(parse_shape) {
            Some(Ok(s)) => s.dims().to_vec(),
            Some(Err(e)) => {
                self.errors.push(Diagnostic::spec(e).field(key.to_string()));
                vec![]
            }
            None => {
                self.fail(key, "missing required attribute".into());
                vec![]
            }
        }
    }

    /// A list of exactly `len` naturals (`len` from `spatial_rank`); zeros when ill-formed.
    fn nats(&mut self, key: &str, len: usize) -> Vec<usize> {
        let v = self.list(key);
        if v.len() == len {
            return v;
        }
        if self.obj.contains_key(key) && parse_shape(&self.obj[key]).is_ok() {
            self.fail(
                key,
                format!("has {} entries, expected `spatial_rank` = {len}", v.len()),
            );
        }
        vec![0; len.max(2)]
    }

    fn boolean(&mut self, key: &str) -> bool {
        match self.obj.get(key) {
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                let m = format!("is {}, expected true or false", shown(v));
                self.fail(key, m);
                false
            }
            None => {
                self.fail(key, "missing required attribute".into());
                false
            }
        }
    }

    fn opt_number(&mut self, key: &str) -> Option<f64> {
        let v = self.obj.get(key)?;
        match json_to_f64(v).filter(|x| x.is_finite() && v.is_number()) {
            Some(x) => Some(x),
            None => {
                self.fail(key, format!("is {}, expected a number", shown(v)));
                None
            }
        }
    }

    fn done(self) -> std::result::Result<(), Diags> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }
}

/// The graph in the September dialect, every weight inline (from `payload`). Kinds with no
/// counterpart there (our extensions other than `transpose` and `softplus`) are errors, one
/// per node, all at once; so are weights missing from the payload.
pub(crate) fn write(g: &Graph, payload: &Payload) -> Result<Value> {
    let mut errors = Vec::new();
    let mut nodes = Vec::with_capacity(g.len());
    for n in &g.nodes {
        let mut obj = Map::new();
        obj.insert("id".into(), Value::from(n.id));
        obj.insert("parents".into(), Value::from(n.parents.clone()));
        obj.insert("shape".into(), Value::from(n.shape.dims().to_vec()));
        obj.insert(fields::VALUE_KIND.into(), Value::from(TENSOR));
        let parent_shape = n
            .parents
            .first()
            .and_then(|&p| g.node(p))
            .map(|p| p.shape.clone())
            .unwrap_or_else(Shape::scalar);
        match write_node(n, &parent_shape, payload, &mut obj) {
            Ok(()) => nodes.push(Value::Object(obj)),
            Err(d) => errors.extend(d.into_iter().map(|d| d.at(n.id, n.kind.name()))),
        }
    }
    if !errors.is_empty() {
        return Err(IrError::Invalid(errors));
    }
    let mut obj = Map::new();
    obj.insert("format".into(), Value::from(FORMAT));
    GraphInputs::write(g, &mut obj);
    obj.insert(
        OUTPUT_IDS.into(),
        Value::from(g.outputs().collect::<Vec<_>>()),
    );
    obj.insert("nodes".into(), Value::from(nodes));
    Ok(Value::Object(obj))
}

fn nats(v: &[usize]) -> Value {
    Value::from(v.to_vec())
}

fn put(obj: &mut Map<String, Value>, k: &str, v: Value) {
    obj.insert(k.to_string(), v);
}

/// A node's payload tensors `names`, inline; a missing one is a diagnostic.
fn inline_tensors(
    entry: Option<&crate::payload::PayloadEntry>,
    names: &[&'static str],
    obj: &mut Map<String, Value>,
    errors: &mut Diags,
) {
    for &name in names {
        match entry.and_then(|e| e.tensor(name)).map(nested_json) {
            Some(Ok(v)) => put(obj, name, v),
            Some(Err(e)) => errors.push(Diagnostic::error(e).field(name)),
            None => errors.push(
                Diagnostic::error(format!(
                    "missing payload tensor `{name}` (the September dialect carries weights inline)"
                ))
                .field(name),
            ),
        }
    }
}

fn put_transpose(obj: &mut Map<String, Value>, dim0: usize, dim1: usize) {
    put(
        obj,
        "kind",
        Value::from(Op::Transpose { dim0, dim1 }.name()),
    );
    put(obj, fields::AXIS1, Value::from(dim0));
    put(obj, fields::AXIS2, Value::from(dim1));
}

/// One node's kind and attributes in the September dialect (`x`: its first parent's shape).
fn write_node(
    n: &Node,
    x: &Shape,
    payload: &Payload,
    obj: &mut Map<String, Value>,
) -> std::result::Result<(), Diags> {
    let entry = payload.entry(n.id);
    let mut errors = Vec::new();
    let names = payload_names(&n.kind);
    match &n.kind {
        OpKind::Input => put(obj, "kind", Value::from(n.kind.name())),
        OpKind::Const { value_shape } => {
            put(obj, "kind", Value::from(n.kind.name()));
            if let Some(s) = value_shape {
                put(obj, "value_shape", Value::from(s.dims().to_vec()));
            }
            if let Some(t) = entry.and_then(|e| e.tensor(names[0])) {
                if let Some(nf) = t.non_finite() {
                    errors.push(
                        Diagnostic::error(format!(
                            "{nf}: the September dialect has no NaN or infinity"
                        ))
                        .field(VALUES),
                    );
                } else {
                    put(obj, VALUES, Value::from(t.data().to_vec()));
                }
            }
        }
        OpKind::Op(op) => match op {
            Op::Conv2d(s) => {
                if s.groups != 1 {
                    // its kernels are dense (`groups` is read as one group): a grouped weight
                    // would have to be written with zero blocks, a different parameter
                    errors.push(
                        Diagnostic::error(format!(
                            "groups = {}: the September dialect writes kernels dense, so a \
                             grouped weight has no counterpart",
                            s.groups
                        ))
                        .field("groups"),
                    );
                }
                let p = [s.padding; 2];
                put(obj, "kind", Value::from(tags::CONV));
                put(obj, "spatial_rank", Value::from(2));
                put(obj, "kernel", nats(&[s.kernel_h, s.kernel_w]));
                put(obj, "stride", nats(&[s.stride; 2]));
                put(obj, "padding", nats(&p));
                put(obj, "dilation", nats(&[s.dilation; 2]));
                put(obj, "padding_after", nats(&p));
                put(obj, "groups", Value::from(1));
                put(obj, "channel_axis", Value::from(x.rank().saturating_sub(3)));
                put(obj, "in_channels", Value::from(s.in_channels));
                put(obj, "out_channels", Value::from(s.out_channels));
                let spatial = x.dims().get(x.rank().saturating_sub(2)..).unwrap_or(&[]);
                put(obj, "input_spatial", nats(spatial));
                inline_tensors(entry, names, obj, &mut errors);
            }
            Op::Pool(s) => {
                let tag = match s.kind {
                    PoolKind::Max => tags::MAX_POOL,
                    PoolKind::Avg => tags::AVG_POOL,
                };
                put(obj, "kind", Value::from(tag));
                put(obj, "spatial_rank", Value::from(2));
                put(obj, "kernel", nats(&[s.kernel_h, s.kernel_w]));
                put(obj, "stride", nats(&[s.stride; 2]));
                put(obj, "padding", nats(&[s.padding; 2]));
            }
            Op::BatchNormEval { channels, .. } => {
                put(obj, "kind", Value::from(tags::BATCH_NORM_EVAL));
                put(obj, "channel_axis", Value::from(1));
                put(obj, "channels", Value::from(*channels));
                inline_tensors(entry, names, obj, &mut errors);
                let eps = entry.and_then(|e| e.eps).unwrap_or(BATCH_NORM_DEFAULT_EPS);
                put(obj, EPS, torchlean_spec::tensor::f64_to_json(eps));
            }
            Op::ReduceSum { axis } | Op::ReduceMean { axis } => {
                put(obj, "kind", Value::from(op.name()));
                put(obj, fields::AXES, nats(&[*axis]));
                put(obj, fields::KEEPDIM, Value::from(false));
            }
            Op::LayerNorm { axis, eps } => {
                put(obj, "kind", Value::from(op.name()));
                put(obj, "axis", Value::from(*axis));
                let suffix = Shape::from(x.dims().get(*axis..).unwrap_or(&[]));
                for (key, v) in [(GAMMA, 1.0), (BETA, 0.0)] {
                    match Tensor::full(suffix.clone(), v)
                        .map_err(Diagnostic::spec)
                        .and_then(|t| nested_json(&t).map_err(Diagnostic::error))
                    {
                        Ok(j) => put(obj, key, j),
                        Err(e) => errors.push(e.field(key)),
                    }
                }
                let eps = eps.unwrap_or(LAYER_NORM_DEFAULT_EPS);
                put(obj, EPS, torchlean_spec::tensor::f64_to_json(eps));
            }
            Op::Transpose { dim0, dim1 } => put_transpose(obj, *dim0, *dim1),
            Op::SwapFirstTwo => put_transpose(obj, 0, 1),
            Op::Transpose3dLastTwo => put_transpose(obj, 1, 2),
            Op::Linear => {
                put(obj, "kind", Value::from(op.name()));
                put(
                    obj,
                    "out_dim",
                    Value::from(n.shape.dims().last().copied().unwrap_or(0)),
                );
                put(
                    obj,
                    "in_dim",
                    Value::from(x.dims().last().copied().unwrap_or(0)),
                );
                inline_tensors(entry, names, obj, &mut errors);
            }
            op if op.desc().extension && !matches!(op, Op::Unary(UnaryOp::Softplus)) => {
                errors.push(
                    Diagnostic::error(format!(
                        "kind `{}` has no counterpart in TorchLean's September 2026 dialect",
                        op.name()
                    ))
                    .field("kind"),
                );
            }
            _ => {
                put(obj, "kind", Value::from(op.name()));
                n.kind.write_attributes(obj);
            }
        },
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}
