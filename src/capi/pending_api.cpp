// Entry points of the contract whose implementation has not landed yet. They
// link, validate nothing, and fail honestly with NEXAR_ERR_UNSUPPORTED (the
// callback is never invoked, as for every rejected call).
#include "capi/handles.h"

using nexar::capi::fail;

#define NEXAR_NOT_YET(name) \
  fail(NEXAR_ERR_UNSUPPORTED, #name " is not implemented in this build of nexar yet")

extern "C" {

NEXAR_API nexar_status_t nexar_comm_join(nexar_comm_t **, const nexar_comm_options_t *) {
  return NEXAR_NOT_YET(nexar_comm_join);
}
NEXAR_API nexar_status_t nexar_comm_init_from_env(nexar_comm_t **) {
  return NEXAR_NOT_YET(nexar_comm_init_from_env);
}

NEXAR_API nexar_status_t nexar_allreduce(nexar_comm_t *, const void *, void *, size_t,
                                         nexar_dtype_t, nexar_op_t, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_allreduce);
}
NEXAR_API nexar_status_t nexar_broadcast(nexar_comm_t *, void *, size_t, nexar_dtype_t, uint32_t,
                                         nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_broadcast);
}
NEXAR_API nexar_status_t nexar_reduce(nexar_comm_t *, const void *, void *, size_t, nexar_dtype_t,
                                      nexar_op_t, uint32_t, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_reduce);
}
NEXAR_API nexar_status_t nexar_allgather(nexar_comm_t *, const void *, void *, size_t,
                                         nexar_dtype_t, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_allgather);
}
NEXAR_API nexar_status_t nexar_reduce_scatter(nexar_comm_t *, const void *, void *, size_t,
                                              nexar_dtype_t, nexar_op_t, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_reduce_scatter);
}
NEXAR_API nexar_status_t nexar_alltoall(nexar_comm_t *, const void *, void *, size_t, nexar_dtype_t,
                                        nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_alltoall);
}
NEXAR_API nexar_status_t nexar_gather(nexar_comm_t *, const void *, void *, size_t, nexar_dtype_t,
                                      uint32_t, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_gather);
}
NEXAR_API nexar_status_t nexar_scatter(nexar_comm_t *, const void *, void *, size_t, nexar_dtype_t,
                                       uint32_t, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_scatter);
}
NEXAR_API nexar_status_t nexar_scan(nexar_comm_t *, const void *, void *, size_t, nexar_dtype_t,
                                    nexar_op_t, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_scan);
}
NEXAR_API nexar_status_t nexar_exscan(nexar_comm_t *, const void *, void *, size_t, nexar_dtype_t,
                                      nexar_op_t, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_exscan);
}
NEXAR_API nexar_status_t nexar_barrier(nexar_comm_t *, nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_barrier);
}
NEXAR_API nexar_status_t nexar_comm_split(nexar_comm_t *, uint32_t, uint32_t, nexar_comm_t **,
                                          nexar_done_fn, void *) {
  return NEXAR_NOT_YET(nexar_comm_split);
}

}  // extern "C"
