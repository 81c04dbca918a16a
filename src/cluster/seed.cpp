#include "cluster/seed.h"

#include <arpa/inet.h>
#include <gnutls/crypto.h>

#include <algorithm>
#include <chrono>

#include "cluster/interface_select.h"
#include "core/clock.h"
#include "core/log.h"

namespace nexar {
namespace {

constexpr uint64_t kHandshakeTimeoutMs = 10000;
// A challenged connection that has not sent its request by then is closed. An
// honest worker answers within a round trip (its request is ready before it
// connects); 5 s leaves room for a loaded host, and bounds how long a
// connection that never answers holds one of the challenge slots below.
constexpr double kAuthTimeoutS = 5.0;
constexpr double kRefusedLingerS = 2.0;  // time for a refused worker to read why
constexpr double kNoticeGraceS = 2.0;    // time for failure notices to be delivered
// Connections challenged at once, and connections waiting for a slot. A
// connection past the first bound waits its turn (oldest first) instead of
// being refused: a thousand workers starting together, or connections that
// hold slots without answering, must not turn honest workers away. Past both
// it is refused. A waiting worker gives up after join::kChallengeWaitMs.
constexpr size_t kMaxChallenged = 256;
constexpr size_t kMaxWaiting = Seed::kMaxWorld;
constexpr double kWaitTimeoutS = static_cast<double>(join::kChallengeWaitMs) / 1e3;

// A closed join connection, said plainly (its messages name no rank).
std::string lost_reason(const QuicConnection *c, const Status &why) {
  if (c->close_cause() == QuicConnection::CloseCause::IdleTimeout)
    return format("silent for %.0f s (killed, hung or cut off)", join::kIdleTimeoutMs / 1000.0);
  if (c->close_cause() == QuicConnection::CloseCause::PeerClosed) return "it closed its connection";
  return why.message;
}

}  // namespace

std::string Seed::Member::describe() const {
  std::string s = format("worker at %s", remote.to_string().c_str());
  if (!req.host_name.empty())
    s += format(" (host %s, pid %u%s)", log::one_line(req.host_name).c_str(), req.pid,
                req.rank >= 0 ? format(", asking for rank %d", req.rank).c_str() : "");
  return s;
}

Seed::Seed(SeedConfig cfg) : cfg_(std::move(cfg)), loop_(-1, "nexar-seed") {
  ev_init(&formation_timer_, &Seed::formation_timer_cb);
  formation_timer_.data = this;
  ev_init(&sweep_timer_, &Seed::sweep_timer_cb);
  sweep_timer_.data = this;
  ev_init(&grace_timer_, &Seed::grace_timer_cb);
  grace_timer_.data = this;
}

Seed::~Seed() {
  stop();
  // The loop thread has stopped: tear down in dependency order (closing the
  // endpoint may still call the notice listeners).
  endpoint_.reset();
  notices_.clear();
  members_.clear();
}

Status Seed::start(SeedConfig cfg, std::unique_ptr<Seed> *out) {
  if (cfg.world_size == 0 || cfg.world_size > kMaxWorld)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("seed: world size %u is not in 1..%u", cfg.world_size, kMaxWorld));
  if (cfg.formation_timeout_ms == 0 || cfg.formation_timeout_ms > join::kMaxFormationMs)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("seed: formation timeout %llu ms is not in 1..%llu ms",
                        static_cast<unsigned long long>(cfg.formation_timeout_ms),
                        static_cast<unsigned long long>(join::kMaxFormationMs)));
  if (cfg.max_world_size > kMaxWorld ||
      (cfg.max_world_size != 0 && cfg.max_world_size < cfg.world_size))
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("seed: max world size %u is not in %u..%u (or 0)", cfg.max_world_size,
                        cfg.world_size, kMaxWorld));
  SocketAddress listen;
  Status s = SocketAddress::parse(cfg.listen_address, &listen);
  if (!s) return error(s.code, "seed: listen address: " + s.message);
  if (is_wildcard(listen))
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("seed: listen address %s is a wildcard; give the address of the "
                        "interface workers reach (for example 10.0.0.1:%u): a QUIC server must "
                        "answer from the address it was reached at",
                        cfg.listen_address.c_str(), listen.port()));
  std::unique_ptr<Seed> seed(new Seed(std::move(cfg)));
  SeedConfig &c = seed->cfg_;

  std::string ca_origin = "ephemeral";
  if (!c.ca_dir.empty()) {
    bool created = false;
    if (!(s = ClusterCa::load_or_create(c.ca_dir, &seed->ca_, &created)))
      return error(s.code, "seed: cluster CA: " + s.message);
    ca_origin = format("%s %s", created ? "created in" : "loaded from", c.ca_dir.c_str());
  } else {
    uint64_t id = 0;
    gnutls_rnd(GNUTLS_RND_NONCE, &id, sizeof id);
    if (!(s = ClusterCa::generate(id, &seed->ca_))) return s;
  }
  seed->cluster_id_ = seed->ca_->cluster_id();
  if (!(s = cert_to_pem(seed->ca_->cert(), &seed->ca_pem_))) return s;
  seed->ca_fingerprint_ = cert_fingerprint(seed->ca_->cert());
  if (!(s = TlsCredentials::create_self_signed("nexar-seed", &seed->creds_))) return s;
  seed->endpoint_ = std::make_unique<QuicEndpoint>(
      &seed->loop_, seed.get(), seed->cluster_id_, seed->creds_, join::kIdleTimeoutMs,
      kHandshakeTimeoutMs, join::kKeepAliveMs, ConnectionPolicy::join());
  if (!(s = seed->endpoint_->open(listen))) return error(s.code, "seed: " + s.message);
  seed->address_ = seed->endpoint_->local().to_string();
  seed->loop_.start();
  seed->started_ = true;
  Seed *raw = seed.get();
  seed->loop_.run_sync([raw] {
    ev_timer_set(&raw->formation_timer_, static_cast<double>(raw->cfg_.formation_timeout_ms) / 1e3,
                 0.);
    ev_timer_start(raw->loop_.raw(), &raw->formation_timer_);
    ev_timer_set(&raw->sweep_timer_, 0.5, 0.5);
    ev_timer_start(raw->loop_.raw(), &raw->sweep_timer_);
  });
  const std::string auth =
      !c.token.empty()
          ? "cluster token required"
          : (c.open ? "NO TOKEN, running OPEN: any worker that reaches this address may join"
                    : "no token: only workers on this host are admitted");
  LOG_INFO("seed listening on %s for %u workers; cluster %016llx, CA sha256:%s (%s); %s",
           seed->address_.c_str(), c.world_size, static_cast<unsigned long long>(seed->cluster_id_),
           seed->ca_fingerprint_.c_str(), ca_origin.c_str(), auth.c_str());
  if (c.token.empty() && c.open)
    LOG_WARN("seed at %s runs open: workers are not authenticated", seed->address_.c_str());
  seed->emit(NEXAR_SEED_EVENT_LISTENING, -1,
             format("listening on %s for %u workers; cluster %016llx; CA sha256:%s (%s); %s",
                    seed->address_.c_str(), c.world_size,
                    static_cast<unsigned long long>(seed->cluster_id_),
                    seed->ca_fingerprint_.c_str(), ca_origin.c_str(), auth.c_str()));
  *out = std::move(seed);
  return {};
}

