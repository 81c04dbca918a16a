// Tests for the reduction kernels (core/reduce.h) and dtype helpers (core/dtype.h).
//
// Expected values come from a reference written independently of the kernels: floating point
// through exact (or provably innocuous) wider arithmetic and a separate rounding routine,
// integers through __int128 arithmetic truncated to the element width.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace nexar {
namespace {

const nexar_dtype_t kAllDtypes[] = {
    NEXAR_DTYPE_F32, NEXAR_DTYPE_F64, NEXAR_DTYPE_F16, NEXAR_DTYPE_BF16, NEXAR_DTYPE_I8,
    NEXAR_DTYPE_I32, NEXAR_DTYPE_I64, NEXAR_DTYPE_U8,  NEXAR_DTYPE_U32,  NEXAR_DTYPE_U64};
const nexar_op_t kAllOps[] = {NEXAR_OP_SUM, NEXAR_OP_PROD, NEXAR_OP_MIN, NEXAR_OP_MAX};
const size_t kCounts[] = {0, 1, 7, 15, 16, 17, 63, 1000, 4097};

bool is_float(nexar_dtype_t dt) {
  return dt == NEXAR_DTYPE_F32 || dt == NEXAR_DTYPE_F64 || dt == NEXAR_DTYPE_F16 ||
         dt == NEXAR_DTYPE_BF16;
}

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> levels = {SimdLevel::Scalar};
  if (simd_level_supported() >= SimdLevel::Avx2) levels.push_back(SimdLevel::Avx2);
  if (simd_level_supported() >= SimdLevel::Avx512) levels.push_back(SimdLevel::Avx512);
  return levels;
}

// Restores the SIMD level a test changed.
class LevelGuard {
 public:
  LevelGuard() : saved_(simd_level()) {}
  ~LevelGuard() { force_simd_level(saved_); }

 private:
  SimdLevel saved_;
};

// ---- Reference floating point ------------------------------------------------------------------

// The 16-bit formats as (precision incl. hidden bit, minimum normal exponent, maximum exponent).
struct Format {
  int precision;
  int emin;
  int emax;
};
constexpr Format kF16{11, -14, 15};
constexpr Format kBF16{8, -126, 127};

// Rounds x (a double) to the format, nearest even, with gradual underflow; +-inf on overflow.
double round_to_format(double x, Format f) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e = std::ilogb(x);
  if (e < f.emin) e = f.emin;
  const double quantum = std::ldexp(1.0, e - (f.precision - 1));
  const double r = std::nearbyint(x / quantum) * quantum;  // default mode: nearest even
  const double max = std::ldexp(2.0 - std::ldexp(1.0, 1 - f.precision), f.emax);
  if (std::fabs(r) > max) return std::copysign(INFINITY, x);
  return r;
}

double f16_decode(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return (h & 0x8000) ? -v : v;
}

// Encodes a value already representable in f16 (or +-inf); NaN must be handled by the caller.
uint16_t f16_encode_exact(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  v = std::fabs(v);
  if (std::isinf(v)) return sign | 0x7c00;
  if (v < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(v, 24));
  const int e = std::ilogb(v);
  const int mant = static_cast<int>(std::ldexp(v, 10 - e)) - 1024;
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mant);
}

double bf16_decode(uint16_t h) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(h) << 16));
}

uint16_t bf16_encode_exact(double v) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16);
}

// Expected result of one element: `bits` exactly, unless any_nan (an invalid operation such as
// inf - inf: any NaN will do; the CPU's default NaN in practice).
struct Expect {
  uint64_t bits;
  bool any_nan;
};

// min/max with NaN propagation (first NaN operand, quieted) and -0 < +0, on decoded values.
// Returns 0 for "a", 1 for "b", 2 for "a NaN", 3 for "b NaN".
int minmax_pick(double a, double b, bool is_min) {
  if (std::isnan(a)) return 2;
  if (std::isnan(b)) return 3;
  if (a == b) {
    // Same value: only the sign of zero can differ. min prefers -0, max prefers +0.
    if (std::signbit(a) == std::signbit(b)) return 0;
    return (std::signbit(a) == is_min) ? 0 : 1;
  }
  return ((a < b) == is_min) ? 0 : 1;
}

template <class Bits>
Expect minmax_expect(Bits ua, Bits ub, double a, double b, bool is_min, Bits quiet) {
  switch (minmax_pick(a, b, is_min)) {
    case 0:
      return {ua, false};
    case 1:
      return {ub, false};
    case 2:
      return {static_cast<Bits>(ua | quiet), false};
    default:
      return {static_cast<Bits>(ub | quiet), false};
  }
}

Expect ref_f32(uint32_t ua, uint32_t ub, nexar_op_t op) {
  const double a = std::bit_cast<float>(ua), b = std::bit_cast<float>(ub);
  if (op == NEXAR_OP_MIN || op == NEXAR_OP_MAX) {
    return minmax_expect<uint32_t>(ua, ub, a, b, op == NEXAR_OP_MIN, 0x00400000u);
  }
  if (std::isnan(a)) return {ua | 0x00400000u, false};
  if (std::isnan(b)) return {ub | 0x00400000u, false};
  // A double sum of two floats rounded to float equals the float sum (53 >= 2*24+2); the
  // double product is exact.
  const double r = op == NEXAR_OP_SUM ? a + b : a * b;
  if (std::isnan(r)) return {0, true};
  return {std::bit_cast<uint32_t>(static_cast<float>(r)), false};
}

