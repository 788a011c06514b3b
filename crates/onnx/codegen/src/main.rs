//! Regenerates `crates/onnx/src/generated/onnx.rs` from `crates/onnx/proto/onnx.proto`:
//! `protox` compiles the schema (pure Rust, no `protoc`), `prost-build` writes the Rust types.
//!
//! Run from the repository root:
//! `cargo run --manifest-path crates/onnx/codegen/Cargo.toml`

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let proto_dir = root.join("proto");
    let out_dir = root.join("src").join("generated");
    let fds = protox::compile([proto_dir.join("onnx.proto")], [&proto_dir])?;
    std::fs::create_dir_all(&out_dir)?;
    prost_build::Config::new()
        .out_dir(&out_dir)
        .compile_fds(fds)?;
    Ok(())
}