void Seed::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (!started_) return;  // start() failed before the thread ran
  loop_.run_sync([this] {
    const bool was_forming = phase_ == Phase::Admitting || phase_ == Phase::Meshing;
    phase_ = Phase::Stopped;
    ev_timer_stop(loop_.raw(), &formation_timer_);
    ev_timer_stop(loop_.raw(), &sweep_timer_);
    ev_timer_stop(loop_.raw(), &grace_timer_);
    if (endpoint_) endpoint_->shutdown(error(NEXAR_ERR_CLOSED, "the seed stopped"));
    if (was_forming)
      finish(error(NEXAR_ERR_ABORTED, "the seed was stopped before the cluster formed"));
  });
  loop_.stop();
}

Status Seed::wait(uint64_t timeout_ms, bool *ended) {
  std::unique_lock<std::mutex> g(mu_);
  const bool done = cv_.wait_for(g, std::chrono::milliseconds(timeout_ms), [&] { return done_; });
  if (ended) *ended = done;
  if (done) return result_;
  return error(NEXAR_ERR_TIMEOUT, format("the cluster is still forming: %u of %u workers joined",
                                         joined_count_.load(), cfg_.world_size));
}

void Seed::finish(const Status &result) {
  std::lock_guard<std::mutex> g(mu_);
  if (done_) return;
  done_ = true;
  result_ = result;
  cv_.notify_all();
}

