// Alltoall, gather, scatter, scan and exscan through the C ABI, on worlds of
// 1 to 13 ranks: counts 0, 1, below the world size, odd and a few MiB;
// different data on every rank and element; every root; in place; several
// collectives outstanding at once; arguments rejected up front.
#include <atomic>
#include <cstring>
#include <memory>

#include "harness.h"

using namespace nexar_test;

namespace {

// A byte that differs with (a, b, i): rank, block and position.
uint8_t byte_of(uint64_t a, uint64_t b, uint64_t i) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 1) * 0xC2B2AE3D27D4EB4Full;
  x += i * 0x165667B19E3779F9ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<uint8_t>(x);
}

void fill(uint8_t *p, size_t bytes, uint64_t a, uint64_t b) {
  for (size_t i = 0; i < bytes; ++i)
    p[i] = byte_of(a, b, i);
}

// Index of the first byte that differs from fill(a, b), or -1.
long long first_diff(const uint8_t *p, size_t bytes, uint64_t a, uint64_t b) {
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != byte_of(a, b, i)) return static_cast<long long>(i);
  return -1;
}

// Element counts to try on a world of n: 0, 1, fewer than n, odd, larger.
std::vector<size_t> small_counts(uint32_t n) {
  std::vector<size_t> c = {0, 1, 3, 1001};
  if (n > 2) c.push_back(n - 1);
  return c;
}

class Exchange : public ::testing::TestWithParam<uint32_t> {
 public:
  void SetUp() override {
    w_ = std::make_unique<World>(GetParam());
    ASSERT_TRUE(w_->ok());
  }
  uint32_t n() const { return GetParam(); }
  nexar_comm_t *comm(uint32_t r) const { return (*w_)[r]; }
  std::unique_ptr<World> w_;
};

// ---- alltoall ------------------------------------------------------------------

void check_alltoall(const Exchange &t, size_t count, nexar_dtype_t dtype, bool in_place) {
  const uint32_t n = t.GetParam();
  const size_t esize = nexar_dtype_size(dtype), block = count * esize;
  SCOPED_TRACE(testing::Message() << "alltoall n=" << n << " count=" << count << " dtype=" << dtype
                                  << (in_place ? " in place" : ""));
  // Rank r sends fill(r, j) as block j; block j of its result is fill(j, r).
  on_each_rank(n, [&](uint32_t r) {
    std::vector<uint8_t> send(block * n + 1), recv(block * n + 1, 0xEE);
    for (uint32_t j = 0; j < n; ++j)
      fill(send.data() + j * block, block, r, j);
    uint8_t *out = in_place ? send.data() : recv.data();
    NX_OK(nexar_alltoall(t.comm(r), send.data(), out, count, dtype, nullptr, nullptr));
    for (uint32_t j = 0; j < n; ++j)
      EXPECT_EQ(first_diff(out + j * block, block, j, r), -1) << "rank " << r << " block " << j;
    if (!in_place) EXPECT_EQ(recv[block * n], 0xEE) << "rank " << r << " wrote past the end";
  });
}

TEST_P(Exchange, Alltoall) {
  for (size_t count : small_counts(n()))
    check_alltoall(*this, count, NEXAR_DTYPE_I32, false);
  check_alltoall(*this, 7, NEXAR_DTYPE_U8, false);
  check_alltoall(*this, 5, NEXAR_DTYPE_F16, true);
  check_alltoall(*this, 1001, NEXAR_DTYPE_F64, true);
  // Blocks of about 64 KiB: every step at once on small worlds, in order on large.
  check_alltoall(*this, 16411, NEXAR_DTYPE_I32, false);
  // A few MiB per rank, steps in order.
  const size_t big = ((3u << 20) / 4 / n()) | 1;
  check_alltoall(*this, big, NEXAR_DTYPE_I32, false);
  check_alltoall(*this, big, NEXAR_DTYPE_U32, true);
}

// ---- gather and scatter --------------------------------------------------------

void check_gather(const Exchange &t, size_t count, nexar_dtype_t dtype, uint32_t root) {
  const uint32_t n = t.GetParam();
  const size_t block = count * nexar_dtype_size(dtype);
  SCOPED_TRACE(testing::Message() << "gather n=" << n << " count=" << count << " root=" << root);
  on_each_rank(n, [&](uint32_t r) {
    std::vector<uint8_t> send(block + 1), recv;
    fill(send.data(), block, r, 1000 + root);
    // recvbuf matters on the root only: NULL elsewhere.
    if (r == root) recv.assign(block * n + 1, 0xEE);
    NX_OK(nexar_gather(t.comm(r), send.data(), r == root ? recv.data() : nullptr, count, dtype,
                       root, nullptr, nullptr));
    if (r != root) return;
    for (uint32_t j = 0; j < n; ++j)
      EXPECT_EQ(first_diff(recv.data() + j * block, block, j, 1000 + root), -1) << "block " << j;
    EXPECT_EQ(recv[block * n], 0xEE) << "wrote past the end";
  });
}

