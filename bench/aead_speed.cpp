// nexar-aead-speed: how fast one core seals and opens QUIC packets with
// GnuTLS's AES-128-GCM (through ngtcp2_crypto, as before PacketCipher) and
// with PacketCipher's fast path (ipsec-mb), on packets of the size nexar
// sends on loopback. It first checks that both produce the same bytes.
//
//   nexar-aead-speed [--bytes 65000] [--iters 20000]
//
// Built from the internals (transport/packet_cipher.h), not installed: the
// evidence behind docs/performance.md's packet-protection figures.
#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "transport/packet_cipher.h"

using nexar::PacketCipher;

namespace {

constexpr size_t kTag = 16;
const uint8_t kKey[16] = {7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

struct Ctx {
  ngtcp2_crypto_aead aead{
      reinterpret_cast<void *>(static_cast<intptr_t>(GNUTLS_CIPHER_AES_128_GCM)), kTag};
  ngtcp2_crypto_aead_ctx ctx{};
  bool ok;
  explicit Ctx(bool encrypt)
      : ok((encrypt ? ngtcp2_crypto_aead_ctx_encrypt_init(&ctx, &aead, kKey, 12)
                    : ngtcp2_crypto_aead_ctx_decrypt_init(&ctx, &aead, kKey, 12)) == 0) {}
  ~Ctx() { ngtcp2_crypto_aead_ctx_free(&ctx); }
};

struct Result {
  double seal_gbps, open_gbps;
  std::vector<uint8_t> sealed;  // the test packet, sealed after the timed loop
  bool opened;                  // every open succeeded and gave the plaintext back
};

// Seals a packet in place (as ngtcp2 does) iters times, seals the test
// packet once more (by then a fast context is decided), then opens that iters
// times. With `cipher` set the callbacks run inside its scope.
Result run(PacketCipher *cipher, size_t bytes, int iters) {
  Ctx tx(true), rx(false);
  std::vector<uint8_t> pkt(bytes + kTag), plain(bytes);
  uint8_t nonce[12] = {}, aad[32] = {};
  for (size_t i = 0; i < bytes; ++i)
    pkt[i] = static_cast<uint8_t>(i * 13);
  const std::vector<uint8_t> original(pkt.begin(), pkt.begin() + bytes);
  Result r{};
  PacketCipher::Scope scope(cipher);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  for (int i = 0; i < iters; ++i) {
    nonce[11] = static_cast<uint8_t>(i);
    PacketCipher::encrypt(pkt.data(), &tx.aead, &tx.ctx, pkt.data(), bytes, nonce, sizeof nonce,
                          aad, sizeof aad);
  }
  auto t1 = clock::now();
  r.sealed = original;
  r.sealed.resize(bytes + kTag);
  nonce[11] = 0xEE;
  PacketCipher::encrypt(r.sealed.data(), &tx.aead, &tx.ctx, r.sealed.data(), bytes, nonce,
                        sizeof nonce, aad, sizeof aad);
  const auto t_open = clock::now();
  r.opened = true;
  for (int i = 0; i < iters; ++i)
    r.opened &= PacketCipher::decrypt(plain.data(), &rx.aead, &rx.ctx, r.sealed.data(),
                                      bytes + kTag, nonce, sizeof nonce, aad, sizeof aad) == 0;
  auto t2 = clock::now();
  r.opened &= plain == original;
  const double total = static_cast<double>(bytes) * iters;
  r.seal_gbps = total / std::chrono::duration<double>(t1 - t0).count() / 1e9;
  r.open_gbps = total / std::chrono::duration<double>(t2 - t_open).count() / 1e9;
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  size_t bytes = 65000;
  int iters = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--bytes")) {
      bytes = strtoul(argv[i + 1], nullptr, 10);
    } else if (!strcmp(argv[i], "--iters")) {
      iters = atoi(argv[i + 1]);
    } else {
      fprintf(stderr, "usage: nexar-aead-speed [--bytes N] [--iters N]\n");
      return 2;
    }
  }
  if (iters < 2 || bytes == 0) {
    fprintf(stderr, "nexar-aead-speed: --iters must be at least 2 and --bytes positive\n");
    return 2;
  }
  const Result gnutls = run(nullptr, bytes, iters);
  uint64_t fast_packets = 0;
  PacketCipher cipher(&fast_packets);
  cipher.offer(kKey, sizeof kKey);
  const Result fast = run(&cipher, bytes, iters);
  printf("%zu-byte packets, %d each way, one core\n", bytes, iters);
  printf("gnutls          seal %6.2f GB/s  open %6.2f GB/s\n", gnutls.seal_gbps, gnutls.open_gbps);
  printf("%-15s seal %6.2f GB/s  open %6.2f GB/s  (%llu packets on the fast path)\n",
         PacketCipher::implementation(), fast.seal_gbps, fast.open_gbps,
         static_cast<unsigned long long>(fast_packets));
  if (!gnutls.opened || !fast.opened || gnutls.sealed != fast.sealed) {
    fprintf(stderr, "nexar-aead-speed: the two paths disagree\n");
    return 1;
  }
  if (PacketCipher::available() && fast_packets < static_cast<uint64_t>(iters)) {
    fprintf(stderr, "nexar-aead-speed: the fast path did not adopt the key\n");
    return 1;
  }
  return 0;
}
