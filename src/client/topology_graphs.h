// The edge lists of the built-in sparse topologies (client/topology.h): each
// rank's neighbours, sorted, without duplicates or self-links.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace nexar {

using Adjacency = std::vector<std::vector<uint32_t>>;

Adjacency ring_graph(uint32_t world);
// r±1 .. r±degree/2 (mod world), plus r+world/2 for an odd degree on an
// even world.
Adjacency k_regular_graph(uint32_t world, uint32_t degree);
// r XOR 2^b; missing corners folded onto ranks that exist.
Adjacency hypercube_graph(uint32_t world);
// The caller's pairs (2 * count ranks); fails naming a bad pair.
Status custom_graph(uint32_t world, const std::vector<uint32_t> &pairs, Adjacency *out);

}  // namespace nexar