Expect ref_f64(uint64_t ua, uint64_t ub, nexar_op_t op) {
  const double a = std::bit_cast<double>(ua), b = std::bit_cast<double>(ub);
  if (op == NEXAR_OP_MIN || op == NEXAR_OP_MAX) {
    return minmax_expect<uint64_t>(ua, ub, a, b, op == NEXAR_OP_MIN, uint64_t{1} << 51);
  }
  if (std::isnan(a)) return {ua | uint64_t{1} << 51, false};
  if (std::isnan(b)) return {ub | uint64_t{1} << 51, false};
  // Binary128 arithmetic (113 >= 2*53+2) then one rounding to double.
  const __float128 qa = a, qb = b;
  const __float128 q = op == NEXAR_OP_SUM ? qa + qb : qa * qb;
  const double r = static_cast<double>(q);
  if (std::isnan(r)) return {0, true};
  return {std::bit_cast<uint64_t>(r), false};
}

// f16 and bf16: the exact sum or product fits in a double (f16 always; bf16 sums may be rounded
// once, which is innocuous since 53 >= 2*8+2), then one rounding to the format.
Expect ref_half(uint16_t ua, uint16_t ub, nexar_op_t op, bool bf16) {
  const double a = bf16 ? bf16_decode(ua) : f16_decode(ua);
  const double b = bf16 ? bf16_decode(ub) : f16_decode(ub);
  if (op == NEXAR_OP_MIN || op == NEXAR_OP_MAX) {
    return minmax_expect<uint16_t>(ua, ub, a, b, op == NEXAR_OP_MIN, bf16 ? 0x0040 : 0x0200);
  }
  const uint16_t quiet = bf16 ? 0x0040 : 0x0200;
  if (std::isnan(a)) return {static_cast<uint16_t>(ua | quiet), false};
  if (std::isnan(b)) return {static_cast<uint16_t>(ub | quiet), false};
  const double exact = op == NEXAR_OP_SUM ? a + b : a * b;
  if (std::isnan(exact)) return {0, true};
  const double r = round_to_format(exact, bf16 ? kBF16 : kF16);
  return {bf16 ? bf16_encode_exact(r) : f16_encode_exact(r), false};
}

template <class T>
Expect ref_int(uint64_t ua, uint64_t ub, nexar_op_t op) {
  const __int128 a = static_cast<T>(ua), b = static_cast<T>(ub);
  // SUM and PROD modulo 2^128 (unsigned: no overflow UB), MIN and MAX exact.
  unsigned __int128 r;
  switch (op) {
    case NEXAR_OP_SUM:
      r = static_cast<unsigned __int128>(a) + static_cast<unsigned __int128>(b);
      break;
    case NEXAR_OP_PROD:
      r = static_cast<unsigned __int128>(a) * static_cast<unsigned __int128>(b);
      break;
    case NEXAR_OP_MIN:
      r = a < b ? a : b;
      break;
    default:
      r = a > b ? a : b;
      break;
  }
  // Truncation to the element width: wrap-around.
  using U = std::make_unsigned_t<T>;
  return {static_cast<uint64_t>(static_cast<U>(r)), false};
}

Expect ref_elem(nexar_dtype_t dt, nexar_op_t op, uint64_t a, uint64_t b) {
  switch (dt) {
    case NEXAR_DTYPE_F32:
      return ref_f32(static_cast<uint32_t>(a), static_cast<uint32_t>(b), op);
    case NEXAR_DTYPE_F64:
      return ref_f64(a, b, op);
    case NEXAR_DTYPE_F16:
      return ref_half(static_cast<uint16_t>(a), static_cast<uint16_t>(b), op, false);
    case NEXAR_DTYPE_BF16:
      return ref_half(static_cast<uint16_t>(a), static_cast<uint16_t>(b), op, true);
    case NEXAR_DTYPE_I8:
      return ref_int<int8_t>(a, b, op);
    case NEXAR_DTYPE_I32:
      return ref_int<int32_t>(a, b, op);
    case NEXAR_DTYPE_I64:
      return ref_int<int64_t>(a, b, op);
    case NEXAR_DTYPE_U8:
      return ref_int<uint8_t>(a, b, op);
    case NEXAR_DTYPE_U32:
      return ref_int<uint32_t>(a, b, op);
    default:
      return ref_int<uint64_t>(a, b, op);
  }
}

bool bits_are_nan(nexar_dtype_t dt, uint64_t v) {
  switch (dt) {
    case NEXAR_DTYPE_F32:
      return (v & 0x7fffffffu) > 0x7f800000u;
    case NEXAR_DTYPE_F64:
      return (v & 0x7fffffffffffffffu) > 0x7ff0000000000000u;
    case NEXAR_DTYPE_F16:
      return (v & 0x7fffu) > 0x7c00u;
    case NEXAR_DTYPE_BF16:
      return (v & 0x7fffu) > 0x7f80u;
    default:
      return false;
  }
}

// ---- Buffers ---------------------------------------------------------------------------------

uint64_t get_elem(const unsigned char *p, size_t i, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p + i * size, size);
  return v;
}

void set_elem(unsigned char *p, size_t i, size_t size, uint64_t v) {
  std::memcpy(p + i * size, &v, size);
}

// A buffer of `count` elements starting one byte past an aligned allocation (so it is
// misaligned for every element size), between guard bytes that must never change.
class Buf {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xa5;

