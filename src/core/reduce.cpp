// Reduction kernels: the scalar reference implementation, the run-time choice of SIMD level and
// the public entry points. The SIMD kernels live in reduce_x86.cpp and must agree with the scalar
// ones here bit for bit (reduce_test.cpp checks that).
#include "core/reduce.h"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/dtype.h"

static_assert(std::endian::native == std::endian::little,
              "the reduction kernels assume little-endian element encoding");

namespace nexar {

// ---- Conversions ----------------------------------------------------------------------------

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in f32 (and a normal f32 when mant != 0).
    bits = std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f) | sign;
  } else if (exp == 0x1f) {
    // Inf, or NaN made quiet with its payload kept (as VCVTPH2PS does).
    bits = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  } else {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {
    // NaN: quiet, payload truncated to its top bits (as VCVTPS2PH does).
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a >= 0x477ff000u) {
    // >= 65520, halfway between the largest f16 (65504) and 2^16: rounds to infinity.
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (a >= 0x38800000u) {
    // Normal f16 (>= 2^-14): rebias the exponent, round the 13 dropped bits to nearest even.
    // A carry out of the mantissa correctly bumps the exponent.
    const uint32_t r = (a - ((127u - 15u) << 23)) + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  // Subnormal f16 or zero: m = round(|f| / 2^-24). Below 2^-25 (f32 exponent < 102) it is 0.
  const uint32_t e = a >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (m & 1u))) ++m;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | m);
}

float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

namespace {

// ---- Scalar element operations --------------------------------------------------------------

template <class F>
struct FloatBits;
template <>
struct FloatBits<float> {
  using U = uint32_t;
  static constexpr U kQuiet = U{1} << 22;
};
template <>
struct FloatBits<double> {
  using U = uint64_t;
  static constexpr U kQuiet = U{1} << 51;
};

// IEEE 754-2019 minimum/maximum with a fixed choice of NaN: the SIMD kernels compute the very
// same selection with vector compares and blends.
template <class F>
F float_min(F a, F b) {
  using U = typename FloatBits<F>::U;
  const U ua = std::bit_cast<U>(a), ub = std::bit_cast<U>(b);
  if (a != a) return std::bit_cast<F>(static_cast<U>(ua | FloatBits<F>::kQuiet));
  if (b != b) return std::bit_cast<F>(static_cast<U>(ub | FloatBits<F>::kQuiet));
  if (a < b) return a;
  if (b < a) return b;
  return std::bit_cast<F>(static_cast<U>(ua | ub));  // equal; -0 wins over +0
}

template <class F>
F float_max(F a, F b) {
  using U = typename FloatBits<F>::U;
  const U ua = std::bit_cast<U>(a), ub = std::bit_cast<U>(b);
  if (a != a) return std::bit_cast<F>(static_cast<U>(ua | FloatBits<F>::kQuiet));
  if (b != b) return std::bit_cast<F>(static_cast<U>(ub | FloatBits<F>::kQuiet));
  if (a > b) return a;
  if (b > a) return b;
  return std::bit_cast<F>(static_cast<U>(ua & ub));  // equal; +0 wins over -0
}

template <class F, nexar_op_t Op>
F float_op(F a, F b) {
  if constexpr (Op == NEXAR_OP_SUM || Op == NEXAR_OP_PROD) {
    // The hardware already returns the one NaN operand, quieted; when both are NaN, which one
    // it returns depends on operand order, which the compiler may swap. Pin it to a.
    using U = typename FloatBits<F>::U;
    if (a != a) return std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(a) | FloatBits<F>::kQuiet));
    return Op == NEXAR_OP_SUM ? a + b : a * b;
  } else if constexpr (Op == NEXAR_OP_MIN) {
    return float_min(a, b);
  } else {
    return float_max(a, b);
  }
}

template <class T, nexar_op_t Op>
T int_op(T a, T b) {
  // Wrapping arithmetic in an unsigned type at least as wide as unsigned int (no promotion to
  // signed int, hence no overflow UB).
  using W = std::conditional_t<(sizeof(T) <= sizeof(unsigned)), unsigned, uint64_t>;
  if constexpr (Op == NEXAR_OP_SUM) {
    return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
  } else if constexpr (Op == NEXAR_OP_PROD) {
    return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
  } else if constexpr (Op == NEXAR_OP_MIN) {
    return b < a ? b : a;
  } else {
    return a < b ? b : a;
  }
}

struct F16Op {
  static float load(uint16_t h) { return f16_to_f32(h); }
  static uint16_t store(float f) { return f32_to_f16(f); }
};
struct BF16Op {
  static float load(uint16_t h) { return bf16_to_f32(h); }
  static uint16_t store(float f) { return f32_to_bf16(f); }
};

// ---- Scalar kernels ---------------------------------------------------------------------------

