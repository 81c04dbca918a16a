#include "cluster/join.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cluster/interface_select.h"
#include "cluster/mesh.h"
#include "core/clock.h"
#include "core/host.h"
#include "core/log.h"

namespace nexar {
namespace {

constexpr uint64_t kAttemptTimeoutMs = 3000;  // one QUIC handshake attempt with the seed
constexpr uint64_t kFirstBackoffMs = 100;
constexpr uint64_t kMaxBackoffMs = 2000;
constexpr uint64_t kWelcomeMarginMs = 15000;  // beyond the seed's own formation deadline
constexpr uint64_t kReadyAckMs = 2000;
// Beyond the seed's own bound on a grow (the members' connect timeout), so
// that its verdict on a grown world arrives before this side gives up.
constexpr uint64_t kGrowVerdictMarginMs = 5000;

uint64_t deadline_after(uint64_t ms) {
  return now_ns() + ms * kNsPerMs;
}

// Closes a socket we still own on every early return.
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

}  // namespace

// ---- SeedClient ------------------------------------------------------------------

SeedClient::SeedClient(const Config &cfg, std::string token)
    : cfg_(cfg), token_(std::move(token)), loop_(cfg.rank, "nexar-join") {
  delivered_listener_.self = this;
}

SeedClient::~SeedClient() {
  close();
  endpoint_.reset();
}

void SeedClient::Delivered::on_send_done(const Status &) {
  std::lock_guard<std::mutex> g(self->mu_);
  self->delivered_ = true;
  self->cv_.notify_all();
}

template <class Pred>
bool SeedClient::wait_until(uint64_t deadline_ns, Pred pred) {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    if (pred()) return true;
    const uint64_t now = now_ns();
    if (now >= deadline_ns) return false;
    cv_.wait_for(g, std::chrono::nanoseconds(deadline_ns - now));
  }
}

void SeedClient::send(const wire::ControlMessage &m, SendListener *listener) {
  if (!conn_ || conn_->closed()) {
    if (listener) listener->on_send_done(error(NEXAR_ERR_CLOSED, "no connection to the seed"));
    return;
  }
  conn_->send_control(m, listener);
}

void SeedClient::fail(const Status &s, bool tell_seed) {
  if (tell_seed) {
    {
      std::lock_guard<std::mutex> g(mu_);
      delivered_ = false;
      told_seed_ = true;
    }
    send(wire::JoinError{s.code, s.failed_rank, s.message}, &delivered_listener_);
  }
  std::function<void(const Status &)> fn;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stage_ == Stage::Welcomed) {
      fn = on_failure_;
      if (!fn && early_failure_.ok()) early_failure_ = s;
    } else if (stage_ != Stage::Failed && stage_ != Stage::Closed) {
      stage_ = Stage::Failed;
      error_ = s;
    }
    cv_.notify_all();
  }
  if (fn) fn(s);
}

