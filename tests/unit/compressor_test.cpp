// The pieces of the gradient tools that need no network: bucket plans, TopK
// selection against a reference sort, RandomK positions, and the error
// feedback's conservation of mass in every compressor dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "collective/bucket_plan.h"
#include "collective/compress/compressor.h"
#include "collective/compress/element_cast.h"
#include "collective/compress/random_positions.h"
#include "collective/compress/topk_select.h"

using namespace nexar;

namespace {

// The k positions of largest |v|, ties to the lower position, ascending.
template <class F>
std::vector<uint32_t> reference_topk(const std::vector<F> &v, size_t k) {
  auto key = [](F x) {
    // The same order as the library's: NaNs above infinity.
    return std::isnan(x) ? INFINITY : std::fabs(static_cast<double>(x));
  };
  std::vector<uint32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return key(v[a]) > key(v[b]); });
  order.resize(std::min(k, v.size()));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(BucketPlan, FusesSmallTensorsAndSplitsLargeOnes) {
  const std::vector<size_t> counts = {3, 0, 10, 2, 25, 1};
  const BucketPlan plan = plan_buckets(counts.data(), counts.size(), 8);
  // 41 elements in buckets of 8: 5 full, one of 1.
  ASSERT_EQ(plan.buckets.size(), 6u);
  EXPECT_EQ(plan.max_count, 8u);
  std::vector<size_t> covered(counts.size(), 0);
  size_t expect_next = 0;
  for (const Bucket &b : plan.buckets) {
    EXPECT_EQ(b.first_piece, expect_next);
    size_t sum = 0;
    for (size_t i = b.first_piece; i < b.first_piece + b.pieces; ++i) {
      const BucketPiece &p = plan.pieces[i];
      EXPECT_EQ(p.offset, covered[p.tensor]) << "pieces of a tensor follow each other";
      EXPECT_GT(p.count, 0u);
      covered[p.tensor] += p.count;
      sum += p.count;
    }
    EXPECT_EQ(sum, b.count);
    expect_next = b.first_piece + b.pieces;
  }
  EXPECT_EQ(covered, counts);
  EXPECT_EQ(plan.buckets.back().count, 1u);
  // The 25-element tensor spans four buckets.
  size_t pieces_of_4 = 0;
  for (const BucketPiece &p : plan.pieces)
    pieces_of_4 += p.tensor == 4;
  EXPECT_EQ(pieces_of_4, 4u);
}

TEST(BucketPlan, EmptyListsMakeNoBuckets) {
  const std::vector<size_t> counts = {0, 0};
  EXPECT_TRUE(plan_buckets(counts.data(), counts.size(), 4).buckets.empty());
  EXPECT_TRUE(plan_buckets(nullptr, 0, 4).buckets.empty());
}

TEST(TopkSelect, MatchesAReferenceSortWithTies) {
  std::mt19937_64 rng(7);
  for (size_t n : {1u, 2u, 17u, 1000u, 65537u}) {
    for (int round = 0; round < 4; ++round) {
      std::vector<float> v(n);
      // Few distinct magnitudes in some rounds: many ties at the threshold.
      std::uniform_int_distribution<int> small(-6, 6);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (auto &x : v)
        x = round % 2 ? static_cast<float>(small(rng)) : normal(rng);
      if (n > 10) v[3] = NAN, v[5] = -INFINITY;
      for (size_t k : {size_t{1}, n / 100 + 1, n / 3 + 1, n, n + 5}) {
        std::vector<uint32_t> got;
        select_topk(v.data(), n, k, &got);
        EXPECT_EQ(got, reference_topk(v, k)) << "n " << n << " k " << k << " round " << round;
      }
    }
  }
}

TEST(TopkSelect, DoublesMatchTheReference) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> v(20000);
  for (auto &x : v)
    x = normal(rng);
  v[100] = v[200] = -v[300];  // ties
  for (size_t k : {1u, 200u, 5000u}) {
    std::vector<uint32_t> got;
    select_topk(v.data(), v.size(), k, &got);
    EXPECT_EQ(got, reference_topk(v, k)) << "k " << k;
  }
}

