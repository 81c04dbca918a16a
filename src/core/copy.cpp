#include "core/copy.h"

#if defined(__x86_64__)
#include <emmintrin.h>

namespace {

// Copies the whole 64-byte steps of n bytes with SSE2 (every x86-64 has
// it), each 16-byte piece written by store; returns the bytes copied.
template <typename Store>
size_t copy_64_byte_steps(uint8_t *d, const uint8_t *s, size_t n, Store store) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 48));
    store(reinterpret_cast<__m128i *>(d + i), a);
    store(reinterpret_cast<__m128i *>(d + i + 16), b);
    store(reinterpret_cast<__m128i *>(d + i + 32), c);
    store(reinterpret_cast<__m128i *>(d + i + 48), e);
  }
  return i;
}

}  // namespace
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
  // On AMD as fast as memcpy's good cases, and no aliasing penalty.
  auto *d = static_cast<uint8_t *>(dst);
  const auto *s = static_cast<const uint8_t *>(src);
  const size_t i =
      copy_64_byte_steps(d, s, n, [](__m128i *at, __m128i v) { _mm_storeu_si128(at, v); });
  std::memcpy(d + i, s + i, n - i);  // under 64 bytes: no "rep movsb"
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace nexar::detail

namespace nexar {

void copy_bytes_streaming(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  auto *d = static_cast<uint8_t *>(dst);
  const auto *s = static_cast<const uint8_t *>(src);
  // Streaming stores need 16-byte aligned destinations: the bytes before
  // the first such address, and the last ones under 64, are copied plainly.
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (n < head + 64) {
    copy_bytes(d, s, n);
    return;
  }
  copy_bytes(d, s, head);
  const size_t i =
      head + copy_64_byte_steps(d + head, s + head, n - head,
                                [](__m128i *at, __m128i v) { _mm_stream_si128(at, v); });
  copy_bytes(d + i, s + i, n - i);
  // Streaming stores are weakly ordered: a store after the copy (a counter
  // that says it is done) must not be seen before them.
  _mm_sfence();
#else
  copy_bytes(dst, src, n);
#endif
}

}  // namespace nexar
