// PacketCipher (transport/packet_cipher.h): the fast AES-128-GCM must seal
// exactly what GnuTLS seals, open what GnuTLS sealed, reject forgeries, and
// only ever be used for a context after it reproduced GnuTLS's output.
#include "transport/packet_cipher.h"

#include <gnutls/crypto.h>
#include <gtest/gtest.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <cstdint>
#include <cstring>
#include <vector>

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
