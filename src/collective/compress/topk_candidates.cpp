#include "collective/compress/topk_candidates.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "collective/compress/topk_select.h"

namespace nexar {
namespace {

constexpr size_t kSample = size_t{1} << 14;  // sampled positions
constexpr size_t kGroup = 16;                // keys tested at once

template <class F>
auto magnitude_bits(F x) {
  typename TopkCandidates<F>::Key k;
  memcpy(&k, &x, sizeof k);
  return static_cast<decltype(k)>(k & (~decltype(k){0} >> 1));
}

// Whether any of the kGroup keys at v reaches threshold (as signed keys:
// magnitudes keep the sign bit clear), kGroup at a time in vector registers.
template <class F>
bool any_reaches(const F *v, typename TopkCandidates<F>::Key threshold) {
  using S = std::make_signed_t<typename TopkCandidates<F>::Key>;
  typedef S V __attribute__((vector_size(16)));
  constexpr size_t kLanes = 16 / sizeof(S);
  V below, mask, hit{};
  for (size_t l = 0; l < kLanes; ++l) {
    below[l] = static_cast<S>(threshold) - 1;
    mask[l] = std::numeric_limits<S>::max();
  }
  for (size_t j = 0; j < kGroup; j += kLanes) {
    V x;
    memcpy(&x, v + j, sizeof x);
    hit |= (x & mask) > below;
  }
  uint64_t words[2];
  memcpy(words, &hit, sizeof words);
  return (words[0] | words[1]) != 0;
}

}  // namespace

template <class F>
TopkCandidates<F>::TopkCandidates(size_t n, size_t k) : n_(n), k_(k) {
  if (n < 64 * kSample || k == 0 || k > n / 16) return;
  sample_at_.resize(kSample);
  uint64_t state = 0x9e3779b97f4a7c15ull * (n + k);
  for (size_t &at : sample_at_) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    at = static_cast<size_t>((static_cast<unsigned __int128>(state) * n) >> 64);
  }
}

template <class F>
void TopkCandidates<F>::set_sample(const F *values) {
  std::vector<Key> keys(kSample);
  for (size_t i = 0; i < kSample; ++i)
    keys[i] = magnitude_bits(values[i]);
  // The sample's r-th largest key, r a margin above the k kSample / n
  // expected there: fewer than k reach it very rarely.
  const double expected = static_cast<double>(k_) * kSample / static_cast<double>(n_);
  const size_t r = static_cast<size_t>(expected * 1.25 + 4.0 * std::sqrt(expected) + 8.0);
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(r), keys.end(),
                   std::greater<Key>());
  threshold_ = keys[r];
  cap_ = 2 * (r + 1) * (n_ / kSample) + k_;
  // Not zeroed: only the pages the candidates reach are touched.
  candidates_ = std::make_unique_for_overwrite<uint32_t[]>(cap_ + kGroup);
}

template <class F>
void TopkCandidates<F>::scan(const F *v, size_t first, size_t count) {
  if (overflow_) return;
  size_t i = 0;
  for (; i + kGroup <= count; i += kGroup) {
    if (!any_reaches(v + first + i, threshold_)) continue;
    for (size_t j = first + i; j < first + i + kGroup; ++j) {
      candidates_[m_] = static_cast<uint32_t>(j);
      m_ += magnitude_bits(v[j]) >= threshold_;
    }
    if (m_ > cap_) {
      overflow_ = true;
      return;
    }
  }
  for (size_t j = first + i; j < first + count; ++j) {
    candidates_[m_] = static_cast<uint32_t>(j);
    m_ += magnitude_bits(v[j]) >= threshold_;
  }
  overflow_ = m_ > cap_;
}

template <class F>
bool TopkCandidates<F>::select(const F *v, std::vector<uint32_t> *out) {
  if (!active() || overflow_ || m_ < k_) return false;
  auto values = std::make_unique_for_overwrite<F[]>(m_);
  for (size_t j = 0; j < m_; ++j)
    values[j] = v[candidates_[j]];
  select_topk_exhaustive(values.get(), m_, k_, out);
  for (uint32_t &at : *out)
    at = candidates_[at];
  return true;
}

template class TopkCandidates<float>;
template class TopkCandidates<double>;

}  // namespace nexar
