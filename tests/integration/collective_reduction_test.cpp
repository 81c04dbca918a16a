// Allreduce, reduce_scatter, allgather, reduce and broadcast through the C
// ABI on in-process worlds of real QUIC peers: every algorithm (selected by
// size, by the threshold options, and forced through NEXAR_ALLREDUCE_ALGO /
// NEXAR_BROADCAST_ALGO, which each communicator's configuration reads when
// it is made), world sizes 1..13, empty, tiny,
// odd and multi-MiB counts, every dtype and op against a reference computed
// here, in place, every root, bit-identical float results across ranks,
// several collectives in flight at once, mismatched calls and invalid
// arguments.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "harness.h"

using namespace nexar_test;

namespace {

using Clock = std::chrono::steady_clock;

// ---- element types --------------------------------------------------------------

struct TypeInfo {
  nexar_dtype_t dt;
  size_t size;
  const char *name;
  bool is_float;
};
constexpr TypeInfo kTypes[] = {
    {NEXAR_DTYPE_F32, 4, "f32", true},  {NEXAR_DTYPE_F64, 8, "f64", true},
    {NEXAR_DTYPE_F16, 2, "f16", true},  {NEXAR_DTYPE_BF16, 2, "bf16", true},
    {NEXAR_DTYPE_I8, 1, "i8", false},   {NEXAR_DTYPE_I32, 4, "i32", false},
    {NEXAR_DTYPE_I64, 8, "i64", false}, {NEXAR_DTYPE_U8, 1, "u8", false},
    {NEXAR_DTYPE_U32, 4, "u32", false}, {NEXAR_DTYPE_U64, 8, "u64", false},
};
const TypeInfo &type_of(nexar_dtype_t dt) {
  for (const auto &t : kTypes)
    if (t.dt == dt) return t;
  abort();
}
constexpr nexar_op_t kOps[] = {NEXAR_OP_SUM, NEXAR_OP_PROD, NEXAR_OP_MIN, NEXAR_OP_MAX};
const char *op_name(nexar_op_t op) {
  static const char *names[] = {"sum", "prod", "min", "max"};
  return names[op];
}

// IEEE binary16 / bfloat16 from float, round to nearest even (the test only
// feeds values they represent exactly, so rounding never matters for the
// comparisons, but the conversion is complete anyway).
uint16_t to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}
float from_f16(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  const uint32_t x = exp == 31 ? (sign | 0x7f800000 | (mant << 13))
                               : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  memcpy(&f, &x, 4);
  return f;
}
uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t x = uint32_t{h} << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

void put(void *p, nexar_dtype_t dt, double v) {
  switch (dt) {
    case NEXAR_DTYPE_F32: {
      float f = static_cast<float>(v);
      memcpy(p, &f, 4);
      break;
    }
    case NEXAR_DTYPE_F64:
      memcpy(p, &v, 8);
      break;
    case NEXAR_DTYPE_F16: {
      uint16_t h = to_f16(static_cast<float>(v));
      memcpy(p, &h, 2);
      break;
    }
    case NEXAR_DTYPE_BF16: {
      uint16_t h = to_bf16(static_cast<float>(v));
      memcpy(p, &h, 2);
      break;
    }
    default:
      abort();
  }
}
double get(const void *p, nexar_dtype_t dt) {
  switch (dt) {
    case NEXAR_DTYPE_F32: {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    case NEXAR_DTYPE_F64: {
      double d;
      memcpy(&d, p, 8);
      return d;
    }
    case NEXAR_DTYPE_F16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return from_f16(h);
    }
    case NEXAR_DTYPE_BF16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return from_bf16(h);
    }
    default:
      abort();
  }
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t rnd(uint32_t rank, size_t i, uint64_t salt) {
  return mix(mix(salt * 1000003 + rank) ^ (i * 0x2545F4914F6CDD1Dull));
}

// Input element i of `rank`: different on every rank and element. Integers
// use their whole range (sums and products wrap). Floats are chosen so every
// partial result is exact in the type, whatever the reduction order: small
// integers for SUM, +-1, +-2, +-0.5 for PROD, any exact value for MIN/MAX.
void fill_input(void *buf, size_t count, nexar_dtype_t dt, nexar_op_t op, uint32_t rank,
                uint64_t salt) {
  const TypeInfo &t = type_of(dt);
  auto *p = static_cast<uint8_t *>(buf);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = rnd(rank, i, salt);
    if (!t.is_float) {
      memcpy(p + i * t.size, &r, t.size);  // little-endian low bytes
      continue;
    }
    double v;
    const bool narrow = dt == NEXAR_DTYPE_BF16;  // 8 significant bits
    if (op == NEXAR_OP_SUM) {
      const int range = narrow ? 9 : 100;
      v = static_cast<double>(static_cast<int>(r % (2 * range + 1)) - range);
    } else if (op == NEXAR_OP_PROD) {
      static const double f[] = {1, -1, 2, -2, 0.5, -0.5};
      v = f[r % 6];
    } else {
      v = static_cast<double>(static_cast<int>(r % 401) - 200) / (narrow ? 2.0 : 8.0);
    }
    put(p + i * t.size, dt, v);
  }
}

template <class T>
T int_apply(T a, T b, nexar_op_t op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case NEXAR_OP_SUM:
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case NEXAR_OP_PROD:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) *
                                           static_cast<uint64_t>(static_cast<U>(b))));
    case NEXAR_OP_MIN:
      return std::min(a, b);
    default:
      return std::max(a, b);
  }
}

