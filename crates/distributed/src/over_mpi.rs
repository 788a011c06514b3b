//! The world over MPI (rsmpi). MPI moves the values; every sum is ours, in a fixed order.

use std::collections::VecDeque;

use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::request::{LocalScope, Request};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Root};
use mpi::{Count, Threading};

use crate::buckets::{Buckets, Exchange, SendOrder};
use crate::{fold_in_rank_order, share, DistributedError, Result, Summand};

pub(crate) struct MpiWorld {
    world: SimpleCommunicator,
    /// The buckets' all-to-alls and their all-gathers each on a communicator of their own:
    /// MPI matches collectives by their order on a communicator, and a rank posts a bucket's
    /// all-gather when its all-to-all has arrived, which interleaves differently with the next
    /// buckets' all-to-alls on each rank. On its own communicator each kind goes in bucket
    /// order everywhere.
    exchanges: SimpleCommunicator,
    gathers: SimpleCommunicator,
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
        let world = universe.world();
        Ok(MpiWorld {
            exchanges: world.duplicate(),
            gathers: world.duplicate(),
            world,
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

    /// [`crate::World::sum_in_buckets`]: each bucket padded to `n·m` values (`m` = its length
    /// over `n`, rounded up) goes as an `MPI_Ialltoall` (rank `k` gets every rank's chunk `k`,
    /// folds them in rank order) and an `MPI_Iallgather` of the folded chunks.
    pub(crate) fn sum_in_buckets<T: Summand, R>(
        &self,
        what: &'static str,
        lens: &[usize],
        work: impl FnOnce(&mut Buckets<'_, T>) -> R,
    ) -> Result<(R, Vec<Vec<T>>)> {
        let n = self.size();
        let total = lens.iter().try_fold(0usize, |t, &l| t.checked_add(l));
        let total = total.ok_or(DistributedError::TooLarge {
            what,
            len: usize::MAX,
        })?;
        self.same_length(what, total)?;
        let mut slots = lens
            .iter()
            .map(|&len| Slot::new(what, len, n))
            .collect::<Result<Vec<_>>>()?;
        let r = mpi::request::scope(|scope| {
            let mut flights = Flights::new(self, scope, &mut slots);
            let r = work(&mut Buckets::new(&mut flights));
            flights.finish();
            r
        });
        let sums = slots
            .into_iter()
            .map(|s| {
                let mut out = s.out;
                out.truncate(s.len);
                out
            })
            .collect();
        Ok((r, sums))
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

/// One bucket's buffers, outside the requests' scope (MPI reads and writes them until the
/// requests complete).
struct Slot<T> {
    /// The values, padded with zeros to `n·m`: chunk `k` goes to rank `k`.
    send: Vec<T>,
    /// Chunk `me` of every rank, in rank order.
    pieces: Vec<T>,
    /// Their fold.
    mine: Vec<T>,
    /// Every rank's fold: the sum, padded.
    out: Vec<T>,
    len: usize,
}

impl<T: Summand> Slot<T> {
    fn new(what: &'static str, len: usize, n: usize) -> Result<Slot<T>> {
        let padded = len
            .div_ceil(n)
            .checked_mul(n)
            .ok_or(DistributedError::TooLarge { what, len })?;
        count(what, padded)?;
        Ok(Slot {
            send: vec![T::default(); padded],
            pieces: vec![T::default(); padded],
            mine: Vec::new(),
            out: vec![T::default(); padded],
            len,
        })
    }
}

type InFlight<'a, 's, T> = Request<'a, [T], &'s LocalScope<'a>>;

/// The buckets of one sum: those not sent yet, and the requests in flight, oldest first.
struct Flights<'a, 's, T: Summand> {
    world: &'a MpiWorld,
    scope: &'s LocalScope<'a>,
    unsent: Vec<Option<&'a mut Slot<T>>>,
    order: SendOrder,
    /// All-to-alls in flight, with where their fold and its all-gather go.
    exchanging: VecDeque<(InFlight<'a, 's, T>, &'a mut Vec<T>, &'a mut [T])>,
    gathering: VecDeque<InFlight<'a, 's, T>>,
}

impl<'a, 's, T: Summand> Flights<'a, 's, T> {
    fn new(world: &'a MpiWorld, scope: &'s LocalScope<'a>, slots: &'a mut [Slot<T>]) -> Self {
        Flights {
            world,
            scope,
            order: SendOrder::new(slots.len()),
            unsent: slots.iter_mut().map(Some).collect(),
            exchanging: VecDeque::new(),
            gathering: VecDeque::new(),
        }
    }

    fn send(&mut self, b: usize) {
        let Some(Slot {
            send,
            pieces,
            mine,
            out,
            ..
        }) = self.unsent.get_mut(b).and_then(Option::take)
        else {
            return;
        };
        let request =
            self.world
                .exchanges
                .immediate_all_to_all_into(self.scope, &send[..], &mut pieces[..]);
        self.exchanging.push_back((request, mine, &mut out[..]));
    }

    /// Bucket `pieces` (every rank's chunk `me`) has arrived: fold it and send the fold.
    fn gather(&mut self, pieces: &'a [T], mine: &'a mut Vec<T>, out: &'a mut [T]) {
        *mine = fold_in_rank_order(pieces, self.world.size());
        let mine: &'a Vec<T> = mine;
        let request = self
            .world
            .gathers
            .immediate_all_gather_into(self.scope, &mine[..], out);
        self.gathering.push_back(request);
    }

    /// Sends what is left, then waits for everything.
    fn finish(&mut self) {
        for b in self.order.rest() {
            self.send(b);
        }
        while let Some((request, mine, out)) = self.exchanging.pop_front() {
            let pieces = request.wait_for_data();
            self.gather(pieces, mine, out);
        }
        while let Some(request) = self.gathering.pop_front() {
            request.wait_without_status();
        }
    }
}

impl<'a, T: Summand> Exchange<T> for Flights<'a, '_, T> {
    fn values_mut(&mut self, b: usize) -> Option<&mut [T]> {
        let slot = self.unsent.get_mut(b)?.as_mut()?;
        Some(&mut slot.send[..slot.len])
    }

    fn ready(&mut self, b: usize) {
        for b in self.order.ready(b) {
            self.send(b);
        }
    }

    fn progress(&mut self) {
        while let Some((request, mine, out)) = self.exchanging.pop_front() {
            match request.test_with_data() {
                Ok((_, pieces)) => self.gather(pieces, mine, out),
                Err(request) => {
                    self.exchanging.push_front((request, mine, out));
                    break;
                }
            }
        }
        while let Some(request) = self.gathering.pop_front() {
            if let Err(request) = request.test() {
                self.gathering.push_front(request);
                break;
            }
        }
    }
}