void Seed::emit(int32_t kind, int32_t rank, const std::string &message) {
  if (!cfg_.on_event) return;
  SeedEvent e;
  e.kind = kind;
  e.rank = rank;
  e.joined = joined_count_.load();  // emit also runs on the starting thread
  e.world_size = cfg_.world_size;
  e.message = message;
  cfg_.on_event(e);
}

void Seed::send(QuicConnection *c, const wire::ControlMessage &m, SendListener *listener) {
  c->send_control(m, listener);
}

Seed::Member *Seed::member_of(QuicConnection *c) {
  auto it = by_conn_.find(c);
  return it == by_conn_.end() ? nullptr : it->second;
}

void Seed::on_handshake_done(QuicConnection *c, const NodeIdentity &) {
  auto m = std::make_unique<Member>();
  m->conn = c;
  m->remote = c->remote();
  m->since_ns = now_ns();
  m->arrival = arrivals_++;
  Member *raw = m.get();
  const size_t challenged = count(Member::State::Challenged);
  const size_t waiting = count(Member::State::Waiting);
  members_.push_back(std::move(m));
  by_conn_[c] = raw;
  if (phase_ != Phase::Admitting && !admits_joiners()) {
    refuse_late(raw);
    return;
  }
  if (challenged >= kMaxChallenged) {
    if (waiting >= kMaxWaiting) {
      refuse(raw, NEXAR_ERR_IO, "too many connections are waiting to authenticate");
      return;
    }
    raw->state = Member::State::Waiting;
    LOG_DEBUG("%s waits for a challenge slot", raw->describe().c_str());
    return;
  }
  challenge(raw);
}

size_t Seed::count(Member::State state) const {
  size_t n = 0;
  for (auto &m : members_)
    if (m->conn && m->state == state) ++n;
  return n;
}

void Seed::challenge_waiting() {
  if (phase_ == Phase::Stopped) return;
  size_t challenged = count(Member::State::Challenged);
  // Oldest first: members_ is in arrival order.
  for (auto &m : members_) {
    if (!m->conn || m->state != Member::State::Waiting) continue;
    if (phase_ != Phase::Admitting && !admits_joiners()) {
      refuse_late(m.get());
      continue;
    }
    if (challenged >= kMaxChallenged) break;
    challenge(m.get());
    ++challenged;
  }
}

void Seed::challenge(Member *m) {
  QuicConnection *c = m->conn;
  m->state = Member::State::Challenged;
  m->since_ns = now_ns();  // the authentication timeout runs from here
  Status s = join::session_secret(c, &m->secret);
  if (!s) {
    refuse(m, s.code, s.message);
    return;
  }
  wire::JoinChallenge ch;
  ch.protocol_version = join::kProtocolVersion;
  ch.auth = cfg_.token.empty() ? join::kAuthOpen : join::kAuthToken;
  if (!cfg_.token.empty()) ch.seed_proof = join::proof(cfg_.token, m->secret, "seed");
  if (admits_joiners()) {
    // A joiner of a running world: no size to expect, its own join timeout.
    ch.world_size = 0;
    ch.formation_ms_left = join::kMaxFormationMs;
  } else {
    ch.world_size = cfg_.world_size;
    const double left = ev_timer_remaining(loop_.raw(), &formation_timer_);
    ch.formation_ms_left = left > 0 ? static_cast<uint64_t>(left * 1000) : 0;
  }
  send(c, ch);
  LOG_DEBUG("join connection from %s", m->remote.to_string().c_str());
}