  Buf(size_t count, size_t size) : size_(size), bytes_(count * size + 2 * kGuard + 1) {
    std::memset(bytes_.data(), kGuardByte, bytes_.size());
  }
  unsigned char *data() { return bytes_.data() + kGuard + 1; }
  const unsigned char *data() const { return bytes_.data() + kGuard + 1; }
  size_t count() const { return (bytes_.size() - 2 * kGuard - 1) / size_; }
  uint64_t get(size_t i) const { return get_elem(data(), i, size_); }
  void set(size_t i, uint64_t v) { set_elem(data(), i, size_, v); }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (bytes_[i] != kGuardByte || bytes_[bytes_.size() - 1 - i] != kGuardByte) return false;
    }
    return true;
  }
  void copy_from(const Buf &o) { std::memcpy(data(), o.data(), count() * size_); }
  bool same_bytes(const Buf &o) const {
    return std::memcmp(data(), o.data(), count() * size_) == 0;
  }

 private:
  size_t size_;
  std::vector<unsigned char> bytes_;
};

// Random, deliberately non-uniform element bit patterns: special values, small integers, near
// duplicates of the other operand, extremes, subnormals, NaNs (with payloads) and raw bits.
class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  uint64_t bits(nexar_dtype_t dt, uint64_t other) {
    const uint64_t raw = rng_();
    const int pick = static_cast<int>(rng_() % 100);
    if (is_float(dt)) return float_bits(dt, raw, pick, other);
    return int_bits(dt, raw, pick, other);
  }

  void fill(nexar_dtype_t dt, Buf &a, Buf &b) {
    for (size_t i = 0; i < a.count(); ++i) {
      a.set(i, bits(dt, 0));
      b.set(i, bits(dt, a.get(i)));
    }
  }

 private:
  uint64_t float_bits(nexar_dtype_t dt, uint64_t raw, int pick, uint64_t other) {
    // Sign, exponent and mantissa widths.
    int ebits, mbits;
    switch (dt) {
      case NEXAR_DTYPE_F32:
        ebits = 8, mbits = 23;
        break;
      case NEXAR_DTYPE_F64:
        ebits = 11, mbits = 52;
        break;
      case NEXAR_DTYPE_F16:
        ebits = 5, mbits = 10;
        break;
      default:
        ebits = 8, mbits = 7;
        break;
    }
    const uint64_t sign = uint64_t{1} << (ebits + mbits);
    const uint64_t exp_mask = ((uint64_t{1} << ebits) - 1) << mbits;
    const uint64_t mant_mask = (uint64_t{1} << mbits) - 1;
    const uint64_t bias = (uint64_t{1} << (ebits - 1)) - 1;
    const uint64_t s = (raw >> 63) ? sign : 0;
    if (pick < 25) {  // moderate magnitudes: exponent within +-8 of 1
      const uint64_t e = bias - 8 + (raw >> 40) % 17;
      return s | (e << mbits) | (raw & mant_mask);
    }
    if (pick < 35) {  // small integers and halves: many exact ties and equalities
      const double v = static_cast<double>(static_cast<int>(raw % 9) - 4) / ((raw >> 8) % 2 + 1);
      return encode(dt, v);
    }
    if (pick < 45) return other;                                   // equal to the other operand
    if (pick < 50) return other ^ sign;                            // its negation
    if (pick < 55) return s;                                       // +-0
    if (pick < 62) return s | (raw & mant_mask);                   // subnormal
    if (pick < 67) return s | exp_mask;                            // +-inf
    if (pick < 70) return s | exp_mask | ((raw & mant_mask) | 1);  // NaN, quiet or signalling
    if (pick < 75) return s | (exp_mask - (uint64_t{1} << mbits)) | (raw & mant_mask);  // huge
    return raw & ((sign << 1) - 1);  // any bit pattern
  }

  static uint64_t encode(nexar_dtype_t dt, double v) {
    switch (dt) {
      case NEXAR_DTYPE_F32:
        return std::bit_cast<uint32_t>(static_cast<float>(v));
      case NEXAR_DTYPE_F64:
        return std::bit_cast<uint64_t>(v);
      case NEXAR_DTYPE_F16:
        return f16_encode_exact(v);
      default:
        return bf16_encode_exact(v);
    }
  }

  static uint64_t int_bits(nexar_dtype_t dt, uint64_t raw, int pick, uint64_t other) {
    const size_t size = dtype_size(dt);
    const uint64_t mask = size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
    const uint64_t top = uint64_t{1} << (8 * size - 1);
    if (pick < 25) return static_cast<uint64_t>(static_cast<int64_t>(raw % 7) - 3) & mask;
    if (pick < 35) return other;
    if (pick < 45) return (raw % 2 ? top : top - 1) & mask;    // extremes
    if (pick < 50) return (raw % 2 ? mask : 0);                // -1 / max unsigned, and 0
    if (pick < 70) return (raw >> (raw % (8 * size))) & mask;  // assorted magnitudes
    return raw & mask;
  }

  std::mt19937_64 rng_;
};

std::string hex(uint64_t v) {
  char s[24];
  std::snprintf(s, sizeof s, "0x%llx", static_cast<unsigned long long>(v));
  return s;
}

