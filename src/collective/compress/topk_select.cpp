#include "collective/compress/topk_select.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace nexar {
namespace {

// The magnitude's bits: for IEEE floats without the sign bit, their order is
// the order of the magnitudes (NaNs above infinity).
template <class F>
struct MagnitudeKey;
template <>
struct MagnitudeKey<float> {
  using Key = uint32_t;
  static constexpr int kBucketShift = 16;  // 15 bits: exponent and 7 mantissa bits
  static Key of(float x) {
    Key k;
    memcpy(&k, &x, sizeof k);
    return k & 0x7fffffffu;
  }
};
template <>
struct MagnitudeKey<double> {
  using Key = uint64_t;
  static constexpr int kBucketShift = 48;  // 15 bits: exponent and 4 mantissa bits
  static Key of(double x) {
    Key k;
    memcpy(&k, &x, sizeof k);
    return k & 0x7fffffffffffffffull;
  }
};

template <class F>
void select(const F *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  using M = MagnitudeKey<F>;
  using Key = typename M::Key;
  out->clear();
  if (k >= n) {
    out->resize(n);
    for (size_t i = 0; i < n; ++i)
      (*out)[i] = static_cast<uint32_t>(i);
    return;
  }
  if (k == 0) return;
  constexpr size_t kBuckets = size_t{1} << 15;
  std::vector<uint32_t> hist(kBuckets, 0);
  for (size_t i = 0; i < n; ++i)
    ++hist[M::of(v[i]) >> M::kBucketShift];
  // The bucket b holding the k-th largest: fewer than k above it.
  size_t above = 0, b = kBuckets;
  while (b-- > 0) {
    if (above + hist[b] >= k) break;
    above += hist[b];
  }
  const size_t need = k - above;  // 1 <= need <= hist[b]
  std::vector<Key> candidates;
  candidates.reserve(hist[b]);
  for (size_t i = 0; i < n; ++i) {
    const Key key = M::of(v[i]);
    if ((key >> M::kBucketShift) == b) candidates.push_back(key);
  }
  std::nth_element(candidates.begin(), candidates.begin() + (need - 1), candidates.end(),
                   std::greater<Key>());
  const Key threshold = candidates[need - 1];
  size_t greater = 0;
  for (Key c : candidates)
    greater += c > threshold;
  size_t ties = need - greater;  // elements equal to the threshold to take
  out->reserve(k);
  for (size_t i = 0; i < n; ++i) {
    const Key key = M::of(v[i]);
    if (key > threshold || (key == threshold && ties > 0 && ties--))
      out->push_back(static_cast<uint32_t>(i));
  }
}

}  // namespace

void select_topk(const float *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  select(v, n, k, out);
}
void select_topk(const double *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  select(v, n, k, out);
}

}  // namespace nexar
