// Scan (inclusive prefix) and exscan (exclusive prefix): recursive doubling.
//
// Algorithm (Hillis & Steele), rounds k = 0 .. ceil(log2 N) - 1 with
// distance d = 2^k and step number k, so no two messages between one pair of
// ranks share a tag (upstream reused one tag for every round):
//   scan: rank r keeps acc = x[max(0, r-2d+1) .. r]. In round k it sends acc
//     to r+d (if it exists) and receives acc of r-d (if it exists), then sets
//     acc = received op acc.
//   exscan: rank r keeps partial = x[max(0, r-2d+1) .. r] (what it sends) and
//     its result x[max(0, r-2d+1) .. r-1], both updated as received op own.
//     No shift round is needed; rank 0 never receives, so its recvbuf is never
//     touched (it may be NULL).
// Every combination is (earlier ranks) op (later ranks), so rank r's result
// is op(x0, ..., xr) with the operands in rank order; for associative ops
// (every integer op, float MIN/MAX) it equals the left-to-right prefix bit for
// bit. Float SUM/PROD may group differently than a left-to-right loop
// (((x0+x1)+x2)+x3 versus (x0+x1)+(x2+x3)); each rank's result is
// deterministic for given inputs.
//
// Restrictions: none. Any N, any count (0 completes at once), any op; in place
// (sendbuf == recvbuf) works for both. A world of one copies (scan) or does
// nothing (exscan).
//
// Cost, with n = count * esize bytes: ceil(log2 N) (α + n β + n γ) for scan,
// up to twice the γ term for exscan (it reduces into two buffers).
//
// On a sparse mesh whose links connect the members the same rounds run with
// each message sent along its shortest path of links (route_part in
// over_links.h), every rank passing on the messages whose path crosses it,
// so nothing is relayed and the results keep their bits.
//
// Reference: Hillis & Steele, "Data Parallel Algorithms", CACM 29(12), 1986;
// MPICH src/mpi/coll/scan/scan_intra_recursive_doubling.c; upstream nexar
// collective/scan.rs (reference/nexar-upstream.md §3.5).
#include <cstring>

#include "collective/collectives.h"
#include "collective/over_links.h"
#include "collective/shm_collectives.h"
#include "core/copy.h"
#include "core/reduce.h"

namespace nexar {
namespace {

// Round `round` (distance d) of the doubling: `out` to rank me + d, and from
// rank me - d into `in`, where those exist. With routes (a sparse mesh) the
// messages go along links, every rank passing on those whose path crosses
// it (message step = round * p + origin).
Task<Status> doubling_round(Coll &c, MemberRoutes *routes, uint32_t round, uint32_t d,
                            const uint8_t *out, uint8_t *in, uint64_t bytes) {
  const uint32_t n = c.size(), me = c.rank();
  std::vector<Task<Status>> io;
  if (routes) {
    for (uint32_t r = 0; r + d < n; ++r)
      route_part(c, *routes, r, r + d, round * n + r, out, in, bytes, &io);
  } else {
    if (me + d < n) io.push_back(c.send(me + d, round, out, bytes));
    if (me >= d) io.push_back(c.recv(me - d, round, in, bytes));
  }
  co_return co_await when_all(c.op(), std::move(io));
}

// Whether the round of distance d is one this rank takes part in: past
// d > me with me + d >= N a rank neither sends nor receives again, unless
// it passes on others' messages.
bool takes_part(const Coll &c, const MemberRoutes *routes, uint32_t d) {
  return routes || d <= c.rank() || c.rank() + d < c.size();
}

}  // namespace

Task<Status> scan(Coll &c) {
  const CollArgs &a = c.args();
  const uint32_t n = c.size(), me = c.rank();
  const uint64_t bytes = static_cast<uint64_t>(a.count) * c.esize();
  if (bytes == 0) co_return Status();
  bool ran = false;
  if (n > 1) {
    Status s = co_await shm_scan(c, &ran);
    if (ran) co_return s;
  }
  MemberRoutes links(c);
  MemberRoutes *routes = links.usable() ? &links : nullptr;
  uint8_t *acc = static_cast<uint8_t *>(a.recvbuf);
  if (a.sendbuf != a.recvbuf) copy_bytes(acc, a.sendbuf, bytes);
  PooledBuf tmp;
  if (me > 0) tmp = c.pool().checkout(static_cast<size_t>(bytes));
  uint32_t round = 0;
  for (uint32_t d = 1; d < n && takes_part(c, routes, d); d <<= 1, ++round) {
    Status s = co_await doubling_round(c, routes, round, d, acc, tmp.data(), bytes);
    if (!s) co_return s;
    // The send has completed, so acc may change now.
    if (me >= d) reduce_out(acc, tmp.data(), acc, a.count, a.dtype, a.op);
  }
  co_return Status();
}

Task<Status> exscan(Coll &c) {
  const CollArgs &a = c.args();
  const uint32_t n = c.size(), me = c.rank();
  const uint64_t bytes = static_cast<uint64_t>(a.count) * c.esize();
  if (bytes == 0 || n == 1) co_return Status();
  bool ran = false;
  Status s = co_await shm_exscan(c, &ran);
  if (ran) co_return s;
  MemberRoutes links(c);
  MemberRoutes *routes = links.usable() ? &links : nullptr;
  uint8_t *result = static_cast<uint8_t *>(a.recvbuf);  // NULL allowed on rank 0
  const uint8_t *partial = static_cast<const uint8_t *>(a.sendbuf);
  PooledBuf tmp, own;
  if (me > 0) tmp = c.pool().checkout(static_cast<size_t>(bytes));
  bool have_result = false;
  uint32_t round = 0;
  for (uint32_t d = 1; d < n && takes_part(c, routes, d); d <<= 1, ++round) {
    s = co_await doubling_round(c, routes, round, d, partial, tmp.data(), bytes);
    if (!s) co_return s;
    if (me < d) continue;
    // partial first: in place, it may still be the input that result overwrites.
    if (me + 2 * static_cast<uint64_t>(d) < n) {  // sent again in a later round
      if (!own) own = c.pool().checkout(static_cast<size_t>(bytes));
      reduce_out(own.data(), tmp.data(), partial, a.count, a.dtype, a.op);
      partial = own.data();
    }
    if (have_result) {
      reduce_out(result, tmp.data(), result, a.count, a.dtype, a.op);
    } else {
      copy_bytes(result, tmp.data(), bytes);
      have_result = true;
    }
  }
  co_return Status();
}

}  // namespace nexar
