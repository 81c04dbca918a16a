// A cluster across separate hosts, each a network namespace on one bridge:
// the seed on one, workers on the others; nothing connects to the machine's
// own network. Also: kill -9 of a rank on its own host, which the others
// learn of by silence alone (no same-host path between hosts).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "seed_and_workers.h"

using namespace cluster_test;

namespace {

// Runs a command; returns its exit status and, in *out, what it printed.
int run_cmd(const std::string &cmd, std::string *out = nullptr) {
  std::string full = cmd + " 2>&1";
  FILE *p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, p)) > 0)
    text.append(buf, k);
  int st = pclose(p);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A small network of "hosts": one namespace per host, each with an eth0
// veth whose peer sits on a bridge in a hub namespace. Nothing connects to
// the machine's own network. Names are unique per test run; everything is
// deleted at scope exit (deleting a namespace deletes its veths).
class Hosts {
 public:
  explicit Hosts(int n) {
    static int counter = 0;
    prefix_ = "nx" + std::to_string(getpid()) + "x" + std::to_string(counter++);
    std::string out;
    if (run_cmd("ip -V", &out) != 0) {
      error_ = "iproute2 ('ip') is not available: " + out;
      return;
    }
    if (!add(prefix_ + "-hub")) return;
    if (!sh("ip -n " + ns("hub") + " link add br0 type bridge") ||
        !sh("ip -n " + ns("hub") + " link set br0 up"))
      return;
    for (int i = 0; i < n; ++i) {
      const std::string h = ns("h" + std::to_string(i));
      const std::string peer = "p" + std::to_string(i);
      if (!add(h)) return;
      if (!sh("ip -n " + h + " link add eth0 type veth peer name " + peer + " netns " +
              ns("hub")) ||
          !sh("ip -n " + h + " addr add " + ip(i) + "/24 dev eth0") ||
          !sh("ip -n " + h + " link set eth0 up") || !sh("ip -n " + h + " link set lo up") ||
          !sh("ip -n " + ns("hub") + " link set " + peer + " master br0") ||
          !sh("ip -n " + ns("hub") + " link set " + peer + " up"))
        return;
    }
    ok_ = true;
  }
  ~Hosts() {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it)
      run_cmd("ip netns del " + *it);
  }
  bool ok() const { return ok_; }
  const std::string &error() const { return error_; }
  std::string ns(const std::string &name) const { return prefix_ + "-" + name; }
  static std::string ip(int i) { return "10.77.0." + std::to_string(i + 1); }
  // Prefix that runs a command on host i.
  std::vector<std::string> on(int i) const {
    return {"/usr/sbin/ip", "netns", "exec", ns("h" + std::to_string(i))};
  }

 private:
  bool add(const std::string &name) {
    std::string out;
    if (run_cmd("ip netns add " + name, &out) != 0) {
      error_ = "cannot create network namespace " + name + ": " + out;
      return false;
    }
    created_.push_back(name);
    return true;
  }
  bool sh(const std::string &cmd) {
    std::string out;
    if (run_cmd(cmd, &out) != 0) {
      error_ = "'" + cmd + "' failed: " + out;
      return false;
    }
    return true;
  }
  std::string prefix_;
  std::vector<std::string> created_;
  bool ok_ = false;
  std::string error_;
};

}  // namespace

