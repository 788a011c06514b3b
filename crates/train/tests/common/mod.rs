//! What the tests that call PyTorch share: finding the interpreter and running a script.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The interpreter `TORCHLEAN_PYTHON` names, if it can import torch and safetensors; otherwise
/// `None`, after saying why on stderr (the test is then skipped, visibly).
pub fn python() -> Option<PathBuf> {
    let Some(py) = std::env::var_os("TORCHLEAN_PYTHON").filter(|p| !p.is_empty()) else {
        eprintln!("skipped: TORCHLEAN_PYTHON is not set (a Python with torch and safetensors)");
        return None;
    };
    let ok = Command::new(&py)
        .args(["-c", "import torch, safetensors"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: {py:?} cannot import torch, safetensors");
        return None;
    }
    Some(py.into())
}

/// A script of the repository (`tools/pytorch/x.py`, `bench/pytorch/y.py`).
pub fn script(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

/// Runs `py script args…`, asserts it succeeded (showing its stderr) and parses its stdout as
/// JSON.
pub fn run_json(py: &PathBuf, script: &PathBuf, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let out = Command::new(py).arg(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
