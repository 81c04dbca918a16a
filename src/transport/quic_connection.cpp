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
// The unwritten rest of a cancelled send, and the stand-in bytes ngtcp2
// copies for payloads sealed from the caller's memory (it stays in cache).
const uint8_t kZeros[64 * 1024] = {};
// Payloads from this size on are sealed from the caller's memory: a packet's
// worth or a good part of one, where ngtcp2's copy costs; below it the
// sealer would walk packets for little.
constexpr uint64_t kMinStandIn = 16 * 1024;

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
      cipher_(&ep->stats().packets_fast_aead, &ep->stats().bytes_sealed_in_place) {
  conn_ref_.get_conn = &QuicConnection::get_conn;
  conn_ref_.user_data = this;
  cipher_.set_placer(this);
  cipher_.set_source(this);
  ev_init(&timer_, &QuicConnection::on_timer);
  timer_.data = this;
  for (size_t i = 0; i < kSendStreams; ++i) {
    const wire::Lane lane = i == kControl       ? wire::Lane::Control
                            : i < kRpcRequest   ? wire::Lane::Data
                            : i == kRpcRequest  ? wire::Lane::RpcRequest
                            : i == kRpcResponse ? wire::Lane::RpcResponse
                                                : wire::Lane::Relay;
    streams_[i].lane_byte = static_cast<uint8_t>(lane);
  }
}

