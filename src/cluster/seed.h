// Seed: the discovery server that admits workers into a cluster.
//
// It listens for join connections (QUIC, ALPN nexar-join/1, see
// join_protocol.h), checks each worker's knowledge of the cluster token,
// assigns ranks (the rank a worker asks for, else the free ones in arrival
// order; a duplicate is refused to that worker only), runs the cluster CA and
// signs every worker's certificate from its certificate request once the
// world is complete, then hands everyone the list of addresses. Formation
// ends when every rank reports its mesh formed; the seed is not on the data
// path and may stop after that.
//
// A worker that disconnects while the world is forming fails the formation
// at once: every other worker is told which one (and why), long before the
// formation timeout.
//
// An elastic seed stays up once the world formed (seed_elastic.cpp): it
// admits joiners the same way (token proof, certificate request) into a
// bounded pending list, tells every member how many wait, and runs each grow:
// once every member of the communicator asked for it, it welcomes members and
// joiners into a grown world under a fresh world id (old certificates are
// worth nothing there).
#pragma once

#include <ev.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cluster/join_protocol.h"
#include "engine/event_loop.h"
#include "transport/codec.h"
#include "transport/quic_endpoint.h"
#include "transport/tls_credentials.h"

namespace nexar {

struct SeedEvent {
  int32_t kind = 0;  // NEXAR_SEED_EVENT_*
  int32_t rank = -1;
  uint32_t joined = 0;
  uint32_t world_size = 0;
  std::string message;
};

struct SeedConfig {
  std::string listen_address = "127.0.0.1:0";  // a concrete address
  uint32_t world_size = 0;
  std::string token;   // empty: open mode (loopback workers only unless `open`)
  std::string ca_dir;  // empty: an ephemeral CA
  bool open = false;
  uint64_t formation_timeout_ms = 60000;
  bool elastic = false;         // stay up after formation and admit joiners
  uint32_t max_world_size = 0;  // grow no world past this; 0 = kMaxWorld
  // Runs on the seed's thread; must not stop the seed.
  std::function<void(const SeedEvent &)> on_event;
};

class Seed : public ConnectionHandler {
 public:
  static constexpr uint32_t kMaxWorld = 1024;
  // Joiners an elastic seed holds at once; more are refused.
  static constexpr size_t kMaxPending = 64;

  static Status start(SeedConfig cfg, std::unique_ptr<Seed> *out);
  ~Seed() override;

  // "ip:port" actually bound.
  const std::string &address() const { return address_; }
  uint64_t cluster_id() const { return cluster_id_; }
  const std::string &ca_fingerprint() const { return ca_fingerprint_; }
  // Waits up to timeout_ms for formation to end: OK once every rank reported
  // its mesh formed, the failure otherwise; NEXAR_ERR_TIMEOUT while forming.
  // *ended (optional) tells the last case from a formation that timed out.
  Status wait(uint64_t timeout_ms, bool *ended = nullptr);
  // Closes every connection and stops the thread (idempotent).
  void stop();

  // ConnectionHandler (loop thread)
  void on_handshake_done(QuicConnection *c, const NodeIdentity &) override;
  void on_control(QuicConnection *c, std::span<const uint8_t> message) override;
  MessageSink *on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) override;
  void on_closed(QuicConnection *c, const Status &why) override;

 private:
  enum class Phase { Admitting, Meshing, Formed, Failed, Stopped };
  struct Member {
    // Waiting: connected, for a challenge slot (kMaxChallenged in seed.cpp).
    // Reported: welcomed, then told us its mesh could not form.
    // Pending: an authenticated joiner of an elastic seed, waiting for a grow.
    // Growing: a joiner welcomed into a grown world, forming its mesh.
    enum class State {
      Waiting,
      Challenged,
      Admitted,
      Welcomed,
      Ready,
      Reported,
      Refused,
      Gone,
      Pending,
      Growing
    };
    QuicConnection *conn = nullptr;
    SocketAddress remote;
    State state = State::Challenged;
    join::Secret secret{};
    wire::JoinRequest req;
    uint32_t rank = UINT32_MAX;
    uint64_t since_ns = 0;
    size_t arrival = 0;
    uint64_t round = 0;  // the grow it takes part in (elastic), 0 = none
    // The mesh graph this rank built from its options (seed_topology.cpp).
    bool has_topology = false;
    wire::TopologyDigest topology;
    std::string describe() const;
  };
  // One grow of one communicator (elastic): collecting its members'
  // requests, then forming the grown world.
  struct Round {
    uint64_t id = 0;
    uint64_t world_id = 0, comm_id = 0, grow_seq = 0;  // the communicator's key
    bool meshing = false;
    std::vector<Member *> members;  // by rank in the communicator
    std::vector<Member *> joiners;  // appended ranks, once meshing
    uint32_t arrived = 0;
    uint32_t max_new = UINT32_MAX;
    uint32_t ready = 0;
    uint64_t deadline_ns = 0;
    uint64_t new_world = 0;
    uint64_t started_ns = 0;
  };
  struct Notice : SendListener {
    Seed *seed = nullptr;
    void on_send_done(const Status &) override { seed->notice_done(); }
  };

