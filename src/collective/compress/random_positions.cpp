#include "collective/compress/random_positions.h"

#include <algorithm>

namespace nexar {
namespace {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform enough in [0, bound) (Lemire's multiply-shift, bound < 2^32).
  uint64_t below(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
  }
};

}  // namespace

void random_positions(uint64_t seed, uint64_t call, size_t n, size_t k,
                      std::vector<uint32_t> *out) {
  out->clear();
  k = std::min(k, n);
  SplitMix64 rng{seed ^ (call * 0xd1b54a32d192ed03ull)};
  rng.next();
  // Floyd: for j = n-k .. n-1 pick t in [0, j]; take t, or j if t is taken.
  std::vector<uint64_t> taken((n + 63) / 64, 0);
  auto take = [&](size_t i) {
    uint64_t &w = taken[i / 64];
    const uint64_t bit = uint64_t{1} << (i % 64);
    if (w & bit) return false;
    w |= bit;
    return true;
  };
  for (size_t j = n - k; j < n; ++j)
    if (!take(rng.below(j + 1))) take(j);
  out->reserve(k);
  for (size_t w = 0; w < taken.size(); ++w)
    for (uint64_t bits = taken[w]; bits; bits &= bits - 1)
      out->push_back(static_cast<uint32_t>(w * 64 + __builtin_ctzll(bits)));
}

}  // namespace nexar