template <class T>
void int_reduce(uint8_t *acc, const uint8_t *in, size_t count, nexar_op_t op) {
  for (size_t i = 0; i < count; ++i) {
    T a, b;
    memcpy(&a, acc + i * sizeof(T), sizeof(T));
    memcpy(&b, in + i * sizeof(T), sizeof(T));
    a = int_apply(a, b, op);
    memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}

// The element-wise reduction of inputs[0..n) (exact, see fill_input).
std::vector<uint8_t> reference(const std::vector<std::vector<uint8_t>> &inputs, size_t count,
                               nexar_dtype_t dt, nexar_op_t op) {
  const TypeInfo &t = type_of(dt);
  std::vector<uint8_t> out(inputs[0].begin(), inputs[0].begin() + count * t.size);
  if (!t.is_float) {
    for (size_t r = 1; r < inputs.size(); ++r) {
      switch (dt) {
        case NEXAR_DTYPE_I8:
          int_reduce<int8_t>(out.data(), inputs[r].data(), count, op);
          break;
        case NEXAR_DTYPE_U8:
          int_reduce<uint8_t>(out.data(), inputs[r].data(), count, op);
          break;
        case NEXAR_DTYPE_I32:
          int_reduce<int32_t>(out.data(), inputs[r].data(), count, op);
          break;
        case NEXAR_DTYPE_U32:
          int_reduce<uint32_t>(out.data(), inputs[r].data(), count, op);
          break;
        case NEXAR_DTYPE_I64:
          int_reduce<int64_t>(out.data(), inputs[r].data(), count, op);
          break;
        default:
          int_reduce<uint64_t>(out.data(), inputs[r].data(), count, op);
      }
    }
    return out;
  }
  for (size_t i = 0; i < count; ++i) {
    double acc = get(inputs[0].data() + i * t.size, dt);
    for (size_t r = 1; r < inputs.size(); ++r) {
      const double x = get(inputs[r].data() + i * t.size, dt);
      switch (op) {
        case NEXAR_OP_SUM:
          acc += x;
          break;
        case NEXAR_OP_PROD:
          acc *= x;
          break;
        case NEXAR_OP_MIN:
          acc = std::min(acc, x);
          break;
        default:
          acc = std::max(acc, x);
      }
    }
    put(out.data() + i * t.size, dt, acc);
  }
  return out;
}

// memcmp that accepts the null pointers of empty vectors.
bool same_bytes(const void *a, const void *b, size_t n) {
  return n == 0 || memcmp(a, b, n) == 0;
}

// First element where got differs from want, or -1.
long first_difference(const uint8_t *got, const uint8_t *want, size_t count, size_t esize) {
  if (count == 0 || memcmp(got, want, count * esize) == 0) return -1;
  for (size_t i = 0; i < count; ++i)
    if (memcmp(got + i * esize, want + i * esize, esize) != 0) return static_cast<long>(i);
  return -1;
}

// Runs fn on every rank at once (one thread each; fn makes blocking calls).
void run(const World &w, const std::function<nexar_status_t(uint32_t)> &fn) {
  on_each_rank(w.size(), [&](uint32_t r) {
    const nexar_status_t s = fn(r);
    EXPECT_EQ(s, NEXAR_OK) << "rank " << r << ": " << nexar_status_str(s) << " "
                           << nexar_last_error_message();
  });
}

nexar_comm_options_t options(uint64_t large_msg_bytes = 0, uint64_t segment_bytes = 0) {
  nexar_comm_options_t o;
  EXPECT_EQ(nexar_comm_options_init(&o, sizeof o), NEXAR_OK);
  if (large_msg_bytes) o.large_msg_bytes = large_msg_bytes;
  if (segment_bytes) o.pipeline_segment_bytes = segment_bytes;
  return o;
}

// For the tests that count the message algorithms' messages: on one host,
// collectives otherwise read the peers' shared memory instead.
nexar_comm_options_t messages_only() {
  nexar_comm_options_t o = options();
  o.shm = NEXAR_SHM_OFF;
  return o;
}

using Bufs = std::vector<std::vector<uint8_t>>;

// ---- allreduce ------------------------------------------------------------------

// One allreduce on every rank of w, checked against the reference, across
// ranks (bit for bit) and for an untouched sendbuf.
void check_allreduce(const World &w, size_t count, nexar_dtype_t dt, nexar_op_t op, bool in_place,
                     uint64_t salt, const std::string &what) {
  const uint32_t n = w.size();
  const size_t es = type_of(dt).size, bytes = count * es;
  Bufs in(n, std::vector<uint8_t>(bytes + 1)), out(n, std::vector<uint8_t>(bytes + 1, 0xEE));
  for (uint32_t r = 0; r < n; ++r)
    fill_input(in[r].data(), count, dt, op, r, salt);
  const Bufs orig = in;
  const std::vector<uint8_t> want = reference(in, count, dt, op);
  if (in_place) out = in;
  run(w, [&](uint32_t r) {
    void *recv = out[r].data();  // in place: out[r] holds the input
    const void *send = in_place ? recv : in[r].data();
    return nexar_allreduce(w[r], count ? send : nullptr, count ? recv : nullptr, count, dt, op,
                           nullptr, nullptr);
  });
  for (uint32_t r = 0; r < n; ++r) {
    const long bad = first_difference(out[r].data(), want.data(), count, es);
    ASSERT_EQ(bad, -1) << what << ": rank " << r << " element " << bad << " of " << count << " ("
                       << type_of(dt).name << " " << op_name(op) << ", world " << n << ")";
    EXPECT_EQ(out[r][bytes], in_place ? orig[r][bytes] : 0xEE) << what << ": wrote past the end";
    if (!in_place) EXPECT_TRUE(in[r] == orig[r]) << what << ": sendbuf of rank " << r << " changed";
  }
}

// The thresholds are options: with large_msg_bytes = 256 KiB and 40000-byte
// segments, 37 elements use the star (3 ranks) or recursive
// doubling (8 ranks), ~100 KiB halving-doubling and ~300 KiB the segmented
// ring, for every dtype and op.
TEST(Allreduce, EveryDtypeAndOpOnEveryAlgorithm) {
  for (uint32_t n : {3u, 8u}) {
    nexar_comm_options_t o = options(256 << 10, 40000);
    World w(n, &o);
    ASSERT_TRUE(w.ok());
    uint64_t salt = 1;
    for (const TypeInfo &t : kTypes)
      for (nexar_op_t op : kOps)
        for (size_t bytes : {size_t{37} * t.size, size_t{100} << 10, size_t{300} << 10}) {
          const size_t count = bytes / t.size + 3;
          check_allreduce(w, count, t.dt, op, salt % 3 == 0, ++salt, "dtype/op sweep");
          if (HasFatalFailure()) return;
        }
  }
}

// Counts around the world size (empty blocks), odd counts, in place, on every
// world size; a second world forces the segmented ring on small vectors.
TEST(Allreduce, CountsOnEveryWorldSize) {
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 13u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    nexar_comm_options_t o = options(4096, 4096);
    World ring(n, &o);
    ASSERT_TRUE(ring.ok());
    uint64_t salt = 100;
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{n - 1}, size_t{n}, size_t{n + 1},
                         size_t{2 * n + 3}, size_t{1001}, size_t{20011}, size_t{40000}}) {
      for (bool in_place : {false, true}) {
        check_allreduce(w, count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, in_place, ++salt, "auto");
        check_allreduce(w, count, NEXAR_DTYPE_I64, NEXAR_OP_MAX, in_place, ++salt, "auto");
        if (count <= 20011)
          check_allreduce(ring, count, NEXAR_DTYPE_I32, NEXAR_OP_SUM, in_place, ++salt, "ring");
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Multi-MiB vectors with the default thresholds: 6 MiB runs halving-doubling,
// 9 MiB the segmented ring with 2 MiB segments.
TEST(Allreduce, SeveralMebibytes) {
  for (uint32_t n : {2u, 3u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    check_allreduce(w, (6 << 20) / 4 + 1, NEXAR_DTYPE_F32, NEXAR_OP_SUM, false, 7, "6 MiB");
    check_allreduce(w, (9 << 20) / 4 + 3, NEXAR_DTYPE_I32, NEXAR_OP_SUM, n == 3, 8, "9 MiB");
  }
  World w(5);
  ASSERT_TRUE(w.ok());
  check_allreduce(w, (9 << 20) / 8 + 1, NEXAR_DTYPE_F64, NEXAR_OP_MAX, true, 9, "9 MiB");
}

// Random floats of wildly different magnitudes: the association order
// matters, so this checks that every rank ends with the same bits, and that
// the result is a sum (close to the exact one).
void check_bit_identical(const World &w, size_t count, nexar_dtype_t dt, uint64_t salt,
                         const std::string &what) {
  const uint32_t n = w.size();
  const size_t es = type_of(dt).size;
  const int spread = dt == NEXAR_DTYPE_F16 ? 8 : (dt == NEXAR_DTYPE_BF16 ? 30 : 40);
  Bufs in(n, std::vector<uint8_t>(count * es)), out(n, std::vector<uint8_t>(count * es));
  std::vector<double> exact(count, 0), magnitude(count, 0);
  for (uint32_t r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) {
      const uint64_t x = rnd(r, i, salt);
      const double m = 1.0 + static_cast<double>(x & 0xffffff) / 16777216.0;
      const int e = static_cast<int>((x >> 24) % (2 * spread + 1)) - spread;
      const double v = ((x >> 40) & 1 ? -1 : 1) * std::ldexp(m, e);
      put(in[r].data() + i * es, dt, v);
      const double stored = get(in[r].data() + i * es, dt);
      exact[i] += stored;
      magnitude[i] += std::fabs(stored);
    }
  run(w, [&](uint32_t r) {
    return nexar_allreduce(w[r], in[r].data(), out[r].data(), count, dt, NEXAR_OP_SUM, nullptr,
                           nullptr);
  });
  const double eps = dt == NEXAR_DTYPE_F64 ? 0x1p-52 : (dt == NEXAR_DTYPE_F32 ? 0x1p-23 : 0x1p-7);
  for (uint32_t r = 1; r < n; ++r) {
    const long bad = first_difference(out[r].data(), out[0].data(), count, es);
    ASSERT_EQ(bad, -1) << what << ": rank " << r << " differs from rank 0 at element " << bad
                       << " (" << type_of(dt).name << ", world " << n << ")";
  }
  for (size_t i = 0; i < count; ++i) {
    const double got = get(out[0].data() + i * es, dt);
    ASSERT_LE(std::fabs(got - exact[i]), 2 * n * eps * magnitude[i] + 1e-300)
        << what << ": element " << i << " (" << type_of(dt).name << ")";
  }
}

TEST(Allreduce, FloatResultsAreBitIdenticalOnEveryRank) {
  for (uint32_t n : {2u, 3u, 5u, 7u, 13u}) {
    nexar_comm_options_t o = options(128 << 10, 24 << 10);
    World w(n, &o);
    ASSERT_TRUE(w.ok());
    uint64_t salt = 500;
    for (nexar_dtype_t dt : {NEXAR_DTYPE_F32, NEXAR_DTYPE_F64, NEXAR_DTYPE_F16, NEXAR_DTYPE_BF16})
      for (size_t count : {size_t{1001}, size_t{20001}, size_t{50001}}) {
        check_bit_identical(w, count, dt, ++salt, "sum of random magnitudes");
        if (HasFatalFailure()) return;
      }
  }
}

std::string param_name(const ::testing::TestParamInfo<const char *> &info) {
  return info.param;
}

// Every allreduce algorithm, forced, on worlds that need the fold or not,
// counts below, at and above the world size.
class AllreduceForcedAlgorithms : public ::testing::TestWithParam<const char *> {};

TEST_P(AllreduceForcedAlgorithms, Sweep) {
  const char *algo = GetParam();
  // Read when a communicator's configuration is built: the worlds made
  // while it is set keep the algorithm.
  ScopedEnv forced("NEXAR_ALLREDUCE_ALGO", algo);
  for (uint32_t n : {2u, 3u, 5u, 6u, 8u, 13u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    uint64_t salt = 900;
    for (size_t count : {size_t{1}, size_t{n - 1}, size_t{n + 1}, size_t{1001}, size_t{30011}}) {
      for (bool in_place : {false, true}) {
        check_allreduce(w, count, NEXAR_DTYPE_I32, NEXAR_OP_SUM, in_place, ++salt, algo);
        check_allreduce(w, count, NEXAR_DTYPE_F16, NEXAR_OP_PROD, in_place, ++salt, algo);
        if (HasFatalFailure()) return;
      }
      check_bit_identical(w, count, NEXAR_DTYPE_F32, ++salt, algo);
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algo, AllreduceForcedAlgorithms,
                         ::testing::Values("recursive_doubling", "halving_doubling", "ring",
                                           "direct", "star"),
                         param_name);

// A name that is no algorithm fails every allreduce, naming the variable
// (which proves the variable is read).
TEST(AllreduceForcedAlgorithms, AnUnknownNameFailsEveryCall) {
  ScopedEnv forced("NEXAR_ALLREDUCE_ALGO", "bogus");
  const uint32_t n = 2;
  World w(n);
  ASSERT_TRUE(w.ok());
  std::vector<float> a(8, 1), b(8);
  on_each_rank(n, [&](uint32_t r) {
    std::vector<float> x(a), y(b);
    EXPECT_EQ(nexar_allreduce(w[r], x.data(), y.data(), 8, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                              nullptr),
              NEXAR_ERR_INVALID_ARGUMENT);
    EXPECT_NE(strstr(nexar_last_error_message(), "NEXAR_ALLREDUCE_ALGO"), nullptr)
        << nexar_last_error_message();
  });
}

// Messages rank r of w has sent so far (nexar_stats_t.messages_sent).
uint64_t messages_sent(const World &w, uint32_t r) {
  nexar_stats_t st;
  st.struct_size = sizeof st;
  EXPECT_EQ(nexar_comm_get_stats(w[r], &st), NEXAR_OK);
  return st.messages_sent;
}

// Messages each rank of w sends during one in-place f32 SUM allreduce of
// count ones (whose result is checked too).
std::vector<uint64_t> messages_sent_by_allreduce(const World &w, size_t count) {
  const uint32_t n = w.size();
  auto sent = [&](uint32_t r) { return messages_sent(w, r); };
  std::vector<uint64_t> messages(n);
  for (uint32_t r = 0; r < n; ++r)
    messages[r] = sent(r);
  std::vector<std::vector<float>> bufs(n, std::vector<float>(count, 1.0f));
  run(w, [&](uint32_t r) {
    return nexar_allreduce(w[r], bufs[r].data(), bufs[r].data(), count, NEXAR_DTYPE_F32,
                           NEXAR_OP_SUM, nullptr, nullptr);
  });
  for (uint32_t r = 0; r < n; ++r) {
    messages[r] = sent(r) - messages[r];
    EXPECT_EQ(bufs[r], std::vector<float>(count, static_cast<float>(n))) << "rank " << r;
  }
  return messages;
}

// Up to 16 KiB on 3 and 4 ranks every rank sends its vector to rank 0, which
// sends each the result: 2 (p-1) messages in two steps. Above 16 KiB, and on
// 2 ranks, recursive doubling (with the fold on 3 ranks).
TEST(Allreduce, SmallVectorsOnThreeAndFourRanksMeetAtRankZero) {
  const nexar_comm_options_t o = messages_only();
  World two(2, &o), three(3, &o), four(4, &o);
  ASSERT_TRUE(two.ok() && three.ok() && four.ok());
  using Counts = std::vector<uint64_t>;
  EXPECT_EQ(messages_sent_by_allreduce(three, 1), (Counts{2, 1, 1}));
  EXPECT_EQ(messages_sent_by_allreduce(three, 4096), (Counts{2, 1, 1}));  // 16 KiB
  // Rank 0 hands its vector to rank 1 and gets the result back from it.
  EXPECT_EQ(messages_sent_by_allreduce(three, 4097), (Counts{1, 2, 1}));
  EXPECT_EQ(messages_sent_by_allreduce(four, 1), (Counts{3, 1, 1, 1}));
  EXPECT_EQ(messages_sent_by_allreduce(four, 4097), (Counts{2, 2, 2, 2}));
  EXPECT_EQ(messages_sent_by_allreduce(two, 1), (Counts{1, 1}));
}

// The forced algorithm is the one that runs, and it belongs to the
// communicator: worlds made while the variable named one keep it once the
// variable is gone, next to a world with the default in the same process.
// One element on 4 ranks: the star by default (3 messages from rank 0, 1
// from the others), p - 1 from every rank in the direct exchange, log2 p in
// recursive doubling.
TEST(AllreduceForcedAlgorithm, IsChosenPerCommunicator) {
  const uint32_t n = 4;
  const nexar_comm_options_t o = messages_only();
  World by_default(n, &o);
  std::optional<World> direct, doubling;
  {
    ScopedEnv forced("NEXAR_ALLREDUCE_ALGO", "direct");
    direct.emplace(n, &o);
  }
  {
    ScopedEnv forced("NEXAR_ALLREDUCE_ALGO", "recursive_doubling");
    doubling.emplace(n, &o);
  }
  ASSERT_TRUE(by_default.ok() && direct->ok() && doubling->ok());
  using Counts = std::vector<uint64_t>;
  EXPECT_EQ(messages_sent_by_allreduce(by_default, 1), (Counts{3, 1, 1, 1}));
  EXPECT_EQ(messages_sent_by_allreduce(*direct, 1), (Counts{3, 3, 3, 3}));
  EXPECT_EQ(messages_sent_by_allreduce(*doubling, 1), (Counts{2, 2, 2, 2}));
}

// ---- reduce_scatter -------------------------------------------------------------

void check_reduce_scatter(const World &w, size_t recvcount, nexar_dtype_t dt, nexar_op_t op,
                          uint64_t salt) {
  const uint32_t n = w.size();
  const size_t es = type_of(dt).size;
  const size_t total = recvcount * n;
  Bufs in(n, std::vector<uint8_t>(total * es)),
      out(n, std::vector<uint8_t>(recvcount * es + 1, 0xEE));
  for (uint32_t r = 0; r < n; ++r)
    fill_input(in[r].data(), total, dt, op, r, salt);
  const Bufs orig = in;
  const std::vector<uint8_t> want = reference(in, total, dt, op);
  run(w, [&](uint32_t r) {
    return nexar_reduce_scatter(w[r], in[r].data(), out[r].data(), recvcount, dt, op, nullptr,
                                nullptr);
  });
  for (uint32_t r = 0; r < n; ++r) {
    const long bad =
        first_difference(out[r].data(), want.data() + r * recvcount * es, recvcount, es);
    ASSERT_EQ(bad, -1) << "reduce_scatter: rank " << r << " element " << bad << " of block "
                       << recvcount << " (world " << n << ", " << type_of(dt).name << ")";
    EXPECT_EQ(out[r][recvcount * es], 0xEE) << "wrote past the end";
    EXPECT_TRUE(in[r] == orig[r]) << "sendbuf of rank " << r << " changed";
  }
}

TEST(ReduceScatter, RankRGetsBlockR) {
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 13u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    nexar_comm_options_t o = options(0, 4096);  // segmented blocks from 64 KiB
    World seg(n, &o);
    ASSERT_TRUE(seg.ok());
    uint64_t salt = 2000;
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{1001}, size_t{20000}}) {
      check_reduce_scatter(w, count, NEXAR_DTYPE_I32, NEXAR_OP_SUM, ++salt);
      check_reduce_scatter(w, count, NEXAR_DTYPE_F64, NEXAR_OP_MIN, ++salt);
      if (count >= 1001) check_reduce_scatter(seg, count, NEXAR_DTYPE_BF16, NEXAR_OP_SUM, ++salt);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(ReduceScatter, SeveralMebibytes) {
  for (uint32_t n : {2u, 5u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    check_reduce_scatter(w, (3 << 20) / 4 + 1, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 77);
  }
}

// ---- allgather ------------------------------------------------------------------

void check_allgather(const World &w, size_t count, nexar_dtype_t dt, uint64_t salt) {
  const uint32_t n = w.size();
  const size_t es = type_of(dt).size, bytes = count * es;
  Bufs in(n), out(n, std::vector<uint8_t>(bytes * n + 1, 0xEE));
  for (uint32_t r = 0; r < n; ++r)
    in[r] = pattern(bytes, static_cast<uint32_t>(salt * 31 + r));
  run(w, [&](uint32_t r) {
    return nexar_allgather(w[r], count ? in[r].data() : nullptr, count ? out[r].data() : nullptr,
                           count, dt, nullptr, nullptr);
  });
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t b = 0; b < n; ++b)
      ASSERT_TRUE(same_bytes(out[r].data() + b * bytes, in[b].data(), bytes))
          << "allgather: rank " << r << " block " << b << " (count " << count << ", world " << n
          << ")";
    EXPECT_EQ(out[r][bytes * n], 0xEE) << "wrote past the end";
  }
}

TEST(Allgather, BlocksInRankOrder) {
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 13u}) {
    nexar_comm_options_t o = options(0, 4096);  // many segments per block
    World w(n, &o);
    ASSERT_TRUE(w.ok());
    uint64_t salt = 3000;
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{1001}, size_t{4099}}) {
      check_allgather(w, count, NEXAR_DTYPE_U8, ++salt);
      check_allgather(w, count, NEXAR_DTYPE_F64, ++salt);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Allgather, SeveralMebibytes) {
  for (uint32_t n : {2u, 4u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    check_allgather(w, (3 << 20) + 5, NEXAR_DTYPE_U8, 4000 + n);
  }
}

// In place: sendbuf is this rank's block of recvbuf.
TEST(Allgather, SendbufInsideRecvbuf) {
  World w(3);
  ASSERT_TRUE(w.ok());
  const size_t count = 1001;
  Bufs out(3, std::vector<uint8_t>(count * 3));
  for (uint32_t r = 0; r < 3; ++r) {
    const auto p = pattern(count, 50 + r);
    memcpy(out[r].data() + r * count, p.data(), count);
  }
  run(w, [&](uint32_t r) {
    return nexar_allgather(w[r], out[r].data() + r * count, out[r].data(), count, NEXAR_DTYPE_U8,
                           nullptr, nullptr);
  });
  for (uint32_t r = 0; r < 3; ++r)
    for (uint32_t b = 0; b < 3; ++b)
      EXPECT_TRUE(std::equal(out[r].begin() + b * count, out[r].begin() + (b + 1) * count,
                             pattern(count, 50 + b).begin()));
}

// ---- reduce ---------------------------------------------------------------------

void check_reduce(const World &w, size_t count, nexar_dtype_t dt, nexar_op_t op, uint32_t root,
                  bool in_place, uint64_t salt) {
  const uint32_t n = w.size();
  const size_t es = type_of(dt).size, bytes = count * es;
  Bufs in(n, std::vector<uint8_t>(bytes)), out(n, std::vector<uint8_t>(bytes + 1, 0xEE));
  for (uint32_t r = 0; r < n; ++r)
    fill_input(in[r].data(), count, dt, op, r, salt);
  const Bufs orig = in;
  const std::vector<uint8_t> want = reference(in, count, dt, op);
  if (in_place && bytes) memcpy(out[root].data(), in[root].data(), bytes);
  run(w, [&](uint32_t r) {
    // Non-roots: recvbuf NULL on odd ranks, a buffer that must stay untouched on even ones.
    void *recv = r == root || r % 2 == 0 ? out[r].data() : nullptr;
    const void *send = r == root && in_place ? recv : in[r].data();
    return nexar_reduce(w[r], send, recv, count, dt, op, root, nullptr, nullptr);
  });
  const long bad = first_difference(out[root].data(), want.data(), count, es);
  ASSERT_EQ(bad, -1) << "reduce: root " << root << " element " << bad << " of " << count
                     << " (world " << n << ", " << type_of(dt).name << " " << op_name(op) << ")";
  for (uint32_t r = 0; r < n; ++r) {
    if (r != root)
      EXPECT_TRUE(std::all_of(out[r].begin(), out[r].end(), [](uint8_t b) { return b == 0xEE; }))
          << "reduce wrote the recvbuf of non-root rank " << r;
    if (!(in_place && r == root)) EXPECT_TRUE(in[r] == orig[r]) << "sendbuf of rank " << r;
  }
}

TEST(Reduce, EveryRootEveryWorld) {
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 13u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    uint64_t salt = 5000;
    for (uint32_t root = 0; root < n; ++root)
      for (size_t count : {size_t{0}, size_t{1}, size_t{n + 1}, size_t{1001}}) {
        check_reduce(w, count, NEXAR_DTYPE_U32, NEXAR_OP_PROD, root, (root + count) % 2 == 0,
                     ++salt);
        check_reduce(w, count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, root, (root + count) % 2 == 1,
                     ++salt);
        if (HasFatalFailure()) return;
      }
  }
}

TEST(Reduce, SeveralMebibytes) {
  World w(5);
  ASSERT_TRUE(w.ok());
  check_reduce(w, (3 << 20) / 8 + 1, NEXAR_DTYPE_I64, NEXAR_OP_SUM, 3, false, 91);
  check_reduce(w, (3 << 20) / 4 + 1, NEXAR_DTYPE_F32, NEXAR_OP_MAX, 0, true, 92);
}

// ---- broadcast ------------------------------------------------------------------

void check_broadcast(const World &w, size_t count, nexar_dtype_t dt, uint32_t root, uint64_t salt) {
  const uint32_t n = w.size();
  const size_t bytes = count * type_of(dt).size;
  const std::vector<uint8_t> data = pattern(bytes, static_cast<uint32_t>(salt));
  Bufs buf(n, std::vector<uint8_t>(bytes + 1, 0xEE));
  if (bytes) memcpy(buf[root].data(), data.data(), bytes);
  run(w, [&](uint32_t r) {
    return nexar_broadcast(w[r], count ? buf[r].data() : nullptr, count, dt, root, nullptr,
                           nullptr);
  });
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(same_bytes(buf[r].data(), data.data(), bytes))
        << "broadcast: rank " << r << " root " << root << " count " << count << " world " << n;
    EXPECT_EQ(buf[r][bytes], 0xEE) << "wrote past the end";
  }
}

// With large_msg_bytes = 1 MiB, 300007 f32 (1.2 MB) take the pipelined chain
// from 3 ranks on; the rest the binomial tree.
TEST(Broadcast, EveryRootEveryWorld) {
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 13u}) {
    nexar_comm_options_t o = options(1 << 20);
    World w(n, &o);
    ASSERT_TRUE(w.ok());
    uint64_t salt = 6000;
    for (uint32_t root = 0; root < n; ++root) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{n - 1}, size_t{1001}})
        check_broadcast(w, count, NEXAR_DTYPE_I32, root, ++salt);
      if (root < 3 || root + 1 == n) check_broadcast(w, 300007, NEXAR_DTYPE_F32, root, ++salt);
      if (HasFatalFailure()) return;
    }
  }
}

