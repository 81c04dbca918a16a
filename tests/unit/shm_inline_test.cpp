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
#include "collective/forced_choice.h"
#include "collective/shm_inline.h"
#include "engine/completion_queue.h"

using namespace nexar;
using namespace nexar_test;

namespace {

// What a blocking call of the C ABI (done == NULL) does: at once if it can,
// else submitted.
Status blocking(Communicator &comm, CollKind kind, const CollArgs &a,
                Task<Status> (*algorithm)(Coll &)) {
  const std::string name = std::string("nexar_") + coll_name(kind);
  Status s;
  uint64_t seq = 0;
  if (shm_run_inline(comm, name.c_str(), kind, a, &s, &seq)) return s;
  Communicator *c = &comm;
  return comm.submit_collective(
      name.c_str(),
      [c, kind, a, algorithm](OpContext *op) { return run_collective(c, op, kind, a, algorithm); },
      nullptr, nullptr);
}

// nexar_allreduce(done == NULL) with a sum of int32.
Status blocking_allreduce(Communicator &comm, const int32_t *in, int32_t *out, size_t count) {
  CollArgs a;
  a.sendbuf = in;
  a.recvbuf = out;
  a.count = count;
  a.dtype = NEXAR_DTYPE_I32;
  a.op = NEXAR_OP_SUM;
  return blocking(comm, CollKind::Allreduce, a, allreduce);
}

class ShmInline : public ::testing::Test {
 protected:
  void start(uint32_t spin_us, uint32_t ranks = 2) {
    Config cfg;
    cfg.spin_us = spin_us;
    ranks_ = ranks;
    ASSERT_TRUE(bootstrap_local(ranks, cfg, &w_).ok());
    for (uint32_t r = 0; r < ranks; ++r)
      for (uint32_t p = 0; p < ranks; ++p)
        ASSERT_TRUE(p == r ||
                    eventually([&] { return w_[r]->client().shm().channel(p) != nullptr; }))
            << "rank " << r << " has no same-host channel to " << p;
    // The first collective decides that they run on shared memory.
    run_on_each([&](uint32_t r) {
      CollArgs a;
      ASSERT_TRUE(blocking(*w_[r], CollKind::Barrier, a, barrier).ok());
    });
  }

  void run_on_each(const std::function<void(uint32_t)> &fn) {
    std::vector<std::thread> t;
    for (uint32_t r = 0; r < ranks_; ++r)
      t.emplace_back(fn, r);
    for (auto &th : t)
      th.join();
  }

  // Round i of rank r: four elements whose sums are known (two ranks).
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

  // Element j of the block rank `from` gives rank `to` in round i.
  static int32_t element(int32_t i, uint32_t from, uint32_t to, size_t j) {
    return i * 1000003 + static_cast<int32_t>(from * 10007 + to * 101 + j);
  }

  // Round i of rank r of an allgather, gather, scatter, alltoall or
  // reduce-scatter of count int32 per block (root: rank i % n), every
  // element of the result checked.
  void movement_checked(uint32_t r, CollKind kind, int32_t i, size_t count) {
    const uint32_t n = ranks_, root = static_cast<uint32_t>(i) % n;
    const bool per_member =
        kind == CollKind::Scatter || kind == CollKind::Alltoall || kind == CollKind::ReduceScatter;
    const bool gathers =
        kind == CollKind::Allgather || kind == CollKind::Gather || kind == CollKind::Alltoall;
    std::vector<int32_t> in(per_member ? count * n : count);
    for (size_t j = 0; j < in.size(); ++j)
      in[j] = element(i, r, per_member ? static_cast<uint32_t>(j / count) : 0,
                      per_member ? j % count : j);
    std::vector<int32_t> out(gathers ? count * n : count, -1);
    CollArgs a;
    a.sendbuf = in.data();
    a.recvbuf = out.data();
    a.count = count;
    a.dtype = NEXAR_DTYPE_I32;
    a.op = NEXAR_OP_SUM;
    a.root = root;
    Task<Status> (*algorithm)(Coll &) = kind == CollKind::Allgather  ? allgather
                                        : kind == CollKind::Gather   ? gather
                                        : kind == CollKind::Scatter  ? scatter
                                        : kind == CollKind::Alltoall ? alltoall
                                                                     : reduce_scatter;
    Status s = blocking(*w_[r], kind, a, algorithm);
    ASSERT_TRUE(s.ok()) << coll_name(kind) << " rank " << r << " round " << i << ": " << s.message;
    for (size_t j = 0; j < out.size(); ++j) {
      const uint32_t b = static_cast<uint32_t>(j / count);
      int32_t want = -1;  // untouched
      switch (kind) {
        case CollKind::Allgather:
          want = element(i, b, 0, j % count);
          break;
        case CollKind::Gather:
          want = r == root ? element(i, b, 0, j % count) : -1;
          break;
        case CollKind::Scatter:
          want = element(i, root, r, j);
          break;
        case CollKind::Alltoall:
          want = element(i, b, r, j % count);
          break;
        default:  // reduce-scatter: block r of every member, summed
          want = 0;
          for (uint32_t m = 0; m < n; ++m)
            want += element(i, m, r, j);
      }
      ASSERT_EQ(out[j], want) << coll_name(kind) << " rank " << r << " round " << i << " element "
                              << j;
    }
  }

