// Sparse meshes: which ranks connect directly, and how a message reaches a
// rank that is not a neighbour (static shortest-path routing).
//
//   full  every pair is connected (the default; no relaying ever happens)
//   ring  rank r connects to r-1 and r+1 (mod N) only; a message to any
//         other rank goes round the ring the short way (ties clockwise,
//         i.e. towards r+1), relayed by every rank on the way
//
// Every rank must use the same topology: ranks that disagree never finish
// forming the mesh (connect_timeout_ms names the missing neighbours).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace nexar {

class Topology {
 public:
  Topology() = default;
  Topology(uint32_t kind, uint32_t world_size) : kind_(kind), world_(world_size) {}

  uint32_t kind() const { return kind_; }
  bool sparse() const;
  bool is_neighbour(uint32_t me, uint32_t other) const;
  std::vector<uint32_t> neighbours(uint32_t me) const;
  // The neighbour of `me` a message to `dest` goes through (dest itself for
  // a neighbour; me for me).
  uint32_t next_hop(uint32_t me, uint32_t dest) const;
  // Hops on the route from `from` to `dest`.
  uint32_t distance(uint32_t from, uint32_t dest) const;

 private:
  uint32_t kind_ = 0;  // NEXAR_TOPOLOGY_*
  uint32_t world_ = 1;
};

// Parses a NEXAR_TOPOLOGY value ("full", "ring"; case-insensitive).
Status parse_topology(const char *text, uint32_t *out);
const char *topology_name(uint32_t kind);

}  // namespace nexar
