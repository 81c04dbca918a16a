#include "bench_worker.h"

#include <nexar.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "bench_measure.h"

namespace nexar_bench {

namespace {

// Tags of the point-to-point ops (collectives have their own sequence).
constexpr uint32_t kTagPing = 11, kTagPong = 12, kTagStream = 13, kTagAck = 14;

// One communicator and what this rank is doing, for error messages.
class Worker {
 public:
  Worker(nexar_comm_t *c, const benchm::Args &a)
      : c_(c), a_(a), rank_(int(nexar_comm_rank(c))), n_(int(nexar_comm_size(c))) {}

  int run() {
    if (benchm::isP2p(a_.op) && n_ < 2) {
      fprintf(stderr, "nexar-bench worker: %s needs at least 2 ranks\n", a_.op.c_str());
      return 2;
    }
    for (uint64_t size : a_.sizes)
      row(size);
    benchm::watchdog("shutdown", a_.timeout_s);
    ok(nexar_barrier(c_, nullptr, nullptr), "final barrier");
    return 0;
  }

 private:
  // Exits on a failed call: the driver reports the row as failed with this.
  void ok(nexar_status_t s, const char *what) {
    if (s == NEXAR_OK) return;
    fprintf(stderr, "nexar-bench worker rank %d: %s %s (%s): %s failed: %s %s\n", rank_,
            a_.op.c_str(), std::to_string(layout_.bytes).c_str(), phase_, what, nexar_status_str(s),
            nexar_last_error_message());
    exit(1);
  }

  void phase(const char *p) {
    phase_ = p;
    benchm::watchdog("rank " + std::to_string(rank_) + " nexar " + a_.op + " " +
                         std::to_string(layout_.bytes) + " B: " + p,
                     a_.timeout_s);
  }

  // Completion of asynchronous operations (the stream window), waited for
  // with a bound.
  class Latch {
   public:
    explicit Latch(int n) : left_(n) {}
    static void done(void *ud, const nexar_completion_t *c) {
      auto *l = static_cast<Latch *>(ud);
      std::lock_guard<std::mutex> g(l->mu_);
      if (c->status != NEXAR_OK && l->status_ == NEXAR_OK) {
        l->status_ = c->status;
        l->message_ = c->message;
      }
      if (--l->left_ == 0) l->cv_.notify_all();
    }
    // NEXAR_ERR_TIMEOUT when not all completed within `seconds`.
    nexar_status_t wait(unsigned seconds, std::string *message) {
      std::unique_lock<std::mutex> g(mu_);
      if (!cv_.wait_for(g, std::chrono::seconds(seconds), [&] { return left_ == 0; })) {
        *message = std::to_string(left_) + " operations still pending";
        return NEXAR_ERR_TIMEOUT;
      }
      *message = message_;
      return status_;
    }

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    int left_;
    nexar_status_t status_ = NEXAR_OK;
    std::string message_;
  };

  void wait(Latch &l, const char *what) {
    std::string msg;
    const nexar_status_t s = l.wait(a_.timeout_s ? a_.timeout_s : 300, &msg);
    if (s != NEXAR_OK) {
      fprintf(stderr, "nexar-bench worker rank %d: %s %llu (%s): %s: %s %s\n", rank_, a_.op.c_str(),
              static_cast<unsigned long long>(layout_.bytes), phase_, what, nexar_status_str(s),
              msg.c_str());
      exit(1);
    }
  }

