// SymmetricMemory: what nexar_mem_alloc hands out. Blocks of this rank's
// symmetric heap (transport/shm_heap.h) when the same-host path is on, so
// that large messages from them travel by reference (one copy, the peer's);
// ordinary page-aligned memory when it is off or the heap is full, so a
// program works the same everywhere. Thread-safe.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/status.h"
#include "transport/shm_heap.h"

namespace nexar {

class SymmetricMemory {
 public:
  explicit SymmetricMemory(uint32_t rank) : rank_(rank) {}
  // The heap to hand out (before the loop starts; empty: plain memory only).
  void use_heap(uint8_t *base, uint64_t bytes) { heap_.reset(base, bytes); }

  Status allocate(uint64_t bytes, void **out);
  Status release(void *p);
  // A block of the shared heap only (null when there is none or it is full):
  // the collectives' areas, which peers must be able to read.
  void *allocate_shared(uint64_t bytes) { return heap_.allocate(bytes); }

 private:
  struct FreeDeleter {
    void operator()(void *p) const { std::free(p); }
  };
  uint32_t rank_;
  ShmHeap heap_;
  std::mutex mu_;
  std::unordered_map<void *, std::unique_ptr<void, FreeDeleter>> plain_;
  bool told_plain_ = false;
};

}  // namespace nexar
