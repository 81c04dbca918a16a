#include "collective/coll.h"

#include "client/transfer.h"
#include "collective/stall_report.h"
#include "core/clock.h"
#include "core/dtype.h"
#include "engine/spawn.h"

namespace nexar {
namespace {

// FNV-1a over the fields every rank must agree on, seq last. The state
// before seq is kept per thread for the last descriptor: a loop of one
// collective mixes 8 bytes per call, not 48, and gets the same value.
uint32_t descriptor_check(CollKind kind, const CollArgs &a, uint64_t seq) {
  auto mix = [](uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
    return h;
  };
  struct Last {
    CollKind kind;
    nexar_dtype_t dtype;
    nexar_op_t op;
    uint64_t count;
    uint32_t root;
    uint64_t h = 0;
  };
  thread_local Last last{};
  if (last.h == 0 || last.kind != kind || last.dtype != a.dtype || last.op != a.op ||
      last.count != a.count || last.root != a.root) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(h, static_cast<uint64_t>(kind));
    h = mix(h, static_cast<uint64_t>(a.dtype));
    h = mix(h, static_cast<uint64_t>(a.op));
    h = mix(h, a.count);
    h = mix(h, a.root);
    last = Last{kind, a.dtype, a.op, a.count, a.root, h};
  }
  const uint64_t h = mix(last.h, seq);
  const uint32_t c = static_cast<uint32_t>(h ^ (h >> 32));
  return c ? c : 1;  // 0 means "no check" (point-to-point)
}

// What the flight recorder keeps of a collective's arguments.
void record(Communicator *comm, OpContext *op, CollKind kind, const CollArgs &a) {
  fr::AtOnce r{};
  describe_for_flight(comm, kind, a, &r);
  fr::collective(op->trace(), r.collective, r.dtype, r.op, r.count, r.bytes, r.root, r.transport);
}

}  // namespace

void describe_for_flight(Communicator *comm, CollKind kind, const CollArgs &a, fr::AtOnce *out) {
  const bool rooted = kind == CollKind::Broadcast || kind == CollKind::Reduce ||
                      kind == CollKind::Gather || kind == CollKind::Scatter;
  bool relayed = false;
  for (uint32_t r = 0; r < comm->size() && !relayed; ++r)
    relayed = r != comm->rank() && !comm->client().peer(comm->world_rank_of(r)).direct();
  out->collective = coll_name(kind);
  out->dtype = a.dtype;
  out->op = a.op;
  out->count = a.count;
  out->bytes = uint64_t{a.count} * dtype_size(a.dtype);
  out->root = rooted ? static_cast<int32_t>(a.root) : -1;
  out->transport = relayed ? "relay" : "quic";
}

uint64_t coll_timeout_ms(const Config &cfg, CollKind kind) {
  return kind == CollKind::Barrier ? cfg.barrier_timeout_ms : cfg.collective_timeout_ms;
}

const char *coll_name(CollKind k) {
  switch (k) {
    case CollKind::Allreduce:
      return "allreduce";
    case CollKind::Broadcast:
      return "broadcast";
    case CollKind::Reduce:
      return "reduce";
    case CollKind::Allgather:
      return "allgather";
    case CollKind::ReduceScatter:
      return "reduce_scatter";
    case CollKind::Alltoall:
      return "alltoall";
    case CollKind::Gather:
      return "gather";
    case CollKind::Scatter:
      return "scatter";
    case CollKind::Scan:
      return "scan";
    case CollKind::Exscan:
      return "exscan";
    case CollKind::Barrier:
      return "barrier";
    case CollKind::Split:
      return "split";
    case CollKind::AllreduceBucketed:
      return "allreduce_bucketed";
    case CollKind::AllreduceCompressed:
      return "allreduce_compressed";
  }
  return "collective";
}

Coll::Coll(Communicator *comm, OpContext *op, CollKind kind, const CollArgs &args, uint64_t seq,
           uint64_t deadline_ns)
    : comm_(comm),
      op_(op),
      kind_(kind),
      args_(args),
      seq_(seq ? seq : op->coll_seq()),
      esize_(dtype_size(args.dtype)) {
  check_ = descriptor_check(kind, args, seq_);
  deadline_ns_ =
      deadline_ns ? deadline_ns : now_ns() + coll_timeout_ms(comm->config(), kind) * kNsPerMs;
  // The whole collective shares one deadline: the timeout bounds the
  // operation, not each of its messages.
  if (op->trace()) record(comm, op, kind, args);
}

