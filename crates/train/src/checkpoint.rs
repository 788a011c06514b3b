//! Checkpoints: named tensors and string metadata in one safetensors file.
//!
//! This layer knows nothing of models or optimizers. The trainer composes a checkpoint from
//! the parameters under PyTorch's `state_dict` names (`0.weight`, `layers.2.bias`), the
//! optimizer's state under names starting with [`OPTIMIZER_PREFIX`]
//! (`optimizer.state.0.weight.exp_avg`), and JSON strings in the metadata (config, step,
//! epoch, rng position). The parameters alone load into PyTorch with
//! `safetensors.torch.load_file` and `load_state_dict(strict=True)` once the optimizer's
//! names are set aside (`tools/pytorch/load_checkpoint.py` does exactly that).
//!
//! The file is safetensors as the `safetensors` crate writes it: data little-endian and
//! row-major, [`TensorData::F32`] as `"F32"` and [`TensorData::F64`] as `"F64"`, the metadata
//! in `__metadata__` (absent when empty). The bytes depend only on the contents (see
//! [`torchlean_ir::safetensors_bytes`]), and [`Checkpoint::save`] writes them atomically
//! ([`torchlean_ir::write_atomically`]).

use crate::error::{Result, TrainError};
use std::collections::BTreeMap;
use std::path::Path;
use torchlean_ir::{safetensors_bytes, write_atomically};

pub use torchlean_ir::TensorData;

/// The name prefix of the optimizer's state tensors; [`Checkpoint::check_names`] with the
/// prefix `""` looks at every tensor *not* under it (the model's parameters).
pub const OPTIMIZER_PREFIX: &str = "optimizer.";

/// One tensor: its shape and its row-major data (`shape`'s product elements).
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

/// Named tensors and string metadata: the contents of one checkpoint file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    pub tensors: BTreeMap<String, NamedTensor>,
    pub metadata: BTreeMap<String, String>,
}

/// A name present in the checkpoint and expected, with different shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeMismatch {
    pub name: String,
    /// The shape in the checkpoint.
    pub checkpoint: Vec<usize>,
    /// The shape the caller expected (the model's).
    pub expected: Vec<usize>,
}

