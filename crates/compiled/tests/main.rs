//! The crate's integration tests, one binary: each file is a module, so the engine code they
//! share is instantiated and linked once (docs/ARCHITECTURE.md, "Tests"). A file here that
//! is neither a module below nor a `[[test]]` of its own in Cargo.toml fails
//! `xtask`'s `every_integration_test_file_is_built`.

mod common;

mod anomaly;
mod conformance;
mod dialects;
mod equivalence;
mod fuse;
mod inputs;
mod snapshots;
