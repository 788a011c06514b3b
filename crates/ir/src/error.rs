//! The IR crate's errors and diagnostics.

use std::fmt;
use thiserror::Error;
use torchlean_spec::SpecError;

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Warning,
    Error,
}

/// One problem found in a graph or payload, located as precisely as possible.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// The node id (or node index, when the id itself is wrong).
    pub node: Option<usize>,
    /// The node's kind as written on the wire.
    pub kind: Option<String>,
    /// The JSON member at fault (`parents`, `shape`, `perm`, `weight`, …).
    pub field: Option<String>,
    pub message: String,
    /// The spec error this diagnostic reports, whole, for a caller to match on (its `Display`
    /// is `message`); `None` for the IR's own findings.
    pub cause: Option<SpecError>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            node: None,
            kind: None,
            field: None,
            message: message.into(),
            cause: None,
        }
    }

    /// An error diagnostic reporting `e`: its message, and `e` itself as the cause.
    pub fn spec(e: SpecError) -> Self {
        Diagnostic {
            message: e.to_string(),
            cause: Some(e),
            ..Diagnostic::error(String::new())
        }
    }

    /// [`Diagnostic::spec`] in the field the error points at: the attribute or operand it
    /// names, `shape` for a shape too large, else `parents` (an op's operands).
    pub fn spec_in_its_field(e: SpecError) -> Self {
        let field = match &e {
            SpecError::ShapeOverflow { .. } | SpecError::ShapeTooLarge { .. } => "shape",
            _ => e.field().unwrap_or("parents"),
        };
        Diagnostic::spec(e).field(field)
    }

    pub fn warning(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(message)
        }
    }

    pub fn at(mut self, node: usize, kind: impl Into<String>) -> Self {
        self.node = Some(node);
        self.kind = Some(kind.into());
        self
    }

    pub fn at_node(mut self, node: usize) -> Self {
        self.node = Some(node);
        self
    }

    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.severity == Severity::Warning {
            write!(f, "warning: ")?;
        }
        // no node: the problem is in the document itself (a graph's `format`, a payload's
        // key), which the caller names (the file); "graph" would mislabel a payload's
        match (self.node, &self.kind, &self.field) {
            (Some(n), Some(k), _) => write!(f, "node {n} ({})", shorten(k))?,
            (Some(n), None, _) => write!(f, "node {n}")?,
            (None, _, Some(field)) => write!(f, "field `{}`", shorten(field))?,
            (None, _, None) => return write!(f, "{}", self.message),
        }
        if let (Some(_), Some(field)) = (self.node, &self.field) {
            write!(f, ", field `{}`", shorten(field))?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Diagnostic {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The longest user string (a kind, a key, a name) echoed whole in a message.
pub const SHORTEN_AT: usize = 64;

/// A user's string cut for a message: up to [`SHORTEN_AT`] characters as is, a longer one cut
/// there and followed by its length (a 1 MB kind name is not echoed back whole).
pub fn shorten(s: &str) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(SHORTEN_AT) {
        Some((i, _)) => format!("{}… ({} bytes)", &s[..i], s.len()).into(),
        None => s.into(),
    }
}

/// A user's JSON value as text for a message, cut by [`shorten`].
pub(crate) fn shown(v: &serde_json::Value) -> String {
    shorten(&v.to_string()).into_owned()
}

/// Errors of the IR crate.
#[derive(Debug, Error)]
pub enum IrError {
    /// The text is not JSON.
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },

    /// The document is JSON but not a valid graph / payload / case: every problem found.
    #[error("{}", join(.0))]
    Invalid(Vec<Diagnostic>),

    /// A payload's safetensors bytes could not be written or read (corrupt, truncated, a header
    /// that is no safetensors header).
    #[error("safetensors: {source}")]
    Safetensors {
        #[source]
        source: safetensors::SafeTensorError,
    },

    /// Evaluation failed at a node (domain error, a transcendental over rationals, …).
    #[error("node {node} ({kind}): {source}")]
    Eval {
        node: usize,
        kind: String,
        #[source]
        source: SpecError,
    },
}

impl IrError {
    /// A single-diagnostic `Invalid`.
    pub fn invalid(d: Diagnostic) -> Self {
        IrError::Invalid(vec![d])
    }

    /// The diagnostics behind this error (one synthesized line for the other variants).
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        match self {
            IrError::Invalid(d) => d.clone(),
            IrError::Json { .. } | IrError::Safetensors { .. } => {
                vec![Diagnostic::error(self.to_string())]
            }
            IrError::Eval { node, kind, source } => {
                let d = Diagnostic::spec(source.clone()).at(*node, kind.clone());
                vec![match source.field() {
                    Some(f) => d.field(f),
                    None => d,
                }]
            }
        }
    }
}

impl From<serde_json::Error> for IrError {
    fn from(e: serde_json::Error) -> Self {
        IrError::Json {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        }
    }
}

fn join(d: &[Diagnostic]) -> String {
    let lines: Vec<String> = d.iter().map(|d| d.to_string()).collect();
    lines.join("\n")
}

pub type Result<T, E = IrError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_user_strings_are_cut_and_their_length_given() {
        let long = "k".repeat(1 << 20);
        let d = Diagnostic::error("unknown").at(3, long.clone()).field(long);
        let text = d.to_string();
        assert!(text.len() < 400, "{} bytes", text.len());
        assert!(text.contains("(1048576 bytes)"), "{text}");
        assert_eq!(shorten("relu"), "relu");
        // cut on a character boundary
        assert!(shorten(&"é".repeat(100)).starts_with(&"é".repeat(SHORTEN_AT)));
    }

    #[test]
    fn a_diagnostic_without_a_node_does_not_claim_to_be_about_a_graph() {
        assert_eq!(
            Diagnostic::error("payload key `x` is not a node id").to_string(),
            "payload key `x` is not a node id"
        );
        assert_eq!(
            Diagnostic::error("missing").field("format").to_string(),
            "field `format`: missing"
        );
        assert_eq!(
            Diagnostic::error("m")
                .at(2, "relu")
                .field("shape")
                .to_string(),
            "node 2 (relu), field `shape`: m"
        );
    }
}
