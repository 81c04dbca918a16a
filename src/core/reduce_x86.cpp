// SIMD reduction kernels for x86-64: AVX2 (+F16C) and AVX-512 (F, BW, DQ, VL), picked at run
// time by reduce.cpp. No special compile flags are needed.
//
// The kernels are written once, with GCC vector extensions, in the second half of this file. The
// first half includes this file into itself twice, once under `#pragma GCC target("avx2,...")`
// with 32-byte vectors and once under `#pragma GCC target("avx512f,...")` with 64-byte vectors,
// each time in its own namespace. (A target pragma, unlike a per-function target attribute, also
// covers the templates and helpers the kernels instantiate.)
//
// The kernels must match the scalar ones in reduce.cpp bit for bit: the same single IEEE
// operation per element (no FMA, no reassociation), the same NaN choices for MIN/MAX and the same
// round-to-nearest-even narrowing. Each handles whole vectors only and returns how many elements
// it did; reduce.cpp finishes the tail with the scalar kernel.
#ifndef NEXAR_REDUCE_X86_KERNELS

#include "core/reduce.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace nexar::detail {

template <class T, size_t N>
struct VecOf {
  typedef T type __attribute__((vector_size(N)));
};

}  // namespace nexar::detail

// Everything in a kernel's inner loop is inlined into it.
#define NEXAR_KERNEL_INLINE inline __attribute__((always_inline))

#define NEXAR_REDUCE_X86_KERNELS 1

#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#define NEXAR_REDUCE_VEC_BYTES 32
namespace nexar::detail::avx2_kernels {
#include "reduce_x86.cpp"  // NOLINT(build/include): the kernels, built for AVX2
}  // namespace nexar::detail::avx2_kernels
#undef NEXAR_REDUCE_VEC_BYTES
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")
#define NEXAR_REDUCE_VEC_BYTES 64
namespace nexar::detail::avx512_kernels {
#include "reduce_x86.cpp"  // NOLINT(build/include): the kernels, built for AVX-512
}  // namespace nexar::detail::avx512_kernels
#undef NEXAR_REDUCE_VEC_BYTES
#pragma GCC pop_options

#undef NEXAR_REDUCE_X86_KERNELS
#undef NEXAR_KERNEL_INLINE

namespace nexar::detail {

bool simd_kernels_built() {
  return true;
}

size_t reduce_avx2(void *dst, const void *a, const void *b, size_t count, nexar_dtype_t dtype,
                   nexar_op_t op) {
  return avx2_kernels::reduce(dst, a, b, count, dtype, op);
}

size_t reduce_avx512(void *dst, const void *a, const void *b, size_t count, nexar_dtype_t dtype,
                     nexar_op_t op) {
  return avx512_kernels::reduce(dst, a, b, count, dtype, op);
}

}  // namespace nexar::detail

#else  // no SIMD kernels for this target / compiler

namespace nexar::detail {

bool simd_kernels_built() {
  return false;
}

size_t reduce_avx2(void *, const void *, const void *, size_t, nexar_dtype_t, nexar_op_t) {
  return 0;
}

size_t reduce_avx512(void *, const void *, const void *, size_t, nexar_dtype_t, nexar_op_t) {
  return 0;
}

}  // namespace nexar::detail

#endif

#else  // NEXAR_REDUCE_X86_KERNELS: the kernels, included twice by the code above.

constexpr size_t kVecBytes = NEXAR_REDUCE_VEC_BYTES;
// Vectors per loop iteration: all loads, then all operations, then all stores.
constexpr size_t kUnroll = 4;

template <class T>
using Vec = typename VecOf<T, kVecBytes>::type;