void check_scatter(const Exchange &t, size_t count, nexar_dtype_t dtype, uint32_t root) {
  const uint32_t n = t.GetParam();
  const size_t block = count * nexar_dtype_size(dtype);
  SCOPED_TRACE(testing::Message() << "scatter n=" << n << " count=" << count << " root=" << root);
  on_each_rank(n, [&](uint32_t r) {
    std::vector<uint8_t> send, recv(block + 1, 0xEE);
    // sendbuf matters on the root only: NULL elsewhere.
    if (r == root) {
      send.resize(block * n);
      for (uint32_t j = 0; j < n; ++j)
        fill(send.data() + j * block, block, 2000 + root, j);
    }
    NX_OK(nexar_scatter(t.comm(r), r == root ? send.data() : nullptr, recv.data(), count, dtype,
                        root, nullptr, nullptr));
    EXPECT_EQ(first_diff(recv.data(), block, 2000 + root, r), -1) << "rank " << r;
    EXPECT_EQ(recv[block], 0xEE) << "rank " << r << " wrote past the end";
  });
}

TEST_P(Exchange, GatherEveryRoot) {
  for (uint32_t root = 0; root < n(); ++root) {
    check_gather(*this, 1, NEXAR_DTYPE_I32, root);
    check_gather(*this, 333, NEXAR_DTYPE_F16, root);  // odd, tree on 5+ ranks
  }
  for (size_t count : small_counts(n()))
    check_gather(*this, count, NEXAR_DTYPE_U8, n() / 2);
  check_gather(*this, 9000, NEXAR_DTYPE_I32, n() - 1);                // 36 KiB blocks: flat
  check_gather(*this, (1u << 20) / 4 + 1, NEXAR_DTYPE_I32, n() / 3);  // 1 MiB per rank
}

TEST_P(Exchange, ScatterEveryRoot) {
  for (uint32_t root = 0; root < n(); ++root) {
    check_scatter(*this, 1, NEXAR_DTYPE_I64, root);
    check_scatter(*this, 333, NEXAR_DTYPE_BF16, root);
  }
  for (size_t count : small_counts(n()))
    check_scatter(*this, count, NEXAR_DTYPE_U8, n() - 1);
  check_scatter(*this, 9000, NEXAR_DTYPE_I32, 0);
  check_scatter(*this, (1u << 20) / 4 + 1, NEXAR_DTYPE_I32, n() / 2);
}

// The root's buffers may overlap: sendbuf == recvbuf on the root.
TEST_P(Exchange, GatherScatterRootBuffersOverlap) {
  const uint32_t N = n();
  for (size_t count : {size_t{3}, size_t{20000}}) {
    const size_t block = count * 4;
    const uint32_t root = N - 1;
    on_each_rank(N, [&](uint32_t r) {
      std::vector<uint8_t> buf(block * N);
      fill(buf.data(), block, r, 77);
      NX_OK(nexar_gather(comm(r), buf.data(), r == root ? buf.data() : nullptr, count,
                         NEXAR_DTYPE_I32, root, nullptr, nullptr));
      if (r == root)
        for (uint32_t j = 0; j < N; ++j)
          EXPECT_EQ(first_diff(buf.data() + j * block, block, j, 77), -1) << "block " << j;
      if (r == root)
        for (uint32_t j = 0; j < N; ++j)
          fill(buf.data() + j * block, block, 88, j);
      NX_OK(nexar_scatter(comm(r), r == root ? buf.data() : nullptr, buf.data(), count,
                          NEXAR_DTYPE_I32, root, nullptr, nullptr));
      EXPECT_EQ(first_diff(buf.data(), block, 88, r), -1) << "rank " << r;
    });
  }
}

// ---- scan and exscan -------------------------------------------------------------

