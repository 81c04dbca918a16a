// Sparse meshes (NEXAR_TOPOLOGY_RING) through the C ABI: every rank connects
// to its two ring neighbours only, and everything else (p2p, collectives,
// RPC) is relayed by the ranks in between, on real QUIC on loopback.
#include <algorithm>
#include <cstring>

#include "harness.h"

using namespace nexar_test;

namespace {

using Bytes = std::vector<uint8_t>;

nexar_comm_options_t ring_options() {
  nexar_comm_options_t o;
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  o.topology = NEXAR_TOPOLOGY_RING;
  return o;
}

struct RingWorld : World {
  static nexar_comm_options_t opts() { return ring_options(); }
  explicit RingWorld(uint32_t n, nexar_comm_options_t o = opts()) : World(n, &o) {}
};

}  // namespace

TEST(Relay, RingHasTwoConnectionsPerRank) {
  RingWorld w(6);
  ASSERT_TRUE(w.ok());
  for (uint32_t r = 0; r < w.size(); ++r)
    EXPECT_EQ(stats(w[r]).connections, 2u) << "rank " << r;
  World full(6);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(stats(full[0]).connections, 5u);
}

TEST(Relay, TopologyFromEnvironmentAndValidation) {
  setenv("NEXAR_TOPOLOGY", "Ring", 1);
  nexar_comm_options_t o;
  ASSERT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  EXPECT_EQ(o.topology, static_cast<uint32_t>(NEXAR_TOPOLOGY_RING));
  setenv("NEXAR_TOPOLOGY", "torus", 1);
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nexar_last_error_message()).find("NEXAR_TOPOLOGY"), std::string::npos);
  unsetenv("NEXAR_TOPOLOGY");
  // An older caller's struct (without the field) keeps the full mesh.
  nexar_comm_options_t old;
  ASSERT_EQ(nexar_comm_options_init(&old, offsetof(nexar_comm_options_t, topology)), NEXAR_OK);
  nexar_comm_t *comms[4];
  ASSERT_EQ(nexar_bootstrap_local(comms, 4, &old), NEXAR_OK);
  EXPECT_EQ(stats(comms[0]).connections, 3u);
  for (auto *c : comms)
    nexar_comm_destroy(c);
  o.topology = 7;
  EXPECT_EQ(nexar_bootstrap_local(comms, 4, &o), NEXAR_ERR_INVALID_ARGUMENT);
}

// Every pair exchanges messages of several sizes at once, with content checks.
TEST(Relay, AllPairsAllSizesSixRankRing) {
  const std::vector<size_t> sizes = {0, 1, 64 << 10, 8 << 20};
  constexpr uint32_t n = 6;
  RingWorld w(n);
  ASSERT_TRUE(w.ok());
  exchange_all_pairs(w, sizes);
  uint64_t forwarded = 0;
  for (uint32_t r = 0; r < n; ++r) {
    nexar_stats_t st = stats(w[r]);
    EXPECT_EQ(st.connections, 2u);
    EXPECT_GT(st.relay_bytes_sent, 0u) << "rank " << r << " relayed to its non-neighbours";
    EXPECT_EQ(st.relay_frames_dropped, 0u);
    EXPECT_EQ(st.unexpected_bytes, 0u);
    forwarded += st.relay_bytes_forwarded;
  }
  EXPECT_GT(forwarded, 0u);
}

// Order per (pair, tag) and tag matching hold across a three-hop route, for
// small (copied) and large (zero-copy, acknowledged end to end) messages.
TEST(Relay, TagMatchingAndOrderingThroughRelays) {
  RingWorld w(6);
  ASSERT_TRUE(w.ok());
  constexpr int kPerTag = 60;
  constexpr size_t kBig = 300 << 10;  // more than one relay chunk
  std::thread sender([&] {
    for (int i = 0; i < kPerTag; ++i)
      for (uint32_t tag : {7u, 3u}) {
        int32_t v = static_cast<int32_t>(tag * 1000 + i);
        ASSERT_EQ(nexar_send(w[0], &v, sizeof v, 3, tag, nullptr, nullptr), NEXAR_OK);
        if (i % 10 == 0) {
          Bytes big = pattern(kBig, tag * 1000 + static_cast<uint32_t>(i));
          ASSERT_EQ(nexar_send(w[0], big.data(), big.size(), 3, tag + 100, nullptr, nullptr),
                    NEXAR_OK);
        }
      }
  });
  for (uint32_t tag : {3u, 7u}) {
    for (int i = 0; i < kPerTag; ++i) {
      int32_t v = -1;
      ASSERT_EQ(nexar_recv(w[3], &v, sizeof v, 0, tag, nullptr, nullptr), NEXAR_OK)
          << nexar_last_error_message();
      EXPECT_EQ(v, static_cast<int32_t>(tag * 1000 + i)) << "send order per tag";
    }
    for (int i = 0; i < kPerTag; i += 10) {
      Bytes big(kBig);
      ASSERT_EQ(nexar_recv(w[3], big.data(), big.size(), 0, tag + 100, nullptr, nullptr), NEXAR_OK)
          << nexar_last_error_message();
      EXPECT_TRUE(big == pattern(kBig, tag * 1000 + static_cast<uint32_t>(i)));
    }
  }
  sender.join();
  nexar_stats_t st = stats(w[3]);
  EXPECT_EQ(st.pending_tags, 0u);
  EXPECT_EQ(st.unexpected_bytes, 0u);
  EXPECT_GT(stats(w[1]).relay_bytes_forwarded, 0u);
  EXPECT_GT(stats(w[2]).relay_bytes_forwarded, 0u);
}

