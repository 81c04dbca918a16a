// PacketCipher (transport/packet_cipher.h): the fast AES-128-GCM must seal
// exactly what GnuTLS seals, open what GnuTLS sealed, reject forgeries, and
// only ever be used for a context after it reproduced GnuTLS's output.
#include "transport/packet_cipher.h"

#include <gnutls/crypto.h>
#include <gtest/gtest.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "transport/stream_frame_scan.h"

using namespace nexar;

namespace {

constexpr size_t kTag = 16;

// A GnuTLS AES-128-GCM context as ngtcp2_crypto_gnutls makes them.
struct GnutlsCtx {
  ngtcp2_crypto_aead aead{
      reinterpret_cast<void *>(static_cast<intptr_t>(GNUTLS_CIPHER_AES_128_GCM)), kTag};
  ngtcp2_crypto_aead_ctx ctx{};
  GnutlsCtx(const uint8_t *key, bool encrypt) {
    const int rc = encrypt ? ngtcp2_crypto_aead_ctx_encrypt_init(&ctx, &aead, key, 12)
                           : ngtcp2_crypto_aead_ctx_decrypt_init(&ctx, &aead, key, 12);
    EXPECT_EQ(rc, 0);
  }
  ~GnutlsCtx() { ngtcp2_crypto_aead_ctx_free(&ctx); }
};

struct Packet {
  std::vector<uint8_t> bytes;  // payload, then room for the tag
  uint8_t nonce[12];
  uint8_t aad[24];
};

Packet make_packet(size_t len, uint32_t seed) {
  Packet p;
  p.bytes.resize(len + kTag);
  for (size_t i = 0; i < len; ++i)
    p.bytes[i] = static_cast<uint8_t>(seed * 31 + i * 7);
  for (size_t i = 0; i < sizeof p.nonce; ++i)
    p.nonce[i] = static_cast<uint8_t>(seed + i);
  for (size_t i = 0; i < sizeof p.aad; ++i)
    p.aad[i] = static_cast<uint8_t>(seed ^ (i * 13));
  return p;
}

// What GnuTLS alone seals for this packet (out of place).
std::vector<uint8_t> reference_seal(const uint8_t *key, const Packet &p, size_t len) {
  GnutlsCtx g(key, true);
  std::vector<uint8_t> out(len + kTag);
  EXPECT_EQ(ngtcp2_crypto_encrypt(out.data(), &g.aead, &g.ctx, p.bytes.data(), len, p.nonce,
                                  sizeof p.nonce, p.aad, sizeof p.aad),
            0);
  return out;
}

const uint8_t kKey[16] = {0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6,
                          0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c};
const uint8_t kOtherKey[16] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                               0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10};
const size_t kSizes[] = {0, 1, 15, 16, 17, 255, 1200, 1452, 8191, 65000};

// Seals p in place (as ngtcp2 does) through the callback.
int seal(GnutlsCtx &g, Packet &p, size_t len) {
  return PacketCipher::encrypt(p.bytes.data(), &g.aead, &g.ctx, p.bytes.data(), len, p.nonce,
                               sizeof p.nonce, p.aad, sizeof p.aad);
}
int open(GnutlsCtx &g, const Packet &p, size_t len, std::vector<uint8_t> *plain) {
  plain->assign(len, 0);
  return PacketCipher::decrypt(plain->data(), &g.aead, &g.ctx, p.bytes.data(), len + kTag, p.nonce,
                               sizeof p.nonce, p.aad, sizeof p.aad);
}

}  // namespace

