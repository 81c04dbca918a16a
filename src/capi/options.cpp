#include "capi/options.h"

#include <cstring>

#include "client/topology.h"
#include "collective/forced_choice.h"

namespace nexar {
namespace {

#define HAS_FIELD(size, field) NEXAR_HAS_FIELD(nexar_comm_options_t, size, field)

}  // namespace

Status init_options_from_env(nexar_comm_options_t *opts, size_t struct_size) {
  if (!opts) return error(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_options_init: opts is NULL");
  if (struct_size < offsetof(nexar_comm_options_t, completion_mode))
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("nexar_comm_options_init: struct_size %zu is too small", struct_size));
  // Build the full struct, then hand back as much as the caller has room for.
  nexar_comm_options_t full;
  memset(&full, 0, sizeof full);
  Config d;  // defaults
  full.struct_size = struct_size < sizeof full ? struct_size : sizeof full;
  full.completion_mode = d.completion_mode;
  full.pool_profile = d.pool_profile;
  full.collective_timeout_ms = d.collective_timeout_ms;
  full.barrier_timeout_ms = d.barrier_timeout_ms;
  full.p2p_timeout_ms = d.p2p_timeout_ms;
  full.connect_timeout_ms = d.connect_timeout_ms;
  full.heartbeat_interval_ms = d.heartbeat_interval_ms;
  full.heartbeat_timeout_ms = d.heartbeat_timeout_ms;
  full.large_msg_bytes = d.large_msg_bytes;
  full.pipeline_segment_bytes = d.pipeline_segment_bytes;
  full.ring_max_world = d.ring_max_world;
  full.spin_us = d.spin_us;
  full.rank = -1;
  full.rpc_timeout_ms = d.rpc_timeout_ms;
  full.topology = d.topology;
  full.shm = d.shm;
  full.shm_max_bytes = d.shm_max_bytes;
  full.elastic = d.elastic ? 1 : 0;
  full.join_timeout_ms = d.join_timeout_ms;
  full.topology_degree = d.topology_degree;

  Status s;
  if (!(s = env_seconds_ms("NEXAR_COLLECTIVE_TIMEOUT_SECS", &full.collective_timeout_ms))) return s;
  if (!(s = env_seconds_ms("NEXAR_BARRIER_TIMEOUT_SECS", &full.barrier_timeout_ms))) return s;
  if (!(s = env_seconds_ms("NEXAR_P2P_TIMEOUT_SECS", &full.p2p_timeout_ms))) return s;
  if (!(s = env_seconds_ms("NEXAR_RPC_TIMEOUT_SECS", &full.rpc_timeout_ms))) return s;
  if (!(s = env_seconds_ms("NEXAR_CONNECT_TIMEOUT_SECS", &full.connect_timeout_ms))) return s;
  if (!(s = env_seconds_ms("NEXAR_HEARTBEAT_INTERVAL_SECS", &full.heartbeat_interval_ms))) return s;
  if (!(s = env_seconds_ms("NEXAR_HEARTBEAT_TIMEOUT_SECS", &full.heartbeat_timeout_ms))) return s;
  if (!(s = env_bytes("NEXAR_LARGE_MSG_BYTES", &full.large_msg_bytes))) return s;
  if (!(s = env_bytes("NEXAR_PIPELINE_SEGMENT_BYTES", &full.pipeline_segment_bytes))) return s;
  if (!(s = env_u32("NEXAR_RING_MAX_WORLD", &full.ring_max_world))) return s;
  if (!(s = env_u32("NEXAR_SPIN_US", &full.spin_us))) return s;
  if (!(s = env_bytes("NEXAR_SHM_MAX_BYTES", &full.shm_max_bytes))) return s;
  if (const char *v = env("NEXAR_SHM")) {
    if (strcasecmp(v, "auto") == 0)
      full.shm = NEXAR_SHM_AUTO;
    else if (strcasecmp(v, "off") == 0 || strcmp(v, "0") == 0)
      full.shm = NEXAR_SHM_OFF;
    else if (strcasecmp(v, "require") == 0)
      full.shm = NEXAR_SHM_REQUIRE;
    else
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("NEXAR_SHM=%s: expected auto, off or require", v));
  }
  if (const char *v = env("NEXAR_COMPLETION_MODE")) {
    if (strcasecmp(v, "thread") == 0)
      full.completion_mode = NEXAR_COMPLETION_THREAD;
    else if (strcasecmp(v, "polled") == 0)
      full.completion_mode = NEXAR_COMPLETION_POLLED;
    else
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("NEXAR_COMPLETION_MODE=%s: expected thread or polled", v));
  }
  if (const char *v = env("NEXAR_POOL_PROFILE")) {
    if (strcasecmp(v, "training") == 0)
      full.pool_profile = NEXAR_POOL_TRAINING;
    else if (strcasecmp(v, "inference") == 0)
      full.pool_profile = NEXAR_POOL_INFERENCE;
    else
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("NEXAR_POOL_PROFILE=%s: expected training or inference", v));
  }
  full.seed_address = env("NEXAR_SEED");
  full.cluster_token = env("NEXAR_CLUSTER_TOKEN");
  full.listen_address = env("NEXAR_LISTEN_ADDR");
  full.advertise_address = env("NEXAR_ADVERTISE_ADDR");
  full.socket_ifname = env("NEXAR_SOCKET_IFNAME");
  if (const char *v = env("NEXAR_RANK")) {
    uint32_t r = 0;
    if (!(s = env_u32("NEXAR_RANK", &r))) return s;
    if (r > INT32_MAX)
      return error(NEXAR_ERR_INVALID_ARGUMENT, format("NEXAR_RANK=%s: too large", v));
    full.rank = static_cast<int32_t>(r);
  }
  if (!(s = env_u32("NEXAR_WORLD_SIZE", &full.world_size))) return s;
  if (const char *v = env("NEXAR_TOPOLOGY"))
    if (!(s = parse_topology(v, &full.topology, &full.topology_degree))) return s;
  if (const char *v = env("NEXAR_ELASTIC")) {
    if (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0)
      full.elastic = 1;
    else if (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0)
      full.elastic = 0;
    else
      return error(NEXAR_ERR_INVALID_ARGUMENT, format("NEXAR_ELASTIC=%s: expected 0 or 1", v));
  }
  if (!(s = env_seconds_ms("NEXAR_JOIN_TIMEOUT_SECS", &full.join_timeout_ms))) return s;

  memcpy(opts, &full, full.struct_size);
  return {};
}

