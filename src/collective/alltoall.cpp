// Alltoall: pairwise exchange.
//
// Algorithm: rank r copies its own block, then in step s = 1 .. N-1 sends
// block (r+s) mod N to rank r+s and receives block (r-s) mod N from rank r-s,
// so in every step each rank sends one block and receives one, and every
// ordered pair of ranks meets exactly once (step number s - 1: the first
// message uses step 0, like every collective's, so ranks that issued
// different collectives meet on one tag and see the mismatch). While everything
// a rank sends fits in kConcurrentBytes the steps all run at once (latency
// bound: one message latency instead of N-1); above, they run in order, so a
// rank has one block in flight per direction and receivers never buffer.
//
// On a sparse mesh the blocks travel along links instead, forwarded by the
// ranks on their shortest paths (forward_over_links.cpp).
//
// Restrictions: none. Any N, any count (0 completes at once); a world of one
// copies. In place (sendbuf == recvbuf) sends from a pooled copy of the input.
//
// Cost, with n = count * esize * N bytes per rank: (N-1) α + (N-1)/N n β
// in order, α + (N-1)/N n β (plus N-1 message overheads) when concurrent;
// in place adds a copy of n bytes.
//
// Reference: Thakur, Rabenseifner & Gropp, "Optimization of Collective
// Communication Operations in MPICH", IJHPCA 19(1), 2005, §3.5 (pairwise
// exchange); upstream nexar collective/alltoall.rs (reference/nexar-upstream.md
// §3.4), which uses the same schedule.
#include <cstring>

#include "collective/collectives.h"
#include "collective/over_links.h"
#include "collective/shm_collectives.h"
#include "core/copy.h"

namespace nexar {
namespace {

// Bytes a rank may send at once with every step in flight.
constexpr uint64_t kConcurrentBytes = 1 << 20;

}  // namespace

Task<Status> alltoall(Coll &c) {
  const uint32_t n = c.size(), me = c.rank();
  const uint64_t block = static_cast<uint64_t>(c.args().count) * c.esize();
  if (block == 0) co_return Status();
  const uint8_t *send = static_cast<const uint8_t *>(c.args().sendbuf);
  uint8_t *recv = static_cast<uint8_t *>(c.args().recvbuf);
  if (n == 1) {
    if (send != recv) copy_bytes(recv, send, block);
    co_return Status();
  }
  bool ran = false;
  Status s = co_await shm_alltoall(c, &ran);
  if (ran) co_return s;
  PooledBuf copy;
  if (send == recv) {
    // Blocks arrive into the memory still to be sent: send from a copy.
    copy = c.pool().checkout(static_cast<size_t>(block * n));
    copy_bytes(copy.data(), send, static_cast<size_t>(block * n));
    send = copy.data();
  } else {
    copy_bytes(recv + me * block, send + me * block, block);
  }
  // A sparse mesh: every block along its shortest path of links, forwarded
  // by the ranks on the way (forward_over_links.cpp), not by the relay.
  if (MemberRoutes routes(c); routes.usable() && n <= kAlltoallOverLinksMaxWorld)
    co_return co_await alltoall_over_links(c, routes, send, recv, block,
                                           block * (n - 1) > kConcurrentBytes);

  if (block * (n - 1) <= kConcurrentBytes) {
    std::vector<Task<Status>> io;
    io.reserve(2 * (n - 1));
    for (uint32_t s = 1; s < n; ++s) {
      const uint32_t to = (me + s) % n, from = (me + n - s) % n;
      io.push_back(c.send(to, s - 1, send + to * block, block));
      io.push_back(c.recv(from, s - 1, recv + from * block, block));
    }
    co_return co_await when_all(c.op(), std::move(io));
  }
  for (uint32_t s = 1; s < n; ++s) {
    const uint32_t to = (me + s) % n, from = (me + n - s) % n;
    Status st =
        co_await c.sendrecv(to, send + to * block, block, from, recv + from * block, block, s - 1);
    if (!st) co_return st;
  }
  co_return Status();
}

}  // namespace nexar