const char *Coll::what() const {
  if (what_.empty()) {
    const bool barrier = kind_ == CollKind::Barrier;
    const uint64_t timeout_ms = coll_timeout_ms(config(), kind_);
    // Integer tenths: formatting a double costs as much as the rest.
    const uint64_t tenths = (timeout_ms + 50) / 100;
    what_ = format(
        "%s #%llu (%s %llu.%llu s)", coll_name(kind_), static_cast<unsigned long long>(seq_),
        barrier ? "NEXAR_BARRIER_TIMEOUT_SECS" : "NEXAR_COLLECTIVE_TIMEOUT_SECS",
        static_cast<unsigned long long>(tenths / 10), static_cast<unsigned long long>(tenths % 10));
  }
  return what_.c_str();
}

Task<Status> Coll::send(uint32_t to, uint32_t step, const void *data, uint64_t bytes) {
  mark(&sent_, to);
  return send_to(scope(), envelope(to, step), data, bytes, SendCompletion::Copied);
}

Task<Status> Coll::recv(uint32_t from, uint32_t step, void *data, uint64_t bytes) {
  mark(&heard_, from);
  fr::waiting(op_->trace(), static_cast<int32_t>(from), step);
  return recv_from(scope(), envelope(from, step), data, bytes);
}

Task<Status> Coll::recv_reduce(uint32_t from, uint32_t step, void *data, const void *own,
                               uint64_t bytes, bool own_first) {
  mark(&heard_, from);
  fr::waiting(op_->trace(), static_cast<int32_t>(from), step);
  return recv_from(scope(), envelope(from, step), data, bytes,
                   CombineOnArrival{static_cast<const uint8_t *>(own), args_.dtype, args_.op,
                                    esize_, own_first});
}

Task<Status> Coll::sendrecv(uint32_t to, const void *sdata, uint64_t sbytes, uint32_t from,
                            void *rdata, uint64_t rbytes, uint32_t step) {
  return both(send(to, step, sdata, sbytes), recv(from, step, rdata, rbytes));
}

Task<Status> Coll::sendrecv_reduce(uint32_t peer, const void *sdata, uint64_t sbytes, void *rdata,
                                   const void *own, uint64_t rbytes, uint32_t step,
                                   bool own_first) {
  return both(send(peer, step, sdata, sbytes),
              recv_reduce(peer, step, rdata, own, rbytes, own_first));
}

Task<Status> Coll::both(Task<Status> a, Task<Status> b) {
  std::vector<Task<Status>> t;
  t.push_back(std::move(a));
  t.push_back(std::move(b));
  return when_all(op_, std::move(t));
}

Task<Status> Coll::confirm() {
  std::vector<Task<Status>> t;
  bool heard_any = false;
  for (uint32_t p = 0; p < size(); ++p)
    heard_any |= p != rank() && marked(heard_, p);
  for (uint32_t p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    if (marked(heard_, p) && !marked(sent_, p))
      t.push_back(send_to(scope(), envelope(p, kDoneStep), nullptr, 0, SendCompletion::Copied));
    if (!heard_any && marked(sent_, p))
      t.push_back(recv_from(scope(), envelope(p, kDoneStep), nullptr, 0));
  }
  if (t.empty()) co_return Status();
  co_return co_await when_all(op_, std::move(t));
}

Task<Status> run_collective(Communicator *comm, OpContext *op, CollKind kind, CollArgs args,
                            Task<Status> (*algorithm)(Coll &)) {
  return run_collective_as(comm, op, kind, args, algorithm, 0);
}

Task<Status> run_collective_as(Communicator *comm, OpContext *op, CollKind kind, CollArgs args,
                               CollAlgorithm algorithm, uint64_t number, uint64_t deadline_ns) {
  Coll coll(comm, op, kind, args, number, deadline_ns);
  Mailbox &box = comm->client().mailbox();
  CollectiveTracker &tracker = comm->collectives();
  const uint64_t seq = coll.seq();
  tracker.begin(seq, coll_name(kind), coll.check(), [comm, op, &coll](uint32_t world_peer) {
    const int32_t rank = comm->rank_of_world(world_peer);
    op->fail(error(NEXAR_ERR_MISMATCH,
                   format("%s: rank %d issued a different collective (operation, dtype, count or "
                          "root differ)",
                          coll.what(), rank),
                   rank));
  });
  box.begin_collective(comm->comm_id(), seq);
  // Ends the registration however the algorithm leaves (the callback above
  // refers to this frame).
  struct EndGuard {
    CollectiveTracker &tracker;
    Mailbox &box;
    uint64_t comm_id, seq;
    ~EndGuard() {
      tracker.end(seq);
      box.end_collective(comm_id, seq);
    }
  } guard{tracker, box, comm->comm_id(), seq};
  StallReport stall(coll, now_ns(), coll.deadline_ns());
  Status s = co_await algorithm(coll);
  if (s.ok() && !op->failed()) s = co_await coll.confirm();
  if (op->failed()) s = op->status();
  if (s.code == NEXAR_ERR_MISMATCH) comm->announce_mismatch(seq, s.message);
  co_return stall.annotate(std::move(s));
}

}  // namespace nexar
