//! The communicator: lifecycle, blocking and asynchronous operations, RPC.

use crate::error::{Error, Result, Status};
use crate::options::Options;
use crate::pending::{
    self, in_callback, lock_unless_in_callback, InOut, InPlace, Nothing, Payload, Pending,
};
use crate::rpc::{self, HandlerBox, Handlers, RpcPayload, RpcResult};
use crate::types::{Element, Op};
use libnexar_sys as sys;
use std::fmt;
use std::mem::{size_of, ManuallyDrop};
use std::os::raw::c_void;
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::time::Duration;

/// One rank's view of a group of processes (`nexar_comm_t`).
///
/// Made by [`bootstrap_local`](Communicator::bootstrap_local) (a whole world
/// inside this process), [`init_from_env`](Communicator::init_from_env) or
/// [`join`](Communicator::join) (one rank of a cluster), or
/// [`split`](Communicator::split) ([`split_async`](Communicator::split_async)).
/// Dropping it destroys the handle: pending operations complete with
/// [`Status::Closed`] first.
///
/// Every method takes `&self` and may be called from any thread at once
/// (`Communicator` is `Send + Sync`; share it with `Arc` or scoped threads).
/// Collectives must be issued in the same order on every rank; ranks that
/// disagree get [`Status::Mismatch`], never a hang.
///
/// Blocking methods borrow slices and return when the operation is complete.
/// `*_async` methods take ownership of `Vec`s and return a [`Pending`]
/// future that gives them back.
pub struct Communicator {
    raw: NonNull<sys::nexar_comm_t>,
    rank: u32,
    size: u32,
    rpc: Mutex<Handlers>,
}

// SAFETY: nexar's C ABI may be called from any thread, on one communicator
// from several threads at once (include/nexar.h, "Thread safety"). The one
// exception, nexar_comm_destroy racing other calls, cannot happen: it runs in
// Drop, which has the communicator exclusively. Handlers are Send + Sync.
unsafe impl Send for Communicator {}
// SAFETY: as above; &self methods only make thread-safe C calls or lock `rpc`.
unsafe impl Sync for Communicator {}

/// Counters of a communicator's engine (`nexar_stats_t`), shared by the
/// communicators split from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Payload bytes handed to the transport.
    pub bytes_sent: u64,
    /// Payload bytes that arrived.
    pub bytes_received: u64,
    /// Messages sent.
    pub messages_sent: u64,
    /// Messages received.
    pub messages_received: u64,
    /// QUIC streams opened by this engine, all peers.
    pub streams_opened: u64,
    /// QUIC streams opened by peers.
    pub streams_accepted: u64,
    /// (peer, tag) match state alive right now.
    pub pending_tags: u64,
    /// Bytes that arrived before their receive, buffered now.
    pub unexpected_bytes: u64,
    /// Live QUIC connections.
    pub connections: u64,
    /// RPC requests answered by this engine (any outcome).
    pub rpc_requests_served: u64,
    /// RPC responses nobody waited for.
    pub rpc_responses_dropped: u64,
    /// Payload bytes sent to non-neighbours via relay.
    pub relay_bytes_sent: u64,
    /// Payload bytes forwarded for other ranks.
    pub relay_bytes_forwarded: u64,
    /// Malformed, misrouted or undeliverable relay frames.
    pub relay_frames_dropped: u64,
    /// Bytes held now for forwarding.
    pub relay_bytes_held: u64,
    /// QUIC packets sealed or opened with ipsec-mb's AES-GCM.
    pub packets_fast_aead: u64,
    /// Received payload bytes decrypted straight into the receive buffer.
    pub bytes_opened_in_place: u64,
    /// Sent payload bytes encrypted straight from the send buffer.
    pub bytes_sealed_in_place: u64,
}

