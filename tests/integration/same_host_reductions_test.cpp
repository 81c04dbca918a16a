// Reduce, reduce-scatter, scan and exscan among the ranks of one host read
// straight out of each other's shared memory, and give, bit for bit, what
// their message algorithms give with NEXAR_SHM=off (in-process ranks of
// nexar_bootstrap_local share a host).
#include <gtest/gtest.h>
#include <nexar.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace nexar_test;

namespace {

nexar_comm_options_t shm_options(uint32_t shm) {
  nexar_comm_options_t o;
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  o.shm = shm;
  return o;
}

// Floats whose sums depend on the order of the additions.
float input(uint32_t rank, size_t i) {
  return 1.0f / static_cast<float>(1 + (i * 7 + rank * 13) % 1001) * (rank % 2 ? 1e-3f : 1e3f);
}

// One collective on every rank: in is rank r's input of count_in floats,
// out its output of count_out floats (what it wrote; untouched stays NaN).
using Call = std::function<nexar_status_t(nexar_comm_t *, uint32_t r, float *in, float *out)>;

struct Case {
  std::string name;
  size_t count_in, count_out;
  Call call;
  bool symmetric = false;  // the input in a buffer of nexar_mem_alloc
};

std::vector<std::vector<float>> run(const World &w, const Case &k) {
  std::vector<std::vector<float>> out(w.size(), std::vector<float>(k.count_out, NAN));
  on_each_rank(w.size(), [&](uint32_t r) {
    std::vector<float> plain;
    float *in = nullptr;
    void *p = nullptr;
    if (k.symmetric) {
      ASSERT_EQ(nexar_mem_alloc(w[r], k.count_in * sizeof(float), &p), NEXAR_OK);
      in = static_cast<float *>(p);
    } else {
      plain.resize(k.count_in);
      in = plain.data();
    }
    for (size_t i = 0; i < k.count_in; ++i)
      in[i] = input(r, i);
    EXPECT_EQ(k.call(w[r], r, in, out[r].data()), NEXAR_OK)
        << k.name << ", rank " << r << ": " << nexar_last_error_message();
    if (p) EXPECT_EQ(nexar_mem_free(w[r], p), NEXAR_OK);
  });
  return out;
}

std::vector<Case> cases(uint32_t n) {
  std::vector<Case> all;
  const uint32_t root = n > 2 ? 1 : n - 1;
  // Whole vector, sliced in one chunk, several chunks.
  for (size_t count : {size_t{1}, size_t{3000}, size_t{70000}, size_t{(1u << 19) + 3}}) {
    all.push_back({"reduce " + std::to_string(count), count, count,
                   [count, root](nexar_comm_t *c, uint32_t, float *in, float *out) {
                     return nexar_reduce(c, in, out, count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, root,
                                         nullptr, nullptr);
                   }});
    all.push_back({"scan " + std::to_string(count), count, count,
                   [count](nexar_comm_t *c, uint32_t, float *in, float *out) {
                     return nexar_scan(c, in, out, count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                                       nullptr);
                   }});
    // Rank 0 passes no recvbuf.
    all.push_back({"exscan " + std::to_string(count), count, count,
                   [count](nexar_comm_t *c, uint32_t r, float *in, float *out) {
                     return nexar_exscan(c, in, r == 0 ? nullptr : out, count, NEXAR_DTYPE_F32,
                                         NEXAR_OP_SUM, nullptr, nullptr);
                   }});
  }
  // Blocks of one ticket and of several.
  for (size_t block : {size_t{5}, size_t{3001}, size_t{300001}})
    all.push_back({"reduce_scatter " + std::to_string(block), block * n, block,
                   [block](nexar_comm_t *c, uint32_t, float *in, float *out) {
                     return nexar_reduce_scatter(c, in, out, block, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                                                 nullptr, nullptr);
                   }});
  // In place on the root, out of symmetric memory (read where it is).
  const size_t big = (1u << 19) + 3;
  all.push_back({"reduce in place, symmetric", big, big,
                 [big, root](nexar_comm_t *c, uint32_t r, float *in, float *out) {
                   const nexar_status_t s =
                       nexar_reduce(c, in, r == root ? in : out, big, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                                    root, nullptr, nullptr);
                   if (r == root) memcpy(out, in, big * sizeof(float));
                   return s;
                 },
                 true});
  all.push_back({"scan in place", 5000, 5000, [](nexar_comm_t *c, uint32_t, float *in, float *out) {
                   const nexar_status_t s =
                       nexar_scan(c, in, in, 5000, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr, nullptr);
                   memcpy(out, in, 5000 * sizeof(float));
                   return s;
                 }});
  return all;
}

}  // namespace

