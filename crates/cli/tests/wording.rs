//! What users read when a command refuses their input (issue 34, item 8), in one insta snapshot
//! (`snapshots/`): each command, its exit code and its standard error, run in a scratch folder
//! where `repo` is this repository. A change of wording shows up in review as a diff of this
//! one file. Each line names the user's flag or file, never an internal field.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::fmt::Write as _;

/// The commands, as a user types them (`repo/` is the repository).
const COMMANDS: &[&str] = &[
    // flags: the user's flag, its value and the rule, not the library's field name
    "train mlp --lr -1",
    "train mlp --held-out 2",
    "train mlp --optimizer sgd --momentum -1",
    "train mlp --clip-grad-norm -1",
    "train mlp --plot loss.png",
    "train mlp --optimizer adam --momentum 0.9",
    // counts in the right number
    "grad repo/crates/ir/tests/september/two_outputs.json --input repo/examples/two_outputs/x.json \
     --seed repo/examples/two_outputs/s0.json",
    // every problem of a graph, payload and input in one run
    "check bad_graph.json --payload bad_payload.json --input bad_input.json",
    // a memory refusal names the batch it is about
    "train cnn --max-memory 2M",
    // where the weights would go
    "import repo/crates/onnx/tests/zoo/cnn.onnx -o cnn.json",
];

/// A graph, payload and input with one wrong shape each (from a shipped case).
fn write_bad_files(dir: &std::path::Path) {
    let case: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::cases_dir().join("mlp3_relu_mse.json")).unwrap(),
    )
    .unwrap();
    let mut graph = case["graph"].clone();
    graph["nodes"][2]["shape"] = serde_json::json!([9, 9]);
    let mut payload = case["payload"].clone();
    payload["1"]["weight"] = serde_json::json!({"shape": [1], "data": [0.0]});
    let input = serde_json::json!({"shape": [1], "data": [0.0]});
    for (name, v) in [
        ("bad_graph.json", graph),
        ("bad_payload.json", payload),
        ("bad_input.json", input),
    ] {
        std::fs::write(dir.join(name), v.to_string()).unwrap();
    }
}

#[test]
fn error_texts_users_see() {
    let dir = tempfile::tempdir().unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::os::unix::fs::symlink(repo.canonicalize().unwrap(), dir.path().join("repo")).unwrap();
    write_bad_files(dir.path());
    let mut report = String::new();
    for command in COMMANDS {
        let o = common::bin()
            .args(command.split_whitespace())
            .current_dir(dir.path())
            .output()
            .unwrap();
        let code = o.status.code().map_or("a signal".into(), |c| c.to_string());
        writeln!(report, "$ torchlean {command}\nexit {code}").unwrap();
        for line in common::stderr(&o).lines() {
            writeln!(report, "  {line}").unwrap();
        }
        report.push('\n');
        assert!(!o.status.success(), "{command}: should be refused");
    }
    insta::assert_snapshot!(report);
}
