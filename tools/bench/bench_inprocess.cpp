// nexar-bench --in-process: the quick single-process mode. Every rank is an
// engine of its own inside this one process (nexar_bootstrap_local), so it
// needs no launcher; the default multi-process mode is in bench_driver.cpp.
//
//   nexar-bench --in-process p2p [--runs N]
//     Two ranks in one process, each with its own engine (separate loop
//     threads, separate UDP sockets, a real QUIC connection between them):
//     bulk throughput of one 1 GiB message, of 8 concurrent 128 MiB messages,
//     and the 8-byte round-trip latency. Prints medians over runs.
//
//   nexar-bench --in-process allreduce|broadcast|allgather|reduce_scatter|alltoall|barrier
//               [--ranks N] [--sizes 8,256K,4M,64M] [--iters N] [--warmup N]
//     In-process ranks (one engine each), nccl-tests conventions: each timed
//     iteration is barrier -> one operation, its time the maximum over ranks;
//     median/min/max of those, algbw = bytes / time, busbw with the
//     nccl-tests factors (allreduce 2(n-1)/n, allgather and reduce_scatter
//     (n-1)/n, broadcast 1). Every size is checked once before timing.
#include <nexar.h>

#include "bench_inprocess.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

void check(nexar_status_t s, const char *what) {
  if (s != NEXAR_OK) {
    fprintf(stderr, "nexar-bench: %s failed: %s (%s)\n", what, nexar_status_str(s),
            nexar_last_error_message());
    exit(1);
  }
}

struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  int left;
  nexar_status_t first = NEXAR_OK;
  std::string message;
  explicit Latch(int n) : left(n) {}
  static void done(void *ud, const nexar_completion_t *c) {
    auto *l = static_cast<Latch *>(ud);
    std::lock_guard<std::mutex> g(l->mu);
    if (c->status != NEXAR_OK && l->first == NEXAR_OK) {
      l->first = c->status;
      l->message = c->message;
    }
    if (--l->left == 0) l->cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [&] { return left == 0; });
    if (first != NEXAR_OK) {
      fprintf(stderr, "nexar-bench: operation failed: %s\n", message.c_str());
      exit(1);
    }
  }
};

// Moves `count` messages of `bytes` each from rank 0 to rank 1 concurrently;
// returns seconds from first submit to last completion.
double transfer(nexar_comm_t **c, size_t bytes, int count, std::vector<std::vector<char>> &src,
                std::vector<std::vector<char>> &dst) {
  Latch latch(2 * count);
  auto t0 = Clock::now();
  for (int i = 0; i < count; ++i)
    check(nexar_recv(c[1], dst[i].data(), bytes, 0, 100 + i, Latch::done, &latch), "recv");
  for (int i = 0; i < count; ++i)
    check(nexar_send(c[0], src[i].data(), bytes, 1, 100 + i, Latch::done, &latch), "send");
  latch.wait();
  return seconds_since(t0);
}

int p2p(int runs) {
  nexar_comm_t *c[2];
  check(nexar_bootstrap_local(c, 2, nullptr), "nexar_bootstrap_local");
  printf("nexar-bench p2p: 2 ranks in one process, separate engines, QUIC over loopback\n");
  printf("(medians of %d runs; MB = 1e6 bytes)\n\n", runs);

  struct Case {
    const char *name;
    size_t bytes;
    int count;
  } cases[] = {{"1 x 1 GiB", size_t{1} << 30, 1}, {"8 x 128 MiB", size_t{128} << 20, 8}};
  for (const Case &k : cases) {
    std::vector<std::vector<char>> src(k.count, std::vector<char>(k.bytes, 1)),
        dst(k.count, std::vector<char>(k.bytes, 0));
    transfer(c, k.bytes, k.count, src, dst);  // warm-up (page faults, windows)
    std::vector<double> rates;
    for (int r = 0; r < runs; ++r) {
      double s = transfer(c, k.bytes, k.count, src, dst);
      rates.push_back(static_cast<double>(k.bytes) * k.count / s / 1e9);
    }
    std::sort(rates.begin(), rates.end());
    printf("bulk %-12s  median %.2f GB/s  (min %.2f, max %.2f)\n", k.name, median(rates),
           rates.front(), rates.back());
  }

  // 8-byte ping-pong: rank 1 echoes from its own thread with blocking calls.
  const int iters = 2000;
  std::vector<double> rtts;
  for (int r = 0; r < runs; ++r) {
    std::thread echo([&] {
      uint64_t v;
      for (int i = 0; i < iters + 100; ++i) {
        check(nexar_recv(c[1], &v, 8, 0, 1, nullptr, nullptr), "echo recv");
        check(nexar_send(c[1], &v, 8, 0, 2, nullptr, nullptr), "echo send");
      }
    });
    std::vector<double> samples;
    for (int i = 0; i < iters + 100; ++i) {
      uint64_t v = static_cast<uint64_t>(i), back = 0;
      auto t0 = Clock::now();
      check(nexar_send(c[0], &v, 8, 1, 1, nullptr, nullptr), "ping send");
      check(nexar_recv(c[0], &back, 8, 1, 2, nullptr, nullptr), "ping recv");
      if (i >= 100) samples.push_back(seconds_since(t0) * 1e6);
    }
    echo.join();
    rtts.push_back(median(samples));
  }
  printf("latency 8 B round trip  median %.1f us  (run medians: min %.1f, max %.1f)\n",
         median(rtts), *std::min_element(rtts.begin(), rtts.end()),
         *std::max_element(rtts.begin(), rtts.end()));
  nexar_comm_destroy(c[0]);
  nexar_comm_destroy(c[1]);
  return 0;
}