TEST(SameHostReductions, ReadThePeersSegmentsWithTheMessagePathsBits) {
  for (uint32_t n : {2u, 3u, 4u, 5u}) {
    const std::vector<Case> all = cases(n);
    std::vector<std::vector<std::vector<float>>> results[2];
    for (int mode = 0; mode < 2; ++mode) {
      nexar_comm_options_t o = shm_options(mode == 0 ? NEXAR_SHM_AUTO : NEXAR_SHM_OFF);
      World w(n, &o);
      ASSERT_TRUE(w.ok());
      for (const Case &k : all)
        results[mode].push_back(run(w, k));
      for (uint32_t r = 0; r < n; ++r)
        EXPECT_EQ(stats(w[r]).shm_collectives, mode == 0 ? all.size() : 0u)
            << n << " ranks, rank " << r;
    }
    for (size_t k = 0; k < all.size(); ++k)
      for (uint32_t r = 0; r < n; ++r) {
        const auto &on = results[0][k][r], &off = results[1][k][r];
        // Bits, NaN (untouched) included.
        ASSERT_EQ(memcmp(on.data(), off.data(), on.size() * sizeof(float)), 0)
            << n << " ranks, " << all[k].name << ", rank " << r;
      }
  }
}

// The results are the reductions they should be (exact: small integers).
TEST(SameHostReductions, GiveExactResults) {
  const uint32_t n = 4;
  nexar_comm_options_t o = shm_options(NEXAR_SHM_REQUIRE);
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  const size_t count = 400000;  // several chunks
  std::vector<std::vector<int32_t>> red(n, std::vector<int32_t>(count, -1)), scan = red,
                                                                             exscan = red, rs = red;
  on_each_rank(n, [&](uint32_t r) {
    std::vector<int32_t> in(count * n);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = static_cast<int32_t>((i % 1000) * (r + 1));
    ASSERT_EQ(nexar_reduce(w[r], in.data(), red[r].data(), count, NEXAR_DTYPE_I32, NEXAR_OP_SUM, 2,
                           nullptr, nullptr),
              NEXAR_OK);
    ASSERT_EQ(nexar_scan(w[r], in.data(), scan[r].data(), count, NEXAR_DTYPE_I32, NEXAR_OP_MAX,
                         nullptr, nullptr),
              NEXAR_OK);
    ASSERT_EQ(nexar_exscan(w[r], in.data(), exscan[r].data(), count, NEXAR_DTYPE_I32, NEXAR_OP_SUM,
                           nullptr, nullptr),
              NEXAR_OK);
    ASSERT_EQ(nexar_reduce_scatter(w[r], in.data(), rs[r].data(), count, NEXAR_DTYPE_I32,
                                   NEXAR_OP_SUM, nullptr, nullptr),
              NEXAR_OK);
  });
  for (uint32_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      const int32_t v = static_cast<int32_t>(i % 1000);
      ASSERT_EQ(red[r][i], r == 2 ? v * 10 : -1) << "reduce, rank " << r << ", element " << i;
      ASSERT_EQ(scan[r][i], v * static_cast<int32_t>(r + 1)) << "scan, rank " << r << ", " << i;
      ASSERT_EQ(exscan[r][i], r == 0 ? -1 : v * static_cast<int32_t>(r * (r + 1) / 2))
          << "exscan, rank " << r << ", element " << i;
      const int32_t b = static_cast<int32_t>((r * count + i) % 1000);
      ASSERT_EQ(rs[r][i], b * 10) << "reduce_scatter, rank " << r << ", element " << i;
    }
    EXPECT_EQ(stats(w[r]).shm_collectives, 4u);
  }
}

