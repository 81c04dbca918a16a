//! Raw declarations of nexar's C ABI (`include/nexar.h`), written by hand.
//!
//! Every item here mirrors the header one to one: the same names, values and
//! layouts. The header is the source of truth; the unit test `layout` (run by
//! `cargo test -p libnexar-sys`) compares every struct size, alignment and
//! field offset, and every constant, with the values a C compiler gives for
//! the installed `nexar.h`, so a drift fails the test.
//!
//! The library is found with `pkg-config nexar` (honouring `PKG_CONFIG_PATH`);
//! `NEXAR_LIB_DIR` (and `NEXAR_INCLUDE_DIR`) bypass pkg-config. See
//! `docs/rust.md`.
//!
//! Nothing here is safe to call without reading the header's contract; the
//! `libnexar` crate is the safe wrapper.
#![allow(non_camel_case_types)]

use std::marker::{PhantomData, PhantomPinned};

pub use std::os::raw::{c_char, c_int, c_void};

// ---- Version -----------------------------------------------------------------

pub const NEXAR_VERSION_MAJOR: u32 = 0;
pub const NEXAR_VERSION_MINOR: u32 = 1;
pub const NEXAR_VERSION_PATCH: u32 = 0;
pub const NEXAR_VERSION_NUMBER: u32 =
    NEXAR_VERSION_MAJOR * 10000 + NEXAR_VERSION_MINOR * 100 + NEXAR_VERSION_PATCH;
/// `NEXAR_VERSION_STRING`, without the C string's terminating NUL.
pub const NEXAR_VERSION_STRING: &str = "0.1.0";

// ---- Status codes ----------------------------------------------------------------

pub type nexar_status_t = i32;

pub const NEXAR_OK: nexar_status_t = 0;
pub const NEXAR_ERR_INVALID_ARGUMENT: nexar_status_t = -1;
pub const NEXAR_ERR_INVALID_RANK: nexar_status_t = -2;
pub const NEXAR_ERR_SIZE_MISMATCH: nexar_status_t = -3;
pub const NEXAR_ERR_TIMEOUT: nexar_status_t = -4;
pub const NEXAR_ERR_PEER_FAILED: nexar_status_t = -5;
pub const NEXAR_ERR_ABORTED: nexar_status_t = -6;
pub const NEXAR_ERR_CLOSED: nexar_status_t = -7;
pub const NEXAR_ERR_MISMATCH: nexar_status_t = -8;
pub const NEXAR_ERR_TLS: nexar_status_t = -9;
pub const NEXAR_ERR_AUTH: nexar_status_t = -10;
pub const NEXAR_ERR_PROTOCOL: nexar_status_t = -11;
pub const NEXAR_ERR_NO_MEMORY: nexar_status_t = -12;
pub const NEXAR_ERR_IO: nexar_status_t = -13;
pub const NEXAR_ERR_UNSUPPORTED: nexar_status_t = -14;
pub const NEXAR_ERR_NOT_FOUND: nexar_status_t = -15;
pub const NEXAR_ERR_WOULD_DEADLOCK: nexar_status_t = -16;
pub const NEXAR_ERR_INTERNAL: nexar_status_t = -17;
/// No handler for that fn_id on the target rank.
pub const NEXAR_ERR_RPC_NOT_REGISTERED: nexar_status_t = -18;
/// The target's handler returned an error.
pub const NEXAR_ERR_RPC_FAILED: nexar_status_t = -19;
pub const NEXAR_ERR_REVOKED: nexar_status_t = -20;
pub const NEXAR_ERR_EXCLUDED: nexar_status_t = -21;

// ---- Data types and reduction operators ----------------------------------------

pub type nexar_dtype_t = i32;
pub const NEXAR_DTYPE_F32: nexar_dtype_t = 0;
pub const NEXAR_DTYPE_F64: nexar_dtype_t = 1;
pub const NEXAR_DTYPE_F16: nexar_dtype_t = 2;
pub const NEXAR_DTYPE_BF16: nexar_dtype_t = 3;
pub const NEXAR_DTYPE_I8: nexar_dtype_t = 4;
pub const NEXAR_DTYPE_I32: nexar_dtype_t = 5;
pub const NEXAR_DTYPE_I64: nexar_dtype_t = 6;
pub const NEXAR_DTYPE_U8: nexar_dtype_t = 7;
pub const NEXAR_DTYPE_U32: nexar_dtype_t = 8;
pub const NEXAR_DTYPE_U64: nexar_dtype_t = 9;

