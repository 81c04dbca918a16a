// Allgather, gather, scatter and alltoall on a communicator's shared-memory
// area (collective/shm_collectives.h describes the area and its steps).
//
// A publisher's data is one block (allgather, gather's other members) or one
// block per destination (scatter's root, alltoall). Ticket k carries part k
// of each block, the blocks' parts one after another in the slot, so a reader
// copies exactly its own parts out of the publisher's slot. A publisher whose
// whole data lies in its heap (a nexar_mem_alloc buffer) publishes it where
// it is, at every ticket; so does a publisher whose readers all read its
// process directly (ShmCollArea::read_directly_by_all), by the buffer's
// address, and they copy straight out of it with process_vm_readv. When
// every publisher does either, the collective is a single ticket whatever
// its size. The members with nothing to publish
// announce an empty first ticket, and every member that reads checks every
// other member's first ticket: all agree on the number of tickets, and a
// mismatch is seen. A publisher returns once its readers have finished.
#include <algorithm>
#include <cstring>
#include <vector>

#include "client/shm_coll_area.h"
#include "client/shm_host.h"
#include "collective/ring.h"
#include "collective/shm_coll_steps.h"
#include "collective/shm_collectives.h"
#include "collective/shm_one_ticket.h"
#include "core/copy.h"

namespace nexar {
namespace {

using namespace shm_coll;

class Movement {
 public:
  Movement(Coll &c, ShmCollArea &a);
  Task<Status> run();

 private:
  // Member r has data to publish.
  bool publishes(uint32_t r) const {
    if (kind_ == CollKind::Gather) return r != root_;
    if (kind_ == CollKind::Scatter) return r == root_;
    return true;
  }
  // Bytes of a block in ticket k, and a publisher's bytes in ticket k.
  uint64_t len(uint64_t k) const { return std::min(part_, block_ - k * part_); }
  uint64_t part_bytes(uint64_t k) const { return blocks_ * len(k); }
  uint64_t whole_bytes() const { return blocks_ * block_; }

  void copy_own_before();
  Task<Status> publish_part(uint64_t k);
  Status check_first(uint32_t r);
  Status check_part(uint32_t r, uint64_t k);
  Status copy_part(uint32_t r, uint64_t k);
  Task<Status> wait_at_end(uint64_t end);

