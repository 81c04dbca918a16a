// A gradient compressor with error feedback (nexar_compressor_t). Each call
// adds the residual to its input, keeps k elements of the sum (TopK: the
// largest magnitudes; RandomK: positions drawn from the shared seed and the
// call number) and keeps the rest as the next residual, so nothing is lost,
// only delayed. Values are not scaled.
//
// Residual: f32 and f64 tensors keep it in their own type; f16 and bf16
// accumulate in f32, and a kept element leaves its rounding error (sum minus
// its f16/bf16 value, exact in f32) in the residual. So, per element and in
// the accumulation type: sent + new residual == input + old residual exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "nexar.h"

namespace nexar {

enum class CompressKind : int32_t { TopK = NEXAR_COMPRESS_TOPK, RandomK = NEXAR_COMPRESS_RANDOMK };

// What one call keeps: k positions (ascending) and their values in the
// tensor's dtype.
struct CompressedPart {
  CompressKind kind;
  nexar_dtype_t dtype;
  size_t count;  // the tensor's elements
  std::vector<uint32_t> index;
  std::vector<uint8_t> values;  // index.size() elements of dtype
  uint32_t digest;              // the parameters and call number every rank must share
};

class Compressor {
 public:
  // NEXAR_ERR_INVALID_ARGUMENT for an unknown kind, a dtype other than F32,
  // F64, F16, BF16, a ratio outside (0, 1], count 0 or above 2^32 - 1.
  static Status create(int32_t kind, double ratio, size_t count, nexar_dtype_t dtype, uint64_t seed,
                       std::unique_ptr<Compressor> *out);

  // Compresses input (count elements of dtype) into *part and updates the
  // residual; advances the call number.
  void compress(const void *input, CompressedPart *part);
  void reset();

  CompressKind kind() const { return kind_; }
  size_t count() const { return count_; }
  size_t k() const { return k_; }
  nexar_dtype_t dtype() const { return dtype_; }
  uint64_t calls() const { return calls_; }
  // The residual in the accumulation type (f64 for F64, else f32).
  const void *residual() const;

 private:
  Compressor(CompressKind kind, double ratio, size_t count, nexar_dtype_t dtype, uint64_t seed);
  template <class Acc>
  void compress_as(const void *input, std::vector<Acc> &residual, CompressedPart *part);
  uint32_t digest() const;

  CompressKind kind_;
  double ratio_;
  size_t count_, k_;
  nexar_dtype_t dtype_;
  uint64_t seed_;
  uint64_t calls_ = 0;
  std::vector<float> residual_f32_;   // F32, F16, BF16
  std::vector<double> residual_f64_;  // F64
};

}  // namespace nexar
