//! Blocking collectives: the caller's slices, done when they return.

use super::{void, void_mut, Communicator};
use crate::error::Result;
use crate::types::{Element, Op};
use libnexar_sys as sys;
use std::ptr;

impl Communicator {
    /// Reduces `buf` element-wise over every rank, in place; every rank ends
    /// with the result (floats bit-identical everywhere).
    pub fn all_reduce<T: Element>(&self, buf: &mut [T], op: Op) -> Result<()> {
        let comm = self.as_raw();
        self.in_place("all_reduce", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place guarantees; sendbuf == recvbuf means in place.
            unsafe { sys::nexar_allreduce(comm, d, d, n, T::DTYPE.code(), op.code(), done, ud) }
        })
    }

    /// Copies `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: u32) -> Result<()> {
        let comm = self.as_raw();
        self.in_place("broadcast", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place guarantees.
            unsafe { sys::nexar_broadcast(comm, d, n, T::DTYPE.code(), root, done, ud) }
        })
    }

    /// Reduces `buf` over every rank into `root`'s `buf`, in place; the other
    /// ranks' `buf` is left as it was.
    pub fn reduce<T: Element>(&self, buf: &mut [T], op: Op, root: u32) -> Result<()> {
        let comm = self.as_raw();
        self.in_place("reduce", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place guarantees; in place.
            unsafe { sys::nexar_reduce(comm, d, d, n, T::DTYPE.code(), op.code(), root, done, ud) }
        })
    }

    /// Every rank's `send`, concatenated in rank order, into `recv`
    /// (`recv.len() == send.len() * size()`).
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const OP: &str = "all_gather";
        let want = self.times_size(OP, send.len())?;
        if recv.len() != want {
            return Err(self.invalid(
                OP,
                format!(
                    "recv holds {} elements; {} ranks times {} are needed",
                    recv.len(),
                    self.size,
                    send.len()
                ),
            ));
        }
        // SAFETY: send is readable and recv writable for their checked lengths
        // during the blocking call; they cannot overlap (& and &mut).
        let st = unsafe {
            sys::nexar_allgather(
                self.as_raw(),
                void(send.as_ptr()),
                void_mut(recv.as_mut_ptr()),
                send.len(),
                T::DTYPE.code(),
                None,
                ptr::null_mut(),
            )
        };
        self.check(OP, st)
    }

    /// `send` holds `size()` blocks of `recv.len()` elements; rank r gets
    /// block r reduced over every rank.
    pub fn reduce_scatter<T: Element>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        const OP: &str = "reduce_scatter";
        let want = self.times_size(OP, recv.len())?;
        if send.len() != want {
            return Err(self.invalid(
                OP,
                format!(
                    "send holds {} elements; {} ranks times recv's {} are needed",
                    send.len(),
                    self.size,
                    recv.len()
                ),
            ));
        }
        // SAFETY: lengths checked; blocking call; no overlap.
        let st = unsafe {
            sys::nexar_reduce_scatter(
                self.as_raw(),
                void(send.as_ptr()),
                void_mut(recv.as_mut_ptr()),
                recv.len(),
                T::DTYPE.code(),
                op.code(),
                None,
                ptr::null_mut(),
            )
        };
        self.check(OP, st)
    }

    /// `send` holds `size()` equal blocks; block j goes to rank j, and
    /// `recv`'s block i comes from rank i (`recv.len() == send.len()`).
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const OP: &str = "all_to_all";
        if send.len() != recv.len() {
            return Err(self.invalid(
                OP,
                format!(
                    "send ({}) and recv ({}) must hold the same number of elements",
                    send.len(),
                    recv.len()
                ),
            ));
        }
        let block = self.block_len(OP, "send", send.len())?;
        // SAFETY: lengths checked; blocking call; no overlap.
        let st = unsafe {
            sys::nexar_alltoall(
                self.as_raw(),
                void(send.as_ptr()),
                void_mut(recv.as_mut_ptr()),
                block,
                T::DTYPE.code(),
                None,
                ptr::null_mut(),
            )
        };
        self.check(OP, st)
    }

    /// Every rank's `send`, concatenated in rank order, into `root`'s `recv`
    /// (`send.len() * size()` elements). Other ranks' `recv` is not used
    /// (pass `&mut []`).
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        const OP: &str = "gather";
        let recv_ptr = if self.rank == root {
            let want = self.times_size(OP, send.len())?;
            if recv.len() != want {
                return Err(self.invalid(
                    OP,
                    format!(
                        "the root's recv holds {} elements; {} ranks times {} are needed",
                        recv.len(),
                        self.size,
                        send.len()
                    ),
                ));
            }
            void_mut(recv.as_mut_ptr())
        } else {
            ptr::null_mut()
        };
        // SAFETY: send readable; recv (root only) writable for its checked
        // length; blocking call; no overlap.
        let st = unsafe {
            sys::nexar_gather(
                self.as_raw(),
                void(send.as_ptr()),
                recv_ptr,
                send.len(),
                T::DTYPE.code(),
                root,
                None,
                ptr::null_mut(),
            )
        };
        self.check(OP, st)
    }

    /// `root`'s `send` holds `size()` blocks of `recv.len()` elements; rank r
    /// gets block r in `recv`. Other ranks' `send` is not used (pass `&[]`).
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        const OP: &str = "scatter";
        let send_ptr = if self.rank == root {
            let want = self.times_size(OP, recv.len())?;
            if send.len() != want {
                return Err(self.invalid(
                    OP,
                    format!(
                        "the root's send holds {} elements; {} ranks times recv's {} are needed",
                        send.len(),
                        self.size,
                        recv.len()
                    ),
                ));
            }
            void(send.as_ptr())
        } else {
            ptr::null()
        };
        // SAFETY: send (root only) readable for its checked length; recv
        // writable; blocking call; no overlap.
        let st = unsafe {
            sys::nexar_scatter(
                self.as_raw(),
                send_ptr,
                void_mut(recv.as_mut_ptr()),
                recv.len(),
                T::DTYPE.code(),
                root,
                None,
                ptr::null_mut(),
            )
        };
        self.check(OP, st)
    }

    /// Inclusive prefix reduction over ranks, in place: rank r ends with
    /// buf(0) op ... op buf(r).
    pub fn scan<T: Element>(&self, buf: &mut [T], op: Op) -> Result<()> {
        let comm = self.as_raw();
        self.in_place("scan", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place guarantees; in place.
            unsafe { sys::nexar_scan(comm, d, d, n, T::DTYPE.code(), op.code(), done, ud) }
        })
    }

    /// Exclusive prefix reduction over ranks, in place: rank r ends with
    /// buf(0) op ... op buf(r-1); rank 0's `buf` is left as it was.
    pub fn exscan<T: Element>(&self, buf: &mut [T], op: Op) -> Result<()> {
        let comm = self.as_raw();
        self.in_place("exscan", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place guarantees; in place.
            unsafe { sys::nexar_exscan(comm, d, d, n, T::DTYPE.code(), op.code(), done, ud) }
        })
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        // SAFETY: a live handle; blocking call.
        let st = unsafe { sys::nexar_barrier(self.as_raw(), None, ptr::null_mut()) };
        self.check("barrier", st)
    }
}
