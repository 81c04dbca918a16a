// The slot a blocking C call sleeps on: a completion is never lost, whether
// it comes before the wait, while the caller spins, or while it sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "engine/completion_queue.h"

using namespace nexar;

TEST(BlockingSlot, CompletedBeforeTheWaitReturnsItsStatus) {
  BlockingSlot slot;
  slot.complete(Status(NEXAR_ERR_TIMEOUT, "recv from rank 1", 1));
  EXPECT_TRUE(slot.done());
  const Status s = slot.wait(0);
  EXPECT_EQ(s.code, NEXAR_ERR_TIMEOUT);
  EXPECT_EQ(s.message, "recv from rank 1");
  EXPECT_EQ(s.failed_rank, 1);
}

// Hands slots from this thread to a completing thread and back, many times,
// with and without spinning. A lost wake-up would leave the caller asleep:
// a watchdog ends the test then, naming the round; a torn status fails it.
TEST(BlockingSlot, ManyHandOffsLoseNoWakeUp) {
  // The round the caller waits in; the completer works through it.
  std::atomic<int> published{-1};
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    int last = -1;
    for (;;) {
      for (int t = 0; t < 300 && !finished.load(); ++t)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (finished.load()) return;
      const int now = published.load();
      if (now == last) {
        fprintf(stderr, "BlockingSlot: the caller slept through round %d's completion\n", now);
        std::abort();
      }
      last = now;
    }
  });
  for (uint32_t spin_us : {0u, 20u}) {
    constexpr int kRounds = 20000;
    std::vector<std::shared_ptr<BlockingSlot>> slots(kRounds);
    for (auto &s : slots)
      s = std::make_shared<BlockingSlot>();
    published.store(-1);
    std::thread completer([&] {
      for (int i = 0; i < kRounds; ++i) {
        while (published.load(std::memory_order_acquire) < i)
          std::this_thread::yield();
        // Every fourth completion lets the caller get to sleep first.
        if (i % 4 == 0)
          for (int k = 0; k < 200; ++k)
            std::this_thread::yield();
        std::shared_ptr<BlockingSlot> keep = slots[static_cast<size_t>(i)];
        keep->complete(Status(NEXAR_OK, std::to_string(i)));
      }
    });
    int wrong = 0;
    for (int i = 0; i < kRounds; ++i) {
      published.store(i, std::memory_order_release);
      const Status s = slots[static_cast<size_t>(i)]->wait(spin_us);
      if (!s.ok() || s.message != std::to_string(i)) ++wrong;
    }
    completer.join();
    EXPECT_EQ(wrong, 0) << "spin_us " << spin_us;
  }
  finished.store(true);
  watchdog.join();
}
