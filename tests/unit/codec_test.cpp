#include "transport/codec.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

// Records the largest single allocation, so tests can prove that hostile length
// fields never make the decoder allocate what they claim.
static std::atomic<std::size_t> g_largest_alloc{0};

static void *counted_alloc(std::size_t n) {
  std::size_t prev = g_largest_alloc.load(std::memory_order_relaxed);
  while (n > prev && !g_largest_alloc.compare_exchange_weak(prev, n)) {
  }
  if (void *p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void *operator new(std::size_t n) {
  return counted_alloc(n);
}
void *operator new[](std::size_t n) {
  return counted_alloc(n);
}
void operator delete(void *p) noexcept {
  std::free(p);
}
void operator delete[](void *p) noexcept {
  std::free(p);
}
void operator delete(void *p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void *p, std::size_t) noexcept {
  std::free(p);
}

namespace nexar::wire {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kU32Max = std::numeric_limits<uint32_t>::max();

// Every message type, with empty, ordinary, maximum-length and binary strings and
// extreme integers.
std::vector<ControlMessage> samples() {
  const std::string max_str(kMaxStringLen, 'x');
  std::string binary("a\0b\xff\x80", 5);
  return {
      Hello{},
      Hello{1, 0x0123456789abcdefULL, 3, 8, "node-3"},
      Hello{0xffff, kU64Max, kU32Max, kU32Max, max_str},
      HelloAck{},
      HelloAck{kU32Max},
      Heartbeat{},
      Heartbeat{kU64Max, kU64Max},
      Heartbeat{42, 1700000000123456789ULL},
      Abort{},
      Abort{7, 2, -5, "peer 2 timed out"},
      Abort{kU64Max, kU32Max, std::numeric_limits<int32_t>::min(), max_str},
      Abort{0, 0, std::numeric_limits<int32_t>::max(), binary},
      Goodbye{},
      Goodbye{kU32Max},
      CollectiveMismatch{},
      CollectiveMismatch{9, 100, "rank 0: allreduce(f32, 1024), rank 1: broadcast(root 0)"},
      CollectiveMismatch{kU64Max, kU64Max, max_str},
      StallQuery{},
      StallQuery{kU64Max, 12},
      StallAnswer{},
      StallAnswer{7, 12, 11, 10, 11, "allreduce", 3},
      StallAnswer{kU64Max, kU64Max, kU64Max, kU64Max, kU64Max, max_str, -1},
      ShmOffer{},
      ShmOffer{1, "boot/4026531840/1000", 4242, "nexar-shm-0123456789abcdef01234567"},
      ShmOffer{255, max_str, kU32Max, binary},
      TopologyDigest{},
      TopologyDigest{7, 0x0123456789abcdefULL, "k_regular:4"},
      TopologyDigest{kU32Max, kU64Max, max_str},
  };
}

DecodeResult decode(const Bytes &b) {
  return decode_control(b);
}

// Decodes and checks the result is an error that starts with `prefix`.
void expect_error(const Bytes &b, const std::string &prefix) {
  DecodeResult r = decode(b);
  ASSERT_FALSE(r) << "decoded " << control_name(*r.message);
  EXPECT_EQ(r.error.rfind(prefix, 0), 0u) << "error was: " << r.error;
}

// ---- ByteWriter / ByteReader ----

TEST(ByteCodec, LittleEndianLayout) {
  Bytes b;
  ByteWriter w(b);
  w.u8(0xab);
  w.u16(0x0102);
  w.u32(0x03040506);
  w.u64(0x0708090a0b0c0d0eULL);
  w.i32(-2);
  w.str("hi");
  w.bytes(Bytes{9});
  w.raw(Bytes{7, 7});
  EXPECT_EQ(b, (Bytes{0xab, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0e, 0x0d, 0x0c, 0x0b,
                      0x0a, 0x09, 0x08, 0x07, 0xfe, 0xff, 0xff, 0xff, 2,    0,    0,
                      0,    'h',  'i',  1,    0,    0,    0,    9,    7,    7}));

  ByteReader r(b);
  uint8_t a;
  uint16_t c;
  uint32_t d;
  uint64_t e;
  int32_t f;
  std::string s;
  Bytes g;
  std::span<const uint8_t> h;
  ASSERT_TRUE(r.u8(a) && r.u16(c) && r.u32(d) && r.u64(e) && r.i32(f));
  ASSERT_TRUE(r.str(16, s) && r.bytes(16, g) && r.raw(2, h));
  EXPECT_EQ(a, 0xab);
  EXPECT_EQ(c, 0x0102);
  EXPECT_EQ(d, 0x03040506u);
  EXPECT_EQ(e, 0x0708090a0b0c0d0eULL);
  EXPECT_EQ(f, -2);
  EXPECT_EQ(s, "hi");
  EXPECT_EQ(g, Bytes{9});
  EXPECT_EQ(Bytes(h.begin(), h.end()), (Bytes{7, 7}));
  EXPECT_TRUE(r.at_end());
}

TEST(ByteCodec, ReaderStaysFailedAndLeavesOutputsAlone) {
  const Bytes b{1, 2, 3};
  ByteReader r(b);
  uint32_t v = 77;
  EXPECT_FALSE(r.u32(v));
  EXPECT_EQ(v, 77u);
  EXPECT_EQ(r.error(), ByteReader::Error::kTruncated);
  uint8_t x = 5;
  EXPECT_FALSE(r.u8(x));  // enough input remains, but the reader has failed
  EXPECT_EQ(x, 5);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.at_end());

  ByteReader r2(b);
  std::span<const uint8_t> view;
  EXPECT_FALSE(r2.raw(4, view));
  EXPECT_TRUE(view.empty());
  ByteReader r3(b);
  EXPECT_TRUE(r3.raw(3, view) && r3.at_end());
}

// RFC 9000, appendix A.1's examples, then a truncated 4-byte form.
TEST(ByteCodec, QuicVarintsInEveryLength) {
  const Bytes b{0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c,  // 8 bytes
                0x9d, 0x7f, 0x3e, 0x7d,                          // 4 bytes
                0x7b, 0xbd,                                      // 2 bytes
                0x25,                                            // 1 byte
                0x80, 0x01};
  ByteReader r(b);
  uint64_t v = 0;
  ASSERT_TRUE(r.quic_varint(v));
  EXPECT_EQ(v, 151288809941952652u);
  ASSERT_TRUE(r.quic_varint(v));
  EXPECT_EQ(v, 494878333u);
  ASSERT_TRUE(r.quic_varint(v));
  EXPECT_EQ(v, 15293u);
  ASSERT_TRUE(r.quic_varint(v));
  EXPECT_EQ(v, 37u);
  EXPECT_EQ(r.position(), 15u);
  EXPECT_FALSE(r.quic_varint(v));
  EXPECT_EQ(v, 37u) << "a failed read leaves its output alone";
  EXPECT_EQ(r.error(), ByteReader::Error::kTruncated);
}

TEST(ByteCodec, LengthCheckedAgainstLimitAndInputBeforeAllocating) {
  Bytes huge;
  ByteWriter(huge).u32(kU32Max);
  huge.resize(huge.size() + 16, 'z');
  std::string s = "untouched";
  g_largest_alloc = 0;
  ByteReader r1(huge);
  EXPECT_FALSE(r1.str(kU32Max, s));  // limit allows it, the input does not
  EXPECT_EQ(r1.error(), ByteReader::Error::kTruncated);
  ByteReader r2(huge);
  EXPECT_FALSE(r2.str(8, s));
  EXPECT_EQ(r2.error(), ByteReader::Error::kTooLong);
  Bytes out{1};
  ByteReader r3(huge);
  EXPECT_FALSE(r3.bytes(1 << 20, out));
  EXPECT_EQ(s, "untouched");
  EXPECT_EQ(out, Bytes{1});
  EXPECT_LT(g_largest_alloc.load(), 64u);

  Bytes exact;
  ByteWriter(exact).str("abcd");
  ByteReader r4(exact);
  EXPECT_TRUE(r4.str(4, s));  // max_len is inclusive
  EXPECT_EQ(s, "abcd");
}

// ---- Control messages ----

TEST(ControlCodec, GoldenEncoding) {
  // Pins the wire format: version, type, then little-endian fields.
  EXPECT_EQ(encode_control(HelloAck{0x01020304}), (Bytes{1, 0x02, 0x04, 0x03, 0x02, 0x01}));
  EXPECT_EQ(encode_control(Hello{0x0102, 5, 6, 7, "n"}),
            (Bytes{1, 0x01, 0x02, 0x01, 5, 0, 0, 0, 0, 0, 0, 0,  6,
                   0, 0,    0,    7,    0, 0, 0, 1, 0, 0, 0, 'n'}));
}

TEST(ControlCodec, RoundTripsEveryMessage) {
  for (const ControlMessage &m : samples()) {
    Bytes enc = encode_control(m);
    ASSERT_LE(enc.size(), kMaxControlMessage);
    DecodeResult r = decode(enc);
    ASSERT_TRUE(r) << control_name(m) << ": " << r.error;
    EXPECT_TRUE(r.error.empty());
    EXPECT_EQ(*r.message, m) << control_name(m);
  }
}

TEST(ControlCodec, OverlongStringsAreTruncatedOnEncode) {
  Abort a{1, 2, -3, std::string(kMaxStringLen + 100, 'r')};
  DecodeResult r = decode(encode_control(a));
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(std::get<Abort>(*r.message).reason, std::string(kMaxStringLen, 'r'));
}

TEST(ControlCodec, RejectsEveryTruncation) {
  for (const ControlMessage &m : samples()) {
    const Bytes enc = encode_control(m);
    for (std::size_t n = 0; n < enc.size(); ++n) {
      SCOPED_TRACE(std::string(control_name(m)) + " cut to " + std::to_string(n));
      expect_error(Bytes(enc.begin(), enc.begin() + n), "truncated");
    }
  }
}

TEST(ControlCodec, TruncationNamesTheField) {
  Bytes enc = encode_control(Hello{1, 2, 3, 4, "node"});
  enc.pop_back();
  EXPECT_EQ(decode(enc).error, "truncated Hello.node_name");
  expect_error({}, "truncated control version");
  expect_error({kControlVersion}, "truncated control type");
  Bytes hb = encode_control(Heartbeat{1, 2});
  hb.resize(2 + 8 + 3);
  EXPECT_EQ(decode(hb).error, "truncated Heartbeat.timestamp_ns");
}

TEST(ControlCodec, RejectsHugeStringLengthWithoutAllocating) {
  Bytes b;
  ByteWriter w(b);
  w.u8(kControlVersion);
  w.u8(Hello::kType);
  w.u16(1);
  w.u64(1);
  w.u32(0);
  w.u32(2);
  const std::size_t len_at = b.size();
  w.u32(kU32Max);
  b.resize(b.size() + 100, 'n');
  g_largest_alloc = 0;
  EXPECT_EQ(decode(b).error, "Hello.node_name longer than 4096 bytes");
  EXPECT_LT(g_largest_alloc.load(), 1024u);

  // One over the limit, fully present in the input: still rejected.
  b.resize(len_at);
  ByteWriter(b).str(std::string(kMaxStringLen + 1, 'n'));
  expect_error(b, "Hello.node_name longer than");
  // Within the limit but longer than the input.
  b.resize(len_at);
  ByteWriter(b).u32(kMaxStringLen);
  b.resize(b.size() + 10, 'n');
  EXPECT_EQ(decode(b).error, "truncated Hello.node_name");
}

TEST(ControlCodec, RejectsOtherVersions) {
  for (int v : {0, 2, 0xff}) {
    Bytes enc = encode_control(Goodbye{1});
    enc[0] = static_cast<uint8_t>(v);
    EXPECT_EQ(decode(enc).error,
              "unsupported control version " + std::to_string(v) + " (expected 1)");
  }
}

TEST(ControlCodec, RejectsUnknownTypes) {
  EXPECT_EQ(decode(Bytes{kControlVersion, 0x7f, 0, 0, 0, 0}).error, "unknown control type 0x7f");
  EXPECT_EQ(decode(Bytes{kControlVersion, 0x00}).error, "unknown control type 0x00");
  EXPECT_EQ(decode(Bytes{kControlVersion, 0xff}).error, "unknown control type 0xff");
}

TEST(ControlCodec, RejectsTrailingBytes) {
  for (const ControlMessage &m : samples()) {
    Bytes enc = encode_control(m);
    enc.push_back(0);
    EXPECT_EQ(decode(enc).error, "trailing bytes after " + std::string(control_name(m)) + ": 1");
  }
}

TEST(ControlCodec, RejectsOversizedInputFirst) {
  // A valid message padded past the limit is rejected for its size, not its content.
  Bytes b = encode_control(Heartbeat{1, 2});
  b.resize(kMaxControlMessage + 1);
  expect_error(b, "control message too large: 65537 > 65536");
  b.resize(kMaxControlMessage);  // at the limit the content is examined
  expect_error(b, "trailing bytes after Heartbeat");
}

// Random garbage and mutated valid messages must decode to an error or to a
// message that re-encodes to exactly the input (the encoding is canonical), and
// must never allocate more than the largest legitimate field.
TEST(ControlCodec, SurvivesRandomInput) {
  std::mt19937_64 rng(0x6e65786172);  // fixed seed: failures reproduce
  const std::vector<ControlMessage> valid = samples();
  auto byte = [&] { return static_cast<uint8_t>(rng()); };
  std::size_t decoded = 0;
  g_largest_alloc = 0;
  std::size_t largest_input = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes in;
    switch (rng() % 4) {
      case 0:  // pure noise
        in.resize(rng() % 64);
        for (auto &b : in)
          b = byte();
        break;
      case 1:  // plausible header, noisy body
        in.resize(2 + rng() % 64);
        for (auto &b : in)
          b = byte();
        in[0] = kControlVersion;
        in[1] = static_cast<uint8_t>(rng() % 8);
        break;
      case 2: {  // valid message with a few bytes changed
        in = encode_control(valid[rng() % valid.size()]);
        for (int k = 1 + rng() % 3; k > 0; --k)
          in[rng() % in.size()] = byte();
        break;
      }
      default: {  // valid message cut or extended at a random point
        in = encode_control(valid[rng() % valid.size()]);
        std::size_t n = rng() % (in.size() + 8);
        in.resize(n, byte());
        break;
      }
    }
    largest_input = std::max(largest_input, in.size());
    DecodeResult r = decode(in);
    if (r) {
      ++decoded;
      ASSERT_TRUE(r.error.empty());
      ASSERT_EQ(encode_control(*r.message), in) << "iteration " << iter;
    } else {
      ASSERT_FALSE(r.error.empty()) << "iteration " << iter;
    }
  }
  // Encoding the inputs above allocates about largest_input; decoding must not
  // exceed that or the largest legitimate string.
  EXPECT_LE(g_largest_alloc.load(), std::max<std::size_t>(largest_input, kMaxStringLen + 1) * 2);
  EXPECT_GT(decoded, 1000u);  // the mutations do reach successful decodes
}

}  // namespace
}  // namespace nexar::wire
