// Barrier.
//
// Two-phase for up to 4 ranks: everyone reports to rank 0, which releases
// everyone (2(N-1) messages, 2 message latencies). Dissemination above
// (Hensgen, Finkel & Manber 1988): in round k every rank signals rank + 2^k
// and waits for rank - 2^k, ceil(log2 N) rounds, any N. On a sparse mesh: up
// and down a tree of direct links (reductions_over_links.cpp).
//
// Barrier messages are collective frames on the data lanes, numbered by the
// collective sequence and matched by exact (rank, tag), so heartbeats and
// other control traffic can never be taken for them (upstream's bug).
#include "collective/collectives.h"
#include "collective/over_links.h"
#include "collective/shm_collectives.h"

namespace nexar {
namespace {

constexpr uint32_t kTwoPhaseMaxWorld = 4;

Task<Status> two_phase(Coll &c) {
  const uint32_t n = c.size();
  if (c.rank() != 0) {
    Status s = co_await c.send(0, 0, nullptr, 0);
    if (!s) co_return s;
    co_return co_await c.recv(0, 1, nullptr, 0);
  }
  std::vector<Task<Status>> arrivals;
  for (uint32_t r = 1; r < n; ++r)
    arrivals.push_back(c.recv(r, 0, nullptr, 0));
  Status s = co_await when_all(c.op(), std::move(arrivals));
  if (!s) co_return s;
  std::vector<Task<Status>> releases;
  for (uint32_t r = 1; r < n; ++r)
    releases.push_back(c.send(r, 1, nullptr, 0));
  co_return co_await when_all(c.op(), std::move(releases));
}

Task<Status> dissemination(Coll &c) {
  const uint32_t n = c.size(), me = c.rank();
  uint32_t round = 0;
  for (uint32_t d = 1; d < n; d <<= 1, ++round) {
    Status s = co_await c.sendrecv((me + d) % n, nullptr, 0, (me + n - d) % n, nullptr, 0, round);
    if (!s) co_return s;
  }
  co_return Status();
}

}  // namespace

Task<Status> barrier(Coll &c) {
  if (c.size() == 1) co_return Status();
  bool ran = false;
  Status s = co_await shm_barrier(c, &ran);
  if (ran) co_return s;
  // A sparse mesh: a tree of direct links (reductions_over_links.cpp).
  if (MemberRoutes routes(c); routes.usable()) co_return co_await barrier_over_links(c, routes);
  if (c.size() <= kTwoPhaseMaxWorld) co_return co_await two_phase(c);
  co_return co_await dissemination(c);
}

}  // namespace nexar
