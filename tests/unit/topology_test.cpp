// Route tables of every topology on worlds of 1 to 70 ranks: connected,
// shortest, deterministic and loop-free, with the promised link counts.
#include "client/topology.h"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <random>
#include <set>

#include "client/topology_graphs.h"

using namespace nexar;

namespace {

Config spec(uint32_t kind, uint32_t degree = 4, std::vector<uint32_t> edges = {}) {
  Config c;
  c.topology = kind;
  c.topology_degree = degree;
  c.topology_edges = std::move(edges);
  return c;
}

// A connected random graph: a random spanning tree plus a few extra links.
std::vector<uint32_t> random_connected_edges(uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> pairs;
  for (uint32_t r = 1; r < n; ++r) {
    pairs.push_back(r);
    pairs.push_back(static_cast<uint32_t>(rng() % r));
  }
  for (uint32_t i = 0; i < n / 3; ++i) {
    const uint32_t a = static_cast<uint32_t>(rng() % n), b = static_cast<uint32_t>(rng() % n);
    if (a == b) continue;
    pairs.push_back(a);
    pairs.push_back(b);
  }
  return pairs;
}

// Breadth-first distances from `from` over is_neighbour (independent of the
// topology's own tables).
std::vector<uint32_t> bfs(const Topology &t, uint32_t n, uint32_t from) {
  std::vector<uint32_t> d(n, UINT32_MAX);
  d[from] = 0;
  std::deque<uint32_t> q{from};
  while (!q.empty()) {
    const uint32_t v = q.front();
    q.pop_front();
    for (uint32_t w = 0; w < n; ++w)
      if (t.is_neighbour(v, w) && d[w] == UINT32_MAX) {
        d[w] = d[v] + 1;
        q.push_back(w);
      }
  }
  return d;
}

void check_routes(const Config &cfg, uint32_t n) {
  const Topology t(cfg, n), again(cfg, n);
  SCOPED_TRACE(t.name() + " on " + std::to_string(n) + " ranks");
  ASSERT_TRUE(t.problem().ok()) << t.problem().message;
  EXPECT_EQ(t.digest(), again.digest());
  for (uint32_t a = 0; a < n; ++a) {
    EXPECT_FALSE(t.is_neighbour(a, a));
    for (uint32_t b = 0; b < n; ++b)
      EXPECT_EQ(t.is_neighbour(a, b), t.is_neighbour(b, a)) << a << "-" << b << " symmetric";
  }
  for (uint32_t from = 0; from < n; ++from) {
    const std::vector<uint32_t> shortest = bfs(t, n, from);
    for (uint32_t dest = 0; dest < n; ++dest) {
      ASSERT_NE(shortest[dest], UINT32_MAX) << "rank " << dest << " unreachable from " << from;
      EXPECT_EQ(t.distance(from, dest), shortest[dest]) << from << "->" << dest;
      // Walk the route: every hop a link, one step closer, never revisiting.
      std::set<uint32_t> seen{from};
      uint32_t cur = from, hops = 0;
      while (cur != dest) {
        const uint32_t next = t.next_hop(cur, dest);
        ASSERT_EQ(next, again.next_hop(cur, dest)) << "deterministic";
        ASSERT_TRUE(t.is_neighbour(cur, next)) << cur << "->" << next << " towards " << dest;
        ASSERT_TRUE(seen.insert(next).second) << "loop at " << next << " from " << from;
        // Ties go to the lowest-ranked neighbour on a shortest path.
        for (uint32_t w : t.neighbours(cur))
          if (w < next) EXPECT_NE(t.distance(w, dest) + 1, t.distance(cur, dest));
        cur = next;
        ++hops;
      }
      EXPECT_EQ(hops, shortest[dest]) << "route " << from << "->" << dest << " is shortest";
      EXPECT_EQ(t.next_hop(from, from), from);
    }
  }
}

uint32_t ceil_log2(uint32_t n) {
  uint32_t b = 0;
  while ((1u << b) < n)
    ++b;
  return b;
}

}  // namespace

