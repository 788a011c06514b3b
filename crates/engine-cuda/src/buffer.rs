//! `Buffer`: one device allocation of `f32`s, counted while it lives.
//!
//! Invariant: every `Buffer` was counted by [`Counters::allocated`] when made and is counted by
//! [`Counters::released`] exactly once, in its `Drop`, when its memory is freed. Tensors share
//! buffers through an `Arc`, so a view or a detached reference never frees one twice.

use crate::device::Device;
use crate::error::Result;

/// Device memory for `len` `f32`s.
#[derive(Debug)]
pub struct Buffer<D: Device> {
    mem: D::Mem,
    len: usize,
}

/// The bytes a buffer of `len` elements occupies (at least one element is allocated).
fn bytes_of(len: usize) -> usize {
    len.max(1) * std::mem::size_of::<f32>()
}

impl<D: Device> Buffer<D> {
    fn counted(mem: D::Mem, len: usize) -> Self {
        D::counters().allocated(bytes_of(len));
        Buffer { mem, len }
    }

    /// Contents unspecified: the caller's kernel writes every element.
    pub fn uninit(len: usize) -> Result<Self> {
        Ok(Self::counted(D::alloc(len.max(1))?, len))
    }

    pub fn zeros(len: usize) -> Result<Self> {
        Ok(Self::counted(D::alloc_zeros(len.max(1))?, len))
    }

    pub fn upload(data: &[f32]) -> Result<Self> {
        let mem = if data.is_empty() {
            D::alloc_zeros(1)?
        } else {
            D::counters().uploaded();
            D::upload(data)?
        };
        Ok(Self::counted(mem, data.len()))
    }

    /// A device-side copy.
    pub fn duplicate(&self) -> Result<Self> {
        Ok(Self::counted(
            D::copy(&self.mem, self.len.max(1))?,
            self.len,
        ))
    }

    pub fn download(&self) -> Result<Vec<f32>> {
        if self.len == 0 {
            return Ok(Vec::new());
        }
        D::counters().downloaded();
        D::download(&self.mem, self.len)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn mem(&self) -> &D::Mem {
        &self.mem
    }

    pub fn mem_mut(&mut self) -> &mut D::Mem {
        &mut self.mem
    }
}

impl<D: Device> Drop for Buffer<D> {
    fn drop(&mut self) {
        D::counters().released(bytes_of(self.len));
    }
}
