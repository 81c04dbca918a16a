// A collective on shared memory that takes one ticket of the area: a small
// allreduce, reduce, scan or exscan (every member reduces the whole vector
// out of the copies), a barrier, a broadcast of one chunk. Its steps are a
// state machine between waits on the members' counters, so the same steps
// run in a coroutine that sleeps when a wait is long (run_one_ticket) and on
// a blocking caller's thread with no coroutine at all (shm_inline.h).
#pragma once

#include <cstdint>

#include "client/shm_coll_area.h"
#include "collective/coll.h"
#include "collective/shm_coll_steps.h"

namespace nexar {

class ShmOneTicket {
 public:
  // Whether a collective of this kind with these arguments takes one ticket
  // (else the chunked bodies of shm_reductions.cpp and shm_collectives.cpp
  // run it). kind is what the collective does on the area: a bucket of a
  // bucketed allreduce is an Allreduce here.
  static bool fits(CollKind kind, const CollArgs &g);
  // Takes the ticket of c, which must fit as kind.
  ShmOneTicket(Coll &c, ShmCollArea &a, CollKind kind);

  // Runs the steps that need no wait. Returns with *need the wait before the
  // next step, or with need->doing null once the collective finished (or
  // failed: the status says).
  Status advance(Coll &c, ShmCollArea &a, shm_coll::ShmNeed *need);

 private:
  enum class Phase : uint8_t { Claim, Publish, Read, Consume, Readers, Done };
  bool publishes(const Coll &c) const;
  // The member whose data this one reads (-1: every member), or -2: none.
  int32_t reads_from(const Coll &c) const;
  uint64_t payload_bytes(const Coll &c) const;
  void publish(Coll &c, ShmCollArea &a) const;
  Status consume(Coll &c, ShmCollArea &a) const;
  // The members that must finish reading before this one ends (-1: every
  // member), or -2: none.
  int32_t waits_for_readers(const Coll &c) const;

  CollKind kind_;
  uint64_t t_;
  Phase phase_ = Phase::Claim;
};

// Drives m in a coroutine: its waits sleep when they are long.
Task<Status> run_one_ticket(Coll &c, ShmCollArea &a, ShmOneTicket &m);

}  // namespace nexar
