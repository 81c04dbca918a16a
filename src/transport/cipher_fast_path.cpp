#include "transport/cipher_fast_path.h"

#include <gnutls/gnutls.h>

#include <utility>

#include "transport/quic_endpoint.h"

namespace nexar {
namespace {

// Payloads from this size on are sealed from the caller's memory: a packet's
// worth or a good part of one, where ngtcp2's copy costs; below it the
// sealer would walk packets for little.
constexpr uint64_t kMinStandIn = 16 * 1024;

size_t negotiated_keylen(ngtcp2_conn *conn) {
  return ngtcp2_crypto_aead_keylen(&ngtcp2_conn_get_crypto_ctx(conn)->aead);
}

}  // namespace

CipherFastPath::CipherFastPath(TransportStats *stats, const SendLanes *lanes, ReceiveFramer *framer)
    : cipher_(&stats->packets_fast_aead, &stats->bytes_sealed_in_place),
      lanes_(lanes),
      framer_(framer) {
  cipher_.set_placer(this);
  cipher_.set_source(this);
}

void CipherFastPath::set_callbacks(ngtcp2_callbacks *cb) {
  cb->encrypt = PacketCipher::encrypt;
  cb->decrypt = PacketCipher::decrypt;
}

int CipherFastPath::install_secrets(ngtcp2_conn *conn, ngtcp2_crypto_level level,
                                    const uint8_t *rx_secret, const uint8_t *tx_secret,
                                    size_t secretlen) {
  // Only 1-RTT keys carry bulk data; the handshake's stay on GnuTLS alone.
  const bool offer = level == NGTCP2_CRYPTO_LEVEL_APPLICATION;
  uint8_t key[64];
  if (rx_secret &&
      ngtcp2_crypto_derive_and_install_rx_key(conn, offer ? key : nullptr, nullptr, nullptr, level,
                                              rx_secret, secretlen) != 0)
    return -1;
  if (rx_secret && offer) cipher_.offer(key, negotiated_keylen(conn));
  if (tx_secret &&
      ngtcp2_crypto_derive_and_install_tx_key(conn, offer ? key : nullptr, nullptr, nullptr, level,
                                              tx_secret, secretlen) != 0)
    return -1;
  if (tx_secret && offer) cipher_.offer(key, negotiated_keylen(conn));
  gnutls_memset(key, 0, sizeof key);
  return 0;
}

int CipherFastPath::update_key(ngtcp2_conn *conn, uint8_t *rx_secret, uint8_t *tx_secret,
                               ngtcp2_crypto_aead_ctx *rx_aead_ctx, uint8_t *rx_iv,
                               ngtcp2_crypto_aead_ctx *tx_aead_ctx, uint8_t *tx_iv,
                               const uint8_t *current_rx_secret, const uint8_t *current_tx_secret,
                               size_t secretlen) {
  uint8_t rx_key[64], tx_key[64];
  if (ngtcp2_crypto_update_key(conn, rx_secret, tx_secret, rx_aead_ctx, rx_key, rx_iv, tx_aead_ctx,
                               tx_key, tx_iv, current_rx_secret, current_tx_secret, secretlen) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  cipher_.offer(rx_key, negotiated_keylen(conn));
  cipher_.offer(tx_key, negotiated_keylen(conn));
  gnutls_memset(rx_key, 0, sizeof rx_key);
  gnutls_memset(tx_key, 0, sizeof tx_key);
  return 0;
}

void CipherFastPath::choose_stand_in(SendItem *item) {
  if (item->payload_len >= kMinStandIn && PacketCipher::available()) {
    item->stand_in = true;
    item->stand_in_end = item->total();
  }
}

Placement CipherFastPath::take_placement(int64_t sid) {
  if (placement_.len > 0 && placement_.stream_id == sid) return std::exchange(placement_, {});
  return {};
}

uint8_t *CipherFastPath::place(int64_t sid, uint64_t offset, size_t len, size_t *n) {
  if (placement_.len > 0) return nullptr;
  return framer_->place(sid, offset, len, n);
}

void CipherFastPath::placed(int64_t sid, uint64_t offset, size_t n, const uint8_t *to) {
  placement_ = {sid, offset, n, to};
}

bool CipherFastPath::source(int64_t sid, uint64_t offset, size_t len, const uint8_t **from,
                            size_t *n) {
  return lanes_->locate(sid, offset, len, from, n);
}

}  // namespace nexar
