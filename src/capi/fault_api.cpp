// The C entry points of failure handling: observing failures, revoke, agree
// and shrink (client/comm_faults.h, client/agreement.h, collective/shrink.cpp).
// Agree and shrink run as fault-tolerant operations: they work on a revoked
// communicator and with failed members; only abort and destroy end them.
#include "capi/handles.h"
#include "client/agreement.h"
#include "collective/collectives.h"

using nexar::capi::fail;
using nexar::capi::guarded;

namespace {

// Runs where the communicator's callbacks run: turns the completion that
// carries a failure into the application's failure callback.
void run_failure_hook(void *data, const nexar_completion_t *c) {
  nexar_comm_t *comm = static_cast<nexar_comm_t *>(data);
  nexar_failure_fn fn;
  void *user_data;
  {
    std::lock_guard<std::mutex> g(comm->failure_hook->mu);
    fn = comm->failure_hook->fn;
    user_data = comm->failure_hook->user_data;
  }
  if (fn && c->failed_rank >= 0)
    fn(user_data, comm, static_cast<uint32_t>(c->failed_rank), c->status);
}

nexar_status_t submit_fault_tolerant(nexar_comm_t *comm, const char *name,
                                     nexar::Communicator::Body body, nexar_done_fn done,
                                     void *user_data) {
  uint64_t seq = 0;
  nexar::Status s = comm->impl->submit_fault_tolerant(name, std::move(body), done, user_data, &seq);
  return s.ok() ? nexar::capi::ok() : fail(s, seq);
}

nexar::Task<nexar::Status> run_agree(nexar::Communicator *comm, nexar::OpContext *op,
                                     uint64_t *flags) {
  nexar::Agreement::Outcome o;
  nexar::Status s = co_await comm->agreement().run(op, "nexar_comm_agree", *flags, &o);
  // The value is agreed also when the status is PEER_FAILED.
  if (o.round != 0) *flags = o.flags;
  co_return s;
}

nexar::Task<nexar::Status> run_shrink(nexar::Communicator *comm, nexar::OpContext *op,
                                      nexar_comm_t **out,
                                      std::shared_ptr<nexar::ElasticLink> elastic) {
  std::unique_ptr<nexar::Communicator> child;
  nexar::Status s = co_await nexar::shrink(comm, op, &child);
  if (!s) co_return s;
  *out = new nexar_comm{std::move(child)};
  (*out)->elastic = std::move(elastic);  // the shrunk world can grow again
  co_return s;
}

}  // namespace

extern "C" {

NEXAR_API nexar_status_t nexar_comm_get_failed(nexar_comm_t *comm, uint32_t *ranks,
                                               uint32_t capacity, uint32_t *count) {
  return guarded("nexar_comm_get_failed", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_get_failed")) return no;
    if (!count) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_get_failed: count is NULL");
    if (!ranks && capacity > 0)
      return fail(NEXAR_ERR_INVALID_ARGUMENT,
                  "nexar_comm_get_failed: ranks is NULL but capacity is not 0");
    const std::vector<uint32_t> failed = comm->impl->faults().failed_ranks();
    for (uint32_t i = 0; i < capacity && i < failed.size(); ++i)
      ranks[i] = failed[i];
    *count = static_cast<uint32_t>(failed.size());
    return nexar::capi::ok();
  });
}

NEXAR_API nexar_status_t nexar_comm_ack_failed(nexar_comm_t *comm, uint32_t num_to_ack,
                                               uint32_t *num_acked) {
  return guarded("nexar_comm_ack_failed", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_ack_failed")) return no;
    const uint32_t acked = comm->impl->faults().acknowledge(num_to_ack);
    if (num_acked) *num_acked = acked;
    return nexar::capi::ok();
  });
}

NEXAR_API nexar_status_t nexar_comm_set_failure_callback(nexar_comm_t *comm, nexar_failure_fn fn,
                                                         void *user_data) {
  return guarded("nexar_comm_set_failure_callback", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_set_failure_callback"))
      return no;
    {
      std::lock_guard<std::mutex> g(comm->failure_hook->mu);
      comm->failure_hook->fn = fn;
      comm->failure_hook->user_data = user_data;
    }
    comm->impl->faults().set_hook(fn ? &run_failure_hook : nullptr, comm);
    return nexar::capi::ok();
  });
}

NEXAR_API nexar_status_t nexar_comm_revoke(nexar_comm_t *comm) {
  return guarded("nexar_comm_revoke", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_revoke")) return no;
    comm->impl->revoke();
    return nexar::capi::ok();
  });
}

NEXAR_API int32_t nexar_comm_is_revoked(const nexar_comm_t *comm) {
  return comm && comm->impl->faults().revoked() ? 1 : 0;
}

NEXAR_API nexar_status_t nexar_comm_agree(nexar_comm_t *comm, uint64_t *flags, nexar_done_fn done,
                                          void *user_data) {
  return guarded("nexar_comm_agree", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_agree")) return no;
    if (!flags) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_agree: flags is NULL");
    nexar::Communicator *c = comm->impl.get();
    return submit_fault_tolerant(
        comm, "nexar_comm_agree", [=](nexar::OpContext *op) { return run_agree(c, op, flags); },
        done, user_data);
  });
}

NEXAR_API nexar_status_t nexar_comm_shrink(nexar_comm_t *comm, nexar_comm_t **out,
                                           nexar_done_fn done, void *user_data) {
  return guarded("nexar_comm_shrink", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_comm_shrink")) return no;
    if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_shrink: out is NULL");
    *out = nullptr;
    nexar::Communicator *c = comm->impl.get();
    std::shared_ptr<nexar::ElasticLink> link = comm->elastic;
    return submit_fault_tolerant(
        comm, "nexar_comm_shrink",
        [=](nexar::OpContext *op) { return run_shrink(c, op, out, link); }, done, user_data);
  });
}

}  // extern "C"
