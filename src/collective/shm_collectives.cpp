#include "collective/shm_collectives.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "client/flight_recorder.h"
#include "client/shm_coll_area.h"
#include "client/shm_host.h"
#include "client/shm_wait.h"
#include "collective/collectives.h"
#include "collective/schedule.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/reduce.h"
#include "engine/spawn.h"

namespace nexar {
namespace {

using Counter = ShmCollArea::Counter;
using State = Communicator::ShmColl::State;

// The step of the setup exchange: apart from every algorithm's steps (and
// from Coll's done step, 2^24 - 1).
constexpr uint32_t kSetupStep = (1u << 24) - 2;
constexpr uint32_t kSetupMagic = 0x4c4f4353;  // "SCOL"
// Up to this many bytes every member reduces the whole vector itself.
constexpr uint64_t kWholeVectorMaxBytes = 16 << 10;
// From this many bytes a chunk of a nexar_mem_alloc buffer is read where it
// is instead of being copied into the slot.
constexpr uint64_t kByReferenceMinBytes = 64 << 10;

// How long a wait polls the peers' counters before it sleeps.
constexpr uint64_t kSpinBeforeSleepNs = 50'000;

struct SetupMessage {
  uint32_t magic;
  uint32_t ok;
  uint64_t offset;
};

// The members that are late: the first whose counter c is below value (-1:
// none). only >= 0 looks at that member alone.
int32_t late_member(const ShmCollArea &a, Counter c, uint64_t value, int32_t only = -1) {
  for (uint32_t r = 0; r < a.size(); ++r) {
    if (r == a.rank() || (only >= 0 && r != static_cast<uint32_t>(only))) continue;
    if (shm_load(a.counter(r, c)) < value) return static_cast<int32_t>(r);
  }
  return -1;
}

// Waits until every member's (or only's) counter c reaches value.
Task<Status> wait_for(Coll &c, const ShmCollArea &a, Counter k, uint64_t value, const char *doing,
                      int32_t only = -1) {
  int32_t late = late_member(a, k, value, only);
  if (late < 0) co_return Status();
  // A peer running on a core of its own publishes within microseconds: poll
  // a little before paying for a sleep and a wake-up. With more members than
  // cores the poll would take the core a peer needs: only NEXAR_SPIN_US's.
  static const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t spin_ns = std::max<uint64_t>(a.size() <= cores ? kSpinBeforeSleepNs : 0,
                                              uint64_t{c.config().spin_us} * 1000);
  const uint64_t spin_until = now_ns() + spin_ns;
  while (late >= 0 && now_ns() < spin_until) {
    sched_yield();
    late = late_member(a, k, value, only);
  }
  if (late < 0) co_return Status();
  // Whom it waits on, for the flight recorder and stall reports.
  Communicator::ShmColl &sc = c.comm()->shm_coll();
  sc.waiting_seq = c.seq();
  sc.waiting_on = late;
  fr::waiting(c.op()->trace(), late, 0);
  Status s = co_await ShmCondition(
      a.host(), c.op(), c.deadline_ns(), only,
      [&a, k, value, only] { return late_member(a, k, value, only) < 0; }, c.what(),
      "waiting for shared memory");
  sc.waiting_seq = 0;
  if (s.code == NEXAR_ERR_TIMEOUT) {
    const int32_t r = late_member(a, k, value, only);
    s = error(NEXAR_ERR_TIMEOUT,
              format("%s: rank %d did not %s within the collective timeout (shared memory)",
                     c.what(), r, doing),
              r);
  }
  co_return s;
}

// Fills this member's slot for ticket t with bytes of src (or points it at
// src, if by reference is allowed and src is in this member's heap) and
// publishes it. Waits first until every member is done with the slot's
// previous ticket.
Task<Status> publish(Coll &c, ShmCollArea &a, uint64_t t, const void *src, uint64_t bytes,
                     bool by_reference) {
  if (t >= ShmCollArea::kSlots) {
    Status s = co_await wait_for(c, a, ShmCollArea::kFinished, t + 1 - ShmCollArea::kSlots,
                                 "finish an earlier step");
    if (!s) co_return s;
  }
  uint64_t offset = 0;
  if (by_reference && bytes >= kByReferenceMinBytes && a.in_own_heap(src, bytes, &offset)) {
    a.host().count_by_reference(bytes);
  } else {
    if (bytes) memcpy(a.own_slot(t), src, bytes);
    offset = a.own_slot_offset(t);
  }
  ShmCollArea::SlotHeader *h = a.own_header(t);
  h->ticket = t;
  h->check = c.check();
  h->data_offset = offset;
  h->bytes = bytes;
  shm_store(a.own(ShmCollArea::kPublished), t + 1);
  a.ring_all();
  co_return Status();
}

// Member r's data for ticket t, checked against what this member called:
// the same ticket, collective and size, and inside r's heap.
Status published_data(const Coll &c, const ShmCollArea &a, uint32_t r, uint64_t t, uint64_t bytes,
                      const uint8_t **data) {
  const ShmCollArea::SlotHeader *h = a.header(r, t);
  // Read once: the peer's memory may change under a check.
  const uint64_t ticket = h->ticket, check = h->check, offset = h->data_offset, n = h->bytes;
  if (ticket != t)
    return error(
        NEXAR_ERR_PROTOCOL,
        format("%s: rank %u's shared memory holds step %llu where %llu was published", c.what(), r,
               static_cast<unsigned long long>(ticket), static_cast<unsigned long long>(t)),
        static_cast<int32_t>(r));
  if (check != c.check() || n != bytes)
    return error(NEXAR_ERR_MISMATCH,
                 format("%s: rank %u issued a different collective (operation, dtype, count or "
                        "root differ)",
                        c.what(), r),
                 static_cast<int32_t>(r));
  if (offset > a.heap_bytes(r) || a.heap_bytes(r) - offset < n)
    return error(NEXAR_ERR_PROTOCOL,
                 format("%s: rank %u published data outside its shared memory", c.what(), r),
                 static_cast<int32_t>(r));
  *data = a.heap(r) + offset;
  return {};
}

void finish_ticket(ShmCollArea &a, uint64_t t) {
  shm_store(a.own(ShmCollArea::kFinished), t + 1);
  a.ring_all();
}

// The communicator's area if its collectives run on shared memory: decided
// at the first one (state Unknown) by an exchange between the members that
// have a channel, so every member decides alike.
Task<Status> decide(Coll &c, Communicator::ShmColl &sc) {
  Communicator &comm = *c.comm();
  ShmHost &host = comm.client().shm();
  const uint32_t n = c.size(), me = c.rank();
  std::vector<uint8_t> linked(n, 0);
  bool all = true;
  for (uint32_t r = 0; r < n; ++r)
    if (r != me) all &= (linked[r] = host.channel(comm.world_rank_of(r)) != nullptr);
  std::unique_ptr<ShmCollArea> area = all ? ShmCollArea::create(host, me, n) : nullptr;
  SetupMessage mine{kSetupMagic, area ? 1u : 0u, area ? area->offset() : 0};
  std::vector<SetupMessage> theirs(n);
  std::vector<Task<Status>> moves;
  for (uint32_t r = 0; r < n; ++r) {
    if (!linked[r]) continue;
    moves.push_back(c.send(r, kSetupStep, &mine, sizeof mine));
    moves.push_back(c.recv(r, kSetupStep, &theirs[r], sizeof theirs[r]));
  }
  if (!moves.empty()) {
    Status s = co_await when_all(c.op(), std::move(moves));
    // Undecided still: the members that failed it (a mismatch, say) all
    // try again at the next one.
    if (!s) co_return s;
  }
  bool on = area != nullptr;
  for (uint32_t r = 0; on && r < n; ++r)
    on = r == me || (theirs[r].magic == kSetupMagic && theirs[r].ok == 1 &&
                     area->attach(r, comm.world_rank_of(r), theirs[r].offset));
  sc.state = on ? State::On : State::Off;
  if (on) sc.area = std::move(area);
  LOG_DEBUG("communicator %llx rank %u: collectives %s shared memory",
            static_cast<unsigned long long>(comm.comm_id()), me, on ? "on" : "not on");
  co_return Status();
}

// Holds the communicator's shared-memory collectives to one at a time, in
// issue order; *area is null when this one does not run there.
class Turn {
 public:
  explicit Turn(Communicator::ShmColl &sc) : sc_(sc), mine_(sc.next_turn++) {}
  ~Turn() {
    if (held_) {
      ++sc_.serving;
    } else {
      sc_.abandoned.insert(mine_);  // failed while waiting: skipped
    }
    while (sc_.abandoned.erase(sc_.serving))
      ++sc_.serving;
  }
  Turn(const Turn &) = delete;
  Turn &operator=(const Turn &) = delete;

