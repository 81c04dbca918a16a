// QuicConnection: one ngtcp2 connection to one peer, with nexar's long-lived
// lane streams on top.
//
// Send side: messages are queued per stream (one control stream, several data
// streams); the payload is referenced, not copied, until the peer acknowledges
// it (ngtcp2 retransmits from the same memory), unless the caller handed over
// an owned copy. Receive side: every remote stream is parsed into frames; a
// frame's payload goes to a MessageSink chosen by the ConnectionHandler. QUIC
// receive credit is returned as the sink consumes bytes, so a consumer that
// falls behind slows the sender instead of growing memory.
#pragma once

#include <ev.h>
#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/buffer_pool.h"
#include "core/status.h"
#include "transport/codec.h"
#include "transport/connection_policy.h"
#include "transport/frame.h"
#include "transport/packet_cipher.h"
#include "transport/socket_address.h"
#include "transport/tls_credentials.h"

namespace nexar {

class QuicEndpoint;
class QuicConnection;

// Receives the payload of one incoming message.
class MessageSink {
 public:
  virtual ~MessageSink() = default;
  // Takes the next len bytes. Returns how many of them can be credited back
  // to the peer now; the rest is credited later through release_credit().
  virtual size_t write(const uint8_t *data, size_t len) = 0;
  // Every payload byte has arrived (or the stream died: ok == false).
  virtual void finish(bool ok) = 0;
  // Where the next len bytes would be copied unchanged, if write() would
  // copy them into memory that is there already (a posted receive): the
  // packet cipher may open them there instead. Null: give them to write().
  virtual uint8_t *place(size_t len) {
    (void)len;
    return nullptr;
  }
  // The next len bytes were opened at `to`, where place(len) pointed when
  // their packet arrived: takes them, setting *credit as write() returns it,
  // unless they no longer belong there (false: they are lost).
  virtual bool placed(const uint8_t *to, size_t len, size_t *credit) {
    (void)to, (void)len, (void)credit;
    return false;
  }
};

// Told when a queued message has been acknowledged, or can never be.
class SendListener {
 public:
  virtual ~SendListener() = default;
  virtual void on_send_done(const Status &s) = 0;
};

// Events from a connection to its owner (the engine).
class ConnectionHandler {
 public:
  virtual ~ConnectionHandler() = default;
  virtual void on_handshake_done(QuicConnection *c, const NodeIdentity &peer) = 0;
  virtual void on_control(QuicConnection *c, std::span<const uint8_t> message) = 0;
  // Chooses where the payload of a P2P or collective frame goes.
  virtual MessageSink *on_message(QuicConnection *c, int64_t stream_id,
                                  const wire::FrameHeader &h) = 0;
  virtual void on_closed(QuicConnection *c, const Status &why) = 0;
};

struct OutgoingMessage {
  wire::FrameHeader header;
  const uint8_t *payload = nullptr;  // referenced until acknowledged, unless owned
  PooledBuf owned;                   // when set, payload points into it
  SendListener *listener = nullptr;  // may be null (fire and forget)
  // Relay frames only: the prefix sent between the header and the payload
  // (header.length counts it).
  uint8_t prefix[wire::kRelayPrefixSize] = {};
};

class QuicConnection : private PacketCipher::Placer, private PacketCipher::Source {
 public:
  static constexpr size_t kDataStreams = 4;

  QuicConnection(QuicEndpoint *ep, ConnectionHandler *handler, bool is_client,
                 uint32_t expected_peer_rank);
  ~QuicConnection();
  QuicConnection(const QuicConnection &) = delete;
  QuicConnection &operator=(const QuicConnection &) = delete;

  Status init_client(const SocketAddress &remote);
  // retried_odcid: the client's first destination connection ID, when hd is
  // the Initial that answers our Retry (hd.token is then a valid Retry token).
  Status init_server(const SocketAddress &remote, const ngtcp2_pkt_hd &hd,
                     const ngtcp2_cid *retried_odcid);
  // A server connection counted by QuicEndpoint as handshaking.
  bool handshake_pending() const { return handshake_pending_; }
  void set_handshake_pending(bool pending) { handshake_pending_ = pending; }

  // Feeds one QUIC datagram. Returns false once the connection is dead.
  bool read_packet(const SocketAddress &from, const uint8_t *data, size_t len, uint64_t ts);
  // Writes as many packets as congestion and flow control allow. Returns true
  // if it wants another call in the same flush: it stopped at its burst
  // limit, or it handled a timer that came due while writing.
  bool write();
  void on_expiry();