// Checks out[i] against the reference for a[i] op b[i]; reports the first mismatch.
::testing::AssertionResult matches_reference(nexar_dtype_t dt, nexar_op_t op, const Buf &a,
                                             const Buf &b, const Buf &out) {
  for (size_t i = 0; i < out.count(); ++i) {
    const Expect e = ref_elem(dt, op, a.get(i), b.get(i));
    const uint64_t got = out.get(i);
    const bool ok = e.any_nan ? bits_are_nan(dt, got) : got == e.bits;
    if (!ok) {
      return ::testing::AssertionFailure()
             << dtype_name(dt) << " " << op_name(op) << " element " << i << ": a=" << hex(a.get(i))
             << " b=" << hex(b.get(i)) << " got=" << hex(got)
             << " want=" << (e.any_nan ? std::string("any NaN") : hex(e.bits));
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- dtype helpers -----------------------------------------------------------------------------

TEST(Dtype, SizesNamesAndValidity) {
  const size_t sizes[] = {4, 8, 2, 2, 1, 4, 8, 1, 4, 8};
  const char *names[] = {"f32", "f64", "f16", "bf16", "i8", "i32", "i64", "u8", "u32", "u64"};
  for (nexar_dtype_t dt : kAllDtypes) {
    EXPECT_TRUE(dtype_valid(dt));
    EXPECT_EQ(dtype_size(dt), sizes[dt]);
    EXPECT_STREQ(dtype_name(dt), names[dt]);
  }
  for (nexar_dtype_t dt : {-1, 10, 1000}) {
    EXPECT_FALSE(dtype_valid(dt));
    EXPECT_EQ(dtype_size(dt), 0u);
    EXPECT_STREQ(dtype_name(dt), "unknown");
  }
  const char *ops[] = {"sum", "prod", "min", "max"};
  for (nexar_op_t op : kAllOps) {
    EXPECT_TRUE(op_valid(op));
    EXPECT_STREQ(op_name(op), ops[op]);
  }
  EXPECT_FALSE(op_valid(-1));
  EXPECT_FALSE(op_valid(4));
  EXPECT_STREQ(op_name(4), "unknown");
}

// ---- Every dtype x op against the reference -----------------------------------------------------

class ReduceAll : public ::testing::TestWithParam<std::tuple<nexar_dtype_t, nexar_op_t>> {
 protected:
  LevelGuard guard_;
};

TEST_P(ReduceAll, MatchesReferenceAtEveryLevel) {
  const auto [dt, op] = GetParam();
  const size_t size = dtype_size(dt);
  for (size_t count : kCounts) {
    Buf a(count, size), b(count, size);
    Gen gen(count * 131 + static_cast<uint64_t>(dt) * 17 + static_cast<uint64_t>(op));
    gen.fill(dt, a, b);
    std::vector<Buf> results;
    for (SimdLevel level : supported_levels()) {
      SCOPED_TRACE(std::string(simd_level_name(level)) + " count " + std::to_string(count));
      force_simd_level(level);
      ASSERT_EQ(simd_level(), level);

      // reduce_out into a separate buffer.
      Buf out(count, size);
      reduce_out(out.data(), a.data(), b.data(), count, dt, op);
      EXPECT_TRUE(matches_reference(dt, op, a, b, out));
      EXPECT_TRUE(out.guards_intact());

      // reduce_inplace: dst starts as a copy of a.
      Buf inplace(count, size);
      inplace.copy_from(a);
      reduce_inplace(inplace.data(), b.data(), count, dt, op);
      EXPECT_TRUE(inplace.same_bytes(out));
      EXPECT_TRUE(inplace.guards_intact());

      // reduce_out with dst aliasing a, and with dst aliasing b.
      Buf alias_a(count, size), alias_b(count, size);
      alias_a.copy_from(a);
      alias_b.copy_from(b);
      reduce_out(alias_a.data(), alias_a.data(), b.data(), count, dt, op);
      reduce_out(alias_b.data(), a.data(), alias_b.data(), count, dt, op);
      EXPECT_TRUE(alias_a.same_bytes(out));
      EXPECT_TRUE(alias_b.same_bytes(out));

      // The inputs are untouched.
      Gen again(count * 131 + static_cast<uint64_t>(dt) * 17 + static_cast<uint64_t>(op));
      Buf a2(count, size), b2(count, size);
      again.fill(dt, a2, b2);
      EXPECT_TRUE(a.same_bytes(a2) && b.same_bytes(b2));

      results.push_back(std::move(out));
    }
    // Every level gives the very same bytes, NaN payloads included.
    for (size_t i = 1; i < results.size(); ++i) {
      EXPECT_TRUE(results[i].same_bytes(results[0]))
          << dtype_name(dt) << " " << op_name(op) << " count " << count << ": "
          << simd_level_name(supported_levels()[i]) << " differs from scalar";
    }
  }
}

TEST_P(ReduceAll, DstEqualsBothInputs) {
  const auto [dt, op] = GetParam();
  const size_t size = dtype_size(dt);
  const size_t count = 1000;
  Buf a(count, size), unused(count, size);
  Gen gen(99 + static_cast<uint64_t>(dt));
  gen.fill(dt, a, unused);
  for (SimdLevel level : supported_levels()) {
    force_simd_level(level);
    Buf x(count, size);
    x.copy_from(a);
    reduce_out(x.data(), x.data(), x.data(), count, dt, op);
    EXPECT_TRUE(matches_reference(dt, op, a, a, x)) << simd_level_name(level);
  }
}

std::string case_name(const ::testing::TestParamInfo<ReduceAll::ParamType> &info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" + op_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAllOps, ReduceAll,
                         ::testing::Combine(::testing::ValuesIn(kAllDtypes),
                                            ::testing::ValuesIn(kAllOps)),
                         case_name);

// ---- Chosen values
// -------------------------------------------------------------------------------

// Runs a op b elementwise at every level on `n` repetitions of the given pairs, checks every
// repetition gives `want`.
template <class T>
void check_pairs(nexar_dtype_t dt, nexar_op_t op, const std::vector<T> &a, const std::vector<T> &b,
                 const std::vector<T> &want, size_t reps = 151) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), want.size());
  const size_t n = a.size() * reps;  // long enough for the vector loops, odd-sized tail
  Buf x(n, sizeof(T)), y(n, sizeof(T));
  for (size_t i = 0; i < n; ++i) {
    x.set(i, static_cast<uint64_t>(a[i % a.size()]));
    y.set(i, static_cast<uint64_t>(b[i % b.size()]));
  }
  LevelGuard guard;
  for (SimdLevel level : supported_levels()) {
    force_simd_level(level);
    Buf out(n, sizeof(T));
    reduce_out(out.data(), x.data(), y.data(), n, dt, op);
    for (size_t i = 0; i < n; ++i) {
      T got;
      std::memcpy(&got, out.data() + i * sizeof(T), sizeof(T));
      ASSERT_EQ(got, want[i % want.size()])
          << dtype_name(dt) << " " << op_name(op) << " " << simd_level_name(level) << " pair "
          << i % want.size();
    }
  }
}

