// Collective entry points. Arguments that are wrong by themselves are
// rejected here, before anything is queued, so a rejected call never invokes
// its callback: NEXAR_ERR_INVALID_RANK for a root outside the world,
// NEXAR_ERR_INVALID_ARGUMENT for an unknown dtype or op, a NULL buffer that
// this rank must read or write, or sizes that overflow.
#include "capi/handles.h"
#include "collective/collectives.h"
#include "collective/shm_inline.h"
#include "core/dtype.h"

using nexar::CollArgs;
using nexar::CollKind;
using nexar::capi::fail;
using nexar::capi::guarded;

namespace {

enum Need : unsigned {
  kNone = 0,
  kSend = 1,          // sendbuf on every rank
  kRecv = 2,          // recvbuf on every rank
  kSendRoot = 4,      // sendbuf on the root only
  kRecvRoot = 8,      // recvbuf on the root only
  kReduction = 16,    // op must be valid
  kRooted = 32,       // root must be a rank
  kRecvNotRank0 = 64  // recvbuf everywhere but rank 0 (exscan)
};

struct Shape {
  CollKind kind;
  unsigned need;
};

nexar_status_t validate(nexar_comm_t *comm, const Shape &shape, const CollArgs &a) {
  const char *name = nexar::coll_name(shape.kind);
  if (nexar_status_t no = nexar::capi::check_comm(comm, (std::string("nexar_") + name).c_str()))
    return no;
  const uint32_t size = comm->impl->size(), rank = comm->impl->rank();
  if (shape.kind != CollKind::Barrier && !nexar::dtype_valid(a.dtype))
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                nexar::format("nexar_%s: dtype %d is not a NEXAR_DTYPE_*", name, a.dtype));
  if ((shape.need & kReduction) && !nexar::op_valid(a.op))
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                nexar::format("nexar_%s: op %d is not a NEXAR_OP_*", name, a.op));
  if ((shape.need & kRooted) && a.root >= size)
    return fail(NEXAR_ERR_INVALID_RANK,
                nexar::format("nexar_%s: root %u is outside the communicator of %u ranks", name,
                              a.root, size));
  const size_t esize = shape.kind == CollKind::Barrier ? 1 : nexar::dtype_size(a.dtype);
  // count * size * esize must fit, and stay within what one message may carry.
  const unsigned __int128 total = static_cast<unsigned __int128>(a.count) * size * esize;
  if (total > (static_cast<unsigned __int128>(1) << 62))
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                nexar::format("nexar_%s: count %zu is too large", name, a.count));
  if (a.count > 0) {
    const bool root = rank == a.root;
    const bool need_send = (shape.need & kSend) || ((shape.need & kSendRoot) && root);
    const bool need_recv = (shape.need & kRecv) || ((shape.need & kRecvRoot) && root) ||
                           ((shape.need & kRecvNotRank0) && rank != 0);
    if (need_send && !a.sendbuf)
      return fail(NEXAR_ERR_INVALID_ARGUMENT,
                  nexar::format("nexar_%s: sendbuf is NULL with count %zu", name, a.count));
    if (need_recv && !a.recvbuf)
      return fail(NEXAR_ERR_INVALID_ARGUMENT,
                  nexar::format("nexar_%s: recvbuf is NULL with count %zu", name, a.count));
  }
  return NEXAR_OK;
}

nexar_status_t start(nexar_comm_t *comm, const Shape &shape, const CollArgs &a,
                     nexar::Task<nexar::Status> (*algorithm)(nexar::Coll &), nexar_done_fn done,
                     void *user_data) {
  if (nexar_status_t s = validate(comm, shape, a)) return s;
  nexar::Communicator *c = comm->impl.get();
  const CollKind kind = shape.kind;
  const std::string name = std::string("nexar_") + nexar::coll_name(kind);
  // A small blocking one on shared memory may finish on this thread at once.
  nexar::Status now;
  uint64_t seq = 0;
  if (!done && nexar::shm_run_inline(*c, name.c_str(), kind, a, &now, &seq))
    return now.ok() ? nexar::capi::ok() : fail(now, seq);
  return nexar::capi::submit_collective(
      comm, name.c_str(),
      [=](nexar::OpContext *op) { return nexar::run_collective(c, op, kind, a, algorithm); }, done,
      user_data);
}

CollArgs args(const void *sendbuf, void *recvbuf, size_t count, nexar_dtype_t dtype, nexar_op_t op,
              uint32_t root) {
  CollArgs a;
  a.sendbuf = sendbuf;
  a.recvbuf = recvbuf;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.root = root;
  return a;
}

}  // namespace

