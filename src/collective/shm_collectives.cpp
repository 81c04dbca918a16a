#include "collective/shm_collectives.h"

#include <algorithm>
#include <cstring>

#include "client/shm_coll_area.h"
#include "collective/shm_coll_steps.h"
#include "collective/shm_one_ticket.h"
#include "core/copy.h"

namespace nexar {
namespace {

using namespace shm_coll;

Task<Status> barrier_body(Coll &c, ShmCollArea &a) {
  return one_ticket_body(c, a, CollKind::Barrier);
}

Task<Status> broadcast_body(Coll &c, ShmCollArea &a) {
  if (ShmOneTicket::fits(CollKind::Broadcast, c.args(), c.size()))
    co_return co_await one_ticket_body(c, a, CollKind::Broadcast);
  const CollArgs &g = c.args();
  const uint64_t bytes = uint64_t{g.count} * c.esize();
  const uint64_t chunk = pipeline_chunk_bytes(bytes, c.esize());
  const uint64_t chunks = (bytes + chunk - 1) / chunk;
  a.set_step_bytes(std::min(chunk, bytes));
  auto *buf = static_cast<uint8_t *>(g.recvbuf);
  const uint32_t root = g.root;
  const uint64_t t0 = a.take_tickets(1);
  Status s;
  // The root's buffer read straight out of its process, in one step (every
  // member learns so from the root's first ticket).
  if (c.rank() == root) {
    uint64_t offset = 0;
    if (bytes >= kDirectMinBytes && bytes <= kDirectBroadcastMaxBytes &&
        !a.in_own_heap(buf, bytes, &offset) &&
        a.read_directly_by_all(copies_a_direct_read_replaces(CollKind::Broadcast, c.size()))) {
      if (!(s = co_await claim_slot(c, a, t0))) co_return s;
      Withdrawal withdrawal(a, t0);
      withdrawal.arm();
      announce(c, a, t0, kDirectAddress | reinterpret_cast<uint64_t>(buf), bytes);
      finish_ticket(a, t0);
      s = co_await wait_for(c, a, ShmCollArea::kFinished, t0 + 1, "receive the data");
      if (s) withdrawal.readers_finished();
      co_return s;
    }
  } else {
    s = co_await wait_for(c, a, ShmCollArea::kPublished, t0 + 1, "publish its data",
                          static_cast<int32_t>(root));
    if (!s) co_return s;
    if (shm_load(&a.header(root, t0)->data_offset) & kDirectAddress) {
      const uint8_t *none = nullptr;
      uint64_t address = 0;
      if (!(s = published_data(c, a, root, t0, bytes, &none, &address))) co_return s;
      s = read_published(c, a, root, t0, address, buf, bytes);
      if (s.code == NEXAR_ERR_ABORTED) co_return co_await cause_of_withdrawal(c, s);
      if (!s) co_return s;
      finish_ticket(a, t0);
      co_return Status();
    }
  }
  if (chunks > 1) a.take_tickets(chunks - 1);
  // A member's buffer holds no input of the broadcast but the root's, which
  // it does not copy out.
  const bool streaming = streams_out(c.size(), bytes, false);
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t t = t0 + k, off = k * chunk;
    const uint64_t len = std::min<uint64_t>(chunk, bytes - off);
    if (c.rank() == root) {
      if (!(s = co_await publish(c, a, t, buf + off, len, true))) co_return s;
    } else {
      if (k > 0)
        s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its data",
                              static_cast<int32_t>(root));
      if (!s) co_return s;
      const uint8_t *data = nullptr;
      if (!(s = published_data(c, a, root, t, len, &data))) co_return s;
      copy_result(streaming, buf + off, data, len);
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

}  // namespace

Task<Status> shm_broadcast(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, broadcast_body);
}

Task<Status> shm_barrier(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, barrier_body);
}

}  // namespace nexar
