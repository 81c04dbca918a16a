#include "client/topology_graphs.h"

#include <algorithm>

namespace nexar {
namespace {

void link(Adjacency &g, uint32_t a, uint32_t b) {
  if (a == b) return;
  g[a].push_back(b);
  g[b].push_back(a);
}

void tidy(Adjacency &g) {
  for (auto &n : g) {
    std::sort(n.begin(), n.end());
    n.erase(std::unique(n.begin(), n.end()), n.end());
  }
}

bool linked(const Adjacency &g, uint32_t a, uint32_t b) {
  return std::find(g[a].begin(), g[a].end(), b) != g[a].end();
}

}  // namespace

Adjacency ring_graph(uint32_t world) {
  return k_regular_graph(world, 2);
}

Adjacency k_regular_graph(uint32_t world, uint32_t degree) {
  Adjacency g(world);
  for (uint32_t r = 0; r < world; ++r) {
    for (uint32_t d = 1; d <= degree / 2 && d < world; ++d)
      link(g, r, (r + d) % world);
    if (degree % 2 == 1 && world % 2 == 0) link(g, r, (r + world / 2) % world);
  }
  tidy(g);
  return g;
}

Adjacency hypercube_graph(uint32_t world) {
  Adjacency g(world);
  uint32_t bits = 0;
  while ((uint64_t{1} << bits) < world)
    ++bits;
  for (uint32_t r = 0; r < world; ++r)
    for (uint32_t b = 0; b < bits; ++b)
      if ((r ^ (1u << b)) < world) link(g, r, r ^ (1u << b));
  tidy(g);
  if (bits == 0 || (1u << bits) == world) return g;
  // A corner p beyond the world is played by p without its top bit (a rank
  // of the lower, complete half): the upper ranks link to it instead, as
  // long as neither end exceeds ceil(log2 N) + 1 links.
  const uint32_t top = 1u << (bits - 1);
  const size_t cap = bits + 1;
  for (uint32_t r = top; r < world; ++r)
    for (uint32_t b = 0; b + 1 < bits; ++b) {
      const uint32_t p = r ^ (1u << b);
      if (p < world) continue;
      const uint32_t stand_in = p ^ top;
      if (g[r].size() >= cap || g[stand_in].size() >= cap || linked(g, r, stand_in)) continue;
      link(g, r, stand_in);
      tidy(g);
    }
  return g;
}

Status custom_graph(uint32_t world, const std::vector<uint32_t> &pairs, Adjacency *out) {
  Adjacency g(world);
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const uint32_t a = pairs[i], b = pairs[i + 1];
    if (a >= world || b >= world || a == b)
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("topology edge %zu (%u, %u) is not valid in a world of %u ranks: "
                          "both ends must be different ranks below %u",
                          i / 2, a, b, world, world));
    link(g, a, b);
  }
  tidy(g);
  *out = std::move(g);
  return {};
}

}  // namespace nexar
