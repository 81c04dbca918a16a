// Worlds of separate processes formed through a real seed (nexar-seed) by
// workers that join it through the C ABI, on loopback; and the seed's own
// bounds and refusals while a world forms.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nexar.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "loopback_udp.h"
#include "seed_and_workers.h"

using namespace cluster_test;

namespace {

// A world of n workers (half of them asking for a rank) through a seed.
void form_world(uint32_t n) {
  TempDir dir;
  std::string addr;
  auto seed = start_seed(dir, "seed",
                         {"--listen", "127.0.0.1:0", "--world-size", std::to_string(n),
                          "--token-file", write_token(dir)},
                         &addr);
  ASSERT_FALSE(addr.empty()) << seed->dump();
  std::vector<std::unique_ptr<Proc>> workers;
  for (uint32_t i = 0; i < n; ++i) {
    Proc::Env env{{"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}};
    // Half ask for a rank (the highest ones), the others are assigned one.
    if (i % 2 == 1) env["NEXAR_RANK"] = std::to_string(n - 1 - i / 2);
    workers.push_back(worker(dir, "w" + std::to_string(i), env));
  }
  expect_world(*seed, workers, n);
  // Ranks asked for are the ranks given.
  for (uint32_t i = 1; i < n; i += 2)
    EXPECT_EQ(field(workers[i]->out(), "JOINED rank"), std::to_string(n - 1 - i / 2))
        << workers[i]->dump();
}

}  // namespace

TEST(ClusterProcesses, TwoWorkers) {
  form_world(2);
}
TEST(ClusterProcesses, FourWorkers) {
  form_world(4);
}
TEST(ClusterProcesses, EightWorkers) {
  form_world(8);
}

// A worker started before its seed connects once the seed is up (retries
// with backoff), and a world of one forms.
// A sparse mesh through the seed: each worker connects to its two ring
// neighbours only; the all-pairs exchange, barrier and allreduce relay the rest.
TEST(ClusterProcesses, SixWorkersOnARing) {
  TempDir dir;
  std::string addr;
  auto seed = start_seed(
      dir, "seed",
      {"--listen", "127.0.0.1:0", "--world-size", "6", "--token-file", write_token(dir)}, &addr);
  ASSERT_FALSE(addr.empty()) << seed->dump();
  std::vector<std::unique_ptr<Proc>> workers;
  for (uint32_t i = 0; i < 6; ++i)
    workers.push_back(worker(
        dir, "w" + std::to_string(i),
        {{"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}, {"NEXAR_TOPOLOGY", "ring"}}));
  expect_world(*seed, workers, 6);
  for (auto &w : workers)
    EXPECT_EQ(field(w->out(), "connections"), "2") << w->dump();
}

TEST(ClusterProcesses, WorkerRetriesUntilTheSeedIsUp) {
  TempDir dir;
  const std::string addr = "127.0.0.1:" + std::to_string(nexar_test::free_port());
  std::vector<std::unique_ptr<Proc>> workers;
  workers.push_back(worker(dir, "w0", {{"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::string bound;
  auto seed =
      start_seed(dir, "seed",
                 {"--listen", addr, "--world-size", "1", "--token-file", write_token(dir)}, &bound);
  EXPECT_EQ(bound, addr);
  expect_world(*seed, workers, 1);
}

// nexar-seed fails fast and says why when it cannot listen.
// A seed's formation is bounded, and so is every worker's wait for it: the
// seed refuses a formation timeout of 0 or beyond 1e6 s (nexar.h; a worker
// clamps what a seed's challenge states to the same bound), naming the
// timeout and the bound, and takes the bound itself.
TEST(ClusterProcesses, SeedFormationTimeoutIsBounded) {
  constexpr uint64_t kMaxMs = 1'000'000'000;
  for (uint64_t ms : {uint64_t{0}, kMaxMs + 1, ~uint64_t{0}, kMaxMs}) {
    SCOPED_TRACE(ms);
    nexar_seed_options_t o;
    ASSERT_EQ(nexar_seed_options_init(&o, sizeof o), NEXAR_OK);
    o.listen_address = "127.0.0.1:0";
    o.world_size = 2;
    o.formation_timeout_ms = ms;
    nexar_seed_t *seed = nullptr;
    const nexar_status_t st = nexar_seed_start(&seed, &o);
    if (ms == kMaxMs) {
      EXPECT_EQ(st, NEXAR_OK) << nexar_last_error_message();
      nexar_seed_stop(seed);
      continue;
    }
    EXPECT_EQ(st, NEXAR_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(seed, nullptr);
    const std::string msg = nexar_last_error_message();
    EXPECT_TRUE(contains(msg, "formation timeout")) << msg;
    EXPECT_TRUE(contains(msg, std::to_string(kMaxMs))) << msg;
  }
}

// A worker that arrives after formation failed is refused without the
// failure's details: they name the members (hosts, pids, addresses), and the
// late connection has proved nothing. The seed's own result keeps them.
TEST(ClusterProcesses, LateWorkerLearnsOnlyThatFormationFailed) {
  nexar_seed_options_t o;
  ASSERT_EQ(nexar_seed_options_init(&o, sizeof o), NEXAR_OK);
  o.listen_address = "127.0.0.1:0";
  o.world_size = 2;
  o.formation_timeout_ms = 300;
  nexar_seed_t *seed = nullptr;
  ASSERT_EQ(nexar_seed_start(&seed, &o), NEXAR_OK) << nexar_last_error_message();
  int32_t ended = 0;
  EXPECT_EQ(nexar_seed_wait(seed, 10000, &ended), NEXAR_ERR_TIMEOUT);
  ASSERT_EQ(ended, 1);
  EXPECT_TRUE(contains(nexar_last_error_message(), "formation timed out"))
      << nexar_last_error_message();
  TempDir dir;
  auto late = worker(dir, "late", {{"NEXAR_SEED", nexar_seed_address(seed)}});
  ASSERT_TRUE(late->wait(30)) << late->dump();
  EXPECT_EQ(late->code(), 3) << late->dump();
  EXPECT_TRUE(contains(late->out(), "formation failed: it admits no more workers")) << late->dump();
  EXPECT_FALSE(contains(late->out(), "timed out")) << late->dump();
  nexar_seed_stop(seed);
}

TEST(ClusterProcesses, SeedReportsWhyItCannotListen) {
  TempDir dir;
  std::string addr;
  auto first = start_seed(dir, "first", {"--world-size", "2"}, &addr);
  Proc second(dir, "second", {NEXAR_SEED_BIN, "--listen", addr, "--world-size", "2"}, {});
  ASSERT_TRUE(second.wait(20)) << second.dump();
  EXPECT_EQ(second.code(), 1) << second.dump();
  EXPECT_TRUE(contains(second.err(), "Address already in use")) << second.dump();
  Proc wildcard(dir, "wildcard", {NEXAR_SEED_BIN, "--listen", "0.0.0.0:0", "--world-size", "2"},
                {});
  ASSERT_TRUE(wildcard.wait(20)) << wildcard.dump();
  EXPECT_EQ(wildcard.code(), 1) << wildcard.dump();
  EXPECT_TRUE(contains(wildcard.err(), "wildcard")) << wildcard.dump();
  Proc usage(dir, "usage", {NEXAR_SEED_BIN, "--listen", "127.0.0.1:0"}, {});
  ASSERT_TRUE(usage.wait(20)) << usage.dump();
  EXPECT_EQ(usage.code(), 2) << usage.dump();
}

// Two workers ask for the same rank: one is refused (only that one), the
// world still forms with a third.
TEST(ClusterProcesses, DuplicateRankIsRefusedToThatWorkerOnly) {
  TempDir dir;
  std::string addr;
  auto seed =
      start_seed(dir, "seed", {"--world-size", "2", "--token-file", write_token(dir)}, &addr);
  Proc::Env env{{"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}, {"NEXAR_RANK", "0"}};
  auto a = worker(dir, "a", env);
  ASSERT_TRUE(seed->wait_output("joined 1/2", 30)) << seed->dump() << a->dump();
  auto b = worker(dir, "b", env);
  ASSERT_TRUE(b->wait(30)) << b->dump();
  EXPECT_EQ(b->code(), 3) << b->dump();
  EXPECT_TRUE(contains(b->out(), "status=-2")) << b->dump();
  EXPECT_TRUE(contains(b->out(), "rank 0 is already taken")) << b->dump();
  env["NEXAR_RANK"] = "1";
  std::vector<std::unique_ptr<Proc>> workers;
  workers.push_back(std::move(a));
  workers.push_back(worker(dir, "c", env));
  expect_world(*seed, workers, 2);
}