  // One operation, blocking (done == NULL), on the current buffers.
  void op() {
    const std::string &op = a_.op;
    float *in = in_.data(), *out = out_.data();
    if (op == "allreduce") {
      ok(nexar_allreduce(c_, in, out, layout_.count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                         nullptr),
         "nexar_allreduce");
    } else if (op == "broadcast") {
      ok(nexar_broadcast(c_, out, layout_.count, NEXAR_DTYPE_F32, 0, nullptr, nullptr),
         "nexar_broadcast");
    } else if (op == "allgather") {
      ok(nexar_allgather(c_, in, out, layout_.block, NEXAR_DTYPE_F32, nullptr, nullptr),
         "nexar_allgather");
    } else if (op == "reduce_scatter") {
      ok(nexar_reduce_scatter(c_, in, out, layout_.block, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                              nullptr),
         "nexar_reduce_scatter");
    } else if (op == "alltoall") {
      ok(nexar_alltoall(c_, in, out, layout_.block, NEXAR_DTYPE_F32, nullptr, nullptr),
         "nexar_alltoall");
    } else if (op == "barrier") {
      ok(nexar_barrier(c_, nullptr, nullptr), "nexar_barrier");
    } else if (op == "pingpong") {
      const size_t b = layout_.bytes;
      if (rank_ == 0) {
        ok(nexar_send(c_, in, b, 1, kTagPing, nullptr, nullptr), "ping send");
        ok(nexar_recv(c_, out, b, 1, kTagPong, nullptr, nullptr), "pong recv");
      } else if (rank_ == 1) {
        ok(nexar_recv(c_, out, b, 0, kTagPing, nullptr, nullptr), "ping recv");
        ok(nexar_send(c_, out, b, 0, kTagPong, nullptr, nullptr), "pong send");
      }
    } else if (op == "stream") {
      // A window of messages in flight at once (one buffer each side, as
      // osu_bw), then one small ack back.
      const size_t b = layout_.bytes;
      uint32_t ack = 0;
      Latch l(benchm::kStreamWindow);
      if (rank_ == 0) {
        for (int k = 0; k < benchm::kStreamWindow; ++k)
          ok(nexar_send(c_, in, b, 1, kTagStream, Latch::done, &l), "stream send");
        wait(l, "stream sends");
        ok(nexar_recv(c_, &ack, benchm::kStreamAckBytes, 1, kTagAck, nullptr, nullptr), "ack recv");
      } else if (rank_ == 1) {
        for (int k = 0; k < benchm::kStreamWindow; ++k)
          ok(nexar_recv(c_, out, b, 0, kTagStream, Latch::done, &l), "stream recv");
        wait(l, "stream receives");
        ok(nexar_send(c_, &ack, benchm::kStreamAckBytes, 0, kTagAck, nullptr, nullptr), "ack send");
      }
    }
  }

  // The correctness run: this rank's verdict.
  benchm::CheckResult check() {
    const std::string &op = a_.op;
    benchm::CheckResult c;
    if (op == "barrier") {
      std::this_thread::sleep_for(
          std::chrono::microseconds(int64_t(benchm::barrierDelayUs(rank_))));
      double t[2];
      t[0] = benchm::nowUs();
      ok(nexar_barrier(c_, nullptr, nullptr), "nexar_barrier");
      t[1] = -benchm::nowUs();
      double m[2];
      ok(nexar_allreduce(c_, t, m, 2, NEXAR_DTYPE_F64, NEXAR_OP_MAX, nullptr, nullptr),
         "allreduce of the barrier times");
      return benchm::barrierCheck(m[0], -m[1]);
    }
    const size_t count = layout_.count, b = layout_.bytes;
    if (op == "pingpong") {
      if (rank_ == 0) {
        for (size_t i = 0; i < count; ++i)
          in_[i] = benchm::pingValue(i);
        std::fill(out_.begin(), out_.end(), benchm::kSentinel);
        ok(nexar_send(c_, in_.data(), b, 1, kTagPing, nullptr, nullptr), "ping send");
        ok(nexar_recv(c_, out_.data(), b, 1, kTagPong, nullptr, nullptr), "pong recv");
        benchm::checkMessage(&c, -1, out_.data(), count, "echo");
      } else if (rank_ == 1) {
        std::fill(out_.begin(), out_.end(), benchm::kSentinel);
        ok(nexar_recv(c_, out_.data(), b, 0, kTagPing, nullptr, nullptr), "ping recv");
        benchm::checkMessage(&c, -1, out_.data(), count, "ping");
        ok(nexar_send(c_, out_.data(), b, 0, kTagPong, nullptr, nullptr), "pong send");
      }
      return c;
    }
    if (op == "stream") {
      // Every message of a window, in order, each with its own pattern.
      for (int k = 0; k < benchm::kStreamWindow; ++k) {
        if (rank_ == 0) {
          for (size_t i = 0; i < count; ++i)
            in_[i] = benchm::streamValue(k, i);
          ok(nexar_send(c_, in_.data(), b, 1, kTagStream, nullptr, nullptr), "stream send");
        } else if (rank_ == 1) {
          std::fill(out_.begin(), out_.end(), benchm::kSentinel);
          ok(nexar_recv(c_, out_.data(), b, 0, kTagStream, nullptr, nullptr), "stream recv");
          benchm::checkMessage(&c, k, out_.data(), count, "stream");
        }
      }
      return c;
    }
    benchm::fillCheck(op, rank_, n_, layout_, in_.data(), out_.data());
    this->op();
    return benchm::checkOutput(op, rank_, n_, layout_, out_.data());
  }

