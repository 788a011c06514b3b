//! The workspace's layout rules that no compiler checks.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// A crate with `autotests = false` gathers its integration tests as modules of one binary
/// (`tests/main.rs`; docs/ARCHITECTURE.md, "Tests"), so cargo no longer finds a new file in
/// `tests/` by itself: every `tests/*.rs` must be a test target or a `mod` of one, or its tests
/// would silently never run.
#[test]
fn every_integration_test_file_is_built() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut unbuilt = Vec::new();
    let mut files = 0;
    for package in meta["packages"].as_array().unwrap() {
        let dir = Path::new(package["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap()
            .to_path_buf();
        let targets: Vec<&Path> = package["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "test"))
            .map(|t| Path::new(t["src_path"].as_str().unwrap()))
            .collect();
        let declared: Vec<String> = targets
            .iter()
            .filter_map(|t| std::fs::read_to_string(t).ok())
            .collect();
        let Ok(entries) = std::fs::read_dir(dir.join("tests")) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            files += 1;
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let module = format!("mod {stem};");
            let built = targets.iter().any(|t| *t == path)
                || declared
                    .iter()
                    .any(|src| src.lines().any(|l| l.trim() == module));
            if !built {
                unbuilt.push(path.display().to_string());
            }
        }
    }
    assert!(files > 20, "only {files} integration test files found");
    assert!(
        unbuilt.is_empty(),
        "integration test files no test target builds (add `mod <name>;` to the crate's \
         tests/main.rs, or a [[test]] to its Cargo.toml): {unbuilt:?}"
    );
}
