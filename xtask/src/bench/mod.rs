//! The benchmark harness (SPEC 5): median of ≥ 7 timed runs after warm-up, one JSON line per
//! case, PyTorch measured in the same invocation with `--compare`.

mod cases;
mod train;

use clap::Args;
use serde_json::{json, Map, Value};
use std::process::Command;
use std::time::Instant;

pub type Result<T> = std::result::Result<T, String>;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Print one JSON object per case instead of a table
    #[arg(long)]
    json: bool,
    /// Run only these cases (repeatable); default: all
    #[arg(long = "case")]
    cases: Vec<String>,
    /// Thread counts to run at, comma separated
    #[arg(long, default_value = "2", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Timed repetitions per case (after warm-up); at least 7
    #[arg(long, default_value_t = 9)]
    reps: usize,
    /// Also run bench/pytorch/bench.py with $TORCHLEAN_PYTHON (default python3) and print ratios
    #[arg(long)]
    compare: bool,
    /// List the cases and exit
    #[arg(long)]
    list: bool,
}

/// Timing statistics of one case, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub reps: usize,
}

/// Runs `f` `warmup` times untimed, then `reps` times timed.
pub fn measure(warmup: usize, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Stats> {
    for _ in 0..warmup {
        f()?;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(Stats {
        median_ms: times[times.len() / 2],
        min_ms: times[0],
        max_ms: times[times.len() - 1],
        reps,
    })
}

/// One result line.
#[derive(Clone, Debug)]
pub struct Row {
    pub case: String,
    pub engine: String,
    pub threads: usize,
    pub stats: Stats,
    pub extra: Map<String, Value>,
}

impl Row {
    pub fn new(case: &str, engine: &str, threads: usize, stats: Stats) -> Self {
        Row {
            case: case.to_string(),
            engine: engine.to_string(),
            threads,
            stats,
            extra: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), v.into());
        self
    }

    fn from_json(line: &str) -> Option<Row> {
        let v: Value = serde_json::from_str(line).ok()?;
        let mut extra = v.as_object()?.clone();
        let mut take = |k: &str| extra.remove(k);
        let case = take("case")?.as_str()?.to_string();
        let engine = take("engine")?.as_str()?.to_string();
        let threads = take("threads")?.as_u64()? as usize;
        let stats = Stats {
            median_ms: take("median_ms")?.as_f64()?,
            min_ms: take("min_ms")?.as_f64()?,
            max_ms: take("max_ms")?.as_f64()?,
            reps: take("reps")?.as_u64()? as usize,
        };
        Some(Row {
            case,
            engine,
            threads,
            stats,
            extra,
        })
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("case".into(), json!(self.case));
        m.insert("engine".into(), json!(self.engine));
        m.insert("threads".into(), json!(self.threads));
        m.insert("median_ms".into(), json!(round(self.stats.median_ms)));
        m.insert("min_ms".into(), json!(round(self.stats.min_ms)));
        m.insert("max_ms".into(), json!(round(self.stats.max_ms)));
        m.insert("reps".into(), json!(self.stats.reps));
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

fn round(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

pub fn run(args: &BenchArgs) -> Result<bool> {
    if args.list {
        for c in cases::CASES {
            println!("{:<24} {}", c.name, c.about);
        }
        return Ok(true);
    }
    if args.reps < 7 {
        return Err("--reps must be at least 7 (SPEC 5)".into());
    }
    let selected: Vec<&cases::Case> = cases::CASES
        .iter()
        .filter(|c| args.cases.is_empty() || args.cases.iter().any(|n| n == c.name))
        .collect();
    for n in &args.cases {
        if !cases::CASES.iter().any(|c| c.name == n) {
            return Err(format!("unknown case `{n}` (see --list)"));
        }
    }
    let selected = without_missing_devices(selected)?;
    let mut rows = Vec::new();
    for &threads in &args.threads {
        for case in &selected {
            for row in spawn_case(case.name, threads, args.reps)? {
                if args.json {
                    println!("{}", row.to_json());
                }
                rows.push(row);
            }
        }
    }
    if !args.json {
        print_table(&rows);
    }
    if args.compare {
        let names: Vec<&str> = selected.iter().map(|c| c.name).collect();
        let theirs = run_pytorch(&names, &args.threads, args.reps)?;
        print_comparison(&rows, &theirs, args.json);
    }
    Ok(true)
}

/// `selected` without its CUDA cases when there is no CUDA device (one line each says so), or
/// an error then when `TORCHLEAN_REQUIRE_CUDA=1`.
fn without_missing_devices(selected: Vec<&cases::Case>) -> Result<Vec<&cases::Case>> {
    if !selected.iter().any(|c| c.cuda) {
        return Ok(selected);
    }
    let Err(why) = torchlean_engine_cuda::probe() else {
        return Ok(selected);
    };
    if std::env::var("TORCHLEAN_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
        return Err(format!(
            "TORCHLEAN_REQUIRE_CUDA=1 but there is no CUDA device: {why}"
        ));
    }
    Ok(selected
        .into_iter()
        .filter(|c| {
            if c.cuda {
                eprintln!("{}: skipped: no CUDA device ({why})", c.name);
            }
            !c.cuda
        })
        .collect())
}

/// Runs one case in a fresh process of this program: its rayon global pool has exactly
/// `threads` threads, the case runs on one of them, and its peak memory is its own.
fn spawn_case(case: &str, threads: usize, reps: usize) -> Result<Vec<Row>> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args([
            "bench-child",
            case,
            "--threads",
            &threads.to_string(),
            "--reps",
            &reps.to_string(),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "case {case}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| Row::from_json(l).ok_or_else(|| format!("case {case}: unreadable row {l}")))
        .collect()
}

/// The child side of [`spawn_case`].
pub fn run_child(case: &str, threads: usize, reps: usize) -> Result<bool> {
    let c = cases::CASES
        .iter()
        .find(|c| c.name == case)
        .ok_or_else(|| format!("unknown case `{case}`"))?;
    // Kernels that name no pool would use the global one: the same size.
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .map_err(|e| e.to_string())?;
    // On a pool thread, not the main one: the case's own thread takes part in every split, so
    // `threads` threads run in all (PyTorch's calling thread is one of its `threads` too).
    // From the main thread, a split's caller sleeps while the pool's threads work, and the
    // pool's idle threads spin beside the main thread's serial work: three threads on two cores.
    for row in torchlean_engine_cpu::with_threads(threads, || (c.run)(threads, reps))? {
        println!("{}", row.to_json());
    }
    Ok(true)
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<26} {:<14} {:>3} {:>11} {:>11} {:>11}  extra",
        "case", "engine", "thr", "median_ms", "min_ms", "max_ms"
    );
    for r in rows {
        let extra: Vec<String> = r.extra.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "{:<26} {:<14} {:>3} {:>11.4} {:>11.4} {:>11.4}  {}",
            r.case,
            r.engine,
            r.threads,
            r.stats.median_ms,
            r.stats.min_ms,
            r.stats.max_ms,
            extra.join(" ")
        );
    }
}

/// Runs the PyTorch twin of the selected cases; returns its JSON lines.
fn run_pytorch(cases: &[&str], threads: &[usize], reps: usize) -> Result<Vec<Value>> {
    let python = std::env::var("TORCHLEAN_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/pytorch/bench.py");
    let threads: Vec<String> = threads.iter().map(|t| t.to_string()).collect();
    let out = Command::new(&python)
        .arg(&script)
        .arg("--cases")
        .arg(cases.join(","))
        .arg("--threads")
        .arg(threads.join(","))
        .arg("--reps")
        .arg(reps.to_string())
        .output()
        .map_err(|e| {
            format!("cannot run {python} (set TORCHLEAN_PYTHON to a Python with torch): {e}")
        })?;
    if !out.status.success() {
        return Err(format!(
            "{} failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

fn key(case: &str, threads: u64, extra: Option<&Value>) -> String {
    format!(
        "{case}/{threads}/{}",
        extra.map(|v| v.to_string()).unwrap_or_default()
    )
}

fn print_comparison(ours: &[Row], theirs: &[Value], as_json: bool) {
    if !as_json {
        println!("\nside by side with the peers (same run; ratio = peer time / our time, > 1 means we are faster)");
        println!(
            "{:<26} {:>3} {:<18} {:>12} {:<16} {:>12} {:>8}  note",
            "case", "thr", "ours", "ours_ms", "peer", "peer_ms", "ratio"
        );
    }
    for t in theirs {
        if as_json {
            println!("{t}");
        }
        let Some(case) = t["case"].as_str() else {
            continue;
        };
        let peer = t["engine"].as_str().unwrap_or("peer");
        let threads = t["threads"].as_u64().unwrap_or(0);
        let k = key(case, threads, t.get("nodes"));
        // compare with our fast engine where a case has several rows (one line per backend
        // where a case has an eager and a compiled row)
        let same: Vec<&Row> = ours
            .iter()
            .filter(|r| key(&r.case, r.threads as u64, r.extra.get("nodes")) == k)
            .collect();
        let fast = same.iter().any(|r| !r.engine.starts_with("reference"));
        for mine in same
            .into_iter()
            .filter(|r| !fast || !r.engine.starts_with("reference"))
        {
            compare_line(t, peer, case, threads, mine, as_json);
        }
    }
}

/// One peer row against one of ours.
fn compare_line(t: &Value, peer: &str, case: &str, threads: u64, mine: &Row, as_json: bool) {
    {
        let backend = mine.extra.get("backend").and_then(Value::as_str);
        let label = match backend {
            Some(b) => format!("{}/{b}", mine.engine),
            None => mine.engine.clone(),
        };
        let theirs_ms = t["median_ms"].as_f64().unwrap_or(f64::NAN);
        let ratio = theirs_ms / mine.stats.median_ms;
        let mut note = String::new();
        for field in ["gflops", "peak_rss_mb", "us_per_op"] {
            if let (Some(p), Some(m)) = (t.get(field), mine.extra.get(field)) {
                note = format!("{field}: {peer} {p}, ours {m}");
            }
        }
        if as_json {
            println!(
                "{}",
                json!({"compare": case, "threads": threads, "peer": peer, "engine": mine.engine, "backend": backend, "ours_ms": round(mine.stats.median_ms), "peer_ms": theirs_ms, "ratio": round(ratio)})
            );
        } else {
            println!(
                "{:<26} {:>3} {:<18} {:>12.4} {:<16} {:>12.4} {:>8.2}  {note}",
                case, threads, label, mine.stats.median_ms, peer, theirs_ms, ratio
            );
        }
    }
}
