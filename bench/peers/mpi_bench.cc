// mpi_bench: the Open MPI peer of nexar-bench. Started by mpirun (one process
// per rank); rank 0 prints one JSON row per size on stdout.
//
//   mpirun ... mpi_bench --lib openmpi|openmpi-shm --op OP --sizes LIST
//                        [--iters N] [--warmup W] [--timeout S]
//
// The transport (TCP on loopback or vader shared memory) is chosen by the
// mpirun MCA flags; --lib only labels the rows. Collectives are the plain MPI
// calls with Open MPI's own algorithm choice:
//   allreduce MPI_Allreduce (out of place), broadcast MPI_Bcast (root 0),
//   allgather MPI_Allgather, reduce_scatter MPI_Reduce_scatter_block,
//   alltoall MPI_Alltoall, barrier MPI_Barrier; pingpong MPI_Send/MPI_Recv;
//   stream 64 x MPI_Isend / MPI_Irecv of one buffer, then a 4-byte ack.
// The C API only: Open MPI's deprecated C++ bindings do not build with -Werror.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "bench_measure.h"
#include "peer_runner.h"

namespace {

void mpiCheck(int rc, const char *call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(call) + ": " + std::string(msg, std::size_t(len)));
}

class MpiBackend {
 public:
  MpiBackend() {
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  int rank() const { return rank_; }
  int size() const { return size_; }

  void barrier() { mpiCheck(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  void maxDoubles(std::vector<double> *v) {
    mpiCheck(
        MPI_Allreduce(MPI_IN_PLACE, v->data(), int(v->size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
        "MPI_Allreduce(MAX)");
  }
  void sumDoubles(std::vector<double> *v) {
    mpiCheck(
        MPI_Allreduce(MPI_IN_PLACE, v->data(), int(v->size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
        "MPI_Allreduce(SUM)");
  }
  void gatherDoubles(const std::vector<double> &mine, std::vector<double> *all) {
    all->assign(mine.size() * std::size_t(size_), 0.0);
    mpiCheck(MPI_Gather(mine.data(), int(mine.size()), MPI_DOUBLE, all->data(), int(mine.size()),
                        MPI_DOUBLE, 0, MPI_COMM_WORLD),
             "MPI_Gather");
  }

  void prepare(const std::string &op, const benchm::Layout &l, float *in, float *out) {
    op_ = op;
    l_ = l;
    in_ = in;
    out_ = out;
    if (l.count > std::size_t(INT32_MAX)) throw std::runtime_error("size too large for int counts");
    if (op == "stream") reqs_.resize(benchm::kStreamWindow);
  }

  void run() {
    const int count = int(l_.count), block = int(l_.block);
    if (op_ == "allreduce") {
      mpiCheck(MPI_Allreduce(in_, out_, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
               "MPI_Allreduce");
    } else if (op_ == "broadcast") {
      mpiCheck(MPI_Bcast(out_, count, MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    } else if (op_ == "allgather") {
      mpiCheck(MPI_Allgather(in_, block, MPI_FLOAT, out_, block, MPI_FLOAT, MPI_COMM_WORLD),
               "MPI_Allgather");
    } else if (op_ == "reduce_scatter") {
      mpiCheck(MPI_Reduce_scatter_block(in_, out_, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
               "MPI_Reduce_scatter_block");
    } else if (op_ == "alltoall") {
      mpiCheck(MPI_Alltoall(in_, block, MPI_FLOAT, out_, block, MPI_FLOAT, MPI_COMM_WORLD),
               "MPI_Alltoall");
    } else if (op_ == "barrier") {
      barrier();
    } else if (op_ == "pingpong") {
      peers::roundTrip(*this, in_, out_, l_.count);
    } else if (op_ == "stream") {
      runStreamWindow();
    } else {
      throw std::runtime_error("unknown op " + op_);
    }
  }

  const float *result() const { return out_; }

  void send(const float *p, std::size_t count, int peer) {
    mpiCheck(MPI_Send(p, int(count), MPI_FLOAT, peer, kDataTag, MPI_COMM_WORLD), "MPI_Send");
  }
  void recv(float *p, std::size_t count, int peer) {
    mpiCheck(MPI_Recv(p, int(count), MPI_FLOAT, peer, kDataTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
             "MPI_Recv");
  }

  void release() { reqs_.clear(); }

 private:
  static constexpr int kDataTag = 1, kAckTag = 2;

  // osu_bw: a window of non-blocking sends of one buffer, then one ack.
  void runStreamWindow() {
    const int count = int(l_.count);
    float ack[1] = {0.0f};
    if (rank_ == 0) {
      for (int k = 0; k < benchm::kStreamWindow; ++k)
        mpiCheck(MPI_Isend(in_, count, MPI_FLOAT, 1, kDataTag, MPI_COMM_WORLD, &reqs_[k]),
                 "MPI_Isend");
      mpiCheck(MPI_Waitall(benchm::kStreamWindow, reqs_.data(), MPI_STATUSES_IGNORE),
               "MPI_Waitall(send)");
      mpiCheck(MPI_Recv(ack, 1, MPI_FLOAT, 1, kAckTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
               "MPI_Recv(ack)");
    } else if (rank_ == 1) {
      for (int k = 0; k < benchm::kStreamWindow; ++k)
        mpiCheck(MPI_Irecv(out_, count, MPI_FLOAT, 0, kDataTag, MPI_COMM_WORLD, &reqs_[k]),
                 "MPI_Irecv");
      mpiCheck(MPI_Waitall(benchm::kStreamWindow, reqs_.data(), MPI_STATUSES_IGNORE),
               "MPI_Waitall(recv)");
      mpiCheck(MPI_Send(ack, 1, MPI_FLOAT, 0, kAckTag, MPI_COMM_WORLD), "MPI_Send(ack)");
    }
  }

  int rank_ = 0, size_ = 1;
  std::string op_;
  benchm::Layout l_;
  float *in_ = nullptr;
  float *out_ = nullptr;
  std::vector<MPI_Request> reqs_;
};

}  // namespace

int main(int argc, char **argv) {
  benchm::Args args;
  std::string err;
  if (!benchm::parseArgs(argc, argv, &args, &err)) {
    if (err != "help") std::fprintf(stderr, "mpi_bench: %s\n", err.c_str());
    std::fprintf(stderr, "mpi_bench %s", benchm::usageText());
    return err == "help" ? 0 : 2;
  }
  if (args.rank >= 0 || args.world >= 0 || !args.store.empty()) {
    std::fprintf(stderr, "mpi_bench: --rank/--world/--store are gloo_bench's; mpirun sets ranks\n");
    return 2;
  }
  benchm::watchdog("MPI_Init", args.timeout_s);
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    MpiBackend b;
    peers::runAll(b, args);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "mpi_bench: rank %d: %s: %s\n", rank, peers::phase().c_str(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  benchm::watchdog("MPI_Finalize", args.timeout_s);
  MPI_Finalize();
  return 0;
}
