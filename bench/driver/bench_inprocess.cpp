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
//     nccl-tests factors. Sizes, buffer layout, patterns, the check (every
//     element, once before timing) and the statistics are the worker's
//     (bench/common/bench_measure.h).
#include <nexar.h>

#include "bench_inprocess.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "bench_latch.h"
#include "bench_measure.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(const std::vector<double> &v) {
  return benchm::statsOf(v).median;
}

void check(nexar_status_t s, const char *what) {
  if (s != NEXAR_OK) {
    fprintf(stderr, "nexar-bench: %s failed: %s (%s)\n", what, nexar_status_str(s),
            nexar_last_error_message());
    exit(1);
  }
}

// Moves `count` messages of `bytes` each from rank 0 to rank 1 concurrently;
// returns seconds from first submit to last completion.
double transfer(nexar_comm_t **c, size_t bytes, int count, std::vector<std::vector<char>> &src,
                std::vector<std::vector<char>> &dst) {
  nexar_bench::Latch latch(2 * count);
  auto t0 = Clock::now();
  for (int i = 0; i < count; ++i)
    check(nexar_recv(c[1], dst[i].data(), bytes, 0, 100 + i, nexar_bench::Latch::done, &latch),
          "recv");
  for (int i = 0; i < count; ++i)
    check(nexar_send(c[0], src[i].data(), bytes, 1, 100 + i, nexar_bench::Latch::done, &latch),
          "send");
  latch.wait(300, "transfer");
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

// One operation on rank r's buffers, laid out as benchm::layoutFor says.
nexar_status_t run_op(const std::string &op, nexar_comm_t *c, float *in, float *out,
                      const benchm::Layout &l, nexar_compressor_t *z) {
  if (benchm::isCompressedOp(op))
    return nexar_allreduce_compressed(c, in, out, l.count, NEXAR_DTYPE_F32, z, nullptr, nullptr);
  if (op == "allreduce")
    return nexar_allreduce(c, in, out, l.count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr, nullptr);
  if (op == "broadcast")
    return nexar_broadcast(c, out, l.count, NEXAR_DTYPE_F32, 0, nullptr, nullptr);
  if (op == "allgather")
    return nexar_allgather(c, in, out, l.block, NEXAR_DTYPE_F32, nullptr, nullptr);
  if (op == "reduce_scatter")
    return nexar_reduce_scatter(c, in, out, l.block, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                                nullptr);
  if (op == "alltoall")
    return nexar_alltoall(c, in, out, l.block, NEXAR_DTYPE_F32, nullptr, nullptr);
  return nexar_barrier(c, nullptr, nullptr);
}

// One row: every rank fills the check patterns, runs the op once and checks
// its output, then warm-up and timed iterations (barrier -> op).
benchm::Row bench_collective(const std::string &op, nexar_comm_t **c, uint32_t n, uint64_t bytes,
                             int warmup, int iters) {
  const benchm::Layout l = benchm::layoutFor(op, bytes, int(n));
  std::vector<std::vector<float>> in(n), out(n);
  std::vector<std::vector<double>> times(n);
  std::vector<char> ok(n, 1);
  std::vector<std::thread> ts;
  for (uint32_t r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      in[r].assign(std::max<size_t>(l.in_count, 1), 0.0f);
      out[r].assign(std::max<size_t>(l.out_count, 1), 0.0f);
      benchm::fillCheck(op, int(r), int(n), l, in[r].data(), out[r].data());
      // The compressed rows' compressor (with one rank: the compression alone).
      nexar_compressor_t *z = nullptr;
      if (benchm::isCompressedOp(op))
        check(nexar_compressor_create(
                  &z, op == "compressed_topk" ? NEXAR_COMPRESS_TOPK : NEXAR_COMPRESS_RANDOMK,
                  benchm::kCompressRatio, l.count, NEXAR_DTYPE_F32, 1),
              "nexar_compressor_create");
      check(run_op(op, c[r], in[r].data(), out[r].data(), l, z), op.c_str());
      ok[r] = benchm::checkOutput(op, int(r), int(n), l, out[r].data()).ok;
      for (int i = 0; i < warmup + iters; ++i) {
        check(nexar_barrier(c[r], nullptr, nullptr), "barrier");
        auto t0 = Clock::now();
        check(run_op(op, c[r], in[r].data(), out[r].data(), l, z), op.c_str());
        if (i >= warmup) times[r].push_back(seconds_since(t0) * 1e6);
      }
      nexar_compressor_destroy(z);
    });
  for (auto &t : ts)
    t.join();
  std::vector<double> per_iter(iters, 0.0);
  for (int i = 0; i < iters; ++i)
    for (uint32_t r = 0; r < n; ++r)
      per_iter[i] = std::max(per_iter[i], times[r][i]);
  const bool all_ok = std::all_of(ok.begin(), ok.end(), [](char x) { return x != 0; });
  return benchm::makeRow("nexar", op, int(n), l.bytes, per_iter, 0, 0, all_ok ? "ok" : "FAIL");
}

