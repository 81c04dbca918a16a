// copy_bytes, copy_bytes_streaming and move_bytes: exactly memcpy's and memmove's results for
// every size around the vector loop's edges and every placement of the
// destination past the source modulo 4 KiB, the aliasing ones included.
#include "core/copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace nexar {
namespace {

constexpr size_t kSizes[] = {0, 1, 63, 64, 65, 1023, 1024, 1025, 4096, 4096 + 17, 65536 + 9};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 13);
  return v;
}

// dst = src + gap, with gap covering 0..127 past a page multiple and just
// before one: every aliasing distance (1..63) and its neighbours.
template <typename Copy>
void expect_memcpy_at_every_placement(Copy copy) {
  const size_t max = kSizes[std::size(kSizes) - 1];
  std::vector<uint8_t> arena(3 * max + 3 * 4096);
  uint8_t *src = arena.data() + 5;
  const std::vector<uint8_t> input = pattern(max, 7);
  for (size_t n : kSizes) {
    const size_t base = (n + 4095) / 4096 * 4096 + 4096;
    for (size_t gap = base - 8; gap < base + 128; ++gap) {
      uint8_t *dst = src + gap;
      std::copy(input.begin(), input.begin() + n, src);
      std::fill(dst - 1, dst + n + 1, uint8_t{0xA5});
      copy(dst, src, n);
      ASSERT_TRUE(std::equal(src, src + n, dst)) << "n " << n << " gap " << gap;
      ASSERT_EQ(dst[-1], 0xA5) << "wrote before the destination: n " << n << " gap " << gap;
      ASSERT_EQ(dst[n], 0xA5) << "wrote past the destination: n " << n << " gap " << gap;
    }
  }
}

TEST(CopyBytes, EqualsMemcpyAtEveryPlacement) {
  expect_memcpy_at_every_placement(copy_bytes);
}

// The loop copy_bytes takes on AMD at the aliasing distances, whatever this
// machine is.
TEST(CopyBytes, TheVectorLoopEqualsMemcpyAtEveryPlacement) {
  expect_memcpy_at_every_placement(detail::copy_by_vectors);
}

// Stores around the caches for large results: the same bytes, whatever the
// destination's alignment (its head and tail are copied plainly).
TEST(CopyBytes, StreamingEqualsMemcpyAtEveryPlacement) {
  expect_memcpy_at_every_placement(copy_bytes_streaming);
}

TEST(CopyBytes, TakesTheVectorLoopOnlyWhereMemcpyIsSlow) {
  std::vector<uint8_t> a(8192);
  uint8_t *p = a.data();
  EXPECT_TRUE(detail::aliases_4k(p + 4096 + 16, p, 2048));
  EXPECT_TRUE(detail::aliases_4k(p + 63, p, 1024));
  EXPECT_FALSE(detail::aliases_4k(p + 4096, p, 2048));  // same offset in the page
  EXPECT_FALSE(detail::aliases_4k(p + 64, p, 2048));
  EXPECT_FALSE(detail::aliases_4k(p, p + 16, 2048));  // destination before the source
  EXPECT_FALSE(detail::aliases_4k(p + 16, p, 1023));  // small: no "rep movsb"
}

TEST(MoveBytes, EqualsMemmoveForOverlappingAndDisjointBuffers) {
  for (size_t n : kSizes) {
    for (long shift : {-4113L, -4096L, -80L, -16L, -1L, 0L, 1L, 16L, 40L, 4096L, 4112L}) {
      std::vector<uint8_t> mine(n + 2 * 4200 + 16), want;
      const std::vector<uint8_t> input = pattern(mine.size(), static_cast<uint32_t>(n));
      std::copy(input.begin(), input.end(), mine.begin());
      want = mine;
      uint8_t *src = mine.data() + 4200;
      move_bytes(src + shift, src, n);
      std::memmove(want.data() + 4200 + shift, want.data() + 4200, n);
      ASSERT_EQ(mine, want) << "n " << n << " shift " << shift;
    }
  }
}

}  // namespace
}  // namespace nexar
