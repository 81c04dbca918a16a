// Failures through the C ABI on an in-process world: failed members are
// observed (get_failed, the failure callback), revoke reaches every member's
// pending operations, agree is uniform also when its coordinator goes away,
// and shrink gives the survivors a working communicator.
#include <gtest/gtest.h>
#include <nexar.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace nexar_test;

namespace {

using Clock = std::chrono::steady_clock;

nexar_comm_options_t options() {
  nexar_comm_options_t o;
  nexar_comm_options_init(&o, sizeof o);
  o.collective_timeout_ms = 60000;
  o.p2p_timeout_ms = 60000;
  return o;
}

std::vector<uint32_t> failed_of(nexar_comm_t *c) {
  uint32_t n = 0;
  EXPECT_EQ(nexar_comm_get_failed(c, nullptr, 0, &n), NEXAR_OK);
  std::vector<uint32_t> v(n);
  uint32_t again = 0;
  EXPECT_EQ(nexar_comm_get_failed(c, v.data(), n, &again), NEXAR_OK);
  v.resize(std::min(n, again));
  return v;
}

// Waits (bounded, a hang guard) until c knows `count` failed ranks.
bool wait_failed(nexar_comm_t *c, size_t count) {
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (failed_of(c).size() < count && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return failed_of(c).size() >= count;
}

struct FailureLog {
  std::mutex mu;
  std::vector<std::pair<uint32_t, nexar_status_t>> seen;
  static void callback(void *ud, nexar_comm_t *, uint32_t rank, nexar_status_t cause) {
    auto *self = static_cast<FailureLog *>(ud);
    std::lock_guard<std::mutex> g(self->mu);
    self->seen.emplace_back(rank, cause);
  }
  size_t size() {
    std::lock_guard<std::mutex> g(mu);
    return seen.size();
  }
};

// Shrinks every listed rank's communicator at once; returns the new ones.
std::vector<nexar_comm_t *> shrink_all(const std::vector<nexar_comm_t *> &comms) {
  std::vector<nexar_comm_t *> out(comms.size(), nullptr);
  std::vector<nexar_status_t> st(comms.size(), NEXAR_ERR_INTERNAL);
  on_each_rank(static_cast<uint32_t>(comms.size()),
               [&](uint32_t i) { st[i] = nexar_comm_shrink(comms[i], &out[i], nullptr, nullptr); });
  for (size_t i = 0; i < comms.size(); ++i)
    EXPECT_EQ(st[i], NEXAR_OK) << "survivor " << i << ": " << nexar_status_str(st[i]);
  return out;
}

// An allreduce (sum of rank + 1 + round over the communicator) with an exact
// result at every rank.
void expect_allreduce_exact(const std::vector<nexar_comm_t *> &comms, int round) {
  const uint32_t n = static_cast<uint32_t>(comms.size());
  std::vector<std::vector<uint64_t>> out(n, std::vector<uint64_t>(1000));
  on_each_rank(n, [&](uint32_t i) {
    std::vector<uint64_t> in(1000);
    for (size_t k = 0; k < in.size(); ++k)
      in[k] = nexar_comm_rank(comms[i]) + 1 + round + k;
    NX_OK(nexar_allreduce(comms[i], in.data(), out[i].data(), in.size(), NEXAR_DTYPE_U64,
                          NEXAR_OP_SUM, nullptr, nullptr));
  });
  for (uint32_t i = 0; i < n; ++i)
    for (size_t k = 0; k < 1000; ++k)
      ASSERT_EQ(out[i][k], n * (n + 1) / 2 + n * (round + k)) << "rank " << i << " element " << k;
}

}  // namespace

TEST(Failures, RevokeReachesEveryMembersPendingOperations) {
  nexar_comm_options_t o = options();
  World w(4, &o);
  ASSERT_TRUE(w.ok());
  Completions done;
  uint64_t bufs[4] = {};
  // Receives nobody will send: only the revocation can end them.
  for (uint32_t r = 0; r < 4; ++r)
    NX_OK(
        nexar_recv(w[r], &bufs[r], sizeof bufs[r], (r + 1) % 4, 77, Completions::callback, &done));
  NX_OK(nexar_comm_revoke(w[1]));
  ASSERT_TRUE(done.wait(4, 30));
  for (auto &rec : done.records)
    EXPECT_EQ(rec.status, NEXAR_ERR_REVOKED) << rec.message;
  for (uint32_t r = 0; r < 4; ++r)
    EXPECT_EQ(nexar_comm_is_revoked(w[r]), 1) << "rank " << r;
  // Later operations fail too; agree still works.
  uint64_t v = 1;
  EXPECT_EQ(nexar_allreduce(w[2], &v, &v, 1, NEXAR_DTYPE_U64, NEXAR_OP_SUM, nullptr, nullptr),
            NEXAR_ERR_REVOKED);
  std::vector<uint64_t> flags{0xff, 0xf3, 0x7f, 0xfe};
  std::vector<nexar_status_t> st(4);
  on_each_rank(4, [&](uint32_t r) { st[r] = nexar_comm_agree(w[r], &flags[r], nullptr, nullptr); });
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(st[r], NEXAR_OK) << nexar_status_str(st[r]);
    EXPECT_EQ(flags[r], 0x72u) << "rank " << r;
  }
}