int collectives(const std::string &op, uint32_t n, const std::vector<uint64_t> &sizes, int warmup,
                int iters) {
  std::vector<nexar_comm_t *> c(n);
  check(nexar_bootstrap_local(c.data(), n, nullptr), "nexar_bootstrap_local");
  printf("nexar-bench %s: %u ranks in one process (one engine each), f32 sum, %d iterations\n\n",
         op.c_str(), n, iters);
  printf("%12s %12s %12s %12s %11s %11s %6s\n", "bytes", "median_us", "min_us", "max_us",
         "algbw_GB/s", "busbw_GB/s", "check");
  for (uint64_t bytes : sizes) {
    const int it = bytes >= (16u << 20) ? std::max(3, iters / 4) : iters;
    const benchm::Row r = bench_collective(op, c.data(), n, bytes, warmup, it);
    printf("%12llu %12.1f %12.1f %12.1f %11.3f %11.3f %6s\n",
           static_cast<unsigned long long>(r.bytes), r.median_us, r.min_us, r.max_us, r.algbw_gbps,
           r.busbw_gbps, r.check.c_str());
    fflush(stdout);
  }
  for (auto *x : c)
    nexar_comm_destroy(x);
  return 0;
}

void usage() {
  fprintf(stderr,
          "usage: nexar-bench --in-process p2p [--runs N]\n"
          "       nexar-bench --in-process allreduce|broadcast|allgather|reduce_scatter|alltoall|\n"
          "                   barrier|compressed_topk|compressed_randomk [--ranks N]\n"
          "                   [--sizes 8,256K,4M,64M] [--iters N] [--warmup N]\n");
  exit(2);
}

}  // namespace

int nexar_bench::run_in_process(int argc, char **argv) {
  if (argc < 2) usage();
  std::string mode = argv[1];
  int runs = 5, iters = 20, warmup = 3;
  uint32_t ranks = 2;
  std::vector<uint64_t> sizes = {8, 256 << 10, 4 << 20, 64 << 20};
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
      std::string err;
      if (!benchm::parseSizeList(v, &sizes, &err)) {
        fprintf(stderr, "nexar-bench: --sizes: %s\n", err.c_str());
        usage();
      }
    } else
      usage();
  }
  if (runs < 1 || iters < 1 || warmup < 0 || ranks < 1) usage();
  if (mode == "barrier") sizes.assign(1, 0);  // no data: one row, as the worker gives
  if (mode == "p2p") {
    try {
      return p2p(runs);
    } catch (const std::exception &e) {
      fprintf(stderr, "nexar-bench: %s\n", e.what());
      return 1;
    }
  }
  for (const char *op : {"allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall",
                         "barrier", "compressed_topk", "compressed_randomk"})
    if (mode == op) return collectives(mode, ranks, sizes, warmup, iters);
  usage();
  return 2;
}