// 5 MiB: the binomial tree with the default threshold, the chain below it.
TEST(Broadcast, SeveralMebibytes) {
  for (uint32_t n : {2u, 5u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    check_broadcast(w, (5 << 20) + 3, NEXAR_DTYPE_U8, n - 1, 7000 + n);
    nexar_comm_options_t o = options(4 << 20);
    World chain(n, &o);
    ASSERT_TRUE(chain.ok());
    check_broadcast(chain, (5 << 20) + 3, NEXAR_DTYPE_U8, 1, 7100 + n);
  }
}

// Every broadcast algorithm, forced, from several roots, small to 2.4 MB.
class BroadcastForcedAlgorithms : public ::testing::TestWithParam<const char *> {};

TEST_P(BroadcastForcedAlgorithms, Sweep) {
  ScopedEnv forced("NEXAR_BROADCAST_ALGO", GetParam());
  for (uint32_t n : {2u, 3u, 6u, 13u}) {
    World w(n);
    ASSERT_TRUE(w.ok());
    uint64_t salt = 8000;
    for (uint32_t root : {0u, 1u, n - 1})
      for (size_t count :
           {size_t{1}, size_t{n - 1}, size_t{n + 1}, size_t{1001}, size_t{70001}, size_t{300007}})
        check_broadcast(w, count, NEXAR_DTYPE_U64, root, ++salt);
  }
}

INSTANTIATE_TEST_SUITE_P(Algo, BroadcastForcedAlgorithms,
                         ::testing::Values("binomial", "chain", "scatter_allgather"), param_name);

// A name that is no algorithm fails every broadcast, naming the variable.
TEST(BroadcastForcedAlgorithms, AnUnknownNameFailsEveryCall) {
  ScopedEnv forced("NEXAR_BROADCAST_ALGO", "bogus");
  const uint32_t n = 2;
  World w(n);
  ASSERT_TRUE(w.ok());
  on_each_rank(n, [&](uint32_t r) {
    uint64_t x = 1;
    EXPECT_EQ(nexar_broadcast(w[r], &x, 1, NEXAR_DTYPE_U64, 0, nullptr, nullptr),
              NEXAR_ERR_INVALID_ARGUMENT);
    EXPECT_NE(strstr(nexar_last_error_message(), "NEXAR_BROADCAST_ALGO"), nullptr)
        << nexar_last_error_message();
  });
}

// ---- several at once, mismatches, invalid arguments -----------------------------

// Every rank issues six collectives without waiting (the same order on every
// rank), then waits for all six callbacks.
TEST(Collectives, SeveralOutstandingOnOneCommunicator) {
  for (uint32_t n : {4u, 5u}) {
    nexar_comm_options_t o = options(256 << 10, 64 << 10);
    World w(n, &o);
    ASSERT_TRUE(w.ok());
    const size_t small = 999, large = 100003, bcast = 200003, rs = 3001, ag = 777, red = 4097;
    Bufs ar_in(n), ar_out(n, std::vector<uint8_t>(small * 4)), big_in(n),
        big_out(n, std::vector<uint8_t>(large * 4)), bc(n, std::vector<uint8_t>(bcast * 8)),
        rs_in(n), rs_out(n, std::vector<uint8_t>(rs * 4)), ag_out(n, std::vector<uint8_t>(ag * n)),
        red_in(n), red_out(n, std::vector<uint8_t>(red * 8));
    const std::vector<uint8_t> bc_data = pattern(bcast * 8, 42);
    for (uint32_t r = 0; r < n; ++r) {
      ar_in[r].resize(small * 4);
      fill_input(ar_in[r].data(), small, NEXAR_DTYPE_F32, NEXAR_OP_SUM, r, 1);
      big_in[r].resize(large * 4);
      fill_input(big_in[r].data(), large, NEXAR_DTYPE_I32, NEXAR_OP_SUM, r, 2);
      rs_in[r].resize(rs * n * 4);
      fill_input(rs_in[r].data(), rs * n, NEXAR_DTYPE_U32, NEXAR_OP_MAX, r, 3);
      red_in[r].resize(red * 8);
      fill_input(red_in[r].data(), red, NEXAR_DTYPE_F64, NEXAR_OP_MIN, r, 4);
    }
    memcpy(bc[1].data(), bc_data.data(), bc_data.size());
    std::vector<Completions> done(n);
    on_each_rank(n, [&](uint32_t r) {
      nexar_comm_t *c = w[r];
      Completions *d = &done[r];
      EXPECT_EQ(nexar_allreduce(c, big_in[r].data(), big_out[r].data(), large, NEXAR_DTYPE_I32,
                                NEXAR_OP_SUM, Completions::callback, d),
                NEXAR_OK);
      EXPECT_EQ(nexar_allreduce(c, ar_in[r].data(), ar_out[r].data(), small, NEXAR_DTYPE_F32,
                                NEXAR_OP_SUM, Completions::callback, d),
                NEXAR_OK);
      EXPECT_EQ(
          nexar_broadcast(c, bc[r].data(), bcast, NEXAR_DTYPE_U64, 1, Completions::callback, d),
          NEXAR_OK);
      EXPECT_EQ(nexar_reduce_scatter(c, rs_in[r].data(), rs_out[r].data(), rs, NEXAR_DTYPE_U32,
                                     NEXAR_OP_MAX, Completions::callback, d),
                NEXAR_OK);
      const auto mine = pattern(ag, 900 + r);
      EXPECT_EQ(nexar_allgather(c, mine.data(), ag_out[r].data(), ag, NEXAR_DTYPE_U8,
                                Completions::callback, d),
                NEXAR_OK);
      EXPECT_EQ(nexar_reduce(c, red_in[r].data(), r == 2 ? red_out[r].data() : nullptr, red,
                             NEXAR_DTYPE_F64, NEXAR_OP_MIN, 2, Completions::callback, d),
                NEXAR_OK);
      // `mine` must outlive the allgather: wait here.
      EXPECT_TRUE(d->wait(6, 60)) << "rank " << r << " got " << d->count();
    });
    for (uint32_t r = 0; r < n; ++r)
      for (auto &rec : done[r].records)
        EXPECT_EQ(rec.status, NEXAR_OK) << "rank " << r << ": " << rec.message;
    const auto want_small = reference(ar_in, small, NEXAR_DTYPE_F32, NEXAR_OP_SUM);
    const auto want_large = reference(big_in, large, NEXAR_DTYPE_I32, NEXAR_OP_SUM);
    const auto want_rs = reference(rs_in, rs * n, NEXAR_DTYPE_U32, NEXAR_OP_MAX);
    const auto want_red = reference(red_in, red, NEXAR_DTYPE_F64, NEXAR_OP_MIN);
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_TRUE(ar_out[r] == want_small) << "allreduce small, rank " << r;
      EXPECT_TRUE(big_out[r] == want_large) << "allreduce large, rank " << r;
      EXPECT_TRUE(bc[r] == bc_data) << "broadcast, rank " << r;
      EXPECT_EQ(memcmp(rs_out[r].data(), want_rs.data() + r * rs * 4, rs * 4), 0)
          << "reduce_scatter, rank " << r;
      for (uint32_t b = 0; b < n; ++b)
        EXPECT_EQ(memcmp(ag_out[r].data() + b * ag, pattern(ag, 900 + b).data(), ag), 0)
            << "allgather, rank " << r << " block " << b;
    }
    EXPECT_TRUE(red_out[2] == want_red) << "reduce at root 2";
  }
}

