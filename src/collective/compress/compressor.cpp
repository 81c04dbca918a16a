#include "collective/compress/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collective/compress/element_cast.h"
#include "collective/compress/random_positions.h"
#include "collective/compress/topk_candidates.h"
#include "collective/compress/topk_select.h"
#include "core/dtype.h"

namespace nexar {

Status Compressor::create(int32_t kind, double ratio, size_t count, nexar_dtype_t dtype,
                          uint64_t seed, std::unique_ptr<Compressor> *out) {
  if (kind != NEXAR_COMPRESS_TOPK && kind != NEXAR_COMPRESS_RANDOMK)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("kind %d is not NEXAR_COMPRESS_TOPK or NEXAR_COMPRESS_RANDOMK", kind));
  if (!(ratio > 0.0 && ratio <= 1.0))
    return error(NEXAR_ERR_INVALID_ARGUMENT, format("ratio %g is outside (0, 1]", ratio));
  if (count == 0 || count > UINT32_MAX)
    return error(NEXAR_ERR_INVALID_ARGUMENT, format("count %zu is outside 1 to 2^32 - 1", count));
  if (dtype != NEXAR_DTYPE_F32 && dtype != NEXAR_DTYPE_F64 && dtype != NEXAR_DTYPE_F16 &&
      dtype != NEXAR_DTYPE_BF16)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("dtype %s is not f32, f64, f16 or bf16", dtype_name(dtype)));
  out->reset(new Compressor(static_cast<CompressKind>(kind), ratio, count, dtype, seed));
  return Status();
}

Compressor::Compressor(CompressKind kind, double ratio, size_t count, nexar_dtype_t dtype,
                       uint64_t seed)
    : kind_(kind), ratio_(ratio), count_(count), dtype_(dtype), seed_(seed) {
  const double kept = std::floor(ratio * static_cast<double>(count));
  k_ = std::clamp<size_t>(static_cast<size_t>(kept), 1, count);
  if (dtype == NEXAR_DTYPE_F64)
    residual_f64_.assign(count, 0.0);
  else
    residual_f32_.assign(count, 0.0f);
}

const void *Compressor::residual() const {
  return dtype_ == NEXAR_DTYPE_F64 ? static_cast<const void *>(residual_f64_.data())
                                   : static_cast<const void *>(residual_f32_.data());
}

void Compressor::reset() {
  std::fill(residual_f32_.begin(), residual_f32_.end(), 0.0f);
  std::fill(residual_f64_.begin(), residual_f64_.end(), 0.0);
}

// FNV-1a over every parameter and the call number.
uint32_t Compressor::digest() const {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  uint64_t ratio_bits;
  memcpy(&ratio_bits, &ratio_, sizeof ratio_bits);
  mix(static_cast<uint64_t>(kind_));
  mix(ratio_bits);
  mix(count_);
  mix(k_);
  mix(static_cast<uint64_t>(dtype_));
  mix(seed_);
  mix(calls_);
  return static_cast<uint32_t>(h ^ (h >> 32));
}

namespace {

// Element i of input (of dtype), widened to Acc: plain loads for f32 and
// f64 so that the add vectorises.
template <class Acc>
inline Acc input_at(const void *input, size_t i, nexar_dtype_t dtype) {
  if (dtype == NEXAR_DTYPE_F32 || dtype == NEXAR_DTYPE_F64) {
    Acc x;
    memcpy(&x, static_cast<const uint8_t *>(input) + i * sizeof(Acc), sizeof x);
    return x;
  }
  return widen<Acc>(input, i, dtype);
}

template <class Acc>
void add_block(Acc *v, const void *input, size_t first, size_t count, nexar_dtype_t dtype) {
  if (dtype == NEXAR_DTYPE_F32 || dtype == NEXAR_DTYPE_F64) {
    const uint8_t *in = static_cast<const uint8_t *>(input) + first * sizeof(Acc);
    for (size_t i = 0; i < count; ++i) {
      Acc x;
      memcpy(&x, in + i * sizeof(Acc), sizeof x);
      v[first + i] += x;
    }
  } else {
    for (size_t i = first; i < first + count; ++i)
      v[i] += widen<Acc>(input, i, dtype);
  }
}

}  // namespace

template <class Acc>
void Compressor::compress_as(const void *input, std::vector<Acc> &residual, CompressedPart *part) {
  // residual becomes input + residual: the vector to compress, in blocks
  // that stay in cache between the add and what follows it: TopK on a long
  // vector gathers its candidates, RandomK (positions known beforehand)
  // takes its kept values.
  constexpr size_t kBlock = 4096;
  Acc *v = residual.data();
  const size_t esize = dtype_size(dtype_);
  // Sends element j of the index; what stays behind is the rounding of a
  // kept f16/bf16 value (exact in f32), nothing for f32 and f64, never an
  // infinity's NaN.
  auto keep = [&](size_t j) {
    Acc &x = v[part->index[j]];
    const Acc rest = x - narrow(part->values.data(), j, x, dtype_);
    x = std::isfinite(rest) ? rest : Acc(0);
  };
  if (kind_ == CompressKind::RandomK) {
    random_positions(seed_, calls_, count_, k_, &part->index);
    part->values.resize(part->index.size() * esize);
    size_t j = 0;
    for (size_t first = 0; first < count_; first += kBlock) {
      const size_t len = std::min(kBlock, count_ - first);
      add_block(v, input, first, len, dtype_);
      for (; j < part->index.size() && part->index[j] < first + len; ++j)
        keep(j);
    }
    return;
  }
  TopkCandidates<Acc> candidates(count_, k_);
  if (candidates.active()) {
    std::vector<Acc> sample;
    for (size_t at : candidates.sample_positions())
      sample.push_back(v[at] + input_at<Acc>(input, at, dtype_));
    candidates.set_sample(sample.data());
  }
  for (size_t first = 0; first < count_; first += kBlock) {
    const size_t len = std::min(kBlock, count_ - first);
    add_block(v, input, first, len, dtype_);
    if (candidates.active()) candidates.scan(v, first, len);
  }
  if (!candidates.select(v, &part->index)) select_topk_exhaustive(v, count_, k_, &part->index);
  part->values.resize(part->index.size() * esize);
  const size_t kept = part->index.size();
  constexpr size_t kAhead = 16;  // positions are far apart: fetch ahead
  for (size_t j = 0; j < kept; ++j) {
    if (j + kAhead < kept) __builtin_prefetch(&v[part->index[j + kAhead]], 1);
    keep(j);
  }
}

void Compressor::compress(const void *input, CompressedPart *part) {
  part->kind = kind_;
  part->dtype = dtype_;
  part->count = count_;
  part->digest = digest();
  if (dtype_ == NEXAR_DTYPE_F64)
    compress_as(input, residual_f64_, part);
  else
    compress_as(input, residual_f32_, part);
  ++calls_;
}

}  // namespace nexar
