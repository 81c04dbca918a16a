#include "transport/quic_endpoint.h"

#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <algorithm>
#include <atomic>

#include "core/clock.h"
#include "core/log.h"

namespace nexar {
namespace {
constexpr size_t kScidLen = 16;
constexpr size_t kMaxReadBatches = 8;  // per wake-up, so writes and timers get their turn
std::string_view cid_key(const uint8_t *data, size_t len) {
  return std::string_view(reinterpret_cast<const char *>(data), len);
}
}  // namespace

QuicEndpoint::QuicEndpoint(EventLoop *loop, ConnectionHandler *handler, uint64_t cluster_id,
                           std::shared_ptr<TlsCredentials> creds, uint64_t idle_timeout_ms,
                           uint64_t connect_timeout_ms, uint64_t keep_alive_ms,
                           ConnectionPolicy policy)
    : loop_(loop),
      handler_(handler),
      cluster_id_(cluster_id),
      creds_(std::move(creds)),
      idle_timeout_ns_(idle_timeout_ms * kNsPerMs),
      connect_timeout_ns_(connect_timeout_ms * kNsPerMs),
      keep_alive_ns_(keep_alive_ms * kNsPerMs),
      policy_(policy) {
  gnutls_rnd(GNUTLS_RND_KEY, secret_, sizeof secret_);
  tx_.resize(64 * 65536);
  loop_->add_before_sleep([this] { return flush(); });
}

QuicEndpoint::~QuicEndpoint() {
  if (reading_) loop_->unwatch_socket();
  dirty_.clear();
  conns_.clear();
  retired_.clear();
}

Status QuicEndpoint::open(const SocketAddress &bind_addr) {
  return started(socket_.bind(bind_addr));
}

Status QuicEndpoint::adopt(int fd) {
  return started(socket_.adopt(fd));
}

Status QuicEndpoint::started(Status opened) {
  if (!opened) return opened;
  const size_t rcvbuf = socket_.receive_buffer();
  static std::atomic<bool> warned{false};  // once per process, not per communicator
  if (rcvbuf < kBbrMinReceiveBuffer && !warned.exchange(true))
    LOG_WARN(
        "the UDP receive buffer is %zu KiB, under the %zu KiB bulk transfers need: datagrams "
        "will likely be dropped, and connections use CUBIC instead of BBRv2; raise "
        "net.core.rmem_max and net.core.wmem_max to %zu or more (they cap processes without "
        "CAP_NET_ADMIN)",
        rcvbuf >> 10, kBbrMinReceiveBuffer >> 10, kBbrMinReceiveBuffer);
  loop_->watch_socket(socket_.fd(), EV_READ, [this](int revents) {
    if (revents & EV_WRITE) flush_pending();
    if (revents & EV_READ) read_socket();
  });
  reading_ = true;
  return opened;
}

size_t QuicEndpoint::max_udp_payload(const SocketAddress &remote) const {
  // Loopback carries 64 KB datagrams (the biggest single lever measured);
  // real links get a payload that fits a 1500-byte MTU without fragmenting.
  if (remote.is_loopback()) return 65000;
  return link_udp_payload(remote);
}

size_t QuicEndpoint::link_udp_payload(const SocketAddress &remote) {
  return remote.family() == AF_INET6 ? 1452 : 1472;
}

void QuicEndpoint::route(const ngtcp2_cid &cid, QuicConnection *c) {
  routes_.insert_or_assign(std::string(cid_key(cid.data, cid.datalen)), c);
}

void QuicEndpoint::unroute(const ngtcp2_cid &cid) {
  auto it = routes_.find(cid_key(cid.data, cid.datalen));
  if (it != routes_.end()) routes_.erase(it);
}

Status QuicEndpoint::connect(const SocketAddress &remote, uint32_t peer_rank,
                             QuicConnection **out) {
  auto c = std::make_unique<QuicConnection>(this, handler_, true, peer_rank);
  Status s = c->init_client(remote);
  if (!s) return s;
  *out = c.get();
  conns_.push_back(std::move(c));
  return {};
}

void QuicEndpoint::mark_dirty(QuicConnection *c) {
  if (c->write_queued()) return;
  c->set_write_queued(true);
  dirty_.push_back(c);
}

void QuicEndpoint::retire(QuicConnection *c) {
  end_pending_handshake(c);
  if (c->write_queued()) {
    c->set_write_queued(false);
    std::erase(dirty_, c);
  }
  for (auto it = conns_.begin(); it != conns_.end(); ++it) {
    if (it->get() == c) {
      retired_.push_back(std::move(*it));
      conns_.erase(it);
      return;
    }
  }
}

void QuicEndpoint::shutdown(const Status &why) {
  if (shut_down_) return;
  shut_down_ = true;
  // close() retires the connection (moves it out of conns_): use a snapshot.
  std::vector<QuicConnection *> all;
  for (auto &c : conns_)
    all.push_back(c.get());
  for (QuicConnection *c : all)
    c->close(0, why);

  flush_pending();
  if (reading_) {
    loop_->unwatch_socket();
    reading_ = false;
  }
}

void QuicEndpoint::read_socket() {
  for (size_t batch = 0; batch < kMaxReadBatches; ++batch) {
    const size_t got = socket_.receive_batch(rx_);
    ++stats_.socket_reads;
    if (got == 0) {
      ++stats_.empty_socket_reads;
      return;
    }
    loop_->note_activity();
    const uint64_t ts = now_ns();  // one clock read per batch
    for (const auto &d : rx_) {
      for (size_t off = 0; off < d.len; off += d.segment_size) {
        size_t len = std::min(d.segment_size, d.len - off);
        handle_datagram(d.from, d.data + off, len, ts);
      }
    }
    // A short batch emptied the queue. The socket is watched level-triggered,
    // so anything that arrives later wakes the loop again: asking now would
    // be a wasted recvmmsg on every wake-up.
    if (got < UdpSocket::kMaxBatch) return;
  }
}

void QuicEndpoint::handle_datagram(const SocketAddress &from, const uint8_t *data, size_t len,
                                   uint64_t ts) {
  ngtcp2_version_cid vc;
  int rc = ngtcp2_pkt_decode_version_cid(&vc, data, len, kScidLen);
  if (rc != 0) return;  // not QUIC, or a version we do not speak: drop
  auto it = routes_.find(cid_key(vc.dcid, vc.dcidlen));
  if (it != routes_.end()) {
    QuicConnection *c = it->second;
    if (!c->read_packet(from, data, len, ts)) retire(c);
    return;
  }
  if (shut_down_) return;
  accept_initial(from, data, len, ts);
}

void QuicEndpoint::accept_initial(const SocketAddress &from, const uint8_t *data, size_t len,
                                  uint64_t ts) {
  ngtcp2_pkt_hd hd;
  if (ngtcp2_accept(&hd, data, len) != 0) return;  // not an acceptable client Initial
  // 0-RTT ahead of its Initial: nexar never sends early data.
  if (hd.type != NGTCP2_PKT_INITIAL) return;
  ngtcp2_cid odcid;
  const bool retried = hd.token.len > 0 && hd.token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY;
  if (retried && ngtcp2_crypto_verify_retry_token(
                     &odcid, hd.token.base, hd.token.len, secret_, sizeof secret_, hd.version,
                     from.sa(), from.len, &hd.dcid, kRetryTokenLifetimeMs * kNsPerMs, ts) != 0) {
    refuse_token(from, hd);
    return;
  }
  if (pending_handshakes_ >= kMaxPendingHandshakes) {
    ++stats_.initials_dropped;
    if (drop_log_.due(ts))
      LOG_WARN(
          "%zu handshakes are in progress on %s: dropping new connections (from %s and "
          "others; %llu so far) until some finish, their clients retransmit",
          pending_handshakes_, local().to_string().c_str(), from.to_string().c_str(),
          static_cast<unsigned long long>(stats_.initials_dropped));
    return;
  }
  if (!retried && pending_handshakes_ >= kRetryAbove) {
    if (retry_log_.due(ts))
      LOG_INFO(
          "%zu handshakes are in progress on %s: new clients prove their address with a "
          "QUIC Retry first (%llu sent so far)",
          pending_handshakes_, local().to_string().c_str(),
          static_cast<unsigned long long>(stats_.retries_sent + 1));
    send_retry(from, hd, ts);
    return;
  }
  auto c = std::make_unique<QuicConnection>(this, handler_, false, UINT32_MAX);
  Status s = c->init_server(from, hd, retried ? &odcid : nullptr);
  if (!s) {
    LOG_WARN("cannot accept a connection from %s: %s", from.to_string().c_str(), s.message.c_str());
    return;
  }
  if (retried) LOG_DEBUG("%s proved its address with a Retry", from.to_string().c_str());
  QuicConnection *raw = c.get();
  raw->set_handshake_pending(true);
  ++pending_handshakes_;
  conns_.push_back(std::move(c));
  if (!raw->read_packet(from, data, len, ts)) retire(raw);
}

void QuicEndpoint::send_retry(const SocketAddress &to, const ngtcp2_pkt_hd &hd, uint64_t ts) {
  ngtcp2_cid retry_scid;
  retry_scid.datalen = kScidLen;
  gnutls_rnd(GNUTLS_RND_NONCE, retry_scid.data, kScidLen);
  uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN];
  const ngtcp2_ssize token_len = ngtcp2_crypto_generate_retry_token(
      token, secret_, sizeof secret_, hd.version, to.sa(), to.len, &retry_scid, &hd.dcid, ts);
  if (token_len < 0) return;
  uint8_t packet[256];
  const ngtcp2_ssize n =
      ngtcp2_crypto_write_retry(packet, sizeof packet, hd.version, &hd.scid, &retry_scid, &hd.dcid,
                                token, static_cast<size_t>(token_len));
  if (n < 0) return;
  ++stats_.retries_sent;
  send_stateless(to, packet, static_cast<size_t>(n));
}

