// bench_measure.h: what every nexar-bench program shares, so that nexar's
// worker and the peer programs (Open MPI, Gloo) measure the same way.
//
// Header-only C++17, no dependency beyond the C++ standard library and POSIX
// (getrusage, clock_gettime, alarm). Everything is in namespace benchm.
//
// Method (nccl-tests conventions; see bench/peers/README.md):
//   per (op, size): fill the patterns below, run the op once, check the
//   result on every rank and AND the verdicts across ranks; then reset the
//   buffers to zero, run `warmup` untimed ops, then `iters` timed iterations,
//   each barrier -> t0 -> one op -> t1. The time of an iteration is the
//   maximum over ranks; the row reports median/min/max over iterations. Then
//   a back-to-back loop of `iters` ops with no barriers: loop_us = wall /
//   iters (max over ranks), cpu_us = getrusage user+sys over that loop /
//   iters (mean over the ranks that take part).
//   pingpong and stream count per message: a pingpong iteration is one round
//   trip and its time is halved (osu_latency); a stream iteration is a window
//   of kStreamWindow messages plus one ack and its time is divided by the
//   window (osu_bw). Their loop_us and cpu_us are divided the same way, and
//   only ranks 0 and 1 take part in them (their cpu_us is the mean of those
//   two).
#ifndef NEXAR_BENCH_COMMON_BENCH_MEASURE_H
#define NEXAR_BENCH_COMMON_BENCH_MEASURE_H

#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_gradients.h"