TEST(ReduceInt, WrapAround) {
  check_pairs<int8_t>(NEXAR_DTYPE_I8, NEXAR_OP_SUM, {127, -128, -1, 100}, {1, -1, -128, 100},
                      {-128, 127, 127, -56});
  check_pairs<int8_t>(NEXAR_DTYPE_I8, NEXAR_OP_PROD, {-128, 16, -1, 127}, {-1, 16, -128, 127},
                      {-128, 0, -128, 1});
  check_pairs<uint8_t>(NEXAR_DTYPE_U8, NEXAR_OP_SUM, {255, 128, 0}, {1, 128, 255}, {0, 0, 255});
  check_pairs<uint8_t>(NEXAR_DTYPE_U8, NEXAR_OP_PROD, {16, 255, 15}, {16, 255, 17}, {0, 1, 255});
  check_pairs<int32_t>(NEXAR_DTYPE_I32, NEXAR_OP_SUM, {INT32_MAX, INT32_MIN}, {1, -1},
                       {INT32_MIN, INT32_MAX});
  check_pairs<int32_t>(NEXAR_DTYPE_I32, NEXAR_OP_PROD, {INT32_MIN, 65536, 46341},
                       {-1, 65536, 46341}, {INT32_MIN, 0, -2147479015});
  check_pairs<uint32_t>(NEXAR_DTYPE_U32, NEXAR_OP_SUM, {UINT32_MAX}, {2}, {1});
  check_pairs<uint32_t>(NEXAR_DTYPE_U32, NEXAR_OP_PROD, {UINT32_MAX, 65536}, {UINT32_MAX, 65536},
                        {1, 0});
  check_pairs<int64_t>(NEXAR_DTYPE_I64, NEXAR_OP_SUM, {INT64_MAX, INT64_MIN}, {1, -1},
                       {INT64_MIN, INT64_MAX});
  check_pairs<int64_t>(NEXAR_DTYPE_I64, NEXAR_OP_PROD, {INT64_MIN, int64_t{1} << 32, 3},
                       {-1, int64_t{1} << 32, INT64_MAX}, {INT64_MIN, 0, INT64_MAX - 2});
  check_pairs<uint64_t>(NEXAR_DTYPE_U64, NEXAR_OP_SUM, {UINT64_MAX}, {UINT64_MAX},
                        {UINT64_MAX - 1});
  check_pairs<uint64_t>(NEXAR_DTYPE_U64, NEXAR_OP_PROD, {UINT64_MAX, uint64_t{1} << 63},
                        {UINT64_MAX, 2}, {1, 0});
}

TEST(ReduceInt, MinMaxSignedness) {
  check_pairs<int8_t>(NEXAR_DTYPE_I8, NEXAR_OP_MIN, {-1, 127, -128}, {1, -128, 0},
                      {-1, -128, -128});
  check_pairs<uint8_t>(NEXAR_DTYPE_U8, NEXAR_OP_MIN, {255, 128}, {1, 127}, {1, 127});
  check_pairs<uint8_t>(NEXAR_DTYPE_U8, NEXAR_OP_MAX, {255, 128}, {1, 127}, {255, 128});
  check_pairs<int64_t>(NEXAR_DTYPE_I64, NEXAR_OP_MAX, {-1, INT64_MIN}, {1, INT64_MAX},
                       {1, INT64_MAX});
  check_pairs<uint64_t>(NEXAR_DTYPE_U64, NEXAR_OP_MAX, {UINT64_MAX, 1}, {1, uint64_t{1} << 63},
                        {UINT64_MAX, uint64_t{1} << 63});
  check_pairs<uint32_t>(NEXAR_DTYPE_U32, NEXAR_OP_MIN, {0x80000000u}, {0x7fffffffu}, {0x7fffffffu});
}