// Vectors long enough for the sampled threshold: spread values (the sample's
// candidates hold the k largest), values with a tied majority at the top
// (too many candidates: the full selection), NaNs and infinities.
TEST(TopkSelect, LongVectorsMatchTheReference) {
  std::mt19937_64 rng(13);
  const size_t n = (size_t{1} << 20) + 3;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-6, 6);
  for (int round = 0; round < 3; ++round) {
    std::vector<float> v(n);
    for (auto &x : v)
      x = round == 1 ? static_cast<float>(small(rng)) : normal(rng);
    if (round == 2)
      for (size_t i = 0; i < n; i += 997)
        v[i] = i < n / 2 ? NAN : -INFINITY;  // NaNs first: the reference ties them
    for (size_t k : {size_t{1}, size_t{1000}, n / 100, n / 20}) {
      std::vector<uint32_t> got;
      select_topk(v.data(), n, k, &got);
      ASSERT_EQ(got, reference_topk(v, k)) << "k " << k << " round " << round;
    }
  }
  std::normal_distribution<double> wide(0.0, 5.0);
  std::vector<double> d(n);
  for (auto &x : d)
    x = wide(rng);
  d[10] = d[20] = -d[30];
  std::vector<uint32_t> got;
  select_topk(d.data(), n, n / 100, &got);
  EXPECT_EQ(got, reference_topk(d, n / 100));
}

TEST(RandomPositions, SameSeedAndCallSamePositionsOtherwiseDifferent) {
  std::vector<uint32_t> a, b, c, d;
  random_positions(42, 3, 100000, 1000, &a);
  random_positions(42, 3, 100000, 1000, &b);
  random_positions(42, 4, 100000, 1000, &c);
  random_positions(43, 3, 100000, 1000, &d);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  ASSERT_EQ(a.size(), 1000u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<uint32_t>(a.begin(), a.end()).size(), a.size()) << "distinct";
  EXPECT_LT(a.back(), 100000u);
  // All positions when k == n.
  random_positions(1, 0, 64, 64, &a);
  ASSERT_EQ(a.size(), 64u);
  for (uint32_t i = 0; i < 64; ++i)
    EXPECT_EQ(a[i], i);
}

// Over several calls: per element, kept values plus the final residual equal
// the inputs plus nothing lost, exactly in the accumulation type (the
// widened kept value is what the call sent).
template <class Acc>
void check_conservation(int32_t kind, nexar_dtype_t dtype) {
  const size_t n = 4096;
  std::unique_ptr<Compressor> z;
  ASSERT_TRUE(Compressor::create(kind, 0.05, n, dtype, 9, &z).ok());
  EXPECT_EQ(z->k(), 204u);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t esize = dtype == NEXAR_DTYPE_F64 ? 8 : dtype == NEXAR_DTYPE_F32 ? 4 : 2;
  for (int call = 0; call < 5; ++call) {
    std::vector<Acc> before(n);
    memcpy(before.data(), z->residual(), n * sizeof(Acc));
    std::vector<uint8_t> input(n * esize);
    for (size_t i = 0; i < n; ++i)
      narrow<Acc>(input.data(), i, static_cast<Acc>(normal(rng)), dtype);
    CompressedPart part;
    z->compress(input.data(), &part);
    ASSERT_EQ(part.index.size(), z->k());
    std::vector<Acc> sent(n, Acc(0));
    for (size_t j = 0; j < part.index.size(); ++j)
      sent[part.index[j]] = widen<Acc>(part.values.data(), j, dtype);
    const Acc *after = static_cast<const Acc *>(z->residual());
    for (size_t i = 0; i < n; ++i) {
      const Acc expect = widen<Acc>(input.data(), i, dtype) + before[i];
      ASSERT_EQ(sent[i] + after[i], expect) << "element " << i << " call " << call;
    }
  }
  z->reset();
  const Acc *r = static_cast<const Acc *>(z->residual());
  EXPECT_TRUE(std::all_of(r, r + n, [](Acc x) { return x == 0; }));
}

