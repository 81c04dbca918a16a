#include "transport/packet_cipher.h"

#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <algorithm>
#include <cstring>

#include "core/config.h"
#include "transport/stream_frame_scan.h"

#ifdef NEXAR_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

namespace nexar {
namespace {

constexpr size_t kKeyLen = 16, kNonceLen = 12, kTagLen = 16;
// Offered keys kept while no context uses them: the current and the next
// generation of a key update, both directions, with room to spare.
constexpr size_t kMaxIdleKeys = 8;
// How much of a payload is opened first to find its STREAM frame: room for
// an ACK frame with a few ranges ahead of the STREAM header.
constexpr size_t kScanBytes = 256;

thread_local PacketCipher *t_current = nullptr;

bool tags_equal(const uint8_t *a, const uint8_t *b) {
  uint8_t diff = 0;  // constant time: a forged tag learns nothing from timing
  for (size_t i = 0; i < kTagLen; ++i)
    diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

#ifdef NEXAR_HAVE_IPSEC_MB
// The manager only supplies function pointers chosen for this CPU; the GCM
// functions keep their state in the caller's key and context structs, so one
// manager serves every thread.
struct Library {
  IMB_MGR *mgr = nullptr;
  bool enabled = false;
  Library() {
    const char *v = env("NEXAR_FAST_AEAD");
    if (v && strcmp(v, "0") == 0) return;
    mgr = alloc_mb_mgr(0);
    if (!mgr) return;
    init_mb_mgr_auto(mgr, nullptr);
    enabled = imb_get_errno(mgr) == 0 && mgr->used_arch >= IMB_ARCH_SSE;
  }
  ~Library() {
    if (mgr) free_mb_mgr(mgr);
  }
};
const Library &library() {
  static const Library lib;
  return lib;
}
#endif

}  // namespace

struct alignas(64) PacketCipher::Key {
#ifdef NEXAR_HAVE_IPSEC_MB
  gcm_key_data data;
  // The key schedule is as secret as the key.
  ~Key() {
    gnutls_memset(&data, 0, sizeof data);
  }
#endif
  void seal(uint8_t *dest, const uint8_t *src, size_t len, const uint8_t *nonce, const uint8_t *aad,
            size_t aadlen) const {
#ifdef NEXAR_HAVE_IPSEC_MB
    gcm_context_data ctx;
    IMB_AES128_GCM_ENC(library().mgr, &data, &ctx, dest, src, len, nonce, aad, aadlen, dest + len,
                       kTagLen);
#else
    (void)dest, (void)src, (void)len, (void)nonce, (void)aad, (void)aadlen;
#endif
  }
  // Writes len - kTagLen bytes of plaintext; false if the tag is wrong.
  bool open(uint8_t *dest, const uint8_t *src, size_t len, const uint8_t *nonce, const uint8_t *aad,
            size_t aadlen) const {
#ifdef NEXAR_HAVE_IPSEC_MB
    gcm_context_data ctx;
    uint8_t tag[kTagLen];
    const size_t n = len - kTagLen;
    uint8_t received[kTagLen];
    memcpy(received, src + n, kTagLen);  // dest may be src
    IMB_AES128_GCM_DEC(library().mgr, &data, &ctx, dest, src, n, nonce, aad, aadlen, tag, kTagLen);
    return tags_equal(tag, received);
#else
    (void)dest, (void)src, (void)len, (void)nonce, (void)aad, (void)aadlen;
    return false;
#endif
  }