TEST(Relay, SizeMismatchThroughRelay) {
  RingWorld w(6);
  ASSERT_TRUE(w.ok());
  check_size_mismatch(w, 0, 3);
  EXPECT_GT(stats(w[0]).relay_bytes_sent, 0u);
}

// Every collective is correct on a sparse mesh and keeps to its links (the
// algorithms route data to non-neighbours themselves): nothing is relayed.
TEST(Relay, CollectivesOnSixRankRing) {
  constexpr uint32_t n = 6;
  RingWorld w(n);
  ASSERT_TRUE(w.ok());
  on_each_rank(n, [&](uint32_t me) {
    for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
      // allreduce (sum of integers in f64, exact)
      std::vector<double> a(count), b(count);
      for (size_t i = 0; i < count; ++i)
        a[i] = static_cast<double>(me + 1) * static_cast<double>(i % 97);
      NX_OK(nexar_allreduce(w[me], a.data(), b.data(), count, NEXAR_DTYPE_F64, NEXAR_OP_SUM,
                            nullptr, nullptr));
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(b[i], 21.0 * static_cast<double>(i % 97)) << "allreduce rank " << me;
      // broadcast from a rank three hops away from rank 0
      std::vector<int32_t> bc(count);
      for (size_t i = 0; i < count; ++i)
        bc[i] = me == 3 ? static_cast<int32_t>(i * 7 + 1) : -1;
      NX_OK(nexar_broadcast(w[me], bc.data(), count, NEXAR_DTYPE_I32, 3, nullptr, nullptr));
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(bc[i], static_cast<int32_t>(i * 7 + 1)) << "broadcast rank " << me;
      // allgather
      std::vector<int32_t> mine(count, static_cast<int32_t>(me * 10 + 1)), all(count * n);
      NX_OK(nexar_allgather(w[me], mine.data(), all.data(), count, NEXAR_DTYPE_I32, nullptr,
                            nullptr));
      for (uint32_t r = 0; r < n; ++r)
        ASSERT_EQ(all[r * count + count - 1], static_cast<int32_t>(r * 10 + 1));
      // alltoall: block j from rank me holds me*100+j
      if (count <= 1000) {
        std::vector<int32_t> send(count * n), recv(count * n);
        for (uint32_t j = 0; j < n; ++j)
          for (size_t i = 0; i < count; ++i)
            send[j * count + i] = static_cast<int32_t>(me * 100 + j);
        NX_OK(nexar_alltoall(w[me], send.data(), recv.data(), count, NEXAR_DTYPE_I32, nullptr,
                             nullptr));
        for (uint32_t j = 0; j < n; ++j)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(recv[j * count + i], static_cast<int32_t>(j * 100 + me));
      }
      NX_OK(nexar_barrier(w[me], nullptr, nullptr));
    }
  });
  uint64_t relayed = 0;
  for (uint32_t r = 0; r < n; ++r)
    relayed += stats(w[r]).relay_bytes_sent;
  EXPECT_EQ(relayed, 0u) << "collective steps went to non-neighbours through the relay";
  EXPECT_EQ(stats(w[0]).connections, 2u);
}

