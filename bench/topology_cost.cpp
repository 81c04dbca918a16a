// nexar-topology-cost: what a sparse mesh costs and saves, on in-process
// worlds (each rank its own engine), through the C ABI:
//   formation   ranks, topology, seconds to form, connections per rank
//   relayed     bytes forwarded by relays during one collective, as a share
//               of the payload bytes the ranks sent
//   median_s    median seconds of the collective (results checked exact)
// Not installed; run from the build tree:
//   nexar-topology-cost formation RANKS TOPOLOGY [RUNS]
//   nexar-topology-cost COLLECTIVE RANKS TOPOLOGY BYTES [ITERS]
// COLLECTIVE: allreduce, broadcast, allgather, gather, scatter or alltoall;
// BYTES: the buffer of allreduce and broadcast, all ranks' blocks together
// for the others (the root is rank 1).
// TOPOLOGY: full, ring, k_regular:K or hypercube (as NEXAR_TOPOLOGY).
#include <nexar.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

bool options_for(const char *topology, nexar_comm_options_t *o) {
  setenv("NEXAR_TOPOLOGY", topology, 1);
  const bool ok = nexar_comm_options_init(o, sizeof *o) == NEXAR_OK;
  if (!ok) fprintf(stderr, "%s\n", nexar_last_error_message());
  return ok;
}

