// Communicator split (MPI_Comm_split).
//
// Algorithm: every rank contributes a 16-byte record [color u32][key u32]
// [split generation u64] (little-endian), and a Bruck allgather gives every
// rank all N records: in round k (step k) a rank sends the min(2^k, N - 2^k)
// records it has gathered so far (its own and those of the ranks after it) to
// rank - 2^k and receives as many from rank + 2^k. Then each rank, on its own:
//   - checks that every rank drew the same split generation (ranks that ran
//     different numbers of splits would otherwise compute different ids);
//   - its group = the ranks with its color, ordered by (key, parent rank); its
//     new rank is its position there;
//   - comm_id = FNV-1a 64 over (parent comm_id, split generation, color), all
//     little-endian, with 0 (the root communicator's id) mapped to 1; every
//     member computes the same id without talking;
//   - the child maps its ranks through the parent's onto world ranks and
//     shares the parent's engine and connections. Frames carry the comm_id and
//     the mailbox matches on it, so parent, siblings and children never take
//     each other's messages.
// The child is made only once everything succeeded, on the loop thread, and
// registers with the engine (abort and mismatch notices reach it by comm_id).
// It shares the engine's lease: parent and children may be destroyed in any
// order; the engine stops with the last of them.
//
// Restrictions: every rank of the parent calls split (a collective, numbered
// with the others). There is no "undefined" color (MPI_UNDEFINED): every rank
// joins the group of its color, possibly alone.
//
// Cost: ceil(log2 N) α + 16 (N-1) β, then O(N log N) local work.
//
// Reference: MPI 4.0 §7.4.2 (MPI_Comm_split); Bruck et al., "Efficient
// Algorithms for All-to-All Communications in Multiport Message-Passing
// Systems", IEEE TPDS 8(11), 1997 (the allgather); upstream nexar
// client/split.rs (reference/nexar-upstream.md §3.9, §4.9), whose split
// children could not barrier or receive (§8.2 items 2-3).
#include <algorithm>
#include <cstring>

#include "collective/collectives.h"

namespace nexar {
namespace {

constexpr uint64_t kRecord = 16;

void put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// FNV-1a 64 over the little-endian bytes of (parent id, generation, color).
uint64_t child_comm_id(uint64_t parent, uint64_t generation, uint32_t color) {
  uint8_t bytes[20];
  put_le(bytes, parent, 8);
  put_le(bytes + 8, generation, 8);
  put_le(bytes + 16, color, 4);
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h ? h : 1;  // 0 is the root communicator's
}

// Bruck allgather of one record per rank: afterwards all[i] is the record of
// rank (me + i) mod N.
Task<Status> exchange(Coll &c, std::vector<uint8_t> &all) {
  const uint32_t n = c.size(), me = c.rank();
  uint32_t round = 0;
  for (uint32_t d = 1; d < n; d <<= 1, ++round) {
    const uint64_t bytes = std::min(d, n - d) * kRecord;
    Status s = co_await c.sendrecv((me + n - d) % n, all.data(), bytes, (me + d) % n,
                                   all.data() + d * kRecord, bytes, round);
    if (!s) co_return s;
  }
  co_return Status();
}

}  // namespace

Task<Status> split(Communicator *comm, OpContext *op, uint32_t color, uint32_t key,
                   std::unique_ptr<Communicator> *out) {
  // Drawn before the first suspension: splits start in collective order.
  const uint64_t generation = comm->next_split_generation();
  CollArgs args;
  args.count = kRecord;
  args.dtype = NEXAR_DTYPE_U8;
  Coll c(comm, op, CollKind::Split, args);
  const uint32_t n = c.size(), me = c.rank();

  std::vector<uint8_t> all(n * kRecord);
  put_le(all.data(), color, 4);
  put_le(all.data() + 4, key, 4);
  put_le(all.data() + 8, generation, 8);
  Status s = co_await exchange(c, all);
  // A failure recorded on the operation wins, and nothing is made then.
  if (op->failed()) s = op->status();
  if (s.ok()) {
    for (uint32_t i = 0; i < n && s.ok(); ++i) {
      const uint64_t g = get_le(all.data() + i * kRecord + 8, 8);
      if (g != generation) {
        const uint32_t r = (me + i) % n;
        s = error(NEXAR_ERR_MISMATCH,
                  format("%s: rank %u is at split generation %llu, this rank (%u) at %llu: "
                         "ranks ran different numbers of splits",
                         c.what(), r, static_cast<unsigned long long>(g), me,
                         static_cast<unsigned long long>(generation)),
                  static_cast<int32_t>(r));
      }
    }
  }
  if (!s) {
    if (s.code == NEXAR_ERR_MISMATCH) comm->announce_mismatch(c.seq(), s.message);
    co_return s;
  }

  // (key, parent rank) of every rank with this color.
  std::vector<std::pair<uint32_t, uint32_t>> group;
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t *rec = all.data() + i * kRecord;
    if (static_cast<uint32_t>(get_le(rec, 4)) == color)
      group.emplace_back(static_cast<uint32_t>(get_le(rec + 4, 4)), (me + i) % n);
  }
  std::sort(group.begin(), group.end());
  std::vector<uint32_t> world_of(group.size());
  uint32_t new_rank = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    world_of[i] = comm->world_rank_of(group[i].second);
    if (group[i].second == me) new_rank = static_cast<uint32_t>(i);
  }
  *out = comm->make_child(child_comm_id(comm->comm_id(), generation, color), new_rank,
                          std::move(world_of));
  co_return Status();
}

}  // namespace nexar