// The seed on one host, three workers on three others: they choose their own
// addresses (the route to the seed, or NEXAR_SOCKET_IFNAME), form the mesh
// across the bridge and run point-to-point, barrier and allreduce. A worker
// that would advertise loopback to a seed on another host refuses to; a seed
// without a token refuses workers from other hosts unless told to run open.
// If this machine forbids namespaces the test fails and says why.
TEST(ClusterHosts, SeedAndWorkersInSeparateNetworkNamespaces) {
  if (access("/usr/sbin/ip", X_OK) != 0 && access("/sbin/ip", X_OK) != 0)
    FAIL() << "iproute2 is not installed (scripts/install-deps.sh installs it); this test needs "
              "'ip netns' to make separate hosts";
  Hosts net(4);
  ASSERT_TRUE(net.ok()) << "separate hosts need network namespaces, and this machine refused: "
                        << net.error();
  TempDir dir;
  const std::string seed_addr = Hosts::ip(0) + ":29500";
  {
    SCOPED_TRACE("token-authenticated world across hosts");
    std::string addr;
    auto seed = start_seed(
        dir, "seed", {"--listen", seed_addr, "--world-size", "3", "--token-file", write_token(dir)},
        &addr, {}, net.on(0));
    ASSERT_EQ(addr, seed_addr) << seed->dump();
    std::vector<std::unique_ptr<Proc>> workers;
    for (int i = 1; i <= 3; ++i) {
      Proc::Env env{
          {"NEXAR_SEED", seed_addr}, {"NEXAR_CLUSTER_TOKEN", kToken}, {"NEXAR_LOG_LEVEL", "info"}};
      if (i == 2) env["NEXAR_SOCKET_IFNAME"] = "^lo";
      if (i == 3) env["NEXAR_SOCKET_IFNAME"] = "=eth0";
      workers.push_back(worker(dir, "w" + std::to_string(i), env, {}, net.on(i)));
    }
    expect_world(*seed, workers, 3);
    for (int i = 1; i <= 3; ++i) {
      EXPECT_TRUE(contains(workers[i - 1]->err(), "advertising " + Hosts::ip(i) + ":"))
          << workers[i - 1]->dump();
      EXPECT_TRUE(contains(seed->out(), "listening on " + Hosts::ip(i) + ":")) << seed->dump();
    }
    EXPECT_TRUE(contains(workers[1]->err(), "NEXAR_SOCKET_IFNAME=^lo matched interface eth0"))
        << workers[1]->dump();
  }
  {
    SCOPED_TRACE("loopback is never advertised to a seed on another host");
    auto w = worker(dir, "loop",
                    {{"NEXAR_SEED", seed_addr},
                     {"NEXAR_CLUSTER_TOKEN", kToken},
                     {"NEXAR_LISTEN_ADDR", "127.0.0.1:0"}},
                    {}, net.on(1));
    ASSERT_TRUE(w->wait(20)) << w->dump();
    EXPECT_EQ(w->code(), 3) << w->dump();
    EXPECT_TRUE(contains(w->out(), "would advertise the loopback address")) << w->dump();
  }
  {
    SCOPED_TRACE("no token: remote workers refused unless the seed runs open");
    std::string addr;
    auto seed = start_seed(dir, "seed-closed", {"--listen", seed_addr, "--world-size", "1"}, &addr,
                           {}, net.on(0));
    auto w = worker(dir, "no-token", {{"NEXAR_SEED", seed_addr}}, {}, net.on(1));
    ASSERT_TRUE(w->wait(20)) << w->dump();
    EXPECT_EQ(w->code(), 3) << w->dump();
    EXPECT_TRUE(contains(w->out(), "JOIN_FAILED status=-10")) << w->dump();
    EXPECT_TRUE(contains(w->out(), "admits only workers on its own host")) << w->dump();
    seed->kill_now();
    auto open_seed =
        start_seed(dir, "seed-open", {"--listen", seed_addr, "--world-size", "2", "--open"}, &addr,
                   {}, net.on(0));
    EXPECT_TRUE(contains(open_seed->err(), "runs open")) << open_seed->dump();
    std::vector<std::unique_ptr<Proc>> workers;
    workers.push_back(worker(dir, "open1", {{"NEXAR_SEED", seed_addr}}, {}, net.on(1)));
    workers.push_back(worker(dir, "open2", {{"NEXAR_SEED", seed_addr}}, {}, net.on(2)));
    expect_world(*open_seed, workers, 2);
  }
}

namespace {

// 4 failure workers (tests/cluster/failure_worker.c) through a seed on host
// 0 listening on port, rank r on host host_of(r), extra in their
// environment; rank 2 is killed with SIGKILL mid-allreduce. Every survivor
// names rank 2, shrinks to 3 and recovers.
void kill_rank_2_of_4(Hosts &net, int port, int (*host_of)(int), const Proc::Env &extra) {
  TempDir dir;
  const std::string seed_addr = Hosts::ip(0) + ":" + std::to_string(port);
  std::string addr;
  auto seed = start_seed(
      dir, "seed", {"--listen", seed_addr, "--world-size", "4", "--token-file", write_token(dir)},
      &addr, {}, net.on(0));
  ASSERT_EQ(addr, seed_addr) << seed->dump();
  std::vector<std::unique_ptr<Proc>> ranks;
  std::vector<Proc *> all{seed.get()};
  for (int r = 0; r < 4; ++r) {
    Proc::Env env{{"NEXAR_SEED", seed_addr},
                  {"NEXAR_CLUSTER_TOKEN", kToken},
                  {"NEXAR_RANK", std::to_string(r)},
                  {"NEXAR_HEARTBEAT_INTERVAL_SECS", "1"},
                  {"NEXAR_HEARTBEAT_TIMEOUT_SECS", "3"}};
    env.insert(extra.begin(), extra.end());
    ranks.push_back(std::make_unique<Proc>(dir, "rank" + std::to_string(r),
                                           std::vector<std::string>{NEXAR_FAILURE_WORKER_BIN}, env,
                                           net.on(host_of(r))));
    all.push_back(ranks.back().get());
  }
  for (auto &p : ranks)
    ASSERT_TRUE(p->wait_output("RUNNING rank=", 60)) << dump_all(all);
  ranks[2]->signal(SIGKILL);
  for (int r : {0, 1, 3}) {
    Proc &p = *ranks[r];
    ASSERT_TRUE(p.wait(60)) << dump_all(all);
    EXPECT_EQ(p.code(), 0) << p.dump();
    const std::string out = p.out();
    EXPECT_TRUE(contains(out, "FAILED rank=" + std::to_string(r) + " status=-5 failed_rank=2 "))
        << p.dump();
    EXPECT_TRUE(contains(out, "SHRUNK rank=" + std::to_string(r == 3 ? 2 : r) + " size=3"))
        << p.dump();
    EXPECT_TRUE(contains(out, "RECOVERED rank=" + std::to_string(r))) << p.dump();
  }
}

}  // namespace

