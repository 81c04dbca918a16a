// nexar_allreduce_bucketed and nexar_allreduce_compressed through the C ABI
// on in-process worlds of real QUIC peers: bucketed results against one
// nexar_allreduce per tensor (every dtype and op, 1 to 7 ranks, buckets
// that split tensors), a mismatch in the middle of a bucketed call, TopK and
// RandomK sums against a reference computed here (with error feedback over
// two calls), mismatched compressors, and SGD with TopK 1 % converging to the
// dense run's loss.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "harness.h"

using namespace nexar_test;

namespace {

struct TypeInfo {
  nexar_dtype_t dt;
  size_t size;
  bool is_float;
  bool is_signed;
};
constexpr TypeInfo kTypes[] = {
    {NEXAR_DTYPE_F32, 4, true, true},   {NEXAR_DTYPE_F64, 8, true, true},
    {NEXAR_DTYPE_F16, 2, true, true},   {NEXAR_DTYPE_BF16, 2, true, true},
    {NEXAR_DTYPE_I8, 1, false, true},   {NEXAR_DTYPE_I32, 4, false, true},
    {NEXAR_DTYPE_I64, 8, false, true},  {NEXAR_DTYPE_U8, 1, false, false},
    {NEXAR_DTYPE_U32, 4, false, false}, {NEXAR_DTYPE_U64, 8, false, false},
};
constexpr nexar_op_t kOps[] = {NEXAR_OP_SUM, NEXAR_OP_PROD, NEXAR_OP_MIN, NEXAR_OP_MAX};

// Small integers, stored exactly in every dtype.
void store_int(uint8_t *p, const TypeInfo &t, int v) {
  switch (t.dt) {
    case NEXAR_DTYPE_F32: {
      float f = static_cast<float>(v);
      memcpy(p, &f, 4);
      return;
    }
    case NEXAR_DTYPE_F64: {
      double d = v;
      memcpy(p, &d, 8);
      return;
    }
    case NEXAR_DTYPE_F16:
    case NEXAR_DTYPE_BF16: {
      float f = static_cast<float>(v);
      uint32_t b;
      memcpy(&b, &f, 4);
      uint16_t h;
      if (t.dt == NEXAR_DTYPE_BF16)
        h = static_cast<uint16_t>(b >> 16);
      else if (v == 0)
        h = 0;
      else
        h = static_cast<uint16_t>(((b >> 16) & 0x8000) | ((((b >> 23) & 0xff) - 127 + 15) << 10) |
                                  ((b >> 13) & 0x3ff));
      memcpy(p, &h, 2);
      return;
    }
    default: {
      const int64_t x = v;
      memcpy(p, &x, t.size);  // little-endian: the low bytes
    }
  }
}

// Values that keep every reduction exact: PROD of up to 7 ranks stays
// within 2^7, sums within a few hundred.
std::vector<uint8_t> int_values(size_t count, const TypeInfo &t, nexar_op_t op, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(count * t.size);
  for (size_t i = 0; i < count; ++i) {
    int v;
    if (op == NEXAR_OP_PROD) {
      v = 1 + static_cast<int>(rng() % 2);
      if (t.is_signed && rng() % 2) v = -v;
    } else {
      v = static_cast<int>(rng() % 17);
      if (t.is_signed) v -= 8;
    }
    store_int(out.data() + i * t.size, t, v);
  }
  return out;
}

// Each rank's tensors, filled; reduced per tensor with nexar_allreduce
// (the reference) and together with nexar_allreduce_bucketed; they must match.
// With flat, the bucketed call's tensors are cut from one buffer, one after
// the other except for a gap after every fifth: buckets read in place and
// packed buckets alternate.
void check_bucketed(uint32_t n, const TypeInfo &t, nexar_op_t op, const std::vector<size_t> &counts,
                    size_t bucket_bytes, bool async, bool flat = false) {
  World w(n);
  ASSERT_TRUE(w.ok());
  on_each_rank(n, [&](uint32_t r) {
    std::vector<std::vector<uint8_t>> bucketed, reference;
    std::vector<nexar_tensor_t> tensors;
    for (size_t i = 0; i < counts.size(); ++i) {
      bucketed.push_back(int_values(counts[i], t, op, r * 7919 + static_cast<uint32_t>(i)));
      reference.push_back(bucketed.back());
    }
    std::vector<uint8_t> one_buffer;
    std::vector<size_t> at;
    for (size_t i = 0; i < bucketed.size(); ++i) {
      if (i % 5 == 4) one_buffer.resize(one_buffer.size() + t.size);  // the gap
      at.push_back(one_buffer.size());
      one_buffer.insert(one_buffer.end(), bucketed[i].begin(), bucketed[i].end());
    }
    for (size_t i = 0; i < bucketed.size(); ++i) {
      uint8_t *buf = flat ? one_buffer.data() + at[i] : bucketed[i].data();
      tensors.push_back({bucketed[i].empty() ? nullptr : buf, bucketed[i].size() / t.size});
    }
    for (size_t i = 0; i < counts.size(); ++i)
      NX_OK(nexar_allreduce(w[r], reference[i].data(), reference[i].data(), counts[i], t.dt, op,
                            nullptr, nullptr));
    if (async) {
      Completions done;
      NX_OK(nexar_allreduce_bucketed(w[r], tensors.data(), tensors.size(), t.dt, op, bucket_bytes,
                                     Completions::callback, &done));
      ASSERT_TRUE(done.wait(1, 120));
      ASSERT_EQ(done.records[0].status, NEXAR_OK) << done.records[0].message;
    } else {
      NX_OK(nexar_allreduce_bucketed(w[r], tensors.data(), tensors.size(), t.dt, op, bucket_bytes,
                                     nullptr, nullptr));
    }
    if (flat)
      for (size_t i = 0; i < bucketed.size(); ++i)
        std::copy_n(one_buffer.begin() + static_cast<ptrdiff_t>(at[i]), bucketed[i].size(),
                    bucketed[i].begin());
    for (size_t i = 0; i < counts.size(); ++i)
      ASSERT_EQ(bucketed[i], reference[i]) << "rank " << r << " tensor " << i << " of " << counts[i]
                                           << " dtype " << t.dt << " op " << op;
  });
}

std::vector<size_t> random_counts(size_t n, size_t max_count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<size_t> c(n);
  for (auto &x : c)
    x = rng() % 4 == 0 ? 0 : rng() % (max_count + 1);
  return c;
}

TEST(AllreduceBucketed, EqualsOneAllreducePerTensorForEveryDtypeAndOp) {
  for (const TypeInfo &t : kTypes)
    for (nexar_op_t op : kOps)
      check_bucketed(3, t, op, random_counts(10, 3000, static_cast<uint32_t>(t.dt * 4 + op)),
                     1000 * t.size + 3, op == NEXAR_OP_MAX);
}

TEST(AllreduceBucketed, OneToSevenRanksWithMebibyteTensors) {
  const TypeInfo &f32 = kTypes[0];
  for (uint32_t n = 1; n <= 7; ++n) {
    std::vector<size_t> counts = random_counts(24, 20000, n);
    counts[3] = 900000;  // 3.4 MiB: split across buckets
    counts[17] = 300001;
    check_bucketed(n, f32, NEXAR_OP_SUM, counts, (1u << 20) + 2, n % 2 == 0);
  }
}

TEST(AllreduceBucketed, TensorsCutFromOneBufferAreReadInPlace) {
  for (uint32_t n : {1u, 2u, 4u}) {
    std::vector<size_t> counts = random_counts(30, 20000, 40 + n);
    counts[7] = 700000;  // split across buckets
    check_bucketed(n, kTypes[0], NEXAR_OP_SUM, counts, (1u << 20) + 4, n == 2, true);
    check_bucketed(n, kTypes[5], NEXAR_OP_MAX, counts, 100000, false, true);
  }
}

TEST(AllreduceBucketed, FloatResultsAreBitIdenticalOnEveryRank) {
  const uint32_t n = 5;
  World w(n);
  ASSERT_TRUE(w.ok());
  const std::vector<size_t> counts = {5, 70000, 3, 1 << 20, 0, 4097};
  std::vector<std::vector<std::vector<float>>> results(n);
  on_each_rank(n, [&](uint32_t r) {
    std::mt19937 rng(r + 1);
    std::normal_distribution<float> normal(0.0f, 1e3f);
    auto &mine = results[r];
    std::vector<nexar_tensor_t> tensors;
    for (size_t c : counts) {
      mine.emplace_back(c);
      for (auto &x : mine.back())
        x = normal(rng);
    }
    for (auto &m : mine)
      tensors.push_back({m.data(), m.size()});
    NX_OK(nexar_allreduce_bucketed(w[r], tensors.data(), tensors.size(), NEXAR_DTYPE_F32,
                                   NEXAR_OP_SUM, 256 << 10, nullptr, nullptr));
  });
  for (uint32_t r = 1; r < n; ++r)
    for (size_t i = 0; i < counts.size(); ++i)
      ASSERT_TRUE(counts[i] == 0 ||
                  memcmp(results[r][i].data(), results[0][i].data(), counts[i] * 4) == 0)
          << "rank " << r << " tensor " << i;
}

TEST(AllreduceBucketed, AMismatchInTheMiddleFailsOnceAndWritesNothingAfter) {
  World w(2);
  ASSERT_TRUE(w.ok());
  const size_t kTensors = 6, kCount = 1000;
  on_each_rank(2, [&](uint32_t r) {
    // Six buckets of one tensor each; rank 1's last one is shorter, so
    // bucket 5 differs while the number of buckets is the same.
    std::vector<std::vector<float>> t(kTensors, std::vector<float>(kCount, 1.0f + r));
    if (r == 1) t.back().resize(kCount - 1);
    std::vector<nexar_tensor_t> tensors;
    for (auto &x : t)
      tensors.push_back({x.data(), x.size()});
    Completions done;
    NX_OK(nexar_allreduce_bucketed(w[r], tensors.data(), tensors.size(), NEXAR_DTYPE_F32,
                                   NEXAR_OP_SUM, kCount * 4, Completions::callback, &done));
    ASSERT_TRUE(done.wait(1, 60));
    EXPECT_EQ(done.records[0].status, NEXAR_ERR_MISMATCH) << done.records[0].message;
    // Tensors before the failure hold the sum (3), the failed bucket's and
    // every later one's are untouched: a prefix, ending before the last.
    bool untouched_seen = false;
    for (size_t i = 0; i < kTensors; ++i) {
      const bool summed = std::all_of(t[i].begin(), t[i].end(), [](float x) { return x == 3.0f; });
      const bool same = std::all_of(t[i].begin(), t[i].end(),
                                    [&](float x) { return x == 1.0f + static_cast<float>(r); });
      ASSERT_TRUE(summed || same) << "rank " << r << " tensor " << i << " half written";
      if (same) untouched_seen = true;
      ASSERT_FALSE(summed && untouched_seen)
          << "rank " << r << " tensor " << i << " written after an unwritten one";
    }
    EXPECT_TRUE(untouched_seen);
    // Buckets run one after the other: those before the one before the
    // failed one were written for sure.
    for (size_t i = 0; i + 2 < kTensors; ++i)
      EXPECT_EQ(t[i][0], 3.0f) << "rank " << r << " tensor " << i;
    usleep(200000);
    EXPECT_EQ(done.count(), 1u) << "the call completes once";
  });
}

TEST(AllreduceBucketed, RejectsBadArgumentsWithoutCallingBack) {
  World w(1);
  ASSERT_TRUE(w.ok());
  Completions done;
  float x[4] = {1, 2, 3, 4};
  nexar_tensor_t ok = {x, 4}, null_buf = {nullptr, 4};
  EXPECT_EQ(nexar_allreduce_bucketed(nullptr, &ok, 1, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 0,
                                     Completions::callback, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_allreduce_bucketed(w[0], nullptr, 1, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 0,
                                     Completions::callback, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_allreduce_bucketed(w[0], &null_buf, 1, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 0,
                                     Completions::callback, &done),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nexar_last_error_message()).find("tensor 0"), std::string::npos);
  EXPECT_EQ(
      nexar_allreduce_bucketed(w[0], &ok, 1, 99, NEXAR_OP_SUM, 0, Completions::callback, &done),
      NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(
      nexar_allreduce_bucketed(w[0], &ok, 1, NEXAR_DTYPE_F32, 9, 0, Completions::callback, &done),
      NEXAR_ERR_INVALID_ARGUMENT);
  // An empty list completes; a world of one leaves the values.
  NX_OK(nexar_allreduce_bucketed(w[0], nullptr, 0, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 0, nullptr,
                                 nullptr));
  NX_OK(nexar_allreduce_bucketed(w[0], &ok, 1, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 0, nullptr, nullptr));
  EXPECT_EQ(x[3], 4.0f);
  EXPECT_EQ(done.count(), 0u);
}

// ---- compressed ---------------------------------------------------------------

struct CompressorHandle {
  nexar_compressor_t *z = nullptr;
  ~CompressorHandle() { nexar_compressor_destroy(z); }
};

// The k positions of largest |v| (ties to the lower one), ascending.
std::vector<uint32_t> topk_of(const std::vector<float> &v, size_t k) {
  std::vector<uint32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

TEST(AllreduceCompressed, TopkSumsEveryRanksLargestWithErrorFeedback) {
  const uint32_t n = 4;
  const size_t count = 10007, k = 100;  // ratio 0.01
  World w(n);
  ASSERT_TRUE(w.ok());
  // inputs[call][rank]
  std::vector<std::vector<std::vector<float>>> inputs(2, std::vector<std::vector<float>>(n));
  for (int call = 0; call < 2; ++call)
    for (uint32_t r = 0; r < n; ++r) {
      std::mt19937 rng(100 * call + r);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      inputs[call][r].resize(count);
      for (auto &x : inputs[call][r])
        x = normal(rng);
    }
  std::vector<std::vector<std::vector<float>>> got(2, std::vector<std::vector<float>>(n));
  on_each_rank(n, [&](uint32_t r) {
    CompressorHandle h;
    NX_OK(nexar_compressor_create(&h.z, NEXAR_COMPRESS_TOPK, 0.01, count, NEXAR_DTYPE_F32, 1));
    for (int call = 0; call < 2; ++call) {
      got[call][r].assign(count, -1.0f);
      NX_OK(nexar_allreduce_compressed(w[r], inputs[call][r].data(), got[call][r].data(), count,
                                       NEXAR_DTYPE_F32, h.z, nullptr, nullptr));
    }
  });
  // The reference: what each rank compresses (input + residual), its top k,
  // summed in rank order.
  std::vector<std::vector<float>> residual(n, std::vector<float>(count, 0.0f));
  for (int call = 0; call < 2; ++call) {
    std::vector<float> expect(count, 0.0f);
    std::vector<uint8_t> touched(count, 0);
    for (uint32_t r = 0; r < n; ++r) {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i)
        v[i] = residual[r][i] + inputs[call][r][i];
      residual[r] = v;
      for (uint32_t i : topk_of(v, k)) {
        expect[i] += v[i];
        touched[i] = 1;
        residual[r][i] = 0.0f;
      }
    }
    size_t nonzero = 0;
    for (size_t i = 0; i < count; ++i)
      nonzero += touched[i];
    EXPECT_GE(nonzero, k);
    EXPECT_LE(nonzero, n * k);
    for (uint32_t r = 0; r < n; ++r)
      ASSERT_EQ(0, memcmp(got[call][r].data(), expect.data(), count * 4))
          << "call " << call << " rank " << r;
  }
}

TEST(AllreduceCompressed, RandomkKeepsTheSamePositionsOnEveryRank) {
  const uint32_t n = 3;
  const size_t count = 5000, k = 100;  // ratio 0.02
  World w(n);
  ASSERT_TRUE(w.ok());
  std::vector<std::vector<std::vector<float>>> got(2, std::vector<std::vector<float>>(n));
  auto input = [](uint32_t r, size_t i) { return static_cast<float>(1 + (i * 7 + r) % 4); };
  on_each_rank(n, [&](uint32_t r) {
    CompressorHandle h;
    NX_OK(nexar_compressor_create(&h.z, NEXAR_COMPRESS_RANDOMK, 0.02, count, NEXAR_DTYPE_F32, 77));
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i)
      in[i] = input(r, i);
    for (int call = 0; call < 2; ++call) {
      got[call][r].assign(count, -1.0f);
      Completions done;
      NX_OK(nexar_allreduce_compressed(w[r], in.data(), got[call][r].data(), count, NEXAR_DTYPE_F32,
                                       h.z, Completions::callback, &done));
      ASSERT_TRUE(done.wait(1));
      ASSERT_EQ(done.records[0].status, NEXAR_OK) << done.records[0].message;
    }
  });
  std::set<size_t> first;
  for (int call = 0; call < 2; ++call) {
    std::set<size_t> kept;
    for (size_t i = 0; i < count; ++i)
      if (got[call][0][i] != 0.0f) kept.insert(i);
    ASSERT_EQ(kept.size(), k) << "call " << call;
    for (uint32_t r = 1; r < n; ++r)
      ASSERT_EQ(got[call][r], got[call][0]) << "call " << call << " rank " << r;
    // Call 0 sends the inputs; call 1 sends input + residual, which is
    // twice the input where call 0 did not send.
    for (size_t i : kept) {
      float expect = 0;
      for (uint32_t r = 0; r < n; ++r)
        expect += (call == 1 && !first.count(i) ? 2.0f : 1.0f) * input(r, i);
      ASSERT_EQ(got[call][0][i], expect) << "call " << call << " position " << i;
    }
    if (call == 0)
      first = kept;
    else
      EXPECT_NE(kept, first) << "the positions change with every call";
  }
}

void expect_mismatch(int32_t kind, double ratio1, uint64_t seed1) {
  World w(2);
  ASSERT_TRUE(w.ok());
  const size_t count = 4096;
  on_each_rank(2, [&](uint32_t r) {
    CompressorHandle h;
    NX_OK(nexar_compressor_create(&h.z, kind, r == 1 ? ratio1 : 0.01, count, NEXAR_DTYPE_F32,
                                  r == 1 ? seed1 : 5));
    std::vector<float> in(count, 1.0f), out(count, 0.0f);
    Completions done;
    NX_OK(nexar_allreduce_compressed(w[r], in.data(), out.data(), count, NEXAR_DTYPE_F32, h.z,
                                     Completions::callback, &done));
    ASSERT_TRUE(done.wait(1));
    EXPECT_EQ(done.records[0].status, NEXAR_ERR_MISMATCH) << done.records[0].message;
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }))
        << "nothing written";
  });
}

