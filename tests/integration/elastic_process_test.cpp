// Elastic membership with real processes and a real elastic seed
// (nexar-seed --elastic; tests/cluster/elastic_worker.c runs the steps):
// - grow 2 -> 4 -> 5 with exact collectives after each step, old ranks keep
//   their numbers, each joiner's handle agrees with the members';
// - a joiner with a wrong token is refused with AUTH, the world untouched;
// - a member killed during a grow fails it alike at every member, who shrink
//   and grow again;
// - a member lost after the others formed the grown mesh: no participant
//   uses the grown world, every member's grow fails naming it, the joiner
//   waits again and the next grow admits it;
// - a joiner killed during a grow is not admitted, the grow completes;
// - a joiner another participant cannot reach is not admitted, the grow
//   completes without it;
// - the seed gone: grow fails with a clear error, the world goes on;
// - nexar-run --elastic with the example (examples/elastic_training.c): a
//   rank killed with SIGKILL is replaced, the world shrinks and grows back
//   to 4 ranks, and the final model equals an uninterrupted run's.
#include <gtest/gtest.h>
#include <nexar.h>
#include <signal.h>

#include <functional>
#include <string>
#include <vector>

#include "loopback_udp.h"
#include "seed_and_workers.h"

using namespace cluster_test;

namespace {

struct ElasticJob {
  TempDir dir;
  std::string addr;
  std::unique_ptr<Proc> seed;
  std::vector<std::unique_ptr<Proc>> procs;
  std::vector<Proc *> all;