TEST(Compressor, ErrorFeedbackConservesMassInEveryDtype) {
  for (int32_t kind : {NEXAR_COMPRESS_TOPK, NEXAR_COMPRESS_RANDOMK}) {
    check_conservation<float>(kind, NEXAR_DTYPE_F32);
    check_conservation<double>(kind, NEXAR_DTYPE_F64);
    check_conservation<float>(kind, NEXAR_DTYPE_F16);
    check_conservation<float>(kind, NEXAR_DTYPE_BF16);
  }
}

// Long tensors, compressed block by block as the residual is added (TopK
// gathering candidates, RandomK taking its values): the kept positions are
// still exactly the reference's, call after call, and the residuals keep
// what was not sent.
template <class Acc>
void check_long(int32_t kind, nexar_dtype_t dtype) {
  const size_t n = (size_t{1} << 20) + 5;
  std::unique_ptr<Compressor> z;
  ASSERT_TRUE(Compressor::create(kind, 0.01, n, dtype, 3, &z).ok());
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t esize = dtype == NEXAR_DTYPE_F64 ? 8 : dtype == NEXAR_DTYPE_F32 ? 4 : 2;
  for (int call = 0; call < 3; ++call) {
    std::vector<Acc> v(n);
    memcpy(v.data(), z->residual(), n * sizeof(Acc));
    std::vector<uint8_t> input(n * esize);
    for (size_t i = 0; i < n; ++i) {
      narrow<Acc>(input.data(), i, static_cast<Acc>(normal(rng)), dtype);
      v[i] += widen<Acc>(input.data(), i, dtype);
    }
    CompressedPart part;
    z->compress(input.data(), &part);
    std::vector<uint32_t> want;
    if (kind == NEXAR_COMPRESS_TOPK)
      want = reference_topk(v, z->k());
    else
      random_positions(3, static_cast<uint64_t>(call), n, z->k(), &want);
    ASSERT_EQ(part.index, want) << "call " << call;
    const Acc *after = static_cast<const Acc *>(z->residual());
    size_t j = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool kept = j < part.index.size() && part.index[j] == i;
      const Acc sent = kept ? widen<Acc>(part.values.data(), j++, dtype) : Acc(0);
      ASSERT_EQ(sent + after[i], v[i]) << "element " << i << " call " << call;
    }
  }
}

TEST(Compressor, LongTensorsKeepTheReferencePositions) {
  check_long<float>(NEXAR_COMPRESS_TOPK, NEXAR_DTYPE_F32);
  check_long<double>(NEXAR_COMPRESS_TOPK, NEXAR_DTYPE_F64);
  check_long<float>(NEXAR_COMPRESS_TOPK, NEXAR_DTYPE_BF16);
  check_long<float>(NEXAR_COMPRESS_RANDOMK, NEXAR_DTYPE_F32);
  check_long<float>(NEXAR_COMPRESS_RANDOMK, NEXAR_DTYPE_F16);
}

TEST(Compressor, RejectsBadParameters) {
  std::unique_ptr<Compressor> z;
  EXPECT_EQ(Compressor::create(3, 0.1, 10, NEXAR_DTYPE_F32, 0, &z).code,
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(Compressor::create(1, 0.0, 10, NEXAR_DTYPE_F32, 0, &z).code,
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(Compressor::create(1, 1.5, 10, NEXAR_DTYPE_F32, 0, &z).code,
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(Compressor::create(1, 0.1, 0, NEXAR_DTYPE_F32, 0, &z).code, NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(Compressor::create(1, 0.1, 10, NEXAR_DTYPE_I32, 0, &z).code,
            NEXAR_ERR_INVALID_ARGUMENT);
  ASSERT_TRUE(Compressor::create(2, 0.001, 10, NEXAR_DTYPE_F32, 0, &z).ok());
  EXPECT_EQ(z->k(), 1u) << "k = max(1, ratio * count)";
}

}  // namespace
