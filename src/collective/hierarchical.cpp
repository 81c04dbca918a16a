#include "collective/hierarchical.h"

#include "client/communicator.h"
#include "collective/collectives.h"
#include "collective/hierarchy_groups.h"

namespace nexar {
namespace {

using State = CommHierarchy::State;
using hier::run_in_group;

// Whether every host has the same number of ranks.
bool equal_hosts(const CommHierarchy &h) {
  for (uint32_t size : h.host_size)
    if (size != h.host_size[0]) return false;
  return true;
}

// Reduce-scatter on the host, allreduce of this rank's shard across hosts
// straight into its place in recvbuf, allgather on the host from there.
Task<Status> allreduce_shards(Coll &c, CommHierarchy &h, size_t shard) {
  const CollArgs &g = c.args();
  const size_t bytes = shard * c.esize();
  auto *dst = static_cast<uint8_t *>(g.recvbuf);
  uint8_t *mine = dst + size_t{h.local->rank()} * bytes;
  // The host's sum of shard i lands apart from recvbuf: in place, sendbuf
  // is recvbuf, and the other shards are still being read.
  PooledBuf host_sum = c.pool().checkout(bytes);
  Status s =
      co_await run_in_group(c, *h.local, 1, CollKind::ReduceScatter,
                            {g.sendbuf, host_sum.data(), shard, g.dtype, g.op, 0}, reduce_scatter);
  if (!s) co_return s;
  s = co_await run_in_group(c, *h.cross, 2, CollKind::Allreduce,
                            {host_sum.data(), mine, shard, g.dtype, g.op, 0}, allreduce);
  if (!s) co_return s;
  co_return co_await run_in_group(c, *h.local, 3, CollKind::Allgather,
                                  {mine, dst, shard, g.dtype, g.op, 0}, allgather);
}

// Elements [first, count) by the leaders: a reduce to local rank 0, an
// allreduce among local rank 0 of every host, a broadcast from local rank 0.
Task<Status> allreduce_leaders(Coll &c, CommHierarchy &h, size_t first) {
  const CollArgs &g = c.args();
  const size_t off = first * c.esize(), count = g.count - first;
  const void *src = static_cast<const uint8_t *>(g.sendbuf) + off;
  void *dst = static_cast<uint8_t *>(g.recvbuf) + off;
  Status s = co_await run_in_group(c, *h.local, 4, CollKind::Reduce,
                                   {src, dst, count, g.dtype, g.op, 0}, reduce);
  if (!s) co_return s;
  if (h.local->rank() == 0) {
    s = co_await run_in_group(c, *h.cross, 5, CollKind::Allreduce,
                              {dst, dst, count, g.dtype, g.op, 0}, allreduce);
    if (!s) co_return s;
  }
  co_return co_await run_in_group(c, *h.local, 6, CollKind::Broadcast,
                                  {dst, dst, count, g.dtype, g.op, 0}, broadcast);
}

// Hosts of one size L: the first multiple of L elements by shards, the rest
// (fewer than L) by the leaders. Hosts of different sizes: all by the
// leaders.
Task<Status> allreduce_across(Coll &c, CommHierarchy &h) {
  const size_t count = c.args().count;
  const size_t shard = equal_hosts(h) ? count / h.local->size() : 0;
  if (shard > 0) {
    Status s = co_await allreduce_shards(c, h, shard);
    if (!s) co_return s;
  }
  const size_t done = shard * h.local->size();
  if (done == count) co_return Status();
  co_return co_await allreduce_leaders(c, h, done);
}

// The position of host `host` among the hosts that have a rank at place g
// (the ranks of cross group g, in host order).
uint32_t cross_position(const CommHierarchy &h, uint32_t host, uint32_t g) {
  uint32_t pos = 0;
  for (uint32_t k = 0; k < host; ++k)
    pos += h.host_size[k] > g;
  return pos;
}

Task<Status> broadcast_across(Coll &c, CommHierarchy &h) {
  const CollArgs &g = c.args();
  const uint32_t me = c.rank(), root = g.root;
  const uint32_t root_host = h.host_of[root], root_place = h.local_index[root];
  bool everywhere = true;
  for (uint32_t size : h.host_size)
    everywhere &= size > root_place;
  const uint32_t gate = everywhere ? root_place : 0;
  const bool on_root_host = h.host_of[me] == root_host, at_gate = h.local_index[me] == gate;
  const CollArgs local{g.recvbuf, g.recvbuf, g.count,
                       g.dtype,   g.op,      on_root_host ? root_place : gate};
  const CollArgs cross{g.recvbuf, g.recvbuf, g.count,
                       g.dtype,   g.op,      cross_position(h, root_host, gate)};
  Status s;
  // The root not at the gate: its host first, then across from the gate.
  const bool local_first = on_root_host && root_place != gate;
  if (local_first &&
      !(s = co_await run_in_group(c, *h.local, 1, CollKind::Broadcast, local, broadcast)))
    co_return s;
  if (at_gate &&
      !(s = co_await run_in_group(c, *h.cross, 2, CollKind::Broadcast, cross, broadcast)))
    co_return s;
  if (!local_first)
    s = co_await run_in_group(c, *h.local, 3, CollKind::Broadcast, local, broadcast);
  co_return s;
}

// Runs body if the communicator's collectives go across hosts by its
// groups (*ran), else leaves it to the flat algorithms.
template <class Body>
Task<Status> on_groups(Coll &c, bool *ran, Body body) {
  *ran = false;
  CommHierarchy &h = c.comm()->hierarchy();
  if (h.state == State::Off) co_return Status();
  hier::Turn turn(h);
  Status s = co_await turn.take(c);
  if (!s) {
    *ran = true;
    co_return s;
  }
  if (h.state != State::On) co_return Status();
  *ran = true;
  c.note_algorithm("hierarchical");
  co_return co_await body(c, h);
}

}  // namespace

Task<Status> hierarchical_allreduce(Coll &c, bool *ran) {
  return on_groups(c, ran, allreduce_across);
}

Task<Status> hierarchical_broadcast(Coll &c, bool *ran) {
  return on_groups(c, ran, broadcast_across);
}

}  // namespace nexar
