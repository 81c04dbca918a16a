// k-regular, hypercube and custom meshes through the C ABI: each rank holds
// connections to its neighbours only, and every point-to-point case and
// every collective gives exact results on worlds of 5, 8, 13 and 16 ranks
// (and 64), over real QUIC on loopback.
#include <algorithm>
#include <cstring>
#include <string>

#include "harness.h"

using namespace nexar_test;

namespace {

struct Mesh {
  const char *name;
  uint32_t kind;
  uint32_t degree;
};

nexar_comm_options_t mesh_options(const Mesh &m) {
  nexar_comm_options_t o;
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  o.topology = m.kind;
  o.topology_degree = m.degree;
  // The large-message algorithms run on test-sized buffers too.
  o.large_msg_bytes = 64 << 10;
  o.pipeline_segment_bytes = 16 << 10;
  return o;
}

// Connections a rank of a world of n holds in mesh m (client/topology.h).
uint32_t expected_links(const Mesh &m, uint32_t n, uint32_t rank) {
  if (m.kind == NEXAR_TOPOLOGY_KREGULAR) return std::min(m.degree, n - 1);
  uint32_t bits = 0;
  while ((1u << bits) < n)
    ++bits;
  uint32_t own = 0;  // the cube's own links
  for (uint32_t b = 0; b < bits; ++b)
    own += (rank ^ (1u << b)) < n;
  return own;  // folded links come on top (checked as a range below)
}

void check_links(const World &w, const Mesh &m) {
  const uint32_t n = w.size();
  uint32_t bits = 0;
  while ((1u << bits) < n)
    ++bits;
  for (uint32_t r = 0; r < n; ++r) {
    const uint64_t c = stats(w[r]).connections;
    if (m.kind == NEXAR_TOPOLOGY_KREGULAR) {
      EXPECT_EQ(c, expected_links(m, n, r)) << m.name << " rank " << r;
    } else {
      EXPECT_GE(c, expected_links(m, n, r)) << m.name << " rank " << r;
      EXPECT_LE(c, (1u << bits) == n ? bits : bits + 1) << m.name << " rank " << r;
    }
  }
}

// Every collective with exact integer results; counts small and above the
// (lowered) large-message threshold.
void every_collective(const World &w, const std::vector<size_t> &counts) {
  const uint32_t n = w.size();
  on_each_rank(n, [&](uint32_t me) {
    for (size_t count : counts) {
      SCOPED_TRACE("rank " + std::to_string(me) + " count " + std::to_string(count));
      const int64_t total = int64_t{n} * (n + 1) / 2;
      std::vector<int64_t> a(count), b(count, -1);
      for (size_t i = 0; i < count; ++i)
        a[i] = static_cast<int64_t>((me + 1) * (i % 101));
      NX_OK(nexar_allreduce(w[me], a.data(), b.data(), count, NEXAR_DTYPE_I64, NEXAR_OP_SUM,
                            nullptr, nullptr));
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(b[i], total * static_cast<int64_t>(i % 101)) << "allreduce at " << i;

      std::vector<double> d(count), dmax(count);
      for (size_t i = 0; i < count; ++i)
        d[i] = static_cast<double>((me * 7 + i) % n);
      NX_OK(nexar_allreduce(w[me], d.data(), dmax.data(), count, NEXAR_DTYPE_F64, NEXAR_OP_MAX,
                            nullptr, nullptr));
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(dmax[i], static_cast<double>(n - 1)) << "allreduce max at " << i;

      const uint32_t root = n - 1;
      std::vector<int32_t> bc(count);
      for (size_t i = 0; i < count; ++i)
        bc[i] = me == root ? static_cast<int32_t>(i * 3 + 11) : -1;
      NX_OK(nexar_broadcast(w[me], bc.data(), count, NEXAR_DTYPE_I32, root, nullptr, nullptr));
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(bc[i], static_cast<int32_t>(i * 3 + 11)) << "broadcast at " << i;

      const uint32_t rroot = n / 2;
      std::vector<int64_t> red(count, -1);
      NX_OK(nexar_reduce(w[me], a.data(), red.data(), count, NEXAR_DTYPE_I64, NEXAR_OP_SUM, rroot,
                         nullptr, nullptr));
      if (me == rroot)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(red[i], total * static_cast<int64_t>(i % 101)) << "reduce at " << i;

      std::vector<int32_t> mine(count), all(count * n, -1);
      for (size_t i = 0; i < count; ++i)
        mine[i] = static_cast<int32_t>(me * 1000 + i % 997);
      NX_OK(nexar_allgather(w[me], mine.data(), all.data(), count, NEXAR_DTYPE_I32, nullptr,
                            nullptr));
      for (uint32_t r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(all[r * count + i], static_cast<int32_t>(r * 1000 + i % 997)) << "allgather";

      std::vector<int32_t> gathered(me == 1 % n ? count * n : 0, -1);
      NX_OK(nexar_gather(w[me], mine.data(), gathered.data(), count, NEXAR_DTYPE_I32, 1 % n,
                         nullptr, nullptr));
      if (me == 1 % n) ASSERT_TRUE(gathered == all) << "gather";

      std::vector<int32_t> scattered(count, -1);
      NX_OK(nexar_scatter(w[me], all.data(), scattered.data(), count, NEXAR_DTYPE_I32, 0, nullptr,
                          nullptr));
      ASSERT_TRUE(scattered == mine) << "scatter";

      // reduce_scatter: block j of rank r holds r + j; rank me gets sum_r (r + me).
      std::vector<int32_t> rs_in(count * n), rs_out(count, -1);
      for (uint32_t j = 0; j < n; ++j)
        for (size_t i = 0; i < count; ++i)
          rs_in[j * count + i] = static_cast<int32_t>(me + j);
      NX_OK(nexar_reduce_scatter(w[me], rs_in.data(), rs_out.data(), count, NEXAR_DTYPE_I32,
                                 NEXAR_OP_SUM, nullptr, nullptr));
      const auto rs_want = static_cast<int32_t>(n * (n - 1) / 2 + n * me);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(rs_out[i], rs_want) << "reduce_scatter";

      if (count <= 4096) {
        std::vector<int32_t> send(count * n), recv(count * n, -1);
        for (uint32_t j = 0; j < n; ++j)
          for (size_t i = 0; i < count; ++i)
            send[j * count + i] = static_cast<int32_t>(me * 100 + j);
        NX_OK(nexar_alltoall(w[me], send.data(), recv.data(), count, NEXAR_DTYPE_I32, nullptr,
                             nullptr));
        for (uint32_t j = 0; j < n; ++j)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(recv[j * count + i], static_cast<int32_t>(j * 100 + me)) << "alltoall";
      }

      std::vector<int64_t> one(count, me + 1), pre(count, -1);
      NX_OK(nexar_scan(w[me], one.data(), pre.data(), count, NEXAR_DTYPE_I64, NEXAR_OP_SUM, nullptr,
                       nullptr));
      ASSERT_EQ(pre[count - 1], int64_t{me + 1} * (me + 2) / 2) << "scan";
      NX_OK(nexar_exscan(w[me], one.data(), pre.data(), count, NEXAR_DTYPE_I64, NEXAR_OP_SUM,
                         nullptr, nullptr));
      if (me > 0) ASSERT_EQ(pre[0], int64_t{me} * (me + 1) / 2) << "exscan";
      NX_OK(nexar_barrier(w[me], nullptr, nullptr));
    }
  });
}

const Mesh kKRegular4{"k_regular:4", NEXAR_TOPOLOGY_KREGULAR, 4};
const Mesh kHypercube{"hypercube", NEXAR_TOPOLOGY_HYPERCUBE, 0};
const Mesh kRing{"ring", NEXAR_TOPOLOGY_RING, 0};

class SparseWorld : public ::testing::TestWithParam<std::tuple<Mesh, uint32_t>> {};

}  // namespace

TEST_P(SparseWorld, PointToPointEveryPair) {
  const auto &[mesh, n] = GetParam();
  nexar_comm_options_t o = mesh_options(mesh);
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  check_links(w, mesh);
  exchange_all_pairs(w, {0, 1, 300 << 10});
  for (uint32_t r = 0; r < n; ++r) {
    const nexar_stats_t st = stats(w[r]);
    EXPECT_EQ(st.relay_frames_dropped, 0u) << "rank " << r;
    EXPECT_EQ(st.unexpected_bytes, 0u) << "rank " << r;
  }
  // Tag matching and order through relays: rank 0 to the farthest rank.
  const uint32_t far = n - 1;
  on_each_rank(2, [&](uint32_t side) {
    for (int i = 0; i < 40; ++i) {
      int32_t v = side == 0 ? i : -1;
      if (side == 0)
        NX_OK(nexar_send(w[0], &v, sizeof v, far, 5 + i % 2, nullptr, nullptr));
      else
        NX_OK(nexar_recv(w[far], &v, sizeof v, 0, 5 + i % 2, nullptr, nullptr));
      if (side == 1) ASSERT_EQ(v, i) << "order per tag";
    }
  });
  check_size_mismatch(w, 0, far);
}

TEST_P(SparseWorld, EveryCollectiveExact) {
  const auto &[mesh, n] = GetParam();
  nexar_comm_options_t o = mesh_options(mesh);
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  every_collective(w, {1, 3, 20000});
}

// Reduce-scatter, scan, exscan and barrier follow the graph: the relay
// forwards nothing for them, integer results are exact, and float sums have
// the bits of the full mesh's (the same association, over other paths).
TEST_P(SparseWorld, ReductionsAndBarrierRelayNothing) {
  const auto &[mesh, n] = GetParam();
  // f64 inputs whose sums depend on the order of the additions.
  auto fval = [](uint32_t r, size_t i) { return 1.0 / (3.0 + r * 7.0 + static_cast<double>(i)); };
  const size_t count = 3001;
  // Per rank: reduce_scatter, scan and exscan of the f64 inputs.
  auto float_results = [&](const World &w) {
    std::vector<std::vector<double>> out(n);
    on_each_rank(n, [&](uint32_t me) {
      std::vector<double> in(count * n), rs(count), sc(count), ex(count, 0.0);
      for (size_t i = 0; i < in.size(); ++i)
        in[i] = fval(me, i);
      NX_OK(nexar_reduce_scatter(w[me], in.data(), rs.data(), count, NEXAR_DTYPE_F64, NEXAR_OP_SUM,
                                 nullptr, nullptr));
      NX_OK(nexar_scan(w[me], in.data(), sc.data(), count, NEXAR_DTYPE_F64, NEXAR_OP_SUM, nullptr,
                       nullptr));
      NX_OK(nexar_exscan(w[me], in.data(), ex.data(), count, NEXAR_DTYPE_F64, NEXAR_OP_SUM, nullptr,
                         nullptr));
      out[me] = rs;
      out[me].insert(out[me].end(), sc.begin(), sc.end());
      out[me].insert(out[me].end(), ex.begin(), ex.end());
    });
    return out;
  };
  std::vector<std::vector<double>> sparse;
  {
    nexar_comm_options_t o = mesh_options(mesh);
    World w(n, &o);
    ASSERT_TRUE(w.ok());
    uint64_t before = 0;
    for (uint32_t r = 0; r < n; ++r)
      before += stats(w[r]).relay_bytes_forwarded;
    on_each_rank(n, [&](uint32_t me) {
      for (size_t c : {size_t{1}, size_t{4099}}) {
        SCOPED_TRACE("rank " + std::to_string(me) + " count " + std::to_string(c));
        std::vector<int64_t> rs_in(c * n), rs_out(c, -1), pre(c, -1), ex(c, -1);
        for (uint32_t j = 0; j < n; ++j)
          for (size_t i = 0; i < c; ++i)
            rs_in[j * c + i] = int64_t{me + 1} * (j + 1) + static_cast<int64_t>(i % 13);
        NX_OK(nexar_reduce_scatter(w[me], rs_in.data(), rs_out.data(), c, NEXAR_DTYPE_I64,
                                   NEXAR_OP_SUM, nullptr, nullptr));
        const int64_t ranks = int64_t{n} * (n + 1) / 2;
        for (size_t i = 0; i < c; ++i)
          ASSERT_EQ(rs_out[i], ranks * (me + 1) + int64_t{n} * static_cast<int64_t>(i % 13))
              << "reduce_scatter at " << i;
        NX_OK(nexar_scan(w[me], rs_in.data(), pre.data(), c, NEXAR_DTYPE_I64, NEXAR_OP_SUM, nullptr,
                         nullptr));
        NX_OK(nexar_exscan(w[me], rs_in.data(), ex.data(), c, NEXAR_DTYPE_I64, NEXAR_OP_SUM,
                           nullptr, nullptr));
        // Block 0 of rank r's input: (r + 1) + i % 13.
        for (size_t i = 0; i < c; ++i) {
          const int64_t upto = int64_t{me + 1} * (me + 2) / 2, below = int64_t{me} * (me + 1) / 2;
          const auto k = static_cast<int64_t>(i % 13);
          ASSERT_EQ(pre[i], upto + int64_t{me + 1} * k) << "scan at " << i;
          if (me > 0) ASSERT_EQ(ex[i], below + int64_t{me} * k) << "exscan at " << i;
        }
        for (int b = 0; b < 3; ++b)
          NX_OK(nexar_barrier(w[me], nullptr, nullptr));
      }
    });
    uint64_t after = 0;
    for (uint32_t r = 0; r < n; ++r)
      after += stats(w[r]).relay_bytes_forwarded;
    EXPECT_EQ(after, before) << "bytes forwarded by relays";
    sparse = float_results(w);
  }
  World full(n);
  ASSERT_TRUE(full.ok());
  const std::vector<std::vector<double>> want = float_results(full);
  for (uint32_t r = 0; r < n; ++r)
    for (size_t i = 0; i < want[r].size(); ++i)
      if (r > 0 || i < 2 * count)  // rank 0's exscan result is undefined
        ASSERT_EQ(std::memcmp(&sparse[r][i], &want[r][i], sizeof(double)), 0)
            << "rank " << r << " element " << i << ": " << sparse[r][i] << " vs " << want[r][i];
}

INSTANTIATE_TEST_SUITE_P(Meshes, SparseWorld,
                         ::testing::Combine(::testing::Values(kKRegular4, kHypercube),
                                            ::testing::Values(5u, 8u, 13u, 16u)),
                         [](const auto &info) {
                           const Mesh &m = std::get<0>(info.param);
                           return std::string(m.kind == NEXAR_TOPOLOGY_HYPERCUBE ? "hypercube"
                                                                                 : "k_regular4") +
                                  "_" + std::to_string(std::get<1>(info.param));
                         });

namespace {

uint64_t forwarded(const World &w) {
  uint64_t sum = 0;
  for (uint32_t r = 0; r < w.size(); ++r)
    sum += stats(w[r]).relay_bytes_forwarded;
  return sum;
}

// Broadcast (several roots), reduce (several roots) and allreduce, small and
// above 64 KiB, on world w: exact integer results; f64 results the same bits
// on every rank (allreduce) and on every run (reduce).
void tree_collectives(const World &w) {
  const uint32_t n = w.size();
  auto fval = [](uint32_t r, size_t i) { return 1.0 / (3.0 + r * 7.0 + static_cast<double>(i)); };
  std::vector<std::vector<double>> all_sums(n);
  on_each_rank(n, [&](uint32_t me) {
    const int64_t ranks = int64_t{n} * (n + 1) / 2;
    for (size_t count : {size_t{3}, size_t{20000}}) {  // 12 B / 80 KiB of i32
      SCOPED_TRACE("rank " + std::to_string(me) + " count " + std::to_string(count));
      for (uint32_t root : {0u, n - 1, n / 2}) {
        std::vector<int32_t> bc(count);
        for (size_t i = 0; i < count; ++i)
          bc[i] = me == root ? static_cast<int32_t>(i * 5 + root) : -1;
        NX_OK(nexar_broadcast(w[me], bc.data(), count, NEXAR_DTYPE_I32, root, nullptr, nullptr));
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(bc[i], static_cast<int32_t>(i * 5 + root)) << "broadcast from " << root;
      }
      std::vector<int64_t> a(count), red(count, -1), sum(count, -1);
      for (size_t i = 0; i < count; ++i)
        a[i] = int64_t{me + 1} * static_cast<int64_t>(i % 31 + 1);
      for (uint32_t root : {1u, n - 1}) {
        NX_OK(nexar_reduce(w[me], a.data(), red.data(), count, NEXAR_DTYPE_I64, NEXAR_OP_SUM, root,
                           nullptr, nullptr));
        if (me == root)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(red[i], ranks * static_cast<int64_t>(i % 31 + 1)) << "reduce to " << root;
      }
      NX_OK(nexar_allreduce(w[me], a.data(), sum.data(), count, NEXAR_DTYPE_I64, NEXAR_OP_SUM,
                            nullptr, nullptr));
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(sum[i], ranks * static_cast<int64_t>(i % 31 + 1)) << "allreduce at " << i;
    }
    for (size_t count : {size_t{1001}, size_t{20000}}) {  // 8 KiB / 160 KiB of f64
      std::vector<double> d(count), sum(count), red(count), again(count);
      for (size_t i = 0; i < count; ++i)
        d[i] = fval(me, i);
      NX_OK(nexar_allreduce(w[me], d.data(), sum.data(), count, NEXAR_DTYPE_F64, NEXAR_OP_SUM,
                            nullptr, nullptr));
      all_sums[me].insert(all_sums[me].end(), sum.begin(), sum.end());
      const uint32_t root = n - 2;
      for (double *out : {red.data(), again.data()})
        NX_OK(nexar_reduce(w[me], d.data(), out, count, NEXAR_DTYPE_F64, NEXAR_OP_SUM, root,
                           nullptr, nullptr));
      if (me == root)
        ASSERT_EQ(std::memcmp(red.data(), again.data(), count * sizeof(double)), 0)
            << "reduce bits differ between runs";
    }
  });
  for (uint32_t r = 1; r < n; ++r)
    ASSERT_EQ(
        std::memcmp(all_sums[r].data(), all_sums[0].data(), all_sums[0].size() * sizeof(double)), 0)
        << "allreduce bits of rank " << r << " differ from rank 0's";
}

class TreeWorld : public ::testing::TestWithParam<std::tuple<Mesh, uint32_t>> {};

}  // namespace

// Broadcast, reduce and allreduce follow the graph (a tree of links where
// the usual algorithms would be relayed): the relay forwards nothing.
TEST_P(TreeWorld, BroadcastReduceAllreduceRelayNothing) {
  const auto &[mesh, n] = GetParam();
  nexar_comm_options_t o = mesh_options(mesh);
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  const uint64_t before = forwarded(w);
  tree_collectives(w);
  EXPECT_EQ(forwarded(w), before) << "bytes forwarded by relays";
}

INSTANTIATE_TEST_SUITE_P(Meshes, TreeWorld,
                         ::testing::Combine(::testing::Values(kKRegular4, kHypercube, kRing),
                                            ::testing::Values(5u, 8u, 13u, 16u)),
                         [](const auto &info) {
                           const Mesh &m = std::get<0>(info.param);
                           return std::string(m.kind == NEXAR_TOPOLOGY_HYPERCUBE ? "hypercube"
                                              : m.kind == NEXAR_TOPOLOGY_RING    ? "ring"
                                                                                 : "k_regular4") +
                                  "_" + std::to_string(std::get<1>(info.param));
                         });

// The same on a custom graph: a path 0-1-2-3-4-5 with a branch 2-6-7 and a
// chord 5-7 (depth 3 from rank 2, 5 from rank 0).
TEST(SparseTopology, CustomGraphTreeCollectivesRelayNothing) {
  const uint32_t edges[] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 2, 6, 6, 7, 5, 7};
  nexar_comm_options_t o;
  ASSERT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  o.topology = NEXAR_TOPOLOGY_CUSTOM;
  o.topology_edges = edges;
  o.topology_edge_count = 8;
  o.pipeline_segment_bytes = 16 << 10;
  World w(8, &o);
  ASSERT_TRUE(w.ok());
  const uint64_t before = forwarded(w);
  tree_collectives(w);
  EXPECT_EQ(forwarded(w), before) << "bytes forwarded by relays";
}