TEST(Topology, EveryTopologyEveryWorldUpTo70) {
  for (uint32_t n = 1; n <= 70; ++n) {
    check_routes(spec(NEXAR_TOPOLOGY_FULL), n);
    check_routes(spec(NEXAR_TOPOLOGY_RING), n);
    for (uint32_t k : {2u, 3u, 4u, 5u, 6u})
      check_routes(spec(NEXAR_TOPOLOGY_KREGULAR, k), n);
    check_routes(spec(NEXAR_TOPOLOGY_HYPERCUBE), n);
    if (n > 1) check_routes(spec(NEXAR_TOPOLOGY_CUSTOM, 0, random_connected_edges(n, n)), n);
  }
}

TEST(Topology, LinkCounts) {
  for (uint32_t n = 2; n <= 70; ++n) {
    const Topology cube(spec(NEXAR_TOPOLOGY_HYPERCUBE), n);
    const Topology k4(spec(NEXAR_TOPOLOGY_KREGULAR, 4), n);
    const Topology ring(spec(NEXAR_TOPOLOGY_RING), n);
    const bool pow2 = (n & (n - 1)) == 0;
    for (uint32_t r = 0; r < n; ++r) {
      const size_t links = cube.neighbours(r).size();
      if (pow2)
        EXPECT_EQ(links, ceil_log2(n)) << "hypercube " << n << " rank " << r;
      else
        EXPECT_LE(links, ceil_log2(n) + 1) << "hypercube " << n << " rank " << r;
      EXPECT_GE(links, 1u);
      EXPECT_EQ(k4.neighbours(r).size(), std::min<size_t>(4, n - 1)) << "k_regular:4 " << n;
      EXPECT_EQ(ring.neighbours(r).size(), std::min<size_t>(2, n - 1)) << "ring " << n;
    }
  }
  EXPECT_EQ(Topology(spec(NEXAR_TOPOLOGY_HYPERCUBE), 64).neighbours(0).size(), 6u);
  // Odd degree on an even world: the antipode too.
  const Topology k3(spec(NEXAR_TOPOLOGY_KREGULAR, 3), 10);
  EXPECT_EQ(k3.neighbours(0), (std::vector<uint32_t>{1, 5, 9}));
  // Hypercube on 8: the cube's own links.
  EXPECT_EQ(Topology(spec(NEXAR_TOPOLOGY_HYPERCUBE), 8).neighbours(5),
            (std::vector<uint32_t>{1, 4, 7}));
}

TEST(Topology, SparseOnlyWhenSomePairIsNotLinked) {
  EXPECT_FALSE(Topology(spec(NEXAR_TOPOLOGY_RING), 3).sparse());
  EXPECT_TRUE(Topology(spec(NEXAR_TOPOLOGY_RING), 4).sparse());
  EXPECT_FALSE(Topology(spec(NEXAR_TOPOLOGY_KREGULAR, 4), 5).sparse());
  EXPECT_TRUE(Topology(spec(NEXAR_TOPOLOGY_HYPERCUBE), 5).sparse());
  // The same graph under two names has one digest; different graphs differ.
  EXPECT_EQ(Topology(spec(NEXAR_TOPOLOGY_RING), 3).digest(),
            Topology(spec(NEXAR_TOPOLOGY_FULL), 3).digest());
  EXPECT_EQ(Topology(spec(NEXAR_TOPOLOGY_RING), 8).digest(),
            Topology(spec(NEXAR_TOPOLOGY_KREGULAR, 2), 8).digest());
  EXPECT_NE(Topology(spec(NEXAR_TOPOLOGY_RING), 8).digest(),
            Topology(spec(NEXAR_TOPOLOGY_HYPERCUBE), 8).digest());
  EXPECT_NE(Topology(spec(NEXAR_TOPOLOGY_CUSTOM, 0, {0, 1, 1, 2, 2, 3}), 4).digest(),
            Topology(spec(NEXAR_TOPOLOGY_CUSTOM, 0, {0, 1, 1, 3, 3, 2}), 4).digest());
}