Status config_from_options(const nexar_comm_options_t *opts, Config *out) {
  nexar_comm_options_t full;
  if (!opts) {
    Status s = init_options_from_env(&full, sizeof full);
    if (!s) return s;
    opts = &full;
  }
  const size_t n = opts->struct_size;
  if (n < offsetof(nexar_comm_options_t, completion_mode) || n > 4096)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("options struct_size %zu is not valid; call nexar_comm_options_init", n));
  Config c;
  if (HAS_FIELD(n, completion_mode)) c.completion_mode = opts->completion_mode;
  if (HAS_FIELD(n, pool_profile)) c.pool_profile = opts->pool_profile;
  if (HAS_FIELD(n, collective_timeout_ms)) c.collective_timeout_ms = opts->collective_timeout_ms;
  if (HAS_FIELD(n, barrier_timeout_ms)) c.barrier_timeout_ms = opts->barrier_timeout_ms;
  if (HAS_FIELD(n, p2p_timeout_ms)) c.p2p_timeout_ms = opts->p2p_timeout_ms;
  if (HAS_FIELD(n, connect_timeout_ms)) c.connect_timeout_ms = opts->connect_timeout_ms;
  if (HAS_FIELD(n, heartbeat_interval_ms)) c.heartbeat_interval_ms = opts->heartbeat_interval_ms;
  if (HAS_FIELD(n, heartbeat_timeout_ms)) c.heartbeat_timeout_ms = opts->heartbeat_timeout_ms;
  if (HAS_FIELD(n, large_msg_bytes)) c.large_msg_bytes = opts->large_msg_bytes;
  if (HAS_FIELD(n, pipeline_segment_bytes)) c.pipeline_segment_bytes = opts->pipeline_segment_bytes;
  if (HAS_FIELD(n, ring_max_world)) c.ring_max_world = opts->ring_max_world;
  if (HAS_FIELD(n, spin_us)) c.spin_us = opts->spin_us;
  auto str = [](const char *s) { return s ? std::string(s) : std::string(); };
  if (HAS_FIELD(n, seed_address)) c.seed_address = str(opts->seed_address);
  if (HAS_FIELD(n, cluster_token)) c.cluster_token = str(opts->cluster_token);
  if (HAS_FIELD(n, listen_address)) c.listen_address = str(opts->listen_address);
  if (HAS_FIELD(n, advertise_address)) c.advertise_address = str(opts->advertise_address);
  if (HAS_FIELD(n, socket_ifname)) c.socket_ifname = str(opts->socket_ifname);
  if (HAS_FIELD(n, rank)) c.rank = opts->rank;
  if (HAS_FIELD(n, world_size)) c.world_size = opts->world_size;
  if (HAS_FIELD(n, rpc_timeout_ms)) c.rpc_timeout_ms = opts->rpc_timeout_ms;
  if (HAS_FIELD(n, topology)) c.topology = opts->topology;
  if (HAS_FIELD(n, shm)) c.shm = opts->shm;
  if (HAS_FIELD(n, shm_max_bytes)) c.shm_max_bytes = opts->shm_max_bytes;
  if (HAS_FIELD(n, elastic)) c.elastic = opts->elastic != 0;
  if (HAS_FIELD(n, join_timeout_ms)) c.join_timeout_ms = opts->join_timeout_ms;
  if (HAS_FIELD(n, topology_degree)) c.topology_degree = opts->topology_degree;
  if (HAS_FIELD(n, topology_edge_count) && opts->topology_edge_count > 0) {
    if (!opts->topology_edges)
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   "topology_edges is NULL but topology_edge_count is not 0");
    if (opts->topology_edge_count > (size_t{1} << 24))
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("topology_edge_count %zu is too large", opts->topology_edge_count));
    c.topology_edges.assign(opts->topology_edges,
                            opts->topology_edges + 2 * opts->topology_edge_count);
  }

  if (const char *v = env("NEXAR_SHM_CMA")) {
    if (strcasecmp(v, "off") == 0 || strcmp(v, "0") == 0)
      c.shm_cma = Config::ShmCma::Off;
    else if (strcasecmp(v, "on") == 0 || strcmp(v, "1") == 0)
      c.shm_cma = Config::ShmCma::On;
    else if (strcasecmp(v, "auto") != 0)
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("NEXAR_SHM_CMA=%s: expected auto, on or off", v));
  }

  if (c.completion_mode > NEXAR_COMPLETION_POLLED)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("completion_mode %u is not valid", c.completion_mode));
  if (c.pool_profile > NEXAR_POOL_INFERENCE)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("pool_profile %u is not valid", c.pool_profile));
  if (c.collective_timeout_ms == 0 || c.barrier_timeout_ms == 0 || c.p2p_timeout_ms == 0 ||
      c.connect_timeout_ms == 0 || c.rpc_timeout_ms == 0 || c.join_timeout_ms == 0)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 "timeouts must be greater than zero (every wait is bounded)");
  if (c.heartbeat_interval_ms == 0 || c.heartbeat_timeout_ms < c.heartbeat_interval_ms)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 "heartbeat_timeout_ms must be at least heartbeat_interval_ms, which must be > 0");
  if (c.topology > NEXAR_TOPOLOGY_CUSTOM)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("topology %u is not valid (NEXAR_TOPOLOGY_FULL, _RING, _KREGULAR, "
                        "_HYPERCUBE or _CUSTOM)",
                        c.topology));
  if (c.topology == NEXAR_TOPOLOGY_KREGULAR && (c.topology_degree < 2 || c.topology_degree > 65535))
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("topology_degree %u is not valid for NEXAR_TOPOLOGY_KREGULAR (2 to 65535)",
                        c.topology_degree));
  if (c.topology == NEXAR_TOPOLOGY_CUSTOM && c.topology_edges.empty())
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 "NEXAR_TOPOLOGY_CUSTOM needs topology_edges (pairs of ranks)");
  if (c.shm > NEXAR_SHM_REQUIRE)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("shm %u is not valid (NEXAR_SHM_AUTO, _OFF or _REQUIRE)", c.shm));
  if (c.pipeline_segment_bytes < 4096)
    return error(NEXAR_ERR_INVALID_ARGUMENT, "pipeline_segment_bytes must be at least 4096");
  // An invalid choice fails only the collective it names, at each call.
  c.allreduce_algo = read_forced_allreduce();
  c.broadcast_algo = read_forced_broadcast();
  *out = std::move(c);
  return {};
}

}  // namespace nexar