// Ranks that call allreduce with different counts or dtypes all fail with
// NEXAR_ERR_MISMATCH long before the timeout; the next collective works.
TEST(Collectives, MismatchIsReportedPromptlyToEveryRank) {
  struct Variant {
    const char *what;
    uint32_t n;
    size_t count, odd_count;
    nexar_dtype_t odd_dtype;
    nexar_op_t odd_op;
  };
  // With large_msg_bytes = 256 KiB: 100 f32 run recursive doubling, 20000
  // halving-doubling, 300000 the ring.
  const Variant variants[] = {
      {"count", 4, 100, 101, NEXAR_DTYPE_F32, NEXAR_OP_SUM},
      {"count", 5, 100, 99, NEXAR_DTYPE_F32, NEXAR_OP_SUM},
      {"dtype", 4, 100, 100, NEXAR_DTYPE_I32, NEXAR_OP_SUM},
      {"dtype", 7, 100, 100, NEXAR_DTYPE_U32, NEXAR_OP_SUM},
      {"op", 3, 100, 100, NEXAR_DTYPE_F32, NEXAR_OP_MAX},
      {"count (ring)", 4, 300000, 300001, NEXAR_DTYPE_F32, NEXAR_OP_SUM},
      {"count (recursive doubling vs ring)", 4, 100, 300000, NEXAR_DTYPE_F32, NEXAR_OP_SUM},
      {"count (recursive doubling vs halving-doubling)", 5, 100, 20000, NEXAR_DTYPE_F32,
       NEXAR_OP_SUM},
      {"dtype (halving-doubling vs ring)", 6, 60000, 60000, NEXAR_DTYPE_F64, NEXAR_OP_SUM},
  };
  for (const Variant &v : variants) {
    nexar_comm_options_t o = options(256 << 10);
    o.collective_timeout_ms = 20000;
    World w(v.n, &o);
    ASSERT_TRUE(w.ok());
    const uint32_t odd = v.n - 2;
    const auto t0 = Clock::now();
    std::vector<nexar_status_t> got(v.n);
    std::vector<std::string> msg(v.n);
    on_each_rank(v.n, [&](uint32_t r) {
      const bool me_odd = r == odd;
      const size_t count = me_odd ? v.odd_count : v.count;
      std::vector<uint8_t> in(count * 8, 1), out(count * 8);
      got[r] = nexar_allreduce(w[r], in.data(), out.data(), count,
                               me_odd ? v.odd_dtype : NEXAR_DTYPE_F32,
                               me_odd ? v.odd_op : NEXAR_OP_SUM, nullptr, nullptr);
      msg[r] = nexar_last_error_message();
    });
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    for (uint32_t r = 0; r < v.n; ++r)
      EXPECT_EQ(got[r], NEXAR_ERR_MISMATCH)
          << v.what << " mismatch, world " << v.n << ", rank " << r << ": " << msg[r];
    EXPECT_LT(secs, 5.0) << v.what << ": mismatch took " << secs << " s";
    // The communicator goes on: the next (matching) collective succeeds.
    check_allreduce(w, 33, NEXAR_DTYPE_I32, NEXAR_OP_SUM, false, 1234, "after a mismatch");
  }
}

