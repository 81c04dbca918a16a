#include "collective/shm_coll_steps.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "client/flight_recorder.h"
#include "client/shm_host.h"
#include "client/shm_wait.h"
#include "core/clock.h"
#include "core/copy.h"
#include "core/log.h"
#include "core/spin.h"
#include "engine/spawn.h"

namespace nexar::shm_coll {
namespace {

using Counter = ShmCollArea::Counter;
using State = Communicator::ShmColl::State;

// The step of the setup exchange: apart from every algorithm's steps (and
// from Coll's done step, 2^24 - 1).
constexpr uint32_t kSetupStep = (1u << 24) - 2;
constexpr uint32_t kSetupMagic = 0x4c4f4353;  // "SCOL"

// How long a wait polls the peers' counters before it sleeps.
constexpr uint64_t kSpinBeforeSleepNs = 50'000;
constexpr uint64_t kMaxStepSpinNs = 1'000'000;

struct SetupMessage {
  uint32_t magic;
  uint32_t ok;
  uint64_t offset;
};

// Says where this member runs now (kRunningOn), and returns it plus one.
uint64_t note_running_on(const ShmCollArea &a) {
  const uint64_t cpu = static_cast<uint64_t>(sched_getcpu() + 1);  // 0 if unknown
  if (shm_load(a.own(Counter::kRunningOn)) != cpu) shm_store(a.own(Counter::kRunningOn), cpu);
  return cpu;
}

// Member r's counter c: for kPublished, as the header of ticket value - 1's
// slot says it (a slot is refilled only once this member finished the
// ticket before, so its word reaches value exactly when the counter would).
uint64_t progress(const ShmCollArea &a, uint32_t r, Counter c, uint64_t value) {
  if (c == Counter::kPublished) return value ? shm_load(&a.header(r, value - 1)->published) : 0;
  return shm_load(a.counter(r, c));
}

// The members that are late: the first whose counter c is below value (-1:
// none). only >= 0 looks at that member alone.
int32_t late_member(const ShmCollArea &a, Counter c, uint64_t value, int32_t only = -1) {
  for (uint32_t r = 0; r < a.size(); ++r) {
    if (r == a.rank() || (only >= 0 && r != static_cast<uint32_t>(only))) continue;
    if (progress(a, r, c, value) < value) return static_cast<int32_t>(r);
  }
  return -1;
}

// Keeps this member's sleeping word set for its lifetime (ShmCollArea::ring_all).
// A count, should two waits of one collective overlap; only this member
// writes it, on its loop's side.
class SleepingWord {
 public:
  explicit SleepingWord(const ShmCollArea &a) : word_(a.own(Counter::kSleeping)) {
    shm_store(word_, shm_load(word_) + 1);
  }
  ~SleepingWord() { shm_store(word_, shm_load(word_) - 1); }
  SleepingWord(const SleepingWord &) = delete;
  SleepingWord &operator=(const SleepingWord &) = delete;

