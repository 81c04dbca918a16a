//! The layout test: every size, alignment, field offset and constant of the
//! Rust declarations against what a C compiler makes of the installed nexar.h
//! (build.rs compiles and runs layout/probe.c; its output is `c_layout`).

use super::*;
use std::collections::BTreeMap;
use std::mem::{align_of, size_of, MaybeUninit};

mod c_layout {
    include!(concat!(env!("OUT_DIR"), "/c_layout.rs"));
}

/// Offset and size of a field, without constructing the struct.
macro_rules! field {
    ($t:ident, $f:ident) => {{
        let slot = MaybeUninit::<$t>::uninit();
        let base = slot.as_ptr();
        // SAFETY: addr_of! computes the field's address inside the (uninitialised)
        // allocation without reading or creating a reference to it.
        let field = unsafe { std::ptr::addr_of!((*base).$f) };
        fn size_of_pointee<T>(_: *const T) -> usize {
            size_of::<T>()
        }
        (
            concat!(stringify!($t), ".", stringify!($f)),
            field as usize - base as usize,
            size_of_pointee(field),
        )
    }};
}

macro_rules! ty {
    ($t:ident) => {
        (stringify!($t), size_of::<$t>(), align_of::<$t>())
    };
}

macro_rules! konst {
    ($c:ident) => {
        (stringify!($c), $c as i64)
    };
}

fn rust_types() -> Vec<(&'static str, usize, usize)> {
    vec![
        ty!(nexar_completion_t),
        ty!(nexar_comm_options_t),
        ty!(nexar_seed_event_t),
        ty!(nexar_seed_options_t),
        ty!(nexar_stats_t),
        ty!(nexar_status_t),
        ty!(nexar_dtype_t),
        ty!(nexar_op_t),
        ty!(nexar_done_fn),
        ty!(nexar_seed_event_fn),
        ty!(nexar_log_fn),
        ty!(nexar_rpc_handler_fn),
    ]
}

fn rust_fields() -> Vec<(&'static str, usize, usize)> {
    vec![
        field!(nexar_completion_t, struct_size),
        field!(nexar_completion_t, status),
        field!(nexar_completion_t, failed_rank),
        field!(nexar_completion_t, op_seq),
        field!(nexar_completion_t, message),
        field!(nexar_comm_options_t, struct_size),
        field!(nexar_comm_options_t, completion_mode),
        field!(nexar_comm_options_t, pool_profile),
        field!(nexar_comm_options_t, collective_timeout_ms),
        field!(nexar_comm_options_t, barrier_timeout_ms),
        field!(nexar_comm_options_t, p2p_timeout_ms),
        field!(nexar_comm_options_t, connect_timeout_ms),
        field!(nexar_comm_options_t, heartbeat_interval_ms),
        field!(nexar_comm_options_t, heartbeat_timeout_ms),
        field!(nexar_comm_options_t, large_msg_bytes),
        field!(nexar_comm_options_t, pipeline_segment_bytes),
        field!(nexar_comm_options_t, ring_max_world),
        field!(nexar_comm_options_t, spin_us),
        field!(nexar_comm_options_t, seed_address),
        field!(nexar_comm_options_t, cluster_token),
        field!(nexar_comm_options_t, listen_address),
        field!(nexar_comm_options_t, advertise_address),
        field!(nexar_comm_options_t, socket_ifname),
        field!(nexar_comm_options_t, rank),
        field!(nexar_comm_options_t, world_size),
        field!(nexar_comm_options_t, rpc_timeout_ms),
        field!(nexar_comm_options_t, topology),
        field!(nexar_comm_options_t, shm),
        field!(nexar_comm_options_t, shm_max_bytes),
        field!(nexar_comm_options_t, elastic),
        field!(nexar_comm_options_t, join_timeout_ms),
        field!(nexar_comm_options_t, topology_degree),
        field!(nexar_comm_options_t, topology_edges),
        field!(nexar_comm_options_t, topology_edge_count),
        field!(nexar_seed_event_t, struct_size),
        field!(nexar_seed_event_t, kind),
        field!(nexar_seed_event_t, rank),
        field!(nexar_seed_event_t, joined),
        field!(nexar_seed_event_t, world_size),
        field!(nexar_seed_event_t, message),
        field!(nexar_seed_options_t, struct_size),
        field!(nexar_seed_options_t, listen_address),
        field!(nexar_seed_options_t, world_size),
        field!(nexar_seed_options_t, open),
        field!(nexar_seed_options_t, cluster_token),
        field!(nexar_seed_options_t, token_file),
        field!(nexar_seed_options_t, ca_dir),
        field!(nexar_seed_options_t, formation_timeout_ms),
        field!(nexar_seed_options_t, on_event),
        field!(nexar_seed_options_t, event_user_data),
        field!(nexar_seed_options_t, elastic),
        field!(nexar_seed_options_t, max_world_size),
        field!(nexar_stats_t, struct_size),
        field!(nexar_stats_t, bytes_sent),
        field!(nexar_stats_t, bytes_received),
        field!(nexar_stats_t, messages_sent),
        field!(nexar_stats_t, messages_received),
        field!(nexar_stats_t, streams_opened),
        field!(nexar_stats_t, streams_accepted),
        field!(nexar_stats_t, pending_tags),
        field!(nexar_stats_t, unexpected_bytes),
        field!(nexar_stats_t, connections),
        field!(nexar_stats_t, rpc_requests_served),
        field!(nexar_stats_t, rpc_responses_dropped),
        field!(nexar_stats_t, relay_bytes_sent),
        field!(nexar_stats_t, relay_bytes_forwarded),
        field!(nexar_stats_t, relay_frames_dropped),
        field!(nexar_stats_t, relay_bytes_held),
        field!(nexar_stats_t, packets_fast_aead),
        field!(nexar_stats_t, bytes_opened_in_place),
        field!(nexar_stats_t, bytes_sealed_in_place),
        field!(nexar_stats_t, shm_pairs),
        field!(nexar_stats_t, shm_bytes_sent),
        field!(nexar_stats_t, shm_bytes_received),
        field!(nexar_stats_t, shm_collectives),
        field!(nexar_stats_t, shm_bytes_by_reference),
        field!(nexar_stats_t, connections_refused),
        field!(nexar_stats_t, protocol_violations),
        field!(nexar_stats_t, shm_bytes_read_directly),
    ]
}