impl From<sys::nexar_stats_t> for Stats {
    fn from(s: sys::nexar_stats_t) -> Stats {
        Stats {
            bytes_sent: s.bytes_sent,
            bytes_received: s.bytes_received,
            messages_sent: s.messages_sent,
            messages_received: s.messages_received,
            streams_opened: s.streams_opened,
            streams_accepted: s.streams_accepted,
            pending_tags: s.pending_tags,
            unexpected_bytes: s.unexpected_bytes,
            connections: s.connections,
            rpc_requests_served: s.rpc_requests_served,
            rpc_responses_dropped: s.rpc_responses_dropped,
            relay_bytes_sent: s.relay_bytes_sent,
            relay_bytes_forwarded: s.relay_bytes_forwarded,
            relay_frames_dropped: s.relay_frames_dropped,
            relay_bytes_held: s.relay_bytes_held,
            packets_fast_aead: s.packets_fast_aead,
            bytes_opened_in_place: s.bytes_opened_in_place,
            bytes_sealed_in_place: s.bytes_sealed_in_place,
        }
    }
}

fn void<T>(p: *const T) -> *const c_void {
    p as *const c_void
}

fn void_mut<T>(p: *mut T) -> *mut c_void {
    p as *mut c_void
}

/// Destroys the handles of a failed creation.
fn destroy_all(handles: &[*mut sys::nexar_comm_t]) {
    for &h in handles {
        // SAFETY: each is NULL (ignored) or a handle nexar made that nothing
        // else owns.
        unsafe { sys::nexar_comm_destroy(h) };
    }
}

impl Communicator {
    // ---- Lifecycle -------------------------------------------------------------------

    /// Takes ownership of a raw handle (destroyed on drop).
    ///
    /// # Safety
    /// `raw` is a live handle from nexar that nothing else destroys or uses
    /// after this call except through the returned value.
    pub unsafe fn from_raw(raw: NonNull<sys::nexar_comm_t>) -> Communicator {
        // SAFETY: a live handle (the caller's guarantee).
        let (rank, size) = unsafe {
            (
                sys::nexar_comm_rank(raw.as_ptr()),
                sys::nexar_comm_size(raw.as_ptr()),
            )
        };
        Communicator {
            raw,
            rank,
            size,
            rpc: Mutex::new(Handlers::default()),
        }
    }

    /// The raw handle, for calling libnexar-sys directly. It stays owned by
    /// this communicator (do not destroy it).
    pub fn as_raw(&self) -> *mut sys::nexar_comm_t {
        self.raw.as_ptr()
    }

    /// Creates `world_size` communicators in this process, joined by a full
    /// mesh of real QUIC connections over loopback, one engine per rank;
    /// element `i` is rank `i`. Options: defaults plus `NEXAR_*` environment.
    pub fn bootstrap_local(world_size: u32) -> Result<Vec<Communicator>> {
        Communicator::bootstrap_local_with(world_size, &Options::new()?)
    }

    /// [`bootstrap_local`](Communicator::bootstrap_local) with options
    /// (timeouts, topology, ...).
    pub fn bootstrap_local_with(world_size: u32, options: &Options) -> Result<Vec<Communicator>> {
        const OP: &str = "bootstrap_local";
        if world_size == 0 {
            return Err(Error::invalid(
                OP,
                None,
                "world_size must be at least 1".into(),
            ));
        }
        let mut handles: Vec<*mut sys::nexar_comm_t> = vec![ptr::null_mut(); world_size as usize];
        options.with_raw(OP, |raw| {
            // SAFETY: handles has room for world_size handles; raw is a
            // complete options struct whose strings outlive the call.
            let st = unsafe { sys::nexar_bootstrap_local(handles.as_mut_ptr(), world_size, raw) };
            if st != sys::NEXAR_OK {
                return Err(Error::last(st, OP, None));
            }
            Ok(())
        })?;
        if handles.iter().any(|h| h.is_null()) {
            destroy_all(&handles);
            return Err(Error::new(
                Status::Internal,
                OP,
                None,
                None,
                "nexar_bootstrap_local succeeded but left a NULL handle".into(),
            ));
        }
        Ok(handles
            .into_iter()
            .map(|h| {
                // SAFETY: fresh non-NULL handles, each owned by one Communicator.
                unsafe { Communicator::from_raw(NonNull::new_unchecked(h)) }
            })
            .collect())
    }