// Elements go through memcpy: the buffers may be unaligned. Each element is read before dst's
// element is written, so dst may be a or b.
template <class T, class Fn>
void scalar_loop(unsigned char *dst, const unsigned char *a, const unsigned char *b, size_t n,
                 Fn fn) {
  for (size_t i = 0; i < n; ++i) {
    T x, y;
    std::memcpy(&x, a + i * sizeof(T), sizeof(T));
    std::memcpy(&y, b + i * sizeof(T), sizeof(T));
    const T r = fn(x, y);
    std::memcpy(dst + i * sizeof(T), &r, sizeof(T));
  }
}

template <nexar_op_t Op>
void scalar_reduce_op(unsigned char *d, const unsigned char *a, const unsigned char *b, size_t n,
                      nexar_dtype_t dtype) {
  switch (dtype) {
    case NEXAR_DTYPE_F32:
      return scalar_loop<float>(d, a, b, n, float_op<float, Op>);
    case NEXAR_DTYPE_F64:
      return scalar_loop<double>(d, a, b, n, float_op<double, Op>);
    case NEXAR_DTYPE_F16:
      return scalar_loop<uint16_t>(d, a, b, n, [](uint16_t x, uint16_t y) {
        return F16Op::store(float_op<float, Op>(F16Op::load(x), F16Op::load(y)));
      });
    case NEXAR_DTYPE_BF16:
      return scalar_loop<uint16_t>(d, a, b, n, [](uint16_t x, uint16_t y) {
        return BF16Op::store(float_op<float, Op>(BF16Op::load(x), BF16Op::load(y)));
      });
    case NEXAR_DTYPE_I8:
      return scalar_loop<int8_t>(d, a, b, n, int_op<int8_t, Op>);
    case NEXAR_DTYPE_I32:
      return scalar_loop<int32_t>(d, a, b, n, int_op<int32_t, Op>);
    case NEXAR_DTYPE_I64:
      return scalar_loop<int64_t>(d, a, b, n, int_op<int64_t, Op>);
    case NEXAR_DTYPE_U8:
      return scalar_loop<uint8_t>(d, a, b, n, int_op<uint8_t, Op>);
    case NEXAR_DTYPE_U32:
      return scalar_loop<uint32_t>(d, a, b, n, int_op<uint32_t, Op>);
    case NEXAR_DTYPE_U64:
      return scalar_loop<uint64_t>(d, a, b, n, int_op<uint64_t, Op>);
    default:
      return;
  }
}

void scalar_reduce(unsigned char *d, const unsigned char *a, const unsigned char *b, size_t n,
                   nexar_dtype_t dtype, nexar_op_t op) {
  switch (op) {
    case NEXAR_OP_SUM:
      return scalar_reduce_op<NEXAR_OP_SUM>(d, a, b, n, dtype);
    case NEXAR_OP_PROD:
      return scalar_reduce_op<NEXAR_OP_PROD>(d, a, b, n, dtype);
    case NEXAR_OP_MIN:
      return scalar_reduce_op<NEXAR_OP_MIN>(d, a, b, n, dtype);
    case NEXAR_OP_MAX:
      return scalar_reduce_op<NEXAR_OP_MAX>(d, a, b, n, dtype);
    default:
      return;
  }
}

// ---- SIMD level -------------------------------------------------------------------------------

SimdLevel detect_simd_level() {
  if (!detail::simd_kernels_built()) return SimdLevel::Scalar;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 register state.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  if (avx512) return SimdLevel::Avx512;
  if (avx2) return SimdLevel::Avx2;
#endif
  return SimdLevel::Scalar;
}

SimdLevel clamp_level(SimdLevel want) {
  const SimdLevel best = simd_level_supported();
  return static_cast<int>(want) > static_cast<int>(best) ? best : want;
}

constexpr int kLevelUnset = -1;
std::atomic<int> g_level{kLevelUnset};

SimdLevel initial_level() {
  SimdLevel level = simd_level_supported();
  if (const char *env = std::getenv("NEXAR_SIMD")) {
    if (std::strcmp(env, "scalar") == 0) {
      level = SimdLevel::Scalar;
    } else if (std::strcmp(env, "avx2") == 0) {
      level = clamp_level(SimdLevel::Avx2);
    } else if (std::strcmp(env, "avx512") == 0) {
      level = clamp_level(SimdLevel::Avx512);
    }
  }
  return level;
}

}  // namespace

SimdLevel simd_level_supported() {
  static const SimdLevel best = detect_simd_level();
  return best;
}

SimdLevel simd_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level == kLevelUnset) {
    // First use: the environment decides unless force_simd_level() got there first.
    int expected = kLevelUnset;
    const int initial = static_cast<int>(initial_level());
    level = g_level.compare_exchange_strong(expected, initial, std::memory_order_relaxed)
                ? initial
                : expected;
  }
  return static_cast<SimdLevel>(level);
}

