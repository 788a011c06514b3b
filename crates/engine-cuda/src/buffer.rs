//! `Buffer`: one device allocation of `f32`s, counted while it lives.
//!
//! Invariant: every `Buffer` was counted by [`Counters::allocated`] when made and is counted by
//! [`Counters::released`] exactly once, in its `Drop`, when its memory is freed. Tensors share
//! buffers through an `Arc`, so a view or a detached reference never frees one twice.
//!
//! Invariant: a buffer's host copy, when it has one, equals its device contents. Only
//! [`Buffer::upload`] makes one (of data the host already had), and [`Buffer::mem_mut`], the
//! one way to write device memory, drops it. Reading a buffer that has one moves nothing: a
//! training step's labels, uploaded with its batch, are read back as class ids by the loss
//! and its VJP without a transfer or a wait for the queue.

use crate::device::Device;
use crate::error::Result;

/// Device memory for `len` `f32`s.
#[derive(Debug)]
pub struct Buffer<D: Device> {
    mem: D::Mem,
    len: usize,
    /// The contents on the host (see the module's invariant).
    host: Option<Box<[f32]>>,
}

/// The largest upload whose host copy a buffer keeps, in elements: batches of ids and labels
/// are far smaller, and a parameter's copy is dropped by its first update anyway.
pub const HOST_COPY_MAX: usize = 1 << 16;

/// The bytes a buffer of `len` elements occupies (at least one element is allocated).
fn bytes_of(len: usize) -> usize {
    len.max(1) * std::mem::size_of::<f32>()
}

impl<D: Device> Buffer<D> {
    fn counted(mem: D::Mem, len: usize) -> Self {
        D::counters().allocated(bytes_of(len));
        Buffer {
            mem,
            len,
            host: None,
        }
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
        let mut buf = Self::counted(mem, data.len());
        if data.len() <= HOST_COPY_MAX {
            buf.host = Some(data.into());
        }
        Ok(buf)
    }

    /// A device-side copy (with the host copy, when there is one).
    pub fn duplicate(&self) -> Result<Self> {
        let mut copy = Self::counted(D::copy(&self.mem, self.len.max(1))?, self.len);
        copy.host = self.host.clone();
        Ok(copy)
    }

    /// The contents on the host: the host copy when there is one, else a download (which
    /// waits for the work queued before it).
    pub fn download(&self) -> Result<Vec<f32>> {
        if let Some(host) = &self.host {
            return Ok(host.to_vec());
        }
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

    /// The device memory, to be written: the host copy no longer holds and is dropped.
    pub fn mem_mut(&mut self) -> &mut D::Mem {
        self.host = None;
        &mut self.mem
    }
}

impl<D: Device> Drop for Buffer<D> {
    fn drop(&mut self) {
        D::counters().released(bytes_of(self.len));
    }
}
