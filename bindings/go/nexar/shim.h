/*
 * The Go binding's C half: thin wrappers over include/nexar.h. Declarations
 * only (cgo forbids definitions in the preamble of a file that uses
 * //export); the definitions are in shim.c.
 *
 * Every wrapper returns the nexar status. On a failed call (a refused one, or
 * a blocking one that failed) it copies nexar_last_error() into err (the
 * message malloc'd, freed by Go) in the same C call: the record is
 * thread-local and a goroutine may move to another thread between two cgo
 * calls.
 */
#ifndef NEXAR_GO_SHIM_H
#define NEXAR_GO_SHIM_H

#include <nexar.h>
#include <stddef.h>
#include <stdint.h>

/* A failed call, from nexar_last_error: nexar's message and the rank the
 * call itself names (the peer a blocking receive lost, the rank that aborted). */
typedef struct gx_err {
  char *msg;           /* malloc'd copy of the record's message, or NULL */
  int32_t failed_rank; /* -1 when the call names none */
} gx_err;

/* One operation started with a completion callback (the cancellable path).
 * Allocated with C.malloc by Go, passed to nexar as user_data, freed by Go
 * once the completion has been seen (never earlier). */
typedef struct gx_pending {
  uintptr_t handle;               /* runtime/cgo.Handle of the Go waiter */
  void *buf;                      /* staging memory (C.malloc) or NULL */
  nexar_rpc_response_t *response; /* nexar_rpc_call writes it before done */
  nexar_comm_t *split_out;        /* nexar_comm_split writes it before done */
} gx_pending;

enum {
  GX_ALLREDUCE = 1,
  GX_BROADCAST,
  GX_REDUCE,
  GX_ALLGATHER,
  GX_REDUCE_SCATTER,
  GX_ALLTOALL,
  GX_GATHER,
  GX_SCATTER,
  GX_SCAN,
  GX_EXSCAN,
  GX_BARRIER,
  GX_SEND,
  GX_RECV
};

/* Every collective and point-to-point operation. count is elements (bytes
 * for GX_SEND/GX_RECV); peer is the root, dest or src. p == NULL blocks
 * (done == NULL), else the completion reaches Go's goNexarDone with p. */
nexar_status_t gx_op(int kind, nexar_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                     nexar_dtype_t dtype, nexar_op_t op, uint32_t peer, uint32_t tag, gx_pending *p,
                     gx_err *err);

nexar_status_t gx_split(nexar_comm_t *comm, uint32_t color, uint32_t key, nexar_comm_t **out,
                        gx_pending *p, gx_err *err);

nexar_status_t gx_rpc_call(nexar_comm_t *comm, uint32_t target, uint32_t fn_id, const void *request,
                           size_t len, nexar_rpc_response_t **response, gx_pending *p, gx_err *err);

/* handle == 0 unregisters; otherwise the handler is Go's goNexarServe with
 * handle (a runtime/cgo.Handle) as its user data. */
nexar_status_t gx_rpc_register(nexar_comm_t *comm, uint32_t fn_id, uintptr_t handle, gx_err *err);

/* Inside a handler: copies the response; on failure the reply carries nexar's message. */
nexar_status_t gx_rpc_reply(nexar_rpc_reply_t *reply, const void *data, size_t len);

nexar_status_t gx_options_init(nexar_comm_options_t *opts, gx_err *err);
nexar_status_t gx_bootstrap_local(nexar_comm_t **comms, uint32_t n,
                                  const nexar_comm_options_t *opts, gx_err *err);
nexar_status_t gx_init_from_env(nexar_comm_t **out, gx_err *err);
/* Failures (faults.go): blocking calls. */
nexar_status_t gx_get_failed(nexar_comm_t *c, uint32_t *ranks, uint32_t cap, uint32_t *count,
                             gx_err *err);
nexar_status_t gx_ack_failed(nexar_comm_t *c, uint32_t n, uint32_t *acked, gx_err *err);
nexar_status_t gx_revoke(nexar_comm_t *c, gx_err *err);
nexar_status_t gx_agree(nexar_comm_t *c, uint64_t *flags, gx_err *err);
nexar_status_t gx_shrink(nexar_comm_t *c, nexar_comm_t **out, gx_err *err);
/* handle == 0 removes the callback; otherwise nexar calls Go's goNexarFailure
 * with handle (a runtime/cgo.Handle of the Comm's failure slot). */
nexar_status_t gx_set_failure_callback(nexar_comm_t *c, uintptr_t handle, gx_err *err);
nexar_status_t gx_join(nexar_comm_t **out, const nexar_comm_options_t *opts, gx_err *err);

nexar_status_t gx_seed_options_init(nexar_seed_options_t *opts, gx_err *err);
nexar_status_t gx_seed_start(nexar_seed_t **out, const nexar_seed_options_t *opts, gx_err *err);
/* *ended is 1 once formation ended (the result is returned), 0 while forming
 * (NEXAR_ERR_TIMEOUT, no message; any other status is a failed call). */
nexar_status_t gx_seed_wait(nexar_seed_t *seed, uint32_t timeout_ms, int32_t *ended, gx_err *err);
nexar_status_t gx_abort(nexar_comm_t *comm, gx_err *err);
nexar_status_t gx_stats(nexar_comm_t *comm, nexar_stats_t *stats, gx_err *err);
/* nexar_mem_alloc / nexar_mem_free (symmetric.go). */
nexar_status_t gx_mem_alloc(nexar_comm_t *comm, size_t bytes, void **out, gx_err *err);
nexar_status_t gx_mem_free(nexar_comm_t *comm, void *ptr, gx_err *err);

/* nexar_flight_recorder_dump; path NULL: into NEXAR_FR_DUMP_DIR. */
nexar_status_t gx_flight_recorder_dump(nexar_comm_t *comm, const char *path, gx_err *err);
/* Gradient traffic (gradients.go): the bucketed and compressed allreduce;
 * p as for gx_op (never NULL here: Go stages their buffers in C memory). */
nexar_status_t gx_allreduce_bucketed(nexar_comm_t *comm, const nexar_tensor_t *tensors, size_t n,
                                     nexar_dtype_t dtype, nexar_op_t op, size_t bucket_bytes,
                                     gx_pending *p, gx_err *err);
nexar_status_t gx_compressor_create(nexar_compressor_t **out, int32_t kind, double ratio,
                                    size_t count, nexar_dtype_t dtype, uint64_t seed, gx_err *err);
nexar_status_t gx_allreduce_compressed(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, nexar_dtype_t dtype,
                                       nexar_compressor_t *compressor, gx_pending *p, gx_err *err);

/* enable != 0 sends nexar's log lines to Go's goNexarLog; 0 restores stderr. */
nexar_status_t gx_set_log(int enable, gx_err *err);

/* Elastic membership (blocking grow). */
nexar_status_t gx_pending_joins(nexar_comm_t *c, uint32_t *count, gx_err *err);
nexar_status_t gx_grow(nexar_comm_t *c, uint32_t max_new, nexar_comm_t **out, gx_err *err);

/* 1 while this thread runs goNexarLog (a handler calling SetLogHandler). */
int gx_in_log_callback(void);

#endif
