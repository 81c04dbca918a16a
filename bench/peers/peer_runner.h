// peer_runner.h: the measurement loop shared by mpi_bench and gloo_bench.
//
// Each program supplies a Backend with this shape (duck-typed):
//   int rank() const; int size() const;
//   void barrier();                                  // the library's barrier
//   void maxDoubles(std::vector<double> *v);         // allreduce MAX, in place
//   void sumDoubles(std::vector<double> *v);         // allreduce SUM, in place
//   void gatherDoubles(const std::vector<double> &mine, std::vector<double> *all);  // to rank 0
//   void prepare(const std::string &op, const benchm::Layout &l, float *in, float *out);
//   void run();                 // one op on the prepared buffers (for pingpong
//                               // one round trip, e.g. roundTrip() below; for
//                               // stream one window + ack)
//   const float *result();      // where run() left this rank's output
//   void send(const float *p, std::size_t count, int peer);  // blocking
//   void recv(float *p, std::size_t count, int peer);        // blocking
//   void release();             // drops what prepare() made
// Errors are thrown as std::exception; the program reports them and exits.
#ifndef NEXAR_BENCH_PEERS_PEER_RUNNER_H
#define NEXAR_BENCH_PEERS_PEER_RUNNER_H

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "bench_measure.h"

namespace peers {

// Context for error messages: "allreduce 4194304 B, timed".
inline std::string &phase() {
  static std::string p = "startup";
  return p;
}

// Sets the phase and tells the watchdog (its deadline is per row).
inline void setPhase(int rank, const std::string &p) {
  phase() = p;
  benchm::watchdogNote("rank " + std::to_string(rank) + " " + p);
}

// One pingpong iteration over the backend's blocking send and recv: rank 0
// sends `in` to rank 1 and receives the echo into `out`; rank 1 receives into
// `out` and sends it back. Other ranks take no part.
template <class Backend>
void roundTrip(Backend &b, const float *in, float *out, std::size_t count) {
  if (b.rank() == 0) {
    b.send(in, count, 1);
    b.recv(out, count, 1);
  } else if (b.rank() == 1) {
    b.recv(out, count, 0);
    b.send(out, count, 0);
  }
}

template <class Backend>
std::string checkOnce(Backend &b, const std::string &op, const benchm::Layout &l,
                      std::vector<float> &in, std::vector<float> &out) {
  const int rank = b.rank(), n = b.size();
  benchm::CheckResult c;
  if (op == "barrier") {
    b.barrier();  // line up, then arrive staggered
    std::this_thread::sleep_for(std::chrono::microseconds(int64_t(benchm::barrierDelayUs(rank))));
    const double enter = benchm::nowUs();
    b.run();
    const double leave = benchm::nowUs();
    std::vector<double> v = {enter, -leave};
    b.maxDoubles(&v);
    c = benchm::barrierCheck(v[0], -v[1]);
  } else if (op == "pingpong") {
    for (std::size_t i = 0; i < l.count; ++i)
      in[i] = benchm::pingValue(i);
    std::fill(out.begin(), out.end(), benchm::kSentinel);
    roundTrip(b, in.data(), out.data(), l.count);
    // Rank 1 checks what it received (and echoed), rank 0 the echo.
    if (rank < 2) benchm::checkMessage(&c, -1, out.data(), l.count, rank == 0 ? "echo" : "ping");
  } else if (op == "stream") {
    for (int k = 0; k < benchm::kStreamWindow; ++k) {
      if (rank == 0) {
        for (std::size_t i = 0; i < l.count; ++i)
          in[i] = benchm::streamValue(k, i);
        b.send(in.data(), l.count, 1);
      } else if (rank == 1) {
        std::fill(out.begin(), out.end(), benchm::kSentinel);
        b.recv(out.data(), l.count, 0);
        benchm::checkMessage(&c, k, out.data(), l.count, "stream");
      }
    }
  } else {
    benchm::fillCheck(op, rank, n, l, in.data(), out.data());
    b.run();
    c = benchm::checkOutput(op, rank, n, l, b.result());
  }
  if (!c.ok) {
    std::fprintf(stderr, "rank %d: %s %llu B check failed: %s%s[%llu] = %g, want %g\n", rank,
                 op.c_str(), static_cast<unsigned long long>(l.bytes), c.what.c_str(),
                 c.what.empty() ? "" : ": ", static_cast<unsigned long long>(c.index), c.got,
                 c.want);
  }
  std::vector<double> mine(benchm::kCheckDoubles), all;
  benchm::encodeCheck(c, mine.data());
  b.gatherDoubles(mine, &all);
  return rank == 0 ? benchm::describeChecks(op, all, n, c.what) : std::string();
}

// Runs one row: check, warm-up, timed iterations, back-to-back loop. Rank 0
// prints the row.
template <class Backend>
void runRow(Backend &b, const benchm::Args &a, std::uint64_t requested_bytes) {
  const int rank = b.rank(), n = b.size();
  const std::string &op = a.op;
  const benchm::Layout l = benchm::layoutFor(op, requested_bytes, n);
  const benchm::Iters it = benchm::itersFor(l.bytes, a.warmup, a.iters);
  const double div = benchm::timeDivisor(op);
  const std::string where = op + " " + std::to_string(l.bytes) + " B";
  benchm::watchdog("rank " + std::to_string(rank) + " " + where, a.timeout_s);

  std::vector<float> in(std::max<std::size_t>(l.in_count, 1)),
      out(std::max<std::size_t>(l.out_count, 1));
  setPhase(rank, where + ", setup");
  b.prepare(op, l, in.data(), out.data());

  setPhase(rank, where + ", check");
  const std::string check = checkOnce(b, op, l, in, out);
  std::fill(in.begin(), in.end(), 0.0f);
  std::fill(out.begin(), out.end(), 0.0f);

  setPhase(rank, where + ", warm-up");
  for (int i = 0; i < it.warmup; ++i)
    b.run();

  setPhase(rank, where + ", timed");
  std::vector<double> times(std::size_t(it.iters));
  for (int i = 0; i < it.iters; ++i) {
    b.barrier();
    const double t0 = benchm::nowUs();
    b.run();
    times[std::size_t(i)] = (benchm::nowUs() - t0) / div;
  }

  setPhase(rank, where + ", loop");
  b.barrier();
  const double c0 = benchm::cpuUs(), w0 = benchm::nowUs();
  for (int i = 0; i < it.iters; ++i)
    b.run();
  const double w1 = benchm::nowUs(), c1 = benchm::cpuUs();

  setPhase(rank, where + ", statistics");
  b.maxDoubles(&times);
  std::vector<double> loop = {(w1 - w0) / it.iters / div};
  b.maxDoubles(&loop);
  // p2p: only ranks 0 and 1 take part, the others' CPU time is left out.
  const bool counts = !benchm::isP2p(op) || rank < 2;
  std::vector<double> cpu = {counts ? (c1 - c0) / it.iters / div : 0.0};
  b.sumDoubles(&cpu);
  const int participants = benchm::isP2p(op) ? std::min(n, 2) : n;
  b.release();
  if (rank == 0)
    benchm::printRow(
        benchm::makeRow(a.lib, op, n, l.bytes, times, loop[0], cpu[0] / participants, check));
  benchm::watchdog("rank " + std::to_string(rank) + " between rows", a.timeout_s);
}

template <class Backend>
void runAll(Backend &b, const benchm::Args &a) {
  if (benchm::isP2p(a.op) && b.size() < 2)
    throw std::runtime_error(a.op + " needs at least 2 ranks, have " + std::to_string(b.size()));
  for (std::uint64_t bytes : a.sizes)
    runRow(b, a, bytes);
  phase() = "shutdown";
}

}  // namespace peers

#endif  // NEXAR_BENCH_PEERS_PEER_RUNNER_H
