// Elastic membership: how many processes wait to join, and grow
// (cluster/elastic_link.h, cluster/seed.h). A grow first agrees over the
// members, so that a member already dead fails it alike everywhere; the
// elastic seed then welcomes every member and the joiners into the grown
// world.
#include "capi/handles.h"
#include "cluster/elastic_link.h"
#include "core/thread_name.h"

using nexar::capi::fail;
using nexar::capi::guarded;
using nexar::capi::ok;

namespace {

// This member's whole grow, blocking.
nexar::Status grow_member(nexar_comm_t *comm, uint32_t max_new, uint64_t seq, nexar_comm_t **out) {
  using nexar::error;
  using nexar::format;
  nexar::Communicator &c = *comm->impl;
  const std::vector<uint32_t> failed = c.faults().failed_ranks();
  if (!failed.empty())
    return error(NEXAR_ERR_PEER_FAILED,
                 format("nexar_comm_grow: rank %u: rank %u of this communicator failed; shrink "
                        "it, then grow the shrunk communicator",
                        c.rank(), failed[0]),
                 static_cast<int32_t>(failed[0]));
  // A grow's agreement must not meet the shrink of members that recover.
  if (c.faults().revoked())
    return error(NEXAR_ERR_REVOKED,
                 format("nexar_comm_grow: rank %u: the communicator is revoked; shrink it, then "
                        "grow the shrunk communicator",
                        c.rank()));
  uint64_t flags = ~0ull;
  if (nexar_comm_agree(comm, &flags, nullptr, nullptr) != NEXAR_OK) {
    nexar_completion_t info;
    info.struct_size = sizeof info;
    nexar_last_error(&info);
    return error(info.status, format("nexar_comm_grow: %s", info.message), info.failed_rank);
  }
  std::unique_ptr<nexar::Communicator> grown;
  nexar::Status s = comm->elastic->grow(c, seq, max_new, &grown);
  if (!s) return error(s.code, "nexar_comm_grow: " + s.message, s.failed_rank);
  auto handle = std::make_unique<nexar_comm>();
  handle->impl = std::move(grown);
  handle->elastic = comm->elastic;
  *out = handle.release();
  return {};
}

}  // namespace

extern "C" {

NEXAR_API nexar_status_t nexar_comm_pending_joins(nexar_comm_t *comm, uint32_t *count) {
  return guarded("nexar_comm_pending_joins", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_pending_joins")) return no;
    if (!count) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_pending_joins: count is NULL");
    *count = 0;
    if (!comm->elastic)
      return fail(NEXAR_ERR_UNSUPPORTED,
                  "nexar_comm_pending_joins: this communicator has no elastic seed (join with "
                  "elastic = 1, NEXAR_ELASTIC=1, through a seed started with elastic = 1)");
    *count = comm->elastic->seed_gone() ? 0 : comm->elastic->pending_joins();
    return ok();
  });
}

NEXAR_API nexar_status_t nexar_comm_grow(nexar_comm_t *comm, uint32_t max_new, nexar_comm_t **out,
                                         nexar_done_fn done, void *user_data) {
  return guarded("nexar_comm_grow", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_grow")) return no;
    if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_grow: out is NULL");
    *out = nullptr;
    if (!comm->elastic)
      return fail(NEXAR_ERR_UNSUPPORTED,
                  "nexar_comm_grow: this communicator has no elastic seed (join with elastic = "
                  "1, NEXAR_ELASTIC=1, through a seed started with elastic = 1)");
    const uint64_t seq = comm->grows++;
    if (!done) {
      nexar::Status s = grow_member(comm, max_new, seq, out);
      return s.ok() ? ok() : fail(s);
    }
    comm->grow_thread.join();  // the previous grow's thread, finished
    comm->grow_thread.thread = std::thread([comm, max_new, seq, out, done, user_data] {
      nexar::name_this_thread("nexar-grow");
      nexar::Status s;
      try {
        s = grow_member(comm, max_new, seq, out);
      } catch (const std::exception &e) {
        s = nexar::error(NEXAR_ERR_INTERNAL, std::string("nexar_comm_grow: ") + e.what());
      }
      nexar_completion_t c;
      c.struct_size = sizeof c;
      c.status = s.code;
      c.failed_rank = s.failed_rank;
      c.op_seq = 0;
      c.message = s.message.c_str();
      done(user_data, &c);
    });
    return ok();
  });
}

}  // extern "C"
