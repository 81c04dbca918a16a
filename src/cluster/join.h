// Worker join: from a seed address to this rank's communicator.
//
//   1. bind this worker's UDP socket (interface_select.h) and pick the
//      address its peers will dial;
//   2. make a key pair and a certificate request here (the private key never
//      leaves this process);
//   3. SeedClient: connect to the seed with retries and backoff, check the
//      seed's token proof, send this worker's proof and its request, wait for
//      the Welcome (join_protocol.h);
//   4. start the engine on the socket bound in step 1 with the signed
//      certificate, form the mutual-TLS mesh, tell the seed (MeshReady).
// While the mesh forms, the seed may report that another rank died: the wait
// ends at once with that error instead of running into the connect timeout.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/communicator.h"
#include "cluster/join_protocol.h"
#include "core/config.h"
#include "engine/event_loop.h"
#include "transport/codec.h"
#include "transport/quic_endpoint.h"
#include "transport/tls_credentials.h"

namespace nexar {

class SeedClient;

// Joins through the seed at cfg.seed_address. With cfg.elastic, *seed_link
// (when not null) receives the connection to the seed, kept open for
// elastic membership (cluster/elastic_link.h).
Status join_cluster(const Config &cfg, std::unique_ptr<Communicator> *out,
                    std::unique_ptr<SeedClient> *seed_link = nullptr);

// Binds this worker's UDP socket (interface_select.h) and picks the address
// its peers dial; *fd is the caller's.
Status bind_worker_socket(const Config &cfg, const SocketAddress &seed, int *fd,
                          SocketAddress *bound, SocketAddress *advertised);

// Forms this worker's mesh in the world a Welcome describes, on a copy of fd
// (fd stays bound for another attempt), and tells the seed. settled (a
// grow): the seed's news ends the attempt (SeedClient::on_word), and the
// grown world is used only once the seed says every participant formed it;
// when it says otherwise, the mesh is left and that word is the caller's
// (SeedClient::has_word). Else the seed's failures end the attempt.
Status form_welcomed(const Config &cfg, const wire::Welcome &welcome, gnutls_x509_privkey_t key,
                     const SocketAddress &advertised, int32_t asked_rank, int fd, SeedClient &seed,
                     bool settled, std::unique_ptr<Communicator> *out);

// What a verified Welcome gives a worker.
struct JoinTicket {
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint64_t cluster_id = 0;
  std::shared_ptr<TlsCredentials> creds;
  std::vector<SocketAddress> peers;
  std::string ca_fingerprint;
};

// Checks a Welcome against what this worker asked for (its key, its address,
// the rank it asked for) and builds its mesh credentials.
Status accept_welcome(const wire::Welcome &w, gnutls_x509_privkey_t key,
                      const SocketAddress &advertised, int32_t asked_rank, JoinTicket *out);

// The worker's connection to the seed, on a thread of its own.
class SeedClient : public ConnectionHandler {
 public:
  SeedClient(const Config &cfg, std::string token);
  ~SeedClient() override;

  // Connects (from local, port 0 = any) with retries and backoff bounded by
  // connect_timeout_ms, authenticates, sends req (the proof is filled in
  // here) and waits for the Welcome.
  Status join(const SocketAddress &seed, const SocketAddress &local, wire::JoinRequest req,
              wire::Welcome *out);
  // Sends the seed this rank's mesh graph and waits until deadline_ns for
  // its answer: ok when every rank's graph is the same, else the seed's
  // error naming the ranks that differ (or why no answer came).
  Status agree_topology(const wire::TopologyDigest &mine, uint64_t deadline_ns);
  // From now on, failures the seed reports go to fn (on the client's thread).
  void on_failure(std::function<void(const Status &)> fn);
  // Tells the seed that something went wrong on this side (best effort);
  // world_id: the grown world whose mesh failed, if any.
  void report_error(const Status &s, uint64_t world_id = 0);
  // Tells the seed this rank's mesh formed; waits (bounded) for delivery.
  void report_ready(uint32_t rank, uint64_t world_id);
  // Closes the connection and stops the thread (idempotent).
  void close();

  // ---- Elastic membership, once this worker is in a world ----
  // What the seed says after settle(), in order. Formed: every participant
  // of the grow formed the grown world.
  struct Word {
    enum Kind { Welcome, Error, Requeued, Gone, Formed } kind = Gone;
    wire::Welcome welcome;
    Status error;
  };
  // From now on the seed's messages are words (next_word), and wake (any
  // thread may replace it; nullptr removes it) runs on the client's thread
  // at each one, so that a mesh forming can stop.
  void settle();
  void on_word(std::function<void()> wake);
  // Forgets words not read yet (before a new request).
  void drop_words();
  // The next word, waiting until deadline_ns; false on timeout.
  bool next_word(uint64_t deadline_ns, Word *out);
  // Whether a word waits to be read.
  bool has_word();
  // Waits until deadline_ns for the seed's next word: true when it says the
  // grown world formed (the word is consumed); otherwise any word stays for
  // next_word().
  bool take_formed(uint64_t deadline_ns);
  // Joiners waiting at the seed, as it last said (any thread).
  uint32_t pending_joins() const { return pending_.load(); }
  // The seed's connection is gone (any thread).
  bool seed_gone();
  // Sends a grow request (any thread).
  void request_grow(const wire::GrowRequest &req);
  // This worker joins a running world (the seed formed it already).
  bool joins_running_world() const { return running_world_; }
  const SocketAddress &seed_address() const { return seed_; }

  // ConnectionHandler (loop thread)
  void on_handshake_done(QuicConnection *c, const NodeIdentity &) override;
  void on_control(QuicConnection *c, std::span<const uint8_t> message) override;
  MessageSink *on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) override;
  void on_closed(QuicConnection *c, const Status &why) override;

 private:
  enum class Stage { Idle, Connecting, Challenged, Requested, Welcomed, Failed, Closed };
  struct Delivered : SendListener {
    SeedClient *self = nullptr;
    void on_send_done(const Status &s) override;
  };

  void send(const wire::ControlMessage &m, SendListener *listener = nullptr);
  void handle_challenge(const wire::JoinChallenge &ch);
  void fail_from_seed(const wire::JoinError &m, Stage st);
  void fail(const Status &s, bool tell_seed);
  template <class Pred>
  bool wait_until(uint64_t deadline_ns, Pred pred);

  Config cfg_;
  std::string token_;
  EventLoop loop_;
  std::unique_ptr<QuicEndpoint> endpoint_;
  bool started_ = false;
  bool stopped_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_ (written on the loop thread, read by the joining thread).
  Stage stage_ = Stage::Idle;
  Status error_;
  wire::Welcome welcome_;
  uint32_t admitted_ = 0;
  uint64_t formation_ms_left_ = 0;
  bool delivered_ = false;
  bool told_seed_ = false;
  bool handshook_ = false;
  Status early_failure_;  // reported after the welcome, before on_failure()
  bool topology_answered_ = false;
  uint64_t agreed_digest_ = 0;
  bool seed_lost_ = false;  // the connection closed after the welcome

  // Elastic, guarded by mu_.
  bool settled_ = false;
  bool gone_ = false;
  std::deque<Word> words_;
  std::function<void()> wake_;
  std::atomic<uint32_t> pending_{0};
  std::atomic<bool> running_world_{false};
  void push_word(Word w);

  // Loop thread only.
  QuicConnection *conn_ = nullptr;
  SocketAddress seed_;
  join::Secret secret_{};
  wire::JoinRequest request_;
  std::function<void(const Status &)> on_failure_;
  Delivered delivered_listener_;
};

}  // namespace nexar
