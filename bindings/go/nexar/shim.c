// The Go binding's C half (see shim.h): wrappers that keep nexar's
// thread-local last error, and the trampolines through which nexar's
// threads reach Go.
#include "shim.h"

#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"

// The failed call's own record: its message and the rank it names (a
// blocking receive names the peer that died or aborted).
static nexar_status_t fail(nexar_status_t st, gx_err *err) {
  if (st == NEXAR_OK || !err) return st;
  nexar_completion_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (nexar_last_error(&info) == NEXAR_OK) {
    err->msg = strdup(info.message);
    err->failed_rank = info.failed_rank;
  } else {
    err->msg = strdup(nexar_last_error_message());
    err->failed_rank = -1;
  }
  return st;
}

// nexar's completion thread: hands the completion to Go (pending.go).
static void gx_done(void *user_data, const nexar_completion_t *c) {
  goNexarDone((gx_pending *)user_data, c->status, c->failed_rank,
              (char *)(c->message ? c->message : ""));
}

// nexar's completion thread: runs the Go handler (rpc.go).
static nexar_status_t gx_serve(void *user_data, uint32_t src_rank, uint32_t fn_id,
                               const void *request, size_t request_len, nexar_rpc_reply_t *reply) {
  return goNexarServe((uintptr_t)user_data, src_rank, fn_id, (void *)request, request_len, reply);
}

// Where the communicator's callbacks run: hands one failed rank to Go (faults.go).
static void gx_failure(void *user_data, nexar_comm_t *c, uint32_t rank, nexar_status_t cause) {
  (void)c;
  goNexarFailure((uintptr_t)user_data, rank, cause);
}

nexar_status_t gx_set_failure_callback(nexar_comm_t *c, uintptr_t handle, gx_err *err) {
  return fail(nexar_comm_set_failure_callback(c, handle ? gx_failure : NULL, (void *)handle), err);
}

// Any nexar thread, one call at a time: hands the line to Go (log.go). The
// flag is per thread: Go code called from here runs on this thread.
static __thread int in_log_callback;

static void gx_log(void *user_data, int32_t level, const char *line) {
  (void)user_data;
  in_log_callback = 1;
  goNexarLog(level, (char *)line);
  in_log_callback = 0;
}

nexar_status_t gx_set_log(int enable, gx_err *err) {
  return fail(nexar_set_log_callback(enable ? gx_log : NULL, NULL), err);
}

int gx_in_log_callback(void) {
  return in_log_callback;
}

nexar_status_t gx_op(int kind, nexar_comm_t *c, const void *s, void *r, size_t n, nexar_dtype_t t,
                     nexar_op_t op, uint32_t peer, uint32_t tag, gx_pending *p, gx_err *err) {
  nexar_done_fn done = p ? gx_done : NULL;
  nexar_status_t st;
  switch (kind) {
    case GX_ALLREDUCE:
      st = nexar_allreduce(c, s, r, n, t, op, done, p);
      break;
    case GX_BROADCAST:
      st = nexar_broadcast(c, r, n, t, peer, done, p);
      break;
    case GX_REDUCE:
      st = nexar_reduce(c, s, r, n, t, op, peer, done, p);
      break;
    case GX_ALLGATHER:
      st = nexar_allgather(c, s, r, n, t, done, p);
      break;
    case GX_REDUCE_SCATTER:
      st = nexar_reduce_scatter(c, s, r, n, t, op, done, p);
      break;
    case GX_ALLTOALL:
      st = nexar_alltoall(c, s, r, n, t, done, p);
      break;
    case GX_GATHER:
      st = nexar_gather(c, s, r, n, t, peer, done, p);
      break;
    case GX_SCATTER:
      st = nexar_scatter(c, s, r, n, t, peer, done, p);
      break;
    case GX_SCAN:
      st = nexar_scan(c, s, r, n, t, op, done, p);
      break;
    case GX_EXSCAN:
      st = nexar_exscan(c, s, r, n, t, op, done, p);
      break;
    case GX_BARRIER:
      st = nexar_barrier(c, done, p);
      break;
    case GX_SEND:
      st = nexar_send(c, s, n, peer, tag, done, p);
      break;
    case GX_RECV:
      st = nexar_recv(c, r, n, peer, tag, done, p);
      break;
    default:
      if (err) err->msg = strdup("unknown operation kind (a bug in the Go binding)");
      return NEXAR_ERR_INTERNAL;
  }
  return fail(st, err);
}

nexar_status_t gx_split(nexar_comm_t *c, uint32_t color, uint32_t key, nexar_comm_t **out,
                        gx_pending *p, gx_err *err) {
  return fail(nexar_comm_split(c, color, key, out, p ? gx_done : NULL, p), err);
}

nexar_status_t gx_rpc_call(nexar_comm_t *c, uint32_t target, uint32_t fn_id, const void *req,
                           size_t len, nexar_rpc_response_t **response, gx_pending *p,
                           gx_err *err) {
  return fail(nexar_rpc_call(c, target, fn_id, req, len, response, p ? gx_done : NULL, p), err);
}

nexar_status_t gx_rpc_register(nexar_comm_t *c, uint32_t fn_id, uintptr_t handle, gx_err *err) {
  return fail(nexar_rpc_register(c, fn_id, handle ? gx_serve : NULL, (void *)handle), err);
}