// Allreduces and a reduce past 16 MiB: out of place their results go out
// with streaming stores, in place with plain ones; exact either way, into a
// destination 4 bytes past a 16-byte boundary (the streaming copy's head and
// tail are then copied plainly).
TEST(SameHostReductions, LargeResultsAreExactInAndOutOfPlace) {
  const uint32_t n = 2;
  nexar_comm_options_t o = shm_options(NEXAR_SHM_REQUIRE);
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  const size_t count = (18u << 20) / sizeof(int32_t) + 1;
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count)), inplace = in;
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count + 1)), red = out;
  for (uint32_t r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      in[r][i] = inplace[r][i] = static_cast<int32_t>((i % 7919) * (r + 1));
  on_each_rank(n, [&](uint32_t r) {
    ASSERT_EQ(nexar_allreduce(w[r], in[r].data(), out[r].data() + 1, count, NEXAR_DTYPE_I32,
                              NEXAR_OP_SUM, nullptr, nullptr),
              NEXAR_OK);
    ASSERT_EQ(nexar_allreduce(w[r], inplace[r].data(), inplace[r].data(), count, NEXAR_DTYPE_I32,
                              NEXAR_OP_SUM, nullptr, nullptr),
              NEXAR_OK);
    ASSERT_EQ(nexar_reduce(w[r], in[r].data(), red[r].data() + 1, count, NEXAR_DTYPE_I32,
                           NEXAR_OP_MAX, 1, nullptr, nullptr),
              NEXAR_OK);
  });
  for (uint32_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      const int32_t v = static_cast<int32_t>(i % 7919);
      ASSERT_EQ(out[r][i + 1], v * 3) << "allreduce, rank " << r << ", element " << i;
      ASSERT_EQ(inplace[r][i], v * 3) << "allreduce in place, rank " << r << ", element " << i;
      if (r == 1) ASSERT_EQ(red[r][i + 1], v * 2) << "reduce, element " << i;
    }
    EXPECT_EQ(out[r][0], 0) << "allreduce wrote before its recvbuf, rank " << r;
    EXPECT_EQ(stats(w[r]).shm_collectives, 3u);
  }
}

// A reduce-scatter whose recvbuf is the rank's own block of its sendbuf (as
// in place with MPI or NCCL): exact on shared memory, where that block is
// then copied like the others instead of read where it is (the reduction
// would write over its own input), and over messages.
TEST(SameHostReductions, ReduceScatterIntoItsOwnBlockIsExact) {
  const uint32_t n = 3;
  const size_t count = 100003;  // several tickets per block
  for (uint32_t shm : {NEXAR_SHM_REQUIRE, NEXAR_SHM_OFF}) {
    nexar_comm_options_t o = shm_options(shm);
    World w(n, &o);
    ASSERT_TRUE(w.ok());
    std::vector<std::vector<int32_t>> buf(n, std::vector<int32_t>(count * n));
    on_each_rank(n, [&](uint32_t r) {
      for (size_t i = 0; i < buf[r].size(); ++i)
        buf[r][i] = static_cast<int32_t>((i % 1000) * (r + 1));
      EXPECT_EQ(nexar_reduce_scatter(w[r], buf[r].data(), buf[r].data() + r * count, count,
                                     NEXAR_DTYPE_I32, NEXAR_OP_SUM, nullptr, nullptr),
                NEXAR_OK)
          << nexar_last_error_message();
    });
    for (uint32_t r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        const int32_t b = static_cast<int32_t>((r * count + i) % 1000);
        ASSERT_EQ(buf[r][r * count + i], b * 6)
            << "rank " << r << ", element " << i << (shm == NEXAR_SHM_OFF ? ", over messages" : "");
      }
      EXPECT_EQ(stats(w[r]).shm_collectives, shm == NEXAR_SHM_OFF ? 0u : 1u);
    }
  }
}