void QuicEndpoint::refuse_token(const SocketAddress &to, const ngtcp2_pkt_hd &hd) {
  // RFC 9000 section 8.1.2: an invalid Retry token (expired, or minted for
  // another address) closes the attempt at once instead of leaving the client
  // to time out.
  LOG_DEBUG("refusing a connection from %s: its Retry token is invalid or expired",
            to.to_string().c_str());
  uint8_t packet[1280];
  const ngtcp2_ssize n = ngtcp2_crypto_write_connection_close(
      packet, sizeof packet, hd.version, &hd.scid, &hd.dcid, NGTCP2_INVALID_TOKEN, nullptr, 0);
  if (n < 0) return;
  send_stateless(to, packet, static_cast<size_t>(n));
}

void QuicEndpoint::send_stateless(const SocketAddress &to, const uint8_t *packet, size_t size) {
  // Now or not at all: queued behind a full socket (transmit), a flood's
  // answers would grow pending_ without bound. The client retransmits.
  size_t sent = 0;
  if (pending_.empty()) socket_.send_packets(to, packet, &size, 1, &sent);
}

void QuicEndpoint::end_pending_handshake(QuicConnection *c) {
  if (!c->handshake_pending()) return;
  c->set_handshake_pending(false);
  --pending_handshakes_;
}

