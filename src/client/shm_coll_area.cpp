#include "client/shm_coll_area.h"

#include <cstring>

#include "client/shm_host.h"

namespace nexar {

std::unique_ptr<ShmCollArea> ShmCollArea::create(ShmHost &host, uint32_t rank, uint32_t size) {
  uint64_t offset = 0;
  uint8_t *own = host.allocate_shared(kAreaBytes, &offset);
  if (!own) return nullptr;
  // Counters start at zero: no ticket published, reduced or finished, and
  // no wait asleep.
  memset(own, 0, kCounterLines * kShmLine);
  for (uint32_t s = 0; s < kSlots; ++s)
    memset(own + slot_offset(s), 0, kShmLine);
  return std::make_unique<ShmCollArea>(host, rank, size, own, offset);
}

ShmCollArea::ShmCollArea(ShmHost &host, uint32_t rank, uint32_t size, uint8_t *own, uint64_t offset)
    : host_(host), rank_(rank), own_(own), offset_(offset), members_(size) {
  const OwnShmSegment &seg = host.segment();
  members_[rank] = {0, own, seg.heap(), seg.heap_bytes()};
}

ShmCollArea::~ShmCollArea() {
  host_.release_shared(own_);
}

bool ShmCollArea::attach(uint32_t r, uint32_t world_rank, uint64_t offset) {
  const ShmChannel *ch = host_.channel(world_rank);
  if (!ch || r >= members_.size()) return false;
  const PeerShmSegment &seg = ch->peer_segment();
  if (offset > seg.heap_bytes() || seg.heap_bytes() - offset < kAreaBytes || offset % kShmLine)
    return false;
  members_[r] = {world_rank, seg.heap() + offset, seg.heap(), seg.heap_bytes()};
  return true;
}

bool ShmCollArea::in_own_heap(const void *p, uint64_t bytes, uint64_t *offset) const {
  const uint8_t *heap = members_[rank_].heap;
  const uint64_t cap = members_[rank_].heap_bytes;
  const auto *b = static_cast<const uint8_t *>(p);
  if (!heap || b < heap || b >= heap + cap || bytes > static_cast<uint64_t>(heap + cap - b))
    return false;
  *offset = static_cast<uint64_t>(b - heap);
  return true;
}

void ShmCollArea::ring_all() const {
  // Dekker with the waiter (wait_for): it sets its sleeping word, then
  // looks at the counters; this side changed a counter, then looks at the
  // word (both sequentially consistent: shm_store, shm_load).
  for (uint32_t r = 0; r < members_.size(); ++r)
    if (r != rank_ && shm_load(counter(r, kSleeping)) != 0) host_.ring(members_[r].world_rank);
}

}  // namespace nexar
