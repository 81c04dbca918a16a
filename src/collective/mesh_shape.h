// Which partners a collective can reach directly on a sparse mesh
// (client/topology.h), so that the algorithm choice keeps relayed bytes low:
//
//   Full  a full mesh: any algorithm
//   Ring  member r is linked to r+1 (mod p) (ring, k_regular): ring steps
//         are direct
//   Cube  p is a power of two and member r is linked to r XOR 2^b for every
//         b (hypercube): recursive doubling and halving partners, and the
//         binomial tree over r XOR root, are direct
//   Other a sparse mesh that is neither: the usual choice, partly relayed
#pragma once

#include "collective/coll.h"

namespace nexar {

enum class MeshShape { Full, Ring, Cube, Other };

// The shape of the mesh among c's members (communicator ranks mapped to
// world ranks, so a split communicator gets its own answer).
MeshShape mesh_shape(const Coll &c);

// Virtual ranks of a binomial tree rooted at root (sched::Binomial): the
// usual (r - root) mod p, or r XOR root on a Cube, where every tree edge
// (a one-bit difference) is then a cube link.
struct TreeRanks {
  uint32_t root, n;
  bool cube;
  uint32_t to_v(uint32_t r) const { return cube ? r ^ root : (r + n - root) % n; }
  uint32_t from_v(uint32_t v) const { return cube ? v ^ root : (v + root) % n; }
};

}  // namespace nexar
