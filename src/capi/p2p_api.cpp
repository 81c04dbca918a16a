// Point-to-point entry points: arguments are checked here, before anything is
// queued, so a rejected call never invokes its callback.
#include "capi/handles.h"
#include "client/p2p.h"

using nexar::capi::check_message;
using nexar::capi::guarded;

extern "C" {

NEXAR_API nexar_status_t nexar_send(nexar_comm_t *comm, const void *buf, size_t bytes,
                                    uint32_t dest, uint32_t tag, nexar_done_fn done,
                                    void *user_data) {
  return guarded("nexar_send", [&] {
    if (nexar_status_t s = check_message(comm, buf, bytes, dest, "nexar_send")) return s;
    nexar::Communicator *c = comm->impl.get();
    return nexar::capi::submit(
        comm, "nexar_send",
        [=](nexar::OpContext *op) { return nexar::p2p_send(c, op, buf, bytes, dest, tag); }, done,
        user_data);
  });
}

NEXAR_API nexar_status_t nexar_recv(nexar_comm_t *comm, void *buf, size_t bytes, uint32_t src,
                                    uint32_t tag, nexar_done_fn done, void *user_data) {
  return guarded("nexar_recv", [&] {
    if (nexar_status_t s = check_message(comm, buf, bytes, src, "nexar_recv")) return s;
    nexar::Communicator *c = comm->impl.get();
    return nexar::capi::submit(
        comm, "nexar_recv",
        [=](nexar::OpContext *op) { return nexar::p2p_recv(c, op, buf, bytes, src, tag); }, done,
        user_data);
  });
}

}  // extern "C"