Status SeedClient::join(const SocketAddress &seed, const SocketAddress &local,
                        wire::JoinRequest req, wire::Welcome *out) {
  Status s;
  loop_.start();
  started_ = true;
  loop_.run_sync([&] {
    seed_ = seed;
    request_ = std::move(req);
    std::shared_ptr<TlsCredentials> creds;
    s = TlsCredentials::create_anonymous(&creds);
    if (s) {
      endpoint_ = std::make_unique<QuicEndpoint>(&loop_, this, 0, creds, join::kIdleTimeoutMs,
                                                 kAttemptTimeoutMs, join::kKeepAliveMs,
                                                 ConnectionPolicy::join());
      s = endpoint_->open(local);
    }
  });
  if (!s) return s;

  // Connect, retrying with exponential backoff until connect_timeout_ms.
  const uint64_t connect_deadline = deadline_after(cfg_.connect_timeout_ms);
  uint64_t backoff = kFirstBackoffMs;
  unsigned attempts = 0;
  Status last;
  for (;;) {
    ++attempts;
    {
      std::lock_guard<std::mutex> g(mu_);
      stage_ = Stage::Connecting;
      error_ = Status();
      // Set by this attempt's connection only: the last one may have finished
      // its handshake just as it was given up.
      handshook_ = false;
    }
    loop_.run_sync([&] {
      QuicConnection *c = nullptr;
      Status cs = endpoint_->connect(seed_, UINT32_MAX, &c);
      if (!cs) {
        std::lock_guard<std::mutex> g(mu_);
        stage_ = Stage::Failed;
        error_ = cs;
      } else {
        conn_ = c;
      }
    });
    wait_until(std::min(connect_deadline, deadline_after(kAttemptTimeoutMs + 500)),
               [&] { return stage_ != Stage::Connecting; });
    Stage st;
    bool handshook;
    {
      std::lock_guard<std::mutex> g(mu_);
      st = stage_;
      last = error_;
      handshook = handshook_;
    }
    // Once the handshake is done, whatever happens next (a refusal, a failed
    // proof) is an answer from the seed: no retry.
    if (handshook) break;
    if (st == Stage::Failed && (last.code == NEXAR_ERR_TLS || last.code == NEXAR_ERR_PROTOCOL)) {
      // Something answered that is not a nexar seed: retrying will not help.
      return last;
    }
    loop_.run_sync([&] {
      if (conn_ && !conn_->closed())
        conn_->close(0, error(NEXAR_ERR_TIMEOUT, "connection attempt timed out"));
      conn_ = nullptr;
    });
    if (now_ns() + backoff * kNsPerMs >= connect_deadline)
      return error(NEXAR_ERR_TIMEOUT,
                   format("could not reach the seed at %s within %.1f s (%u attempts)%s%s",
                          seed.to_string().c_str(), cfg_.connect_timeout_ms / 1e3, attempts,
                          last.ok() ? "" : "; last error: ", last.message.c_str()));
    LOG_DEBUG("seed at %s not reachable yet (attempt %u); retrying in %llu ms",
              seed.to_string().c_str(), attempts, static_cast<unsigned long long>(backoff));
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
    backoff = std::min(backoff * 2, kMaxBackoffMs);
  }
  LOG_DEBUG("connected to the seed at %s after %u attempt(s)", seed.to_string().c_str(), attempts);

  // The challenge, our request, then the Welcome once the world is complete.
  if (!wait_until(deadline_after(join::kChallengeWaitMs),
                  [&] { return stage_ != Stage::Connecting && stage_ != Stage::Challenged; }))
    return error(NEXAR_ERR_TIMEOUT, format("the seed at %s accepted the connection but sent no "
                                           "challenge within %.0f s",
                                           seed.to_string().c_str(), join::kChallengeWaitMs / 1e3));
  uint64_t welcome_deadline;
  {
    std::lock_guard<std::mutex> g(mu_);
    welcome_deadline = running_world_ ? deadline_after(cfg_.join_timeout_ms)
                                      : deadline_after(formation_ms_left_ + kWelcomeMarginMs);
  }
  if (!wait_until(welcome_deadline, [&] { return stage_ != Stage::Requested; })) {
    if (running_world_)
      return error(NEXAR_ERR_TIMEOUT,
                   format("waited %.0f s at the elastic seed at %s: no member grew the world "
                          "(join_timeout_ms, NEXAR_JOIN_TIMEOUT_SECS)",
                          cfg_.join_timeout_ms / 1e3, seed.to_string().c_str()));
    return error(NEXAR_ERR_TIMEOUT, format("the seed at %s did not complete the world in time",
                                           seed.to_string().c_str()));
  }
  bool told;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stage_ == Stage::Welcomed) {
      *out = welcome_;
      return {};
    }
    told = told_seed_;
  }
  // Give the seed a moment to read why this worker gives up.
  if (told) wait_until(deadline_after(1000), [&] { return delivered_; });
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