template <class V>
NEXAR_KERNEL_INLINE V load(const unsigned char *p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class V>
NEXAR_KERNEL_INLINE void store(unsigned char *p, const V &v) {
  std::memcpy(p, &v, sizeof v);
}

// Runs Block::run<K> over groups of kUnroll vectors, then over single vectors, each vector
// holding ElemsPerVec elements of ElemBytes bytes. Returns the number of elements done.
template <class Block, size_t ElemBytes, size_t ElemsPerVec>
NEXAR_KERNEL_INLINE size_t drive(unsigned char *d, const unsigned char *a, const unsigned char *b,
                                 size_t n) {
  size_t i = 0;
  for (; n - i >= kUnroll * ElemsPerVec; i += kUnroll * ElemsPerVec) {
    const size_t off = i * ElemBytes;
    Block::template run<kUnroll>(d + off, a + off, b + off);
  }
  for (; n - i >= ElemsPerVec; i += ElemsPerVec) {
    const size_t off = i * ElemBytes;
    Block::template run<1>(d + off, a + off, b + off);
  }
  return i;
}

// ---- Element operations on whole vectors ------------------------------------------------------

template <class T, nexar_op_t Op>
NEXAR_KERNEL_INLINE Vec<T> int_apply(Vec<T> a, Vec<T> b) {
  using U = Vec<std::make_unsigned_t<T> >;
  if constexpr (Op == NEXAR_OP_SUM) {
    return (Vec<T>)((U)a + (U)b);  // wraps: unsigned arithmetic
  } else if constexpr (Op == NEXAR_OP_PROD) {
    return (Vec<T>)((U)a * (U)b);
  } else if constexpr (Op == NEXAR_OP_MIN) {
    return b < a ? b : a;
  } else {
    return a < b ? b : a;
  }
}

template <class F>
struct FloatBits;
template <>
struct FloatBits<float> {
  using I = int32_t;
  static constexpr I kQuiet = I{1} << 22;
};
template <>
struct FloatBits<double> {
  using I = int64_t;
  static constexpr I kQuiet = I{1} << 51;
};

// Same selection as float_min / float_max in reduce.cpp, lowest priority first: equal values
// (OR / AND of the bits, so -0 < +0), b, a, b if NaN (quieted), a if NaN (quieted).
template <class F, nexar_op_t Op>
NEXAR_KERNEL_INLINE Vec<F> float_apply(Vec<F> a, Vec<F> b) {
  using I = Vec<typename FloatBits<F>::I>;
  constexpr auto kQuiet = FloatBits<F>::kQuiet;
  const I ia = (I)a;
  if constexpr (Op == NEXAR_OP_SUM || Op == NEXAR_OP_PROD) {
    // As in reduce.cpp: a NaN in a wins (quieted); otherwise the hardware's own result, which
    // is b quieted if b is NaN, or the default NaN for an invalid operation.
    const I r = (I)(Op == NEXAR_OP_SUM ? a + b : a * b);
    return (Vec<F>)(a != a ? (ia | kQuiet) : r);
  } else {
    const I ib = (I)b;
    I r;
    if constexpr (Op == NEXAR_OP_MIN) {
      r = ia | ib;
      r = b < a ? ib : r;
      r = a < b ? ia : r;
    } else {
      r = ia & ib;
      r = b > a ? ib : r;
      r = a > b ? ia : r;
    }
    r = b != b ? (ib | kQuiet) : r;
    r = a != a ? (ia | kQuiet) : r;
    return (Vec<F>)r;
  }
}

// ---- Blocks: K vectors' worth of elements ------------------------------------------------------

template <class T, nexar_op_t Op>
struct PlainBlock {
  using V = Vec<T>;
  template <size_t K>
  static NEXAR_KERNEL_INLINE void run(unsigned char *d, const unsigned char *a,
                                      const unsigned char *b) {
    V x[K], y[K];
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) {
      x[k] = load<V>(a + k * sizeof(V));
      y[k] = load<V>(b + k * sizeof(V));
    }
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) {
      if constexpr (std::is_floating_point_v<T>) {
        x[k] = float_apply<T, Op>(x[k], y[k]);
      } else {
        x[k] = int_apply<T, Op>(x[k], y[k]);
      }
    }
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k)
      store(d + k * sizeof(V), x[k]);
  }
};

// f16: one f32 vector's worth of halves, widened and narrowed by F16C (round to nearest even;
// the scalar conversions in reduce.cpp reproduce these instructions exactly).
constexpr size_t kHalfBytes = kVecBytes / 2;

#if NEXAR_REDUCE_VEC_BYTES == 64
// The all-ones-mask maskz forms: GCC 12's unmasked ones trip -Wmaybe-uninitialized.
NEXAR_KERNEL_INLINE Vec<float> f16_load(const unsigned char *p) {
  return (Vec<float>)_mm512_maskz_cvtph_ps(0xffff, load<__m256i>(p));
}
NEXAR_KERNEL_INLINE void f16_store(unsigned char *p, Vec<float> v) {
  store(p, _mm512_maskz_cvtps_ph(0xffff, (__m512)v, _MM_FROUND_TO_NEAREST_INT));
}
#else
NEXAR_KERNEL_INLINE Vec<float> f16_load(const unsigned char *p) {
  return (Vec<float>)_mm256_cvtph_ps(load<__m128i>(p));
}
NEXAR_KERNEL_INLINE void f16_store(unsigned char *p, Vec<float> v) {
  store(p, _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT));
}
#endif

