// Gather, scatter, broadcast, reduce and allreduce over a spanning tree of
// direct links: the shortest-path tree rooted at the root (a breadth-first
// tree: each rank's parent is its next hop towards the root,
// member_routes.h), so no message is relayed.
//
// Blocks travel in the tree's pre-order (a rank, then its children's
// subtrees in rank order), so every subtree is one contiguous run:
//   gather:  each rank receives its children's runs next to its own block,
//            at once, then sends its whole run to its parent; the root puts
//            the blocks into rank order.
//   scatter: the root lays its blocks out in pre-order; each rank receives
//            its run from its parent, sends each child its part, and keeps
//            the first block (its own).
// One message per tree edge (step 0). Cost: (depth of the tree) alpha; each
// block crosses as many links as its rank is deep, which is the hops the
// relay would carry it; an inner rank holds its subtree's blocks (pooled).
//
// Broadcast: each rank receives the buffer from its parent segment by
//   segment and forwards each segment to all its children as soon as it has
//   arrived (a TransferWindow, ring.h). Cost: (depth + S - 1) segment
//   latencies for S segments; every tree link carries n once.
// Reduce: each rank combines its children's partial results into its own,
//   in a fixed order, own op kid_1 op kid_2 ... with kids in rank order (the
//   tree is the same on every run, so are the bits), then sends the result
//   to its parent. Cost: depth (alpha + n beta + n gamma).
// Allreduce: reduce to rank 0, then broadcast from rank 0: every rank gets
//   the same bits.
#include <algorithm>
#include <cstring>

#include "collective/collectives.h"
#include "collective/over_links.h"
#include "collective/ring.h"
#include "collective/schedule.h"
#include "core/copy.h"

namespace nexar {
namespace {

// The shortest-path tree rooted at root, in pre-order.
struct LinkTree {
  std::vector<std::vector<uint32_t>> kids;  // per rank, in rank order
  std::vector<uint32_t> order;              // ranks in pre-order
  std::vector<uint32_t> pos;                // per rank: its index in order
  std::vector<uint32_t> span;               // per rank: blocks in its subtree

