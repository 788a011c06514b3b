//! The committed corpus through every target: every seed and every regression input (a crash
//! libFuzzer found, kept after its fix) runs through every target and must return normally.
//! The seeds are generated from `tests/cases/` and the inputs written below;
//! `UPDATE_SEEDS=1 cargo test -p torchlean-fuzz-targets --test corpus` rewrites them.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{corpus, fuzz_dir};
use serde_json::{json, Value};
use torchlean_fuzz_targets::{fixed_graph, target, TARGETS};
use torchlean_ir::{check_payload, Payload, TensorData};

/// The seed corpus stays small (it is committed, and every file runs in CI).
const MAX_CORPUS_BYTES: usize = 2 << 20;

#[test]
fn every_seed_and_regression_returns_normally_from_every_target() {
    let mut files = 0;
    for kind in ["seeds", "regressions"] {
        for owner in TARGETS {
            for (path, bytes) in corpus(kind, owner.name) {
                for t in TARGETS {
                    let run = std::panic::catch_unwind(|| (t.run)(&bytes));
                    assert!(run.is_ok(), "{} panicked on {}", t.name, path.display());
                }
                files += 1;
            }
        }
    }
    assert!(files > 0, "no corpus under {}", fuzz_dir().display());
}

#[test]
fn every_target_has_seeds_and_a_regression_folder() {
    for t in TARGETS {
        assert!(
            !corpus("seeds", t.name).is_empty(),
            "no seeds for {}",
            t.name
        );
        let dir = fuzz_dir().join("regressions").join(t.name);
        assert!(dir.is_dir(), "{} is missing", dir.display());
        for (path, bytes) in corpus("seeds", t.name) {
            assert!(
                bytes.len() <= t.max_len,
                "{} is longer than {}'s max_len",
                path.display(),
                t.name
            );
        }
    }
}

#[test]
fn the_corpus_is_small() {
    let total: usize = ["seeds", "regressions"]
        .iter()
        .flat_map(|kind| TARGETS.iter().flat_map(|t| corpus(kind, t.name)))
        .map(|(_, b)| b.len())
        .sum();
    assert!(total < MAX_CORPUS_BYTES, "the corpus is {total} bytes");
}

