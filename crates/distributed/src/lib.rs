//! Data parallelism's collectives: every rank runs the same program on its share of the
//! global batch, and the ranks sum their gradients before every optimizer step.
//!
//! A [`World`] is this process's view of the job: its rank, how many ranks there are, and the
//! collectives the trainers need. Built with the `mpi` feature it runs over MPI (rsmpi on the
//! system's OpenMPI, MPICH or Intel MPI) when the process was started by a launcher
//! (`mpirun`, `srun`), or when asked to; otherwise, and always without the feature, it is a
//! world of one, whose collectives do nothing.
//!
//! Invariant: [`World::all_reduce_sum`] gives the same bits on every rank, whatever the MPI
//! library's reduction algorithm: MPI only moves the values (an all-to-all, then an all-gather)
//! and the sums are ours, chunk `k` of the vector summed by rank `k` in rank order `0, 1, …,
//! N−1` (see [`share`] and [`fold_in_rank_order`]). So ranks that start from the same
//! parameters stay bitwise identical, step after step.

mod buckets;
mod launch;
#[cfg(feature = "mpi")]
mod over_mpi;

use std::ops::Range;

pub use buckets::Buckets;
pub use launch::{launched, Launch};

/// What can go wrong in a collective, or in starting the world.
#[derive(Debug, thiserror::Error)]
pub enum DistributedError {
    #[error(
        "this process was started by {} as rank {} of {}, but this torchlean was built without MPI: rebuild it with `--features mpi`",
        launch.launcher, launch.rank, launch.size
    )]
    NotBuiltWithMpi { launch: Launch },
    #[error(
        "--distributed was given, but this torchlean was built without MPI: rebuild it with `--features mpi`"
    )]
    RequestedWithoutMpi,
    #[error("MPI could not be initialized: it was initialized already in this process")]
    AlreadyInitialized,
    #[error(
        "{} started {} processes, but MPI sees a world of {mpi_size}: the launcher and the MPI library do not match (with Slurm, use `srun --mpi=pmix`)",
        launch.launcher, launch.size
    )]
    LauncherMismatch { launch: Launch, mpi_size: usize },
    #[error("{what}: {len} values is more than MPI's 32-bit counts can address")]
    TooLarge { what: &'static str, len: usize },
    #[error(
        "{what}: the ranks disagree on its length (rank {rank} has {theirs} values, this rank {ours}); they are not running the same model"
    )]
    LengthMismatch {
        what: &'static str,
        rank: usize,
        theirs: usize,
        ours: usize,
    },
}

pub type Result<T, E = DistributedError> = std::result::Result<T, E>;

/// Rank `rank`'s share of `len` items dealt to `size` ranks in order: `⌊rank·len/size⌋ ..
/// ⌊(rank+1)·len/size⌋`. The shares are contiguous, cover `0..len` once, and differ in length
/// by at most one. The batch rows of a rank and the chunk of a vector a rank sums are both
/// this.
pub fn share(len: usize, size: usize, rank: usize) -> Range<usize> {
    assert!(rank < size, "rank {rank} of a world of {size}");
    let at = |k: usize| (k as u128 * len as u128 / size as u128) as usize;
    at(rank)..at(rank + 1)
}

/// What [`World::all_reduce_sum`] sums: `f32` (an f32 engine's gradients travel as they are,
/// half the bytes of `f64`) and `f64`.
#[cfg(feature = "mpi")]
pub trait Summand:
    Copy + Default + std::ops::AddAssign + Send + Sync + 'static + mpi::traits::Equivalence
{
}

/// What [`World::all_reduce_sum`] sums: `f32` (an f32 engine's gradients travel as they are,
/// half the bytes of `f64`) and `f64`.
#[cfg(not(feature = "mpi"))]
pub trait Summand: Copy + Default + std::ops::AddAssign + Send + Sync + 'static {}

impl Summand for f32 {}
impl Summand for f64 {}

/// The elementwise sum of `pieces`, one equally long piece per rank laid end to end in rank
/// order, added left to right starting from rank 0's piece (so one piece is returned as is,
/// `-0.0` included).
pub fn fold_in_rank_order<T: Summand>(pieces: &[T], ranks: usize) -> Vec<T> {
    assert!(ranks > 0 && pieces.len().is_multiple_of(ranks));
    let m = pieces.len() / ranks;
    let mut sum = pieces[..m].to_vec();
    for piece in pieces.chunks_exact(m.max(1)).skip(1).take(ranks - 1) {
        for (s, &x) in sum.iter_mut().zip(piece) {
            *s += x;
        }
    }
    sum
}

/// How the world was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Over MPI when a launcher started this process as one of several; else a world of one.
    Auto,
    /// Over MPI in any case (`--distributed`); a build without MPI refuses.
    Required,
}

/// This process's place in the job, and the collectives over it.
#[derive(Debug)]
pub struct World {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Solo,
    #[cfg(feature = "mpi")]
    Mpi(over_mpi::MpiWorld),
}

impl World {
    /// A world of one: rank 0 of 1; every collective returns its input.
    pub fn solo() -> World {
        World {
            backend: Backend::Solo,
        }
    }

