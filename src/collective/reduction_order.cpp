#include "collective/reduction_order.h"

#include <cstring>

#include "collective/schedule.h"
#include "core/reduce.h"

namespace nexar {
namespace {

// Virtual vector v of the fold, as a pointer when it is one rank's own
// (null when it is a pair's sum, to be computed).
const uint8_t *raw_leaf(const sched::Fold &f, const ReductionInputs &in, uint32_t v) {
  return v < f.rem ? nullptr : in.x[v + f.rem];
}

class TreeReduction {
 public:
  TreeReduction(const ReductionInputs &in, size_t len, BufferPool &pool)
      : in_(in), fold_(static_cast<uint32_t>(in.x.size())), len_(len), pool_(pool) {}

  // out = the combination of virtual vectors [lo, hi), pairwise, in order.
  void run(uint32_t lo, uint32_t hi, uint8_t *out, uint32_t depth = 0) {
    if (hi - lo == 1) {
      if (const uint8_t *x = raw_leaf(fold_, in_, lo))
        memcpy(out, x, len_ * in_.esize);
      else
        reduce_out(out, in_.x[2 * lo], in_.x[2 * lo + 1], len_, in_.dtype, in_.op);
      return;
    }
    const uint32_t mid = lo + (hi - lo) / 2;
    const uint8_t *a = hi - lo == 2 ? raw_leaf(fold_, in_, lo) : nullptr;
    const uint8_t *b = hi - lo == 2 ? raw_leaf(fold_, in_, mid) : nullptr;
    if (a && b) {
      reduce_out(out, a, b, len_, in_.dtype, in_.op);
      return;
    }
    run(lo, mid, out, depth + 1);
    uint8_t *right = scratch(depth);
    run(mid, hi, right, depth + 1);
    reduce_inplace(out, right, len_, in_.dtype, in_.op);
  }
  uint32_t leaves() const { return fold_.pof2; }

 private:
  uint8_t *scratch(uint32_t depth) {
    while (scratch_.size() <= depth)
      scratch_.push_back(pool_.checkout(len_ * in_.esize));
    return scratch_[depth].data();
  }
  const ReductionInputs &in_;
  sched::Fold fold_;
  size_t len_;
  BufferPool &pool_;
  std::vector<PooledBuf> scratch_;
};

}  // namespace

void reduce_in_order(ReductionOrder o, const ReductionInputs &in, size_t first, size_t len,
                     uint8_t *out, BufferPool &pool) {
  const uint32_t n = static_cast<uint32_t>(in.x.size());
  if (len == 0) return;
  if (n == 1) {
    memcpy(out, in.x[0], len * in.esize);
    return;
  }
  if (o == ReductionOrder::LeftToRight) {
    reduce_out(out, in.x[0], in.x[1], len, in.dtype, in.op);
    for (uint32_t r = 2; r < n; ++r)
      reduce_inplace(out, in.x[r], len, in.dtype, in.op);
    return;
  }
  if (o == ReductionOrder::Tree) {
    TreeReduction t(in, len, pool);
    t.run(0, t.leaves(), out);
    return;
  }
  // Ring: piece by piece of the ring's blocks.
  const sched::ChunkLayout blocks(in.count, n);
  for (size_t done = 0; done < len;) {
    const size_t e = first + done;
    // Its block: rem blocks of base + 1 elements, then blocks of base.
    const size_t early = blocks.rem * (blocks.base + 1);
    const uint32_t b = static_cast<uint32_t>(e < early ? e / (blocks.base + 1)
                                                       : blocks.rem + (e - early) / blocks.base);
    const size_t piece = std::min(len - done, blocks.offset(b) + blocks.length(b) - e);
    const size_t at = done * in.esize;
    uint8_t *dst = out + at;
    reduce_out(dst, in.x[(b + 1) % n] + at, in.x[(b + 2) % n] + at, piece, in.dtype, in.op);
    for (uint32_t k = 3; k <= n; ++k)
      reduce_inplace(dst, in.x[(b + k) % n] + at, piece, in.dtype, in.op);
    done += piece;
  }
}

}  // namespace nexar
