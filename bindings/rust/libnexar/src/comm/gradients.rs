//! Gradient traffic: the bucketed allreduce of many slices and the
//! compressed allreduce with a [`Compressor`] (blocking).

use super::{void, void_mut, Communicator};
use crate::error::{Error, Result};
use crate::types::{Element, Op};
use libnexar_sys as sys;
use std::ptr::{self, NonNull};

/// Which elements a [`Compressor`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressKind {
    /// The k largest magnitudes, sent with their positions.
    TopK,
    /// k positions drawn from a seed every rank shares: only values travel.
    RandomK,
}

/// A gradient compressor with error feedback (`nexar_compressor_t`): each
/// call keeps k = max(1, ratio * count) elements of (input + residual) and
/// keeps the rest as the next residual. Serves one call at a time (`&mut`).
#[derive(Debug)]
pub struct Compressor {
    raw: NonNull<sys::nexar_compressor_t>,
    count: usize,
    dtype: sys::nexar_dtype_t,
}

// SAFETY: the handle is used by one call at a time (&mut self), from any thread.
unsafe impl Send for Compressor {}

impl Compressor {
    /// A compressor for slices of `count` elements of `T` (f32, f64, F16, Bf16).
    pub fn new<T: Element>(
        kind: CompressKind,
        ratio: f64,
        count: usize,
        seed: u64,
    ) -> Result<Self> {
        let code = match kind {
            CompressKind::TopK => sys::NEXAR_COMPRESS_TOPK,
            CompressKind::RandomK => sys::NEXAR_COMPRESS_RANDOMK,
        };
        let mut raw = ptr::null_mut();
        // SAFETY: raw is a valid place for the handle.
        let st = unsafe {
            sys::nexar_compressor_create(&mut raw, code, ratio, count, T::DTYPE.code(), seed)
        };
        if st != sys::NEXAR_OK {
            return Err(Error::last(st, "compressor_create", None));
        }
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("compressor_create", None, "no handle".into()))?;
        Ok(Compressor {
            raw,
            count,
            dtype: T::DTYPE.code(),
        })
    }

    /// Zeroes the residual.
    pub fn reset(&mut self) {
        // SAFETY: a live handle.
        unsafe { sys::nexar_compressor_reset(self.raw.as_ptr()) };
    }
}

impl Drop for Compressor {
    fn drop(&mut self) {
        // SAFETY: a live handle, released once.
        unsafe { sys::nexar_compressor_destroy(self.raw.as_ptr()) };
    }
}

impl Communicator {
    /// Reduces every slice of `tensors` element-wise over every rank, in
    /// place, fused into buckets of about `bucket_bytes` (0:
    /// `NEXAR_BUCKET_BYTES`, default 25 MiB) that are reduced while the next
    /// ones are packed. Every rank passes slices of the same lengths in the
    /// same order.
    pub fn all_reduce_bucketed<T: Element>(
        &self,
        tensors: &mut [&mut [T]],
        op: Op,
        bucket_bytes: usize,
    ) -> Result<()> {
        let list: Vec<sys::nexar_tensor_t> = tensors
            .iter_mut()
            .map(|t| sys::nexar_tensor_t {
                buf: void_mut(t.as_mut_ptr()),
                count: t.len(),
            })
            .collect();
        // SAFETY: every slice is writable for its length and borrowed
        // exclusively during the blocking call; list outlives it.
        let st = unsafe {
            sys::nexar_allreduce_bucketed(
                self.as_raw(),
                list.as_ptr(),
                list.len(),
                T::DTYPE.code(),
                op.code(),
                bucket_bytes,
                None,
                ptr::null_mut(),
            )
        };
        self.check("all_reduce_bucketed", st)
    }

    /// `recv` = the sum over ranks of each rank's compressed `send` (plus
    /// its residual), zero where no rank sent an element. Both have the
    /// compressor's length and type; every rank's compressor has the same
    /// parameters ([`Status::Mismatch`](crate::Status::Mismatch) otherwise).
    pub fn all_reduce_compressed<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        compressor: &mut Compressor,
    ) -> Result<()> {
        const OP: &str = "all_reduce_compressed";
        if send.len() != compressor.count
            || recv.len() != compressor.count
            || T::DTYPE.code() != compressor.dtype
        {
            return Err(self.invalid(
                OP,
                format!(
                    "send ({}) and recv ({}) must be the compressor's {} elements of its type",
                    send.len(),
                    recv.len(),
                    compressor.count
                ),
            ));
        }
        // SAFETY: lengths checked; blocking call; no overlap (& and &mut).
        let st = unsafe {
            sys::nexar_allreduce_compressed(
                self.as_raw(),
                void(send.as_ptr()),
                void_mut(recv.as_mut_ptr()),
                send.len(),
                T::DTYPE.code(),
                compressor.raw.as_ptr(),
                None,
                ptr::null_mut(),
            )
        };
        self.check(OP, st)
    }
}
