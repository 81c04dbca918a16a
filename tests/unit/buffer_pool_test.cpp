#include "core/buffer_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace nexar {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

static_assert(!std::is_copy_constructible_v<PooledBuf>);
static_assert(!std::is_copy_assignable_v<PooledBuf>);
static_assert(std::is_nothrow_move_constructible_v<PooledBuf>);
static_assert(std::is_nothrow_move_assignable_v<PooledBuf>);

bool aligned(const void *p) {
  return reinterpret_cast<std::uintptr_t>(p) % kBufAlignment == 0;
}

TEST(BufferPool, TierSelection) {
  auto pool = BufferPool::create(PoolProfile::Training);
  struct Case {
    std::size_t len;
    PoolTier tier;
    std::size_t capacity;
  };
  const Case cases[] = {{100, PoolTier::Small, 64 * KiB},
                        {MiB, PoolTier::Large, 8 * MiB},
                        {32 * MiB, PoolTier::Huge, 64 * MiB},
                        {128 * MiB, PoolTier::Giant, 256 * MiB},
                        {512 * MiB, PoolTier::Unpooled, 512 * MiB}};
  for (const Case &c : cases) {
    EXPECT_EQ(pool->tier_for(c.len), c.tier) << c.len;
    PooledBuf buf = pool->checkout(c.len);
    ASSERT_TRUE(buf);
    EXPECT_EQ(buf.size(), c.len);
    EXPECT_EQ(buf.tier(), c.tier);
    EXPECT_EQ(buf.capacity(), c.capacity);
    EXPECT_TRUE(aligned(buf.data()));
    buf.data()[0] = 1;
    buf.data()[c.len - 1] = 2;
  }
  // Boundaries are inclusive.
  EXPECT_EQ(pool->tier_for(0), PoolTier::Small);
  EXPECT_EQ(pool->tier_for(64 * KiB), PoolTier::Small);
  EXPECT_EQ(pool->tier_for(64 * KiB + 1), PoolTier::Large);
  EXPECT_EQ(pool->tier_for(8 * MiB), PoolTier::Large);
  EXPECT_EQ(pool->tier_for(64 * MiB), PoolTier::Huge);
  EXPECT_EQ(pool->tier_for(256 * MiB), PoolTier::Giant);
  EXPECT_EQ(pool->tier_for(256 * MiB + 1), PoolTier::Unpooled);

  PoolStats s = pool->stats();
  EXPECT_EQ(s.allocations, 4u);
  EXPECT_EQ(s.unpooled, 1u);
  EXPECT_EQ(s.returned, 4u);
  EXPECT_EQ(s.dropped, 0u);
}

TEST(BufferPool, ProfileCounts) {
  auto training = BufferPool::create(PoolProfile::Training);
  auto inference = BufferPool::create(PoolProfile::Inference);
  const std::size_t want_t[] = {256, 32, 16, 4};
  const std::size_t want_i[] = {256, 16, 4, 0};
  const std::size_t caps[] = {64 * KiB, 8 * MiB, 64 * MiB, 256 * MiB};
  for (std::size_t i = 0; i < kNumPoolTiers; ++i) {
    const auto tier = static_cast<PoolTier>(i);
    EXPECT_EQ(training->tier_config(tier).count, want_t[i]);
    EXPECT_EQ(training->tier_config(tier).capacity, caps[i]);
    EXPECT_EQ(inference->tier_config(tier).count, want_i[i]);
    EXPECT_EQ(inference->tier_config(tier).capacity, caps[i]);
    EXPECT_EQ(training->idle(tier), 0u);  // lazy: nothing allocated up front
    EXPECT_EQ(inference->idle(tier), 0u);
  }
  EXPECT_EQ(BufferPool::create()->tier_config(PoolTier::Giant).count, 4u);  // default: Training

  // Inference giant tier keeps nothing: 128 MiB is served exactly-sized and freed.
  EXPECT_EQ(inference->tier_for(128 * MiB), PoolTier::Unpooled);
  {
    PooledBuf buf = inference->checkout(128 * MiB);
    EXPECT_EQ(buf.tier(), PoolTier::Unpooled);
    EXPECT_EQ(buf.size(), 128 * MiB);
    EXPECT_EQ(buf.capacity(), 128 * MiB);
  }
  EXPECT_EQ(inference->idle(PoolTier::Giant), 0u);
  PoolStats s = inference->stats();
  EXPECT_EQ(s.unpooled, 1u);
  EXPECT_EQ(s.allocations + s.returned + s.reuses + s.dropped, 0u);

  // Training giant tier does keep it.
  { PooledBuf buf = training->checkout(128 * MiB); }
  EXPECT_EQ(training->idle(PoolTier::Giant), 1u);
}