  explicit Seed(SeedConfig cfg);
  void send(QuicConnection *c, const wire::ControlMessage &m, SendListener *listener = nullptr);
  void emit(int32_t kind, int32_t rank, const std::string &message);
  // Members with a connection in that state.
  size_t count(Member::State state) const;
  // Sends m its challenge; it then has kAuthTimeoutS to answer.
  void challenge(Member *m);
  // Challenges waiting members, oldest first, while slots are free (or
  // refuses them once the seed admits no more).
  void challenge_waiting();
  void handle_request(Member *m, const wire::JoinRequest &req);
  void handle_ready(Member *m, const wire::MeshReady &r);
  // Records a welcomed rank's graph; once every rank's is in, answers each
  // with the common digest or fails formation naming the ranks that differ.
  void handle_topology(Member *m, const wire::TopologyDigest &d);
  void refuse(Member *m, nexar_status_t code, const std::string &reason);
  void refuse_late(Member *m);
  void complete();
  void fail_formation(nexar_status_t code, int32_t failed_rank, const std::string &reason);
  void notice_done();
  void finish(const Status &result);
  void on_formation_timer();
  void sweep();
  Member *member_of(QuicConnection *c);
  // ---- elastic (seed_elastic.cpp) ----
  bool admits_joiners() const { return cfg_.elastic && phase_ == Phase::Formed; }
  void admit_joiner(Member *m);
  void tell_pending();
  void handle_grow(Member *m, const wire::GrowRequest &req);
  void start_round(Round *r);
  void welcome_round(Round *r);
  void round_ready(Member *m, const wire::MeshReady &ready);
  void round_mesh_failed(Round *r, Member *m, const wire::JoinError &report);
  void drop_joiner(Round *r, Member *j);
  void fail_round(Round *r, nexar_status_t code, int32_t failed_rank, const std::string &reason);
  void end_round(Round *r);
  void elastic_closed(Member *m, Member::State prev, const std::string &why);
  void sweep_rounds();
  Round *round_of(const Member *m);
  static void formation_timer_cb(struct ev_loop *, ev_timer *w, int);
  static void sweep_timer_cb(struct ev_loop *, ev_timer *w, int);
  static void grace_timer_cb(struct ev_loop *, ev_timer *w, int);

  SeedConfig cfg_;
  EventLoop loop_;
  std::unique_ptr<ClusterCa> ca_;
  std::string ca_pem_;
  std::string ca_fingerprint_;
  uint64_t cluster_id_ = 0;
  std::shared_ptr<TlsCredentials> creds_;
  std::unique_ptr<QuicEndpoint> endpoint_;
  std::string address_;
  bool started_ = false;  // owner thread
  bool stopped_ = false;

  // Loop thread only.
  Phase phase_ = Phase::Admitting;
  std::vector<std::unique_ptr<Member>> members_;
  std::unordered_map<QuicConnection *, Member *> by_conn_;
  std::vector<std::unique_ptr<Notice>> notices_;
  size_t notices_pending_ = 0;
  Status failure_;
  uint32_t admitted_ = 0;
  uint32_t ready_ = 0;
  size_t arrivals_ = 0;
  std::vector<std::unique_ptr<Round>> rounds_;
  uint64_t next_round_ = 1;
  ev_timer formation_timer_;
  ev_timer sweep_timer_;
  ev_timer grace_timer_;

  // Formation result, for wait().
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status result_;
  std::atomic<uint32_t> joined_count_{0};
};

}  // namespace nexar