// Failures in the middle of a segmented ring (sends in flight, reductions
// pending) end every rank's operation promptly and cleanly.
// (Messages: on shared memory the two finish within the 30 ms before the
// abort.)
TEST(Collectives, AbortDuringARingEndsEveryRank) {
  nexar_comm_options_t o = options(1 << 20, 256 << 10);
  o.shm = NEXAR_SHM_OFF;
  World w(3, &o);
  ASSERT_TRUE(w.ok());
  const size_t count = (24 << 20) / 4;
  Bufs in(3, std::vector<uint8_t>(count * 4, 1)), out(3, std::vector<uint8_t>(count * 4));
  Completions done;
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(nexar_allreduce(w[r], in[r].data(), out[r].data(), count, NEXAR_DTYPE_F32,
                              NEXAR_OP_SUM, Completions::callback, &done),
              NEXAR_OK);
    ASSERT_EQ(nexar_broadcast(w[r], in[r].data(), count, NEXAR_DTYPE_F32, 0, Completions::callback,
                              &done),
              NEXAR_OK);  // the pipelined chain
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto t0 = Clock::now();
  ASSERT_EQ(nexar_comm_abort(w[1]), NEXAR_OK);
  ASSERT_TRUE(done.wait(6, 20)) << "every rank completes";
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  size_t failed = 0;
  for (auto &rec : done.records) {
    failed += rec.status != NEXAR_OK;
    if (rec.status != NEXAR_OK)
      EXPECT_TRUE(rec.status == NEXAR_ERR_ABORTED || rec.status == NEXAR_ERR_PEER_FAILED)
          << nexar_status_str(rec.status) << ": " << rec.message;
  }
  EXPECT_GE(failed, 1u) << "the abort came after a 24 MiB ring finished: make it larger";
}