// A custom graph (a star around rank 2 plus a chord): routes through the
// hub, results exact; an invalid one fails formation naming the problem.
TEST(SparseTopology, CustomGraph) {
  const uint32_t edges[] = {2, 0, 2, 1, 2, 3, 2, 4, 3, 4};
  nexar_comm_options_t o;
  ASSERT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  o.topology = NEXAR_TOPOLOGY_CUSTOM;
  o.topology_edges = edges;
  o.topology_edge_count = 5;
  {
    World w(5, &o);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(stats(w[2]).connections, 4u);
    EXPECT_EQ(stats(w[0]).connections, 1u);
    EXPECT_EQ(stats(w[3]).connections, 2u);
    exchange_all_pairs(w, {1, 100 << 10});
    every_collective(w, {1, 5000});
    EXPECT_GT(stats(w[2]).relay_bytes_forwarded, 0u) << "the hub relays";
  }
  nexar_comm_t *c[6];
  // Rank 5 has no link.
  EXPECT_EQ(nexar_bootstrap_local(c, 6, &o), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nexar_last_error_message()).find("not connected"), std::string::npos)
      << nexar_last_error_message();
  const uint32_t outside[] = {0, 1, 1, 7};
  o.topology_edges = outside;
  o.topology_edge_count = 2;
  EXPECT_EQ(nexar_bootstrap_local(c, 3, &o), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nexar_last_error_message()).find("(1, 7)"), std::string::npos)
      << nexar_last_error_message();
  o.topology_edges = nullptr;
  EXPECT_EQ(nexar_bootstrap_local(c, 3, &o), NEXAR_ERR_INVALID_ARGUMENT);
}

