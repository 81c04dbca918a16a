#include "client/symmetric_memory.h"

#include "core/log.h"
#include "transport/shm_segment.h"

namespace nexar {

Status SymmetricMemory::allocate(uint64_t bytes, void **out) {
  if (bytes == 0) return error(NEXAR_ERR_INVALID_ARGUMENT, "nexar_mem_alloc: bytes is 0");
  if (void *p = heap_.allocate(bytes)) {
    *out = p;
    return {};
  }
  const uint64_t rounded = (bytes + kShmPage - 1) & ~(kShmPage - 1);
  if (rounded < bytes)
    return error(NEXAR_ERR_INVALID_ARGUMENT, "nexar_mem_alloc: bytes is too large");
  void *p = std::aligned_alloc(kShmPage, rounded);
  if (!p)
    return error(NEXAR_ERR_NO_MEMORY, format("nexar_mem_alloc: rank %u cannot allocate %llu bytes",
                                             rank_, static_cast<unsigned long long>(bytes)));
  std::lock_guard<std::mutex> g(mu_);
  if (!std::exchange(told_plain_, true))
    LOG_INFO(
        "rank %u: nexar_mem_alloc of %llu bytes gives ordinary memory (%s): messages from "
        "it are copied as from any buffer",
        rank_, static_cast<unsigned long long>(bytes),
        heap_.capacity() ? "the shared heap is full (NEXAR_SHM_MAX_BYTES)"
                         : "shared memory is off");
  plain_.emplace(p, std::unique_ptr<void, FreeDeleter>(p));
  *out = p;
  return {};
}

Status SymmetricMemory::release(void *p) {
  if (!p) return {};
  if (heap_.release(p)) return {};
  std::lock_guard<std::mutex> g(mu_);
  if (plain_.erase(p)) return {};
  return error(
      NEXAR_ERR_INVALID_ARGUMENT,
      format("nexar_mem_free: rank %u did not hand out %p (or it was freed already)", rank_, p));
}

}  // namespace nexar
