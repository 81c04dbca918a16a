//! Options for creating communicators (`nexar_comm_options_t`).

use crate::error::{Error, Result};
use libnexar_sys as sys;
use std::ffi::CString;
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr;
use std::time::Duration;

/// The mesh topology (`NEXAR_TOPOLOGY_*`). Every rank must use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Every pair of ranks connected (the default).
    Full,
    /// Rank r connects to r-1 and r+1 only; other traffic is relayed.
    Ring,
    /// Rank r connects to r±1 .. r±K/2 (K links; `k_regular:K`).
    KRegular(u32),
    /// Rank r connects to r XOR 2^b (about log2 N links).
    Hypercube,
}

/// The same-host path (`NEXAR_SHM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shm {
    /// Ranks on one host exchange payloads through shared memory (the default).
    Auto,
    /// Every byte over QUIC.
    Off,
    /// Creation fails if a same-host pair cannot use shared memory.
    Require,
}

/// Where completion callbacks (which wake futures) and RPC handlers run
/// (`NEXAR_COMPLETION_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionMode {
    /// On nexar's completion thread (the default): futures complete by themselves.
    Thread,
    /// Queued until [`Communicator::poll`](crate::Communicator::poll) runs them
    /// on the polling thread: futures complete (and handlers run) only then.
    Polled,
}

/// The buffer pool profile (`NEXAR_POOL_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolProfile {
    /// Large buffers (the default).
    Training,
    /// Many small messages.
    Inference,
}

/// Options for [`Communicator::bootstrap_local_with`](crate::Communicator::bootstrap_local_with)
/// and [`Communicator::join`](crate::Communicator::join).
///
/// [`Options::new`] starts from nexar's defaults with the `NEXAR_*`
/// environment variables applied (`nexar_comm_options_init`); the builder
/// methods change single fields. Timeouts are rounded up to whole
/// milliseconds (at least 1: nexar refuses 0).
///
/// ```no_run
/// use libnexar::{Communicator, Options, Topology};
/// use std::time::Duration;
/// let opts = Options::new()?
///     .timeouts(Duration::from_secs(10))
///     .topology(Topology::Ring);
/// let world = Communicator::bootstrap_local_with(4, &opts)?;
/// # Ok::<(), libnexar::Error>(())
/// ```
#[derive(Clone)]
pub struct Options {
    /// Every string pointer and the edges pointer in here stay NULL: the
    /// strings and edges live below and are filled in by `with_raw` only for
    /// the duration of a call.
    raw: sys::nexar_comm_options_t,
    seed_address: Option<CString>,
    cluster_token: Option<CString>,
    listen_address: Option<CString>,
    advertise_address: Option<CString>,
    socket_ifname: Option<CString>,
    /// A custom graph's links, two ranks each (`topology_edges`).
    edges: Vec<u32>,
    /// A builder argument that could not be used (a string with a NUL byte).
    refused: Option<String>,
}

// SAFETY: the only raw pointers in `raw` are the string fields and the
// edges, which stay NULL (see the field's comment); everything else is plain
// data.
unsafe impl Send for Options {}
// SAFETY: as for Send; &Options gives no mutation.
unsafe impl Sync for Options {}

fn millis(d: Duration) -> u64 {
    let ms = d.as_nanos().saturating_add(999_999) / 1_000_000;
    ms.clamp(1, u64::MAX as u128) as u64
}