TEST(Failures, AgreeIsTheAndOfEveryMembersBits) {
  World w(3);
  ASSERT_TRUE(w.ok());
  for (int round = 0; round < 3; ++round) {
    std::vector<uint64_t> flags{~0ull, ~(1ull << round), ~0ull};
    on_each_rank(3,
                 [&](uint32_t r) { NX_OK(nexar_comm_agree(w[r], &flags[r], nullptr, nullptr)); });
    for (uint32_t r = 0; r < 3; ++r)
      EXPECT_EQ(flags[r], ~(1ull << round)) << "rank " << r << " round " << round;
  }
}

// A rank that aborts is a failed member for the others: they see it in
// get_failed and the callback, agree reports it until acknowledged, and
// shrink gives the survivors a communicator on which allreduce is exact.
TEST(Failures, AbortedRankIsObservedAgreedOnAndShrunkAway) {
  FailureLog logs[4];  // outlives the world, whose destruction reports leaves
  nexar_comm_options_t o = options();
  World w(4, &o);
  ASSERT_TRUE(w.ok());
  for (uint32_t r = 0; r < 4; ++r)
    NX_OK(nexar_comm_set_failure_callback(w[r], FailureLog::callback, &logs[r]));
  NX_OK(nexar_comm_abort(w[2]));
  const std::vector<nexar_comm_t *> survivors{w[0], w[1], w[3]};
  for (nexar_comm_t *c : survivors) {
    ASSERT_TRUE(wait_failed(c, 1));
    EXPECT_EQ(failed_of(c), std::vector<uint32_t>{2});
  }
  for (uint32_t r : {0u, 1u, 3u}) {
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (logs[r].size() == 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> g(logs[r].mu);
    ASSERT_EQ(logs[r].seen.size(), 1u) << "rank " << r;
    EXPECT_EQ(logs[r].seen[0].first, 2u);
    EXPECT_EQ(logs[r].seen[0].second, NEXAR_ERR_ABORTED);
  }
  // Not acknowledged: agree fails uniformly, the value still agreed.
  std::vector<uint64_t> flags{0x3, 0x6, 0x7};
  std::vector<nexar_status_t> st(3);
  on_each_rank(
      3, [&](uint32_t i) { st[i] = nexar_comm_agree(survivors[i], &flags[i], nullptr, nullptr); });
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(st[i], NEXAR_ERR_PEER_FAILED) << "survivor " << i;
    EXPECT_EQ(flags[i], 0x2u) << "survivor " << i;
  }
  for (nexar_comm_t *c : survivors) {
    uint32_t acked = 0;
    NX_OK(nexar_comm_ack_failed(c, 5, &acked));
    EXPECT_EQ(acked, 1u);
  }
  flags = {0x3, 0x6, 0x7};
  on_each_rank(
      3, [&](uint32_t i) { st[i] = nexar_comm_agree(survivors[i], &flags[i], nullptr, nullptr); });
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(st[i], NEXAR_OK) << "survivor " << i;
    EXPECT_EQ(flags[i], 0x2u) << "survivor " << i;
  }
  std::vector<nexar_comm_t *> shrunk = shrink_all(survivors);
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_NE(shrunk[i], nullptr);
    EXPECT_EQ(nexar_comm_size(shrunk[i]), 3u);
    EXPECT_EQ(nexar_comm_rank(shrunk[i]), i);  // the old order
  }
  for (int round = 0; round < 3; ++round)
    expect_allreduce_exact(shrunk, round);
  for (nexar_comm_t *c : shrunk)
    nexar_comm_destroy(c);
}

