// Engine: everything one rank runs: the event loop thread, the QUIC endpoint
// and its connections to every peer, the mailbox, and the completion thread.
// Communicators derived from one another share their engine.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/mailbox.h"
#include "client/relay.h"
#include "cluster/topology.h"
#include "core/buffer_pool.h"
#include "core/config.h"
#include "engine/completion_queue.h"
#include "engine/event_loop.h"
#include "rpc/rpc_hub.h"
#include "transport/codec.h"
#include "transport/quic_endpoint.h"

namespace nexar {

class Communicator;

class Engine : public ConnectionHandler {
 public:
  struct Identity {
    uint32_t rank = 0;
    uint32_t world_size = 1;
    uint64_t cluster_id = 0;
  };

  Engine(Identity id, Config cfg, std::shared_ptr<TlsCredentials> creds);
  ~Engine() override;

  // Binds the UDP socket and starts the threads.
  Status start(const SocketAddress &bind_addr);
  // The same on a socket bound before this engine existed (a worker binds
  // first to tell the seed its address); takes ownership of bound_fd.
  Status start_on(int bound_fd);
  const SocketAddress &address() const { return address_; }
  // Connects to every lower neighbour (higher ones connect to us; in a full
  // mesh every rank is a neighbour, config().topology says otherwise)...
  Status start_mesh(const std::vector<SocketAddress> &peer_addrs);
  // ...and waits, bounded by connect_timeout_ms, until every neighbour said hello.
  Status wait_mesh();
  // Ends a wait_mesh in progress (or the next one) with this error: the seed
  // reported that another rank died during formation. Any thread.
  void fail_mesh(const Status &why);
  // Closes every connection (idempotent).
  void close_connections();
  // Closes every connection and stops the threads (idempotent).
  void shutdown();

  const Identity &identity() const { return id_; }
  const Config &config() const { return cfg_; }
  EventLoop &loop() { return loop_; }
  Mailbox &mailbox() { return *mailbox_; }
  CompletionThread &completions() { return *completions_; }
  BufferPool &pool() { return *pool_; }
  rpc::RpcHub &rpc() { return *rpc_; }
  Relay &relay() { return *relay_; }
  const Topology &topology() const { return topo_; }
  // Whether this rank has (or had) a direct connection to world_rank.
  bool direct(uint32_t world_rank) const { return topo_.is_neighbour(id_.rank, world_rank); }
  // A neighbour whose connection is not ready yet and has not failed.
  bool forming(uint32_t world_rank) const;

  // Fills the counters (from any thread).
  void stats(nexar_stats_t *out);
  // The transport's counters, internal ones included (any thread).
  TransportStats transport_stats();

  // ---- loop thread only ----
  QuicConnection *conn_to(uint32_t world_rank) const;
  const Status *peer_failure(uint32_t world_rank) const {
    return mailbox_->peer_failure(world_rank);
  }
  void send_control(uint32_t world_rank, const wire::ControlMessage &m);
  void send_control_on(QuicConnection *c, const wire::ControlMessage &m);
  // Sends a message that owns its payload (msg.owned) to world_rank, relayed
  // if it is not a neighbour; false if there is no way there now.
  bool send_owned(uint32_t world_rank, OutgoingMessage msg, uint64_t key);
  // A relayed message for this rank starts: where its payload goes.
  MessageSink *deliver_relayed(uint32_t origin, QuicConnection *c, int64_t stream_id,
                               const wire::FrameHeader &inner);
  // A control message relayed from origin (Abort, CollectiveMismatch).
  void on_relayed_control(uint32_t origin, std::span<const uint8_t> message);
  // world_rank cannot be reached any more (a relay on its route was lost).
  void fail_unreachable(uint32_t world_rank, const Status &s);
  void register_comm(Communicator *c);
  void unregister_comm(Communicator *c);
  // The communicator with this id on this engine, or nullptr.
  Communicator *comm_by_id(uint64_t comm_id) const;

  // ConnectionHandler
  void on_handshake_done(QuicConnection *c, const NodeIdentity &peer) override;
  void on_control(QuicConnection *c, std::span<const uint8_t> message) override;
  MessageSink *on_message(QuicConnection *c, int64_t stream_id,
                          const wire::FrameHeader &h) override;
  void on_closed(QuicConnection *c, const Status &why) override;

 private:
  struct Peer {
    SocketAddress addr;
    QuicConnection *conn = nullptr;
    bool ready = false;
  };
  using CommNotice = std::variant<wire::Abort, wire::CollectiveMismatch>;
  // The rest of start/start_on once the socket is ready (socket: how that went).
  Status start_threads(const Status &socket);
  void handle_comm_notice(uint32_t from, const CommNotice &notice);
  void peer_ready(uint32_t rank, QuicConnection *c);
  // world_rank is gone: its receives, RPC calls and communicators fail with s.
  void fail_peer(uint32_t world_rank, const Status &s);
  void handle_hello(QuicConnection *c, const wire::Hello &h);

  Identity id_;
  Config cfg_;
  std::shared_ptr<TlsCredentials> creds_;
  std::shared_ptr<BufferPool> pool_;
  EventLoop loop_;
  std::unique_ptr<Mailbox> mailbox_;
  std::unique_ptr<rpc::RpcHub> rpc_;
  Topology topo_;
  std::unique_ptr<Relay> relay_;
  std::unique_ptr<QuicEndpoint> endpoint_;
  std::unique_ptr<CompletionThread> completions_;
  SocketAddress address_;
  std::vector<Peer> peers_;
  std::unordered_map<uint64_t, std::vector<Communicator *>> comms_;
  std::unordered_map<uint64_t, std::vector<std::pair<uint32_t, CommNotice>>> early_notices_;
  bool shut_down_ = false;  // loop thread
  bool stopped_ = false;    // owner thread

  // Mesh formation progress, read by the thread in form_mesh.
  std::mutex mesh_mu_;
  std::condition_variable mesh_cv_;
  uint32_t ready_peers_ = 0;
  Status mesh_error_;
};

}  // namespace nexar