// Typed values and the sequential reference.
template <class T>
struct Typed;
template <>
struct Typed<int32_t> {
  static constexpr nexar_dtype_t dtype = NEXAR_DTYPE_I32;
};
template <>
struct Typed<int64_t> {
  static constexpr nexar_dtype_t dtype = NEXAR_DTYPE_I64;
};
template <>
struct Typed<uint8_t> {
  static constexpr nexar_dtype_t dtype = NEXAR_DTYPE_U8;
};
template <>
struct Typed<double> {
  static constexpr nexar_dtype_t dtype = NEXAR_DTYPE_F64;
};
template <>
struct Typed<float> {
  static constexpr nexar_dtype_t dtype = NEXAR_DTYPE_F32;
};

// x of rank r, element i. Integers: anything (odd for PROD, so products do not
// collapse to 0); floats: small integers, so every sum is exact whatever the
// grouping.
template <class T>
T value(uint32_t r, size_t i, nexar_op_t op) {
  const uint64_t h = static_cast<uint64_t>(byte_of(r, 5, i)) |
                     static_cast<uint64_t>(byte_of(r, 6, i)) << 8 |
                     static_cast<uint64_t>(byte_of(r, 7, i)) << 16 |
                     static_cast<uint64_t>(byte_of(r, 8, i)) << 24 |
                     static_cast<uint64_t>(byte_of(r, 9, i)) << 32 |
                     static_cast<uint64_t>(byte_of(r, 10, i)) << 56;
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(static_cast<int>(h % 17) - 8);
  } else {
    T v = static_cast<T>(h);
    return op == NEXAR_OP_PROD ? static_cast<T>(v | 1) : v;
  }
}

template <class T>
T combine(T a, T b, nexar_op_t op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap around, as the kernels do
    switch (op) {
      case NEXAR_OP_SUM:
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case NEXAR_OP_PROD:
        return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) *
                                             static_cast<uint64_t>(static_cast<U>(b))));
      default:
        break;
    }
  } else {
    if (op == NEXAR_OP_SUM) return a + b;
    if (op == NEXAR_OP_PROD) return a * b;
  }
  return op == NEXAR_OP_MIN ? std::min(a, b) : std::max(a, b);
}

