// gloo_bench: the Gloo peer of nexar-bench. The driver starts one process per
// rank; they meet through a gloo FileStore in DIR (fresh for each launch) and
// connect with Gloo's TCP transport on 127.0.0.1. Rank 0 prints one JSON row
// per size on stdout.
//
//   gloo_bench --rank R --world N --store DIR --lib gloo|gloo-hd --op OP
//              --sizes LIST [--iters N] [--warmup W] [--timeout S]
//
// --lib gloo (the new API, as PyTorch's ProcessGroupGloo uses it for CPU
// tensors): allreduce gloo::allreduce RING (out of place), broadcast
// gloo::broadcast (root 0, in place), allgather gloo::allgather, alltoall
// gloo::alltoall, barrier gloo::barrier, reduce_scatter the legacy
// ReduceScatterHalvingDoubling (in place; Gloo has no new-API
// reduce-scatter), pingpong and stream unbound-buffer send/recv.
// --lib gloo-hd: allreduce with the legacy AllreduceHalvingDoubling (in
// place); any other op is a usage error (exit status 2).
// The timing barrier is gloo::barrier in both cases.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "bench_measure.h"
#include "peer_runner.h"

namespace {

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

// Tags of the new-API operations (each op runs alone, so fixed tags do).
enum : uint32_t { kTagBarrier = 1, kTagMax, kTagSum, kTagGather, kTagOp };

class GlooBackend {
 public:
  GlooBackend(std::shared_ptr<gloo::Context> ctx, bool legacy_hd)
      : ctx_(std::move(ctx)), legacy_hd_(legacy_hd) {}

  int rank() const { return ctx_->rank; }
  int size() const { return ctx_->size; }

  void barrier() {
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(kTagBarrier);
    gloo::barrier(opts);
  }

  void maxDoubles(std::vector<double> *v) { reduceDoubles(v, &gloo::max<double>, kTagMax); }
  void sumDoubles(std::vector<double> *v) { reduceDoubles(v, &gloo::sum<double>, kTagSum); }

  void gatherDoubles(const std::vector<double> &mine, std::vector<double> *all) {
    all->assign(mine.size() * std::size_t(size()), 0.0);
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(const_cast<double *>(mine.data()), mine.size());
    opts.setOutput(all->data(), all->size());
    opts.setTag(kTagGather);
    gloo::allgather(opts);
  }