void Seed::on_control(QuicConnection *c, std::span<const uint8_t> message) {
  Member *m = member_of(c);
  if (!m) return;
  wire::DecodeResult r = wire::decode_control(message);
  if (!r) {
    LOG_WARN("malformed message from %s: %s", m->describe().c_str(), r.error.c_str());
    c->close(1, error(NEXAR_ERR_PROTOCOL, "malformed join message: " + r.error));
    return;
  }
  std::visit(
      [&](const auto &msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, wire::JoinRequest>) {
          handle_request(m, msg);
        } else if constexpr (std::is_same_v<T, wire::MeshReady>) {
          handle_ready(m, msg);
        } else if constexpr (std::is_same_v<T, wire::TopologyDigest>) {
          handle_topology(m, msg);
        } else if constexpr (std::is_same_v<T, wire::GrowRequest>) {
          handle_grow(m, msg);
        } else if constexpr (std::is_same_v<T, wire::JoinError>) {
          if (m->round != 0) {
            // A participant of a grow could not form the grown mesh.
            if (Round *r = round_of(m)) round_mesh_failed(r, m, msg);
            return;
          }
          if (m->state == Member::State::Welcomed) {
            // Its mesh could not form (typically: another rank is gone).
            m->state = Member::State::Reported;
            // Relayed to every rank and to the seed's owner: only a status
            // of nexar.h and a rank of this world, whatever it sent.
            const nexar_status_t code =
                is_known_error(msg.status) ? msg.status : NEXAR_ERR_PROTOCOL;
            const int32_t blamed =
                msg.failed_rank >= 0 && static_cast<uint32_t>(msg.failed_rank) < cfg_.world_size
                    ? msg.failed_rank
                    : -1;
            if (code != msg.status || blamed != msg.failed_rank)
              LOG_WARN("rank %u reported status %d for rank %d: relayed as %d for rank %d", m->rank,
                       msg.status, msg.failed_rank, code, blamed);
            fail_formation(code, blamed,
                           format("rank %u could not form its mesh: %s", m->rank,
                                  log::one_line(msg.reason).c_str()));
            return;
          }
          // The worker gave up (typically: our token proof did not verify).
          const std::string what =
              format("%s gave up: %s", m->describe().c_str(), log::one_line(msg.reason).c_str());
          LOG_WARN("%s", what.c_str());
          if (m->state == Member::State::Challenged) {
            m->state = Member::State::Refused;
            m->since_ns = now_ns();
            emit(NEXAR_SEED_EVENT_REFUSED, -1, what);
          }
        } else {
          LOG_WARN("unexpected %s from %s", std::string(T::kName).c_str(), m->describe().c_str());
          c->close(1, error(NEXAR_ERR_PROTOCOL, format("unexpected %s on a join connection",
                                                       std::string(T::kName).c_str())));
        }
      },
      *r.message);
  challenge_waiting();  // a request answered frees its challenge slot
}

MessageSink *Seed::on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) {
  c->close(1, error(NEXAR_ERR_PROTOCOL, "data frames on a join connection"));
  return nullptr;
}

void Seed::refuse(Member *m, nexar_status_t code, const std::string &reason) {
  const std::string what = format("refused %s: %s", m->describe().c_str(), reason.c_str());
  LOG_WARN("%s", what.c_str());
  m->state = Member::State::Refused;
  m->since_ns = now_ns();
  if (m->conn) send(m->conn, wire::JoinError{code, -1, reason});
  emit(NEXAR_SEED_EVENT_REFUSED, m->req.rank, what);
}

void Seed::refuse_late(Member *m) {
  // Not failure_'s message: it names the members (hosts, pids, addresses),
  // and this connection has proved nothing. The seed's log has the details.
  if (phase_ == Phase::Failed)
    refuse(m, failure_.code, "this seed's formation failed: it admits no more workers");
  else
    refuse(m, NEXAR_ERR_INVALID_ARGUMENT,
           "this seed's world is complete: it admits no more workers");
}

