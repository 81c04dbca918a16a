#include "client/client.h"

#include <chrono>
#include <thread>

#include "client/communicator.h"
#include "client/failure_notice.h"
#include "core/clock.h"
#include "core/log.h"

namespace nexar {
namespace {
// Longer than max_ack_delay plus the loop's timer granularity (1 ms).
constexpr uint64_t kAckLingerMs = 3;
}  // namespace

Client::Client(Identity id, Config cfg, std::shared_ptr<TlsCredentials> creds)
    : id_(id),
      cfg_(std::move(cfg)),
      creds_(std::move(creds)),
      pool_(BufferPool::create(cfg_.pool_profile == NEXAR_POOL_INFERENCE ? PoolProfile::Inference
                                                                         : PoolProfile::Training)),
      loop_(static_cast<int32_t>(id.rank), "nexar-io r" + std::to_string(id.rank)),
      mailbox_(std::make_unique<Mailbox>(pool_, liveness_)),
      topo_(cfg_, id.world_size),
      relay_(std::make_unique<Relay>(*this)) {
  peers_.reserve(id.world_size);
  for (uint32_t r = 0; r < id.world_size; ++r)
    peers_.emplace_back(*this, r, topo_.is_neighbour(id.rank, r));
  loop_.set_spin_us(cfg_.spin_us);
  endpoint_ = std::make_unique<QuicEndpoint>(&loop_, &router_, id_.cluster_id, creds_,
                                             cfg_.heartbeat_timeout_ms, cfg_.connect_timeout_ms,
                                             cfg_.heartbeat_interval_ms);
  shm_ = std::make_unique<ShmHost>(*this);
}

Client::~Client() {
  shutdown();
  // The loop thread has stopped: tear down on this thread in dependency order.
  shm_.reset();
  endpoint_.reset();
  relay_.reset();
  rpc_.reset();
  mailbox_.reset();
}

Status Client::start(const SocketAddress &bind_addr) {
  return start_threads(endpoint_->open(bind_addr));
}

Status Client::start_on(int bound_fd) {
  return start_threads(endpoint_->adopt(bound_fd));
}

Status Client::start_threads(const Status &socket) {
  if (!socket) return socket;
  shm_->start();
  address_ = endpoint_->local();
  completions_ = std::make_unique<CompletionThread>();
  loop_.start();
  loop_.run_sync([this] { stall_.start(); });
  return {};
}

void Client::close_connections() {
  // Let what was already sent reach the peers first: a rank that destroys its
  // communicator right after a barrier must not cut off the barrier's last
  // messages. Bounded: a dead peer is cut off after a short grace period.
  // Linger a little even then: QUIC delays its acknowledgements (by up to
  // max_ack_delay, 1 ms), and a peer whose last send we received but have
  // not acknowledged yet would see that send fail when our close arrives.
  // Without connections (a world of one, or already shut down) there is
  // nothing to wait for.
  const uint64_t start = now_ns();
  const uint64_t linger = start + kAckLingerMs * kNsPerMs;
  const uint64_t deadline = start + std::min<uint64_t>(2000, cfg_.heartbeat_timeout_ms) * kNsPerMs;
  for (;;) {
    bool connected = false, pending = false;
    loop_.run_sync([&] {
      connected = !shut_down_ && endpoint_->connections() > 0;
      pending = connected && (endpoint_->has_unacked() || shm_->has_queued());
    });
    const uint64_t now = now_ns();
    if (!connected || (!pending && now >= linger) || now >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  loop_.run_sync([this] {
    if (shut_down_) return;
    shut_down_ = true;
    shm_->leave_all(error(NEXAR_ERR_CLOSED, format("rank %u shut down", id_.rank)));
    endpoint_->shutdown(error(NEXAR_ERR_CLOSED, format("rank %u shut down", id_.rank)));
  });
}

void Client::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  close_connections();
  loop_.stop();
  completions_.reset();
}

void Client::stats(nexar_stats_t *out) {
  loop_.run_sync([&] {
    const TransportStats &t = endpoint_->stats();
    out->bytes_sent = t.bytes_sent;
    out->bytes_received = t.bytes_received;
    out->messages_sent = t.messages_sent;
    out->messages_received = t.messages_received;
    out->streams_opened = t.streams_opened;
    out->streams_accepted = t.streams_accepted;
    out->pending_tags = mailbox_->keys();
    out->unexpected_bytes = mailbox_->buffered_bytes();
    out->connections = endpoint_->connections();
    if (rpc_) rpc_->add_stats(out);
    out->relay_bytes_sent = relay_->bytes_sent();
    out->relay_bytes_forwarded = relay_->bytes_forwarded();
    out->relay_frames_dropped = relay_->frames_dropped();
    out->relay_bytes_held = relay_->bytes_held();
    out->packets_fast_aead = t.packets_fast_aead;
    out->bytes_opened_in_place = t.bytes_opened_in_place;
    out->bytes_sealed_in_place = t.bytes_sealed_in_place;
    shm_->add_stats(out);
    out->connections_refused = t.connections_refused;
    out->protocol_violations = t.protocol_violations;
  });
}

TransportStats Client::transport_stats() {
  TransportStats t;
  loop_.run_sync([&] { t = endpoint_->stats(); });
  return t;
}

void Client::send_control(uint32_t world_rank, const wire::ControlMessage &m) {
  if (world_rank < peers_.size() && world_rank != id_.rank) peers_[world_rank].send_control(m);
}

void Client::fail_unreachable(uint32_t world_rank, const Status &s) {
  if (shut_down_ || liveness_.failure(world_rank)) return;
  LOG_INFO("%s", s.message.c_str());
  fail_peer(world_rank, s);
}

bool Client::fail_peer(uint32_t world_rank, const Status &s) {
  const bool first = liveness_.mark_failed(world_rank, s);
  relay_->on_rank_lost(world_rank, s);  // sparse meshes: routes go round it
  mailbox_->fail_peer(world_rank, s);
  if (rpc_) rpc_->fail_peer(world_rank, s);
  if (first) comms_.peer_failed(world_rank, s);
  return first;
}

void Client::on_stalled(uint64_t gap_ms) {
  exclude_self(
      format("rank %u did not run for %llu ms (frozen?), longer than the heartbeat "
             "timeout: the other ranks declared it failed",
             id_.rank, static_cast<unsigned long long>(gap_ms)));
}

void Client::exclude_self(const std::string &why) {
  if (excluded_) return;
  excluded_ = true;
  const Status s = error(NEXAR_ERR_EXCLUDED, why, static_cast<int32_t>(id_.rank));
  LOG_WARN("%s", s.message.c_str());
  comms_.excluded(s);
}

bool Client::lost_as_failed(const QuicConnection *c, std::string *why) {
  const uint32_t peer = c->expected_peer_rank();
  if (c->close_cause() == QuicConnection::CloseCause::PeerClosed) {
    if (!c->closed_as_failed_by_peer()) return false;
    *why = format(
        "rank %u closed its connection to rank %u because the other ranks declared "
        "rank %u failed",
        peer, id_.rank, id_.rank);
    return true;
  }
  if (c->close_cause() != QuicConnection::CloseCause::IdleTimeout) return false;
  if (stall_.stalled()) return true;  // exclude_self ran already
  // A freeze shorter than the heartbeat timeout can still have outlasted the
  // peer's patience (the peer last heard of this rank before the freeze).
  // When most of the silence fell while this engine stood still, the
  // silence was this rank's, not the peer's.
  const uint64_t idle = c->idle_timeout_ns();
  const uint64_t still = stall_.still_within(idle);
  if (still * 2 < idle) return false;
  *why = format(
      "rank %u did not run for %.1f s of the %.1f s in which it heard nothing from "
      "rank %u (frozen?): the other ranks declared it failed",
      id_.rank, static_cast<double>(still) / 1e9, static_cast<double>(idle) / 1e9, peer);
  return true;
}

void Client::unregister_comm(Communicator *c) {
  if (rpc_) rpc_->drop_comm(c);
  comms_.remove(c);
}

Status Client::dial(uint32_t world_rank, const SocketAddress &addr) {
  QuicConnection *c = nullptr;
  Status s = endpoint_->connect(addr, world_rank, &c);
  if (s) peers_[world_rank].attach(c);
  return s;
}

void Client::set_formation_observer(FormationObserver *o) {
  formation_ = o;
  notify_formation();
}

void Client::notify_formation() {
  if (formation_) formation_->on_peers_changed();
}

void Client::peer_ready(uint32_t world_rank, QuicConnection *c) {
  PeerConnection &p = peers_[world_rank];
  p.attach(c);
  if (!p.set_ready()) return;
  LOG_DEBUG("rank %u ready at %s", world_rank, c->remote().to_string().c_str());
  ++ready_neighbours_;
  relay_->on_neighbour_ready(world_rank);
  notify_formation();
}

void Client::connection_closed(QuicConnection *c, const Status &why) {
  mailbox_->forget_connection(c);
  if (rpc_) rpc_->forget_connection(c);
  if (c->expected_peer_rank() < peers_.size() && peers_[c->expected_peer_rank()].connection() == c)
    shm_->on_connection_lost(c->expected_peer_rank());

  for (PeerConnection &p : peers_) {
    if (p.connection() != c) continue;
    const uint32_t r = p.rank();
    Status s = why;
    if (s.failed_rank < 0) s.failed_rank = static_cast<int32_t>(r);
    const bool was_ready = p.detach();
    if (shut_down_) continue;
    if (!was_ready && c->is_client() && c->refused_other_world() != 0 && formation_ &&
        formation_->redial_in_other_world(r))
      continue;
    // Declared failed here: its same-host channel says so too, or a frozen
    // peer would read the goodbye of this rank's exit as this rank leaving.
    if (c->closed_as_failed_here()) shm_->cut_off(r, s);
    // Silence on every side after this process was frozen, or a peer that
    // says so: the peers declared it failed, not the other way round. First,
    // so that its pending operations fail as excluded, not as a lost peer.
    std::string excluded_why;
    const bool excluded = lost_as_failed(c, &excluded_why);
    if (excluded && !excluded_why.empty()) exclude_self(excluded_why);
    if (was_ready && c->close_cause() == QuicConnection::CloseCause::PeerClosed)
      LOG_INFO("rank %u left: %s", r, s.message.c_str());
    else if (was_ready)
      LOG_WARN("lost rank %u: %s", r, s.message.c_str());
    // A peer that closed told everyone itself; one found dead here is
    // announced, so that every survivor names it.
    if (fail_peer(r, s) && was_ready && !excluded &&
        c->close_cause() != QuicConnection::CloseCause::PeerClosed)
      announce_failure(*this, r, s);
    // Relayed waits through it, and ranks only reachable through it.
    relay_->on_neighbour_lost(r, c, s);
    if (!was_ready) {
      if (formation_failure_.ok())
        formation_failure_ = error(why.code,
                                   format("rank %u: connection to rank %u failed during "
                                          "formation: %s",
                                          id_.rank, r, why.message.c_str()),
                                   static_cast<int32_t>(r));
      notify_formation();
    }
  }
  endpoint_->retire(c);
}

void Client::fail_formation(const Status &s) {
  if (formation_failure_.ok()) formation_failure_ = s;
  notify_formation();
}

void Client::shm_peer_lost(uint32_t world_rank, const Status &why, bool left) {
  if (shut_down_ || liveness_.failure(world_rank)) return;
  if (why.code == NEXAR_ERR_EXCLUDED) {
    // As over QUIC: first, so that pending operations fail as excluded.
    exclude_self(format("rank %u: %s", id_.rank, why.message.c_str()));
    fail_peer(world_rank,
              error(NEXAR_ERR_PEER_FAILED, format("rank %u cut rank %u off", world_rank, id_.rank),
                    static_cast<int32_t>(world_rank)));
    return;
  }
  if (left)
    LOG_INFO("rank %u left: %s", world_rank, why.message.c_str());
  else
    LOG_WARN("lost rank %u: %s", world_rank, why.message.c_str());
  // A death seen here is announced (a peer that left told everyone itself),
  // so that every survivor names it, also those on other hosts.
  if (fail_peer(world_rank, why) && !left) announce_failure(*this, world_rank, why);
}

}  // namespace nexar