fn rust_consts() -> Vec<(&'static str, i64)> {
    vec![
        konst!(NEXAR_VERSION_MAJOR),
        konst!(NEXAR_VERSION_MINOR),
        konst!(NEXAR_VERSION_PATCH),
        konst!(NEXAR_VERSION_NUMBER),
        konst!(NEXAR_OK),
        konst!(NEXAR_ERR_INVALID_ARGUMENT),
        konst!(NEXAR_ERR_INVALID_RANK),
        konst!(NEXAR_ERR_SIZE_MISMATCH),
        konst!(NEXAR_ERR_TIMEOUT),
        konst!(NEXAR_ERR_PEER_FAILED),
        konst!(NEXAR_ERR_ABORTED),
        konst!(NEXAR_ERR_CLOSED),
        konst!(NEXAR_ERR_MISMATCH),
        konst!(NEXAR_ERR_TLS),
        konst!(NEXAR_ERR_AUTH),
        konst!(NEXAR_ERR_PROTOCOL),
        konst!(NEXAR_ERR_NO_MEMORY),
        konst!(NEXAR_ERR_IO),
        konst!(NEXAR_ERR_UNSUPPORTED),
        konst!(NEXAR_ERR_NOT_FOUND),
        konst!(NEXAR_ERR_WOULD_DEADLOCK),
        konst!(NEXAR_ERR_INTERNAL),
        konst!(NEXAR_ERR_RPC_NOT_REGISTERED),
        konst!(NEXAR_ERR_RPC_FAILED),
        konst!(NEXAR_DTYPE_F32),
        konst!(NEXAR_DTYPE_F64),
        konst!(NEXAR_DTYPE_F16),
        konst!(NEXAR_DTYPE_BF16),
        konst!(NEXAR_DTYPE_I8),
        konst!(NEXAR_DTYPE_I32),
        konst!(NEXAR_DTYPE_I64),
        konst!(NEXAR_DTYPE_U8),
        konst!(NEXAR_DTYPE_U32),
        konst!(NEXAR_DTYPE_U64),
        konst!(NEXAR_OP_SUM),
        konst!(NEXAR_OP_PROD),
        konst!(NEXAR_OP_MIN),
        konst!(NEXAR_OP_MAX),
        konst!(NEXAR_COMPLETION_THREAD),
        konst!(NEXAR_COMPLETION_POLLED),
        konst!(NEXAR_POOL_TRAINING),
        konst!(NEXAR_POOL_INFERENCE),
        konst!(NEXAR_TOPOLOGY_FULL),
        konst!(NEXAR_TOPOLOGY_RING),
        konst!(NEXAR_TOPOLOGY_KREGULAR),
        konst!(NEXAR_TOPOLOGY_HYPERCUBE),
        konst!(NEXAR_TOPOLOGY_CUSTOM),
        konst!(NEXAR_SHM_AUTO),
        konst!(NEXAR_SHM_OFF),
        konst!(NEXAR_SHM_REQUIRE),
        konst!(NEXAR_LOG_ERROR),
        konst!(NEXAR_LOG_WARN),
        konst!(NEXAR_LOG_INFO),
        konst!(NEXAR_LOG_DEBUG),
        konst!(NEXAR_LOG_TRACE),
        konst!(NEXAR_SEED_EVENT_LISTENING),
        konst!(NEXAR_SEED_EVENT_JOINED),
        konst!(NEXAR_SEED_EVENT_REFUSED),
        konst!(NEXAR_SEED_EVENT_WELCOMED),
        konst!(NEXAR_SEED_EVENT_FORMED),
        konst!(NEXAR_SEED_EVENT_FAILED),
    ]
}