TEST(Collectives, MissingRankTimesOutInTheRing) {
  nexar_comm_options_t o = options(1 << 20, 256 << 10);
  o.collective_timeout_ms = 700;
  World w(3, &o);
  ASSERT_TRUE(w.ok());
  const size_t count = (8 << 20) / 4;
  Bufs in(2, std::vector<uint8_t>(count * 4, 1)), out(2, std::vector<uint8_t>(count * 4));
  Completions done;
  for (uint32_t r = 0; r < 2; ++r)
    ASSERT_EQ(nexar_allreduce(w[r], in[r].data(), out[r].data(), count, NEXAR_DTYPE_F32,
                              NEXAR_OP_SUM, Completions::callback, &done),
              NEXAR_OK);
  ASSERT_TRUE(done.wait(2, 20));
  for (auto &rec : done.records) {
    EXPECT_EQ(rec.status, NEXAR_ERR_TIMEOUT) << rec.message;
    EXPECT_NE(rec.message.find("allreduce #1"), std::string::npos) << rec.message;
  }
}

// The star (3 ranks, small vector): rank 0 waits on both others at once and
// rank 1 on rank 0. A rank that never comes makes the others time out, naming
// the operation; a rank that aborts makes them fail promptly.
TEST(Collectives, MissingOrAbortingRankEndsTheStar) {
  // Declared before the worlds, so that a failed assertion, which destroys
  // the worlds first, still finds them when pending operations complete.
  Completions timed_out, aborted;
  Bufs in(2, std::vector<uint8_t>(64, 1)), out(2, std::vector<uint8_t>(64));
  nexar_comm_options_t o = messages_only();
  o.collective_timeout_ms = 700;
  World w(3, &o);
  ASSERT_TRUE(w.ok());
  const uint64_t sent_before[2] = {messages_sent(w, 0), messages_sent(w, 1)};
  for (uint32_t r = 0; r < 2; ++r)
    ASSERT_EQ(nexar_allreduce(w[r], in[r].data(), out[r].data(), 16, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                              Completions::callback, &timed_out),
              NEXAR_OK);
  ASSERT_TRUE(timed_out.wait(2, 20));
  for (auto &rec : timed_out.records) {
    EXPECT_EQ(rec.status, NEXAR_ERR_TIMEOUT) << rec.message;
    EXPECT_NE(rec.message.find("allreduce #1"), std::string::npos) << rec.message;
  }
  // The star ran: rank 1 sent its vector to rank 0, and rank 0, still
  // missing rank 2's, sent nothing (recursive doubling's fold would have had
  // rank 0 send its vector to rank 1).
  EXPECT_EQ(messages_sent(w, 0) - sent_before[0], 0u);
  EXPECT_EQ(messages_sent(w, 1) - sent_before[1], 1u);

  World v(3);
  ASSERT_TRUE(v.ok());
  for (uint32_t r = 0; r < 2; ++r)
    ASSERT_EQ(nexar_allreduce(v[r], in[r].data(), out[r].data(), 16, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                              Completions::callback, &aborted),
              NEXAR_OK);
  const auto t0 = Clock::now();
  ASSERT_EQ(nexar_comm_abort(v[2]), NEXAR_OK);
  ASSERT_TRUE(aborted.wait(2, 20));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  for (auto &rec : aborted.records)
    EXPECT_TRUE(rec.status == NEXAR_ERR_ABORTED || rec.status == NEXAR_ERR_PEER_FAILED)
        << nexar_status_str(rec.status) << ": " << rec.message;
}

