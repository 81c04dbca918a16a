// A world that cannot form: a worker that dies while it forms, a rank that
// reports its mesh failed, a formation that times out. The others must fail
// fast, naming who failed.
#include <gtest/gtest.h>
#include <nexar.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "seed_and_workers.h"

using namespace cluster_test;

// A worker killed while the world is forming: the others get an error naming
// it well before the formation timeout, and the seed fails.
TEST(ClusterFailure, WorkerDyingDuringFormationFailsTheOthersFast) {
  TempDir dir;
  std::string addr;
  auto seed = start_seed(
      dir, "seed",
      {"--world-size", "3", "--token-file", write_token(dir), "--formation-timeout", "60"}, &addr);
  Proc::Env env{{"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}};
  env["NEXAR_RANK"] = "0";
  auto a = worker(dir, "a", env);
  env["NEXAR_RANK"] = "1";
  auto b = worker(dir, "b", env);
  ASSERT_TRUE(seed->wait_output("joined 2/3", 30)) << seed->dump();
  const auto killed = std::chrono::steady_clock::now();
  b->kill_now();
  ASSERT_TRUE(a->wait(30)) << a->dump();
  const double took = seconds_since(killed);
  EXPECT_LT(took, 20.0);
  EXPECT_EQ(a->code(), 3) << a->dump();
  EXPECT_TRUE(contains(a->out(), "JOIN_FAILED status=-5")) << a->dump();  // PEER_FAILED
  EXPECT_TRUE(contains(a->out(), "asking for rank 1")) << a->dump();
  ASSERT_TRUE(seed->wait(15)) << seed->dump();
  EXPECT_EQ(seed->code(), 1) << seed->dump();
  printf("worker death noticed by the others after %.1f s\n", took);
}

namespace {

// A world of 3 at the seed `addr`: real workers as ranks 0 and 2 (with env
// added), the probe as rank 1 doing `attack` (cluster_probe.cpp, impostor).
struct ProbeAmongWorkers {
  std::unique_ptr<Proc> rank0, rank2, probe;
};
ProbeAmongWorkers probe_among_workers(const TempDir &dir, const std::string &addr,
                                      const std::string &attack, Proc::Env env = {}) {
  env["NEXAR_SEED"] = addr;
  env["NEXAR_CLUSTER_TOKEN"] = kToken;
  ProbeAmongWorkers w;
  env["NEXAR_RANK"] = "0";
  w.rank0 = worker(dir, "a", env);
  env["NEXAR_RANK"] = "2";
  w.rank2 = worker(dir, "b", env);
  w.probe = std::make_unique<Proc>(
      dir, "probe",
      std::vector<std::string>{NEXAR_PROBE_BIN, "impostor", "--seed", addr, "--token", kToken,
                               "--rank", "1", "--target", "0", "--attack", attack},
      Proc::Env{});
  return w;
}

}  // namespace

// A worker that dies after the seed assigned ranks, before the mesh formed:
// the seed notices and tells the others, who fail naming that rank instead
// of waiting for their connect timeout.
TEST(ClusterFailure, WorkerDyingWhileTheMeshFormsFailsTheOthersFast) {
  TempDir dir;
  std::string addr;
  auto seed =
      start_seed(dir, "seed", {"--world-size", "3", "--token-file", write_token(dir)}, &addr);
  ProbeAmongWorkers w =
      probe_among_workers(dir, addr, "die-after-welcome", {{"NEXAR_CONNECT_TIMEOUT_SECS", "40"}});
  Proc &probe = *w.probe;
  ASSERT_TRUE(probe.wait(30)) << probe.dump() << seed->dump();
  ASSERT_TRUE(contains(probe.out(), "PROBE_DYING rank=1")) << probe.dump();
  const auto died = std::chrono::steady_clock::now();
  for (Proc *r : {w.rank0.get(), w.rank2.get()}) {
    ASSERT_TRUE(r->wait(30)) << r->dump() << seed->dump();
    EXPECT_EQ(r->code(), 3) << r->dump();
    EXPECT_TRUE(contains(r->out(), "JOIN_FAILED status=-5")) << r->dump();
    // Named whichever noticed first: the seed (its connection to rank 1
    // went silent) or a peer (its mesh connection to rank 1 did).
    EXPECT_TRUE(contains(r->out(), "rank 1 (worker at") ||
                contains(r->out(), "connection to rank 1 failed"))
        << r->dump();
  }
  const double took = seconds_since(died);
  EXPECT_LT(took, 20.0);
  ASSERT_TRUE(seed->wait(15)) << seed->dump();
  EXPECT_EQ(seed->code(), 1) << seed->dump();
  printf("death during mesh formation noticed by the others after %.1f s\n", took);
}

namespace {

// The seed's FAILED events, as its owner receives them (seed thread).
struct FailedEvents {
  std::mutex mu;
  std::vector<int32_t> ranks;
  static void record(void *self, const nexar_seed_event_t *e) {
    if (e->kind != NEXAR_SEED_EVENT_FAILED) return;
    auto *f = static_cast<FailedEvents *>(self);
    std::lock_guard<std::mutex> g(f->mu);
    f->ranks.push_back(e->rank);
  }
};

}  // namespace

// A welcomed rank that reports its mesh failed ends the formation, and the
// seed relays the status it gave and the rank it blamed to every worker and
// to the seed's owner. Only a status of nexar.h and a rank of the world get
// through: anything else is relayed as NEXAR_ERR_PROTOCOL and rank -1, so no
// caller receives a status it cannot name or a rank it cannot index.
TEST(ClusterFailure, ReportedFailureIsRelayedAsAKnownStatusAndRank) {
  struct Case {
    const char *attack;
    nexar_status_t status;
    int32_t rank;
  };
  for (const Case &c : {Case{"report-failure:-5:2", NEXAR_ERR_PEER_FAILED, 2},
                        Case{"report-failure:-9999:777", NEXAR_ERR_PROTOCOL, -1},
                        Case{"report-failure:3:-2", NEXAR_ERR_PROTOCOL, -1}}) {
    SCOPED_TRACE(c.attack);
    TempDir dir;
    FailedEvents events;
    nexar_seed_options_t o;
    ASSERT_EQ(nexar_seed_options_init(&o, sizeof o), NEXAR_OK);
    o.listen_address = "127.0.0.1:0";
    o.world_size = 3;
    o.cluster_token = kToken;
    o.on_event = FailedEvents::record;
    o.event_user_data = &events;
    nexar_seed_t *seed = nullptr;
    ASSERT_EQ(nexar_seed_start(&seed, &o), NEXAR_OK) << nexar_last_error_message();
    const std::string addr = nexar_seed_address(seed);
    ProbeAmongWorkers w = probe_among_workers(dir, addr, c.attack);
    Proc &probe = *w.probe;
    ASSERT_TRUE(probe.wait(30)) << probe.dump();
    EXPECT_TRUE(contains(probe.out(), "PROBE_REPORTED rank=1")) << probe.dump();
    for (Proc *r : {w.rank0.get(), w.rank2.get()}) {
      ASSERT_TRUE(r->wait(30)) << r->dump();
      EXPECT_EQ(r->code(), 3) << r->dump();
      EXPECT_TRUE(contains(r->out(), "JOIN_FAILED status=" + std::to_string(c.status) + " "))
          << r->dump();
      EXPECT_TRUE(contains(r->out(), "the probe says its mesh failed")) << r->dump();
    }
    int32_t ended = 0;
    EXPECT_EQ(nexar_seed_wait(seed, 15000, &ended), c.status) << nexar_last_error_message();
    EXPECT_EQ(ended, 1);
    nexar_seed_stop(seed);
    std::lock_guard<std::mutex> g(events.mu);
    EXPECT_EQ(events.ranks, std::vector<int32_t>{c.rank});
  }
}

// The formation timeout names who joined and who is missing.
TEST(ClusterFailure, FormationTimeoutNamesJoinedAndExpected) {
  TempDir dir;
  std::string addr;
  auto seed = start_seed(
      dir, "seed",
      {"--world-size", "3", "--token-file", write_token(dir), "--formation-timeout", "2"}, &addr);
  auto a = worker(dir, "a",
                  {{"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}, {"NEXAR_RANK", "2"}});
  ASSERT_TRUE(a->wait(30)) << a->dump();
  EXPECT_EQ(a->code(), 3) << a->dump();
  EXPECT_TRUE(contains(a->out(), "JOIN_FAILED status=-4")) << a->dump();  // TIMEOUT
  EXPECT_TRUE(contains(a->out(), "1 of 3 workers joined (ranks 2)")) << a->dump();
  ASSERT_TRUE(seed->wait(15)) << seed->dump();
  EXPECT_EQ(seed->code(), 1);
}