template <nexar_op_t Op>
struct F16Block {
  template <size_t K>
  static NEXAR_KERNEL_INLINE void run(unsigned char *d, const unsigned char *a,
                                      const unsigned char *b) {
    Vec<float> x[K], y[K];
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) {
      x[k] = f16_load(a + k * kHalfBytes);
      y[k] = f16_load(b + k * kHalfBytes);
    }
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k)
      x[k] = float_apply<float, Op>(x[k], y[k]);
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k)
      f16_store(d + k * kHalfBytes, x[k]);
  }
};

// bf16: a vector of u32 holds two bf16 per lane. The even (low) elements widen to f32 by a
// shift, the odd (high) ones by a mask; both halves are computed in f32 and rounded back.
using U32 = Vec<uint32_t>;
using I32 = Vec<int32_t>;

// Rounds f32 bits to nearest even at bit 16 (NaN: set the quiet bit instead). The bf16 result is
// in the top 16 bits of each lane; the low 16 bits are garbage.
NEXAR_KERNEL_INLINE U32 bf16_round(U32 u) {
  const U32 rounded = u + 0x7fffu + ((u >> 16) & 1u);
  const I32 nan = (I32)(u & 0x7fffffffu) > 0x7f800000;
  return nan ? (u | 0x00400000u) : rounded;
}

template <nexar_op_t Op>
struct BF16Block {
  template <size_t K>
  static NEXAR_KERNEL_INLINE void run(unsigned char *d, const unsigned char *a,
                                      const unsigned char *b) {
    U32 x[K], y[K];
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) {
      x[k] = load<U32>(a + k * sizeof(U32));
      y[k] = load<U32>(b + k * sizeof(U32));
    }
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) {
      const Vec<float> lo =
          float_apply<float, Op>((Vec<float>)(x[k] << 16), (Vec<float>)(y[k] << 16));
      const Vec<float> hi = float_apply<float, Op>((Vec<float>)(x[k] & 0xffff0000u),
                                                   (Vec<float>)(y[k] & 0xffff0000u));
      x[k] = (bf16_round((U32)lo) >> 16) | (bf16_round((U32)hi) & 0xffff0000u);
    }
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k)
      store(d + k * sizeof(U32), x[k]);
  }
};

// ---- Dispatch
// ------------------------------------------------------------------------------------

template <class T, nexar_op_t Op>
NEXAR_KERNEL_INLINE size_t plain(unsigned char *d, const unsigned char *a, const unsigned char *b,
                                 size_t n) {
  return drive<PlainBlock<T, Op>, sizeof(T), kVecBytes / sizeof(T)>(d, a, b, n);
}

template <nexar_op_t Op>
size_t reduce_op(unsigned char *d, const unsigned char *a, const unsigned char *b, size_t n,
                 nexar_dtype_t dtype) {
  switch (dtype) {
    case NEXAR_DTYPE_F32:
      return plain<float, Op>(d, a, b, n);
    case NEXAR_DTYPE_F64:
      return plain<double, Op>(d, a, b, n);
    case NEXAR_DTYPE_F16:
      return drive<F16Block<Op>, 2, kVecBytes / 4>(d, a, b, n);
    case NEXAR_DTYPE_BF16:
      return drive<BF16Block<Op>, 2, kVecBytes / 2>(d, a, b, n);
    case NEXAR_DTYPE_I8:
      return plain<int8_t, Op>(d, a, b, n);
    case NEXAR_DTYPE_I32:
      return plain<int32_t, Op>(d, a, b, n);
    case NEXAR_DTYPE_I64:
      return plain<int64_t, Op>(d, a, b, n);
    case NEXAR_DTYPE_U8:
      return plain<uint8_t, Op>(d, a, b, n);
    case NEXAR_DTYPE_U32:
      return plain<uint32_t, Op>(d, a, b, n);
    case NEXAR_DTYPE_U64:
      return plain<uint64_t, Op>(d, a, b, n);
    default:
      return 0;
  }
}

size_t reduce(void *dst, const void *a, const void *b, size_t n, nexar_dtype_t dtype,
              nexar_op_t op) {
  auto *d = static_cast<unsigned char *>(dst);
  const auto *x = static_cast<const unsigned char *>(a);
  const auto *y = static_cast<const unsigned char *>(b);
  switch (op) {
    case NEXAR_OP_SUM:
      return reduce_op<NEXAR_OP_SUM>(d, x, y, n, dtype);
    case NEXAR_OP_PROD:
      return reduce_op<NEXAR_OP_PROD>(d, x, y, n, dtype);
    case NEXAR_OP_MIN:
      return reduce_op<NEXAR_OP_MIN>(d, x, y, n, dtype);
    case NEXAR_OP_MAX:
      return reduce_op<NEXAR_OP_MAX>(d, x, y, n, dtype);
    default:
      return 0;
  }
}

#endif  // NEXAR_REDUCE_X86_KERNELS
