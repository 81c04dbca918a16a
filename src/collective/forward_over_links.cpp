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
//   a receive for every block that ends at or passes through it. A passing
//   block waits in a pooled buffer until it is sent on. Small exchanges move
//   every block at once; large ones in p-1 rounds (round k: the blocks
//   (s, s+k)), as the pairwise exchange does, so that a rank has few blocks
//   in flight and holds only those of one round passing through it. Rounds
//   need no synchronisation of their own: a rank's round-k messages go out
//   after its round k-1 completed, so nothing waits behind a later round.
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

void route_part(Coll &c, MemberRoutes &routes, uint32_t s, uint32_t d, uint32_t step,
                const uint8_t *send, uint8_t *recv, uint64_t bytes,
                std::vector<Task<Status>> *flows) {
  const uint32_t me = c.rank();
  if (s == me) {
    flows->push_back(c.send(routes.next_hop(me, d), step, send, bytes));
    return;
  }
  // Only a rank on some shortest path can be on the chosen one.
  if (routes.distance(s, me) + routes.distance(me, d) != routes.distance(s, d)) return;
  uint32_t prev = s, at = routes.next_hop(s, d);
  while (at != me && at != d) {
    prev = at;
    at = routes.next_hop(at, d);
  }
  if (at != me) return;
  if (d == me)
    flows->push_back(c.recv(prev, step, recv, bytes));
  else
    flows->push_back(pass_through(c, prev, routes.next_hop(me, d), step, bytes));
}

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
                                 uint64_t block, bool in_rounds) {
  const uint32_t p = c.size();
  // This rank's part in moving block (s, d): its send, its receive, passing
  // it on, or nothing.
  auto part = [&](uint32_t s, uint32_t d, std::vector<Task<Status>> *flows) {
    route_part(c, routes, s, d, s * p + d, send + d * block, recv + s * block, block, flows);
  };
  if (!in_rounds) {
    std::vector<Task<Status>> flows;
    for (uint32_t s = 0; s < p; ++s)
      for (uint32_t d = 0; d < p; ++d)
        if (d != s) part(s, d, &flows);
    co_return co_await when_all(c.op(), std::move(flows));
  }
  // Round k moves every block (s, s + k): one block starts and one ends at
  // each rank, plus those passing through it.
  for (uint32_t k = 1; k < p; ++k) {
    std::vector<Task<Status>> flows;
    for (uint32_t s = 0; s < p; ++s)
      part(s, (s + k) % p, &flows);
    Status st = co_await when_all(c.op(), std::move(flows));
    if (!st) co_return st;
  }
  co_return Status();
}

}  // namespace nexar