Status SeedClient::agree_topology(const wire::TopologyDigest &mine, uint64_t deadline_ns) {
  loop_.run_sync([&] { send(mine); });
  wait_until(deadline_ns, [&] { return topology_answered_ || !early_failure_.ok() || seed_lost_; });
  std::lock_guard<std::mutex> g(mu_);
  if (!early_failure_.ok()) return early_failure_;
  if (topology_answered_ && agreed_digest_ == mine.digest) return {};
  if (topology_answered_)
    return error(NEXAR_ERR_PROTOCOL,
                 format("formation of rank %u: the seed at %s answered digest %016llx for this "
                        "rank's %s topology (digest %016llx)",
                        mine.rank, seed_.to_string().c_str(),
                        static_cast<unsigned long long>(agreed_digest_), mine.name.c_str(),
                        static_cast<unsigned long long>(mine.digest)));
  if (seed_lost_)
    return error(NEXAR_ERR_PEER_FAILED,
                 format("formation of rank %u: lost the connection to the seed at %s before it "
                        "confirmed that every rank uses the same topology",
                        mine.rank, seed_.to_string().c_str()));
  return error(NEXAR_ERR_TIMEOUT,
               format("formation of rank %u: the seed at %s did not confirm within the connect "
                      "timeout that every rank uses the same topology",
                      mine.rank, seed_.to_string().c_str()));
}

void SeedClient::on_failure(std::function<void(const Status &)> fn) {
  loop_.run_sync([&] {
    Status early;
    {
      std::lock_guard<std::mutex> g(mu_);
      on_failure_ = fn;
      early = std::exchange(early_failure_, Status());
    }
    // Reported between the welcome and now.
    if (!early.ok()) fn(early);
  });
}

void SeedClient::report_error(const Status &s, uint64_t world_id) {
  {
    std::lock_guard<std::mutex> g(mu_);
    delivered_ = false;
  }
  loop_.run_sync([&] {
    send(wire::JoinError{s.code, s.failed_rank, s.message, world_id}, &delivered_listener_);
  });
  wait_until(deadline_after(kReadyAckMs), [&] { return delivered_; });
}

void SeedClient::report_ready(uint32_t rank, uint64_t world_id) {
  {
    std::lock_guard<std::mutex> g(mu_);
    delivered_ = false;
  }
  loop_.run_sync([&] { send(wire::MeshReady{rank, world_id}, &delivered_listener_); });
  wait_until(deadline_after(kReadyAckMs), [&] { return delivered_; });
}

void SeedClient::close() {
  if (stopped_) return;
  stopped_ = true;
  if (!started_) return;
  loop_.run_sync([&] {
    {
      std::lock_guard<std::mutex> g(mu_);
      on_failure_ = nullptr;
      if (stage_ != Stage::Failed) stage_ = Stage::Closed;
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      wake_ = nullptr;
    }
    if (endpoint_) endpoint_->shutdown(error(NEXAR_ERR_CLOSED, "worker left the seed"));
  });
  loop_.stop();
}

void SeedClient::on_handshake_done(QuicConnection *c, const NodeIdentity &) {
  if (c != conn_) return;
  Status s = join::session_secret(c, &secret_);
  if (!s) {
    c->close(1, s);
    return;
  }
  std::lock_guard<std::mutex> g(mu_);
  handshook_ = true;
  if (stage_ == Stage::Connecting) stage_ = Stage::Challenged;
  cv_.notify_all();
}

