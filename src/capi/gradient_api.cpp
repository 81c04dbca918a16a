// Gradient traffic: nexar_allreduce_bucketed and the compressed allreduce
// with its compressors. Arguments are checked before anything is queued (a
// rejected call never invokes its callback); a compressed call compresses on
// the calling thread, then queues the exchange.
#include <algorithm>
#include <memory>

#include "capi/handles.h"
#include "collective/bucketed_allreduce.h"
#include "collective/compress/compressor.h"
#include "collective/compressed_allreduce.h"
#include "core/config.h"
#include "core/dtype.h"

struct nexar_compressor {
  std::unique_ptr<nexar::Compressor> impl;
};

using nexar::capi::fail;
using nexar::capi::guarded;

namespace {

constexpr uint64_t kDefaultBucketBytes = 25ull << 20;

nexar_status_t submit_numbered(nexar_comm_t *comm, const char *name, nexar::Communicator::Body body,
                               uint32_t numbers, nexar_done_fn done, void *user_data) {
  uint64_t seq = 0;
  nexar::Status s =
      comm->impl->submit_collectives(name, std::move(body), numbers, done, user_data, &seq);
  return s.ok() ? nexar::capi::ok() : fail(s, seq);
}

nexar_status_t bucketed(nexar_comm_t *comm, const nexar_tensor_t *tensors, size_t n,
                        nexar_dtype_t dtype, nexar_op_t op, size_t bucket_bytes, nexar_done_fn done,
                        void *user_data) {
  const char *name = "nexar_allreduce_bucketed";
  if (nexar_status_t no = nexar::capi::check_comm(comm, name)) return no;
  if (!tensors && n > 0)
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                nexar::format("%s: tensors is NULL with n %zu", name, n));
  if (!nexar::dtype_valid(dtype))
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                nexar::format("%s: dtype %d is not a NEXAR_DTYPE_*", name, dtype));
  if (!nexar::op_valid(op))
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                nexar::format("%s: op %d is not a NEXAR_OP_*", name, op));
  const size_t esize = nexar::dtype_size(dtype);
  std::vector<size_t> counts(n);
  for (size_t i = 0; i < n; ++i) {
    if (!tensors[i].buf && tensors[i].count > 0)
      return fail(
          NEXAR_ERR_INVALID_ARGUMENT,
          nexar::format("%s: tensor %zu has buf NULL with count %zu", name, i, tensors[i].count));
    if (tensors[i].count > (uint64_t{1} << 62) / esize)
      return fail(
          NEXAR_ERR_INVALID_ARGUMENT,
          nexar::format("%s: tensor %zu: count %zu is too large", name, i, tensors[i].count));
    counts[i] = tensors[i].count;
  }
  uint64_t bytes = bucket_bytes;
  if (bytes == 0) {
    bytes = kDefaultBucketBytes;
    nexar::Status s = nexar::env_bytes("NEXAR_BUCKET_BYTES", &bytes);
    if (!s) return fail(s.code, std::string(name) + ": " + s.message);
    if (bytes == 0) bytes = kDefaultBucketBytes;
  }
  auto call = std::make_shared<nexar::BucketedCall>();
  call->tensors.reserve(n);
  for (size_t i = 0; i < n; ++i)
    call->tensors.push_back(tensors[i].buf);
  call->plan = nexar::plan_buckets(counts.data(), n, std::max<uint64_t>(1, bytes / esize));
  call->dtype = dtype;
  call->op = op;
  if (call->plan.buckets.size() > (1u << 24))
    return fail(NEXAR_ERR_INVALID_ARGUMENT, nexar::format("%s: %zu buckets; raise bucket_bytes",
                                                          name, call->plan.buckets.size()));
  const uint32_t numbers = static_cast<uint32_t>(std::max<size_t>(1, call->plan.buckets.size()));
  nexar::Communicator *c = comm->impl.get();
  return submit_numbered(
      comm, name, [c, call](nexar::OpContext *o) { return nexar::allreduce_bucketed(c, o, call); },
      numbers, done, user_data);
}

nexar_status_t compressed(nexar_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                          nexar_dtype_t dtype, nexar_compressor_t *compressor, nexar_done_fn done,
                          void *user_data) {
  const char *name = "nexar_allreduce_compressed";
  if (nexar_status_t no = nexar::capi::check_comm(comm, name)) return no;
  if (!compressor)
    return fail(NEXAR_ERR_INVALID_ARGUMENT, std::string(name) + ": compressor is NULL");
  const nexar::Compressor &z = *compressor->impl;
  if (count != z.count() || dtype != z.dtype())
    return fail(
        NEXAR_ERR_INVALID_ARGUMENT,
        nexar::format("%s: count %zu and dtype %s differ from the compressor's (%zu %s)", name,
                      count, nexar::dtype_name(dtype), z.count(), nexar::dtype_name(z.dtype())));
  if (!sendbuf || !recvbuf)
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                nexar::format("%s: %s is NULL", name, sendbuf ? "recvbuf" : "sendbuf"));
  auto part = std::make_shared<nexar::CompressedPart>();
  compressor->impl->compress(sendbuf, part.get());
  nexar::Communicator *c = comm->impl.get();
  return submit_numbered(
      comm, name,
      [c, part, recvbuf](nexar::OpContext *o) {
        return nexar::allreduce_compressed(c, o, part, recvbuf);
      },
      1, done, user_data);
}

}  // namespace

extern "C" {

NEXAR_API nexar_status_t nexar_allreduce_bucketed(nexar_comm_t *comm, const nexar_tensor_t *tensors,
                                                  size_t n, nexar_dtype_t dtype, nexar_op_t op,
                                                  size_t bucket_bytes, nexar_done_fn done,
                                                  void *user_data) {
  return guarded("nexar_allreduce_bucketed", [&] {
    return bucketed(comm, tensors, n, dtype, op, bucket_bytes, done, user_data);
  });
}

NEXAR_API nexar_status_t nexar_compressor_create(nexar_compressor_t **out, int32_t kind,
                                                 double ratio, size_t count, nexar_dtype_t dtype,
                                                 uint64_t seed) {
  return guarded("nexar_compressor_create", [&] {
    if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_compressor_create: out is NULL");
    std::unique_ptr<nexar::Compressor> impl;
    nexar::Status s = nexar::Compressor::create(kind, ratio, count, dtype, seed, &impl);
    if (!s) return fail(s.code, "nexar_compressor_create: " + s.message);
    auto handle = std::make_unique<nexar_compressor>();
    handle->impl = std::move(impl);
    *out = handle.release();
    return nexar::capi::ok();
  });
}

NEXAR_API void nexar_compressor_destroy(nexar_compressor_t *compressor) {
  std::unique_ptr<nexar_compressor> owned(compressor);
}

NEXAR_API nexar_status_t nexar_compressor_reset(nexar_compressor_t *compressor) {
  return guarded("nexar_compressor_reset", [&] {
    if (!compressor)
      return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_compressor_reset: compressor is NULL");
    compressor->impl->reset();
    return nexar::capi::ok();
  });
}

NEXAR_API nexar_status_t nexar_allreduce_compressed(nexar_comm_t *comm, const void *sendbuf,
                                                    void *recvbuf, size_t count,
                                                    nexar_dtype_t dtype,
                                                    nexar_compressor_t *compressor,
                                                    nexar_done_fn done, void *user_data) {
  return guarded("nexar_allreduce_compressed", [&] {
    return compressed(comm, sendbuf, recvbuf, count, dtype, compressor, done, user_data);
  });
}

}  // extern "C"
