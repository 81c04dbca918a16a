// The same-host path: ranks on one host exchange payloads through shared
// memory, set up through their QUIC session. In-process ranks of
// nexar_bootstrap_local are on one host too; multi-process cases use real
// workers through a real seed.
#include <gtest/gtest.h>
#include <nexar.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "seed_and_workers.h"

using namespace nexar_test;

namespace {

nexar_comm_options_t options(uint32_t shm, uint64_t max_bytes = 0) {
  nexar_comm_options_t o;
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  o.shm = shm;
  if (max_bytes) o.shm_max_bytes = max_bytes;
  return o;
}

// Allreduce of floats whose sums depend on the order of additions.
std::vector<std::vector<float>> allreduce_results(const World &w, size_t count) {
  std::vector<std::vector<float>> out(w.size(), std::vector<float>(count));
  on_each_rank(w.size(), [&](uint32_t r) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i)
      in[i] = 1.0f / static_cast<float>(1 + (i * 7 + r * 13) % 1001) * (r % 2 ? 1e-3f : 1e3f);
    EXPECT_EQ(nexar_allreduce(w[r], in.data(), out[r].data(), count, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                              nullptr, nullptr),
              NEXAR_OK)
        << nexar_last_error_message();
  });
  return out;
}

}  // namespace

TEST(SameHost, InProcessRanksTalkThroughSharedMemory) {
  nexar_comm_options_t o = options(NEXAR_SHM_AUTO);
  World w(4, &o);
  ASSERT_TRUE(w.ok());
  exchange_all_pairs(w, {0, 1, 4096, 3 << 20});  // larger than a ring: streamed
  auto res = allreduce_results(w, 1 << 20);
  for (uint32_t r = 0; r < w.size(); ++r) {
    nexar_stats_t s = stats(w[r]);
    EXPECT_EQ(s.shm_pairs, 3u) << "rank " << r;
    EXPECT_GT(s.shm_bytes_sent, uint64_t{3} * (3 << 20)) << "rank " << r;
    EXPECT_GT(s.shm_bytes_received, uint64_t{3} * (3 << 20)) << "rank " << r;
    // Payloads no longer cross QUIC: only control traffic does.
    EXPECT_LT(s.bytes_sent, uint64_t{1} << 20) << "rank " << r;
  }
}

TEST(SameHost, OffKeepsEveryByteOnQuic) {
  nexar_comm_options_t o = options(NEXAR_SHM_OFF);
  World w(3, &o);
  ASSERT_TRUE(w.ok());
  exchange_all_pairs(w, {1, 65536});
  for (uint32_t r = 0; r < w.size(); ++r) {
    nexar_stats_t s = stats(w[r]);
    EXPECT_EQ(s.shm_pairs, 0u);
    EXPECT_EQ(s.shm_bytes_sent, 0u);
    EXPECT_GT(s.bytes_sent, uint64_t{2} * 65536);
  }
}

TEST(SameHost, ResultsAreBitIdenticalToQuic) {
  std::vector<std::vector<float>> on, off;
  {
    nexar_comm_options_t o = options(NEXAR_SHM_AUTO);
    World w(4, &o);
    ASSERT_TRUE(w.ok());
    on = allreduce_results(w, 300001);
    ASSERT_EQ(stats(w[0]).shm_pairs, 3u);
  }
  {
    nexar_comm_options_t o = options(NEXAR_SHM_OFF);
    World w(4, &o);
    ASSERT_TRUE(w.ok());
    off = allreduce_results(w, 300001);
  }
  for (uint32_t r = 0; r < 4; ++r) {
    ASSERT_EQ(memcmp(on[r].data(), off[r].data(), on[r].size() * sizeof(float)), 0) << "rank " << r;
    ASSERT_EQ(memcmp(on[r].data(), on[0].data(), on[r].size() * sizeof(float)), 0) << "rank " << r;
  }
}

TEST(SameHost, PairsBeyondTheBudgetStayOnQuic) {
  // Room for one ring per rank: each rank reaches at most one peer through
  // shared memory, the rest over QUIC, with the same results.
  nexar_comm_options_t o = options(NEXAR_SHM_AUTO, (2u << 20) + 8192);
  World w(4, &o);
  ASSERT_TRUE(w.ok());
  exchange_all_pairs(w, {1, 100000});
  uint64_t pairs = 0;
  for (uint32_t r = 0; r < w.size(); ++r) {
    nexar_stats_t s = stats(w[r]);
    EXPECT_LE(s.shm_pairs, 1u) << "rank " << r;
    pairs += s.shm_pairs;
  }
  EXPECT_GE(pairs, 2u);  // at least one pair could use it
}

TEST(SameHost, RequireFailsCreationWhenAPairCannotUseIt) {
  nexar_comm_options_t o = options(NEXAR_SHM_REQUIRE, 1u << 20);  // below one ring
  std::vector<nexar_comm_t *> comms(2, nullptr);
  const nexar_status_t s = nexar_bootstrap_local(comms.data(), 2, &o);
  ASSERT_NE(s, NEXAR_OK);
  EXPECT_NE(std::string(nexar_last_error_message()).find("NEXAR_SHM=require"), std::string::npos)
      << nexar_last_error_message();
}

TEST(SameHost, InvalidModeIsRefused) {
  nexar_comm_options_t o = options(7);
  std::vector<nexar_comm_t *> comms(2, nullptr);
  EXPECT_EQ(nexar_bootstrap_local(comms.data(), 2, &o), NEXAR_ERR_INVALID_ARGUMENT);
}

