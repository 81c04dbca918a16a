#include "client/flight_recorder.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/clock.h"
#include "core/config.h"

namespace nexar::fr {
namespace {

// The seqlock's fences. GCC refuses them under ThreadSanitizer, which does
// not model fences; every field is an atomic, so there it sees no race, only
// a record torn now and then, which the version check drops as it does here.
inline void seqlock_fence(std::memory_order order) {
#if defined(__SANITIZE_THREAD__)
  (void)order;
#else
  std::atomic_thread_fence(order);
#endif
}

constexpr size_t kDefaultEntries = 2048;
constexpr size_t kMaxEntries = 1u << 20;

// Every field is an atomic written relaxed inside the seqlock, so a reader
// racing a writer sees a torn copy (and retries), never undefined behaviour.
struct Entry {
  std::atomic<uint64_t> version{0};  // odd while a writer holds the slot
  std::atomic<uint64_t> ticket{0};
  std::atomic<uint64_t> comm_id{0}, op_seq{0}, coll_seq{0}, count{0}, bytes{0};
  std::atomic<uint64_t> t_queued{0}, t_started{0}, t_ended{0};
  std::atomic<uint32_t> comm_key{0}, state{0};
  std::atomic<int32_t> dtype{-1}, reduction{-1}, root{-1}, status{0}, waits_on{-1}, step{-1};
  std::atomic<uint64_t> name[3] = {};
  std::atomic<uint64_t> algorithm[2] = {};
  std::atomic<uint64_t> transport{0};
};

struct Ring {
  size_t n = 0;
  std::unique_ptr<Entry[]> entries;
  std::atomic<uint64_t> next{0};
  Ring() {
    n = kDefaultEntries;
    if (const char *v = env("NEXAR_FR_ENTRIES")) {
      char *end = nullptr;
      const unsigned long long parsed = strtoull(v, &end, 10);
      if (end != v && *end == '\0') n = std::min<size_t>(parsed, kMaxEntries);
    }
    if (n) entries = std::make_unique<Entry[]>(n);
  }
};

Ring &ring() {
  static Ring r;
  return r;
}

std::atomic<uint32_t> g_next_key{1};

template <size_t N>
void store_text(std::atomic<uint64_t> (&words)[N], const char *s) {
  char buf[N * 8] = {};
  if (s) strncpy(buf, s, sizeof buf - 1);
  for (size_t i = 0; i < N; ++i) {
    uint64_t w;
    memcpy(&w, buf + 8 * i, 8);
    words[i].store(w, std::memory_order_relaxed);
  }
}

template <size_t N>
void load_text(const std::atomic<uint64_t> (&words)[N], char *out) {
  for (size_t i = 0; i < N; ++i) {
    const uint64_t w = words[i].load(std::memory_order_relaxed);
    memcpy(out + 8 * i, &w, 8);
  }
  out[N * 8 - 1] = '\0';
}

// Holds an entry's seqlock for one update of ticket's operation; inert when
// the slot has been reused (the ring wrapped) or another writer holds it.
class Writer {
 public:
  explicit Writer(uint64_t ticket) {
    Ring &r = ring();
    if (ticket == 0 || r.n == 0) return;
    Entry &e = r.entries[ticket % r.n];
    uint64_t v = e.version.load(std::memory_order_relaxed);
    if ((v & 1) || e.ticket.load(std::memory_order_relaxed) != ticket) return;
    if (!e.version.compare_exchange_strong(v, v + 1, std::memory_order_acquire)) return;
    seqlock_fence(std::memory_order_release);
    e_ = &e;
    v_ = v;
  }
  ~Writer() {
    if (e_) e_->version.store(v_ + 2, std::memory_order_release);
  }
  Entry *operator->() const { return e_; }
  Entry &operator*() const { return *e_; }
  explicit operator bool() const { return e_ != nullptr; }

