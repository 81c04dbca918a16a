// One entry point per collective. Each chooses its algorithm from the message
// size and world size (overridable through NEXAR_* variables, see
// docs/collectives.md) and runs it on the Coll it is given.
//
// Semantics (MPI): counts are elements; sendbuf == recvbuf means in place;
// recvbuf of reduce and gather matters on the root only, sendbuf of scatter on
// the root only; blocks of gather, scatter, allgather and alltoall are ordered
// by rank; reduce_scatter gives rank r block r of the reduction; exscan leaves
// rank 0's recvbuf untouched; count == 0 and a world of one complete locally.
// Float results are bit-identical on every rank.
#pragma once

#include <memory>
#include <vector>

#include "collective/coll.h"
#include "collective/reduction_order.h"
#include "engine/spawn.h"

namespace nexar {

Task<Status> allreduce(Coll &c);       // count elements in, count out
Task<Status> broadcast(Coll &c);       // recvbuf (count) on every rank, root's is the source
Task<Status> reduce(Coll &c);          // count in, count on the root
Task<Status> allgather(Coll &c);       // count in, count * size out
Task<Status> reduce_scatter(Coll &c);  // count * size in, count out (count = recvcount)
Task<Status> alltoall(Coll &c);        // count * size in and out
Task<Status> gather(Coll &c);          // count in, count * size on the root
Task<Status> scatter(Coll &c);         // count * size on the root, count out
Task<Status> scan(Coll &c);            // inclusive prefix, count
Task<Status> exscan(Coll &c);          // exclusive prefix, count
Task<Status> barrier(Coll &c);

// The order in which allreduce's default algorithm for c combines each
// element: a reduction done elsewhere follows it.
ReductionOrder allreduce_reduction_order(const Coll &c);

// Split by (color, key): *out gets this rank's new communicator.
Task<Status> split(Communicator *comm, OpContext *op, uint32_t color, uint32_t key,
                   std::unique_ptr<Communicator> *out);
// The survivors of comm after an agreement on the failed set, in their old
// order, on the same engine and connections (shrink.cpp).
Task<Status> shrink(Communicator *comm, OpContext *op, std::unique_ptr<Communicator> *out);

}  // namespace nexar
