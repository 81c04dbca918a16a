// Tiered, lazily filled pool of receive/staging buffers.
//
// Why four tiers: nexar traffic is bimodal-plus. Control messages, RPC frames
// and routing decisions are tiny (small, <= 64 KiB, many of them); MoE token
// dispatch, embedding gradients and small activations are medium (large,
// <= 8 MiB); ring-allreduce chunks, KV-cache layers and pipeline activations
// are big (huge, <= 64 MiB); halving-doubling blocks and whole-tensor
// broadcasts are very big (giant, <= 256 MiB). Anything larger is allocated
// exactly and freed on release (unpooled): keeping it would pin too much RAM.
//
// Memory is allocated lazily at the tier's capacity on the first checkout that
// finds the tier empty, and recycled on release while the tier holds fewer
// than its `count` buffers; otherwise it is freed. A tier with count 0 keeps
// nothing: its requests are served unpooled, at exactly the requested length
// (unlike upstream, which clamped 0 to 1). Storage is 64-byte aligned and comes
// from mimalloc (from libc under valgrind and in ThreadSanitizer builds).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace nexar {

inline constexpr std::size_t kSmallBufCapacity = std::size_t{64} << 10;   // 64 KiB
inline constexpr std::size_t kLargeBufCapacity = std::size_t{8} << 20;    // 8 MiB
inline constexpr std::size_t kHugeBufCapacity = std::size_t{64} << 20;    // 64 MiB
inline constexpr std::size_t kGiantBufCapacity = std::size_t{256} << 20;  // 256 MiB
inline constexpr std::size_t kBufAlignment = 64;

// Training: (256, 32, 16, 4) buffers per tier. Inference: (256, 16, 4, 0); no
// gradient-sized chunks, so the giant tier keeps nothing.
enum class PoolProfile { Training, Inference };

enum class PoolTier : std::uint8_t { Small = 0, Large = 1, Huge = 2, Giant = 3, Unpooled = 4 };
inline constexpr std::size_t kNumPoolTiers = 4;

struct TierConfig {
  std::size_t count;     // maximum number of idle buffers kept (0: keep none)
  std::size_t capacity;  // bytes per buffer; also the tier's upper size bound
};

struct PoolStats {
  std::size_t allocations;  // fresh tier-capacity allocations (tier was empty)
  std::size_t reuses;       // checkouts served from an idle buffer
  std::size_t unpooled;     // checkouts served outside the tiers (exact size)
  std::size_t returned;     // releases that put the buffer back in its tier
  std::size_t dropped;      // releases that freed a tier buffer (tier full)
};

class BufferPool;

// Move-only owner of one buffer. Returns the storage to its pool (or frees it)
// on destruction. Holds a reference to the pool, so it may outlive every other
// handle to the pool.
class PooledBuf {
 public:
  PooledBuf() noexcept = default;
  PooledBuf(PooledBuf &&other) noexcept;
  PooledBuf &operator=(PooledBuf &&other) noexcept;
  PooledBuf(const PooledBuf &) = delete;
  PooledBuf &operator=(const PooledBuf &) = delete;
  ~PooledBuf() { reset(); }

  // A buffer of exactly `len` bytes that belongs to no pool (contents unspecified).
  static PooledBuf unpooled(std::size_t len);

  std::uint8_t *data() noexcept { return data_; }
  const std::uint8_t *data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool empty() const noexcept { return size_ == 0; }
  PoolTier tier() const noexcept { return tier_; }
  std::span<std::uint8_t> span() noexcept { return {data_, size_}; }
  std::span<const std::uint8_t> span() const noexcept { return {data_, size_}; }

  // Changes size() within capacity(); returns false (and changes nothing) if
  // n > capacity(). Bytes past the previous size are unspecified.
  bool resize(std::size_t n) noexcept;

  // Releases the storage now; the buffer becomes empty (operator bool false).
  void reset() noexcept;

  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  friend class BufferPool;
  PooledBuf(std::uint8_t *data, std::size_t size, std::size_t capacity, PoolTier tier,
            std::shared_ptr<BufferPool> pool) noexcept;

  std::uint8_t *data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  PoolTier tier_ = PoolTier::Unpooled;
  std::shared_ptr<BufferPool> pool_;  // null for unpooled buffers
};

class BufferPool : public std::enable_shared_from_this<BufferPool> {
  struct Key {  // only create() and PoolBuilder can construct a pool
    explicit Key() = default;
  };

 public:
  // Use create() or PoolBuilder (a pool must be owned by a shared_ptr).
  BufferPool(Key, const std::array<TierConfig, kNumPoolTiers> &tiers);
  static std::shared_ptr<BufferPool> create(PoolProfile profile = PoolProfile::Training);

  ~BufferPool();
  BufferPool(const BufferPool &) = delete;
  BufferPool &operator=(const BufferPool &) = delete;

  // A buffer of size() == len; contents unspecified. Throws std::bad_alloc.
  PooledBuf checkout(std::size_t len);
  // Same, with the first len bytes zeroed.
  PooledBuf checkout_zeroed(std::size_t len);

  // The tier checkout(len) would use: the first tier (in order small, large,
  // huge, giant) whose capacity >= len, or Unpooled if none does or that tier's
  // count is 0.
  PoolTier tier_for(std::size_t len) const noexcept;
  TierConfig tier_config(PoolTier tier) const noexcept;
  // Number of idle buffers currently kept by `tier`.
  std::size_t idle(PoolTier tier) const;
  PoolStats stats() const noexcept;

 private:
  friend class PoolBuilder;
  friend class PooledBuf;

  struct alignas(64) Tier {
    TierConfig config{};
    mutable std::mutex mu;
    std::vector<std::uint8_t *> idle;  // reserved to config.count; never grows
  };

  static std::shared_ptr<BufferPool> from_tiers(const std::array<TierConfig, kNumPoolTiers> &t);
  void release(std::uint8_t *data, PoolTier tier) noexcept;

  std::array<Tier, kNumPoolTiers> tiers_;
  std::atomic<std::size_t> allocations_{0};
  std::atomic<std::size_t> reuses_{0};
  std::atomic<std::size_t> unpooled_{0};
  std::atomic<std::size_t> returned_{0};
  std::atomic<std::size_t> dropped_{0};
};

// Custom tier configuration. Defaults: counts 1/1/1/0 at the default
// capacities (64 KiB / 8 MiB / 64 MiB / 256 MiB).
class PoolBuilder {
 public:
  PoolBuilder &small(TierConfig c) noexcept { return set(PoolTier::Small, c); }
  PoolBuilder &large(TierConfig c) noexcept { return set(PoolTier::Large, c); }
  PoolBuilder &huge(TierConfig c) noexcept { return set(PoolTier::Huge, c); }
  PoolBuilder &giant(TierConfig c) noexcept { return set(PoolTier::Giant, c); }
  std::shared_ptr<BufferPool> build() const;

 private:
  PoolBuilder &set(PoolTier t, TierConfig c) noexcept {
    tiers_[static_cast<std::size_t>(t)] = c;
    return *this;
  }

  std::array<TierConfig, kNumPoolTiers> tiers_{{{1, kSmallBufCapacity},
                                                {1, kLargeBufCapacity},
                                                {1, kHugeBufCapacity},
                                                {0, kGiantBufCapacity}}};
};

}  // namespace nexar
