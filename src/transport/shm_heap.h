// ShmHeap: the allocator of a segment's symmetric heap (shm_segment.h), what
// nexar_mem_alloc hands out. First fit over page-aligned blocks; the books
// live in this process only (a peer reads the heap, it never allocates).
// Thread-safe: callers allocate from their own threads while the loop sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace nexar {

class ShmHeap {
 public:
  ShmHeap() = default;
  ShmHeap(uint8_t *base, uint64_t bytes) { reset(base, bytes); }
  ShmHeap(const ShmHeap &) = delete;
  ShmHeap &operator=(const ShmHeap &) = delete;

  void reset(uint8_t *base, uint64_t bytes);
  // A block of at least bytes (rounded up to a page), or null when no free
  // range is large enough.
  void *allocate(uint64_t bytes);
  // False if p is not a block this heap handed out (and still holds).
  bool release(void *p);
  uint64_t capacity() const { return bytes_; }

 private:
  std::mutex mu_;
  uint8_t *base_ = nullptr;
  uint64_t bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, coalesced
  std::map<uint64_t, uint64_t> used_;  // offset -> length
};

}  // namespace nexar