  LinkTree(MemberRoutes &routes, uint32_t root) {
    const uint32_t p = routes.size();
    kids.resize(p);
    for (uint32_t r = 0; r < p; ++r)
      kids[r] = routes.children(r, root);
    pos.assign(p, 0);
    span.assign(p, 1);
    order.reserve(p);
    std::vector<uint32_t> stack{root};
    while (!stack.empty()) {
      const uint32_t r = stack.back();
      stack.pop_back();
      pos[r] = static_cast<uint32_t>(order.size());
      order.push_back(r);
      for (auto k = kids[r].rbegin(); k != kids[r].rend(); ++k)
        stack.push_back(*k);
    }
    for (auto r = order.rbegin(); r != order.rend(); ++r)  // children before parents
      for (uint32_t k : kids[*r])
        span[*r] += span[k];
  }
  // Where child k's run starts in r's run, in bytes.
  uint64_t offset(uint32_t r, uint32_t k, uint64_t block) const {
    return uint64_t{pos[k] - pos[r]} * block;
  }
};

}  // namespace

Task<Status> gather_over_links(Coll &c, MemberRoutes &routes, uint64_t block) {
  const uint32_t me = c.rank(), root = c.args().root;
  const LinkTree t(routes, root);
  const void *own = c.args().sendbuf;
  if (t.kids[me].empty()) co_return co_await c.send(routes.next_hop(me, root), 0, own, block);

  const uint64_t run = t.span[me] * block;
  PooledBuf tmp = c.pool().checkout(static_cast<size_t>(run));
  uint8_t *buf = tmp.data();
  copy_bytes(buf, own, block);  // before anything arrives: the root's may lie in recvbuf
  std::vector<Task<Status>> arrivals;
  for (uint32_t k : t.kids[me])
    arrivals.push_back(c.recv(k, 0, buf + t.offset(me, k, block), t.span[k] * block));
  Status s = co_await when_all(c.op(), std::move(arrivals));
  if (!s) co_return s;
  if (me != root) co_return co_await c.send(routes.next_hop(me, root), 0, buf, run);
  auto *recv = static_cast<uint8_t *>(c.args().recvbuf);
  for (uint32_t i = 0; i < t.order.size(); ++i)
    copy_bytes(recv + t.order[i] * block, buf + i * block, block);
  co_return Status();
}

Task<Status> scatter_over_links(Coll &c, MemberRoutes &routes, uint64_t block) {
  const uint32_t me = c.rank(), root = c.args().root;
  const LinkTree t(routes, root);
  void *recv = c.args().recvbuf;
  if (t.kids[me].empty()) co_return co_await c.recv(routes.next_hop(me, root), 0, recv, block);

  const uint64_t run = t.span[me] * block;
  PooledBuf tmp = c.pool().checkout(static_cast<size_t>(run));
  uint8_t *buf = tmp.data();
  if (me == root) {
    const auto *send = static_cast<const uint8_t *>(c.args().sendbuf);
    for (uint32_t i = 0; i < t.order.size(); ++i)
      copy_bytes(buf + i * block, send + t.order[i] * block, block);
  } else {
    Status s = co_await c.recv(routes.next_hop(me, root), 0, buf, run);
    if (!s) co_return s;
  }
  std::vector<Task<Status>> departures;
  for (uint32_t k : t.kids[me])
    departures.push_back(c.send(k, 0, buf + t.offset(me, k, block), t.span[k] * block));
  Status s = co_await when_all(c.op(), std::move(departures));
  if (!s) co_return s;
  copy_bytes(recv, buf, block);
  co_return Status();
}

namespace {

Task<Status> tree_broadcast_units(Coll &c, TransferWindow &window, MemberRoutes &routes,
                                  uint32_t root, void *buf, size_t count, uint32_t phase) {
  const uint32_t me = c.rank();
  const int32_t parent = me == root ? -1 : static_cast<int32_t>(routes.next_hop(me, root));
  return forward_down(c, window, parent, routes.children(me, root), buf, count, phase);
}

}  // namespace

Task<Status> broadcast_down_tree(Coll &c, MemberRoutes &routes, uint32_t root, void *buf,
                                 size_t count, uint32_t phase) {
  co_return co_await with_window(c, [&](TransferWindow &window) {
    return tree_broadcast_units(c, window, routes, root, buf, count, phase);
  });
}

Task<Status> reduce_up_tree(Coll &c, MemberRoutes &routes, uint32_t root, const void *src,
                            void *acc, uint64_t bytes, uint32_t phase) {
  const uint32_t me = c.rank(), step = sched::step_id(phase, 0);
  const std::vector<uint32_t> kids = routes.children(me, root);
  const uint32_t parent = routes.next_hop(me, root);
  if (kids.empty()) co_return co_await c.send(parent, step, src, bytes);
  PooledBuf pooled;
  if (!acc) {
    pooled = c.pool().checkout(static_cast<size_t>(bytes));
    acc = pooled.data();
  }
  // acc = own op kid_1 op kid_2 ..., kids in rank order, each combined as its
  // packets arrive (a kid arriving early waits in the mailbox).
  for (size_t i = 0; i < kids.size(); ++i) {
    Status s = co_await c.recv_reduce(kids[i], step, acc, i == 0 ? src : acc, bytes,
                                      /*own_first=*/true);
    if (!s) co_return s;
  }
  if (me == root) co_return Status();
  co_return co_await c.send(parent, step, acc, bytes);
}

Task<Status> allreduce_over_tree(Coll &c, MemberRoutes &routes) {
  constexpr uint32_t kRoot = 0, kPhaseUp = 0, kPhaseDown = 1;
  const CollArgs &a = c.args();
  Status s = co_await reduce_up_tree(c, routes, kRoot, a.sendbuf, a.recvbuf,
                                     uint64_t{a.count} * c.esize(), kPhaseUp);
  if (!s) co_return s;
  co_return co_await broadcast_down_tree(c, routes, kRoot, a.recvbuf, a.count, kPhaseDown);
}

}  // namespace nexar
