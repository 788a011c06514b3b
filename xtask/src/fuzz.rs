//! `cargo xtask fuzz [--target T]… [--seconds N]`: every fuzz target under libFuzzer
//! (cargo-fuzz, nightly), one after the other, and a table of executions per target.
//!
//! The targets and their `-max_len` are `torchlean_fuzz_targets::TARGETS`. Each run reads the
//! committed `crates/fuzz-targets/fuzz/seeds/<t>/` and `fuzz/regressions/<t>/` and grows the uncommitted
//! working corpus `fuzz/corpus/<t>/` there; crashes land in `fuzz/artifacts/<t>/` (copy one
//! into `fuzz/regressions/<t>/` once fixed), libFuzzer's output in `fuzz/logs/<t>.log`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;
use torchlean_fuzz_targets::{Target, TARGETS};

/// libFuzzer's memory limit per target process; larger is a finding (an input that makes a
/// parser or checker allocate far beyond its own size).
const RSS_LIMIT_MB: u32 = 2048;
/// libFuzzer's limit per input, in seconds; slower is a finding (a hang).
const INPUT_TIMEOUT_S: u32 = 10;

#[derive(Args, Debug)]
pub struct FuzzArgs {
    /// Run only this target (repeatable; default: all of them)
    #[arg(long = "target")]
    targets: Vec<String>,
    /// Seconds of fuzzing per target
    #[arg(long, default_value_t = 60)]
    seconds: u64,
}

/// What one target's run came to.
#[derive(Debug)]
struct Outcome {
    name: &'static str,
    /// `stat::number_of_executed_units` (`None`: libFuzzer printed no final stats).
    executions: Option<u64>,
    /// `stat::average_exec_per_sec`.
    per_second: Option<u64>,
    /// `stat::peak_rss_mb`.
    peak_rss_mb: Option<u64>,
    /// The crash, leak, timeout or out-of-memory inputs this run wrote.
    findings: Vec<PathBuf>,
    /// libFuzzer's exit status was success.
    clean: bool,
}

pub fn run(args: &FuzzArgs) -> Result<bool, String> {
    let targets = selected(&args.targets)?;
    let fuzz_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/fuzz-targets/fuzz");
    ensure_cargo_fuzz()?;
    let mut outcomes = Vec::new();
    for t in targets {
        eprintln!("fuzzing {} for {} s", t.name, args.seconds);
        outcomes.push(run_target(&fuzz_dir, t, args.seconds)?);
    }
    println!(
        "{:<22} {:>14} {:>12} {:>10}  result",
        "target", "executions", "per second", "peak MB"
    );
    for o in &outcomes {
        println!(
            "{:<22} {:>14} {:>12} {:>10}  {}",
            o.name,
            show(o.executions),
            show(o.per_second),
            show(o.peak_rss_mb),
            result(o)
        );
    }
    Ok(outcomes.iter().all(|o| o.clean && o.findings.is_empty()))
}

fn selected(names: &[String]) -> Result<Vec<&'static Target>, String> {
    if names.is_empty() {
        return Ok(TARGETS.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            torchlean_fuzz_targets::target(n).ok_or_else(|| {
                let all: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
                format!("no fuzz target `{n}`; the targets are {}", all.join(", "))
            })
        })
        .collect()
}

fn show(n: Option<u64>) -> String {
    n.map_or_else(|| "?".to_string(), |n| n.to_string())
}

fn result(o: &Outcome) -> String {
    if o.findings.is_empty() {
        return if o.clean {
            "ok"
        } else {
            "libFuzzer failed (see its log)"
        }
        .to_string();
    }
    let paths: Vec<String> = o.findings.iter().map(|p| p.display().to_string()).collect();
    format!("FOUND {}", paths.join(" "))
}

/// Installs cargo-fuzz from crates.io when `cargo +nightly fuzz` is not there.
fn ensure_cargo_fuzz() -> Result<(), String> {
    crate::ensure_cargo_tool("cargo-fuzz", &["+nightly", "fuzz", "--version"])
}

fn run_target(fuzz_dir: &Path, t: &Target, seconds: u64) -> Result<Outcome, String> {
    let corpus = fuzz_dir.join("corpus").join(t.name);
    let artifacts = fuzz_dir.join("artifacts").join(t.name);
    let logs = fuzz_dir.join("logs");
    for dir in [&corpus, &artifacts, &logs] {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let before = files(&artifacts);
    let log_path = logs.join(format!("{}.log", t.name));
    let log =
        std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let status = Command::new("cargo")
        .current_dir(fuzz_dir)
        .args(["+nightly", "fuzz", "run", t.name])
        .arg(&corpus)
        .arg(fuzz_dir.join("seeds").join(t.name))
        .arg(fuzz_dir.join("regressions").join(t.name))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg(format!("-max_len={}", t.max_len))
        .arg(format!("-timeout={INPUT_TIMEOUT_S}"))
        .arg("-print_final_stats=1")
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .map_err(|e| format!("cannot run cargo +nightly fuzz: {e}"))?;
    let text =
        std::fs::read_to_string(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let findings = files(&artifacts)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    Ok(Outcome {
        name: t.name,
        executions: final_stat(&text, "stat::number_of_executed_units"),
        per_second: final_stat(&text, "stat::average_exec_per_sec"),
        peak_rss_mb: final_stat(&text, "stat::peak_rss_mb"),
        findings,
        clean: status.success(),
    })
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    out.sort();
    out
}

/// The value of one of libFuzzer's `-print_final_stats=1` lines (`stat::name: value`); the
/// last one when the log holds several.
fn final_stat(log: &str, name: &str) -> Option<u64> {
    log.lines()
        .filter_map(|l| l.trim().strip_prefix(name)?.trim().strip_prefix(':'))
        .filter_map(|v| v.trim().parse().ok())
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_stats_are_read_from_libfuzzers_log() {
        let log = "#1024\tpulse  cov: 10 ft: 12 corp: 3/40b exec/s: 512 rss: 40Mb\n\
                   Done 2048 runs in 4 second(s)\n\
                   stat::number_of_executed_units: 2048\n\
                   stat::average_exec_per_sec:     512\n\
                   stat::new_units_added:          3\n\
                   stat::peak_rss_mb:              41\n";
        assert_eq!(
            final_stat(log, "stat::number_of_executed_units"),
            Some(2048)
        );
        assert_eq!(final_stat(log, "stat::peak_rss_mb"), Some(41));
        assert_eq!(final_stat(log, "stat::slowest_unit_time_sec"), None);
    }

    #[test]
    fn unknown_targets_are_named() {
        let err = selected(&["nope".to_string()]).expect_err("no such target");
        assert!(
            err.contains("`nope`") && err.contains("graph_json"),
            "{err}"
        );
        assert_eq!(selected(&[]).map(|v| v.len()).ok(), Some(TARGETS.len()));
    }
}