TEST(ReduceBf16, RoundToNearestEvenOnTies) {
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7: ties go to 1.
  // (1 + 2^-7) + 2^-8 is halfway between 0x3f81 (odd) and 0x3f82: ties go to 0x3f82.
  // 1 + 3*2^-9 is above halfway: 0x3f81. -(1 + 2^-8): -1.
  // The largest finite plus its half ulp (2^119) ties to even: infinity.
  const uint16_t one = 0x3f80, half_ulp = 0x3b80, three_q = 0x3bc0;
  check_pairs<uint16_t>(NEXAR_DTYPE_BF16, NEXAR_OP_SUM, {one, 0x3f81, one, 0xbf80, 0x7f7f, 0x0001},
                        {half_ulp, half_ulp, three_q, 0xbb80, 0x7b00, 0x0001},
                        {0x3f80, 0x3f82, 0x3f81, 0xbf80, 0x7f80, 0x0002});
  // Products: 1.5 * (1 + 2^-7) = 1.5 + 1.5*2^-7 -> halfway ties; check both parities.
  // 0x3fc0 = 1.5, 0x3f81 = 1+2^-7: exact 1.51171875 = 0x3fc1 + half ulp -> even 0x3fc2.
  // 0x3fc0 * 0x3f83 (1 + 3*2^-7) = 1.53515625 -> between 0x3fc4 and 0x3fc5, tie -> 0x3fc4.
  // Subnormal ties: 2^-133 * 0.5 ties to 0, 3*2^-133 * 0.5 ties to 2*2^-133, and
  // 2^-133 * 0.75 rounds up to 2^-133.
  check_pairs<uint16_t>(NEXAR_DTYPE_BF16, NEXAR_OP_PROD,
                        {0x3fc0, 0x3fc0, 0x0001, 0x0003, 0x0001, 0x8003},
                        {0x3f81, 0x3f83, 0x3f00, 0x3f00, 0x3f40, 0x3f00},
                        {0x3fc2, 0x3fc4, 0x0000, 0x0002, 0x0001, 0x8002});
}

TEST(ReduceBf16, ConversionHelpers) {
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f807fffu)), 0x3f80);  // below the tie
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7f8000u)), 0x7f80);  // overflow to inf
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0xff800000u)), 0xff80);  // -inf
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f800001u)), 0x7fc0);  // sNaN -> quiet NaN
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0xffc12345u)), 0xffc1);  // qNaN payload kept
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7fffffffu)), 0x7fff);  // no carry into sign
  EXPECT_EQ(std::bit_cast<uint32_t>(bf16_to_f32(0x1234)), 0x12340000u);
}

// ---- f16 ---------------------------------------------------------------------------------------

TEST(ReduceF16, WideningMatchesReference) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const double want = f16_decode(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      // NaN: made quiet, payload kept in the top mantissa bits, sign kept.
      const uint32_t expect = ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13);
      ASSERT_EQ(std::bit_cast<uint32_t>(f), expect) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
    }
  }
}

TEST(ReduceF16, NarrowingSpecialCases) {
  auto n = [](uint32_t bits) { return f32_to_f16(std::bit_cast<float>(bits)); };
  auto v = [](float f) { return f32_to_f16(f); };
  EXPECT_EQ(v(0.0f), 0x0000);
  EXPECT_EQ(v(-0.0f), 0x8000);
  EXPECT_EQ(v(1.0f), 0x3c00);
  EXPECT_EQ(v(65504.0f), 0x7bff);
  EXPECT_EQ(v(65519.99f), 0x7bff);  // just below the tie with 2^16
  EXPECT_EQ(v(65520.0f), 0x7c00);   // the tie rounds to even = infinity
  EXPECT_EQ(v(-1e9f), 0xfc00);
  EXPECT_EQ(v(INFINITY), 0x7c00);
  EXPECT_EQ(v(-INFINITY), 0xfc00);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even); just above rounds to 2^-24.
  EXPECT_EQ(v(0x1p-24f), 0x0001);
  EXPECT_EQ(v(0x1p-25f), 0x0000);
  EXPECT_EQ(v(-0x1p-25f), 0x8000);
  EXPECT_EQ(n(0x33000001u), 0x0001);
  EXPECT_EQ(v(0x1.8p-24f), 0x0002);    // 1.5 ulp ties to 2 (even)
  EXPECT_EQ(v(0x1.4p-23f), 0x0002);    // 2.5 ulp ties to 2 (even)
  EXPECT_EQ(v(0x1.ff8p-15f), 0x03ff);  // largest subnormal
  EXPECT_EQ(v(0x1.ffcp-15f), 0x0400);  // its tie with 2^-14 rounds up to the smallest normal
  EXPECT_EQ(v(0x1p-14f), 0x0400);
  EXPECT_EQ(v(1e-30f), 0x0000);
  EXPECT_EQ(n(0x00000001u), 0x0000);  // f32 subnormal
  // Normal rounding ties: 1 + 2^-11 ties to 1; 1 + 3*2^-11 ties to 1 + 2^-9.
  EXPECT_EQ(v(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(v(1.0f + 0x3p-11f), 0x3c02);
  // NaN: quiet, top payload bits kept.
  EXPECT_EQ(n(0x7f800001u), 0x7e00);
  EXPECT_EQ(n(0x7fa00000u), 0x7f00);
  EXPECT_EQ(n(0xffc00001u), 0xfe00);
  EXPECT_EQ(n(0x7fffffffu), 0x7fff);
}

// Checks f32_to_f16 against the reference rounding for a sweep of f32 patterns.
TEST(ReduceF16, NarrowingMatchesReference) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521) {
    for (uint32_t d = 0; d < 4; ++d) {  // include near-tie neighbours
      const uint32_t bits = static_cast<uint32_t>(u) ^ d;
      const float f = std::bit_cast<float>(bits);
      if (std::isnan(f)) continue;
      const double r = round_to_format(f, kF16);
      ASSERT_EQ(f32_to_f16(f), f16_encode_exact(r)) << std::hex << bits;
    }
  }
  // Every tie in the f16 range: values with exactly the bit below the f16 precision set.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = f16_decode(static_cast<uint16_t>(h));
    const double hi = f16_decode(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in f32
    ASSERT_EQ(f32_to_f16(mid), f16_encode_exact(round_to_format(mid, kF16))) << std::hex << h;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The scalar conversions reproduce the F16C instructions (used by the SIMD paths) exactly.
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(uint32_t bits) {
  return static_cast<uint16_t>(
      _cvtss_sh(std::bit_cast<float>(bits), 0 /* _MM_FROUND_TO_NEAREST_INT */));
}
__attribute__((target("f16c"))) uint32_t hw_f16_to_f32(uint16_t h) {
  return std::bit_cast<uint32_t>(_cvtsh_ss(h));
}

TEST(ReduceF16, ScalarConversionMatchesF16C) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(std::bit_cast<uint32_t>(f16_to_f32(static_cast<uint16_t>(h))),
              hw_f16_to_f32(static_cast<uint16_t>(h)))
        << std::hex << h;
  }
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) {
    for (uint32_t d = 0; d < 3; ++d) {
      const uint32_t bits = static_cast<uint32_t>(u) + d;
      ASSERT_EQ(f32_to_f16(std::bit_cast<float>(bits)), hw_f32_to_f16(bits)) << std::hex << bits;
    }
  }
}
#endif

