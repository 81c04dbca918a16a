// One monotonic clock for the whole library (ngtcp2 timestamps use it too).
#pragma once

#include <cstdint>
#include <ctime>

namespace nexar {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

constexpr uint64_t kNsPerMs = 1000000ull;

}  // namespace nexar
