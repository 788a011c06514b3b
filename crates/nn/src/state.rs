//! PyTorch `state_dict`s: comparing the names and shapes a model expects with those a file
//! holds (every missing, unexpected and mis-shaped name at once, PyTorch's `load_state_dict`
//! wording), and reading a `state_dict` saved by `safetensors.torch.save_file(model.state_dict(),
//! path)` into a [`Session`](crate::Session) ([`Session::load_state_dict_file`](crate::Session::load_state_dict_file)).
//!
//! `train`'s checkpoints compare their names with the same [`NameReport`].

use crate::error::{NnError, Result};
use std::collections::BTreeMap;
use std::path::Path;
use torchlean_ir::TensorData;
use torchlean_spec::{Shape, Tensor};

/// A name present in the file and expected, with different shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeMismatch {
    pub name: String,
    /// The shape in the file (the checkpoint, the `state_dict`).
    pub checkpoint: Vec<usize>,
    /// The shape the caller expected (the model's).
    pub expected: Vec<usize>,
}

/// Every difference between the names (and shapes) expected and those found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameReport {
    /// Expected names not found, in the expected order.
    pub missing: Vec<String>,
    /// Names found that nobody expected, in the order found.
    pub unexpected: Vec<String>,
    /// Names in both with different shapes, in the expected order.
    pub mismatched: Vec<ShapeMismatch>,
}

