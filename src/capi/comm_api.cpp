// Communicator lifecycle, options and polled completion.
#include <chrono>
#include <cstring>
#include <thread>

#include "capi/handles.h"
#include "capi/options.h"
#include "cluster/local_bootstrap.h"
#include "core/config.h"

using nexar::capi::fail;
using nexar::capi::guarded;
using nexar::capi::ok;

extern "C" {

NEXAR_API nexar_status_t nexar_comm_options_init(nexar_comm_options_t *opts, size_t struct_size) {
  return guarded("nexar_comm_options_init", [&] {
    nexar::Status s = nexar::init_options_from_env(opts, struct_size);
    return s.ok() ? ok() : fail(s);
  });
}

NEXAR_API nexar_status_t nexar_bootstrap_local(nexar_comm_t **comms, uint32_t world_size,
                                               const nexar_comm_options_t *opts) {
  return guarded("nexar_bootstrap_local", [&] {
    if (!comms) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_bootstrap_local: comms is NULL");
    if (world_size == 0 || world_size > 1024)
      return fail(
          NEXAR_ERR_INVALID_ARGUMENT,
          nexar::format("nexar_bootstrap_local: world_size %u is not in 1..1024", world_size));
    nexar::Config cfg;
    nexar::Status s = nexar::config_from_options(opts, &cfg);
    if (!s) return fail(nexar::error(s.code, "nexar_bootstrap_local: " + s.message));
    std::vector<std::unique_ptr<nexar::Communicator>> made;
    s = nexar::bootstrap_local(world_size, cfg, &made);
    if (!s) return fail(nexar::error(s.code, "nexar_bootstrap_local: " + s.message));
    std::vector<std::unique_ptr<nexar_comm>> handles;
    for (auto &c : made)
      handles.push_back(std::make_unique<nexar_comm>(nexar_comm{std::move(c)}));
    for (uint32_t r = 0; r < world_size; ++r)
      comms[r] = handles[r].release();
    return ok();
  });
}

NEXAR_API void nexar_comm_destroy(nexar_comm_t *comm) {
  if (!comm) return;
  // A forked child's copy: its threads are the parent's, gone here; the
  // memory goes with the child (core/fork_generation.h).
  if (comm->impl && comm->impl->in_forked_child()) return;
  guarded("nexar_comm_destroy", [&] {
    std::unique_ptr<nexar_comm> owned(comm);
    owned->impl.reset();
    return NEXAR_OK;
  });
}

NEXAR_API nexar_status_t nexar_comm_abort(nexar_comm_t *comm) {
  return guarded("nexar_comm_abort", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_abort")) return no;
    comm->impl->abort();
    return ok();
  });
}

NEXAR_API uint32_t nexar_comm_rank(const nexar_comm_t *comm) {
  return comm ? comm->impl->rank() : 0;
}
NEXAR_API uint32_t nexar_comm_size(const nexar_comm_t *comm) {
  return comm ? comm->impl->size() : 0;
}

NEXAR_API nexar_status_t nexar_comm_get_async_error(nexar_comm_t *comm, nexar_completion_t *info) {
  return guarded("nexar_comm_get_async_error", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_get_async_error")) return no;
    nexar::Status s = comm->impl->async_error();
    if (info && !s.ok()) {
      info->struct_size = sizeof *info;
      info->status = s.code;
      info->failed_rank = s.failed_rank;
      info->op_seq = 0;
      info->message = comm->impl->async_error_message();
    }
    return s.code;
  });
}

NEXAR_API nexar_status_t nexar_comm_get_stats(nexar_comm_t *comm, nexar_stats_t *stats) {
  return guarded("nexar_comm_get_stats", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_get_stats")) return no;
    if (!stats) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_get_stats: stats is NULL");
    if (stats->struct_size < sizeof(size_t) + sizeof(uint64_t))
      return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_get_stats: stats->struct_size too small");
    nexar_stats_t full;
    memset(&full, 0, sizeof full);
    comm->impl->client().stats(&full);
    const size_t n = stats->struct_size < sizeof full ? stats->struct_size : sizeof full;
    full.struct_size = n;
    memcpy(stats, &full, n);
    return ok();
  });
}

NEXAR_API int32_t nexar_comm_poll(nexar_comm_t *comm, uint32_t max, int32_t timeout_ms) {
  return guarded("nexar_comm_poll", [&]() -> nexar_status_t {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_poll")) return no;
    if (timeout_ms < 0)
      return fail(NEXAR_ERR_INVALID_ARGUMENT,
                  "nexar_comm_poll: timeout_ms must be >= 0 (every wait is bounded)");
    nexar::PolledQueue *q = comm->impl->polled();
    if (!q)
      return fail(NEXAR_ERR_INVALID_ARGUMENT,
                  "nexar_comm_poll: the communicator was not created in polled mode");
    return q->poll(max, timeout_ms);
  });
}

NEXAR_API int nexar_comm_event_fd(const nexar_comm_t *comm) {
  if (!comm) return -1;
  nexar::PolledQueue *q = comm->impl->polled();
  return q ? q->fd() : -1;
}

}  // extern "C"
