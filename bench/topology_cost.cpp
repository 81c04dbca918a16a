// nexar-topology-cost: what a sparse mesh costs and saves, on in-process
// worlds (each rank its own engine), through the C ABI:
//   formation   ranks, topology, seconds to form, connections per rank
//   relayed     bytes forwarded by relays during one allreduce, as a share
//               of the payload bytes the ranks sent
//   allreduce   median seconds of an allreduce
// Not installed; run from the build tree:
//   nexar-topology-cost formation RANKS TOPOLOGY [RUNS]
//   nexar-topology-cost allreduce RANKS TOPOLOGY BYTES [ITERS]
// TOPOLOGY: full, ring, k_regular:K or hypercube (as NEXAR_TOPOLOGY).
#include <nexar.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

int allreduce(uint32_t n, const char *topology, size_t bytes, int iters) {
  nexar_comm_options_t o;
  if (!options_for(topology, &o)) return 2;
  std::vector<nexar_comm_t *> comms(n);
  if (nexar_bootstrap_local(comms.data(), n, &o) != NEXAR_OK) {
    fprintf(stderr, "bootstrap: %s\n", nexar_last_error_message());
    return 1;
  }
  const size_t count = bytes / sizeof(float);
  std::vector<std::vector<float>> bufs(n, std::vector<float>(count, 1.0f));
  std::vector<double> secs;
  uint64_t sent = 0, forwarded = 0, relayed = 0;
  bool wrong = false;
  for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
    std::vector<nexar_stats_t> before(n);
    for (uint32_t r = 0; r < n; ++r)
      before[r] = stats_of(comms[r]);
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (uint32_t r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        std::fill(bufs[r].begin(), bufs[r].end(), 1.0f);
        if (nexar_allreduce(comms[r], bufs[r].data(), bufs[r].data(), count, NEXAR_DTYPE_F32,
                            NEXAR_OP_SUM, nullptr, nullptr) != NEXAR_OK ||
            bufs[r][count - 1] != static_cast<float>(n))
          wrong = true;
      });
    for (auto &t : ts)
      t.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
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
  if (wrong) {
    fprintf(stderr, "allreduce failed or gave a wrong sum\n");
    return 1;
  }
  printf(
      "allreduce ranks=%u topology=%s bytes=%zu median_s=%.4f relay_forwarded_pct=%.2f "
      "relay_originated_pct=%.2f iters=%d\n",
      n, topology, bytes, median(secs), sent ? 100.0 * forwarded / sent : 0.0,
      sent ? 100.0 * relayed / sent : 0.0, iters);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "formation" && argc >= 4)
    return formation(static_cast<uint32_t>(atoi(argv[2])), argv[3], argc > 4 ? atoi(argv[4]) : 3);
  if (mode == "allreduce" && argc >= 5)
    return allreduce(static_cast<uint32_t>(atoi(argv[2])), argv[3],
                     static_cast<size_t>(atoll(argv[4])), argc > 5 ? atoi(argv[5]) : 5);
  fprintf(stderr,
          "usage: nexar-topology-cost formation RANKS TOPOLOGY [RUNS]\n"
          "       nexar-topology-cost allreduce RANKS TOPOLOGY BYTES [ITERS]\n");
  return 2;
}
