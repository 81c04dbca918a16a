// Small blocking collectives on shared memory run on the caller's thread at
// once (collective/shm_inline.h): no command for the loop, no coroutine,
// unless a member is late, when the rest goes on as an operation that
// sleeps. Two real in-process engines with real segments; each call goes
// the way the C ABI's blocking call does (at once if it can, else
// submitted), and the engines' counters say which way it went.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "client/communicator.h"
#include "client_probe.h"
#include "cluster/local_bootstrap.h"
#include "collective/collectives.h"
#include "collective/shm_inline.h"
#include "engine/completion_queue.h"

using namespace nexar;
using namespace nexar_test;

namespace {

constexpr uint32_t kRanks = 2;

// What nexar_allreduce(done == NULL) does with a sum of int32.
Status blocking_allreduce(Communicator &comm, const int32_t *in, int32_t *out, size_t count) {
  CollArgs a;
  a.sendbuf = in;
  a.recvbuf = out;
  a.count = count;
  a.dtype = NEXAR_DTYPE_I32;
  a.op = NEXAR_OP_SUM;
  Status s;
  uint64_t seq = 0;
  if (shm_run_inline(comm, "nexar_allreduce", CollKind::Allreduce, a, &s, &seq)) return s;
  Communicator *c = &comm;
  return comm.submit_collective(
      "nexar_allreduce",
      [c, a](OpContext *op) { return run_collective(c, op, CollKind::Allreduce, a, allreduce); },
      nullptr, nullptr);
}

class ShmInline : public ::testing::Test {
 protected:
  void start(uint32_t spin_us) {
    Config cfg;
    cfg.spin_us = spin_us;
    ASSERT_TRUE(bootstrap_local(kRanks, cfg, &w_).ok());
    for (uint32_t r = 0; r < kRanks; ++r)
      ASSERT_TRUE(eventually([&] { return w_[r]->client().shm().channel(1 - r) != nullptr; }))
          << "rank " << r << " has no same-host channel";
    // The first collective decides that they run on shared memory.
    run_on_each([&](uint32_t r) { allreduce_checked(r, 0); });
  }

  void run_on_each(const std::function<void(uint32_t)> &fn) {
    std::vector<std::thread> t;
    for (uint32_t r = 0; r < kRanks; ++r)
      t.emplace_back(fn, r);
    for (auto &th : t)
      th.join();
  }

  // Round i of rank r: four elements whose sums are known.
  void allreduce_checked(uint32_t r, int32_t i) {
    const int32_t in[4] = {i, static_cast<int32_t>(r), 1, -i * static_cast<int32_t>(r + 1)};
    int32_t out[4] = {};
    Status s = blocking_allreduce(*w_[r], in, out, 4);
    ASSERT_TRUE(s.ok()) << "rank " << r << " round " << i << ": " << s.message;
    EXPECT_EQ(out[0], 2 * i);
    EXPECT_EQ(out[1], 1);
    EXPECT_EQ(out[2], 2);
    EXPECT_EQ(out[3], -3 * i);
  }

  EventLoop &loop(uint32_t r) { return w_[r]->client().loop(); }

  // Runs rounds checked allreduces on every rank; at least half of each
  // rank's ran at once.
  void expect_most_run_at_once(int rounds) {
    uint64_t before[kRanks];
    for (uint32_t r = 0; r < kRanks; ++r)
      before[r] = loop(r).inline_runs();
    run_on_each([&](uint32_t r) {
      for (int i = 1; i <= rounds; ++i)
        allreduce_checked(r, i);
    });
    for (uint32_t r = 0; r < kRanks; ++r)
      EXPECT_GE(loop(r).inline_runs() - before[r], static_cast<uint64_t>(rounds / 2))
          << "rank " << r;
  }

  std::vector<std::unique_ptr<Communicator>> w_;
};

TEST_F(ShmInline, SmallBlockingCollectivesRunOnTheCallersThread) {
  start(0);
  // The loop thread sleeps between calls, so nearly every call runs at once
  // (one that finds it awake, handling a keep-alive, is submitted).
  expect_most_run_at_once(200);
}

TEST_F(ShmInline, LateMemberLeavesTheRestToAnOperationThatSleeps) {
  start(0);
  const uint64_t waits = loop(0).inline_waits();
  // Rank 1 comes 100 ms late: rank 0's poll gives up long before, and its
  // call goes on as an operation that sleeps until rank 1 publishes.
  run_on_each([&](uint32_t r) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    allreduce_checked(r, 7);
  });
  EXPECT_GE(loop(0).inline_waits(), waits + 1);
  // Its turn was handed back: the next ones run as before.
  run_on_each([&](uint32_t r) {
    for (int i = 8; i < 20; ++i)
      allreduce_checked(r, i);
  });
}

TEST_F(ShmInline, SpinningLoopThreadSleepsForTheCaller) {
  // The loops spin for a second after each activity: a caller asks its loop
  // thread to sleep instead of handing it the call.
  start(1'000'000);
  expect_most_run_at_once(100);
}

}  // namespace