// A process that is not a member finds the socket (abstract names are listed
// in /proc/net/unix) and asks for a segment with a forged proof: it gets the
// socket closed on it and no descriptor; the members carry on.
TEST(SameHost, StrangerWithoutTheSessionGetsNoSegment) {
  nexar_comm_options_t o = options(NEXAR_SHM_AUTO);
  World w(2, &o);
  ASSERT_TRUE(w.ok());
  // This process's listening sockets only: other programs on the machine
  // (other tests) come and go.
  std::set<std::string> mine;
  for (const auto &e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) mine.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> names;
  std::ifstream f("/proc/net/unix");
  for (std::string line; std::getline(f, line);) {
    const size_t at = line.find("@nexar-shm-");
    if (at == std::string::npos) continue;
    std::istringstream fields(line);
    std::string field, inode;
    for (int i = 0; i < 7 && fields >> field; ++i)
      inode = field;  // Num RefCount Protocol Flags Type St Inode
    if (mine.count(inode)) names.push_back(line.substr(at + 1));
  }
  ASSERT_FALSE(names.empty());
  int tried = 0;
  for (const std::string &name : names) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path + 1, name.data(), name.size());
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr *>(&a), len), 0) << strerror(errno);
    // magic "NXSH", version 1, rank 1, slot 0, a proof of zeros: a well-formed
    // hello, refused (no pair with rank 1 waits for one, and the proof is not
    // the session's).
    uint8_t hello[52] = {'N', 'X', 'S', 'H', 1, 0, 0, 0, 1};
    ++tried;
    ASSERT_EQ(send(fd, hello, sizeof hello, 0), static_cast<ssize_t>(sizeof hello));
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t buf[128];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    iovec iov{buf, sizeof buf};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd, &m, 0);
    EXPECT_EQ(n, 0) << "the stranger got an answer";
    EXPECT_EQ(CMSG_FIRSTHDR(&m), nullptr) << "the stranger got a descriptor";
    close(fd);
  }
  EXPECT_GT(tried, 0) << "no socket to try";
  exchange_all_pairs(w, {1000});
  EXPECT_EQ(stats(w[0]).shm_pairs, 1u);
}

// kill -9 of one of n local ranks while they allreduce: the hang-up of the
// same-host channels tells the survivors at once; every survivor's loop fails
// with PEER_FAILED naming it long before any timeout could have told it (the
// heartbeat timeout is 60 s here); no hang, no crash. With keeper, the victim
// forked a child that holds its sockets: none hangs up, and its process
// ending must tell instead.
namespace {

void kill_one_of_local_ranks(int n, int victim, bool keeper = false) {
  using namespace cluster_test;
  TempDir dir;
  std::string addr;
  auto seed = start_seed(
      dir, "seed", {"--world-size", std::to_string(n), "--token-file", write_token(dir)}, &addr);
  Proc::Env env{{"NEXAR_SEED", addr},
                {"NEXAR_CLUSTER_TOKEN", kToken},
                {"NEXAR_HEARTBEAT_TIMEOUT_SECS", "60"},
                {"NEXAR_COLLECTIVE_TIMEOUT_SECS", "120"}};
  std::vector<std::unique_ptr<Proc>> ws;
  for (int r = 0; r < n; ++r) {
    env["NEXAR_RANK"] = std::to_string(r);
    std::vector<std::string> args{"--allreduce-loop", "90"};
    if (keeper && r == victim) args.push_back("--fork-keeper");
    ws.push_back(worker(dir, "w" + std::to_string(r), env, args));
  }
  for (auto &p : ws)
    ASSERT_TRUE(p->wait_output("LOOPING", 60)) << p->dump();
  // The keeper is the victim's child, not this process's: killed at the end.
  pid_t kept = 0;
  if (keeper) {
    const std::string out = ws[victim]->out(),
                      key = "KEEPER rank=" + std::to_string(victim) + " pid=";
    ASSERT_NE(out.find(key), std::string::npos) << ws[victim]->dump();
    kept = static_cast<pid_t>(std::stol(out.substr(out.find(key) + key.size())));
    ASSERT_GT(kept, 0);
  }
  struct KillAtEnd {
    pid_t pid;
    ~KillAtEnd() {
      if (pid > 0) kill(pid, SIGKILL);
    }
  } kill_keeper{kept};
  for (auto &p : ws)
    EXPECT_TRUE(contains(p->out(), "shm_pairs=" + std::to_string(n - 1))) << p->dump();
  const auto killed = std::chrono::steady_clock::now();
  ws[victim]->kill_now();
  const std::string named = "status=-5 failed_rank=" + std::to_string(victim);
  const std::string hung_up =
      "rank " + std::to_string(victim) +
      (keeper ? " died: its process ended" : " died: its same-host channel hung up");
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    ASSERT_TRUE(ws[r]->wait_output("LOOP_FAILED", 30)) << ws[r]->dump();
    const double took = seconds_since(killed);
    EXPECT_LT(took, 20.0) << ws[r]->dump();
    // Every survivor names the victim, from its own channel's hang-up or
    // from the survivor that saw it first.
    EXPECT_TRUE(contains(ws[r]->out(), named)) << ws[r]->dump();
    EXPECT_TRUE(contains(ws[r]->out(), hung_up)) << ws[r]->dump();
    printf("rank %d failed %.3f s after rank %d was killed\n", r, took, victim);
  }
  for (int r = 0; r < n; ++r)
    if (r != victim) EXPECT_TRUE(ws[r]->wait(30)) << ws[r]->dump();
}

}  // namespace