// A rank that destroys its communicator tells the others, whose pending
// collective fails at once naming it; they shrink and go on.
TEST(Failures, DestroyedRankIsNamedAndTheSurvivorsGoOn) {
  nexar_comm_options_t o = options();
  World w(4, &o);
  ASSERT_TRUE(w.ok());
  Completions done;
  std::vector<std::vector<uint64_t>> in(3, std::vector<uint64_t>(256, 1)),
      out(3, std::vector<uint64_t>(256));
  for (uint32_t r = 0; r < 3; ++r)
    NX_OK(nexar_allreduce(w[r], in[r].data(), out[r].data(), 256, NEXAR_DTYPE_U64, NEXAR_OP_SUM,
                          Completions::callback, &done));
  nexar_comm_destroy(w.comms[3]);
  w.comms[3] = nullptr;
  ASSERT_TRUE(done.wait(3, 30));
  for (auto &rec : done.records) {
    EXPECT_EQ(rec.status, NEXAR_ERR_PEER_FAILED) << rec.message;
    EXPECT_EQ(rec.failed_rank, 3) << rec.message;
  }
  const std::vector<nexar_comm_t *> survivors{w[0], w[1], w[2]};
  for (nexar_comm_t *c : survivors)
    EXPECT_EQ(failed_of(c), std::vector<uint32_t>{3});
  std::vector<nexar_comm_t *> shrunk = shrink_all(survivors);
  for (int round = 0; round < 2; ++round)
    expect_allreduce_exact(shrunk, round);
  for (nexar_comm_t *c : shrunk)
    nexar_comm_destroy(c);
}

// Rank 0, the agreement's coordinator, goes away while the others wait in
// agree: a new coordinator takes over and every survivor gets the same value
// and the same status.
TEST(Failures, AgreeIsUniformWhenItsCoordinatorGoesAway) {
  nexar_comm_options_t o = options();
  World w(4, &o);
  ASSERT_TRUE(w.ok());
  Completions done;
  std::vector<uint64_t> flags{0, 0xf0f, 0x0ff, 0xfff};
  for (uint32_t r = 1; r < 4; ++r)
    NX_OK(nexar_comm_agree(w[r], &flags[r], Completions::callback, &done));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the votes reach rank 0
  nexar_comm_destroy(w.comms[0]);
  w.comms[0] = nullptr;
  ASSERT_TRUE(done.wait(3, 30));
  for (auto &rec : done.records) {
    EXPECT_EQ(rec.status, done.records[0].status) << rec.message;
    EXPECT_EQ(rec.failed_rank, 0) << rec.message;
  }
  EXPECT_EQ(done.records[0].status, NEXAR_ERR_PEER_FAILED);  // rank 0 was not acknowledged
  for (uint32_t r = 1; r < 4; ++r)
    EXPECT_EQ(flags[r], 0x00fu) << "rank " << r;
}

// Bulk data never delays the heartbeats: with heartbeat_timeout = 2 s, ranks
// 1-3 run 64 MiB allreduces while rank 0 waits; nobody is declared failed.
TEST(Failures, BulkTransfersDoNotDelayHeartbeats) {
  nexar_comm_options_t o = options();
  o.heartbeat_interval_ms = 500;
  o.heartbeat_timeout_ms = 2000;
  World w(4, &o);
  ASSERT_TRUE(w.ok());
  std::vector<nexar_comm_t *> part(4, nullptr);
  on_each_rank(4, [&](uint32_t r) {
    NX_OK(nexar_comm_split(w[r], r == 0 ? 0 : 1, 0, &part[r], nullptr, nullptr));
  });
  const size_t count = (64u << 20) / sizeof(float);
  std::vector<std::vector<float>> bufs(3, std::vector<float>(count, 1.0f));
  on_each_rank(3, [&](uint32_t i) {
    for (int round = 0; round < 3; ++round) {
      std::fill(bufs[i].begin(), bufs[i].end(), 1.0f);
      NX_OK(nexar_allreduce(part[i + 1], bufs[i].data(), bufs[i].data(), count, NEXAR_DTYPE_F32,
                            NEXAR_OP_SUM, nullptr, nullptr));
      ASSERT_EQ(bufs[i][count / 2], 3.0f);
    }
  });
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(failed_of(w[r]).empty()) << "rank " << r;
    EXPECT_EQ(nexar_comm_get_async_error(w[r], nullptr), NEXAR_OK) << "rank " << r;
  }
  // The world still works for everyone.
  expect_allreduce_exact(w.comms, 0);
  for (nexar_comm_t *c : part)
    nexar_comm_destroy(c);
}
