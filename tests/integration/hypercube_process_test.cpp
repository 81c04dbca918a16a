// A world of 16 processes on a hypercube, formed through a real seed
// (nexar-seed): each rank holds its 4 cube links only, every collective
// gives exact results (tests/cluster/topology_worker.c checks each element),
// and the relay forwards nothing for them (they keep to the cube's links).
#include <gtest/gtest.h>
#include <nexar.h>

#include <string>
#include <vector>

#include "seed_and_workers.h"

using namespace cluster_test;

TEST(HypercubeProcesses, SixteenRanksThroughASeed) {
  constexpr int kRanks = 16;
  TempDir dir;
  std::string addr;
  auto seed =
      start_seed(dir, "seed",
                 {"--world-size", std::to_string(kRanks), "--token-file", write_token(dir)}, &addr);
  ASSERT_FALSE(addr.empty()) << seed->dump();
  std::vector<std::unique_ptr<Proc>> ranks;
  std::vector<Proc *> all{seed.get()};
  for (int r = 0; r < kRanks; ++r) {
    Proc::Env env{{"NEXAR_SEED", addr},
                  {"NEXAR_CLUSTER_TOKEN", kToken},
                  {"NEXAR_RANK", std::to_string(r)},
                  {"NEXAR_WORLD_SIZE", std::to_string(kRanks)},
                  {"NEXAR_TOPOLOGY", "hypercube"},
                  // As between hosts: every byte over the QUIC links.
                  {"NEXAR_SHM", "off"}};
    ranks.push_back(std::make_unique<Proc>(
        dir, "rank" + std::to_string(r), std::vector<std::string>{NEXAR_TOPOLOGY_WORKER_BIN}, env));
    all.push_back(ranks.back().get());
  }
  for (int r = 0; r < kRanks; ++r) {
    Proc &p = *ranks[r];
    ASSERT_TRUE(p.wait(120)) << dump_all(all);
    EXPECT_EQ(p.code(), 0) << p.dump();
    const std::string out = p.out();
    const std::string me = " rank=" + std::to_string(r);
    EXPECT_TRUE(contains(out, "JOINED" + me + " size=16 connections=4")) << p.dump();
    for (const char *op : {"allreduce", "broadcast", "allgather", "gather", "scatter", "alltoall"})
      EXPECT_TRUE(contains(out, std::string("OK ") + op + me)) << p.dump();
    EXPECT_TRUE(contains(out, "RELAY" + me + " forwarded=0\n")) << p.dump();
    EXPECT_TRUE(contains(out, "DONE" + me)) << p.dump();
  }
  ASSERT_TRUE(seed->wait(30)) << seed->dump();
  EXPECT_EQ(seed->code(), 0) << seed->dump();
}
