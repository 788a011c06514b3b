//! Files generated from the op descriptors: `docs/ir-format.md`'s kinds table and
//! `tools/torch_export/rows.json` (what the PyTorch exporter reads of each row). These tests fail
//! when a file differs (an op added, renamed or re-described without it), and rewrite it when run
//! with `UPDATE_DOCS=1`.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

const START: &str = "<!-- kinds table: generated from crates/spec/src/ops/desc.rs -->\n";
const END: &str = "<!-- end of kinds table -->\n";

#[test]
fn the_kinds_table_of_ir_format_md_is_generated_from_the_descriptors() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/ir-format.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(START).expect("the start marker") + START.len();
    let end = text[start..].find(END).expect("the end marker") + start;
    let want = torchlean_spec::ops::desc::markdown_table();
    if text[start..end] == want {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let updated = format!("{}{want}{}", &text[..start], &text[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "docs/ir-format.md's kinds table is out of date with the op descriptors; \
         run `UPDATE_DOCS=1 cargo test -p torchlean-spec --test docs` and review the diff"
    );
}

/// `tools/torch_export/rows.json`: each op row's kind, operands, PyTorch expression and
/// attributes (key and default), one row a line.
fn rows_json() -> String {
    use serde_json::json;
    let rows: Vec<String> = torchlean_spec::ops::desc::OPS
        .iter()
        .filter(|d| d.prototype().is_some())
        .map(|d| {
            let attrs: Vec<serde_json::Value> = d
                .attributes()
                .iter()
                .map(|a| json!({"key": a.key, "default": a.default}))
                .collect();
            json!({"kind": d.name, "operands": d.operands, "torch": d.torch, "attrs": attrs})
                .to_string()
        })
        .collect();
    format!("[\n{}\n]\n", rows.join(",\n"))
}

#[test]
fn the_torch_exporters_rows_are_generated_from_the_descriptors() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/torch_export/rows.json");
    let want = rows_json();
    if std::fs::read_to_string(&path).ok().as_deref() == Some(want.as_str()) {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, want).unwrap();
        return;
    }
    panic!(
        "tools/torch_export/rows.json is out of date with the op descriptors; \
         run `UPDATE_DOCS=1 cargo test -p torchlean-spec --test docs` and review the diff"
    );
}
