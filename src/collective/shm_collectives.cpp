#include "collective/shm_collectives.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "client/shm_coll_area.h"
#include "collective/collectives.h"
#include "collective/reduction_order.h"
#include "collective/schedule.h"
#include "collective/shm_coll_steps.h"

namespace nexar {
namespace {

using namespace shm_coll;

// Up to this many bytes every member reduces the whole vector itself.
constexpr uint64_t kWholeVectorMaxBytes = 16 << 10;

// Every member reduces the whole vector in rank order out of the slots, its
// own included (an in-place call overwrites the user's buffer).
Task<Status> allreduce_whole(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  const uint64_t bytes = uint64_t{g.count} * c.esize();
  const uint64_t t = a.take_tickets(1);
  Status s = co_await publish(c, a, t, g.sendbuf, bytes, false);
  if (!s) co_return s;
  s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its vector");
  if (!s) co_return s;
  std::vector<const uint8_t *> in(c.size());
  for (uint32_t r = 0; r < c.size(); ++r)
    if (r == c.rank())
      in[r] = a.own_slot(t);
    else if (!(s = published_data(c, a, r, t, bytes, &in[r])))
      co_return s;
  // Every member evaluates the same expression, in the message path's order.
  ReductionInputs x{std::move(in), g.count, c.esize(), g.dtype, g.op};
  reduce_in_order(allreduce_reduction_order(c), x, 0, g.count, static_cast<uint8_t *>(g.recvbuf),
                  c.pool());
  finish_ticket(a, t);
  co_return Status();
}

Task<Status> allreduce_sliced(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  const size_t esize = c.esize();
  const uint32_t n = c.size(), me = c.rank();
  const size_t per_chunk = std::max<size_t>(1, ShmCollArea::kSlotBytes / esize);
  const uint64_t chunks = (g.count + per_chunk - 1) / per_chunk;
  const uint64_t t0 = a.take_tickets(chunks);
  const auto *src = static_cast<const uint8_t *>(g.sendbuf);
  auto *dst = static_cast<uint8_t *>(g.recvbuf);
  auto chunk_first = [&](uint64_t k) { return static_cast<size_t>(k * per_chunk); };
  auto chunk_count = [&](uint64_t k) { return std::min(per_chunk, g.count - chunk_first(k)); };
  Status s = co_await publish(c, a, t0, src, chunk_count(0) * esize, true);
  if (!s) co_return s;
  std::vector<const uint8_t *> in(n);
  const ReductionOrder order = allreduce_reduction_order(c);
  ReductionInputs x{std::vector<const uint8_t *>(n), g.count, esize, g.dtype, g.op};
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t t = t0 + k;
    const size_t first = chunk_first(k), count = chunk_count(k);
    s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its part");
    if (!s) co_return s;
    for (uint32_t r = 0; r < n; ++r)
      if (!(s = published_data(c, a, r, t, count * esize, &in[r]))) co_return s;
    // The next chunk goes out while this one's slices are reduced.
    if (k + 1 < chunks) {
      s = co_await publish(c, a, t + 1, src + chunk_first(k + 1) * esize,
                           chunk_count(k + 1) * esize, true);
      if (!s) co_return s;
    }
    // Slice me, reduced into this member's result area: reduced once, then
    // copied, in the message path's order.
    const sched::ChunkLayout slices(count, n);
    const size_t off = slices.offset(me) * esize;
    for (uint32_t r = 0; r < n; ++r)
      x.x[r] = in[r] + off;
    reduce_in_order(order, x, first + slices.offset(me), slices.length(me), a.own_result(t),
                    c.pool());
    shm_store(a.own(ShmCollArea::kReduced), t + 1);
    a.ring_all();
    s = co_await wait_for(c, a, ShmCollArea::kReduced, t + 1, "reduce its slice");
    if (!s) co_return s;
    for (uint32_t r = 0; r < n; ++r) {
      const size_t roff = slices.offset(r) * esize;
      memcpy(dst + first * esize + roff, a.result(r, t), slices.length(r) * esize);
    }
    finish_ticket(a, t);
  }
  co_return Status();
}

Task<Status> allreduce_body(Coll &c, ShmCollArea &a) {
  if (uint64_t{c.args().count} * c.esize() <= kWholeVectorMaxBytes)
    co_return co_await allreduce_whole(c, a);
  co_return co_await allreduce_sliced(c, a);
}

Task<Status> broadcast_body(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  const uint64_t bytes = uint64_t{g.count} * c.esize();
  const uint64_t chunks = (bytes + ShmCollArea::kSlotBytes - 1) / ShmCollArea::kSlotBytes;
  const uint64_t t0 = a.take_tickets(chunks);
  auto *buf = static_cast<uint8_t *>(g.recvbuf);
  const uint32_t root = g.root;
  Status s;
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t t = t0 + k, off = k * ShmCollArea::kSlotBytes;
    const uint64_t len = std::min<uint64_t>(ShmCollArea::kSlotBytes, bytes - off);
    if (c.rank() == root) {
      if (!(s = co_await publish(c, a, t, buf + off, len, true))) co_return s;
    } else {
      s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its data",
                            static_cast<int32_t>(root));
      if (!s) co_return s;
      const uint8_t *data = nullptr;
      if (!(s = published_data(c, a, root, t, len, &data))) co_return s;
      memcpy(buf + off, data, len);
    }
    finish_ticket(a, t);
  }
  // The root ends once everyone has read: its buffer may have been read
  // where it is, and a member that ran another collective is heard of (it
  // never finishes these steps) instead of the root reporting success.
  if (c.rank() == root)
    co_return co_await wait_for(c, a, ShmCollArea::kFinished, t0 + chunks, "receive the data");
  co_return Status();
}

Task<Status> barrier_body(Coll &c, ShmCollArea &a) {
  const uint64_t t = a.take_tickets(1);
  Status s = co_await publish(c, a, t, nullptr, 0, false);
  if (!s) co_return s;
  s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "enter the barrier");
  if (!s) co_return s;
  const uint8_t *none = nullptr;
  for (uint32_t r = 0; r < c.size(); ++r)
    if (r != c.rank() && !(s = published_data(c, a, r, t, 0, &none))) co_return s;
  finish_ticket(a, t);
  co_return Status();
}

}  // namespace

Task<Status> shm_allreduce(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, allreduce_body);
}

Task<Status> shm_broadcast(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, broadcast_body);
}

Task<Status> shm_barrier(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, barrier_body);
}

}  // namespace nexar