nexar_stats_t stats_of(nexar_comm_t *c) {
  nexar_stats_t s{};
  s.struct_size = sizeof s;
  nexar_comm_get_stats(c, &s);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int formation(uint32_t n, const char *topology, int runs) {
  nexar_comm_options_t o;
  if (!options_for(topology, &o)) return 2;
  std::vector<double> secs;
  uint64_t most = 0, least = UINT64_MAX;
  for (int run = 0; run < runs; ++run) {
    std::vector<nexar_comm_t *> comms(n);
    const auto t0 = Clock::now();
    if (nexar_bootstrap_local(comms.data(), n, &o) != NEXAR_OK) {
      fprintf(stderr, "bootstrap: %s\n", nexar_last_error_message());
      return 1;
    }
    secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    for (nexar_comm_t *c : comms) {
      const uint64_t k = stats_of(c).connections;
      most = std::max(most, k);
      least = std::min(least, k);
    }
    for (nexar_comm_t *c : comms)
      nexar_comm_destroy(c);
  }
  printf("formation ranks=%u topology=%s median_s=%.3f connections_per_rank=%llu..%llu runs=%d\n",
         n, topology, median(secs), static_cast<unsigned long long>(least),
         static_cast<unsigned long long>(most), runs);
  return 0;
}

// One collective's buffers on one rank, filled so that the result is exact
// (small integers in floats), and its check.
struct Buffers {
  std::vector<float> in, out;
};

// Per rank of n: in and out of `op` for `bytes` (the whole buffer: of
// allreduce and broadcast, of all ranks' blocks for the others).
void fill(const std::string &op, uint32_t r, uint32_t n, size_t count, Buffers *b) {
  const size_t block = count / n;
  if (op == "allreduce" || op == "broadcast") {
    b->in.assign(count, op == "allreduce" ? 1.0f : (r == 1 % n ? 3.0f : 0.0f));
  } else if (op == "allgather" || op == "gather") {
    b->in.assign(block, static_cast<float>(r));
    b->out.assign(block * n, -1.0f);
  } else {  // scatter, alltoall: block j for rank j
    b->in.resize(block * n);
    for (uint32_t j = 0; j < n; ++j)
      std::fill_n(b->in.begin() + j * block, block, static_cast<float>(r * n + j));
    b->out.assign(block, -1.0f);
    if (op == "alltoall") b->out.assign(block * n, -1.0f);
  }
}

nexar_status_t run(const std::string &op, nexar_comm_t *c, uint32_t n, size_t count, Buffers *b) {
  const uint32_t root = 1 % n;  // not rank 0
  const size_t block = count / n;
  if (op == "allreduce")
    return nexar_allreduce(c, b->in.data(), b->in.data(), count, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                           nullptr, nullptr);
  if (op == "broadcast")
    return nexar_broadcast(c, b->in.data(), count, NEXAR_DTYPE_F32, root, nullptr, nullptr);
  if (op == "allgather")
    return nexar_allgather(c, b->in.data(), b->out.data(), block, NEXAR_DTYPE_F32, nullptr,
                           nullptr);
  if (op == "gather")
    return nexar_gather(c, b->in.data(), b->out.data(), block, NEXAR_DTYPE_F32, root, nullptr,
                        nullptr);
  if (op == "scatter")
    return nexar_scatter(c, b->in.data(), b->out.data(), block, NEXAR_DTYPE_F32, root, nullptr,
                         nullptr);
  return nexar_alltoall(c, b->in.data(), b->out.data(), block, NEXAR_DTYPE_F32, nullptr, nullptr);
}

// Whether rank r's result is exact.
bool exact(const std::string &op, uint32_t r, uint32_t n, const Buffers &b) {
  const uint32_t root = 1 % n;
  auto all = [](const std::vector<float> &v, size_t from, size_t len, float want) {
    return std::all_of(v.begin() + from, v.begin() + from + len,
                       [&](float x) { return x == want; });
  };
  if (op == "allreduce") return all(b.in, 0, b.in.size(), static_cast<float>(n));
  if (op == "broadcast") return all(b.in, 0, b.in.size(), 3.0f);
  const size_t block = b.out.size() / (op == "scatter" ? 1 : n);
  if (op == "scatter") return all(b.out, 0, block, static_cast<float>(root * n + r));
  if (op == "gather" && r != root) return true;
  for (uint32_t s = 0; s < n; ++s)
    if (!all(b.out, s * block, block, static_cast<float>(op == "alltoall" ? s * n + r : s)))
      return false;
  return true;
}

int collective(const std::string &op, uint32_t n, const char *topology, size_t bytes, int iters) {
  nexar_comm_options_t o;
  if (!options_for(topology, &o)) return 2;
  const size_t count = bytes / sizeof(float);
  if (count < n) {
    fprintf(stderr, "%s: BYTES must hold at least one float per rank\n", op.c_str());
    return 2;
  }
  std::vector<nexar_comm_t *> comms(n);
  if (nexar_bootstrap_local(comms.data(), n, &o) != NEXAR_OK) {
    fprintf(stderr, "bootstrap: %s\n", nexar_last_error_message());
    return 1;
  }
  std::vector<Buffers> bufs(n);
  std::vector<double> secs;
  uint64_t sent = 0, forwarded = 0, relayed = 0;
  std::atomic<bool> failed{false};
  bool wrong = false;
  for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
    std::vector<nexar_stats_t> before(n);
    for (uint32_t r = 0; r < n; ++r) {
      fill(op, r, n, count, &bufs[r]);
      before[r] = stats_of(comms[r]);
    }
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (uint32_t r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        if (run(op, comms[r], n, count, &bufs[r]) != NEXAR_OK) failed = true;
      });
    for (auto &t : ts)
      t.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (uint32_t r = 0; r < n && !failed; ++r)
      wrong = wrong || !exact(op, r, n, bufs[r]);
    if (it == 0) continue;
    secs.push_back(s);
    for (uint32_t r = 0; r < n; ++r) {
      const nexar_stats_t a = stats_of(comms[r]);
      sent += a.bytes_sent - before[r].bytes_sent;
      forwarded += a.relay_bytes_forwarded - before[r].relay_bytes_forwarded;
      relayed += a.relay_bytes_sent - before[r].relay_bytes_sent;
    }
  }
  for (nexar_comm_t *c : comms)
    nexar_comm_destroy(c);
  if (failed || wrong) {
    fprintf(stderr, "%s %s\n", op.c_str(), failed ? "failed" : "gave a wrong result");
    return 1;
  }
  printf(
      "%s ranks=%u topology=%s bytes=%zu median_s=%.4f relay_forwarded_pct=%.2f "
      "relay_originated_pct=%.2f iters=%d\n",
      op.c_str(), n, topology, bytes, median(secs), sent ? 100.0 * forwarded / sent : 0.0,
      sent ? 100.0 * relayed / sent : 0.0, iters);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "formation" && argc >= 4)
    return formation(static_cast<uint32_t>(atoi(argv[2])), argv[3], argc > 4 ? atoi(argv[4]) : 3);
  const std::set<std::string> collectives{"allreduce", "broadcast", "allgather",
                                          "gather",    "scatter",   "alltoall"};
  if (collectives.count(mode) && argc >= 5)
    return collective(mode, static_cast<uint32_t>(atoi(argv[2])), argv[3],
                      static_cast<size_t>(atoll(argv[4])), argc > 5 ? atoi(argv[5]) : 5);
  fprintf(stderr,
          "usage: nexar-topology-cost formation RANKS TOPOLOGY [RUNS]\n"
          "       nexar-topology-cost COLLECTIVE RANKS TOPOLOGY BYTES [ITERS]\n"
          "COLLECTIVE: allreduce, broadcast, allgather, gather, scatter or alltoall\n");
  return 2;
}
