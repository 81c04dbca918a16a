#include "client/engine.h"

#include <chrono>
#include <thread>

#include "client/communicator.h"
#include "core/clock.h"
#include "core/host.h"
#include "core/log.h"
#include "transport/packet_cipher.h"

namespace nexar {
namespace {
// Longer than max_ack_delay plus the loop's timer granularity (1 ms).
constexpr uint64_t kAckLingerMs = 3;
constexpr uint16_t kProtocolVersion = 1;

}  // namespace

Engine::Engine(Identity id, Config cfg, std::shared_ptr<TlsCredentials> creds)
    : id_(id),
      cfg_(std::move(cfg)),
      creds_(std::move(creds)),
      pool_(BufferPool::create(cfg_.pool_profile == NEXAR_POOL_INFERENCE ? PoolProfile::Inference
                                                                         : PoolProfile::Training)),
      loop_(static_cast<int32_t>(id.rank)),
      mailbox_(std::make_unique<Mailbox>(pool_)),
      rpc_(std::make_unique<rpc::RpcHub>(*this)),
      topo_(cfg_.topology, id.world_size),
      relay_(std::make_unique<Relay>(*this)),
      peers_(id.world_size) {
  loop_.set_spin_us(cfg_.spin_us);
  endpoint_ = std::make_unique<QuicEndpoint>(&loop_, this, id_.cluster_id, creds_,
                                             cfg_.heartbeat_timeout_ms, cfg_.connect_timeout_ms,
                                             cfg_.heartbeat_interval_ms);
  // A peer's frame for a collective already over here, with another check:
  // tell everyone (ranks still waiting in that collective then fail with
  // NEXAR_ERR_MISMATCH instead of timing out).
  mailbox_->on_late_mismatch = [this](uint64_t comm_id, uint64_t seq, uint32_t peer) {
    auto it = comms_.find(comm_id);
    if (it == comms_.end()) return;
    for (Communicator *comm : std::vector<Communicator *>(it->second))
      comm->announce_mismatch(seq, format("rank %u found that rank %d issued a different "
                                          "collective",
                                          comm->rank(), comm->rank_of_world(peer)));
  };
}

Engine::~Engine() {
  shutdown();
  // The loop thread has stopped: tear down on this thread in dependency order.
  endpoint_.reset();
  relay_.reset();
  rpc_.reset();
  mailbox_.reset();
}

Status Engine::start(const SocketAddress &bind_addr) {
  return start_threads(endpoint_->open(bind_addr));
}

Status Engine::start_on(int bound_fd) {
  return start_threads(endpoint_->adopt(bound_fd));
}

Status Engine::start_threads(const Status &socket) {
  if (!socket) return socket;
  address_ = endpoint_->local();
  completions_ = std::make_unique<CompletionThread>();
  loop_.start();
  return {};
}

void Engine::fail_mesh(const Status &why) {
  std::lock_guard<std::mutex> g(mesh_mu_);
  if (mesh_error_.ok()) mesh_error_ = why;
  mesh_cv_.notify_all();
}

void Engine::close_connections() {
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
      pending = connected && endpoint_->has_unacked();
    });
    const uint64_t now = now_ns();
    if (!connected || (!pending && now >= linger) || now >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  loop_.run_sync([this] {
    if (shut_down_) return;
    shut_down_ = true;
    endpoint_->shutdown(error(NEXAR_ERR_CLOSED, format("rank %u shut down", id_.rank)));
  });
}

void Engine::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  close_connections();
  loop_.stop();
  completions_.reset();
}

Status Engine::start_mesh(const std::vector<SocketAddress> &peer_addrs) {
  if (id_.world_size == 1) return {};
  Status start_error;
  loop_.run_sync([&] {
    for (uint32_t r = 0; r < id_.world_size; ++r)
      peers_[r].addr = peer_addrs[r];
    // The higher rank connects: every pair of neighbours has exactly one
    // connection.
    for (uint32_t r = 0; r < id_.rank && start_error.ok(); ++r) {
      if (!direct(r)) continue;
      QuicConnection *c = nullptr;
      Status s = endpoint_->connect(peers_[r].addr, r, &c);
      if (!s)
        start_error = error(s.code,
                            format("connecting to rank %u at %s: %s", r,
                                   peers_[r].addr.to_string().c_str(), s.message.c_str()),
                            static_cast<int32_t>(r));
      else
        peers_[r].conn = c;
    }
  });
  return start_error;
}