TEST(ReduceF16, SubnormalsInfNaNThroughKernels) {
  const uint16_t inf = 0x7c00, ninf = 0xfc00;
  // Sums: subnormal + subnormal, carry into the smallest normal, overflow, inf - inf.
  check_pairs<uint16_t>(
      NEXAR_DTYPE_F16, NEXAR_OP_SUM, {0x0001, 0x03ff, 0x7bff, inf, 0x8001, 0x0200},
      {0x0001, 0x0001, 0x7bff, 0x3c00, 0x0001, 0x0200}, {0x0002, 0x0400, inf, inf, 0x0000, 0x0400});
  // Products into the subnormal range: 2^-14 * 2^-11 = 2^-25 ties to 0; *1.5 rounds to 2^-24.
  check_pairs<uint16_t>(NEXAR_DTYPE_F16, NEXAR_OP_PROD, {0x0400, 0x0400, 0x3c00, 0x8400},
                        {0x1000, 0x1200, 0x0001, 0x1200}, {0x0000, 0x0001, 0x0001, 0x8001});
  // inf - inf and 0 * inf are NaN.
  {
    LevelGuard guard;
    const uint16_t a[] = {inf, 0x0000}, b[] = {ninf, inf};
    const nexar_op_t ops[] = {NEXAR_OP_SUM, NEXAR_OP_PROD};
    for (SimdLevel level : supported_levels()) {
      force_simd_level(level);
      for (int k = 0; k < 2; ++k) {
        std::vector<uint16_t> x(100, a[k]), y(100, b[k]), out(100);
        reduce_out(out.data(), x.data(), y.data(), 100, NEXAR_DTYPE_F16, ops[k]);
        for (uint16_t r : out)
          EXPECT_GT(r & 0x7fff, 0x7c00) << simd_level_name(level);
      }
    }
  }
  // NaN operands stay quiet NaNs with their payload.
  check_pairs<uint16_t>(NEXAR_DTYPE_F16, NEXAR_OP_SUM, {0x7e01, 0x3c00}, {0x3c00, 0xfd23},
                        {0x7e01, 0xff23});
}

// ---- NaN and signed zeros in MIN/MAX
// -------------------------------------------------------------

TEST(ReduceFloat, MinMaxPropagateNaNAndOrderZeros) {
  // f32: a NaN in either operand wins (a's if both, quieted); -0 < +0 either way round.
  const uint32_t qa = 0x7fc00001, sa = 0x7f800002, qb = 0xffc00003, one = 0x3f800000,
                 two = 0x40000000, pz = 0, nz = 0x80000000, inf = 0x7f800000;
  check_pairs<uint32_t>(NEXAR_DTYPE_F32, NEXAR_OP_MIN,
                        {qa, one, qa, sa, one, pz, nz, one, inf, two},
                        {one, qb, qb, one, sa, nz, pz, two, qa, one},
                        {qa, qb, qa, 0x7fc00002, 0x7fc00002, nz, nz, one, qa, one});
  check_pairs<uint32_t>(NEXAR_DTYPE_F32, NEXAR_OP_MAX,
                        {qa, one, qa, sa, one, pz, nz, one, inf, two},
                        {one, qb, qb, one, sa, nz, pz, two, qa, one},
                        {qa, qb, qa, 0x7fc00002, 0x7fc00002, pz, pz, two, qa, two});
  // f64.
  const uint64_t dq = 0x7ff8000000000005, ds = 0xfff0000000000007, d1 = 0x3ff0000000000000, dpz = 0,
                 dnz = 0x8000000000000000;
  check_pairs<uint64_t>(NEXAR_DTYPE_F64, NEXAR_OP_MIN, {dq, d1, ds, dpz}, {d1, ds, dq, dnz},
                        {dq, 0xfff8000000000007, 0xfff8000000000007, dnz});
  check_pairs<uint64_t>(NEXAR_DTYPE_F64, NEXAR_OP_MAX, {dq, d1, ds, dnz}, {d1, ds, dq, dpz},
                        {dq, 0xfff8000000000007, 0xfff8000000000007, dpz});
  // f16 and bf16.
  check_pairs<uint16_t>(NEXAR_DTYPE_F16, NEXAR_OP_MIN, {0x7c01, 0x3c00, 0x0000, 0x7e00},
                        {0x3c00, 0xfe05, 0x8000, 0x7c00}, {0x7e01, 0xfe05, 0x8000, 0x7e00});
  check_pairs<uint16_t>(NEXAR_DTYPE_F16, NEXAR_OP_MAX, {0x7c01, 0x3c00, 0x8000, 0xfc00},
                        {0x3c00, 0xfe05, 0x0000, 0xfc01}, {0x7e01, 0xfe05, 0x0000, 0xfe01});
  check_pairs<uint16_t>(NEXAR_DTYPE_BF16, NEXAR_OP_MIN, {0x7f81, 0x3f80, 0x0000, 0xff80},
                        {0x3f80, 0xffc5, 0x8000, 0x7f80}, {0x7fc1, 0xffc5, 0x8000, 0xff80});
  check_pairs<uint16_t>(NEXAR_DTYPE_BF16, NEXAR_OP_MAX, {0x7f81, 0x3f80, 0x8000, 0xff80},
                        {0x3f80, 0xffc5, 0x0000, 0x7f80}, {0x7fc1, 0xffc5, 0x0000, 0x7f80});
}

