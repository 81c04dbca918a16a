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