impl Checkpoint {
    /// Writes the checkpoint to `path` as safetensors, atomically: a temporary file in the same
    /// directory, written, synced, renamed over `path`, the directory synced. On any failure
    /// before the rename the old file is intact and the temporary file removed. Errors: a
    /// tensor whose data does not fill its shape ([`TrainError::CheckpointShape`]), the name
    /// `__metadata__` ([`TrainError::CheckpointName`]), the write itself
    /// ([`TrainError::Write`]).
    pub fn save(&self, path: &Path) -> Result<()> {
        for (name, t) in &self.tensors {
            let numel = t.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
            if numel != Some(t.data.len()) {
                return Err(TrainError::CheckpointShape {
                    path: path.to_path_buf(),
                    name: name.clone(),
                    shape: t.shape.clone(),
                    len: t.data.len(),
                });
            }
            if name == "__metadata__" {
                return Err(TrainError::CheckpointName {
                    path: path.to_path_buf(),
                    name: name.clone(),
                });
            }
        }
        let bytes = safetensors_bytes(
            self.tensors
                .iter()
                .map(|(name, t)| (name.as_str(), t.shape.as_slice(), &t.data)),
            &self.metadata,
        )
        .map_err(|source| TrainError::CheckpointEncode {
            path: path.to_path_buf(),
            source,
        })?;
        write_atomically(path, &bytes).map_err(|source| TrainError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads a checkpoint. Errors name `path`: unreadable ([`TrainError::CheckpointRead`]),
    /// not safetensors, truncated or corrupt ([`TrainError::CheckpointFormat`], with the
    /// safetensors error as its source), a dtype other than F32/F64
    /// ([`TrainError::CheckpointDtype`]).
    pub fn load(path: &Path) -> Result<Checkpoint> {
        let bytes = std::fs::read(path).map_err(|source| TrainError::CheckpointRead {
            path: path.to_path_buf(),
            source,
        })?;
        Checkpoint::from_safetensors(&bytes, path)
    }

    /// Parses the bytes of a checkpoint file; `path` only names it in errors (the errors of
    /// [`Checkpoint::load`] but the read).
    pub fn from_safetensors(bytes: &[u8], path: &Path) -> Result<Checkpoint> {
        let format = |source| TrainError::CheckpointFormat {
            path: path.to_path_buf(),
            source,
        };
        let st = safetensors::SafeTensors::deserialize(bytes).map_err(format)?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.iter() {
            let data = TensorData::from_le_bytes(view.dtype(), view.data()).ok_or_else(|| {
                TrainError::CheckpointDtype {
                    path: path.to_path_buf(),
                    name: name.to_string(),
                    dtype: view.dtype(),
                }
            })?;
            let shape = view.shape().to_vec();
            tensors.insert(name.to_string(), NamedTensor { shape, data });
        }
        let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(format)?;
        let metadata = header
            .metadata()
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Checkpoint { tensors, metadata })
    }

    /// Compares the tensors in scope with the `expected` `(name, shape)` list (full names).
    /// In scope: the tensors whose name starts with `prefix`, or for `prefix == ""` those not
    /// under [`OPTIMIZER_PREFIX`]. One [`TrainError::CheckpointNames`] lists every expected
    /// name the checkpoint lacks, every in-scope name not expected, and every name whose
    /// shapes differ (both shapes), as PyTorch's `load_state_dict(strict=True)` does.
    pub fn check_names(&self, expected: &[(String, Vec<usize>)], prefix: &str) -> Result<()> {
        let in_scope = |name: &str| {
            if prefix.is_empty() {
                !name.starts_with(OPTIMIZER_PREFIX)
            } else {
                name.starts_with(prefix)
            }
        };
        let mut missing = Vec::new();
        let mut mismatched = Vec::new();
        for (name, shape) in expected {
            match self.tensors.get(name) {
                None => missing.push(name.clone()),
                Some(t) if &t.shape != shape => mismatched.push(ShapeMismatch {
                    name: name.clone(),
                    checkpoint: t.shape.clone(),
                    expected: shape.clone(),
                }),
                Some(_) => {}
            }
        }
        let wanted: std::collections::BTreeSet<&str> =
            expected.iter().map(|(n, _)| n.as_str()).collect();
        let unexpected: Vec<String> = self
            .tensors
            .keys()
            .filter(|name| in_scope(name) && !wanted.contains(name.as_str()))
            .cloned()
            .collect();
        if missing.is_empty() && unexpected.is_empty() && mismatched.is_empty() {
            Ok(())
        } else {
            Err(TrainError::CheckpointNames {
                prefix: prefix.to_string(),
                missing,
                unexpected,
                mismatched,
            })
        }
    }
}

/// The message of [`TrainError::CheckpointNames`].
pub(crate) fn describe_mismatch(
    prefix: &str,
    missing: &[String],
    unexpected: &[String],
    mismatched: &[ShapeMismatch],
) -> String {
    use std::fmt::Write;
    let scope = if prefix.is_empty() {
        format!("the checkpoint's tensors outside `{OPTIMIZER_PREFIX}`")
    } else {
        format!("the checkpoint's tensors under `{prefix}`")
    };
    let quoted = |names: &[String]| {
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = format!("{scope} do not match what was expected:");
    if !missing.is_empty() {
        let _ = write!(s, "\n  missing key(s): {}", quoted(missing));
    }
    if !unexpected.is_empty() {
        let _ = write!(s, "\n  unexpected key(s): {}", quoted(unexpected));
    }
    for m in mismatched {
        let _ = write!(
            s,
            "\n  size mismatch for \"{}\": shape {:?} in the checkpoint, {:?} expected",
            m.name, m.checkpoint, m.expected
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_every_problem() {
        let s = describe_mismatch(
            "",
            &["2.bias".into()],
            &["3.weight".into(), "x".into()],
            &[ShapeMismatch {
                name: "0.weight".into(),
                checkpoint: vec![4, 3],
                expected: vec![4, 2],
            }],
        );
        assert_eq!(
            s,
            "the checkpoint's tensors outside `optimizer.` do not match what was expected:\n  \
             missing key(s): \"2.bias\"\n  unexpected key(s): \"3.weight\", \"x\"\n  \
             size mismatch for \"0.weight\": shape [4, 3] in the checkpoint, [4, 2] expected"
        );
    }
}
