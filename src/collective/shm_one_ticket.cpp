#include "collective/shm_one_ticket.h"

#include "collective/ring.h"
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

// The collectives that move blocks (shm_movement.cpp's, in one ticket).
bool moves(CollKind k) {
  return k == CollKind::Allgather || k == CollKind::Gather || k == CollKind::Scatter ||
         k == CollKind::Alltoall;
}

// A publisher's blocks: one, or one per member; each of block_of bytes.
uint64_t blocks_of(CollKind k, uint32_t members) {
  const bool per_member =
      k == CollKind::Scatter || k == CollKind::Alltoall || k == CollKind::ReduceScatter;
  return per_member ? members : 1;
}

uint64_t block_of(const Coll &c) {
  return uint64_t{c.args().count} * c.esize();
}

}  // namespace

bool ShmOneTicket::fits(CollKind kind, const CollArgs &g, uint32_t members) {
  const uint64_t bytes = bytes_of(g);
  switch (kind) {
    case CollKind::Barrier:
      return true;
    case CollKind::Broadcast:
      return bytes > 0 && bytes <= shm_coll::pipeline_chunk_bytes(bytes, dtype_size(g.dtype));
    case CollKind::Allreduce:
    case CollKind::Reduce:
    case CollKind::Scan:
    case CollKind::Exscan:
      return g.count > 0 && bytes <= kShmWholeVectorMaxBytes;
    case CollKind::Allgather:
    case CollKind::Gather:
      return g.count > 0 && bytes <= kShmOneTicketMovementMaxBytes;
    case CollKind::Scatter:
    case CollKind::Alltoall:
      return g.count > 0 && bytes * members <= kShmOneTicketMovementMaxBytes;
    case CollKind::ReduceScatter:
      return g.count > 0 && bytes * members <= kShmOneTicketMaxBytes;
    default:
      return false;
  }
}

ShmOneTicket::ShmOneTicket(Coll &c, ShmCollArea &a, CollKind kind)
    : kind_(kind), t_(a.take_tickets(1)) {
  a.set_step_bytes(kind_ == CollKind::Barrier ? 0 : blocks_of(kind_, c.size()) * block_of(c));
}

bool ShmOneTicket::announces(const Coll &c) const {
  return kind_ != CollKind::Broadcast || c.rank() == c.args().root;
}

bool ShmOneTicket::publishes(const Coll &c, uint32_t r) const {
  switch (kind_) {
    case CollKind::Broadcast:
    case CollKind::Scatter:
      return r == c.args().root;
    case CollKind::Gather:
      return r != c.args().root;
    default:
      return true;
  }
}

uint64_t ShmOneTicket::announced_bytes(const Coll &c, uint32_t r) const {
  if (kind_ == CollKind::Barrier || !publishes(c, r)) return 0;
  return blocks_of(kind_, c.size()) * block_of(c);
}

int32_t ShmOneTicket::reads_from(const Coll &c) const {
  const bool root = c.rank() == c.args().root;
  if (kind_ == CollKind::Broadcast) return root ? kNoMember : static_cast<int32_t>(c.args().root);
  // Scatter's root reads nothing; its other members check every member's
  // ticket, as a gather's do (ranks that disagree about the root all hear
  // of it).
  if (kind_ == CollKind::Scatter && root) return kNoMember;
  return kEveryMember;
}

int32_t ShmOneTicket::waits_for_readers(const Coll &c) const {
  const bool root = c.rank() == c.args().root;
  // A broadcast's buffer may be read where it lies; a reduce's members end
  // once the root has read, so a mismatch reaches them too. A member that
  // moved data ends once its readers have: a reader that ran another
  // collective is heard of instead of this one reporting success.
  switch (kind_) {
    case CollKind::Broadcast:
      return root ? kEveryMember : kNoMember;
    case CollKind::Reduce:
      return root ? kNoMember : static_cast<int32_t>(c.args().root);
    case CollKind::Gather:
      return root ? kNoMember : static_cast<int32_t>(c.args().root);
    case CollKind::Allgather:
    case CollKind::Alltoall:
      return kEveryMember;
    case CollKind::Scatter:
      return root ? kEveryMember : kNoMember;
    default:
      return kNoMember;
  }
}

