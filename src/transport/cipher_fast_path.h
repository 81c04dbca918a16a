// One connection's side of the packet cipher's fast path (packet_cipher.h):
// the 1-RTT keys the connection derives are offered to the fast AEAD, bulk
// payloads go to ngtcp2 as stand-in bytes and are sealed straight from the
// sender's memory, and a packet's stream data is opened straight into the
// receive that takes it. The connection (the ngtcp2 driver) calls it at a
// handful of points; where the fast AEAD is not available, no key is
// adopted, nothing stands in and nothing is placed.
#pragma once

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <cstddef>
#include <cstdint>

#include "transport/packet_cipher.h"
#include "transport/receive_framer.h"
#include "transport/send_lanes.h"

namespace nexar {

struct TransportStats;

class CipherFastPath final : private PacketCipher::Placer, private PacketCipher::Source {
 public:
  // stats (the endpoint's) count the packets and bytes of the fast path;
  // lanes and framer are the connection's, which finds stream data in them.
  CipherFastPath(TransportStats *stats, const SendLanes *lanes, ReceiveFramer *framer);

  // Sets ngtcp2's AEAD callbacks, which take the fast path while a scope()
  // of this connection lives.
  static void set_callbacks(ngtcp2_callbacks *cb);
  // Around every ngtcp2 call that may seal or open this connection's packets.
  PacketCipher::Scope scope() { return PacketCipher::Scope(&cipher_); }
  // Why the last packet could not be sealed (ngtcp2 then returned
  // NGTCP2_ERR_CALLBACK_FAILURE), or null.
  const char *seal_error() const { return cipher_.seal_error(); }

  // Derives and installs ngtcp2's keys for level from the TLS secrets (what
  // ngtcp2_crypto_gnutls's own secret callback does), offering the 1-RTT
  // ones. 0, or -1 on failure.
  int install_secrets(ngtcp2_conn *conn, ngtcp2_crypto_level level, const uint8_t *rx_secret,
                      const uint8_t *tx_secret, size_t secretlen);
  // ngtcp2_callbacks.update_key: ngtcp2_crypto_update_key, offering both new keys.
  int update_key(ngtcp2_conn *conn, uint8_t *rx_secret, uint8_t *tx_secret,
                 ngtcp2_crypto_aead_ctx *rx_aead_ctx, uint8_t *rx_iv,
                 ngtcp2_crypto_aead_ctx *tx_aead_ctx, uint8_t *tx_iv,
                 const uint8_t *current_rx_secret, const uint8_t *current_tx_secret,
                 size_t secretlen);
  // ngtcp2 is freeing this context.
  void forget(const ngtcp2_crypto_aead_ctx *ctx) { cipher_.forget(ctx); }

  // Marks item's payload to go to ngtcp2 as stand-in bytes, if it is large
  // enough for sealing it from the sender's memory to pay.
  static void choose_stand_in(SendItem *item);
  // What the packet being read opened into stream stream_id's receive (taken
  // once; empty if nothing).
  Placement take_placement(int64_t stream_id);
  // After each packet read: a placement not taken is void (ngtcp2 dropped
  // its frame).
  void end_packet() { placement_ = {}; }

 private:
  uint8_t *place(int64_t stream_id, uint64_t offset, size_t len, size_t *n) override;
  void placed(int64_t stream_id, uint64_t offset, size_t n, const uint8_t *to) override;
  bool standing_in() const override { return lanes_->standing_in(); }
  bool source(int64_t stream_id, uint64_t offset, size_t len, const uint8_t **from,
              size_t *n) override;

  PacketCipher cipher_;  // 1-RTT packet protection on the fast AEAD when it has the key
  const SendLanes *lanes_;
  ReceiveFramer *framer_;
  Placement placement_;
};

}  // namespace nexar
