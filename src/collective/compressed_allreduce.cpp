#include "collective/compressed_allreduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collective/collectives.h"
#include "collective/compress/element_cast.h"
#include "collective/schedule.h"
#include "core/dtype.h"

namespace nexar {
namespace {

using sched::step_id;

constexpr uint32_t kPhaseScatterCount = 0, kPhaseScatterPairs = 1, kPhaseGatherCount = 2,
                   kPhaseGatherPairs = 3;

// Pairs on the wire: m indices (u32), then m values of the dtype.
struct Pairs {
  uint64_t m = 0;
  std::vector<uint8_t> bytes;
  const uint32_t *index() const { return reinterpret_cast<const uint32_t *>(bytes.data()); }
  const uint8_t *values() const { return bytes.data() + 4 * m; }
};

Pairs pack_pairs(const uint32_t *index, const uint8_t *values, size_t m, size_t esize) {
  Pairs p;
  p.m = m;
  p.bytes.resize(m * (4 + esize));
  if (m == 0) return p;
  memcpy(p.bytes.data(), index, 4 * m);
  memcpy(p.bytes.data() + 4 * m, values, m * esize);
  return p;
}

// Sends out's count, then its pairs (none when empty).
Task<Status> send_pairs(Coll &c, uint32_t to, uint32_t phase, const Pairs *out) {
  Status s = co_await c.send(to, step_id(phase, 0), &out->m, sizeof out->m);
  if (!s || out->m == 0) co_return s;
  co_return co_await c.send(to, step_id(phase + 1, 0), out->bytes.data(), out->bytes.size());
}

// Receives a count, then that many pairs with positions in [lo, hi).
Task<Status> recv_pairs(Coll &c, uint32_t from, uint32_t phase, size_t lo, size_t hi, Pairs *in) {
  Status s = co_await c.recv(from, step_id(phase, 0), &in->m, sizeof in->m);
  if (!s) co_return s;
  if (in->m > hi - lo)
    co_return error(NEXAR_ERR_PROTOCOL,
                    format("%s: rank %u announced %llu pairs for a block of %zu", c.what(), from,
                           static_cast<unsigned long long>(in->m), hi - lo),
                    static_cast<int32_t>(from));
  if (in->m == 0) co_return s;
  in->bytes.resize(in->m * (4 + c.esize()));
  s = co_await c.recv(from, step_id(phase + 1, 0), in->bytes.data(), in->bytes.size());
  if (!s) co_return s;
  for (uint64_t i = 0; i < in->m; ++i)
    if (in->index()[i] < lo || in->index()[i] >= hi)
      co_return error(NEXAR_ERR_PROTOCOL,
                      format("%s: rank %u sent position %u outside [%zu, %zu)", c.what(), from,
                             in->index()[i], lo, hi),
                      static_cast<int32_t>(from));
  co_return s;
}

// Every rank sends mine[j] to rank j and receives into theirs[j] from it.
Task<Status> exchange(Coll &c, uint32_t phase, const std::vector<Pairs> &mine,
                      std::vector<Pairs> *theirs, const sched::ChunkLayout &blocks,
                      bool own_block) {
  std::vector<Task<Status>> moves;
  const uint32_t me = c.rank();
  for (uint32_t k = 1; k < c.size(); ++k) {
    const uint32_t j = (me + k) % c.size();
    moves.push_back(send_pairs(c, j, phase, &mine[j]));
    // Phase one receives pairs of this rank's block, phase two of rank j's.
    const uint32_t b = own_block ? me : j;
    moves.push_back(recv_pairs(c, j, phase, blocks.offset(b), blocks.offset(b) + blocks.length(b),
                               &(*theirs)[j]));
  }
  co_return co_await when_all(c.op(), std::move(moves));
}

// The sum of every rank's pairs in this rank's block, in rank order, rounded
// once to the dtype: the union of their positions, ascending. A merge of the
// ranks' ascending lists: O(pairs x ranks), nothing the size of the block.
template <class Acc>
Pairs sum_block(const Coll &c, const std::vector<Pairs> &in) {
  const nexar_dtype_t dtype = c.args().dtype;
  const size_t n = in.size();
  std::vector<uint64_t> at(n, 0);
  std::vector<uint32_t> index;
  std::vector<uint8_t> values;
  size_t total = 0;
  for (const Pairs &p : in)
    total += p.m;
  index.reserve(total);
  values.resize(total * c.esize());
  for (;;) {
    uint64_t next = UINT64_MAX;
    for (size_t r = 0; r < n; ++r)
      if (at[r] < in[r].m) next = std::min<uint64_t>(next, in[r].index()[at[r]]);
    if (next == UINT64_MAX) break;
    Acc sum = Acc(0);
    for (size_t r = 0; r < n; ++r)
      if (at[r] < in[r].m && in[r].index()[at[r]] == next)
        sum += widen<Acc>(in[r].values(), at[r]++, dtype);
    narrow(values.data(), index.size(), sum, dtype);
    index.push_back(static_cast<uint32_t>(next));
  }
  return pack_pairs(index.data(), values.data(), index.size(), c.esize());
}

Task<Status> topk_exchange(Coll &c, const CompressedPart *part, void *recvbuf) {
  const uint32_t n = c.size(), me = c.rank();
  const size_t esize = c.esize();
  const sched::ChunkLayout blocks(part->count, n);
  // This rank's pairs, cut by owner (positions ascending: one search each).
  std::vector<Pairs> mine(n), theirs(n);
  const uint32_t *idx = part->index.data();
  const size_t m = part->index.size();
  for (uint32_t j = 0; j < n; ++j) {
    const size_t lo = std::lower_bound(idx, idx + m, blocks.offset(j)) - idx;
    const size_t hi = std::lower_bound(idx, idx + m, blocks.offset(j) + blocks.length(j)) - idx;
    if (j == me)
      theirs[me] = pack_pairs(idx + lo, part->values.data() + lo * esize, hi - lo, esize);
    else
      mine[j] = pack_pairs(idx + lo, part->values.data() + lo * esize, hi - lo, esize);
  }
  Status s = co_await exchange(c, kPhaseScatterCount, mine, &theirs, blocks, true);
  if (!s) co_return s;
  Pairs owned =
      part->dtype == NEXAR_DTYPE_F64 ? sum_block<double>(c, theirs) : sum_block<float>(c, theirs);
  for (uint32_t j = 0; j < n; ++j)
    mine[j] = Pairs();
  std::vector<Pairs> unions(n);
  for (uint32_t j = 0; j < n; ++j)
    if (j != me) mine[j] = owned;
  s = co_await exchange(c, kPhaseGatherCount, mine, &unions, blocks, false);
  if (!s || c.op()->failed()) co_return s;
  unions[me] = std::move(owned);
  memset(recvbuf, 0, part->count * esize);
  uint8_t *out = static_cast<uint8_t *>(recvbuf);
  for (const Pairs &p : unions)
    for (uint64_t i = 0; i < p.m; ++i)
      memcpy(out + size_t{p.index()[i]} * esize, p.values() + i * esize, esize);
  co_return s;
}

Task<Status> randomk_exchange(Coll &c, const CompressedPart *part, void *recvbuf) {
  // c's arguments: the k kept values in, their sums out (in staging).
  Status s = co_await allreduce(c);
  if (!s || c.op()->failed()) co_return s;
  const size_t esize = c.esize();
  const uint8_t *sums = static_cast<const uint8_t *>(c.args().recvbuf);
  uint8_t *out = static_cast<uint8_t *>(recvbuf);
  memset(out, 0, part->count * esize);
  for (size_t j = 0; j < part->index.size(); ++j)
    memcpy(out + size_t{part->index[j]} * esize, sums + j * esize, esize);
  co_return s;
}

}  // namespace

Task<Status> allreduce_compressed(Communicator *comm, OpContext *op,
                                  std::shared_ptr<const CompressedPart> part, void *recvbuf) {
  CollArgs a;
  a.dtype = part->dtype;
  a.op = NEXAR_OP_SUM;
  a.root = part->digest;  // checked on every message with the rest
  PooledBuf sums;
  CollAlgorithm run;
  if (part->kind == CompressKind::RandomK) {
    sums = comm->client().pool().checkout(part->values.size());
    a.sendbuf = part->values.data();
    a.recvbuf = sums.data();
    a.count = part->index.size();
    run = [p = part.get(), recvbuf](Coll &c) { return randomk_exchange(c, p, recvbuf); };
  } else {
    a.count = part->count;
    run = [p = part.get(), recvbuf](Coll &c) { return topk_exchange(c, p, recvbuf); };
  }
  co_return co_await run_collective_as(comm, op, CollKind::AllreduceCompressed, a, std::move(run),
                                       0);
}

}  // namespace nexar