bool ShmOneTicket::publishes_by_address(const Coll &c, const ShmCollArea &a,
                                        const void *src) const {
  const CollArgs &g = c.args();
  uint64_t offset = 0;
  // In place, an alltoall overwrites what the others still read; a
  // broadcast from nexar_mem_alloc's memory is read where it lies anyway.
  return (moves(kind_) || kind_ == CollKind::Broadcast) &&
         block_of(c) >= shm_coll::kDirectMinBytes &&
         !(kind_ == CollKind::Alltoall && g.sendbuf == g.recvbuf) &&
         !(kind_ == CollKind::Broadcast && a.in_own_heap(src, block_of(c), &offset)) &&
         a.read_directly_by_all(shm_coll::copies_a_direct_read_replaces(kind_, c.size()));
}

void ShmOneTicket::publish(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  const uint32_t me = c.rank();
  const void *mine = kind_ == CollKind::Broadcast ? g.recvbuf : g.sendbuf;
  if (announced_bytes(c, me) && publishes_by_address(c, a, mine)) {
    // The readers copy it out of this process; it ends once they did.
    by_address_ = true;
    shm_coll::announce(c, a, t_, shm_coll::kDirectAddress | reinterpret_cast<uint64_t>(mine),
                       announced_bytes(c, me));
    return;
  }
  if (!moves(kind_)) {
    const void *src = kind_ == CollKind::Broadcast ? g.recvbuf : g.sendbuf;
    shm_coll::fill_and_announce(c, a, t_, src, announced_bytes(c, me),
                                kind_ == CollKind::Broadcast);
    return;
  }
  // Every block one after another; a member's own block of an alltoall or
  // a scatter never travels.
  const uint32_t blocks = blocks_of(kind_, c.size());
  const uint64_t block = block_of(c), bytes = announced_bytes(c, me);
  const auto *src = static_cast<const uint8_t *>(g.sendbuf);
  uint64_t offset = 0;
  uint8_t *to = shm_coll::own_data_for(a, t_, bytes, &offset);
  for (uint32_t i = 0; bytes && i < blocks; ++i)
    if (blocks == 1 || i != me) copy_bytes(to + i * block, src + i * block, block);
  shm_coll::announce(c, a, t_, offset, bytes);
}

// What a member keeps of its own data, once it published and before it
// copies the others' in (gather's root: its buffers may overlap).
void ShmOneTicket::copy_own_before(const Coll &c) const {
  const CollArgs &g = c.args();
  const uint64_t block = block_of(c);
  const auto *src = static_cast<const uint8_t *>(g.sendbuf);
  auto *dst = static_cast<uint8_t *>(g.recvbuf);
  const uint32_t me = c.rank();
  if (kind_ == CollKind::Allgather)
    copy_unless_same(dst + me * block, src, block);
  else if (kind_ == CollKind::Gather && me == g.root)
    move_bytes(dst + me * block, src, block);
  else if (kind_ == CollKind::Alltoall && src != dst)
    copy_bytes(dst + me * block, src + me * block, block);
}

Status ShmOneTicket::take(Coll &c, ShmCollArea &a, uint32_t r, const uint8_t *data,
                          uint64_t address, uint64_t at, void *to, uint64_t bytes) {
  if (!address) {
    copy_bytes(to, data + at, bytes);
    return {};
  }
  Status s = shm_coll::read_published(c, a, r, t_, address + at, to, bytes);
  saw_withdrawal_ = s.code == NEXAR_ERR_ABORTED;
  return s;
}

void ShmOneTicket::end(ShmCollArea &a, const Status &s) const {
  if (!s && by_address_ && !readers_done_) shm_coll::withdraw(a, t_);
}

Status ShmOneTicket::consume(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  Status s;
  if (moves(kind_)) return consume_movement(c, a);
  if (kind_ == CollKind::Barrier) {
    const uint8_t *none = nullptr;
    for (uint32_t r = 0; r < c.size(); ++r)
      if (r != c.rank() && !(s = shm_coll::published_data(c, a, r, t_, 0, &none))) return s;
    return s;
  }
  if (kind_ == CollKind::Broadcast) {
    if (c.rank() == g.root) return s;
    const uint64_t bytes = block_of(c);
    const uint8_t *data = nullptr;
    uint64_t address = 0;
    if (!(s = shm_coll::published_data(c, a, g.root, t_, bytes, &data, &address))) return s;
    return take(c, a, g.root, data, address, 0, g.recvbuf, bytes);
  }
  return consume_reduction(c, a);
}

