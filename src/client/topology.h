// Sparse meshes: which ranks connect directly, and how a message reaches a
// rank that is not a neighbour (shortest-path routing over the graph).
//
//   full         every pair is connected (the default; nothing is relayed)
//   ring         rank r connects to r-1 and r+1 (mod N)
//   k_regular:K  rank r connects to r±1 .. r±K/2 (mod N), and for odd K on
//                an even world also to r+N/2
//   hypercube    rank r connects to r XOR 2^b; on a world that is not a
//                power of two the missing corners' links are folded onto
//                the ranks that stand in for them (at most ceil(log2 N)+1
//                links per rank)
//   custom       the caller's list of edges (pairs of ranks)
//
// Routes are shortest paths; of several, the next hop is the lowest-ranked
// neighbour on one, so every rank computes the same routes and a route never
// loops (each hop is one step closer). Every rank must use the same graph:
// formation compares a digest of it (peer_router.h). After a rank fails the
// routes are recomputed around it (remove()). Loop thread only, apart from
// the links (is_neighbour, neighbours), which never change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace nexar {

class Topology {
 public:
  static constexpr uint32_t kUnreachable = UINT32_MAX;

  Topology() = default;
  // The graph that cfg's topology fields describe on a world of world_size.
  Topology(const Config &cfg, uint32_t world_size);

  uint32_t kind() const { return kind_; }
  // "full", "ring", "k_regular:4", "hypercube", "custom".
  std::string name() const;
  // Why this graph cannot carry the world (a rank outside it, not
  // connected); ok when it can.
  const Status &problem() const { return problem_; }
  // Identifies the graph: ranks with different graphs have different digests.
  uint64_t digest() const { return digest_; }
  // Some pair of ranks is not directly connected.
  bool sparse() const { return !complete_; }
  bool is_neighbour(uint32_t me, uint32_t other) const;
  // The neighbours of me, in rank order.
  std::vector<uint32_t> neighbours(uint32_t me) const;
  // The neighbour of `me` a message to `dest` goes through (dest itself for
  // a neighbour; me for me; kUnreachable when no route exists).
  uint32_t next_hop(uint32_t me, uint32_t dest) const;
  // Hops on the route from `from` to `dest` (kUnreachable without a route).
  uint32_t distance(uint32_t from, uint32_t dest) const;

  // Routes avoid `rank` from now on (it failed): the shortest paths over the
  // remaining graph, chosen by the same rule, so every rank that knows the
  // same failures computes the same routes. Ranks cut off by the failures
  // get no route (kUnreachable). Links stay as they are.
  void remove(uint32_t rank);
  bool removed(uint32_t rank) const { return rank < removed_.size() && removed_[rank]; }

 private:
  void build_routes();

  uint32_t kind_ = 0;  // NEXAR_TOPOLOGY_*
  uint32_t degree_ = 0;
  uint32_t world_ = 1;
  bool complete_ = true;
  Status problem_;
  uint64_t digest_ = 0;
  std::vector<std::vector<uint32_t>> adj_;  // sparse graphs only; sorted
  std::vector<uint16_t> dist_;              // [dest * world + from]; sparse only
  std::vector<bool> removed_;               // failed ranks routes avoid
};

// Parses a NEXAR_TOPOLOGY value ("full", "ring", "k_regular:K",
// "hypercube"; case-insensitive) into a NEXAR_TOPOLOGY_* kind and, for
// k_regular, its degree (left alone otherwise).
Status parse_topology(const char *text, uint32_t *kind, uint32_t *degree);
const char *topology_name(uint32_t kind);

}  // namespace nexar