// ---- collectives ----------------------------------------------------------

struct CollResult {
  double median_us, min_us, max_us;
  bool ok;
};

double bus_factor(const std::string &op, uint32_t n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall") return double(n - 1) / n;
  return 1.0;
}

// One operation of `bytes` (the nccl-tests "size": the buffer each rank
// reduces, receives, or gathers in total) on rank r.
nexar_status_t run_op(const std::string &op, nexar_comm_t *c, std::vector<float> &in,
                      std::vector<float> &out, size_t count, uint32_t n) {
  if (op == "allreduce")
    return nexar_allreduce(c, in.data(), out.data(), count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                           nullptr);
  if (op == "broadcast")
    return nexar_broadcast(c, out.data(), count, NEXAR_DTYPE_F32, 0, nullptr, nullptr);
  if (op == "allgather")
    return nexar_allgather(c, in.data(), out.data(), count / n, NEXAR_DTYPE_F32, nullptr, nullptr);
  if (op == "reduce_scatter")
    return nexar_reduce_scatter(c, in.data(), out.data(), count / n, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                                nullptr, nullptr);
  if (op == "alltoall")
    return nexar_alltoall(c, in.data(), out.data(), count / n, NEXAR_DTYPE_F32, nullptr, nullptr);
  return nexar_barrier(c, nullptr, nullptr);
}

// Verifies one operation's result on every rank (inputs: rank r holds r+1).
bool verify(const std::string &op, std::vector<std::vector<float>> &out, size_t count, uint32_t n) {
  for (uint32_t r = 0; r < n; ++r) {
    const std::vector<float> &o = out[r];
    for (size_t i = 0; i < count; i += 1 + count / 997) {
      float want;
      if (op == "allreduce")
        want = float(n) * (n + 1) / 2;
      else if (op == "broadcast")
        want = 1.0f;
      else if (op == "allgather")
        want = float(i / (count / n) + 1);
      else if (op == "reduce_scatter")
        want = i < count / n ? float(n) * (n + 1) / 2 : o[i];
      else if (op == "alltoall")
        want = float(i / (count / n) + 1);
      else
        return true;
      if (o[i] != want) return false;
    }
  }
  return true;
}

