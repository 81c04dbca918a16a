// Copies of user and shared-memory buffers on the data path.
//
// glibc copies blocks of a few KiB to about half a MiB with "rep movsb",
// which on AMD Zen runs some 20 times slower when the destination lies 1 to
// 63 bytes past the source modulo 4 KiB (the two addresses alias in the
// load/store unit). Such pairs are common: two heap blocks whose sizes are
// page multiples sit 16 bytes of malloc header apart. On AMD copy_bytes
// takes a plain vector loop there, and memcpy everywhere else. Intel's
// memcpy has no such case, and the loop is up to 1.7 times slower than it
// at some of those distances (load/store aliasing of its own): memcpy
// everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace nexar {
namespace detail {

void copy_by_vectors(void *dst, const void *src, size_t n);
// This CPU's memcpy is slow at the distances aliases_4k names (AMD).
bool memcpy_slow_when_aliased();

inline bool aliases_4k(const void *dst, const void *src, size_t n) {
  const uintptr_t ahead =
      (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
  return n >= 1024 && ahead != 0 && ahead < 64;
}

}  // namespace detail

// memcpy: dst and src must not overlap.
inline void copy_bytes(void *dst, const void *src, size_t n) {
  if (detail::aliases_4k(dst, src, n) && detail::memcpy_slow_when_aliased())
    detail::copy_by_vectors(dst, src, n);
  else
    std::memcpy(dst, src, n);
}

// copy_bytes with stores that go around the caches: for a destination
// larger than the caches that nothing reads soon (a large receive buffer),
// where a cached copy would first read every destination line from memory.
// Everything after it is seen after the copy (a store fence). dst and src
// must not overlap.
void copy_bytes_streaming(void *dst, const void *src, size_t n);

// memmove: overlapping buffers are left to memmove.
inline void move_bytes(void *dst, const void *src, size_t n) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d - s >= n && s - d >= n)
    copy_bytes(dst, src, n);
  else
    std::memmove(dst, src, n);
}

}  // namespace nexar