/// Both sides must list the same names with the same values.
fn compare<V: PartialEq + std::fmt::Debug + Clone>(
    what: &str,
    c: &[(&str, V)],
    rust: &[(&'static str, V)],
) -> Vec<String> {
    let c: BTreeMap<&str, V> = c.iter().cloned().collect();
    let rust: BTreeMap<&str, V> = rust.iter().cloned().collect();
    let mut problems = Vec::new();
    for (name, cv) in &c {
        match rust.get(name) {
            None => problems.push(format!(
                "{} {}: in nexar.h, not declared in Rust",
                what, name
            )),
            Some(rv) if rv != cv => problems.push(format!(
                "{} {}: C says {:?}, Rust says {:?}",
                what, name, cv, rv
            )),
            Some(_) => {}
        }
    }
    for name in rust.keys() {
        if !c.contains_key(name) {
            problems.push(format!(
                "{} {}: declared in Rust, not probed in C",
                what, name
            ));
        }
    }
    problems
}

#[test]
fn layout_matches_the_header() {
    if let Err(why) = c_layout::PROBE {
        panic!(
            "the C layout probe (layout/probe.c) could not be built or run, so the Rust \
             declarations cannot be checked against nexar.h: {}",
            why
        );
    }
    let pair = |v: &[(&'static str, usize, usize)]| -> Vec<(&'static str, (usize, usize))> {
        v.iter().map(|&(n, a, b)| (n, (a, b))).collect()
    };
    let mut problems = Vec::new();
    problems.extend(compare(
        "type (size, align)",
        &pair(c_layout::C_TYPES),
        &pair(&rust_types()),
    ));
    problems.extend(compare(
        "field (offset, size)",
        &pair(c_layout::C_FIELDS),
        &pair(&rust_fields()),
    ));
    problems.extend(compare("constant", c_layout::C_CONSTS, &rust_consts()));
    if c_layout::C_VERSION_STRING != NEXAR_VERSION_STRING {
        problems.push(format!(
            "NEXAR_VERSION_STRING: C says {:?}, Rust says {:?}",
            c_layout::C_VERSION_STRING,
            NEXAR_VERSION_STRING
        ));
    }
    assert!(
        problems.is_empty(),
        "the Rust declarations drifted from nexar.h:\n  {}",
        problems.join("\n  ")
    );
    // The probe really ran: it reported every struct.
    assert!(c_layout::C_FIELDS.len() >= 60);
}

/// The library loaded is the one these declarations describe, and its
/// runtime sizes match (nexar_comm_options_init accepts our struct_size).
#[test]
fn library_agrees_at_run_time() {
    // SAFETY: plain calls without arguments; the string is static storage.
    let (version, text) = unsafe {
        (
            nexar_version(),
            std::ffi::CStr::from_ptr(nexar_version_string())
                .to_string_lossy()
                .into_owned(),
        )
    };
    assert_eq!(version, NEXAR_VERSION_NUMBER);
    assert_eq!(text, NEXAR_VERSION_STRING);
    let mut opts = MaybeUninit::<nexar_comm_options_t>::zeroed();
    // SAFETY: opts points to writable memory of the size passed.
    let st =
        unsafe { nexar_comm_options_init(opts.as_mut_ptr(), size_of::<nexar_comm_options_t>()) };
    assert_eq!(st, NEXAR_OK);
    // SAFETY: initialised by the successful call above.
    let opts = unsafe { opts.assume_init() };
    assert_eq!(opts.struct_size, size_of::<nexar_comm_options_t>());
    // SAFETY: a known dtype; no pointers involved.
    assert_eq!(unsafe { nexar_dtype_size(NEXAR_DTYPE_F64) }, 8);
    // The thread's last error fills our nexar_completion_t whole: nothing has
    // failed on this thread, so it reads as no failure.
    let mut info = MaybeUninit::<nexar_completion_t>::zeroed();
    // SAFETY: info points to writable memory; struct_size says how much.
    let st = unsafe {
        (*info.as_mut_ptr()).struct_size = size_of::<nexar_completion_t>();
        nexar_last_error(info.as_mut_ptr())
    };
    assert_eq!(st, NEXAR_OK);
    // SAFETY: zeroed, then filled by the successful call above.
    let info = unsafe { info.assume_init() };
    assert_eq!(info.struct_size, size_of::<nexar_completion_t>());
    assert_eq!(
        (info.status, info.failed_rank, info.op_seq),
        (NEXAR_OK, -1, 0)
    );
    assert!(!info.message.is_null());
}