// Custom graphs that differ between ranks that are not neighbours: ranks 0
// and 3 use a star round rank 0, ranks 1 and 2 the path 1-2-3-0. Rank 0
// would wait for ranks 1 and 2 to dial it and rank 2 for rank 3, none of
// which ever does, so the neighbours alone could only time out; the seed
// sees every rank's graph and every rank fails naming the two groups.
TEST(SparseTopology, CustomGraphsDifferingBetweenNonNeighboursFailOnEveryRank) {
  nexar_seed_options_t so;
  NX_OK(nexar_seed_options_init(&so, sizeof so));
  so.world_size = 4;
  nexar_seed_t *seed = nullptr;
  NX_OK(nexar_seed_start(&seed, &so));
  const std::string seed_address = nexar_seed_address(seed);
  const uint32_t star[] = {0, 1, 0, 2, 0, 3};
  const uint32_t path[] = {1, 2, 2, 3, 3, 0};
  nexar_status_t codes[4];
  std::string errors[4];
  on_each_rank(4, [&](uint32_t r) {
    nexar_comm_options_t o;
    NX_OK(nexar_comm_options_init(&o, sizeof o));
    o.seed_address = seed_address.c_str();
    o.rank = static_cast<int32_t>(r);
    o.world_size = 4;
    o.connect_timeout_ms = 8000;  // a formation that waits fails the test, not hangs it
    o.topology = NEXAR_TOPOLOGY_CUSTOM;
    o.topology_edges = r == 0 || r == 3 ? star : path;
    o.topology_edge_count = 3;
    nexar_comm_t *c = nullptr;
    codes[r] = nexar_comm_join(&c, &o);
    errors[r] = nexar_last_error_message();
    if (c) nexar_comm_destroy(c);
  });
  nexar_seed_stop(seed);
  for (uint32_t r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(codes[r], NEXAR_ERR_INVALID_ARGUMENT) << errors[r];
    for (const char *part :
         {"cluster formation failed", "ranks 0 and 1 disagree on the mesh topology",
          "rank 0 uses custom", "as do ranks 3)", "rank 1 uses custom", "as do ranks 2)"})
      EXPECT_NE(errors[r].find(part), std::string::npos) << part << " in: " << errors[r];
  }
}

