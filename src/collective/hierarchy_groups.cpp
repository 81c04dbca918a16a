#include "collective/hierarchy_groups.h"

#include <algorithm>
#include <coroutine>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/communicator.h"
#include "client/shm_host.h"
#include "core/clock.h"
#include "core/log.h"

namespace nexar::hier {
namespace {

using State = CommHierarchy::State;

// The steps of the exchange that decides the groups (one per round, at most
// 32): below shm_coll_steps' setup step and Coll's done step, above every
// algorithm's.
constexpr uint32_t kExchangeStep = (1u << 24) - 64;
// Collective numbers on a group: kPhases per collective of the communicator.
constexpr uint64_t kPhases = 8;

// Bruck allgather of one record of rec bytes per rank: afterwards
// all[i * rec ...] is the record of rank (me + i) mod n.
Task<Status> exchange(Coll &c, std::vector<uint8_t> &all, size_t rec) {
  const uint32_t n = c.size(), me = c.rank();
  uint32_t round = 0;
  for (uint32_t d = 1; d < n; d <<= 1, ++round) {
    const uint64_t bytes = uint64_t{std::min(d, n - d)} * rec;
    Status s = co_await c.sendrecv((me + n - d) % n, all.data(), bytes, (me + d) % n,
                                   all.data() + size_t{d} * rec, bytes, kExchangeStep + round);
    if (!s) co_return s;
  }
  co_return Status();
}

// FNV-1a 64 over (parent id, group kind, index), apart from split's ids by
// its own prefix; never 0 (the root communicator's).
uint64_t group_id(uint64_t parent, char kind, uint32_t index) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  for (const char *p = "nexar-hosts"; *p; ++p)
    mix(static_cast<uint8_t>(*p), 1);
  mix(parent, 8);
  mix(static_cast<uint8_t>(kind), 1);
  mix(index, 4);
  return h ? h : 1;
}

// What a rank says of its host: the lowest rank, the number of ranks and a
// hash of the set of ranks it reaches through shared memory (itself
// included).
struct HostRecord {
  uint32_t lowest, size;
  uint64_t hash;
};

HostRecord record_of(const Communicator &comm, ShmHost &host, uint32_t me) {
  HostRecord rec{me, 0, 0xcbf29ce484222325ull};
  for (uint32_t r = 0; r < comm.size(); ++r) {
    if (r != me && host.channel(comm.world_rank_of(r)) == nullptr) continue;
    rec.lowest = std::min(rec.lowest, r);
    ++rec.size;
    for (int i = 0; i < 4; ++i) {
      rec.hash ^= (r >> (8 * i)) & 0xff;
      rec.hash *= 0x100000001b3ull;
    }
  }
  return rec;
}

// Hosts from every rank's record, numbered by their lowest rank. The ranks
// naming one lowest rank must all name the same set, of as many ranks as
// there are of them, that rank among them: then that set is exactly those
// ranks. Otherwise no layout is agreed (false).
bool hosts_from(const std::vector<HostRecord> &recs, CommHierarchy &h) {
  const uint32_t n = static_cast<uint32_t>(recs.size());
  const uint32_t unset = ~0u;
  h.host_of.assign(n, unset);
  h.local_index.assign(n, 0);
  h.host_size.clear();
  std::vector<uint32_t> host_at(n, unset);  // by lowest rank
  for (uint32_t r = 0; r < n; ++r) {
    const HostRecord &x = recs[r];
    if (x.lowest > r) return false;  // every set holds its own rank
    if (host_at[x.lowest] == unset) {
      if (x.lowest != r) return false;  // the lowest rank comes first
      host_at[x.lowest] = static_cast<uint32_t>(h.host_size.size());
      h.host_size.push_back(0);
    }
    const HostRecord &first = recs[x.lowest];
    if (x.size != first.size || x.hash != first.hash) return false;
    h.host_of[r] = host_at[x.lowest];
    h.local_index[r] = h.host_size[h.host_of[r]]++;
  }
  for (uint32_t r = 0; r < n; ++r)
    if (h.host_size[h.host_of[r]] != recs[r].size) return false;
  return true;
}

// Whether two members may share a host, from what every member knows alike
// on a full mesh: each rank's host key, which it sent every peer when they
// connected (empty with NEXAR_SHM=off). Only then is the layout worth an
// exchange; a sparse mesh, where ranks do not hear from every member, has
// no hierarchy.
bool may_share_a_host(Communicator &comm) {
  if (comm.client().topology().sparse()) return false;
  std::vector<std::string> keys(comm.size());
  for (uint32_t r = 0; r < comm.size(); ++r)
    keys[r] = comm.client().shm().host_key_of(comm.world_rank_of(r));
  std::sort(keys.begin(), keys.end());
  for (size_t i = 1; i < keys.size(); ++i)
    if (!keys[i].empty() && keys[i] == keys[i - 1]) return true;
  return false;
}

// Decides the groups at the communicator's first collective that could use
// them: every member says which ranks it reaches through shared memory
// (those are on its host), so every member computes the same layout.
Task<Status> decide(Coll &c, CommHierarchy &h) {
  Communicator &comm = *c.comm();
  const uint32_t n = c.size(), me = c.rank();
  if (!may_share_a_host(comm)) {
    h.state = State::Off;
    co_return Status();
  }
  const size_t rec = sizeof(HostRecord);
  std::vector<uint8_t> all(n * rec);
  const HostRecord mine = record_of(comm, comm.client().shm(), me);
  memcpy(all.data(), &mine, rec);
  Status s = co_await exchange(c, all, rec);
  if (!s) co_return s;  // undecided: the next collective tries again
  std::vector<HostRecord> recs(n);
  for (uint32_t i = 0; i < n; ++i)
    memcpy(&recs[(me + i) % n], all.data() + i * rec, rec);
  const bool layout = hosts_from(recs, h);
  const uint32_t most = layout ? *std::max_element(h.host_size.begin(), h.host_size.end()) : 0;
  h.state = layout && h.host_size.size() >= 2 && most >= 2 ? State::On : State::Off;
  LOG_DEBUG("communicator %llx rank %u: %zu hosts, collectives across hosts %s",
            static_cast<unsigned long long>(comm.comm_id()), me, h.host_size.size(),
            h.state == State::On ? "hierarchical" : "flat");
  if (h.state != State::On) co_return Status();
  const uint32_t my_host = h.host_of[me], my_index = h.local_index[me];
  std::vector<uint32_t> local, cross;
  uint32_t cross_rank = 0;
  for (uint32_t r = 0; r < n; ++r) {
    if (h.host_of[r] == my_host) local.push_back(comm.world_rank_of(r));
    if (h.local_index[r] == my_index) {
      if (r == me) cross_rank = static_cast<uint32_t>(cross.size());
      cross.push_back(comm.world_rank_of(r));
    }
  }
  h.local = comm.make_child(group_id(comm.comm_id(), 'L', my_host), my_index, std::move(local));
  h.cross = comm.make_child(group_id(comm.comm_id(), 'X', my_index), cross_rank, std::move(cross));
  co_return Status();
}

// Waits until the turn comes (finished by the holder before it).
class TurnWait : public Wait {
 public:
  TurnWait(CommHierarchy &h, uint64_t turn, const Coll &c)
      : Wait(c.op()->loop(), c.op(), c.deadline_ns(), -1), h_(h), turn_(turn), what_(c.what()) {}
  bool await_ready() const { return h_.serving == turn_; }
  bool await_suspend(std::coroutine_handle<> handle) {
    if (!suspend(handle)) return false;
    h_.waiting[turn_] = this;
    return true;
  }
  Status await_resume() const { return result(); }

