//! File helpers shared by the crates above `ir` (the payload here, `nn`'s IR export, `train`'s
//! checkpoints and plots):
//!
//! - [`TensorData`]: a tensor's elements as safetensors stores them (little-endian, row-major,
//!   `F32` or `F64`), decoded and encoded in one place;
//! - [`safetensors_bytes`]: named tensors and string metadata as a safetensors file whose bytes
//!   depend only on its contents (the `safetensors` crate writes the metadata in hash order);
//! - [`write_atomically`]: a temporary file in the target's directory, synced, renamed over the
//!   target, the directory synced; a reader sees the old file or the whole new one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub use safetensors::{Dtype, SafeTensorError};

/// A tensor's elements, row-major, in one of the two floating-point types the project stores.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    /// safetensors `"F32"`.
    F32(Vec<f32>),
    /// safetensors `"F64"`.
    F64(Vec<f64>),
}

impl TensorData {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::F64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The safetensors dtype: [`Dtype::F32`] or [`Dtype::F64`].
    pub fn dtype(&self) -> Dtype {
        match self {
            TensorData::F32(_) => Dtype::F32,
            TensorData::F64(_) => Dtype::F64,
        }
    }

    /// Decodes little-endian `bytes` of `dtype`; `None` when the dtype is neither `F32` nor
    /// `F64`, or the byte count is not a whole number of elements.
    pub fn from_le_bytes(dtype: Dtype, bytes: &[u8]) -> Option<TensorData> {
        match dtype {
            Dtype::F32 if bytes.len().is_multiple_of(4) => Some(TensorData::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4-byte chunks")))
                    .collect(),
            )),
            Dtype::F64 if bytes.len().is_multiple_of(8) => Some(TensorData::F64(
                bytes
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8-byte chunks")))
                    .collect(),
            )),
            _ => None,
        }
    }

    /// The elements as little-endian bytes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            TensorData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
}

/// The safetensors file of `tensors` (name, shape, data) and `metadata` (omitted when empty).
/// Same contents, same bytes: the `safetensors` crate orders tensors by dtype and name but
/// writes the metadata in `HashMap` order, so the metadata object is rewritten sorted by key
/// (same entries, same length). Errors when a tensor's data does not fill its shape.
pub fn safetensors_bytes<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a [usize], &'a TensorData)>,
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>, SafeTensorError> {
    let encoded: Vec<(&str, &[usize], Dtype, Vec<u8>)> = tensors
        .into_iter()
        .map(|(name, shape, data)| (name, shape, data.dtype(), data.to_le_bytes()))
        .collect();
    let views = encoded
        .iter()
        .map(|(name, shape, dtype, bytes)| {
            safetensors::tensor::TensorView::new(*dtype, shape.to_vec(), bytes).map(|v| (*name, v))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let hashed = (!metadata.is_empty()).then(|| {
        metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<std::collections::HashMap<_, _>>()
    });
    let mut bytes = safetensors::serialize(views, &hashed)?;
    if !metadata.is_empty() {
        sort_metadata(&mut bytes, metadata);
    }
    Ok(bytes)
}

/// Rewrites the `__metadata__` object (the first member of the header, as safetensors 0.4
/// writes it) with its keys sorted. Leaves the bytes alone when the layout is not the one
/// expected, so a different `safetensors` version costs determinism, never validity.
fn sort_metadata(bytes: &mut [u8], metadata: &BTreeMap<String, String>) {
    const PREFIX: &[u8] = b"{\"__metadata__\":";
    let sorted = serde_json::to_string(metadata).expect("a map of strings serializes");
    let start = 8 + PREFIX.len();
    let end = start + sorted.len();
    let Some(written) = bytes.get(start..end) else {
        return;
    };
    let same = bytes.get(8..start) == Some(PREFIX)
        && serde_json::from_slice::<BTreeMap<String, String>>(written)
            .ok()
            .as_ref()
            == Some(metadata);
    if same {
        bytes[start..end].copy_from_slice(sorted.as_bytes());
    }
}

/// Writes `bytes` to `path` atomically: into a new temporary file in the same directory
/// (`.<name>.<pid>-<n>.tmp`), synced to disk, renamed over `path`, then the directory synced so
/// the rename itself is durable (on Unix). A reader sees the old file or the whole new one; on
/// a failure before the rename the old file is untouched and the temporary file is removed.
/// A failure to sync the directory is reported, but the new file is already in place. The new
/// file keeps the permissions of the one it replaces (a `0600` checkpoint stays private); a
/// symlink at `path` is replaced by the file, not written through.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let Some(name) = path.file_name() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path has no file name",
        ));
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        if let Ok(old) = std::fs::metadata(path) {
            f.set_permissions(old.permissions())?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        // the write's error is the one reported; if the temporary file was never created
        // there is nothing to remove and this fails harmlessly
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_bytes_are_little_endian() {
        let d = TensorData::F32(vec![1.0, -2.5]);
        let bytes = d.to_le_bytes();
        assert_eq!(bytes, [0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0]);
        assert_eq!(TensorData::from_le_bytes(Dtype::F32, &bytes), Some(d));
        let d = TensorData::F64(vec![1.0]);
        assert_eq!(d.to_le_bytes(), [0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
        assert_eq!(TensorData::from_le_bytes(Dtype::I32, &[0; 4]), None);
        assert_eq!(TensorData::from_le_bytes(Dtype::F64, &[0; 4]), None);
    }

    #[test]
    fn same_contents_same_bytes() {
        // with many keys, two HashMaps (each with its own random seed) practically never
        // iterate in the same order, so without the sort these bytes would differ
        let meta: BTreeMap<String, String> = (0..32)
            .map(|i| (format!("key{i}"), format!("value \"{i}\"")))
            .collect();
        let data = TensorData::F64(vec![0.5; 6]);
        let tensors = [("b", &[2usize, 3][..], &data), ("a", &[6][..], &data)];
        let first = safetensors_bytes(tensors, &meta).unwrap();
        for _ in 0..4 {
            assert_eq!(safetensors_bytes(tensors, &meta).unwrap(), first);
        }
        let header_len = u64::from_le_bytes(first[..8].try_into().unwrap()) as usize;
        let header = std::str::from_utf8(&first[8..8 + header_len]).unwrap();
        assert!(
            header.starts_with(r#"{"__metadata__":{"key0":"value \"0\"","key1":"#),
            "{header}"
        );
        let back = safetensors::SafeTensors::read_metadata(&first).unwrap().1;
        assert_eq!(back.metadata().as_ref().unwrap().len(), 32);
    }

    #[test]
    fn a_short_shape_is_an_error() {
        let data = TensorData::F32(vec![1.0; 5]);
        assert!(safetensors_bytes([("w", &[2usize, 3][..], &data)], &BTreeMap::new()).is_err());
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("torchlean-ir-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        write_atomically(&path, b"old").unwrap();
        write_atomically(&path, b"new contents").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new contents");
        // the target is a directory: the rename fails, the temporary file is removed
        let sub = dir.join("sub");
        std::fs::create_dir_all(sub.join("x")).unwrap();
        assert!(write_atomically(&sub, b"x").is_err());
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(write_atomically(Path::new("/"), b"x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn atomic_write_keeps_the_replaced_files_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("torchlean-ir-perm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("private.bin");
        write_atomically(&path, b"old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomically(&path, b"new").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
