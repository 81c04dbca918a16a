// Communicator configuration: defaults, then NEXAR_* environment variables,
// then the caller's option fields (nexar_comm_options_t, read by
// capi/options.h), and the helpers that parse the environment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "nexar.h"

namespace nexar {

// An algorithm a communicator's configuration forces for one collective
// (collective/forced_choice.h names the choices and reads them).
struct ForcedChoice {
  int index = 0;        // into the collective's names; 0 ("auto") when unset; -1 when invalid
  std::string problem;  // "VAR=value is not one of a, b, c" when invalid
  bool valid() const { return index >= 0; }
};

// The library's own copy of a caller's options: strings owned, sizes checked.
struct Config {
  uint32_t completion_mode = NEXAR_COMPLETION_THREAD;
  uint32_t pool_profile = NEXAR_POOL_TRAINING;
  uint64_t collective_timeout_ms = 30000;
  uint64_t barrier_timeout_ms = 30000;
  uint64_t p2p_timeout_ms = 300000;
  uint64_t connect_timeout_ms = 30000;
  uint64_t heartbeat_interval_ms = 1000;
  uint64_t heartbeat_timeout_ms = 5000;
  uint64_t large_msg_bytes = 8ull << 20;
  uint64_t pipeline_segment_bytes = 2ull << 20;
  uint32_t ring_max_world = 8;
  uint32_t spin_us = 0;
  std::string seed_address, cluster_token, listen_address, advertise_address, socket_ifname;
  int32_t rank = -1;
  uint32_t world_size = 0;
  uint64_t rpc_timeout_ms = 30000;
  uint32_t topology = NEXAR_TOPOLOGY_FULL;
  uint32_t shm = NEXAR_SHM_AUTO;
  uint64_t shm_max_bytes = 64ull << 20;
  // NEXAR_SHM_CMA: large collectives on shared memory read the peers'
  // buffers straight out of their processes where the host allows it (on),
  // and, by default, only where that one copy through the kernel was
  // measured cheaper than the copies through the segments it replaces
  // (auto).
  enum class ShmCma : uint8_t { Off, Auto, On };
  ShmCma shm_cma = ShmCma::Auto;
  bool elastic = false;               // keep the elastic seed's connection; join a running world
  uint64_t join_timeout_ms = 300000;  // how long a joiner waits to be admitted
  uint32_t topology_degree = 4;
  std::vector<uint32_t> topology_edges;  // pairs of ranks (NEXAR_TOPOLOGY_CUSTOM)
  // The algorithms forced for allreduce and broadcast: not option fields,
  // read from NEXAR_ALLREDUCE_ALGO / NEXAR_BROADCAST_ALGO with the options
  // (capi/options.h).
  ForcedChoice allreduce_algo, broadcast_algo;
};

// A field of a C options struct is present if the caller's struct_size is
// large enough to contain it: older callers pass smaller structs.
#define NEXAR_HAS_FIELD(type, size, field) \
  ((size) >= offsetof(type, field) + sizeof(((type *)0)->field))

// The variable's value, or NULL when it is unset or empty.
const char *env(const char *name);
// Environment parsing helpers (exposed for tests). Each returns an error
// naming the variable when the value is present but malformed.
Status env_seconds_ms(const char *name, uint64_t *out_ms);
Status env_bytes(const char *name, uint64_t *out);
Status env_u32(const char *name, uint32_t *out);
Status parse_bytes(const char *text, uint64_t *out);
Status parse_seconds_ms(const char *text, uint64_t *out_ms);

}  // namespace nexar
