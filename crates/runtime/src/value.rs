//! What a gradient value must provide to the sweeps.

use crate::error::Result;
use torchlean_spec::{NonFinite, Shape};

/// A value the reverse sweeps can accumulate and release.
///
/// Ownership is explicit, as on a device: a sweep that is done with a value hands it to
/// [`GradValue::drop`], so an engine can recycle the buffer (and a test type can count it).
pub trait GradValue: Sized {
    /// The value's shape.
    fn shape(&self) -> &Shape;

    /// The same data under another shape of equal size (no copy where the engine allows).
    fn retag(self, shape: Shape) -> Result<Self>;

    /// Internal consistency (buffer length equals the shape's size, …).
    fn check(&self) -> Result<()>;

    /// `self + other`, the accumulation `existing + new`. Consumes both, so an engine may add in
    /// place into a buffer it owns exclusively. The sweeps check shapes before calling it.
    fn add(self, other: Self) -> Result<Self>;

    /// Releases the value. Sweeps call this for every value they created or consumed and do not
    /// return; a plain Rust drop is also memory-safe, but only this records the release.
    fn drop(self);

    /// A value that owns its storage exclusively: a no-op when it already does, a copy when it
    /// may alias another value (a VJP may return its upstream buffer). The releasing sweep
    /// stores only owned values ("copy on first store").
    fn into_owned(self) -> Self;

    /// The first NaN or infinite element and how many there are (`None` when every element is
    /// finite; always for exact scalars). Anomaly mode reads values through this, in place.
    fn non_finite(&self) -> Option<NonFinite>;
}

/// Values that can produce a zero of their own shape (for totalizing gradient arrays).
pub trait GradZero: GradValue {
    fn zeros_like(&self) -> Self;
}
