// A rank's shared-memory segment for the same-host path: one anonymous memfd
// per client, written only by its owner and mapped read-only by its same-host
// peers. It is sealed (no growing, no shrinking, no new writable mapping)
// before any peer sees it, so a peer can neither write into it nor truncate
// it under the owner. Shared memory holds offsets and counters, never
// pointers; everything a reader takes from a peer's segment is checked.
//
// Layout (every counter on a cache line of its own):
//
//   0          SegmentHeader (one page): magic, version, owner, slot geometry,
//              and the owner's sleep word (odd: its loop sleeps, ring it)
//   4096 + i * slot_stride   slot i, given to one peer:
//              line 0: tail  (bytes the owner wrote into this slot's ring)
//              line 1: head  (bytes the owner consumed of the peer's ring
//                             towards it)
//              line 2: refs_done (messages by reference from the peer that
//                             the owner finished copying)
//              then the ring's bytes (ring_bytes, a power of two)
//   heap_offset (page aligned)   the symmetric heap: buffers nexar_mem_alloc
//              hands out; a large message from one of them travels as a
//              reference into it, which the peer copies straight out.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "core/unique_fd.h"

namespace nexar {

inline constexpr uint64_t kShmMagic = 0x3130484d53584e45ull;  // "ENXSMH01"
inline constexpr uint32_t kShmVersion = 2;
inline constexpr size_t kShmHeaderBytes = 4096;
inline constexpr size_t kShmLine = 64;
inline constexpr size_t kShmSlotControlBytes = 3 * kShmLine;
inline constexpr uint64_t kShmPage = 4096;
// Seals a segment carries before a peer maps it.
int shm_required_seals();

struct ShmSegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t owner_rank;
  uint64_t slot_count;
  uint64_t ring_bytes;
  uint64_t slot_stride;
  uint64_t total_bytes;
  uint64_t heap_offset;
  uint64_t heap_bytes;
  alignas(kShmLine) uint64_t sleep_seq;  // odd while the owner's loop sleeps
};

// Loads and stores of counters in shared memory (the peer's are mapped
// read-only, so std::atomic objects cannot be used there). Sequentially
// consistent: a side that publishes a counter and then reads the other's
// sleep word, against one that sets its sleep word and then reads the
// counters, must not both miss (no fences: ThreadSanitizer cannot check them).
inline uint64_t shm_load(const uint64_t *p) {
  return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
inline void shm_store(uint64_t *p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

// A mapping, unmapped when destroyed.
class ShmMapping {
 public:
  ShmMapping() = default;
  ShmMapping(void *base, size_t bytes) : base_(static_cast<uint8_t *>(base)), bytes_(bytes) {}
  ~ShmMapping();
  ShmMapping(ShmMapping &&o) noexcept;
  ShmMapping &operator=(ShmMapping &&o) noexcept;
  ShmMapping(const ShmMapping &) = delete;
  ShmMapping &operator=(const ShmMapping &) = delete;

  uint8_t *data() const { return base_; }
  size_t size() const { return bytes_; }
  bool valid() const { return base_ != nullptr; }

 private:
  uint8_t *base_ = nullptr;
  size_t bytes_ = 0;
};

// The geometry of a segment: how many peers it serves, the ring of each,
// and the symmetric heap after them.
struct ShmGeometry {
  uint64_t slot_count = 0;
  uint64_t ring_bytes = 0;
  uint64_t heap_bytes = 0;  // a multiple of kShmPage
  uint64_t slot_stride() const { return kShmSlotControlBytes + ring_bytes; }
  uint64_t heap_offset() const {
    return (kShmHeaderBytes + slot_count * slot_stride() + kShmPage - 1) & ~(kShmPage - 1);
  }
  uint64_t total_bytes() const { return heap_offset() + heap_bytes; }
  // The most slots of ring_bytes that fit in budget bytes (at most
  // max_slots); the rest of the budget is the heap.
  static ShmGeometry fit(uint64_t budget, uint64_t ring_bytes, uint64_t max_slots);
};

// This rank's own segment: created, mapped read-write, sealed.
class OwnShmSegment {
 public:
  static Status create(uint32_t owner_rank, ShmGeometry g, OwnShmSegment *out);

  int fd() const { return fd_.get(); }
  const ShmGeometry &geometry() const { return geometry_; }
  ShmSegmentHeader *header() const { return reinterpret_cast<ShmSegmentHeader *>(map_.data()); }
  uint64_t *tail(uint64_t slot) const { return line(slot, 0); }
  uint64_t *head(uint64_t slot) const { return line(slot, 1); }
  uint64_t *refs_done(uint64_t slot) const { return line(slot, 2); }
  uint8_t *heap() const { return map_.data() + geometry_.heap_offset(); }
  uint64_t heap_bytes() const { return geometry_.heap_bytes; }
  uint8_t *ring(uint64_t slot) const {
    return map_.data() + kShmHeaderBytes + slot * geometry_.slot_stride() + kShmSlotControlBytes;
  }
  bool valid() const { return map_.valid(); }

 private:
  uint64_t *line(uint64_t slot, int n) const {
    return reinterpret_cast<uint64_t *>(map_.data() + kShmHeaderBytes +
                                        slot * geometry_.slot_stride() + n * kShmLine);
  }
  UniqueFd fd_;
  ShmMapping map_;
  ShmGeometry geometry_;
};

// A peer's segment, mapped read-only after checking its seals, size and
// header. Only the slot the peer gave this rank is read.
class PeerShmSegment {
 public:
  // Takes fd (closed once mapped); peer_rank is whom the segment must name.
  static Status map(UniqueFd fd, uint32_t peer_rank, uint64_t slot, PeerShmSegment *out);

  const ShmSegmentHeader *header() const {
    return reinterpret_cast<const ShmSegmentHeader *>(map_.data());
  }
  const uint64_t *tail() const { return line(0); }
  const uint64_t *head() const { return line(1); }
  const uint64_t *refs_done() const { return line(2); }
  const uint8_t *ring() const { return slot_base() + kShmSlotControlBytes; }
  uint64_t ring_bytes() const { return ring_bytes_; }
  const uint8_t *heap() const { return map_.data() + heap_offset_; }
  uint64_t heap_bytes() const { return heap_bytes_; }
  size_t mapped_bytes() const { return map_.size(); }

 private:
  const uint8_t *slot_base() const { return map_.data() + slot_offset_; }
  const uint64_t *line(int n) const {
    return reinterpret_cast<const uint64_t *>(slot_base() + n * kShmLine);
  }
  ShmMapping map_;
  uint64_t slot_offset_ = 0;
  uint64_t ring_bytes_ = 0;
  uint64_t heap_offset_ = 0;
  uint64_t heap_bytes_ = 0;
};

}  // namespace nexar
