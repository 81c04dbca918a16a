// What the multi-process cluster tests share: a real seed (nexar-seed) and
// workers that join it through the C ABI (tests/cluster/cluster_worker.c),
// started as child processes, and the checks that a world formed. The test
// target defines NEXAR_SEED_BIN and NEXAR_WORKER_BIN (tests/cluster/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../cluster/cluster_process.h"

namespace cluster_test {

// The token of every cluster here that is not testing a wrong one.
const char *const kToken = "a-test-cluster-token-0123456789";

inline std::string field(const std::string &text, const std::string &key) {
  // "key=value" up to the next space or newline.
  size_t at = text.find(key + "=");
  if (at == std::string::npos) return "";
  at += key.size() + 1;
  size_t end = text.find_first_of(" \n", at);
  return text.substr(at, end - at);
}

// Starts nexar-seed and waits until it prints the address it bound.
inline std::unique_ptr<Proc> start_seed(const TempDir &dir, const std::string &name,
                                        std::vector<std::string> args, std::string *address,
                                        const Proc::Env &env = {},
                                        const std::vector<std::string> &prefix = {}) {
  args.insert(args.begin(), NEXAR_SEED_BIN);
  auto p = std::make_unique<Proc>(dir, name, args, env, prefix);
  EXPECT_TRUE(p->wait_output("listening on ", 20)) << p->dump();
  const std::string out = p->out();
  size_t at = out.find("listening on ");
  if (at != std::string::npos) {
    at += 13;
    *address = out.substr(at, out.find(' ', at) - at);
  }
  return p;
}

inline std::string write_token(const TempDir &dir, const std::string &token = kToken) {
  const std::string path = dir / "token";
  FILE *f = fopen(path.c_str(), "w");
  fprintf(f, "%s\n", token.c_str());
  fclose(f);
  chmod(path.c_str(), 0600);
  return path;
}

inline std::unique_ptr<Proc> worker(const TempDir &dir, const std::string &name,
                                    const Proc::Env &env, std::vector<std::string> args = {},
                                    const std::vector<std::string> &prefix = {}) {
  args.insert(args.begin(), NEXAR_WORKER_BIN);
  return std::make_unique<Proc>(dir, name, args, env, prefix);
}

inline std::string dump_all(const std::vector<Proc *> &ps) {
  std::string s;
  for (Proc *p : ps)
    s += p->dump();
  return s;
}

// Every worker exits 0 with distinct ranks 0..n-1 and the seed reports the
// cluster formed.
inline void expect_world(Proc &seed, std::vector<std::unique_ptr<Proc>> &workers, uint32_t n,
                         double seconds = 90) {
  std::vector<Proc *> all{&seed};
  for (auto &w : workers)
    all.push_back(w.get());
  std::set<std::string> ranks;
  for (auto &w : workers) {
    ASSERT_TRUE(w->wait(seconds)) << w->name() << " did not finish\n" << dump_all(all);
    EXPECT_EQ(w->code(), 0) << dump_all(all);
    const std::string out = w->out();
    EXPECT_TRUE(contains(out, "DONE rank=")) << w->dump();
    EXPECT_TRUE(contains(out, "BARRIER_OK")) << w->dump();
    EXPECT_EQ(field(out, "size"), std::to_string(n)) << w->dump();
    ranks.insert(field(out, "JOINED rank"));
  }
  EXPECT_EQ(ranks.size(), n) << dump_all(all);
  ASSERT_TRUE(seed.wait(30)) << seed.dump();
  EXPECT_EQ(seed.code(), 0) << seed.dump();
  EXPECT_TRUE(contains(seed.out(), "cluster formed")) << seed.dump();
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// World of 3: real ranks 0 and 2, the probe (nexar-cluster-probe impostor)
// as rank 1 running `attacks` (comma-separated, tests/cluster/hostile_peer.h)
// against rank 0; then ranks 0 and 2 must still exchange exactly. The seed
// keeps its CA in a directory the probe reads (expired, not-yet-valid).
struct AttackedWorld {
  std::string probe, victim_out, victim_err;
};
inline AttackedWorld attacked_world(const std::string &attacks) {
  AttackedWorld o;
  TempDir dir;
  std::string addr;
  const std::string ca = dir / "ca";
  auto seed = start_seed(
      dir, "seed", {"--world-size", "3", "--token-file", write_token(dir), "--ca-dir", ca}, &addr);
  const std::string hold = dir / "attack-done";
  Proc::Env env{{"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}};
  env["NEXAR_RANK"] = "0";
  auto w0 = worker(dir, "w0", env, {"--skip-rank", "1", "--hold-file", hold});
  env["NEXAR_RANK"] = "2";
  auto w2 = worker(dir, "w2", env, {"--skip-rank", "1", "--hold-file", hold});
  Proc probe(dir, "probe",
             {NEXAR_PROBE_BIN, "impostor", "--seed", addr, "--token", kToken, "--rank", "1",
              "--target", "0", "--attack", attacks, "--done-file", hold, "--ca-dir", ca},
             {});
  for (Proc *w : {w0.get(), w2.get()}) {
    EXPECT_TRUE(w->wait(90)) << w->dump() << probe.dump();
    EXPECT_EQ(w->code(), 0) << w->dump() << probe.dump();
    // The exchange after the attacks: the world is unharmed.
    EXPECT_TRUE(
        contains(w->out(), "P2P_OK rank=" + field(w->out(), "JOINED rank") + " peers=1 bytes=5000"))
        << w->dump();
  }
  probe.kill_now();
  o.probe = probe.out();
  o.victim_out = w0->out();
  o.victim_err = w0->err();
  return o;
}

}  // namespace cluster_test
