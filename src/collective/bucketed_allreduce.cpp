// Two staging buffers of the longest bucket's size alternate: bucket k is
// reduced in buffer k % 2 while buffer (k+1) % 2 first gives bucket k-1's
// result back to its tensors and then receives bucket k+1's pieces. A bucket
// whose pieces lie one after the other in memory (one piece, or tensors cut
// from one flat buffer) is read straight from there (no packing); its result
// still lands in staging, so that a bucket that fails leaves its tensors as
// they were.
#include "collective/bucketed_allreduce.h"

#include <cstring>

#include "collective/collectives.h"
#include "core/copy.h"
#include "core/dtype.h"

namespace nexar {
namespace {

struct Staging {
  const BucketedCall &call;
  size_t esize;
  PooledBuf buf[2];

  uint8_t *at(const BucketPiece &p) const {
    return static_cast<uint8_t *>(call.tensors[p.tensor]) + p.offset * esize;
  }
  uint8_t *buffer_of(size_t k) { return buf[k % 2].data(); }
  // Whether bucket k's pieces follow each other in memory.
  bool contiguous(size_t k) const {
    const Bucket &b = call.plan.buckets[k];
    for (size_t i = b.first_piece + 1; i < b.first_piece + b.pieces; ++i) {
      const BucketPiece &prev = call.plan.pieces[i - 1];
      if (at(call.plan.pieces[i]) != at(prev) + prev.count * esize) return false;
    }
    return true;
  }
  // Where bucket k's input is: its tensors when contiguous, else staging.
  const void *input_of(size_t k) {
    const Bucket &b = call.plan.buckets[k];
    return contiguous(k) ? at(call.plan.pieces[b.first_piece]) : buffer_of(k);
  }
  void pack(size_t k) {
    const Bucket &b = call.plan.buckets[k];
    if (contiguous(k)) return;
    uint8_t *dst = buffer_of(k);
    for (size_t i = b.first_piece; i < b.first_piece + b.pieces; ++i) {
      const BucketPiece &p = call.plan.pieces[i];
      copy_bytes(dst, at(p), p.count * esize);
      dst += p.count * esize;
    }
  }
  void unpack(size_t k) {
    const Bucket &b = call.plan.buckets[k];
    const uint8_t *src = buffer_of(k);
    for (size_t i = b.first_piece; i < b.first_piece + b.pieces; ++i) {
      const BucketPiece &p = call.plan.pieces[i];
      copy_bytes(at(p), src, p.count * esize);
      src += p.count * esize;
    }
  }
};

// Runs while bucket k's collective waits for the network (when_all starts
// it after the collective has posted its first messages).
Task<Status> unpack_then_pack(Staging *st, OpContext *op, size_t k) {
  if (k > 0 && !op->failed()) st->unpack(k - 1);
  if (k + 1 < st->call.plan.buckets.size() && !op->failed()) st->pack(k + 1);
  co_return Status();
}

}  // namespace

Task<Status> allreduce_bucketed(Communicator *comm, OpContext *op,
                                std::shared_ptr<const BucketedCall> call) {
  const size_t nb = call->plan.buckets.size();
  if (nb == 0) co_return Status();
  Staging st{*call, dtype_size(call->dtype), {}};
  const size_t bytes = call->plan.max_count * st.esize;
  st.buf[0] = comm->client().pool().checkout(bytes);
  if (nb > 1) st.buf[1] = comm->client().pool().checkout(bytes);
  st.pack(0);
  for (size_t k = 0; k < nb; ++k) {
    CollArgs a;
    a.sendbuf = st.input_of(k);
    a.recvbuf = st.buffer_of(k);
    a.count = call->plan.buckets[k].count;
    a.dtype = call->dtype;
    a.op = call->op;
    // Part of every bucket's check: ranks whose lists make a different
    // number of buckets disagree on the first one.
    a.root = static_cast<uint32_t>(nb);
    std::vector<Task<Status>> stage;
    stage.push_back(
        run_collective_as(comm, op, CollKind::AllreduceBucketed, a, allreduce, op->coll_seq() + k));
    stage.push_back(unpack_then_pack(&st, op, k));
    Status s = co_await when_all(op, std::move(stage));
    if (!s) co_return s;
  }
  if (!op->failed()) st.unpack(nb - 1);
  co_return Status();
}

}  // namespace nexar
