//! `torchlean.case.v1`: "this graph, on these values, must give these outputs and gradients".

use crate::error::{Diagnostic, IrError, Result};
use crate::graph::Graph;
use crate::payload::Payload;
use serde_json::{Map, Value};
use torchlean_spec::Tensor;

/// The format tag of case files.
pub const CASE_FORMAT: &str = "torchlean.case.v1";

/// Precision a case runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    F64,
}

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }
}

/// `|got − want| ≤ atol + rtol·|want|`, elementwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

/// The result of comparing computed values with expected ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    pub max_abs: f64,
    /// Largest `|got − want| / |want|` over elements with `want ≠ 0`.
    pub max_rel: f64,
    pub pass: bool,
}

impl Comparison {
    /// A perfect comparison (nothing compared yet).
    pub fn exact() -> Self {
        Comparison {
            max_abs: 0.0,
            max_rel: 0.0,
            pass: true,
        }
    }

    /// Combines two comparisons (worst of both).
    pub fn merge(self, other: Comparison) -> Comparison {
        Comparison {
            max_abs: self.max_abs.max(other.max_abs),
            max_rel: self.max_rel.max(other.max_rel),
            pass: self.pass && other.pass,
        }
    }
}

impl Tolerance {
    /// Compares elementwise: a pair passes if `|got − want| ≤ atol + rtol·|want|`, or both are
    /// NaN, or both are the same infinity. A length or shape mismatch fails.
    pub fn compare(&self, got: &Tensor<f64>, want: &Tensor<f64>) -> Comparison {
        if got.shape() != want.shape() {
            return Comparison {
                max_abs: f64::INFINITY,
                max_rel: f64::INFINITY,
                pass: false,
            };
        }
        let mut c = Comparison::exact();
        for (&g, &w) in got.data().iter().zip(want.data()) {
            if (g.is_nan() && w.is_nan()) || (g.is_infinite() && g == w) {
                continue;
            }
            let abs = (g - w).abs();
            let abs = if abs.is_nan() { f64::INFINITY } else { abs };
            c.max_abs = c.max_abs.max(abs);
            if w != 0.0 {
                c.max_rel = c.max_rel.max(abs / w.abs());
            }
            if abs > self.atol + self.rtol * w.abs() {
                c.pass = false;
            }
        }
        c
    }
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            rtol: 1e-6,
            atol: 1e-9,
        }
    }
}

/// What a case expects; absent members are not checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expect {
    pub output: Option<Tensor<f64>>,
    pub grad_input: Option<Tensor<f64>>,
    pub grad_payload: Option<Payload>,
}

/// One conformance case.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub name: String,
    pub graph: Graph,
    pub payload: Payload,
    pub input: Tensor<f64>,
    /// Cotangent of the output (absent: ones of the output's shape).
    pub seed: Option<Tensor<f64>>,
    pub expect: Expect,
    pub tolerance: Tolerance,
    pub dtype: DType,
}

fn field_err(field: &str, msg: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::error(msg.to_string()).field(field)
}

fn tensor_member(
    obj: &Map<String, Value>,
    key: &str,
    errors: &mut Vec<Diagnostic>,
) -> Option<Tensor<f64>> {
    let v = obj.get(key)?;
    match Tensor::<f64>::from_json(v) {
        Ok(t) => Some(t),
        Err(e) => {
            errors.push(field_err(key, e));
            None
        }
    }
}

impl Case {
    /// Parses case JSON text, reading the graph's node list one node at a time (no JSON tree of
    /// the whole document: [`crate::stream`]).
    pub fn from_json_str(text: &str) -> Result<Case> {
        match crate::stream::read_doc(text)? {
            Some(doc) => Case::from_doc(doc),
            None => Case::from_json(&serde_json::from_str(text)?),
        }
    }

    /// Parses a case, reporting every malformed member (graph and payload problems keep their
    /// node ids).
    pub fn from_json(v: &Value) -> Result<Case> {
        let Some(obj) = v.as_object() else {
            return Err(IrError::invalid(Diagnostic::error(
                "a case must be a JSON object",
            )));
        };
        Case::assemble(obj, obj.get("graph").map(Graph::from_json))
    }

