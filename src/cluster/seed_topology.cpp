// The seed's check that every rank builds the same mesh graph. Neighbours
// compare digests when they connect (client/peer_router.cpp), but two ranks
// that are not neighbours never meet: a rank could wait for a neighbour whose
// graph does not link back to it. Every welcomed rank sends the seed its
// digest before it dials; the seed answers once all are in.
#include <algorithm>
#include <map>

#include "cluster/seed.h"
#include "core/log.h"

namespace nexar {
namespace {

// Graphs named in a failure message beyond which the rest are only counted,
// and the length of one graph's rank list: the message stays well inside a
// JoinError's reason whatever the world size.
constexpr size_t kMaxGraphsNamed = 8;
constexpr size_t kMaxRankListChars = 200;

// "1-3, 7, 9-12" for sorted ranks, cut short with "..." when long.
std::string rank_ranges(const std::vector<uint32_t> &ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (out.size() > kMaxRankListChars) return out + ", ...";
    if (!out.empty()) out += ", ";
    out += j == i ? format("%u", ranks[i]) : format("%u-%u", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

struct Graph {
  std::string name;
  std::vector<uint32_t> ranks;  // sorted
};

// "ranks 0 and 3 disagree on the mesh topology: rank 0 uses hypercube
// (digest ..., as do ranks 1-2), rank 3 uses ring (digest ...); ...".
std::string disagreement(const std::map<uint64_t, Graph> &graphs) {
  std::vector<std::pair<uint64_t, const Graph *>> by_first;
  for (const auto &[digest, g] : graphs)
    by_first.emplace_back(digest, &g);
  std::sort(by_first.begin(), by_first.end(), [](const auto &a, const auto &b) {
    return a.second->ranks.front() < b.second->ranks.front();
  });
  std::vector<uint32_t> firsts;
  for (const auto &[digest, g] : by_first)
    firsts.push_back(g->ranks.front());
  std::string who;
  for (size_t i = 0; i < firsts.size() && i < kMaxGraphsNamed; ++i)
    who += format("%s%u", i == 0 ? "" : i + 1 == firsts.size() ? " and " : ", ", firsts[i]);
  if (firsts.size() > kMaxGraphsNamed)
    who += format(" and %zu more", firsts.size() - kMaxGraphsNamed);
  std::string out = format("ranks %s disagree on the mesh topology:", who.c_str());
  for (size_t i = 0; i < by_first.size() && i < kMaxGraphsNamed; ++i) {
    const Graph &g = *by_first[i].second;
    std::vector<uint32_t> rest(g.ranks.begin() + 1, g.ranks.end());
    out += format("%s rank %u uses %s (digest %016llx%s)", i == 0 ? "" : ",", g.ranks.front(),
                  g.name.c_str(), static_cast<unsigned long long>(by_first[i].first),
                  rest.empty() ? "" : (", as do ranks " + rank_ranges(rest)).c_str());
  }
  return out + "; every rank must describe the same graph";
}

}  // namespace

void Seed::handle_topology(Member *m, const wire::TopologyDigest &d) {
  if (m->round != 0 || m->state != Member::State::Welcomed || d.rank != m->rank ||
      m->has_topology) {
    m->conn->close(1, error(NEXAR_ERR_PROTOCOL, "unexpected TopologyDigest"));
    return;
  }
  m->has_topology = true;
  m->topology = d;
  m->topology.name = log::one_line(d.name, 64);
  if (phase_ != Phase::Meshing) return;
  std::vector<Member *> world;
  for (auto &w : members_)
    if (w->round == 0 && w->rank < cfg_.world_size && w->has_topology) world.push_back(w.get());
  if (world.size() < cfg_.world_size) return;
  std::map<uint64_t, Graph> graphs;
  for (Member *w : world) {
    Graph &g = graphs[w->topology.digest];
    g.name = w->topology.name;
    g.ranks.push_back(w->rank);
  }
  if (graphs.size() > 1) {
    for (auto &[digest, g] : graphs)
      std::sort(g.ranks.begin(), g.ranks.end());
    return fail_formation(NEXAR_ERR_INVALID_ARGUMENT, -1, disagreement(graphs));
  }
  LOG_DEBUG("every rank uses the %s topology (digest %016llx)", d.name.c_str(),
            static_cast<unsigned long long>(d.digest));
  for (Member *w : world)
    if (w->conn) send(w->conn, wire::TopologyDigest{w->rank, d.digest, w->topology.name});
}

}  // namespace nexar
