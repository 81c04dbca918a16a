// Sparse meshes of real processes through a real seed:
// - a relay rank killed (SIGKILL) during a stream of sends through it: the
//   survivors reroute round it, every message reaches its destination, and
//   each send that could not be delivered failed naming the lost relay;
// - workers whose topologies disagree fail formation naming the ranks.
#include <gtest/gtest.h>
#include <nexar.h>
#include <signal.h>

#include <string>
#include <vector>

#include "seed_and_workers.h"

using namespace cluster_test;

namespace {

// Lines of `text` that start with `prefix`.
std::vector<std::string> lines_with(const std::string &text, const std::string &prefix) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.compare(at, prefix.size(), prefix) == 0) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

}  // namespace

TEST(RelayHealing, KilledRelayMidStreamIsRoutedAround) {
  TempDir dir;
  std::string addr;
  auto seed =
      start_seed(dir, "seed", {"--world-size", "6", "--token-file", write_token(dir)}, &addr);
  ASSERT_FALSE(addr.empty()) << seed->dump();
  std::vector<std::unique_ptr<Proc>> ranks;
  std::vector<Proc *> all{seed.get()};
  for (int r = 0; r < 6; ++r) {
    Proc::Env env{{"NEXAR_SEED", addr},
                  {"NEXAR_CLUSTER_TOKEN", kToken},
                  {"NEXAR_RANK", std::to_string(r)},
                  {"NEXAR_WORLD_SIZE", "6"},
                  {"NEXAR_TOPOLOGY", "ring"},
                  // As between hosts: the death is found by the heartbeat
                  // timeout, with sends on their way through the dead rank.
                  {"NEXAR_SHM", "off"},
                  {"NEXAR_HEARTBEAT_INTERVAL_SECS", "1"},
                  {"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}};
    ranks.push_back(std::make_unique<Proc>(dir, "rank" + std::to_string(r),
                                           std::vector<std::string>{NEXAR_RELAY_WORKER_BIN}, env));
    all.push_back(ranks.back().get());
  }
  // Part of the stream went through rank 1; kill it mid-way.
  ASSERT_TRUE(ranks[2]->wait_output("PROGRESS received=40", 90)) << dump_all(all);
  ranks[1]->kill_now();
  for (int r : {0, 2, 3, 4, 5}) {
    ASSERT_TRUE(ranks[r]->wait(120)) << dump_all(all);
    EXPECT_EQ(ranks[r]->code(), 0) << ranks[r]->dump();
  }
  const std::string received = ranks[2]->out();
  // Every message arrived, in order; none twice except a send retried after
  // a failure that left it unclear whether the message got through.
  EXPECT_TRUE(contains(received, "STREAM_DONE received=200")) << ranks[2]->dump();
  EXPECT_TRUE(contains(received, "out_of_order=0")) << ranks[2]->dump();
  const std::vector<std::string> failed = lines_with(ranks[0]->out(), "SEND_FAILED");
  const std::string dup = field(received, "duplicates");
  EXPECT_LE(std::stoul(dup.empty() ? "0" : dup), failed.size()) << ranks[2]->dump();
  // Sends that failed said why: the relay on their route (rank 1) was lost.
  for (const std::string &line : failed) {
    EXPECT_TRUE(contains(line, "status=-5")) << line;
    EXPECT_TRUE(contains(line, "rank 1")) << line;
  }
  // Ranks 3, 4, 5 heard from rank 0 on the routes round rank 1.
  for (int r : {3, 4, 5})
    EXPECT_TRUE(contains(ranks[r]->out(), "BYE_OK rank=" + std::to_string(r))) << ranks[r]->dump();
}

// Ranks 0-2 on a hypercube, rank 3 on a ring: rank 3's links to 0 and 2
// carry its digest first, and formation fails naming the ranks and graphs.
TEST(RelayHealing, DisagreeingTopologiesFailFormationNamingTheRanks) {
  TempDir dir;
  std::string addr;
  auto seed =
      start_seed(dir, "seed", {"--world-size", "4", "--token-file", write_token(dir)}, &addr);
  ASSERT_FALSE(addr.empty()) << seed->dump();
  std::vector<std::unique_ptr<Proc>> workers;
  std::vector<Proc *> all{seed.get()};
  for (int r = 0; r < 4; ++r) {
    workers.push_back(worker(dir, "w" + std::to_string(r),
                             {{"NEXAR_SEED", addr},
                              {"NEXAR_CLUSTER_TOKEN", kToken},
                              {"NEXAR_RANK", std::to_string(r)},
                              {"NEXAR_CONNECT_TIMEOUT_SECS", "10"},
                              {"NEXAR_TOPOLOGY", r == 3 ? "ring" : "hypercube"}}));
    all.push_back(workers.back().get());
  }
  std::string messages;
  for (auto &w : workers) {
    ASSERT_TRUE(w->wait(60)) << dump_all(all);
    EXPECT_EQ(w->code(), 3) << w->dump();
    messages += w->out();
  }
  EXPECT_TRUE(contains(messages, "and 3 disagree on the mesh topology")) << messages;
  EXPECT_TRUE(contains(messages, "uses hypercube")) << messages;
  EXPECT_TRUE(contains(messages, "uses ring")) << messages;
}