 private:
  Entry *e_ = nullptr;
  uint64_t v_ = 0;
};

void raise_to(std::atomic<uint64_t> &a, uint64_t v) {
  // One thread raises each (queued: under the communicator's numbering lock;
  // started and completed: the loop thread).
  if (v > a.load(std::memory_order_relaxed)) a.store(v, std::memory_order_relaxed);
}

std::mutex g_registry_mu;
std::vector<FlightComm *> g_registry;
// Held across a fork, or a fork during another thread's registration would
// leave it locked in the child, whose own communicators need it.
const int registry_fork_safe = pthread_atfork(
    [] { g_registry_mu.lock(); }, [] { g_registry_mu.unlock(); }, [] { g_registry_mu.unlock(); });

}  // namespace

const char *state_name(State s) {
  switch (s) {
    case State::Queued:
      return "queued";
    case State::Started:
      return "started";
    case State::Completed:
      return "completed";
    case State::Failed:
      return "failed";
    case State::Empty:
      break;
  }
  return "empty";
}

FlightComm::FlightComm(std::weak_ptr<Client> c, uint64_t id, uint32_t r,
                       std::vector<uint32_t> members)
    : client(std::move(c)),
      comm_id(id),
      rank(r),
      world_of(std::move(members)),
      key(g_next_key.fetch_add(1)) {
  (void)registry_fork_safe;
  std::lock_guard<std::mutex> g(g_registry_mu);
  g_registry.push_back(this);
}

FlightComm::~FlightComm() {
  std::lock_guard<std::mutex> g(g_registry_mu);
  g_registry.erase(std::remove(g_registry.begin(), g_registry.end(), this), g_registry.end());
}

size_t capacity() {
  return ring().n;
}

namespace {

// Claims the slot of a new ticket and fills what queued() records; the
// caller ends the write (release of version). Null when the recorder is off
// or a writer of an older operation holds the slot (the ring wrapped while
// it ran): the operation then goes unrecorded rather than waiting.
Entry *claim(FlightComm &comm, uint64_t op_seq, uint64_t coll_seq, const char *name, uint64_t at_ns,
             uint64_t *ticket, uint64_t *version) {
  Ring &r = ring();
  if (r.n == 0) return nullptr;
  *ticket = r.next.fetch_add(1, std::memory_order_relaxed) + 1;
  Entry &e = r.entries[*ticket % r.n];
  uint64_t v = e.version.load(std::memory_order_relaxed);
  if ((v & 1) || !e.version.compare_exchange_strong(v, v + 1, std::memory_order_acquire))
    return nullptr;
  seqlock_fence(std::memory_order_release);
  *version = v;
  e.ticket.store(*ticket, std::memory_order_relaxed);
  e.comm_id.store(comm.comm_id, std::memory_order_relaxed);
  e.comm_key.store(comm.key, std::memory_order_relaxed);
  e.op_seq.store(op_seq, std::memory_order_relaxed);
  e.coll_seq.store(coll_seq, std::memory_order_relaxed);
  e.count.store(0, std::memory_order_relaxed);
  e.bytes.store(0, std::memory_order_relaxed);
  e.t_queued.store(at_ns ? at_ns : now_ns(), std::memory_order_relaxed);
  e.t_started.store(0, std::memory_order_relaxed);
  e.t_ended.store(0, std::memory_order_relaxed);
  e.state.store(static_cast<uint32_t>(State::Queued), std::memory_order_relaxed);
  e.dtype.store(-1, std::memory_order_relaxed);
  e.reduction.store(-1, std::memory_order_relaxed);
  e.root.store(-1, std::memory_order_relaxed);
  e.status.store(0, std::memory_order_relaxed);
  e.waits_on.store(-1, std::memory_order_relaxed);
  e.step.store(-1, std::memory_order_relaxed);
  store_text(e.name, name);
  store_text(e.algorithm, "");
  e.transport.store(0, std::memory_order_relaxed);
  return &e;
}

void store_transport(std::atomic<uint64_t> &word, const char *transport) {
  uint64_t t = 0;
  memcpy(&t, transport, std::min<size_t>(strlen(transport), 7));
  word.store(t, std::memory_order_relaxed);
}

void store_collective(Entry &e, const char *name, nexar_dtype_t dtype, nexar_op_t op,
                      uint64_t count, uint64_t bytes, int32_t root, const char *transport) {
  store_text(e.name, name);
  e.dtype.store(dtype, std::memory_order_relaxed);
  e.reduction.store(op, std::memory_order_relaxed);
  e.count.store(count, std::memory_order_relaxed);
  e.bytes.store(bytes, std::memory_order_relaxed);
  e.root.store(root, std::memory_order_relaxed);
  store_transport(e.transport, transport);
}

void store_end(Entry &e, nexar_status_t status) {
  e.t_ended.store(now_ns(), std::memory_order_relaxed);
  e.status.store(status, std::memory_order_relaxed);
  // A failed operation keeps whom it waited on: what a post-mortem asks.
  if (status == NEXAR_OK) e.waits_on.store(-1, std::memory_order_relaxed);
  e.state.store(static_cast<uint32_t>(status == NEXAR_OK ? State::Completed : State::Failed),
                std::memory_order_relaxed);
}

}  // namespace

uint64_t queued(FlightComm &comm, uint64_t op_seq, uint64_t coll_seq, const char *name,
                uint64_t at_ns) {
  if (coll_seq) raise_to(comm.last_queued, coll_seq);
  uint64_t ticket = 0, v = 0;
  Entry *e = claim(comm, op_seq, coll_seq, name, at_ns, &ticket, &v);
  if (!e) return 0;
  e->version.store(v + 2, std::memory_order_release);
  return ticket;
}

void began_at_once(FlightComm &comm, uint64_t coll_seq) {
  raise_to(comm.last_queued, coll_seq);
  raise_to(comm.last_started, coll_seq);
}

void ran_at_once(FlightComm &comm, const AtOnce &r) {
  uint64_t ticket = 0, v = 0;
  Entry *e = claim(comm, r.op_seq, r.coll_seq, r.name, r.began_ns, &ticket, &v);
  if (!e) return;
  e->t_started.store(r.began_ns, std::memory_order_relaxed);
  store_collective(*e, r.collective, r.dtype, r.op, r.count, r.bytes, r.root, r.transport);
  store_text(e->algorithm, r.algorithm);
  store_end(*e, r.status);
  e->version.store(v + 2, std::memory_order_release);
}

void started(FlightComm &comm, uint64_t ticket, uint64_t coll_seq, uint64_t at_ns) {
  if (coll_seq) raise_to(comm.last_started, coll_seq);
  Writer w(ticket);
  if (!w) return;
  w->t_started.store(at_ns ? at_ns : now_ns(), std::memory_order_relaxed);
  w->state.store(static_cast<uint32_t>(State::Started), std::memory_order_relaxed);
}

void collective(uint64_t ticket, const char *name, nexar_dtype_t dtype, nexar_op_t op,
                uint64_t count, uint64_t bytes, int32_t root, const char *transport) {
  Writer w(ticket);
  if (w) store_collective(*w, name, dtype, op, count, bytes, root, transport);
}

void algorithm(uint64_t ticket, const char *name) {
  Writer w(ticket);
  if (w) store_text(w->algorithm, name);
}

void waiting(uint64_t ticket, int32_t rank, uint32_t step) {
  Writer w(ticket);
  if (!w) return;
  w->waits_on.store(rank, std::memory_order_relaxed);
  w->step.store(static_cast<int32_t>(step), std::memory_order_relaxed);
}

void ended(FlightComm &comm, uint64_t ticket, uint64_t coll_seq, nexar_status_t status) {
  if (coll_seq && status == NEXAR_OK) raise_to(comm.last_completed, coll_seq);
  Writer w(ticket);
  if (w) store_end(*w, status);
}

std::vector<EntryCopy> snapshot() {
  Ring &r = ring();
  std::vector<EntryCopy> out;
  if (r.n == 0) return out;
  out.reserve(r.n);
  for (size_t i = 0; i < r.n; ++i) {
    const Entry &e = r.entries[i];
    // A slot being written is retried a few times, then skipped.
    for (int attempt = 0; attempt < 100; ++attempt) {
      const uint64_t v = e.version.load(std::memory_order_acquire);
      if (v & 1) continue;
      EntryCopy c{};
      c.ticket = e.ticket.load(std::memory_order_relaxed);
      c.comm_id = e.comm_id.load(std::memory_order_relaxed);
      c.op_seq = e.op_seq.load(std::memory_order_relaxed);
      c.coll_seq = e.coll_seq.load(std::memory_order_relaxed);
      c.count = e.count.load(std::memory_order_relaxed);
      c.bytes = e.bytes.load(std::memory_order_relaxed);
      c.t_queued_ns = e.t_queued.load(std::memory_order_relaxed);
      c.t_started_ns = e.t_started.load(std::memory_order_relaxed);
      c.t_ended_ns = e.t_ended.load(std::memory_order_relaxed);
      c.comm_key = e.comm_key.load(std::memory_order_relaxed);
      c.state = static_cast<State>(e.state.load(std::memory_order_relaxed));
      c.dtype = e.dtype.load(std::memory_order_relaxed);
      c.reduction = e.reduction.load(std::memory_order_relaxed);
      c.root = e.root.load(std::memory_order_relaxed);
      c.status = e.status.load(std::memory_order_relaxed);
      c.waits_on = e.waits_on.load(std::memory_order_relaxed);
      c.step = e.step.load(std::memory_order_relaxed);
      load_text(e.name, c.name);
      load_text(e.algorithm, c.algorithm);
      const uint64_t t = e.transport.load(std::memory_order_relaxed);
      memcpy(c.transport, &t, 8);
      c.transport[7] = '\0';
      seqlock_fence(std::memory_order_acquire);
      if (e.version.load(std::memory_order_relaxed) != v) continue;
      if (c.ticket != 0) out.push_back(c);
      break;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const EntryCopy &a, const EntryCopy &b) { return a.ticket < b.ticket; });
  return out;
}

std::vector<CommCopy> registered(uint32_t only) {
  std::vector<CommCopy> out;
  std::lock_guard<std::mutex> g(g_registry_mu);
  for (const FlightComm *c : g_registry)
    if (only == 0 || c->key == only)
      out.push_back(CommCopy{c->client, c->comm_id, c->rank, c->key, c->world_of,
                             c->last_queued.load(), c->last_started.load(),
                             c->last_completed.load(), c->revoked.load()});
  return out;
}

}  // namespace nexar::fr
