#include "client/topology.h"

#include <strings.h>

#include "nexar.h"

namespace nexar {

bool Topology::sparse() const {
  return kind_ == NEXAR_TOPOLOGY_RING && world_ > 3;
}

bool Topology::is_neighbour(uint32_t me, uint32_t other) const {
  if (me == other || other >= world_) return false;
  if (!sparse()) return true;
  return other == (me + 1) % world_ || other == (me + world_ - 1) % world_;
}

std::vector<uint32_t> Topology::neighbours(uint32_t me) const {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < world_; ++r)
    if (is_neighbour(me, r)) out.push_back(r);
  return out;
}

uint32_t Topology::next_hop(uint32_t me, uint32_t dest) const {
  if (me == dest || is_neighbour(me, dest)) return dest;
  const uint32_t cw = (dest + world_ - me) % world_;
  return cw <= world_ - cw ? (me + 1) % world_ : (me + world_ - 1) % world_;
}

uint32_t Topology::distance(uint32_t from, uint32_t dest) const {
  if (from == dest) return 0;
  if (!sparse()) return 1;
  const uint32_t cw = (dest + world_ - from) % world_;
  return cw <= world_ - cw ? cw : world_ - cw;
}

Status parse_topology(const char *text, uint32_t *out) {
  if (strcasecmp(text, "full") == 0 || strcasecmp(text, "full_mesh") == 0) {
    *out = NEXAR_TOPOLOGY_FULL;
  } else if (strcasecmp(text, "ring") == 0) {
    *out = NEXAR_TOPOLOGY_RING;
  } else {
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("NEXAR_TOPOLOGY=%s: expected full or ring", text));
  }
  return {};
}

const char *topology_name(uint32_t kind) {
  return kind == NEXAR_TOPOLOGY_RING ? "ring" : "full";
}

}  // namespace nexar