TEST(AllreduceCompressed, MismatchedCompressorsFailWithMismatch) {
  expect_mismatch(NEXAR_COMPRESS_TOPK, 0.02, 5);
  expect_mismatch(NEXAR_COMPRESS_RANDOMK, 0.01, 6);
  expect_mismatch(NEXAR_COMPRESS_RANDOMK, 0.02, 5);
}

TEST(AllreduceCompressed, HalfAndDoublePrecisionAgreeOnEveryRank) {
  const uint32_t n = 3;
  const size_t count = 3001;
  for (nexar_dtype_t dt : {NEXAR_DTYPE_F16, NEXAR_DTYPE_BF16, NEXAR_DTYPE_F64})
    for (int32_t kind : {NEXAR_COMPRESS_TOPK, NEXAR_COMPRESS_RANDOMK}) {
      World w(n);
      ASSERT_TRUE(w.ok());
      const size_t es = dt == NEXAR_DTYPE_F64 ? 8 : 2;
      const TypeInfo t{dt, es, true, true};
      std::vector<std::vector<uint8_t>> out(n);
      on_each_rank(n, [&](uint32_t r) {
        CompressorHandle h;
        NX_OK(nexar_compressor_create(&h.z, kind, 0.05, count, dt, 3));
        std::vector<uint8_t> in = int_values(count, t, NEXAR_OP_SUM, r + 11);
        out[r].assign(count * es, 0xff);
        NX_OK(nexar_allreduce_compressed(w[r], in.data(), out[r].data(), count, dt, h.z, nullptr,
                                         nullptr));
      });
      for (uint32_t r = 1; r < n; ++r)
        ASSERT_EQ(out[r], out[0]) << "dtype " << dt << " kind " << kind;
      size_t nonzero = 0;
      for (size_t i = 0; i < count; ++i)
        nonzero += std::any_of(out[0].begin() + i * es, out[0].begin() + (i + 1) * es,
                               [](uint8_t b) { return b != 0; });
      EXPECT_GT(nonzero, 0u);
      EXPECT_LE(nonzero, n * 150u) << "at most k (150) per rank";
    }
}