TEST(SparseTopology, UpstreamSpellingsFromEnvironment) {
  nexar_comm_options_t o;
  setenv("NEXAR_TOPOLOGY", "k_regular:6", 1);
  ASSERT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  EXPECT_EQ(o.topology, static_cast<uint32_t>(NEXAR_TOPOLOGY_KREGULAR));
  EXPECT_EQ(o.topology_degree, 6u);
  setenv("NEXAR_TOPOLOGY", "Hypercube", 1);
  ASSERT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  EXPECT_EQ(o.topology, static_cast<uint32_t>(NEXAR_TOPOLOGY_HYPERCUBE));
  setenv("NEXAR_TOPOLOGY", "k_regular:1", 1);
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nexar_last_error_message()).find("k_regular"), std::string::npos);
  unsetenv("NEXAR_TOPOLOGY");
  ASSERT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  EXPECT_EQ(o.topology_degree, 4u);
  o.topology = NEXAR_TOPOLOGY_KREGULAR;
  o.topology_degree = 1;
  nexar_comm_t *c[4];
  EXPECT_EQ(nexar_bootstrap_local(c, 4, &o), NEXAR_ERR_INVALID_ARGUMENT);
}

// 64 ranks, each its own engine: the sparse meshes form with few
// connections per rank and run every collective.
TEST(SparseTopology, SixtyFourRanks) {
  for (const Mesh &m : {kHypercube, kKRegular4}) {
    SCOPED_TRACE(m.name);
    nexar_comm_options_t o = mesh_options(m);
    World w(64, &o);
    ASSERT_TRUE(w.ok());
    for (uint32_t r = 0; r < 64; ++r)
      EXPECT_EQ(stats(w[r]).connections, m.kind == NEXAR_TOPOLOGY_HYPERCUBE ? 6u : 4u);
    every_collective(w, {1, 3000});
  }
}

