// Pure schedule arithmetic shared by the collective algorithms: how a vector
// is cut into blocks and segments, who talks to whom in a ring, a binomial
// tree and a power-of-two fold, and how a message is numbered. No sockets, no
// coroutines: everything here is a function of (rank, size, count) and is
// tested exhaustively in tests/unit/schedule_test.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace nexar::sched {

// count elements cut into `parts` blocks that differ by at most one element:
// the first count % parts blocks ("early" blocks, Open MPI's name) have one
// element more than the others ("late" blocks). Blocks are contiguous and in
// index order; with count < parts the last blocks are empty.
struct ChunkLayout {
  size_t count = 0;
  uint32_t parts = 1;
  size_t base = 0;  // elements of a late block
  size_t rem = 0;   // number of early blocks

  ChunkLayout() = default;
  ChunkLayout(size_t count_, uint32_t parts_)
      : count(count_), parts(parts_ ? parts_ : 1), base(count_ / parts), rem(count_ % parts) {}

  size_t length(uint32_t i) const { return base + (i < rem ? 1 : 0); }
  size_t offset(uint32_t i) const { return i * base + std::min<size_t>(i, rem); }
  size_t max_length() const { return base + (rem ? 1 : 0); }
  // Elements of the contiguous blocks [first, last).
  size_t range_length(uint32_t first, uint32_t last) const { return offset(last) - offset(first); }
};

// Largest power of two <= n (n >= 1), and its exponent.
inline uint32_t pof2_floor(uint32_t n) {
  uint32_t p = 1;
  while (p <= n / 2)
    p <<= 1;
  return p;
}
inline uint32_t log2_floor(uint32_t n) {
  uint32_t k = 0;
  while ((2u << k) <= n && k < 31)
    ++k;
  return k;
}

// The non-power-of-two fold of MPICH's recursive doubling and
// reduce_scatter_allgather: with pof2 the largest power of two <= n and
// rem = n - pof2, the first 2*rem ranks pair up; the even one of each pair
// hands its vector to the odd one (rank + 1) and sits out, the odd one joins
// the power-of-two group. Virtual ranks keep the order of real ranks, so the
// data held by a virtual rank always comes from a contiguous range of real
// ranks that lies below the range of every higher virtual rank.
struct Fold {
  uint32_t n = 1, pof2 = 1, rem = 0;

  explicit Fold(uint32_t n_) : n(n_), pof2(pof2_floor(n_)), rem(n_ - pof2_floor(n_)) {}

  // Even ranks below 2*rem: give their vector to rank + 1, get the result back.
  bool sits_out(uint32_t r) const { return r < 2 * rem && r % 2 == 0; }
  // Odd ranks below 2*rem: take the vector of rank - 1 and join.
  bool absorbs(uint32_t r) const { return r < 2 * rem && r % 2 == 1; }
  // Virtual rank in [0, pof2) of a rank that does not sit out.
  uint32_t vrank(uint32_t r) const { return r < 2 * rem ? r / 2 : r - rem; }
  // The real rank of virtual rank v.
  uint32_t real(uint32_t v) const { return v < rem ? 2 * v + 1 : v + rem; }
  // The lowest real rank whose data virtual rank v holds after the fold.
  uint32_t first_real(uint32_t v) const { return v < rem ? 2 * v : v + rem; }
};

// Ring neighbours.
inline uint32_t ring_next(uint32_t r, uint32_t n) {
  return r + 1 == n ? 0 : r + 1;
}
inline uint32_t ring_prev(uint32_t r, uint32_t n) {
  return r == 0 ? n - 1 : r - 1;
}
// (a - b) mod n for a, b < n, and (a - k) mod n for any k.
inline uint32_t mod_sub(uint32_t a, uint64_t k, uint32_t n) {
  const uint32_t km = static_cast<uint32_t>(k % n);
  return a >= km ? a - km : a + n - km;
}

// Ring reduce-scatter, steps s = 0..n-2: rank r sends its partial of block
// r-s-1 to r+1 and receives (and reduces into its own) block r-s-2 from r-1;
// the last step completes block r on rank r.
inline uint32_t rs_send_block(uint32_t r, uint32_t s, uint32_t n) {
  return mod_sub(r, uint64_t{s} + 1, n);
}
inline uint32_t rs_recv_block(uint32_t r, uint32_t s, uint32_t n) {
  return mod_sub(r, uint64_t{s} + 2, n);
}
// Ring allgather, steps s = 0..n-2, starting with block r on rank r: rank r
// sends block r-s to r+1 and receives block r-s-1 from r-1.
inline uint32_t ag_send_block(uint32_t r, uint32_t s, uint32_t n) {
  return mod_sub(r, s, n);
}
inline uint32_t ag_recv_block(uint32_t r, uint32_t s, uint32_t n) {
  return mod_sub(r, uint64_t{s} + 1, n);
}