  Task<Status> take(Coll &c, ShmCollArea **area) {
    *area = nullptr;
    if (sc_.serving != mine_) {
      Status s = co_await ShmCondition(
          c.comm()->client().shm(), c.op(), c.deadline_ns(), -1,
          [this] { return sc_.serving == mine_; }, c.what(),
          "waiting for the collective before it (shared memory)");
      if (!s) co_return s;
    }
    held_ = true;
    if (sc_.state == State::Unknown) {
      Status s = co_await decide(c, sc_);
      if (!s) co_return s;
    }
    if (sc_.state == State::On) *area = sc_.area.get();
    co_return Status();
  }

 private:
  Communicator::ShmColl &sc_;
  uint64_t mine_;
  bool held_ = false;
};

// Every member reduces the whole vector in rank order out of the slots, its
// own included (an in-place call overwrites the user's buffer).
Task<Status> allreduce_whole(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  const uint64_t bytes = uint64_t{g.count} * c.esize();
  const uint64_t t = a.take_tickets(1);
  Status s = co_await publish(c, a, t, g.sendbuf, bytes, false);
  if (!s) co_return s;
  s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its vector");
  if (!s) co_return s;
  std::vector<const uint8_t *> in(c.size());
  for (uint32_t r = 0; r < c.size(); ++r)
    if (r == c.rank())
      in[r] = a.own_slot(t);
    else if (!(s = published_data(c, a, r, t, bytes, &in[r])))
      co_return s;
  // Every member evaluates the same expression, in the message path's order.
  ReductionInputs x{std::move(in), g.count, c.esize(), g.dtype, g.op};
  reduce_in_order(allreduce_reduction_order(c), x, 0, g.count, static_cast<uint8_t *>(g.recvbuf),
                  c.pool());
  finish_ticket(a, t);
  co_return Status();
}

Task<Status> allreduce_sliced(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  const size_t esize = c.esize();
  const uint32_t n = c.size(), me = c.rank();
  const size_t per_chunk = std::max<size_t>(1, ShmCollArea::kSlotBytes / esize);
  const uint64_t chunks = (g.count + per_chunk - 1) / per_chunk;
  const uint64_t t0 = a.take_tickets(chunks);
  const auto *src = static_cast<const uint8_t *>(g.sendbuf);
  auto *dst = static_cast<uint8_t *>(g.recvbuf);
  auto chunk_first = [&](uint64_t k) { return static_cast<size_t>(k * per_chunk); };
  auto chunk_count = [&](uint64_t k) { return std::min(per_chunk, g.count - chunk_first(k)); };
  Status s = co_await publish(c, a, t0, src, chunk_count(0) * esize, true);
  if (!s) co_return s;
  std::vector<const uint8_t *> in(n);
  const ReductionOrder order = allreduce_reduction_order(c);
  ReductionInputs x{std::vector<const uint8_t *>(n), g.count, esize, g.dtype, g.op};
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t t = t0 + k;
    const size_t first = chunk_first(k), count = chunk_count(k);
    s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its part");
    if (!s) co_return s;
    for (uint32_t r = 0; r < n; ++r)
      if (!(s = published_data(c, a, r, t, count * esize, &in[r]))) co_return s;
    // The next chunk goes out while this one's slices are reduced.
    if (k + 1 < chunks) {
      s = co_await publish(c, a, t + 1, src + chunk_first(k + 1) * esize,
                           chunk_count(k + 1) * esize, true);
      if (!s) co_return s;
    }
    // Slice me, reduced into this member's result area: reduced once, then
    // copied, in the message path's order.
    const sched::ChunkLayout slices(count, n);
    const size_t off = slices.offset(me) * esize;
    for (uint32_t r = 0; r < n; ++r)
      x.x[r] = in[r] + off;
    reduce_in_order(order, x, first + slices.offset(me), slices.length(me), a.own_result(t),
                    c.pool());
    shm_store(a.own(ShmCollArea::kReduced), t + 1);
    a.ring_all();
    s = co_await wait_for(c, a, ShmCollArea::kReduced, t + 1, "reduce its slice");
    if (!s) co_return s;
    for (uint32_t r = 0; r < n; ++r) {
      const size_t roff = slices.offset(r) * esize;
      memcpy(dst + first * esize + roff, a.result(r, t), slices.length(r) * esize);
    }
    finish_ticket(a, t);
  }
  co_return Status();
}

Task<Status> allreduce_body(Coll &c, ShmCollArea &a) {
  if (uint64_t{c.args().count} * c.esize() <= kWholeVectorMaxBytes)
    co_return co_await allreduce_whole(c, a);
  co_return co_await allreduce_sliced(c, a);
}

Task<Status> broadcast_body(Coll &c, ShmCollArea &a) {
  const CollArgs &g = c.args();
  const uint64_t bytes = uint64_t{g.count} * c.esize();
  const uint64_t chunks = (bytes + ShmCollArea::kSlotBytes - 1) / ShmCollArea::kSlotBytes;
  const uint64_t t0 = a.take_tickets(chunks);
  auto *buf = static_cast<uint8_t *>(g.recvbuf);
  const uint32_t root = g.root;
  Status s;
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t t = t0 + k, off = k * ShmCollArea::kSlotBytes;
    const uint64_t len = std::min<uint64_t>(ShmCollArea::kSlotBytes, bytes - off);
    if (c.rank() == root) {
      if (!(s = co_await publish(c, a, t, buf + off, len, true))) co_return s;
    } else {
      s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its data",
                            static_cast<int32_t>(root));
      if (!s) co_return s;
      const uint8_t *data = nullptr;
      if (!(s = published_data(c, a, root, t, len, &data))) co_return s;
      memcpy(buf + off, data, len);
    }
    finish_ticket(a, t);
  }
  // The root ends once everyone has read: its buffer may have been read
  // where it is, and a member that ran another collective is heard of (it
  // never finishes these steps) instead of the root reporting success.
  if (c.rank() == root)
    co_return co_await wait_for(c, a, ShmCollArea::kFinished, t0 + chunks, "receive the data");
  co_return Status();
}

