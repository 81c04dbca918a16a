/* Compiled and run by build.rs against the nexar.h that pkg-config found: it
 * prints, as Rust source, what a C compiler makes of the header (struct
 * sizes, alignments, field offsets and sizes, and every constant).
 * src/layout.rs compares that with the Rust declarations. */
#include <nexar.h>
#include <stddef.h>
#include <stdio.h>

#define ALIGN(T) \
  offsetof(      \
      struct {   \
        char c;  \
        T t;     \
      },         \
      t)
#define TYPE(T) printf("    (\"%s\", %zu, %zu),\n", #T, (size_t)sizeof(T), (size_t)ALIGN(T))
#define FIELD(T, f)                                                      \
  printf("    (\"%s.%s\", %zu, %zu),\n", #T, #f, (size_t)offsetof(T, f), \
         (size_t)sizeof(((T *)0)->f))
#define CONST(c) printf("    (\"%s\", %lld),\n", #c, (long long)(c))

int main(void) {
  printf("/// (type, size, align) as C sees them.\n");
  printf("pub const C_TYPES: &[(&str, usize, usize)] = &[\n");
  TYPE(nexar_completion_t);
  TYPE(nexar_comm_options_t);
  TYPE(nexar_seed_event_t);
  TYPE(nexar_seed_options_t);
  TYPE(nexar_stats_t);
  TYPE(nexar_status_t);
  TYPE(nexar_dtype_t);
  TYPE(nexar_op_t);
  TYPE(nexar_done_fn);
  TYPE(nexar_seed_event_fn);
  TYPE(nexar_log_fn);
  TYPE(nexar_rpc_handler_fn);
  printf("];\n");

  printf("/// (type.field, offset, size) as C sees them.\n");
  printf("pub const C_FIELDS: &[(&str, usize, usize)] = &[\n");
  FIELD(nexar_completion_t, struct_size);
  FIELD(nexar_completion_t, status);
  FIELD(nexar_completion_t, failed_rank);
  FIELD(nexar_completion_t, op_seq);
  FIELD(nexar_completion_t, message);

  FIELD(nexar_comm_options_t, struct_size);
  FIELD(nexar_comm_options_t, completion_mode);
  FIELD(nexar_comm_options_t, pool_profile);
  FIELD(nexar_comm_options_t, collective_timeout_ms);
  FIELD(nexar_comm_options_t, barrier_timeout_ms);
  FIELD(nexar_comm_options_t, p2p_timeout_ms);
  FIELD(nexar_comm_options_t, connect_timeout_ms);
  FIELD(nexar_comm_options_t, heartbeat_interval_ms);
  FIELD(nexar_comm_options_t, heartbeat_timeout_ms);
  FIELD(nexar_comm_options_t, large_msg_bytes);
  FIELD(nexar_comm_options_t, pipeline_segment_bytes);
  FIELD(nexar_comm_options_t, ring_max_world);
  FIELD(nexar_comm_options_t, spin_us);
  FIELD(nexar_comm_options_t, seed_address);
  FIELD(nexar_comm_options_t, cluster_token);
  FIELD(nexar_comm_options_t, listen_address);
  FIELD(nexar_comm_options_t, advertise_address);
  FIELD(nexar_comm_options_t, socket_ifname);
  FIELD(nexar_comm_options_t, rank);
  FIELD(nexar_comm_options_t, world_size);
  FIELD(nexar_comm_options_t, rpc_timeout_ms);
  FIELD(nexar_comm_options_t, topology);
  FIELD(nexar_comm_options_t, shm);
  FIELD(nexar_comm_options_t, shm_max_bytes);
  FIELD(nexar_comm_options_t, elastic);
  FIELD(nexar_comm_options_t, join_timeout_ms);
  FIELD(nexar_comm_options_t, topology_degree);
  FIELD(nexar_comm_options_t, topology_edges);
  FIELD(nexar_comm_options_t, topology_edge_count);

  FIELD(nexar_seed_event_t, struct_size);
  FIELD(nexar_seed_event_t, kind);
  FIELD(nexar_seed_event_t, rank);
  FIELD(nexar_seed_event_t, joined);
  FIELD(nexar_seed_event_t, world_size);
  FIELD(nexar_seed_event_t, message);

  FIELD(nexar_seed_options_t, struct_size);
  FIELD(nexar_seed_options_t, listen_address);
  FIELD(nexar_seed_options_t, world_size);
  FIELD(nexar_seed_options_t, open);
  FIELD(nexar_seed_options_t, cluster_token);
  FIELD(nexar_seed_options_t, token_file);
  FIELD(nexar_seed_options_t, ca_dir);
  FIELD(nexar_seed_options_t, formation_timeout_ms);
  FIELD(nexar_seed_options_t, on_event);
  FIELD(nexar_seed_options_t, event_user_data);
  FIELD(nexar_seed_options_t, elastic);
  FIELD(nexar_seed_options_t, max_world_size);

  FIELD(nexar_stats_t, struct_size);
  FIELD(nexar_stats_t, bytes_sent);
  FIELD(nexar_stats_t, bytes_received);
  FIELD(nexar_stats_t, messages_sent);
  FIELD(nexar_stats_t, messages_received);
  FIELD(nexar_stats_t, streams_opened);
  FIELD(nexar_stats_t, streams_accepted);
  FIELD(nexar_stats_t, pending_tags);
  FIELD(nexar_stats_t, unexpected_bytes);
  FIELD(nexar_stats_t, connections);
  FIELD(nexar_stats_t, rpc_requests_served);
  FIELD(nexar_stats_t, rpc_responses_dropped);
  FIELD(nexar_stats_t, relay_bytes_sent);
  FIELD(nexar_stats_t, relay_bytes_forwarded);
  FIELD(nexar_stats_t, relay_frames_dropped);
  FIELD(nexar_stats_t, relay_bytes_held);
  FIELD(nexar_stats_t, packets_fast_aead);
  FIELD(nexar_stats_t, bytes_opened_in_place);
  FIELD(nexar_stats_t, bytes_sealed_in_place);
  FIELD(nexar_stats_t, shm_pairs);
  FIELD(nexar_stats_t, shm_bytes_sent);
  FIELD(nexar_stats_t, shm_bytes_received);
  FIELD(nexar_stats_t, shm_collectives);
  FIELD(nexar_stats_t, shm_bytes_by_reference);
  FIELD(nexar_stats_t, connections_refused);
  FIELD(nexar_stats_t, protocol_violations);
  FIELD(nexar_stats_t, shm_bytes_read_directly);
  printf("];\n");

  printf("/// (name, value) of every constant, as C sees them.\n");
  printf("pub const C_CONSTS: &[(&str, i64)] = &[\n");
  CONST(NEXAR_VERSION_MAJOR);
  CONST(NEXAR_VERSION_MINOR);
  CONST(NEXAR_VERSION_PATCH);
  CONST(NEXAR_VERSION_NUMBER);
  CONST(NEXAR_OK);
  CONST(NEXAR_ERR_INVALID_ARGUMENT);
  CONST(NEXAR_ERR_INVALID_RANK);
  CONST(NEXAR_ERR_SIZE_MISMATCH);
  CONST(NEXAR_ERR_TIMEOUT);
  CONST(NEXAR_ERR_PEER_FAILED);
  CONST(NEXAR_ERR_ABORTED);
  CONST(NEXAR_ERR_CLOSED);
  CONST(NEXAR_ERR_MISMATCH);
  CONST(NEXAR_ERR_TLS);
  CONST(NEXAR_ERR_AUTH);
  CONST(NEXAR_ERR_PROTOCOL);
  CONST(NEXAR_ERR_NO_MEMORY);
  CONST(NEXAR_ERR_IO);
  CONST(NEXAR_ERR_UNSUPPORTED);
  CONST(NEXAR_ERR_NOT_FOUND);
  CONST(NEXAR_ERR_WOULD_DEADLOCK);
  CONST(NEXAR_ERR_INTERNAL);
  CONST(NEXAR_ERR_RPC_NOT_REGISTERED);
  CONST(NEXAR_ERR_RPC_FAILED);
  CONST(NEXAR_DTYPE_F32);
  CONST(NEXAR_DTYPE_F64);
  CONST(NEXAR_DTYPE_F16);
  CONST(NEXAR_DTYPE_BF16);
  CONST(NEXAR_DTYPE_I8);
  CONST(NEXAR_DTYPE_I32);
  CONST(NEXAR_DTYPE_I64);
  CONST(NEXAR_DTYPE_U8);
  CONST(NEXAR_DTYPE_U32);
  CONST(NEXAR_DTYPE_U64);
  CONST(NEXAR_OP_SUM);
  CONST(NEXAR_OP_PROD);
  CONST(NEXAR_OP_MIN);
  CONST(NEXAR_OP_MAX);
  CONST(NEXAR_COMPLETION_THREAD);
  CONST(NEXAR_COMPLETION_POLLED);
  CONST(NEXAR_POOL_TRAINING);
  CONST(NEXAR_POOL_INFERENCE);
  CONST(NEXAR_TOPOLOGY_FULL);
  CONST(NEXAR_TOPOLOGY_RING);
  CONST(NEXAR_TOPOLOGY_KREGULAR);
  CONST(NEXAR_TOPOLOGY_HYPERCUBE);
  CONST(NEXAR_TOPOLOGY_CUSTOM);
  CONST(NEXAR_SHM_AUTO);
  CONST(NEXAR_SHM_OFF);
  CONST(NEXAR_SHM_REQUIRE);
  CONST(NEXAR_LOG_ERROR);
  CONST(NEXAR_LOG_WARN);
  CONST(NEXAR_LOG_INFO);
  CONST(NEXAR_LOG_DEBUG);
  CONST(NEXAR_LOG_TRACE);
  CONST(NEXAR_SEED_EVENT_LISTENING);
  CONST(NEXAR_SEED_EVENT_JOINED);
  CONST(NEXAR_SEED_EVENT_REFUSED);
  CONST(NEXAR_SEED_EVENT_WELCOMED);
  CONST(NEXAR_SEED_EVENT_FORMED);
  CONST(NEXAR_SEED_EVENT_FAILED);
  printf("];\n");
  printf("/// NEXAR_VERSION_STRING as C sees it.\n");
  printf("pub const C_VERSION_STRING: &str = \"%s\";\n", NEXAR_VERSION_STRING);
  return 0;
}