    /// Joins the cluster described by the environment (`NEXAR_SEED`, torchrun,
    /// Open MPI, PMI, Slurm; see docs/cluster.md). Fails with
    /// [`Status::NotFound`], listing what it looked for, when nothing fits.
    pub fn init_from_env() -> Result<Communicator> {
        let mut out = ptr::null_mut();
        // SAFETY: out is a valid place for the handle.
        let st = unsafe { sys::nexar_comm_init_from_env(&mut out) };
        Communicator::made("init_from_env", st, out)
    }

    /// Joins a cluster through a seed (`options.seed_address(...)`, with
    /// `cluster_token`, `rank`, `world_size`, ...; see docs/cluster.md).
    pub fn join(options: &Options) -> Result<Communicator> {
        const OP: &str = "join";
        let mut out = ptr::null_mut();
        let st = options.with_raw(OP, |raw| {
            // SAFETY: out is a valid place for the handle; raw is a complete
            // options struct whose strings outlive the call.
            Ok(unsafe { sys::nexar_comm_join(&mut out, raw) })
        })?;
        Communicator::made(OP, st, out)
    }

    /// The communicator a creating call (status `st`) wrote to `out`.
    fn made(op: &'static str, st: i32, out: *mut sys::nexar_comm_t) -> Result<Communicator> {
        if st != sys::NEXAR_OK {
            return Err(Error::last(st, op, None));
        }
        Communicator::adopt(op, None, out)
    }

    /// Takes ownership of the handle a creating call that returned NEXAR_OK
    /// wrote to `out` (`rank`: the rank of the communicator it was called on).
    fn adopt(
        op: &'static str,
        rank: Option<u32>,
        out: *mut sys::nexar_comm_t,
    ) -> Result<Communicator> {
        match NonNull::new(out) {
            // SAFETY: a fresh handle from nexar, owned by nobody else.
            Some(h) => Ok(unsafe { Communicator::from_raw(h) }),
            None => Err(Error::new(
                Status::Internal,
                op,
                rank,
                None,
                "nexar returned NEXAR_OK without a handle".into(),
            )),
        }
    }

    /// This rank, `0..size()`.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Fails every pending operation now with [`Status::Aborted`] and tells
    /// the peers. Every later operation fails too.
    pub fn abort(&self) -> Result<()> {
        // SAFETY: a live handle.
        let st = unsafe { sys::nexar_comm_abort(self.as_raw()) };
        self.check("abort", st)
    }

    /// A failure found in the background (a dead peer, an abort by a peer),
    /// if any (`nexar_comm_get_async_error`).
    pub fn async_error(&self) -> Option<Error> {
        // SAFETY: all-zero is a valid completion (NULL message).
        let mut info: sys::nexar_completion_t = unsafe { std::mem::zeroed() };
        info.struct_size = size_of::<sys::nexar_completion_t>();
        // SAFETY: a live handle and a writable completion.
        let st = unsafe { sys::nexar_comm_get_async_error(self.as_raw(), &mut info) };
        if st == sys::NEXAR_OK {
            return None;
        }
        // SAFETY: the message (if set) stays valid until the handle is destroyed.
        let message = unsafe { crate::error::cstr_lossy(info.message) };
        let message = if message.is_empty() {
            crate::error::last_error_message()
        } else {
            message
        };
        Some(Error::new(
            Status::from_code(st),
            "async_error",
            Some(self.rank),
            u32::try_from(info.failed_rank).ok(),
            message,
        ))
    }

    /// Counters of this rank's engine.
    pub fn stats(&self) -> Result<Stats> {
        let mut s = sys::nexar_stats_t {
            struct_size: size_of::<sys::nexar_stats_t>(),
            ..Default::default()
        };
        // SAFETY: a live handle and a writable stats struct with struct_size set.
        let st = unsafe { sys::nexar_comm_get_stats(self.as_raw(), &mut s) };
        self.check("stats", st)?;
        Ok(Stats::from(s))
    }

    /// A new communicator of the ranks that passed the same `color`, ordered
    /// by (`key`, rank). Collective: every rank calls it.
    pub fn split(&self, color: u32, key: u32) -> Result<Communicator> {
        let mut out = ptr::null_mut();
        // SAFETY: a live handle; out is a valid place for the new handle;
        // blocking call (done == NULL).
        let st = unsafe {
            sys::nexar_comm_split(self.as_raw(), color, key, &mut out, None, ptr::null_mut())
        };
        self.check("split", st)?;
        Communicator::adopt("split", Some(self.rank), out)
    }

