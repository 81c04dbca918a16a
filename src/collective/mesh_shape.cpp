#include "collective/mesh_shape.h"

#include "client/client.h"

namespace nexar {

MeshShape mesh_shape(const Coll &c) {
  Communicator &comm = *c.comm();
  const Topology &t = comm.client().topology();
  if (!t.sparse()) return MeshShape::Full;
  const uint32_t p = c.size();
  auto linked = [&](uint32_t a, uint32_t b) {
    return t.is_neighbour(comm.world_rank_of(a), comm.world_rank_of(b));
  };
  if ((p & (p - 1)) == 0) {
    bool cube = true;
    for (uint32_t r = 0; r < p && cube; ++r)
      for (uint32_t bit = 1; bit < p && cube; bit <<= 1)
        cube = linked(r, r ^ bit);
    if (cube) return MeshShape::Cube;
  }
  for (uint32_t r = 0; r < p; ++r)
    if (!linked(r, (r + 1) % p)) return MeshShape::Other;
  return MeshShape::Ring;
}

}  // namespace nexar
