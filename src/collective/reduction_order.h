// The association order in which allreduce's message algorithms combine
// each element's contributions. A collective that reduces somewhere else
// (on shared memory, collective/shm_collectives.h) follows the same order,
// so turning the same-host path on or off never changes a float's bits.
//
// * LeftToRight: ((x0 op x1) op x2) ... (the star, the direct exchange).
// * Tree: the fold's virtual vectors (x_2i op x_2i+1 for the first rem
//   pairs, schedule.h's Fold), combined pairwise, neighbours first
//   (recursive doubling and halving-doubling).
// * Ring: element of ring block b (ChunkLayout over the vector): x_b+1, then
//   op x_b+2, ..., op x_b, indices mod n (the ring's reduce-scatter).
// * Binomial: reduce's tree rooted at `rank`: virtual rank v (r - root mod
//   n, or r XOR root on a hypercube) combines x_v op (its child v+1's
//   result) op (child v+2's) op (child v+4's) ..., children below v's lowest
//   set bit.
// * LinkTree: the shortest-path tree of direct links rooted at `rank`
//   (tree_over_links.cpp): rank r combines x_r op (its first kid's result)
//   op (its second's) ..., kids[r] in rank order.
// * Prefix, ExclusivePrefix: scan's and exscan's recursive doubling, the
//   prefix of rank `rank`: in round k (d = 2^k) a rank r >= d combines what
//   r - d held before the round op what it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer_pool.h"
#include "nexar.h"

namespace nexar {

enum class ReductionOrder { LeftToRight, Tree, Ring, Binomial, LinkTree, Prefix, ExclusivePrefix };

struct ReductionInputs {
  std::vector<const uint8_t *> x;  // per rank, the element at `first`
  size_t count = 0;                // elements of the whole vector (Ring's blocks)
  size_t esize = 0;
  nexar_dtype_t dtype = NEXAR_DTYPE_F32;
  nexar_op_t op = NEXAR_OP_SUM;
  uint32_t rank = 0;  // Binomial's and LinkTree's root; the rank whose prefix Prefix orders reduce
  bool cube = false;  // Binomial's tree over r XOR root
  std::vector<std::vector<uint32_t>> kids = {};  // LinkTree: per rank, its children
};

// out[0, len) = the reduction of elements [first, first + len) in order o.
// out must not overlap any input; pool lends the Tree's partial sums.
void reduce_in_order(ReductionOrder o, const ReductionInputs &in, size_t first, size_t len,
                     uint8_t *out, BufferPool &pool);

}  // namespace nexar
