//! Thread pools and the parallelism policy.
//!
//! Kernels run on the current rayon pool (`rayon::current_num_threads()`): the global pool, or
//! the pool [`with_threads`] installs. A kernel goes parallel only when its work is at least
//! [`PAR_MIN_WORK`] (in rough units of one cheap elementwise operation), so small tensors never
//! pay rayon's dispatch cost. Work is always split so that the result cannot depend on the
//! split: elementwise work is pure per element, row work is pure per row, and reductions use
//! fixed blocks combined in a fixed order (see `kernels::reduce`).
//!
//! A pool [`with_threads`] built keeps its other threads looking for work for [`STAY_WARM`]
//! after each split (see [`Warmth`]), so that the next split finds them awake.

use rayon::prelude::*;
use std::cell::{Cell, OnceCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Minimum work (≈ cheap elementwise operations) before a kernel uses more than one thread.
pub const PAR_MIN_WORK: usize = 1 << 15;

/// Runs `f` inside a rayon pool of `n` threads (`n = 0` is taken as 1), so that every kernel it
/// calls uses `n` threads. Pools are built once per thread count and cached for the life of the
/// process. If a pool cannot be built, `f` runs on the current pool.
pub fn with_threads<R: Send>(n: usize, f: impl FnOnce() -> R + Send) -> R {
    match pool(n.max(1)) {
        Some(p) => p.install(|| {
            let _caller = CallerMark::set();
            f()
        }),
        None => f(),
    }
}

/// The pool size when none is asked for, as rayon chooses its global pool's: `RAYON_NUM_THREADS`
/// when it is a positive number, else one thread per core.
pub fn default_threads() -> usize {
    threads_for(
        std::env::var("RAYON_NUM_THREADS").ok().as_deref(),
        std::thread::available_parallelism().ok().map(|n| n.get()),
    )
}

/// [`default_threads`] given the variable's value and the core count.
fn threads_for(rayon_num_threads: Option<&str>, cores: Option<usize>) -> usize {
    rayon_num_threads
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or(cores)
        .unwrap_or(1)
}

/// Threads the kernels called from here would use.
pub fn current_threads() -> usize {
    rayon::current_num_threads()
}

/// The pools [`with_threads`] has built, by thread count.
fn pools() -> std::sync::MutexGuard<'static, HashMap<usize, Arc<rayon::ThreadPool>>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let pools = POOLS.get_or_init(|| Mutex::new(HashMap::new()));
    // a poisoned lock only means another thread panicked while inserting: the map is still valid
    pools.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` once on every thread of every pool [`with_threads`] has built (a pool built later
/// runs its threads' start handler instead).
pub(crate) fn broadcast_to_pools(f: impl Fn() + Sync) {
    // released before broadcasting: a pool thread inside `with_threads` may be waiting for it
    let built: Vec<Arc<rayon::ThreadPool>> = pools().values().cloned().collect();
    for p in built {
        p.broadcast(|_| f());
    }
}

fn pool(n: usize) -> Option<Arc<rayon::ThreadPool>> {
    let mut map = pools();
    if let Some(p) = map.get(&n) {
        return Some(p.clone());
    }
    let warmth = Arc::new(Warmth::default());
    let p = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(move |i| format!("torchlean-cpu-{n}-{i}"))
            .start_handler(move |_| {
                crate::float_mode::apply_here();
                POOL_WARMTH.with(|w| {
                    let _ = w.set(Arc::clone(&warmth));
                });
            })
            .build()
            .ok()?,
    );
    map.insert(n, p.clone());
    Some(p)
}

/// Whether `work` is worth splitting across the current pool. When it is, the caller is about
/// to split it, so the pool's other threads are kept looking for work a while longer
/// ([`Warmth::extend`]).
#[inline]
pub(crate) fn should_par(work: usize) -> bool {
    let par = work >= PAR_MIN_WORK && rayon::current_num_threads() > 1;
    if par {
        POOL_WARMTH.with(|w| {
            if let Some(w) = w.get() {
                w.extend();
            }
        });
    }
    par
}

/// How long a pool's other threads keep looking for work after the pool's latest split.
///
/// An idle rayon thread gives up its core after about 32 rounds of looking for work, some tens
/// of microseconds; woken, it started a stolen half 20–35 µs after the split (40–55 µs for
/// 100 µs halves) on the 2-vCPU AMD EPYC (Zen 4, a Firecracker guest that halts idle vCPUs at
/// once) of 2026-12-07. A training step splits a product every few tens of microseconds, so
/// most splits found the other thread asleep: two 20 µs halves took 40–56 µs as a split after
/// 30 µs to 3 ms of serial work, against 21 µs with the other thread looking. OpenMP runtimes
/// spin the same way (`GOMP_SPINCOUNT`, `KMP_BLOCKTIME`).
pub(crate) const STAY_WARM: Duration = Duration::from_millis(1);

/// The moment [`Warmth`]'s deadlines count from.
fn clock_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Nanoseconds since [`clock_origin`].
fn clock_ns() -> u64 {
    u64::try_from(clock_origin().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A pool's spinners: after a split, every thread of the pool but the caller runs a job that
/// takes the pool's pending work (`rayon::yield_now`) as soon as it appears, until
/// [`STAY_WARM`] after the latest split. Between looks it yields its core
/// (`std::thread::yield_now`), so on a machine with more runnable threads than cores (MPI ranks
/// beside each other) it can give way instead of holding a core for the whole deadline. A thread
/// running a [`with_threads`] body never spins (it would hold up its own caller), and spinning
/// never changes which work a thread does, only how soon it starts it.
#[derive(Debug, Default)]
struct Warmth {
    /// [`clock_ns`] until which the spinners look for work.
    until_ns: AtomicU64,
    /// Spinners started and not yet finished (0: none; the next split starts them).
    spinners: AtomicUsize,
}

thread_local! {
    /// The warmth of the pool this thread belongs to (threads of pools [`with_threads`] built).
    static POOL_WARMTH: OnceCell<Arc<Warmth>> = const { OnceCell::new() };
    /// How many [`with_threads`] bodies this thread is running.
    static CALLER_DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// While alive, marks the current thread as running a [`with_threads`] body.
struct CallerMark;

impl CallerMark {
    fn set() -> Self {
        CALLER_DEPTH.with(|d| d.set(d.get() + 1));
        CallerMark
    }
}

impl Drop for CallerMark {
    fn drop(&mut self) {
        CALLER_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

impl Warmth {
    /// Moves the deadline to [`STAY_WARM`] from now, and starts the spinners if none run.
    fn extend(self: &Arc<Self>) {
        let until = clock_ns().saturating_add(STAY_WARM.as_nanos() as u64);
        self.until_ns.fetch_max(until, Ordering::Relaxed);
        let others = rayon::current_num_threads().saturating_sub(1);
        if others > 0
            && self
                .spinners
                .compare_exchange(0, others, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            let caller = rayon::current_thread_index();
            let warmth = Arc::clone(self);
            rayon::spawn_broadcast(move |ctx| {
                if Some(ctx.index()) != caller {
                    warmth.spin();
                }
            });
        }
    }

    /// One spinner's loop: run the pool's pending jobs until the deadline passes.
    fn spin(&self) {
        if CALLER_DEPTH.with(Cell::get) == 0 {
            loop {
                if rayon::yield_now() == Some(rayon::Yield::Executed) {
                    continue;
                }
                if clock_ns() > self.until_ns.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::yield_now();
            }
        }
        self.spinners.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs `f(first_row, rows)` over `dst` seen as consecutive rows of `row_len` elements, each
/// row costing about `row_cost`. Rows are handed out in contiguous groups, in parallel when
/// the total work is large; `f` must treat each row independently, so the split never shows in
/// the result.
#[inline]
pub(crate) fn par_rows<T: Send>(
    dst: &mut [T],
    row_len: usize,
    row_cost: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    if row_len == 0 || dst.is_empty() {
        return;
    }
    let rows = dst.len() / row_len;
    let work = rows.saturating_mul(row_cost.max(1));
    if work < PAR_MIN_WORK || rows < 2 {
        f(0, dst);
        return;
    }
    if should_par(work) {
        let tasks = (rayon::current_num_threads() * 4).min(rows);
        // at least PAR_MIN_WORK / 4 of work per task
        let min_rows = (PAR_MIN_WORK / 4).div_ceil(row_cost.max(1)).max(1);
        let group = rows.div_ceil(tasks).max(min_rows);
        dst.par_chunks_mut(group * row_len)
            .enumerate()
            .for_each(|(g, chunk)| f(g * group, chunk));
    } else {
        f(0, dst);
    }
}

/// Maps `f` over `0..n` in parallel when `n · cost` is large, collecting in index order.
pub(crate) fn par_map<R: Send>(
    n: usize,
    cost: usize,
    f: impl Fn(usize) -> R + Sync + Send,
) -> Vec<R> {
    if n > 1 && should_par(n.saturating_mul(cost.max(1))) {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As rayon sizes its global pool: `RAYON_NUM_THREADS` when it is a positive number, else
    /// one thread per core, else one.
    #[test]
    fn the_default_is_rayon_num_threads_or_one_per_core() {
        assert_eq!(threads_for(Some("3"), Some(8)), 3);
        assert_eq!(threads_for(Some("0"), Some(8)), 8);
        assert_eq!(threads_for(Some("many"), Some(8)), 8);
        assert_eq!(threads_for(None, Some(8)), 8);
        assert_eq!(threads_for(None, None), 1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if std::env::var_os("RAYON_NUM_THREADS").is_none() {
            assert_eq!(default_threads(), cores);
        }
    }

    #[test]
    fn with_threads_sets_the_thread_count() {
        assert_eq!(with_threads(1, current_threads), 1);
        assert_eq!(with_threads(2, current_threads), 2);
        assert_eq!(with_threads(0, current_threads), 1);
        // nested calls switch pools
        assert_eq!(with_threads(2, || with_threads(1, current_threads)), 1);
    }

    /// The spinners a split starts on a pool of `n` threads: `n − 1` of them, none on the
    /// caller, and all gone once the deadline has passed: a deadline set here, then the
    /// [`STAY_WARM`] of a split alone. (The pool of 7 is this test's alone.)
    #[test]
    fn a_split_starts_spinners_that_stop_after_the_deadline() {
        let all_stop = |warmth: &Warmth| {
            let since = Instant::now();
            while warmth.spinners.load(Ordering::SeqCst) != 0 {
                assert!(
                    since.elapsed() < Duration::from_secs(30),
                    "spinners left running 30 s after the deadline"
                );
                std::thread::sleep(STAY_WARM);
            }
        };
        with_threads(7, || {
            let warmth = POOL_WARMTH
                .with(|w| w.get().cloned())
                .expect("a pool thread has its pool's warmth");
            assert!(!should_par(PAR_MIN_WORK - 1));
            assert_eq!(warmth.spinners.load(Ordering::SeqCst), 0);
            // a minute away, so that none stops before it is counted (a split keeps the later
            // deadline)
            let a_minute = Duration::from_secs(60).as_nanos() as u64;
            warmth
                .until_ns
                .store(clock_ns() + a_minute, Ordering::SeqCst);
            assert!(should_par(PAR_MIN_WORK));
            assert_eq!(warmth.spinners.load(Ordering::SeqCst), 6);
            warmth.until_ns.store(0, Ordering::SeqCst);
            all_stop(&warmth);
            assert!(should_par(PAR_MIN_WORK));
            all_stop(&warmth);
        });
        // outside a pool [`with_threads`] built there is no warmth to keep
        assert!(POOL_WARMTH.with(|w| w.get().is_none()));
    }

    /// A thread running a [`with_threads`] body does not spin, however far off the deadline:
    /// it would hold up the body waiting on it.
    #[test]
    fn a_with_threads_body_never_spins() {
        let warmth = Warmth::default();
        let a_minute = Duration::from_secs(60).as_nanos() as u64;
        warmth
            .until_ns
            .store(clock_ns() + a_minute, Ordering::SeqCst);
        warmth.spinners.store(1, Ordering::SeqCst);
        let _body = CallerMark::set();
        let since = Instant::now();
        warmth.spin();
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the body's thread spun"
        );
        assert_eq!(warmth.spinners.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn par_rows_visits_every_row_once_whatever_the_pool() {
        for threads in [1, 2, 3] {
            let mut v = vec![0usize; 100_003 * 3];
            with_threads(threads, || {
                par_rows(&mut v, 3, 1, |first, rows| {
                    for (k, r) in rows.chunks_mut(3).enumerate() {
                        for x in r {
                            *x += first + k;
                        }
                    }
                })
            });
            for (i, r) in v.chunks(3).enumerate() {
                assert_eq!(r, [i, i, i]);
            }
        }
    }

    /// The split is the documented policy, pinned at its edges: one call below
    /// [`PAR_MIN_WORK`] or on one thread; past it, groups of at least `PAR_MIN_WORK / 4` of work
    /// and at most four tasks per thread. (Which split runs never shows in a result; this is
    /// what keeps small tensors off rayon and large ones spread.)
    #[test]
    fn par_rows_splits_by_the_work_and_the_thread_count() {
        let calls = |threads: usize, len: usize, row_len: usize, cost: usize| {
            let seen = std::sync::Mutex::new(Vec::new());
            let mut v = vec![0u8; len];
            with_threads(threads, || {
                par_rows(&mut v, row_len, cost, |first, rows| {
                    seen.lock().unwrap().push((first, rows.len()))
                })
            });
            let mut seen = seen.into_inner().unwrap();
            seen.sort();
            seen
        };
        let q = PAR_MIN_WORK / 4;
        assert_eq!(
            calls(2, 4 * q - 1, 1, 1),
            [(0, 4 * q - 1)],
            "under the threshold"
        );
        assert_eq!(calls(1, 4 * q, 1, 1), [(0, 4 * q)], "one thread");
        // at the threshold: the smallest groups, q rows each
        assert_eq!(
            calls(2, 4 * q, 1, 1),
            [(0, q), (q, q), (2 * q, q), (3 * q, q)]
        );
        // 16q rows of 2 elements: 4 tasks per thread, 2q rows each
        let eight: Vec<_> = (0..8).map(|g| (g * 2 * q, 4 * q)).collect();
        assert_eq!(calls(2, 32 * q, 2, 1), eight);
        // rows costing q each: a group can be one row
        assert_eq!(calls(2, 4, 1, q), [(0, 1), (1, 1), (2, 1), (3, 1)]);
    }

    #[test]
    fn par_map_keeps_order() {
        let v = with_threads(2, || par_map(100_000, 1, |i| i * 2));
        assert!(v.iter().enumerate().all(|(i, &x)| x == 2 * i));
    }
}
