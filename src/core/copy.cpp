#include "core/copy.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace nexar::detail {

bool memcpy_slow_when_aliased() {
#if defined(__x86_64__)
  static const bool amd = [] {
    __builtin_cpu_init();  // may run before the library's constructors
    return __builtin_cpu_is("amd") > 0;
  }();
  return amd;
#else
  return false;
#endif
}

void copy_by_vectors(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  // 64 bytes per step with SSE2 (every x86-64 has it): on AMD as fast as
  // memcpy's good cases, and no aliasing penalty.
  auto *d = static_cast<uint8_t *>(dst);
  const auto *s = static_cast<const uint8_t *>(src);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(d + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(d + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(d + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, n - i);  // under 64 bytes: no "rep movsb"
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace nexar::detail