Task<Status> barrier_body(Coll &c, ShmCollArea &a) {
  const uint64_t t = a.take_tickets(1);
  Status s = co_await publish(c, a, t, nullptr, 0, false);
  if (!s) co_return s;
  s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "enter the barrier");
  if (!s) co_return s;
  const uint8_t *none = nullptr;
  for (uint32_t r = 0; r < c.size(); ++r)
    if (r != c.rank() && !(s = published_data(c, a, r, t, 0, &none))) co_return s;
  finish_ticket(a, t);
  co_return Status();
}

// Runs body on the communicator's area if its collectives run on shared
// memory (*ran), else leaves it to the message algorithms.
Task<Status> on_shared_memory(Coll &c, bool *ran, Task<Status> (*body)(Coll &, ShmCollArea &)) {
  *ran = false;
  Communicator::ShmColl &sc = c.comm()->shm_coll();
  Turn turn(sc);
  ShmCollArea *a = nullptr;
  Status s = co_await turn.take(c, &a);
  if (!s || !a) {
    *ran = !s.ok();
    co_return s;
  }
  *ran = true;
  c.note_algorithm("shm");
  a->host().count_collective();
  s = co_await body(c, *a);
  // Every member fails a mismatched collective (each hears of it), maybe
  // at different steps: they all decide afresh at the next one, with new
  // areas and steps.
  if (s.code == NEXAR_ERR_MISMATCH || c.op()->status().code == NEXAR_ERR_MISMATCH) {
    sc.state = Communicator::ShmColl::State::Unknown;
    sc.area.reset();
  }
  co_return s;
}

}  // namespace

Task<Status> shm_allreduce(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, allreduce_body);
}

Task<Status> shm_broadcast(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, broadcast_body);
}

Task<Status> shm_barrier(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, barrier_body);
}

}  // namespace nexar