extern "C" {

NEXAR_API nexar_status_t nexar_allreduce(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, nexar_dtype_t dtype, nexar_op_t op,
                                         nexar_done_fn done, void *user_data) {
  return guarded("nexar_allreduce", [&] {
    return start(comm, {CollKind::Allreduce, kSend | kRecv | kReduction},
                 args(sendbuf, recvbuf, count, dtype, op, 0), nexar::allreduce, done, user_data);
  });
}

NEXAR_API nexar_status_t nexar_broadcast(nexar_comm_t *comm, void *buf, size_t count,
                                         nexar_dtype_t dtype, uint32_t root, nexar_done_fn done,
                                         void *user_data) {
  return guarded("nexar_broadcast", [&] {
    return start(comm, {CollKind::Broadcast, kRecv | kRooted},
                 args(buf, buf, count, dtype, NEXAR_OP_SUM, root), nexar::broadcast, done,
                 user_data);
  });
}

NEXAR_API nexar_status_t nexar_reduce(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, nexar_dtype_t dtype, nexar_op_t op,
                                      uint32_t root, nexar_done_fn done, void *user_data) {
  return guarded("nexar_reduce", [&] {
    return start(comm, {CollKind::Reduce, kSend | kRecvRoot | kReduction | kRooted},
                 args(sendbuf, recvbuf, count, dtype, op, root), nexar::reduce, done, user_data);
  });
}

NEXAR_API nexar_status_t nexar_allgather(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, nexar_dtype_t dtype, nexar_done_fn done,
                                         void *user_data) {
  return guarded("nexar_allgather", [&] {
    return start(comm, {CollKind::Allgather, kSend | kRecv},
                 args(sendbuf, recvbuf, count, dtype, NEXAR_OP_SUM, 0), nexar::allgather, done,
                 user_data);
  });
}

NEXAR_API nexar_status_t nexar_reduce_scatter(nexar_comm_t *comm, const void *sendbuf,
                                              void *recvbuf, size_t recvcount, nexar_dtype_t dtype,
                                              nexar_op_t op, nexar_done_fn done, void *user_data) {
  return guarded("nexar_reduce_scatter", [&] {
    return start(comm, {CollKind::ReduceScatter, kSend | kRecv | kReduction},
                 args(sendbuf, recvbuf, recvcount, dtype, op, 0), nexar::reduce_scatter, done,
                 user_data);
  });
}

NEXAR_API nexar_status_t nexar_alltoall(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t count, nexar_dtype_t dtype, nexar_done_fn done,
                                        void *user_data) {
  return guarded("nexar_alltoall", [&] {
    return start(comm, {CollKind::Alltoall, kSend | kRecv},
                 args(sendbuf, recvbuf, count, dtype, NEXAR_OP_SUM, 0), nexar::alltoall, done,
                 user_data);
  });
}

NEXAR_API nexar_status_t nexar_gather(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, nexar_dtype_t dtype, uint32_t root,
                                      nexar_done_fn done, void *user_data) {
  return guarded("nexar_gather", [&] {
    return start(comm, {CollKind::Gather, kSend | kRecvRoot | kRooted},
                 args(sendbuf, recvbuf, count, dtype, NEXAR_OP_SUM, root), nexar::gather, done,
                 user_data);
  });
}

NEXAR_API nexar_status_t nexar_scatter(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, nexar_dtype_t dtype, uint32_t root,
                                       nexar_done_fn done, void *user_data) {
  return guarded("nexar_scatter", [&] {
    return start(comm, {CollKind::Scatter, kSendRoot | kRecv | kRooted},
                 args(sendbuf, recvbuf, count, dtype, NEXAR_OP_SUM, root), nexar::scatter, done,
                 user_data);
  });
}

NEXAR_API nexar_status_t nexar_scan(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, nexar_dtype_t dtype, nexar_op_t op,
                                    nexar_done_fn done, void *user_data) {
  return guarded("nexar_scan", [&] {
    return start(comm, {CollKind::Scan, kSend | kRecv | kReduction},
                 args(sendbuf, recvbuf, count, dtype, op, 0), nexar::scan, done, user_data);
  });
}

NEXAR_API nexar_status_t nexar_exscan(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, nexar_dtype_t dtype, nexar_op_t op,
                                      nexar_done_fn done, void *user_data) {
  return guarded("nexar_exscan", [&] {
    return start(comm, {CollKind::Exscan, kSend | kRecvNotRank0 | kReduction},
                 args(sendbuf, recvbuf, count, dtype, op, 0), nexar::exscan, done, user_data);
  });
}

NEXAR_API nexar_status_t nexar_barrier(nexar_comm_t *comm, nexar_done_fn done, void *user_data) {
  return guarded("nexar_barrier", [&] {
    return start(comm, {CollKind::Barrier, kNone},
                 args(nullptr, nullptr, 0, NEXAR_DTYPE_U8, NEXAR_OP_SUM, 0), nexar::barrier, done,
                 user_data);
  });
}

}  // extern "C"
