// Symmetric memory: nexar_mem_alloc and nexar_mem_free
// (client/symmetric_memory.h).
#include "capi/handles.h"
#include "client/client.h"

using nexar::capi::fail;
using nexar::capi::guarded;

extern "C" {

NEXAR_API nexar_status_t nexar_mem_alloc(nexar_comm_t *comm, size_t bytes, void **out) {
  return guarded("nexar_mem_alloc", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_mem_alloc")) return no;
    if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_mem_alloc: out is NULL");
    *out = nullptr;
    nexar::Status s = comm->impl->client().shm().symmetric().allocate(bytes, out);
    return s.ok() ? nexar::capi::ok() : fail(s);
  });
}

NEXAR_API nexar_status_t nexar_mem_free(nexar_comm_t *comm, void *ptr) {
  return guarded("nexar_mem_free", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_mem_free")) return no;
    nexar::Status s = comm->impl->client().shm().symmetric().release(ptr);
    return s.ok() ? nexar::capi::ok() : fail(s);
  });
}

}  // extern "C"