TEST(PacketCipher, SealsWhatGnutlsSealsAndOpensIt) {
  uint64_t fast = 0;
  PacketCipher pc(&fast);
  pc.offer(kOtherKey, 16);  // a candidate that must not be adopted
  pc.offer(kKey, 16);
  GnutlsCtx tx(kKey, true), rx(kKey, false);
  const PacketCipher::Scope scope(&pc);
  uint32_t seed = 1;
  size_t packets = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t len : kSizes) {
      Packet p = make_packet(len, seed++);
      const std::vector<uint8_t> plain(p.bytes.begin(), p.bytes.begin() + len);
      const std::vector<uint8_t> want = reference_seal(kKey, p, len);
      ASSERT_EQ(seal(tx, p, len), 0);
      ASSERT_EQ(p.bytes, want) << "sealed " << len << " bytes differently from GnuTLS";
      std::vector<uint8_t> got;
      ASSERT_EQ(open(rx, p, len, &got), 0) << len;
      ASSERT_EQ(got, plain) << len;
      packets += 2;
    }
  }
  if (PacketCipher::available()) {
    // The first packet of each context is GnuTLS's (it decides the context).
    EXPECT_EQ(fast, packets - 2) << PacketCipher::implementation();
  } else {
    EXPECT_EQ(fast, 0u);
  }
}

TEST(PacketCipher, FastPathIsBuiltAndRunsHere) {
#ifdef NEXAR_HAVE_IPSEC_MB
  // CI installs libipsec-mb-dev: a build that found it must use it, unless
  // the user turned it off.
  const char *off = getenv("NEXAR_FAST_AEAD");
  if (!(off && strcmp(off, "0") == 0)) {
    EXPECT_TRUE(PacketCipher::available());
    EXPECT_STRNE(PacketCipher::implementation(), "gnutls");
  }
#else
  EXPECT_FALSE(PacketCipher::available());
  EXPECT_STREQ(PacketCipher::implementation(), "gnutls");
#endif
}

TEST(PacketCipher, RejectsForgedPacketsOnTheFastPath) {
  uint64_t fast = 0;
  PacketCipher pc(&fast);
  pc.offer(kKey, 16);
  GnutlsCtx tx(kKey, true), rx(kKey, false);
  const PacketCipher::Scope scope(&pc);
  const size_t len = 1200;
  std::vector<uint8_t> got;
  // A forged first packet does not decide the context...
  Packet forged = make_packet(len, 7);
  ASSERT_EQ(seal(tx, forged, len), 0);
  forged.bytes[3] ^= 1;
  EXPECT_EQ(open(rx, forged, len, &got), NGTCP2_ERR_DECRYPT);
  // ... an authentic one does, and then forgeries in the body, the tag, the
  // header or the nonce all fail on the fast path too.
  Packet good = make_packet(len, 8);
  ASSERT_EQ(seal(tx, good, len), 0);
  ASSERT_EQ(open(rx, good, len, &got), 0);
  for (int what = 0; what < 4; ++what) {
    Packet p = make_packet(len, 9 + what);
    ASSERT_EQ(seal(tx, p, len), 0);
    ASSERT_EQ(open(rx, p, len, &got), 0);
    if (what == 0) p.bytes[len / 2] ^= 0x80;
    if (what == 1) p.bytes[len + 5] ^= 0x01;
    if (what == 2) p.aad[0] ^= 0x01;
    if (what == 3) p.nonce[11] ^= 0x01;
    EXPECT_EQ(open(rx, p, len, &got), NGTCP2_ERR_DECRYPT) << what;
  }
  if (PacketCipher::available()) EXPECT_GE(fast, 5u);
}

TEST(PacketCipher, AContextIsOnlyDecidedOnceUntilForgotten) {
  uint64_t fast = 0;
  PacketCipher pc(&fast);
  pc.offer(kOtherKey, 16);
  GnutlsCtx tx(kKey, true);
  const PacketCipher::Scope scope(&pc);
  const size_t len = 512;
  auto seal_checked = [&](uint32_t seed) {
    Packet p = make_packet(len, seed);
    const std::vector<uint8_t> want = reference_seal(kKey, p, len);
    ASSERT_EQ(seal(tx, p, len), 0);
    ASSERT_EQ(p.bytes, want);
  };
  seal_checked(1);  // decided: no offered key matches, GnuTLS keeps it
  pc.offer(kKey, 16);
  seal_checked(2);
  EXPECT_EQ(fast, 0u) << "a decided context must not be re-decided per packet";
  pc.forget(&tx.ctx);  // as when ngtcp2 frees it and the handle is reused
  seal_checked(3);     // decided again: now the right key is offered
  seal_checked(4);
  EXPECT_EQ(fast, PacketCipher::available() ? 1u : 0u);
}