void SeedClient::handle_challenge(const wire::JoinChallenge &ch) {
  const std::string where = seed_.to_string();
  if (ch.protocol_version != join::kProtocolVersion)
    return fail(error(NEXAR_ERR_PROTOCOL,
                      format("the seed at %s speaks join protocol %u, this worker %u",
                             where.c_str(), ch.protocol_version, join::kProtocolVersion)),
                true);
  if (ch.auth == join::kAuthToken) {
    if (token_.empty())
      return fail(error(NEXAR_ERR_AUTH,
                        format("the seed at %s requires a cluster token; set NEXAR_CLUSTER_TOKEN "
                               "(or NEXAR_CLUSTER_TOKEN_FILE) to the seed's token",
                               where.c_str())),
                  true);
    // The seed proves first: nothing derived from our token leaves this
    // process unless the other end already showed it knows the token too.
    if (!join::proof_matches(token_, secret_, "seed", ch.seed_proof))
      return fail(error(NEXAR_ERR_AUTH,
                        format("the seed at %s could not prove it knows the cluster token: the "
                               "tokens differ, or this is not the real seed",
                               where.c_str())),
                  true);
    request_.worker_proof = join::proof(token_, secret_, "worker");
  } else if (ch.auth == join::kAuthOpen) {
    if (!token_.empty())
      return fail(error(NEXAR_ERR_AUTH,
                        format("the seed at %s runs without a cluster token but this worker has "
                               "one; refusing to join an unauthenticated seed",
                               where.c_str())),
                  true);
    request_.worker_proof.clear();
  } else {
    return fail(
        error(NEXAR_ERR_PROTOCOL,
              format("the seed at %s asks for unknown authentication %u", where.c_str(), ch.auth)),
        true);
  }
  // A seed that formed its world already says size 0: it takes joiners only.
  running_world_ = ch.world_size == 0;
  if (running_world_ && !cfg_.elastic)
    return fail(error(NEXAR_ERR_INVALID_ARGUMENT,
                      format("the seed at %s runs a formed world and takes elastic joiners only; "
                             "set NEXAR_ELASTIC=1 (opts->elastic = 1) to join it",
                             where.c_str())),
                true);
  if (!running_world_ && request_.world_size != 0 && ch.world_size != request_.world_size)
    return fail(error(NEXAR_ERR_INVALID_ARGUMENT,
                      format("this worker expects a world of %u ranks, the seed at %s forms one "
                             "of %u",
                             request_.world_size, where.c_str(), ch.world_size)),
                true);
  send(request_);
  std::lock_guard<std::mutex> g(mu_);
  formation_ms_left_ = std::min(ch.formation_ms_left, join::kMaxFormationMs);
  stage_ = Stage::Requested;
  cv_.notify_all();
}

void SeedClient::on_control(QuicConnection *c, std::span<const uint8_t> message) {
  if (c != conn_) return;
  wire::DecodeResult r = wire::decode_control(message);
  if (!r) {
    c->close(1, error(NEXAR_ERR_PROTOCOL, "malformed message from the seed: " + r.error));
    return;
  }
  Stage st;
  bool settled;
  {
    std::lock_guard<std::mutex> g(mu_);
    st = stage_;
    settled = settled_;
  }
  std::visit(
      [&](const auto &m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, wire::PendingJoins>) {
          pending_.store(m.count);
        } else if constexpr (std::is_same_v<T, wire::Welcome>) {
          if (!settled) {
            if (st != Stage::Requested) return;
            std::lock_guard<std::mutex> g(mu_);
            welcome_ = m;
            stage_ = Stage::Welcomed;
            cv_.notify_all();
            return;
          }
          Word w;
          w.kind = Word::Welcome;
          w.welcome = m;
          push_word(std::move(w));
        } else if constexpr (std::is_same_v<T, wire::JoinAdmitted>) {
          if (settled) {
            Word w;
            w.kind = m.world_size != 0 && m.joined == m.world_size ? Word::Formed : Word::Requeued;
            push_word(std::move(w));
            return;
          }
          std::lock_guard<std::mutex> g(mu_);
          admitted_ = m.joined;
          LOG_DEBUG("admitted by the seed (%u of %u workers joined)", m.joined, m.world_size);
        } else if constexpr (std::is_same_v<T, wire::JoinError>) {
          if (settled) {
            const nexar_status_t code = is_known_error(m.status) ? m.status : NEXAR_ERR_PROTOCOL;
            Word w;
            w.kind = Word::Error;
            w.error = error(code, log::one_line(m.reason, wire::kMaxStringLen), m.failed_rank);
            push_word(std::move(w));
            return;
          }
          fail_from_seed(m, st);
        } else if constexpr (std::is_same_v<T, wire::TopologyDigest>) {
          if (settled || st != Stage::Welcomed) {
            c->close(1, error(NEXAR_ERR_PROTOCOL, "unexpected TopologyDigest from the seed"));
            return;
          }
          std::lock_guard<std::mutex> g(mu_);
          topology_answered_ = true;
          agreed_digest_ = m.digest;
          cv_.notify_all();
        } else if constexpr (std::is_same_v<T, wire::JoinChallenge>) {
          if (st == Stage::Challenged) handle_challenge(m);
        } else {
          c->close(1, error(NEXAR_ERR_PROTOCOL,
                            format("unexpected %s from the seed", std::string(T::kName).c_str())));
        }
      },
      *r.message);
}

