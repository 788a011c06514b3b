//! `Shape`: outermost dimension first, the scalar shape has no dimensions, row-major everywhere.

use crate::error::{Result, SpecError};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The largest element count a shape may declare: 2^32 elements. Larger declared shapes are
/// rejected before anything is allocated, so a graph that declares `[4294967296, 4294967296]`
/// is an error and never an out-of-memory abort.
pub const MAX_ELEMENTS: usize = 1 << 32;

/// Ranks up to this many (scalars, vectors, matrices, NCHW images) are stored inline.
const INLINE: usize = 4;

#[derive(Clone)]
enum Repr {
    /// `len ≤ INLINE`; a byte, so it shares the tag's word and a shape is 40 bytes, not 48.
    Inline {
        len: u8,
        dims: [usize; INLINE],
    },
    Heap(Vec<usize>),
}

/// A tensor shape, outermost dimension first. `Shape::scalar()` has rank 0 and size 1; a zero
/// extent gives size 0. Ranks up to 4 are stored inline, so a shape is 40 bytes, cloning it is a copy,
/// and never allocates on the engines' hot paths.
#[derive(Clone)]
pub struct Shape(Repr);

// every value, graph node and op attribute holds shapes: a regression here costs every node of a
// million-node graph (`docs/ARCHITECTURE.md`, "Memory per node")
const _: () = assert!(std::mem::size_of::<Shape>() <= 40);

impl PartialEq for Shape {
    /// Compares extents element by element: ranks are tiny and this is on every op's path,
    /// where a slice comparison's `memcmp` call costs more than the comparison.
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        let (x, y) = (self.dims(), other.dims());
        x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p == q)
    }
}

impl Eq for Shape {}

impl std::hash::Hash for Shape {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.dims().hash(state)
    }
}

impl Default for Shape {
    fn default() -> Self {
        Shape::scalar()
    }
}

impl Serialize for Shape {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.dims().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Vec::<usize>::deserialize(d).map(Shape::new)
    }
}

impl Shape {
    /// The rank-0 shape.
    pub fn scalar() -> Self {
        Shape(Repr::Inline {
            len: 0,
            dims: [0; INLINE],
        })
    }