TEST(PacketCipher, OutsideAScopeGnutlsDoesTheWork) {
  uint64_t fast = 0;
  PacketCipher pc(&fast);
  pc.offer(kKey, 16);
  GnutlsCtx tx(kKey, true), rx(kKey, false);
  for (uint32_t seed = 0; seed < 4; ++seed) {
    Packet p = make_packet(100, seed);
    const std::vector<uint8_t> want = reference_seal(kKey, p, 100);
    ASSERT_EQ(seal(tx, p, 100), 0);
    ASSERT_EQ(p.bytes, want);
    std::vector<uint8_t> got;
    ASSERT_EQ(open(rx, p, 100, &got), 0);
  }
  EXPECT_EQ(fast, 0u);
}

TEST(PacketCipher, KeysOfOtherLengthsAreNotOffered) {
  uint64_t fast = 0;
  PacketCipher pc(&fast);
  const uint8_t key32[32] = {};
  pc.offer(key32, 32);  // AES-256: GnuTLS only
  GnutlsCtx tx(kKey, true);
  const PacketCipher::Scope scope(&pc);
  for (uint32_t seed = 0; seed < 3; ++seed) {
    Packet p = make_packet(64, seed);
    ASSERT_EQ(seal(tx, p, 64), 0);
    EXPECT_EQ(p.bytes, reference_seal(kKey, make_packet(64, seed), 64));
  }
  EXPECT_EQ(fast, 0u);
}

// ---- Opening stream data straight into its receive ---------------------------

namespace {

// QUIC variable-length integers in their 1-, 2-, 4- or 8-byte forms.
void put_varint(std::vector<uint8_t> &b, uint64_t v, size_t len) {
  const uint8_t prefix = len == 1 ? 0x00 : len == 2 ? 0x40 : len == 4 ? 0x80 : 0xc0;
  for (size_t i = 0; i < len; ++i)
    b.push_back(static_cast<uint8_t>(v >> (8 * (len - 1 - i))));
  b[b.size() - len] |= prefix;
}

// An ACK frame with `ranges` extra ranges (ECN counts when ecn).
void put_ack(std::vector<uint8_t> &b, size_t ranges, bool ecn) {
  b.push_back(ecn ? 0x03 : 0x02);
  put_varint(b, 1000, 2);  // largest acknowledged
  put_varint(b, 25, 1);    // delay
  put_varint(b, ranges, 1);
  put_varint(b, 3, 1);  // first range
  for (size_t i = 0; i < ranges; ++i) {
    put_varint(b, 1, 1);
    put_varint(b, 2, 4);
  }
  if (ecn)
    for (int i = 0; i < 3; ++i)
      put_varint(b, 7, 2);
}

// A payload: padding and ping, an ACK, a STREAM frame (sid 6) whose data is
// data_len bytes at stream offset 4096 (with a Length field when with_len),
// then, if with_len, a trailing PING and padding.
std::vector<uint8_t> payload(size_t data_len, bool with_len, size_t ack_ranges = 2) {
  std::vector<uint8_t> b = {0x00, 0x01};
  put_ack(b, ack_ranges, true);
  b.push_back(with_len ? 0x0e : 0x0c);  // STREAM with OFF (and LEN)
  put_varint(b, 6, 1);
  put_varint(b, 4096, 4);
  if (with_len) put_varint(b, data_len, 4);
  for (size_t i = 0; i < data_len; ++i)
    b.push_back(static_cast<uint8_t>(i * 13 + 5));
  if (with_len) b.insert(b.end(), {0x01, 0x00, 0x00, 0x00});
  return b;
}

}  // namespace