MessageSink *SeedClient::on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) {
  c->close(1, error(NEXAR_ERR_PROTOCOL, "data frames on a join connection"));
  return nullptr;
}

void SeedClient::fail_from_seed(const wire::JoinError &m, Stage st) {
  const nexar_status_t code = is_known_error(m.status) ? m.status : NEXAR_ERR_PROTOCOL;
  // A seed's reason can list many ranks: whole, but on one line.
  std::string msg = log::one_line(m.reason, wire::kMaxStringLen);
  if (st != Stage::Welcomed && code != NEXAR_ERR_PEER_FAILED && code != NEXAR_ERR_TIMEOUT)
    msg = format("the seed at %s refused this worker: %s", seed_.to_string().c_str(), msg.c_str());
  fail(error(code, msg, m.failed_rank), false);
}

void SeedClient::push_word(Word w) {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> g(mu_);
    words_.push_back(std::move(w));
    wake = wake_;
    cv_.notify_all();
  }
  if (wake) wake();
}

void SeedClient::settle() {
  std::lock_guard<std::mutex> g(mu_);
  settled_ = true;
  on_failure_ = nullptr;
}

void SeedClient::on_word(std::function<void()> wake) {
  std::lock_guard<std::mutex> g(mu_);
  wake_ = std::move(wake);
}

void SeedClient::drop_words() {
  std::lock_guard<std::mutex> g(mu_);
  words_.clear();
}

bool SeedClient::has_word() {
  std::lock_guard<std::mutex> g(mu_);
  return !words_.empty();
}

bool SeedClient::seed_gone() {
  std::lock_guard<std::mutex> g(mu_);
  return gone_;
}

bool SeedClient::take_formed(uint64_t deadline_ns) {
  if (!wait_until(deadline_ns, [&] { return !words_.empty() || gone_; })) return false;
  std::lock_guard<std::mutex> g(mu_);
  if (words_.empty() || words_.front().kind != Word::Formed) return false;
  words_.pop_front();
  return true;
}

bool SeedClient::next_word(uint64_t deadline_ns, Word *out) {
  if (!wait_until(deadline_ns, [&] { return !words_.empty() || gone_; })) return false;
  std::lock_guard<std::mutex> g(mu_);
  if (words_.empty()) {
    out->kind = Word::Gone;
    return true;
  }
  *out = std::move(words_.front());
  words_.pop_front();
  return true;
}

void SeedClient::request_grow(const wire::GrowRequest &req) {
  loop_.run_sync([&] { send(req); });
}

