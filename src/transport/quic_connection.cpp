#include "transport/quic_connection.h"

#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/log.h"
#include "transport/quic_endpoint.h"

namespace nexar {
namespace {

constexpr size_t kScidLen = 16;
constexpr uint64_t kMaxStreamsUni = 16;
constexpr size_t kMaxBurstPackets = 64;
// What one write seals before handing it to the socket: two 64 KB loopback
// datagrams, or 64 wire-sized ones (kMaxBurstPackets). Small bursts overlap
// this side sealing the next packet with the peer opening the last one;
// with BBRv2's 650 KB send quantum, bursts of two were best or level on
// every 4 and 64 MiB row measured (docs/performance.md, "Bursts").
constexpr size_t kMaxBurstBytes = 128 << 10;

void ngtcp2_log(void *, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  LOG_TRACE("ngtcp2: %s", buf);
}

Status from_ngtcp2(const char *what, int rc) {
  return error(NEXAR_ERR_PROTOCOL, format("%s: %s", what, ngtcp2_strerror(rc)));
}

}  // namespace

QuicConnection::QuicConnection(QuicEndpoint *ep, ConnectionHandler *handler, bool is_client,
                               uint32_t expected_peer_rank)
    : ep_(ep),
      handler_(handler),
      is_client_(is_client),
      expected_peer_rank_(expected_peer_rank),
      framer_(this, handler, &ep->stats()),
      fast_(&ep->stats(), &lanes_, &framer_) {
  conn_ref_.get_conn = &QuicConnection::get_conn;
  conn_ref_.user_data = this;
  ev_init(&timer_, &QuicConnection::on_timer);
  timer_.data = this;
}

QuicConnection::~QuicConnection() {
  ep_->loop()->stop_timer(&timer_);
  for (auto &cid : scids_)
    ep_->unroute(cid);
  lanes_.fail_all(Status(NEXAR_ERR_CLOSED, "connection destroyed"));
  framer_.fail_sinks();
  if (conn_) ngtcp2_conn_del(conn_);
  if (session_) gnutls_deinit(session_);
}

ngtcp2_conn *QuicConnection::get_conn(ngtcp2_crypto_conn_ref *ref) {
  return static_cast<QuicConnection *>(ref->user_data)->conn_;
}

void QuicConnection::fill_callbacks(ngtcp2_callbacks *cb) {
  memset(cb, 0, sizeof *cb);
  cb->client_initial = ngtcp2_crypto_client_initial_cb;
  cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
  cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  CipherFastPath::set_callbacks(cb);
  cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
  cb->update_key = cb_update_key;
  cb->delete_crypto_aead_ctx = cb_delete_crypto_aead_ctx;
  cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb->handshake_completed = cb_handshake_completed;
  cb->handshake_confirmed = cb_handshake_confirmed;
  cb->recv_stream_data = cb_recv_stream_data;
  cb->acked_stream_data_offset = cb_acked_stream_data_offset;
  cb->extend_max_stream_data = cb_extend_max_stream_data;
  cb->extend_max_local_streams_uni = cb_extend_max_local_streams_uni;
  cb->get_new_connection_id = cb_get_new_connection_id;
  cb->remove_connection_id = cb_remove_connection_id;
  cb->rand = cb_rand;
  cb->stream_reset = cb_stream_reset;
  if (!is_client_) {
    cb->client_initial = nullptr;
    cb->recv_retry = nullptr;
  } else {
    cb->recv_client_initial = nullptr;
  }
}

void QuicConnection::fill_settings(ngtcp2_settings *s, ngtcp2_transport_params *p, uint64_t ts) {
  ngtcp2_settings_default(s);
  s->initial_ts = ts;
  s->initial_rtt = NGTCP2_MILLISECONDS;  // a cluster, not the internet (pitfall 2)
  s->cc_algo = ep_->congestion_control();
  s->max_tx_udp_payload_size = ep_->max_udp_payload(remote_);
  s->no_tx_udp_payload_size_shaping = 1;
  const ConnectionPolicy &policy = ep_->policy();
  s->max_window = policy.conn_window;
  s->max_stream_window = policy.stream_window;
  s->handshake_timeout = ep_->connect_timeout_ns();
  if (log::enabled(NEXAR_LOG_TRACE)) s->log_printf = ngtcp2_log;
  ngtcp2_transport_params_default(p);
  // ngtcp2 defaults every limit to zero (pitfall 3): set each one.
  p->initial_max_data = policy.conn_window;
  p->initial_max_stream_data_bidi_local = 0;
  p->initial_max_stream_data_bidi_remote = 0;
  p->initial_max_stream_data_uni = policy.stream_window;
  p->initial_max_streams_bidi = 0;
  p->initial_max_streams_uni = kMaxStreamsUni;
  p->max_idle_timeout = ep_->idle_timeout_ns();
  p->max_ack_delay = NGTCP2_MILLISECONDS;
  p->active_connection_id_limit = 4;
  p->max_udp_payload_size = 65527;
  p->disable_active_migration = 1;
}

Status QuicConnection::setup_tls() {
  int rc = gnutls_init(&session_, is_client_ ? GNUTLS_CLIENT
                                             : GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET |
                                                   GNUTLS_NO_END_OF_EARLY_DATA);
  if (rc < 0) return error(NEXAR_ERR_TLS, format("gnutls_init: %s", gnutls_strerror(rc)));
  rc = is_client_ ? ngtcp2_crypto_gnutls_configure_client_session(session_)
                  : ngtcp2_crypto_gnutls_configure_server_session(session_);
  if (rc != 0) return error(NEXAR_ERR_TLS, "ngtcp2_crypto_gnutls_configure_session failed");
  gnutls_handshake_set_secret_function(session_, &QuicConnection::cb_tls_secret);
  gnutls_priority_t priority;
  if (Status st = tls_priority(&priority); !st) return st;
  if ((rc = gnutls_priority_set(session_, priority)) < 0)
    return error(NEXAR_ERR_TLS, format("gnutls_priority_set: %s", gnutls_strerror(rc)));
  if ((rc = gnutls_credentials_set(session_, GNUTLS_CRD_CERTIFICATE, ep_->credentials()->get())) <
      0)
    return error(NEXAR_ERR_TLS, format("gnutls_credentials_set: %s", gnutls_strerror(rc)));
  const ConnectionPolicy &policy = ep_->policy();
  if (policy.mutual) {
    // Mutual TLS: both sides present a CA-signed certificate and verify the
    // other's chain; names are checked by peer_identity() after the handshake.
    if (!is_client_) gnutls_certificate_server_set_request(session_, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(session_, nullptr, 0);
  }
  const gnutls_datum_t alpn = {(unsigned char *)policy.alpn,
                               static_cast<unsigned>(strlen(policy.alpn))};
  if ((rc = gnutls_alpn_set_protocols(session_, &alpn, 1, GNUTLS_ALPN_MANDATORY)) < 0)
    return error(NEXAR_ERR_TLS, format("gnutls_alpn_set_protocols: %s", gnutls_strerror(rc)));
  if (is_client_) gnutls_server_name_set(session_, GNUTLS_NAME_DNS, "nexar", 5);
  gnutls_session_set_ptr(session_, &conn_ref_);  // ngtcp2_crypto expects the conn_ref (pitfall 6)
  ngtcp2_conn_set_tls_native_handle(conn_, session_);
  return {};
}

Status QuicConnection::init_client(const SocketAddress &remote) {
  remote_ = remote;
  ngtcp2_cid dcid, scid;
  dcid.datalen = kScidLen;
  scid.datalen = kScidLen;
  gnutls_rnd(GNUTLS_RND_NONCE, dcid.data, kScidLen);
  gnutls_rnd(GNUTLS_RND_NONCE, scid.data, kScidLen);
  path_.local = {const_cast<sockaddr *>(ep_->local().sa()), ep_->local().len};
  path_.remote = {const_cast<sockaddr *>(remote_.sa()), remote_.len};
  path_.user_data = nullptr;
  ngtcp2_callbacks cb;
  fill_callbacks(&cb);
  ngtcp2_settings s;
  ngtcp2_transport_params p;
  fill_settings(&s, &p, now_ns());
  int rc = ngtcp2_conn_client_new(&conn_, &dcid, &scid, &path_, NGTCP2_PROTO_VER_V1, &cb, &s, &p,
                                  nullptr, this);
  if (rc != 0) return from_ngtcp2("ngtcp2_conn_client_new", rc);
  // Keep-alive PINGs every heartbeat interval: a quiet but healthy peer is
  // never mistaken for a dead one, and a dead one is found by the idle timeout.
  ngtcp2_conn_set_keep_alive_timeout(conn_, ep_->keep_alive_ns());
  scids_.push_back(scid);
  ep_->route(scid, this);
  Status st = setup_tls();
  if (!st) return st;
  ep_->mark_dirty(this);
  return {};
}

Status QuicConnection::init_server(const SocketAddress &remote, const ngtcp2_pkt_hd &hd,
                                   const ngtcp2_cid *retried_odcid) {
  remote_ = remote;
  ngtcp2_cid scid;
  scid.datalen = kScidLen;
  gnutls_rnd(GNUTLS_RND_NONCE, scid.data, kScidLen);
  path_.local = {const_cast<sockaddr *>(ep_->local().sa()), ep_->local().len};
  path_.remote = {const_cast<sockaddr *>(remote_.sa()), remote_.len};
  path_.user_data = nullptr;
  ngtcp2_callbacks cb;
  fill_callbacks(&cb);
  ngtcp2_settings s;
  ngtcp2_transport_params p;
  fill_settings(&s, &p, now_ns());
  p.original_dcid = retried_odcid ? *retried_odcid : hd.dcid;  // mandatory for a server
  if (retried_odcid) {
    // The client proved its address with our Retry token: the transport
    // parameters must name both the DCID it first used and the Retry's
    // source CID (the DCID of this Initial), or the client refuses them.
    p.retry_scid = hd.dcid;
    p.retry_scid_present = 1;
    s.token = hd.token;
  }
  p.stateless_reset_token_present = 1;
  ngtcp2_crypto_generate_stateless_reset_token(p.stateless_reset_token, ep_->secret(),
                                               QuicEndpoint::kSecretLen, &scid);
  int rc = ngtcp2_conn_server_new(&conn_, &hd.scid, &scid, &path_, hd.version, &cb, &s, &p, nullptr,
                                  this);
  if (rc != 0) return from_ngtcp2("ngtcp2_conn_server_new", rc);
  ngtcp2_conn_set_keep_alive_timeout(conn_, ep_->keep_alive_ns());
  // Retransmitted client Initials still carry this Initial's DCID (the
  // client's original one, or our Retry's source CID): route both.
  scids_.push_back(scid);
  scids_.push_back(hd.dcid);
  ep_->route(scid, this);
  ep_->route(hd.dcid, this);
  return setup_tls();
}

// ---- callbacks ----------------------------------------------------------------

int QuicConnection::cb_handshake_confirmed(ngtcp2_conn *, void *ud) {
  static_cast<QuicConnection *>(ud)->handshake_confirmed_ = true;
  return 0;
}

int QuicConnection::cb_handshake_completed(ngtcp2_conn *, void *ud) {
  auto *self = static_cast<QuicConnection *>(ud);
  self->ep_->end_pending_handshake(self);
  // A server's handshake is confirmed when it completes (RFC 9001 section
  // 4.1.2); ngtcp2 tells only clients.
  if (!self->is_client_) self->handshake_confirmed_ = true;
  if (!self->ep_->policy().mutual) {
    // A join connection: the handler authenticates the peer (cluster token).
    self->identity_checked_ = true;
    self->open_streams();
    self->handler_->on_handshake_done(self, NodeIdentity{});
    return 0;
  }
  NodeIdentity peer;
  Status s = peer_identity(self->session_, &peer);
  if (s && peer.cluster_id != self->ep_->cluster_id()) {
    self->refused_other_world_ = peer.cluster_id;
    s = error(NEXAR_ERR_AUTH, format("peer certificate belongs to another cluster (%016llx)",
                                     static_cast<unsigned long long>(peer.cluster_id)));
  }
  if (s && self->is_client_ && peer.rank != self->expected_peer_rank_)
    s = error(NEXAR_ERR_AUTH,
              format("peer at %s presented a certificate for rank %u, expected %u",
                     self->remote_.to_string().c_str(), peer.rank, self->expected_peer_rank_));
  if (!s) {
    self->refuse(s);
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  if (!self->is_client_) self->expected_peer_rank_ = peer.rank;
  self->identity_checked_ = true;
  self->open_streams();
  self->handler_->on_handshake_done(self, peer);
  return 0;
}

int QuicConnection::cb_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t sid,
                                        uint64_t offset, const uint8_t *data, size_t len, void *ud,
                                        void *) {
  auto *self = static_cast<QuicConnection *>(ud);
  if (self->closed_) return 0;
  if (flags & NGTCP2_STREAM_DATA_FLAG_FIN) {
    // nexar's streams live as long as the connection. A peer that finishes
    // them would have ngtcp2 grant it new ones, each another entry here,
    // without bound.
    self->violation(error(
        NEXAR_ERR_PROTOCOL,
        format("%s finished stream %lld", self->peer_name().c_str(), static_cast<long long>(sid))));
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  Status failure;
  size_t credit =
      self->framer_.on_data(sid, offset, data, len, self->fast_.take_placement(sid), &failure);
  if (!failure) {
    if (failure.code == NEXAR_ERR_PROTOCOL)
      self->violation(failure);
    else
      self->fail(failure);
  }
  if (self->closed_) return NGTCP2_ERR_CALLBACK_FAILURE;
  if (credit > 0) {
    ngtcp2_conn_extend_max_stream_offset(conn, sid, credit);
    ngtcp2_conn_extend_max_offset(conn, credit);
  }
  return 0;
}

int QuicConnection::cb_acked_stream_data_offset(ngtcp2_conn *, int64_t sid, uint64_t off,
                                                uint64_t len, void *ud, void *) {
  static_cast<QuicConnection *>(ud)->lanes_.on_acked(sid, off, len);
  return 0;
}

int QuicConnection::cb_extend_max_stream_data(ngtcp2_conn *, int64_t sid, uint64_t, void *ud,
                                              void *) {
  auto *self = static_cast<QuicConnection *>(ud);
  self->lanes_.unblock(sid);
  self->ep_->mark_dirty(self);
  return 0;
}

int QuicConnection::cb_extend_max_local_streams_uni(ngtcp2_conn *, uint64_t, void *ud) {
  auto *self = static_cast<QuicConnection *>(ud);
  if (self->identity_checked_ && !self->streams_open_) self->open_streams();
  return 0;
}

int QuicConnection::cb_get_new_connection_id(ngtcp2_conn *, ngtcp2_cid *cid, uint8_t *token,
                                             size_t cidlen, void *ud) {
  auto *self = static_cast<QuicConnection *>(ud);
  cid->datalen = cidlen;
  gnutls_rnd(GNUTLS_RND_NONCE, cid->data, cidlen);
  if (ngtcp2_crypto_generate_stateless_reset_token(token, self->ep_->secret(),
                                                   QuicEndpoint::kSecretLen, cid) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  self->scids_.push_back(*cid);
  self->ep_->route(*cid, self);
  return 0;
}

int QuicConnection::cb_remove_connection_id(ngtcp2_conn *, const ngtcp2_cid *cid, void *ud) {
  auto *self = static_cast<QuicConnection *>(ud);
  self->ep_->unroute(*cid);
  auto &v = self->scids_;
  v.erase(std::remove_if(v.begin(), v.end(),
                         [&](const ngtcp2_cid &c) { return ngtcp2_cid_eq(&c, cid); }),
          v.end());
  return 0;
}

void QuicConnection::cb_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *) {
  gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

int QuicConnection::cb_tls_secret(gnutls_session_t session,
                                  gnutls_record_encryption_level_t gtls_level,
                                  const void *rx_secret, const void *tx_secret, size_t secretlen) {
  auto *ref = static_cast<ngtcp2_crypto_conn_ref *>(gnutls_session_get_ptr(session));
  auto *self = static_cast<QuicConnection *>(ref->user_data);
  return self->fast_.install_secrets(
      self->conn_, ngtcp2_crypto_gnutls_from_gnutls_record_encryption_level(gtls_level),
      static_cast<const uint8_t *>(rx_secret), static_cast<const uint8_t *>(tx_secret), secretlen);
}

int QuicConnection::cb_update_key(ngtcp2_conn *conn, uint8_t *rx_secret, uint8_t *tx_secret,
                                  ngtcp2_crypto_aead_ctx *rx_aead_ctx, uint8_t *rx_iv,
                                  ngtcp2_crypto_aead_ctx *tx_aead_ctx, uint8_t *tx_iv,
                                  const uint8_t *current_rx_secret,
                                  const uint8_t *current_tx_secret, size_t secretlen, void *ud) {
  auto *self = static_cast<QuicConnection *>(ud);
  const int rc = self->fast_.update_key(conn, rx_secret, tx_secret, rx_aead_ctx, rx_iv, tx_aead_ctx,
                                        tx_iv, current_rx_secret, current_tx_secret, secretlen);
  if (rc != 0) return rc;
  ++self->key_updates_;
  return 0;
}

void QuicConnection::cb_delete_crypto_aead_ctx(ngtcp2_conn *conn, ngtcp2_crypto_aead_ctx *ctx,
                                               void *ud) {
  static_cast<QuicConnection *>(ud)->fast_.forget(ctx);
  ngtcp2_crypto_delete_crypto_aead_ctx_cb(conn, ctx, ud);
}

int QuicConnection::cb_stream_reset(ngtcp2_conn *, int64_t sid, uint64_t, uint64_t, void *ud,
                                    void *) {
  // nexar never resets its long-lived streams: a peer that does is broken.
  auto *self = static_cast<QuicConnection *>(ud);
  self->violation(error(
      NEXAR_ERR_PROTOCOL,
      format("%s reset stream %lld", self->peer_name().c_str(), static_cast<long long>(sid))));
  return NGTCP2_ERR_CALLBACK_FAILURE;
}

Status QuicConnection::export_keying_material(std::string_view label, uint8_t *out,
                                              size_t len) const {
  if (!session_ || !identity_checked_)
    return error(NEXAR_ERR_TLS, "keying material asked for before the handshake finished");
  int rc = gnutls_prf_rfc5705(session_, label.size(), label.data(), 0, nullptr, len,
                              reinterpret_cast<char *>(out));
  if (rc < 0) return error(NEXAR_ERR_TLS, format("gnutls_prf_rfc5705: %s", gnutls_strerror(rc)));
  return {};
}

// ---- sending ------------------------------------------------------------------

void QuicConnection::open_streams() {
  streams_open_ = lanes_.open(conn_, &ep_->stats().streams_opened);
  ep_->mark_dirty(this);
}

QuicConnection::SendItem *QuicConnection::send(OutgoingMessage msg, bool control, uint64_t key) {
  const wire::FrameKind kind = msg.header.kind;
  std::unique_ptr<SendItem> item = SendItem::framing(std::move(msg));
  if (closed_) {
    if (item->listener) item->listener->on_send_done(Status(NEXAR_ERR_CLOSED, "connection closed"));
    return nullptr;
  }
  CipherFastPath::choose_stand_in(item.get());
  SendLane &lane = lanes_.lane_for(control, kind, key);
  if (!control) {
    ++ep_->stats().messages_sent;
    ep_->stats().bytes_sent += item->payload_len;
  }
  SendItem *raw = lanes_.enqueue(lane, std::move(item));
  ep_->mark_dirty(this);
  if (!lane.opened() && streams_open_) open_streams();
  return raw;
}

void QuicConnection::send_control(const wire::ControlMessage &m, SendListener *listener) {
  std::vector<uint8_t> bytes = wire::encode_control(m);
  PooledBuf buf = PooledBuf::unpooled(bytes.size());
  memcpy(buf.data(), bytes.data(), bytes.size());
  OutgoingMessage msg;
  msg.header.kind = wire::FrameKind::Control;
  msg.header.length = bytes.size();
  msg.payload = buf.data();
  msg.owned = std::move(buf);
  msg.listener = listener;
  send(std::move(msg), true, 0);
}

bool QuicConnection::has_unacked() const {
  return !closed_ && lanes_.has_unacked();
}

bool QuicConnection::cancel(SendItem *item, SendListener *replacement) {
  return lanes_.cancel(item, replacement);
}

Status QuicConnection::initiate_key_update() {
  if (closed_) return error(NEXAR_ERR_CLOSED, "key update: the connection is closed");
  const int rc = ngtcp2_conn_initiate_key_update(conn_, now_ns());
  if (rc != 0) return from_ngtcp2("ngtcp2_conn_initiate_key_update", rc);
  ep_->mark_dirty(this);
  return {};
}

void QuicConnection::release_credit(int64_t sid, size_t bytes) {
  if (closed_ || bytes == 0) return;
  ngtcp2_conn_extend_max_stream_offset(conn_, sid, bytes);
  ngtcp2_conn_extend_max_offset(conn_, bytes);
  ep_->mark_dirty(this);
}

// ---- I/O -------------------------------------------------------------------------

bool QuicConnection::read_packet(const SocketAddress &from, const uint8_t *data, size_t len,
                                 uint64_t ts) {
  if (closed_) return false;
  ngtcp2_path path = path_;
  path.remote = {const_cast<sockaddr *>(from.sa()), from.len};
  ngtcp2_pkt_info pi{};
  const PacketCipher::Scope cipher = fast_.scope();
  int rc = ngtcp2_conn_read_pkt(conn_, &path, &pi, data, len, ts);
  fast_.end_packet();
  if (rc == 0) {
    last_rx_ns_ = ts;
    ep_->mark_dirty(this);
    arm_timer();
    return true;
  }
  switch (rc) {
    case NGTCP2_ERR_DRAINING: {
      // The peer's reason when it is one of QUIC's own (a refused Retry
      // token, a flow-control violation): an application close is nexar's.
      ngtcp2_connection_close_error ccerr;
      ngtcp2_conn_get_connection_close_error(conn_, &ccerr);
      const std::string code =
          ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT && ccerr.error_code != 0
              ? format(" (QUIC transport error 0x%llx)",
                       static_cast<unsigned long long>(ccerr.error_code))
              : std::string();
      const std::string who = expected_peer_rank_ == UINT32_MAX
                                  ? "the peer at " + from.to_string()
                                  : format("rank %u", expected_peer_rank_);
      close_cause_ = CloseCause::PeerClosed;
      if (ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION)
        peer_close_code_ = ccerr.error_code;
      fail(error(NEXAR_ERR_PEER_FAILED, who + " closed the connection" + code,
                 static_cast<int32_t>(expected_peer_rank_)));
      return false;
    }
    case NGTCP2_ERR_DISCARD_PKT:
      return true;
    case NGTCP2_ERR_DROP_CONN:
      // A server's first Initial that could not be opened (damaged on the
      // way, or forged): ngtcp2 asks for silence. A CONNECTION_CLOSE would
      // end the client's dial, though its intact Initial may be right behind.
      drop(error(NEXAR_ERR_PROTOCOL,
                 format("dropped a connection attempt from %s: its first packet could not be read",
                        from.to_string().c_str())));
      return false;
    case NGTCP2_ERR_CRYPTO:
      if (!closed_) refuse(tls_failure(from));
      return false;
    default:
      // The peer's packets broke QUIC (a stream past its limit, data past
      // the flow-control window, a malformed frame).
      if (!closed_)
        violation(error(NEXAR_ERR_PROTOCOL, format("QUIC error from %s: %s",
                                                   from.to_string().c_str(), ngtcp2_strerror(rc))));
      return false;
  }
}

bool QuicConnection::write() {
  if (closed_ || !conn_) return false;
  if (ngtcp2_conn_is_in_closing_period(conn_) || ngtcp2_conn_is_in_draining_period(conn_))
    return false;
  const uint64_t ts = now_ns();
  const size_t max_pkt = datagram_size();
  size_t burst = ngtcp2_conn_get_send_quantum(conn_) / max_pkt;
  const size_t max_burst = std::clamp<size_t>(kMaxBurstBytes / max_pkt, 1, kMaxBurstPackets);
  burst = std::clamp<size_t>(burst, 1, max_burst);
  uint8_t *buf = ep_->tx_buffer();
  size_t sizes[kMaxBurstPackets];
  size_t npkts = 0, off = 0;
  bool hit_limit = false;
  ngtcp2_vec vecs[16];
  ngtcp2_pkt_info pi{};
  const PacketCipher::Scope cipher = fast_.scope();
  for (;;) {
    SendLane *st = lanes_.pick();
    size_t nvec = st ? lanes_.build_vecs(*st, vecs, 16) : 0;
    ngtcp2_ssize ndatalen = -1;
    ngtcp2_ssize nwrite = ngtcp2_conn_writev_stream(
        conn_, nullptr, &pi, buf + off, max_pkt, &ndatalen, NGTCP2_WRITE_STREAM_FLAG_MORE,
        st ? st->id : -1, nvec ? vecs : nullptr, nvec, ts);
    if (nwrite < 0) {
      if (nwrite == NGTCP2_ERR_WRITE_MORE) {
        if (st && ndatalen >= 0) lanes_.advance(*st, static_cast<size_t>(ndatalen));
        continue;
      }
      if (nwrite == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
        if (st) st->blocked = true;
        continue;
      }
      if (nwrite == NGTCP2_ERR_STREAM_SHUT_WR || nwrite == NGTCP2_ERR_STREAM_NOT_FOUND) {
        fail(error(NEXAR_ERR_PROTOCOL, "a lane stream was shut down"));
        return false;
      }
      if (nwrite == NGTCP2_ERR_CALLBACK_FAILURE && fast_.seal_error()) {
        fail(error(NEXAR_ERR_INTERNAL, format("sealing a packet for rank %u: %s",
                                              expected_peer_rank_, fast_.seal_error())));
        return false;
      }
      fail(from_ngtcp2("ngtcp2_conn_writev_stream", static_cast<int>(nwrite)));
      return false;
    }
    if (st && ndatalen >= 0) lanes_.advance(*st, static_cast<size_t>(ndatalen));
    if (nwrite == 0) break;
    sizes[npkts++] = static_cast<size_t>(nwrite);
    off += static_cast<size_t>(nwrite);
    if (npkts == burst) {
      hit_limit = true;
      break;
    }
  }
  if (npkts > 0) {
    ep_->transmit(remote_, buf, sizes, npkts);
    ngtcp2_conn_update_pkt_tx_time(conn_, ts);
    // A few small packets pace for nanoseconds, so ngtcp2's next deadline is
    // usually due already. Handling it here, with one more write() in this
    // flush, saves the 1 us timer's extra poll and loop pass on every send.
    const uint64_t now = now_ns();
    if (!hit_limit && ngtcp2_conn_get_expiry(conn_) <= now) {
      if (!handle_expiry(now)) return false;
      arm_timer();
      return true;
    }
  }
  arm_timer();
  return hit_limit;
}

size_t QuicConnection::datagram_size() const {
  const size_t path = ngtcp2_conn_get_path_max_tx_udp_payload_size(conn_);
  // ngtcp2 pads a datagram that carries an Initial to the whole size it is
  // given. On loopback's 65000-byte datagrams every handshake datagram was
  // that large: a half-open server connection then held about 150 KB in
  // ngtcp2, and a socket buffer only a few hundred Initials. The handshake
  // fits in link-sized datagrams. Completion is not the end of it: a client's
  // first datagram after it still acknowledges the server's Initial.
  // Confirmation (HANDSHAKE_DONE for a client, completion for a server) is
  // when no Initial can follow.
  if (handshake_confirmed_) return path;
  return std::min(path, QuicEndpoint::link_udp_payload(remote_));
}

void QuicConnection::arm_timer() {
  if (closed_ || !conn_) return;
  const uint64_t expiry = std::min(ngtcp2_conn_get_expiry(conn_), silence_deadline());
  if (expiry == UINT64_MAX) {
    ep_->loop()->stop_timer(&timer_);
    return;
  }
  const uint64_t now = now_ns();
  timer_armed_due_ = expiry <= now;
  ep_->loop()->arm_timer(&timer_, expiry, now);
}

void QuicConnection::on_timer(struct ev_loop *, ev_timer *w, int) {
  auto *c = static_cast<QuicConnection *>(w->data);
  if (c->timer_armed_due_) ++c->ep_->stats().timers_fired_due;
  c->on_expiry();
}

void QuicConnection::on_expiry() {
  if (closed_ || !handle_expiry(now_ns())) return;
  ep_->mark_dirty(this);
  arm_timer();
}

uint64_t QuicConnection::silence_deadline() const {
  if (!handshake_confirmed_ || last_rx_ns_ == 0 || ep_->keep_alive_ns() == 0) return UINT64_MAX;
  const uint64_t idle = idle_timeout_ns();
  if (idle == 0) return UINT64_MAX;
  // Never under two keep-alive periods: a live peer's heartbeat always has
  // the time to arrive.
  return last_rx_ns_ + std::max(idle, 2 * ep_->keep_alive_ns());
}

bool QuicConnection::handle_expiry(uint64_t now) {
  int rc =
      now >= silence_deadline() ? NGTCP2_ERR_IDLE_CLOSE : ngtcp2_conn_handle_expiry(conn_, now);
  if (rc == 0) return true;
  if (rc == NGTCP2_ERR_IDLE_CLOSE) {
    close_cause_ = CloseCause::IdleTimeout;
    // Not silently: a peer that was frozen, not dead, learns on waking that
    // it was declared failed.
    close(kDeclaredFailedCloseCode,
          error(NEXAR_ERR_PEER_FAILED,
                format("no packets from rank %u for %.1f s (idle timeout)", expected_peer_rank_,
                       static_cast<double>(idle_timeout_ns()) / 1e9),
                static_cast<int32_t>(expected_peer_rank_)));
  } else if (rc == NGTCP2_ERR_HANDSHAKE_TIMEOUT) {
    fail(error(NEXAR_ERR_TIMEOUT,
               format("QUIC handshake with %s did not finish in time", remote_.to_string().c_str()),
               static_cast<int32_t>(expected_peer_rank_)));
  } else {
    fail(from_ngtcp2("ngtcp2_conn_handle_expiry", rc));
  }
  return false;
}

uint64_t QuicConnection::idle_timeout_ns() const {
  const uint64_t local = ep_->idle_timeout_ns();
  const ngtcp2_transport_params *remote =
      conn_ ? ngtcp2_conn_get_remote_transport_params(conn_) : nullptr;
  if (!remote || remote->max_idle_timeout == 0) return local;
  if (local == 0) return remote->max_idle_timeout;
  return std::min(local, remote->max_idle_timeout);
}

void QuicConnection::fail(const Status &why) {
  if (closed_) return;
  if (close_cause_ == CloseCause::Open) close_cause_ = CloseCause::Error;
  close(1, why);
}

void QuicConnection::refuse(const Status &why) {
  if (closed_) return;
  ++ep_->stats().connections_refused;
  LOG_WARN("refusing connection from %s: %s", remote_.to_string().c_str(), why.message.c_str());
  fail(why);
}

void QuicConnection::violation(const Status &why) {
  if (closed_) return;
  ++ep_->stats().protocol_violations;
  LOG_WARN("closing the connection with %s: %s", remote_.to_string().c_str(), why.message.c_str());
  fail(why);
}

std::string QuicConnection::peer_name() const {
  return expected_peer_rank_ == UINT32_MAX ? "the peer at " + remote_.to_string()
                                           : format("rank %u", expected_peer_rank_);
}

Status QuicConnection::tls_failure(const SocketAddress &from) const {
  const auto alert = static_cast<gnutls_alert_description_t>(ngtcp2_conn_get_tls_alert(conn_));
  const char *alert_name = gnutls_alert_get_name(alert);
  std::string why = format("TLS handshake with %s failed (alert %u: %s)", from.to_string().c_str(),
                           static_cast<unsigned>(alert), alert_name ? alert_name : "unknown");
  // Why this side did not trust the peer's certificate, when that was it
  // (the status means nothing after other failures).
  const bool certificate_alert = alert >= GNUTLS_A_BAD_CERTIFICATE && alert <= GNUTLS_A_UNKNOWN_CA;
  const unsigned verify =
      session_ && certificate_alert ? gnutls_session_get_verify_cert_status(session_) : 0;
  gnutls_datum_t text{nullptr, 0};
  if (verify != 0 &&
      gnutls_certificate_verification_status_print(verify, GNUTLS_CRT_X509, &text, 0) >= 0) {
    why += format(": %.*s", static_cast<int>(text.size), reinterpret_cast<char *>(text.data));
    gnutls_free(text.data);
  }
  return error(NEXAR_ERR_TLS, why);
}

void QuicConnection::close(uint64_t app_error, const Status &why) {
  if (closed_) return;
  closed_ = true;
  close_code_ = app_error;
  if (close_cause_ == CloseCause::Open) close_cause_ = CloseCause::Local;
  if (conn_ && !ngtcp2_conn_is_in_closing_period(conn_) &&
      !ngtcp2_conn_is_in_draining_period(conn_)) {
    ngtcp2_connection_close_error ccerr;
    ngtcp2_connection_close_error_default(&ccerr);
    if (why.code == NEXAR_ERR_TLS || why.code == NEXAR_ERR_AUTH)
      ngtcp2_connection_close_error_set_transport_error_tls_alert(
          &ccerr, ngtcp2_conn_get_tls_alert(conn_), nullptr, 0);
    else
      ngtcp2_connection_close_error_set_application_error(&ccerr, app_error, nullptr, 0);
    ngtcp2_pkt_info pi{};
    uint8_t *buf = ep_->tx_buffer();
    const PacketCipher::Scope cipher = fast_.scope();
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(conn_, nullptr, &pi, buf, datagram_size(),
                                                        &ccerr, now_ns());
    if (n > 0) {
      size_t sz = static_cast<size_t>(n);
      ep_->transmit(remote_, buf, &sz, 1);
    }
  }
  end(why);
}

void QuicConnection::drop(const Status &why) {
  if (closed_) return;
  closed_ = true;
  close_cause_ = CloseCause::Local;
  LOG_DEBUG("%s", why.message.c_str());
  // Unroute now, not when destroyed: the client's next Initial carries the
  // same DCID and must reach the connection it starts, not this one (nor
  // lose its route when this one is destroyed later).
  for (auto &cid : scids_)
    ep_->unroute(cid);
  scids_.clear();
  end(why);
}

void QuicConnection::end(const Status &why) {
  ep_->loop()->stop_timer(&timer_);
  lanes_.fail_all(why);
  framer_.fail_sinks();
  handler_->on_closed(this, why);
}

}  // namespace nexar