TEST(StreamFrameScan, FindsTheStreamFrameBehindPaddingPingAndAck) {
  for (bool with_len : {true, false}) {
    const std::vector<uint8_t> b = payload(5000, with_len);
    StreamFrameAt f;
    ASSERT_TRUE(find_stream_frame(b.data(), 256, b.size(), &f)) << with_len;
    EXPECT_EQ(f.stream_id, 6);
    EXPECT_EQ(f.offset, 4096u);
    EXPECT_EQ(f.data_len, 5000u);
    EXPECT_EQ(b[f.data_start], 5) << "data_start is not the data's first byte";
    EXPECT_EQ(b[f.data_start + 4999], static_cast<uint8_t>(4999 * 13 + 5));
  }
}

TEST(StreamFrameScan, GivesUpRatherThanGuess) {
  StreamFrameAt f;
  std::vector<uint8_t> b = payload(5000, true);
  // The STREAM header not complete in the bytes given.
  EXPECT_FALSE(find_stream_frame(b.data(), 20, b.size(), &f));
  // A Length beyond the payload.
  EXPECT_FALSE(find_stream_frame(b.data(), 256, 4000, &f));
  // A frame type QUIC does not define ahead of the STREAM frame.
  std::vector<uint8_t> other = {0x21};
  const std::vector<uint8_t> rest = payload(5000, true);
  other.insert(other.end(), rest.begin(), rest.end());
  EXPECT_FALSE(find_stream_frame(other.data(), 256, other.size(), &f));
  // An ACK whose ranges run past the bytes given.
  b = payload(5000, true, 200);
  EXPECT_FALSE(find_stream_frame(b.data(), 256, b.size(), &f));
  // A NEW_CONNECTION_ID with a connection ID longer than QUIC allows.
  std::vector<uint8_t> cid = {0x18, 0x01, 0x00, 21};
  cid.resize(cid.size() + 21 + 16, 0xab);
  cid.insert(cid.end(), rest.begin(), rest.end());
  EXPECT_FALSE(find_stream_frame(cid.data(), 256, cid.size(), &f));
  // Nothing but padding.
  const std::vector<uint8_t> pad(300, 0);
  EXPECT_FALSE(find_stream_frame(pad.data(), 256, pad.size(), &f));
}

namespace {

// Every frame type QUIC defines other than STREAM, as ngtcp2 could write it.
std::vector<uint8_t> every_other_frame() {
  std::vector<uint8_t> b;
  auto frame = [&](uint8_t type, std::initializer_list<uint64_t> varints) {
    b.push_back(type);
    for (uint64_t v : varints)
      put_varint(b, v, v < 64 ? 1 : 4);
  };
  auto bytes = [&](size_t n, uint8_t fill) { b.insert(b.end(), n, fill); };
  frame(0x00, {});
  frame(0x01, {});
  put_ack(b, 3, false);
  put_ack(b, 0, true);
  frame(0x04, {2, 7, 100000});  // RESET_STREAM
  frame(0x05, {2, 7});          // STOP_SENDING
  frame(0x06, {9000, 40});      // CRYPTO
  bytes(40, 0x08);              // (data that looks like a STREAM frame type)
  frame(0x07, {30});            // NEW_TOKEN
  bytes(30, 0x0e);
  frame(0x10, {1 << 20});  // MAX_DATA
  frame(0x11, {6, 1 << 22});
  frame(0x12, {100});
  frame(0x13, {100});
  frame(0x14, {1 << 20});
  frame(0x15, {6, 1 << 22});
  frame(0x16, {100});
  frame(0x17, {100});
  frame(0x18, {5, 2});  // NEW_CONNECTION_ID: a 16-byte ID, then the token
  b.push_back(16);
  bytes(16 + 16, 0x0c);
  frame(0x19, {3});  // RETIRE_CONNECTION_ID
  frame(0x1a, {});   // PATH_CHALLENGE
  bytes(8, 0x0a);
  frame(0x1b, {});  // PATH_RESPONSE
  bytes(8, 0x0b);
  frame(0x1c, {0x0a, 0x08, 5});  // CONNECTION_CLOSE: code, frame type, reason
  bytes(5, 'x');
  frame(0x1d, {77, 3});  // CONNECTION_CLOSE (application)
  bytes(3, 'y');
  frame(0x1e, {});    // HANDSHAKE_DONE
  frame(0x31, {12});  // DATAGRAM with a length
  bytes(12, 0x09);
  return b;
}

// A STREAM frame with a Length field (and an Offset unless offset is 0).
void put_stream(std::vector<uint8_t> &b, uint64_t sid, uint64_t offset, size_t len, uint8_t fill) {
  b.push_back(offset ? 0x0e : 0x0a);
  put_varint(b, sid, 1);
  if (offset) put_varint(b, offset, 4);
  put_varint(b, len, 2);
  b.insert(b.end(), len, fill);
}

}  // namespace

