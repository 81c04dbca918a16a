// nexar_comm_split: the C entry point of communicator splitting
// (collective/split.cpp). The split is a collective, numbered with the
// others, so it must be issued in the same order on every rank of the parent.
// *out is written on the engine thread as the last step of a successful split,
// before the completion is queued, so it is set when done runs or a blocking
// call returns; it stays NULL if the split fails.
#include "capi/handles.h"
#include "collective/collectives.h"

using nexar::capi::fail;
using nexar::capi::guarded;

namespace {

nexar::Task<nexar::Status> run_split(nexar::Communicator *comm, nexar::OpContext *op,
                                     uint32_t color, uint32_t key, nexar_comm_t **out) {
  std::unique_ptr<nexar::Communicator> child;
  nexar::Status s = co_await nexar::split(comm, op, color, key, &child);
  if (!s) co_return s;
  *out = new nexar_comm{std::move(child)};
  co_return s;
}

}  // namespace

extern "C" {

NEXAR_API nexar_status_t nexar_comm_split(nexar_comm_t *comm, uint32_t color, uint32_t key,
                                          nexar_comm_t **out, nexar_done_fn done, void *user_data) {
  return guarded("nexar_comm_split", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_split")) return no;
    if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_split: out is NULL");
    *out = nullptr;
    nexar::Communicator *c = comm->impl.get();
    return nexar::capi::submit_collective(
        comm, "nexar_comm_split",
        [=](nexar::OpContext *op) { return run_split(c, op, color, key, out); }, done, user_data);
  });
}

}  // extern "C"
