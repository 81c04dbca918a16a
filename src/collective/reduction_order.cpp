#include "collective/reduction_order.h"

#include <cstring>

#include "collective/schedule.h"
#include "core/copy.h"
#include "core/reduce.h"

namespace nexar {
namespace {

// A reduction written out as its message algorithm evaluates it: leaves are
// ranks' vectors, an inner node is (left op right). Evaluating it performs
// the same IEEE operations on the same operands, so its bits are the
// algorithm's.
class Expression {
 public:
  static constexpr uint32_t kNone = ~0u;

  uint32_t leaf(uint32_t rank) { return add({static_cast<int32_t>(rank), 0, 0}); }
  uint32_t combine(uint32_t left, uint32_t right) {
    if (left == kNone) return right;
    return add({-1, left, right});
  }

  // out[0, len) = node's value; every in.x[r] points at the first element.
  void evaluate(uint32_t node, const ReductionInputs &in, size_t len, uint8_t *out,
                BufferPool &pool) {
    if (node == kNone) return;
    Evaluation e{*this, in, len, pool, {}};
    e.run(node, out, 0);
  }

 private:
  struct Node {
    int32_t leaf;  // the rank, or -1 for left op right
    uint32_t left, right;
  };
  // A few ranks' expression (2n - 1 nodes) stays on the stack: a small
  // collective evaluates one per call.
  static constexpr uint32_t kInlineNodes = 16;
  uint32_t add(Node n) {
    if (size_ < kInlineNodes) {
      inline_[size_] = n;
    } else {
      more_.push_back(n);
    }
    return size_++;
  }
  const Node &node(uint32_t i) const {
    return i < kInlineNodes ? inline_[i] : more_[i - kInlineNodes];
  }
  struct Evaluation {
    const Expression &ex;
    const ReductionInputs &in;
    size_t len;
    BufferPool &pool;
    std::vector<PooledBuf> scratch;

    const uint8_t *leaf_of(uint32_t node) const {
      const int32_t r = ex.node(node).leaf;
      return r < 0 ? nullptr : in.x[static_cast<uint32_t>(r)];
    }
    uint8_t *scratch_at(uint32_t depth) {
      while (scratch.size() <= depth)
        scratch.push_back(pool.checkout(len * in.esize));
      return scratch[depth].data();
    }
    void run(uint32_t node, uint8_t *out, uint32_t depth) {
      const Node &n = ex.node(node);
      if (const uint8_t *x = leaf_of(node)) {
        copy_bytes(out, x, len * in.esize);
        return;
      }
      const uint8_t *a = leaf_of(n.left), *b = leaf_of(n.right);
      if (a && b) {
        reduce_out(out, a, b, len, in.dtype, in.op);
        return;
      }
      if (a) {
        uint8_t *right = scratch_at(depth);
        run(n.right, right, depth + 1);
        reduce_out(out, a, right, len, in.dtype, in.op);
        return;
      }
      run(n.left, out, depth + 1);
      if (!b) {
        uint8_t *right = scratch_at(depth);
        run(n.right, right, depth + 1);
        b = right;
      }
      reduce_inplace(out, b, len, in.dtype, in.op);
    }
  };
  Node inline_[kInlineNodes];
  uint32_t size_ = 0;
  std::vector<Node> more_;
};

// Tree: the fold's virtual vectors [lo, hi), combined pairwise.
uint32_t tree(Expression &e, const sched::Fold &f, uint32_t lo, uint32_t hi) {
  if (hi - lo == 1)
    return lo < f.rem ? e.combine(e.leaf(2 * lo), e.leaf(2 * lo + 1)) : e.leaf(lo + f.rem);
  const uint32_t mid = lo + (hi - lo) / 2;
  return e.combine(tree(e, f, lo, mid), tree(e, f, mid, hi));
}

// Binomial: what virtual rank v sends its parent (or the root keeps).
uint32_t binomial(Expression &e, const ReductionInputs &in, uint32_t v) {
  const uint32_t n = static_cast<uint32_t>(in.x.size()), root = in.rank;
  auto real = [&](uint32_t u) { return in.cube ? u ^ root : (u + root) % n; };
  uint32_t acc = e.leaf(real(v));
  for (uint32_t i = 0; i < sched::Binomial::num_children(v, n); ++i)
    acc = e.combine(acc, binomial(e, in, sched::Binomial::child(v, i)));
  return acc;
}

// LinkTree: what rank r sends its parent (or the root keeps).
uint32_t link_tree(Expression &e, const ReductionInputs &in, uint32_t r) {
  uint32_t acc = e.leaf(r);
  for (uint32_t k : in.kids[r])
    acc = e.combine(acc, link_tree(e, in, k));
  return acc;
}

// Prefix: what rank r holds after `rounds` rounds of recursive doubling.
uint32_t prefix(Expression &e, uint32_t r, uint32_t rounds) {
  if (rounds == 0) return e.leaf(r);
  const uint32_t d = 1u << (rounds - 1);
  if (r < d) return prefix(e, r, rounds - 1);
  return e.combine(prefix(e, r - d, rounds - 1), prefix(e, r, rounds - 1));
}

// ExclusivePrefix: exscan's result of rank r after `rounds` rounds (kNone
// before its first receive).
uint32_t exclusive_prefix(Expression &e, uint32_t r, uint32_t rounds) {
  if (rounds == 0) return Expression::kNone;
  const uint32_t d = 1u << (rounds - 1);
  const uint32_t before = exclusive_prefix(e, r, rounds - 1);
  if (r < d) return before;
  const uint32_t received = prefix(e, r - d, rounds - 1);
  return before == Expression::kNone ? received : e.combine(received, before);
}

uint32_t doubling_rounds(uint32_t n) {
  uint32_t k = 0;
  while ((uint64_t{1} << k) < n)
    ++k;
  return k;
}

void reduce_ring(const ReductionInputs &in, size_t first, size_t len, uint8_t *out) {
  const uint32_t n = static_cast<uint32_t>(in.x.size());
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

}  // namespace

void reduce_in_order(ReductionOrder o, const ReductionInputs &in, size_t first, size_t len,
                     uint8_t *out, BufferPool &pool) {
  const uint32_t n = static_cast<uint32_t>(in.x.size());
  if (len == 0) return;
  if (o == ReductionOrder::Ring && n > 1) {
    reduce_ring(in, first, len, out);
    return;
  }
  if (o == ReductionOrder::LeftToRight && n > 1) {
    reduce_out(out, in.x[0], in.x[1], len, in.dtype, in.op);
    for (uint32_t r = 2; r < n; ++r)
      reduce_inplace(out, in.x[r], len, in.dtype, in.op);
    return;
  }
  Expression e;
  uint32_t root = Expression::kNone;
  switch (o) {
    case ReductionOrder::Tree: {
      const sched::Fold f(n);
      root = tree(e, f, 0, f.pof2);
      break;
    }
    case ReductionOrder::Binomial:
      root = binomial(e, in, 0);
      break;
    case ReductionOrder::LinkTree:
      root = link_tree(e, in, in.rank);
      break;
    case ReductionOrder::Prefix:
      root = prefix(e, in.rank, doubling_rounds(n));
      break;
    case ReductionOrder::ExclusivePrefix:
      root = exclusive_prefix(e, in.rank, doubling_rounds(n));
      break;
    default:  // one rank
      root = e.leaf(0);
  }
  e.evaluate(root, in, len, out, pool);
}

}  // namespace nexar
