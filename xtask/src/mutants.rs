//! `cargo xtask mutants [--crate C]… [--file GLOB]… [--sample K/N | --missed | --untested]
//! [--oracle lib|own|checkers] [--timeout S] [--jobs N] [--report] [--keep]`: mutation testing
//! (cargo-mutants) of `spec`, `runtime`, `compiled` and `engine-cpu` with the project's own
//! checks as the oracle, and the score as a number (`--sample`: an estimate from one mutant
//! in N, with its interval; `--missed`: the misses on disk again, under a fuller oracle;
//! `--untested`: what has no result yet).
//!
//! The run happens in a scratch copy, `target/mutants/tree/` (the files git does not ignore, and the
//! registry dependencies already built in `target/mutation/` hard-linked into its own target
//! directory, so no dependency is rebuilt), with `cargo mutants --in-place` there: the working
//! tree is never mutated. Each crate's (or `--file` shard's) results land in
//! `target/mutants/out/<crate>/<shard>/mutants.out/`; the report reads every shard of a crate
//! (a mutant tested in several shards counts once, from the latest run), subtracts the
//! accepted equivalent mutants of `xtask/mutants-equivalent.json` (each with its reason) and
//! prints the score `caught / (viable − equivalent)`, the missed mutants and the run time.
//! `--report` prints it from the results on disk without running anything (partial runs too).
//! `--keep` writes the results that count to `xtask/mutants-kept/<crate>.json` (the `kept`
//! module), which later runs read beside the disk's: a long run is finished piece by piece.
//! Details and the figures: `docs/mutants.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::{Args, ValueEnum};
use serde_json::Value;

mod kept;

/// The cargo profile mutants are built with (`[profile.mutation]` in the workspace's
/// `Cargo.toml`: our crates unoptimised, for seconds-long incremental rebuilds).
const PROFILE: &str = "mutation";

/// A crate mutation testing covers, its oracle and its target score.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Crate {
    Spec,
    Runtime,
    Compiled,
    EngineCpu,
}

impl Crate {
    const ALL: [Crate; 4] = [
        Crate::Spec,
        Crate::Runtime,
        Crate::Compiled,
        Crate::EngineCpu,
    ];

    fn name(self) -> &'static str {
        match self {
            Crate::Spec => "spec",
            Crate::Runtime => "runtime",
            Crate::Compiled => "compiled",
            Crate::EngineCpu => "engine-cpu",
        }
    }

    fn package(self) -> String {
        format!("torchlean-{}", self.name())
    }

    /// The packages whose tests decide whether a mutant of this crate is caught, under
    /// `--oracle checkers`: the crate's own tests plus those of the crates that exist to check
    /// it (docs/mutants.md gives the reasons).
    fn checkers(self) -> &'static [&'static str] {
        match self {
            // the op meanings are checked by their finite-difference tests (spec) and by the
            // engine suite, which runs every op on the reference engine
            Crate::Spec => &["torchlean-spec", "torchlean-engine-suite"],
            // compiled's equivalence tests run every sweep against the reference reverse
            // semantics
            Crate::Runtime => &["torchlean-runtime", "torchlean-compiled"],
            // equiv checks every compiled path against every other on random graphs
            Crate::Compiled => &["torchlean-compiled", "torchlean-equiv"],
            // the engine suite runs inside engine-cpu's own tests (conformance.rs)
            Crate::EngineCpu => &["torchlean-engine-cpu"],
        }
    }

    /// The score this crate must reach (issue 14).
    fn target_percent(self) -> f64 {
        match self {
            Crate::Runtime | Crate::Compiled => 95.0,
            Crate::Spec | Crate::EngineCpu => 90.0,
        }
    }
}

/// Which tests are the oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Oracle {
    /// The mutated crate's unit tests only (`cargo test --lib`): the fastest build per mutant,
    /// and a lower bound on the `own` score (a mutant they catch, the full suite catches).
    Lib,
    /// The mutated crate's own tests (unit and integration): the cheapest build per mutant.
    Own,
    /// The crate's tests plus those of the crates that check it (`Crate::checkers`).
    Checkers,
}

#[derive(Args, Debug)]
pub struct MutantsArgs {
    /// Mutate this crate (repeatable; default: spec, runtime, compiled, engine-cpu)
    #[arg(long = "crate", value_enum)]
    crates: Vec<Crate>,
    /// Only mutants in files matching this glob (cargo-mutants' `--file`; repeatable): a shard
    #[arg(long = "file")]
    files: Vec<String>,
    /// Parallel builds (above 1, cargo-mutants copies the tree per job and rebuilds its
    /// dependencies there)
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// The tests that decide whether a mutant is caught
    #[arg(long, value_enum, default_value = "checkers")]
    oracle: Oracle,
    /// Only mutants whose name matches this regex (cargo-mutants' `--re`; repeatable)
    #[arg(long = "re")]
    regexes: Vec<String>,
    /// Print the score from the results on disk and kept; run nothing
    #[arg(long)]
    report: bool,
    /// Write each crate's results that count to `xtask/mutants-kept/<crate>.json`, to commit:
    /// later runs (on other machines too) start from them
    #[arg(long)]
    keep: bool,
    /// Test only mutant `i` with `i % N == K` (cargo-mutants' round-robin `--shard K/N`): a
    /// systematic sample of one mutant in N across every file, whose score estimates the
    /// crate's (the report gives its 95 % interval)
    #[arg(long, value_name = "K/N")]
    sample: Option<Sample>,
    /// Re-test only the mutants the results on disk count as missed (under this run's
    /// `--oracle`: test with a cheap oracle first, then its misses with the full one)
    #[arg(long, conflicts_with_all = ["files", "regexes", "sample"])]
    missed: bool,
    /// Test only the crate's mutants that have no result on disk yet (what an interrupted run
    /// or a code change left untested: the samples of code that moved in between)
    #[arg(long, conflicts_with_all = ["files", "regexes", "sample", "missed"])]
    untested: bool,
    /// The test timeout in seconds (default: cargo-mutants' own, from the baseline, at least
    /// `.cargo/mutants.toml`'s floor; the baseline runs only the mutated crate's tests, so a
    /// `checkers` oracle with slow tests needs more)
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// What runs each mutant's tests: `nextest` stops at the first failing test and kills the
    /// rest (its `mutants` profile in `.config/nextest.toml`), so a caught mutant costs its
    /// build and about one test; `cargo` runs every test of the failing binary. The verdicts
    /// are the same tests' either way.
    #[arg(long, value_enum, default_value = "nextest")]
    test_tool: TestTool,
}

