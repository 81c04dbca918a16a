// nexar-run, the launcher: it starts a seed and the ranks of this host,
// prefixes their output, stops everyone when one fails, binds ranks to CPUs
// and prints the commands for the ranks of other hosts.
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "seed_and_workers.h"

using namespace cluster_test;

#ifdef NEXAR_RUN_BIN

namespace {

// Every rank's lines carry its prefix, and every rank finished.
void expect_prefixed_world(const Proc &run, uint32_t n) {
  const std::string out = run.out();
  for (uint32_t r = 0; r < n; ++r) {
    const std::string p = "[r" + std::to_string(r) + "] ";
    EXPECT_TRUE(contains(out, p + "DONE rank=" + std::to_string(r))) << run.dump();
    EXPECT_TRUE(
        contains(out, p + "JOINED rank=" + std::to_string(r) + " size=" + std::to_string(n)))
        << run.dump();
  }
}

}  // namespace

TEST(Launcher, RunsRanksWithPrefixedOutputAndProgress) {
  TempDir dir;
  Proc run(dir, "run", {NEXAR_RUN_BIN, "-n", "4", "--", NEXAR_WORKER_BIN, "--env"}, {});
  ASSERT_TRUE(run.wait(90)) << run.dump();
  EXPECT_EQ(run.code(), 0) << run.dump();
  expect_prefixed_world(run, 4);
  EXPECT_TRUE(contains(run.err(), "nexar-run: cluster formed: 4 ranks")) << run.dump();
}

// One rank fails before the world forms: the others are stopped (they are
// blocked joining), and the summary names the rank and its status.
TEST(Launcher, StopsEveryoneWhenOneRankFails) {
  TempDir dir;
  const std::string script = std::string(
                                 "if [ \"$NEXAR_RANK\" = 2 ]; then sleep 0.3; exit 3; fi; "
                                 "exec ") +
                             NEXAR_WORKER_BIN + " --env";
  const auto t0 = std::chrono::steady_clock::now();
  Proc run(dir, "run", {NEXAR_RUN_BIN, "-n", "4", "--grace", "2", "--", "/bin/sh", "-c", script},
           {});
  ASSERT_TRUE(run.wait(60)) << run.dump();
  EXPECT_LT(seconds_since(t0), 20.0);
  EXPECT_EQ(run.code(), 3) << run.dump();
  EXPECT_TRUE(contains(run.err(), "failed: rank 2 exited with status 3; 3 other rank(s) stopped"))
      << run.dump();
  // Killed by a signal: named as such, and the exit status says which.
  Proc run2(dir, "run2",
            {NEXAR_RUN_BIN, "-n", "3", "--grace", "1", "--", "/bin/sh", "-c",
             std::string("if [ \"$NEXAR_RANK\" = 1 ]; then kill -9 $$; fi; exec ") +
                 NEXAR_WORKER_BIN + " --env"},
            {});
  ASSERT_TRUE(run2.wait(60)) << run2.dump();
  EXPECT_EQ(run2.code(), 128 + 9) << run2.dump();
  EXPECT_TRUE(contains(run2.err(), "rank 1 was killed by signal 9")) << run2.dump();
}

// A rank that reports its failure (its pid to NEXAR_RUN_FAILURE_FD, as the
// Python binding does for an unhandled exception) is named even though the
// ranks that fail after it exit first, and it is left to end on its own.
TEST(Launcher, NamesTheRankThatReportedItsFailureFirst) {
  TempDir dir;
  const std::string script =
      "if [ \"$NEXAR_RANK\" = 1 ]; then echo $$ >/proc/self/fd/$NEXAR_RUN_FAILURE_FD; sleep 1; "
      "exit 4; fi; "
      "sleep 0.3; exit 1";
  Proc run(dir, "run", {NEXAR_RUN_BIN, "-n", "3", "--grace", "5", "--", "/bin/sh", "-c", script},
           {});
  ASSERT_TRUE(run.wait(60)) << run.dump();
  EXPECT_EQ(run.code(), 4) << run.dump();
  EXPECT_TRUE(contains(run.err(), "rank 1 (pid ")) << run.dump();
  EXPECT_TRUE(contains(run.err(), "is failing; stopping the other ranks")) << run.dump();
  EXPECT_TRUE(contains(run.err(), "failed: rank 1 exited with status 4; 2 other rank(s) stopped"))
      << run.dump();
}

