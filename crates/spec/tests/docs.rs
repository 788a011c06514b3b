//! `docs/ir-format.md`'s kinds table is generated from the op descriptors: this test fails when
//! the file differs (an op added, renamed or re-described without the docs), and rewrites it
//! when run with `UPDATE_DOCS=1`.
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