  EventLoop &loop(uint32_t r) { return w_[r]->client().loop(); }

  // Runs rounds checked allreduces on every rank; at least half of each
  // rank's ran at once.
  void expect_most_run_at_once(int rounds) {
    std::vector<uint64_t> before(ranks_);
    for (uint32_t r = 0; r < ranks_; ++r)
      before[r] = loop(r).inline_runs();
    run_on_each([&](uint32_t r) {
      for (int i = 1; i <= rounds; ++i)
        allreduce_checked(r, i);
    });
    for (uint32_t r = 0; r < ranks_; ++r)
      EXPECT_GE(loop(r).inline_runs() - before[r], static_cast<uint64_t>(rounds / 2))
          << "rank " << r;
  }

  uint32_t ranks_ = 2;
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

TEST_F(ShmInline, SmallMovementsAndReduceScatterRunOnTheCallersThread) {
  // Three ranks, so that every root and a member's own block in the middle
  // are met; blocks of one element (in the header's line), of 100 and of
  // 2000 (in the slot).
  start(0, 3);
  for (CollKind kind : {CollKind::Allgather, CollKind::Gather, CollKind::Scatter,
                        CollKind::Alltoall, CollKind::ReduceScatter}) {
    for (size_t count : {size_t{1}, size_t{100}, size_t{2000}}) {
      std::vector<uint64_t> before(ranks_);
      for (uint32_t r = 0; r < ranks_; ++r)
        before[r] = loop(r).inline_runs();
      constexpr int kRounds = 30;
      run_on_each([&](uint32_t r) {
        for (int i = 0; i < kRounds; ++i)
          movement_checked(r, kind, i, count);
      });
      for (uint32_t r = 0; r < ranks_; ++r)
        EXPECT_GE(loop(r).inline_runs() - before[r], static_cast<uint64_t>(kRounds / 2))
            << coll_name(kind) << " of " << count << " on rank " << r;
    }
  }
}

TEST_F(ShmInline, ForcedAllreduceAlgorithmRunsOverMessages) {
  // A configuration that forces an allreduce algorithm keeps it, though the
  // communicator's collectives run on shared memory (a barrier decided so).
  Config cfg;
  cfg.allreduce_algo.index = static_cast<int>(AllreduceAlgo::Ring);
  ASSERT_TRUE(bootstrap_local(2, cfg, &w_).ok());
  for (uint32_t r = 0; r < 2; ++r)
    ASSERT_TRUE(eventually([&] { return w_[r]->client().shm().channel(1 - r) != nullptr; }));
  run_on_each([&](uint32_t r) {
    CollArgs a;
    ASSERT_TRUE(blocking(*w_[r], CollKind::Barrier, a, barrier).ok());
  });
  const uint64_t runs = loop(0).inline_runs();
  run_on_each([&](uint32_t r) {
    for (int i = 1; i <= 20; ++i)
      allreduce_checked(r, i);
  });
  EXPECT_EQ(loop(0).inline_runs(), runs);
}

}  // namespace