// An odd world, with a collective sequence repeated: tags and sequence
// numbers of relayed collective messages match like direct ones.
TEST(Relay, RepeatedCollectivesOnFiveRankRing) {
  constexpr uint32_t n = 5;
  RingWorld w(n);
  ASSERT_TRUE(w.ok());
  on_each_rank(n, [&](uint32_t me) {
    for (int iter = 0; iter < 20; ++iter) {
      std::vector<int64_t> a(257, static_cast<int64_t>(me + iter)), b(257);
      NX_OK(nexar_allreduce(w[me], a.data(), b.data(), a.size(), NEXAR_DTYPE_I64, NEXAR_OP_MAX,
                            nullptr, nullptr));
      ASSERT_EQ(b[256], static_cast<int64_t>(n - 1 + iter));
      std::vector<int32_t> s(n * 3), r(n * 3);
      for (uint32_t j = 0; j < n * 3; ++j)
        s[j] = static_cast<int32_t>(me * 1000 + j / 3);
      NX_OK(nexar_alltoall(w[me], s.data(), r.data(), 3, NEXAR_DTYPE_I32, nullptr, nullptr));
      for (uint32_t j = 0; j < n; ++j)
        ASSERT_EQ(r[j * 3 + 2], static_cast<int32_t>(j * 1000 + me));
      NX_OK(nexar_barrier(w[me], nullptr, nullptr));
    }
  });
}

TEST(Relay, RpcToNonNeighbour) {
  RingWorld w(6);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[3], 5, xor_5a, nullptr));
  for (size_t len : {size_t{0}, size_t{17}, size_t{3} << 20}) {
    Bytes req = pattern(len, static_cast<uint32_t>(len));
    nexar_rpc_response_t *resp = nullptr;
    NX_OK(nexar_rpc_call(w[0], 3, 5, req.data(), req.size(), &resp, nullptr, nullptr));
    ASSERT_NE(resp, nullptr);
    ASSERT_EQ(nexar_rpc_response_size(resp), len);
    const auto *p = static_cast<const uint8_t *>(nexar_rpc_response_data(resp));
    for (size_t i = 0; i < len; ++i)
      ASSERT_EQ(p[i], req[i] ^ 0x5A) << "byte " << i;
    nexar_rpc_response_free(resp);
  }
  // Not registered on the far rank: the error comes back through the relays.
  nexar_rpc_response_t *resp = nullptr;
  EXPECT_EQ(nexar_rpc_call(w[0], 3, 6, nullptr, 0, &resp, nullptr, nullptr),
            NEXAR_ERR_RPC_NOT_REGISTERED);
  EXPECT_GT(stats(w[0]).relay_bytes_sent, 0u);
}