TEST(StreamFrameScan, WalksEveryFrameToEachStreamFrame) {
  std::vector<uint8_t> b = every_other_frame();
  const size_t first = b.size();
  put_stream(b, 6, 4096, 300, 0x11);
  const std::vector<uint8_t> others = every_other_frame();
  b.insert(b.end(), others.begin(), others.end());
  const size_t second = b.size();
  put_stream(b, 10, 0, 200, 0x22);
  const size_t third = b.size();
  b.push_back(0x0c);  // OFF, no Length: runs to the end
  put_varint(b, 2, 1);
  put_varint(b, 1 << 20, 4);
  b.insert(b.end(), 500, 0x33);

  StreamFrameScanner scan(b.data(), b.size(), b.size());
  StreamFrameAt f;
  ASSERT_EQ(scan.next(&f), StreamFrameScanner::Step::kStream);
  EXPECT_EQ(f.stream_id, 6);
  EXPECT_EQ(f.offset, 4096u);
  EXPECT_EQ(f.data_start, first + 1 + 1 + 4 + 2);
  EXPECT_EQ(f.data_len, 300u);
  ASSERT_EQ(scan.next(&f), StreamFrameScanner::Step::kStream);
  EXPECT_EQ(f.stream_id, 10);
  EXPECT_EQ(f.offset, 0u);
  EXPECT_EQ(f.data_start, second + 1 + 1 + 2);
  EXPECT_EQ(f.data_len, 200u);
  ASSERT_EQ(scan.next(&f), StreamFrameScanner::Step::kStream);
  EXPECT_EQ(f.stream_id, 2);
  EXPECT_EQ(f.offset, 1u << 20);
  EXPECT_EQ(f.data_start, third + 1 + 1 + 4);
  EXPECT_EQ(f.data_len, 500u);
  EXPECT_EQ(scan.next(&f), StreamFrameScanner::Step::kEnd);
  // Opening finds the first one behind every other frame too.
  ASSERT_TRUE(find_stream_frame(b.data(), first + 16, b.size(), &f));
  EXPECT_EQ(f.stream_id, 6);

  // No truncation of the frames ahead of the first STREAM frame is read as a
  // STREAM frame (a cut inside a frame is malformed, one between frames ends).
  for (size_t cut = 1; cut < first; ++cut) {
    StreamFrameScanner short_scan(b.data(), cut, cut);
    EXPECT_NE(short_scan.next(&f), StreamFrameScanner::Step::kStream) << cut;
  }
}

