// nexar_comm_split through the C ABI: groups by color ordered by (key, rank);
// point-to-point, barrier and collectives on the children; parent and children
// at the same time; a split of a split; destroy order; rejected arguments.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>

#include "harness.h"

using namespace nexar_test;

namespace {

// What a rank expects of its child: the parent ranks of the group, by new rank.
struct Expected {
  std::vector<uint32_t> group;
  uint32_t rank;
};

// Group of parent rank r for colors/keys given for every parent rank.
Expected expected_for(uint32_t r, const std::vector<uint32_t> &color,
                      const std::vector<uint32_t> &key) {
  std::vector<std::pair<uint32_t, uint32_t>> members;
  for (uint32_t p = 0; p < color.size(); ++p)
    if (color[p] == color[r]) members.emplace_back(key[p], p);
  std::sort(members.begin(), members.end());
  Expected e{{}, 0};
  for (auto &[k, p] : members) {
    if (p == r) e.rank = static_cast<uint32_t>(e.group.size());
    e.group.push_back(p);
  }
  return e;
}

// Runs p2p, barrier, alltoall, gather, scatter and scan on a child, checking
// that its ranks are the expected parent ranks (id = the parent rank, or any
// other number that identifies the member). Called on every member at once.
void exercise(nexar_comm_t *c, const Expected &e, const std::vector<uint32_t> &id) {
  const uint32_t m = static_cast<uint32_t>(e.group.size()), k = e.rank;
  ASSERT_EQ(nexar_comm_size(c), m);
  ASSERT_EQ(nexar_comm_rank(c), k);
  const int32_t me = static_cast<int32_t>(id[e.group[k]]);
  auto id_of = [&](uint32_t child_rank) { return static_cast<int32_t>(id[e.group[child_rank]]); };

  // p2p around the ring of the child.
  Completions sent;
  int32_t out = me, in = -1;
  NX_OK(nexar_send(c, &out, sizeof out, (k + 1) % m, 7, Completions::callback, &sent));
  NX_OK(nexar_recv(c, &in, sizeof in, (k + m - 1) % m, 7, nullptr, nullptr));
  EXPECT_EQ(in, id_of((k + m - 1) % m));
  ASSERT_TRUE(sent.wait(1));
  EXPECT_EQ(sent.records[0].status, NEXAR_OK) << sent.records[0].message;

  NX_OK(nexar_barrier(c, nullptr, nullptr));

  std::vector<int32_t> send(m), recv(m, -1);
  for (uint32_t j = 0; j < m; ++j)
    send[j] = me * 100 + static_cast<int32_t>(j);
  NX_OK(nexar_alltoall(c, send.data(), recv.data(), 1, NEXAR_DTYPE_I32, nullptr, nullptr));
  for (uint32_t j = 0; j < m; ++j)
    EXPECT_EQ(recv[j], id_of(j) * 100 + static_cast<int32_t>(k)) << "alltoall block " << j;

  std::vector<int32_t> all(m, -1);
  NX_OK(nexar_gather(c, &me, all.data(), 1, NEXAR_DTYPE_I32, m - 1, nullptr, nullptr));
  if (k == m - 1)
    for (uint32_t j = 0; j < m; ++j)
      EXPECT_EQ(all[j], id_of(j)) << "gather block " << j;

  for (uint32_t j = 0; j < m; ++j)
    send[j] = id_of(j) * 7;
  int32_t mine = -1;
  NX_OK(nexar_scatter(c, send.data(), &mine, 1, NEXAR_DTYPE_I32, 0, nullptr, nullptr));
  EXPECT_EQ(mine, me * 7);

  int32_t prefix = -1, want = 0;
  for (uint32_t j = 0; j <= k; ++j)
    want += id_of(j);
  NX_OK(nexar_scan(c, &me, &prefix, 1, NEXAR_DTYPE_I32, NEXAR_OP_SUM, nullptr, nullptr));
  EXPECT_EQ(prefix, want);
}

std::vector<uint32_t> iota(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i)
    v[i] = i;
  return v;
}

