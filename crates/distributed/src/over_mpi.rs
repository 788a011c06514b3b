//! The world over MPI (rsmpi). MPI moves the values; every sum is ours, in a fixed order.

use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Root};
use mpi::{Count, Threading};

use crate::{fold_in_rank_order, share, DistributedError, Result, Summand};

pub(crate) struct MpiWorld {
    world: SimpleCommunicator,
    // Dropped last: finalizes MPI.
    _universe: Universe,
}

impl std::fmt::Debug for MpiWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiWorld")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

fn count(what: &'static str, len: usize) -> Result<Count> {
    Count::try_from(len).map_err(|_| DistributedError::TooLarge { what, len })
}

impl MpiWorld {
    pub(crate) fn init() -> Result<MpiWorld> {
        // Funneled: only the thread that initialized MPI calls it; the engines' worker
        // threads never do.
        let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or(DistributedError::AlreadyInitialized)?;
        Ok(MpiWorld {
            world: universe.world(),
            _universe: universe,
        })
    }

    pub(crate) fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    pub(crate) fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// Refuses a vector whose length differs between ranks (a collective over it would fail
    /// inside MPI, or hang).
    fn same_length(&self, what: &'static str, len: usize) -> Result<()> {
        let lens = self.all_gather_one(len as u64);
        match lens.iter().position(|&l| l != len as u64) {
            None => Ok(()),
            Some(rank) => Err(DistributedError::LengthMismatch {
                what,
                rank,
                theirs: lens[rank] as usize,
                ours: len,
            }),
        }
    }

    fn all_gather_one(&self, x: u64) -> Vec<u64> {
        let mut all = vec![0u64; self.size()];
        self.world.all_gather_into(&x, &mut all[..]);
        all
    }

    /// Reduce-scatter as an all-to-all (rank `k` receives every rank's chunk `k` and folds
    /// them in rank order), then an all-gather of the folded chunks: 2·(N−1)/N of the vector
    /// sent and received per rank, as a ring all-reduce.
    pub(crate) fn all_reduce_sum<T: Summand>(
        &self,
        what: &'static str,
        data: &mut [T],
    ) -> Result<()> {
        let (n, me, len) = (self.size(), self.rank(), data.len());
        count(what, len)?;
        self.same_length(what, len)?;
        let chunks: Vec<_> = (0..n).map(|k| share(len, n, k)).collect();
        let counts: Vec<Count> = chunks.iter().map(|c| c.len() as Count).collect();
        let displs: Vec<Count> = chunks.iter().map(|c| c.start as Count).collect();
        let m = chunks[me].len();
        let mut pieces = vec![T::default(); n * m];
        let piece_counts = vec![m as Count; n];
        let piece_displs: Vec<Count> = (0..n).map(|r| (r * m) as Count).collect();
        {
            let send = Partition::new(&*data, &counts[..], &displs[..]);
            let mut recv = PartitionMut::new(&mut pieces[..], piece_counts, piece_displs);
            self.world.all_to_all_varcount_into(&send, &mut recv);
        }
        let mine = fold_in_rank_order(&pieces, n);
        let mut all = PartitionMut::new(data, &counts[..], &displs[..]);
        self.world.all_gather_varcount_into(&mine[..], &mut all);
        Ok(())
    }

    pub(crate) fn broadcast(&self, what: &'static str, data: &mut [f64]) -> Result<()> {
        count(what, data.len())?;
        self.same_length(what, data.len())?;
        self.world.process_at_rank(0).broadcast_into(data);
        Ok(())
    }

    pub(crate) fn all_gather(&self, data: &[u64]) -> Result<Vec<Vec<u64>>> {
        count("a gathered vector", data.len())?;
        let lens = self.all_gather_one(data.len() as u64);
        let total: u64 = lens.iter().sum();
        let total = usize::try_from(total).map_err(|_| DistributedError::TooLarge {
            what: "the gathered vectors",
            len: usize::MAX,
        })?;
        count("the gathered vectors", total)?;
        let counts: Vec<Count> = lens.iter().map(|&l| l as Count).collect();
        let displs: Vec<Count> = counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let mut flat = vec![0u64; total];
        {
            let mut recv = PartitionMut::new(&mut flat[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(data, &mut recv);
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| flat[d as usize..(d + c) as usize].to_vec())
            .collect())
    }

    pub(crate) fn barrier(&self) {
        self.world.barrier();
    }

    pub(crate) fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}
