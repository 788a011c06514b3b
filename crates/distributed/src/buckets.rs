//! A sum over the ranks in buckets, sent while the caller is still working: the data-parallel
//! trainers hand each bucket of gradients over as soon as the backward sweep has finished it,
//! so that moving one bucket overlaps computing the next (as PyTorch's DDP does).
//!
//! Invariant: each element's sum is [`crate::World::all_reduce_sum`]'s, bit for bit: every
//! rank's value of that element added in rank order, starting from rank 0's. Buckets change
//! when values travel, never how they are added.

use crate::Summand;

/// The buckets of one [`crate::World::sum_in_buckets`]: write a bucket's values, then say it
/// is [`Buckets::ready`]; the buckets are sent in order, each as soon as it and every bucket
/// before it are ready. Those the caller has not called ready when its work ends are sent
/// then, with zeros where nothing was written.
pub struct Buckets<'b, T> {
    exchange: &'b mut dyn Exchange<T>,
}

impl<T> std::fmt::Debug for Buckets<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buckets").finish_non_exhaustive()
    }
}

impl<'b, T: Summand> Buckets<'b, T> {
    pub(crate) fn new(exchange: &'b mut dyn Exchange<T>) -> Self {
        Buckets { exchange }
    }

    /// Bucket `b`'s values (zeros at first), to write; `None` once it has been sent (or when
    /// there is no bucket `b`).
    pub fn values_mut(&mut self, b: usize) -> Option<&mut [T]> {
        self.exchange.values_mut(b)
    }

    /// Bucket `b` holds its values: it is sent when every bucket before it is ready too.
    pub fn ready(&mut self, b: usize) {
        self.exchange.ready(b);
    }

    /// Lets the buckets in flight move on (MPI progresses a non-blocking collective only when
    /// it is called); cheap, to call often while working.
    pub fn progress(&mut self) {
        self.exchange.progress();
    }
}

/// What a world does with buckets: over MPI, non-blocking collectives; for one process,
/// nothing.
pub(crate) trait Exchange<T> {
    fn values_mut(&mut self, b: usize) -> Option<&mut [T]>;
    fn ready(&mut self, b: usize);
    fn progress(&mut self);
}

/// The buckets of a world of one: the sum is the values themselves.
pub(crate) struct Kept<T> {
    pub(crate) buckets: Vec<Vec<T>>,
    sent: Vec<bool>,
}

impl<T: Summand> Kept<T> {
    pub(crate) fn new(lens: &[usize]) -> Self {
        Kept {
            buckets: lens.iter().map(|&len| vec![T::default(); len]).collect(),
            sent: vec![false; lens.len()],
        }
    }
}

impl<T: Summand> Exchange<T> for Kept<T> {
    fn values_mut(&mut self, b: usize) -> Option<&mut [T]> {
        match self.sent.get(b) {
            Some(false) => Some(&mut self.buckets[b]),
            _ => None,
        }
    }

    fn ready(&mut self, b: usize) {
        if let Some(sent) = self.sent.get_mut(b) {
            *sent = true;
        }
    }

    fn progress(&mut self) {}
}

/// In which order buckets go: bucket `b` is sent once it and every bucket before it are ready.
#[derive(Debug)]
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) struct SendOrder {
    ready: Vec<bool>,
    next: usize,
}

#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
impl SendOrder {
    pub(crate) fn new(buckets: usize) -> Self {
        SendOrder {
            ready: vec![false; buckets],
            next: 0,
        }
    }

    /// Marks `b` ready; returns the buckets to send now, in order.
    pub(crate) fn ready(&mut self, b: usize) -> std::ops::Range<usize> {
        if let Some(r) = self.ready.get_mut(b) {
            *r = true;
        }
        let from = self.next;
        while self.ready.get(self.next) == Some(&true) {
            self.next += 1;
        }
        from..self.next
    }

    /// Every bucket not yet sent, in order (the work is over).
    pub(crate) fn rest(&mut self) -> std::ops::Range<usize> {
        let from = self.next;
        self.next = self.ready.len();
        from..self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_go_in_order_each_once() {
        let mut order = SendOrder::new(4);
        assert!(order.ready(1).is_empty(), "bucket 0 is not ready yet");
        assert_eq!(order.ready(0), 0..2);
        assert!(
            order.ready(0).is_empty(),
            "a second ready sends nothing again"
        );
        assert!(order.ready(9).is_empty(), "no bucket 9");
        assert_eq!(order.rest(), 2..4);
        assert!(order.ready(3).is_empty());
        assert!(order.rest().is_empty());
    }

    #[test]
    fn one_process_keeps_its_values_and_refuses_writes_after_ready() {
        let mut kept = Kept::<f64>::new(&[2, 0, 1]);
        let mut buckets = Buckets::new(&mut kept);
        buckets.values_mut(0).expect("bucket 0")[1] = 2.5;
        buckets.ready(0);
        assert!(buckets.values_mut(0).is_none());
        assert!(buckets.values_mut(3).is_none());
        assert_eq!(kept.buckets, vec![vec![0.0, 2.5], vec![], vec![0.0]]);
    }
}