    /// A case from its top-level members and its parsed `graph` member (`None`: missing): the
    /// one assembly of both parsing routes.
    pub(crate) fn assemble(obj: &Map<String, Value>, graph: Option<Result<Graph>>) -> Result<Case> {
        let mut errors = Vec::new();
        match obj.get("format").and_then(Value::as_str) {
            Some(CASE_FORMAT) => {}
            Some(f) => errors.push(field_err(
                "format",
                format!("is \"{f}\", expected \"{CASE_FORMAT}\""),
            )),
            None => errors.push(field_err("format", "missing")),
        }
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("unnamed")
            .to_string();
        let graph = match graph {
            Some(g) => match g {
                Ok(g) => Some(g),
                Err(e) => {
                    errors.extend(e.diagnostics());
                    None
                }
            },
            None => {
                errors.push(field_err("graph", "missing"));
                None
            }
        };
        let payload = match obj.get("payload") {
            Some(p) => match Payload::from_json(p) {
                Ok(p) => p,
                Err(e) => {
                    errors.extend(e.diagnostics());
                    Payload::default()
                }
            },
            None => Payload::default(),
        };
        let input = tensor_member(obj, "input", &mut errors);
        if obj.get("input").is_none() {
            errors.push(field_err("input", "missing"));
        }
        let seed = tensor_member(obj, "seed", &mut errors);
        let mut expect = Expect::default();
        if let Some(e) = obj.get("expect") {
            match e.as_object() {
                Some(eo) => {
                    expect.output = tensor_member(eo, "output", &mut errors);
                    expect.grad_input = tensor_member(eo, "grad_input", &mut errors);
                    if let Some(gp) = eo.get("grad_payload") {
                        match Payload::from_json(gp) {
                            Ok(p) => expect.grad_payload = Some(p),
                            Err(err) => {
                                errors.extend(err.diagnostics().into_iter().map(|d| Diagnostic {
                                    field: Some(format!(
                                        "expect.grad_payload.{}",
                                        d.field.clone().unwrap_or_default()
                                    )),
                                    ..d
                                }))
                            }
                        }
                    }
                }
                None => errors.push(field_err("expect", "is not an object")),
            }
        }
        let mut tolerance = Tolerance::default();
        if let Some(t) = obj.get("tolerance") {
            let get = |k: &str| t.get(k).and_then(Value::as_f64);
            match (t.as_object(), get("rtol"), get("atol")) {
                (Some(_), rtol, atol) => {
                    tolerance.rtol = rtol.unwrap_or(tolerance.rtol);
                    tolerance.atol = atol.unwrap_or(tolerance.atol);
                }
                (None, ..) => errors.push(field_err("tolerance", "is not an object")),
            }
        }
        let dtype = match obj.get("dtype").and_then(Value::as_str) {
            None | Some("f64") | Some("float64") => DType::F64,
            Some("f32") | Some("float32") => DType::F32,
            Some(other) => {
                errors.push(field_err(
                    "dtype",
                    format!("is \"{other}\", expected \"f32\" or \"f64\""),
                ));
                DType::F64
            }
        };
        match (graph, input) {
            (Some(graph), Some(input)) if errors.is_empty() => Ok(Case {
                name,
                graph,
                payload,
                input,
                seed,
                expect,
                tolerance,
                dtype,
            }),
            _ => Err(IrError::Invalid(errors)),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("format".into(), Value::from(CASE_FORMAT));
        obj.insert("name".into(), Value::from(self.name.clone()));
        obj.insert("graph".into(), self.graph.to_json());
        obj.insert("payload".into(), self.payload.to_json());
        obj.insert("input".into(), self.input.to_json());
        if let Some(s) = &self.seed {
            obj.insert("seed".into(), s.to_json());
        }
        let mut ex = Map::new();
        if let Some(t) = &self.expect.output {
            ex.insert("output".into(), t.to_json());
        }
        if let Some(t) = &self.expect.grad_input {
            ex.insert("grad_input".into(), t.to_json());
        }
        if let Some(p) = &self.expect.grad_payload {
            ex.insert("grad_payload".into(), p.to_json());
        }
        obj.insert("expect".into(), Value::Object(ex));
        obj.insert(
            "tolerance".into(),
            serde_json::json!({"rtol": self.tolerance.rtol, "atol": self.tolerance.atol}),
        );
        if self.dtype == DType::F32 {
            obj.insert("dtype".into(), Value::from("f32"));
        }
        Value::Object(obj)
    }
}
