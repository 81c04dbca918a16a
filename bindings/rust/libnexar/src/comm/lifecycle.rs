//! Making, splitting, polling and aborting communicators.

use super::stats::Stats;
use super::{destroy_all, Communicator};
use crate::error::{Error, Result, Status};
use crate::options::Options;
use crate::pending::{self, Payload, Pending};
use crate::rpc::Handlers;
use libnexar_sys as sys;
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::time::Duration;

impl Communicator {
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
            failure: Default::default(),
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
    pub(super) fn adopt(
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

    /// Writes this communicator's recent operations (the flight recorder) as
    /// JSON to `path`, or into `NEXAR_FR_DUMP_DIR` when `path` is `None`;
    /// `nexar-fr` merges the dumps of all ranks and prints where they diverge.
    pub fn flight_recorder_dump(&self, path: Option<&std::path::Path>) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let c_path = match path {
            Some(p) => Some(
                std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| {
                    self.error(
                        Status::InvalidArgument,
                        "flight_recorder_dump",
                        "the path contains a NUL byte".to_string(),
                    )
                })?,
            ),
            None => None,
        };
        let raw_path = c_path.as_ref().map_or(ptr::null(), |p| p.as_ptr());
        // SAFETY: a live handle; raw_path is NULL or a NUL-terminated string
        // that outlives the call.
        let st = unsafe { sys::nexar_flight_recorder_dump(self.as_raw(), raw_path) };
        self.check("flight_recorder_dump", st)
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