    /// [`split`](Communicator::split) without blocking; yields the new
    /// communicator. It takes its place in the collective order like `split`
    /// (ranks may mix the two). Dropping the future early is safe: a
    /// communicator made after that is destroyed.
    pub fn split_async(&self, color: u32, key: u32) -> Pending<Communicator> {
        let comm = self.as_raw();
        pending::submit(
            "split",
            self.rank,
            SplitPayload::new(),
            |p| p.slot,
            |slot, done, ud| {
                // SAFETY: a live handle; the slot lives in the shared record
                // until done ran (nexar writes it before).
                unsafe { sys::nexar_comm_split(comm, color, key, slot, done, ud) }
            },
        )
    }

    /// Polled mode ([`CompletionMode::Polled`](crate::CompletionMode::Polled)):
    /// runs up to `max` queued callbacks of this communicator (completions,
    /// which wake futures, and RPC handlers) on this thread, waiting up to
    /// `timeout` for the first. Returns how many ran. In thread mode (the
    /// default) callbacks run on nexar's own thread and this is not needed.
    pub fn poll(&self, max: u32, timeout: Duration) -> Result<u32> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: a live handle.
        let n = unsafe { sys::nexar_comm_poll(self.as_raw(), max, ms) };
        if n < 0 {
            return Err(Error::last(n, "poll", Some(self.rank)));
        }
        Ok(n as u32)
    }

    /// Polled mode: a file descriptor that is readable while callbacks wait
    /// for [`poll`](Communicator::poll) (owned by the communicator); `None`
    /// in thread mode.
    pub fn event_fd(&self) -> Option<std::os::raw::c_int> {
        // SAFETY: a live handle.
        let fd = unsafe { sys::nexar_comm_event_fd(self.as_raw()) };
        if fd < 0 {
            None
        } else {
            Some(fd)
        }
    }

    // ---- Errors ----------------------------------------------------------------------

    /// Turns a status just returned on this thread into a Result.
    fn check(&self, op: &'static str, st: i32) -> Result<()> {
        if st == sys::NEXAR_OK {
            return Ok(());
        }
        // First, before any other nexar call on this thread: the call's own
        // record names the rank that failed it.
        Err(Error::last(st, op, Some(self.rank)))
    }

    fn error(&self, status: Status, op: &'static str, message: String) -> Error {
        Error::new(status, op, Some(self.rank), None, message)
    }

    fn invalid(&self, op: &'static str, message: String) -> Error {
        Error::invalid(op, Some(self.rank), message)
    }

    fn times_size(&self, op: &'static str, n: usize) -> Result<usize> {
        n.checked_mul(self.size as usize).ok_or_else(|| {
            self.invalid(
                op,
                format!("{} elements times {} ranks overflow", n, self.size),
            )
        })
    }

    /// The elements per rank of a buffer of `n` elements (`what`) that holds
    /// one equal block for each rank.
    fn block_len(&self, op: &'static str, what: &str, n: usize) -> Result<usize> {
        let ranks = self.size as usize;
        if n % ranks != 0 {
            return Err(self.invalid(
                op,
                format!(
                    "{} holds {} elements, not a multiple of the {} ranks",
                    what, n, self.size
                ),
            ));
        }
        Ok(n / ranks)
    }

    /// A blocking operation on one buffer, read and written in place:
    /// `call(d, n, done, user_data)` calls nexar with `done == None` on
    /// `d[0..n)`, which is `buf`, exclusively borrowed until it returns.
    fn in_place<T: Element>(
        &self,
        op: &'static str,
        buf: &mut [T],
        call: impl FnOnce(*mut c_void, usize, sys::nexar_done_fn, *mut c_void) -> i32,
    ) -> Result<()> {
        let st = call(void_mut(buf.as_mut_ptr()), buf.len(), None, ptr::null_mut());
        self.check(op, st)
    }

    /// [`in_place`](Communicator::in_place) without blocking: `d[0..n)` is
    /// `buf`, owned by the shared record until `done` has run; the future
    /// gives it back.
    fn in_place_async<T: Element>(
        &self,
        op: &'static str,
        buf: Vec<T>,
        call: impl FnOnce(*mut c_void, usize, sys::nexar_done_fn, *mut c_void) -> i32,
    ) -> Pending<Vec<T>> {
        pending::submit(
            op,
            self.rank,
            InPlace(buf),
            |p| (void_mut(p.0.as_mut_ptr()), p.0.len()),
            |(d, n), done, ud| call(d, n, done, ud),
        )
    }

    fn byte_len<T>(&self, op: &'static str, n: usize) -> Result<usize> {
        n.checked_mul(size_of::<T>())
            .ok_or_else(|| self.invalid(op, format!("{} elements overflow a byte count", n)))
    }

    // ---- Blocking collectives (done == NULL) ------------------------------------------

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

    // ---- Blocking point-to-point ----------------------------------------------------------

    /// Sends `buf`'s bytes to rank `dest` with `tag`; returns once the peer's
    /// transport acknowledged every byte. Messages between one pair with one
    /// tag arrive in send order.
    pub fn send<T: Element>(&self, buf: &[T], dest: u32, tag: u32) -> Result<()> {
        let bytes = self.byte_len::<T>("send", buf.len())?;
        // SAFETY: buf readable for `bytes` bytes during the blocking call.
        let st = unsafe {
            sys::nexar_send(
                self.as_raw(),
                void(buf.as_ptr()),
                bytes,
                dest,
                tag,
                None,
                ptr::null_mut(),
            )
        };
        self.check("send", st)
    }

    /// Receives the next message from rank `src` with `tag` into `buf`. A
    /// message of another size fails with [`Status::SizeMismatch`] (and is
    /// consumed).
    pub fn recv<T: Element>(&self, buf: &mut [T], src: u32, tag: u32) -> Result<()> {
        let bytes = self.byte_len::<T>("recv", buf.len())?;
        // SAFETY: buf writable for `bytes` bytes during the blocking call;
        // every bit pattern is a valid T (Element is sealed over plain numbers
        // and F16/Bf16, which wrap a u16).
        let st = unsafe {
            sys::nexar_recv(
                self.as_raw(),
                void_mut(buf.as_mut_ptr()),
                bytes,
                src,
                tag,
                None,
                ptr::null_mut(),
            )
        };
        self.check("recv", st)
    }

    // ---- RPC -----------------------------------------------------------------------------

    /// Calls `fn_id` on rank `target` (this rank too) with `request`; returns
    /// the response. Fails with [`Status::RpcNotRegistered`],
    /// [`Status::RpcFailed`] (the handler's error, its message included),
    /// [`Status::Timeout`] after the RPC timeout, ...
    pub fn rpc_call(&self, target: u32, fn_id: u32, request: &[u8]) -> Result<Vec<u8>> {
        let mut response = ptr::null_mut();
        // SAFETY: request readable for its length and `response` writable
        // during the blocking call.
        let st = unsafe {
            sys::nexar_rpc_call(
                self.as_raw(),
                target,
                fn_id,
                void(request.as_ptr()),
                request.len(),
                &mut response,
                None,
                ptr::null_mut(),
            )
        };
        if st != sys::NEXAR_OK {
            let err = self.check("rpc_call", st);
            // SAFETY: NULL on failure per the header; freed if not, defensively.
            unsafe { sys::nexar_rpc_response_free(response) };
            err?;
        }
        // SAFETY: on success, a response owned by this caller.
        Ok(unsafe { rpc::take_response(response) })
    }

    /// Serves `fn_id` on this communicator with `handler(src_rank, request)`,
    /// replacing any earlier handler of `fn_id`. Its `Ok(bytes)` is the
    /// response; `Err(message)` fails the caller's call with
    /// [`Status::RpcFailed`] and the message; a panic is caught and fails it
    /// with the panic's message (it never unwinds into nexar).
    ///
    /// The handler runs on nexar's completion thread, one at a time per
    /// engine: it should return quickly. It may start `*_async` operations
    /// but not block on one (blocking calls fail with
    /// [`Status::WouldDeadlock`]). The communicator keeps the closure alive
    /// until it is replaced, unregistered or the communicator is dropped;
    /// once this returns, a replaced handler is not running any more (unless
    /// this is called from inside a handler).
    pub fn rpc_register<F>(&self, fn_id: u32, handler: F) -> Result<()>
    where
        F: Fn(u32, &[u8]) -> RpcResult + Send + Sync + 'static,
    {
        self.set_handler(
            "rpc_register",
            fn_id,
            Some(Box::new(HandlerBox {
                f: Box::new(handler),
            })),
        )
    }

    /// Stops serving `fn_id`: later calls fail with
    /// [`Status::RpcNotRegistered`]. Unregistering an unknown fn_id is fine.
    pub fn rpc_unregister(&self, fn_id: u32) -> Result<()> {
        self.set_handler("rpc_unregister", fn_id, None)
    }

    fn set_handler(
        &self,
        op: &'static str,
        fn_id: u32,
        fresh: Option<Box<HandlerBox>>,
    ) -> Result<()> {
        let inside = in_callback();
        // nexar_rpc_register (outside callbacks) waits for a running call of
        // the handler it replaces; that handler may itself be registering
        // here, so inside a callback the lock is only tried.
        let mut table = lock_unless_in_callback(&self.rpc).ok_or_else(|| {
            self.error(
                Status::WouldDeadlock,
                op,
                format!(
                    "{}: another thread is (un)registering an RPC handler on this communicator \
                     and may be waiting for this callback to end",
                    op
                ),
            )
        })?;
        let (handler, user_data): (sys::nexar_rpc_handler_fn, *mut c_void) = match &fresh {
            Some(b) => (
                Some(rpc::rpc_trampoline),
                &**b as *const HandlerBox as *mut c_void,
            ),
            None => (None, ptr::null_mut()),
        };
        // SAFETY: a live handle; user_data is the HandlerBox that `table`
        // keeps alive at a stable address while it is registered.
        let st = unsafe { sys::nexar_rpc_register(self.as_raw(), fn_id, handler, user_data) };
        if st != sys::NEXAR_OK {
            let err = Error::last(st, op, Some(self.rank));
            return Err(err);
        }
        let replaced = match fresh {
            Some(b) => table.live.insert(fn_id, b),
            None => table.live.remove(&fn_id),
        };
        if inside {
            // nexar did not wait for a running call of the replaced handler
            // (it may be the one running now): keep it until the end.
            table.retired.extend(replaced);
        } else {
            drop(table);
            drop(replaced); // no call of it is running or will start
        }
        Ok(())
    }

    // ---- Asynchronous operations ---------------------------------------------------------

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

    /// [`send`](Communicator::send) without blocking; yields the buffer back
    /// once the peer acknowledged it.
    pub fn send_async<T: Element>(&self, buf: Vec<T>, dest: u32, tag: u32) -> Pending<Vec<T>> {
        let bytes = match self.byte_len::<T>("send", buf.len()) {
            Ok(b) => b,
            Err(e) => return Pending::failed(e.with_buffer(buf)),
        };
        let comm = self.as_raw();
        pending::submit(
            "send",
            self.rank,
            InPlace(buf),
            |p| void(p.0.as_ptr()),
            |s, done, ud| {
                // SAFETY: the buffer lives in the shared record until done ran.
                unsafe { sys::nexar_send(comm, s, bytes, dest, tag, done, ud) }
            },
        )
    }

    /// [`recv`](Communicator::recv) without blocking; yields the filled buffer.
    pub fn recv_async<T: Element>(&self, buf: Vec<T>, src: u32, tag: u32) -> Pending<Vec<T>> {
        let bytes = match self.byte_len::<T>("recv", buf.len()) {
            Ok(b) => b,
            Err(e) => return Pending::failed(e.with_buffer(buf)),
        };
        let comm = self.as_raw();
        pending::submit(
            "recv",
            self.rank,
            InPlace(buf),
            |p| void_mut(p.0.as_mut_ptr()),
            |d, done, ud| {
                // SAFETY: the buffer lives in the shared record until done
                // ran; any bytes are a valid T.
                unsafe { sys::nexar_recv(comm, d, bytes, src, tag, done, ud) }
            },
        )
    }

    /// [`rpc_call`](Communicator::rpc_call) without blocking; yields the
    /// response. Safe to call from inside an RPC handler.
    pub fn rpc_call_async(&self, target: u32, fn_id: u32, request: Vec<u8>) -> Pending<Vec<u8>> {
        let comm = self.as_raw();
        pending::submit(
            "rpc_call",
            self.rank,
            RpcPayload::new(request),
            |p| (void(p.request.as_ptr()), p.request.len(), p.slot),
            |(r, n, slot), done, ud| {
                // SAFETY: the request and the response slot live in the
                // shared record until done ran.
                unsafe { sys::nexar_rpc_call(comm, target, fn_id, r, n, slot, done, ud) }
            },
        )
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let handlers = std::mem::take(self.rpc.get_mut().unwrap_or_else(|e| e.into_inner()));
        let raw = SendHandle(self.raw);
        if in_callback() {
            // On nexar's completion thread (say, the last Arc of this
            // communicator dropped by an RPC handler): destroy waits for
            // callbacks to end, so it runs on a thread of its own.
            // ManuallyDrop: if no thread can be made, the closure is dropped
            // unrun and the handlers, still registered, must not go with it
            // (the handle and they leak: better than a hang or a dangling call).
            let handlers = ManuallyDrop::new(handlers);
            let spawned = std::thread::Builder::new()
                .name("nexar-destroy".into())
                .spawn(move || {
                    let raw = raw;
                    // SAFETY: the handle is exclusively ours (Drop), destroyed once.
                    unsafe { sys::nexar_comm_destroy(raw.0.as_ptr()) };
                    drop(ManuallyDrop::into_inner(handlers));
                });
            drop(spawned);
        } else {
            // SAFETY: the handle is exclusively ours (Drop: no other call can
            // race it), destroyed once. Pending operations complete before it
            // returns and no handler runs afterwards, so the handlers may go.
            unsafe { sys::nexar_comm_destroy(raw.0.as_ptr()) };
            drop(handlers);
        }
    }
}

