#include "collective/compress/topk_select.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

namespace nexar {
namespace {

// The magnitude's bits: for IEEE floats without the sign bit, their order is
// the order of the magnitudes (NaNs above infinity).
inline uint32_t magnitude_key(float x) {
  uint32_t k;
  memcpy(&k, &x, sizeof k);
  return k & 0x7fffffffu;
}
inline uint64_t magnitude_key(double x) {
  uint64_t k;
  memcpy(&k, &x, sizeof k);
  return k & 0x7fffffffffffffffull;
}

// Radix selection, 16 bits a pass from the top: each pass counts the next
// digit of the keys that share the prefix found so far, and keeps the digit
// holding the k-th largest. After all digits the prefix is the k-th largest
// key itself (the threshold) and `need` says how many keys equal to it to
// take. Ties cost nothing extra (no candidates are gathered and ordered).
template <class F>
void select(const F *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  using Key = decltype(magnitude_key(F()));
  constexpr int kBits = 8 * sizeof(Key), kDigit = 16;
  out->clear();
  if (k >= n) {
    out->resize(n);
    for (size_t i = 0; i < n; ++i)
      (*out)[i] = static_cast<uint32_t>(i);
    return;
  }
  if (k == 0) return;
  std::vector<uint32_t> hist(size_t{1} << kDigit);
  Key prefix = 0;
  size_t need = k;  // how many of the keys under the prefix to take
  for (int shift = kBits - kDigit; shift >= 0; shift -= kDigit) {
    std::fill(hist.begin(), hist.end(), 0);
    const int above = shift + kDigit;  // bits of the prefix so far
    for (size_t i = 0; i < n; ++i) {
      const Key key = magnitude_key(v[i]);
      if (above == kBits || (key >> above) == prefix) ++hist[(key >> shift) & 0xffff];
    }
    size_t d = hist.size(), taken = 0;
    while (d-- > 0) {
      if (taken + hist[d] >= need) break;
      taken += hist[d];
    }
    need -= taken;
    prefix = static_cast<Key>((prefix << kDigit) | d);
  }
  const Key threshold = prefix;
  out->reserve(k);
  for (size_t i = 0; i < n; ++i) {
    const Key key = magnitude_key(v[i]);
    if (key > threshold || (key == threshold && need > 0 && need--))
      out->push_back(static_cast<uint32_t>(i));
  }
}

// A threshold from a sample, then one pass: when at least k keys reach the
// threshold, the k largest are among them, ties at the k-th included, so
// selecting exactly among those candidates (in ascending position) gives the
// same result as selecting among all n. Returns false, leaving the work to
// select(), when n is small, k a large share of n, or the sample's threshold
// let through fewer than k or far more keys than expected.
template <class F>
bool select_by_sample(const F *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  using Key = decltype(magnitude_key(F()));
  constexpr size_t kSample = size_t{1} << 14, kGroup = 16;
  if (n < 64 * kSample || k > n / 16) return false;
  // The sample's r-th largest key, r a margin above the k n / kSample
  // expected: about 1.3 k keys reach it, fewer than k very rarely.
  const double expected = static_cast<double>(k) * kSample / static_cast<double>(n);
  const size_t r = static_cast<size_t>(expected * 1.25 + 4.0 * std::sqrt(expected) + 8.0);
  std::vector<Key> sample(kSample);
  uint64_t state = 0x9e3779b97f4a7c15ull * (n + k);
  for (Key &s : sample) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const size_t at = static_cast<size_t>((static_cast<unsigned __int128>(state) * n) >> 64);
    s = magnitude_key(v[at]);
  }
  std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(r), sample.end(),
                   std::greater<Key>());
  const Key threshold = sample[r];
  const size_t cap = 2 * (r + 1) * (n / kSample) + k;
  // Not zeroed: only the pages the candidates reach are touched.
  auto candidates = std::make_unique_for_overwrite<uint32_t[]>(cap + kGroup);
  size_t m = 0, i = 0;
  // Groups of kGroup keys tested at once (vectorised), most with no hit.
  for (; i + kGroup <= n; i += kGroup) {
    bool hit = false;
    for (size_t j = 0; j < kGroup; ++j)
      hit |= magnitude_key(v[i + j]) >= threshold;
    if (!hit) continue;
    for (size_t j = 0; j < kGroup; ++j) {
      candidates[m] = static_cast<uint32_t>(i + j);
      m += magnitude_key(v[i + j]) >= threshold;
    }
    if (m > cap) return false;
  }
  for (; i < n; ++i) {
    candidates[m] = static_cast<uint32_t>(i);
    m += magnitude_key(v[i]) >= threshold;
  }
  if (m < k) return false;
  auto values = std::make_unique_for_overwrite<F[]>(m);
  for (size_t j = 0; j < m; ++j)
    values[j] = v[candidates[j]];
  select(values.get(), m, k, out);
  for (uint32_t &at : *out)
    at = candidates[at];
  return true;
}

template <class F>
void select_any(const F *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  if (!select_by_sample(v, n, k, out)) select(v, n, k, out);
}

}  // namespace

void select_topk(const float *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  select_any(v, n, k, out);
}
void select_topk(const double *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  select_any(v, n, k, out);
}

}  // namespace nexar