// Splits w by (color, key) on every rank, exercises every child, destroys them.
void split_and_exercise(const World &w, const std::vector<uint32_t> &color,
                        const std::vector<uint32_t> &key) {
  const uint32_t n = w.size();
  const std::vector<uint32_t> id = iota(n);
  on_each_rank(n, [&](uint32_t r) {
    nexar_comm_t *child = nullptr;
    NX_OK(nexar_comm_split(w[r], color[r], key[r], &child, nullptr, nullptr));
    ASSERT_NE(child, nullptr);
    exercise(child, expected_for(r, color, key), id);
    // The parent still works after the split (and while the child lives).
    NX_OK(nexar_barrier(w[r], nullptr, nullptr));
    nexar_comm_destroy(child);
  });
}

class SplitWorld : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SplitWorld, ColorsAndKeys) {
  const uint32_t n = GetParam();
  World w(n);
  ASSERT_TRUE(w.ok());
  std::vector<uint32_t> color(n), key(n);
  {
    SCOPED_TRACE("two colors, equal keys: ordered by parent rank");
    for (uint32_t r = 0; r < n; ++r)
      color[r] = r % 2, key[r] = 0;
    split_and_exercise(w, color, key);
  }
  {
    SCOPED_TRACE("three colors, distinct keys in reverse rank order");
    for (uint32_t r = 0; r < n; ++r)
      color[r] = 1000 + r % 3, key[r] = n - r;
    split_and_exercise(w, color, key);
  }
  {
    SCOPED_TRACE("one color, keys with ties");
    for (uint32_t r = 0; r < n; ++r)
      color[r] = 5, key[r] = (r * 7) % 3;
    split_and_exercise(w, color, key);
  }
  {
    SCOPED_TRACE("every rank alone");
    for (uint32_t r = 0; r < n; ++r)
      color[r] = r, key[r] = 0;
    split_and_exercise(w, color, key);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, SplitWorld, ::testing::Values(1u, 2u, 3u, 5u, 8u, 13u),
                         [](const testing::TestParamInfo<uint32_t> &i) {
                           return "N" + std::to_string(i.param);
                         });

// Parent and children run collectives and p2p at the same time, with the same
// tags between the same processes: nothing mixes.
TEST(Split, ParentAndChildrenConcurrently) {
  const uint32_t n = 8;
  World w(n);
  ASSERT_TRUE(w.ok());
  std::vector<uint32_t> color(n), key(n, 0);
  for (uint32_t r = 0; r < n; ++r)
    color[r] = r % 2;
  on_each_rank(n, [&](uint32_t r) {
    nexar_comm_t *child = nullptr;
    NX_OK(nexar_comm_split(w[r], color[r], key[r], &child, nullptr, nullptr));
    const Expected e = expected_for(r, color, key);
    const uint32_t m = nexar_comm_size(child), k = nexar_comm_rank(child);
    ASSERT_EQ(m, n / 2);
    Completions pd, cd;  // parent's and child's completions
    auto cb = Completions::callback;
    for (int round = 0; round < 3; ++round) {
      const size_t pcount = 3000 + round, ccount = 5000 + round;
      std::vector<int32_t> psend(pcount * n), precv(pcount * n), csend(ccount * m),
          crecv(ccount * m);
      for (uint32_t j = 0; j < n; ++j)
        for (size_t i = 0; i < pcount; ++i)
          psend[j * pcount + i] = static_cast<int32_t>(r * 1000000 + j * 10000 + i);
      for (uint32_t j = 0; j < m; ++j)
        for (size_t i = 0; i < ccount; ++i)
          csend[j * ccount + i] = -static_cast<int32_t>(r * 1000000 + j * 10000 + i);
      // Parent rank r+2 is child rank k+1 (same color): one pair of processes,
      // one tag, two communicators.
      int32_t p_out = static_cast<int32_t>(r), c_out = -static_cast<int32_t>(r) - 1;
      int32_t p_in = 0, c_in = 0;
      int32_t pscan = 0, cscan = 0, one = 1;
      const size_t pbase = pd.count(), cbase = cd.count();
      NX_OK(nexar_barrier(w[r], cb, &pd));
      NX_OK(nexar_alltoall(child, csend.data(), crecv.data(), ccount, NEXAR_DTYPE_I32, cb, &cd));
      NX_OK(nexar_send(child, &c_out, 4, (k + 1) % m, 9, cb, &cd));
      NX_OK(nexar_send(w[r], &p_out, 4, (r + 2) % n, 9, cb, &pd));
      NX_OK(nexar_alltoall(w[r], psend.data(), precv.data(), pcount, NEXAR_DTYPE_I32, cb, &pd));
      NX_OK(nexar_barrier(child, cb, &cd));
      NX_OK(nexar_recv(w[r], &p_in, 4, (r + n - 2) % n, 9, cb, &pd));
      NX_OK(nexar_recv(child, &c_in, 4, (k + m - 1) % m, 9, cb, &cd));
      NX_OK(nexar_scan(child, &one, &cscan, 1, NEXAR_DTYPE_I32, NEXAR_OP_SUM, cb, &cd));
      NX_OK(nexar_scan(w[r], &one, &pscan, 1, NEXAR_DTYPE_I32, NEXAR_OP_SUM, cb, &pd));
      ASSERT_TRUE(pd.wait(pbase + 5)) << "rank " << r;
      ASSERT_TRUE(cd.wait(cbase + 5)) << "rank " << r;
      for (size_t i = 0; i < pd.records.size(); ++i)
        EXPECT_EQ(pd.records[i].status, NEXAR_OK) << pd.records[i].message;
      for (size_t i = 0; i < cd.records.size(); ++i)
        EXPECT_EQ(cd.records[i].status, NEXAR_OK) << cd.records[i].message;
      EXPECT_EQ(p_in, static_cast<int32_t>((r + n - 2) % n));
      EXPECT_EQ(c_in, -static_cast<int32_t>(e.group[(k + m - 1) % m]) - 1);
      EXPECT_EQ(pscan, static_cast<int32_t>(r + 1));
      EXPECT_EQ(cscan, static_cast<int32_t>(k + 1));
      for (uint32_t j = 0; j < n; ++j)
        for (size_t i = 0; i < pcount; i += 997)
          ASSERT_EQ(precv[j * pcount + i], static_cast<int32_t>(j * 1000000 + r * 10000 + i));
      for (uint32_t j = 0; j < m; ++j)
        for (size_t i = 0; i < ccount; i += 997)
          ASSERT_EQ(crecv[j * ccount + i],
                    -static_cast<int32_t>(e.group[j] * 1000000 + k * 10000 + i));
    }
    nexar_comm_destroy(child);
  });
}

// A split of a split, and the grandchildren next to their parents.
TEST(Split, SplitOfSplit) {
  const uint32_t n = 8;
  World w(n);
  ASSERT_TRUE(w.ok());
  on_each_rank(n, [&](uint32_t r) {
    nexar_comm_t *half = nullptr, *quarter = nullptr, *again = nullptr;
    NX_OK(nexar_comm_split(w[r], r / 4, 0, &half, nullptr, nullptr));  // {0..3}, {4..7}
    ASSERT_EQ(nexar_comm_size(half), 4u);
    const uint32_t hr = nexar_comm_rank(half);
    ASSERT_EQ(hr, r % 4);
    // In each half: even and odd half ranks, reversed by key.
    NX_OK(nexar_comm_split(half, hr % 2, 10 - hr, &quarter, nullptr, nullptr));
    // Parent ranks of the quarter, by quarter rank: e.g. {2, 0} for r in {0, 2}.
    const uint32_t base = (r / 4) * 4, odd = hr % 2;
    Expected e{{base + 2 + odd, base + odd}, hr < 2 ? 1u : 0u};
    exercise(quarter, e, iota(n));
    // The same colors again: a new generation, so a new, separate communicator.
    NX_OK(nexar_comm_split(half, hr % 2, 10 - hr, &again, nullptr, nullptr));
    exercise(again, e, iota(n));
    exercise(quarter, e, iota(n));
    NX_OK(nexar_barrier(half, nullptr, nullptr));
    NX_OK(nexar_barrier(w[r], nullptr, nullptr));
    nexar_comm_destroy(again);
    nexar_comm_destroy(quarter);
    nexar_comm_destroy(half);
  });
}

// The destroy-order rule: parents may go first. A child keeps the engine and
// its connections; the last communicator on an engine stops it.
TEST(Split, ParentDestroyedBeforeChildren) {
  const uint32_t n = 4;
  std::vector<nexar_comm_t *> parent(n, nullptr), child(n, nullptr), grandchild(n, nullptr);
  NX_OK(nexar_bootstrap_local(parent.data(), n, nullptr));
  on_each_rank(n, [&](uint32_t r) {
    NX_OK(nexar_comm_split(parent[r], 0, n - r, &child[r], nullptr, nullptr));
    NX_OK(nexar_comm_split(child[r], 0, 0, &grandchild[r], nullptr, nullptr));
  });
  for (uint32_t r = 0; r < n; ++r)
    nexar_comm_destroy(parent[r]);
  // Child rank k is parent rank n-1-k; the grandchild keeps the child's order.
  std::vector<uint32_t> color(n, 0), key(n), id(n);
  for (uint32_t r = 0; r < n; ++r)
    key[r] = n - r, id[r] = r;
  on_each_rank(n, [&](uint32_t r) {
    const Expected e = expected_for(r, color, key);
    exercise(child[r], e, id);
    exercise(grandchild[r], e, id);
  });
  // Destroy the middle generation next: the grandchildren still work.
  for (uint32_t r = 0; r < n; ++r)
    nexar_comm_destroy(child[r]);
  on_each_rank(n, [&](uint32_t r) { exercise(grandchild[r], expected_for(r, color, key), id); });
  for (uint32_t r = 0; r < n; ++r)
    nexar_comm_destroy(grandchild[r]);
}

// Children first, then the parent, with operations still pending on a child:
// they end with NEXAR_ERR_CLOSED, and the parent is unaffected.
TEST(Split, ChildDestroyedWithPendingOperations) {
  const uint32_t n = 3;
  World w(n);
  ASSERT_TRUE(w.ok());
  std::vector<nexar_comm_t *> child(n, nullptr);
  on_each_rank(
      n, [&](uint32_t r) { NX_OK(nexar_comm_split(w[r], 1, 0, &child[r], nullptr, nullptr)); });
  Completions done;
  int32_t buf = 0;
  // Nobody sends: this receive is pending when its communicator goes away.
  NX_OK(nexar_recv(child[0], &buf, 4, 1, 3, Completions::callback, &done));
  for (uint32_t r = 0; r < n; ++r)
    nexar_comm_destroy(child[r]);
  ASSERT_EQ(done.count(), 1u);
  EXPECT_EQ(done.records[0].status, NEXAR_ERR_CLOSED) << done.records[0].message;
  on_each_rank(n, [&](uint32_t r) {
    NX_OK(nexar_barrier(w[r], nullptr, nullptr));
    int32_t s[3] = {1, 2, 3}, o[3];
    NX_OK(nexar_alltoall(w[r], s, o, 1, NEXAR_DTYPE_I32, nullptr, nullptr));
  });
}

// Aborting a child fails the child's operations, not the parent's.
TEST(Split, AbortedChildLeavesParentAlone) {
  const uint32_t n = 3;
  World w(n);
  ASSERT_TRUE(w.ok());
  std::vector<nexar_comm_t *> child(n, nullptr);
  on_each_rank(
      n, [&](uint32_t r) { NX_OK(nexar_comm_split(w[r], 0, 0, &child[r], nullptr, nullptr)); });
  Completions done;
  NX_OK(nexar_barrier(child[1], Completions::callback, &done));  // waits for ranks 0 and 2
  NX_OK(nexar_comm_abort(child[0]));
  ASSERT_TRUE(done.wait(1, 10));
  EXPECT_EQ(done.records[0].status, NEXAR_ERR_ABORTED) << done.records[0].message;
  EXPECT_EQ(nexar_comm_get_async_error(w[1], nullptr), NEXAR_OK);
  on_each_rank(n, [&](uint32_t r) { NX_OK(nexar_barrier(w[r], nullptr, nullptr)); });
  for (auto *c : child)
    nexar_comm_destroy(c);
}

// Non-blocking: *out is set when the callback runs.
TEST(Split, NonBlockingSetsOutBeforeCallback) {
  const uint32_t n = 3;
  World w(n);
  ASSERT_TRUE(w.ok());
  struct Seen {
    nexar_comm_t **out;
    std::atomic<nexar_comm_t *> at_callback{nullptr};
    Completions done;
  };
  std::vector<nexar_comm_t *> child(n, nullptr);
  std::vector<std::unique_ptr<Seen>> seen;
  for (uint32_t r = 0; r < n; ++r) {
    seen.push_back(std::make_unique<Seen>());
    seen[r]->out = &child[r];
  }
  auto cb = [](void *ud, const nexar_completion_t *c) {
    auto *s = static_cast<Seen *>(ud);
    s->at_callback = *s->out;
    Completions::callback(&s->done, c);
  };
  for (uint32_t r = 0; r < n; ++r)
    NX_OK(nexar_comm_split(w[r], 0, r, &child[r], cb, seen[r].get()));
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(seen[r]->done.wait(1));
    EXPECT_EQ(seen[r]->done.records[0].status, NEXAR_OK) << seen[r]->done.records[0].message;
    EXPECT_NE(seen[r]->at_callback.load(), nullptr) << "rank " << r;
    EXPECT_EQ(seen[r]->at_callback.load(), child[r]);
  }
  on_each_rank(n, [&](uint32_t r) {
    exercise(child[r], expected_for(r, {0, 0, 0}, iota(3)), iota(3));
  });
  for (auto *c : child)
    nexar_comm_destroy(c);
}