  // Queues a message on the control stream or on the data stream for `key`
  // (messages with the same key stay in order). RPC requests and responses
  // (by their frame kind) go on the RPC lanes' own streams instead, relay
  // frames on the relay streams (by key). The returned handle lets the
  // caller cancel it: see cancel().
  struct SendItem;
  SendItem *send(OutgoingMessage msg, bool control, uint64_t key);
  // The message will not be waited for: if nothing of it was written yet it
  // is dropped (returns false); otherwise its unwritten rest is sent as zeros
  // (the stream's framing must stay intact) and `replacement` is told when
  // ngtcp2 no longer reads the caller's memory (returns true).
  bool cancel(SendItem *item, SendListener *replacement);
  // Encodes a control message and queues it on the control stream.
  void send_control(const wire::ControlMessage &m, SendListener *listener = nullptr);
  // Credit for bytes a sink kept and has now consumed.
  void release_credit(int64_t stream_id, size_t bytes);

  // Sends CONNECTION_CLOSE (once) and fails everything queued.
  void close(uint64_t app_error, const Status &why);
  bool closed() const { return closed_; }
  // Whether the connection is on its endpoint's list of connections to write
  // before the loop sleeps (QuicEndpoint::mark_dirty).
  bool write_queued() const { return write_queued_; }
  void set_write_queued(bool queued) { write_queued_ = queued; }
  // Starts a QUIC key update (RFC 9001 section 6) now; ngtcp2 also starts one
  // by itself before a key reaches its AEAD limit. Loop thread.
  Status initiate_key_update();
  // Key generations derived by key update so far (ngtcp2 derives each one
  // ahead of its use: the first right after the handshake).
  uint64_t key_updates() const { return key_updates_; }
  // Sent data the peer has not acknowledged yet (or not even written).
  bool has_unacked() const;
  bool ready() const { return streams_open_; }

  // Keying material exported from this connection's TLS session (RFC 5705 /
  // RFC 8446 section 7.5): both ends derive the same bytes, nobody else can.
  Status export_keying_material(std::string_view label, uint8_t *out, size_t len) const;

  uint32_t expected_peer_rank() const { return expected_peer_rank_; }
  const SocketAddress &remote() const { return remote_; }
  uint64_t queued_bytes() const { return queued_bytes_; }
  ngtcp2_conn *raw() const { return conn_; }

  struct SendItem {
    uint8_t header[wire::kFrameHeaderSize + wire::kRelayPrefixSize];
    size_t header_len = wire::kFrameHeaderSize;
    const uint8_t *payload = nullptr;
    uint64_t payload_len = 0;
    PooledBuf owned;
    SendListener *listener = nullptr;
    uint64_t end_offset = 0;  // stream offset just past this item
    uint64_t written = 0;     // bytes of header + payload given to ngtcp2
    bool zero_rest = false;   // cancelled mid-way: send zeros for the rest
    // The payload went to ngtcp2 as stand-in bytes up to stand_in_end (an
    // offset within the item) and is sealed from `payload` (PacketCipher::Source).
    bool stand_in = false;
    uint64_t stand_in_end = 0;
    uint64_t total() const { return header_len + payload_len; }
  };

 private:
  struct SendStream {
    int64_t id = -1;
    uint8_t lane_byte = 0;
    std::deque<std::unique_ptr<SendItem>> items;  // not yet acknowledged, in order
    size_t next = 0;                              // first item not fully written
    uint64_t offset = 0;                          // next stream offset to assign
    bool blocked = false;
    bool writable() const { return id >= 0 && !blocked && next < items.size(); }
  };
  struct RecvStream {
    bool have_lane = false;
    uint8_t lane = 0;
    uint8_t header[wire::kFrameHeaderSize + wire::kRelayPrefixSize];
    size_t header_fill = 0;
    bool in_payload = false;
    wire::FrameHeader frame;
    uint64_t remaining = 0;
    MessageSink *sink = nullptr;
    std::vector<uint8_t> control;
    uint64_t next_offset = 0;  // stream offset of the next byte ngtcp2 delivers
  };
  // Stream data the packet being read had opened straight into its receive
  // (PacketCipher::Placer); taken by on_stream_data.
  struct Placement {
    int64_t stream_id = -1;
    uint64_t offset = 0;
    size_t len = 0;
    const uint8_t *to = nullptr;
  };

  static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref);
  Status setup_tls();
  void fill_settings(ngtcp2_settings *s, ngtcp2_transport_params *p, uint64_t ts);
  void open_streams();
  SendItem *enqueue(SendStream &st, std::unique_ptr<SendItem> item);
  size_t build_vecs(SendStream &st, ngtcp2_vec *vecs, size_t max);
  void advance(SendStream &st, size_t n);
  void on_acked(int64_t stream_id, uint64_t offset, uint64_t len);
  size_t on_stream_data(int64_t stream_id, uint64_t offset, const uint8_t *data, size_t len);
  uint8_t *place(int64_t stream_id, uint64_t offset, size_t len, size_t *n) override;
  void placed(int64_t stream_id, uint64_t offset, size_t n, const uint8_t *to) override;
  bool standing_in() const override { return stand_in_items_ > 0; }
  bool source(int64_t stream_id, uint64_t offset, size_t len, const uint8_t **from,
              size_t *n) override;
  // Every SendItem leaves its stream through here (acknowledged, dropped or failed).
  void forget_item(const SendItem &it);
  SendStream *pick_stream();
  SendStream *stream_by_id(int64_t stream_id);
  void fail(const Status &why);
  // Ends the connection without a word to the peer (NGTCP2_ERR_DROP_CONN).
  void drop(const Status &why);
  // What close() and drop() share: fails everything queued, tells the handler.
  void end(const Status &why);
  void arm_timer();
  // The datagram size to write: the path's, or a link's until the handshake
  // is confirmed.
  size_t datagram_size() const;
  // ngtcp2_conn_handle_expiry and its failures; false once the connection failed.
  bool handle_expiry(uint64_t now);
  void finish_items(SendStream &st, const Status &s);

