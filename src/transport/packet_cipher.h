// Packet protection of a connection's 1-RTT keys on a faster AES-128-GCM.
//
// GnuTLS's AES-128-GCM runs at about 4.5 GB/s per core here and was a third
// of the CPU of a large collective (every byte is sealed once and opened
// once); Intel's ipsec-mb library (Debian's libipsec-mb) does the same AEAD
// at about 14 GB/s with VAES/AVX-512, and picks the best path the CPU has.
//
// ngtcp2 still creates, installs and frees its GnuTLS contexts as before and
// GnuTLS stays the reference: the connection offers every 1-RTT key it
// derives (TLS secret callback, key updates), and the first time a context
// seals or opens a packet, the packet is done by GnuTLS and redone with each
// offered key; a key whose output is byte-for-byte GnuTLS's is adopted for
// that context. Contexts of the Initial and Handshake keys (never offered), a
// build or machine without ipsec-mb, NEXAR_FAST_AEAD=0, or a packet sealed
// outside a PacketCipher::Scope all simply stay on GnuTLS.
//
// Both ways the cipher also spares a copy of bulk stream data: it opens a
// packet's stream data straight into the receive that takes it (Placer), and
// seals stream data straight from the sender's memory where ngtcp2 was given
// stand-in bytes for it (Source).
#pragma once

#include <ngtcp2/ngtcp2.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace nexar {

class PacketCipher {
 public:
  // Counts the packets sealed or opened on the fast path into *fast_packets,
  // and the stream bytes sealed straight from the sender's memory into
  // *sealed_in_place if given (the endpoint's statistics, which must outlive
  // the cipher).
  explicit PacketCipher(uint64_t *fast_packets, uint64_t *sealed_in_place = nullptr);
  ~PacketCipher();
  PacketCipher(const PacketCipher &) = delete;
  PacketCipher &operator=(const PacketCipher &) = delete;

  // Whether the fast AEAD is built in, the CPU runs it and NEXAR_FAST_AEAD
  // does not turn it off; and the name of its code path ("avx512", ...).
  static bool available();
  static const char *implementation();

  // Where a packet's stream data can be opened straight into: the receive
  // that takes those bytes next. Consulted only while a Scope of this cipher
  // lives, for packets of at least kMinPlaced bytes of stream data.
  class Placer {
   public:
    virtual ~Placer() = default;
    // Memory for the first bytes (at most len) of stream stream_id's data at
    // offset, if they would be copied into it unchanged; *n says how many.
    // Null: they are opened into ngtcp2's buffer as usual.
    virtual uint8_t *place(int64_t stream_id, uint64_t offset, size_t len, size_t *n) = 0;
    // The packet was authentic: those n bytes are in place, and ngtcp2's
    // buffer holds no plaintext for them.
    virtual void placed(int64_t stream_id, uint64_t offset, size_t n, const uint8_t *to) = 0;
  };
  static constexpr size_t kMinPlaced = 16 * 1024;
  void set_placer(Placer *p) { placer_ = p; }

  // Where a packet's stream data really is. ngtcp2 copies every byte it
  // sends into its packet before sealing it; for bulk data the connection
  // gives ngtcp2 stand-in bytes from a small buffer that stays in cache, and
  // the cipher seals the real bytes from the sender's memory (on GnuTLS, or
  // for the first packet of a key, it copies them into the packet first).
  // The connection keeps that memory until the peer acknowledged it, as
  // ngtcp2 requires anyway for retransmission. Consulted only while a Scope
  // of this cipher lives.
  class Source {
   public:
    virtual ~Source() = default;
    // Whether any data in flight was given as stand-in bytes: only then are
    // packets walked.
    virtual bool standing_in() const = 0;
    // Stream stream_id's bytes at offset, at most len of them: *n bytes that
    // are at *from in the sender's memory, or (*from null) that are in the
    // packet as ngtcp2 wrote them. False if those bytes are not queued: the
    // packet cannot be sealed.
    virtual bool source(int64_t stream_id, uint64_t offset, size_t len, const uint8_t **from,
                        size_t *n) = 0;
  };
  void set_source(Source *s) { source_ = s; }
  // Why the last packet could not be sealed (NGTCP2_ERR_CALLBACK_FAILURE from
  // ngtcp2), or null.
  const char *seal_error() const { return seal_error_; }

  // A key of this connection (AES-128: 16 bytes; other lengths are ignored).
  void offer(const uint8_t *key, size_t keylen);
  // ngtcp2 is freeing this context; its handle may be reused by another.
  void forget(const ngtcp2_crypto_aead_ctx *ctx);

  // While a Scope lives, ngtcp2 calls on this thread are for this cipher's
  // connection (the AEAD callbacks have no user data).
  class Scope {
   public:
    explicit Scope(PacketCipher *c);
    ~Scope();
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

   private:
    PacketCipher *prev_;
  };

  // ngtcp2_callbacks.encrypt / .decrypt.
  static int encrypt(uint8_t *dest, const ngtcp2_crypto_aead *aead,
                     const ngtcp2_crypto_aead_ctx *aead_ctx, const uint8_t *plaintext,
                     size_t plaintextlen, const uint8_t *nonce, size_t noncelen, const uint8_t *aad,
                     size_t aadlen);
  static int decrypt(uint8_t *dest, const ngtcp2_crypto_aead *aead,
                     const ngtcp2_crypto_aead_ctx *aead_ctx, const uint8_t *ciphertext,
                     size_t ciphertextlen, const uint8_t *nonce, size_t noncelen,
                     const uint8_t *aad, size_t aadlen);

 private:
  struct Key;
  struct Entry {
    const void *handle;  // the GnuTLS context's native handle
    const Key *key;      // null: stays on GnuTLS
  };
  // The entry for this context, if one was decided.
  const Entry *find(const void *handle) const;
  // Decides a context from one packet GnuTLS sealed: adopts the offered key
  // that reproduces `sealed` (plaintext then the 16-byte tag) from plaintext.
  void decide(const void *handle, const uint8_t *plaintext, size_t len, const uint8_t *sealed,
              const uint8_t *nonce, const uint8_t *aad, size_t aadlen);
  static bool suitable(const ngtcp2_crypto_aead *aead, size_t noncelen);
  // Opens a packet as Key::open does, the first STREAM frame's data straight
  // into the place placer_ gives for it, if any.
  bool open_placing(const Key &key, uint8_t *dest, const uint8_t *src, size_t len,
                    const uint8_t *nonce, const uint8_t *aad, size_t aadlen);
  // Calls run(at, from, n) for each run of stream data in the payload that is
  // at `from` in the sender's memory, in payload order (at: where it goes in
  // the payload). The frames after a run are walked only once run() returned.
  // False, with seal_error_ set, if the payload cannot be walked or holds
  // data no longer queued.
  template <class Run>
  bool for_each_source_run(const uint8_t *payload, size_t len, Run &&run);
  // Seals a payload in place, its stand-in bytes from the sender's memory.
  bool seal_from_source(const Key &key, uint8_t *payload, size_t len, const uint8_t *nonce,
                        const uint8_t *aad, size_t aadlen);

  std::vector<std::unique_ptr<Key>> keys_;  // offered; adopted ones are never dropped early
  std::vector<Entry> entries_;
  uint64_t *fast_packets_;
  uint64_t *sealed_in_place_;
  Placer *placer_ = nullptr;
  Source *source_ = nullptr;
  const char *seal_error_ = nullptr;
};

}  // namespace nexar
