// QuicEndpoint: the engine's one UDP socket and every QUIC connection on it,
// client and server roles alike, demultiplexed by destination connection ID.
#pragma once

#include <ev.h>
#include <ngtcp2/ngtcp2.h>

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/event_loop.h"
#include "transport/congestion_control.h"
#include "transport/quic_connection.h"
#include "transport/tls_credentials.h"
#include "transport/udp_socket.h"

namespace nexar {

struct TransportStats {
  uint64_t bytes_sent = 0, bytes_received = 0, messages_sent = 0, messages_received = 0;
  uint64_t streams_opened = 0, streams_accepted = 0;
  uint64_t packets_fast_aead = 0;      // sealed or opened by PacketCipher's fast path
  uint64_t bytes_opened_in_place = 0;  // payload opened straight into its receive
  uint64_t bytes_sealed_in_place = 0;  // payload sealed straight from the sender's memory
  // Loop costs (internal; tests hold them down): recvmmsg calls, those that
  // found nothing, and connection timers that fired having been armed
  // already due (each an extra poll and loop pass; one re-armed before the
  // loop polls again cost nothing and is not counted).
  uint64_t socket_reads = 0, empty_socket_reads = 0, timers_fired_due = 0;
  // Address validation: Retry packets sent, and client Initials dropped
  // because too many handshakes were in progress (both in the log lines).
  uint64_t retries_sent = 0, initials_dropped = 0;
  // Hostile or broken peers (QuicConnection::refuse and ::violation, each
  // with a warn line): connections refused before they carried data, and
  // connections closed because the peer broke the wire protocol.
  uint64_t connections_refused = 0, protocol_violations = 0;
};

// Address validation (RFC 9000 section 8.1). A server connection costs a TLS
// session and ngtcp2 state for as long as its handshake may last, and a
// client Initial can come from a forged address. Past kRetryAbove server
// handshakes in progress, an Initial without a valid Retry token is answered
// with a stateless Retry: only a client that receives it at its address can
// come back, one round trip later. Past kMaxPendingHandshakes, Initials are
// dropped (a client retransmits them) so that even validated addresses cannot
// grow the endpoint without bound.
class QuicEndpoint {
 public:
  static constexpr size_t kSecretLen = 32;
  static constexpr size_t kRetryAbove = 64;
  static constexpr size_t kMaxPendingHandshakes = 1024;
  static constexpr uint64_t kRetryTokenLifetimeMs = 10000;

  // handler receives every connection's events, server connections' too
  // (any valid client Initial may create one, within the bounds above).
  QuicEndpoint(EventLoop *loop, ConnectionHandler *handler, uint64_t cluster_id,
               std::shared_ptr<TlsCredentials> creds, uint64_t idle_timeout_ms,
               uint64_t connect_timeout_ms, uint64_t keep_alive_ms,
               ConnectionPolicy policy = ConnectionPolicy::mesh());
  ~QuicEndpoint();

  // Binds the socket and starts reading (loop thread).
  Status open(const SocketAddress &bind_addr);
  // The same with a socket the caller already bound (takes ownership of fd).
  Status adopt(int fd);
  const SocketAddress &local() const { return socket_.local(); }

  // Starts a client connection to the peer expected to be `peer_rank`.
  Status connect(const SocketAddress &remote, uint32_t peer_rank, QuicConnection **out);
  // Frees a connection once the current callback stack has unwound.
  void retire(QuicConnection *c);
  // Closes every connection (CONNECTION_CLOSE) and stops reading.
  void shutdown(const Status &why);

