// Busy-poll mode (NEXAR_SPIN_US / spin_us): while a loop spins, post() skips
// the eventfd wake-up and the loop picks commands up by itself; once it has
// been idle for spin_us it must go back to sleeping and be woken again.
// These tests alternate bursts (spinning) with pauses (sleeping) and check
// every result, so a command stranded by the hand-over would hang the test
// until its deadline and fail it; and they check, by the CPU time the
// process uses while nothing happens, that the loops spin and then sleep.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "harness.h"

using nexar_test::Completions;
using nexar_test::on_each_rank;
using nexar_test::World;

namespace {

nexar_comm_options_t spin_options(uint32_t spin_us) {
  nexar_comm_options_t o;
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  o.spin_us = spin_us;
  o.collective_timeout_ms = 30000;
  return o;
}

// CPU time (ms) the whole process uses while the calling thread sleeps for ms.
double cpu_ms_while_sleeping(int ms) {
  auto cpu_ms = [] {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
  };
  const double before = cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return cpu_ms() - before;
}

}  // namespace

// Within spin_us of their last activity the I/O loops poll (the process
// burns CPU although nothing happens); idle for longer, they sleep again.
TEST(SpinPolling, LoopsSpinAfterActivityThenSleep) {
  nexar_comm_options_t opts = spin_options(500'000);
  // A keep-alive is activity too: keep them out of the measured 1.4 s.
  opts.heartbeat_interval_ms = 10'000;
  opts.heartbeat_timeout_ms = 60'000;
  World w(2, &opts);
  ASSERT_TRUE(w.ok());
  on_each_rank(w.size(), [&](uint32_t r) { NX_OK(nexar_barrier(w[r], nullptr, nullptr)); });
  const double spinning = cpu_ms_while_sleeping(200);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const double sleeping = cpu_ms_while_sleeping(200);
  // Relative, with a small floor: the spinning loops yield at every pass, so
  // on a machine busy with other work (ctest -j2 beside a build) they got as
  // little as 1.6 ms of the 200, where an idle machine gives them most of it;
  // loops that never spin use about 0.03 ms, and loops that never stop
  // spinning use as much afterwards as before.
  EXPECT_GE(spinning, 0.5) << "CPU ms used in 200 ms inside the spin window";
  EXPECT_GT(spinning, 4 * sleeping + 0.2) << "CPU ms used in 200 ms inside the spin window ("
                                          << spinning << ") and after it (" << sleeping << ")";
}

TEST(SpinPolling, BlockingCollectivesAndMessagesAcrossSpinAndSleep) {
  const nexar_comm_options_t opts = spin_options(300);
  World w(3, &opts);
  ASSERT_TRUE(w.ok());
  on_each_rank(w.size(), [&](uint32_t r) {
    const uint32_t n = w.size();
    for (int32_t i = 0; i < 400; ++i) {
      // Pauses longer than spin_us put the loops to sleep between bursts.
      if (i % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      std::vector<int32_t> v(5, i + static_cast<int32_t>(r));
      NX_OK(nexar_allreduce(w[r], v.data(), v.data(), v.size(), NEXAR_DTYPE_I32, NEXAR_OP_SUM,
                            nullptr, nullptr));
      const int32_t expect = static_cast<int32_t>(n) * i + 3;  // 0 + 1 + 2
      for (int32_t x : v)
        ASSERT_EQ(x, expect) << "iteration " << i << " on rank " << r;
      // 256 KiB: past the one-ticket size, so the caller posts it and takes
      // the spinning loop (CallerRun::post_and_wait).
      if (i % 10 == 0) {
        std::vector<int32_t> big(65536, i + static_cast<int32_t>(r));
        NX_OK(nexar_allreduce(w[r], big.data(), big.data(), big.size(), NEXAR_DTYPE_I32,
                              NEXAR_OP_SUM, nullptr, nullptr));
        ASSERT_EQ(std::count(big.begin(), big.end(), expect), static_cast<long>(big.size()))
            << "iteration " << i << " on rank " << r;
      }
      // A ring exchange: rank r sends to r+1 and receives from r-1.
      const uint64_t out = (uint64_t{r} << 32) | static_cast<uint32_t>(i);
      uint64_t in = 0;
      Completions sent;
      NX_OK(nexar_send(w[r], &out, sizeof out, (r + 1) % n, 7, Completions::callback, &sent));
      NX_OK(nexar_recv(w[r], &in, sizeof in, (r + n - 1) % n, 7, nullptr, nullptr));
      ASSERT_TRUE(sent.wait(1, 30));
      ASSERT_EQ(sent.records[0].status, NEXAR_OK) << sent.records[0].message;
      ASSERT_EQ(in, (uint64_t{(r + n - 1) % n} << 32) | static_cast<uint32_t>(i));
    }
  });
}

TEST(SpinPolling, CallbacksSubmittedWhileTheLoopSpins) {
  // A spin window far longer than the test: every submission after the first
  // reaches a loop that does not sleep, so only its own polling finds it.
  const nexar_comm_options_t opts = spin_options(5'000'000);
  World w(2, &opts);
  ASSERT_TRUE(w.ok());
  constexpr int kOps = 200;
  std::vector<std::vector<float>> bufs(2 * kOps, std::vector<float>(3));
  Completions done;
  for (int i = 0; i < kOps; ++i) {
    for (uint32_t r = 0; r < 2; ++r) {
      auto &b = bufs[2 * i + r];
      std::fill(b.begin(), b.end(), static_cast<float>(i + r));
      NX_OK(nexar_allreduce(w[r], b.data(), b.data(), b.size(), NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                            Completions::callback, &done));
    }
  }
  ASSERT_TRUE(done.wait(2 * kOps, 60)) << done.count() << " of " << 2 * kOps << " completed";
  for (const auto &rec : done.records)
    ASSERT_EQ(rec.status, NEXAR_OK) << rec.message;
  for (int i = 0; i < kOps; ++i)
    for (uint32_t r = 0; r < 2; ++r)
      for (float x : bufs[2 * i + r])
        ASSERT_EQ(x, static_cast<float>(2 * i + 1)) << "operation " << i << " on rank " << r;
}