// 4 ranks on 4 hosts (the seed with rank 0) run allreduces with checked
// results (tests/cluster/failure_worker.c); rank 2 is killed with SIGKILL
// mid-allreduce. Every survivor's allreduce fails with NEXAR_ERR_PEER_FAILED
// naming rank 2 (not a survivor that gave up first); they shrink to 3 and
// finish further allreduces with exact results.
TEST(ClusterHosts, KilledRankOnItsOwnHostIsNamedByEverySurvivor) {
  Hosts net(4);
  ASSERT_TRUE(net.ok()) << "separate hosts need network namespaces, and this machine refused: "
                        << net.error();
  kill_rank_2_of_4(net, 29501, [](int r) { return r; }, {});
}

namespace {

// The number after "key=" on the first line of text that starts with
// prefix (-1 if there is none).
long long field(const std::string &text, const std::string &prefix, const std::string &key) {
  size_t at = text.find(prefix);
  if (at == std::string::npos) return -1;
  const std::string line = text.substr(at, text.find('\n', at) - at);
  at = line.find(" " + key + "=");
  return at == std::string::npos ? -1 : std::stoll(line.substr(at + key.size() + 2));
}

}  // namespace

namespace {

// Runs tests/cluster/hosts_worker.c as 4 ranks on 2 hosts (rank r on host
// r % 2, the seed on host 0) with env added; returns each rank's output
// once all have ended well (empty after a failure, reported).
std::vector<std::string> run_two_by_two(const Hosts &net, const std::string &port,
                                        const Proc::Env &env) {
  TempDir dir;
  const std::string seed_addr = Hosts::ip(0) + ":" + port;
  std::string addr;
  auto seed = start_seed(
      dir, "seed", {"--listen", seed_addr, "--world-size", "4", "--token-file", write_token(dir)},
      &addr, {}, net.on(0));
  if (addr != seed_addr) {
    ADD_FAILURE() << seed->dump();
    return {};
  }
  std::vector<std::unique_ptr<Proc>> ranks;
  std::vector<Proc *> all{seed.get()};
  for (int r = 0; r < 4; ++r) {
    Proc::Env e = env;
    e["NEXAR_SEED"] = seed_addr;
    e["NEXAR_CLUSTER_TOKEN"] = kToken;
    e["NEXAR_RANK"] = std::to_string(r);
    ranks.push_back(std::make_unique<Proc>(dir, "rank" + std::to_string(r),
                                           std::vector<std::string>{NEXAR_HOSTS_WORKER_BIN}, e,
                                           net.on(r % 2)));
    all.push_back(ranks.back().get());
  }
  std::vector<std::string> outs;
  for (int r = 0; r < 4; ++r) {
    Proc &p = *ranks[r];
    if (!p.wait(60) || p.code() != 0 || !contains(p.out(), "DONE rank=" + std::to_string(r))) {
      ADD_FAILURE() << dump_all(all);
      return {};
    }
    outs.push_back(p.out());
  }
  return outs;
}

// The worker's default: 512 Ki u64 per measured allreduce and broadcast.
constexpr long long kMeasuredBytes = 4 << 20;
// Frames, acknowledgements and heartbeats: well under this.
constexpr long long kSlack = 64 << 10;

}  // namespace