pub type nexar_op_t = i32;
pub const NEXAR_OP_SUM: nexar_op_t = 0;
pub const NEXAR_OP_PROD: nexar_op_t = 1;
pub const NEXAR_OP_MIN: nexar_op_t = 2;
pub const NEXAR_OP_MAX: nexar_op_t = 3;

// ---- Handles and completion ------------------------------------------------------

/// Opaque: one rank's view of a group of processes (`nexar_comm_t`).
#[repr(C)]
pub struct nexar_comm {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}
pub type nexar_comm_t = nexar_comm;

/// Opaque: a discovery server that admits workers into a cluster (`nexar_seed_t`).
#[repr(C)]
pub struct nexar_seed {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}
pub type nexar_seed_t = nexar_seed;

/// `nexar_completion_t`: the outcome handed to a completion callback.
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct nexar_completion_t {
    /// sizeof(nexar_completion_t) as built into the library.
    pub struct_size: usize,
    /// NEXAR_OK or the failure.
    pub status: nexar_status_t,
    /// The rank that failed or did not answer, or -1.
    pub failed_rank: i32,
    /// The operation's sequence number on its communicator.
    pub op_seq: u64,
    /// Never NULL; valid only during the callback.
    pub message: *const c_char,
}

/// `nexar_done_fn`; `None` is `NULL` (the call blocks).
pub type nexar_done_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, completion: *const nexar_completion_t)>;

// ---- Options ------------------------------------------------------------------------

pub const NEXAR_COMPLETION_THREAD: u32 = 0;
pub const NEXAR_COMPLETION_POLLED: u32 = 1;

pub const NEXAR_POOL_TRAINING: u32 = 0;
pub const NEXAR_POOL_INFERENCE: u32 = 1;

pub const NEXAR_TOPOLOGY_FULL: u32 = 0;
pub const NEXAR_TOPOLOGY_RING: u32 = 1;
pub const NEXAR_TOPOLOGY_KREGULAR: u32 = 2;
pub const NEXAR_TOPOLOGY_HYPERCUBE: u32 = 3;
pub const NEXAR_TOPOLOGY_CUSTOM: u32 = 4;
pub const NEXAR_SHM_AUTO: u32 = 0;
pub const NEXAR_SHM_OFF: u32 = 1;
pub const NEXAR_SHM_REQUIRE: u32 = 2;

pub const NEXAR_LOG_ERROR: i32 = 0;
pub const NEXAR_LOG_WARN: i32 = 1;
pub const NEXAR_LOG_INFO: i32 = 2;
pub const NEXAR_LOG_DEBUG: i32 = 3;
pub const NEXAR_LOG_TRACE: i32 = 4;

/// `nexar_comm_options_t`. Initialise with [`nexar_comm_options_init`].
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct nexar_comm_options_t {
    pub struct_size: usize,
    pub completion_mode: u32,
    pub pool_profile: u32,
    pub collective_timeout_ms: u64,
    pub barrier_timeout_ms: u64,
    pub p2p_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout_ms: u64,
    pub large_msg_bytes: u64,
    pub pipeline_segment_bytes: u64,
    pub ring_max_world: u32,
    pub spin_us: u32,
    pub seed_address: *const c_char,
    pub cluster_token: *const c_char,
    pub listen_address: *const c_char,
    pub advertise_address: *const c_char,
    pub socket_ifname: *const c_char,
    pub rank: i32,
    pub world_size: u32,
    pub rpc_timeout_ms: u64,
    pub topology: u32,
    pub shm: u32,
    pub shm_max_bytes: u64,
    pub elastic: u32,
    pub join_timeout_ms: u64,
    pub topology_degree: u32,
    pub topology_edges: *const u32,
    pub topology_edge_count: usize,
}