namespace {

// Whether this host lets a process read a sibling's memory
// (process_vm_readv under the ptrace rules): two children of this process,
// the second reading the first.
bool host_lets_siblings_read_each_other() {
  static uint64_t word = 0x5eed5eed5eed5eedull;
  const pid_t first = fork();
  if (first == 0) {
    pause();
    _exit(0);
  }
  const pid_t second = fork();
  if (second == 0) {
    uint64_t seen = 0;
    iovec local{&seen, sizeof seen}, remote{&word, sizeof word};
    const ssize_t n = process_vm_readv(first, &local, 1, &remote, 1, 0);
    _exit(n == static_cast<ssize_t>(sizeof seen) && seen == word ? 0 : 1);
  }
  int status = 0;
  waitpid(second, &status, 0);
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A seed and two cluster workers, ranks 0 and 1, run with args and the
// seed's address and token added to env.
struct TwoWorkers {
  std::unique_ptr<cluster_test::Proc> seed;
  std::vector<std::unique_ptr<cluster_test::Proc>> ws;
};
TwoWorkers two_workers(const cluster_test::TempDir &dir, const std::vector<std::string> &args,
                       cluster_test::Proc::Env env = {}) {
  using namespace cluster_test;
  TwoWorkers t;
  std::string addr;
  t.seed = start_seed(dir, "seed", {"--world-size", "2", "--token-file", write_token(dir)}, &addr);
  env["NEXAR_SEED"] = addr;
  env["NEXAR_CLUSTER_TOKEN"] = kToken;
  for (int r = 0; r < 2; ++r) {
    env["NEXAR_RANK"] = std::to_string(r);
    t.ws.push_back(worker(dir, "w" + std::to_string(r), env, args));
  }
  return t;
}

}  // namespace

// Two processes of one host: an allgather of 256 KiB and an alltoall of
// 1 MiB per rank, and a broadcast of 512 KiB from rank 0, and the same of
// 16 KiB or more per reader, which take one step, copy straight out of the
// peer's process where the host allows it (NEXAR_SHM_CMA=on), and through
// the shared segments with NEXAR_SHM_CMA=off (or where it does not); with
// auto, one or the other as the rank measured its host. Smaller ones always
// go through the segments. Every byte exact either way.
TEST(SameHost, LargeMovementBetweenProcessesReadsThePeerDirectly) {
  using namespace cluster_test;
  const bool allowed = host_lets_siblings_read_each_other();
  for (const std::string cma : {"on", "off", "auto"}) {
    TempDir dir;
    TwoWorkers two = two_workers(dir, {"--movement"}, {{"NEXAR_SHM_CMA", cma}});
    auto &ws = two.ws;
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(ws[r]->wait(120)) << ws[r]->dump();
      EXPECT_EQ(ws[r]->code(), 0) << ws[r]->dump();
      const std::string out = ws[r]->out();
      const size_t at = out.find("MOVEMENT_OK rank=" + std::to_string(r));
      ASSERT_NE(at, std::string::npos) << ws[r]->dump();
      EXPECT_TRUE(contains(out, "shm_pairs=1")) << ws[r]->dump();
      const std::string key = "shm_bytes_read_directly=";
      const unsigned long long direct = std::stoull(out.substr(out.find(key, at) + key.size()));
      // Its peer's 256 KiB block and its 1 MiB block of the alltoall, rank 1
      // the broadcast too; the same of the mid-sized round (one step each);
      // nothing of the small one.
      const unsigned long long all = (256ull << 10) + (1ull << 20) + (r == 1 ? 512ull << 10 : 0) +
                                     (24ull << 10) + (20ull << 10) + (r == 1 ? 40ull << 10 : 0);
      if (cma == "on" && allowed)
        EXPECT_EQ(direct, all) << ws[r]->dump();
      else if (cma == "auto" && allowed)
        EXPECT_TRUE(direct == 0 || direct == all) << direct << "\n" << ws[r]->dump();
      else
        EXPECT_EQ(direct, 0u) << "NEXAR_SHM_CMA=" << cma << "\n" << ws[r]->dump();
    }
  }
  if (!allowed) printf("this host does not let processes read their siblings' memory\n");
}

TEST(SameHost, KilledLocalRankIsNamedAtOnce) {
  kill_one_of_local_ranks(4, 2);
}

TEST(SameHost, KilledLocalRankOfTwoIsNamedAtOnce) {
  kill_one_of_local_ranks(2, 0);
}

TEST(SameHost, KilledLocalRankWhoseChildHoldsItsSocketsIsNamedAtOnce) {
  kill_one_of_local_ranks(3, 1, true);
}