  void prepare(const std::string &op, const benchm::Layout &l, float *in, float *out) {
    op_ = op;
    l_ = l;
    in_ = in;
    out_ = out;
    result_ = out;
    if (l.count > std::size_t(INT32_MAX)) throw std::runtime_error("size too large for int counts");
    if (op == "allreduce" && legacy_hd_) {
      hd_ = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx_, std::vector<float *>{in},
                                                                    int(l.count));
      result_ = in;
    } else if (op == "reduce_scatter") {
      rs_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
          ctx_, std::vector<float *>{in}, int(l.count),
          std::vector<int>(std::size_t(size()), int(l.block)));
      result_ = in;  // this rank's block lands at the start of the buffer
    } else if (benchm::isP2p(op)) {
      // Every rank draws the slots, so the counters stay in step.
      slot_ = uint64_t(ctx_->nextSlot(2));
      const std::size_t msg = l.count * sizeof(float);
      if (rank() == 0) {
        data_ = ctx_->createUnboundBuffer(in, msg);
        back_ = ctx_->createUnboundBuffer(out, msg);
      } else if (rank() == 1) {
        data_ = ctx_->createUnboundBuffer(out, msg);
      }
      ack_ = ctx_->createUnboundBuffer(ack_value_, sizeof ack_value_);
    }
  }

  void run() {
    if (op_ == "allreduce") {
      if (hd_) {
        hd_->run();
        return;
      }
      gloo::AllreduceOptions opts(ctx_);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setInput(in_, l_.count);
      opts.setOutput(out_, l_.count);
      opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      opts.setTag(kTagOp);
      gloo::allreduce(opts);
    } else if (op_ == "broadcast") {
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(out_, l_.count);
      opts.setRoot(0);
      opts.setTag(kTagOp);
      gloo::broadcast(opts);
    } else if (op_ == "allgather") {
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(in_, l_.block);
      opts.setOutput(out_, l_.count);
      opts.setTag(kTagOp);
      gloo::allgather(opts);
    } else if (op_ == "reduce_scatter") {
      rs_->run();
    } else if (op_ == "alltoall") {
      gloo::AlltoallOptions opts(ctx_);
      opts.setInput(in_, l_.count);
      opts.setOutput(out_, l_.count);
      opts.setTag(kTagOp);
      gloo::alltoall(opts);
    } else if (op_ == "barrier") {
      barrier();
    } else if (op_ == "pingpong") {
      if (rank() == 0) {
        data_->send(1, slot_);
        back_->recv(1, slot_);
        waitSend(*data_, "ping send");
        waitRecv(*back_, "pong recv");
      } else if (rank() == 1) {
        data_->recv(0, slot_);
        waitRecv(*data_, "ping recv");
        data_->send(0, slot_);
        waitSend(*data_, "pong send");
      }
    } else if (op_ == "stream") {
      runStreamWindow();
    } else {
      throw std::runtime_error("unknown op " + op_);
    }
  }

  const float *result() const { return result_; }

  void send(const float *p, std::size_t count, int peer) {
    auto buf = ctx_->createUnboundBuffer(const_cast<float *>(p), count * sizeof(float));
    buf->send(peer, slot_);
    waitSend(*buf, "send");
  }
  void recv(float *p, std::size_t count, int peer) {
    auto buf = ctx_->createUnboundBuffer(p, count * sizeof(float));
    buf->recv(peer, slot_);
    waitRecv(*buf, "recv");
  }

  void release() {
    hd_.reset();
    rs_.reset();
    data_.reset();
    back_.reset();
    ack_.reset();
  }

 private:
  void reduceDoubles(std::vector<double> *v, ReduceFn fn, uint32_t tag) {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(v->data(), v->size());
    opts.setReduceFunction(fn);
    opts.setTag(tag);
    gloo::allreduce(opts);
  }

  void waitSend(gloo::transport::UnboundBuffer &b, const char *what) {
    if (!b.waitSend(ctx_->getTimeout())) throw std::runtime_error(std::string(what) + " aborted");
  }
  void waitRecv(gloo::transport::UnboundBuffer &b, const char *what) {
    if (!b.waitRecv(ctx_->getTimeout())) throw std::runtime_error(std::string(what) + " aborted");
  }

  // osu_bw: a window of sends of one buffer, then one small ack back.
  void runStreamWindow() {
    const uint64_t ack_slot = slot_ + 1;
    if (rank() == 0) {
      ack_->recv(1, ack_slot);
      for (int k = 0; k < benchm::kStreamWindow; ++k)
        data_->send(1, slot_);
      for (int k = 0; k < benchm::kStreamWindow; ++k)
        waitSend(*data_, "stream send");
      waitRecv(*ack_, "stream ack recv");
    } else if (rank() == 1) {
      for (int k = 0; k < benchm::kStreamWindow; ++k)
        data_->recv(0, slot_);
      for (int k = 0; k < benchm::kStreamWindow; ++k)
        waitRecv(*data_, "stream recv");
      ack_->send(0, ack_slot);
      waitSend(*ack_, "stream ack send");
    }
  }

  std::shared_ptr<gloo::Context> ctx_;
  bool legacy_hd_;
  std::string op_;
  benchm::Layout l_;
  float *in_ = nullptr;
  float *out_ = nullptr;
  const float *result_ = nullptr;
  std::unique_ptr<gloo::AllreduceHalvingDoubling<float>> hd_;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs_;
  uint64_t slot_ = 0;
  std::unique_ptr<gloo::transport::UnboundBuffer> data_, back_, ack_;
  float ack_value_[1] = {0.0f};
};

}  // namespace

int main(int argc, char **argv) {
  benchm::Args args;
  std::string err;
  if (!benchm::parseArgs(argc, argv, &args, &err)) {
    if (err != "help") std::fprintf(stderr, "gloo_bench: %s\n", err.c_str());
    std::fprintf(stderr, "gloo_bench %s", benchm::usageText());
    return err == "help" ? 0 : 2;
  }
  if (args.rank < 0 || args.world < 1 || args.store.empty() || args.rank >= args.world) {
    std::fprintf(stderr, "gloo_bench: needs --rank R --world N --store DIR with 0 <= R < N\n");
    return 2;
  }
  if (args.lib != "gloo" && args.lib != "gloo-hd") {
    std::fprintf(stderr, "gloo_bench: --lib must be gloo or gloo-hd, not '%s'\n", args.lib.c_str());
    return 2;
  }
  if (args.lib == "gloo-hd" && args.op != "allreduce") {
    std::fprintf(stderr, "gloo_bench: gloo-hd measures allreduce only, not %s\n", args.op.c_str());
    return 2;
  }
  const std::string who = "gloo_bench: rank " + std::to_string(args.rank);
  try {
    benchm::watchdog("rank " + std::to_string(args.rank) + " rendezvous in " + args.store,
                     args.timeout_s);
    peers::phase() = "rendezvous in " + args.store;
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    attr.ai_family = AF_INET;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(args.store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(args.rank, args.world);
    ctx->setTimeout(std::chrono::seconds(args.timeout_s ? args.timeout_s : 86400));
    ctx->connectFullMesh(store, dev);
    GlooBackend b(ctx, args.lib == "gloo-hd");
    peers::runAll(b, args);
    // Leave together, so that no rank sees a peer's socket close mid-op.
    b.barrier();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: %s: %s\n", who.c_str(), peers::phase().c_str(), e.what());
    return 3;
  }
  return 0;
}
