//! Asynchronous collectives: owned buffers, given back by a [`Pending`].

use super::{void, void_mut, Communicator};
use crate::pending::{self, InOut, Nothing, Pending};
use crate::types::{Element, Op};
use libnexar_sys as sys;
use std::ptr;

impl Communicator {
    /// [`all_reduce`](Communicator::all_reduce) without blocking: takes the
    /// buffer and gives it back, reduced.
    pub fn all_reduce_async<T: Element>(&self, buf: Vec<T>, op: Op) -> Pending<Vec<T>> {
        let comm = self.as_raw();
        self.in_place_async("all_reduce", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place_async guarantees; in place.
            unsafe { sys::nexar_allreduce(comm, d, d, n, T::DTYPE.code(), op.code(), done, ud) }
        })
    }

    /// [`broadcast`](Communicator::broadcast) without blocking.
    pub fn broadcast_async<T: Element>(&self, buf: Vec<T>, root: u32) -> Pending<Vec<T>> {
        let comm = self.as_raw();
        self.in_place_async("broadcast", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place_async guarantees.
            unsafe { sys::nexar_broadcast(comm, d, n, T::DTYPE.code(), root, done, ud) }
        })
    }

    /// [`reduce`](Communicator::reduce) without blocking.
    pub fn reduce_async<T: Element>(&self, buf: Vec<T>, op: Op, root: u32) -> Pending<Vec<T>> {
        let comm = self.as_raw();
        self.in_place_async("reduce", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place_async guarantees; in place.
            unsafe { sys::nexar_reduce(comm, d, d, n, T::DTYPE.code(), op.code(), root, done, ud) }
        })
    }

    /// [`scan`](Communicator::scan) without blocking.
    pub fn scan_async<T: Element>(&self, buf: Vec<T>, op: Op) -> Pending<Vec<T>> {
        let comm = self.as_raw();
        self.in_place_async("scan", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place_async guarantees; in place.
            unsafe { sys::nexar_scan(comm, d, d, n, T::DTYPE.code(), op.code(), done, ud) }
        })
    }

    /// [`exscan`](Communicator::exscan) without blocking.
    pub fn exscan_async<T: Element>(&self, buf: Vec<T>, op: Op) -> Pending<Vec<T>> {
        let comm = self.as_raw();
        self.in_place_async("exscan", buf, |d, n, done, ud| {
            // SAFETY: d[0..n) as in_place_async guarantees; in place.
            unsafe { sys::nexar_exscan(comm, d, d, n, T::DTYPE.code(), op.code(), done, ud) }
        })
    }

    /// [`all_gather`](Communicator::all_gather) without blocking: yields a new
    /// vector of `send.len() * size()` elements.
    pub fn all_gather_async<T: Element>(&self, send: Vec<T>) -> Pending<Vec<T>> {
        const OP: &str = "all_gather";
        let total = match self.times_size(OP, send.len()) {
            Ok(n) => n,
            Err(e) => return Pending::failed(e.with_buffer(send)),
        };
        let comm = self.as_raw();
        let payload = InOut {
            input: send,
            output: vec![T::ZERO; total],
        };
        pending::submit(
            OP,
            self.rank,
            payload,
            |p| {
                (
                    void(p.input.as_ptr()),
                    void_mut(p.output.as_mut_ptr()),
                    p.input.len(),
                )
            },
            |(s, d, n), done, ud| {
                // SAFETY: both buffers live in the shared record until done
                // ran; the output holds n * size elements.
                unsafe { sys::nexar_allgather(comm, s, d, n, T::DTYPE.code(), done, ud) }
            },
        )
    }

    /// [`reduce_scatter`](Communicator::reduce_scatter) without blocking:
    /// `send` holds `size()` blocks; yields this rank's reduced block.
    pub fn reduce_scatter_async<T: Element>(&self, send: Vec<T>, op: Op) -> Pending<Vec<T>> {
        const OP: &str = "reduce_scatter";
        let block = match self.block_len(OP, "send", send.len()) {
            Ok(b) => b,
            Err(e) => return Pending::failed(e.with_buffer(send)),
        };
        let comm = self.as_raw();
        let payload = InOut {
            input: send,
            output: vec![T::ZERO; block],
        };
        pending::submit(
            OP,
            self.rank,
            payload,
            |p| {
                (
                    void(p.input.as_ptr()),
                    void_mut(p.output.as_mut_ptr()),
                    p.output.len(),
                )
            },
            |(s, d, n), done, ud| {
                // SAFETY: both buffers live in the shared record until done
                // ran; the input holds n * size elements.
                unsafe {
                    sys::nexar_reduce_scatter(comm, s, d, n, T::DTYPE.code(), op.code(), done, ud)
                }
            },
        )
    }

    /// [`all_to_all`](Communicator::all_to_all) without blocking: yields a new
    /// vector whose block i came from rank i.
    pub fn all_to_all_async<T: Element>(&self, send: Vec<T>) -> Pending<Vec<T>> {
        const OP: &str = "all_to_all";
        let block = match self.block_len(OP, "send", send.len()) {
            Ok(b) => b,
            Err(e) => return Pending::failed(e.with_buffer(send)),
        };
        let comm = self.as_raw();
        let payload = InOut {
            output: vec![T::ZERO; send.len()],
            input: send,
        };
        pending::submit(
            OP,
            self.rank,
            payload,
            |p| (void(p.input.as_ptr()), void_mut(p.output.as_mut_ptr())),
            |(s, d), done, ud| {
                // SAFETY: both buffers (block * size elements) live in the
                // shared record until done ran.
                unsafe { sys::nexar_alltoall(comm, s, d, block, T::DTYPE.code(), done, ud) }
            },
        )
    }

    /// [`gather`](Communicator::gather) without blocking: yields every rank's
    /// `send` concatenated on `root`, an empty vector elsewhere.
    pub fn gather_async<T: Element>(&self, send: Vec<T>, root: u32) -> Pending<Vec<T>> {
        const OP: &str = "gather";
        let is_root = self.rank == root;
        let total = if is_root {
            match self.times_size(OP, send.len()) {
                Ok(n) => n,
                Err(e) => return Pending::failed(e.with_buffer(send)),
            }
        } else {
            0
        };
        let comm = self.as_raw();
        let payload = InOut {
            input: send,
            output: vec![T::ZERO; total],
        };
        pending::submit(
            OP,
            self.rank,
            payload,
            |p| {
                let d = if is_root {
                    void_mut(p.output.as_mut_ptr())
                } else {
                    ptr::null_mut()
                };
                (void(p.input.as_ptr()), d, p.input.len())
            },
            |(s, d, n), done, ud| {
                // SAFETY: both buffers live in the shared record until done
                // ran; the root's output holds n * size elements.
                unsafe { sys::nexar_gather(comm, s, d, n, T::DTYPE.code(), root, done, ud) }
            },
        )
    }

    /// [`scatter`](Communicator::scatter) without blocking: `root`'s `send`
    /// holds `size()` blocks of `count` elements (other ranks' is not used);
    /// yields this rank's block.
    pub fn scatter_async<T: Element>(
        &self,
        send: Vec<T>,
        count: usize,
        root: u32,
    ) -> Pending<Vec<T>> {
        const OP: &str = "scatter";
        let is_root = self.rank == root;
        if is_root {
            match self.times_size(OP, count) {
                Ok(n) if n == send.len() => {}
                Ok(_) => {
                    let err = self.invalid(
                        OP,
                        format!(
                            "the root's send holds {} elements; {} ranks times {} are needed",
                            send.len(),
                            self.size,
                            count
                        ),
                    );
                    return Pending::failed(err.with_buffer(send));
                }
                Err(e) => return Pending::failed(e.with_buffer(send)),
            }
        }
        let comm = self.as_raw();
        let payload = InOut {
            input: send,
            output: vec![T::ZERO; count],
        };
        pending::submit(
            OP,
            self.rank,
            payload,
            |p| {
                let s = if is_root {
                    void(p.input.as_ptr())
                } else {
                    ptr::null()
                };
                (s, void_mut(p.output.as_mut_ptr()))
            },
            |(s, d), done, ud| {
                // SAFETY: both buffers live in the shared record until done
                // ran; the root's input holds count * size elements.
                unsafe { sys::nexar_scatter(comm, s, d, count, T::DTYPE.code(), root, done, ud) }
            },
        )
    }

    /// [`barrier`](Communicator::barrier) without blocking.
    pub fn barrier_async(&self) -> Pending<()> {
        let comm = self.as_raw();
        pending::submit(
            "barrier",
            self.rank,
            Nothing,
            |_| (),
            |(), done, ud| {
                // SAFETY: a live handle; nothing to keep alive.
                unsafe { sys::nexar_barrier(comm, done, ud) }
            },
        )
    }
}