void Seed::handle_request(Member *m, const wire::JoinRequest &req) {
  if (m->state != Member::State::Challenged) {
    if (m->state != Member::State::Refused)
      m->conn->close(
          1, error(NEXAR_ERR_PROTOCOL, "a JoinRequest before the challenge, or a second one"));
    return;
  }
  m->req = req;
  m->req.csr_pem.clear();  // kept below only if admitted
  if (phase_ != Phase::Admitting && !admits_joiners()) return refuse_late(m);
  if (req.protocol_version != join::kProtocolVersion)
    return refuse(m, NEXAR_ERR_PROTOCOL,
                  format("the worker speaks join protocol %u, this seed %u", req.protocol_version,
                         join::kProtocolVersion));
  if (!cfg_.token.empty()) {
    if (!join::proof_matches(cfg_.token, m->secret, "worker", req.worker_proof))
      return refuse(m, NEXAR_ERR_AUTH,
                    "the worker's cluster token proof did not verify (wrong cluster token)");
  } else if (!cfg_.open && !m->remote.is_loopback()) {
    return refuse(m, NEXAR_ERR_AUTH,
                  "this seed has no cluster token and admits only workers on its own host; set "
                  "the same NEXAR_CLUSTER_TOKEN on the seed and the workers");
  }
  if (admits_joiners()) {
    // A joiner of the running world: its rank and size come with the grow.
    SocketAddress adv;
    if (!SocketAddress::parse_numeric(req.advertise_address, &adv))
      return refuse(m, NEXAR_ERR_INVALID_ARGUMENT,
                    format("advertised address '%s' is not a numeric ip:port",
                           log::one_line(req.advertise_address).c_str()));
    Status s = ClusterCa::check_csr(req.csr_pem);
    if (!s) return refuse(m, s.code, s.message);
    m->req.csr_pem = req.csr_pem;
    return admit_joiner(m);
  }
  if (req.world_size != 0 && req.world_size != cfg_.world_size)
    return refuse(m, NEXAR_ERR_INVALID_ARGUMENT,
                  format("the worker expects a world of %u ranks, this seed forms one of %u",
                         req.world_size, cfg_.world_size));
  if (req.rank < -1 || req.rank >= static_cast<int32_t>(cfg_.world_size))
    return refuse(m, NEXAR_ERR_INVALID_RANK,
                  format("rank %d is outside a world of %u", req.rank, cfg_.world_size));
  SocketAddress adv;
  if (!SocketAddress::parse_numeric(req.advertise_address, &adv))
    return refuse(m, NEXAR_ERR_INVALID_ARGUMENT,
                  format("advertised address '%s' is not a numeric ip:port",
                         log::one_line(req.advertise_address).c_str()));
  if (adv.is_loopback() && !m->remote.is_loopback())
    return refuse(m, NEXAR_ERR_INVALID_ARGUMENT,
                  format("the worker advertises the loopback address %s from another host",
                         req.advertise_address.c_str()));
  for (auto &o : members_) {
    if (o.get() == m || o->state != Member::State::Admitted) continue;
    if (req.rank >= 0 && o->req.rank == req.rank)
      return refuse(m, NEXAR_ERR_INVALID_RANK,
                    format("rank %d is already taken by %s", req.rank, o->describe().c_str()));
    if (o->req.advertise_address == req.advertise_address)
      return refuse(m, NEXAR_ERR_INVALID_ARGUMENT,
                    format("address %s is already advertised by %s", req.advertise_address.c_str(),
                           o->describe().c_str()));
  }
  Status s = ClusterCa::check_csr(req.csr_pem);
  if (!s) return refuse(m, s.code, s.message);
  m->req.csr_pem = req.csr_pem;
  m->state = Member::State::Admitted;
  ++admitted_;
  joined_count_.store(admitted_);
  const std::string what = format("joined %u/%u: %s, listening on %s", admitted_, cfg_.world_size,
                                  m->describe().c_str(), req.advertise_address.c_str());
  LOG_INFO("%s", what.c_str());
  emit(NEXAR_SEED_EVENT_JOINED, req.rank, what);
  send(m->conn, wire::JoinAdmitted{admitted_, cfg_.world_size});
  if (admitted_ == cfg_.world_size) complete();
}

void Seed::complete() {
  // Ranks asked for are kept; the others take the free ranks in arrival order.
  std::vector<Member *> by_rank(cfg_.world_size, nullptr);
  std::vector<Member *> admitted;
  for (auto &m : members_)
    if (m->state == Member::State::Admitted) admitted.push_back(m.get());
  std::sort(admitted.begin(), admitted.end(),
            [](const Member *a, const Member *b) { return a->arrival < b->arrival; });
  for (Member *m : admitted)
    if (m->req.rank >= 0) by_rank[static_cast<uint32_t>(m->req.rank)] = m;
  uint32_t next = 0;
  for (Member *m : admitted) {
    if (m->req.rank >= 0) continue;
    while (by_rank[next])
      ++next;
    by_rank[next] = m;
  }
  wire::Welcome w;
  w.world_size = cfg_.world_size;
  w.cluster_id = cluster_id_;
  w.ca_pem = ca_pem_;
  for (uint32_t r = 0; r < cfg_.world_size; ++r) {
    by_rank[r]->rank = r;
    w.peers.push_back(by_rank[r]->req.advertise_address);
  }
  std::string summary;
  for (uint32_t r = 0; r < cfg_.world_size; ++r) {
    Member *m = by_rank[r];
    X509Cert cert;
    Status s = ca_->issue_from_csr(r, m->req.csr_pem, &cert);
    if (s) s = cert_to_pem(cert.get(), &w.cert_pem);
    if (!s)
      return fail_formation(s.code, static_cast<int32_t>(r),
                            format("cannot sign rank %u's certificate: %s", r, s.message.c_str()));
    w.rank = r;
    send(m->conn, w);
    m->state = Member::State::Welcomed;
    summary += format("%s%u=%s", r ? " " : "", r, m->req.advertise_address.c_str());
  }
  phase_ = Phase::Meshing;
  // The mesh phase gets a bound of its own.
  ev_timer_stop(loop_.raw(), &formation_timer_);
  ev_timer_set(&formation_timer_, static_cast<double>(cfg_.formation_timeout_ms) / 1e3, 0.);
  ev_timer_start(loop_.raw(), &formation_timer_);
  const std::string what = format("world complete: %u ranks assigned and certified (%s)",
                                  cfg_.world_size, summary.c_str());
  LOG_INFO("%s", what.c_str());
  emit(NEXAR_SEED_EVENT_WELCOMED, -1, what);
}

