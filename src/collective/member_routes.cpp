#include "collective/member_routes.h"

#include <algorithm>
#include <unordered_map>

#include "client/client.h"

namespace nexar {
namespace {

constexpr uint16_t kFar = UINT16_MAX;

}  // namespace

MemberRoutes::MemberRoutes(const Coll &c) {
  Communicator &comm = *c.comm();
  const Topology &t = comm.client().topology();
  const uint32_t p = c.size();
  if (!t.sparse() || p < 2 || p >= kFar) return;
  std::unordered_map<uint32_t, uint32_t> member_of;  // world rank -> communicator rank
  for (uint32_t r = 0; r < p; ++r)
    member_of.emplace(comm.world_rank_of(r), r);
  adj_.resize(p);
  dist_to_.resize(p);
  for (uint32_t r = 0; r < p; ++r)
    for (uint32_t w : t.neighbours(comm.world_rank_of(r)))
      if (auto it = member_of.find(w); it != member_of.end()) adj_[r].push_back(it->second);
  // World ranks map to member ranks in order for the usual communicators;
  // sort anyway so ties break by communicator rank on every member.
  for (auto &a : adj_)
    std::sort(a.begin(), a.end());
  const std::vector<uint16_t> &d = distances_to(0);
  usable_ = std::find(d.begin(), d.end(), kFar) == d.end();
}

const std::vector<uint16_t> &MemberRoutes::distances_to(uint32_t to) {
  std::vector<uint16_t> &d = dist_to_[to];
  if (!d.empty()) return d;
  // Breadth-first from `to`: links are symmetric.
  d.assign(adj_.size(), kFar);
  std::vector<uint32_t> queue{to};
  d[to] = 0;
  for (size_t i = 0; i < queue.size(); ++i)
    for (uint32_t u : adj_[queue[i]])
      if (d[u] == kFar) {
        d[u] = static_cast<uint16_t>(d[queue[i]] + 1);
        queue.push_back(u);
      }
  return d;
}

uint32_t MemberRoutes::distance(uint32_t from, uint32_t to) {
  return distances_to(to)[from];
}

uint32_t MemberRoutes::next_hop(uint32_t from, uint32_t to) {
  if (from == to) return from;
  const std::vector<uint16_t> &d = distances_to(to);
  for (uint32_t u : adj_[from])  // rank order: the lowest one closer wins
    if (d[u] + 1 == d[from]) return u;
  return kNone;
}

std::vector<uint32_t> MemberRoutes::children(uint32_t r, uint32_t root) {
  std::vector<uint32_t> kids;
  for (uint32_t u : adj_[r])
    if (u != root && next_hop(u, root) == r) kids.push_back(u);
  return kids;
}

}  // namespace nexar