  // ngtcp2 callbacks
  static int cb_handshake_completed(ngtcp2_conn *, void *ud);
  static int cb_handshake_confirmed(ngtcp2_conn *, void *ud);
  static int cb_recv_stream_data(ngtcp2_conn *, uint32_t flags, int64_t sid, uint64_t off,
                                 const uint8_t *data, size_t len, void *ud, void *sud);
  static int cb_acked_stream_data_offset(ngtcp2_conn *, int64_t sid, uint64_t off, uint64_t len,
                                         void *ud, void *sud);
  static int cb_extend_max_stream_data(ngtcp2_conn *, int64_t sid, uint64_t max, void *ud,
                                       void *sud);
  static int cb_extend_max_local_streams_uni(ngtcp2_conn *, uint64_t max, void *ud);
  static int cb_get_new_connection_id(ngtcp2_conn *, ngtcp2_cid *cid, uint8_t *token, size_t cidlen,
                                      void *ud);
  static int cb_remove_connection_id(ngtcp2_conn *, const ngtcp2_cid *cid, void *ud);
  static void cb_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx);
  static int cb_update_key(ngtcp2_conn *, uint8_t *rx_secret, uint8_t *tx_secret,
                           ngtcp2_crypto_aead_ctx *rx_aead_ctx, uint8_t *rx_iv,
                           ngtcp2_crypto_aead_ctx *tx_aead_ctx, uint8_t *tx_iv,
                           const uint8_t *current_rx_secret, const uint8_t *current_tx_secret,
                           size_t secretlen, void *ud);
  static void cb_delete_crypto_aead_ctx(ngtcp2_conn *, ngtcp2_crypto_aead_ctx *ctx, void *ud);
  // GnuTLS's secret callback: what ngtcp2_crypto_gnutls installs, plus
  // offering the 1-RTT keys to cipher_.
  static int cb_tls_secret(gnutls_session_t, gnutls_record_encryption_level_t level,
                           const void *rx_secret, const void *tx_secret, size_t secretlen);
  static int cb_stream_reset(ngtcp2_conn *, int64_t sid, uint64_t final_size, uint64_t code,
                             void *ud, void *sud);
  static void on_timer(struct ev_loop *, ev_timer *w, int);
  void fill_callbacks(ngtcp2_callbacks *cb);

  QuicEndpoint *ep_;
  ConnectionHandler *handler_;
  bool is_client_;
  uint32_t expected_peer_rank_;
  SocketAddress remote_;
  ngtcp2_conn *conn_ = nullptr;
  gnutls_session_t session_ = nullptr;
  ngtcp2_crypto_conn_ref conn_ref_;
  uint64_t key_updates_ = 0;
  PacketCipher cipher_;  // 1-RTT packet protection on the fast AEAD when it has the key
  ngtcp2_path path_;
  ev_timer timer_;
  bool timer_armed_due_ = false;  // for TransportStats::timers_fired_due
  bool closed_ = false;
  bool write_queued_ = false;
  bool streams_open_ = false;
  bool identity_checked_ = false;
  bool handshake_pending_ = false;
  bool handshake_confirmed_ = false;  // no Initial can be sent any more: see datagram_size()
  std::vector<ngtcp2_cid> scids_;     // routed to us by the endpoint
  // The send streams, one lane each: control, then the ones pick_stream()
  // serves round robin: data (by key), RPC requests, RPC responses, relay
  // (keyed by origin and destination, so each flow keeps its order).
  static constexpr size_t kRelayStreams = 2;
  static constexpr size_t kControl = 0, kData = 1, kRpcRequest = kData + kDataStreams,
                          kRpcResponse = kRpcRequest + 1, kRelay = kRpcResponse + 1,
                          kSendStreams = kRelay + kRelayStreams;
  SendStream streams_[kSendStreams];
  size_t rr_ = 0;  // round-robin position over streams_[kData..]
  std::unordered_map<int64_t, RecvStream> recv_;
  Placement placement_;
  uint64_t queued_bytes_ = 0;
  size_t stand_in_items_ = 0;  // queued items with stand_in set
};

}  // namespace nexar