  void row(uint64_t size) {
    const std::string &op = a_.op;
    layout_ = benchm::layoutFor(op, size, n_);
    const benchm::Iters it = benchm::itersFor(layout_.bytes, a_.warmup, a_.iters);
    const bool p2p = benchm::isP2p(op);
    in_.assign(std::max<size_t>(layout_.in_count, p2p ? layout_.count : 0), 0.0f);
    out_.assign(std::max<size_t>(layout_.out_count, p2p ? layout_.count : 0), 0.0f);

    phase("check");
    const benchm::CheckResult mine = check();
    double enc[benchm::kCheckDoubles];
    benchm::encodeCheck(mine, enc);
    std::vector<double> all(size_t(n_) * benchm::kCheckDoubles);
    ok(nexar_allgather(c_, enc, all.data(), benchm::kCheckDoubles, NEXAR_DTYPE_F64, nullptr,
                       nullptr),
       "allgather of the check verdicts");
    const std::string verdict = benchm::describeChecks(op, all, n_, mine.what);

    std::fill(in_.begin(), in_.end(), 0.0f);
    std::fill(out_.begin(), out_.end(), 0.0f);
    const bool takes_part = !p2p || rank_ < 2;

    phase("warm-up");
    for (int i = 0; i < it.warmup; ++i)
      this->op();

    phase("timed");
    if (const char *stall = getenv("NEXAR_BENCH_TEST_STALL_SECS"); stall && rank_ == 0) {
      // For the test of the driver's timeout: this rank hangs here.
      std::this_thread::sleep_for(std::chrono::seconds(atoi(stall)));
    }
    std::vector<double> t(size_t(it.iters));
    for (int i = 0; i < it.iters; ++i) {
      ok(nexar_barrier(c_, nullptr, nullptr), "nexar_barrier");
      const double t0 = benchm::nowUs();
      this->op();
      t[size_t(i)] = benchm::nowUs() - t0;
    }
    std::vector<double> tmax(t.size());
    ok(nexar_allreduce(c_, t.data(), tmax.data(), t.size(), NEXAR_DTYPE_F64, NEXAR_OP_MAX, nullptr,
                       nullptr),
       "allreduce of the iteration times");
    const double div = benchm::timeDivisor(op);
    for (double &x : tmax)
      x /= div;

    phase("loop");
    ok(nexar_barrier(c_, nullptr, nullptr), "nexar_barrier");
    const double c0 = benchm::cpuUs(), l0 = benchm::nowUs();
    for (int i = 0; i < it.iters; ++i)
      this->op();
    const double loop = (benchm::nowUs() - l0) / it.iters / div;
    const double cpu = takes_part ? (benchm::cpuUs() - c0) / it.iters / div : 0.0;
    double mine2[2] = {cpu, takes_part ? 1.0 : 0.0}, sum[2];
    ok(nexar_allreduce(c_, mine2, sum, 2, NEXAR_DTYPE_F64, NEXAR_OP_SUM, nullptr, nullptr),
       "allreduce of the cpu times");
    double loop_max = 0;
    ok(nexar_allreduce(c_, &loop, &loop_max, 1, NEXAR_DTYPE_F64, NEXAR_OP_MAX, nullptr, nullptr),
       "allreduce of the loop times");
    if (rank_ == 0)
      benchm::printRow(benchm::makeRow(a_.lib, op, n_, layout_.bytes, tmax, loop_max,
                                       sum[1] > 0 ? sum[0] / sum[1] : 0.0, verdict));
  }

  nexar_comm_t *c_;
  const benchm::Args &a_;
  const int rank_, n_;
  benchm::Layout layout_;
  std::vector<float> in_, out_;
  const char *phase_ = "start";
};

// The communicator, destroyed at scope exit.
struct Comm {
  nexar_comm_t *c = nullptr;
  ~Comm() { nexar_comm_destroy(c); }
};

}  // namespace

int run_worker(int argc, char **argv) {
  benchm::Args a;
  std::string err;
  if (!benchm::parseArgs(argc, argv, &a, &err)) {
    fprintf(stderr, "nexar-bench --worker: %s\n%s", err.c_str(), benchm::usageText());
    return 2;
  }
  benchm::watchdog("joining the cluster (nexar_comm_init_from_env)", a.timeout_s);
  Comm comm;
  if (nexar_comm_init_from_env(&comm.c) != NEXAR_OK) {
    fprintf(stderr, "nexar-bench worker: nexar_comm_init_from_env failed: %s\n",
            nexar_last_error_message());
    return 1;
  }
  return Worker(comm.c, a).run();
}

}  // namespace nexar_bench
