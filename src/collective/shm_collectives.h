// Collectives among ranks that share one host, read straight out of each
// other's shared memory (client/shm_coll_area.h) instead of travelling as
// messages through the pairs' rings.
//
// * Allreduce, per chunk of at most one slot: every member copies the
//   others' slices of its chunk into its slot (or, from a buffer of
//   nexar_mem_alloc, only publishes where it is) and publishes the ticket;
//   member r reduces slice r of the chunk out of every other member's slot
//   and its own source into its result area and publishes that; everyone
//   copies the reduced slices out. Each slice is reduced on one member and
//   copied from there: bit-identical everywhere. The next chunk is
//   published while the slices of this one are reduced. Small vectors skip
//   the slices: every member reduces the whole vector in rank order (one
//   publish instead of three).
// * Reduce: allreduce's scheme, but only the root copies the slices out
//   (small vectors: only the root reduces); the others end once it has read.
// * Reduce-scatter: a ticket carries a piece of every other member's block;
//   member r reduces the pieces of block r out of every other slot and its
//   own source into its recvbuf.
// * Scan, exscan: every member publishes its vector chunk by chunk and
//   reduces the prefix it needs out of the slots.
// Every reduction follows its message algorithm's order of operations
// (reduction_order.h): the bits never depend on the path.
// * Broadcast: the root publishes each chunk, the others copy it out.
// * Barrier: every member publishes a ticket and waits for the others'.
//
// A member's wait is a ShmCondition: its loop sleeps until a peer rings it
// after publishing. The communicator decides at its first such collective
// whether all its members share memory (one small exchange between the
// pairs that do); if not, these return with *ran == false and the message
// algorithms run.
#pragma once

#include "collective/coll.h"
#include "collective/reduction_order.h"

namespace nexar {

// Up to this many bytes every member of an allreduce or reduce reduces the
// whole vector out of the copies.
constexpr uint64_t kShmWholeVectorMaxBytes = 16 << 10;

// Up to this many bytes per member a reduce-scatter takes one ticket of the
// area (shm_one_ticket.h); an allgather, gather, scatter or alltoall up to
// the next (a larger one would take one ticket of the chunked path anyway).
// Below them a buffer of nexar_mem_alloc is copied, not read where it lies.
constexpr uint64_t kShmOneTicketMaxBytes = 32 << 10;
constexpr uint64_t kShmOneTicketMovementMaxBytes = 64 << 10;

// How a reduction on shared memory (kind: Allreduce, Reduce, Scan or
// Exscan) combines the members' vectors: its message algorithm's order, and
// who gets the result (-1: every member).
struct ShmReduction {
  ReductionOrder order;
  ReductionInputs x;  // x.x: per member, left to fill
  int32_t target;
};
ShmReduction shm_reduction_plan(const Coll &c, CollKind kind);

Task<Status> shm_allreduce(Coll &c, bool *ran);
Task<Status> shm_broadcast(Coll &c, bool *ran);
Task<Status> shm_barrier(Coll &c, bool *ran);
Task<Status> shm_reduce(Coll &c, bool *ran);
Task<Status> shm_reduce_scatter(Coll &c, bool *ran);
Task<Status> shm_scan(Coll &c, bool *ran);
Task<Status> shm_exscan(Coll &c, bool *ran);

// Allgather, gather, scatter and alltoall (shm_movement.cpp): each publisher
// puts a part of every block in its slot per ticket, or publishes a buffer of
// nexar_mem_alloc where it lies; readers copy their parts out.
Task<Status> shm_allgather(Coll &c, bool *ran);
Task<Status> shm_gather(Coll &c, bool *ran);
Task<Status> shm_scatter(Coll &c, bool *ran);
Task<Status> shm_alltoall(Coll &c, bool *ran);

}  // namespace nexar