// A scan on some ranks and an exscan on the others fail on every rank with
// NEXAR_ERR_MISMATCH; the next collective works, on shared memory again.
TEST(SameHostReductions, MismatchFailsEveryRankAndTheNextOneWorks) {
  const uint32_t n = 3;
  nexar_comm_options_t o = shm_options(NEXAR_SHM_AUTO);
  o.collective_timeout_ms = 20000;
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(1000, 1)), out = in;
  auto reduce_scatter = [&] {
    on_each_rank(n, [&](uint32_t r) {
      EXPECT_EQ(nexar_reduce_scatter(w[r], in[r].data(), out[r].data(), 300, NEXAR_DTYPE_I32,
                                     NEXAR_OP_SUM, nullptr, nullptr),
                NEXAR_OK)
          << "rank " << r << ": " << nexar_last_error_message();
      for (size_t i = 0; i < 300; ++i)
        ASSERT_EQ(out[r][i], 3) << "rank " << r;
    });
  };
  reduce_scatter();  // decides: on shared memory
  on_each_rank(n, [&](uint32_t r) {
    const nexar_status_t s = r == 1 ? nexar_exscan(w[r], in[r].data(), out[r].data(), 1000,
                                                   NEXAR_DTYPE_I32, NEXAR_OP_SUM, nullptr, nullptr)
                                    : nexar_scan(w[r], in[r].data(), out[r].data(), 1000,
                                                 NEXAR_DTYPE_I32, NEXAR_OP_SUM, nullptr, nullptr);
    EXPECT_EQ(s, NEXAR_ERR_MISMATCH) << "rank " << r << ": " << nexar_last_error_message();
  });
  reduce_scatter();
  for (uint32_t r = 0; r < n; ++r)
    EXPECT_EQ(stats(w[r]).shm_collectives, 3u) << "rank " << r;
}

// A member that aborts instead of joining ends the others' collectives on
// shared memory at once (they wait on its counters, not on messages), with
// ABORTED or PEER_FAILED naming it, long before the collective timeout.
TEST(SameHostReductions, AbortOfAMemberEndsTheOthersWaits) {
  const uint32_t n = 3;
  nexar_comm_options_t o = shm_options(NEXAR_SHM_REQUIRE);
  o.collective_timeout_ms = 60000;
  World w(n, &o);
  ASSERT_TRUE(w.ok());
  std::vector<std::vector<float>> buf(n, std::vector<float>(300000, 1.0f)), out = buf;
  // Decided on shared memory by a first, complete one.
  on_each_rank(n, [&](uint32_t r) {
    ASSERT_EQ(nexar_reduce_scatter(w[r], buf[r].data(), out[r].data(), 100000, NEXAR_DTYPE_F32,
                                   NEXAR_OP_SUM, nullptr, nullptr),
              NEXAR_OK);
  });
  Completions done;
  for (uint32_t r : {0u, 2u}) {
    ASSERT_EQ(nexar_reduce(w[r], buf[r].data(), out[r].data(), 300000, NEXAR_DTYPE_F32,
                           NEXAR_OP_SUM, 0, Completions::callback, &done),
              NEXAR_OK);
    ASSERT_EQ(nexar_scan(w[r], buf[r].data(), out[r].data(), 300000, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                         Completions::callback, &done),
              NEXAR_OK);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(done.count(), 0u) << "they wait for rank 1";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(nexar_comm_abort(w[1]), NEXAR_OK);
  ASSERT_TRUE(done.wait(4, 20)) << "every operation of ranks 0 and 2 completes";
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  for (auto &rec : done.records) {
    EXPECT_TRUE(rec.status == NEXAR_ERR_ABORTED || rec.status == NEXAR_ERR_PEER_FAILED)
        << nexar_status_str(rec.status) << ": " << rec.message;
    if (rec.status == NEXAR_ERR_PEER_FAILED) EXPECT_EQ(rec.failed_rank, 1) << rec.message;
  }
}