nexar_status_t gx_rpc_reply(nexar_rpc_reply_t *reply, const void *data, size_t len) {
  nexar_status_t st = nexar_rpc_reply_set(reply, data, len);
  if (st != NEXAR_OK) nexar_rpc_reply_set_error(reply, nexar_last_error_message());
  return st;
}

nexar_status_t gx_options_init(nexar_comm_options_t *opts, gx_err *err) {
  return fail(nexar_comm_options_init(opts, sizeof *opts), err);
}

nexar_status_t gx_bootstrap_local(nexar_comm_t **comms, uint32_t n,
                                  const nexar_comm_options_t *opts, gx_err *err) {
  return fail(nexar_bootstrap_local(comms, n, opts), err);
}

nexar_status_t gx_init_from_env(nexar_comm_t **out, gx_err *err) {
  return fail(nexar_comm_init_from_env(out), err);
}

nexar_status_t gx_join(nexar_comm_t **out, const nexar_comm_options_t *opts, gx_err *err) {
  return fail(nexar_comm_join(out, opts), err);
}

nexar_status_t gx_seed_options_init(nexar_seed_options_t *opts, gx_err *err) {
  return fail(nexar_seed_options_init(opts, sizeof *opts), err);
}

nexar_status_t gx_seed_start(nexar_seed_t **out, const nexar_seed_options_t *opts, gx_err *err) {
  return fail(nexar_seed_start(out, opts), err);
}

nexar_status_t gx_seed_wait(nexar_seed_t *seed, uint32_t timeout_ms, int32_t *ended, gx_err *err) {
  nexar_status_t st = nexar_seed_wait(seed, timeout_ms, ended);
  // While forming, NEXAR_ERR_TIMEOUT only says "not yet": no message to copy.
  return *ended || st != NEXAR_ERR_TIMEOUT ? fail(st, err) : st;
}

nexar_status_t gx_abort(nexar_comm_t *c, gx_err *err) {
  return fail(nexar_comm_abort(c), err);
}

nexar_status_t gx_flight_recorder_dump(nexar_comm_t *c, const char *path, gx_err *err) {
  return fail(nexar_flight_recorder_dump(c, path), err);
}

nexar_status_t gx_stats(nexar_comm_t *c, nexar_stats_t *stats, gx_err *err) {
  memset(stats, 0, sizeof *stats);
  stats->struct_size = sizeof *stats;
  return fail(nexar_comm_get_stats(c, stats), err);
}

nexar_status_t gx_mem_alloc(nexar_comm_t *c, size_t bytes, void **out, gx_err *err) {
  return fail(nexar_mem_alloc(c, bytes, out), err);
}

nexar_status_t gx_mem_free(nexar_comm_t *c, void *ptr, gx_err *err) {
  return fail(nexar_mem_free(c, ptr), err);
}

nexar_status_t gx_get_failed(nexar_comm_t *c, uint32_t *ranks, uint32_t cap, uint32_t *count,
                             gx_err *err) {
  return fail(nexar_comm_get_failed(c, ranks, cap, count), err);
}

nexar_status_t gx_ack_failed(nexar_comm_t *c, uint32_t n, uint32_t *acked, gx_err *err) {
  return fail(nexar_comm_ack_failed(c, n, acked), err);
}

nexar_status_t gx_revoke(nexar_comm_t *c, gx_err *err) {
  return fail(nexar_comm_revoke(c), err);
}

nexar_status_t gx_agree(nexar_comm_t *c, uint64_t *flags, gx_err *err) {
  return fail(nexar_comm_agree(c, flags, NULL, NULL), err);
}

nexar_status_t gx_shrink(nexar_comm_t *c, nexar_comm_t **out, gx_err *err) {
  return fail(nexar_comm_shrink(c, out, NULL, NULL), err);
}

nexar_status_t gx_allreduce_bucketed(nexar_comm_t *c, const nexar_tensor_t *tensors, size_t n,
                                     nexar_dtype_t t, nexar_op_t op, size_t bucket_bytes,
                                     gx_pending *p, gx_err *err) {
  return fail(nexar_allreduce_bucketed(c, tensors, n, t, op, bucket_bytes, p ? gx_done : NULL, p),
              err);
}

nexar_status_t gx_compressor_create(nexar_compressor_t **out, int32_t kind, double ratio,
                                    size_t count, nexar_dtype_t t, uint64_t seed, gx_err *err) {
  return fail(nexar_compressor_create(out, kind, ratio, count, t, seed), err);
}

nexar_status_t gx_allreduce_compressed(nexar_comm_t *c, const void *s, void *r, size_t n,
                                       nexar_dtype_t t, nexar_compressor_t *z, gx_pending *p,
                                       gx_err *err) {
  return fail(nexar_allreduce_compressed(c, s, r, n, t, z, p ? gx_done : NULL, p), err);
}

nexar_status_t gx_pending_joins(nexar_comm_t *c, uint32_t *count, gx_err *err) {
  return fail(nexar_comm_pending_joins(c, count), err);
}

nexar_status_t gx_grow(nexar_comm_t *c, uint32_t max_new, nexar_comm_t **out, gx_err *err) {
  return fail(nexar_comm_grow(c, max_new, out, NULL, NULL), err);
}
