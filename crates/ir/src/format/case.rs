//! `torchlean.case.v1`: "this graph, on these values, must give these outputs and gradients".

use crate::error::{shorten, shown, Diagnostic, IrError, Result};
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
    /// Largest `|got − want| / |want|` over elements with `want ≠ 0` (huge where `want` is
    /// near zero, even in a passing comparison: read [`Comparison::of_tolerance`] instead).
    pub max_rel: f64,
    /// Largest `|got − want| / (atol + rtol·|want|)`: the worst error as a fraction of what
    /// the tolerance allows there; the comparison passes exactly when this is at most 1.
    pub of_tolerance: f64,
    pub pass: bool,
    /// The row-major offset of the element where `of_tolerance` is reached (the first one, on a
    /// tie); `None` when nothing differs or nothing could be compared.
    pub worst_at: Option<usize>,
}

impl Comparison {
    /// A perfect comparison (nothing compared yet).
    pub fn exact() -> Self {
        Comparison {
            max_abs: 0.0,
            max_rel: 0.0,
            of_tolerance: 0.0,
            pass: true,
            worst_at: None,
        }
    }

    /// A comparison that could not be made (a shape mismatch, a missing tensor).
    pub fn failed() -> Self {
        Comparison {
            max_abs: f64::INFINITY,
            max_rel: f64::INFINITY,
            of_tolerance: f64::INFINITY,
            pass: false,
            worst_at: None,
        }
    }

    /// Combines two comparisons (worst of both; `worst_at` is the one of the comparison with
    /// the larger `of_tolerance`, `self`'s on a tie).
    pub fn merge(self, other: Comparison) -> Comparison {
        let worst_at = if other.of_tolerance > self.of_tolerance {
            other.worst_at
        } else {
            self.worst_at
        };
        Comparison {
            max_abs: self.max_abs.max(other.max_abs),
            max_rel: self.max_rel.max(other.max_rel),
            of_tolerance: self.of_tolerance.max(other.of_tolerance),
            pass: self.pass && other.pass,
            worst_at,
        }
    }
}

