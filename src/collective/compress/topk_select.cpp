#include "collective/compress/topk_select.h"

#include <algorithm>
#include <cstring>

#include "collective/compress/topk_candidates.h"

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

template <class F>
void select_any(const F *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  TopkCandidates<F> candidates(n, k);
  if (candidates.active()) {
    std::vector<F> sample;
    for (size_t at : candidates.sample_positions())
      sample.push_back(v[at]);
    candidates.set_sample(sample.data());
    candidates.scan(v, 0, n);
    if (candidates.select(v, out)) return;
  }
  select(v, n, k, out);
}

}  // namespace

void select_topk(const float *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  select_any(v, n, k, out);
}
void select_topk(const double *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  select_any(v, n, k, out);
}
void select_topk_exhaustive(const float *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  select(v, n, k, out);
}
void select_topk_exhaustive(const double *v, size_t n, size_t k, std::vector<uint32_t> *out) {
  select(v, n, k, out);
}

}  // namespace nexar
