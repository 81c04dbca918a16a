#include "transport/shm_heap.h"

#include <iterator>

#include "transport/shm_segment.h"

namespace nexar {

void ShmHeap::reset(uint8_t *base, uint64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  base_ = base;
  bytes_ = bytes;
  free_.clear();
  used_.clear();
  if (base && bytes) free_.emplace(0, bytes);
}

void *ShmHeap::allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > (UINT64_MAX - kShmPage)) return nullptr;
  const uint64_t want = (bytes + kShmPage - 1) & ~(kShmPage - 1);
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t at = it->first, left = it->second - want;
    free_.erase(it);
    if (left) free_.emplace(at + want, left);
    used_.emplace(at, want);
    return base_ + at;
  }
  return nullptr;
}

bool ShmHeap::release(void *p) {
  std::lock_guard<std::mutex> g(mu_);
  auto *b = static_cast<uint8_t *>(p);
  if (!base_ || b < base_ || b >= base_ + bytes_) return false;
  auto used = used_.find(static_cast<uint64_t>(b - base_));
  if (used == used_.end()) return false;
  uint64_t at = used->first, len = used->second;
  used_.erase(used);
  // Coalesce with the free neighbours on both sides.
  auto next = free_.lower_bound(at);
  if (next != free_.end() && next->first == at + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      at = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(at, len);
  return true;
}

}  // namespace nexar