void SeedClient::on_closed(QuicConnection *c, const Status &why) {
  if (c == conn_) {
    conn_ = nullptr;
    Stage st;
    bool settled;
    {
      std::lock_guard<std::mutex> g(mu_);
      st = stage_;
      settled = settled_;
    }
    if (settled) {
      if (st != Stage::Closed)  // not this worker's own close
        LOG_WARN(
            "lost the connection to the elastic seed at %s: %s; the world goes on, but it "
            "cannot grow",
            seed_.to_string().c_str(), why.message.c_str());
      {
        std::lock_guard<std::mutex> g(mu_);
        gone_ = true;
      }
      Word w;
      w.kind = Word::Gone;
      w.error = error(NEXAR_ERR_CLOSED, format("the elastic seed at %s is gone (%s)",
                                               seed_.to_string().c_str(), why.message.c_str()));
      push_word(std::move(w));
    } else if (st == Stage::Welcomed) {
      // The seed is not needed to form the mesh: note it and carry on (a
      // topology check still waiting for its answer ends).
      LOG_DEBUG("connection to the seed closed: %s", why.message.c_str());
      std::lock_guard<std::mutex> g(mu_);
      seed_lost_ = true;
      cv_.notify_all();
    } else if (st == Stage::Connecting) {
      fail(why, false);
    } else if (st != Stage::Failed && st != Stage::Closed) {
      std::string m = why.message;
      if (c->close_cause() == QuicConnection::CloseCause::IdleTimeout)
        m = format("no packets for %.0f s", join::kIdleTimeoutMs / 1e3);
      fail(error(why.code == NEXAR_ERR_CLOSED ? NEXAR_ERR_PEER_FAILED : why.code,
                 format("lost the connection to the seed at %s before the world formed: %s",
                        seed_.to_string().c_str(), m.c_str())),
           false);
    }
  }
  endpoint_->retire(c);
}

// ---- Welcome --------------------------------------------------------------------

Status accept_welcome(const wire::Welcome &w, gnutls_x509_privkey_t key,
                      const SocketAddress &advertised, int32_t asked_rank, JoinTicket *out) {
  auto bad = [](const std::string &why) {
    return error(NEXAR_ERR_PROTOCOL, "the seed's welcome is not valid: " + why);
  };
  if (w.world_size == 0 || w.rank >= w.world_size || w.peers.size() != w.world_size)
    return bad(
        format("rank %u, world size %u, %zu addresses", w.rank, w.world_size, w.peers.size()));
  if (asked_rank >= 0 && w.rank != static_cast<uint32_t>(asked_rank))
    return bad(format("this worker asked for rank %d and was given %u", asked_rank, w.rank));
  if (w.peers[w.rank] != advertised.to_string())
    return bad(format("its address for this rank is %s, this worker advertised %s",
                      w.peers[w.rank].c_str(), advertised.to_string().c_str()));
  X509Cert ca, cert;
  Status s = cert_from_pem(w.ca_pem, &ca);
  if (!s) return bad("CA certificate: " + s.message);
  if (!(s = cert_from_pem(w.cert_pem, &cert))) return bad("node certificate: " + s.message);
  if (!cert_matches_key(cert.get(), key))
    return bad("the certificate is not for this worker's key");
  NodeIdentity id;
  if (!(s = cert_identity(cert.get(), &id))) return bad(s.message);
  if (id.rank != w.rank || id.cluster_id != w.cluster_id)
    return bad(format("the certificate names rank %u of cluster %016llx", id.rank,
                      static_cast<unsigned long long>(id.cluster_id)));
  gnutls_x509_crt_t anchors[1] = {ca.get()};
  gnutls_x509_crt_t chain[1] = {cert.get()};
  unsigned verify = 0;
  if (gnutls_x509_crt_list_verify(chain, 1, anchors, 1, nullptr, 0, 0, &verify) < 0 || verify != 0)
    return bad("the certificate does not chain to the cluster CA");
  std::vector<SocketAddress> peers(w.world_size);
  for (uint32_t r = 0; r < w.world_size; ++r)
    if (!SocketAddress::parse_numeric(w.peers[r], &peers[r]))
      return bad(format("rank %u's address '%s' is not a numeric ip:port", r, w.peers[r].c_str()));
  JoinTicket t;
  if (!(s = TlsCredentials::create(ca.get(), cert.get(), key, &t.creds))) return s;
  t.rank = w.rank;
  t.world_size = w.world_size;
  t.cluster_id = w.cluster_id;
  t.peers = std::move(peers);
  t.ca_fingerprint = cert_fingerprint(ca.get());
  *out = std::move(t);
  return {};
}

// ---- join_cluster -----------------------------------------------------------------