// A receive posted late: the destination buffers its unexpected-data budget,
// the intermediate its relay budget (plus what the QUIC window already let
// in), and then the origin waits; nothing grows without bound, and the
// message arrives intact once received.
TEST(Relay, SlowDestinationBoundsTheIntermediate) {
  RingWorld w(6);
  ASSERT_TRUE(w.ok());
  const size_t bytes = 128u << 20;  // more than both can hold
  Bytes v = pattern(bytes, 5), got(bytes);
  Completions sent;
  ASSERT_EQ(nexar_send(w[0], v.data(), v.size(), 2, 1, Completions::callback, &sent), NEXAR_OK);
  // Bytes the intermediate may hold: its budget plus the QUIC receive window
  // of the one relay stream this flow uses (32 MiB) and one chunk. Without
  // the budget it holds what the destination does not take, about 80 MiB.
  const uint64_t bound = (16u << 20) + (32u << 20) + (256u << 10);
  uint64_t most = 0;
  for (int i = 0; i < 200 && sent.count() == 0; ++i) {
    most = std::max(most, stats(w[1]).relay_bytes_held);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(most, 0u) << "the intermediate was seen holding the flow";
  EXPECT_LE(most, bound);
  EXPECT_LE(stats(w[2]).unexpected_bytes, (16u << 20) + (64u << 20));
  NX_OK(nexar_recv(w[2], got.data(), got.size(), 0, 1, nullptr, nullptr));
  ASSERT_TRUE(sent.wait(1));
  EXPECT_EQ(sent.records[0].status, NEXAR_OK) << sent.records[0].message;
  EXPECT_TRUE(got == v);
  EXPECT_EQ(stats(w[1]).relay_bytes_held, 0u);
}

// nexar_comm_abort reaches ranks that are not neighbours (relayed notice).
TEST(Relay, AbortReachesNonNeighbours) {
  RingWorld w(6);
  ASSERT_TRUE(w.ok());
  Completions done;
  uint64_t x = 0;
  ASSERT_EQ(nexar_recv(w[3], &x, 8, 4, 1, Completions::callback, &done), NEXAR_OK);
  NX_OK(nexar_comm_abort(w[0]));
  ASSERT_TRUE(done.wait(1, 30));
  EXPECT_EQ(done.records[0].status, NEXAR_ERR_ABORTED) << done.records[0].message;
  EXPECT_NE(done.records[0].message.find("rank 0"), std::string::npos) << done.records[0].message;
}

// Losing a relay: routes go round it (every rank recomputes them), waits on
// the lost rank itself fail with NEXAR_ERR_PEER_FAILED, and a second loss
// that cuts the ring in two is reported as a partition.
TEST(Relay, LostIntermediateIsRoutedAround) {
  nexar_comm_options_t o = ring_options();
  o.p2p_timeout_ms = 120000;  // a hang would show as a timeout, far later
  nexar_comm_t *c[6];
  ASSERT_EQ(nexar_bootstrap_local(c, 6, &o), NEXAR_OK);
  // Before: rank 0 -> 2 goes through rank 1.
  Bytes v = pattern(1 << 20, 1), got(1 << 20);
  Completions before;
  ASSERT_EQ(nexar_recv(c[2], got.data(), got.size(), 0, 1, Completions::callback, &before),
            NEXAR_OK);
  NX_OK(nexar_send(c[0], v.data(), v.size(), 2, 1, nullptr, nullptr));
  ASSERT_TRUE(before.wait(1));
  EXPECT_EQ(before.records[0].status, NEXAR_OK);
  EXPECT_GT(stats(c[1]).relay_bytes_forwarded, 0u);
  // A receive from the rank about to go, on a rank that is not its neighbour.
  Completions pending;
  uint64_t x = 0;
  ASSERT_EQ(nexar_recv(c[3], &x, 8, 1, 9, Completions::callback, &pending), NEXAR_OK);
  nexar_comm_destroy(c[1]);
  ASSERT_TRUE(pending.wait(1, 30)) << "a receive from the lost rank fails instead of hanging";
  EXPECT_EQ(pending.records[0].status, NEXAR_ERR_PEER_FAILED) << pending.records[0].message;
  EXPECT_NE(pending.records[0].message.find("rank 1"), std::string::npos)
      << pending.records[0].message;
  // 0 -> 2 and 2 -> 0 now go the long way round (5, 4, 3), both ways.
  const uint64_t forwarded_before = stats(c[4]).relay_bytes_forwarded;
  for (auto [from, to] : {std::pair{0u, 2u}, std::pair{2u, 0u}, std::pair{0u, 3u}}) {
    Completions ok;
    std::fill(got.begin(), got.end(), 0);
    ASSERT_EQ(nexar_recv(c[to], got.data(), got.size(), from, 3, Completions::callback, &ok),
              NEXAR_OK);
    NX_OK(nexar_send(c[from], v.data(), v.size(), to, 3, nullptr, nullptr));
    ASSERT_TRUE(ok.wait(1));
    EXPECT_EQ(ok.records[0].status, NEXAR_OK) << ok.records[0].message;
    EXPECT_TRUE(got == v) << from << " -> " << to;
  }
  EXPECT_GT(stats(c[4]).relay_bytes_forwarded, forwarded_before) << "the detour runs through 4";
  // Sends to the lost rank fail naming it.
  EXPECT_EQ(nexar_send(c[0], v.data(), 8, 1, 2, nullptr, nullptr), NEXAR_ERR_PEER_FAILED);
  // Losing rank 4 as well cuts {2, 3} off from {5, 0}: a partition.
  Completions cut;
  ASSERT_EQ(nexar_recv(c[0], &x, 8, 3, 9, Completions::callback, &cut), NEXAR_OK);
  nexar_comm_destroy(c[4]);
  ASSERT_TRUE(cut.wait(1, 30)) << "a receive across the partition fails";
  EXPECT_EQ(cut.records[0].status, NEXAR_ERR_PEER_FAILED) << cut.records[0].message;
  EXPECT_NE(cut.records[0].message.find("partitioned"), std::string::npos)
      << cut.records[0].message;
  EXPECT_EQ(nexar_send(c[0], v.data(), v.size(), 2, 2, nullptr, nullptr), NEXAR_ERR_PEER_FAILED);
  EXPECT_NE(std::string(nexar_last_error_message()).find("rank 2"), std::string::npos)
      << nexar_last_error_message();
  // 0 <-> 5 are neighbours: unaffected.
  Completions ok;
  ASSERT_EQ(nexar_recv(c[5], got.data(), got.size(), 0, 4, Completions::callback, &ok), NEXAR_OK);
  NX_OK(nexar_send(c[0], v.data(), v.size(), 5, 4, nullptr, nullptr));
  ASSERT_TRUE(ok.wait(1));
  EXPECT_EQ(ok.records[0].status, NEXAR_OK) << ok.records[0].message;
  for (uint32_t r : {0u, 2u, 3u, 5u})
    nexar_comm_destroy(c[r]);
}
