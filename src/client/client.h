// Client: one rank's hub (the upstream NexarClient). It owns what the rank
// runs: the event loop thread, the QUIC endpoint, a PeerConnection per peer
// (the send side: direct or relayed), the PeerRouter (the receive side: each
// lane to its consumer), the mailbox, the relay, the record of failed peers,
// the registry of communicators and the completion thread. Communicators
// split from one another share their client. Forming the mesh (dialling
// every neighbour, waiting for them) is cluster/mesh.h's; the RPC layer
// plugs in through client/rpc_lanes.h.
#pragma once

#include <memory>
#include <vector>

#include "client/comm_registry.h"
#include "client/mailbox.h"
#include "client/peer_connection.h"
#include "client/peer_liveness.h"
#include "client/peer_router.h"
#include "client/relay.h"
#include "client/rpc_lanes.h"
#include "client/shm_host.h"
#include "client/stall_watch.h"
#include "client/topology.h"
#include "core/buffer_pool.h"
#include "core/config.h"
#include "engine/completion_queue.h"
#include "engine/event_loop.h"
#include "transport/quic_endpoint.h"

namespace nexar {

// Told when a neighbour becomes ready or fails before it was ready (loop
// thread): what mesh formation waits on.
class FormationObserver {
 public:
  virtual ~FormationObserver() = default;
  virtual void on_peers_changed() = 0;
  // A neighbour this rank dialed presented a certificate of another world.
  // True: the observer dials it again, and its loss is no formation failure
  // (in a grow, the peer may still run the attempt the seed replaced).
  virtual bool redial_in_other_world(uint32_t) { return false; }
};

class Client {
 public:
  struct Identity {
    uint32_t rank = 0;
    uint32_t world_size = 1;
    uint64_t cluster_id = 0;
  };

  Client(Identity id, Config cfg, std::shared_ptr<TlsCredentials> creds);
  ~Client();
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  // Binds the UDP socket and starts the threads.
  Status start(const SocketAddress &bind_addr);
  // The same on a socket bound before this client existed (a worker binds
  // first to tell the seed its address); takes ownership of bound_fd.
  Status start_on(int bound_fd);
  const SocketAddress &address() const { return address_; }
  // Closes every connection (idempotent).
  void close_connections();
  // Closes every connection and stops the threads (idempotent).
  void shutdown();
  // Installs the RPC lanes (before any peer can send a request).
  void set_rpc_lanes(std::unique_ptr<RpcLanes> lanes) { rpc_ = std::move(lanes); }

  const Identity &identity() const { return id_; }
  const Config &config() const { return cfg_; }
  EventLoop &loop() { return loop_; }
  Mailbox &mailbox() { return *mailbox_; }
  CompletionThread &completions() { return *completions_; }
  BufferPool &pool() { return *pool_; }
  RpcLanes *rpc_lanes() { return rpc_.get(); }
  Relay &relay() { return *relay_; }
  PeerRouter &router() { return router_; }
  CommRegistry &comms() { return comms_; }
  const PeerLiveness &liveness() const { return liveness_; }
  const Topology &topology() const { return topo_; }
  ShmHost &shm() { return *shm_; }
  const ShmHost &shm() const { return *shm_; }

  // Fills the counters (from any thread).
  void stats(nexar_stats_t *out);
  // The transport's counters, internal ones included (any thread).
  TransportStats transport_stats();

  // ---- loop thread only ----
  PeerConnection &peer(uint32_t world_rank) { return peers_[world_rank]; }
  const PeerConnection &peer(uint32_t world_rank) const { return peers_[world_rank]; }
  bool shut_down() const { return shut_down_; }
  // A control message to world_rank (nothing for this rank itself).
  void send_control(uint32_t world_rank, const wire::ControlMessage &m);
  // world_rank cannot be reached any more (a relay on its route was lost).
  void fail_unreachable(uint32_t world_rank, const Status &s);
  // Routes avoid world_rank from now on (it failed; client/topology.h).
  void reroute_around(uint32_t world_rank) { topo_.remove(world_rank); }
  void register_comm(Communicator *c) { comms_.add(c); }
  // Another rank declared world_rank failed (client/failure_notice.h).
  void declare_failed(uint32_t world_rank, const Status &s) { fail_peer(world_rank, s); }
  void unregister_comm(Communicator *c);

  // ---- formation and connection events (loop thread) ----
  // Dials neighbour world_rank at addr (the higher rank of a pair dials).
  Status dial(uint32_t world_rank, const SocketAddress &addr);
  // Neighbours whose connection became ready, and the neighbours in all.
  size_t ready_neighbours() const { return ready_neighbours_; }
  size_t neighbours() const { return topo_.neighbours(id_.rank).size(); }
  // The first neighbour lost before it was ready, if any (ok otherwise).
  const Status &formation_failure() const { return formation_failure_; }
  void set_formation_observer(FormationObserver *o);
  // The peer's connection passed its handshake and Hello exchange.
  void peer_ready(uint32_t world_rank, QuicConnection *c);
  // A connection closed (the router's on_closed).
  void connection_closed(QuicConnection *c, const Status &why);
  // Formation cannot finish because of world_rank (s says why).
  void fail_formation(const Status &s);
  // The same-host channel to world_rank ended: it left, or died.
  void shm_peer_lost(uint32_t world_rank, const Status &why, bool left);

 private:
  // The rest of start/start_on once the socket is ready (socket: how that went).
  Status start_threads(const Status &socket);
  // world_rank is gone: its receives, RPC calls and communicators fail with
  // s. False if it was known to be gone already.
  bool fail_peer(uint32_t world_rank, const Status &s);
  void notify_formation();

  Identity id_;
  Config cfg_;
  std::shared_ptr<TlsCredentials> creds_;
  std::shared_ptr<BufferPool> pool_;
  EventLoop loop_;
  PeerLiveness liveness_;
  std::unique_ptr<Mailbox> mailbox_;
  std::unique_ptr<RpcLanes> rpc_;
  Topology topo_;
  std::unique_ptr<Relay> relay_;
  PeerRouter router_{*this};
  CommRegistry comms_;
  std::vector<PeerConnection> peers_;
  std::unique_ptr<QuicEndpoint> endpoint_;
  std::unique_ptr<ShmHost> shm_;
  std::unique_ptr<CompletionThread> completions_;
  SocketAddress address_;
  size_t ready_neighbours_ = 0;
  Status formation_failure_;
  FormationObserver *formation_ = nullptr;
  // This process was frozen past the heartbeat timeout: its peers went on
  // without it (client/stall_watch.h). After loop_, destroyed before it.
  StallWatch stall_{loop_, cfg_.heartbeat_interval_ms, cfg_.heartbeat_timeout_ms,
                    [this](uint64_t gap_ms) { on_stalled(gap_ms); }};
  void on_stalled(uint64_t gap_ms);
  // Whether losing c means the other ranks declared this process failed.
  bool lost_as_failed(const QuicConnection *c, std::string *why);
  // Ends every communicator of this process with NEXAR_ERR_EXCLUDED (once).
  void exclude_self(const std::string &why);
  bool excluded_ = false;   // loop thread
  bool shut_down_ = false;  // loop thread
  bool stopped_ = false;    // owner thread
};

}  // namespace nexar
