// Direct links among a communicator's members on a sparse mesh, and the
// shortest paths over those links alone, so that a collective can forward
// data itself along links instead of leaving non-neighbours to the relay.
//
// Ranks are communicator ranks. Paths use members only (a split
// communicator's traffic never passes through a rank outside it); of
// several shortest paths the next hop is the lowest-ranked neighbour one
// step closer, so every member computes the same paths and trees.
// Distances to a destination are computed when first asked for.
#pragma once

#include <cstdint>
#include <vector>

#include "collective/coll.h"

namespace nexar {

class MemberRoutes {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // The links among c's members; usable() is false on a full mesh and when
  // the links do not connect every member (then the relay must carry it).
  explicit MemberRoutes(const Coll &c);

  bool usable() const { return usable_; }
  uint32_t size() const { return static_cast<uint32_t>(adj_.size()); }
  // Members linked to r, in rank order.
  const std::vector<uint32_t> &neighbours(uint32_t r) const { return adj_[r]; }
  // Links on the shortest path from `from` to `to`.
  uint32_t distance(uint32_t from, uint32_t to);
  // The neighbour of `from` one step closer to `to` (to itself when linked;
  // from when from == to).
  uint32_t next_hop(uint32_t from, uint32_t to);
  // The neighbours of r whose next hop towards `root` is r: r's children in
  // the shortest-path tree rooted at root, in rank order.
  std::vector<uint32_t> children(uint32_t r, uint32_t root);

 private:
  const std::vector<uint16_t> &distances_to(uint32_t to);

  bool usable_ = false;
  std::vector<std::vector<uint32_t>> adj_;
  std::vector<std::vector<uint16_t>> dist_to_;  // [to][from]; empty until asked for
};

}  // namespace nexar