// Symmetric memory through the C ABI: a 4 MiB message from it (which
// travels by reference) and a broadcast out of it arrive exactly; freeing
// checks what it frees. With shared memory off the same calls work on
// ordinary memory.
TEST(SameHost, SymmetricMemoryCarriesMessagesExactly) {
  for (uint32_t mode : {NEXAR_SHM_AUTO, NEXAR_SHM_OFF}) {
    nexar_comm_options_t o = options(mode);
    World w(2, &o);
    ASSERT_TRUE(w.ok());
    const size_t n = (4u << 20) / sizeof(uint32_t);
    std::vector<uint32_t *> bufs(2);
    for (uint32_t r = 0; r < 2; ++r) {
      void *p = nullptr;
      ASSERT_EQ(nexar_mem_alloc(w[r], n * sizeof(uint32_t), &p), NEXAR_OK)
          << nexar_last_error_message();
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
      bufs[r] = static_cast<uint32_t *>(p);
      for (size_t i = 0; i < n; ++i)
        bufs[r][i] = static_cast<uint32_t>(i * 2654435761u + r);
    }
    std::vector<uint32_t> got(n);
    on_each_rank(2, [&](uint32_t r) {
      if (r == 0)
        EXPECT_EQ(nexar_send(w[0], bufs[0], n * sizeof(uint32_t), 1, 9, nullptr, nullptr), NEXAR_OK)
            << nexar_last_error_message();
      else
        EXPECT_EQ(nexar_recv(w[1], got.data(), n * sizeof(uint32_t), 0, 9, nullptr, nullptr),
                  NEXAR_OK)
            << nexar_last_error_message();
    });
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], static_cast<uint32_t>(i * 2654435761u)) << "element " << i;
    on_each_rank(2, [&](uint32_t r) {
      EXPECT_EQ(nexar_broadcast(w[r], bufs[r], n, NEXAR_DTYPE_U32, 1, nullptr, nullptr), NEXAR_OK)
          << nexar_last_error_message();
    });
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(bufs[0][i], static_cast<uint32_t>(i * 2654435761u + 1)) << "element " << i;
    if (mode == NEXAR_SHM_AUTO) EXPECT_EQ(stats(w[0]).shm_pairs, 1u);
    for (uint32_t r = 0; r < 2; ++r) {
      EXPECT_EQ(nexar_mem_free(w[r], bufs[r]), NEXAR_OK);
      EXPECT_EQ(nexar_mem_free(w[r], bufs[r]), NEXAR_ERR_INVALID_ARGUMENT) << "freed twice";
      EXPECT_NE(std::string(nexar_last_error_message()).find("nexar_mem_free"), std::string::npos);
    }
    int local = 0;
    EXPECT_EQ(nexar_mem_free(w[0], &local), NEXAR_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(nexar_mem_free(w[0], nullptr), NEXAR_OK);
    void *p = nullptr;
    EXPECT_EQ(nexar_mem_alloc(w[0], 0, &p), NEXAR_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(nexar_mem_alloc(nullptr, 64, &p), NEXAR_ERR_INVALID_ARGUMENT);
  }
}

namespace {

// Allreduce of order-dependent floats, in place on odd ranks, from buffers of
// nexar_mem_alloc when symmetric is set.
std::vector<std::vector<float>> mixed_allreduce(const World &w, size_t count, bool symmetric) {
  std::vector<std::vector<float>> out(w.size(), std::vector<float>(count));
  on_each_rank(w.size(), [&](uint32_t r) {
    float *in = nullptr, *res = out[r].data();
    std::vector<float> plain(count);
    void *p = nullptr;
    if (symmetric) {
      EXPECT_EQ(nexar_mem_alloc(w[r], count * sizeof(float), &p), NEXAR_OK);
      in = static_cast<float *>(p);
    } else {
      in = plain.data();
    }
    for (size_t i = 0; i < count; ++i)
      in[i] = 1.0f / static_cast<float>(1 + (i * 7 + r * 13) % 1001) * (r % 2 ? 1e-3f : 1e3f);
    float *dst = r % 2 ? in : res;
    EXPECT_EQ(
        nexar_allreduce(w[r], in, dst, count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr, nullptr),
        NEXAR_OK)
        << nexar_last_error_message();
    if (dst != res) memcpy(res, dst, count * sizeof(float));
    if (p) EXPECT_EQ(nexar_mem_free(w[r], p), NEXAR_OK);
  });
  return out;
}

}  // namespace