namespace {

// A receive that takes the bytes of stream 6 from offset 4096 on.
struct TestPlacer : PacketCipher::Placer {
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 20, 0xee);
  size_t calls = 0;
  int64_t placed_sid = -1;
  uint64_t placed_offset = 0;
  size_t placed_n = 0;
  size_t room = SIZE_MAX;  // how many bytes it takes
  uint8_t *place(int64_t sid, uint64_t offset, size_t len, size_t *n) override {
    ++calls;
    if (sid != 6 || offset != 4096) return nullptr;
    *n = std::min(len, room);
    return buf.data();
  }
  void placed(int64_t sid, uint64_t offset, size_t n, const uint8_t *to) override {
    EXPECT_EQ(to, buf.data());
    placed_sid = sid;
    placed_offset = offset;
    placed_n = n;
  }
};

}  // namespace

// A cipher with a TestPlacer whose context the first packet has decided.
struct PlacingCipher {
  uint64_t fast = 0;
  PacketCipher pc{&fast};
  TestPlacer placer;
  GnutlsCtx tx{kKey, true}, rx{kKey, false};
  PacketCipher::Scope scope{&pc};
  PlacingCipher() {
    pc.set_placer(&placer);
    pc.offer(kKey, 16);
    Packet p = make_packet(1200, 1);  // GnuTLS opens it; it decides the context
    std::vector<uint8_t> got;
    EXPECT_EQ(seal(tx, p, 1200), 0);
    EXPECT_EQ(open(rx, p, 1200, &got), 0);
  }
  // plain sealed; opened through the placer (reset first) into *got.
  int open_payload(const std::vector<uint8_t> &plain, std::vector<uint8_t> *got,
                   size_t room = SIZE_MAX, size_t flip = SIZE_MAX) {
    Packet p = make_packet(plain.size(), 2);
    std::copy(plain.begin(), plain.end(), p.bytes.begin());
    EXPECT_EQ(seal(tx, p, plain.size()), 0);
    if (flip != SIZE_MAX) p.bytes[flip] ^= 0x10;
    placer = TestPlacer{};
    placer.room = room;
    return open(rx, p, plain.size(), got);
  }
};

TEST(PacketCipher, OpensStreamDataStraightIntoThePlaceGiven) {
  PlacingCipher c;
  std::vector<uint8_t> got;
  if (!PacketCipher::available()) {  // GnuTLS opens everything into ngtcp2's buffer
    const std::vector<uint8_t> plain = payload(40000, true);
    ASSERT_EQ(c.open_payload(plain, &got), 0);
    EXPECT_EQ(got, plain);
    EXPECT_EQ(c.placer.calls, 0u);
    return;
  }
  // Whole frames, and a receive that takes only part of one (its message
  // ends inside the frame); data lengths that split GCM blocks anywhere.
  for (size_t room : {SIZE_MAX, size_t{20000}}) {
    for (size_t data_len : {size_t{16384}, size_t{40001}, size_t{64900}}) {
      const std::vector<uint8_t> plain = payload(data_len, true);
      ASSERT_EQ(c.open_payload(plain, &got, room), 0);
      const TestPlacer &placer = c.placer;
      const size_t k = std::min(data_len, room);
      ASSERT_EQ(placer.placed_n, k) << data_len;
      EXPECT_EQ(placer.placed_sid, 6);
      EXPECT_EQ(placer.placed_offset, 4096u);
      StreamFrameAt f;
      ASSERT_TRUE(find_stream_frame(plain.data(), 256, plain.size(), &f));
      EXPECT_TRUE(
          std::equal(placer.buf.begin(), placer.buf.begin() + k, plain.begin() + f.data_start))
          << "placed bytes differ from the plaintext, " << data_len;
      EXPECT_EQ(placer.buf[k], 0xee) << "wrote past the place given";
      // Everything else is in ngtcp2's buffer where it belongs.
      EXPECT_TRUE(std::equal(got.begin(), got.begin() + f.data_start, plain.begin()));
      EXPECT_TRUE(
          std::equal(got.begin() + f.data_start + k, got.end(), plain.begin() + f.data_start + k));
    }
  }
  // Too little data to be worth placing: opened as usual.
  const std::vector<uint8_t> plain = payload(PacketCipher::kMinPlaced - 1, true);
  ASSERT_EQ(c.open_payload(plain, &got), 0);
  EXPECT_EQ(c.placer.calls, 0u);
  EXPECT_EQ(got, plain);
}

