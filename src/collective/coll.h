// Coll: what every collective algorithm works with. It numbers the
// algorithm's messages (tag = collective sequence number and step), stamps
// each with a check of what this rank called (operation, dtype, count, root,
// sequence number) so ranks that issued different collectives fail with
// NEXAR_ERR_MISMATCH on the first message, and bounds every wait by the
// collective timeout (the barrier timeout for barriers).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/communicator.h"
#include "client/transfer.h"
#include "core/buffer_pool.h"
#include "engine/task.h"

namespace nexar {

enum class CollKind : uint8_t {
  Allreduce = 1,
  Broadcast,
  Reduce,
  Allgather,
  ReduceScatter,
  Alltoall,
  Gather,
  Scatter,
  Scan,
  Exscan,
  Barrier,
  Split,
  AllreduceBucketed,    // one bucket of nexar_allreduce_bucketed
  AllreduceCompressed,  // nexar_allreduce_compressed
};
const char *coll_name(CollKind k);

struct CollArgs {
  const void *sendbuf = nullptr;
  void *recvbuf = nullptr;
  size_t count = 0;  // elements, as the C ABI call counts them
  nexar_dtype_t dtype = NEXAR_DTYPE_U8;
  nexar_op_t op = NEXAR_OP_SUM;
  uint32_t root = 0;
};

// What the flight recorder keeps of a collective's arguments (its kind
// through transport; the rest of out is the caller's).
void describe_for_flight(Communicator *comm, CollKind kind, const CollArgs &a, fr::AtOnce *out);
// NEXAR_BARRIER_TIMEOUT_SECS or NEXAR_COLLECTIVE_TIMEOUT_SECS, as kind takes.
uint64_t coll_timeout_ms(const Config &cfg, CollKind kind);

class Coll {
 public:
  // seq: the collective number, 0 for the operation's own (an operation may
  // hold several, see OpContext::coll_seq_count).
  // deadline_ns 0: the collective's timeout from now (a phase of another
  // collective passes that one's, so the timeout bounds the whole).
  Coll(Communicator *comm, OpContext *op, CollKind kind, const CollArgs &args, uint64_t seq = 0,
       uint64_t deadline_ns = 0);

  uint32_t rank() const { return comm_->rank(); }
  uint32_t size() const { return comm_->size(); }
  const CollArgs &args() const { return args_; }
  size_t esize() const { return esize_; }
  Communicator *comm() const { return comm_; }
  OpContext *op() const { return op_; }
  BufferPool &pool() const { return comm_->client().pool(); }
  const Config &config() const { return comm_->config(); }
  uint64_t seq() const { return seq_; }
  // "allreduce #12": the prefix of every message this collective reports,
  // formatted on first use (most collectives never report one).
  const char *what() const;
  uint32_t check() const { return check_; }
  CollKind kind() const { return kind_; }
  // When the collective's timeout ends it (now_ns() clock).
  uint64_t deadline_ns() const { return deadline_ns_; }
  // Tells the flight recorder which algorithm runs ("ring").
  void note_algorithm(const char *name) const { fr::algorithm(op_->trace(), name); }

  // Step numbers must differ between messages of one collective that travel
  // between the same two ranks (0 <= step < 2^24).
  Task<Status> send(uint32_t to, uint32_t step, const void *data, uint64_t bytes);
  Task<Status> recv(uint32_t from, uint32_t step, void *data, uint64_t bytes);
  // Receives a vector of the collective's dtype and leaves (incoming op own),
  // or (own op incoming) with own_first, in data, reducing each packet as it
  // arrives (own may be data).
  Task<Status> recv_reduce(uint32_t from, uint32_t step, void *data, const void *own,
                           uint64_t bytes, bool own_first = false);
  // After the algorithm: a rank that only sent (a broadcast root, a reduce
  // leaf) waits for an empty "done" frame from each rank it sent to, which
  // every rank sends to the peers it heard from but never sent to. So a rank
  // whose peers ran a different collective learns it instead of reporting
  // success. Ranks that received anything already checked a peer's frame.
  Task<Status> confirm();

  // Sends and receives at once (both must finish; the first failure wins).
  Task<Status> sendrecv(uint32_t to, const void *sdata, uint64_t sbytes, uint32_t from, void *rdata,
                        uint64_t rbytes, uint32_t step);
  // The same with one peer, the receive reducing as recv_reduce does.
  Task<Status> sendrecv_reduce(uint32_t peer, const void *sdata, uint64_t sbytes, void *rdata,
                               const void *own, uint64_t rbytes, uint32_t step, bool own_first);

 private:
  static constexpr uint32_t kDoneStep = (1u << 24) - 1;  // reserved for confirm()
  Task<Status> both(Task<Status> a, Task<Status> b);
  uint64_t tag(uint32_t step) const { return (seq() << 24) | step; }
  OpScope scope() const { return {comm_, op_, deadline_ns_}; }
  // The message of `step` to or from peer.
  Envelope envelope(uint32_t peer, uint32_t step) const {
    return {peer, wire::FrameKind::Collective, tag(step), check_, what()};
  }
  // Per peer: this rank sent to / received from it. Sized at the first
  // message: a collective on shared memory sends none.
  std::vector<uint8_t> sent_, heard_;
  void mark(std::vector<uint8_t> *v, uint32_t peer) {
    if (v->empty()) v->assign(size(), 0);
    (*v)[peer] = 1;
  }
  static bool marked(const std::vector<uint8_t> &v, uint32_t peer) { return !v.empty() && v[peer]; }

  Communicator *comm_;
  OpContext *op_;
  CollKind kind_;
  CollArgs args_;
  uint64_t seq_;
  size_t esize_;
  uint32_t check_;
  uint64_t deadline_ns_;
  mutable std::string what_;
};

// Runs one collective algorithm on its Coll and reports mismatches to every
// peer, so that all ranks involved fail promptly instead of timing out.
Task<Status> run_collective(Communicator *comm, OpContext *op, CollKind kind, CollArgs args,
                            Task<Status> (*algorithm)(Coll &));
// The same for an algorithm with state, as collective number `number` (0:
// the operation's own), ending by deadline_ns (0: its own timeout).
using CollAlgorithm = std::function<Task<Status>(Coll &)>;
Task<Status> run_collective_as(Communicator *comm, OpContext *op, CollKind kind, CollArgs args,
                               CollAlgorithm algorithm, uint64_t number, uint64_t deadline_ns = 0);

}  // namespace nexar
