//! `torchlean export-torch`: what it writes and refuses (no Python needed), and, with
//! `TORCHLEAN_PYTHON` naming a Python with torch and safetensors, IR → PyTorch → outputs and
//! gradients equal ours on every shipped conformance case and on the imported ONNX zoo
//! (skipped visibly otherwise).
#![allow(clippy::unwrap_used)]

use crate::common;
#[path = "../../train/tests/common/mod.rs"]
mod python;

use common::{assert_bad_input, base_graph, cases_dir, run, stderr, write, zoo, zoo_tensor};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use torchlean_ir::Payload;

fn payload() -> Value {
    json!({"1": {
        "weight": {"shape": [4, 3], "data": [0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, 0.9, -1.0, 1.1, 1.2]},
        "bias": {"shape": [4], "data": [0.5, -0.5, 0.25, 0.0]}
    }})
}

fn export(graph: &Path, payload: Option<&Path>, out: &Path) -> std::process::Output {
    let mut args = vec![
        "export-torch".to_string(),
        graph.display().to_string(),
        "-o".into(),
        out.display().to_string(),
    ];
    if let Some(p) = payload {
        args.extend(["--payload".into(), p.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args)
}

#[test]
fn writes_a_module_and_its_weights() {
    let dir = tempfile::tempdir().unwrap();
    let g = write(dir.path(), "g.json", &base_graph());
    let p = write(dir.path(), "p.json", &payload());
    let out = dir.path().join("model.py");
    let o = export(&g, Some(&p), &out);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let source = std::fs::read_to_string(&out).unwrap();
    for line in [
        "v0 = x  # 0 input",
        "v1 = F.linear(v0, self.n1_weight, self.n1_bias)  # 1 linear",
        "v2 = torch.relu(v1)  # 2 relu",
        "v3 = F.softmax(v2, dim=1)  # 3 softmax",
        "return v3",
    ] {
        assert!(source.contains(line), "{line:?} not in\n{source}");
    }
    // the weights beside it are the payload, under its safetensors keys
    let weights = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let want = Payload::from_json(&payload()).unwrap();
    assert_eq!(Payload::from_safetensors(&weights).unwrap(), want);
    // a safetensors payload gives the same files
    let st = dir.path().join("p.safetensors");
    std::fs::write(&st, want.to_safetensors().unwrap()).unwrap();
    let out2 = dir.path().join("again.py");
    let o = export(&g, Some(&st), &out2);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(dir.path().join("again.safetensors")).unwrap(),
        weights
    );
    let again = std::fs::read_to_string(&out2).unwrap();
    assert_eq!(
        again.replace("again.safetensors", "model.safetensors"),
        source
    );
}

#[test]
fn bad_input_is_exit_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let g = write(dir.path(), "g.json", &base_graph());
    let out = dir.path().join("model.py");
    // no payload: the linear node's weights are missing, named
    let o = export(&g, None, &out);
    assert_bad_input(&o, &["node 1", "weight", "bias"]);
    // a shape error names the node and field
    let mut bad = base_graph();
    bad["nodes"][3]["axis"] = json!(5);
    let gb = write(dir.path(), "bad.json", &bad);
    let p = write(dir.path(), "p.json", &payload());
    assert_bad_input(
        &export(&gb, Some(&p), &out),
        &["bad.json", "node 3", "axis"],
    );
    // the module's name may not be its weights' name
    let o = export(&g, Some(&p), &dir.path().join("m.safetensors"));
    assert_bad_input(&o, &["m.safetensors", "NAME.py"]);
    // a pool PyTorch refuses (padding over half the kernel)
    let pool = json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 1, "nodes": [
        {"id": 0, "kind": "input", "parents": [], "shape": [1, 4, 4]},
        {"id": 1, "kind": "max_pool2d_pad", "parents": [0], "shape": [1, 7, 7],
         "kH": 2, "kW": 2, "stride": 1, "padding": 2}]});
    let gp = write(dir.path(), "pool.json", &pool);
    assert_bad_input(
        &export(&gp, None, &out),
        &["pool.json", "node 1", "padding"],
    );
    assert!(!out.exists() && !dir.path().join("model.safetensors").exists());
}

/// One graph to export and run: its name, the file holding its `input` (and `seed`) for
/// PyTorch, the arguments naming graph and payload, and the `--input` arguments of `grad`.
struct Run {
    name: String,
    case: PathBuf,
    graph: Vec<String>,
    input: Vec<String>,
}