Status Engine::wait_mesh() {
  if (id_.world_size == 1) return {};
  std::unique_lock<std::mutex> g(mesh_mu_);
  const bool done = mesh_cv_.wait_for(g, std::chrono::milliseconds(cfg_.connect_timeout_ms), [&] {
    return ready_peers_ == topo_.neighbours(id_.rank).size() || !mesh_error_.ok();
  });
  if (!mesh_error_.ok()) return mesh_error_;
  if (!done) {
    g.unlock();
    std::string missing;
    loop_.run_sync([&] {
      for (uint32_t r = 0; r < id_.world_size; ++r)
        if (direct(r) && !peers_[r].ready)
          missing += (missing.empty() ? "" : ",") + std::to_string(r);
    });
    return error(NEXAR_ERR_TIMEOUT,
                 format("rank %u: mesh formation timed out after %llu ms; no hello from rank(s) %s",
                        id_.rank, static_cast<unsigned long long>(cfg_.connect_timeout_ms),
                        missing.c_str()));
  }
  LOG_DEBUG("mesh formed with %zu neighbours (%s topology; packets sealed by %s)",
            topo_.neighbours(id_.rank).size(), topology_name(topo_.kind()),
            PacketCipher::implementation());
  return {};
}

void Engine::stats(nexar_stats_t *out) {
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
    out->rpc_requests_served = rpc_->requests_served();
    out->rpc_responses_dropped = rpc_->responses_dropped();
    out->relay_bytes_sent = relay_->bytes_sent();
    out->relay_bytes_forwarded = relay_->bytes_forwarded();
    out->relay_frames_dropped = relay_->frames_dropped();
    out->relay_bytes_held = relay_->bytes_held();
    out->packets_fast_aead = t.packets_fast_aead;
    out->bytes_opened_in_place = t.bytes_opened_in_place;
    out->bytes_sealed_in_place = t.bytes_sealed_in_place;
  });
}

TransportStats Engine::transport_stats() {
  TransportStats t;
  loop_.run_sync([&] { t = endpoint_->stats(); });
  return t;
}

bool Engine::forming(uint32_t world_rank) const {
  return direct(world_rank) && !shut_down_ && !peers_[world_rank].ready &&
         !mailbox_->peer_failure(world_rank);
}

QuicConnection *Engine::conn_to(uint32_t world_rank) const {
  if (world_rank >= peers_.size()) return nullptr;
  const Peer &p = peers_[world_rank];
  return p.ready && p.conn && !p.conn->closed() ? p.conn : nullptr;
}

void Engine::send_control(uint32_t world_rank, const wire::ControlMessage &m) {
  if (world_rank < peers_.size() && !direct(world_rank) && world_rank != id_.rank)
    relay_->send_control(world_rank, wire::encode_control(m));
  else if (world_rank < peers_.size() && peers_[world_rank].conn)
    send_control_on(peers_[world_rank].conn, m);
}

bool Engine::send_owned(uint32_t world_rank, OutgoingMessage msg, uint64_t key) {
  if (direct(world_rank)) {
    QuicConnection *c = conn_to(world_rank);
    if (!c) return false;
    c->send(std::move(msg), false, key);
    return true;
  }
  QuicConnection *c = relay_->route(world_rank, nullptr);
  if (!c) return false;
  relay_->send(c, world_rank, msg.header, msg.payload, nullptr, 0, nullptr);
  return true;
}

MessageSink *Engine::deliver_relayed(uint32_t origin, QuicConnection *c, int64_t stream_id,
                                     const wire::FrameHeader &inner) {
  if (inner.kind == wire::FrameKind::RpcRequest)
    return rpc_->on_request(origin, c, stream_id, inner);
  if (inner.kind == wire::FrameKind::RpcResponse) return rpc_->on_response(origin, inner);
  MsgKey key{origin, static_cast<uint8_t>(inner.kind), inner.comm_id, inner.tag};
  return mailbox_->on_message(key, inner.length, inner.check, c, stream_id);
}

void Engine::on_relayed_control(uint32_t origin, std::span<const uint8_t> message) {
  wire::DecodeResult r = wire::decode_control(message);
  if (!r) {
    LOG_WARN("relay: malformed control message from rank %u dropped: %s", origin, r.error.c_str());
    return;
  }
  if (const auto *a = std::get_if<wire::Abort>(&*r.message))
    handle_comm_notice(origin, *a);
  else if (const auto *m = std::get_if<wire::CollectiveMismatch>(&*r.message))
    handle_comm_notice(origin, *m);
  else
    LOG_WARN("relay: rank %u relayed a control message that only travels directly; dropped",
             origin);
}