// With --keep-going a failed rank is named (exit status or signal) and the
// others run on to their end; nexar-run still exits with the first failure.
TEST(Launcher, KeepGoingLeavesTheSurvivorsRunning) {
  TempDir dir;
  const std::string marks = dir / "mark";
  // Rank 1 exits 3, rank 2 is killed by SIGKILL; rank 0 waits until both
  // are gone, lingers (the default would stop it now), then finishes.
  const std::string script =
      "case $NEXAR_RANK in "
      "1) touch " +
      marks +
      "1; exit 3;; "
      "2) while [ ! -e " +
      marks + "1 ]; do sleep 0.05; done; touch " + marks +
      "2; kill -9 $$;; "
      "*) while [ ! -e " +
      marks + "2 ]; do sleep 0.05; done; sleep 1; echo SURVIVED;; esac";
  Proc run(dir, "run",
           {NEXAR_RUN_BIN, "-n", "3", "--keep-going", "--formation-timeout", "30", "--", "/bin/sh",
            "-c", script},
           {});
  ASSERT_TRUE(run.wait(60)) << run.dump();
  EXPECT_EQ(run.code(), 3) << run.dump();
  EXPECT_TRUE(contains(run.out(), "[r0] SURVIVED")) << run.dump();
  EXPECT_TRUE(
      contains(run.err(), "exited with status 3; the other ranks keep running (--keep-going)"))
      << run.dump();
  EXPECT_TRUE(
      std::regex_search(run.err(), std::regex("rank 2 \\(pid [0-9]+\\) was killed by signal 9 "
                                              "\\(Killed\\); the other ranks keep running")))
      << run.dump();
  EXPECT_TRUE(
      contains(run.err(), "failed: rank 1 exited with status 3 first; 2 rank(s) failed in all"))
      << run.dump();
}

namespace {

// "0-2,5" (a /proc Cpus_allowed_list) as a set.
std::set<int> parse_cpu_list(const std::string &text) {
  std::set<int> cpus;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    int lo = 0, hi = 0;
    if (sscanf(part.c_str(), "%d-%d", &lo, &hi) == 2) {
      for (int c = lo; c <= hi; ++c)
        cpus.insert(c);
    } else if (sscanf(part.c_str(), "%d", &lo) == 1) {
      cpus.insert(lo);
    }
  }
  return cpus;
}

// The CPUs rank r said it may run on ("[rR] Cpus_allowed_list:\t...").
std::set<int> rank_cpus(const Proc &run, uint32_t r) {
  std::smatch m;
  const std::string out = run.out();
  const std::regex line("\\[r" + std::to_string(r) + "\\] Cpus_allowed_list:\\s*([0-9,-]+)");
  if (!std::regex_search(out, m, line)) return {};
  return parse_cpu_list(m[1]);
}

std::string core_id_of(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  return read_file(dir + "physical_package_id") + "/" + read_file(dir + "core_id");
}

}  // namespace

// --bind-to pins local rank i to the i-th slot of the launcher's CPUs,
// wrapping; without it every rank keeps the launcher's whole set. The
// launcher is confined to two CPUs (taskset), so three ranks wrap.
TEST(Launcher, BindToPinsEachRankToItsSlotInTurn) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  std::string list;
  for (int c : cpus)
    list += (list.empty() ? "" : ",") + std::to_string(c);
  const std::set<int> all(cpus.begin(), cpus.end());
  const std::string script =
      std::string("grep Cpus_allowed_list /proc/self/status; exec ") + NEXAR_WORKER_BIN + " --env";
  auto run_bound = [&](const TempDir &dir, const std::string &name, uint32_t n,
                       const std::string &how) {
    std::vector<std::string> argv = {"/usr/bin/taskset", "-c", list,
                                     NEXAR_RUN_BIN,      "-n", std::to_string(n)};
    if (!how.empty()) argv.insert(argv.end(), {"--bind-to", how});
    argv.insert(argv.end(), {"--", "/bin/sh", "-c", script});
    auto p = std::make_unique<Proc>(dir, name, argv, Proc::Env{});
    EXPECT_TRUE(p->wait(90)) << p->dump();
    EXPECT_EQ(p->code(), 0) << p->dump();
    expect_prefixed_world(*p, n);
    return p;
  };
  TempDir dir;
  // One hardware thread each: cpus[0], cpus[1], cpus[0].
  auto hw = run_bound(dir, "hwthread", 3, "hwthread");
  for (uint32_t r = 0; r < 3; ++r)
    EXPECT_EQ(rank_cpus(*hw, r), std::set<int>{cpus[r % cpus.size()]}) << hw->dump();
  EXPECT_TRUE(contains(hw->err(), "binding: local rank 0 on CPU " + std::to_string(cpus[0])))
      << hw->dump();
  // One core each: the same unless both CPUs are threads of one core, which
  // is then the only slot.
  const bool one_core = cpus.size() < 2 || core_id_of(cpus[0]) == core_id_of(cpus[1]);
  auto core = run_bound(dir, "core", 3, "core");
  for (uint32_t r = 0; r < 3; ++r)
    EXPECT_EQ(rank_cpus(*core, r), one_core ? all : std::set<int>{cpus[r % cpus.size()]})
        << core->dump();
  // Unbound: the launcher's whole set, and no binding note.
  auto none = run_bound(dir, "none", 2, "");
  for (uint32_t r = 0; r < 2; ++r)
    EXPECT_EQ(rank_cpus(*none, r), all) << none->dump();
  EXPECT_FALSE(contains(none->err(), "binding:")) << none->dump();
  // No rank on this host: nothing to bind here, so no binding note.
  const std::string hosts = dir / "remote-hosts";
  {
    FILE *f = fopen(hosts.c_str(), "w");
    fprintf(f, "remote-a slots=2\n");
    fclose(f);
  }
  Proc remote(dir, "remote",
              {NEXAR_RUN_BIN, "--host-file", hosts, "--listen", "127.0.0.1:0", "--bind-to", "core",
               "--formation-timeout", "1", "--", "true"},
              {});
  ASSERT_TRUE(remote.wait(30)) << remote.dump();
  EXPECT_TRUE(contains(remote.out(), "run on remote-a")) << remote.dump();
  EXPECT_FALSE(contains(remote.err(), "binding:")) << remote.dump();
  // A value it does not know is a usage error.
  Proc bad(dir, "bad", {NEXAR_RUN_BIN, "-n", "2", "--bind-to", "socket", "--", "true"}, {});
  ASSERT_TRUE(bad.wait(30)) << bad.dump();
  EXPECT_EQ(bad.code(), 2) << bad.dump();
  EXPECT_TRUE(contains(bad.err(), "--bind-to socket: expected none, core or hwthread"))
      << bad.dump();
}