    /// The world this process was started in (see [`Start`]). MPI is initialized at most once
    /// per process, and finalized when the world is dropped.
    pub fn start(how: Start) -> Result<World> {
        let launch = launched();
        let several = launch.as_ref().is_some_and(|l| l.size > 1);
        if how == Start::Auto && !several {
            return Ok(World::solo());
        }
        #[cfg(feature = "mpi")]
        {
            let world = over_mpi::MpiWorld::init()?;
            if let Some(l) = launch.filter(|l| l.size != world.size()) {
                return Err(DistributedError::LauncherMismatch {
                    launch: l,
                    mpi_size: world.size(),
                });
            }
            Ok(World {
                backend: Backend::Mpi(world),
            })
        }
        #[cfg(not(feature = "mpi"))]
        match launch.filter(|_| several) {
            Some(launch) => Err(DistributedError::NotBuiltWithMpi { launch }),
            None => Err(DistributedError::RequestedWithoutMpi),
        }
    }

    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> usize {
        match &self.backend {
            Backend::Solo => 0,
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => w.rank(),
        }
    }

    /// How many ranks there are.
    pub fn size(&self) -> usize {
        match &self.backend {
            Backend::Solo => 1,
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => w.size(),
        }
    }

    /// Rank 0: the one that prints and writes.
    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }

    /// This rank's share of `len` items ([`share`]).
    pub fn share(&self, len: usize) -> Range<usize> {
        share(len, self.size(), self.rank())
    }

    /// `data` becomes the elementwise sum of every rank's `data`, the same bits on every rank
    /// (see the crate's invariant). `what` names the vector in errors.
    pub fn all_reduce_sum<T: Summand>(&self, what: &'static str, data: &mut [T]) -> Result<()> {
        match &self.backend {
            Backend::Solo => {
                let _ = (what, data);
                Ok(())
            }
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => w.all_reduce_sum(what, data),
        }
    }

    /// [`World::all_reduce_sum`] of buckets of `lens` values, each sent while `work` goes on:
    /// `work` writes each bucket and says it is ready ([`Buckets`]), and may call
    /// [`Buckets::progress`] as it works; the buckets' sums, every element the same bits as
    /// `all_reduce_sum`'s, come back once `work` has returned and every bucket has arrived.
    /// Every rank must pass the same `lens` (a different total is refused first, on every
    /// rank, before anything is sent).
    pub fn sum_in_buckets<T: Summand, R>(
        &self,
        what: &'static str,
        lens: &[usize],
        work: impl FnOnce(&mut Buckets<'_, T>) -> R,
    ) -> Result<(R, Vec<Vec<T>>)> {
        match &self.backend {
            Backend::Solo => {
                let _ = what;
                let mut kept = buckets::Kept::new(lens);
                let r = work(&mut Buckets::new(&mut kept));
                Ok((r, kept.buckets))
            }
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => w.sum_in_buckets(what, lens, work),
        }
    }

    /// `data` becomes rank 0's `data` on every rank.
    pub fn broadcast(&self, what: &'static str, data: &mut [f64]) -> Result<()> {
        match &self.backend {
            Backend::Solo => {
                let _ = (what, data);
                Ok(())
            }
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => w.broadcast(what, data),
        }
    }

    /// Every rank's `data`, in rank order, on every rank (the lengths may differ).
    pub fn all_gather(&self, data: &[u64]) -> Result<Vec<Vec<u64>>> {
        match &self.backend {
            Backend::Solo => Ok(vec![data.to_vec()]),
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => w.all_gather(data),
        }
    }

    /// Every rank's `bytes`, in rank order, on every rank (the lengths may differ): a
    /// serialized message from each rank, e.g. its share of a sharded check.
    pub fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut words = vec![bytes.len() as u64];
        words.extend(bytes.chunks(8).map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        }));
        Ok(self
            .all_gather(&words)?
            .into_iter()
            .map(|words| {
                let len = words.first().map_or(0, |&l| l as usize);
                let mut out: Vec<u8> = words[1..].iter().flat_map(|w| w.to_le_bytes()).collect();
                out.truncate(len);
                out
            })
            .collect())
    }

    /// Whether `flag` is set on any rank (every rank gets the same answer).
    pub fn any(&self, flag: bool) -> Result<bool> {
        Ok(self
            .all_gather(&[u64::from(flag)])?
            .iter()
            .any(|v| v[0] != 0))
    }

    /// Waits until every rank is here.
    pub fn barrier(&self) {
        match &self.backend {
            Backend::Solo => {}
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => w.barrier(),
        }
    }

    /// Ends the whole job with exit status `code`: the other ranks are stopped too, so none is
    /// left waiting in a collective (`MPI_Abort`; a world of one just exits).
    pub fn abort(&self, code: i32) -> ! {
        match &self.backend {
            Backend::Solo => std::process::exit(code),
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => w.abort(code),
        }
    }

    /// E.g. "rank 1 of 2 (MPI)", or "one process".
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Solo => "one process".to_string(),
            #[cfg(feature = "mpi")]
            Backend::Mpi(w) => format!("rank {} of {} (MPI)", w.rank(), w.size()),
        }
    }
}