  ElasticJob(int world, const std::vector<std::string> &extra_seed_args = {}) {
    std::vector<std::string> args{"--world-size", std::to_string(world), "--token-file",
                                  write_token(dir), "--elastic"};
    args.insert(args.end(), extra_seed_args.begin(), extra_seed_args.end());
    seed = start_seed(dir, "seed", args, &addr);
    all.push_back(seed.get());
  }
  // rank >= 0: a member of the world being formed; -1: a joiner.
  Proc &start(const std::string &name, const std::string &steps, int rank,
              const std::string &token = kToken, const char *bin = NEXAR_ELASTIC_WORKER_BIN,
              const Proc::Env &extra_env = {}) {
    Proc::Env env{{"NEXAR_SEED", addr},
                  {"NEXAR_CLUSTER_TOKEN", token},
                  {"NEXAR_ELASTIC", "1"},
                  {"NEXAR_JOIN_TIMEOUT_SECS", "60"},
                  {"NEXAR_HEARTBEAT_INTERVAL_SECS", "1"},
                  {"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}};
    if (rank >= 0) env["NEXAR_RANK"] = std::to_string(rank);
    for (const auto &[k, v] : extra_env)
      env[k] = v;
    procs.push_back(std::make_unique<Proc>(dir, name, std::vector<std::string>{bin, steps}, env));
    all.push_back(procs.back().get());
    return *procs.back();
  }
  // A joiner played by nexar-cluster-probe's impostor with this attack.
  Proc &start_probe(const std::string &name, const std::string &attack) {
    procs.push_back(std::make_unique<Proc>(
        dir, name,
        std::vector<std::string>{NEXAR_PROBE_BIN, "impostor", "--seed", addr, "--token", kToken,
                                 "--rank", "-1", "--target", "0", "--attack", attack},
        Proc::Env{{"NEXAR_HEARTBEAT_INTERVAL_SECS", "1"}, {"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}}));
    all.push_back(procs.back().get());
    return *procs.back();
  }
  void go(const std::string &name = "go") {
    FILE *f = fopen((dir / name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    fclose(f);
  }
  void expect_done(Proc &p, const std::string &final_line) {
    ASSERT_TRUE(p.wait(90)) << p.name() << " did not finish\n" << dump_all(all);
    EXPECT_EQ(p.code(), 0) << dump_all(all);
    EXPECT_TRUE(contains(p.out(), final_line)) << p.dump();
  }
};

}  // namespace

TEST(ElasticProcesses, GrowTwoToFourToFiveKeepsRanksAndCollectivesExact) {
  ElasticJob job(2);
  // Members: check, admit 2, check, admit 1, check.
  const std::string member = "check,pending:2,grow:2,check,pending:1,grow:1,check";
  Proc &m0 = job.start("m0", member, 0);
  Proc &m1 = job.start("m1", member, 1);
  ASSERT_TRUE(m0.wait_output("CHECK rank=0 size=2", 60)) << dump_all(job.all);
  ASSERT_TRUE(m1.wait_output("CHECK rank=1 size=2", 60)) << dump_all(job.all);
  Proc &j2 = job.start("j2", "check,pending:1,grow:1,check", -1);
  Proc &j3 = job.start("j3", "check,pending:1,grow:1,check", -1);
  ASSERT_TRUE(m0.wait_output("GROWN old_rank=0 rank=0 size=4", 60)) << dump_all(job.all);
  Proc &j4 = job.start("j4", "check", -1);
  job.expect_done(m0, "DONE rank=0 size=5");
  job.expect_done(m1, "DONE rank=1 size=5");
  EXPECT_TRUE(contains(m1.out(), "GROWN old_rank=1 rank=1 size=4")) << m1.dump();
  EXPECT_TRUE(contains(m0.out(), "CHECK rank=0 size=4 sum=10 want=10 bcast=4246 ok")) << m0.dump();
  EXPECT_TRUE(contains(m0.out(), "CHECK rank=0 size=5 sum=15 want=15 bcast=4247 ok")) << m0.dump();
  job.expect_done(j2, "DONE rank=");
  job.expect_done(j3, "DONE rank=");
  job.expect_done(j4, "DONE rank=4 size=5");
  // The joiners took ranks 2 and 3 (in the order they came) of a world of 4.
  const std::string r2 = field(j2.out(), "JOINED rank"), r3 = field(j3.out(), "JOINED rank");
  EXPECT_TRUE((r2 == "2" && r3 == "3") || (r2 == "3" && r3 == "2")) << j2.dump() << j3.dump();
  EXPECT_TRUE(contains(j2.out(), "size=4")) << j2.dump();
  EXPECT_TRUE(contains(j4.out(), "JOINED rank=4 size=5")) << j4.dump();
  EXPECT_TRUE(contains(job.seed->out(), "grown: a world of 4 took in 1 joiner(s), now 5 ranks"))
      << job.seed->dump();
}

TEST(ElasticProcesses, JoinerWithWrongTokenIsRefusedAndTheWorldIsUntouched) {
  ElasticJob job(2);
  const std::string member = "check,waitfile:" + (job.dir / "go") + ",pending_is:0,check";
  Proc &m0 = job.start("m0", member, 0);
  Proc &m1 = job.start("m1", member, 1);
  ASSERT_TRUE(m0.wait_output("CHECK rank=0 size=2", 60)) << dump_all(job.all);
  Proc &bad = job.start("bad", "check", -1, "not-the-cluster-token-at-all");
  ASSERT_TRUE(bad.wait(60)) << dump_all(job.all);
  EXPECT_EQ(bad.code(), 3) << bad.dump();
  EXPECT_TRUE(contains(bad.out(), "JOIN_FAILED status=-10")) << bad.dump();
  job.go();
  job.expect_done(m0, "DONE rank=0 size=2");
  job.expect_done(m1, "DONE rank=1 size=2");
  EXPECT_TRUE(contains(m0.out(), "PENDING rank=0 count=0")) << m0.dump();
}

TEST(ElasticProcesses, MemberKilledDuringGrowFailsItAlikeThenShrinkAndGrowAgain) {
  ElasticJob job(4);
  const std::string member = "check,pending:1,grow:1,shrink,check,grow:1,check";
  std::vector<Proc *> members;
  for (int r = 0; r < 3; ++r)
    members.push_back(&job.start("m" + std::to_string(r), member, r));
  Proc &victim = job.start("m3", "check,hang", 3);
  ASSERT_TRUE(victim.wait_output("HANGING", 60)) << dump_all(job.all);
  Proc &j = job.start("j", "check", -1);
  for (Proc *m : members)
    ASSERT_TRUE(m->wait_output("GROWING", 60)) << dump_all(job.all);
  const int victim_rank = std::stoi(field(victim.out(), "JOINED rank"));
  victim.signal(SIGKILL);
  for (Proc *m : members) {
    job.expect_done(*m, "DONE rank=");
    const std::string out = m->out();
    EXPECT_TRUE(contains(out, "status=-5 failed_rank=" + std::to_string(victim_rank))) << m->dump();
    EXPECT_TRUE(contains(out, "SHRUNK")) << m->dump();
    EXPECT_TRUE(contains(out, "size=3 sum=6 want=6 bcast=4245 ok")) << m->dump();
    EXPECT_TRUE(contains(out, "size=4 sum=10 want=10 bcast=4246 ok")) << m->dump();
  }
  job.expect_done(j, "DONE rank=3 size=4");
}

// Rank 2's link to the seed goes down once its Welcome arrived
// (nexar-elastic-worker-seed-mute): the grown mesh forms at every
// participant, rank 2's included, but the seed never hears from rank 2 again
// and loses it, as a member that died at that moment. Then rank 2 dies.
TEST(ElasticProcesses, MemberLostAfterOthersFormedTheGrownMeshLeavesNoHalfFormedWorld) {
  ElasticJob job(3);
  const std::string member = "check,pending:1,grow:1,shrink,check,grow:1,check";
  Proc &m0 = job.start("m0", member, 0);
  Proc &m1 = job.start("m1", member, 1);
  Proc &lost = job.start("m2", "check,pending:1,muteseed,grow:1,continue,hang", 2, kToken,
                         NEXAR_ELASTIC_WORKER_SEED_MUTE_BIN);
  for (Proc *m : {&m0, &m1, &lost})
    ASSERT_TRUE(m->wait_output("size=3 sum=6 want=6 bcast=4245 ok", 60)) << dump_all(job.all);
  Proc &j = job.start("j", "check", -1);
  ASSERT_TRUE(lost.wait_output("MUTED rank=2", 60)) << dump_all(job.all);
  for (Proc *m : {&m0, &m1})
    ASSERT_TRUE(m->wait_output("GROW_FAILED", 60)) << dump_all(job.all);
  lost.signal(SIGKILL);
  job.expect_done(m0, "DONE rank=0 size=3");
  job.expect_done(m1, "DONE rank=1 size=3");
  for (Proc *m : {&m0, &m1}) {
    const std::string out = m->out(), r = field(out, "JOINED rank");
    // The grow failed alike, naming rank 2; nobody used the grown world.
    EXPECT_TRUE(contains(out, "GROW_FAILED rank=" + r + " status=-5 failed_rank=2 ")) << m->dump();
    EXPECT_FALSE(contains(out, "size=4")) << m->dump();
    EXPECT_TRUE(contains(out, "SHRUNK rank=" + r + " size=2")) << m->dump();
    EXPECT_TRUE(contains(out, "size=2 sum=3 want=3 bcast=4244 ok")) << m->dump();
    EXPECT_TRUE(contains(out, "GROWN old_rank=" + r + " rank=" + r + " size=3")) << m->dump();
    EXPECT_TRUE(contains(out, "CHECK rank=" + r + " size=3 sum=6 want=6 bcast=4245 ok"))
        << m->dump();
  }
  // The joiner waited again and the next grow admitted it.
  job.expect_done(j, "DONE rank=2 size=3");
  EXPECT_TRUE(contains(j.out(), "JOINED rank=2 size=3")) << j.dump();
  EXPECT_TRUE(contains(job.seed->out() + job.seed->err(), "was lost during the grow"))
      << job.seed->dump();
}

// Two members wait for two joiners, then grow by both once "go" exists:
// start_doomed starts the first joiner (rank 2 of the grown world: the seed
// has it waiting before the other joiner starts), which the test makes fail;
// the members and the other joiner must end in a world of 3.
// slow_member: rank 1 gets the seed's second Welcome 1.5 s late.
// start_other: the other joiner, when it is no elastic worker (the test
// checks it); it runs no collective, so the members run none after the grow.
void grow_without_the_doomed_joiner(ElasticJob &job, const std::function<Proc &()> &start_doomed,
                                    const std::function<void(Proc &)> &before_go,
                                    bool slow_member = false,
                                    const std::function<Proc &()> &start_other = {}) {
  const std::string wait_go = "check,pending:2,waitfile:" + (job.dir / "go");
  const std::string after = start_other ? "" : ",check";
  const std::string member = wait_go + ",grow:2" + after;
  Proc &m0 = job.start("m0", member, 0);
  Proc &m1 = slow_member ? job.start("m1", wait_go + ",slowseed,grow:2" + after, 1, kToken,
                                     NEXAR_ELASTIC_WORKER_SEED_MUTE_BIN)
                         : job.start("m1", member, 1);
  ASSERT_TRUE(m0.wait_output("CHECK rank=0 size=2", 60)) << dump_all(job.all);
  Proc &doomed = start_doomed();
  ASSERT_TRUE(job.seed->wait_output("(1 waiting)", 60)) << dump_all(job.all);
  Proc &j = start_other ? start_other() : job.start("j", "check", -1);
  ASSERT_TRUE(m0.wait_output("PENDING rank=0 count=2", 60)) << dump_all(job.all);
  ASSERT_TRUE(m1.wait_output("PENDING rank=1 count=2", 60)) << dump_all(job.all);
  before_go(doomed);
  job.go();
  job.expect_done(m0, "DONE rank=0 size=3");
  job.expect_done(m1, "DONE rank=1 size=3");
  if (!start_other) job.expect_done(j, "DONE rank=2 size=3");
}

TEST(ElasticProcesses, JoinerKilledDuringGrowIsNotAdmitted) {
  ElasticJob job(2);
  grow_without_the_doomed_joiner(
      job, [&]() -> Proc & { return job.start("doomed", "check", -1); },
      [](Proc &doomed) { doomed.signal(SIGKILL); });
}

// The joiner dies after the grown mesh formed, before it told the seed: the
// members have reported that world already. The seed welcomes the others
// again without it, under a new world id (their earlier reports cannot count
// for it), and the grow completes.
TEST(ElasticProcesses, JoinerLostAfterTheGrownMeshFormedIsNotAdmitted) {
  ElasticJob job(2);
  Proc *doomed = nullptr;
  grow_without_the_doomed_joiner(
      job,
      [&]() -> Proc & {
        doomed = &job.start_probe("doomed", "die-after-mesh");
        return *doomed;
      },
      [](Proc &) {});
  // It formed the grown mesh and died before reporting it.
  EXPECT_TRUE(contains(doomed->out(), "PROBE_DYING_FORMED")) << doomed->dump();
  EXPECT_TRUE(contains(job.seed->err(), "was lost during a grow")) << job.seed->dump();
  EXPECT_TRUE(contains(job.seed->out(), "took in 1 joiner(s), now 3 ranks")) << job.seed->dump();
}

// As above, but the other joiner's report that it formed the first attempt
// reaches the seed only after the seed welcomed it again: under its rank of
// that attempt (3), not the one it has now (2). The seed tells the attempts
// apart by the world id and ignores the late report, and the grow completes.
TEST(ElasticProcesses, LateReportOfAReplacedAttemptUnderAnotherRankIsIgnored) {
  ElasticJob job(2);
  Proc *doomed = nullptr, *late = nullptr;
  grow_without_the_doomed_joiner(
      job,
      [&]() -> Proc & {
        doomed = &job.start_probe("doomed", "die-after-mesh");
        return *doomed;
      },
      [](Proc &) {}, false,
      [&]() -> Proc & {
        late = &job.start_probe("late", "stale-ready");
        return *late;
      });
  ASSERT_NE(late, nullptr);
  ASSERT_TRUE(late->wait_output("PROBE_JOINED rank=2 size=3", 60)) << dump_all(job.all);
  EXPECT_TRUE(contains(late->out(), "PROBE_STALE_READY rank=3")) << late->dump();
  EXPECT_TRUE(contains(doomed->out(), "PROBE_DYING_FORMED")) << doomed->dump();
  EXPECT_TRUE(contains(job.seed->out(), "took in 1 joiner(s), now 3 ranks")) << job.seed->dump();
}

// The first joiner advertises an address where nothing answers (a bound
// socket nobody reads): it dials the members itself, but the second joiner,
// a higher rank, cannot reach it. The seed hears that from the second
// joiner, before the joiner's own link to the seed says anything: it refuses
// that joiner and welcomes the others again without it.
void leave_out_an_unreachable_joiner(bool slow_member) {
  ElasticJob job(2);
  uint16_t hole = 0;
  const int hole_fd = nexar_test::bound_udp_socket(0, &hole);
  ASSERT_GE(hole_fd, 0);
  Proc *doomed = nullptr;
  grow_without_the_doomed_joiner(
      job,
      [&]() -> Proc & {
        Proc &p = job.start("doomed", "check", -1, kToken, NEXAR_ELASTIC_WORKER_BIN,
                            {{"NEXAR_ADVERTISE_ADDR", "127.0.0.1:" + std::to_string(hole)}});
        doomed = &p;
        return p;
      },
      [](Proc &) {}, slow_member);
  close(hole_fd);
  ASSERT_TRUE(doomed->wait(90)) << dump_all(job.all);
  EXPECT_EQ(doomed->code(), 3) << doomed->dump();
  EXPECT_TRUE(contains(doomed->out(), "JOIN_FAILED status=-5")) << doomed->dump();
  EXPECT_TRUE(contains(job.seed->err(),
                       "(rank 2 of the grown world) was lost during a grow, "
                       "reported by"))
      << job.seed->dump();
  EXPECT_TRUE(contains(job.seed->out(), "took in 1 joiner(s), now 3 ranks")) << job.seed->dump();
}

TEST(ElasticProcesses, JoinerNoParticipantCanReachIsLeftOutAndTheGrowCompletes) {
  leave_out_an_unreachable_joiner(false);
}

// The same, but rank 1 hears of the second attempt 1.5 s late: meanwhile
// it still answers the other joiner's dial with the first attempt's
// certificate. The joiner dials it again until it has left that attempt.
TEST(ElasticProcesses, MemberStillInTheReplacedAttemptIsDialedAgain) {
  leave_out_an_unreachable_joiner(true);
}

TEST(ElasticProcesses, SeedGoneGrowFailsClearlyAndTheWorldGoesOn) {
  ElasticJob job(2);
  const std::string member = "check,waitfile:" + (job.dir / "go") + ",grow:1,continue,check";
  Proc &m0 = job.start("m0", member, 0);
  Proc &m1 = job.start("m1", member, 1);
  ASSERT_TRUE(m0.wait_output("CHECK rank=0 size=2", 60)) << dump_all(job.all);
  ASSERT_TRUE(m1.wait_output("CHECK rank=1 size=2", 60)) << dump_all(job.all);
  job.seed->signal(SIGKILL);
  job.go();
  for (Proc *m : {&m0, &m1}) {
    job.expect_done(*m, "DONE rank=");
    EXPECT_TRUE(contains(m->out(), "status=-7")) << m->dump();
    EXPECT_TRUE(contains(m->out(), "elastic seed")) << m->dump();
    EXPECT_TRUE(contains(m->out(), "size=2 sum=3 want=3 bcast=4244 ok\nDONE")) << m->dump();
  }
}

namespace {

// nexar-run --elastic running the elastic example in dir; returns its process.
std::unique_ptr<Proc> elastic_run(const TempDir &dir, const std::string &name,
                                  const std::string &steps) {
  return std::make_unique<Proc>(
      dir, name,
      std::vector<std::string>{NEXAR_RUN_BIN, "-n", "4", "--elastic", "--max-restarts", "3", "--",
                               NEXAR_ELASTIC_TRAINING_BIN, steps, "10"},
      Proc::Env{{"NEXAR_HEARTBEAT_INTERVAL_SECS", "1"}, {"NEXAR_HEARTBEAT_TIMEOUT_SECS", "2"}});
}

}  // namespace

TEST(ElasticProcesses, LauncherReplacesAKilledRankAndTrainingEndsAsUninterrupted) {
  TempDir dir;
  auto plain = elastic_run(dir, "plain", "400");
  ASSERT_TRUE(plain->wait(120)) << plain->dump();
  ASSERT_EQ(plain->code(), 0) << plain->dump();
  const std::string want = field(plain->out(), "checksum");
  ASSERT_FALSE(want.empty()) << plain->dump();

  auto run = elastic_run(dir, "killed", "400");
  ASSERT_TRUE(run->wait_output("[r2] rank 2 of 4, pid ", 60)) << run->dump();
  ASSERT_TRUE(run->wait_output("step 100 with 4 ranks", 60)) << run->dump();
  const std::string out = run->out();
  const size_t at = out.find("[r2] rank 2 of 4, pid ") + 22;
  const pid_t victim = static_cast<pid_t>(std::stol(out.substr(at)));
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(run->wait(120)) << run->dump();
  EXPECT_EQ(run->code(), 0) << run->dump();
  const std::string all = run->out() + run->err();
  EXPECT_TRUE(contains(all, "shrunk to 3 ranks")) << run->dump();
  EXPECT_TRUE(contains(all, "grown to 4 ranks")) << run->dump();
  EXPECT_TRUE(contains(all, "[r4] rank 3 of 4")) << run->dump();
  EXPECT_TRUE(contains(all, "final step=400 ranks=4 checksum=" + want)) << run->dump();
  EXPECT_TRUE(contains(all, "elastic: 1 rank(s) died, 1 replaced: rank 2 (pid " +
                                std::to_string(victim) + ") was killed by signal 9"))
      << run->dump();
}