 protected:
  void detach() override { h_.waiting.erase(turn_); }
  std::string timeout_message() const override {
    return format("%s: waiting for the collective before it (across hosts)", what_);
  }

 private:
  CommHierarchy &h_;
  uint64_t turn_;
  const char *what_;
};

// Fails the phase's operation when the collective's fails (abort, destroy,
// a member declared failed), for as long as it lives.
class FailureRelay : public Wait {
 public:
  FailureRelay(OpContext *outer, OpContext *phase, uint64_t deadline_ns)
      : Wait(outer->loop(), outer, deadline_ns, -1), phase_(phase) {
    // Nothing resumes on it: it only listens to the outer operation.
    suspend(std::noop_coroutine());
  }

 protected:
  void detach() override {
    if (!result().ok()) phase_->fail(result());
  }
  std::string timeout_message() const override { return "phase across hosts"; }

 private:
  OpContext *phase_;
};

// A failure on group, told in c's terms: its failed rank becomes c's.
Status in_terms_of(const Coll &c, const Communicator &group, Status s) {
  if (s.failed_rank < 0 || static_cast<uint32_t>(s.failed_rank) >= group.size()) return s;
  const int32_t theirs = s.failed_rank;
  const int32_t ours = c.comm()->rank_of_world(group.world_rank_of(static_cast<uint32_t>(theirs)));
  s.message = format("%s: rank %d failed it, on the way across hosts (%s)", c.what(), ours,
                     s.message.c_str());
  s.failed_rank = ours;
  return s;
}

}  // namespace

Turn::~Turn() {
  if (held_) {
    ++h_.serving;
  } else {
    h_.abandoned.insert(mine_);  // failed while waiting: skipped
  }
  while (h_.abandoned.erase(h_.serving))
    ++h_.serving;
  if (auto next = h_.waiting.find(h_.serving); next != h_.waiting.end())
    next->second->finish(Status());
}

Task<Status> Turn::take(Coll &c) {
  if (h_.serving != mine_) {
    Status s = co_await TurnWait(h_, mine_, c);
    if (!s) co_return s;
  }
  held_ = true;
  if (h_.state == State::Unknown) co_return co_await decide(c, h_);
  co_return Status();
}

Task<Status> run_in_group(Coll &c, Communicator &group, uint32_t phase, CollKind kind,
                          CollArgs args, Task<Status> (*algorithm)(Coll &)) {
  OpContext *outer = c.op();
  auto op = std::make_shared<OpContext>(outer->loop(), outer->seq(), outer->name());
  Status s;
  {
    // Every phase ends by the collective's own deadline, so the timeout
    // bounds the whole; the relay waits beyond it, and the phase ends first.
    const uint64_t timeout_ns = c.config().collective_timeout_ms * kNsPerMs;
    FailureRelay relay(outer, op.get(), c.deadline_ns() + timeout_ns);
    s = co_await run_collective_as(&group, op.get(), kind, args, algorithm,
                                   c.seq() * kPhases + phase, c.deadline_ns());
  }
  // Bytes the transport still reads from the user's buffers keep the
  // collective from completing, as they would if it had sent them itself.
  if (op->pinned()) {
    outer->pin();
    op->on_unpinned([outer] { outer->unpin(); });
  }
  outer->keep_alive(op);
  if (outer->failed()) co_return outer->status();
  if (!s) co_return in_terms_of(c, group, std::move(s));
  co_return s;
}

}  // namespace nexar::hier