 private:
  uint64_t *word_;
};

}  // namespace

bool poll_for(const Coll &c, const ShmCollArea &a, const ShmNeed &n) {
  int32_t late = late_member(a, n.k, n.value, n.only);
  if (late < 0) return true;
  // A peer publishes within microseconds once it runs: poll a little before
  // paying for a sleep and a wake-up. With more members than cores each
  // poll yields the core, so the peers that still have to publish get it.
  // A peer that copies or reduces a large step takes longer than a sleep
  // and a wake-up: poll through it (about a nanosecond per byte).
  const uint64_t spin_ns = std::max({kSpinBeforeSleepNs, std::min(a.step_bytes(), kMaxStepSpinNs),
                                     uint64_t{c.config().spin_us} * 1000});
  const uint64_t spin_until = now_ns() + spin_ns;
  const bool outnumbered_here = outnumbered(a.size());
  uint64_t cpu = note_running_on(a);
  // The clock is read every 16 looks: it costs more than a look.
  for (uint32_t polls = 0; late >= 0 && (polls % 16 != 0 || now_ns() < spin_until); ++polls) {
    // The late member may wait for this core (the scheduler put both here).
    spin_step(outnumbered_here || (cpu && shm_load(a.counter(late, Counter::kRunningOn)) == cpu));
    if (polls % 64 == 63) cpu = note_running_on(a);  // moved by the scheduler
    late = late_member(a, n.k, n.value, n.only);
  }
  return late < 0;
}

Task<Status> wait_for(Coll &c, const ShmCollArea &a, ShmNeed n) {
  if (poll_for(c, a, n)) co_return Status();
  const Counter k = n.k;
  const uint64_t value = n.value;
  const int32_t only = n.only;
  // Whom it waits on, for the flight recorder and stall reports.
  const int32_t late = late_member(a, k, value, only);
  Communicator::ShmColl &sc = c.comm()->shm_coll();
  sc.waiting_seq = c.seq();
  sc.waiting_on = late;
  fr::waiting(c.op()->trace(), late, 0);
  // From here a change of the counters must ring this member (ring_all);
  // the condition looks at them once more after this store.
  SleepingWord sleeping(a);
  Status s = co_await ShmCondition(
      a.host(), c.op(), c.deadline_ns(), only,
      [&a, k, value, only] { return late_member(a, k, value, only) < 0; }, c.what(),
      "waiting for shared memory");
  sc.waiting_seq = 0;
  if (s.code == NEXAR_ERR_TIMEOUT) {
    const int32_t r = late_member(a, k, value, only);
    s = error(NEXAR_ERR_TIMEOUT,
              format("%s: rank %d did not %s within the collective timeout (shared memory)",
                     c.what(), r, n.doing),
              r);
  }
  co_return s;
}

double copies_a_direct_read_replaces(CollKind kind, uint32_t members) {
  const bool every_other_reads = kind == CollKind::Allgather || kind == CollKind::Broadcast;
  return every_other_reads && members > 1 ? 1.0 + 1.0 / (members - 1) : 2.0;
}

uint64_t pipeline_chunk_bytes(uint64_t bytes, size_t esize) {
  constexpr uint64_t kMinChunkBytes = 64 << 10;
  const uint64_t chunk = std::clamp(bytes / 4, kMinChunkBytes, ShmCollArea::kSlotBytes);
  return std::max<uint64_t>(esize, chunk / esize * esize);
}

Task<Status> claim_slot(Coll &c, ShmCollArea &a, uint64_t t) {
  if (t < ShmCollArea::kSlots) co_return Status();
  co_return co_await wait_for(c, a, ShmCollArea::kFinished, t + 1 - ShmCollArea::kSlots,
                              "finish an earlier step");
}

void announce(Coll &c, ShmCollArea &a, uint64_t t, uint64_t offset, uint64_t bytes) {
  ShmCollArea::SlotHeader *h = a.own_header(t);
  h->check = c.check();
  h->data_offset = offset;
  h->bytes = bytes;
  note_running_on(a);
  // Readers wait on the header's published word: one line brings them the
  // news, the header and a small ticket's data.
  shm_store(&h->published, t + 1);
  a.ring_all();
}

Task<Status> publish(Coll &c, ShmCollArea &a, uint64_t t, const void *src, uint64_t bytes,
                     bool by_reference) {
  Status s = co_await claim_slot(c, a, t);
  if (!s) co_return s;
  fill_and_announce(c, a, t, src, bytes, by_reference);
  co_return Status();
}

uint8_t *own_data_for(ShmCollArea &a, uint64_t t, uint64_t bytes, uint64_t *offset) {
  if (bytes <= ShmCollArea::kHeaderDataBytes) {
    *offset = a.own_header_data_offset(t);
    return a.own_header_data(t);
  }
  *offset = a.own_slot_offset(t);
  return a.own_slot(t);
}

void fill_and_announce(Coll &c, ShmCollArea &a, uint64_t t, const void *src, uint64_t bytes,
                       bool by_reference) {
  uint64_t offset = 0;
  if (by_reference && bytes >= kByReferenceMinBytes && a.in_own_heap(src, bytes, &offset)) {
    a.host().count_by_reference(bytes);
  } else if (bytes) {
    copy_bytes(own_data_for(a, t, bytes, &offset), src, bytes);
  } else {
    offset = a.own_header_data_offset(t);
  }
  announce(c, a, t, offset, bytes);
}

Status published_data(const Coll &c, const ShmCollArea &a, uint32_t r, uint64_t t, uint64_t bytes,
                      const uint8_t **data, uint64_t *direct) {
  const ShmCollArea::SlotHeader *h = a.header(r, t);
  // Read once: the peer's memory may change under a check.
  const uint64_t published = shm_load(&h->published);
  const uint64_t check = h->check, offset = h->data_offset, n = h->bytes;
  if (published != t + 1)
    return error(
        NEXAR_ERR_PROTOCOL,
        format("%s: rank %u's shared memory holds step %lld where %llu was published", c.what(), r,
               static_cast<long long>(published) - 1, static_cast<unsigned long long>(t)),
        static_cast<int32_t>(r));
  if (check != c.check() || n != bytes)
    return error(NEXAR_ERR_MISMATCH,
                 format("%s: rank %u issued a different collective (operation, dtype, count or "
                        "root differ)",
                        c.what(), r),
                 static_cast<int32_t>(r));
  if (direct) *direct = 0;
  if (offset & kDirectAddress) {
    if (!direct || !a.reads_directly(r))
      return error(NEXAR_ERR_PROTOCOL,
                   format("%s: rank %u published an address in its process, which this rank "
                          "does not read there",
                          c.what(), r),
                   static_cast<int32_t>(r));
    *direct = offset & ~kDirectAddress;
    *data = nullptr;
    return {};
  }
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

void withdraw(ShmCollArea &a, uint64_t t) {
  // Before this member's caller gets the buffer back (a store the readers'
  // checks, after their copies, are ordered against).
  if (shm_load(a.own(ShmCollArea::kWithdrawn)) < t + 1)
    shm_store(a.own(ShmCollArea::kWithdrawn), t + 1);
}

Withdrawal::~Withdrawal() {
  if (armed_) withdraw(a_, t_);
}

Status check_not_withdrawn(const Coll &c, const ShmCollArea &a, uint32_t r, uint64_t t) {
  if (shm_load(a.counter(r, ShmCollArea::kWithdrawn)) < t + 1) return {};
  return error(
      NEXAR_ERR_ABORTED,
      format("%s: rank %u gave this collective up while this rank read its buffer", c.what(), r),
      static_cast<int32_t>(r));
}

Status read_published(const Coll &c, ShmCollArea &a, uint32_t r, uint64_t t, uint64_t address,
                      void *to, uint64_t bytes) {
  Status s = a.read_member(r, address, to, bytes);
  if (s) s = check_not_withdrawn(c, a, r, t);
  if (s) {
    a.host().count_read_directly(bytes);
    return s;
  }
  if (s.code == NEXAR_ERR_ABORTED) return s;
  return error(s.code, format("%s: rank %u's data: %s", c.what(), r, s.message.c_str()),
               static_cast<int32_t>(r));
}

Task<Status> cause_of_withdrawal(Coll &c, Status withdrawn) {
  constexpr uint64_t kCauseGraceNs = 1'000'000'000;
  const uint64_t until = std::min(c.deadline_ns(), now_ns() + kCauseGraceNs);
  const Status s = co_await SleepWait(&c.comm()->client().loop(), c.op(), until);
  co_return s ? withdrawn : s;
}

namespace {

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
  std::unique_ptr<ShmCollArea> area =
      all ? ShmCollArea::create(host, me, n, c.config().shm_cma) : nullptr;
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
  sc.on_hint.store(on, std::memory_order_relaxed);
  if (on) sc.area = std::move(area);
  LOG_DEBUG("communicator %llx rank %u: collectives %s shared memory",
            static_cast<unsigned long long>(comm.comm_id()), me, on ? "on" : "not on");
  co_return Status();
}

}  // namespace

Turn::~Turn() {
  if (passed_on_) return;
  if (held_) {
    ++sc_.serving;
  } else {
    sc_.abandoned.insert(mine_);  // failed while waiting: skipped
  }
  while (sc_.abandoned.erase(sc_.serving))
    ++sc_.serving;
}

Task<Status> Turn::take(Coll &c, ShmCollArea **area) {
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

Status after_body(Coll &c, Status s) {
  // Every member fails a mismatched collective (each hears of it), maybe
  // at different steps: they all decide afresh at the next one, with new
  // areas and steps.
  if (s.code == NEXAR_ERR_MISMATCH || c.op()->status().code == NEXAR_ERR_MISMATCH) {
    Communicator::ShmColl &sc = c.comm()->shm_coll();
    sc.state = State::Unknown;
    sc.on_hint.store(false, std::memory_order_relaxed);
    sc.area.reset();
  }
  return s;
}

Task<Status> on_shared_memory(Coll &c, bool *ran, ShmBody body) {
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
  a->set_step_bytes(0);
  c.note_algorithm("shm");
  a->host().count_collective();
  co_return after_body(c, co_await body(c, *a));
}

}  // namespace nexar::shm_coll