/// `--test-tool`: the runner cargo-mutants calls for each mutant's tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TestTool {
    /// `cargo test`
    Cargo,
    /// `cargo nextest run` under the nextest profile `mutants`
    Nextest,
}

/// The nextest profile (`.config/nextest.toml`) mutants are tested under: fail fast, terminate
/// the running tests at once.
const NEXTEST_PROFILE: &str = "mutants";

/// `--sample K/N`: shard `K` of `N`, round-robin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    k: usize,
    n: usize,
}

impl std::str::FromStr for Sample {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected K/N with 0 <= K < N, e.g. 0/20");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (usize, usize) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if k >= n {
            return Err(bad());
        }
        Ok(Sample { k, n })
    }
}

impl Sample {
    /// The shard directory's prefix, `sample-K-of-N`, which the report reads back.
    fn label(self) -> String {
        format!("sample-{}-of-{}", self.k, self.n)
    }

    fn from_label(label: &str) -> Option<Sample> {
        let rest = label.strip_prefix("sample-")?;
        let (k, rest) = rest.split_once("-of-")?;
        let n = rest.split(|c: char| !c.is_ascii_digit()).next()?;
        format!("{k}/{n}").parse().ok()
    }
}

/// One accepted equivalent mutant of `xtask/mutants-equivalent.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Equivalent {
    /// The mutated file, relative to the workspace root.
    file: String,
    /// cargo-mutants' description without its `file:line:col: ` position
    /// (`replace -= with += in SparseGrads<V>::put`).
    mutant: String,
    /// `line:col`, only where the description alone names several mutants (the same operator
    /// twice in one function) and they are not all equivalent; the entry then goes stale when
    /// code above it moves, and the mutant shows as missed until the entry is updated.
    at: Option<String>,
    reason: String,
}

/// cargo-mutants' verdict on one mutant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Caught,
    Missed,
    Timeout,
    Unviable,
}

impl Verdict {
    const ALL: [Verdict; 4] = [
        Verdict::Caught,
        Verdict::Missed,
        Verdict::Timeout,
        Verdict::Unviable,
    ];

    /// The word the kept results use.
    fn word(self) -> &'static str {
        match self {
            Verdict::Caught => "caught",
            Verdict::Missed => "missed",
            Verdict::Timeout => "timeout",
            Verdict::Unviable => "unviable",
        }
    }

    fn from_word(word: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.word() == word)
    }
}

/// One mutant's outcome, read from `outcomes.json`.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    /// The full name, `file:line:col: description`.
    name: String,
    file: String,
    verdict: Verdict,
    /// The git blob id of `file` as the run found it (`None` for a run without `blobs.json`).
    blob: Option<String>,
    /// Build and test time.
    seconds: f64,
    /// The test command that judged it (its shard's).
    oracle: String,
}

impl Outcome {
    /// The description without the position (what `Equivalent::mutant` holds).
    fn description(&self) -> &str {
        description(&self.name)
    }
}

/// The name cargo-mutants prints, less its leading `file:line:col: `.
fn description(name: &str) -> &str {
    name.split_once(": ").map_or(name, |(_, d)| d)
}

/// One shard's results: its outcomes (each with its time and oracle: the mutants' test
/// command, `cargo test --package=… [--lib]`, the baseline's when no mutant's tests ran), its
/// start time, and whether it finished.
#[derive(Debug)]
struct Shard {
    outcomes: Vec<Outcome>,
    start: String,
    finished: bool,
    /// The `--sample` this shard ran, read from its directory's name (the kept results: every
    /// sample they hold).
    samples: Vec<Sample>,
}

/// A crate's figures after the equivalent mutants are subtracted.
#[derive(Debug, Default, PartialEq)]
struct Score {
    caught: usize,
    timeout: usize,
    missed: Vec<String>,
    equivalent: usize,
    unviable: usize,
    /// Entries listed as equivalent that the tests caught (the entry is wrong).
    caught_equivalents: Vec<String>,
}

impl Score {
    /// Caught plus missed plus timed out, less the accepted equivalents.
    fn viable(&self) -> usize {
        self.caught + self.timeout + self.missed.len()
    }

    /// Caught (a timeout counts as caught: the mutant made the tests hang) over viable.
    fn percent(&self) -> Option<f64> {
        let viable = self.viable();
        (viable > 0).then(|| 100.0 * (self.caught + self.timeout) as f64 / viable as f64)
    }

    /// The 95 % Wilson score interval, in percent, of the crate's score when these outcomes
    /// are a sample of its mutants.
    fn interval(&self) -> Option<(f64, f64)> {
        let n = self.viable() as f64;
        let p = self.percent()? / 100.0;
        let z = 1.959_964_f64;
        let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
        let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
        Some((100.0 * (centre - half), 100.0 * (centre + half)))
    }
}

pub fn run(args: &MutantsArgs) -> Result<bool, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("xtask has no parent directory")?
        .to_path_buf();
    let crates = if args.crates.is_empty() {
        Crate::ALL.to_vec()
    } else {
        args.crates.clone()
    };
    let equivalents = read_equivalents(&root.join("xtask/mutants-equivalent.json"))?;
    let out_root = root.join("target/mutants/out");
    if !args.report {
        ensure_cargo_mutants()?;
        if args.test_tool == TestTool::Nextest {
            crate::ensure_cargo_tool("cargo-nextest", &["nextest", "--version"])?;
        }
        let tree = root.join("target/mutants/tree");
        prepare_tree(&root, &tree)?;
        for &c in &crates {
            let dir = out_root.join(c.name());
            match selection(args, &root, c, &dir, &equivalents)? {
                Some((shard, regexes)) => run_crate(&tree, c, args, &regexes, &dir.join(shard))?,
                None => println!("{}: nothing to test", c.name()),
            }
        }
    }
    let mut all_met = true;
    for &c in &crates {
        let r = results(&root, c, &out_root.join(c.name()))?;
        all_met &= report_crate(c, &r, &equivalents);
        if args.keep {
            let path = kept::path(&root, c.name());
            let text = kept::render(&r.outcomes, &r.samples());
            std::fs::create_dir_all(path.parent().ok_or("a kept path has a parent")?)
                .and_then(|()| std::fs::write(&path, text))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let n = r.outcomes.iter().filter(|o| o.blob.is_some()).count();
            println!("  kept {n} results in {}", path.display());
        }
    }
    Ok(all_met)
}