void Seed::handle_ready(Member *m, const wire::MeshReady &r) {
  if (m->round != 0) return round_ready(m, r);
  if (admits_joiners() &&
      (m->state == Member::State::Ready || m->state == Member::State::Pending)) {
    // Sent before this worker heard that its grow failed or restarted.
    LOG_DEBUG("%s reports a grown mesh the seed gave up: ignored", m->describe().c_str());
    return;
  }
  if (m->state != Member::State::Welcomed || r.rank != m->rank || r.world_id != cluster_id_) {
    m->conn->close(1, error(NEXAR_ERR_PROTOCOL, "unexpected MeshReady"));
    return;
  }
  m->state = Member::State::Ready;
  ++ready_;
  LOG_DEBUG("rank %u reports its mesh formed (%u/%u)", m->rank, ready_, cfg_.world_size);
  if (ready_ == cfg_.world_size && phase_ == Phase::Meshing) {
    phase_ = Phase::Formed;
    ev_timer_stop(loop_.raw(), &formation_timer_);
    const std::string what = format("cluster formed: %u ranks", cfg_.world_size);
    LOG_INFO("%s", what.c_str());
    emit(NEXAR_SEED_EVENT_FORMED, -1, what);
    finish(Status());
  }
}

void Seed::fail_formation(nexar_status_t code, int32_t failed_rank, const std::string &reason) {
  if (phase_ != Phase::Admitting && phase_ != Phase::Meshing) return;
  phase_ = Phase::Failed;
  ev_timer_stop(loop_.raw(), &formation_timer_);
  failure_ = error(code, "cluster formation failed: " + reason, failed_rank);
  LOG_ERROR("%s", failure_.message.c_str());
  for (auto &m : members_) {
    if (!m->conn) continue;
    if (m->state != Member::State::Admitted && m->state != Member::State::Welcomed &&
        m->state != Member::State::Ready && m->state != Member::State::Reported)
      continue;
    auto n = std::make_unique<Notice>();
    n->seed = this;
    ++notices_pending_;
    send(m->conn, wire::JoinError{code, failed_rank, failure_.message}, n.get());
    notices_.push_back(std::move(n));
  }
  emit(NEXAR_SEED_EVENT_FAILED, failed_rank, failure_.message);
  if (notices_pending_ == 0) {
    finish(failure_);
  } else {
    ev_timer_set(&grace_timer_, kNoticeGraceS, 0.);
    ev_timer_start(loop_.raw(), &grace_timer_);
  }
}

void Seed::notice_done() {
  if (notices_pending_ > 0 && --notices_pending_ == 0 && phase_ == Phase::Failed) {
    finish(failure_);
  }
}