/// An asynchronous split's slot, which nexar writes the new handle into (its
/// own heap allocation, like [`RpcPayload`]'s).
struct SplitPayload {
    slot: *mut *mut sys::nexar_comm_t,
}

// SAFETY: the slot is owned exclusively by this payload (allocated in `new`,
// freed in Drop); nexar writes it before done runs, and the payload is only
// read after that (it moves between threads with the shared record). The
// handle in it may be used from any thread.
unsafe impl Send for SplitPayload {}

impl SplitPayload {
    fn new() -> SplitPayload {
        SplitPayload {
            slot: Box::into_raw(Box::new(ptr::null_mut())),
        }
    }

    /// The communicator of the handle in the slot, if any; the slot is reset.
    /// Only called once nexar no longer writes the slot (the split completed
    /// or was refused).
    fn take(&mut self) -> Option<Communicator> {
        // SAFETY: the slot is valid until Drop.
        let h = unsafe { std::mem::replace(&mut *self.slot, ptr::null_mut()) };
        // SAFETY: a fresh handle from nexar, owned by nobody else (taken out
        // of the slot just now).
        NonNull::new(h).map(|h| unsafe { Communicator::from_raw(h) })
    }
}

impl Payload for SplitPayload {
    type Output = Communicator;
    fn finish(mut self) -> Option<Communicator> {
        self.take()
    }
}

impl Drop for SplitPayload {
    fn drop(&mut self) {
        // A handle nobody took (the future was dropped before completion) goes
        // through Communicator's Drop, which copes with running on nexar's
        // completion thread (where the last reference to the record may go).
        drop(self.take());
        // SAFETY: the slot came from Box::into_raw in `new` and is freed only here.
        drop(unsafe { Box::from_raw(self.slot) });
    }
}

/// A handle moved to the thread that destroys it.
struct SendHandle(NonNull<sys::nexar_comm_t>);
// SAFETY: nexar handles may be used (and destroyed) from any thread.
unsafe impl Send for SendHandle {}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Communicator(rank {} of {})", self.rank, self.size)
    }
}