/// A 64-bit FNV-1a hash of `values`' bits: equal vectors hash equal, and a change of one bit
/// anywhere changes the hash (with overwhelming likelihood).
pub fn hash_bits(values: impl IntoIterator<Item = f64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in values {
        for byte in v.to_bits().to_le_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The first position where the ranks' vectors differ, and the first rank that differs from
/// rank 0 there: `None` when every rank has rank 0's vector.
pub fn first_difference(per_rank: &[Vec<u64>]) -> Option<(usize, usize)> {
    let (root, others) = per_rank.split_first()?;
    let longest = per_rank.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest).find_map(|i| {
        others
            .iter()
            .position(|v| v.get(i) != root.get(i))
            .map(|r| (i, r + 1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shares_are_contiguous_and_cover_every_item_once() {
        for (len, size) in [(0, 1), (1, 3), (12, 2), (12, 5), (7, 7), (1000, 3)] {
            let mut next = 0;
            for rank in 0..size {
                let s = share(len, size, rank);
                assert_eq!(s.start, next, "len {len} size {size} rank {rank}");
                assert!(s.len() == len / size || s.len() == len / size + 1);
                next = s.end;
            }
            assert_eq!(next, len);
        }
        assert_eq!(share(12, 5, 0), 0..2);
        assert_eq!(share(12, 5, 4), 9..12);
    }

    #[test]
    fn the_fold_adds_left_to_right_from_rank_zero() {
        // 1e16 + 1 + 1: left to right loses both ones (each sum rounds back to 1e16)
        let pieces = [1e16f64, 1.0, 1.0];
        assert_eq!(fold_in_rank_order(&pieces, 3), vec![1e16]);
        let pieces = [1.0f64, 1.0, 1e16];
        assert_eq!(fold_in_rank_order(&pieces, 3), vec![1e16 + 2.0]);
        // one rank: its piece as is, the sign of zero kept
        let one = fold_in_rank_order(&[-0.0f64, 3.5], 1);
        assert!(one[0] == 0.0 && one[0].is_sign_negative() && one[1] == 3.5);
        assert_eq!(fold_in_rank_order::<f64>(&[], 2), Vec::<f64>::new());
        // in f32, rounded as f32 adds round
        assert_eq!(fold_in_rank_order(&[1e8f32, 1.0, 1.0], 3), vec![1e8f32]);
    }

    #[test]
    fn first_difference_names_the_position_and_the_rank() {
        let same = vec![vec![1, 2, 3]; 3];
        assert_eq!(first_difference(&same), None);
        let differ = vec![vec![1, 2, 3], vec![1, 2, 3], vec![1, 9, 4]];
        assert_eq!(first_difference(&differ), Some((1, 2)));
        let shorter = vec![vec![1, 2], vec![1]];
        assert_eq!(first_difference(&shorter), Some((1, 1)));
    }

    #[test]
    fn hash_bits_sees_the_sign_of_zero_and_the_order() {
        assert_ne!(hash_bits([0.0]), hash_bits([-0.0]));
        assert_ne!(hash_bits([1.0, 2.0]), hash_bits([2.0, 1.0]));
        assert_eq!(hash_bits([1.0, 2.0]), hash_bits(vec![1.0, 2.0]));
    }

    #[test]
    fn a_world_of_one_returns_its_inputs() {
        let w = World::solo();
        assert_eq!((w.rank(), w.size(), w.is_root()), (0, 1, true));
        let mut v = vec![1.5, -0.0];
        w.all_reduce_sum("v", &mut v).unwrap();
        w.broadcast("v", &mut v).unwrap();
        assert_eq!(v[0], 1.5);
        assert!(v[1].is_sign_negative());
        assert_eq!(w.all_gather(&[7, 8]).unwrap(), vec![vec![7, 8]]);
        for bytes in [&b""[..], b"abc", b"exactly8", b"nine bytes"] {
            assert_eq!(w.all_gather_bytes(bytes).unwrap(), vec![bytes.to_vec()]);
        }
        assert!(w.any(true).unwrap() && !w.any(false).unwrap());
        assert_eq!(w.share(5), 0..5);
    }

    proptest! {
        /// Whatever the order MPI would add in, ours is fixed: the fold of the same pieces is
        /// the same bits, and equals a plain left-to-right sum per element.
        #[test]
        fn the_fold_is_a_fixed_left_to_right_sum(
            ranks in 1usize..5,
            m in 0usize..6,
            seed in any::<u64>(),
        ) {
            let mut s = seed;
            let pieces: Vec<f64> = (0..ranks * m)
                .map(|_| {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 10f64.powi((s % 9) as i32)
                })
                .collect();
            let sum = fold_in_rank_order(&pieces, ranks);
            prop_assert_eq!(sum.len(), m);
            for j in 0..m {
                let mut want = pieces[j];
                for r in 1..ranks {
                    want += pieces[r * m + j];
                }
                prop_assert_eq!(sum[j].to_bits(), want.to_bits());
            }
        }
    }
}
