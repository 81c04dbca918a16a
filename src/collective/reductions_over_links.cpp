// Reduce-scatter and barrier on a sparse mesh, moving every byte along
// direct links only (member_routes.h), so the relay forwards nothing (scan
// and exscan route their own rounds: scan.cpp). Reduce-scatter's float
// results keep the bits of the full-mesh ring: it combines the same operands
// in the same association (collective/reduction_order.h).
//
// Reduce-scatter: every rank's block r travels to rank r along its shortest
//   path (alltoall_over_links), then rank r combines the p blocks in the
//   ring's order (ReductionOrder::Ring), which is what the ring computes.
//   Link bytes: each block crosses its shortest path once, as the relay
//   would carry it; memory: p blocks of scratch.
// Barrier: every rank reports up the shortest-path tree of links rooted at
//   rank 0 once all its children did, then the release comes down the same
//   tree: 2 * depth message latencies (depth log2 p on a hypercube).
#include <cstring>

#include "collective/collectives.h"
#include "collective/over_links.h"
#include "collective/reduction_order.h"

namespace nexar {

Task<Status> reduce_scatter_over_links(Coll &c, MemberRoutes &routes) {
  const CollArgs &a = c.args();
  const uint32_t n = c.size(), me = c.rank();
  const uint64_t block = uint64_t{a.count} * c.esize();
  const auto *src = static_cast<const uint8_t *>(a.sendbuf);
  PooledBuf blocks = c.pool().checkout(static_cast<size_t>(block * n));
  memcpy(blocks.data() + me * block, src + me * block, block);
  Status s = co_await alltoall_over_links(c, routes, src, blocks.data(), block,
                                          block * (n - 1) > kOverLinksConcurrentBytes);
  if (!s) co_return s;
  ReductionInputs x{std::vector<const uint8_t *>(n), size_t{a.count} * n, c.esize(), a.dtype, a.op};
  for (uint32_t r = 0; r < n; ++r)
    x.x[r] = blocks.data() + r * block;
  reduce_in_order(ReductionOrder::Ring, x, size_t{me} * a.count, a.count,
                  static_cast<uint8_t *>(a.recvbuf), c.pool());
  co_return Status();
}

Task<Status> barrier_over_links(Coll &c, MemberRoutes &routes) {
  constexpr uint32_t kRoot = 0, kStepUp = 0, kStepDown = 1;
  const uint32_t me = c.rank();
  const std::vector<uint32_t> kids = routes.children(me, kRoot);
  std::vector<Task<Status>> up;
  for (uint32_t k : kids)
    up.push_back(c.recv(k, kStepUp, nullptr, 0));
  Status s = co_await when_all(c.op(), std::move(up));
  if (!s) co_return s;
  if (me != kRoot) {
    const uint32_t parent = routes.next_hop(me, kRoot);
    if (!(s = co_await c.send(parent, kStepUp, nullptr, 0))) co_return s;
    if (!(s = co_await c.recv(parent, kStepDown, nullptr, 0))) co_return s;
  }
  std::vector<Task<Status>> down;
  for (uint32_t k : kids)
    down.push_back(c.send(k, kStepDown, nullptr, 0));
  co_return co_await when_all(c.op(), std::move(down));
}

}  // namespace nexar