void QuicEndpoint::transmit(const SocketAddress &to, const uint8_t *buf, const size_t *sizes,
                            size_t n) {
  size_t sent = 0;
  if (pending_.empty() && socket_.send_packets(to, buf, sizes, n, &sent)) return;
  // The socket is full: keep the rest (ngtcp2 considers them sent) and send
  // them when it becomes writable.
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i >= sent) pending_.push_back({to, std::vector<uint8_t>(buf + off, buf + off + sizes[i])});
    off += sizes[i];
  }
  if (reading_) loop_->rewatch_socket(EV_READ | EV_WRITE);
}

void QuicEndpoint::flush_pending() {
  size_t i = 0;
  for (; i < pending_.size(); ++i) {
    size_t sz = pending_[i].bytes.size(), sent = 0;
    if (!socket_.send_packets(pending_[i].to, pending_[i].bytes.data(), &sz, 1, &sent)) break;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(i));
  if (pending_.empty() && reading_) loop_->rewatch_socket(EV_READ);
}

bool QuicEndpoint::flush() {
  retired_.clear();                     // no connection callback is on the stack here
  if (!pending_.empty()) return false;  // wait for EV_WRITE
  bool more = false;
  flushing_.swap(dirty_);
  for (size_t i = 0; i < flushing_.size(); ++i) {
    QuicConnection *c = flushing_[i];
    if (!c->write_queued()) continue;  // retired meanwhile
    c->set_write_queued(false);
    if (c->closed()) continue;
    if (c->write()) {
      more = true;
      mark_dirty(c);
    }
    if (!pending_.empty()) {
      // Socket full: the others (still queued, unless retired) wait for
      // EV_WRITE.
      for (size_t j = i + 1; j < flushing_.size(); ++j)
        if (flushing_[j]->write_queued()) dirty_.push_back(flushing_[j]);
      break;
    }
  }
  flushing_.clear();
  return more;
}

}  // namespace nexar