  Coll &c_;
  ShmCollArea &a_;
  const CollKind kind_;
  const uint32_t n_, me_, root_;
  const uint8_t *src_ = nullptr;  // what this member publishes
  uint8_t *dst_ = nullptr;        // source r's block goes to dst_ + r * dst_stride_
  uint64_t dst_stride_ = 0;
  uint32_t blocks_ = 1;  // blocks of a publisher: 1 or one per member
  uint64_t block_ = 0, part_ = 0, chunked_tickets_ = 0;
  std::vector<uint32_t> sources_;  // the members this one copies from
  int32_t only_source_ = -1;       // when that is one member (scatter's root)
  bool mine_whole_ = false;        // this member publishes its data where it is
  bool mine_direct_ = false;       // ... by its address in this process
  bool streaming_ = false;         // copies out with streaming stores (streams_out)
  uint64_t whole_offset_ = 0;
  uint64_t t0_ = 0;
  std::vector<uint8_t> whole_;         // per member: published where it is
  std::vector<const uint8_t *> data_;  // per member: its data of the current ticket
  std::vector<uint64_t> direct_;       // per member: its data's address in its process, or 0
};

Movement::Movement(Coll &c, ShmCollArea &a)
    : c_(c),
      a_(a),
      kind_(c.kind()),
      n_(c.size()),
      me_(c.rank()),
      root_(c.args().root),
      whole_(c.size(), 0),
      data_(c.size(), nullptr),
      direct_(c.size(), 0) {
  const CollArgs &g = c.args();
  block_ = uint64_t{g.count} * c.esize();
  src_ = static_cast<const uint8_t *>(g.sendbuf);
  dst_ = static_cast<uint8_t *>(g.recvbuf);
  dst_stride_ = kind_ == CollKind::Scatter ? 0 : block_;
  const bool per_member = kind_ == CollKind::Scatter || kind_ == CollKind::Alltoall;
  blocks_ = per_member ? n_ : 1;
  // A slot holds one part of each block, in whole elements; a block of a
  // few parts' size is cut finer, so copies in and out overlap.
  const uint64_t slot_share =
      per_member
          ? std::max<uint64_t>(c.esize(), ShmCollArea::kSlotBytes / n_ / c.esize() * c.esize())
          : ShmCollArea::kSlotBytes;
  part_ = std::min(slot_share, pipeline_chunk_bytes(block_, c.esize()));
  chunked_tickets_ = (block_ + part_ - 1) / part_;
  const bool reads = kind_ == CollKind::Allgather || kind_ == CollKind::Alltoall ||
                     (kind_ == CollKind::Gather && me_ == root_) ||
                     (kind_ == CollKind::Scatter && me_ != root_);
  for (uint32_t r = 0; reads && r < n_; ++r)
    if (r != me_ && publishes(r)) sources_.push_back(r);
  if (kind_ == CollKind::Scatter) only_source_ = static_cast<int32_t>(root_);
  // What this member touches: its data, and what it receives.
  const uint64_t in = publishes(me_) ? blocks_ * block_ : 0;
  const uint64_t out = !reads ? 0 : kind_ == CollKind::Scatter ? block_ : n_ * block_;
  streaming_ = streams_out(n_, in + out, src_ == dst_);
}

// What this member keeps of its own data, before anything arrives (gather's
// root: its buffers may overlap, as over messages), after its first publish.
void Movement::copy_own_before() {
  if (kind_ == CollKind::Allgather)
    copy_unless_same(dst_ + me_ * block_, src_, block_);
  else if (kind_ == CollKind::Gather && me_ == root_)
    move_bytes(dst_ + me_ * block_, src_, block_);
  else if (kind_ == CollKind::Alltoall && src_ != dst_)
    copy_bytes(dst_ + me_ * block_, src_ + me_ * block_, block_);
}

Task<Status> Movement::publish_part(uint64_t k) {
  const uint64_t t = t0_ + k;
  Status s = co_await claim_slot(c_, a_, t);
  if (!s) co_return s;
  if (mine_whole_) {
    announce(c_, a_, t, whole_offset_, whole_bytes());
    co_return Status();
  }
  if (mine_direct_) {
    announce(c_, a_, t, kDirectAddress | reinterpret_cast<uint64_t>(src_), whole_bytes());
    co_return Status();
  }
  // Part k of each block; a member's own block never travels.
  uint8_t *slot = a_.own_slot(t);
  const uint64_t l = len(k);
  for (uint32_t i = 0; i < blocks_; ++i)
    if (blocks_ == 1 || i != me_) copy_bytes(slot + i * l, src_ + i * block_ + k * part_, l);
  announce(c_, a_, t, a_.own_slot_offset(t), part_bytes(k));
  co_return Status();
}

// Member r's first ticket: its whole data where it lies, or its first part.
Status Movement::check_first(uint32_t r) {
  const bool whole = chunked_tickets_ > 1 && a_.header(r, t0_)->bytes == whole_bytes();
  Status s =
      published_data(c_, a_, r, t0_, whole ? whole_bytes() : part_bytes(0), &data_[r], &direct_[r]);
  // With one ticket a part is the whole data.
  whole_[r] = whole || chunked_tickets_ == 1;
  return s;
}

Status Movement::check_part(uint32_t r, uint64_t k) {
  if (whole_[r]) return {};
  return published_data(c_, a_, r, t0_ + k, part_bytes(k), &data_[r], &direct_[r]);
}

Status Movement::copy_part(uint32_t r, uint64_t k) {
  const uint64_t i = blocks_ == 1 ? 0 : me_;
  const uint64_t at = whole_[r] ? i * block_ + k * part_ : i * len(k);
  uint8_t *to = dst_ + r * dst_stride_ + k * part_;
  if (!direct_[r]) {
    copy_result(streaming_, to, data_[r] + at, len(k));
    return {};
  }
  return read_published(c_, a_, r, t0_, direct_[r] + at, to, len(k));
}

// A publisher ends once its readers have finished: they may still read its
// slot or its buffer where it lies (and a member that exits at once would
// fail them), and a reader that ran another collective is heard of instead
// of this one reporting success.
Task<Status> Movement::wait_at_end(uint64_t end) {
  if (!publishes(me_)) co_return Status();
  const int32_t reader = kind_ == CollKind::Gather ? static_cast<int32_t>(root_) : -1;
  co_return co_await wait_for(c_, a_, ShmCollArea::kFinished, end, "receive the data", reader);
}

Task<Status> Movement::run() {
  if (blocks_ * part_ > ShmCollArea::kSlotBytes)
    co_return error(NEXAR_ERR_INVALID_ARGUMENT,
                    format("%s: %u members are too many for shared memory", c_.what(), n_));
  a_.set_step_bytes(blocks_ * std::min(part_, block_));
  t0_ = a_.take_tickets(1);
  Withdrawal withdrawal(a_, t0_);
  Status s;
  if (publishes(me_)) {
    // In place, an alltoall overwrites what the others still read.
    mine_whole_ = whole_bytes() >= kByReferenceMinBytes &&
                  !(kind_ == CollKind::Alltoall && src_ == dst_) &&
                  a_.in_own_heap(src_, whole_bytes(), &whole_offset_);
    if (mine_whole_) a_.host().count_by_reference(whole_bytes());
    // Its readers copy out of the buffer itself; in place, an alltoall
    // overwrites what they still read.
    mine_direct_ = !mine_whole_ && block_ >= kDirectMinBytes &&
                   !(kind_ == CollKind::Alltoall && src_ == dst_) &&
                   a_.read_directly_by_all(copies_a_direct_read_replaces(kind_, n_));
    if (mine_direct_) withdrawal.arm();
    if (!(s = co_await publish_part(0))) co_return s;
  } else {
    // Nothing to give but what it called, for the others to check (ranks
    // that disagree about the root all hear of it).
    if (!(s = co_await claim_slot(c_, a_, t0_))) co_return s;
    announce(c_, a_, t0_, a_.own_slot_offset(t0_), 0);
  }
  // While the others read the first ticket (the publish never reads the
  // own block's destination).
  copy_own_before();
  // Every member but scatter's root, which reads nothing, checks every
  // other member's first ticket.
  const bool checks = kind_ != CollKind::Scatter || me_ != root_;
  if (checks) {
    s = co_await wait_for(c_, a_, ShmCollArea::kPublished, t0_ + 1, "publish its data");
    if (!s) co_return s;
  }
  bool all_whole = !publishes(me_) || mine_whole_ || mine_direct_;
  for (uint32_t r = 0; checks && r < n_; ++r) {
    if (r == me_) continue;
    if (publishes(r)) {
      if (!(s = check_first(r))) co_return s;
      all_whole = all_whole && whole_[r];
    } else {
      const uint8_t *none = nullptr;
      if (!(s = published_data(c_, a_, r, t0_, 0, &none))) co_return s;
    }
  }
  // Every publisher's data where it lies: one ticket, one part of each block.
  if (all_whole) part_ = block_;
  const uint64_t tickets = all_whole ? 1 : chunked_tickets_;
  a_.set_step_bytes(blocks_ * std::min(part_, block_));
  if (tickets > 1) a_.take_tickets(tickets - 1);
  for (uint64_t k = 0; k < tickets; ++k) {
    const uint64_t t = t0_ + k;
    if (k > 0 && !sources_.empty()) {
      s = co_await wait_for(c_, a_, ShmCollArea::kPublished, t + 1, "publish its data",
                            only_source_);
      if (!s) co_return s;
      for (uint32_t r : sources_)
        if (!(s = check_part(r, k))) co_return s;
    }
    // The next part goes out while this one is copied.
    if (k + 1 < tickets && publishes(me_) && !(s = co_await publish_part(k + 1))) co_return s;
    for (uint32_t r : sources_) {
      if ((s = copy_part(r, k))) continue;
      if (s.code == NEXAR_ERR_ABORTED) s = co_await cause_of_withdrawal(c_, s);
      co_return s;
    }
    finish_ticket(a_, t);
  }
  if (!(s = co_await wait_at_end(t0_ + tickets))) co_return s;
  withdrawal.readers_finished();
  // Scatter's root keeps its block last: its buffers may overlap.
  if (kind_ == CollKind::Scatter && me_ == root_) move_bytes(dst_, src_ + root_ * block_, block_);
  co_return Status();
}

// Small ones take one ticket on ShmOneTicket, whose steps also run on a
// blocking caller's thread.
Task<Status> movement_body(Coll &c, ShmCollArea &a) {
  if (ShmOneTicket::fits(c.kind(), c.args(), c.size()))
    co_return co_await one_ticket_body(c, a, c.kind());
  Movement m(c, a);
  co_return co_await m.run();
}

}  // namespace

Task<Status> shm_allgather(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, movement_body);
}

Task<Status> shm_gather(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, movement_body);
}

Task<Status> shm_scatter(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, movement_body);
}

Task<Status> shm_alltoall(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, movement_body);
}

}  // namespace nexar