// Allreduce, broadcast and barrier among the ranks of one host read straight
// out of each other's segments (counted in shm_collectives), and give the
// bits the message path gives with NEXAR_SHM=off, for every size class
// (whole vector, sliced, several chunks) and world size.
TEST(SameHost, CollectivesReadThePeersSegmentsWithTheMessagePathsBits) {
  const std::vector<size_t> counts = {1, 1000, 5000, 300001, (1u << 20) + 5};
  for (uint32_t n : {2u, 3u, 4u}) {
    std::vector<std::vector<std::vector<float>>> results[2];
    // Direct reads wherever the host allows them, fast or not here.
    ScopedEnv cma("NEXAR_SHM_CMA", "on");
    for (int mode = 0; mode < 2; ++mode) {
      nexar_comm_options_t o = options(mode == 0 ? NEXAR_SHM_AUTO : NEXAR_SHM_OFF);
      World w(n, &o);
      ASSERT_TRUE(w.ok());
      for (size_t count : counts)
        results[mode].push_back(mixed_allreduce(w, count, mode == 0 && count > 100000));
      // Broadcast from the last rank, several chunks, then a barrier.
      const size_t bytes = (3u << 20) + 7;
      std::vector<std::vector<uint8_t>> buf(n, std::vector<uint8_t>(bytes));
      for (size_t i = 0; i < bytes; ++i)
        buf[n - 1][i] = static_cast<uint8_t>(i * 131 + 7);
      on_each_rank(n, [&](uint32_t r) {
        EXPECT_EQ(
            nexar_broadcast(w[r], buf[r].data(), bytes, NEXAR_DTYPE_U8, n - 1, nullptr, nullptr),
            NEXAR_OK)
            << nexar_last_error_message();
        EXPECT_EQ(nexar_barrier(w[r], nullptr, nullptr), NEXAR_OK) << nexar_last_error_message();
      });
      for (uint32_t r = 0; r < n; ++r)
        ASSERT_EQ(buf[r], buf[n - 1]) << "rank " << r;
      // One from rank 0 that the others read straight out of its buffer
      // (in-process ranks: the process reads itself), one step.
      const size_t direct = 300001;
      for (uint32_t r = 0; r < n; ++r)
        for (size_t i = 0; i < direct; ++i)
          buf[r][i] = r == 0 ? static_cast<uint8_t>(i * 17 + 3) : 0;
      on_each_rank(n, [&](uint32_t r) {
        EXPECT_EQ(nexar_broadcast(w[r], buf[r].data(), direct, NEXAR_DTYPE_U8, 0, nullptr, nullptr),
                  NEXAR_OK)
            << nexar_last_error_message();
      });
      for (uint32_t r = 1; r < n; ++r)
        ASSERT_EQ(memcmp(buf[r].data(), buf[0].data(), direct), 0) << "rank " << r;
      for (uint32_t r = 0; r < n; ++r) {
        const nexar_stats_t s = stats(w[r]);
        if (mode == 0) {
          // Every allreduce, the broadcasts and the barrier.
          EXPECT_EQ(s.shm_collectives, counts.size() + 3) << n << " ranks, rank " << r;
          EXPECT_GT(s.shm_bytes_by_reference, 0u) << n << " ranks, rank " << r;
          EXPECT_EQ(s.shm_bytes_read_directly, r == 0 ? 0u : direct) << n << " ranks, rank " << r;
        } else {
          EXPECT_EQ(s.shm_collectives, 0u);
        }
      }
    }
    for (size_t k = 0; k < counts.size(); ++k)
      for (uint32_t r = 0; r < n; ++r) {
        const auto &on = results[0][k][r], &off = results[1][k][r];
        ASSERT_EQ(memcmp(on.data(), off.data(), on.size() * sizeof(float)), 0)
            << n << " ranks, count " << counts[k] << ", rank " << r;
        ASSERT_EQ(memcmp(on.data(), results[0][k][0].data(), on.size() * sizeof(float)), 0)
            << n << " ranks, count " << counts[k] << ", rank " << r;
      }
  }
}

// Ranks that call different collectives on shared memory all fail with
// NEXAR_ERR_MISMATCH (the broadcast's root too, though it only publishes),
// and the communicator works on: its members decide afresh, with new areas.
TEST(SameHost, MismatchedCollectivesOnSharedMemoryFailEveryRankAndTheNextOneWorks) {
  nexar_comm_options_t o = options(NEXAR_SHM_AUTO);
  o.collective_timeout_ms = 20000;
  World w(3, &o);
  ASSERT_TRUE(w.ok());
  std::vector<std::vector<float>> buf(3, std::vector<float>(600000, 1.0f));
  auto all = [&](const std::function<nexar_status_t(uint32_t)> &call, nexar_status_t want) {
    on_each_rank(3, [&](uint32_t r) {
      EXPECT_EQ(call(r), want) << "rank " << r << ": " << nexar_last_error_message();
      if (want == NEXAR_ERR_MISMATCH)
        EXPECT_NE(std::string(nexar_last_error_message()).find("different collective"),
                  std::string::npos)
            << nexar_last_error_message();
    });
  };
  auto allreduce = [&](uint32_t r, size_t count) {
    return nexar_allreduce(w[r], buf[r].data(), buf[r].data(), count, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                           nullptr, nullptr);
  };
  // Decided on shared memory by a first, matching allreduce.
  all([&](uint32_t r) { return allreduce(r, 10); }, NEXAR_OK);
  // Counts that give different numbers of chunks.
  all([&](uint32_t r) { return allreduce(r, r == 0 ? 300000 : 600000); }, NEXAR_ERR_MISMATCH);
  // A root that broadcasts while the others enter a barrier.
  all(
      [&](uint32_t r) {
        return r == 0 ? nexar_broadcast(w[r], buf[r].data(), 1000, NEXAR_DTYPE_F32, 0, nullptr,
                                        nullptr)
                      : nexar_barrier(w[r], nullptr, nullptr);
      },
      NEXAR_ERR_MISMATCH);
  for (auto &b : buf)
    std::fill(b.begin(), b.end(), 1.0f);
  const uint64_t before = stats(w[0]).shm_collectives;
  all([&](uint32_t r) { return allreduce(r, 600000); }, NEXAR_OK);
  for (uint32_t r = 0; r < 3; ++r)
    ASSERT_EQ(buf[r], std::vector<float>(600000, 3.0f)) << "rank " << r;
  EXPECT_EQ(stats(w[0]).shm_collectives, before + 1) << "back on shared memory";
}