template <class T>
void check_scan(const Exchange &t, size_t count, nexar_op_t op, bool exclusive, bool in_place) {
  const uint32_t n = t.GetParam();
  const nexar_dtype_t dtype = Typed<T>::dtype;
  SCOPED_TRACE(testing::Message() << (exclusive ? "exscan" : "scan") << " n=" << n
                                  << " count=" << count << " dtype=" << dtype << " op=" << op
                                  << (in_place ? " in place" : ""));
  // prefix[r] = op(x0, ..., xr), left to right.
  std::vector<std::vector<T>> prefix(n, std::vector<T>(count));
  for (uint32_t r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      prefix[r][i] = r ? combine(prefix[r - 1][i], value<T>(r, i, op), op) : value<T>(0, i, op);
  on_each_rank(n, [&](uint32_t r) {
    std::vector<T> send(count + 1), recv(count + 1, T(42));
    for (size_t i = 0; i < count; ++i)
      send[i] = value<T>(r, i, op);
    T *out = in_place ? send.data() : recv.data();
    // exscan: rank 0's recvbuf is not touched, so it may be NULL.
    const bool null_out = exclusive && r == 0 && !in_place;
    if (exclusive)
      NX_OK(nexar_exscan(t.comm(r), send.data(), null_out ? nullptr : out, count, dtype, op,
                         nullptr, nullptr));
    else
      NX_OK(nexar_scan(t.comm(r), send.data(), out, count, dtype, op, nullptr, nullptr));
    size_t bad = 0;
    for (size_t i = 0; i < count && bad < 3; ++i) {
      T want = exclusive ? (r ? prefix[r - 1][i] : value<T>(0, i, op)) : prefix[r][i];
      if (exclusive && r == 0 && !in_place) continue;  // NULL, nothing to look at
      if (memcmp(&out[i], &want, sizeof(T)) != 0) {
        ++bad;
        ADD_FAILURE() << "rank " << r << " element " << i << ": got " << +out[i] << ", want "
                      << +want;
      }
    }
    if (!in_place) EXPECT_EQ(recv[count], T(42)) << "rank " << r << " wrote past the end";
  });
}

TEST_P(Exchange, Scan) {
  for (size_t count : small_counts(n()))
    check_scan<int32_t>(*this, count, NEXAR_OP_SUM, false, false);
  for (nexar_op_t op : {NEXAR_OP_PROD, NEXAR_OP_MIN, NEXAR_OP_MAX})
    check_scan<int32_t>(*this, 257, op, false, false);
  check_scan<int64_t>(*this, 31, NEXAR_OP_PROD, false, true);
  check_scan<uint8_t>(*this, 1001, NEXAR_OP_SUM, false, true);
  check_scan<double>(*this, 99, NEXAR_OP_SUM, false, false);
  check_scan<float>(*this, 99, NEXAR_OP_MIN, false, true);
  check_scan<int32_t>(*this, (1u << 20) / 4 + 3, NEXAR_OP_SUM, false, false);  // 1 MiB
}

TEST_P(Exchange, Exscan) {
  for (size_t count : small_counts(n()))
    check_scan<int32_t>(*this, count, NEXAR_OP_SUM, true, false);
  for (nexar_op_t op : {NEXAR_OP_PROD, NEXAR_OP_MIN, NEXAR_OP_MAX})
    check_scan<int64_t>(*this, 129, op, true, false);
  check_scan<int32_t>(*this, 77, NEXAR_OP_MAX, true, true);
  check_scan<uint8_t>(*this, 1001, NEXAR_OP_SUM, true, true);
  check_scan<double>(*this, 99, NEXAR_OP_SUM, true, true);
  check_scan<float>(*this, 99, NEXAR_OP_MAX, true, false);
  check_scan<int32_t>(*this, (1u << 20) / 4 + 3, NEXAR_OP_SUM, true, true);
}

// ---- several at once ---------------------------------------------------------------

// Every rank issues the same collectives in the same order without waiting,
// mixing sizes and algorithms, then waits for all of them.
TEST_P(Exchange, SeveralOutstanding) {
  const uint32_t N = n();
  on_each_rank(N, [&](uint32_t r) {
    Completions done;
    const size_t a1 = 5, a2 = 40000, g = 3, s = 1000, sc = 17;
    std::vector<uint8_t> a1_send(a1 * 4 * N), a1_recv(a1 * 4 * N);
    std::vector<uint8_t> a2_buf(a2 * 4 * N);
    std::vector<uint8_t> g_send(g * 4), g_recv(g * 4 * N);
    std::vector<uint8_t> s_send(s * 4 * N), s_recv(s * 4);
    std::vector<int32_t> sc_send(sc), sc_recv(sc), ex_buf(sc);
    for (uint32_t j = 0; j < N; ++j) {
      fill(a1_send.data() + j * a1 * 4, a1 * 4, r, j);
      fill(a2_buf.data() + j * a2 * 4, a2 * 4, r, 100 + j);
      fill(s_send.data() + j * s * 4, s * 4, 300, j);
    }
    fill(g_send.data(), g * 4, r, 200);
    for (size_t i = 0; i < sc; ++i)
      sc_send[i] = ex_buf[i] = static_cast<int32_t>(r * 1000 + i);
    const uint32_t groot = N - 1, sroot = 0;
    auto cb = Completions::callback;
    NX_OK(nexar_alltoall(comm(r), a1_send.data(), a1_recv.data(), a1, NEXAR_DTYPE_I32, cb, &done));
    NX_OK(
        nexar_gather(comm(r), g_send.data(), g_recv.data(), g, NEXAR_DTYPE_I32, groot, cb, &done));
    NX_OK(nexar_barrier(comm(r), cb, &done));
    NX_OK(
        nexar_scatter(comm(r), s_send.data(), s_recv.data(), s, NEXAR_DTYPE_I32, sroot, cb, &done));
    NX_OK(nexar_scan(comm(r), sc_send.data(), sc_recv.data(), sc, NEXAR_DTYPE_I32, NEXAR_OP_SUM, cb,
                     &done));
    NX_OK(nexar_alltoall(comm(r), a2_buf.data(), a2_buf.data(), a2, NEXAR_DTYPE_I32, cb, &done));
    NX_OK(nexar_exscan(comm(r), ex_buf.data(), ex_buf.data(), sc, NEXAR_DTYPE_I32, NEXAR_OP_MAX, cb,
                       &done));
    ASSERT_TRUE(done.wait(7, 60)) << "rank " << r << ": " << done.count() << " of 7 completed";
    for (auto &rec : done.records)
      EXPECT_EQ(rec.status, NEXAR_OK) << "rank " << r << ": " << rec.message;
    for (uint32_t j = 0; j < N; ++j) {
      EXPECT_EQ(first_diff(a1_recv.data() + j * a1 * 4, a1 * 4, j, r), -1);
      EXPECT_EQ(first_diff(a2_buf.data() + j * a2 * 4, a2 * 4, j, 100 + r), -1);
      if (r == groot) EXPECT_EQ(first_diff(g_recv.data() + j * g * 4, g * 4, j, 200), -1);
    }
    EXPECT_EQ(first_diff(s_recv.data(), s * 4, 300, r), -1);
    for (size_t i = 0; i < sc; ++i) {
      int32_t sum = 0;
      for (uint32_t k = 0; k <= r; ++k)
        sum += static_cast<int32_t>(k * 1000 + i);
      EXPECT_EQ(sc_recv[i], sum) << "scan rank " << r << " element " << i;
      // MAX over ranks 0..r-1 is rank r-1's value; rank 0 keeps its input.
      const int32_t ex = static_cast<int32_t>((r ? r - 1 : 0) * 1000 + i);
      EXPECT_EQ(ex_buf[i], ex) << "exscan rank " << r << " element " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, Exchange, ::testing::Values(1u, 2u, 3u, 4u, 5u, 7u, 8u, 13u),
                         [](const testing::TestParamInfo<uint32_t> &i) {
                           return "N" + std::to_string(i.param);
                         });

// ---- rejected up front --------------------------------------------------------------

TEST(ExchangeArgs, RejectedWithoutCallback) {
  World w(3);
  ASSERT_TRUE(w.ok());
  Completions done;
  auto cb = Completions::callback;
  int32_t buf[9] = {0};
  EXPECT_EQ(nexar_gather(w[0], buf, buf, 3, NEXAR_DTYPE_I32, 3, cb, &done), NEXAR_ERR_INVALID_RANK);
  EXPECT_NE(std::string(nexar_last_error_message()).find("root 3"), std::string::npos)
      << nexar_last_error_message();
  EXPECT_EQ(nexar_scatter(w[1], buf, buf, 3, NEXAR_DTYPE_I32, 1000, cb, &done),
            NEXAR_ERR_INVALID_RANK);
  EXPECT_EQ(nexar_gather(w[2], buf, buf, 1, NEXAR_DTYPE_I32, UINT32_MAX, nullptr, nullptr),
            NEXAR_ERR_INVALID_RANK);
  // NULL buffers that this rank must use, unknown dtype or op.
  EXPECT_EQ(nexar_alltoall(w[0], nullptr, buf, 3, NEXAR_DTYPE_I32, cb, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_gather(w[1], buf, nullptr, 3, NEXAR_DTYPE_I32, 1, cb, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_scatter(w[2], nullptr, buf, 3, NEXAR_DTYPE_I32, 2, cb, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_scan(w[0], buf, buf, 3, NEXAR_DTYPE_I32, 99, cb, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_exscan(w[1], buf, nullptr, 3, NEXAR_DTYPE_I32, NEXAR_OP_SUM, cb, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_alltoall(w[2], buf, buf, 3, 1234, cb, &done), NEXAR_ERR_INVALID_ARGUMENT);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(done.count(), 0u) << "a rejected call invoked its callback";
  // Nothing was numbered: the next collective still lines up on every rank.
  on_each_rank(3, [&](uint32_t r) {
    int32_t s[3] = {1, 2, 3}, out[3];
    NX_OK(nexar_alltoall(w[r], s, out, 1, NEXAR_DTYPE_I32, nullptr, nullptr));
  });
}

// Ranks that issue different collectives fail with NEXAR_ERR_MISMATCH, not a
// hang: alltoall's first message meets gather's on one tag.
TEST(ExchangeArgs, DifferentCollectivesMismatch) {
  nexar_comm_options_t opts;
  ASSERT_EQ(nexar_comm_options_init(&opts, sizeof opts), NEXAR_OK);
  opts.collective_timeout_ms = 10000;
  World w(3, &opts);
  ASSERT_TRUE(w.ok());
  Completions done;
  // Ranks 0 and 1 agree with each other: each needs a buffer of its own.
  int32_t send[3] = {1, 2, 3}, recv0[3] = {0}, recv1[3] = {0};
  ASSERT_EQ(nexar_alltoall(w[0], send, recv0, 1, NEXAR_DTYPE_I32, Completions::callback, &done),
            NEXAR_OK);
  ASSERT_EQ(nexar_alltoall(w[1], send, recv1, 1, NEXAR_DTYPE_I32, Completions::callback, &done),
            NEXAR_OK);
  ASSERT_EQ(nexar_gather(w[2], send, nullptr, 1, NEXAR_DTYPE_I32, 0, Completions::callback, &done),
            NEXAR_OK);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(done.wait(3, 30));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "reported by the timeout, not the check";
  int mismatches = 0;
  for (auto &rec : done.records)
    mismatches += rec.status == NEXAR_ERR_MISMATCH;
  EXPECT_GE(mismatches, 2);
}

}  // namespace