impl NameReport {
    /// Compares `expected` `(name, shape)` pairs with those `found`.
    pub fn compare<'a>(
        expected: impl IntoIterator<Item = (&'a str, &'a [usize])>,
        found: impl IntoIterator<Item = (&'a str, &'a [usize])>,
    ) -> NameReport {
        let found: Vec<(&str, &[usize])> = found.into_iter().collect();
        let found_map: BTreeMap<&str, &[usize]> = found.iter().copied().collect();
        let mut report = NameReport::default();
        let mut wanted = std::collections::BTreeSet::new();
        for (name, shape) in expected {
            wanted.insert(name);
            match found_map.get(name) {
                None => report.missing.push(name.to_string()),
                Some(&have) if have != shape => report.mismatched.push(ShapeMismatch {
                    name: name.to_string(),
                    checkpoint: have.to_vec(),
                    expected: shape.to_vec(),
                }),
                Some(_) => {}
            }
        }
        report.unexpected = found
            .iter()
            .filter(|(n, _)| !wanted.contains(n))
            .map(|(n, _)| n.to_string())
            .collect();
        report
    }

    /// No difference at all.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.mismatched.is_empty()
    }

    /// What `load_state_dict(strict=False)` refuses too: only the shape mismatches.
    pub fn lenient(self) -> NameReport {
        NameReport {
            missing: Vec::new(),
            unexpected: Vec::new(),
            mismatched: self.mismatched,
        }
    }

    /// One line per kind of difference, each starting with a newline and two spaces:
    /// `missing key(s): "a", "b"`, `unexpected key(s): …`, then one `size mismatch for "x":
    /// shape [..] in the checkpoint, [..] expected` per mismatch.
    pub fn lines(&self) -> String {
        use std::fmt::Write;
        let quoted = |names: &[String]| {
            names
                .iter()
                .map(|n| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut s = String::new();
        if !self.missing.is_empty() {
            let _ = write!(s, "\n  missing key(s): {}", quoted(&self.missing));
        }
        if !self.unexpected.is_empty() {
            let _ = write!(s, "\n  unexpected key(s): {}", quoted(&self.unexpected));
        }
        for m in &self.mismatched {
            let _ = write!(
                s,
                "\n  size mismatch for \"{}\": shape {:?} in the checkpoint, {:?} expected",
                m.name, m.checkpoint, m.expected
            );
        }
        s
    }
}

/// The name of PyTorch's batch-norm step counter (an `int64` tensor in every `BatchNorm*`'s
/// `state_dict`). Our batch norm updates its running statistics with a fixed momentum and
/// keeps no counter, so the entry is skipped where the model has that layer's
/// `running_mean`.
pub const NUM_BATCHES_TRACKED: &str = "num_batches_tracked";

/// Reads the tensors of a safetensors `state_dict` (F32 or F64; every other dtype is refused
/// naming the tensor, except a batch norm's [`NUM_BATCHES_TRACKED`], skipped when
/// `skip_counter(name)` says it belongs to a batch norm of the model), as `f64` tensors.
pub fn read_state_dict(
    bytes: &[u8],
    path: &Path,
    skip_counter: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, Tensor<f64>>> {
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|source| {
        NnError::StateDictFormat {
            path: path.to_path_buf(),
            source,
        }
    })?;
    let mut out = BTreeMap::new();
    for (name, view) in st.iter() {
        let is_counter =
            name == NUM_BATCHES_TRACKED || name.ends_with(&format!(".{NUM_BATCHES_TRACKED}"));
        if is_counter && skip_counter(name) {
            continue;
        }
        let data = TensorData::from_le_bytes(view.dtype(), view.data()).ok_or_else(|| {
            NnError::StateDictDtype {
                path: path.to_path_buf(),
                name: name.to_string(),
                dtype: format!("{:?}", view.dtype()),
            }
        })?;
        let values = match data {
            TensorData::F32(v) => v.into_iter().map(f64::from).collect(),
            TensorData::F64(v) => v,
        };
        let t = Tensor::new(Shape::new(view.shape().to_vec()), values)?;
        out.insert(name.to_string(), t);
    }
    Ok(out)
}

/// Whether `counter` (`"bn.num_batches_tracked"`) belongs to a batch norm whose
/// `running_mean` is among `names`.
pub fn is_batch_norm_counter<'a>(counter: &str, mut names: impl Iterator<Item = &'a str>) -> bool {
    let layer = counter.strip_suffix(NUM_BATCHES_TRACKED).unwrap_or(counter);
    let mean = format!("{layer}running_mean");
    names.any(|n| n == mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&'static str, &'static [usize])]) -> Vec<(&'static str, &'static [usize])> {
        v.to_vec()
    }

    #[test]
    fn every_difference_at_once() {
        let expected = pairs(&[("a", &[2]), ("b", &[3]), ("c", &[4, 4])]);
        let found = pairs(&[("c", &[4, 5]), ("d", &[1]), ("a", &[2])]);
        let r = NameReport::compare(expected, found);
        assert_eq!(r.missing, ["b"]);
        assert_eq!(r.unexpected, ["d"]);
        assert_eq!(
            r.mismatched,
            [ShapeMismatch {
                name: "c".into(),
                checkpoint: vec![4, 5],
                expected: vec![4, 4]
            }]
        );
        assert_eq!(
            r.lines(),
            "\n  missing key(s): \"b\"\n  unexpected key(s): \"d\"\n  size mismatch for \"c\": shape [4, 5] in the checkpoint, [4, 4] expected"
        );
        assert!(!r.is_empty());
        let lenient = r.lenient();
        assert!(lenient.missing.is_empty() && lenient.unexpected.is_empty());
        assert_eq!(lenient.mismatched.len(), 1);
    }

    #[test]
    fn equal_sets_are_empty() {
        let both = pairs(&[("a", &[]), ("b", &[0])]);
        assert!(NameReport::compare(both.clone(), both).is_empty());
    }

    #[test]
    fn counters_belong_to_their_batch_norm() {
        let names = ["1.running_mean", "1.weight"];
        assert!(is_batch_norm_counter(
            "1.num_batches_tracked",
            names.into_iter()
        ));
        assert!(!is_batch_norm_counter(
            "2.num_batches_tracked",
            names.into_iter()
        ));
        assert!(is_batch_norm_counter(
            "num_batches_tracked",
            ["running_mean"].into_iter()
        ));
    }
}