namespace benchm {

// ---------------------------------------------------------------- ops ----

// The operations, as spelled on the command line and in the rows.
inline const std::vector<std::string> &allOps() {
  static const std::vector<std::string> ops = {
      "allreduce", "broadcast",  "allgather",       "reduce_scatter",
      "alltoall",  "barrier",    "pingpong",        "stream",
      "bucketed",  "per_tensor", "compressed_topk", "compressed_randomk"};
  return ops;
}

inline bool isKnownOp(const std::string &op) {
  const auto &ops = allOps();
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

// Point-to-point ops between ranks 0 and 1 (other ranks only join barriers).
inline bool isP2p(const std::string &op) {
  return op == "pingpong" || op == "stream";
}

// Messages rank 0 sends per stream iteration before rank 1's one ack.
constexpr int kStreamWindow = 64;
// Size of the stream ack, in bytes (rank 1 -> rank 0).
constexpr std::size_t kStreamAckBytes = 4;

// What one iteration's time is divided by to give the row's time.
inline double timeDivisor(const std::string &op) {
  if (op == "pingpong") return 2.0;
  if (op == "stream") return double(kStreamWindow);
  return 1.0;
}

// nccl-tests bus-bandwidth factor for n ranks.
inline double busbwFactor(const std::string &op, int n) {
  if (n <= 1) return op == "broadcast" || isP2p(op) ? 1.0 : 0.0;
  const double dn = double(n);
  // Gradient rows count the dense allreduce's bytes (what they replace).
  if (op == "allreduce" || isGradientOp(op)) return 2.0 * (dn - 1.0) / dn;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall") return (dn - 1.0) / dn;
  if (op == "broadcast" || isP2p(op)) return 1.0;
  return 0.0;  // barrier
}

// ------------------------------------------------------- element counts ----

// How a requested size maps to float32 element counts for n ranks.
//   allreduce, broadcast: `count` floats per rank (in and out).
//   allgather: each rank contributes `block`, the output is count = block * n.
//   reduce_scatter: the input is count = block * n, each rank gets `block`.
//   alltoall: in and out are count = block * n, `block` per peer.
//   barrier: no data, bytes 0.
//   pingpong, stream: one message of `count` floats.
// At least one float per block; `bytes` is what is actually used (reported).
struct Layout {
  std::size_t count = 0;      // floats in the op's "size" buffer
  std::size_t block = 0;      // floats per rank block (== count when unblocked)
  std::size_t in_count = 0;   // floats in this rank's input buffer
  std::size_t out_count = 0;  // floats in this rank's output buffer
  std::uint64_t bytes = 0;    // count * 4, reported in the row
};

inline Layout layoutFor(const std::string &op, std::uint64_t requested_bytes, int n) {
  Layout l;
  if (op == "barrier") return l;
  const std::size_t nn = std::size_t(n < 1 ? 1 : n);
  const std::size_t floats = std::max<std::size_t>(std::size_t(requested_bytes / 4), 1);
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall") {
    l.block = std::max<std::size_t>(floats / nn, 1);
    l.count = l.block * nn;
    l.in_count = op == "allgather" ? l.block : l.count;
    l.out_count = op == "reduce_scatter" ? l.block : l.count;
  } else {
    l.count = l.block = l.in_count = l.out_count = floats;
  }
  l.bytes = std::uint64_t(l.count) * 4;
  return l;
}

// ------------------------------------------------------------ iterations ----

struct Iters {
  int warmup;
  int iters;
};

// Defaults by size: <=4 KiB 100+1000, <=256 KiB 20+200, <=4 MiB 4+40, larger
// 2+8. A non-negative override replaces the matching default.
inline Iters itersFor(std::uint64_t bytes, int warmup_override = -1, int iters_override = -1) {
  Iters it{2, 8};
  if (bytes <= (4u << 10))
    it = {100, 1000};
  else if (bytes <= (256u << 10))
    it = {20, 200};
  else if (bytes <= (4u << 20))
    it = {4, 40};
  if (warmup_override >= 0) it.warmup = warmup_override;
  if (iters_override >= 1) it.iters = iters_override;
  return it;
}

// ------------------------------------------------------------- size list ----

// Parses one size: digits with an optional K, M or G (powers of 1024, any
// case), optionally followed by "B" or "iB" ("4K", "4KiB", "64M", "8").
inline bool parseSize(const std::string &s, std::uint64_t *out) {
  std::size_t i = 0;
  std::uint64_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + std::uint64_t(s[i] - '0');
    ++i;
  }
  if (i == 0) return false;
  std::string suffix = s.substr(i);
  for (char &c : suffix)
    c = char(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!suffix.empty() && (suffix[0] == 'K' || suffix[0] == 'M' || suffix[0] == 'G')) {
    shift = suffix[0] == 'K' ? 10 : suffix[0] == 'M' ? 20 : 30;
    suffix.erase(0, 1);
    if (suffix == "IB") suffix = "B";
  }
  if (!suffix.empty() && suffix != "B") return false;
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

// Parses "8,4K,256K,4M,64M". On error returns false and names the bad item.
inline bool parseSizeList(const std::string &list, std::vector<std::uint64_t> *out,
                          std::string *err) {
  out->clear();
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string item = list.substr(pos, comma - pos);
    std::uint64_t v = 0;
    if (!parseSize(item, &v)) {
      if (err) *err = "bad size '" + item + "' in '" + list + "' (want e.g. 8,4K,256K,4M,64M)";
      return false;
    }
    out->push_back(v);
    pos = comma + 1;
  }
  return !out->empty();
}

// --------------------------------------------------------------- clocks ----

