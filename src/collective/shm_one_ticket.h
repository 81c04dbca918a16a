// A collective on shared memory that takes one ticket of the area: a small
// allreduce, reduce, scan or exscan (every member reduces the whole vector
// out of the copies), a small reduce-scatter, allgather, gather, scatter or
// alltoall, a barrier, a broadcast of one chunk. Its steps are a state
// machine between waits on the members' counters, so the same steps run in
// a coroutine that sleeps when a wait is long (run_one_ticket) and on a
// blocking caller's thread with no coroutine at all (shm_inline.h).
#pragma once

#include <cstdint>

#include "client/shm_coll_area.h"
#include "collective/coll.h"
#include "collective/shm_coll_steps.h"

namespace nexar {

class ShmOneTicket {
 public:
  // Whether a collective of this kind with these arguments, among members
  // members, takes one ticket (else the chunked bodies of shm_reductions.cpp,
  // shm_movement.cpp and shm_collectives.cpp run it). kind is what the
  // collective does on the area: a bucket of a bucketed allreduce is an
  // Allreduce here.
  static bool fits(CollKind kind, const CollArgs &g, uint32_t members);
  // Takes the ticket of c, which must fit as kind.
  ShmOneTicket(Coll &c, ShmCollArea &a, CollKind kind);

  // Runs the steps that need no wait. Returns with *need the wait before the
  // next step, or with need->doing null once the collective finished (or
  // failed: the status says).
  Status advance(Coll &c, ShmCollArea &a, shm_coll::ShmNeed *need);
  // Every driver calls it once the collective ended with s: a member that
  // published its buffer by address and failed before its readers finished
  // withdraws it (shm_coll::Withdrawal's rule) before its caller gets it back.
  void end(ShmCollArea &a, const Status &s) const;
  // It failed because a member it read withdrew its buffer: the driver
  // waits for the cause (shm_coll::cause_of_withdrawal).
  bool saw_withdrawal() const { return saw_withdrawal_; }

 private:
  enum class Phase : uint8_t { Claim, Publish, Read, Consume, Readers, Keep, Done };
  // This member announces the ticket (with data or, in a gather or scatter,
  // empty for the others to check), and has data in it.
  bool announces(const Coll &c) const;
  bool publishes(const Coll &c, uint32_t r) const;
  // The member whose data this one reads (-1: every member), or -2: none.
  int32_t reads_from(const Coll &c) const;
  // The bytes member r announces.
  uint64_t announced_bytes(const Coll &c, uint32_t r) const;
  // Whether this member publishes src by its address (shm_coll::kDirectMinBytes).
  bool publishes_by_address(const Coll &c, const ShmCollArea &a, const void *src) const;
  void publish(Coll &c, ShmCollArea &a);
  void copy_own_before(const Coll &c) const;
  Status consume(Coll &c, ShmCollArea &a);
  Status consume_movement(Coll &c, ShmCollArea &a);
  // Member r's block at data, or where r published it by address.
  Status take(Coll &c, ShmCollArea &a, uint32_t r, const uint8_t *data, uint64_t address,
              uint64_t at, void *to, uint64_t bytes);
  Status consume_reduction(Coll &c, ShmCollArea &a) const;
  // The members that must finish reading before this one ends (-1: every
  // member), or -2: none.
  int32_t waits_for_readers(const Coll &c) const;

  CollKind kind_;
  uint64_t t_;
  Phase phase_ = Phase::Claim;
  bool by_address_ = false;
  bool readers_done_ = false;
  bool saw_withdrawal_ = false;
};

// Drives m in a coroutine: its waits sleep when they are long.
Task<Status> run_one_ticket(Coll &c, ShmCollArea &a, ShmOneTicket &m);

// Runs c, which fits as kind, in one ticket: the body of a collective on
// shared memory whose steps also run on a blocking caller's thread.
Task<Status> one_ticket_body(Coll &c, ShmCollArea &a, CollKind kind);

}  // namespace nexar
