// TopK selection in O(n): the positions of the k elements of largest
// magnitude, without sorting. On long vectors a sampled threshold gathers
// about 1.3 k candidates in one pass (topk_candidates.h) and the selection
// runs on those. Radix selection on the magnitudes' bits, 16 bits a pass
// (two passes for floats, four for doubles), finds the k-th largest
// magnitude exactly; a last pass collects the positions in ascending
// order. Ties at the threshold go to the lower
// positions, so the result equals a stable sort by decreasing magnitude cut
// after k. NaNs count as larger than infinity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nexar {

// Appends to *out (cleared first) the ascending positions of the k largest
// |v[i]| of v[0..n); all n when k >= n.
void select_topk(const float *v, size_t n, size_t k, std::vector<uint32_t> *out);
void select_topk(const double *v, size_t n, size_t k, std::vector<uint32_t> *out);

// The radix selection alone, over all n (what select_topk falls back to).
void select_topk_exhaustive(const float *v, size_t n, size_t k, std::vector<uint32_t> *out);
void select_topk_exhaustive(const double *v, size_t n, size_t k, std::vector<uint32_t> *out);

}  // namespace nexar
