#include "core/buffer_pool.h"

#include <mimalloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#ifdef NEXAR_HAVE_VALGRIND_H  // CMake found the header
#include <valgrind/valgrind.h>
#endif

namespace nexar {
namespace {

// Whether buffers come from libc instead of mimalloc, decided once per process
// so that every buffer is freed by the allocator that made it.
//
// ThreadSanitizer builds (NEXAR_PLAIN_ALLOCATOR): mimalloc is not
// instrumented, so TSan cannot see the synchronisation inside its free lists
// and reports memory handed from one thread to another as a race. The libc
// allocator is intercepted.
//
// Under valgrind: Debian's libmimalloc exports mi_free at the address of its
// own free(), which memcheck replaces, while mi_malloc_aligned is left alone.
// Every buffer freed would be reported as an invalid free (and never freed)
// to anyone running their program under valgrind. libc's allocator is the
// one valgrind tracks.
bool use_libc_allocator() noexcept {
#if defined(NEXAR_PLAIN_ALLOCATOR)
  return true;
#elif defined(NEXAR_HAVE_VALGRIND_H)
  static const bool on_valgrind = RUNNING_ON_VALGRIND != 0;
  return on_valgrind;
#else
  return false;
#endif
}

std::uint8_t *alloc_storage(std::size_t bytes) {
  // At least one byte, so the result is always a distinct non-null pointer.
  const std::size_t n = std::max<std::size_t>(bytes, 1);
  void *p = nullptr;
  if (use_libc_allocator())  // aligned_alloc wants a multiple of the alignment
    p = std::aligned_alloc(kBufAlignment, (n + kBufAlignment - 1) / kBufAlignment * kBufAlignment);
  else
    p = mi_malloc_aligned(n, kBufAlignment);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::uint8_t *>(p);
}

void free_storage(void *p) {
  if (use_libc_allocator())
    std::free(p);
  else
    mi_free(p);
}

constexpr std::size_t index(PoolTier t) noexcept {
  return static_cast<std::size_t>(t);
}

}  // namespace

// ---------------------------------------------------------------- PooledBuf

PooledBuf::PooledBuf(std::uint8_t *data, std::size_t size, std::size_t capacity, PoolTier tier,
                     std::shared_ptr<BufferPool> pool) noexcept
    : data_(data), size_(size), capacity_(capacity), tier_(tier), pool_(std::move(pool)) {}

PooledBuf::PooledBuf(PooledBuf &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      tier_(std::exchange(other.tier_, PoolTier::Unpooled)),
      pool_(std::move(other.pool_)) {}

PooledBuf &PooledBuf::operator=(PooledBuf &&other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    tier_ = std::exchange(other.tier_, PoolTier::Unpooled);
    pool_ = std::move(other.pool_);
  }
  return *this;
}

PooledBuf PooledBuf::unpooled(std::size_t len) {
  return PooledBuf(alloc_storage(len), len, len, PoolTier::Unpooled, nullptr);
}

bool PooledBuf::resize(std::size_t n) noexcept {
  if (n > capacity_) return false;
  size_ = n;
  return true;
}

void PooledBuf::reset() noexcept {
  if (data_ == nullptr) return;
  if (pool_ != nullptr && tier_ != PoolTier::Unpooled) {
    pool_->release(data_, tier_);
  } else {
    free_storage(data_);
  }
  data_ = nullptr;
  size_ = capacity_ = 0;
  tier_ = PoolTier::Unpooled;
  pool_.reset();  // may destroy the pool (and its idle buffers) if this was the last handle
}

// --------------------------------------------------------------- BufferPool

BufferPool::BufferPool(Key, const std::array<TierConfig, kNumPoolTiers> &tiers) {
  for (std::size_t i = 0; i < kNumPoolTiers; ++i) {
    tiers_[i].config = tiers[i];
    // Reserve up front so release() never allocates while holding the lock.
    tiers_[i].idle.reserve(tiers[i].count);
  }
}

BufferPool::~BufferPool() {
  // No PooledBuf can be outstanding here: each holds a shared_ptr to the pool.
  for (Tier &t : tiers_) {
    for (std::uint8_t *p : t.idle)
      free_storage(p);
  }
}

std::shared_ptr<BufferPool> BufferPool::from_tiers(const std::array<TierConfig, kNumPoolTiers> &t) {
  return std::make_shared<BufferPool>(Key{}, t);
}

std::shared_ptr<BufferPool> BufferPool::create(PoolProfile profile) {
  const bool training = profile == PoolProfile::Training;
  return from_tiers({{{256, kSmallBufCapacity},
                      {training ? 32u : 16u, kLargeBufCapacity},
                      {training ? 16u : 4u, kHugeBufCapacity},
                      {training ? 4u : 0u, kGiantBufCapacity}}});
}

PoolTier BufferPool::tier_for(std::size_t len) const noexcept {
  for (std::size_t i = 0; i < kNumPoolTiers; ++i) {
    const TierConfig &c = tiers_[i].config;
    if (len <= c.capacity) return c.count == 0 ? PoolTier::Unpooled : static_cast<PoolTier>(i);
  }
  return PoolTier::Unpooled;
}

TierConfig BufferPool::tier_config(PoolTier tier) const noexcept {
  if (tier == PoolTier::Unpooled) return {0, 0};
  return tiers_[index(tier)].config;
}

std::size_t BufferPool::idle(PoolTier tier) const {
  if (tier == PoolTier::Unpooled) return 0;
  const Tier &t = tiers_[index(tier)];
  std::lock_guard lock(t.mu);
  return t.idle.size();
}

PoolStats BufferPool::stats() const noexcept {
  constexpr auto r = std::memory_order_relaxed;
  return {allocations_.load(r), reuses_.load(r), unpooled_.load(r), returned_.load(r),
          dropped_.load(r)};
}

PooledBuf BufferPool::checkout(std::size_t len) {
  const PoolTier tier = tier_for(len);
  if (tier == PoolTier::Unpooled) {
    unpooled_.fetch_add(1, std::memory_order_relaxed);
    return PooledBuf::unpooled(len);
  }
  Tier &t = tiers_[index(tier)];
  std::uint8_t *data = nullptr;
  {
    std::lock_guard lock(t.mu);
    if (!t.idle.empty()) {
      data = t.idle.back();  // LIFO: the most recently used buffer is cache-warm
      t.idle.pop_back();
    }
  }
  if (data != nullptr) {
    reuses_.fetch_add(1, std::memory_order_relaxed);
  } else {
    data = alloc_storage(t.config.capacity);  // lazy: first use, or tier exhausted
    allocations_.fetch_add(1, std::memory_order_relaxed);
  }
  return PooledBuf(data, len, t.config.capacity, tier, shared_from_this());
}

PooledBuf BufferPool::checkout_zeroed(std::size_t len) {
  PooledBuf buf = checkout(len);
  std::memset(buf.data(), 0, len);
  return buf;
}

void BufferPool::release(std::uint8_t *data, PoolTier tier) noexcept {
  Tier &t = tiers_[index(tier)];
  bool kept = false;
  {
    std::lock_guard lock(t.mu);
    if (t.idle.size() < t.config.count) {
      t.idle.push_back(data);  // within the reserved capacity: cannot allocate
      kept = true;
    }
  }
  if (kept) {
    returned_.fetch_add(1, std::memory_order_relaxed);
  } else {
    free_storage(data);
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

// -------------------------------------------------------------- PoolBuilder

std::shared_ptr<BufferPool> PoolBuilder::build() const {
  return BufferPool::from_tiers(tiers_);
}

}  // namespace nexar