namespace {

// Where a collective's buffers are: plain memory, in place (allgather's
// own block inside recvbuf, alltoall's send == recv, the root's buffers of
// gather and scatter overlapping), and from nexar_mem_alloc on every rank,
// on even ranks only (the others copy through their slots), or in place.
enum class Buffers { Plain, InPlace, Symmetric, HalfSymmetric, SymmetricInPlace };

// Element i of the block that rank `from` contributes for rank `to` (0 for
// the single block of allgather and gather).
uint32_t element(uint32_t from, uint32_t to, size_t i) {
  return from * 1000003u + to * 7919u + static_cast<uint32_t>(i) * 2654435761u;
}

// count elements of one rank, from nexar_mem_alloc if symmetric.
class RankBuffer {
 public:
  RankBuffer(nexar_comm_t *comm, size_t count, bool symmetric) : comm_(comm), plain_(count) {
    data_ = plain_.data();
    if (!symmetric) return;
    void *p = nullptr;
    EXPECT_EQ(nexar_mem_alloc(comm, count * sizeof(uint32_t), &p), NEXAR_OK)
        << nexar_last_error_message();
    if (p) data_ = static_cast<uint32_t *>(p);
  }
  ~RankBuffer() {
    if (data_ != plain_.data()) EXPECT_EQ(nexar_mem_free(comm_, data_), NEXAR_OK);
  }
  RankBuffer(const RankBuffer &) = delete;
  RankBuffer &operator=(const RankBuffer &) = delete;
  uint32_t *data() { return data_; }

 private:
  nexar_comm_t *comm_;
  std::vector<uint32_t> plain_;
  uint32_t *data_;
};

enum Movement { kAllgather, kGather, kScatter, kAlltoall, kMovements };
const char *const kMovementNames[] = {"allgather", "gather", "scatter", "alltoall"};
// [collective][rank]: what the rank received (gather: the root only).
using MovementResults = std::vector<std::vector<std::vector<uint32_t>>>;

// Scatter's and alltoall's blocks: every rank's data about count elements,
// as allgather's, so that each takes as many tickets.
size_t per_destination(size_t count, uint32_t n) {
  return count / n + 1;
}

// Allgather and gather (root: the last rank) of blocks of count elements,
// scatter (the same root) and alltoall of per_destination(count) elements.
MovementResults movement_results(const World &w, size_t count, Buffers b) {
  const uint32_t n = w.size(), root = n - 1;
  const size_t spread = per_destination(count, n);
  MovementResults out(kMovements, std::vector<std::vector<uint32_t>>(n));
  on_each_rank(n, [&](uint32_t r) {
    const bool sym = b == Buffers::Symmetric || b == Buffers::SymmetricInPlace ||
                     (b == Buffers::HalfSymmetric && r % 2 == 0);
    const bool in_place = b == Buffers::InPlace || b == Buffers::SymmetricInPlace;
    const std::string where = "rank " + std::to_string(r) + ": ";
    {
      RankBuffer recv(w[r], n * count, sym), send(w[r], count, sym);
      uint32_t *s = in_place ? recv.data() + r * count : send.data();
      for (size_t i = 0; i < count; ++i)
        s[i] = element(r, 0, i);
      EXPECT_EQ(nexar_allgather(w[r], s, recv.data(), count, NEXAR_DTYPE_U32, nullptr, nullptr),
                NEXAR_OK)
          << where << nexar_last_error_message();
      out[kAllgather][r].assign(recv.data(), recv.data() + n * count);
    }
    {
      RankBuffer recv(w[r], n * count, sym), send(w[r], count, sym);
      uint32_t *s = in_place && r == root ? recv.data() + root * count : send.data();
      for (size_t i = 0; i < count; ++i)
        s[i] = element(r, 0, i);
      EXPECT_EQ(nexar_gather(w[r], s, recv.data(), count, NEXAR_DTYPE_U32, root, nullptr, nullptr),
                NEXAR_OK)
          << where << nexar_last_error_message();
      if (r == root) out[kGather][r].assign(recv.data(), recv.data() + n * count);
    }
    {
      RankBuffer send(w[r], n * spread, sym), recv(w[r], spread, sym);
      uint32_t *d = in_place && r == root ? send.data() + root * spread : recv.data();
      if (r == root)
        for (uint32_t to = 0; to < n; ++to)
          for (size_t i = 0; i < spread; ++i)
            send.data()[to * spread + i] = element(root, to, i);
      EXPECT_EQ(
          nexar_scatter(w[r], send.data(), d, spread, NEXAR_DTYPE_U32, root, nullptr, nullptr),
          NEXAR_OK)
          << where << nexar_last_error_message();
      out[kScatter][r].assign(d, d + spread);
    }
    {
      RankBuffer send(w[r], n * spread, sym), recv(w[r], n * spread, sym);
      uint32_t *d = in_place ? send.data() : recv.data();
      for (uint32_t to = 0; to < n; ++to)
        for (size_t i = 0; i < spread; ++i)
          send.data()[to * spread + i] = element(r, to, i);
      EXPECT_EQ(nexar_alltoall(w[r], send.data(), d, spread, NEXAR_DTYPE_U32, nullptr, nullptr),
                NEXAR_OK)
          << where << nexar_last_error_message();
      out[kAlltoall][r].assign(d, d + n * spread);
    }
  });
  return out;
}

// The first element of got that differs from what the collective should
// have given, or -1.
int64_t first_wrong(Movement m, const std::vector<uint32_t> &got, uint32_t r, uint32_t n,
                    size_t count) {
  const size_t blocks = m == kScatter ? 1 : n;
  if (got.size() != blocks * count) return 0;
  for (size_t j = 0; j < got.size(); ++j) {
    const uint32_t from = static_cast<uint32_t>(j / count);
    const size_t i = j % count;
    const uint32_t want = m == kScatter    ? element(n - 1, r, i)
                          : m == kAlltoall ? element(from, r, i)
                                           : element(from, 0, i);
    if (got[j] != want) return static_cast<int64_t>(j);
  }
  return -1;
}

}  // namespace