// Monotonic microseconds (steady_clock; CLOCK_MONOTONIC on Linux, so the
// values of different processes on one host are comparable).
inline double nowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// User + system CPU time of the whole process (all threads), microseconds.
inline double cpuUs() {
  struct rusage ru;
  std::memset(&ru, 0, sizeof ru);
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// ----------------------------------------------------------- statistics ----

struct Stats {
  double median = 0, min = 0, max = 0;
};

// Median (mean of the two middle values for an even count), min and max.
inline Stats statsOf(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
  s.min = v.front();
  s.max = v.back();
  return s;
}

// ------------------------------------------------------------------ rows ----

struct Row {
  std::string lib;
  std::string op;
  int ranks = 0;
  std::uint64_t bytes = 0;
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
  double loop_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  double cpu_us = 0;
  std::string check = "ok";  // "ok" or "FAIL: <what>"
};

// Builds a row from the per-iteration times (already max over ranks and
// already divided by timeDivisor), loop_us (max over ranks) and cpu_us.
inline Row makeRow(const std::string &lib, const std::string &op, int ranks, std::uint64_t bytes,
                   const std::vector<double> &iter_us, double loop_us, double cpu_us,
                   const std::string &check) {
  Row r;
  r.lib = lib;
  r.op = op;
  r.ranks = ranks;
  r.bytes = bytes;
  Stats s = statsOf(iter_us);
  r.median_us = s.median;
  r.min_us = s.min;
  r.max_us = s.max;
  r.loop_us = loop_us;
  r.algbw_gbps = s.median > 0 ? double(bytes) / s.median / 1e3 : 0.0;  // B/us -> GB/s
  r.busbw_gbps = r.algbw_gbps * busbwFactor(op, ranks);
  r.cpu_us = cpu_us;
  r.check = check;
  return r;
}

inline std::string jsonString(const std::string &s) {
  std::string o = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      o += buf;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

inline std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The row as one JSON object, keys in a fixed order, no newline.
inline std::string rowJson(const Row &r) {
  std::string o = "{";
  o += "\"lib\":" + jsonString(r.lib);
  o += ",\"op\":" + jsonString(r.op);
  o += ",\"ranks\":" + std::to_string(r.ranks);
  o += ",\"bytes\":" + std::to_string(r.bytes);
  o += ",\"median_us\":" + jsonNumber(r.median_us);
  o += ",\"min_us\":" + jsonNumber(r.min_us);
  o += ",\"max_us\":" + jsonNumber(r.max_us);
  o += ",\"loop_us\":" + jsonNumber(r.loop_us);
  o += ",\"algbw_gbps\":" + jsonNumber(r.algbw_gbps);
  o += ",\"busbw_gbps\":" + jsonNumber(r.busbw_gbps);
  o += ",\"cpu_us\":" + jsonNumber(r.cpu_us);
  o += ",\"check\":" + jsonString(r.check);
  return o + "}";
}

// Prints the row on its own line and flushes (rank 0 only, to stdout).
inline void printRow(const Row &r, std::FILE *f = stdout) {
  std::fprintf(f, "%s\n", rowJson(r).c_str());
  std::fflush(f);
}

// ------------------------------------------------------ data and checks ----
//
// Patterns (all values are small integers, exact in float32, so sums are
// exact whatever the reduction order):
//   allreduce      rank r, element i: (r+1)*(1+i%13); result n(n+1)/2*(1+i%13)
//   broadcast      root 0: 1+i%251, others start at -1; all end with 1+i%251
//   allgather      rank r, element i of its block: 1000r + i%100; the output
//                  block b must hold 1000b + i%100
//   reduce_scatter rank r, element j of its full input: (r+1)*(1+j%13); rank r
//                  receives elements j = r*block + i: n(n+1)/2*(1+j%13)
//   alltoall       rank s sends to rank d, element i: alltoallValue(s, d, i);
//                  rank d's block s must hold the same
//   pingpong       rank 0 sends 1+i%251, rank 1 checks and echoes, rank 0
//                  checks the echo
//   stream         message k of the check window, element i: streamValue(k, i)
//   barrier        rank r enters barrierDelayUs(r) late; no rank may leave
//                  before the last one entered: min(leave) >= max(enter),
//                  both on CLOCK_MONOTONIC (nowUs)
// Outputs start at kSentinel. Timed runs use zero-filled buffers.

constexpr float kSentinel = -1.0f;

inline float allreduceInput(int r, std::size_t i) {
  return float(r + 1) * float(1 + i % 13);
}
inline float allreduceExpect(int n, std::size_t i) {
  return float(n * (n + 1) / 2) * float(1 + i % 13);
}
inline float broadcastValue(std::size_t i) {
  return float(1 + i % 251);
}
inline float allgatherValue(int r, std::size_t i) {
  return float(1000 * r) + float(i % 100);
}
inline float alltoallValue(int src, int dst, std::size_t i) {
  return float(1 + 1024 * src) + float((std::size_t(dst) * 31 + i) % 1024);
}
inline float pingValue(std::size_t i) {
  return float(1 + i % 251);
}
inline float streamValue(int k, std::size_t i) {
  return float(1 + (std::size_t(k) * 7 + i) % 509);
}
inline double barrierDelayUs(int r) {
  return 10000.0 * r;
}

// Fills this rank's input and output buffers for the check run.
// `in` has layout.in_count floats, `out` has layout.out_count (broadcast is in
// place: pass the one buffer as `out`, `in` is then ignored). pingpong and
// stream are filled by the programs themselves (pingValue, streamValue).
inline void fillCheck(const std::string &op, int rank, int n, const Layout &l, float *in,
                      float *out) {
  if (op == "broadcast") {
    for (std::size_t i = 0; i < l.count; ++i)
      out[i] = rank == 0 ? broadcastValue(i) : kSentinel;
    return;
  }
  for (std::size_t i = 0; i < l.out_count; ++i)
    out[i] = kSentinel;
  if (op == "allreduce" || op == "reduce_scatter" || op == "bucketed" || op == "per_tensor") {
    for (std::size_t i = 0; i < l.in_count; ++i)
      in[i] = allreduceInput(rank, i);
  } else if (isCompressedOp(op)) {
    for (std::size_t i = 0; i < l.in_count; ++i)
      in[i] = float(rank + 1) * compressedMagnitude(i);
  } else if (op == "allgather") {
    for (std::size_t i = 0; i < l.in_count; ++i)
      in[i] = allgatherValue(rank, i);
  } else if (op == "alltoall") {
    for (int d = 0; d < n; ++d)
      for (std::size_t i = 0; i < l.block; ++i)
        in[std::size_t(d) * l.block + i] = alltoallValue(rank, d, i);
  }
}

// One rank's verdict: the first wrong element and how many were wrong.
struct CheckResult {
  bool ok = true;
  std::uint64_t nbad = 0;
  std::uint64_t index = 0;
  double got = 0, want = 0;
  std::string what;  // set for failures that are not a wrong element

  void bad(std::size_t i, float g, float w) {
    if (ok) {
      index = i;
      got = g;
      want = w;
    }
    ok = false;
    ++nbad;
  }
  void fail(const std::string &why) {
    if (ok) what = why;
    ok = false;
  }
};

// Expected output element i of `op` on `rank` (out_count elements).
inline float expectedOut(const std::string &op, int rank, int n, const Layout &l, std::size_t i) {
  if (op == "allreduce" || op == "bucketed" || op == "per_tensor") return allreduceExpect(n, i);
  if (op == "broadcast") return broadcastValue(i);
  if (op == "allgather") return allgatherValue(int(i / l.block), i % l.block);
  if (op == "reduce_scatter") return allreduceExpect(n, std::size_t(rank) * l.block + i);
  if (op == "alltoall") return alltoallValue(int(i / l.block), rank, i % l.block);
  return 0.0f;
}

// Checks every output element of the check run.
inline CheckResult checkOutput(const std::string &op, int rank, int n, const Layout &l,
                               const float *out) {
  CheckResult c;
  if (isCompressedOp(op)) {
    // Every rank keeps the same k positions (TopK: those of the k largest
    // magnitudes); there the result is the sum over ranks, elsewhere 0.
    const std::size_t k = compressedK(l.out_count);
    const std::vector<char> topk =
        op == "compressed_topk" ? compressedTopk(l.out_count, k) : std::vector<char>();
    std::size_t kept = 0;
    for (std::size_t i = 0; i < l.out_count; ++i) {
      float sum = 0.0f;
      for (int r = 0; r < n; ++r)
        sum += float(r + 1) * compressedMagnitude(i);
      const float want = topk.empty() ? (out[i] == 0.0f ? 0.0f : sum) : topk[i] ? sum : 0.0f;
      if (out[i] != want) c.bad(i, out[i], want);
      kept += out[i] != 0.0f;
    }
    if (c.ok && kept != k) c.fail("kept " + std::to_string(kept) + " of k " + std::to_string(k));
    return c;
  }
  for (std::size_t i = 0; i < l.out_count; ++i) {
    const float w = expectedOut(op, rank, n, l, i);
    if (out[i] != w) c.bad(i, out[i], w);
  }
  return c;
}

// Checks a received message against a pattern (pingpong: k < 0, pingValue;
// stream: message k, streamValue).
inline void checkMessage(CheckResult *c, int k, const float *buf, std::size_t count,
                         const char *what) {
  for (std::size_t i = 0; i < count; ++i) {
    const float w = k < 0 ? pingValue(i) : streamValue(k, i);
    if (buf[i] != w) {
      if (c->ok) c->what = std::string(what) + (k >= 0 ? " message " + std::to_string(k) : "");
      c->bad(i, buf[i], w);
    }
  }
}

// A verdict travels to rank 0 as kCheckDoubles doubles (gather them, rank by
// rank, with the library's own collective) and is described there.
constexpr int kCheckDoubles = 5;
inline void encodeCheck(const CheckResult &c, double *d) {
  d[0] = c.ok ? 1.0 : 0.0;
  d[1] = double(c.nbad);
  d[2] = double(c.index);
  d[3] = c.got;
  d[4] = c.want;
}

// The row's check string from all ranks' encoded verdicts (n * kCheckDoubles
// doubles, rank-major). `local_what` is rank 0's own free-text reason, if any.
inline std::string describeChecks(const std::string &op, const std::vector<double> &all, int n,
                                  const std::string &local_what = std::string()) {
  int failed = 0, first = -1;
  for (int r = 0; r < n; ++r)
    if (all[std::size_t(r) * kCheckDoubles] == 0.0) {
      if (first < 0) first = r;
      ++failed;
    }
  if (failed == 0) return "ok";
  const double *d = &all[std::size_t(first) * kCheckDoubles];
  char buf[320];
  if (d[1] > 0) {
    std::snprintf(buf, sizeof buf,
                  "%s%s%s on rank %d: %.0f wrong elements, first [%.0f] = %g, want %g", op.c_str(),
                  first == 0 && !local_what.empty() ? " " : "",
                  first == 0 ? local_what.c_str() : "", first, d[1], d[2], d[3], d[4]);
  } else {
    std::snprintf(buf, sizeof buf, "%s on rank %d: %s", op.c_str(), first,
                  first == 0 && !local_what.empty() ? local_what.c_str() : "check failed");
  }
  std::string s = std::string("FAIL: ") + buf;
  if (failed > 1) s += " (" + std::to_string(failed) + " ranks failed)";
  return s;
}

// Barrier check: each rank records when it entered (after sleeping
// barrierDelayUs(rank)) and when it left; reduce {enter, -leave} with MAX
// across ranks and pass max_enter and -(that second value) here.
inline CheckResult barrierCheck(double max_enter_us, double min_leave_us) {
  CheckResult c;
  if (min_leave_us < max_enter_us) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "a rank left %.1f us before the last rank entered",
                  max_enter_us - min_leave_us);
    c.fail(buf);
  }
  return c;
}