TEST(Topology, CustomGraphChecks) {
  const Topology split(spec(NEXAR_TOPOLOGY_CUSTOM, 0, {0, 1, 2, 3}), 4);
  ASSERT_FALSE(split.problem().ok());
  EXPECT_NE(split.problem().message.find("not connected"), std::string::npos)
      << split.problem().message;
  const Topology outside(spec(NEXAR_TOPOLOGY_CUSTOM, 0, {0, 1, 1, 4}), 4);
  ASSERT_FALSE(outside.problem().ok());
  EXPECT_NE(outside.problem().message.find("(1, 4)"), std::string::npos)
      << outside.problem().message;
  const Topology self(spec(NEXAR_TOPOLOGY_CUSTOM, 0, {0, 1, 2, 2}), 3);
  EXPECT_FALSE(self.problem().ok());
  // A star: everything goes through rank 0.
  const Topology star(spec(NEXAR_TOPOLOGY_CUSTOM, 0, {0, 1, 0, 2, 0, 3, 0, 4}), 5);
  ASSERT_TRUE(star.problem().ok());
  EXPECT_EQ(star.next_hop(3, 4), 0u);
  EXPECT_EQ(star.distance(3, 4), 2u);
}

TEST(Topology, ParsesUpstreamSpellings) {
  uint32_t kind = 99, degree = 0;
  ASSERT_TRUE(parse_topology("k_regular:6", &kind, &degree).ok());
  EXPECT_EQ(kind, static_cast<uint32_t>(NEXAR_TOPOLOGY_KREGULAR));
  EXPECT_EQ(degree, 6u);
  ASSERT_TRUE(parse_topology("HyperCube", &kind, &degree).ok());
  EXPECT_EQ(kind, static_cast<uint32_t>(NEXAR_TOPOLOGY_HYPERCUBE));
  ASSERT_TRUE(parse_topology("full_mesh", &kind, &degree).ok());
  EXPECT_EQ(kind, static_cast<uint32_t>(NEXAR_TOPOLOGY_FULL));
  for (const char *bad : {"k_regular:", "k_regular:1", "k_regular:x", "k_regular:4x", "torus"}) {
    const Status s = parse_topology(bad, &kind, &degree);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message.find("NEXAR_TOPOLOGY"), std::string::npos) << s.message;
  }
}

// The ring's routes, the short way round; a tie (distance N/2) goes to the
// lower-ranked neighbour.
TEST(Topology, RingRoutes) {
  const Topology ring(spec(NEXAR_TOPOLOGY_RING), 6);
  EXPECT_EQ(ring.neighbours(0), (std::vector<uint32_t>{1, 5}));
  EXPECT_EQ(ring.next_hop(0, 2), 1u);
  EXPECT_EQ(ring.next_hop(0, 4), 5u);
  EXPECT_EQ(ring.next_hop(0, 3), 1u);
  EXPECT_EQ(ring.next_hop(3, 0), 2u);
  EXPECT_EQ(ring.distance(0, 3), 3u);
  const Topology full(spec(NEXAR_TOPOLOGY_FULL), 6);
  EXPECT_EQ(full.neighbours(2).size(), 5u);
  EXPECT_EQ(full.next_hop(0, 3), 3u);
}

// Routes round a failed rank: longer, still shortest over what is left; a
// cut-off rank has no route.
TEST(Topology, RemovedRanksAreRoutedAround) {
  Topology ring(spec(NEXAR_TOPOLOGY_RING), 6);
  ring.remove(1);
  EXPECT_EQ(ring.next_hop(0, 2), 5u);
  EXPECT_EQ(ring.distance(0, 2), 4u);
  EXPECT_EQ(ring.next_hop(0, 1), Topology::kUnreachable);
  ring.remove(4);
  EXPECT_EQ(ring.distance(0, 2), Topology::kUnreachable);
  EXPECT_EQ(ring.next_hop(0, 5), 5u);
  EXPECT_EQ(ring.next_hop(2, 3), 3u);
  EXPECT_TRUE(ring.is_neighbour(0, 1)) << "links stay";
}
