#include "collective/shm_one_ticket.h"

#include "collective/shm_collectives.h"
#include "core/copy.h"
#include "core/dtype.h"

namespace nexar {
namespace {

using shm_coll::ShmNeed;

constexpr int32_t kEveryMember = -1;
constexpr int32_t kNoMember = -2;

uint64_t bytes_of(const CollArgs &g) {
  return uint64_t{g.count} * dtype_size(g.dtype);
}

}  // namespace

bool ShmOneTicket::fits(CollKind kind, const CollArgs &g) {
  switch (kind) {
    case CollKind::Barrier:
      return true;
    case CollKind::Broadcast: {
      const uint64_t bytes = bytes_of(g);
      return bytes > 0 && bytes <= shm_coll::pipeline_chunk_bytes(bytes, dtype_size(g.dtype));
    }
    case CollKind::Allreduce:
    case CollKind::Reduce:
    case CollKind::Scan:
    case CollKind::Exscan:
      return g.count > 0 && bytes_of(g) <= kShmWholeVectorMaxBytes;
    default:
      return false;
  }
}

ShmOneTicket::ShmOneTicket(Coll &c, ShmCollArea &a, CollKind kind)
    : kind_(kind), t_(a.take_tickets(1)) {
  a.set_step_bytes(payload_bytes(c));
}

uint64_t ShmOneTicket::payload_bytes(const Coll &c) const {
  return kind_ == CollKind::Barrier ? 0 : uint64_t{c.args().count} * c.esize();
}

bool ShmOneTicket::publishes(const Coll &c) const {
  return kind_ != CollKind::Broadcast || c.rank() == c.args().root;
}

int32_t ShmOneTicket::reads_from(const Coll &c) const {
  if (kind_ != CollKind::Broadcast) return kEveryMember;
  return c.rank() == c.args().root ? kNoMember : static_cast<int32_t>(c.args().root);
}

int32_t ShmOneTicket::waits_for_readers(const Coll &c) const {
  const bool root = c.rank() == c.args().root;
  // A broadcast's buffer may be read where it lies; a reduce's members end
  // once the root has read, so a mismatch reaches them too.
  if (kind_ == CollKind::Broadcast && root) return kEveryMember;
  if (kind_ == CollKind::Reduce && !root) return static_cast<int32_t>(c.args().root);
  return kNoMember;
}

void ShmOneTicket::publish(Coll &c, ShmCollArea &a) const {
  const CollArgs &g = c.args();
  const void *src = kind_ == CollKind::Broadcast ? g.recvbuf : g.sendbuf;
  shm_coll::fill_and_announce(c, a, t_, src, payload_bytes(c), kind_ == CollKind::Broadcast);
}

Status ShmOneTicket::consume(Coll &c, ShmCollArea &a) const {
  const CollArgs &g = c.args();
  const uint64_t bytes = payload_bytes(c);
  Status s;
  if (kind_ == CollKind::Barrier) {
    const uint8_t *none = nullptr;
    for (uint32_t r = 0; r < c.size(); ++r)
      if (r != c.rank() && !(s = shm_coll::published_data(c, a, r, t_, 0, &none))) return s;
    return s;
  }
  if (kind_ == CollKind::Broadcast) {
    if (c.rank() == g.root) return s;
    const uint8_t *data = nullptr;
    if (!(s = shm_coll::published_data(c, a, g.root, t_, bytes, &data))) return s;
    copy_bytes(g.recvbuf, data, bytes);
    return s;
  }
  // Every member's header is checked, whether its data is needed or not.
  ShmReduction plan = shm_reduction_plan(c, kind_);
  for (uint32_t r = 0; r < c.size(); ++r)
    if (!(s = shm_coll::published_data(c, a, r, t_, bytes, &plan.x.x[r]))) return s;
  // Exscan's rank 0 has nothing to reduce (its recvbuf may be null).
  const bool evaluates = (plan.target < 0 || static_cast<uint32_t>(plan.target) == c.rank()) &&
                         !(plan.order == ReductionOrder::ExclusivePrefix && c.rank() == 0);
  if (evaluates)
    reduce_in_order(plan.order, plan.x, 0, g.count, static_cast<uint8_t *>(g.recvbuf), c.pool());
  return s;
}

Status ShmOneTicket::advance(Coll &c, ShmCollArea &a, ShmNeed *need) {
  for (;;) {
    switch (phase_) {
      case Phase::Claim:
        // The slot's previous ticket must be finished by everyone.
        phase_ = Phase::Publish;
        if (publishes(c) && t_ >= ShmCollArea::kSlots) {
          *need = {ShmCollArea::kFinished, t_ + 1 - ShmCollArea::kSlots, kEveryMember,
                   "finish an earlier step"};
          return {};
        }
        break;
      case Phase::Publish:
        if (publishes(c)) publish(c, a);
        phase_ = Phase::Read;
        break;
      case Phase::Read: {
        phase_ = Phase::Consume;
        const int32_t from = reads_from(c);
        if (from != kNoMember) {
          const char *doing = kind_ == CollKind::Barrier     ? "enter the barrier"
                              : kind_ == CollKind::Broadcast ? "publish its data"
                                                             : "publish its vector";
          *need = {ShmCollArea::kPublished, t_ + 1, from, doing};
          return {};
        }
        break;
      }
      case Phase::Consume: {
        Status s = consume(c, a);
        if (!s) {
          phase_ = Phase::Done;
          need->doing = nullptr;
          return s;
        }
        shm_coll::finish_ticket(a, t_);
        phase_ = Phase::Readers;
        break;
      }
      case Phase::Readers: {
        phase_ = Phase::Done;
        const int32_t readers = waits_for_readers(c);
        if (readers != kNoMember) {
          *need = {ShmCollArea::kFinished, t_ + 1, readers,
                   kind_ == CollKind::Broadcast ? "receive the data" : "read the data"};
          return {};
        }
        break;
      }
      case Phase::Done:
        need->doing = nullptr;
        return {};
    }
  }
}

Task<Status> run_one_ticket(Coll &c, ShmCollArea &a, ShmOneTicket &m) {
  for (;;) {
    ShmNeed need{};
    Status s = m.advance(c, a, &need);
    if (!s || !need.doing) co_return s;
    if (!(s = co_await shm_coll::wait_for(c, a, need))) co_return s;
  }
}

}  // namespace nexar