// Algorithm choice knows the graph: on a hypercube, allreduce (recursive
// doubling and halving), broadcast and reduce (a binomial tree over
// r XOR root) use cube links only; on k_regular:4 the ring steps and the
// broadcast chain of large vectors are links (small ones go over the
// spanning tree of links: TreeWorld). Nothing is forwarded.
TEST(SparseTopology, CollectivesKeepToLinks) {
  for (const Mesh &m : {kHypercube, kKRegular4}) {
    SCOPED_TRACE(m.name);
    nexar_comm_options_t o = mesh_options(m);
    World w(16, &o);
    ASSERT_TRUE(w.ok());
    const bool cube = m.kind == NEXAR_TOPOLOGY_HYPERCUBE;
    on_each_rank(16, [&](uint32_t me) {
      for (size_t count : cube ? std::vector<size_t>{100, 200000} : std::vector<size_t>{200000}) {
        std::vector<int32_t> a(count, static_cast<int32_t>(me)), b(count);
        NX_OK(nexar_allreduce(w[me], a.data(), b.data(), count, NEXAR_DTYPE_I32, NEXAR_OP_SUM,
                              nullptr, nullptr));
        ASSERT_EQ(b[count - 1], 120);
        NX_OK(nexar_broadcast(w[me], a.data(), count, NEXAR_DTYPE_I32, 5, nullptr, nullptr));
        ASSERT_EQ(a[0], 5);
        if (cube) {
          NX_OK(nexar_reduce(w[me], b.data(), a.data(), count, NEXAR_DTYPE_I32, NEXAR_OP_MAX, 3,
                             nullptr, nullptr));
          if (me == 3) ASSERT_EQ(a[0], 120);
        }
      }
    });
    for (uint32_t r = 0; r < 16; ++r)
      EXPECT_EQ(stats(w[r]).relay_bytes_forwarded, 0u) << "rank " << r;
  }
}
