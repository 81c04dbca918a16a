// Allgather and alltoall over direct links: every block travels its
// shortest path among the members (member_routes.h), forwarded by the ranks
// on the way as soon as it has arrived, so the relay carries nothing and no
// block crosses a link twice.
//
// Allgather: rank s's block spreads down the shortest-path tree rooted at s
//   (each rank receives it once, from its next hop towards s, and passes it
//   to the neighbours whose next hop towards s it is). Every rank receives
//   each of the p-1 blocks exactly once, straight into recvbuf, as a ring
//   would, but in as many rounds as the graph is wide (log2 p on a
//   hypercube) instead of p-1; message step = the block's rank.
// Alltoall: block (s, d) follows the path s -> d hop by hop; message step =
//   s * p + d (unique on every link). Each rank knows the paths, so it posts
//   a receive for every block that ends at or passes through it at once. A
//   passing block waits in a pooled buffer until it is sent on: a rank
//   holds at most the blocks routed through it (on a hypercube about
//   (log2 p / 2 - 1) of its own n bytes), the bytes the relay would
//   otherwise have held for it.
// Cost: the same link bytes as the shortest-path relay, plus one message
// per hop instead of relay chunks; no reduction.
#include "collective/collectives.h"
#include "collective/over_links.h"

namespace nexar {
namespace {

// Receives one block from `from`, then sends it to each of `to` at once.
Task<Status> receive_and_pass(Coll &c, uint32_t from, std::vector<uint32_t> to, uint32_t step,
                              uint8_t *data, uint64_t bytes) {
  Status s = co_await c.recv(from, step, data, bytes);
  if (!s || to.empty()) co_return s;
  std::vector<Task<Status>> sends;
  for (uint32_t k : to)
    sends.push_back(c.send(k, step, data, bytes));
  co_return co_await when_all(c.op(), std::move(sends));
}

// A block routed through this rank: held in a pooled buffer meanwhile.
Task<Status> pass_through(Coll &c, uint32_t from, uint32_t to, uint32_t step, uint64_t bytes) {
  PooledBuf buf = c.pool().checkout(static_cast<size_t>(bytes));
  Status s = co_await c.recv(from, step, buf.data(), bytes);
  if (!s) co_return s;
  co_return co_await c.send(to, step, buf.data(), bytes);
}

}  // namespace

Task<Status> allgather_over_links(Coll &c, MemberRoutes &routes, uint64_t block) {
  const uint32_t p = c.size(), me = c.rank();
  auto *dst = static_cast<uint8_t *>(c.args().recvbuf);
  std::vector<Task<Status>> flows;
  flows.reserve(p);
  for (uint32_t s = 0; s < p; ++s) {
    std::vector<uint32_t> kids = routes.children(me, s);
    if (s != me) {
      flows.push_back(
          receive_and_pass(c, routes.next_hop(me, s), std::move(kids), s, dst + s * block, block));
      continue;
    }
    for (uint32_t k : kids)
      flows.push_back(c.send(k, s, dst + s * block, block));
  }
  co_return co_await when_all(c.op(), std::move(flows));
}

Task<Status> alltoall_over_links(Coll &c, MemberRoutes &routes, const uint8_t *send, uint8_t *recv,
                                 uint64_t block) {
  const uint32_t p = c.size(), me = c.rank();
  std::vector<Task<Status>> flows;
  for (uint32_t d = 0; d < p; ++d)
    if (d != me)
      flows.push_back(c.send(routes.next_hop(me, d), me * p + d, send + d * block, block));
  for (uint32_t s = 0; s < p; ++s) {
    if (s == me) continue;
    const uint32_t to_me = routes.distance(s, me);
    for (uint32_t d = 0; d < p; ++d) {
      // Only a rank on some shortest path can be on the chosen one.
      if (d == s || to_me + routes.distance(me, d) != routes.distance(s, d)) continue;
      uint32_t prev = s, at = routes.next_hop(s, d);
      while (at != me && at != d) {
        prev = at;
        at = routes.next_hop(at, d);
      }
      if (at != me) continue;
      const uint32_t step = s * p + d;
      if (d == me)
        flows.push_back(c.recv(prev, step, recv + s * block, block));
      else
        flows.push_back(pass_through(c, prev, routes.next_hop(me, d), step, block));
    }
  }
  co_return co_await when_all(c.op(), std::move(flows));
}

}  // namespace nexar