macro_rules! duration_setter {
    ($(#[$doc:meta])* $name:ident => $field:ident) => {
        $(#[$doc])*
        pub fn $name(mut self, d: Duration) -> Self {
            self.raw.$field = millis(d);
            self
        }
    };
}

impl Options {
    /// nexar's defaults, then the `NEXAR_*` environment variables. Fails
    /// (`InvalidArgument`, naming the variable) on an unparsable variable.
    pub fn new() -> Result<Options> {
        let mut raw = MaybeUninit::<sys::nexar_comm_options_t>::zeroed();
        let size = std::mem::size_of::<sys::nexar_comm_options_t>();
        // SAFETY: raw points to writable memory of `size` bytes.
        let st = unsafe { sys::nexar_comm_options_init(raw.as_mut_ptr(), size) };
        if st != sys::NEXAR_OK {
            return Err(Error::last(st, "options", None));
        }
        // SAFETY: zeroed (a valid bit pattern for every field: integers and
        // NULL pointers), then filled in by nexar_comm_options_init.
        let mut raw = unsafe { raw.assume_init() };
        raw.seed_address = ptr::null();
        raw.cluster_token = ptr::null();
        raw.listen_address = ptr::null();
        raw.advertise_address = ptr::null();
        raw.socket_ifname = ptr::null();
        Ok(Options {
            raw,
            seed_address: None,
            cluster_token: None,
            listen_address: None,
            advertise_address: None,
            socket_ifname: None,
            edges: Vec::new(),
            refused: None,
        })
    }

    /// Sets the collective, barrier, point-to-point and RPC timeouts at once.
    pub fn timeouts(mut self, d: Duration) -> Self {
        let ms = millis(d);
        self.raw.collective_timeout_ms = ms;
        self.raw.barrier_timeout_ms = ms;
        self.raw.p2p_timeout_ms = ms;
        self.raw.rpc_timeout_ms = ms;
        self
    }

    duration_setter!(
        /// Bound of every collective but barrier (default 30 s).
        collective_timeout => collective_timeout_ms);
    duration_setter!(
        /// Bound of barrier (default 30 s).
        barrier_timeout => barrier_timeout_ms);
    duration_setter!(
        /// Bound of send and recv (default 300 s).
        p2p_timeout => p2p_timeout_ms);
    duration_setter!(
        /// Bound of forming connections (default 30 s).
        connect_timeout => connect_timeout_ms);
    duration_setter!(
        /// Interval of heartbeats (default 1 s).
        heartbeat_interval => heartbeat_interval_ms);
    duration_setter!(
        /// Silence after which a peer counts as failed (default 5 s).
        heartbeat_timeout => heartbeat_timeout_ms);
    duration_setter!(
        /// Bound of each RPC call, counted from submission (default 30 s).
        rpc_timeout => rpc_timeout_ms);

    /// The mesh topology (default [`Topology::Full`]).
    pub fn topology(mut self, t: Topology) -> Self {
        self.raw.topology = match t {
            Topology::Full => sys::NEXAR_TOPOLOGY_FULL,
            Topology::Ring => sys::NEXAR_TOPOLOGY_RING,
            Topology::KRegular(k) => {
                self.raw.topology_degree = k;
                sys::NEXAR_TOPOLOGY_KREGULAR
            }
            Topology::Hypercube => sys::NEXAR_TOPOLOGY_HYPERCUBE,
        };
        self
    }

    /// A custom mesh: each pair is a direct link between two ranks; the
    /// graph must be connected and the same on every rank.
    pub fn topology_edges(mut self, pairs: &[(u32, u32)]) -> Self {
        self.raw.topology = sys::NEXAR_TOPOLOGY_CUSTOM;
        self.edges = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        self
    }

    /// The same-host path (default [`Shm::Auto`], or `NEXAR_SHM`).
    pub fn shm(mut self, mode: Shm) -> Self {
        self.raw.shm = match mode {
            Shm::Auto => sys::NEXAR_SHM_AUTO,
            Shm::Off => sys::NEXAR_SHM_OFF,
            Shm::Require => sys::NEXAR_SHM_REQUIRE,
        };
        self
    }

    /// The shared segment of each process, in bytes (default 64 MiB, or
    /// `NEXAR_SHM_MAX_BYTES`); same-host pairs beyond it stay on QUIC.
    pub fn shm_max_bytes(mut self, bytes: u64) -> Self {
        self.raw.shm_max_bytes = bytes;
        self
    }

    /// Keep the connection to an elastic seed (`pending_joins`, `grow`) and
    /// join a running world by waiting until the members admit this process
    /// (default off, or `NEXAR_ELASTIC`; docs/elastic.md).
    pub fn elastic(mut self, on: bool) -> Self {
        self.raw.elastic = u32::from(on);
        self
    }

    duration_setter!(
        /// How long a joiner of a running world waits to be admitted
        /// (default 300 s, or `NEXAR_JOIN_TIMEOUT_SECS`).
        join_timeout => join_timeout_ms
    );

    /// Where callbacks run (default [`CompletionMode::Thread`], or
    /// `NEXAR_COMPLETION_MODE`).
    pub fn completion_mode(mut self, mode: CompletionMode) -> Self {
        self.raw.completion_mode = match mode {
            CompletionMode::Thread => sys::NEXAR_COMPLETION_THREAD,
            CompletionMode::Polled => sys::NEXAR_COMPLETION_POLLED,
        };
        self
    }

    /// The buffer pool profile (default [`PoolProfile::Training`]).
    pub fn pool_profile(mut self, p: PoolProfile) -> Self {
        self.raw.pool_profile = match p {
            PoolProfile::Training => sys::NEXAR_POOL_TRAINING,
            PoolProfile::Inference => sys::NEXAR_POOL_INFERENCE,
        };
        self
    }

    /// Messages from this size on take the large-message algorithms (default 8 MiB).
    pub fn large_msg_bytes(mut self, bytes: u64) -> Self {
        self.raw.large_msg_bytes = bytes;
        self
    }

    /// Segment size of ring passes (default 2 MiB, at least 4096).
    pub fn pipeline_segment_bytes(mut self, bytes: u64) -> Self {
        self.raw.pipeline_segment_bytes = bytes;
        self
    }

    /// Largest world that uses ring algorithms (default 8).
    pub fn ring_max_world(mut self, n: u32) -> Self {
        self.raw.ring_max_world = n;
        self
    }

    /// Busy-poll this long before sleeping (0 = off).
    pub fn spin_us(mut self, us: u32) -> Self {
        self.raw.spin_us = us;
        self
    }

    string_setter!(
        /// For [`join`](crate::Communicator::join): the seed, `"host:port"`.
        seed_address);
    string_setter!(
        /// For join: the cluster token.
        cluster_token);
    string_setter!(
        /// For join: the address to bind, `"host:port"`.
        listen_address);
    string_setter!(
        /// For join: the address to advertise to the other ranks.
        advertise_address);
    string_setter!(
        /// For join: the interface(s) to use, NCCL syntax.
        socket_ifname);

    /// For join: the rank to ask for (`None`: any, assigned by the seed).
    pub fn rank(mut self, rank: Option<u32>) -> Self {
        self.raw.rank = rank.map(|r| r.min(i32::MAX as u32) as i32).unwrap_or(-1);
        self
    }

    /// For join: the world size (0 = whatever the seed forms).
    pub fn world_size(mut self, n: u32) -> Self {
        self.raw.world_size = n;
        self
    }

    /// The raw struct as nexar would get it (string pointers left NULL).
    pub fn raw(&self) -> sys::nexar_comm_options_t {
        self.raw
    }

    /// Runs `f` with a complete raw struct whose strings point into `self`.
    pub(crate) fn with_raw<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&sys::nexar_comm_options_t) -> Result<R>,
    ) -> Result<R> {
        if let Some(why) = &self.refused {
            return Err(Error::invalid(op, None, why.clone()));
        }
        let p = |s: &Option<CString>| s.as_ref().map(|s| s.as_ptr()).unwrap_or(ptr::null());
        let mut raw = self.raw;
        raw.seed_address = p(&self.seed_address);
        raw.cluster_token = p(&self.cluster_token);
        raw.listen_address = p(&self.listen_address);
        raw.advertise_address = p(&self.advertise_address);
        raw.socket_ifname = p(&self.socket_ifname);
        raw.topology_edges = if self.edges.is_empty() {
            ptr::null()
        } else {
            self.edges.as_ptr()
        };
        raw.topology_edge_count = self.edges.len() / 2;
        f(&raw)
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.raw;
        f.debug_struct("Options")
            .field("collective_timeout_ms", &r.collective_timeout_ms)
            .field("barrier_timeout_ms", &r.barrier_timeout_ms)
            .field("p2p_timeout_ms", &r.p2p_timeout_ms)
            .field("connect_timeout_ms", &r.connect_timeout_ms)
            .field("heartbeat_interval_ms", &r.heartbeat_interval_ms)
            .field("heartbeat_timeout_ms", &r.heartbeat_timeout_ms)
            .field("rpc_timeout_ms", &r.rpc_timeout_ms)
            .field("completion_mode", &r.completion_mode)
            .field("topology", &r.topology)
            .field("topology_degree", &r.topology_degree)
            .field("topology_edges", &self.edges)
            .field("shm", &r.shm)
            .field("shm_max_bytes", &r.shm_max_bytes)
            .field("pool_profile", &r.pool_profile)
            .field("large_msg_bytes", &r.large_msg_bytes)
            .field("pipeline_segment_bytes", &r.pipeline_segment_bytes)
            .field("ring_max_world", &r.ring_max_world)
            .field("spin_us", &r.spin_us)
            .field("seed_address", &self.seed_address)
            .field(
                "cluster_token",
                &self.cluster_token.as_ref().map(|_| "<set>"),
            )
            .field("listen_address", &self.listen_address)
            .field("advertise_address", &self.advertise_address)
            .field("socket_ifname", &self.socket_ifname)
            .field("rank", &r.rank)
            .field("world_size", &r.world_size)
            .finish()
    }
}