/// The payload seed that fits the fixed graph: `payload_json` and `payload_safetensors`
/// reach `check_payload`'s every comparison from it.
#[test]
fn the_fixed_payload_seed_checks_clean_against_the_fixed_graph() {
    let p = fixed_payload();
    let errors: Vec<_> = check_payload(&fixed_graph(), &p)
        .into_iter()
        .filter(|d| d.is_error())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn the_seeds_are_the_generated_ones() {
    let want = generate();
    let update = std::env::var_os("UPDATE_SEEDS").is_some();
    let mut stale = Vec::new();
    for t in TARGETS {
        let dir = fuzz_dir().join("seeds").join(t.name);
        let mine: BTreeMap<String, Vec<u8>> = want
            .iter()
            .filter(|((owner, _), _)| owner == t.name)
            .map(|((_, name), bytes)| (name.clone(), bytes.clone()))
            .collect();
        assert!(!mine.is_empty(), "the generator has no seed for {}", t.name);
        if update {
            if dir.exists() {
                std::fs::remove_dir_all(&dir).expect("removable seed folder");
            }
            std::fs::create_dir_all(&dir).expect("a seed folder");
            for (name, bytes) in &mine {
                std::fs::write(dir.join(name), bytes).expect("a written seed");
            }
            let regressions = fuzz_dir().join("regressions").join(t.name);
            std::fs::create_dir_all(&regressions).expect("a regression folder");
            let keep = regressions.join(".gitkeep");
            if !keep.exists() {
                std::fs::write(keep, b"").expect("a written .gitkeep");
            }
            continue;
        }
        let have: BTreeMap<String, Vec<u8>> = corpus("seeds", t.name)
            .into_iter()
            .map(|(p, b)| (file_name(&p), b))
            .collect();
        if have != mine {
            stale.push(t.name);
        }
    }
    assert!(
        stale.is_empty(),
        "seeds out of date for {stale:?}: run UPDATE_SEEDS=1 cargo test -p torchlean-fuzz-targets --test corpus"
    );
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .expect("a corpus file has a name")
        .to_string_lossy()
        .into_owned()
}

type Seeds = BTreeMap<(String, String), Vec<u8>>;

fn add(seeds: &mut Seeds, target_name: &str, name: &str, bytes: impl Into<Vec<u8>>) {
    assert!(target(target_name).is_some(), "no target {target_name}");
    seeds.insert((target_name.to_string(), name.to_string()), bytes.into());
}

fn text(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("a JSON value prints")
}

/// Every seed, keyed by (target, file name).
fn generate() -> Seeds {
    let mut s = Seeds::new();
    let cases_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases");
    let mut cases: Vec<_> = std::fs::read_dir(&cases_dir)
        .expect("tests/cases")
        .map(|e| e.expect("a readable folder").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    cases.sort();
    for path in &cases {
        let name = file_name(path);
        let bytes = std::fs::read(path).expect("a readable case");
        let v: Value = serde_json::from_slice(&bytes).expect("a case is JSON");
        add(&mut s, "case_json", &name, bytes.clone());
        add(&mut s, "lowering", &name, bytes);
        add(&mut s, "graph_json", &name, text(&v["graph"]));
        add(
            &mut s,
            "lowering",
            &format!("graph-{name}"),
            text(&v["graph"]),
        );
        add(
            &mut s,
            "tensor_json",
            &format!("input-{name}"),
            text(&v["input"]),
        );
        if let Some(p) = v.get("payload") {
            add(&mut s, "payload_json", &name, text(p));
            let st = Payload::from_json(p)
                .and_then(|p| p.to_safetensors())
                .expect("a case's payload writes as safetensors");
            let stem = name.trim_end_matches(".json");
            add(
                &mut s,
                "payload_safetensors",
                &format!("{stem}.safetensors"),
                st,
            );
        }
    }
    // TorchLean's September dialect (`crates/ir/tests/september/`): read, lowered, weights inline
    let september_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ir/tests/september");
    let mut september: Vec<_> = std::fs::read_dir(&september_dir)
        .expect("crates/ir/tests/september")
        .map(|e| e.expect("a readable folder").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| !file_name(p).ends_with(".expect.json"))
        .collect();
    september.sort();
    for path in &september {
        let bytes = std::fs::read(path).expect("a readable fixture");
        let v: Value = serde_json::from_slice(&bytes).expect("a fixture is JSON");
        add(
            &mut s,
            "graph_json",
            &format!("september-{}", file_name(path)),
            text(&v),
        );
    }
    let fixed = fixed_payload();
    add(&mut s, "graph_json", "fixed-graph.json", fixed_graph_text());
    add(&mut s, "lowering", "fixed-graph.json", fixed_graph_text());
    add(&mut s, "payload_json", "fixed.json", text(&fixed.to_json()));
    add(
        &mut s,
        "payload_safetensors",
        "fixed.safetensors",
        fixed.to_safetensors().expect("the fixed payload writes"),
    );
    hand_made_json(&mut s);
    tensors(&mut s);
    checkpoints(&mut s);
    csvs(&mut s);
    onnx_models(&mut s);
    s
}

/// The ONNX model zoo (`crates/onnx/tests/zoo/`), one cut in half, and an empty file.
fn onnx_models(s: &mut Seeds) {
    let zoo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../onnx/tests/zoo");
    for name in ["mlp", "cnn", "residual", "encoder"] {
        let bytes = std::fs::read(zoo.join(format!("{name}.onnx"))).expect("the zoo is committed");
        if name == "mlp" {
            add(
                s,
                "onnx",
                "mlp-truncated.onnx",
                bytes[..bytes.len() / 2].to_vec(),
            );
        }
        add(s, "onnx", &format!("{name}.onnx"), bytes);
    }
    add(s, "onnx", "empty.onnx", Vec::new());
}

fn fixed_graph_text() -> Vec<u8> {
    text(&fixed_graph().to_json())
}

/// A payload with every tensor the fixed graph's nodes take, in the right shapes.
fn fixed_payload() -> Payload {
    let t = |shape: &[usize], data: &[f64]| json!({"shape": shape, "data": data});
    let v = json!({
        "1": {"weight": t(&[2, 2, 1, 1], &[1.0, -0.5, 0.25, 2.0]), "bias": t(&[2], &[0.0, 0.1])},
        "2": {"gamma": t(&[2], &[1.0, 2.0]), "beta": t(&[2], &[0.0, -1.0]),
              "mean": t(&[2], &[0.5, 0.0]), "var": t(&[2], &[1.0, 4.0]), "eps": 1e-5},
        "4": {"weight": t(&[3, 18], &[0.125; 54]), "bias": t(&[3], &[1.0, 2.0, 3.0])},
        "5": {"value": t(&[1, 3], &[-1.0, 0.0, 1.0])},
        "7": {"target": t(&[1], &[2.0])}
    });
    Payload::from_json(&v).expect("the fixed payload parses")
}

/// Malformed and extreme JSON every JSON target starts from.
fn hand_made_json(s: &mut Seeds) {
    let graph = |nodes: Value| json!({"format": "torchlean.ir.v1", "input_id": 0, "output_id": 1, "nodes": nodes});
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("empty", b"".to_vec()),
        ("open-brace", b"{".to_vec()),
        ("null", b"null".to_vec()),
        ("array", b"[]".to_vec()),
        ("deep", "[".repeat(200).into_bytes()),
        ("not-utf8", vec![b'{', 0xff, 0xfe, b'}']),
        (
            "duplicate-keys",
            br#"{"format": "torchlean.ir.v1", "format": "x", "input_id": 0, "input_id": 0, "output_id": 0, "nodes": [{"id": 0, "id": 1, "kind": "input", "parents": [], "shape": [2]}]}"#.to_vec(),
        ),
        (
            "huge-shape",
            text(&graph(json!([
                {"id": 0, "kind": "input", "parents": [], "shape": [1_000_000_000]},
                {"id": 1, "kind": "relu", "parents": [0], "shape": [1_000_000_000]}]))),
        ),
        (
            "overflowing-shape",
            text(&graph(json!([
                {"id": 0, "kind": "input", "parents": [], "shape": [u64::MAX, u64::MAX]},
                {"id": 1, "kind": "sum", "parents": [0], "shape": []}]))),
        ),
        (
            "bad-ids",
            text(&graph(json!([
                {"id": 5, "kind": "input", "parents": [7], "shape": [2]},
                {"id": -1, "kind": "add", "parents": [0, 0, 0], "shape": [2.5]}]))),
        ),
        (
            "attribute-types",
            text(&graph(json!([
                {"id": 0, "kind": "input", "parents": [], "shape": [1, 1, 4, 4]},
                {"id": 1, "kind": "conv2d", "parents": [0], "shape": [1, 1, 4, 4], "inC": "1",
                 "outC": -1, "kH": 1e300, "kW": 0, "stride": 0, "padding": 18446744073709551615u64}]))),
        ),
        (
            "pool-zero-stride",
            text(&graph(json!([
                {"id": 0, "kind": "input", "parents": [], "shape": [1, 4, 4]},
                {"id": 1, "kind": "max_pool2d", "parents": [0], "shape": [1, 2, 2], "kH": 2, "kW": 2, "stride": 0}]))),
        ),
        (
            "payload-extremes",
            text(&json!({"1": {"weight": {"shape": [4294967296u64, 4294967296u64], "data": []},
                               "bias": {"shape": [2], "data": ["nan", "-inf"]}},
                         "2": {"eps": "x", "gamma": 1},
                         "x": {}, "7": {"target": {"shape": [1], "data": [1e300]}}})),
        ),
    ];
    for target_name in [
        "graph_json",
        "payload_json",
        "tensor_json",
        "case_json",
        "lowering",
    ] {
        for (name, bytes) in &inputs {
            add(s, target_name, &format!("hand-{name}.json"), bytes.clone());
        }
    }
}

fn tensors(s: &mut Seeds) {
    let inputs: Vec<(&str, &[u8])> = vec![
        ("scalar", br#"{"shape": [], "data": [1.5]}"#),
        (
            "non-finite",
            br#"{"shape": [4], "data": ["nan", "inf", "-inf", "Infinity"]}"#,
        ),
        (
            "f32-overflow",
            br#"{"shape": [2], "data": [1e300, -1e-320]}"#,
        ),
        ("short-data", br#"{"shape": [3, 2], "data": [1, 2]}"#),
        (
            "huge-shape",
            br#"{"shape": [4294967296, 4294967296, 4294967296], "data": []}"#,
        ),
        ("zero-dim", br#"{"shape": [0, 1000000000], "data": []}"#),
        (
            "shape-types",
            br#"{"shape": [-1, 2.5, "3", null], "data": []}"#,
        ),
    ];
    for (name, bytes) in inputs {
        add(s, "tensor_json", &format!("hand-{name}.json"), bytes);
    }
}

fn checkpoint_bytes(tensors: &[(&str, Vec<usize>, TensorData)], meta: &[(&str, &str)]) -> Vec<u8> {
    let metadata: BTreeMap<String, String> = meta
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    torchlean_ir::safetensors_bytes(
        tensors
            .iter()
            .map(|(name, shape, data)| (*name, shape.as_slice(), data)),
        &metadata,
    )
    .expect("the seed tensors fill their shapes")
}

fn checkpoints(s: &mut Seeds) {
    let model = checkpoint_bytes(
        &[
            ("0.weight", vec![2, 3], TensorData::F32(vec![0.5; 6])),
            ("0.bias", vec![2], TensorData::F32(vec![-1.0, 1.0])),
        ],
        &[(
            "torchlean",
            r#"{"format": "torchlean.checkpoint.v1", "step": 3}"#,
        )],
    );
    let optimizer = checkpoint_bytes(
        &[
            (
                "optimizer.state.0.weight.exp_avg",
                vec![2, 3],
                TensorData::F64(vec![0.0; 6]),
            ),
            (
                "optimizer.state.0.bias.exp_avg",
                vec![2],
                TensorData::F64(vec![0.0; 2]),
            ),
        ],
        &[("save_id", "1")],
    );
    let mismatched = checkpoint_bytes(
        &[
            ("0.weight", vec![3, 2], TensorData::F64(vec![0.5; 6])),
            ("extra", vec![], TensorData::F32(vec![1.0])),
        ],
        &[],
    );
    // a file as `Checkpoint::save` writes it, so the mutations reach the checksum check
    let sealed = torchlean_train::checkpoint::Checkpoint {
        tensors: [(
            "0.weight".to_string(),
            torchlean_train::checkpoint::NamedTensor {
                shape: vec![2, 2],
                data: TensorData::F32(vec![0.25, -0.5, 1.0, 2.0]),
            },
        )]
        .into(),
        metadata: [("step".to_string(), "3".to_string())].into(),
    }
    .to_safetensors(std::path::Path::new("sealed.safetensors"))
    .expect("a checkpoint of whole tensors encodes");
    let mut other_dtype = Vec::new();
    let header = br#"{"0.weight":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}"#;
    other_dtype.extend_from_slice(&(header.len() as u64).to_le_bytes());
    other_dtype.extend_from_slice(header);
    other_dtype.extend_from_slice(&[0u8; 8]);
    // a header length far past the end of the file
    let mut lying_length = u64::MAX.to_le_bytes().to_vec();
    lying_length.extend_from_slice(b"{}");
    for (name, bytes) in [
        ("model", model),
        ("sealed", sealed),
        ("optimizer", optimizer),
        ("mismatched", mismatched),
        ("i32", other_dtype),
        ("lying-length", lying_length),
    ] {
        add(
            s,
            "checkpoint",
            &format!("{name}.safetensors"),
            bytes.clone(),
        );
        add(
            s,
            "payload_safetensors",
            &format!("checkpoint-{name}.safetensors"),
            bytes,
        );
    }
}

fn csvs(s: &mut Seeds) {
    let inputs: Vec<(&str, &str)> = vec![
        ("plain", "a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n"),
        (
            "quoted",
            "\u{feff}\"a,1\",\"b\"\"2\",label\r\n\"1\",2,cat\r\n3,\"4\",dog\r\n\r\n5,6,cat\r\n",
        ),
        ("named-classes", "x,label\n0.5,b\n1e300,a\n-0,c\n  2 ,b\n"),
        ("ragged", "a,label\n1,0,9\n2\n"),
        ("non-finite", "a,label\ninf,0\nNaN,1\n"),
        (
            "many-classes",
            "a,label\n1,65535\n2,65536\n3,18446744073709551616\n",
        ),
        ("unterminated", "a,label\n\"1,0\n"),
        ("after-quote", "a,label\n\"1\"x,0\n"),
        ("duplicate-header", "a,a,label\n1,2,0\n"),
        ("no-label", "a,b\n1,2\n"),
        ("header-only", "a,label\n"),
        ("lone-cr", "a,label\r1,0\r2,1\r"),
        ("empty-label", "a,label\n1,\n2, \n"),
        ("one-row", "a,label\n1,0\n"),
    ];
    for (name, body) in inputs {
        add(s, "csv", &format!("{name}.csv"), body);
    }
}