// Once a peer's abort notice has arrived, operations started later fail at
// once with NEXAR_ERR_ABORTED naming the operation and that rank, instead of
// waiting for the aborted rank until their timeout. (A collective submitted
// just before the abort may start after the notice: the test above hung that
// way under TSan.)
TEST(Collectives, OperationsAfterAPeerAbortedFailAtOnce) {
  Completions done;  // outlives the world, which completes what is pending
  nexar_comm_options_t o = options();
  o.collective_timeout_ms = 120000;
  o.p2p_timeout_ms = 120000;
  World w(3, &o);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(nexar_comm_abort(w[2]), NEXAR_OK);
  for (uint32_t r = 0; r < 2; ++r) {
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (nexar_comm_get_async_error(w[r], nullptr) == NEXAR_OK && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(nexar_comm_get_async_error(w[r], nullptr), NEXAR_ERR_ABORTED) << "rank " << r;
  }
  Bufs in(2, std::vector<uint8_t>(64, 1)), out(2, std::vector<uint8_t>(64));
  const auto t0 = Clock::now();
  for (uint32_t r = 0; r < 2; ++r)
    ASSERT_EQ(nexar_allreduce(w[r], in[r].data(), out[r].data(), 16, NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                              Completions::callback, &done),
              NEXAR_OK);
  // Between the two ranks still running, too.
  ASSERT_EQ(nexar_send(w[0], in[0].data(), 8, 1, 5, Completions::callback, &done), NEXAR_OK);
  ASSERT_TRUE(done.wait(3, 30));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20.0);
  for (auto &rec : done.records) {
    EXPECT_EQ(rec.status, NEXAR_ERR_ABORTED) << rec.message;
    EXPECT_EQ(rec.failed_rank, 2) << rec.message;
    EXPECT_NE(rec.message.find("rank 2 aborted"), std::string::npos) << rec.message;
  }
  EXPECT_EQ(nexar_barrier(w[1], nullptr, nullptr), NEXAR_ERR_ABORTED);
  EXPECT_NE(std::string(nexar_last_error_message()).find("nexar_barrier"), std::string::npos)
      << nexar_last_error_message();
}

