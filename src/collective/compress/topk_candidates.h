// A pre-filter for TopK selection on long vectors: a magnitude threshold
// taken from a sample, about 1.3 k of n elements reaching it, and the
// positions that do, gathered while the caller streams over the vector (the
// compressor scans each block right after adding the residual to it, while
// it is in cache). When at least k reach the threshold, the k largest are
// among them, ties at the k-th included, so an exact selection among the
// candidates (ascending positions) equals one over the whole vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace nexar {

template <class F>  // float or double
class TopkCandidates {
 public:
  using Key = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

  // Inactive (no sample) when n is small or k a large share of n.
  TopkCandidates(size_t n, size_t k);
  bool active() const { return !sample_at_.empty(); }
  // Where to sample: the caller passes the values there to set_sample.
  const std::vector<size_t> &sample_positions() const { return sample_at_; }
  void set_sample(const F *values);
  // Scans v[first, first + count); blocks come in order and cover [0, n).
  void scan(const F *v, size_t first, size_t count);
  // The k positions of largest magnitude (ascending) into *out, v being the
  // whole vector; false when the threshold let through fewer than k or far
  // more than expected (then select over the whole vector).
  bool select(const F *v, std::vector<uint32_t> *out);

 private:
  size_t n_, k_, cap_ = 0, m_ = 0;
  bool overflow_ = false;
  Key threshold_ = 0;
  std::vector<size_t> sample_at_;
  std::unique_ptr<uint32_t[]> candidates_;
};

extern template class TopkCandidates<float>;
extern template class TopkCandidates<double>;

}  // namespace nexar
