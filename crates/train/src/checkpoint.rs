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
//!
//! Integrity: every file [`Checkpoint::save`] writes carries, in its metadata under
//! [`CHECKSUM_KEY`], `crc32:<8 hex digits>`: the CRC-32 (zlib's, `zlib.crc32`) of the whole
//! file as written, with those 8 digits read as `00000000`. So every byte is covered — header,
//! metadata, tensor data — and any single-bit change, truncation or splice is found.
//! [`Checkpoint::load`] checks it when present (a file PyTorch wrote has none) and
//! [`Checkpoint::load_checked`] also refuses a file without it (the trainer's resume).
//! Invariant: the checksum entry is the only part of a saved file not covered by its value,
//! and [`Checkpoint::load`] never returns it in `metadata`.

use crate::error::{CheckpointProblem, Result, TrainError};
use std::collections::BTreeMap;
use std::path::Path;
use torchlean_ir::{safetensors_bytes, write_atomically};
use torchlean_nn::state::NameReport;

pub use torchlean_ir::TensorData;

/// The name prefix of the optimizer's state tensors; [`Checkpoint::check_names`] with the
/// prefix `""` looks at every tensor *not* under it (the model's parameters).
pub const OPTIMIZER_PREFIX: &str = "optimizer.";

/// The metadata key of the checksum [`Checkpoint::save`] writes (see the module's docs).
pub const CHECKSUM_KEY: &str = "torchlean.checksum";

/// The checksum's value before it is known: `crc32:` and the 8 digits the CRC covers as zeros.
const CHECKSUM_ZEROS: &str = "crc32:00000000";

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

/// A name present in the checkpoint and expected, with different shapes (`nn`'s, which
/// compares a `state_dict` with a model the same way).
pub use torchlean_nn::state::ShapeMismatch;

/// The error for metadata member `field` of the checkpoint at `path` that does not parse as it
/// should: the JSON error, whole.
pub fn metadata_error<'a>(
    path: &'a Path,
    field: &'static str,
) -> impl Fn(serde_json::Error) -> TrainError + 'a {
    move |source| TrainError::CheckpointMetadata {
        path: path.to_path_buf(),
        field,
        source,
    }
}

impl Checkpoint {
    /// The `torchlean` metadata of this checkpoint, read from `path`: parsed JSON whose `format`
    /// is `format` (`what` names the kind of file an error says it is not).
    pub fn torchlean_metadata(
        &self,
        path: &Path,
        format: &'static str,
        what: &'static str,
    ) -> Result<serde_json::Value> {
        let bad = |problem| TrainError::Checkpoint {
            path: path.to_path_buf(),
            problem,
        };
        let meta = self
            .metadata
            .get("torchlean")
            .ok_or_else(|| bad(CheckpointProblem::NotTorchlean { what }))?;
        let meta: serde_json::Value =
            serde_json::from_str(meta).map_err(metadata_error(path, "torchlean"))?;
        if meta["format"] != format {
            return Err(bad(CheckpointProblem::Format {
                found: meta["format"].to_string(),
                expected: format,
            }));
        }
        Ok(meta)
    }