/// A crate's results: the kept ones and every shard on disk, each mutant once from the
/// latest, less those that no longer describe the code.
#[derive(Debug)]
struct Results {
    shards: Vec<Shard>,
    /// The results that count.
    outcomes: Vec<Outcome>,
    /// Results for mutants the code no longer has, or whose file changed since.
    stale: usize,
    /// How many mutants the crate has now, if `cargo mutants --list` says.
    total: Option<usize>,
}

impl Results {
    /// Whether a mutant may be missing because a run was interrupted: some run stopped early
    /// and the results that count do not cover every mutant the crate has (a later run, such
    /// as `--untested`, may have finished what an interrupted one left).
    fn partial(&self) -> bool {
        self.shards.iter().any(|s| !s.finished) && !self.complete()
    }

    fn samples(&self) -> Vec<Sample> {
        let mut samples: Vec<Sample> = self.shards.iter().flat_map(|s| s.samples.clone()).collect();
        samples.sort_by_key(|s| (s.n, s.k));
        samples.dedup();
        samples
    }

    fn complete(&self) -> bool {
        self.total.is_some_and(|n| self.outcomes.len() >= n)
    }
}

fn results(root: &Path, c: Crate, dir: &Path) -> Result<Results, String> {
    let mut shards: Vec<Shard> = kept::read(&kept::path(root, c.name()))?
        .into_iter()
        .collect();
    shards.extend(read_shards(dir)?);
    let latest = latest_outcomes(&shards);
    let before = latest.len();
    let mut files: Vec<String> = latest.iter().map(|o| o.file.clone()).collect();
    files.sort();
    files.dedup();
    files.retain(|f| root.join(f).is_file());
    let current = current_mutants(root, c);
    let outcomes = still_current(latest, current.as_deref(), &kept::blobs(root, &files)?);
    Ok(Results {
        stale: before - outcomes.len(),
        shards,
        outcomes,
        total: current.as_ref().map(Vec::len),
    })
}

/// The outcomes that still describe the code: their mutant is among `names` (when known; a
/// name carries its line, so code that moved renames it) and their file has the blob id it had
/// when they were tested (`now`; when the run recorded it).
fn still_current(
    mut outcomes: Vec<Outcome>,
    names: Option<&[String]>,
    now: &BTreeMap<String, String>,
) -> Vec<Outcome> {
    if let Some(list) = names {
        let names: std::collections::BTreeSet<&str> = list.iter().map(String::as_str).collect();
        outcomes.retain(|o| names.contains(o.name.as_str()));
    }
    outcomes.retain(|o| o.blob.as_ref().is_none_or(|b| now.get(&o.file) == Some(b)));
    outcomes
}

/// What this run tests of crate `c`: its shard's directory name under `dir` and the `--re`
/// filters; `None` when `--missed` or `--untested` finds nothing to do.
fn selection(
    args: &MutantsArgs,
    root: &Path,
    c: Crate,
    dir: &Path,
    equivalents: &[Equivalent],
) -> Result<Option<(String, Vec<String>)>, String> {
    let by_name = |names: Vec<&String>, prefix: &str| {
        let regexes = names.iter().map(|m| format!("^{}$", escape_regex(m)));
        (!names.is_empty()).then(|| (next_label(dir, prefix), regexes.collect()))
    };
    if args.missed {
        let missed = score(&results(root, c, dir)?.outcomes, equivalents).missed;
        return Ok(by_name(missed.iter().collect(), "missed"));
    }
    if args.untested {
        let done = results(root, c, dir)?.outcomes;
        let list = current_mutants(root, c)
            .ok_or_else(|| format!("cannot list {}'s mutants", c.package()))?;
        return Ok(by_name(untested(&list, &done), "untested"));
    }
    let mut shard = shard_label(&[args.files.as_slice(), args.regexes.as_slice()].concat());
    if let Some(sample) = args.sample {
        shard = format!("{}-{shard}", sample.label());
    }
    Ok(Some((shard, args.regexes.clone())))
}

/// Prints crate `c`'s score from its results; whether they are whole and on target.
fn report_crate(c: Crate, r: &Results, equivalents: &[Equivalent]) -> bool {
    if r.shards.is_empty() {
        println!(
            "{}: no results (run `cargo xtask mutants --crate {0}`)",
            c.name()
        );
        return false;
    }
    if r.stale > 0 {
        println!(
            "{}: {} results are for mutants the code no longer has, or whose file changed since \
             (ignored)",
            c.name(),
            r.stale
        );
    }
    let score = score(&r.outcomes, equivalents);
    let seconds: f64 = r.outcomes.iter().map(|o| o.seconds).sum();
    print_score(c, &score, seconds, r.partial(), &r.outcomes);
    println!(
        "  tested {} of {} mutants",
        r.outcomes.len(),
        r.total.map_or_else(|| "?".to_string(), |n| n.to_string())
    );
    let samples = r.samples();
    if let (false, false, Some((lo, hi))) = (r.complete(), samples.is_empty(), score.interval()) {
        let list: Vec<String> = samples.iter().map(|s| format!("{}/{}", s.k, s.n)).collect();
        println!(
            "  a sample (round-robin shard {}): the crate's score is in \
             [{lo:.1} %, {hi:.1} %] with 95 % confidence (Wilson)",
            list.join(", ")
        );
    }
    let mut oracles: Vec<&str> = r.outcomes.iter().map(|o| o.oracle.as_str()).collect();
    oracles.sort();
    oracles.dedup();
    println!("  oracle: {}", oracles.join("; "));
    score.percent().is_some_and(|p| p >= c.target_percent())
        && score.caught_equivalents.is_empty()
        && r.complete()
}

/// The names of the mutants cargo-mutants makes of the crate now (`cargo mutants --list`), if
/// it can say.
fn current_mutants(root: &Path, c: Crate) -> Option<Vec<String>> {
    let out = Command::new("cargo")
        .current_dir(root)
        .args(["mutants", "--list", "--package"])
        .arg(c.package())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    out.status.success().then(|| {
        text.lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    })
}