// 2 hosts x 2 ranks (ranks 0 and 2 on one, 1 and 3 on the other, the seed
// with the first): allreduces and broadcasts run hierarchically
// (collective/hierarchical.h) with exact results (tests/cluster/hosts_worker.c),
// and the bytes each rank hands to QUIC are those of the scheme. An
// allreduce of B bytes: the host's reduce-scatter and allgather stay on the
// host, and each rank's shard of B/2 crosses once (the flat ring would send
// 1.5 B per rank, all of it between hosts with this placement). A broadcast
// from rank 2 (not first on its host): B crosses once, from the root to rank
// 3, and each host broadcasts it on shared memory.
TEST(ClusterHosts, TwoHostsOfTwoRanksCrossOncePerShard) {
  Hosts net(2);
  ASSERT_TRUE(net.ok()) << "separate hosts need network namespaces, and this machine refused: "
                        << net.error();
  const uint32_t root = 2;
  const std::vector<std::string> outs =
      run_two_by_two(net, "29502", {{"HOSTS_WORKER_ROOT", std::to_string(root)}});
  ASSERT_EQ(outs.size(), 4u);
  const long long bytes = kMeasuredBytes;
  for (int r = 0; r < 4; ++r) {
    const std::string &out = outs[r];
    const std::string me = "rank=" + std::to_string(r);
    const std::string ar = "STATS " + me + " op=allreduce", bc = "STATS " + me + " op=broadcast";
    ASSERT_EQ(field(out, ar, "bytes"), bytes) << out;
    const long long quic = field(out, ar, "quic");
    EXPECT_GE(quic, bytes / 2) << out;
    EXPECT_LE(quic, bytes / 2 + kSlack) << out;
    // The local phases: messages through the pair's shared-memory channel,
    // or collectives on shared memory (2: reduce-scatter and allgather).
    EXPECT_TRUE(field(out, ar, "shm") >= bytes - kSlack || field(out, ar, "shm_collectives") == 2)
        << out;
    const long long bquic = field(out, bc, "quic");
    if (r == static_cast<int>(root)) {
      EXPECT_GE(bquic, bytes) << out;
      EXPECT_LE(bquic, bytes + kSlack) << out;
    } else {
      EXPECT_GE(bquic, 0) << out;
      EXPECT_LE(bquic, kSlack) << out;
    }
    EXPECT_EQ(field(out, bc, "shm_collectives"), 1) << out;
  }
}

// The same with NEXAR_SHM=off: no rank reaches another through shared
// memory, so the flat algorithms run, every byte over QUIC (the allreduce:
// 2 B (p-1)/p = 1.5 B per rank), with the same exact results.
TEST(ClusterHosts, TwoHostsOfTwoRanksWithoutSharedMemoryAreFlat) {
  Hosts net(2);
  ASSERT_TRUE(net.ok()) << "separate hosts need network namespaces, and this machine refused: "
                        << net.error();
  const std::vector<std::string> outs = run_two_by_two(net, "29504", {{"NEXAR_SHM", "off"}});
  ASSERT_EQ(outs.size(), 4u);
  const long long bytes = kMeasuredBytes;
  for (int r = 0; r < 4; ++r) {
    const std::string &out = outs[r];
    const std::string ar = "STATS rank=" + std::to_string(r) + " op=allreduce";
    const long long quic = field(out, ar, "quic");
    EXPECT_GE(quic, bytes * 3 / 2) << out;
    EXPECT_LE(quic, bytes * 3 / 2 + kSlack) << out;
    EXPECT_EQ(field(out, ar, "shm"), 0) << out;
    EXPECT_EQ(field(out, ar, "shm_collectives"), 0) << out;
  }
}

// The same 2 hosts x 2 ranks: rank 2 is killed with SIGKILL mid-allreduce
// (tests/cluster/failure_worker.c). Every survivor's allreduce, which runs
// its phases on the hosts' groups, fails with NEXAR_ERR_PEER_FAILED naming
// rank 2 in the communicator's numbering; they shrink to 3 (hosts of 1 and
// 2 ranks) and finish further allreduces with exact results.
TEST(ClusterHosts, KilledRankOfTwoHostsOfTwoIsNamedByEverySurvivor) {
  Hosts net(2);
  ASSERT_TRUE(net.ok()) << "separate hosts need network namespaces, and this machine refused: "
                        << net.error();
  // Reads straight out of the host-mates' processes (where the host allows
  // them, fast or not here): the death may reach such a read first.
  kill_rank_2_of_4(net, 29503, [](int r) { return r % 2; },
                   {{"FAILURE_WORKER_COUNT", "65536"}, {"NEXAR_SHM_CMA", "on"}});
}