TEST(AllreduceCompressed, RejectsBadArguments) {
  World w(1);
  ASSERT_TRUE(w.ok());
  CompressorHandle h;
  EXPECT_EQ(nexar_compressor_create(&h.z, 7, 0.1, 10, NEXAR_DTYPE_F32, 0),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_compressor_create(&h.z, NEXAR_COMPRESS_TOPK, 0.1, 10, NEXAR_DTYPE_I32, 0),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_compressor_create(nullptr, NEXAR_COMPRESS_TOPK, 0.1, 10, NEXAR_DTYPE_F32, 0),
            NEXAR_ERR_INVALID_ARGUMENT);
  NX_OK(nexar_compressor_create(&h.z, NEXAR_COMPRESS_TOPK, 0.5, 10, NEXAR_DTYPE_F32, 0));
  float in[10] = {1, -9, 2, 8, 3, 7, 4, 6, 5, 0}, out[10];
  EXPECT_EQ(nexar_allreduce_compressed(w[0], in, out, 9, NEXAR_DTYPE_F32, h.z, nullptr, nullptr),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_allreduce_compressed(w[0], in, out, 10, NEXAR_DTYPE_F64, h.z, nullptr, nullptr),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(
      nexar_allreduce_compressed(w[0], in, out, 10, NEXAR_DTYPE_F32, nullptr, nullptr, nullptr),
      NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_compressor_reset(nullptr), NEXAR_ERR_INVALID_ARGUMENT);
  // A world of one: the top half, the rest zero.
  NX_OK(nexar_allreduce_compressed(w[0], in, out, 10, NEXAR_DTYPE_F32, h.z, nullptr, nullptr));
  const float expect[10] = {0, -9, 0, 8, 0, 7, 0, 6, 5, 0};
  EXPECT_EQ(0, memcmp(out, expect, sizeof out));
  // The residual came back in: with zero input, the rest goes out now.
  NX_OK(nexar_compressor_reset(h.z));
  const float zero[10] = {};
  NX_OK(nexar_allreduce_compressed(w[0], zero, out, 10, NEXAR_DTYPE_F32, h.z, nullptr, nullptr));
  EXPECT_TRUE(std::all_of(out, out + 10, [](float x) { return x == 0.0f; })) << "reset";
}

// ---- convergence --------------------------------------------------------------

// Least squares on 4 ranks, each with its own rows: w minimizes
// sum_r |A_r w - b_r|^2 / (2 m). Plain gradient descent on the dense mean
// gradient against the same with TopK 1 % and error feedback.
struct LeastSquares {
  static constexpr size_t kDim = 1000, kRows = 400;  // rows per rank
  std::vector<std::vector<float>> a, b;              // per rank
  explicit LeastSquares(uint32_t ranks) : a(ranks), b(ranks) {
    std::mt19937 rng(2024);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> truth(kDim);
    for (auto &x : truth)
      x = normal(rng);
    for (uint32_t r = 0; r < ranks; ++r) {
      a[r].resize(kRows * kDim);
      b[r].resize(kRows);
      for (auto &x : a[r])
        x = normal(rng) / std::sqrt(static_cast<float>(kDim));
      for (size_t i = 0; i < kRows; ++i) {
        float dot = 0;
        for (size_t j = 0; j < kDim; ++j)
          dot += a[r][i * kDim + j] * truth[j];
        b[r][i] = dot + 0.1f * normal(rng);
      }
    }
  }
  // This rank's loss sum and gradient (sum over its rows).
  double local(uint32_t r, const std::vector<float> &w, std::vector<float> *grad) const {
    grad->assign(kDim, 0.0f);
    double loss = 0;
    for (size_t i = 0; i < kRows; ++i) {
      const float *row = &a[r][i * kDim];
      float e = -b[r][i];
      for (size_t j = 0; j < kDim; ++j)
        e += row[j] * w[j];
      loss += 0.5 * e * e;
      for (size_t j = 0; j < kDim; ++j)
        (*grad)[j] += e * row[j];
    }
    return loss;
  }
};

// Runs up to max_steps; returns the step at which the global loss first went
// below target (or the last loss in *final_loss).
size_t train(const World &w, const LeastSquares &p, bool compressed, size_t max_steps,
             double target, double *final_loss) {
  const uint32_t n = w.size();
  const size_t total_rows = LeastSquares::kRows * n;
  const float lr = 0.5f;
  std::vector<size_t> reached(n, max_steps);
  std::vector<double> last(n, 0);
  on_each_rank(n, [&](uint32_t r) {
    CompressorHandle h;
    if (compressed)
      NX_OK(nexar_compressor_create(&h.z, NEXAR_COMPRESS_TOPK, 0.01, LeastSquares::kDim,
                                    NEXAR_DTYPE_F32, 0));
    std::vector<float> weights(LeastSquares::kDim, 0.0f), grad, sum(LeastSquares::kDim);
    for (size_t step = 0; step < max_steps; ++step) {
      double loss = p.local(r, weights, &grad);
      NX_OK(
          nexar_allreduce(w[r], &loss, &loss, 1, NEXAR_DTYPE_F64, NEXAR_OP_SUM, nullptr, nullptr));
      loss /= static_cast<double>(total_rows);
      last[r] = loss;
      if (loss <= target) {
        reached[r] = step;
        break;
      }
      if (compressed)
        NX_OK(nexar_allreduce_compressed(w[r], grad.data(), sum.data(), grad.size(),
                                         NEXAR_DTYPE_F32, h.z, nullptr, nullptr));
      else
        NX_OK(nexar_allreduce(w[r], grad.data(), sum.data(), grad.size(), NEXAR_DTYPE_F32,
                              NEXAR_OP_SUM, nullptr, nullptr));
      for (size_t j = 0; j < weights.size(); ++j)
        weights[j] -= lr * sum[j] / static_cast<float>(total_rows) * static_cast<float>(n);
    }
  });
  for (uint32_t r = 1; r < n; ++r)
    EXPECT_EQ(reached[r], reached[0]) << "every rank sees the same loss";
  *final_loss = last[0];
  return reached[0];
}

TEST(AllreduceCompressed, TopkWithErrorFeedbackReachesTheDenseLoss) {
  const uint32_t n = 4;
  World w(n);
  ASSERT_TRUE(w.ok());
  const LeastSquares problem(n);
  const size_t kDenseSteps = 100;
  double dense_loss = 0, loss = 0;
  train(w, problem, false, kDenseSteps, 0.0, &dense_loss);
  ASSERT_GT(dense_loss, 0.0);
  // Within 1 % of the dense loss, in at most 4 times the steps.
  const size_t steps = train(w, problem, true, 4 * kDenseSteps, dense_loss * 1.01, &loss);
  EXPECT_LT(steps, 4 * kDenseSteps) << "TopK stopped at loss " << loss << ", dense " << dense_loss;
  std::printf("dense loss %.6g after %zu steps; TopK 1%% within 1%% after %zu steps\n", dense_loss,
              kDenseSteps, steps);
}

}  // namespace
