// QuicConnection: one ngtcp2 connection to one peer, with nexar's long-lived
// lane streams on top. It drives ngtcp2 (handshake, packets in and out,
// timers, close) and composes the parts that do the rest:
// - SendLanes (send_lanes.h): the messages queued per lane, written round
//   robin, referenced until the peer acknowledges them;
// - ReceiveFramer (receive_framer.h): the peer's streams parsed into frames,
//   each payload to a MessageSink chosen by the ConnectionHandler, with QUIC
//   receive credit returned as the sink consumes bytes;
// - CipherFastPath (cipher_fast_path.h): the packet cipher's fast AEAD, and
//   bulk stream data sealed from the sender's memory and opened straight
//   into its receive.
#pragma once

#include <ev.h>
#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer_pool.h"
#include "core/status.h"
#include "transport/cipher_fast_path.h"
#include "transport/codec.h"
#include "transport/connection_policy.h"
#include "transport/frame.h"
#include "transport/receive_framer.h"
#include "transport/send_lanes.h"
#include "transport/socket_address.h"
#include "transport/tls_credentials.h"

namespace nexar {

class QuicEndpoint;
class QuicConnection;

// The QUIC application error code of a CONNECTION_CLOSE that tells the peer
// it was declared failed: silent past the idle timeout here, or so decided
// by the ranks above. A peer that was only frozen reads it when it wakes.
constexpr uint64_t kDeclaredFailedCloseCode = 0x4e58464c;  // "NXFL"

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

class QuicConnection {
 public:
  static constexpr size_t kDataStreams = SendLanes::kDataStreams;
  using SendItem = nexar::SendItem;

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
  // close() for a peer that may not become a member (bad certificate, ALPN,
  // cipher, rank claim): logged at warn with its address and counted in the
  // endpoint's connections_refused.
  void refuse(const Status &why);
  // close() for a peer that broke the wire protocol (malformed or oversized
  // frame, a closed or reset stream): logged at warn with its address and
  // counted in the endpoint's protocol_violations.
  void violation(const Status &why);
  bool closed() const { return closed_; }
  // How a closed connection ended, for those who word or grade the loss.
  enum class CloseCause {
    Open,         // not closed
    Local,        // this side closed it (shut down, refused, failed a check)
    PeerClosed,   // the peer sent CONNECTION_CLOSE
    IdleTimeout,  // nothing from the peer for the idle timeout
    Error,        // a transport or TLS error here
  };
  CloseCause close_cause() const { return close_cause_; }
  // Whether the peer closed the connection with kDeclaredFailedCloseCode:
  // it (or the ranks it heard from) declared this process failed.
  bool closed_as_failed_by_peer() const { return peer_close_code_ == kDeclaredFailedCloseCode; }
  // Whether this side closed it with kDeclaredFailedCloseCode: it declared
  // the peer failed (or heard that the others did).
  bool closed_as_failed_here() const {
    return close_cause_ != CloseCause::PeerClosed && close_code_ == kDeclaredFailedCloseCode;
  }
  // The idle timeout in force: the smaller of the two sides' (QUIC takes the
  // minimum of both transport parameters).
  uint64_t idle_timeout_ns() const;
  // When the peer counts as silent past the idle timeout (UINT64_MAX: not
  // watched). ngtcp2 restarts its idle timer on the first ack-eliciting
  // packet sent after a receipt (RFC 9000, 10.1), which finds a peer that
  // froze while this side had nothing to send up to one keep-alive period
  // late; with keep-alives flowing, the last packet received is the measure.
  uint64_t silence_deadline() const;
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
  bool is_client() const { return is_client_; }
  // This side refused the peer's certificate for naming another world (its
  // cluster id; 0: no such refusal).
  uint64_t refused_other_world() const { return refused_other_world_; }
  const SocketAddress &remote() const { return remote_; }
  uint64_t queued_bytes() const { return lanes_.queued_bytes(); }
  ngtcp2_conn *raw() const { return conn_; }

 private:
  static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref);
  Status setup_tls();
  void fill_settings(ngtcp2_settings *s, ngtcp2_transport_params *p, uint64_t ts);
  void open_streams();
  void fail(const Status &why);
  // "rank R", or "the peer at ADDR" before the handshake names a rank.
  std::string peer_name() const;
  // Why the TLS handshake failed: the alert, and the certificate check's
  // verdict when it failed there.
  Status tls_failure(const SocketAddress &from) const;
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
  // GnuTLS's secret callback: installs the keys as ngtcp2_crypto_gnutls's
  // own does, and offers the 1-RTT ones to the fast path.
  static int cb_tls_secret(gnutls_session_t, gnutls_record_encryption_level_t level,
                           const void *rx_secret, const void *tx_secret, size_t secretlen);
  static int cb_stream_reset(ngtcp2_conn *, int64_t sid, uint64_t final_size, uint64_t code,
                             void *ud, void *sud);
  static void on_timer(struct ev_loop *, ev_timer *w, int);
  void fill_callbacks(ngtcp2_callbacks *cb);

  QuicEndpoint *ep_;
  ConnectionHandler *handler_;
  bool is_client_;
  uint64_t refused_other_world_ = 0;
  uint32_t expected_peer_rank_;
  SocketAddress remote_;
  ngtcp2_conn *conn_ = nullptr;
  gnutls_session_t session_ = nullptr;
  ngtcp2_crypto_conn_ref conn_ref_;
  uint64_t key_updates_ = 0;
  ngtcp2_path path_;
  ev_timer timer_;
  bool timer_armed_due_ = false;  // for TransportStats::timers_fired_due
  bool closed_ = false;
  CloseCause close_cause_ = CloseCause::Open;
  uint64_t last_rx_ns_ = 0;       // when the last packet was read
  uint64_t peer_close_code_ = 0;  // the application error code of the peer's close
  uint64_t close_code_ = 0;       // the application error code of this side's close
  bool write_queued_ = false;
  bool streams_open_ = false;
  bool identity_checked_ = false;
  bool handshake_pending_ = false;
  bool handshake_confirmed_ = false;  // no Initial can be sent any more: see datagram_size()
  std::vector<ngtcp2_cid> scids_;     // routed to us by the endpoint
  SendLanes lanes_;
  ReceiveFramer framer_;
  CipherFastPath fast_;  // after lanes_ and framer_, which it reads
};

}  // namespace nexar
