//! The committed corpus: this crate's `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/`.

use std::path::{Path, PathBuf};

/// This crate's `fuzz/` directory (cargo-fuzz's workspace).
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `fuzz/<kind>/<target>/` (sorted by name), with their bytes; none if the
/// folder does not exist.
pub fn corpus(kind: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable corpus folder").path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("a readable corpus file");
            (p, bytes)
        })
        .collect()
}
