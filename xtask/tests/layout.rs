//! The workspace's layout rules that no compiler checks.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The standard output of `cargo ARGS` in this package's folder (failing on its failure).
fn cargo(args: &[&str]) -> Vec<u8> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The workspace's own packages, from `cargo metadata --no-deps`.
fn metadata() -> Value {
    serde_json::from_slice(&cargo(&["metadata", "--no-deps", "--format-version", "1"])).unwrap()
}

/// The crates by layer, lowest first (docs/ARCHITECTURE.md, "Bird's-eye view"). A crate
/// depends only on crates of lower layers.
const LAYERS: &[&[&str]] = &[
    &["spec", "distributed", "workspace-hack"],
    &["ir", "runtime"],
    &[
        "compiled",
        "engine-cpu",
        "engine-cuda",
        "faults",
        "engine-suite",
        "onnx",
    ],
    &["nn", "engines"],
    &["optim"],
    &["train", "equiv"],
    &["cli", "fuzz-targets"],
    &["xtask"],
];

/// The engines: picked by the front ends and the checker, never by a library that models or
/// trains run on.
const ENGINES: &[&str] = &["engine-cpu", "engine-cuda", "faults"];
const MAY_PICK_AN_ENGINE: &[&str] = &["engines", "equiv", "cli", "xtask"];

/// `(package, its workspace dependencies)` of the normal (not dev, not build) kind.
fn workspace_dependencies(meta: &Value) -> Vec<(String, Vec<String>)> {
    let short = |n: &str| n.strip_prefix("torchlean-").unwrap_or(n).to_string();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() && d["path"].is_string())
                .map(|d| short(d["name"].as_str().unwrap()))
                .collect();
            (short(p["name"].as_str().unwrap()), deps)
        })
        .collect()
}

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

#[test]
fn no_crate_depends_on_one_above_it_and_only_front_ends_pick_an_engine() {
    let mut wrong = Vec::new();
    for (package, deps) in workspace_dependencies(&metadata()) {
        let Some(layer) = layer_of(&package) else {
            wrong.push(format!("{package} is in no layer of LAYERS"));
            continue;
        };
        for dep in deps {
            match layer_of(&dep) {
                Some(l) if l < layer => {}
                _ => wrong.push(format!("{package} (layer {layer}) depends on {dep}")),
            }
            if ENGINES.contains(&dep.as_str()) && !MAY_PICK_AN_ENGINE.contains(&package.as_str()) {
                wrong.push(format!("{package} depends on the engine crate {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A crate with `autotests = false` gathers its integration tests as modules of one binary
/// (`tests/main.rs`; docs/ARCHITECTURE.md, "Tests"), so cargo no longer finds a new file in
/// `tests/` by itself: every `tests/*.rs` must be a test target or a `mod` of one, or its tests
/// would silently never run.
#[test]
fn every_integration_test_file_is_built() {
    let meta = metadata();
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

/// Every resolved package of the workspace's build, as `name version features` lines (`cargo
/// tree`, host and target dependencies alike), with `features` (a `--features` list) added to
/// the default ones. Not `--offline`: on a fresh machine the MPI build's packages are not
/// downloaded yet.
fn resolved(features: Option<&str>) -> std::collections::BTreeSet<String> {
    let mut args = vec![
        "tree",
        "--workspace",
        "-e",
        "features,normal,build,dev",
        "-f",
        "{p} {f}",
        "--prefix",
        "none",
    ];
    if let Some(features) = features {
        args.extend(["--features", features]);
    }
    String::from_utf8_lossy(&cargo(&args))
        .lines()
        // packages, not the `-e features` lines naming one feature
        .filter(|l| !l.contains(" feature \""))
        .map(|l| l.trim_end_matches(" (*)").trim_end().to_string())
        .collect()
}

/// The features `.ci/run` builds the MPI tests with (its `mpi_features=` line).
fn ci_mpi_features() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/run");
    std::fs::read_to_string(&script)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("mpi_features="))
        .unwrap_or_else(|| panic!("no `mpi_features=` line in {}", script.display()))
        .trim()
        .to_string()
}

/// The MPI tests (`.ci/run`) build after `cargo test --workspace`: every package the default
/// build resolved must resolve with the same features in the MPI build, or it and everything
/// above it is compiled twice (`crates/workspace-hack`; bindgen's `syn` feature made `.ci/run`'s
/// MPI tests step 406 s instead of 223).
#[test]
fn the_mpi_build_resolves_the_default_builds_packages_unchanged() {
    let features = ci_mpi_features();
    // the packages whose `mpi` feature this is differ by it
    let mpi_packages: Vec<String> = features
        .split(',')
        .map(|f| format!("{} v", f.split('/').next().unwrap_or(f)))
        .collect();
    let default = resolved(None);
    let mpi = resolved(Some(&features));
    let changed: Vec<&String> = default
        .difference(&mpi)
        .filter(|l| !mpi_packages.iter().any(|p| l.starts_with(p)))
        .collect();
    assert!(
        default.len() > 100,
        "only {} packages resolved",
        default.len()
    );
    assert!(
        changed.is_empty(),
        "resolved otherwise in the MPI build (add the MPI build's features to \
         crates/workspace-hack): {changed:?}"
    );
}