    /// A shape from its extents, outermost first.
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        let v = dims.into();
        if v.len() <= INLINE {
            Self::from_slice(&v)
        } else {
            Shape(Repr::Heap(v))
        }
    }

    /// A shape from a slice of extents.
    pub fn from_slice(dims: &[usize]) -> Self {
        if dims.len() <= INLINE {
            let mut a = [0; INLINE];
            a[..dims.len()].copy_from_slice(dims);
            Shape(Repr::Inline {
                len: dims.len() as u8, // ≤ INLINE
                dims: a,
            })
        } else {
            Shape(Repr::Heap(dims.to_vec()))
        }
    }

    /// The extents, outermost first.
    #[inline]
    pub fn dims(&self) -> &[usize] {
        match &self.0 {
            Repr::Inline { len, dims } => &dims[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims().len()
    }

    /// Extent of axis `axis`, if it exists.
    pub fn dim(&self, axis: usize) -> Option<usize> {
        self.dims().get(axis).copied()
    }

    /// Number of elements (product of the extents, 1 for the scalar shape).
    ///
    /// Only call this on shapes already validated with [`Shape::checked_size`] (every shape
    /// held by a tensor or accepted by a checker is); on an unvalidated shape it saturates
    /// instead of wrapping.
    pub fn size(&self) -> usize {
        self.dims()
            .iter()
            .fold(1usize, |acc, &d| acc.saturating_mul(d))
    }

    /// Number of elements, or an error if the product overflows `usize` or exceeds
    /// [`MAX_ELEMENTS`].
    pub fn checked_size(&self) -> Result<usize> {
        let mut acc: usize = 1;
        for &d in self.dims() {
            acc = acc.checked_mul(d).ok_or_else(|| SpecError::ShapeOverflow {
                dims: self.dims().to_vec(),
            })?;
        }
        if acc > MAX_ELEMENTS {
            return Err(SpecError::ShapeTooLarge {
                shape: self.clone(),
                elements: acc,
                limit: MAX_ELEMENTS,
            });
        }
        Ok(acc)
    }

    /// Row-major strides (in elements).
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1usize; self.rank()];
        for i in (0..self.rank().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1].saturating_mul(self.dims()[i + 1]);
        }
        strides
    }

    /// Flat row-major offset of a multi-index, or an error if it is out of bounds.
    pub fn offset(&self, index: &[usize]) -> Result<usize> {
        if index.len() != self.rank() || index.iter().zip(self.dims()).any(|(i, d)| i >= d) {
            return Err(SpecError::Index {
                index: index.to_vec(),
                shape: self.clone(),
            });
        }
        let mut off = 0usize;
        for (i, d) in index.iter().zip(self.dims()) {
            off = off * d + i;
        }
        Ok(off)
    }

    /// The multi-index of a flat row-major offset (`offset < size`).
    pub fn unravel(&self, mut offset: usize) -> Vec<usize> {
        let mut index = vec![0usize; self.rank()];
        for axis in (0..self.rank()).rev() {
            let d = self.dims()[axis];
            if d > 0 {
                index[axis] = offset % d;
                offset /= d;
            }
        }
        index
    }

    /// Calls `f(offset, index)` for every element in row-major order: [`Shape::unravel`] of
    /// each offset, without an allocation per element (an odometer over one index).
    pub fn for_each_index(&self, mut f: impl FnMut(usize, &[usize])) {
        let dims = self.dims();
        let n = self.size();
        let mut index = vec![0usize; dims.len()];
        for offset in 0..n {
            f(offset, &index);
            for axis in (0..dims.len()).rev() {
                index[axis] += 1;
                if index[axis] < dims[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
    }

    /// The shape with `axis` removed.
    pub fn remove_axis(&self, axis: usize) -> Shape {
        let mut dims = self.dims().to_vec();
        if axis < dims.len() {
            dims.remove(axis);
        }
        Shape::from_slice(&dims)
    }

    /// `[prefix product, axis extent, suffix product]` around `axis` (for reductions along one
    /// axis of a row-major buffer).
    pub fn split_at_axis(&self, axis: usize) -> (usize, usize, usize) {
        let d = self.dims();
        let outer = d[..axis].iter().product();
        let n = d[axis];
        let inner = d[axis + 1..].iter().product();
        (outer, n, inner)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape::from_slice(&v)
    }
}

impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape::from_slice(v)
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape::from_slice(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_each_index_visits_what_unravel_gives_in_order() {
        for dims in [
            vec![],
            vec![0],
            vec![3],
            vec![2, 0, 4],
            vec![2, 3, 4],
            vec![1, 5, 1, 2],
            vec![3, 1, 2, 2, 3],
        ] {
            let s = Shape::new(dims.clone());
            let mut seen = Vec::new();
            s.for_each_index(|off, idx| seen.push((off, idx.to_vec())));
            let want: Vec<_> = (0..s.size()).map(|off| (off, s.unravel(off))).collect();
            assert_eq!(seen, want, "{dims:?}");
        }
    }

    #[test]
    fn the_element_limit_is_inclusive() {
        assert_eq!(
            Shape::from([MAX_ELEMENTS]).checked_size().ok(),
            Some(MAX_ELEMENTS)
        );
        assert!(matches!(
            Shape::from([MAX_ELEMENTS + 1]).checked_size(),
            Err(SpecError::ShapeTooLarge { .. })
        ));
    }

    #[test]
    fn ranks_up_to_four_are_inline_and_every_rank_round_trips() {
        for rank in 0..=6 {
            let dims: Vec<usize> = (1..=rank).collect();
            let s = Shape::from_slice(&dims);
            assert_eq!(s.dims(), &dims[..]);
            assert_eq!(s, Shape::new(dims.clone()));
            assert_eq!(matches!(s.0, Repr::Inline { .. }), rank <= INLINE);
        }
    }

    #[test]
    fn scalar_has_rank_zero_and_size_one() {
        let s = Shape::scalar();
        assert_eq!(s.rank(), 0);
        assert_eq!(s.size(), 1);
        assert_eq!(s.checked_size(), Ok(1));
        assert_eq!(s.to_string(), "[]");
    }

    #[test]
    fn high_ranks_spill_to_the_heap_and_compare_by_value() {
        let big = Shape::from([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(big.rank(), 8);
        assert_eq!(big.size(), 40320);
        assert_eq!(big, Shape::new(vec![1, 2, 3, 4, 5, 6, 7, 8]));
        assert_ne!(Shape::from([2, 3]), Shape::from([2, 3, 1]));
        assert_eq!(Shape::from([2, 3]).remove_axis(0), Shape::from([3]));
        let json = serde_json::to_string(&big).unwrap();
        assert_eq!(json, "[1,2,3,4,5,6,7,8]");
        assert_eq!(serde_json::from_str::<Shape>(&json).unwrap(), big);
    }

    #[test]
    fn zero_extent_gives_size_zero() {
        assert_eq!(Shape::from([3, 0, 2]).checked_size(), Ok(0));
    }

    #[test]
    fn checked_size_errors_on_overflow_instead_of_wrapping() {
        let s = Shape::from([4294967296, 4294967296]);
        assert!(matches!(
            s.checked_size(),
            Err(SpecError::ShapeOverflow { .. })
        ));
        // saturates, never wraps to a small number
        assert_eq!(s.size(), usize::MAX);
    }

    #[test]
    fn checked_size_rejects_absurd_but_representable_sizes() {
        let s = Shape::from([1 << 20, 1 << 20]);
        assert!(matches!(
            s.checked_size(),
            Err(SpecError::ShapeTooLarge { .. })
        ));
    }

    #[test]
    fn offsets_are_row_major_and_unravel_inverts_them() {
        let s = Shape::from([2, 3, 4]);
        assert_eq!(s.strides(), vec![12, 4, 1]);
        assert_eq!(s.offset(&[1, 2, 3]), Ok(23));
        for off in 0..s.size() {
            assert_eq!(s.offset(&s.unravel(off)), Ok(off));
        }
        assert!(s.offset(&[2, 0, 0]).is_err());
        assert!(s.offset(&[0, 0]).is_err());
    }
}
