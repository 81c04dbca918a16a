// Collectives on a communicator that spans hosts: the phases among the ranks
// of one host run as that host's collectives (on shared memory, where the
// ranks reach each other through it), and only one phase crosses hosts over
// QUIC. The groups (client/comm_hierarchy.h) are decided at the first such
// collective, alike on every member, from which ranks reach each other
// through shared memory; the hierarchy is used with at least 2 hosts of
// which one has at least 2 ranks, otherwise these return with *ran false and
// the flat message algorithms run. L = ranks per host, h = hosts.
//
// * Allreduce, every host with L ranks: a reduce-scatter on each host
//   (local rank i gets shard i of the host's sum), an allreduce of shard i
//   among local rank i of every host (L allreduces across hosts at once,
//   each of count / L elements), then an allgather of the shards on each
//   host. A rank sends about 2 n (h-1)/h / L bytes across hosts (n/L with 2
//   hosts), against 2 n (p-1)/p for the flat ring, part of which stays on
//   the host there. The last count mod L elements go by the leaders, below.
// * Allreduce by the leaders (hosts of different sizes, and the elements
//   left over): a reduce to local rank 0 on each host, an allreduce among
//   local rank 0 of every host, a broadcast from local rank 0 on each host.
// * Broadcast: the root's data crosses to one rank per other host (local
//   rank g, the root's own place if every host has one, else 0), then every
//   host broadcasts it from there. On the root's host the root broadcasts
//   first when it is not at place g.
//
// Every element is reduced once per phase, in an order the same on every
// rank: results are bit-identical everywhere, but float sums associate by
// host first (they may differ from the flat algorithms' in the last bits).
#pragma once

#include "collective/coll.h"

namespace nexar {

Task<Status> hierarchical_allreduce(Coll &c, bool *ran);
Task<Status> hierarchical_broadcast(Coll &c, bool *ran);

}  // namespace nexar