  // Seals (kSeal) or opens one packet in consecutive pieces, each from and to
  // its own place (GCM's counter and hash carry over between them at any
  // length).
  template <bool kSeal>
  class Pieces {
   public:
    Pieces(const Key &key, const uint8_t *nonce, const uint8_t *aad, size_t aadlen) : key_(key) {
#ifdef NEXAR_HAVE_IPSEC_MB
      IMB_AES128_GCM_INIT(library().mgr, &key_.data, &ctx_, nonce, aad, aadlen);
#else
      (void)nonce, (void)aad, (void)aadlen;
#endif
    }
    void update(uint8_t *to, const uint8_t *from, size_t n) {
#ifdef NEXAR_HAVE_IPSEC_MB
      if (n == 0) return;
      if constexpr (kSeal)
        IMB_AES128_GCM_ENC_UPDATE(library().mgr, &key_.data, &ctx_, to, from, n);
      else
        IMB_AES128_GCM_DEC_UPDATE(library().mgr, &key_.data, &ctx_, to, from, n);
#else
      (void)to, (void)from, (void)n;
#endif
    }
    // The tag of everything given (zeros without ipsec-mb, which nothing
    // then asks for).
    void tag(uint8_t *out) {
#ifdef NEXAR_HAVE_IPSEC_MB
      if constexpr (kSeal)
        IMB_AES128_GCM_ENC_FINALIZE(library().mgr, &key_.data, &ctx_, out, kTagLen);
      else
        IMB_AES128_GCM_DEC_FINALIZE(library().mgr, &key_.data, &ctx_, out, kTagLen);
#else
      memset(out, 0, kTagLen);
#endif
    }