// ---- Seed ---------------------------------------------------------------------------

pub const NEXAR_SEED_EVENT_LISTENING: i32 = 1;
pub const NEXAR_SEED_EVENT_JOINED: i32 = 2;
pub const NEXAR_SEED_EVENT_REFUSED: i32 = 3;
pub const NEXAR_SEED_EVENT_WELCOMED: i32 = 4;
pub const NEXAR_SEED_EVENT_FORMED: i32 = 5;
pub const NEXAR_SEED_EVENT_FAILED: i32 = 6;
pub const NEXAR_SEED_EVENT_GROWN: i32 = 7;
pub const NEXAR_SEED_EVENT_GROW_FAILED: i32 = 8;

/// `nexar_seed_event_t`.
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct nexar_seed_event_t {
    pub struct_size: usize,
    pub kind: i32,
    pub rank: i32,
    pub joined: u32,
    pub world_size: u32,
    /// Never NULL; valid only during the callback.
    pub message: *const c_char,
}

/// `nexar_seed_event_fn`; `None` is `NULL`.
pub type nexar_seed_event_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, event: *const nexar_seed_event_t)>;

/// `nexar_seed_options_t`. Initialise with [`nexar_seed_options_init`].
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct nexar_seed_options_t {
    pub struct_size: usize,
    pub listen_address: *const c_char,
    pub world_size: u32,
    pub open: u32,
    pub cluster_token: *const c_char,
    pub token_file: *const c_char,
    pub ca_dir: *const c_char,
    pub formation_timeout_ms: u64,
    pub on_event: nexar_seed_event_fn,
    pub event_user_data: *mut c_void,
    pub elastic: u32,
    pub max_world_size: u32,
}

// ---- Logging --------------------------------------------------------------------------

/// `nexar_log_fn`; `None` is `NULL` (restores stderr).
pub type nexar_log_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, level: i32, line: *const c_char)>;

// ---- Statistics -------------------------------------------------------------------------

/// `nexar_stats_t`: counters of a communicator's engine.
#[repr(C)]
#[derive(Debug, Copy, Clone, Default)]
pub struct nexar_stats_t {
    pub struct_size: usize,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub streams_opened: u64,
    pub streams_accepted: u64,
    pub pending_tags: u64,
    pub unexpected_bytes: u64,
    pub connections: u64,
    pub rpc_requests_served: u64,
    pub rpc_responses_dropped: u64,
    pub relay_bytes_sent: u64,
    pub relay_bytes_forwarded: u64,
    pub relay_frames_dropped: u64,
    pub relay_bytes_held: u64,
    pub packets_fast_aead: u64,
    pub bytes_opened_in_place: u64,
    pub bytes_sealed_in_place: u64,
    pub shm_pairs: u64,
    pub shm_bytes_sent: u64,
    pub shm_bytes_received: u64,
    pub shm_collectives: u64,
    pub shm_bytes_by_reference: u64,
    pub connections_refused: u64,
    pub protocol_violations: u64,
    pub shm_bytes_read_directly: u64,
}

// ---- RPC ---------------------------------------------------------------------------------

/// Opaque: where a handler puts its response (`nexar_rpc_reply_t`).
#[repr(C)]
pub struct nexar_rpc_reply {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}
pub type nexar_rpc_reply_t = nexar_rpc_reply;

/// Opaque: a response delivered to the caller (`nexar_rpc_response_t`).
#[repr(C)]
pub struct nexar_rpc_response {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}
pub type nexar_rpc_response_t = nexar_rpc_response;

/// `nexar_rpc_handler_fn`; `None` is `NULL` (unregisters).
pub type nexar_rpc_handler_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        src_rank: u32,
        fn_id: u32,
        request: *const c_void,
        request_len: usize,
        reply: *mut nexar_rpc_reply_t,
    ) -> nexar_status_t,
>;

// ---- Functions ------------------------------------------------------------------------------