Status bind_worker_socket(const Config &cfg, const SocketAddress &seed, int *fd,
                          SocketAddress *bound, SocketAddress *advertised) {
  ListenChoice choice;
  Status s = choose_listen_address(cfg, seed, &choice);
  if (!s) return s;
  FdGuard guard;
  if (!(s = bind_udp(choice.bind, &guard.fd, bound))) return s;
  if (!(s = advertised_address(cfg, *bound, seed, advertised))) return s;
  LOG_INFO("listening on %s (chosen by %s), advertising %s", bound->to_string().c_str(),
           choice.how.c_str(), advertised->to_string().c_str());
  *fd = guard.release();
  return {};
}

Status form_welcomed(const Config &cfg, const wire::Welcome &welcome, gnutls_x509_privkey_t key,
                     const SocketAddress &advertised, int32_t asked_rank, int fd, SeedClient &seed,
                     bool settled, std::unique_ptr<Communicator> *out) {
  JoinTicket t;
  Status s = accept_welcome(welcome, key, advertised, asked_rank, &t);
  if (!s) {
    seed.report_error(s);
    return s;
  }
  LOG_INFO("rank %u of %u in cluster %016llx (CA sha256:%s)", t.rank, t.world_size,
           static_cast<unsigned long long>(t.cluster_id), t.ca_fingerprint.c_str());
  // The mesh, on a copy of the bound socket: it stays bound for another attempt.
  const int copy = ::dup(fd);
  if (copy < 0)
    return error(NEXAR_ERR_IO, format("dup of the worker's socket: %s", strerror(errno)));
  auto rank_client =
      make_client(Client::Identity{t.rank, t.world_size, t.cluster_id}, cfg, t.creds);
  if (!(s = rank_client->start_on(copy))) return s;
  // Not in a grow: every rank's graph is checked at the seed before any
  // rank dials, so ranks that are not neighbours cannot disagree unseen.
  const Topology &topo = rank_client->topology();
  if (!settled && topo.problem().ok()) {
    s = seed.agree_topology(wire::TopologyDigest{t.rank, topo.digest(), topo.name()},
                            deadline_after(cfg.connect_timeout_ms));
    if (!s) {
      if (s.code == NEXAR_ERR_TIMEOUT) seed.report_error(s);
      rank_client->shutdown();
      return s;
    }
  }
  auto mesh = std::make_shared<MeshFormation>(rank_client, settled);
  std::weak_ptr<MeshFormation> weak = mesh;
  if (settled) {
    // Any news from the seed (a new welcome, an error) ends this attempt.
    seed.on_word([weak] {
      if (auto m = weak.lock())
        m->fail(error(NEXAR_ERR_ABORTED, "the elastic seed changed the world being formed"));
    });
  } else {
    seed.on_failure([weak](const Status &why) {
      if (auto m = weak.lock()) m->fail(why);
    });
  }
  s = mesh->start(t.peers);
  if (s) s = mesh->wait();
  if (settled) seed.on_word(nullptr);
  if (!s) {
    if (!settled || !seed.has_word()) seed.report_error(s, settled ? t.cluster_id : 0);
    mesh.reset();
    rank_client->shutdown();
    return s;
  }
  seed.report_ready(t.rank, t.cluster_id);
  if (settled && !seed.take_formed(deadline_after(cfg.connect_timeout_ms + kGrowVerdictMarginMs))) {
    // The seed gave this world up (a participant was lost, or it welcomes
    // again without a lost joiner), or never answered: leave it.
    const bool told = seed.has_word();
    rank_client->shutdown();
    if (told)
      return error(NEXAR_ERR_ABORTED, format("the elastic seed gave up grown world %016llx",
                                             static_cast<unsigned long long>(t.cluster_id)));
    return error(NEXAR_ERR_TIMEOUT,
                 format("the elastic seed at %s did not say within %.0f s whether grown world "
                        "%016llx formed",
                        seed.seed_address().to_string().c_str(),
                        (cfg.connect_timeout_ms + kGrowVerdictMarginMs) / 1e3,
                        static_cast<unsigned long long>(t.cluster_id)));
  }
  std::vector<uint32_t> identity(t.world_size);
  for (uint32_t r = 0; r < t.world_size; ++r)
    identity[r] = r;
  *out = std::make_unique<Communicator>(rank_client, 0, t.rank, identity, true);
  return {};
}