// Allgather, gather, scatter and alltoall among the ranks of one host read
// straight out of each other's segments (counted in shm_collectives): exact
// results, the same as NEXAR_SHM=off's, with one ticket, several, and
// buffers of nexar_mem_alloc read where they lie, plain and in place.
TEST(SameHost, MovementCollectivesReadThePeersSegmentsExactly) {
  // One ticket, then several (a part is 1 MiB, or 1 MiB / ranks per
  // destination); nexar_mem_alloc buffers only where they are read where
  // they lie (64 KiB or more). The message path runs the plain cases too.
  const size_t small = 1000, large = 270001;
  const std::vector<std::pair<size_t, Buffers>> cases = {
      {small, Buffers::Plain},           {small, Buffers::InPlace},
      {large, Buffers::Plain},           {large, Buffers::InPlace},
      {large, Buffers::Symmetric},       {large, Buffers::HalfSymmetric},
      {large, Buffers::SymmetricInPlace}};
  auto on_messages_too = [](Buffers b) { return b == Buffers::Plain; };
  for (uint32_t n : {2u, 3u, 4u}) {
    std::vector<MovementResults> results[2];
    // Direct reads wherever the host allows them, fast or not here.
    ScopedEnv cma("NEXAR_SHM_CMA", "on");
    for (int mode = 0; mode < 2; ++mode) {
      nexar_comm_options_t o = options(mode == 0 ? NEXAR_SHM_AUTO : NEXAR_SHM_OFF);
      World w(n, &o);
      ASSERT_TRUE(w.ok());
      for (size_t k = 0; k < cases.size(); ++k) {
        const auto [count, buffers] = cases[k];
        if (mode == 1 && !on_messages_too(buffers)) continue;
        results[mode].push_back(movement_results(w, count, buffers));
        const MovementResults &got = results[mode].back();
        for (int m = 0; m < kMovements; ++m)
          for (uint32_t r = 0; r < n; ++r) {
            if (m == kGather && r != n - 1) continue;
            const size_t block =
                m == kScatter || m == kAlltoall ? per_destination(count, n) : count;
            ASSERT_EQ(first_wrong(static_cast<Movement>(m), got[m][r], r, n, block), -1)
                << kMovementNames[m] << ", " << n << " ranks, rank " << r << ", case " << k
                << ", shared memory " << (mode == 0 ? "auto" : "off");
          }
      }
      for (uint32_t r = 0; r < n; ++r) {
        const nexar_stats_t s = stats(w[r]);
        if (mode == 0) {
          EXPECT_EQ(s.shm_collectives, kMovements * cases.size()) << n << " ranks, rank " << r;
          EXPECT_GT(s.shm_bytes_by_reference, 0u) << n << " ranks, rank " << r;
          // The large plain buffers: read straight out of the process.
          EXPECT_GT(s.shm_bytes_read_directly, 0u) << n << " ranks, rank " << r;
        } else {
          EXPECT_EQ(s.shm_collectives, 0u);
        }
      }
    }
    for (size_t k = 0, off = 0; k < cases.size(); ++k)
      if (on_messages_too(cases[k].second))
        EXPECT_EQ(results[0][k], results[1][off++]) << n << " ranks, case " << k;
  }
}

// Large results copied out of the segments (no direct reads): those whose
// members together touch 64 MiB or more go out with streaming stores, into
// blocks that start off a 16-byte boundary; every element exact.
TEST(SameHost, LargeResultsThroughTheSegmentsAreExact) {
  ScopedEnv cma("NEXAR_SHM_CMA", "off");
  const uint32_t n = 4;
  nexar_comm_options_t o = options(NEXAR_SHM_REQUIRE);
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  const size_t count = (4u << 20) / sizeof(uint32_t) + 1;  // allgather: 16 MiB out
  const MovementResults got = movement_results(w, count, Buffers::Plain);
  for (int m = 0; m < kMovements; ++m)
    for (uint32_t r = 0; r < n; ++r) {
      if (m == kGather && r != n - 1) continue;
      const size_t block = m == kScatter || m == kAlltoall ? per_destination(count, n) : count;
      ASSERT_EQ(first_wrong(static_cast<Movement>(m), got[m][r], r, n, block), -1)
          << kMovementNames[m] << ", rank " << r;
    }
  // A 16 MiB broadcast, 4 bytes past a 16-byte boundary.
  const size_t words = (16u << 20) / sizeof(uint32_t) + 1;
  std::vector<std::vector<uint32_t>> buf(n, std::vector<uint32_t>(words + 1));
  for (size_t i = 0; i < words; ++i)
    buf[1][i + 1] = element(1, 0, i);
  on_each_rank(n, [&](uint32_t r) {
    EXPECT_EQ(nexar_broadcast(w[r], buf[r].data() + 1, words, NEXAR_DTYPE_U32, 1, nullptr, nullptr),
              NEXAR_OK)
        << "rank " << r << ": " << nexar_last_error_message();
  });
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_EQ(buf[r][0], 0u) << "broadcast wrote before its buffer, rank " << r;
    for (size_t i = 0; i < words; ++i)
      ASSERT_EQ(buf[r][i + 1], element(1, 0, i)) << "broadcast, rank " << r << ", element " << i;
    const nexar_stats_t s = stats(w[r]);
    EXPECT_EQ(s.shm_collectives, kMovements + 1u) << "rank " << r;
    EXPECT_EQ(s.shm_bytes_read_directly, 0u) << "rank " << r;
  }
}