extern "C" {
    pub fn nexar_version() -> u32;
    pub fn nexar_version_string() -> *const c_char;

    pub fn nexar_status_str(status: nexar_status_t) -> *const c_char;
    pub fn nexar_last_error_message() -> *const c_char;
    pub fn nexar_last_error(info: *mut nexar_completion_t) -> nexar_status_t;

    pub fn nexar_dtype_size(dtype: nexar_dtype_t) -> usize;

    pub fn nexar_comm_options_init(
        opts: *mut nexar_comm_options_t,
        struct_size: usize,
    ) -> nexar_status_t;

    pub fn nexar_bootstrap_local(
        comms: *mut *mut nexar_comm_t,
        world_size: u32,
        opts: *const nexar_comm_options_t,
    ) -> nexar_status_t;
    pub fn nexar_comm_join(
        out: *mut *mut nexar_comm_t,
        opts: *const nexar_comm_options_t,
    ) -> nexar_status_t;
    pub fn nexar_comm_init_from_env(out: *mut *mut nexar_comm_t) -> nexar_status_t;
    pub fn nexar_comm_destroy(comm: *mut nexar_comm_t);
    pub fn nexar_comm_abort(comm: *mut nexar_comm_t) -> nexar_status_t;
    pub fn nexar_comm_rank(comm: *const nexar_comm_t) -> u32;
    pub fn nexar_comm_size(comm: *const nexar_comm_t) -> u32;
    pub fn nexar_comm_get_async_error(
        comm: *mut nexar_comm_t,
        info: *mut nexar_completion_t,
    ) -> nexar_status_t;

    pub fn nexar_seed_options_init(
        opts: *mut nexar_seed_options_t,
        struct_size: usize,
    ) -> nexar_status_t;
    pub fn nexar_seed_start(
        out: *mut *mut nexar_seed_t,
        opts: *const nexar_seed_options_t,
    ) -> nexar_status_t;
    pub fn nexar_seed_address(seed: *const nexar_seed_t) -> *const c_char;
    pub fn nexar_seed_wait(
        seed: *mut nexar_seed_t,
        timeout_ms: u32,
        ended: *mut i32,
    ) -> nexar_status_t;
    pub fn nexar_seed_stop(seed: *mut nexar_seed_t);

    pub fn nexar_set_log_callback(fn_: nexar_log_fn, user_data: *mut c_void) -> nexar_status_t;

    pub fn nexar_comm_get_stats(
        comm: *mut nexar_comm_t,
        stats: *mut nexar_stats_t,
    ) -> nexar_status_t;

    pub fn nexar_comm_poll(comm: *mut nexar_comm_t, max: u32, timeout_ms: i32) -> i32;
    pub fn nexar_comm_event_fd(comm: *const nexar_comm_t) -> c_int;

    pub fn nexar_send(
        comm: *mut nexar_comm_t,
        buf: *const c_void,
        bytes: usize,
        dest: u32,
        tag: u32,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_recv(
        comm: *mut nexar_comm_t,
        buf: *mut c_void,
        bytes: usize,
        src: u32,
        tag: u32,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;

    pub fn nexar_allreduce(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        op: nexar_op_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_broadcast(
        comm: *mut nexar_comm_t,
        buf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        root: u32,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_reduce(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        op: nexar_op_t,
        root: u32,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_allgather(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_reduce_scatter(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: usize,
        dtype: nexar_dtype_t,
        op: nexar_op_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_alltoall(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_gather(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        root: u32,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_scatter(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        root: u32,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_scan(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        op: nexar_op_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_exscan(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        op: nexar_op_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_barrier(
        comm: *mut nexar_comm_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;

    pub fn nexar_comm_split(
        comm: *mut nexar_comm_t,
        color: u32,
        key: u32,
        out: *mut *mut nexar_comm_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;

    pub fn nexar_rpc_register(
        comm: *mut nexar_comm_t,
        fn_id: u32,
        handler: nexar_rpc_handler_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_rpc_reply_alloc(reply: *mut nexar_rpc_reply_t, len: usize) -> *mut c_void;
    pub fn nexar_rpc_reply_set(
        reply: *mut nexar_rpc_reply_t,
        data: *const c_void,
        len: usize,
    ) -> nexar_status_t;
    pub fn nexar_rpc_reply_set_error(
        reply: *mut nexar_rpc_reply_t,
        message: *const c_char,
    ) -> nexar_status_t;
    pub fn nexar_rpc_call(
        comm: *mut nexar_comm_t,
        target_rank: u32,
        fn_id: u32,
        request: *const c_void,
        request_len: usize,
        response: *mut *mut nexar_rpc_response_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_rpc_response_data(response: *const nexar_rpc_response_t) -> *const c_void;
    pub fn nexar_rpc_response_size(response: *const nexar_rpc_response_t) -> usize;
    pub fn nexar_rpc_response_free(response: *mut nexar_rpc_response_t);
    pub fn nexar_flight_recorder_dump(
        comm: *mut nexar_comm_t,
        path: *const c_char,
    ) -> nexar_status_t;
    pub fn nexar_mem_alloc(
        comm: *mut nexar_comm_t,
        bytes: usize,
        out: *mut *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_mem_free(comm: *mut nexar_comm_t, ptr: *mut c_void) -> nexar_status_t;

    pub fn nexar_comm_get_failed(
        comm: *mut nexar_comm_t,
        ranks: *mut u32,
        capacity: u32,
        count: *mut u32,
    ) -> nexar_status_t;
    pub fn nexar_comm_ack_failed(
        comm: *mut nexar_comm_t,
        num_to_ack: u32,
        num_acked: *mut u32,
    ) -> nexar_status_t;
    pub fn nexar_comm_set_failure_callback(
        comm: *mut nexar_comm_t,
        fn_: nexar_failure_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_comm_revoke(comm: *mut nexar_comm_t) -> nexar_status_t;
    pub fn nexar_comm_is_revoked(comm: *const nexar_comm_t) -> i32;
    pub fn nexar_comm_agree(
        comm: *mut nexar_comm_t,
        flags: *mut u64,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_comm_shrink(
        comm: *mut nexar_comm_t,
        out: *mut *mut nexar_comm_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_comm_pending_joins(comm: *mut nexar_comm_t, count: *mut u32) -> nexar_status_t;
    pub fn nexar_comm_grow(
        comm: *mut nexar_comm_t,
        max_new: u32,
        out: *mut *mut nexar_comm_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
}

/// Called once per failed rank (`nexar_failure_fn`).
pub type nexar_failure_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        comm: *mut nexar_comm_t,
        rank: u32,
        cause: nexar_status_t,
    ),
>;

// ---- Gradient traffic: bucketed and compressed allreduce ------------------------

/// One buffer of a bucketed call (`nexar_tensor_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nexar_tensor_t {
    /// In place: input and result.
    pub buf: *mut c_void,
    /// Elements.
    pub count: usize,
}

/// The k largest magnitudes, with their indices.
pub const NEXAR_COMPRESS_TOPK: i32 = 1;
/// k positions chosen by a seed every rank shares.
pub const NEXAR_COMPRESS_RANDOMK: i32 = 2;

/// Opaque: a gradient compressor with its error-feedback residual (`nexar_compressor_t`).
#[repr(C)]
pub struct nexar_compressor {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}
pub type nexar_compressor_t = nexar_compressor;

extern "C" {
    pub fn nexar_allreduce_bucketed(
        comm: *mut nexar_comm_t,
        tensors: *const nexar_tensor_t,
        n: usize,
        dtype: nexar_dtype_t,
        op: nexar_op_t,
        bucket_bytes: usize,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
    pub fn nexar_compressor_create(
        out: *mut *mut nexar_compressor_t,
        kind: i32,
        ratio: f64,
        count: usize,
        dtype: nexar_dtype_t,
        seed: u64,
    ) -> nexar_status_t;
    pub fn nexar_compressor_destroy(compressor: *mut nexar_compressor_t);
    pub fn nexar_compressor_reset(compressor: *mut nexar_compressor_t) -> nexar_status_t;
    pub fn nexar_allreduce_compressed(
        comm: *mut nexar_comm_t,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        dtype: nexar_dtype_t,
        compressor: *mut nexar_compressor_t,
        done: nexar_done_fn,
        user_data: *mut c_void,
    ) -> nexar_status_t;
}

#[cfg(test)]
mod layout;