Status ShmOneTicket::consume_movement(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  const uint32_t me = c.rank();
  const bool root = me == g.root;
  const bool reads = kind_ == CollKind::Allgather || kind_ == CollKind::Alltoall ||
                     (kind_ == CollKind::Gather && root) || (kind_ == CollKind::Scatter && !root);
  const uint64_t block = block_of(c);
  // Source r's block goes to dst + r * stride; this member's block of a
  // publisher's blocks is block i.
  const uint64_t stride = kind_ == CollKind::Scatter ? 0 : block;
  const uint64_t i = blocks_of(kind_, c.size()) == 1 ? 0 : me;
  auto *dst = static_cast<uint8_t *>(g.recvbuf);
  Status s;
  if (kind_ == CollKind::Scatter && root) return s;  // it reads nothing
  // Every other member's ticket is checked, whether its data is needed or
  // not: all agree on the collective, and a mismatch is seen.
  for (uint32_t r = 0; r < c.size(); ++r) {
    if (r == me) continue;
    const uint8_t *data = nullptr;
    uint64_t address = 0;
    if (!(s = shm_coll::published_data(c, a, r, t_, announced_bytes(c, r), &data, &address)))
      return s;
    if (reads && publishes(c, r) &&
        !(s = take(c, a, r, data, address, i * block, dst + r * stride, block)))
      return s;
  }
  return s;
}

Status ShmOneTicket::consume_reduction(Coll &c, ShmCollArea &a) const {
  const CollArgs &g = c.args();
  const uint64_t bytes = announced_bytes(c, c.rank());
  Status s;
  if (kind_ == CollKind::ReduceScatter) {
    // Member r's blocks one after another: block me of each, reduced in
    // the ring's order straight into recvbuf.
    const size_t block = g.count, len = block * c.esize();
    ReductionInputs x{std::vector<const uint8_t *>(c.size()), block * c.size(), c.esize(), g.dtype,
                      g.op};
    for (uint32_t r = 0; r < c.size(); ++r) {
      if (!(s = shm_coll::published_data(c, a, r, t_, bytes, &x.x[r]))) return s;
      x.x[r] += c.rank() * len;
    }
    reduce_in_order(ReductionOrder::Ring, x, c.rank() * block, block,
                    static_cast<uint8_t *>(g.recvbuf), c.pool());
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
        if (announces(c) && t_ >= ShmCollArea::kSlots) {
          *need = {ShmCollArea::kFinished, t_ + 1 - ShmCollArea::kSlots, kEveryMember,
                   "finish an earlier step"};
          return {};
        }
        break;
      case Phase::Publish:
        if (announces(c)) publish(c, a);
        copy_own_before(c);
        phase_ = Phase::Read;
        break;
      case Phase::Read: {
        phase_ = Phase::Consume;
        const int32_t from = reads_from(c);
        if (from != kNoMember) {
          const char *doing = kind_ == CollKind::Barrier                     ? "enter the barrier"
                              : moves(kind_) || kind_ == CollKind::Broadcast ? "publish its data"
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
        phase_ = Phase::Keep;
        const int32_t readers = waits_for_readers(c);
        if (readers != kNoMember) {
          *need = {
              ShmCollArea::kFinished, t_ + 1, readers,
              kind_ == CollKind::Broadcast || moves(kind_) ? "receive the data" : "read the data"};
          return {};
        }
        break;
      }
      case Phase::Keep: {
        readers_done_ = true;  // the wait of the Readers phase is over
        // Scatter's root keeps its block last: its buffers may overlap.
        const CollArgs &g = c.args();
        if (kind_ == CollKind::Scatter && c.rank() == g.root)
          move_bytes(g.recvbuf, static_cast<const uint8_t *>(g.sendbuf) + g.root * block_of(c),
                     block_of(c));
        phase_ = Phase::Done;
        break;
      }
      case Phase::Done:
        need->doing = nullptr;
        return {};
    }
  }
}

Task<Status> run_one_ticket(Coll &c, ShmCollArea &a, ShmOneTicket &m) {
  Status s;
  for (;;) {
    ShmNeed need{};
    s = m.advance(c, a, &need);
    if (!s || !need.doing) break;
    if (!(s = co_await shm_coll::wait_for(c, a, need))) break;
  }
  m.end(a, s);
  if (!s && m.saw_withdrawal()) s = co_await shm_coll::cause_of_withdrawal(c, std::move(s));
  co_return s;
}

Task<Status> one_ticket_body(Coll &c, ShmCollArea &a, CollKind kind) {
  ShmOneTicket m(c, a, kind);
  co_return co_await run_one_ticket(c, a, m);
}

}  // namespace nexar
