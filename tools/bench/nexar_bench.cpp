// nexar-bench: measures nexar through its public C ABI only.
//
//   nexar-bench p2p [--runs N]
//     Two ranks in one process, each with its own engine (separate loop
//     threads, separate UDP sockets, a real QUIC connection between them):
//     bulk throughput of one 1 GiB message, of 8 concurrent 128 MiB messages,
//     and the 8-byte round-trip latency. Prints medians over runs.
#include <nexar.h>

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

void usage() {
  fprintf(stderr, "usage: nexar-bench p2p [--runs N]\n");
  exit(2);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) usage();
  std::string mode = argv[1];
  int runs = 5;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else usage();
  }
  if (runs < 1) usage();
  if (mode == "p2p") return p2p(runs);
  usage();
}
