// The steps every collective on shared memory is made of
// (collective/shm_collectives.h describes the scheme): waiting on the
// members' counters, publishing a ticket's data, reading what a member
// published and finishing a ticket; and the frame that runs a collective's
// body on the communicator's area, one at a time in issue order.
#pragma once

#include <cstdint>

#include "client/shm_coll_area.h"
#include "collective/coll.h"
#include "core/copy.h"

namespace nexar::shm_coll {

// From this many bytes a chunk of a nexar_mem_alloc buffer is read where it
// is instead of being copied into the slot.
constexpr uint64_t kByReferenceMinBytes = 64 << 10;
// From this many bytes per reader a member whose readers can all read its
// process (ShmCollArea::read_directly_by_all) publishes its buffer's address
// and they copy straight out of it: one copy instead of two, which pays for
// the system call from here.
constexpr uint64_t kDirectMinBytes = 16 << 10;
// How many copies through the segments one direct read of a block replaces
// among members: the reader's copy out, and its share of the publisher's
// copy in (a block of an allgather or a broadcast has every other member
// for a reader; one of an alltoall, a gather or a scatter, one).
double copies_a_direct_read_replaces(CollKind kind, uint32_t members);
// In a header's data_offset: the rest is an address in the publisher's
// process, not an offset in its heap.
constexpr uint64_t kDirectAddress = 1ull << 63;
// Above this a broadcast goes chunk by chunk through the root's slot: the
// root's copy in and the others' copies out overlap, and beat one copy
// through the kernel.
constexpr uint64_t kDirectBroadcastMaxBytes = 1 << 20;

// From this many bytes touched by all members together (each one's input and
// output), a collective copies its results out with streaming stores
// (copy_bytes_streaming): they outgrow the caches the members share, and
// nothing reads them before the caller does, so a cached copy would read
// every line of them from memory first. Not in place: there the collective
// has just read the destination's lines, and a cached store costs less.
constexpr uint64_t kStreamOutMinFootprint = 64 << 20;
inline bool streams_out(uint32_t members, uint64_t bytes_touched_per_member, bool in_place) {
  return !in_place && uint64_t{members} * bytes_touched_per_member >= kStreamOutMinFootprint;
}
// Copies a result out of the segments: with streaming stores where
// streams_out said so, else plainly.
inline void copy_result(bool streaming, void *dst, const void *src, uint64_t bytes) {
  if (streaming)
    copy_bytes_streaming(dst, src, bytes);
  else
    copy_bytes(dst, src, bytes);
}

// The bytes of one ticket of a vector of `bytes` (whole elements of esize):
// a slot, or a quarter of the vector down to 64 KiB, so that a vector of a
// few slots' size still has its copy in, its reduction and its copy out
// running at once on different tickets.
uint64_t pipeline_chunk_bytes(uint64_t bytes, size_t esize);

// What a step waits for: every member's (or only member's) counter k at
// value or more. doing says what a late member did not do, for a timeout's
// message.
struct ShmNeed {
  ShmCollArea::Counter k;
  uint64_t value;
  int32_t only;
  const char *doing;
};

// Polls until the need is met (true), for as long as a wait polls before it
// sleeps (longer for a collective that set the area's step bytes).
bool poll_for(const Coll &c, const ShmCollArea &a, const ShmNeed &n);

// Waits until the need is met: polls first (poll_for), then sleeps until
// rung.
Task<Status> wait_for(Coll &c, const ShmCollArea &a, ShmNeed n);
inline Task<Status> wait_for(Coll &c, const ShmCollArea &a, ShmCollArea::Counter k, uint64_t value,
                             const char *doing, int32_t only = -1) {
  return wait_for(c, a, ShmNeed{k, value, only, doing});
}

// Waits until ticket t's slot of this member may be refilled: every member
// finished the ticket that used it before.
Task<Status> claim_slot(Coll &c, ShmCollArea &a, uint64_t t);

// Publishes ticket t: bytes of data at heap offset (this member's heap),
// then rings the members.
void announce(Coll &c, ShmCollArea &a, uint64_t t, uint64_t offset, uint64_t bytes);

// Where ticket t's bytes of data go in this member's area: its header line
// when they fit there (a reader then touches one line), else its slot. The
// offset to announce in *offset.
uint8_t *own_data_for(ShmCollArea &a, uint64_t t, uint64_t bytes, uint64_t *offset);

// Fills ticket t's slot with bytes of src (or points at src, if
// by_reference and src lies in this member's heap), then announce. The slot
// must be claimed.
void fill_and_announce(Coll &c, ShmCollArea &a, uint64_t t, const void *src, uint64_t bytes,
                       bool by_reference);

// claim_slot, then fill_and_announce.
Task<Status> publish(Coll &c, ShmCollArea &a, uint64_t t, const void *src, uint64_t bytes,
                     bool by_reference);

// Member r's data for ticket t, checked against what this member called:
// the same ticket, collective and size, and inside r's heap. With direct,
// r may instead publish an address in its process (kDirectAddress), if this
// member reads it directly: then *direct is that address and *data null.
Status published_data(const Coll &c, const ShmCollArea &a, uint32_t r, uint64_t t, uint64_t bytes,
                      const uint8_t **data, uint64_t *direct = nullptr);

// This member is done reading ticket t from the others.
void finish_ticket(ShmCollArea &a, uint64_t t);

// Reading a buffer published by its address (kDirectAddress) is safe only
// while its owner waits for its readers. An owner that gives up before
// they finished (it failed) withdraws the ticket on the way out (Withdrawal
// does it unless told the readers finished), and a reader checks after
// copying (check_not_withdrawn): one that copied while the owner's caller
// may have changed the buffer fails instead of returning what it read.
void withdraw(ShmCollArea &a, uint64_t t);
class Withdrawal {
 public:
  Withdrawal(ShmCollArea &a, uint64_t t) : a_(a), t_(t) {}
  ~Withdrawal();
  Withdrawal(const Withdrawal &) = delete;
  Withdrawal &operator=(const Withdrawal &) = delete;
  void arm() { armed_ = true; }
  void readers_finished() { armed_ = false; }