void Engine::fail_unreachable(uint32_t world_rank, const Status &s) {
  if (shut_down_ || mailbox_->peer_failure(world_rank)) return;
  LOG_INFO("%s", s.message.c_str());
  fail_peer(world_rank, s);
}

void Engine::fail_peer(uint32_t world_rank, const Status &s) {
  mailbox_->fail_peer(world_rank, s);
  rpc_->fail_peer(world_rank, s);
  for (auto &[id, list] : comms_)
    for (Communicator *comm : std::vector<Communicator *>(list))
      comm->on_remote_failure(s);
}

void Engine::send_control_on(QuicConnection *c, const wire::ControlMessage &m) {
  c->send_control(m);
}

void Engine::register_comm(Communicator *c) {
  comms_[c->comm_id()].push_back(c);
  // Notices that arrived before this rank finished creating the communicator
  // (a faster peer already used it) are delivered now.
  auto it = early_notices_.find(c->comm_id());
  if (it == early_notices_.end()) return;
  auto notices = std::move(it->second);
  early_notices_.erase(it);
  for (auto &[from, m] : notices)
    handle_comm_notice(from, m);
}

void Engine::unregister_comm(Communicator *c) {
  rpc_->drop_comm(c);
  auto it = comms_.find(c->comm_id());
  if (it == comms_.end()) return;
  auto &v = it->second;
  v.erase(std::remove(v.begin(), v.end(), c), v.end());
  if (v.empty()) comms_.erase(it);
}

Communicator *Engine::comm_by_id(uint64_t comm_id) const {
  auto it = comms_.find(comm_id);
  return it == comms_.end() || it->second.empty() ? nullptr : it->second.front();
}

void Engine::on_handshake_done(QuicConnection *c, const NodeIdentity &peer) {
  if (peer.rank >= id_.world_size || peer.rank == id_.rank) {
    c->close(1, error(NEXAR_ERR_AUTH, format("certificate names rank %u, outside this world of %u",
                                             peer.rank, id_.world_size)));
    return;
  }
  // The client speaks first; the server answers once the hello matches the
  // rank its certificate names.
  if (peers_[peer.rank].conn == c) {
    send_control_on(
        c, wire::Hello{kProtocolVersion, id_.cluster_id, id_.rank, id_.world_size, host_name()});
  }
}

void Engine::handle_hello(QuicConnection *c, const wire::Hello &h) {
  const uint32_t cert_rank = c->expected_peer_rank();
  Status s;
  if (h.protocol_version != kProtocolVersion)
    s = error(NEXAR_ERR_PROTOCOL, format("rank %u speaks protocol %u, this node %u", h.rank,
                                         h.protocol_version, kProtocolVersion));
  else if (h.rank != cert_rank)
    s = error(NEXAR_ERR_AUTH,
              format("peer claims rank %u but its certificate names rank %u", h.rank, cert_rank));
  else if (h.cluster_id != id_.cluster_id || h.world_size != id_.world_size)
    s = error(NEXAR_ERR_AUTH, format("rank %u belongs to another cluster or world size (%u)",
                                     h.rank, h.world_size));
  else if (!direct(h.rank))
    s = error(NEXAR_ERR_PROTOCOL, format("rank %u is not a neighbour of rank %u in the %s topology",
                                         h.rank, id_.rank, topology_name(topo_.kind())));
  else if (h.rank <= id_.rank)
    s = error(NEXAR_ERR_PROTOCOL,
              format("rank %u connected to rank %u; lower ranks never connect", h.rank, id_.rank));
  else if (peers_[h.rank].conn && peers_[h.rank].conn != c)
    s = error(NEXAR_ERR_AUTH, format("a second connection claims rank %u", h.rank));
  if (!s) {
    LOG_WARN("refusing mesh connection from %s: %s", c->remote().to_string().c_str(),
             s.message.c_str());
    c->close(1, s);
    return;
  }
  peers_[h.rank].conn = c;
  send_control_on(c, wire::HelloAck{id_.rank});
  peer_ready(h.rank, c);
}

void Engine::peer_ready(uint32_t rank, QuicConnection *c) {
  if (peers_[rank].ready) return;
  peers_[rank].conn = c;
  peers_[rank].ready = true;
  LOG_DEBUG("rank %u ready at %s", rank, c->remote().to_string().c_str());
  relay_->on_neighbour_ready(rank);
  std::lock_guard<std::mutex> g(mesh_mu_);
  ++ready_peers_;
  mesh_cv_.notify_all();
}