TEST(Collectives, InvalidArgumentsAreRejectedWithoutCallback) {
  World w(3);
  ASSERT_TRUE(w.ok());
  std::atomic<int> called{0};
  auto cb = [](void *ud, const nexar_completion_t *) { ++*static_cast<std::atomic<int> *>(ud); };
  float a[8] = {}, b[8] = {};
  nexar_comm_t *c = w[0];
  EXPECT_EQ(nexar_reduce(c, a, b, 8, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 3, cb, &called),
            NEXAR_ERR_INVALID_RANK);
  EXPECT_EQ(nexar_broadcast(c, a, 8, NEXAR_DTYPE_F32, 7, cb, &called), NEXAR_ERR_INVALID_RANK);
  EXPECT_EQ(nexar_broadcast(c, a, 8, NEXAR_DTYPE_F32, UINT32_MAX, cb, &called),
            NEXAR_ERR_INVALID_RANK);
  EXPECT_EQ(nexar_allreduce(c, a, b, 8, 10, NEXAR_OP_SUM, cb, &called), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_allreduce(c, a, b, 8, -1, NEXAR_OP_SUM, cb, &called), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_allreduce(c, a, b, 8, NEXAR_DTYPE_F32, 4, cb, &called),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_reduce_scatter(c, a, b, 2, 42, NEXAR_OP_SUM, cb, &called),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_allgather(c, a, b, 2, 99, cb, &called), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_broadcast(c, a, 2, 99, 0, cb, &called), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_reduce(c, a, b, 8, NEXAR_DTYPE_F32, 9, 0, cb, &called),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_allreduce(c, nullptr, b, 8, NEXAR_DTYPE_F32, NEXAR_OP_SUM, cb, &called),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_allreduce(c, a, nullptr, 8, NEXAR_DTYPE_F32, NEXAR_OP_SUM, cb, &called),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_reduce(c, a, nullptr, 8, NEXAR_DTYPE_F32, NEXAR_OP_SUM, 0, cb, &called),
            NEXAR_ERR_INVALID_ARGUMENT)
      << "the root needs a recvbuf";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(called.load(), 0) << "a rejected call never invokes its callback";
  // Nothing was numbered: a collective on every rank still matches.
  check_allreduce(w, 5, NEXAR_DTYPE_F32, NEXAR_OP_SUM, false, 3, "after rejected calls");
}

}  // namespace