TEST(PacketCipher, AForgedPacketIsNeverReportedPlaced) {
  PlacingCipher c;
  std::vector<uint8_t> got;
  const std::vector<uint8_t> plain = payload(30000, true);
  for (size_t flip : {size_t{3000}, plain.size() + 2}) {  // in the data, in the tag
    EXPECT_EQ(c.open_payload(plain, &got, SIZE_MAX, flip), NGTCP2_ERR_DECRYPT);
    EXPECT_EQ(c.placer.calls, PacketCipher::available() ? 1u : 0u);
    EXPECT_EQ(c.placer.placed_n, 0u) << "a forged packet was reported placed";
  }
}

// ---- Sealing stream data from the sender's memory ----------------------------

namespace {

// Stream 6's bytes from offset 4096 on: the first `held` as ngtcp2 wrote
// them (a message header), the rest from `memory` (its payload). Every other
// stream's bytes are in the packet.
struct TestSource : PacketCipher::Source {
  std::vector<uint8_t> memory;
  size_t held = 0;
  bool active = true;
  bool lost = false;  // pretend stream 6's bytes are no longer queued
  size_t calls = 0;
  bool standing_in() const override { return active; }
  bool source(int64_t sid, uint64_t offset, size_t len, const uint8_t **from, size_t *n) override {
    ++calls;
    *from = nullptr;
    if (sid != 6) {
      *n = len;
      return true;
    }
    if (lost || offset < 4096) return false;
    const size_t at = static_cast<size_t>(offset - 4096);
    if (at < held) {
      *n = std::min(len, held - at);
      return true;
    }
    if (at - held >= memory.size()) return false;
    *from = memory.data() + (at - held);
    *n = std::min(len, memory.size() - (at - held));
    return true;
  }
};

// A payload whose stream 6 data (held bytes, then data_len - held from the
// sender's memory) is followed by a frame of stream 10, as ngtcp2 may pack
// them; and the same payload with stand-in zeros where the memory's bytes go.
struct StandInPacket {
  std::vector<uint8_t> real, stand_in;
  TestSource source;
  StandInPacket(size_t data_len, size_t held, uint32_t seed) {
    real = payload(data_len, true);
    put_stream(real, 10, 777, 100, static_cast<uint8_t>(seed));
    StreamFrameAt f;
    EXPECT_TRUE(find_stream_frame(real.data(), 256, real.size(), &f));
    for (size_t i = held; i < data_len; ++i)
      real[f.data_start + i] = static_cast<uint8_t>(seed * 7 + i * 31);
    stand_in = real;
    std::fill(stand_in.begin() + static_cast<long>(f.data_start + held),
              stand_in.begin() + static_cast<long>(f.data_start + data_len), 0);
    source.held = held;
    source.memory.assign(real.begin() + static_cast<long>(f.data_start + held),
                         real.begin() + static_cast<long>(f.data_start + data_len));
  }
  // A Packet of the stand-in payload, and the same with the real one.
  Packet packet(uint32_t seed, bool real_bytes) const {
    const std::vector<uint8_t> &b = real_bytes ? real : stand_in;
    Packet p = make_packet(b.size(), seed);
    std::copy(b.begin(), b.end(), p.bytes.begin());
    return p;
  }
};

}  // namespace