void force_simd_level(SimdLevel level) {
  g_level.store(static_cast<int>(clamp_level(level)), std::memory_order_relaxed);
}

const char *simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx2:
      return "avx2";
    case SimdLevel::Avx512:
      return "avx512";
    default:
      return "scalar";
  }
}

// ---- Entry points -------------------------------------------------------------------------------

void reduce_out(void *dst, const void *a, const void *b, size_t count, nexar_dtype_t dtype,
                nexar_op_t op) {
  if (count == 0 || !dtype_valid(dtype) || !op_valid(op)) return;
  auto *d = static_cast<unsigned char *>(dst);
  const auto *x = static_cast<const unsigned char *>(a);
  const auto *y = static_cast<const unsigned char *>(b);
  size_t done = 0;
  switch (simd_level()) {
    case SimdLevel::Avx512:
      done = detail::reduce_avx512(d, x, y, count, dtype, op);
      break;
    case SimdLevel::Avx2:
      done = detail::reduce_avx2(d, x, y, count, dtype, op);
      break;
    case SimdLevel::Scalar:
      break;
  }
  if (done < count) {
    const size_t off = done * dtype_size(dtype);
    scalar_reduce(d + off, x + off, y + off, count - done, dtype, op);
  }
}

void reduce_inplace(void *dst, const void *src, size_t count, nexar_dtype_t dtype, nexar_op_t op) {
  reduce_out(dst, dst, src, count, dtype, op);
}

namespace {

template <class T>
void store_identity(unsigned char *out, T v) {
  std::memcpy(out, &v, sizeof v);
}

template <class T>
void int_identity(unsigned char *out, nexar_op_t op) {
  switch (op) {
    case NEXAR_OP_PROD:
      return store_identity<T>(out, T{1});
    case NEXAR_OP_MIN:
      return store_identity<T>(out, std::numeric_limits<T>::max());
    case NEXAR_OP_MAX:
      return store_identity<T>(out, std::numeric_limits<T>::min());
    default:
      return store_identity<T>(out, T{0});
  }
}

// `one`, `inf` and `ninf` are the dtype's encodings of 1, +inf and -inf.
template <class U>
void float_identity(unsigned char *out, nexar_op_t op, U one, U inf, U ninf) {
  switch (op) {
    case NEXAR_OP_PROD:
      return store_identity<U>(out, one);
    case NEXAR_OP_MIN:
      return store_identity<U>(out, inf);
    case NEXAR_OP_MAX:
      return store_identity<U>(out, ninf);
    default:
      return store_identity<U>(out, U{0});
  }
}

// The identity element's encoding in out[0 .. dtype_size).
void identity_element(unsigned char *out, nexar_dtype_t dtype, nexar_op_t op) {
  switch (dtype) {
    case NEXAR_DTYPE_F32:
      return float_identity<uint32_t>(out, op, 0x3f800000, 0x7f800000, 0xff800000);
    case NEXAR_DTYPE_F64:
      return float_identity<uint64_t>(out, op, 0x3ff0000000000000, 0x7ff0000000000000,
                                      0xfff0000000000000);
    case NEXAR_DTYPE_F16:
      return float_identity<uint16_t>(out, op, 0x3c00, 0x7c00, 0xfc00);
    case NEXAR_DTYPE_BF16:
      return float_identity<uint16_t>(out, op, 0x3f80, 0x7f80, 0xff80);
    case NEXAR_DTYPE_I8:
      return int_identity<int8_t>(out, op);
    case NEXAR_DTYPE_I32:
      return int_identity<int32_t>(out, op);
    case NEXAR_DTYPE_I64:
      return int_identity<int64_t>(out, op);
    case NEXAR_DTYPE_U8:
      return int_identity<uint8_t>(out, op);
    case NEXAR_DTYPE_U32:
      return int_identity<uint32_t>(out, op);
    case NEXAR_DTYPE_U64:
      return int_identity<uint64_t>(out, op);
    default:
      return;
  }
}

}  // namespace

void fill_identity(void *dst, size_t count, nexar_dtype_t dtype, nexar_op_t op) {
  const size_t size = dtype_size(dtype);
  if (count == 0 || size == 0 || !op_valid(op)) return;
  auto *d = static_cast<unsigned char *>(dst);
  const size_t total = count * size;
  if (op == NEXAR_OP_SUM) {  // zero is all-zero bits in every dtype
    std::memset(d, 0, total);
    return;
  }
  identity_element(d, dtype, op);
  // Double the filled prefix until it covers the buffer.
  for (size_t filled = size; filled < total;) {
    const size_t n = filled < total - filled ? filled : total - filled;
    std::memcpy(d + filled, d, n);
    filled += n;
  }
}

}  // namespace nexar
