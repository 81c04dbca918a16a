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

// A now_ns() reading (or a span of nanoseconds) as a timespec.
inline timespec timespec_of_ns(uint64_t ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000ull);
  ts.tv_nsec = static_cast<long>(ns % 1000000000ull);
  return ts;
}

}  // namespace nexar