/// Every case shipped in `tests/cases/` (and the shared conformance sets, when present), plus a
/// graph with both random kinds, which no case has.
fn case_files(dir: &Path) -> Vec<Run> {
    let mut roots = vec![cases_dir()];
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    for name in ["conformance", "conformance-ext"] {
        if shared.join(name).is_dir() {
            roots.push(shared.join(name));
        }
    }
    let mut out = Vec::new();
    for (r, root) in roots.iter().enumerate() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for f in files {
            let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
            out.push(Run {
                name: format!("r{r}_{stem}"),
                graph: vec![f.display().to_string()],
                case: f,
                input: vec![],
            });
        }
    }
    let random = json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 6, "nodes": [
        {"id": 0, "kind": "input", "parents": [], "shape": [3, 4]},
        {"id": 1, "kind": "const", "parents": [], "shape": []},
        {"id": 2, "kind": "bernoulli_mask", "parents": [1], "shape": [3, 4], "seed": 11},
        {"id": 3, "kind": "mul_elem", "parents": [0, 2], "shape": [3, 4]},
        {"id": 4, "kind": "rand_uniform", "parents": [], "shape": [3, 4], "seed": 12},
        {"id": 5, "kind": "mul_elem", "parents": [3, 4], "shape": [3, 4]},
        {"id": 6, "kind": "tanh", "parents": [5], "shape": [3, 4]}]});
    let g = write(dir, "random.json", &random);
    let p = write(
        dir,
        "random.payload.json",
        &json!({"1": {"value": {"shape": [], "data": [0.6]}}}),
    );
    let x: Vec<f64> = (0..12).map(|i| (i as f64 - 5.5) / 3.0).collect();
    let input = write(
        dir,
        "random.input.json",
        &json!({"input": {"shape": [3, 4], "data": x}}),
    );
    let x = write(dir, "random.x.json", &json!({"shape": [3, 4], "data": x}));
    out.push(Run {
        name: "random_kinds".into(),
        case: input,
        graph: vec![
            g.display().to_string(),
            "--payload".into(),
            p.display().to_string(),
        ],
        input: vec!["--input".into(), x.display().to_string()],
    });
    out.extend(zoo_runs(dir));
    out
}

/// The ONNX zoo (MLP, CNN with pools and eval batch norm, residual block, encoder block), each
/// imported by `torchlean import`: ONNX → IR → PyTorch, on the zoo's input, in float64.
fn zoo_runs(dir: &Path) -> Vec<Run> {
    ["mlp", "cnn", "residual", "encoder"]
        .into_iter()
        .map(|model| {
            let g = dir.join(format!("zoo_{model}.json"));
            let p = dir.join(format!("zoo_{model}.safetensors"));
            let onnx = zoo(&format!("{model}.onnx"));
            let o = run(&[
                "import",
                onnx.to_str().unwrap(),
                "-o",
                g.to_str().unwrap(),
                "--payload",
                p.to_str().unwrap(),
            ]);
            assert_eq!(o.status.code(), Some(0), "{model}: {}", stderr(&o));
            let x = zoo_tensor(model, "input");
            let case = write(
                dir,
                &format!("zoo_{model}.input.json"),
                &json!({"input": x}),
            );
            let x = write(dir, &format!("zoo_{model}.x.json"), &x);
            Run {
                name: format!("zoo_{model}"),
                case,
                graph: vec![
                    g.display().to_string(),
                    "--payload".into(),
                    p.display().to_string(),
                ],
                input: vec!["--input".into(), x.display().to_string()],
            }
        })
        .collect()
}

/// IR → PyTorch → outputs equal ours: each case exported, run by PyTorch in float64 on the
/// case's input and seed, and its output, input gradient and every payload gradient compared
/// with `torchlean grad`'s (1e-9 relative; `tools/pytorch/run_exported.py`).
#[test]
fn pytorch_runs_the_exported_modules_as_we_do() {
    let Some(py) = python::python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = Vec::new();
    for Run {
        name,
        case,
        graph,
        input,
    } in case_files(dir.path())
    {
        let module = dir.path().join(format!("{name}.py"));
        let module_arg = module.display().to_string();
        let mut export_args = vec!["export-torch"];
        export_args.extend(graph.iter().map(String::as_str));
        export_args.extend(["-o", &module_arg]);
        let o = run(&export_args);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let mut grad_args = vec!["grad"];
        grad_args.extend(graph.iter().chain(&input).map(String::as_str));
        let o = run(&grad_args);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let ours = dir.path().join(format!("{name}.ours.json"));
        std::fs::write(&ours, &o.stdout).unwrap();
        manifest.push(json!({"name": name, "module": module, "case": case, "ours": ours}));
    }
    let n = manifest.len();
    let m = write(dir.path(), "manifest.json", &Value::from(manifest));
    let script = python::script("tools/pytorch/run_exported.py");
    let o = std::process::Command::new(&py)
        .arg(&script)
        .arg(&m)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        report.contains(&format!("\"passed\": {n}, \"failed\": 0")),
        "{report}"
    );
    eprintln!("export-torch: {n} graphs run by PyTorch equal ours (1e-9 relative)");
}
