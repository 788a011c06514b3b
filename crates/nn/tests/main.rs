//! The crate's integration tests, one binary: each file is a module, so the engine code they
//! share is instantiated and linked once (docs/ARCHITECTURE.md, "Tests"). A file here that
//! is neither a module below nor a `[[test]]` of its own in Cargo.toml fails
//! `xtask`'s `every_integration_test_file_is_built`.

mod anomaly;
mod budget;
mod dynamic;
mod gpt;
mod losses;
mod programs;
mod session;
mod state_dict;
mod zoo;