Status join_cluster(const Config &cfg, std::unique_ptr<Communicator> *out,
                    std::unique_ptr<SeedClient> *seed_link) {
  if (cfg.seed_address.empty())
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 "no seed address: set NEXAR_SEED=host:port or opts->seed_address");
  std::string token;
  const char *token_file = getenv("NEXAR_CLUSTER_TOKEN_FILE");
  Status s = join::load_token(cfg.cluster_token, token_file ? token_file : "", &token);
  if (!s) return s;
  SocketAddress seed;
  if (!(s = SocketAddress::parse(cfg.seed_address, &seed)))
    return error(s.code, "seed address: " + s.message);

  // 1. This worker's socket, bound before anything else so its address is known.
  FdGuard fd;
  SocketAddress bound, advertised;
  if (!(s = bind_worker_socket(cfg, seed, &fd.fd, &bound, &advertised))) return s;
  if (token.empty() && !seed.is_loopback())
    LOG_WARN("joining the seed at %s without a cluster token: neither side is authenticated",
             seed.to_string().c_str());

  // 2. Key pair and certificate request, made here.
  X509Key key;
  std::string csr;
  if (!(s = generate_key(&key))) return s;
  if (!(s = make_csr_pem(key.get(), &csr))) return s;

  // 3. The seed.
  auto client = std::make_unique<SeedClient>(cfg, token);
  wire::JoinRequest req;
  req.protocol_version = join::kProtocolVersion;
  req.rank = cfg.rank;
  req.world_size = cfg.world_size;
  req.advertise_address = advertised.to_string();
  req.csr_pem = csr;
  req.host_name = host_name();
  req.pid = static_cast<uint32_t>(getpid());
  SocketAddress local = bound;
  set_port(&local, 0);
  wire::Welcome welcome;
  if (!(s = client->join(seed, local, std::move(req), &welcome))) return s;

  // 4. The mesh, on the socket bound in step 1. A joiner of a running world
  // whose grown world did not form may be welcomed again (a joiner of the
  // same grow was lost) or sent back to wait (a member was lost, or a mesh
  // failed; the seed hears of it): it tries again until join_timeout_ms.
  const bool running = client->joins_running_world();
  if (running) client->settle();
  const uint64_t deadline = deadline_after(cfg.join_timeout_ms);
  for (;;) {
    s = form_welcomed(cfg, welcome, key.get(), advertised, running ? -1 : cfg.rank, fd.fd, *client,
                      running, out);
    if (s || !running) break;
    SeedClient::Word w;
    bool retry = false;
    while (!retry) {
      if (!client->next_word(deadline, &w)) {
        s = error(NEXAR_ERR_TIMEOUT, format("waited %.0f s at the elastic seed at %s: no member "
                                            "grew the world (NEXAR_JOIN_TIMEOUT_SECS)",
                                            cfg.join_timeout_ms / 1e3, seed.to_string().c_str()));
        break;
      }
      if (w.kind == SeedClient::Word::Welcome) {
        welcome = std::move(w.welcome);
        retry = true;
      } else if (w.kind != SeedClient::Word::Requeued && w.kind != SeedClient::Word::Formed) {
        s = w.error.ok() ? error(NEXAR_ERR_CLOSED, "the elastic seed is gone") : w.error;
        break;
      }
    }
    if (!retry) break;
  }
  if (!s) {
    client->close();
    return s;
  }
  if (cfg.elastic && seed_link) {
    client->settle();
    *seed_link = std::move(client);
  } else {
    client->close();
  }
  LOG_INFO("rank %u joined a world of %u through the seed at %s", (*out)->rank(), (*out)->size(),
           seed.to_string().c_str());
  return {};
}

}  // namespace nexar