TEST(BufferPool, Builder) {
  auto pool = PoolBuilder()
                  .small({4, 1 * KiB})
                  .large({2, 1 * MiB})
                  .huge({0, 4 * MiB})
                  .giant({1, 16 * MiB})
                  .build();
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->tier_config(PoolTier::Small).count, 4u);
  EXPECT_EQ(pool->tier_config(PoolTier::Small).capacity, 1 * KiB);
  EXPECT_EQ(pool->tier_for(500), PoolTier::Small);
  EXPECT_EQ(pool->tier_for(2 * KiB), PoolTier::Large);
  EXPECT_EQ(pool->tier_for(2 * MiB), PoolTier::Unpooled);  // huge tier disabled
  EXPECT_EQ(pool->tier_for(8 * MiB), PoolTier::Giant);
  EXPECT_EQ(pool->tier_for(17 * MiB), PoolTier::Unpooled);
  PooledBuf buf = pool->checkout(500);
  EXPECT_EQ(buf.size(), 500u);
  EXPECT_EQ(buf.capacity(), 1 * KiB);

  auto defaults = PoolBuilder().build();
  const std::size_t want[] = {1, 1, 1, 0};
  const std::size_t caps[] = {64 * KiB, 8 * MiB, 64 * MiB, 256 * MiB};
  for (std::size_t i = 0; i < kNumPoolTiers; ++i) {
    EXPECT_EQ(defaults->tier_config(static_cast<PoolTier>(i)).count, want[i]);
    EXPECT_EQ(defaults->tier_config(static_cast<PoolTier>(i)).capacity, caps[i]);
  }
  EXPECT_EQ(defaults->checkout(100).size(), 100u);
}

TEST(BufferPool, LazyReuse) {
  auto pool = BufferPool::create(PoolProfile::Training);
  EXPECT_EQ(pool->stats().allocations, 0u);
  std::uint8_t *first = nullptr;
  {
    PooledBuf buf = pool->checkout(1024);
    first = buf.data();
    EXPECT_EQ(pool->stats().allocations, 1u);
    EXPECT_EQ(pool->idle(PoolTier::Small), 0u);
  }
  EXPECT_EQ(pool->idle(PoolTier::Small), 1u);
  EXPECT_EQ(pool->stats().returned, 1u);

  PooledBuf again = pool->checkout(512);
  EXPECT_EQ(again.data(), first);  // same storage
  EXPECT_EQ(again.size(), 512u);
  EXPECT_EQ(again.capacity(), 64 * KiB);
  PoolStats s = pool->stats();
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(pool->idle(PoolTier::Small), 0u);
}

TEST(BufferPool, ExhaustionAndDrop) {
  auto pool = PoolBuilder().small({1, 64}).build();
  PooledBuf b1 = pool->checkout(10);
  PooledBuf b2 = pool->checkout(10);  // tier empty: falls back to allocation
  ASSERT_TRUE(b1);
  ASSERT_TRUE(b2);
  EXPECT_NE(b1.data(), b2.data());
  EXPECT_EQ(b2.size(), 10u);
  EXPECT_EQ(pool->stats().allocations, 2u);

  b1.reset();  // returned: the tier has room for one
  EXPECT_FALSE(b1);
  EXPECT_EQ(pool->idle(PoolTier::Small), 1u);
  b2.reset();  // tier full: freed
  EXPECT_EQ(pool->idle(PoolTier::Small), 1u);
  PoolStats s = pool->stats();
  EXPECT_EQ(s.returned, 1u);
  EXPECT_EQ(s.dropped, 1u);
}

TEST(BufferPool, ZeroCountTierKeepsNothing) {
  auto pool = PoolBuilder().small({0, 64}).build();
  { PooledBuf b = pool->checkout(10); }
  EXPECT_EQ(pool->idle(PoolTier::Small), 0u);
  EXPECT_EQ(pool->stats().unpooled, 1u);
}

TEST(BufferPool, CheckoutZeroed) {
  auto pool = PoolBuilder().small({1, 4 * KiB}).large({0, 8 * MiB}).build();
  {
    PooledBuf dirty = pool->checkout(4 * KiB);
    std::memset(dirty.data(), 0xAB, dirty.size());
  }
  PooledBuf buf = pool->checkout_zeroed(3000);
  EXPECT_EQ(pool->stats().reuses, 1u);  // the dirty buffer came back
  ASSERT_EQ(buf.size(), 3000u);
  auto sp = buf.span();
  EXPECT_TRUE(std::all_of(sp.begin(), sp.end(), [](std::uint8_t b) { return b == 0; }));
  sp[0] = 0xAA;
  EXPECT_EQ(buf.data()[0], 0xAA);

  PooledBuf big = pool->checkout_zeroed(3 * MiB);  // unpooled path is zeroed too
  EXPECT_EQ(big.tier(), PoolTier::Unpooled);
  EXPECT_TRUE(std::all_of(big.span().begin(), big.span().end(), [](auto b) { return b == 0; }));
}

