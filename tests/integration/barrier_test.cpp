// Barrier through the C ABI: two-phase (<= 4 ranks) and dissemination (> 4).
#include <atomic>

#include "harness.h"

using namespace nexar_test;

// No rank leaves the barrier before the last one has entered it.
static void check_barrier(uint32_t n) {
  World w(n);
  ASSERT_TRUE(w.ok());
  std::atomic<uint32_t> entered{0};
  for (int round = 0; round < 5; ++round) {
    on_each_rank(n, [&](uint32_t r) {
      // Ranks arrive at different times; the last arrives 100 ms late.
      std::this_thread::sleep_for(std::chrono::milliseconds(r == n - 1 ? 100 : 5 * r));
      entered++;
      ASSERT_EQ(nexar_barrier(w[r], nullptr, nullptr), NEXAR_OK) << nexar_last_error_message();
      EXPECT_GE(entered.load(), (round + 1) * n) << "rank " << r << " left early";
    });
  }
}

TEST(Barrier, OneRank) {
  check_barrier(1);
}
TEST(Barrier, TwoPhaseFourRanks) {
  check_barrier(4);
}
TEST(Barrier, DisseminationFiveRanks) {
  check_barrier(5);
}
TEST(Barrier, DisseminationThirteenRanks) {
  check_barrier(13);
}

// Upstream's barrier broke once heartbeats queued on its control lane; here a
// barrier long after formation (many keep-alive intervals) still works.
TEST(Barrier, LongAfterBootstrap) {
  nexar_comm_options_t opts;
  ASSERT_EQ(nexar_comm_options_init(&opts, sizeof opts), NEXAR_OK);
  opts.heartbeat_interval_ms = 100;
  opts.heartbeat_timeout_ms = 1000;
  World w(3, &opts);
  ASSERT_TRUE(w.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  on_each_rank(3, [&](uint32_t r) {
    EXPECT_EQ(nexar_barrier(w[r], nullptr, nullptr), NEXAR_OK) << nexar_last_error_message();
  });
}

TEST(Barrier, TimeoutNamesTheMissingRank) {
  nexar_comm_options_t opts;
  ASSERT_EQ(nexar_comm_options_init(&opts, sizeof opts), NEXAR_OK);
  opts.barrier_timeout_ms = 400;
  World w(3, &opts);
  ASSERT_TRUE(w.ok());
  Completions done;
  ASSERT_EQ(nexar_barrier(w[0], Completions::callback, &done), NEXAR_OK);
  ASSERT_EQ(nexar_barrier(w[1], Completions::callback, &done), NEXAR_OK);
  ASSERT_TRUE(done.wait(2, 10));
  bool named = false;
  for (auto &r : done.records) {
    EXPECT_EQ(r.status, NEXAR_ERR_TIMEOUT) << r.message;
    EXPECT_NE(r.message.find("barrier #1"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("NEXAR_BARRIER_TIMEOUT_SECS"), std::string::npos) << r.message;
    named |= r.failed_rank == 2 || r.message.find("rank 2") != std::string::npos;
  }
  EXPECT_TRUE(named) << "the rank that never arrived is named";
  // Rank 2's first barrier is #1 too: it would now wait alone and time out.
}

// Ranks that only send in their collective (a broadcast root, reduce leaves)
// used to report success while their peers ran something else; now every
// involved rank gets NEXAR_ERR_MISMATCH, promptly.
TEST(Mismatch, SendOnlyRanksLearnOfIt) {
  nexar_comm_options_t opts;
  ASSERT_EQ(nexar_comm_options_init(&opts, sizeof opts), NEXAR_OK);
  opts.collective_timeout_ms = 20000;
  for (uint32_t n : {2u, 3u, 5u}) {
    World w(n, &opts);
    ASSERT_TRUE(w.ok());
    std::vector<nexar_status_t> got(n);
    std::vector<std::string> msg(n);
    std::vector<float> buf(64 * n, 1.0f), out(64 * n);
    auto t0 = std::chrono::steady_clock::now();
    on_each_rank(n, [&](uint32_t r) {
      // Rank 0 broadcasts; everyone else reduces to rank 0, 200 ms later, so
      // the root's sends are long done before anyone else starts.
      if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (r == 0)

        got[r] = nexar_broadcast(w[r], buf.data(), 64, NEXAR_DTYPE_F32, 0, nullptr, nullptr);
      else
        got[r] = nexar_reduce(w[r], buf.data(), out.data(), 64, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 0,
                              nullptr, nullptr);
      msg[r] = nexar_last_error_message();
    });
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "prompt";
    for (uint32_t r = 0; r < n; ++r)
      EXPECT_EQ(got[r], NEXAR_ERR_MISMATCH) << "world " << n << " rank " << r << ": " << msg[r];
    // The communicator stays usable.
    on_each_rank(n, [&](uint32_t r) {
      EXPECT_EQ(nexar_barrier(w[r], nullptr, nullptr), NEXAR_OK) << nexar_last_error_message();
    });
  }
}