// ------------------------------------------------------------- watchdog ----
//
// A process-wide alarm: if a row takes longer than the armed number of
// seconds, the handler prints what was running and exits with status 124.

namespace detail {
inline char g_watch_what[256] = "startup";
inline std::size_t g_watch_len = 7;
inline void onAlarm(int) {
  static const char head[] = "bench watchdog: row over its --timeout limit, in ";
  ssize_t ignored = ::write(2, head, sizeof head - 1);
  ignored = ::write(2, g_watch_what, g_watch_len);
  ignored = ::write(2, "\n", 1);
  (void)ignored;
  ::_exit(124);
}
}  // namespace detail

// Changes what the watchdog reports without touching its deadline.
inline void watchdogNote(const std::string &what) {
  const std::size_t n = std::min(what.size(), sizeof detail::g_watch_what - 1);
  detail::g_watch_len = 0;
  std::memcpy(detail::g_watch_what, what.data(), n);
  detail::g_watch_what[n] = '\0';
  detail::g_watch_len = n;
}

// Sets what the watchdog reports ("rank 1 allreduce 4194304 B: timed") and
// (re)arms it for `seconds` (0 disarms).
inline void watchdog(const std::string &what, unsigned seconds) {
  static bool installed = false;
  if (!installed) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = detail::onAlarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, nullptr);
    installed = true;
  }
  alarm(0);
  watchdogNote(what);
  alarm(seconds);
}

}  // namespace benchm

#endif  // NEXAR_BENCH_COMMON_BENCH_MEASURE_H