void Engine::on_control(QuicConnection *c, std::span<const uint8_t> message) {
  wire::DecodeResult r = wire::decode_control(message);
  if (!r) {
    c->close(1, error(NEXAR_ERR_PROTOCOL, format("malformed control message from rank %u: %s",
                                                 c->expected_peer_rank(), r.error.c_str())));
    return;
  }
  const uint32_t from = c->expected_peer_rank();
  std::visit(
      [&](const auto &m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, wire::Hello>) {
          handle_hello(c, m);
        } else if constexpr (std::is_same_v<T, wire::HelloAck>) {
          if (peers_[from].conn == c && m.rank == from) peer_ready(from, c);
        } else if constexpr (std::is_same_v<T, wire::Abort> ||
                             std::is_same_v<T, wire::CollectiveMismatch>) {
          handle_comm_notice(from, m);
        } else if constexpr (std::is_same_v<T, wire::Goodbye>) {
          LOG_DEBUG("rank %u said goodbye", from);
        } else {
          // Heartbeats and the rest carry nothing this engine acts on yet.
        }
      },
      *r.message);
}

void Engine::handle_comm_notice(uint32_t from, const CommNotice &notice) {
  const uint64_t comm_id = std::visit([](const auto &m) { return m.comm_id; }, notice);
  auto it = comms_.find(comm_id);
  if (it == comms_.end()) {
    // Bounded: a handful of notices for communicators being created.
    auto &pending = early_notices_[comm_id];
    if (early_notices_.size() <= 64 && pending.size() < 64) pending.emplace_back(from, notice);
    return;
  }
  for (Communicator *comm : std::vector<Communicator *>(it->second)) {
    // The sender's rank in this communicator, for the error report.
    const int32_t rank = comm->rank_of_world(from);
    if (const auto *a = std::get_if<wire::Abort>(&notice)) {
      comm->on_remote_failure(
          error(NEXAR_ERR_ABORTED,
                format("rank %d aborted the communicator: %s", rank, a->reason.c_str()), rank));
    } else {
      const auto &m = std::get<wire::CollectiveMismatch>(notice);
      comm->on_collective_mismatch(
          m.op_seq, error(NEXAR_ERR_MISMATCH,
                          format("collective #%llu: ranks issued different collectives "
                                 "(reported by rank %d: %s)",
                                 static_cast<unsigned long long>(m.op_seq), rank, m.detail.c_str()),
                          rank));
    }
  }
}

MessageSink *Engine::on_message(QuicConnection *c, int64_t stream_id, const wire::FrameHeader &h) {
  const uint32_t from = c->expected_peer_rank();
  if (h.kind == wire::FrameKind::Relay) return relay_->on_frame(c, stream_id, h);
  if (h.kind == wire::FrameKind::RpcRequest) return rpc_->on_request(from, c, stream_id, h);
  if (h.kind == wire::FrameKind::RpcResponse) return rpc_->on_response(from, h);
  MsgKey key{from, static_cast<uint8_t>(h.kind), h.comm_id, h.tag};
  return mailbox_->on_message(key, h.length, h.check, c, stream_id);
}

void Engine::on_closed(QuicConnection *c, const Status &why) {
  mailbox_->forget_connection(c);
  rpc_->forget_connection(c);

  for (uint32_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].conn != c) continue;
    peers_[r].conn = nullptr;
    Status s = why;
    if (s.failed_rank < 0) s.failed_rank = static_cast<int32_t>(r);
    const bool was_ready = peers_[r].ready;
    peers_[r].ready = false;
    if (!shut_down_) {
      if (was_ready && s.code == NEXAR_ERR_PEER_FAILED &&
          s.message.find("closed the connection") != std::string::npos)
        LOG_INFO("rank %u left: %s", r, s.message.c_str());
      else if (was_ready)
        LOG_WARN("lost rank %u: %s", r, s.message.c_str());
      fail_peer(r, s);
      // Relayed waits through it, and ranks only reachable through it.
      relay_->on_neighbour_lost(r, c, s);
      if (!was_ready) {
        std::lock_guard<std::mutex> g(mesh_mu_);
        if (mesh_error_.ok())
          mesh_error_ = error(why.code,
                              format("rank %u: connection to rank %u failed during "
                                     "formation: %s",
                                     id_.rank, r, why.message.c_str()),
                              static_cast<int32_t>(r));
        mesh_cv_.notify_all();
      }
    }
  }
  endpoint_->retire(c);
}

}  // namespace nexar