impl Tolerance {
    /// Compares elementwise: a pair passes if `|got − want| ≤ atol + rtol·|want|`, or both are
    /// NaN, or both are the same infinity. A length or shape mismatch fails.
    pub fn compare(&self, got: &Tensor<f64>, want: &Tensor<f64>) -> Comparison {
        if got.shape() != want.shape() {
            return Comparison::failed();
        }
        let mut c = Comparison::exact();
        for (i, (&g, &w)) in got.data().iter().zip(want.data()).enumerate() {
            if (g.is_nan() && w.is_nan()) || (g.is_infinite() && g == w) {
                continue;
            }
            // a non-finite value on either side (not matched above) is an infinite error: its
            // allowance `atol + rtol·|want|` would be NaN or infinite and let anything through
            let abs = if g.is_finite() && w.is_finite() {
                (g - w).abs()
            } else {
                f64::INFINITY
            };
            c.max_abs = c.max_abs.max(abs);
            if w != 0.0 {
                c.max_rel = c.max_rel.max(abs / w.abs());
            }
            let allowed = self.atol + self.rtol * w.abs();
            // 0/0 (a zero tolerance met exactly) is no error at all
            let ratio = if abs == f64::INFINITY {
                f64::INFINITY
            } else if abs == 0.0 {
                0.0
            } else {
                abs / allowed
            };
            if ratio > 1.0 || abs > allowed {
                c.pass = false;
            }
            if abs > 0.0 && (c.worst_at.is_none() || ratio > c.of_tolerance) {
                c.of_tolerance = c.of_tolerance.max(ratio);
                c.worst_at = Some(i);
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

/// What a case expects; absent members are not checked, but at least one must be present.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expect {
    pub output: Option<Tensor<f64>>,
    /// One gradient per graph input, in input order (`grad_input` on the wire for one input,
    /// `grad_inputs` for several).
    pub grad_inputs: Option<Vec<Tensor<f64>>>,
    pub grad_payload: Option<Payload>,
}

impl Expect {
    /// Whether nothing is expected (such a case checks nothing, so it is refused).
    pub fn is_empty(&self) -> bool {
        self.output.is_none() && self.grad_inputs.is_none() && self.grad_payload.is_none()
    }
}

/// One conformance case.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub name: String,
    pub graph: Graph,
    pub payload: Payload,
    /// One tensor per graph input, in input order (`input` on the wire for one input, `inputs`
    /// for several).
    pub inputs: Vec<Tensor<f64>>,
    /// Cotangent of the output (absent: ones of the output's shape).
    pub seed: Option<Tensor<f64>>,
    pub expect: Expect,
    pub tolerance: Tolerance,
    pub dtype: DType,
}

fn field_err(field: &str, msg: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::error(msg.to_string()).field(field)
}

/// Why a case without expectations is refused: it would "pass" with nothing checked.
const NOTHING_CHECKED: &str =
    "checks nothing: give at least one of `output`, `grad_input` (`grad_inputs`), `grad_payload`";

/// The members of `expect`.
const EXPECT_MEMBERS: [&str; 4] = ["output", "grad_input", "grad_inputs", "grad_payload"];

/// `{"rtol": r, "atol": a}`, each a finite non-negative number, absent ones the default; any
/// other value of a member is an error naming it (never silently the default).
fn parse_tolerance(t: &Value, errors: &mut Vec<Diagnostic>) -> Tolerance {
    let mut tol = Tolerance::default();
    let Some(obj) = t.as_object() else {
        errors.push(field_err(
            "tolerance",
            format!("is {}, expected an object", shown(t)),
        ));
        return tol;
    };
    for (key, slot) in [("rtol", &mut tol.rtol), ("atol", &mut tol.atol)] {
        match obj.get(key) {
            None => {}
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x >= 0.0 => *slot = x,
                _ => errors.push(field_err(
                    &format!("tolerance.{key}"),
                    format!("is {}, expected a non-negative number", shown(v)),
                )),
            },
        }
    }
    for key in obj.keys().filter(|k| *k != "rtol" && *k != "atol") {
        errors.push(field_err(
            &format!("tolerance.{}", shorten(key)),
            "unknown member (a tolerance has `rtol` and `atol`)",
        ));
    }
    tol
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

/// One tensor (`one` on the wire) or an array of at least two (`many`): never both, one of them
/// required.
fn tensors_member(
    obj: &Map<String, Value>,
    (one, many): (&str, &str),
    errors: &mut Vec<Diagnostic>,
) -> Option<Vec<Tensor<f64>>> {
    match (obj.get(one), obj.get(many)) {
        (Some(_), Some(_)) => {
            errors.push(field_err(
                many,
                format!("given beside `{one}`: give one of them"),
            ));
            None
        }
        (Some(_), None) => tensor_member(obj, one, errors).map(|t| vec![t]),
        (None, Some(Value::Array(items))) if items.len() >= 2 => {
            let mut out = Vec::with_capacity(items.len());
            for (k, v) in items.iter().enumerate() {
                match Tensor::<f64>::from_json(v) {
                    Ok(t) => out.push(t),
                    Err(e) => errors.push(field_err(&format!("{many}[{k}]"), e)),
                }
            }
            (out.len() == items.len()).then_some(out)
        }
        (None, Some(other)) => {
            errors.push(field_err(
                many,
                format!(
                    "is {}, expected an array of at least two tensors (one input: `{one}`)",
                    shown(other)
                ),
            ));
            None
        }
        (None, None) => {
            errors.push(field_err(one, "missing"));
            None
        }
    }
}

/// Writes `ts` as `one` (a single tensor) or `many` (an array).
fn put_tensors(obj: &mut Map<String, Value>, (one, many): (&str, &str), ts: &[Tensor<f64>]) {
    match ts {
        [t] => {
            obj.insert(one.into(), t.to_json());
        }
        ts => {
            obj.insert(
                many.into(),
                Value::Array(ts.iter().map(Tensor::to_json).collect()),
            );
        }
    }
}

impl Case {
    /// Parses case JSON text, reading the graph's node list one node at a time (no JSON tree of
    /// the whole document: [`crate::format::stream`]).
    pub fn from_json_str(text: &str) -> Result<Case> {
        match crate::format::stream::read_doc(text)? {
            Some(doc) => Case::from_doc(doc),
            None => Case::from_json(&crate::format::json::parse(text)?),
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
                format!("is \"{}\", expected \"{CASE_FORMAT}\"", shorten(f)),
            )),
            None => errors.push(field_err("format", "missing")),
        }
        let name = match obj.get("name") {
            None => "unnamed".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                errors.push(field_err(
                    "name",
                    format!("is {}, expected a string", shown(other)),
                ));
                String::new()
            }
        };
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
        let inputs = tensors_member(obj, ("input", "inputs"), &mut errors);
        let seed = tensor_member(obj, "seed", &mut errors);
        let mut expect = Expect::default();
        match obj.get("expect") {
            None => errors.push(field_err("expect", NOTHING_CHECKED)),
            Some(e) => match e.as_object() {
                Some(eo) => {
                    if !EXPECT_MEMBERS.iter().any(|k| eo.contains_key(*k)) {
                        errors.push(field_err("expect", NOTHING_CHECKED));
                    }
                    expect.output = tensor_member(eo, "output", &mut errors);
                    if eo.contains_key("grad_input") || eo.contains_key("grad_inputs") {
                        expect.grad_inputs =
                            tensors_member(eo, ("grad_input", "grad_inputs"), &mut errors);
                    }
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
            },
        }
        let tolerance = match obj.get("tolerance") {
            None => Tolerance::default(),
            Some(t) => parse_tolerance(t, &mut errors),
        };
        let dtype = match obj.get("dtype") {
            None => DType::F64,
            Some(v) => match v.as_str() {
                Some("f64") | Some("float64") => DType::F64,
                Some("f32") | Some("float32") => DType::F32,
                _ => {
                    errors.push(field_err(
                        "dtype",
                        format!("is {}, expected \"f32\" or \"f64\"", shown(v)),
                    ));
                    DType::F64
                }
            },
        };
        if let (Some(g), Some(xs)) = (&graph, &inputs) {
            if xs.len() != g.input_count() {
                errors.push(field_err(
                    if xs.len() == 1 { "input" } else { "inputs" },
                    format!(
                        "{} tensor(s) for a graph of {} input(s)",
                        xs.len(),
                        g.input_count()
                    ),
                ));
            }
        }
        match (graph, inputs) {
            (Some(graph), Some(inputs)) if errors.is_empty() => Ok(Case {
                name,
                graph,
                payload,
                inputs,
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
        put_tensors(&mut obj, ("input", "inputs"), &self.inputs);
        if let Some(s) = &self.seed {
            obj.insert("seed".into(), s.to_json());
        }
        let mut ex = Map::new();
        if let Some(t) = &self.expect.output {
            ex.insert("output".into(), t.to_json());
        }
        if let Some(ts) = &self.expect.grad_inputs {
            put_tensors(&mut ex, ("grad_input", "grad_inputs"), ts);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn case() -> Value {
        json!({
            "format": CASE_FORMAT,
            "graph": {"format": "torchlean.ir.v1", "input_id": 0, "output_id": 1, "nodes": [
                {"id": 0, "kind": "input", "parents": [], "shape": [2]},
                {"id": 1, "kind": "relu", "parents": [0], "shape": [2]}]},
            "input": {"shape": [2], "data": [1.0, -1.0]},
            "expect": {"output": {"shape": [2], "data": [1.0, 0.0]}},
        })
    }

    fn errors(v: &Value) -> String {
        let e = Case::from_json(v).unwrap_err();
        e.diagnostics()
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn tolerance_members_are_numbers_or_absent_never_silently_the_default() {
        let mut v = case();
        v["tolerance"] = json!({"atol": 0.5});
        let t = Case::from_json(&v).unwrap().tolerance;
        assert_eq!((t.rtol, t.atol), (Tolerance::default().rtol, 0.5));
        for (bad, field) in [
            (
                json!({"rtol": "loose"}),
                "field `tolerance.rtol`: is \"loose\"",
            ),
            (json!({"atol": null}), "field `tolerance.atol`: is null"),
            (json!({"atol": -1e-9}), "field `tolerance.atol`: is -1e-9"),
            (json!({"tol": 1}), "field `tolerance.tol`: unknown member"),
            (
                json!([1e-6]),
                "field `tolerance`: is [1e-6], expected an object",
            ),
        ] {
            v["tolerance"] = bad;
            let text = errors(&v);
            assert!(text.contains(field), "{text}");
        }
    }

    #[test]
    fn a_case_that_checks_nothing_is_refused() {
        let mut v = case();
        v["expect"] = json!({});
        assert!(errors(&v).contains("field `expect`: checks nothing"));
        v.as_object_mut().unwrap().remove("expect");
        assert!(errors(&v).contains("field `expect`: checks nothing"));
        // a malformed member is reported as such, not as "checks nothing" too
        v["expect"] = json!({"output": 3});
        let text = errors(&v);
        assert!(
            text.contains("field `output`") && !text.contains("checks nothing"),
            "{text}"
        );
    }

    #[test]
    fn of_tolerance_is_the_worst_error_over_what_the_tolerance_allows() {
        let t = Tolerance {
            rtol: 0.1,
            atol: 1.0,
        };
        let want = Tensor::new([3], vec![0.0, 10.0, 100.0]).unwrap();
        // allowed: 1, 2, 11; errors: 0.5, 3, 0 -> worst 3/2, a failure
        let got = Tensor::new([3], vec![0.5, 13.0, 100.0]).unwrap();
        let c = t.compare(&got, &want);
        assert_eq!(c.of_tolerance, 1.5);
        assert!(!c.pass);
        assert_eq!(c.worst_at, Some(1));
        let got = Tensor::new([3], vec![0.5, 10.0, 100.0]).unwrap();
        let c = t.compare(&got, &want);
        assert_eq!((c.of_tolerance, c.pass, c.worst_at), (0.5, true, Some(0)));
        assert_eq!(t.compare(&want, &want).worst_at, None);
        // a zero tolerance met exactly is no error; missed, an infinite one
        let zero = Tolerance {
            rtol: 0.0,
            atol: 0.0,
        };
        assert_eq!(zero.compare(&want, &want).of_tolerance, 0.0);
        assert_eq!(zero.compare(&got, &want).of_tolerance, f64::INFINITY);
    }

    #[test]
    fn worst_at_is_the_first_element_reaching_the_worst_error_and_survives_a_merge() {
        let t = Tolerance {
            rtol: 0.0,
            atol: 1.0,
        };
        let want = Tensor::new([4], vec![0.0; 4]).unwrap();
        // errors 0.5, 3, 3, NaN-free: the first 3 is the worst
        let a = t.compare(&Tensor::new([4], vec![0.5, 3.0, -3.0, 0.0]).unwrap(), &want);
        assert_eq!(a.worst_at, Some(1));
        // a NaN where a number was expected is an infinite error, at its element
        let b = t.compare(
            &Tensor::new([4], vec![0.0, 0.0, 0.0, f64::NAN]).unwrap(),
            &want,
        );
        assert_eq!((b.worst_at, b.of_tolerance), (Some(3), f64::INFINITY));
        assert_eq!(a.merge(b).worst_at, Some(3));
        assert_eq!(b.merge(a).worst_at, Some(3));
        assert_eq!(a.merge(Comparison::exact()).worst_at, Some(1));
    }

    #[test]
    fn an_expected_nan_or_infinity_matches_only_itself() {
        // a non-finite expectation makes `atol + rtol·|want|` NaN or infinite, and no error
        // is "over" that: the comparison must not let a finite value through
        let t = Tolerance::default();
        let check = |got: f64, want: f64| {
            let c = t.compare(
                &Tensor::new([2], vec![0.0, got]).unwrap(),
                &Tensor::new([2], vec![0.0, want]).unwrap(),
            );
            (c.pass, c.worst_at, c.of_tolerance)
        };
        let failed = (false, Some(1), f64::INFINITY);
        assert_eq!(check(1.0, f64::NAN), failed);
        assert_eq!(check(1.0, f64::INFINITY), failed);
        assert_eq!(check(-1e300, f64::NEG_INFINITY), failed);
        assert_eq!(check(f64::NEG_INFINITY, f64::INFINITY), failed);
        assert_eq!(check(f64::NAN, 1.0), failed);
        assert_eq!(check(f64::INFINITY, 1.0), failed);
        assert_eq!(check(f64::NAN, f64::NAN), (true, None, 0.0));
        assert_eq!(check(f64::INFINITY, f64::INFINITY), (true, None, 0.0));
    }
}
