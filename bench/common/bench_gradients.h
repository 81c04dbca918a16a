// The gradient-traffic rows of nexar-bench (nexar only):
//   bucketed          nexar_allreduce_bucketed over a list of tensors shaped
//                     like ResNet-50's 161 parameter tensors, scaled to the
//                     row's size (exactly ResNet-50's 25,557,032 floats at
//                     102228128 B)
//   per_tensor        the same list, one nexar_allreduce per tensor
//   compressed_topk   nexar_allreduce_compressed, TopK 1 % of the row's size
//   compressed_randomk  the same with RandomK
// Checks: bucketed and per_tensor give the allreduce's result; the
// compressed rows send (rank + 1) times a pattern every rank shares, so all
// keep the same positions and the result is the sum of every rank's values
// at k = 1 % positions and zero elsewhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace benchm {

inline bool isGradientOp(const std::string &op) {
  return op == "bucketed" || op == "per_tensor" || op == "compressed_topk" ||
         op == "compressed_randomk";
}
inline bool isCompressedOp(const std::string &op) {
  return op == "compressed_topk" || op == "compressed_randomk";
}

// The compressed rows keep this fraction.
constexpr double kCompressRatio = 0.01;

// k as nexar_compressor_create computes it.
inline std::size_t compressedK(std::size_t count) {
  const double kept = std::floor(kCompressRatio * static_cast<double>(count));
  return std::clamp<std::size_t>(static_cast<std::size_t>(kept), 1, count);
}

// The compressed rows' input on rank r: (r + 1) times this, a small integer
// (1 to 4096; sums stay exact) spread over the positions, so that every rank
// keeps the same TopK positions and the selection sees many distinct values.
inline float compressedMagnitude(std::size_t i) {
  return float(1 + (std::uint32_t(i * 2654435761u) >> 20));
}

// The positions TopK keeps of compressedMagnitude: the k largest, ties to the
// lower position (as nexar_compressor_create's TopK does).
inline std::vector<char> compressedTopk(std::size_t count, std::size_t k) {
  std::vector<float> m(count);
  for (std::size_t i = 0; i < count; ++i)
    m[i] = compressedMagnitude(i);
  std::vector<float> sorted = m;
  std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(k - 1), sorted.end(),
                   [](float a, float b) { return a > b; });
  const float t = sorted[k - 1];
  std::size_t ties = k;
  for (float x : m)
    ties -= x > t;
  std::vector<char> kept(count, 0);
  for (std::size_t i = 0; i < count; ++i)
    kept[i] = m[i] > t || (m[i] == t && ties > 0 && ties--);
  return kept;
}

// ResNet-50's parameter tensors in torchvision's order (elements each): the
// stem, 16 bottleneck blocks in 4 stages (3, 4, 6, 3; the first of each with
// a projection), the classifier. 161 tensors, 25,557,032 elements.
inline std::vector<std::size_t> resnet50Counts() {
  std::vector<std::size_t> c;
  auto conv_bn = [&](std::size_t out, std::size_t in, std::size_t k) {
    c.push_back(out * in * k * k);
    c.push_back(out);  // batch-norm weight
    c.push_back(out);  // and bias
  };
  conv_bn(64, 3, 7);
  std::size_t in = 64;
  const std::size_t blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s)
    for (std::size_t b = 0; b < blocks[s]; ++b) {
      const std::size_t w = widths[s];
      conv_bn(w, in, 1);
      conv_bn(w, w, 3);
      conv_bn(4 * w, w, 1);
      if (b == 0) conv_bn(4 * w, in, 1);  // the projection
      in = 4 * w;
    }
  c.push_back(1000 * 2048);
  c.push_back(1000);
  return c;
}

// ResNet-50's counts scaled to about `floats` in all (each at least 1).
inline std::vector<std::size_t> gradientList(std::size_t floats) {
  std::vector<std::size_t> c = resnet50Counts();
  std::size_t total = 0;
  for (std::size_t x : c)
    total += x;
  if (floats == total) return c;
  const double scale = double(floats) / double(total);
  for (std::size_t &x : c)
    x = std::max<std::size_t>(1, std::size_t(double(x) * scale));
  return c;
}

}  // namespace benchm
