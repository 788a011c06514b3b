//! `torchlean-equiv`: TorchLean's theorems as executable checks (SPEC 2.3).
//!
//! TorchLean proves that its runtime equals its reference semantics; this crate checks the same
//! statements on random well-formed graphs, exactly where exactness is promised (the rational
//! scalar; bit for bit on floats where the order of operations is the same) and with measured
//! tolerances elsewhere (finite differences; engines against the reference engine).
//!
//! - [`gen`]: proptest strategies for random graphs (usable by other crates' tests);
//! - [`claims`]: one function per claim;
//! - [`engines`]: the engines under test, behind one object-safe trait;
//! - [`regime`]: the attribute regimes that change an op's maths (one table) and the
//!   `(kind, regime)` pairs every run covers;
//! - [`fixed`]: hand-made cases checked against written-out expectations (local sums, SPEC's
//!   defaults);
//! - [`error`]: [`EquivError`], what can go wrong while checking and what a check can find;
//! - [`faults`]: fault-injecting engines that show the checker can fail (re-exported from
//!   `torchlean-faults`, which the CLI uses without the checker);
//! - [`runner::check`]: generates the cases ([`generate_cases`]), runs every claim on them in
//!   parallel ([`run_observations`]), aggregates the rows ([`aggregate_rows`]), shrinks every
//!   failure ([`shrink_failure`]) and writes it atomically as a `torchlean.case.v1` file
//!   ([`write_counterexample`]; a write that fails is reported, never dropped);
//!   [`report::Report`] prints the table;
//! - [`shard`]: the same check shared by the ranks of an MPI job ([`check_sharded`]), its
//!   merged report the single-process one;
//! - [`counterexample`]: what a counterexample's failure depended on ([`Provenance`], written into its
//!   case file) and the replay of exactly that check (`check-equivalence --replay FILE`).
//!
//! `cargo xtask check-equivalence` is the command-line front end.

pub mod claims;
pub mod counterexample;
pub mod engines;
pub mod error;
pub mod fixed;
pub mod gen;
pub mod measure;
pub mod regime;
pub mod report;
pub mod runner;
pub mod shard;

pub use claims::{Claim, Observation};
pub use counterexample::{replay, Counterexample, Provenance};
pub use engines::{EngineOf, EngineUnderTest};
pub use error::EquivError;
pub use gen::{arb_case, build, GenCase, GenConfig};
pub use measure::{Measure, Mode};
pub use report::{CaseFile, ClaimSummary, Failure, Report, Row, Worst};
pub use runner::{
    aggregate_rows, check, coverage, generate_cases, run_observations, shrink_failure,
    write_counterexample, Cases, CheckConfig, Family, Observations, Shrunk,
};
pub use shard::check_sharded;
/// The fault-injecting engines (the `torchlean-faults` crate), as they were when they lived here.
pub use torchlean_faults as faults;
pub use torchlean_faults::{fault, Fault, Faulty, UnknownFault, WithFault};