// Recursive halving over pof2 blocks (the reduce-scatter half of
// Rabenseifner's allreduce), rounds k = 0 .. log2(pof2)-1 with partner
// v ^ 2^k, nearest first as in MPICH (in the round that moves the most data
// the partners are neighbours, typically on one host). Both partners hold the
// same window of blocks and split it in half; the lower one keeps the lower
// half. After the last round v keeps one block (v bit-reversed). The
// allgather by recursive doubling runs the rounds backwards: it sends what
// was kept and receives what was given.
struct HalvingRound {
  uint32_t partner;
  uint32_t keep_first, keep_end;  // blocks [first, end)
  uint32_t give_first, give_end;
};
inline HalvingRound halving_round(uint32_t v, uint32_t pof2, uint32_t k) {
  uint32_t first = 0, end = pof2;
  HalvingRound h{v, 0, pof2, 0, 0};
  for (uint32_t i = 0; i <= k; ++i) {
    const uint32_t mask = 1u << i, mid = first + (end - first) / 2;
    const bool lower = (v & mask) == 0;
    h = {v ^ mask, lower ? first : mid, lower ? mid : end, lower ? mid : first, lower ? end : mid};
    first = h.keep_first;
    end = h.keep_end;
  }
  return h;
}

// Virtual ranks relative to a root: the root is 0.
inline uint32_t to_vrank(uint32_t r, uint32_t root, uint32_t n) {
  return mod_sub(r, root, n);
}
inline uint32_t from_vrank(uint32_t v, uint32_t root, uint32_t n) {
  return static_cast<uint32_t>((uint64_t{v} + root) % n);
}

// Binomial tree over virtual ranks 0..n-1 rooted at 0 (MPICH's bcast/reduce
// tree): the parent of v clears v's lowest set bit; v's children are v + m
// for the powers of two m below v's lowest set bit (below pof2 >= n for the
// root) with v + m < n. v's subtree is the contiguous range [v, subtree_end).
struct Binomial {
  // Lowest set bit of v; for v == 0 the smallest power of two >= n.
  static uint32_t span(uint32_t v, uint32_t n) {
    if (v != 0) return v & (~v + 1);
    uint32_t m = 1;
    while (m < n)
      m <<= 1;
    return m;
  }
  // -1 for the root.
  static int64_t parent(uint32_t v) { return v == 0 ? -1 : static_cast<int64_t>(v & (v - 1)); }
  static uint32_t subtree_end(uint32_t v, uint32_t n) {
    return static_cast<uint32_t>(std::min<uint64_t>(uint64_t{v} + span(v, n), n));
  }
  // Number of children, and the i-th child in increasing distance (i = 0 is
  // v + 1: the smallest subtree, ready first when reducing).
  static uint32_t num_children(uint32_t v, uint32_t n) {
    uint32_t k = 0;
    for (uint32_t m = 1; m < span(v, n) && uint64_t{v} + m < n; m <<= 1)
      ++k;
    return k;
  }
  static uint32_t child(uint32_t v, uint32_t i) { return v + (1u << i); }
};

// Segments per ring block: enough that no segment exceeds seg_bytes, at
// least min_segs when the largest block has that many elements, and at most
// max_segs (the step-number budget).
inline uint32_t segments_per_block(size_t max_block_elems, size_t esize, uint64_t seg_bytes,
                                   uint32_t min_segs, uint32_t max_segs) {
  if (max_block_elems == 0) return 1;
  const uint64_t seg_elems = std::max<uint64_t>(1, seg_bytes / std::max<size_t>(esize, 1));
  uint64_t s = (max_block_elems + seg_elems - 1) / seg_elems;
  s = std::max<uint64_t>(s, std::min<uint64_t>(min_segs, max_block_elems));
  s = std::min<uint64_t>(s, std::max<uint32_t>(max_segs, 1));
  return static_cast<uint32_t>(std::max<uint64_t>(s, 1));
}

// Message numbering inside one collective: step = phase << 20 | index. Coll
// requires step < 2^24, so 16 phases of 2^20 messages each per peer pair.
constexpr uint32_t kStepIndexBits = 20;
constexpr uint32_t kMaxStepIndex = (1u << kStepIndexBits) - 1;
constexpr uint32_t kMaxPhase = 15;
constexpr uint32_t step_id(uint32_t phase, uint32_t index) {
  return (phase << kStepIndexBits) | index;
}

// Which entry of names[0..n) text equals; -1 if none (NULL or "" -> 0).
inline int parse_choice(const char *text, const char *const *names, int n) {
  if (!text || !*text) return 0;
  for (int i = 0; i < n; ++i)
    if (std::strcmp(text, names[i]) == 0) return i;
  return -1;
}

}  // namespace nexar::sched