CollResult bench_collective(const std::string &op, nexar_comm_t **c, uint32_t n, size_t bytes,
                            int warmup, int iters) {
  size_t count = std::max<size_t>(bytes / sizeof(float), 1);
  if (op != "allreduce" && op != "broadcast") count = std::max<size_t>(count / n, 1) * n;
  std::vector<std::vector<float>> in(n), out(n);
  for (uint32_t r = 0; r < n; ++r) {
    in[r].assign(count, float(r + 1));
    out[r].assign(count, r == 0 && op == "broadcast" ? 1.0f : 0.0f);
  }
  std::vector<std::vector<double>> times(n);
  bool ok = true;
  std::vector<std::thread> ts;
  for (uint32_t r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      check(run_op(op, c[r], in[r], out[r], count, n), op.c_str());
      for (int i = 0; i < warmup + iters; ++i) {
        check(nexar_barrier(c[r], nullptr, nullptr), "barrier");
        auto t0 = Clock::now();
        check(run_op(op, c[r], in[r], out[r], count, n), op.c_str());
        if (i >= warmup) times[r].push_back(seconds_since(t0) * 1e6);
      }
    });
  for (auto &t : ts)
    t.join();
  // Checked after the first (untimed) run would be cleaner, but every run
  // computes the same result from the same inputs.
  ok = verify(op, out, count, n);
  std::vector<double> per_iter(iters);
  for (int i = 0; i < iters; ++i) {
    double m = 0;
    for (uint32_t r = 0; r < n; ++r)
      m = std::max(m, times[r][i]);
    per_iter[i] = m;
  }
  std::sort(per_iter.begin(), per_iter.end());
  return {median(per_iter), per_iter.front(), per_iter.back(), ok};
}

size_t parse_size(const std::string &t) {
  char *end = nullptr;
  size_t v = strtoull(t.c_str(), &end, 10);
  if (*end == 'K' || *end == 'k')
    v <<= 10;
  else if (*end == 'M' || *end == 'm')
    v <<= 20;
  else if (*end == 'G' || *end == 'g')
    v <<= 30;
  return v;
}

int collectives(const std::string &op, uint32_t n, const std::vector<size_t> &sizes, int warmup,
                int iters) {
  std::vector<nexar_comm_t *> c(n);
  check(nexar_bootstrap_local(c.data(), n, nullptr), "nexar_bootstrap_local");
  printf("nexar-bench %s: %u ranks in one process (one engine each), f32 sum, %d iterations\n\n",
         op.c_str(), n, iters);
  printf("%12s %12s %12s %12s %11s %11s %6s\n", "bytes", "median_us", "min_us", "max_us",
         "algbw_GB/s", "busbw_GB/s", "check");
  for (size_t bytes : sizes) {
    const int it = bytes >= (16u << 20) ? std::max(3, iters / 4) : iters;
    CollResult r = bench_collective(op, c.data(), n, bytes, warmup, it);
    const double algbw = op == "barrier" ? 0 : double(bytes) / (r.median_us * 1e-6) / 1e9;
    printf("%12zu %12.1f %12.1f %12.1f %11.3f %11.3f %6s\n", bytes, r.median_us, r.min_us, r.max_us,
           algbw, algbw * bus_factor(op, n), r.ok ? "ok" : "FAIL");
    fflush(stdout);
  }
  for (auto *x : c)
    nexar_comm_destroy(x);
  return 0;
}

void usage() {
  fprintf(
      stderr,
      "usage: nexar-bench --in-process p2p [--runs N]\n"
      "       nexar-bench --in-process allreduce|broadcast|allgather|reduce_scatter|alltoall|\n"
      "                   barrier [--ranks N] [--sizes 8,256K,4M,64M] [--iters N] [--warmup N]\n");
  exit(2);
}

}  // namespace

int nexar_bench::run_in_process(int argc, char **argv) {
  if (argc < 2) usage();
  std::string mode = argv[1];
  int runs = 5, iters = 20, warmup = 3;
  uint32_t ranks = 2;
  std::vector<size_t> sizes = {8, 256 << 10, 4 << 20, 64 << 20};
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) usage();
    std::string v = argv[++i];
    if (a == "--runs")
      runs = atoi(v.c_str());
    else if (a == "--iters")
      iters = atoi(v.c_str());
    else if (a == "--warmup")
      warmup = atoi(v.c_str());
    else if (a == "--ranks")
      ranks = static_cast<uint32_t>(atoi(v.c_str()));
    else if (a == "--sizes") {
      sizes.clear();
      size_t pos = 0;
      while (pos <= v.size()) {
        size_t comma = v.find(',', pos);
        if (comma == std::string::npos) comma = v.size();
        sizes.push_back(parse_size(v.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    } else
      usage();
  }
  if (runs < 1 || iters < 1 || warmup < 0 || ranks < 1) usage();
  if (mode == "p2p") return p2p(runs);
  for (const char *op :
       {"allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier"})
    if (mode == op) return collectives(mode, ranks, sizes, warmup, iters);
  usage();
  return 2;
}
