// RandomK's positions: k distinct positions of [0, n), the same on every
// rank that passes the same (seed, call): uniform (Floyd's sampling, O(k)
// draws) from a splitmix64 stream, returned in ascending order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nexar {

void random_positions(uint64_t seed, uint64_t call, size_t n, size_t k, std::vector<uint32_t> *out);

}  // namespace nexar
