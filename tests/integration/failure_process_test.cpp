// Failures of real processes through a real seed: kill -9 of one of 4 ranks
// in the middle of allreduces. Every survivor's operation fails naming the
// killed rank (not a survivor that left first); the survivors revoke, shrink
// and finish further allreduces with exact results
// (tests/cluster/failure_worker.c).
#include <gtest/gtest.h>
#include <nexar.h>
#include <signal.h>

#include <string>
#include <vector>

#include "seed_and_workers.h"

using namespace cluster_test;

TEST(FailureProcesses, KilledRankIsNamedByEverySurvivorWhoShrinkAndGoOn) {
  TempDir dir;
  std::string addr;
  auto seed =
      start_seed(dir, "seed", {"--world-size", "4", "--token-file", write_token(dir)}, &addr);
  std::vector<std::unique_ptr<Proc>> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(std::make_unique<Proc>(dir, "rank" + std::to_string(r),
                                           std::vector<std::string>{NEXAR_FAILURE_WORKER_BIN},
                                           Proc::Env{{"NEXAR_SEED", addr},
                                                     {"NEXAR_CLUSTER_TOKEN", kToken},
                                                     {"NEXAR_RANK", std::to_string(r)},
                                                     {"NEXAR_HEARTBEAT_INTERVAL_SECS", "1"},
                                                     {"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}}));
  std::vector<Proc *> all{seed.get()};
  for (auto &p : ranks)
    all.push_back(p.get());
  for (auto &p : ranks)
    ASSERT_TRUE(p->wait_output("RUNNING rank=", 60)) << dump_all(all);
  ranks[2]->signal(SIGKILL);
  for (int r : {0, 1, 3}) {
    Proc &p = *ranks[r];
    ASSERT_TRUE(p.wait(60)) << dump_all(all);
    EXPECT_EQ(p.code(), 0) << p.dump();
    const std::string out = p.out();
    EXPECT_TRUE(contains(out, "FAILED rank=" + std::to_string(r) + " status=-5 failed_rank=2"))
        << p.dump();
    EXPECT_TRUE(contains(out, "SHRUNK rank=" + std::to_string(r == 3 ? 2 : r) + " size=3"))
        << p.dump();
    EXPECT_TRUE(contains(out, "RECOVERED rank=" + std::to_string(r))) << p.dump();
  }
}