 private:
  ShmCollArea &a_;
  uint64_t t_;
  bool armed_ = false;
};
Status check_not_withdrawn(const Coll &c, const ShmCollArea &a, uint32_t r, uint64_t t);
// A withdrawal means the owner's collective failed, most often because a
// member died or the communicator was revoked, which this member hears of
// moments later: its operation then fails with that cause, named in its own
// terms, as it would have had it not been reading. If nothing comes within
// a second, it fails with withdrawn.
Task<Status> cause_of_withdrawal(Coll &c, Status withdrawn);
// Copies bytes at address in member r's process, which r published for
// ticket t, into to, and counts them. A failed read is named after r; a
// withdrawal comes back as check_not_withdrawn says it (NEXAR_ERR_ABORTED),
// for cause_of_withdrawal.
Status read_published(const Coll &c, ShmCollArea &a, uint32_t r, uint64_t t, uint64_t address,
                      void *to, uint64_t bytes);

// Holds the communicator's shared-memory collectives to one at a time, in
// issue order.
class Turn {
 public:
  explicit Turn(Communicator::ShmColl &sc) : sc_(sc), mine_(sc.next_turn++) {}
  // The turn passes on to the new holder (a collective that goes on as an
  // operation after it began on a caller's thread).
  Turn(Turn &&from) noexcept : sc_(from.sc_), mine_(from.mine_), held_(from.held_) {
    from.passed_on_ = true;
  }
  ~Turn();
  Turn(const Turn &) = delete;
  Turn &operator=(const Turn &) = delete;

  // Waits for this turn, deciding at the communicator's first one whether
  // its collectives run on shared memory; *area is null when this one does
  // not run there.
  Task<Status> take(Coll &c, ShmCollArea **area);
  // Takes this turn, which must have come (no collective before it waits).
  void take_now() { held_ = true; }

 private:
  Communicator::ShmColl &sc_;
  uint64_t mine_;
  bool held_ = false;
  bool passed_on_ = false;
};

// After a collective's body ran on the area: a mismatch makes every member
// decide afresh at the next collective. Returns s.
Status after_body(Coll &c, Status s);

// Runs body on the communicator's area if its collectives run on shared
// memory (*ran), else leaves it to the message algorithms (*ran false). The
// first such collective decides, with every member alike.
using ShmBody = Task<Status> (*)(Coll &, ShmCollArea &);
Task<Status> on_shared_memory(Coll &c, bool *ran, ShmBody body);

}  // namespace nexar::shm_coll
