// The stall report: a rank whose application thread sleeps instead of
// calling a collective (its engine runs on) is named by the others' timed-out
// collective, as the rank that has not entered it, and as failed_rank.
#include "harness.h"

using namespace nexar_test;

TEST(StallReport, TimeoutNamesTheRankThatNeverEntered) {
  nexar_comm_options_t o;
  nexar_comm_options_init(&o, sizeof o);
  o.collective_timeout_ms = 2000;
  World w(3, &o);
  ASSERT_TRUE(w.ok());
  Completions done;
  std::mutex mu;
  std::condition_variable cv;
  bool others_done = false;
  on_each_rank(3, [&](uint32_t r) {
    int32_t in = static_cast<int32_t>(r), out = -1;
    NX_OK(nexar_allreduce(w[r], &in, &out, 1, NEXAR_DTYPE_I32, NEXAR_OP_SUM, nullptr, nullptr));
    EXPECT_EQ(out, 3);
    if (r == 2) {
      // The application thread "hangs" until the others gave up.
      std::unique_lock<std::mutex> g(mu);
      EXPECT_TRUE(cv.wait_for(g, std::chrono::seconds(60), [&] { return others_done; }));
      return;
    }
    nexar_status_t s =
        nexar_allreduce(w[r], &in, &out, 1, NEXAR_DTYPE_I32, NEXAR_OP_SUM, nullptr, nullptr);
    nexar_completion_t info;
    info.struct_size = sizeof info;
    ASSERT_EQ(nexar_last_error(&info), NEXAR_OK);
    EXPECT_EQ(s, NEXAR_ERR_TIMEOUT);
    EXPECT_EQ(info.failed_rank, 2) << info.message;
    const std::string m = info.message;
    EXPECT_NE(m.find("stall report of allreduce #2"), std::string::npos) << m;
    EXPECT_NE(m.find("not entered: rank 2 (last completed #1)"), std::string::npos) << m;
    EXPECT_NE(m.find("inside it: rank 0"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("called something else: none"), std::string::npos) << m;
    EXPECT_EQ(m.find("no answer"), std::string::npos) << m;
    static std::atomic<int> finished{0};
    if (++finished == 2) {
      std::lock_guard<std::mutex> g(mu);
      others_done = true;
      cv.notify_all();
    }
  });
}