// ---- fill_identity
// -------------------------------------------------------------------------------

TEST(FillIdentity, Values) {
  struct Row {
    nexar_dtype_t dt;
    uint64_t sum, prod, min, max;
  };
  const Row rows[] = {
      {NEXAR_DTYPE_F32, 0, 0x3f800000, 0x7f800000, 0xff800000},
      {NEXAR_DTYPE_F64, 0, 0x3ff0000000000000, 0x7ff0000000000000, 0xfff0000000000000},
      {NEXAR_DTYPE_F16, 0, 0x3c00, 0x7c00, 0xfc00},
      {NEXAR_DTYPE_BF16, 0, 0x3f80, 0x7f80, 0xff80},
      {NEXAR_DTYPE_I8, 0, 1, 0x7f, 0x80},
      {NEXAR_DTYPE_I32, 0, 1, 0x7fffffff, 0x80000000},
      {NEXAR_DTYPE_I64, 0, 1, 0x7fffffffffffffff, 0x8000000000000000},
      {NEXAR_DTYPE_U8, 0, 1, 0xff, 0},
      {NEXAR_DTYPE_U32, 0, 1, 0xffffffff, 0},
      {NEXAR_DTYPE_U64, 0, 1, 0xffffffffffffffff, 0},
  };
  for (const Row &row : rows) {
    const size_t size = dtype_size(row.dt);
    const uint64_t want[] = {row.sum, row.prod, row.min, row.max};
    for (nexar_op_t op : kAllOps) {
      for (size_t count : kCounts) {
        Buf buf(count, size);
        for (size_t i = 0; i < count; ++i)
          buf.set(i, 0x5a5a5a5a5a5a5a5a);
        fill_identity(buf.data(), count, row.dt, op);
        EXPECT_TRUE(buf.guards_intact());
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(buf.get(i), want[op]) << dtype_name(row.dt) << " " << op_name(op) << " " << i;
        }
      }
    }
  }
}

TEST(FillIdentity, IsNeutral) {
  // identity op x == x for every x except NaNs (quieted) and, for SUM, -0 (0 + -0 = +0).
  for (nexar_dtype_t dt : kAllDtypes) {
    const size_t size = dtype_size(dt);
    for (nexar_op_t op : kAllOps) {
      const size_t count = 777;
      Buf x(count, size), unused(count, size), id(count, size), out(count, size);
      Gen gen(7 + static_cast<uint64_t>(dt));
      gen.fill(dt, x, unused);
      fill_identity(id.data(), count, dt, op);
      reduce_out(out.data(), id.data(), x.data(), count, dt, op);
      for (size_t i = 0; i < count; ++i) {
        const uint64_t v = x.get(i);
        if (bits_are_nan(dt, v)) continue;
        const uint64_t sign = uint64_t{1} << (8 * size - 1);
        if (is_float(dt) && op == NEXAR_OP_SUM && v == sign) continue;
        ASSERT_EQ(out.get(i), v) << dtype_name(dt) << " " << op_name(op) << " " << i;
      }
    }
  }
}

// ---- SIMD level control and bad arguments
// ---------------------------------------------------------

TEST(SimdLevel, ForceIsClampedToSupport) {
  LevelGuard guard;
  force_simd_level(SimdLevel::Avx512);
  EXPECT_EQ(simd_level(), simd_level_supported());
  force_simd_level(SimdLevel::Scalar);
  EXPECT_EQ(simd_level(), SimdLevel::Scalar);
  EXPECT_STREQ(simd_level_name(SimdLevel::Scalar), "scalar");
  EXPECT_STREQ(simd_level_name(SimdLevel::Avx2), "avx2");
  EXPECT_STREQ(simd_level_name(SimdLevel::Avx512), "avx512");
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    EXPECT_EQ(simd_level_supported(), SimdLevel::Avx512);
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
    EXPECT_EQ(simd_level_supported(), SimdLevel::Avx2);
  }
#endif
}

TEST(Reduce, InvalidArgumentsAndEmptyAreNoOps) {
  uint32_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  reduce_inplace(a, b, 4, 42, NEXAR_OP_SUM);
  reduce_inplace(a, b, 4, NEXAR_DTYPE_U32, 42);
  reduce_out(a, a, b, 4, -1, NEXAR_OP_SUM);
  fill_identity(a, 4, NEXAR_DTYPE_U32, 9);
  fill_identity(a, 4, 99, NEXAR_OP_PROD);
  EXPECT_EQ(a[0], 1u);
  EXPECT_EQ(a[3], 4u);
  // count 0 accepts null pointers.
  reduce_inplace(nullptr, nullptr, 0, NEXAR_DTYPE_F32, NEXAR_OP_SUM);
  reduce_out(nullptr, nullptr, nullptr, 0, NEXAR_DTYPE_F32, NEXAR_OP_SUM);
  fill_identity(nullptr, 0, NEXAR_DTYPE_F32, NEXAR_OP_PROD);
}

}  // namespace
}  // namespace nexar
