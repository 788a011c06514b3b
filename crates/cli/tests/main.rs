//! The crate's integration tests, one binary: each file is a module, so the engine code they
//! share is instantiated and linked once (docs/ARCHITECTURE.md, "Tests"). A file here that
//! is neither a module below nor a `[[test]]` of its own in Cargo.toml fails
//! `xtask`'s `every_integration_test_file_is_built`.

mod common;

mod anomaly;
mod cli;
mod cuda;
mod dialects;
mod export_torch;
mod import;
mod inputs;
mod predict;
mod reliability;
mod torch_export;
mod train;
mod train_gpt;
mod wording;