QuicConnection::~QuicConnection() {
  ep_->loop()->stop_timer(&timer_);
  for (auto &cid : scids_)
    ep_->unroute(cid);
  for (auto &st : streams_)
    finish_items(st, Status(NEXAR_ERR_CLOSED, "connection destroyed"));
  for (auto &[id, rs] : recv_)
    if (rs.sink) rs.sink->finish(false);
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
  cb->encrypt = PacketCipher::encrypt;
  cb->decrypt = PacketCipher::decrypt;
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
  if (s && peer.cluster_id != self->ep_->cluster_id())
    s = error(NEXAR_ERR_AUTH, format("peer certificate belongs to another cluster (%016llx)",
                                     static_cast<unsigned long long>(peer.cluster_id)));
  if (s && self->is_client_ && peer.rank != self->expected_peer_rank_)
    s = error(NEXAR_ERR_AUTH,
              format("peer at %s presented a certificate for rank %u, expected %u",
                     self->remote_.to_string().c_str(), peer.rank, self->expected_peer_rank_));
  if (!s) {
    LOG_WARN("refusing connection from %s: %s", self->remote_.to_string().c_str(),
             s.message.c_str());
    self->fail(s);
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  if (!self->is_client_) self->expected_peer_rank_ = peer.rank;
  self->identity_checked_ = true;
  self->open_streams();
  self->handler_->on_handshake_done(self, peer);
  return 0;
}

int QuicConnection::cb_recv_stream_data(ngtcp2_conn *conn, uint32_t, int64_t sid, uint64_t offset,
                                        const uint8_t *data, size_t len, void *ud, void *) {
  auto *self = static_cast<QuicConnection *>(ud);
  if (self->closed_) return 0;
  size_t credit = self->on_stream_data(sid, offset, data, len);
  if (self->closed_) return NGTCP2_ERR_CALLBACK_FAILURE;
  if (credit > 0) {
    ngtcp2_conn_extend_max_stream_offset(conn, sid, credit);
    ngtcp2_conn_extend_max_offset(conn, credit);
  }
  return 0;
}

int QuicConnection::cb_acked_stream_data_offset(ngtcp2_conn *, int64_t sid, uint64_t off,
                                                uint64_t len, void *ud, void *) {
  static_cast<QuicConnection *>(ud)->on_acked(sid, off, len);
  return 0;
}

int QuicConnection::cb_extend_max_stream_data(ngtcp2_conn *, int64_t sid, uint64_t, void *ud,
                                              void *) {
  auto *self = static_cast<QuicConnection *>(ud);
  if (SendStream *st = self->stream_by_id(sid)) st->blocked = false;
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

namespace {
size_t negotiated_keylen(ngtcp2_conn *conn) {
  return ngtcp2_crypto_aead_keylen(&ngtcp2_conn_get_crypto_ctx(conn)->aead);
}
}  // namespace

int QuicConnection::cb_tls_secret(gnutls_session_t session,
                                  gnutls_record_encryption_level_t gtls_level,
                                  const void *rx_secret, const void *tx_secret, size_t secretlen) {
  auto *ref = static_cast<ngtcp2_crypto_conn_ref *>(gnutls_session_get_ptr(session));
  auto *self = static_cast<QuicConnection *>(ref->user_data);
  const ngtcp2_crypto_level level =
      ngtcp2_crypto_gnutls_from_gnutls_record_encryption_level(gtls_level);
  // Only 1-RTT keys carry bulk data; the handshake's stay on GnuTLS alone.
  const bool offer = level == NGTCP2_CRYPTO_LEVEL_APPLICATION;
  uint8_t key[64];
  if (rx_secret && ngtcp2_crypto_derive_and_install_rx_key(
                       self->conn_, offer ? key : nullptr, nullptr, nullptr, level,
                       static_cast<const uint8_t *>(rx_secret), secretlen) != 0)
    return -1;
  if (rx_secret && offer) self->cipher_.offer(key, negotiated_keylen(self->conn_));
  if (tx_secret && ngtcp2_crypto_derive_and_install_tx_key(
                       self->conn_, offer ? key : nullptr, nullptr, nullptr, level,
                       static_cast<const uint8_t *>(tx_secret), secretlen) != 0)
    return -1;
  if (tx_secret && offer) self->cipher_.offer(key, negotiated_keylen(self->conn_));
  gnutls_memset(key, 0, sizeof key);
  return 0;
}

int QuicConnection::cb_update_key(ngtcp2_conn *conn, uint8_t *rx_secret, uint8_t *tx_secret,
                                  ngtcp2_crypto_aead_ctx *rx_aead_ctx, uint8_t *rx_iv,
                                  ngtcp2_crypto_aead_ctx *tx_aead_ctx, uint8_t *tx_iv,
                                  const uint8_t *current_rx_secret,
                                  const uint8_t *current_tx_secret, size_t secretlen, void *ud) {
  auto *self = static_cast<QuicConnection *>(ud);
  uint8_t rx_key[64], tx_key[64];
  if (ngtcp2_crypto_update_key(conn, rx_secret, tx_secret, rx_aead_ctx, rx_key, rx_iv, tx_aead_ctx,
                               tx_key, tx_iv, current_rx_secret, current_tx_secret, secretlen) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  ++self->key_updates_;
  self->cipher_.offer(rx_key, negotiated_keylen(conn));
  self->cipher_.offer(tx_key, negotiated_keylen(conn));
  gnutls_memset(rx_key, 0, sizeof rx_key);
  gnutls_memset(tx_key, 0, sizeof tx_key);
  return 0;
}

void QuicConnection::cb_delete_crypto_aead_ctx(ngtcp2_conn *conn, ngtcp2_crypto_aead_ctx *ctx,
                                               void *ud) {
  static_cast<QuicConnection *>(ud)->cipher_.forget(ctx);
  ngtcp2_crypto_delete_crypto_aead_ctx_cb(conn, ctx, ud);
}

int QuicConnection::cb_stream_reset(ngtcp2_conn *, int64_t sid, uint64_t, uint64_t, void *ud,
                                    void *) {
  // nexar never resets its long-lived streams: a peer that does is broken.
  auto *self = static_cast<QuicConnection *>(ud);
  self->fail(error(
      NEXAR_ERR_PROTOCOL,
      format("rank %u reset stream %lld", self->expected_peer_rank_, static_cast<long long>(sid))));
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

// ---- streams -----------------------------------------------------------------

void QuicConnection::open_streams() {
  auto open = [&](SendStream &st) {
    if (st.id >= 0) return true;
    int64_t id;
    if (ngtcp2_conn_open_uni_stream(conn_, &id, nullptr) != 0) return false;
    st.id = id;
    ++ep_->stats().streams_opened;
    // The lane byte goes out first, ahead of anything already queued.
    auto item = std::make_unique<SendItem>();
    item->header[0] = st.lane_byte;
    item->header_len = 1;
    for (auto &queued : st.items)
      queued->end_offset += 1;
    st.offset += 1;
    // Counted like any queued byte: advance() takes it off when written, and
    // an uncounted byte per stream wrapped the count below zero, which
    // turned every copied send into one that waits for its acknowledgement.
    queued_bytes_ += 1;
    item->end_offset = 1;
    st.items.push_front(std::move(item));
    return true;
  };
  bool all = true;
  for (size_t i = 0; i < kSendStreams && all; ++i) {
    // Relay streams open with their first frame: full meshes never use them.
    if (i >= kRelay && streams_[i].items.empty()) continue;
    all = open(streams_[i]);
  }
  streams_open_ = all;
  ep_->mark_dirty(this);
}

QuicConnection::SendItem *QuicConnection::enqueue(SendStream &st, std::unique_ptr<SendItem> item) {
  st.offset += item->total();
  item->end_offset = st.offset;
  queued_bytes_ += item->total();
  SendItem *raw = item.get();
  st.items.push_back(std::move(item));
  ep_->mark_dirty(this);
  return raw;
}

QuicConnection::SendItem *QuicConnection::send(OutgoingMessage msg, bool control, uint64_t key) {
  auto item = std::make_unique<SendItem>();
  wire::encode_frame_header(msg.header, item->header);
  item->owned = std::move(msg.owned);
  item->payload = msg.payload;
  item->payload_len = msg.header.length;
  if (msg.header.kind == wire::FrameKind::Relay) {
    // The relay prefix travels with the header; the payload is the chunk.
    memcpy(item->header + wire::kFrameHeaderSize, msg.prefix, wire::kRelayPrefixSize);
    item->header_len = wire::kFrameHeaderSize + wire::kRelayPrefixSize;
    item->payload_len = msg.header.length - wire::kRelayPrefixSize;
  }
  item->listener = msg.listener;
  if (closed_) {
    if (item->listener) item->listener->on_send_done(Status(NEXAR_ERR_CLOSED, "connection closed"));
    return nullptr;
  }
  if (item->payload_len >= kMinStandIn && PacketCipher::available()) {
    item->stand_in = true;
    item->stand_in_end = item->total();
    ++stand_in_items_;
  }
  const wire::FrameKind kind = msg.header.kind;
  SendStream &st = streams_[control                                ? kControl
                            : kind == wire::FrameKind::RpcRequest  ? kRpcRequest
                            : kind == wire::FrameKind::RpcResponse ? kRpcResponse
                            : kind == wire::FrameKind::Relay       ? kRelay + key % kRelayStreams
                                                                   : kData + key % kDataStreams];
  if (!control) {
    ++ep_->stats().messages_sent;
    ep_->stats().bytes_sent += item->payload_len;
  }
  SendItem *raw = enqueue(st, std::move(item));
  if (st.id < 0 && streams_open_) open_streams();
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
  if (closed_) return false;
  for (const auto &st : streams_)
    if (!st.items.empty()) return true;
  return false;
}

bool QuicConnection::cancel(SendItem *item, SendListener *replacement) {
  for (SendStream &st : streams_) {
    for (size_t i = 0; i < st.items.size(); ++i) {
      if (st.items[i].get() != item) continue;
      if (item->written == 0 && i >= st.next) {
        // Never started: drop it and shift the later offsets back.
        const uint64_t n = item->total();
        for (size_t j = i + 1; j < st.items.size(); ++j)
          st.items[j]->end_offset -= n;
        st.offset -= n;
        queued_bytes_ -= n;
        forget_item(*item);
        st.items.erase(st.items.begin() + static_cast<long>(i));
        return false;
      }
      // What was written is still sealed from the caller's memory until
      // acknowledged, as ngtcp2 still read it until then before.
      if (item->stand_in) item->stand_in_end = std::min(item->stand_in_end, item->written);
      item->zero_rest = true;
      item->listener = replacement;
      return true;
    }
  }
  return false;
}

size_t QuicConnection::build_vecs(SendStream &st, ngtcp2_vec *vecs, size_t max) {
  size_t n = 0;
  for (size_t i = st.next; i < st.items.size() && n < max; ++i) {
    SendItem &it = *st.items[i];
    uint64_t pos = it.written;
    if (pos < it.header_len) {
      vecs[n++] = {it.header + pos, static_cast<size_t>(it.header_len - pos)};
      pos = it.header_len;
    }
    while (pos < it.total() && n < max) {
      const uint64_t off = pos - it.header_len;
      const uint64_t left = it.payload_len - off;
      if (it.stand_in && pos < it.stand_in_end) {
        // The sealer takes the real bytes from it.payload (source()).
        size_t k = static_cast<size_t>(std::min<uint64_t>(it.stand_in_end - pos, sizeof kZeros));
        vecs[n++] = {const_cast<uint8_t *>(kZeros), k};
        pos += k;
      } else if (it.zero_rest) {
        size_t k = static_cast<size_t>(std::min<uint64_t>(left, sizeof kZeros));
        vecs[n++] = {const_cast<uint8_t *>(kZeros), k};
        pos += k;
      } else {
        // ngtcp2_vec lengths are size_t; one vec per item keeps the count low.
        vecs[n++] = {const_cast<uint8_t *>(it.payload + off), static_cast<size_t>(left)};
        pos = it.total();
      }
    }
  }
  return n;
}

void QuicConnection::advance(SendStream &st, size_t n) {
  while (n > 0 && st.next < st.items.size()) {
    SendItem &it = *st.items[st.next];
    const uint64_t left = it.total() - it.written;
    const uint64_t take = std::min<uint64_t>(left, n);
    it.written += take;
    n -= static_cast<size_t>(take);
    queued_bytes_ -= take;
    if (it.written == it.total()) ++st.next;
  }
}

void QuicConnection::on_acked(int64_t sid, uint64_t offset, uint64_t len) {
  SendStream *st = stream_by_id(sid);
  if (!st) return;
  const uint64_t acked = offset + len;
  while (!st->items.empty() && st->items.front()->end_offset <= acked &&
         st->items.front()->written == st->items.front()->total()) {
    std::unique_ptr<SendItem> it = std::move(st->items.front());
    st->items.pop_front();
    forget_item(*it);
    if (st->next > 0) --st->next;
    if (it->listener) it->listener->on_send_done(Status());
  }
}

QuicConnection::SendStream *QuicConnection::stream_by_id(int64_t sid) {
  for (auto &st : streams_)
    if (st.id == sid) return &st;
  return nullptr;
}

void QuicConnection::finish_items(SendStream &st, const Status &s) {
  auto items = std::move(st.items);
  st.items.clear();
  st.next = 0;
  for (auto &it : items) {
    forget_item(*it);
    if (it->listener) it->listener->on_send_done(s);
  }
}

void QuicConnection::forget_item(const SendItem &it) {
  if (it.stand_in) --stand_in_items_;
}

bool QuicConnection::source(int64_t sid, uint64_t offset, size_t len, const uint8_t **from,
                            size_t *n) {
  SendStream *st = stream_by_id(sid);
  if (!st) return false;
  // The first item that ends past offset holds it (items are in stream order).
  auto found = std::upper_bound(
      st->items.begin(), st->items.end(), offset,
      [](uint64_t off, const std::unique_ptr<SendItem> &it) { return off < it->end_offset; });
  if (found == st->items.end()) return false;
  const SendItem &it = **found;
  const uint64_t start = it.end_offset - it.total();
  if (offset < start) return false;  // acknowledged and gone
  const uint64_t at = offset - start;
  uint64_t until = it.total();  // the end of the run at `at`
  *from = nullptr;
  if (at < it.header_len) {
    until = it.header_len;
  } else if (it.stand_in && at < it.stand_in_end) {
    until = it.stand_in_end;
    *from = it.payload + (at - it.header_len);
  }
  *n = static_cast<size_t>(std::min<uint64_t>(len, until - at));
  return true;
}

QuicConnection::SendStream *QuicConnection::pick_stream() {
  // Control first (barriers and heartbeats never wait behind bulk data), then
  // the data and RPC streams round robin (a large RPC payload shares the link
  // with bulk data; neither starves the other).
  if (streams_[kControl].writable()) return &streams_[kControl];
  constexpr size_t kShared = kSendStreams - kData;
  for (size_t k = 0; k < kShared; ++k) {
    SendStream &d = streams_[kData + (rr_ + k) % kShared];
    if (d.writable()) {
      rr_ = (rr_ + k + 1) % kShared;
      return &d;
    }
  }
  return nullptr;
}

uint8_t *QuicConnection::place(int64_t sid, uint64_t offset, size_t len, size_t *n) {
  if (closed_ || placement_.len > 0) return nullptr;
  auto found = recv_.find(sid);
  if (found == recv_.end()) return nullptr;
  RecvStream &rs = found->second;
  // Only data ngtcp2 will deliver at once (it continues the stream) and that
  // lies in the payload of the message being received, not in a header.
  if (offset != rs.next_offset || !rs.in_payload || rs.sink == nullptr) return nullptr;
  const size_t k = static_cast<size_t>(std::min<uint64_t>(len, rs.remaining));
  uint8_t *to = rs.sink->place(k);
  if (to) *n = k;
  return to;
}

void QuicConnection::placed(int64_t sid, uint64_t offset, size_t n, const uint8_t *to) {
  placement_ = {sid, offset, n, to};
}

size_t QuicConnection::on_stream_data(int64_t sid, uint64_t offset, const uint8_t *data,
                                      size_t len) {
  auto found = recv_.find(sid);
  if (found == recv_.end()) {
    found = recv_.emplace(sid, RecvStream{}).first;
    ++ep_->stats().streams_accepted;
  }
  RecvStream &rs = found->second;
  rs.next_offset = offset + len;
  // The first bytes of these may have been opened into their receive
  // already; ngtcp2's buffer then holds no plaintext for them.
  Placement placed;
  if (placement_.len > 0 && placement_.stream_id == sid) placed = std::exchange(placement_, {});
  // place() saw this very state when the packet was opened, at the offset
  // ngtcp2 delivers next; anything else would leave a receive without bytes
  // that were opened for it, or copy bytes that were never opened.
  auto lost = [&] {
    fail(error(NEXAR_ERR_INTERNAL,
               format("data from rank %u was opened for a receive that no longer takes it",
                      expected_peer_rank_)));
  };
  if (placed.len > 0 && (placed.offset != offset || !rs.in_payload || rs.sink == nullptr ||
                         std::min<uint64_t>(len, rs.remaining) != placed.len)) {
    lost();
    return 0;
  }
  size_t credit = 0;
  while (len > 0) {
    if (!rs.have_lane) {
      if (!wire::valid_lane(data[0])) {
        fail(error(NEXAR_ERR_PROTOCOL, format("rank %u opened a stream with unknown lane 0x%02x",
                                              expected_peer_rank_, data[0])));
        return credit;
      }
      rs.have_lane = true;
      rs.lane = data[0];
      ++data;
      --len;
      ++credit;
      continue;
    }
    if (!rs.in_payload) {
      size_t k = std::min(len, wire::kFrameHeaderSize - rs.header_fill);
      memcpy(rs.header + rs.header_fill, data, k);
      rs.header_fill += k;
      data += k;
      len -= k;
      credit += k;
      if (rs.header_fill < wire::kFrameHeaderSize) break;
      rs.header_fill = 0;
      Status s = wire::decode_frame_header(rs.header, &rs.frame);
      if (s && rs.lane != static_cast<uint8_t>(wire::lane_of(rs.frame.kind)))
        s = error(NEXAR_ERR_PROTOCOL, "frame kind does not belong on its lane");
      if (!s) {
        fail(error(s.code, format("malformed frame from rank %u: %s", expected_peer_rank_,
                                  s.message.c_str())));
        return credit;
      }
      rs.in_payload = true;
      rs.remaining = rs.frame.length;
      rs.sink = nullptr;
      if (rs.frame.kind == wire::FrameKind::Control) {
        // Grown as the bytes arrive, not reserved from the header's length:
        // a header alone (32 bytes on each of 16 streams) must not claim
        // 64 KiB apiece from a peer that never sends the rest.
        rs.control.clear();
      } else {
        rs.sink = handler_->on_message(this, sid, rs.frame);
        if (closed_) return credit;
      }
    }
    size_t k = static_cast<size_t>(std::min<uint64_t>(len, rs.remaining));
    if (placed.len > 0) {
      size_t c = 0;
      if (!rs.sink->placed(placed.to, k, &c)) {
        lost();
        return credit;
      }
      credit += c;
      ep_->stats().bytes_opened_in_place += k;
      placed = {};
    } else if (rs.frame.kind == wire::FrameKind::Control) {
      rs.control.insert(rs.control.end(), data, data + k);
      credit += k;
    } else if (k > 0) {
      credit += rs.sink->write(data, k);
    }
    data += k;
    len -= k;
    rs.remaining -= k;
    if (rs.remaining == 0) {
      rs.in_payload = false;
      if (rs.frame.kind == wire::FrameKind::Control) {
        handler_->on_control(this, rs.control);
      } else {
        ++ep_->stats().messages_received;
        ep_->stats().bytes_received += rs.frame.length;
        MessageSink *sink = std::exchange(rs.sink, nullptr);
        sink->finish(true);
      }
      if (closed_) return credit;
    }
  }
  return credit;
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
  const PacketCipher::Scope cipher(&cipher_);
  int rc = ngtcp2_conn_read_pkt(conn_, &path, &pi, data, len, ts);
  placement_ = {};  // one not taken: ngtcp2 dropped its frame
  if (rc == 0) {
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
    case NGTCP2_ERR_CRYPTO: {
      Status s = closed_ ? Status()
                         : error(NEXAR_ERR_TLS, format("TLS handshake with %s failed (alert %u)",
                                                       from.to_string().c_str(),
                                                       ngtcp2_conn_get_tls_alert(conn_)));
      if (!closed_) fail(s);
      return false;
    }
    default:
      if (!closed_)
        fail(error(NEXAR_ERR_PROTOCOL, format("QUIC error from %s: %s", from.to_string().c_str(),
                                              ngtcp2_strerror(rc))));
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
  const PacketCipher::Scope cipher(&cipher_);
  for (;;) {
    SendStream *st = pick_stream();
    size_t nvec = st ? build_vecs(*st, vecs, 16) : 0;
    ngtcp2_ssize ndatalen = -1;
    ngtcp2_ssize nwrite = ngtcp2_conn_writev_stream(
        conn_, nullptr, &pi, buf + off, max_pkt, &ndatalen, NGTCP2_WRITE_STREAM_FLAG_MORE,
        st ? st->id : -1, nvec ? vecs : nullptr, nvec, ts);
    if (nwrite < 0) {
      if (nwrite == NGTCP2_ERR_WRITE_MORE) {
        if (st && ndatalen >= 0) advance(*st, static_cast<size_t>(ndatalen));
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
      if (nwrite == NGTCP2_ERR_CALLBACK_FAILURE && cipher_.seal_error()) {
        fail(error(NEXAR_ERR_INTERNAL, format("sealing a packet for rank %u: %s",
                                              expected_peer_rank_, cipher_.seal_error())));
        return false;
      }
      fail(from_ngtcp2("ngtcp2_conn_writev_stream", static_cast<int>(nwrite)));
      return false;
    }
    if (st && ndatalen >= 0) advance(*st, static_cast<size_t>(ndatalen));
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
  const uint64_t expiry = ngtcp2_conn_get_expiry(conn_);
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

bool QuicConnection::handle_expiry(uint64_t now) {
  int rc = ngtcp2_conn_handle_expiry(conn_, now);
  if (rc == 0) return true;
  if (rc == NGTCP2_ERR_IDLE_CLOSE) {
    fail(error(NEXAR_ERR_PEER_FAILED,
               format("no packets from rank %u for %.1f s (idle timeout)", expected_peer_rank_,
                      static_cast<double>(ep_->idle_timeout_ns()) / 1e9),
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

void QuicConnection::fail(const Status &why) {
  if (closed_) return;
  close(1, why);
}

void QuicConnection::close(uint64_t app_error, const Status &why) {
  if (closed_) return;
  closed_ = true;
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
    const PacketCipher::Scope cipher(&cipher_);
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
  for (auto &st : streams_)
    finish_items(st, why);
  for (auto &[id, rs] : recv_)
    if (rs.sink) std::exchange(rs.sink, nullptr)->finish(false);
  handler_->on_closed(this, why);
}

}  // namespace nexar
