//! Thread pools and the parallelism policy.
//!
//! Kernels run on the current rayon pool (`rayon::current_num_threads()`): the global pool, or
//! the pool [`with_threads`] installs. A kernel goes parallel only when its work is at least
//! [`PAR_MIN_WORK`] (in rough units of one cheap elementwise operation), so small tensors never
//! pay rayon's dispatch cost. Work is always split so that the result cannot depend on the
//! split: elementwise work is pure per element, row work is pure per row, and reductions use
//! fixed blocks combined in a fixed order (see `kernels::reduce`).

use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Minimum work (≈ cheap elementwise operations) before a kernel uses more than one thread.
pub const PAR_MIN_WORK: usize = 1 << 15;

/// Runs `f` inside a rayon pool of `n` threads (`n = 0` is taken as 1), so that every kernel it
/// calls uses `n` threads. Pools are built once per thread count and cached for the life of the
/// process. If a pool cannot be built, `f` runs on the current pool.
pub fn with_threads<R: Send>(n: usize, f: impl FnOnce() -> R + Send) -> R {
    match pool(n.max(1)) {
        Some(p) => p.install(f),
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
    let p = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(move |i| format!("torchlean-cpu-{n}-{i}"))
            .start_handler(|_| crate::float_mode::apply_here())
            .build()
            .ok()?,
    );
    map.insert(n, p.clone());
    Some(p)
}

/// Whether `work` is worth splitting across the current pool.
#[inline]
pub(crate) fn should_par(work: usize) -> bool {
    work >= PAR_MIN_WORK && rayon::current_num_threads() > 1
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