void Seed::on_closed(QuicConnection *c, const Status &why) {
  Member *m = member_of(c);
  if (m) {
    by_conn_.erase(c);
    m->conn = nullptr;
    const Member::State prev = m->state;
    m->state = Member::State::Gone;
    if (prev == Member::State::Admitted && phase_ == Phase::Admitting) {
      --admitted_;
      joined_count_.store(admitted_);
      fail_formation(NEXAR_ERR_PEER_FAILED, m->req.rank,
                     format("%s was lost before the world was complete: %s", m->describe().c_str(),
                            lost_reason(c, why).c_str()));
    } else if (prev == Member::State::Welcomed && phase_ == Phase::Meshing) {
      fail_formation(NEXAR_ERR_PEER_FAILED, static_cast<int32_t>(m->rank),
                     format("rank %u (%s) was lost while the mesh was forming: %s", m->rank,
                            m->describe().c_str(), lost_reason(c, why).c_str()));
    } else if (prev == Member::State::Challenged) {
      LOG_DEBUG("%s left before joining: %s", m->describe().c_str(), why.message.c_str());
    }
    if (cfg_.elastic && phase_ == Phase::Formed) elastic_closed(m, prev, lost_reason(c, why));
  }
  endpoint_->retire(c);
  challenge_waiting();
}

void Seed::on_formation_timer() {
  if (phase_ == Phase::Admitting) {
    std::string asked;
    uint32_t anonymous = 0;
    for (auto &m : members_) {
      if (m->state != Member::State::Admitted) continue;
      if (m->req.rank >= 0)
        asked += format("%s%d", asked.empty() ? "" : ",", m->req.rank);
      else
        ++anonymous;
    }
    std::string detail;
    if (!asked.empty()) detail += "ranks " + asked;
    if (anonymous)
      detail += format("%s%u without a rank", detail.empty() ? "" : " and ", anonymous);
    fail_formation(NEXAR_ERR_TIMEOUT, -1,
                   format("formation timed out after %.0f s: %u of %u workers joined%s",
                          static_cast<double>(cfg_.formation_timeout_ms) / 1e3, admitted_,
                          cfg_.world_size, detail.empty() ? "" : (" (" + detail + ")").c_str()));
  } else if (phase_ == Phase::Meshing) {
    std::string missing;
    int32_t first = -1;
    for (auto &m : members_) {
      if (m->state != Member::State::Welcomed) continue;
      if (first < 0) first = static_cast<int32_t>(m->rank);
      missing += format("%s%u", missing.empty() ? "" : ",", m->rank);
    }
    fail_formation(NEXAR_ERR_TIMEOUT, first,
                   format("the mesh did not form within %.0f s: rank(s) %s never reported ready",
                          static_cast<double>(cfg_.formation_timeout_ms) / 1e3, missing.c_str()));
  }
}

void Seed::sweep() {
  const uint64_t now = now_ns();
  std::vector<QuicConnection *> to_close;
  for (auto &m : members_) {
    if (!m->conn) continue;
    const double age = static_cast<double>(now - m->since_ns) / 1e9;
    if (m->state == Member::State::Challenged && age > kAuthTimeoutS) {
      LOG_WARN("%s did not authenticate within %.0f s; closing", m->describe().c_str(),
               kAuthTimeoutS);
      to_close.push_back(m->conn);
    } else if (m->state == Member::State::Waiting && age > kWaitTimeoutS) {
      LOG_WARN("%s waited %.0f s for a challenge slot (%zu connections held them); closing",
               m->describe().c_str(), kWaitTimeoutS, kMaxChallenged);
      to_close.push_back(m->conn);
    } else if (m->state == Member::State::Refused && age > kRefusedLingerS) {
      to_close.push_back(m->conn);
    }
  }
  for (QuicConnection *c : to_close)
    c->close(0, error(NEXAR_ERR_CLOSED, "closed by the seed"));
  challenge_waiting();
  if (cfg_.elastic) sweep_rounds();
  // Connections that are gone need no record (a stream of bad connections
  // must not grow memory).
  members_.erase(std::remove_if(members_.begin(), members_.end(),
                                [](const std::unique_ptr<Member> &m) {
                                  return !m->conn && m->state == Member::State::Gone;
                                }),
                 members_.end());
}

void Seed::formation_timer_cb(struct ev_loop *, ev_timer *w, int) {
  static_cast<Seed *>(w->data)->on_formation_timer();
}

void Seed::sweep_timer_cb(struct ev_loop *, ev_timer *w, int) {
  static_cast<Seed *>(w->data)->sweep();
}

void Seed::grace_timer_cb(struct ev_loop *, ev_timer *w, int) {
  auto *self = static_cast<Seed *>(w->data);
  if (self->phase_ == Phase::Failed) self->finish(self->failure_);
}

}  // namespace nexar
