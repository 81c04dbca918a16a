// Gather, scatter, allgather and alltoall on sparse meshes move data along
// direct links only: exact results on hypercube, k_regular:4 and custom
// graphs of 4 to 16 ranks (roots other than 0, block sizes that are not
// powers of two, blocks above the copy threshold, large exchanges that move
// in rounds, in place), on split communicators too, and the relay forwards
// nothing for them (the usual algorithms talk to every member, so
// non-neighbours' blocks were relayed).
#include <cstring>
#include <string>

#include "harness.h"

using namespace nexar_test;

namespace {

struct Case {
  const char *name;
  uint32_t kind, degree, n;
  std::vector<uint32_t> edges;  // custom graphs
};

void PrintTo(const Case &c, std::ostream *os) {
  *os << c.name;
}

nexar_comm_options_t options_of(const Case &m) {
  nexar_comm_options_t o;
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  o.topology = m.kind;
  o.topology_degree = m.degree;
  if (!m.edges.empty()) {
    o.topology_edges = m.edges.data();
    o.topology_edge_count = m.edges.size() / 2;
  }
  return o;
}

uint64_t forwarded(const std::vector<nexar_comm_t *> &comms) {
  uint64_t total = 0;
  for (nexar_comm_t *c : comms)
    total += stats(c).relay_bytes_forwarded;
  return total;
}

int32_t value(uint32_t from, uint32_t to, size_t i) {
  return static_cast<int32_t>(from * 1000003u + to * 7919u + i % 4099);
}

// Alltoall, then the same in place, checked.
void alltoall_checked(nexar_comm_t *comm, uint32_t me, uint32_t n, size_t count) {
  std::vector<int32_t> send(count * n), recv(count * n, -1);
  for (uint32_t d = 0; d < n; ++d)
    for (size_t i = 0; i < count; ++i)
      send[d * count + i] = value(me, d, i);
  NX_OK(nexar_alltoall(comm, send.data(), recv.data(), count, NEXAR_DTYPE_I32, nullptr, nullptr));
  for (uint32_t s = 0; s < n; ++s)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(recv[s * count + i], value(s, me, i)) << "alltoall";
  NX_OK(nexar_alltoall(comm, send.data(), send.data(), count, NEXAR_DTYPE_I32, nullptr, nullptr));
  ASSERT_TRUE(send == recv) << "alltoall in place";
}

// The four collectives on comm (rank me of n) at each count, checked.
void run_four(nexar_comm_t *comm, uint32_t me, uint32_t n, const std::vector<size_t> &counts) {
  for (size_t count : counts) {
    SCOPED_TRACE("rank " + std::to_string(me) + " of " + std::to_string(n) + ", count " +
                 std::to_string(count));
    std::vector<int32_t> mine(count), all(count * n, -1);
    for (size_t i = 0; i < count; ++i)
      mine[i] = value(me, 0, i);
    for (uint32_t root : {1u, n - 1, n / 2 + 1}) {
      std::vector<int32_t> got(me == root ? count * n : 0, -1);
      NX_OK(nexar_gather(comm, mine.data(), got.data(), count, NEXAR_DTYPE_I32, root, nullptr,
                         nullptr));
      if (me == root)
        for (uint32_t r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(got[r * count + i], value(r, 0, i)) << "gather to " << root;

      std::vector<int32_t> parts(me == root ? count * n : 0), part(count, -1);
      for (uint32_t r = 0; me == root && r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          parts[r * count + i] = value(root, r, i);
      NX_OK(nexar_scatter(comm, parts.data(), part.data(), count, NEXAR_DTYPE_I32, root, nullptr,
                          nullptr));
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(part[i], value(root, me, i)) << "scatter from " << root;
    }

    NX_OK(nexar_allgather(comm, mine.data(), all.data(), count, NEXAR_DTYPE_I32, nullptr, nullptr));
    for (uint32_t r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(all[r * count + i], value(r, 0, i)) << "allgather";

    alltoall_checked(comm, me, n, count);
  }
}

class OverLinks : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(OverLinks, ExactAndNothingRelayed) {
  const Case &m = GetParam();
  nexar_comm_options_t o = options_of(m);
  World w(m.n, &o);
  ASSERT_TRUE(w.ok());
  const uint64_t before = forwarded(w.comms);
  // 17000 int32 blocks (68000 bytes) pass the 64 KiB copy threshold.
  on_each_rank(m.n, [&](uint32_t me) {
    run_four(w[me], me, m.n, {1, 7, 3001, 17000});
    // A large exchange (more than 1 MiB to send per rank): moved in rounds.
    alltoall_checked(w[me], me, m.n, (1 << 20) / 4 / (m.n - 1) + 1000);
  });
  EXPECT_EQ(forwarded(w.comms), before) << "bytes forwarded by relays";
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, OverLinks,
    ::testing::Values(
        Case{"hypercube_16", NEXAR_TOPOLOGY_HYPERCUBE, 0, 16, {}},
        Case{"hypercube_13", NEXAR_TOPOLOGY_HYPERCUBE, 0, 13, {}},
        Case{"k_regular4_13", NEXAR_TOPOLOGY_KREGULAR, 4, 13, {}},
        Case{"ring_6", NEXAR_TOPOLOGY_RING, 0, 6, {}},
        // A path with a branch: routes five links deep.
        Case{"custom_path_7", NEXAR_TOPOLOGY_CUSTOM, 0, 7, {0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 2, 6}}),
    [](const auto &info) { return std::string(info.param.name); });

// Split communicators on a hypercube of 16: the even and the odd ranks each
// form a cube of 8 over their own links, numbered anew; their collectives
// stay on those links.
TEST(OverLinksSplit, HalvesOfAHypercube) {
  const Case m{"hypercube_16", NEXAR_TOPOLOGY_HYPERCUBE, 0, 16, {}};
  nexar_comm_options_t o = options_of(m);
  World w(16, &o);
  ASSERT_TRUE(w.ok());
  std::vector<nexar_comm_t *> halves(16, nullptr);
  on_each_rank(16, [&](uint32_t me) {
    // Key reversed: member ranks run opposite to world ranks.
    NX_OK(nexar_comm_split(w[me], me % 2, 16 - me, &halves[me], nullptr, nullptr));
  });
  for (nexar_comm_t *h : halves)
    ASSERT_NE(h, nullptr);
  const uint64_t before = forwarded(w.comms);
  on_each_rank(16, [&](uint32_t me) {
    ASSERT_EQ(nexar_comm_size(halves[me]), 8u);
    run_four(halves[me], nexar_comm_rank(halves[me]), 8, {5, 17000});
  });
  EXPECT_EQ(forwarded(w.comms), before) << "bytes forwarded by relays";
  for (nexar_comm_t *h : halves)
    nexar_comm_destroy(h);
}
