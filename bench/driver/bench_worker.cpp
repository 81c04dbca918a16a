#include "bench_worker.h"

#include <nexar.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "bench_latch.h"
#include "bench_measure.h"
#include "peer_runner.h"

namespace nexar_bench {

namespace {

// Tags of the point-to-point ops (collectives have their own sequence).
constexpr uint32_t kTagData = 11, kTagAck = 12;

void ok(nexar_status_t s, const char *what) {
  if (s != NEXAR_OK)
    throw std::runtime_error(std::string(what) + " failed: " + nexar_status_str(s) + " " +
                             nexar_last_error_message());
}

// nexar as a Backend of the measurement loop the peer programs use
// (bench/peers/peer_runner.h): the same check, warm-up, timed iterations and
// back-to-back loop, so the rows compare like for like. Every timed operation
// is a blocking call (done == NULL), except the stream window, which keeps
// kStreamWindow sends in flight as MPI_Isend does.
class NexarBackend {
 public:
  NexarBackend(nexar_comm_t *c, unsigned timeout_s)
      : c_(c),
        rank_(int(nexar_comm_rank(c))),
        size_(int(nexar_comm_size(c))),
        timeout_s_(timeout_s ? timeout_s : 300) {
    if (const char *s = getenv("NEXAR_BENCH_TEST_STALL_SECS")) stall_s_ = atoi(s);
    if (const char *s = getenv("NEXAR_BENCH_SYMM")) symm_ = atoi(s) == 1;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  void barrier() { ok(nexar_barrier(c_, nullptr, nullptr), "nexar_barrier"); }
  void maxDoubles(std::vector<double> *v) { reduce(v, NEXAR_OP_MAX); }
  void sumDoubles(std::vector<double> *v) { reduce(v, NEXAR_OP_SUM); }
  void gatherDoubles(const std::vector<double> &mine, std::vector<double> *all) {
    all->assign(mine.size() * size_t(size_), 0.0);
    ok(nexar_allgather(c_, mine.data(), all->data(), mine.size(), NEXAR_DTYPE_F64, nullptr,
                       nullptr),
       "nexar_allgather (check verdicts)");
  }

  void prepare(const std::string &op, const benchm::Layout &l, float *in, float *out) {
    op_ = op;
    l_ = l;
    in_ = in;
    out_ = out;
    if (symm_) use_symmetric_buffers();
    if (op == "bucketed" || op == "per_tensor") {
      // The tensors lie one after the other in out (bucketed works in place).
      counts_ = benchm::gradientList(l.count);
      size_t at = 0;
      tensors_.clear();
      for (size_t n : counts_) {
        n = std::min(n, l.count - at);
        tensors_.push_back({out_ + at, n});
        at += n;
      }
      tensors_.back().count += l.count - at;  // the rounding's rest
      copy_in_ = true;
    } else if (benchm::isCompressedOp(op)) {
      const int32_t kind = op == "compressed_topk" ? NEXAR_COMPRESS_TOPK : NEXAR_COMPRESS_RANDOMK;
      ok(nexar_compressor_create(&compressor_, kind, benchm::kCompressRatio, l.count,
                                 NEXAR_DTYPE_F32, 1),
         "nexar_compressor_create");
    }
  }

  void run() {
    maybe_stall();
    if (symm_copy_in_) {
      // The first run after prepare is the check's, on what it filled in.
      memcpy(symm_in_, runner_in_, l_.in_count * sizeof(float));
      memcpy(symm_out_, runner_out_, l_.out_count * sizeof(float));
      symm_copy_in_ = false;
    }
    if (op_ == "allreduce") {
      ok(nexar_allreduce(c_, in_, out_, l_.count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr, nullptr),
         "nexar_allreduce");
    } else if (op_ == "broadcast") {
      ok(nexar_broadcast(c_, out_, l_.count, NEXAR_DTYPE_F32, 0, nullptr, nullptr),
         "nexar_broadcast");
    } else if (op_ == "allgather") {
      ok(nexar_allgather(c_, in_, out_, l_.block, NEXAR_DTYPE_F32, nullptr, nullptr),
         "nexar_allgather");
    } else if (op_ == "reduce_scatter") {
      ok(nexar_reduce_scatter(c_, in_, out_, l_.block, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                              nullptr),
         "nexar_reduce_scatter");
    } else if (op_ == "alltoall") {
      ok(nexar_alltoall(c_, in_, out_, l_.block, NEXAR_DTYPE_F32, nullptr, nullptr),
         "nexar_alltoall");
    } else if (op_ == "bucketed") {
      // In place: the check run starts from in; later runs reduce what the
      // previous one left (the runner zeroes both buffers after the check).
      if (copy_in_) memcpy(out_, in_, l_.count * sizeof(float));
      copy_in_ = false;
      ok(nexar_allreduce_bucketed(c_, tensors_.data(), tensors_.size(), NEXAR_DTYPE_F32,
                                  NEXAR_OP_SUM, 0, nullptr, nullptr),
         "nexar_allreduce_bucketed");
    } else if (op_ == "per_tensor") {
      for (const nexar_tensor_t &t : tensors_) {
        const float *src = in_ + (static_cast<float *>(t.buf) - out_);
        ok(nexar_allreduce(c_, src, t.buf, t.count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                           nullptr),
           "nexar_allreduce (per tensor)");
      }
    } else if (benchm::isCompressedOp(op_)) {
      ok(nexar_allreduce_compressed(c_, in_, out_, l_.count, NEXAR_DTYPE_F32, compressor_, nullptr,
                                    nullptr),
         "nexar_allreduce_compressed");
    } else if (op_ == "barrier") {
      barrier();
    } else if (op_ == "pingpong") {
      peers::roundTrip(*this, in_, out_, l_.count);
    } else if (op_ == "stream") {
      stream_window();
    } else {
      throw std::runtime_error("unknown op " + op_);
    }
  }

  const float *result() const { return out_; }

  void send(const float *p, size_t count, int peer) {
    ok(nexar_send(c_, p, count * sizeof(float), uint32_t(peer), kTagData, nullptr, nullptr),
       "nexar_send");
  }
  void recv(float *p, size_t count, int peer) {
    ok(nexar_recv(c_, p, count * sizeof(float), uint32_t(peer), kTagData, nullptr, nullptr),
       "nexar_recv");
  }

  void release() {
    if (symm_in_) ok(nexar_mem_free(c_, symm_in_), "nexar_mem_free");
    if (symm_out_) ok(nexar_mem_free(c_, symm_out_), "nexar_mem_free");
    symm_in_ = symm_out_ = nullptr;
    nexar_compressor_destroy(compressor_);
    compressor_ = nullptr;
    tensors_.clear();
  }

 private:
  void reduce(std::vector<double> *v, nexar_op_t op) {
    std::vector<double> out(v->size());
    ok(nexar_allreduce(c_, v->data(), out.data(), v->size(), NEXAR_DTYPE_F64, op, nullptr, nullptr),
       "nexar_allreduce (statistics)");
    *v = std::move(out);
  }

  // osu_bw: kStreamWindow sends of one buffer in flight, then one ack back.
  void stream_window() {
    const size_t bytes = l_.count * sizeof(float);
    float ack[1] = {0.0f};
    Latch l(benchm::kStreamWindow);
    if (rank_ == 0) {
      for (int k = 0; k < benchm::kStreamWindow; ++k)
        ok(nexar_send(c_, in_, bytes, 1, kTagData, Latch::done, &l), "nexar_send (stream)");
      l.wait(timeout_s_, "stream sends");
      ok(nexar_recv(c_, ack, benchm::kStreamAckBytes, 1, kTagAck, nullptr, nullptr),
         "nexar_recv (ack)");
    } else if (rank_ == 1) {
      for (int k = 0; k < benchm::kStreamWindow; ++k)
        ok(nexar_recv(c_, out_, bytes, 0, kTagData, Latch::done, &l), "nexar_recv (stream)");
      l.wait(timeout_s_, "stream receives");
      ok(nexar_send(c_, ack, benchm::kStreamAckBytes, 0, kTagAck, nullptr, nullptr),
         "nexar_send (ack)");
    }
  }

  // nexar-symm: the row runs on buffers from nexar_mem_alloc, which the
  // check's data is copied into on the first run.
  void use_symmetric_buffers() {
    void *in = nullptr, *out = nullptr;
    ok(nexar_mem_alloc(c_, std::max<size_t>(l_.in_count, 1) * sizeof(float), &in),
       "nexar_mem_alloc (input)");
    ok(nexar_mem_alloc(c_, std::max<size_t>(l_.out_count, 1) * sizeof(float), &out),
       "nexar_mem_alloc (output)");
    runner_in_ = in_;
    runner_out_ = out_;
    in_ = symm_in_ = static_cast<float *>(in);
    out_ = symm_out_ = static_cast<float *>(out);
    symm_copy_in_ = true;
  }

  // For the test of the driver's timeout (NEXAR_BENCH_TEST_STALL_SECS): rank
  // 0 hangs in its first timed iteration.
  void maybe_stall() {
    if (stall_s_ <= 0 || rank_ != 0) return;
    const std::string &p = peers::phase();
    if (p.size() < 7 || p.compare(p.size() - 7, 7, ", timed") != 0) return;
    std::this_thread::sleep_for(std::chrono::seconds(stall_s_));
    stall_s_ = 0;
  }

  nexar_comm_t *c_;
  const int rank_, size_;
  const unsigned timeout_s_;
  int stall_s_ = 0;
  std::string op_;
  benchm::Layout l_;
  float *in_ = nullptr, *out_ = nullptr;
  bool symm_ = false, symm_copy_in_ = false;
  float *symm_in_ = nullptr, *symm_out_ = nullptr, *runner_in_ = nullptr, *runner_out_ = nullptr;
  // Gradient rows (bench_gradients.h).
  std::vector<size_t> counts_;
  std::vector<nexar_tensor_t> tensors_;
  bool copy_in_ = false;
  nexar_compressor_t *compressor_ = nullptr;
};

// The communicator, destroyed at scope exit.
struct Comm {
  nexar_comm_t *c = nullptr;
  Comm() = default;
  Comm(const Comm &) = delete;
  Comm &operator=(const Comm &) = delete;
  ~Comm() { nexar_comm_destroy(c); }
};

}  // namespace

int run_worker(int argc, char **argv) {
  benchm::Args a;
  std::string err;
  if (!benchm::parseArgs(argc, argv, &a, &err)) {
    if (err != "help") fprintf(stderr, "nexar-bench --worker: %s\n", err.c_str());
    fprintf(stderr, "nexar-bench --worker %s", benchm::usageText());
    return err == "help" ? 0 : 2;
  }
  benchm::watchdog("joining the cluster (nexar_comm_init_from_env)", a.timeout_s);
  Comm comm;
  if (nexar_comm_init_from_env(&comm.c) != NEXAR_OK) {
    fprintf(stderr, "nexar-bench worker: nexar_comm_init_from_env failed: %s\n",
            nexar_last_error_message());
    return 1;
  }
  const int rank = int(nexar_comm_rank(comm.c));
  try {
    NexarBackend b(comm.c, a.timeout_s);
    peers::runAll(b, a);
    benchm::watchdog("rank " + std::to_string(rank) + " final barrier", a.timeout_s);
    b.barrier();
  } catch (const std::exception &e) {
    fprintf(stderr, "nexar-bench worker: rank %d: %s: %s\n", rank, peers::phase().c_str(),
            e.what());
    fflush(stderr);
    nexar_comm_abort(comm.c);
    return 3;
  }
  benchm::watchdog("rank " + std::to_string(rank) + " shutdown", a.timeout_s);
  return 0;
}

}  // namespace nexar_bench
