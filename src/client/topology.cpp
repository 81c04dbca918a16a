#include "client/topology.h"

#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "client/topology_graphs.h"
#include "nexar.h"

namespace nexar {
namespace {

constexpr uint16_t kFar = UINT16_MAX;  // no route (in dist_)

// FNV-1a 64 over little-endian words.
struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
};

}  // namespace

Topology::Topology(const Config &cfg, uint32_t world_size)
    : kind_(cfg.topology), degree_(cfg.topology_degree), world_(world_size) {
  Adjacency g;
  switch (kind_) {
    case NEXAR_TOPOLOGY_RING:
      g = ring_graph(world_);
      break;
    case NEXAR_TOPOLOGY_KREGULAR:
      g = k_regular_graph(world_, degree_);
      break;
    case NEXAR_TOPOLOGY_HYPERCUBE:
      g = hypercube_graph(world_);
      break;
    case NEXAR_TOPOLOGY_CUSTOM:
      problem_ = custom_graph(world_, cfg.topology_edges, &g);
      break;
    default:
      break;  // full
  }
  if (g.size() != world_) g.assign(world_, {});  // full, or a custom graph that failed
  uint64_t links = 0;
  for (const auto &n : g)
    links += n.size();
  complete_ = kind_ == NEXAR_TOPOLOGY_FULL || links == uint64_t{world_} * (world_ - 1);
  Fnv f;
  f.add(world_);
  if (complete_) {
    f.add(0xC0);  // the complete graph, however it was named
  } else {
    adj_ = std::move(g);
    for (uint32_t r = 0; r < world_; ++r)
      for (uint32_t n : adj_[r])
        if (n > r) f.add((uint64_t{r} << 32) | n);
  }
  digest_ = f.h;
  if (complete_ || !problem_.ok()) return;
  if (world_ >= kFar) {
    problem_ = error(NEXAR_ERR_INVALID_ARGUMENT,
                     format("the %s topology supports worlds below %u ranks, not %u",
                            name().c_str(), kFar, world_));
    return;
  }
  build_routes();
  for (uint32_t r = 1; r < world_; ++r)
    if (dist_[r] == kFar) {  // from rank r to rank 0
      problem_ = error(NEXAR_ERR_INVALID_ARGUMENT,
                       format("the %s topology is not connected: no path from rank %u to rank 0 "
                              "in a world of %u",
                              name().c_str(), r, world_));
      return;
    }
}

void Topology::remove(uint32_t rank) {
  if (complete_ || rank >= world_ || removed(rank)) return;
  removed_.resize(world_, false);
  removed_[rank] = true;
  build_routes();
}

void Topology::build_routes() {
  dist_.assign(size_t{world_} * world_, kFar);
  std::deque<uint32_t> todo;
  for (uint32_t dest = 0; dest < world_; ++dest) {
    if (removed(dest)) continue;
    uint16_t *d = &dist_[size_t{dest} * world_];
    d[dest] = 0;
    todo.assign(1, dest);
    while (!todo.empty()) {
      const uint32_t v = todo.front();
      todo.pop_front();
      for (uint32_t n : adj_[v])
        if (d[n] == kFar && !removed(n)) {
          d[n] = static_cast<uint16_t>(d[v] + 1);
          todo.push_back(n);
        }
    }
  }
}

std::string Topology::name() const {
  if (kind_ == NEXAR_TOPOLOGY_KREGULAR) return format("k_regular:%u", degree_);
  return topology_name(kind_);
}

bool Topology::is_neighbour(uint32_t me, uint32_t other) const {
  if (me == other || other >= world_ || me >= world_) return false;
  if (complete_) return true;
  const auto &n = adj_[me];
  return std::binary_search(n.begin(), n.end(), other);
}

std::vector<uint32_t> Topology::neighbours(uint32_t me) const {
  if (!complete_) return me < world_ ? adj_[me] : std::vector<uint32_t>{};
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < world_; ++r)
    if (r != me) out.push_back(r);
  return out;
}

uint32_t Topology::distance(uint32_t from, uint32_t dest) const {
  if (from == dest) return 0;
  if (complete_) return 1;
  if (dist_.empty() || from >= world_ || dest >= world_) return kUnreachable;
  const uint16_t d = dist_[size_t{dest} * world_ + from];
  return d == kFar ? kUnreachable : d;
}

uint32_t Topology::next_hop(uint32_t me, uint32_t dest) const {
  if (me == dest || complete_) return dest;
  const uint32_t d = distance(me, dest);
  if (d == kUnreachable) return kUnreachable;
  for (uint32_t n : adj_[me])
    if (distance(n, dest) == d - 1) return n;  // the lowest-ranked such neighbour
  return kUnreachable;
}

Status parse_topology(const char *text, uint32_t *kind, uint32_t *degree) {
  if (strcasecmp(text, "full") == 0 || strcasecmp(text, "full_mesh") == 0) {
    *kind = NEXAR_TOPOLOGY_FULL;
  } else if (strcasecmp(text, "ring") == 0) {
    *kind = NEXAR_TOPOLOGY_RING;
  } else if (strcasecmp(text, "hypercube") == 0) {
    *kind = NEXAR_TOPOLOGY_HYPERCUBE;
  } else if (strncasecmp(text, "k_regular:", 10) == 0) {
    char *end = nullptr;
    const unsigned long k = strtoul(text + 10, &end, 10);
    if (end == text + 10 || *end != '\0' || k < 2 || k > UINT16_MAX)
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("NEXAR_TOPOLOGY=%s: the degree after k_regular: must be a number "
                          "from 2 to %u",
                          text, UINT16_MAX));
    *kind = NEXAR_TOPOLOGY_KREGULAR;
    *degree = static_cast<uint32_t>(k);
  } else {
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("NEXAR_TOPOLOGY=%s: expected full, ring, k_regular:K or hypercube", text));
  }
  return {};
}

const char *topology_name(uint32_t kind) {
  switch (kind) {
    case NEXAR_TOPOLOGY_RING:
      return "ring";
    case NEXAR_TOPOLOGY_KREGULAR:
      return "k_regular";
    case NEXAR_TOPOLOGY_HYPERCUBE:
      return "hypercube";
    case NEXAR_TOPOLOGY_CUSTOM:
      return "custom";
    default:
      return "full";
  }
}

}  // namespace nexar