/// The mutants of `list` without a result in `done`, in `list`'s order.
fn untested<'a>(list: &'a [String], done: &[Outcome]) -> Vec<&'a String> {
    let done: std::collections::BTreeSet<&str> = done.iter().map(|o| o.name.as_str()).collect();
    list.iter().filter(|m| !done.contains(m.as_str())).collect()
}

/// `name` with every regex metacharacter escaped (cargo-mutants' `--re` is a Rust regex).
fn escape_regex(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `<prefix>-1`, `<prefix>-2`, …: the first not yet under `dir` (each re-run keeps its own
/// results, so an earlier re-run's verdicts on mutants a later one skips survive).
fn next_label(dir: &Path, prefix: &str) -> String {
    (1..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|l| !dir.join(l).exists())
        .expect("some label is free")
}

/// A directory name for a `--file` shard (`all` without one).
fn shard_label(files: &[String]) -> String {
    if files.is_empty() {
        return "all".to_string();
    }
    let joined = files.join("+");
    let label: String = joined
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if label.len() <= MAX_LABEL {
        return label;
    }
    // a directory name must stay under the file system's limit (255 bytes on most): the
    // label's start (ASCII, so any cut is a char boundary), `-`, and 16 hex digits of a hash
    // of the whole list, so that another list gets another shard
    let hash = torchlean_engine_cuda::emu::fnv1a(joined.as_bytes());
    format!("{}-{hash:016x}", &label[..MAX_LABEL - 1 - 16])
}

/// The longest shard label (a directory name under `target/mutants/out/<crate>/`).
const MAX_LABEL: usize = 120;

/// Installs cargo-mutants from crates.io when `cargo mutants` is not there.
fn ensure_cargo_mutants() -> Result<(), String> {
    crate::ensure_cargo_tool("cargo-mutants", &["mutants", "--version"])
}

/// Refreshes the scratch copy: every file git does not ignore (`git ls-files --cached
/// --others --exclude-standard`: uncommitted edits too), copied over, and the
/// registry dependencies built in `target/mutation/` hard-linked into the copy's target (copied
/// where linking fails), so the copy builds only the workspace's own crates.
fn prepare_tree(root: &Path, tree: &Path) -> Result<(), String> {
    let listing = Command::new("git")
        .current_dir(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output()
        .map_err(|e| format!("cannot run git ls-files: {e}"))?;
    if !listing.status.success() {
        return Err(format!("git ls-files failed ({})", listing.status));
    }
    for rel in listing.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        let rel = std::str::from_utf8(rel).map_err(|e| format!("a tracked path: {e}"))?;
        let (from, to) = (root.join(rel), tree.join(rel));
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        if from.is_file() {
            std::fs::copy(&from, &to).map_err(|e| format!("{}: {e}", to.display()))?;
        }
    }
    let lock =
        std::fs::read_to_string(root.join("Cargo.lock")).map_err(|e| format!("Cargo.lock: {e}"))?;
    let registry = registry_crates(&lock);
    let (built, copy) = (
        root.join("target").join(PROFILE),
        tree.join("target").join(PROFILE),
    );
    for sub in ["deps", "build", ".fingerprint"] {
        link_registry_artifacts(&built.join(sub), &copy.join(sub), &registry)?;
    }
    Ok(())
}

/// The crate names (`-` as `_`) of every registry package in a `Cargo.lock`.
fn registry_crates(lock: &str) -> Vec<String> {
    let mut names: Vec<String> = lock
        .split("[[package]]")
        .filter(|p| p.contains("\nsource = \"registry+"))
        .filter_map(|p| {
            let rest = p.split_once("name = \"")?.1;
            Some(rest.split_once('"')?.0.replace('-', "_"))
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The crate an artifact of `target/<profile>/{deps,build,.fingerprint}` belongs to:
/// `libfoo_bar-<16 hex>.rlib` and `foo-bar-<16 hex>` are `foo_bar`.
fn artifact_crate(file: &str) -> Option<String> {
    let (stem, rest) = file.rsplit_once('-')?;
    let hash = rest.split('.').next()?;
    if hash.len() != 16 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(stem.replace('-', "_"))
}

fn is_registry(file: &str, registry: &[String]) -> bool {
    let Some(name) = artifact_crate(file) else {
        return false;
    };
    let lib = name.strip_prefix("lib");
    registry.binary_search(&name).is_ok()
        || lib.is_some_and(|n| registry.binary_search(&n.to_string()).is_ok())
}

/// Hard-links (or copies) the registry crates' entries of `from` into `to`, recursively for
/// directories; entries already there are kept.
fn link_registry_artifacts(from: &Path, to: &Path, registry: &[String]) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(()); // nothing built yet: the copy builds its dependencies itself
    };
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_registry(&name, registry) {
            link_tree(&entry.path(), &to.join(&name))?;
        }
    }
    Ok(())
}

fn link_tree(from: &Path, to: &Path) -> Result<(), String> {
    if to.exists() {
        return Ok(());
    }
    if from.is_dir() {
        std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
        let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
        for entry in entries.flatten() {
            link_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    // only the large compiled outputs are shared; the fingerprints and dep-info files, which
    // cargo rewrites in place, are copies
    let large = from
        .extension()
        .is_some_and(|x| ["rlib", "rmeta", "so", "a"].contains(&x.to_string_lossy().as_ref()));
    if large && std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    copy_with_mtime(from, to).map_err(|e| format!("{}: {e}", to.display()))
}

/// Copies a file keeping its modification time: cargo compares the fingerprints' and outputs'
/// times, and a copy stamped now would make every dependency look stale.
fn copy_with_mtime(from: &Path, to: &Path) -> std::io::Result<()> {
    let modified = std::fs::metadata(from)?.modified()?;
    std::fs::copy(from, to)?;
    std::fs::File::options()
        .write(true)
        .open(to)?
        .set_modified(modified)
}

/// Runs cargo-mutants on one crate in the scratch tree, results into `out`.
fn run_crate(
    tree: &Path,
    c: Crate,
    args: &MutantsArgs,
    regexes: &[String],
    out: &Path,
) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    // the files as this run finds them, so its results can be kept while they stay the same
    let files = kept::rust_files(tree, &format!("crates/{}", c.name()))?;
    let ids =
        serde_json::to_string_pretty(&kept::blobs(tree, &files)?).map_err(|e| e.to_string())?;
    let blobs = out.join(kept::BLOBS);
    std::fs::write(&blobs, ids).map_err(|e| format!("{}: {e}", blobs.display()))?;
    let mut cmd = Command::new("cargo");
    cmd.current_dir(tree)
        .arg("mutants")
        .arg("--package")
        .arg(c.package());
    let tests: Vec<String> = match args.oracle {
        Oracle::Lib | Oracle::Own => vec![c.package()],
        Oracle::Checkers => c.checkers().iter().map(|p| p.to_string()).collect(),
    };
    for t in &tests {
        cmd.arg("--test-package").arg(t);
    }
    for f in &args.files {
        cmd.arg("--file").arg(f);
    }
    for r in regexes {
        cmd.arg("--re").arg(r);
    }
    if let Some(t) = args.timeout {
        cmd.arg("--timeout").arg(t.to_string());
    }
    if args.jobs > 1 {
        cmd.arg("--jobs").arg(args.jobs.to_string());
    } else {
        cmd.arg("--in-place");
    }
    if let Some(sample) = args.sample {
        cmd.arg("--shard")
            .arg(format!("{}/{}", sample.k, sample.n))
            .args(["--sharding", "round-robin"]);
    }
    cmd.args(["--profile", PROFILE]);
    if args.test_tool == TestTool::Nextest {
        cmd.args(["--test-tool", "nextest"])
            .env("NEXTEST_PROFILE", NEXTEST_PROFILE);
    }
    cmd.arg("--output").arg(out);
    if args.oracle == Oracle::Lib {
        cmd.args(["--", "--lib"]);
    }
    eprintln!(
        "mutating {} (tests of {}) in {}",
        c.package(),
        tests.join(", "),
        tree.display()
    );
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run cargo mutants: {e}"))?;
    // cargo-mutants exits 2 when mutants were missed, 3 on timeouts: results, not failures
    match status.code() {
        Some(0..=3) => Ok(()),
        _ => Err(format!(
            "cargo mutants on {} failed ({status})",
            c.package()
        )),
    }
}

/// Every shard's results under `dir` (`<shard>/mutants.out/outcomes.json`).
fn read_shards(dir: &Path) -> Result<Vec<Shard>, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut shards = Vec::new();
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        let file = p.join("mutants.out/outcomes.json");
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let mut shard = parse_outcomes(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        shard.samples = p
            .file_name()
            .and_then(|n| Sample::from_label(&n.to_string_lossy()))
            .into_iter()
            .collect();
        let blobs = p.join(kept::BLOBS);
        if let Ok(text) = std::fs::read_to_string(&blobs) {
            let ids: BTreeMap<String, String> =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", blobs.display()))?;
            for o in &mut shard.outcomes {
                o.blob = ids.get(&o.file).cloned();
            }
        }
        shards.push(shard);
    }
    Ok(shards)
}

/// Reads one `outcomes.json` (cargo-mutants 25 and later).
fn parse_outcomes(text: &str) -> Result<Shard, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let list = doc["outcomes"].as_array().ok_or("no `outcomes` array")?;
    let mut outcomes = Vec::new();
    let mut oracle = String::new();
    for o in list {
        let time = o["phase_results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["duration"].as_f64())
            .sum::<f64>();
        // the mutants' own test command: cargo-mutants runs the baseline's tests in the
        // mutated package only, whatever `--test-package` says
        let command = test_command(o);
        let Some(m) = o["scenario"].get("Mutant") else {
            if oracle.is_empty() {
                oracle = command; // the baseline, until a mutant's tests ran
            }
            continue;
        };
        if !command.is_empty() {
            oracle = command;
        }
        let verdict = match o["summary"].as_str() {
            Some("CaughtMutant") => Verdict::Caught,
            Some("MissedMutant") => Verdict::Missed,
            Some("Timeout") => Verdict::Timeout,
            Some("Unviable") => Verdict::Unviable,
            other => return Err(format!("unknown outcome summary {other:?}")),
        };
        outcomes.push(Outcome {
            name: m["name"]
                .as_str()
                .ok_or("a mutant without a name")?
                .to_string(),
            file: m["file"]
                .as_str()
                .ok_or("a mutant without a file")?
                .to_string(),
            verdict,
            blob: None,
            seconds: time,
            oracle: String::new(), // the shard's, below
        });
    }
    for o in &mut outcomes {
        o.oracle.clone_from(&oracle);
    }
    Ok(Shard {
        outcomes,
        start: doc["start_time"].as_str().unwrap_or_default().to_string(),
        finished: !doc["end_time"].is_null(),
        samples: Vec::new(),
    })
}

/// A scenario's test phase as `cargo test <args>`, without the cargo path and `--verbose`.
fn test_command(outcome: &Value) -> String {
    let phases = outcome["phase_results"].as_array().into_iter().flatten();
    let Some(test) = phases.into_iter().find(|p| p["phase"] == "Test") else {
        return String::new();
    };
    let args = test["argv"].as_array().into_iter().flatten().skip(1);
    let args: Vec<&str> = args
        .filter_map(Value::as_str)
        .filter(|a| *a != "--verbose")
        .collect();
    format!("cargo {}", args.join(" "))
}

/// Each mutant once, from the latest shard that tested it.
fn latest_outcomes(shards: &[Shard]) -> Vec<Outcome> {
    let mut order: Vec<&Shard> = shards.iter().collect();
    order.sort_by(|a, b| a.start.cmp(&b.start)); // RFC 3339 times sort as strings
    let mut by_name: BTreeMap<&str, &Outcome> = BTreeMap::new();
    for s in order {
        for o in &s.outcomes {
            by_name.insert(&o.name, o);
        }
    }
    by_name.into_values().cloned().collect()
}

fn is_equivalent(o: &Outcome, equivalents: &[Equivalent]) -> bool {
    equivalents.iter().any(|e| {
        e.file == o.file
            && e.mutant == o.description()
            && e.at
                .as_ref()
                .is_none_or(|at| Some(at.as_str()) == position(&o.name))
    })
}

/// The `line:col` of cargo-mutants' `file:line:col: description`.
fn position(name: &str) -> Option<&str> {
    let (located, _) = name.split_once(": ")?;
    let mut parts = located.rsplitn(3, ':');
    let (col, line) = (parts.next()?, parts.next()?);
    let start = located.len() - col.len() - line.len() - 1;
    Some(&located[start..])
}

/// The figures of a crate's outcomes, the accepted equivalents subtracted.
fn score(outcomes: &[Outcome], equivalents: &[Equivalent]) -> Score {
    let mut s = Score::default();
    for o in outcomes {
        let equivalent = is_equivalent(o, equivalents);
        match o.verdict {
            Verdict::Unviable => s.unviable += 1,
            Verdict::Missed if equivalent => s.equivalent += 1,
            Verdict::Missed => s.missed.push(o.name.clone()),
            Verdict::Caught | Verdict::Timeout if equivalent => {
                s.caught_equivalents.push(o.name.clone());
                if o.verdict == Verdict::Caught {
                    s.caught += 1;
                } else {
                    s.timeout += 1;
                }
            }
            Verdict::Caught => s.caught += 1,
            Verdict::Timeout => s.timeout += 1,
        }
    }
    s
}

fn print_score(c: Crate, s: &Score, seconds: f64, partial: bool, outcomes: &[Outcome]) {
    let mut files: Vec<&str> = outcomes.iter().map(|o| o.file.as_str()).collect();
    files.sort();
    files.dedup();
    let percent = s
        .percent()
        .map_or_else(|| "n/a".to_string(), |p| format!("{p:.1} %"));
    println!(
        "{}: {percent} (caught {} of {} viable; missed {}, timeout {}, equivalent {}, \
         unviable {}) in {:.0} min{}, target {} %",
        c.name(),
        s.caught + s.timeout,
        s.viable(),
        s.missed.len(),
        s.timeout,
        s.equivalent,
        s.unviable,
        seconds / 60.0,
        if partial {
            " (PARTIAL: a run was interrupted)"
        } else {
            ""
        },
        c.target_percent()
    );
    println!("  files covered: {}", files.join(" "));
    for m in &s.missed {
        println!("  MISSED {m}");
    }
    for m in &s.caught_equivalents {
        println!("  CAUGHT but listed as equivalent (remove the entry): {m}");
    }
}

/// Reads the accepted equivalent mutants: a JSON array of `{file, mutant, reason}`, each
/// reason non-empty.
fn read_equivalents(path: &Path) -> Result<Vec<Equivalent>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_equivalents(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn parse_equivalents(text: &str) -> Result<Vec<Equivalent>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let list = doc
        .as_array()
        .ok_or("expected an array of {file, mutant, reason}")?;
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            let field = |k: &str| {
                e[k].as_str()
                    .filter(|v| !v.trim().is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| format!("entry {i}: field `{k}` is missing or empty"))
            };
            Ok(Equivalent {
                file: field("file")?,
                mutant: field("mutant")?,
                at: e["at"].as_str().map(str::to_string),
                reason: field("reason")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(name: &str, verdict: Verdict) -> Outcome {
        Outcome {
            name: name.to_string(),
            file: name.split(':').next().unwrap_or_default().to_string(),
            verdict,
            blob: None,
            seconds: 0.0,
            oracle: String::new(),
        }
    }

    const PUT: &str =
        "crates/runtime/src/sweep.rs:504:36: replace -= with += in SparseGrads<V>::put";

    #[test]
    fn equivalents_are_subtracted_from_the_viable_mutants() {
        let outcomes = vec![
            outcome("a.rs:1:1: replace f -> bool with true", Verdict::Caught),
            outcome("a.rs:2:1: replace g -> bool with true", Verdict::Caught),
            outcome("a.rs:3:1: replace h -> bool with true", Verdict::Timeout),
            outcome("a.rs:4:1: replace k -> bool with true", Verdict::Missed),
            outcome("a.rs:5:1: replace m -> u8 with 0", Verdict::Unviable),
            outcome(PUT, Verdict::Missed),
        ];
        let eq = vec![Equivalent {
            file: "crates/runtime/src/sweep.rs".into(),
            mutant: "replace -= with += in SparseGrads<V>::put".into(),
            at: None,
            reason: "unreachable".into(),
        }];
        let s = score(&outcomes, &eq);
        assert_eq!(
            (s.caught, s.timeout, s.equivalent, s.unviable),
            (2, 1, 1, 1)
        );
        assert_eq!(
            s.missed,
            vec!["a.rs:4:1: replace k -> bool with true".to_string()]
        );
        assert_eq!(s.viable(), 4);
        assert_eq!(s.percent(), Some(75.0));
        assert!(s.caught_equivalents.is_empty());
    }

    #[test]
    fn an_equivalent_entry_the_tests_catch_is_reported() {
        let eq = vec![Equivalent {
            file: "a.rs".into(),
            mutant: "replace f -> bool with true".into(),
            at: None,
            reason: "thought equivalent".into(),
        }];
        let s = score(
            &[outcome(
                "a.rs:9:5: replace f -> bool with true",
                Verdict::Caught,
            )],
            &eq,
        );
        assert_eq!((s.caught, s.equivalent), (1, 0));
        assert_eq!(s.caught_equivalents.len(), 1);
    }

    #[test]
    fn an_entry_with_a_position_covers_that_mutant_only() {
        let entry = r#"[{"file": "l.rs", "mutant": "replace >= with < in permute",
                         "at": "213:60", "reason": "a speed switch"}]"#;
        let eq = parse_equivalents(entry).unwrap();
        assert_eq!(
            position("l.rs:213:60: replace >= with < in permute"),
            Some("213:60")
        );
        let s = score(
            &[
                outcome("l.rs:213:60: replace >= with < in permute", Verdict::Missed),
                outcome("l.rs:213:12: replace >= with < in permute", Verdict::Missed),
            ],
            &eq,
        );
        assert_eq!(s.equivalent, 1);
        assert_eq!(
            s.missed,
            vec!["l.rs:213:12: replace >= with < in permute".to_string()]
        );
    }

    #[test]
    fn the_position_is_not_part_of_an_equivalents_key() {
        assert_eq!(
            description(PUT),
            "replace -= with += in SparseGrads<V>::put"
        );
        // same description in another file: not the listed mutant
        let other = outcome(
            "other.rs:504:36: replace -= with += in SparseGrads<V>::put",
            Verdict::Missed,
        );
        let eq = parse_equivalents(
            r#"[{"file": "crates/runtime/src/sweep.rs",
                 "mutant": "replace -= with += in SparseGrads<V>::put",
                 "reason": "unreachable branch"}]"#,
        )
        .expect("a valid list");
        assert!(!is_equivalent(&other, &eq));
        assert!(is_equivalent(&outcome(PUT, Verdict::Missed), &eq));
    }

    #[test]
    fn the_nextest_profile_mutants_are_tested_under_exists_and_fails_fast() {
        // `--test-tool nextest` names the profile by NEXTEST_PROFILE: without it nextest
        // refuses to run (the baseline fails), and without `terminate` a caught mutant waits
        // for the slow tests already running
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.config/nextest.toml");
        let text = std::fs::read_to_string(&path).expect("the workspace's nextest config");
        assert!(
            text.contains(&format!("[profile.{NEXTEST_PROFILE}]")),
            "{}",
            path.display()
        );
        assert!(text.contains(r#"fail-fast = { max-fail = 1, terminate = "immediate" }"#));
    }

    #[test]
    fn an_equivalent_without_a_reason_is_refused() {
        let err = parse_equivalents(
            r#"[{"file": "a.rs", "mutant": "replace f with ()", "reason": " "}]"#,
        )
        .expect_err("an empty reason");
        assert!(err.contains("entry 0") && err.contains("`reason`"), "{err}");
        assert!(parse_equivalents("{}").is_err());
    }

    #[test]
    fn outcomes_json_is_read_and_the_latest_shard_wins() {
        let first = r#"{"outcomes": [
            {"scenario": "Baseline", "summary": "Success",
             "phase_results": [{"phase": "Build", "duration": 10.0},
                               {"phase": "Test", "duration": 0.0, "argv": ["/x/cargo", "test",
                                "--verbose", "--package=torchlean-runtime@0.1.0", "--lib"]}]},
            {"scenario": {"Mutant": {"name": "a.rs:1:1: replace f with ()", "file": "a.rs"}},
             "summary": "MissedMutant", "phase_results": [{"duration": 30.0}, {"duration": 2.0}]}
        ], "start_time": "2026-12-01T20:00:00Z", "end_time": null}"#;
        let second = r#"{"outcomes": [
            {"scenario": {"Mutant": {"name": "a.rs:1:1: replace f with ()", "file": "a.rs"}},
             "summary": "CaughtMutant", "phase_results": [{"duration": 20.0}]},
            {"scenario": {"Mutant": {"name": "a.rs:2:1: replace g with ()", "file": "a.rs"}},
             "summary": "Unviable", "phase_results": [{"duration": 5.0}]}
        ], "start_time": "2026-12-01T21:00:00Z", "end_time": "2026-12-01T21:01:00Z"}"#;
        // the baseline tests the mutated package only; the mutants' command names the oracle
        let checkers = r#"{"outcomes": [
            {"scenario": "Baseline", "summary": "Success", "phase_results": [{"phase": "Test",
             "duration": 1.0, "argv": ["cargo", "test", "--package=torchlean-runtime@0.1.0"]}]},
            {"scenario": {"Mutant": {"name": "a.rs:3:1: replace h with ()", "file": "a.rs"}},
             "summary": "CaughtMutant", "phase_results": [{"phase": "Test", "duration": 1.0,
             "argv": ["cargo", "test", "--package=torchlean-compiled@0.1.0",
                      "--package=torchlean-runtime@0.1.0"]}]}
        ], "start_time": "2026-12-01T22:00:00Z", "end_time": null}"#;
        assert_eq!(
            parse_outcomes(checkers).expect("checkers").outcomes[0].oracle,
            "cargo test --package=torchlean-compiled@0.1.0 --package=torchlean-runtime@0.1.0"
        );
        let (a, b) = (
            parse_outcomes(first).expect("first"),
            parse_outcomes(second).expect("second"),
        );
        // a mutant's time is its own phases' (the baseline's 10 s are nobody's)
        assert_eq!(
            (a.outcomes[0].seconds, a.finished, a.outcomes.len()),
            (32.0, false, 1)
        );
        assert_eq!(
            a.outcomes[0].oracle,
            "cargo test --package=torchlean-runtime@0.1.0 --lib"
        );
        let times: Vec<f64> = b.outcomes.iter().map(|o| o.seconds).collect();
        assert_eq!((times, b.finished), (vec![20.0, 5.0], true));
        let latest = latest_outcomes(&[b, a]);
        assert_eq!(
            latest.iter().map(|o| o.verdict).collect::<Vec<_>>(),
            vec![Verdict::Caught, Verdict::Unviable]
        );
        assert!(parse_outcomes(r#"{"outcomes": [{"scenario": {"Mutant": {"name": "x", "file": "x"}}, "summary": "Odd"}]}"#).is_err());
    }

    #[test]
    fn registry_artifacts_are_told_from_the_workspaces_own() {
        let lock = "[[package]]\nname = \"serde-json\"\nversion = \"1\"\nsource = \"registry+https://x\"\n\n\
                    [[package]]\nname = \"libm\"\nversion = \"0.2\"\nsource = \"registry+https://x\"\n\n\
                    [[package]]\nname = \"torchlean-spec\"\nversion = \"0.1.0\"\n";
        let reg = registry_crates(lock);
        assert_eq!(reg, vec!["libm".to_string(), "serde_json".to_string()]);
        assert!(is_registry("libserde_json-0123456789abcdef.rlib", &reg));
        assert!(is_registry("serde-json-0123456789abcdef", &reg));
        assert!(is_registry("liblibm-0123456789abcdef.rmeta", &reg));
        assert!(!is_registry(
            "libtorchlean_spec-0123456789abcdef.rlib",
            &reg
        ));
        assert!(!is_registry("sweeps-0123456789abcdef", &reg));
        assert!(!is_registry("libserde_json.rlib", &reg));
    }

    #[test]
    fn a_sample_is_parsed_named_and_read_back_from_its_directory() {
        let s: Sample = "3/20".parse().unwrap();
        assert_eq!(s, Sample { k: 3, n: 20 });
        assert_eq!(s.label(), "sample-3-of-20");
        assert_eq!(Sample::from_label("sample-3-of-20-all"), Some(s));
        assert_eq!(Sample::from_label("all"), None);
        for bad in ["20/20", "3", "a/2", "1/0"] {
            assert!(bad.parse::<Sample>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn the_interval_of_a_sample_brackets_its_score() {
        let s = Score {
            caught: 45,
            missed: vec!["m".into(); 5],
            ..Score::default()
        };
        let (lo, hi) = s.interval().unwrap();
        // Wilson's interval for 45 of 50 at 95 %: [78.6 %, 95.7 %] (by hand from the formula)
        assert!(
            (lo - 78.64).abs() < 0.05 && (hi - 95.65).abs() < 0.05,
            "{lo} {hi}"
        );
        assert_eq!(Score::default().interval(), None);
    }

    #[test]
    fn a_missed_mutant_is_re_tested_by_its_whole_name_only() {
        let name = "crates/runtime/src/tape.rs:434:9: replace <impl fmt::Debug for \
                    ContributionIter<'_, V>>::fmt -> fmt::Result with Ok(Default::default())";
        assert_eq!(
            escape_regex("a.rs:1:2: replace * with + in f(x)"),
            "a\\.rs:1:2: replace \\* with \\+ in f\\(x\\)"
        );
        let escaped = escape_regex(name);
        assert!(
            escaped.contains("Ok\\(Default::default\\(\\)\\)"),
            "{escaped}"
        );
        let dir = std::env::temp_dir().join(format!("xtask-labels-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("missed-1")).unwrap();
        assert_eq!(next_label(&dir, "missed"), "missed-2");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_interrupted_run_is_partial_until_every_mutant_has_a_result() {
        let shard = |names: &[&str], finished| Shard {
            outcomes: names.iter().map(|n| outcome(n, Verdict::Caught)).collect(),
            start: String::new(),
            finished,
            samples: Vec::new(),
        };
        let results = |shards: Vec<Shard>, total| Results {
            outcomes: latest_outcomes(&shards),
            shards,
            stale: 0,
            total,
        };
        let cut = || shard(&["a.rs:1:1: x"], false);
        assert!(results(vec![cut()], Some(2)).partial(), "one of two tested");
        assert!(results(vec![cut()], None).partial(), "the total unknown");
        let rest = shard(&["a.rs:2:1: y"], true);
        assert!(
            !results(vec![cut(), rest], Some(2)).partial(),
            "a later run finished the rest"
        );
        let whole = shard(&["a.rs:1:1: x", "a.rs:2:1: y"], true);
        assert!(!results(vec![whole], Some(3)).partial(), "none interrupted");
    }

    #[test]
    fn untested_mutants_are_those_without_a_result() {
        let list = vec!["a.rs:1:1: x".to_string(), "a.rs:2:1: y".to_string()];
        let done = [
            outcome("a.rs:1:1: x", Verdict::Caught),
            outcome("a.rs:9:1: gone", Verdict::Missed),
        ];
        assert_eq!(untested(&list, &done), vec![&list[1]]);
    }

    #[test]
    fn a_result_counts_while_its_mutant_and_its_file_are_unchanged() {
        let tested = |name: &str, verdict, blob: Option<&str>| Outcome {
            blob: blob.map(str::to_string),
            ..outcome(name, verdict)
        };
        let kept = Shard {
            outcomes: vec![
                tested("a.rs:1:1: f", Verdict::Caught, Some("old")),
                tested("b.rs:1:1: g", Verdict::Caught, Some("b1")),
                tested("b.rs:2:1: h", Verdict::Missed, Some("b1")),
                tested("b.rs:3:1: moved", Verdict::Caught, Some("b1")),
            ],
            start: String::new(),
            finished: true,
            samples: Vec::new(),
        };
        let disk = Shard {
            outcomes: vec![
                tested("b.rs:2:1: h", Verdict::Caught, Some("b1")),
                tested("c.rs:1:1: k", Verdict::Caught, None),
            ],
            start: "2026-12-02T08:00:00Z".into(),
            finished: true,
            samples: Vec::new(),
        };
        let names: Vec<String> = ["a.rs:1:1: f", "b.rs:1:1: g", "b.rs:2:1: h", "c.rs:1:1: k"]
            .map(String::from)
            .to_vec();
        let now: BTreeMap<String, String> = [("a.rs", "new"), ("b.rs", "b1"), ("c.rs", "c1")]
            .map(|(f, b)| (f.to_string(), b.to_string()))
            .into();
        let current = still_current(latest_outcomes(&[disk, kept]), Some(&names), &now);
        // a.rs changed since; b.rs:3 is no longer a mutant; the run on disk re-tested b.rs:2;
        // c.rs's run recorded no blob ids, so only its names are checked
        let got: Vec<(&str, Verdict)> = current
            .iter()
            .map(|o| (o.name.as_str(), o.verdict))
            .collect();
        assert_eq!(
            got,
            vec![
                ("b.rs:1:1: g", Verdict::Caught),
                ("b.rs:2:1: h", Verdict::Caught),
                ("c.rs:1:1: k", Verdict::Caught)
            ]
        );
    }

    #[test]
    fn shards_are_named_by_their_globs() {
        assert_eq!(shard_label(&[]), "all");
        assert_eq!(
            shard_label(&["crates/runtime/src/sweep.rs".into(), "*.rs".into()]),
            "crates_runtime_src_sweep.rs+_.rs"
        );
        // a long list of regexes (one per mutant) is cut to a name a file system takes, and
        // still tells lists apart
        let long = |last: &str| -> Vec<String> {
            let mut v: Vec<String> = (0..30)
                .map(|i| format!("^crates/engine-cpu/src/kernels/conv\\.rs:{i}:1: replace$"))
                .collect();
            v.push(last.into());
            v
        };
        let (a, b) = (shard_label(&long("x")), shard_label(&long("y")));
        assert!(a.len() <= MAX_LABEL, "{} bytes", a.len());
        assert!(a.starts_with("_crates_engine-cpu_src_kernels_conv_.rs_0_1"));
        assert_ne!(a, b);
        assert_eq!(a, shard_label(&long("x")), "the same list, the same shard");
    }
}