  // --- for QuicConnection --------------------------------------------------
  EventLoop *loop() const { return loop_; }
  TlsCredentials *credentials() const { return creds_.get(); }
  const ConnectionPolicy &policy() const { return policy_; }
  uint64_t cluster_id() const { return cluster_id_; }
  const uint8_t *secret() const { return secret_; }
  uint64_t idle_timeout_ns() const { return idle_timeout_ns_; }
  uint64_t connect_timeout_ns() const { return connect_timeout_ns_; }
  uint64_t keep_alive_ns() const { return keep_alive_ns_; }
  size_t max_udp_payload(const SocketAddress &remote) const;
  // A payload that fits a 1500-byte MTU without fragmenting.
  static size_t link_udp_payload(const SocketAddress &remote);
  // By the socket's receive buffer (congestion_control.h).
  ngtcp2_cc_algo congestion_control() const {
    return congestion_control_for(socket_.receive_buffer());
  }
  void route(const ngtcp2_cid &cid, QuicConnection *c);
  void unroute(const ngtcp2_cid &cid);
  // c's handshake is over (done, or the connection is retired): it no longer
  // counts against kRetryAbove and kMaxPendingHandshakes.
  void end_pending_handshake(QuicConnection *c);
  // Queues c to be written before the loop sleeps (once, however often it is
  // marked).
  void mark_dirty(QuicConnection *c);
  uint8_t *tx_buffer() { return tx_.data(); }
  void transmit(const SocketAddress &to, const uint8_t *buf, const size_t *sizes, size_t n);
  TransportStats &stats() { return stats_; }
  size_t connections() const { return conns_.size(); }
  bool has_unacked() const {
    for (const auto &c : conns_)
      if (c->has_unacked()) return true;
    return false;
  }

 private:
  // After the socket is open: warns about a small buffer, starts reading.
  Status started(Status opened);
  void read_socket();
  void handle_datagram(const SocketAddress &from, const uint8_t *data, size_t len, uint64_t ts);
  // A client Initial nothing routes: admits it as a new server connection,
  // or answers it statelessly (Retry, CONNECTION_CLOSE), or drops it.
  void accept_initial(const SocketAddress &from, const uint8_t *data, size_t len, uint64_t ts);
  void send_retry(const SocketAddress &to, const ngtcp2_pkt_hd &hd, uint64_t ts);
  void refuse_token(const SocketAddress &to, const ngtcp2_pkt_hd &hd);
  void send_stateless(const SocketAddress &to, const uint8_t *packet, size_t size);
  bool flush();  // before-sleep hook: write dirty connections
  void flush_pending();

  EventLoop *loop_;
  ConnectionHandler *handler_;
  uint64_t cluster_id_;
  std::shared_ptr<TlsCredentials> creds_;
  uint64_t idle_timeout_ns_;
  uint64_t connect_timeout_ns_;
  uint64_t keep_alive_ns_;
  ConnectionPolicy policy_;
  uint8_t secret_[kSecretLen];
  UdpSocket socket_;
  bool reading_ = false;
  // Looked up by std::string_view, so a received datagram does not allocate
  // its connection ID as a std::string (IDs are longer than the SSO buffer).
  struct CidHash {
    using is_transparent = void;
    size_t operator()(std::string_view cid) const { return std::hash<std::string_view>{}(cid); }
  };
  std::unordered_map<std::string, QuicConnection *, CidHash, std::equal_to<>> routes_;
  std::vector<std::unique_ptr<QuicConnection>> conns_;
  std::vector<std::unique_ptr<QuicConnection>> retired_;
  // Connections to write before the loop sleeps, in the order they were
  // marked; flush() works through `flushing_` (kept to reuse its storage: a
  // hash set here allocated on every packet).
  std::vector<QuicConnection *> dirty_;
  std::vector<QuicConnection *> flushing_;
  std::vector<uint8_t> tx_;
  std::vector<UdpSocket::Datagram> rx_;
  // Packets ngtcp2 produced while the socket buffer was full.
  struct Pending {
    SocketAddress to;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> pending_;
  bool shut_down_ = false;
  // Server connections whose handshake is in progress. Retries and drops are
  // logged at most every 10 s each: a flood must not flood the log too.
  size_t pending_handshakes_ = 0;
  log::Throttle retry_log_{10000 * kNsPerMs}, drop_log_{10000 * kNsPerMs};
  TransportStats stats_;
};

}  // namespace nexar