    /// Writes the checkpoint to `path` as safetensors, atomically: a temporary file in the same
    /// directory, written, synced, renamed over `path`, the directory synced. On any failure
    /// before the rename the old file is intact and the temporary file removed. Errors: a
    /// tensor whose data does not fill its shape ([`TrainError::CheckpointShape`]), the name
    /// `__metadata__` ([`TrainError::CheckpointName`]), the write itself
    /// ([`TrainError::Write`]). The file carries its checksum under [`CHECKSUM_KEY`] (a
    /// `metadata` entry of that name is replaced).
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = self.to_safetensors(path)?;
        write_atomically(path, &bytes).map_err(|source| TrainError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The bytes [`Checkpoint::save`] writes, checksum included (the inverse of
    /// [`Checkpoint::from_safetensors`]); `path` only names the file in errors.
    pub fn to_safetensors(&self, path: &Path) -> Result<Vec<u8>> {
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
        let mut metadata = self.metadata.clone();
        metadata.insert(CHECKSUM_KEY.to_string(), CHECKSUM_ZEROS.to_string());
        let mut bytes = safetensors_bytes(
            self.tensors
                .iter()
                .map(|(name, t)| (name.as_str(), t.shape.as_slice(), &t.data)),
            &metadata,
        )
        .map_err(|source| TrainError::CheckpointEncode {
            path: path.to_path_buf(),
            source,
        })?;
        let at = checksum_digits(&bytes, CHECKSUM_ZEROS).ok_or(TrainError::Invariant {
            what: "a saved header holds its checksum entry in compact JSON",
        })?;
        let crc = file_crc(&bytes, at);
        bytes[at..at + 8].copy_from_slice(format!("{crc:08x}").as_bytes());
        Ok(bytes)
    }

    /// Reads a checkpoint, checking its checksum when it has one ([`CHECKSUM_KEY`]; a file
    /// written by PyTorch has none); the checksum entry is not in the returned `metadata`.
    /// Errors name `path`: unreadable ([`TrainError::CheckpointRead`]), cut short after a
    /// whole header ([`TrainError::CheckpointTruncated`]), not safetensors or corrupt in its
    /// structure ([`TrainError::CheckpointFormat`], with the safetensors error as its source),
    /// bytes that do not match the checksum ([`TrainError::CheckpointChecksum`]), a dtype other
    /// than F32/F64 ([`TrainError::CheckpointDtype`]).
    pub fn load(path: &Path) -> Result<Checkpoint> {
        Self::read(path, false)
    }

    /// [`Checkpoint::load`] for files only torchlean writes (a run's checkpoint and optimizer
    /// file): a file without a checksum is refused too ([`TrainError::CheckpointUnchecked`]).
    pub fn load_checked(path: &Path) -> Result<Checkpoint> {
        Self::read(path, true)
    }

    fn read(path: &Path, require_checksum: bool) -> Result<Checkpoint> {
        let bytes = std::fs::read(path).map_err(|source| TrainError::CheckpointRead {
            path: path.to_path_buf(),
            source,
        })?;
        Checkpoint::parse(&bytes, path, require_checksum)
    }

    /// Parses the bytes of a checkpoint file, checking its checksum when it has one; `path`
    /// only names it in errors (the errors of [`Checkpoint::load`] but the read).
    pub fn from_safetensors(bytes: &[u8], path: &Path) -> Result<Checkpoint> {
        Checkpoint::parse(bytes, path, false)
    }

    fn parse(bytes: &[u8], path: &Path, require_checksum: bool) -> Result<Checkpoint> {
        let format = |source| match expected_len(bytes) {
            Some(expected) if expected > bytes.len() as u64 => TrainError::CheckpointTruncated {
                path: path.to_path_buf(),
                len: bytes.len() as u64,
                expected,
                source,
            },
            _ => TrainError::CheckpointFormat {
                path: path.to_path_buf(),
                source,
            },
        };
        let st = safetensors::SafeTensors::deserialize(bytes).map_err(format)?;
        let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(format)?;
        let mut metadata: BTreeMap<String, String> = header
            .metadata()
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match metadata.remove(CHECKSUM_KEY) {
            Some(stored) => verify_checksum(path, bytes, &stored)?,
            None if require_checksum => {
                return Err(TrainError::CheckpointUnchecked {
                    path: path.to_path_buf(),
                })
            }
            None => {}
        }
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
        Ok(Checkpoint { tensors, metadata })
    }

    /// The checkpoint without the tensors named in `names` (those it has).
    pub fn without(mut self, names: &[&str]) -> Checkpoint {
        for n in names {
            self.tensors.remove(*n);
        }
        self
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
        let report = NameReport::compare(
            expected.iter().map(|(n, s)| (n.as_str(), s.as_slice())),
            self.tensors
                .iter()
                .filter(|(name, _)| in_scope(name))
                .map(|(name, t)| (name.as_str(), t.shape.as_slice())),
        );
        if report.is_empty() {
            Ok(())
        } else {
            Err(TrainError::CheckpointNames {
                prefix: prefix.to_string(),
                missing: report.missing,
                unexpected: report.unexpected,
                mismatched: report.mismatched,
            })
        }
    }
}

/// Where the 8 hex digits of the checksum entry `"torchlean.checksum":"<value>"` start in the
/// header of `bytes`, `value` being `crc32:` and those digits; `None` when the header does not
/// hold the entry in that compact form.
fn checksum_digits(bytes: &[u8], value: &str) -> Option<usize> {
    let header_len = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let header = bytes.get(8..8usize.checked_add(header_len)?)?;
    let entry = format!(
        "{}:{}",
        serde_json::to_string(CHECKSUM_KEY).ok()?,
        serde_json::to_string(value).ok()?
    );
    let start = header
        .windows(entry.len())
        .position(|w| w == entry.as_bytes())?;
    // after the key, `:"crc32:`
    Some(8 + start + entry.len() - 1 - 8)
}

/// The CRC-32 of `bytes` with the 8 bytes at `digits` read as `'0'`.
fn file_crc(bytes: &[u8], digits: usize) -> u32 {
    let mut crc = Crc32::new();
    crc.update(&bytes[..digits]);
    crc.update(b"00000000");
    crc.update(&bytes[digits + 8..]);
    crc.finish()
}

/// Checks the file's bytes against its stored checksum entry `stored`.
fn verify_checksum(path: &Path, bytes: &[u8], stored: &str) -> Result<()> {
    let mismatch = |computed: Option<u32>| TrainError::CheckpointChecksum {
        path: path.to_path_buf(),
        stored: stored.to_string(),
        computed: computed.map(|c| format!("crc32:{c:08x}")),
    };
    let well_formed = stored.len() == CHECKSUM_ZEROS.len()
        && stored.starts_with("crc32:")
        && stored[6..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    if !well_formed {
        return Err(mismatch(None));
    }
    let at = checksum_digits(bytes, stored).ok_or_else(|| mismatch(None))?;
    let crc = file_crc(bytes, at);
    if format!("crc32:{crc:08x}") == stored {
        Ok(())
    } else {
        Err(mismatch(Some(crc)))
    }
}

/// The length a safetensors file must have according to its header: 8 + the header length +
/// the largest tensor end offset. `None` when the header is not all there or is not JSON of
/// that shape (then the file is corrupt rather than merely short).
fn expected_len(bytes: &[u8]) -> Option<u64> {
    let header_len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let end = 8u64.checked_add(header_len)?;
    let header = bytes.get(8..usize::try_from(end).ok()?)?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    let data = header
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .map(|(_, v)| v["data_offsets"][1].as_u64())
        .try_fold(0u64, |m, e| Some(m.max(e?)))?;
    end.checked_add(data)
}

/// CRC-32 as zlib computes it (reflected polynomial `0xEDB88320`, initial and final xor
/// `0xFFFFFFFF`), a byte at a time from a table.
struct Crc32(u32);

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

impl Crc32 {
    fn new() -> Self {
        Crc32(!0)
    }

    fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = CRC_TABLE[((self.0 ^ u32::from(b)) & 0xff) as usize] ^ (self.0 >> 8);
        }
    }

    fn finish(&self) -> u32 {
        !self.0
    }
}

/// The message of [`TrainError::CheckpointNames`].
pub(crate) fn describe_mismatch(
    prefix: &str,
    missing: &[String],
    unexpected: &[String],
    mismatched: &[ShapeMismatch],
) -> String {
    let scope = if prefix.is_empty() {
        format!("the checkpoint's tensors outside `{OPTIMIZER_PREFIX}`")
    } else {
        format!("the checkpoint's tensors under `{prefix}`")
    };
    let report = NameReport {
        missing: missing.to_vec(),
        unexpected: unexpected.to_vec(),
        mismatched: mismatched.to_vec(),
    };
    format!("{scope} do not match what was expected:{}", report.lines())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        // the CRC-32 check value (the CRC catalogue's "check" for CRC-32/ISO-HDLC, which zlib
        // computes) and zlib.crc32(b"") == 0
        let crc = |b: &[u8]| {
            let mut c = Crc32::new();
            c.update(b);
            c.finish()
        };
        assert_eq!(crc(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc(b""), 0);
        let mut split = Crc32::new();
        split.update(b"1234");
        split.update(b"56789");
        assert_eq!(split.finish(), 0xCBF4_3926);
    }

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