TEST(BufferPool, ResizeWithinCapacity) {
  auto pool = PoolBuilder().small({1, 1 * KiB}).build();
  PooledBuf buf = pool->checkout(100);
  EXPECT_TRUE(buf.resize(1 * KiB));
  EXPECT_EQ(buf.size(), 1 * KiB);
  EXPECT_EQ(buf.span().size(), 1 * KiB);
  EXPECT_FALSE(buf.resize(1 * KiB + 1));
  EXPECT_EQ(buf.size(), 1 * KiB);
  EXPECT_TRUE(buf.resize(0));
  EXPECT_TRUE(buf.empty());
  EXPECT_TRUE(buf);  // still owns storage
}

TEST(BufferPool, MoveSemantics) {
  auto pool = PoolBuilder().small({2, 1 * KiB}).build();
  PooledBuf a = pool->checkout(100);
  std::uint8_t *p = a.data();
  PooledBuf b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(pool->idle(PoolTier::Small), 0u);

  PooledBuf c = pool->checkout(200);
  c = std::move(b);  // c's old storage goes back to the pool
  EXPECT_EQ(pool->idle(PoolTier::Small), 1u);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 100u);

  PooledBuf &self = c;
  c = std::move(self);  // self-move is a no-op
  EXPECT_EQ(c.data(), p);

  std::vector<PooledBuf> v;
  v.push_back(std::move(c));
  v.push_back(pool->checkout(10));
  v.clear();
  EXPECT_EQ(pool->idle(PoolTier::Small), 2u);
  PoolStats s = pool->stats();
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.returned, 3u);
  EXPECT_EQ(s.dropped, 0u);

  PooledBuf empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.span().empty());
}

TEST(BufferPool, Unpooled) {
  PooledBuf buf = PooledBuf::unpooled(1000);
  ASSERT_TRUE(buf);
  EXPECT_EQ(buf.size(), 1000u);
  EXPECT_EQ(buf.capacity(), 1000u);
  EXPECT_EQ(buf.tier(), PoolTier::Unpooled);
  EXPECT_TRUE(aligned(buf.data()));
  std::memset(buf.data(), 7, buf.size());
  EXPECT_TRUE(buf.resize(10));
  EXPECT_FALSE(buf.resize(1001));
  EXPECT_TRUE(PooledBuf::unpooled(0));
}

TEST(BufferPool, ConcurrentCheckoutRelease) {
  auto pool = PoolBuilder().small({8, 4 * KiB}).large({2, 64 * KiB}).build();
  constexpr int kThreads = 4;
  constexpr int kIters = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, t] {
      std::vector<PooledBuf> held;
      for (int i = 0; i < kIters; ++i) {
        const std::size_t len = (i % 7 == 0) ? 10 * KiB : 100 + static_cast<std::size_t>(i % 900);
        PooledBuf b = pool->checkout(len);
        // Each buffer is exclusively ours: fill and verify it.
        std::memset(b.data(), t + 1, b.size());
        ASSERT_EQ(b.data()[b.size() - 1], t + 1);
        held.push_back(std::move(b));
        if (held.size() > static_cast<std::size_t>(i % 5)) held.clear();
      }
    });
  }
  for (std::thread &th : threads)
    th.join();

  const PoolStats s = pool->stats();
  const std::size_t total = kThreads * kIters;
  EXPECT_EQ(s.unpooled, 0u);
  EXPECT_EQ(s.allocations + s.reuses, total);
  EXPECT_EQ(s.returned + s.dropped, total);  // everything came back
  EXPECT_GT(s.reuses, 0u);
  // No leak: every allocated buffer is either idle in its tier or was freed.
  const std::size_t idle = pool->idle(PoolTier::Small) + pool->idle(PoolTier::Large);
  EXPECT_EQ(s.allocations, idle + s.dropped);
  EXPECT_LE(pool->idle(PoolTier::Small), 8u);
  EXPECT_LE(pool->idle(PoolTier::Large), 2u);
}

TEST(BufferPool, BufferOutlivesPool) {
  PooledBuf buf;
  std::weak_ptr<BufferPool> weak;
  {
    auto pool = PoolBuilder().small({4, 1 * KiB}).build();
    weak = pool;
    PooledBuf cached = pool->checkout(10);  // will sit idle in the pool
    buf = pool->checkout(100);
  }
  // The buffer keeps the pool alive; using and then releasing it is safe.
  EXPECT_FALSE(weak.expired());
  std::memset(buf.data(), 1, buf.size());
  EXPECT_EQ(buf.data()[99], 1);
  buf.reset();  // returns storage, then destroys the pool and its idle buffers
  EXPECT_TRUE(weak.expired());

  // Same when the buffer is destroyed by scope exit rather than reset().
  {
    PooledBuf b2;
    {
      auto pool = BufferPool::create(PoolProfile::Inference);
      weak = pool;
      b2 = pool->checkout(1 * MiB);
    }
    EXPECT_FALSE(weak.expired());
  }
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace nexar