#ifdef NEXAR_DEMO_BIN
// The demo: real collectives across 4 processes, checked, and a table.
TEST(Launcher, CollectivesDemoThroughNexarRun) {
  TempDir dir;
  Proc run(dir, "run", {NEXAR_RUN_BIN, "-n", "4", "--", NEXAR_DEMO_BIN, "262144"}, {});
  ASSERT_TRUE(run.wait(120)) << run.dump();
  EXPECT_EQ(run.code(), 0) << run.dump();
  const std::string out = run.out();
  EXPECT_TRUE(contains(out, "[r0] nexar collectives: 4 ranks")) << run.dump();
  for (const char *op : {"allreduce", "broadcast", "allgather", "barrier"})
    EXPECT_TRUE(contains(out, std::string("[r0] ") + op)) << run.dump();
  EXPECT_FALSE(contains(out, "WRONG")) << run.dump();
}
#endif

// With a host file, ranks of this host start here; for the others the
// command is printed; run as printed, they join the same world.
TEST(Launcher, HostFilePrintsTheCommandsForOtherHosts) {
  TempDir dir;
  const std::string hosts = dir / "hosts";
  {
    FILE *f = fopen(hosts.c_str(), "w");
    fprintf(f, "# two here, two elsewhere\nlocalhost slots=2\nremote-a slots=2\n");
    fclose(f);
  }
  Proc run(dir, "run",
           {NEXAR_RUN_BIN, "--host-file", hosts, "--listen", "127.0.0.1:0", "--", NEXAR_WORKER_BIN,
            "--env"},
           {});
  ASSERT_TRUE(run.wait_output("run on remote-a", 20)) << run.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<std::unique_ptr<Proc>> remote;
  std::istringstream lines(run.out());
  std::string line;
  while (std::getline(lines, line)) {
    const std::string tag = "nexar-run: run on remote-a: ";
    if (line.rfind(tag, 0) != 0) continue;
    // "K=V K=V ... program args": the environment, then the command.
    std::istringstream words(line.substr(tag.size()));
    std::string w;
    Proc::Env env;
    std::vector<std::string> argv;
    while (words >> w) {
      if (argv.empty() && w.find('=') != std::string::npos)
        env[w.substr(0, w.find('='))] = w.substr(w.find('=') + 1);
      else
        argv.push_back(w);
    }
    ASSERT_EQ(argv.size(), 2u) << line;
    remote.push_back(
        std::make_unique<Proc>(dir, "remote" + std::to_string(remote.size()), argv, env));
  }
  ASSERT_EQ(remote.size(), 2u) << run.dump();
  for (auto &p : remote) {
    ASSERT_TRUE(p->wait(60)) << p->dump();
    EXPECT_EQ(p->code(), 0) << p->dump();
  }
  ASSERT_TRUE(run.wait(60)) << run.dump();
  EXPECT_EQ(run.code(), 0) << run.dump();
  EXPECT_TRUE(contains(run.out(), "[r0] DONE rank=0")) << run.dump();
  EXPECT_TRUE(contains(run.out(), "[r1] DONE rank=1")) << run.dump();
  EXPECT_TRUE(contains(remote[0]->out() + remote[1]->out(), "DONE rank=2"));
  EXPECT_TRUE(contains(remote[0]->out() + remote[1]->out(), "DONE rank=3"));
}
#endif
