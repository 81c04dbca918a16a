// Failures of real processes through a real seed (tests/cluster/
// failure_worker.c runs allreduces with checked results until one fails,
// then revokes, shrinks and goes on):
// - kill -9 of one of 4 ranks mid-allreduce: every survivor's operation fails
//   naming the killed rank (not a survivor that left first); the survivors
//   shrink and finish further allreduces with exact results;
// - SIGSTOP of one: the others declare it failed and go on; when it wakes,
//   its operations fail with NEXAR_ERR_EXCLUDED;
// - abort and destroy with a frozen peer return without waiting for it.
#include <gtest/gtest.h>
#include <nexar.h>
#include <signal.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "seed_and_workers.h"

using namespace cluster_test;

namespace {

// n failure workers through a real seed, each with `extra` in its environment.
struct Job {
  TempDir dir;
  std::unique_ptr<Proc> seed;
  std::vector<std::unique_ptr<Proc>> ranks;
  std::vector<Proc *> all;

  // per_rank[r] (when given) overrides the environment of rank r.
  Job(int n, const Proc::Env &extra, const std::map<int, Proc::Env> &per_rank = {}) {
    std::string addr;
    seed = start_seed(dir, "seed",
                      {"--world-size", std::to_string(n), "--token-file", write_token(dir)}, &addr);
    all.push_back(seed.get());
    for (int r = 0; r < n; ++r) {
      Proc::Env env{
          {"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}, {"NEXAR_RANK", std::to_string(r)}};
      if (auto own = per_rank.find(r); own != per_rank.end())
        env.insert(own->second.begin(), own->second.end());
      env.insert(extra.begin(), extra.end());
      ranks.push_back(std::make_unique<Proc>(dir, "rank" + std::to_string(r),
                                             std::vector<std::string>{NEXAR_FAILURE_WORKER_BIN},
                                             env));
      all.push_back(ranks.back().get());
    }
  }
  bool running() {
    for (auto &p : ranks)
      if (!p->wait_output("RUNNING rank=", 60)) return false;
    return true;
  }
  // Survivor r named `culprit`, shrank to (new_rank of new_size) and went on.
  void expect_recovered(int r, int culprit, int new_rank, int new_size) {
    Proc &p = *ranks[r];
    ASSERT_TRUE(p.wait(60)) << dump_all(all);
    EXPECT_EQ(p.code(), 0) << p.dump();
    const std::string out = p.out();
    EXPECT_TRUE(contains(out, "FAILED rank=" + std::to_string(r) +
                                  " status=-5 failed_rank=" + std::to_string(culprit)))
        << p.dump();
    EXPECT_TRUE(contains(
        out, "SHRUNK rank=" + std::to_string(new_rank) + " size=" + std::to_string(new_size)))
        << p.dump();
    EXPECT_TRUE(contains(out, "RECOVERED rank=" + std::to_string(r))) << p.dump();
  }
};

const Proc::Env kFastHeartbeat{{"NEXAR_HEARTBEAT_INTERVAL_SECS", "1"},
                               {"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}};

// SIGSTOP of rank 1 until the others named it, shrank and went on; then
// SIGCONT: its pending allreduce fails with NEXAR_ERR_EXCLUDED (it blames
// nobody) and it exits.
void freeze_rank_1_until_the_others_recovered(Job &job) {
  ASSERT_TRUE(job.running()) << dump_all(job.all);
  job.ranks[1]->signal(SIGSTOP);
  for (int r : {0, 2, 3})
    job.expect_recovered(r, 1, r == 0 ? 0 : r - 1, 3);
  job.ranks[1]->signal(SIGCONT);
  Proc &woken = *job.ranks[1];
  ASSERT_TRUE(woken.wait(60)) << woken.dump();
  EXPECT_EQ(woken.code(), 5) << woken.dump();
  EXPECT_TRUE(contains(woken.out(), "EXCLUDED rank=1 allreduce")) << woken.dump();
  EXPECT_FALSE(contains(woken.out(), "FAILED rank=1")) << woken.dump();
}

// One agreement as a failure worker in agree mode reports it.
struct AgreeLine {
  uint64_t round = 0, flags = 0;
  int status = 0;
  bool operator==(const AgreeLine &) const = default;
};

std::vector<AgreeLine> agree_lines(const std::string &out) {
  std::vector<AgreeLine> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long round = 0, flags = 0;
    int status = 0;
    if (sscanf(line.c_str(), "AGREE round=%llu flags=%llx status=%d", &round, &flags, &status) == 3)
      lines.push_back({round, flags, status});
  }
  return lines;
}

// The AND of the bits that ranks `from`..3 contribute in `round`
// (tests/cluster/failure_worker.c).
uint64_t agreed_bits(uint64_t round, unsigned from) {
  uint64_t v = ~0ull;
  for (unsigned r = from; r < 4; ++r)
    v &= ~(1ull << ((round + r) % 64));
  return v;
}

}  // namespace

TEST(FailureProcesses, KilledRankIsNamedByEverySurvivorWhoShrinkAndGoOn) {
  Job job(4, kFastHeartbeat);
  ASSERT_TRUE(job.running()) << dump_all(job.all);
  job.ranks[2]->signal(SIGKILL);
  for (int r : {0, 1, 3})
    job.expect_recovered(r, 2, r == 3 ? 2 : r, 3);
}

TEST(FailureProcesses, FrozenRankIsExcludedWhenItWakes) {
  Job job(4, kFastHeartbeat);
  freeze_rank_1_until_the_others_recovered(job);
}

// The frozen rank's own heartbeat timeout is 60 s: it wakes long before its
// own limit, yet after the others (3 s) declared it failed. It must not
// blame one of them: its pending allreduce fails with NEXAR_ERR_EXCLUDED.
TEST(FailureProcesses, FrozenRankWokenBeforeItsOwnTimeoutIsExcluded) {
  Job job(4, {{"NEXAR_HEARTBEAT_INTERVAL_SECS", "1"}},
          {{0, {{"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}}},
           {1, {{"NEXAR_HEARTBEAT_TIMEOUT_SECS", "60"}}},
           {2, {{"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}}},
           {3, {{"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}}}});
  freeze_rank_1_until_the_others_recovered(job);
}

TEST(FailureProcesses, AbortAndDestroyWithAFrozenPeerReturn) {
  TempDir files;
  const std::string trigger = files / "abort-now";
  Job job(2, {{"NEXAR_HEARTBEAT_TIMEOUT_SECS", "60"}, {"FAILURE_WORKER_ABORT_FILE", trigger}});
  ASSERT_TRUE(job.running()) << dump_all(job.all);
  job.ranks[1]->signal(SIGSTOP);
  FILE *f = fopen(trigger.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  // A hang guard, far above the ~2 s bound on closing connections.
  Proc &r0 = *job.ranks[0];
  EXPECT_TRUE(r0.wait(10)) << dump_all(job.all);
  EXPECT_EQ(r0.code(), 0) << r0.dump();
  EXPECT_TRUE(contains(r0.out(), "DESTROYED rank=0")) << r0.dump();
  job.ranks[1]->signal(SIGCONT);
}

// kill -9 of the agreement's coordinator (rank 0, the lowest live rank)
// while the ranks run agreements back to back, so that it dies inside one:
// every survivor reports the same value and status for every round; the
// first failure is reported once, uniformly, and after acknowledging it
// the survivors agree among themselves.
namespace {

void kill_the_coordinator_during_agreements(const Proc::Env &extra) {
  Proc::Env env = kFastHeartbeat;
  env.insert(extra.begin(), extra.end());
  env["FAILURE_WORKER_MODE"] = "agree";
  Job job(4, env);
  ASSERT_TRUE(job.running()) << dump_all(job.all);
  job.ranks[0]->signal(SIGKILL);
  std::vector<std::vector<AgreeLine>> seen;
  for (int r : {1, 2, 3}) {
    Proc &p = *job.ranks[r];
    ASSERT_TRUE(p.wait(60)) << dump_all(job.all);
    ASSERT_EQ(p.code(), 0) << p.dump();
    EXPECT_TRUE(contains(p.out(), "AGREED rank=" + std::to_string(r))) << p.dump();
    seen.push_back(agree_lines(p.out()));
  }
  EXPECT_EQ(seen[1], seen[0]);
  EXPECT_EQ(seen[2], seen[0]);
  const std::vector<AgreeLine> &rounds = seen[0];
  ASSERT_GE(rounds.size(), 4u);
  // OK up to the failure, one PEER_FAILED, then 3 more OK among survivors.
  const size_t failed_at = rounds.size() - 4;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const AgreeLine &a = rounds[i];
    EXPECT_EQ(a.round, i);
    EXPECT_EQ(a.status, i == failed_at ? NEXAR_ERR_PEER_FAILED : NEXAR_OK) << "round " << i;
    // With rank 0's vote or without it, never anything else.
    EXPECT_TRUE(a.flags == agreed_bits(a.round, 0) || a.flags == agreed_bits(a.round, 1))
        << "round " << i << " flags " << std::hex << a.flags;
  }
  for (size_t i = failed_at + 1; i < rounds.size(); ++i)
    EXPECT_EQ(rounds[i].flags, agreed_bits(rounds[i].round, 1)) << "round " << i;
}

}  // namespace

// Same host: the survivors know of the death at once (the same-host path).
TEST(FailureProcesses, AgreementIsUniformWhenItsCoordinatorIsKilled) {
  kill_the_coordinator_during_agreements({});
}

// Over QUIC only: the survivors wait inside the agreement for the heartbeat
// timeout before the next coordinator takes over.
TEST(FailureProcesses, AgreementIsUniformWhenItsCoordinatorIsKilledOverQuic) {
  kill_the_coordinator_during_agreements({{"NEXAR_SHM", "off"}});
}