TEST(PacketCipher, SealsStandInBytesFromTheSendersMemory) {
  // On the fast path (the right key offered), and on GnuTLS, which copies
  // the real bytes into the packet before sealing (no matching key).
  for (bool fast_key : {true, false}) {
    uint64_t fast = 0, in_place = 0;
    PacketCipher pc(&fast, &in_place);
    pc.offer(fast_key ? kKey : kOtherKey, 16);
    GnutlsCtx tx(kKey, true), rx(kKey, false);
    const PacketCipher::Scope scope(&pc);
    uint32_t seed = 1;
    uint64_t from_memory = 0;
    for (size_t data_len : {size_t{20000}, size_t{40001}, size_t{64000}}) {
      for (size_t held : {size_t{0}, size_t{17}}) {
        StandInPacket sp(data_len, held, seed);
        pc.set_source(&sp.source);
        Packet p = sp.packet(seed, false);
        const std::vector<uint8_t> want =
            reference_seal(kKey, sp.packet(seed, true), sp.real.size());
        ASSERT_EQ(seal(tx, p, sp.real.size()), 0);
        ASSERT_EQ(p.bytes, want) << "sealed other bytes than the sender's, " << data_len << " "
                                 << held << (fast_key ? " fast" : " gnutls");
        std::vector<uint8_t> got;
        ASSERT_EQ(open(rx, p, sp.real.size(), &got), 0);
        ASSERT_EQ(got, sp.real);
        if (fast > 0) from_memory += data_len - held;  // the first packet decides on GnuTLS
        ++seed;
      }
    }
    EXPECT_EQ(in_place, from_memory) << fast_key;
    EXPECT_EQ(in_place > 0, fast_key && PacketCipher::available());
  }
}

TEST(PacketCipher, WithoutStandInsPacketsAreNotWalked) {
  uint64_t fast = 0;
  PacketCipher pc(&fast);
  pc.offer(kKey, 16);
  GnutlsCtx tx(kKey, true);
  const PacketCipher::Scope scope(&pc);
  StandInPacket sp(30000, 0, 3);
  sp.source.active = false;
  pc.set_source(&sp.source);
  for (uint32_t seed = 0; seed < 3; ++seed) {
    Packet p = sp.packet(seed, true);
    const std::vector<uint8_t> want = reference_seal(kKey, p, sp.real.size());
    ASSERT_EQ(seal(tx, p, sp.real.size()), 0);
    EXPECT_EQ(p.bytes, want);
  }
  EXPECT_EQ(sp.source.calls, 0u);
}

TEST(PacketCipher, RefusesToSealWhatItCannotFind) {
  for (bool fast_key : {true, false}) {
    uint64_t fast = 0;
    PacketCipher pc(&fast);
    pc.offer(fast_key ? kKey : kOtherKey, 16);
    GnutlsCtx tx(kKey, true);
    const PacketCipher::Scope scope(&pc);
    StandInPacket sp(30000, 0, 5);
    pc.set_source(&sp.source);
    Packet first = sp.packet(1, false);  // decides the context
    ASSERT_EQ(seal(tx, first, sp.real.size()), 0);
    // Stream data the connection no longer holds.
    sp.source.lost = true;
    Packet p = sp.packet(2, false);
    EXPECT_EQ(seal(tx, p, sp.real.size()), NGTCP2_ERR_CALLBACK_FAILURE);
    ASSERT_NE(pc.seal_error(), nullptr);
    EXPECT_NE(std::string(pc.seal_error()).find("no longer queued"), std::string::npos);
    // A frame the walk does not know, ahead of the stream data.
    sp.source.lost = false;
    std::vector<uint8_t> odd = {0x21};
    odd.insert(odd.end(), sp.stand_in.begin(), sp.stand_in.end());
    Packet q = make_packet(odd.size(), 3);
    std::copy(odd.begin(), odd.end(), q.bytes.begin());
    EXPECT_EQ(seal(tx, q, odd.size()), NGTCP2_ERR_CALLBACK_FAILURE);
    ASSERT_NE(pc.seal_error(), nullptr);
    EXPECT_NE(std::string(pc.seal_error()).find("does not know"), std::string::npos);
    // And a good packet seals again.
    Packet r = sp.packet(4, false);
    EXPECT_EQ(seal(tx, r, sp.real.size()), 0);
    EXPECT_EQ(pc.seal_error(), nullptr);
  }
}