TEST(Split, RejectedWithoutCallback) {
  World w(2);
  ASSERT_TRUE(w.ok());
  Completions done;
  nexar_comm_t *out = nullptr;
  EXPECT_EQ(nexar_comm_split(nullptr, 0, 0, &out, Completions::callback, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_comm_split(w[0], 0, 0, nullptr, Completions::callback, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nexar_last_error_message()).find("out"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(done.count(), 0u);
  // Nothing was numbered: a split and a barrier still line up.
  on_each_rank(2, [&](uint32_t r) {
    nexar_comm_t *c = nullptr;
    NX_OK(nexar_comm_split(w[r], 0, 0, &c, nullptr, nullptr));
    NX_OK(nexar_barrier(c, nullptr, nullptr));
    NX_OK(nexar_barrier(w[r], nullptr, nullptr));
    nexar_comm_destroy(c);
  });
}

// A split among ranks that issued another collective at that number fails
// with NEXAR_ERR_MISMATCH and makes nothing.
TEST(Split, MismatchWithAnotherCollective) {
  nexar_comm_options_t opts;
  ASSERT_EQ(nexar_comm_options_init(&opts, sizeof opts), NEXAR_OK);
  opts.collective_timeout_ms = 5000;
  opts.barrier_timeout_ms = 5000;
  World w(2, &opts);
  ASSERT_TRUE(w.ok());
  Completions done;
  nexar_comm_t *out = reinterpret_cast<nexar_comm_t *>(0x1);
  int32_t s[2] = {1, 2}, o[2];
  NX_OK(nexar_comm_split(w[0], 0, 0, &out, Completions::callback, &done));
  NX_OK(nexar_alltoall(w[1], s, o, 1, NEXAR_DTYPE_I32, Completions::callback, &done));
  ASSERT_TRUE(done.wait(2, 20));
  for (auto &rec : done.records)
    EXPECT_EQ(rec.status, NEXAR_ERR_MISMATCH) << rec.message;
  EXPECT_EQ(out, nullptr);
}

}  // namespace