// Ranks that call different movement collectives on shared memory (other
// counts, gather against scatter, alltoall against allgather) all fail with
// NEXAR_ERR_MISMATCH, those that only publish too, and the next one works.
TEST(SameHost, MismatchedMovementCollectivesFailEveryRankAndTheNextOneWorks) {
  nexar_comm_options_t o = options(NEXAR_SHM_AUTO);
  o.collective_timeout_ms = 20000;
  const uint32_t n = 3;
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  const size_t most = 600000;
  std::vector<std::vector<uint32_t>> send(n, std::vector<uint32_t>(n * most)),
      recv(n, std::vector<uint32_t>(n * most));
  auto all = [&](const std::function<nexar_status_t(uint32_t)> &call, nexar_status_t want) {
    on_each_rank(n, [&](uint32_t r) {
      EXPECT_EQ(call(r), want) << "rank " << r << ": " << nexar_last_error_message();
      if (want == NEXAR_ERR_MISMATCH)
        EXPECT_NE(std::string(nexar_last_error_message()).find("different collective"),
                  std::string::npos)
            << nexar_last_error_message();
    });
  };
  auto allgather = [&](uint32_t r, size_t count) {
    return nexar_allgather(w[r], send[r].data(), recv[r].data(), count, NEXAR_DTYPE_U32, nullptr,
                           nullptr);
  };
  auto gather = [&](uint32_t r) {
    return nexar_gather(w[r], send[r].data(), recv[r].data(), 1000, NEXAR_DTYPE_U32, 0, nullptr,
                        nullptr);
  };
  auto scatter = [&](uint32_t r, uint32_t root = 0) {
    return nexar_scatter(w[r], send[r].data(), recv[r].data(), 1000, NEXAR_DTYPE_U32, root, nullptr,
                         nullptr);
  };
  all([&](uint32_t r) { return allgather(r, 1000); }, NEXAR_OK);
  // Counts that give different numbers of tickets.
  all([&](uint32_t r) { return allgather(r, r == 0 ? 300000 : most); }, NEXAR_ERR_MISMATCH);
  // Gather's root against scatter's other members, and the other way round.
  all([&](uint32_t r) { return r == 0 ? gather(r) : scatter(r); }, NEXAR_ERR_MISMATCH);
  all([&](uint32_t r) { return r == 0 ? scatter(r) : gather(r); }, NEXAR_ERR_MISMATCH);
  // Ranks that disagree about the root: none of them is one.
  all([&](uint32_t r) { return scatter(r, r == 0 ? 1 : 0); }, NEXAR_ERR_MISMATCH);
  all(
      [&](uint32_t r) {
        return r == 1 ? nexar_alltoall(w[r], send[r].data(), recv[r].data(), 1000, NEXAR_DTYPE_U32,
                                       nullptr, nullptr)
                      : allgather(r, 1000);
      },
      NEXAR_ERR_MISMATCH);
  for (uint32_t r = 0; r < n; ++r)
    for (size_t i = 0; i < most; ++i)
      send[r][i] = element(r, 0, i);
  const uint64_t before = stats(w[0]).shm_collectives;
  all([&](uint32_t r) { return allgather(r, most); }, NEXAR_OK);
  for (uint32_t r = 0; r < n; ++r)
    ASSERT_EQ(first_wrong(kAllgather, recv[r], r, n, most), -1) << "rank " << r;
  EXPECT_EQ(stats(w[0]).shm_collectives, before + 1) << "back on shared memory";
}

// A child forked from a rank (a script's helper, a data loader) holds a copy
// of its parent's communicator, shared segments and sockets, but not its
// threads. Using the copy is refused with an error that says why, destroying
// it returns at once, and the child's exit() (atexit handlers, static
// destructors) neither hangs nor disturbs the parent, whose next allreduce
// works.
TEST(SameHost, AForkedChildCannotUseItsParentsCommunicatorNorBreakIt) {
  using namespace cluster_test;
  TempDir dir;
  TwoWorkers two = two_workers(dir, {"--fork-child"});
  auto &ws = two.ws;
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ws[r]->wait(120)) << ws[r]->dump();
    EXPECT_EQ(ws[r]->code(), 0) << ws[r]->dump();
    EXPECT_TRUE(contains(ws[r]->out(), "AFTER_FORK_OK rank=" + std::to_string(r))) << ws[r]->dump();
  }
  const std::string out = ws[0]->out();
  const std::string closed = std::to_string(NEXAR_ERR_CLOSED);
  EXPECT_TRUE(contains(out, "CHILD allreduce=" + closed + " mem_alloc=" + closed +
                                " abort=" + closed +
                                " nexar_allreduce: rank 0's communicator "
                                "belongs to process"))
      << ws[0]->dump();
  EXPECT_TRUE(contains(out, "was forked from it")) << ws[0]->dump();
  EXPECT_TRUE(contains(out, "CHILD_EXITED code=0")) << ws[0]->dump();
}