   private:
    const Key &key_;
#ifdef NEXAR_HAVE_IPSEC_MB
    gcm_context_data ctx_;
#endif
  };
  using Sealing = Pieces<true>;
  using Opening = Pieces<false>;
};

PacketCipher::PacketCipher(uint64_t *fast_packets, uint64_t *sealed_in_place)
    : fast_packets_(fast_packets), sealed_in_place_(sealed_in_place) {}
PacketCipher::~PacketCipher() = default;

bool PacketCipher::available() {
#ifdef NEXAR_HAVE_IPSEC_MB
  return library().enabled;
#else
  return false;
#endif
}

const char *PacketCipher::implementation() {
#ifdef NEXAR_HAVE_IPSEC_MB
  if (!available()) return "gnutls";
  switch (library().mgr->used_arch) {
    case IMB_ARCH_AVX512:
      return "ipsec-mb avx512";
    case IMB_ARCH_AVX2:
      return "ipsec-mb avx2";
    case IMB_ARCH_AVX:
      return "ipsec-mb avx";
    default:
      return "ipsec-mb sse";
  }
#else
  return "gnutls";
#endif
}

void PacketCipher::offer(const uint8_t *key, size_t keylen) {
  if (keylen != kKeyLen || !available()) return;
  if (keys_.size() >= kMaxIdleKeys) {
    // Drop the oldest key no context uses (a generation never adopted).
    auto idle = std::find_if(keys_.begin(), keys_.end(), [&](const std::unique_ptr<Key> &k) {
      return std::none_of(entries_.begin(), entries_.end(),
                          [&](const Entry &e) { return e.key == k.get(); });
    });
    if (idle != keys_.end()) keys_.erase(idle);
  }
  auto k = std::make_unique<Key>();
#ifdef NEXAR_HAVE_IPSEC_MB
  IMB_AES128_GCM_PRE(library().mgr, key, &k->data);
#endif
  keys_.push_back(std::move(k));
}

void PacketCipher::forget(const ngtcp2_crypto_aead_ctx *ctx) {
  std::erase_if(entries_, [&](const Entry &e) { return e.handle == ctx->native_handle; });
}

bool PacketCipher::open_placing(const Key &key, uint8_t *dest, const uint8_t *src, size_t len,
                                const uint8_t *nonce, const uint8_t *aad, size_t aadlen) {
  const size_t n = len - kTagLen;
  uint8_t received[kTagLen];
  memcpy(received, src + n, kTagLen);  // dest may be src
  Key::Opening o(key, nonce, aad, aadlen);
  const size_t head = std::min(n, kScanBytes);
  o.update(dest, src, head);
  // The head is not authenticated yet: it only says where to try. Should the
  // tag then fail, the bytes opened into the receive are garbage in memory
  // that is still waiting for exactly those bytes; the authentic packet
  // (retransmitted, or the original of a forgery) overwrites them before the
  // receive can complete, and they are never reported as received.
  StreamFrameAt f;
  size_t k = 0;
  uint8_t *to = nullptr;
  if (find_stream_frame(dest, head, n, &f) && f.data_len >= kMinPlaced)
    to = placer_->place(f.stream_id, f.offset, f.data_len, &k);
  uint8_t tag[kTagLen];
  if (!to || k < kMinPlaced || k > f.data_len) {
    o.update(dest + head, src + head, n - head);
    o.tag(tag);
    return tags_equal(tag, received);
  }
  // The data's first bytes were in the head (its STREAM header was).
  const size_t opened = head - f.data_start;
  memcpy(to, dest + f.data_start, opened);
  const size_t end = f.data_start + k;
  o.update(to + opened, src + head, end - head);
  o.update(dest + end, src + end, n - end);
  o.tag(tag);
  if (!tags_equal(tag, received)) return false;
  placer_->placed(f.stream_id, f.offset, k, to);
  return true;
}

template <class Run>
bool PacketCipher::for_each_source_run(const uint8_t *payload, size_t len, Run &&run) {
  StreamFrameScanner scan(payload, len, len);
  StreamFrameAt f;
  for (;;) {
    switch (scan.next(&f)) {
      case StreamFrameScanner::Step::kEnd:
        return true;
      case StreamFrameScanner::Step::kMalformed:
        seal_error_ = "a packet to seal holds a frame the scan does not know";
        return false;
      case StreamFrameScanner::Step::kStream:
        break;
    }
    for (size_t done = 0; done < f.data_len;) {
      const uint8_t *from = nullptr;
      size_t n = 0;
      if (!source_->source(f.stream_id, f.offset + done, f.data_len - done, &from, &n) || n == 0 ||
          n > f.data_len - done) {
        seal_error_ = "a packet to seal holds stream data that is no longer queued";
        return false;
      }
      if (from) run(f.data_start + done, from, n);
      done += n;
    }
  }
}

bool PacketCipher::seal_from_source(const Key &key, uint8_t *payload, size_t len,
                                    const uint8_t *nonce, const uint8_t *aad, size_t aadlen) {
  Key::Sealing s(key, nonce, aad, aadlen);
  size_t sealed = 0;  // payload[0, sealed) is ciphertext now
  uint64_t from_source = 0;
  const bool ok = for_each_source_run(payload, len, [&](size_t at, const uint8_t *from, size_t n) {
    s.update(payload + sealed, payload + sealed, at - sealed);
    s.update(payload + at, from, n);
    sealed = at + n;
    from_source += n;
  });
  if (!ok) return false;
  s.update(payload + sealed, payload + sealed, len - sealed);
  s.tag(payload + len);
  if (sealed_in_place_) *sealed_in_place_ += from_source;
  return true;
}

const PacketCipher::Entry *PacketCipher::find(const void *handle) const {
  for (const Entry &e : entries_)
    if (e.handle == handle) return &e;
  return nullptr;
}

void PacketCipher::decide(const void *handle, const uint8_t *plaintext, size_t len,
                          const uint8_t *sealed, const uint8_t *nonce, const uint8_t *aad,
                          size_t aadlen) {
  std::vector<uint8_t> trial(len + kTagLen);  // once per context: not worth keeping
  const Key *adopted = nullptr;
  for (const auto &k : keys_) {
    k->seal(trial.data(), plaintext, len, nonce, aad, aadlen);
    if (memcmp(trial.data(), sealed, len + kTagLen) == 0) {
      adopted = k.get();
      break;
    }
  }
  entries_.push_back({handle, adopted});
}

bool PacketCipher::suitable(const ngtcp2_crypto_aead *aead, size_t noncelen) {
  return noncelen == kNonceLen && aead->max_overhead == kTagLen;
}

PacketCipher::Scope::Scope(PacketCipher *c) : prev_(t_current) {
  t_current = c;
}
PacketCipher::Scope::~Scope() {
  t_current = prev_;
}

int PacketCipher::encrypt(uint8_t *dest, const ngtcp2_crypto_aead *aead,
                          const ngtcp2_crypto_aead_ctx *aead_ctx, const uint8_t *plaintext,
                          size_t plaintextlen, const uint8_t *nonce, size_t noncelen,
                          const uint8_t *aad, size_t aadlen) {
  PacketCipher *pc = t_current;
  const void *handle = aead_ctx->native_handle;
  const bool fast_possible = pc && !pc->keys_.empty() && suitable(aead, noncelen);
  const Entry *e = fast_possible ? pc->find(handle) : nullptr;
  const bool stand_ins = pc && pc->source_ && pc->source_->standing_in();
  if (pc) pc->seal_error_ = nullptr;
  if (stand_ins) {
    // The real bytes are sealed in place: work on dest (ngtcp2 passes the
    // same buffer; the header allows another).
    if (dest != plaintext) memmove(dest, plaintext, plaintextlen);
    plaintext = dest;
  }
  if (e && e->key) {
    if (stand_ins) {
      if (!pc->seal_from_source(*e->key, dest, plaintextlen, nonce, aad, aadlen))
        return NGTCP2_ERR_CALLBACK_FAILURE;
    } else {
      e->key->seal(dest, plaintext, plaintextlen, nonce, aad, aadlen);
    }
    ++*pc->fast_packets_;
    return 0;
  }
  // GnuTLS seals the plaintext as it is: put the real bytes in first.
  if (stand_ins &&
      !pc->for_each_source_run(dest, plaintextlen, [&](size_t at, const uint8_t *from, size_t n) {
        memcpy(dest + at, from, n);
      }))
    return NGTCP2_ERR_CALLBACK_FAILURE;
  // The first packet of a context decides it: GnuTLS seals it, then the
  // offered keys try to reproduce that. ngtcp2 seals in place: keep the
  // plaintext.
  const bool decide = fast_possible && !e;
  std::vector<uint8_t> kept;
  if (decide) kept.assign(plaintext, plaintext + plaintextlen);
  if (ngtcp2_crypto_encrypt(dest, aead, aead_ctx, plaintext, plaintextlen, nonce, noncelen, aad,
                            aadlen) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  if (decide) pc->decide(handle, kept.data(), plaintextlen, dest, nonce, aad, aadlen);
  return 0;
}

int PacketCipher::decrypt(uint8_t *dest, const ngtcp2_crypto_aead *aead,
                          const ngtcp2_crypto_aead_ctx *aead_ctx, const uint8_t *ciphertext,
                          size_t ciphertextlen, const uint8_t *nonce, size_t noncelen,
                          const uint8_t *aad, size_t aadlen) {
  PacketCipher *pc = t_current;
  const void *handle = aead_ctx->native_handle;
  const bool fast_possible =
      pc && !pc->keys_.empty() && suitable(aead, noncelen) && ciphertextlen >= kTagLen;
  const Entry *e = fast_possible ? pc->find(handle) : nullptr;
  if (e && e->key) {
    const bool ok =
        pc->placer_ && ciphertextlen >= kTagLen + kMinPlaced
            ? pc->open_placing(*e->key, dest, ciphertext, ciphertextlen, nonce, aad, aadlen)
            : e->key->open(dest, ciphertext, ciphertextlen, nonce, aad, aadlen);
    if (!ok) return NGTCP2_ERR_DECRYPT;
    ++*pc->fast_packets_;
    return 0;
  }
  const bool decide = fast_possible && !e;
  std::vector<uint8_t> sealed;
  if (decide) sealed.assign(ciphertext, ciphertext + ciphertextlen);  // dest may be ciphertext
  if (ngtcp2_crypto_decrypt(dest, aead, aead_ctx, ciphertext, ciphertextlen, nonce, noncelen, aad,
                            aadlen) != 0)
    return NGTCP2_ERR_DECRYPT;
  // Only an authentic packet decides: a forged one must not pin a context
  // to GnuTLS (or teach anything).
  if (decide) pc->decide(handle, dest, ciphertextlen - kTagLen, sealed.data(), nonce, aad, aadlen);
  return 0;
}

}  // namespace nexar
