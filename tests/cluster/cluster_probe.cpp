// The attacker's side of the cluster security tests. It uses nexar's
// internals to do what a well-behaved worker never does:
//
//   nexar-cluster-probe fake-seed --listen ADDR --out FILE [--claim-open] [--seconds S]
//                       [--formation-ms-left MS]
//       A QUIC server on the join ALPN that does not know the cluster token
//       (it runs until its first visitor leaves, at most S seconds). Its
//       challenge says the formation ends in MS ms (30000).
//       It sends workers a challenge with a made-up proof (or claims to run
//       open) and writes what the worker's transport parameters grant it
//       and every message it receives, decrypted, to FILE:
//         WINDOWS data=N stream_uni=N streams_uni=N
//         MSG <type> <hex of the whole message>
//         CLOSED <reason>
//
//   nexar-cluster-probe forged-worker --seed ADDR
//       Ignores the seed's token proof and sends a request with a made-up
//       proof of its own; prints how the seed answered (REFUSED status=...),
//       then the flow-control limits the seed granted it:
//         SEED_WINDOWS data=N stream_uni=N streams_uni=N
//
//   nexar-cluster-probe silent-workers --seed ADDR --count N [--seconds S]
//       Opens N join connections to the seed and never answers their
//       challenges; prints "READY handshakes=N challenged=N" once every one
//       is challenged, and "DONE ... closed=C" when the seed has closed them
//       all or after S seconds (30).
//
//   nexar-cluster-probe initial-flood --seed ADDR --count N [--answer-retry|--move-after-retry]
//                       [--seconds S] [--report-after R]
//       Starts N join connections whose datagrams pass through a relay of its
//       own: each connection's packets reach the seed from one of 64 relay
//       sockets, and the seed's answers are read there and not passed on (as
//       if the clients' addresses were forged), except Retry packets with
//       --answer-retry: those connections come back with a valid token and
//       then stall. With --move-after-retry, a connection's packets leave
//       from another relay socket once it has its Retry (its token names the
//       first one: its Initials that carry the token leave from another
//       socket), and every answer reaches the clients. Prints what it has
//       seen so far R seconds (1) after every connection's Initial went out,
//       and at the end, after S seconds (6):
//         FLOODING sent=N retried=R admitted=A
//         DONE sent=N retried=R admitted=A
//       It first prints the endpoint's bounds (QuicEndpoint::kRetryAbove and
//       kMaxPendingHandshakes): "LIMITS retry_above=X max_pending=Y".
//       N: connections whose Initial reached the seed; R: answered with a
//       Retry; A: answered with the seed's own Initial (it keeps state).
//       DONE adds answered_retry=T, connections that came back with a token,
//       and refused_token=K, connections the seed closed with INVALID_TOKEN.
//       With --move-after-retry it ends as soon as K equals T (after the
//       report).
//
//   nexar-cluster-probe impostor --seed ADDR --token T --rank R --target T2
//                       --attack ATTACKS|none|die-after-welcome|report-failure:STATUS:RANK
//                       [--done-file F] [--ca-dir D]
//       Joins the cluster honestly as rank R and forms its mesh, then runs
//       ATTACKS (hostile_peer.h: other-ca, claim-rank:N, expired, ...; a
//       comma-separated list, one after the other) against rank T2's mesh
//       listener, each printing its "ATTACK <name> ..." line, then creates F
//       and stays in the world until killed. expired and not-yet-valid need
//       the seed's --ca-dir. "die-after-welcome" exits abruptly once it has
//       its rank; "report-failure:STATUS:RANK" tells the seed, once it has its
//       rank, that its mesh failed with that status because of that rank (any
//       numbers), prints "PROBE_REPORTED" and exits; "die-after-mesh" forms
//       its mesh, then exits abruptly without telling the seed (as --rank -1,
//       a joiner of an elastic world: it waits for a grow's welcome).
//       "stale-ready" (a joiner): forms the grown mesh, holds its report
//       until the seed welcomes it again, sends it then (the first world's
//       id and rank) and joins the new attempt: PROBE_STALE_READY rank=R,
//       then PROBE_JOINED rank=R size=N.
//
//   nexar-cluster-probe slow-joiner --seed ADDR [--seconds S]
//       See hostile_peer.h.
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "client/communicator.h"
#include "cluster/interface_select.h"
#include "cluster/join.h"
#include "cluster/mesh.h"
#include "core/clock.h"
#include "core/log.h"
#include "hostile_peer.h"
#include "transport/codec.h"
#include "transport/quic_endpoint.h"

using namespace nexar;

namespace {

std::string hex(std::span<const uint8_t> b) {
  static const char d[] = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s.push_back(d[x >> 4]);
    s.push_back(d[x & 15]);
  }
  return s;
}

void send_control(QuicConnection *c, const wire::ControlMessage &m) {
  c->send_control(m);
}

// The flow-control limits the peer's transport parameters grant this side.
std::string windows(QuicConnection *c) {
  const ngtcp2_transport_params *p = ngtcp2_conn_get_remote_transport_params(c->raw());
  if (!p) return "unknown";
  return format("data=%llu stream_uni=%llu streams_uni=%llu",
                static_cast<unsigned long long>(p->initial_max_data),
                static_cast<unsigned long long>(p->initial_max_stream_data_uni),
                static_cast<unsigned long long>(p->initial_max_streams_uni));
}

std::string arg(int argc, char **argv, const char *name, const char *def = nullptr) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  if (!def) {
    fprintf(stderr, "missing %s\n", name);
    exit(2);
  }
  return def;
}

bool flag(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], name)) return true;
  return false;
}

// ---- fake seed ---------------------------------------------------------------------

struct FakeSeed : ConnectionHandler {
  QuicEndpoint *ep = nullptr;
  FILE *out = nullptr;
  bool claim_open = false;
  uint64_t formation_ms_left = 30000;
  void on_handshake_done(QuicConnection *c, const NodeIdentity &) override {
    wire::JoinChallenge ch;
    ch.protocol_version = join::kProtocolVersion;
    ch.auth = claim_open ? join::kAuthOpen : join::kAuthToken;
    if (!claim_open) {
      ch.seed_proof.resize(join::kProofLen);
      gnutls_rnd(GNUTLS_RND_NONCE, ch.seed_proof.data(), ch.seed_proof.size());
    }
    ch.world_size = 2;
    ch.formation_ms_left = formation_ms_left;
    send_control(c, ch);
    fprintf(out, "CONNECTED %s\nWINDOWS %s\n", c->remote().to_string().c_str(), windows(c).c_str());
    fflush(out);
  }
  void on_control(QuicConnection *, std::span<const uint8_t> m) override {
    wire::DecodeResult r = wire::decode_control(m);
    std::string name = r ? std::string(wire::control_name(*r.message)) : "undecodable";
    fprintf(out, "MSG %s %s\n", name.c_str(), hex(m).c_str());
    fflush(out);
  }
  MessageSink *on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) override {
    fprintf(out, "MSG data-frame\n");
    fflush(out);
    c->close(1, error(NEXAR_ERR_PROTOCOL, "data"));
    return nullptr;
  }
  void on_closed(QuicConnection *c, const Status &why) override {
    fprintf(out, "CLOSED %s\n", why.message.c_str());
    fflush(out);
    closed = true;
    ep->retire(c);
  }
  std::atomic<bool> closed{false};
};

int fake_seed(int argc, char **argv) {
  const std::string listen = arg(argc, argv, "--listen");
  FILE *out = fopen(arg(argc, argv, "--out").c_str(), "w");
  if (!out) return 2;
  const double seconds = atof(arg(argc, argv, "--seconds", "20").c_str());
  EventLoop loop(-1);
  FakeSeed h;
  h.out = out;
  h.claim_open = flag(argc, argv, "--claim-open");
  h.formation_ms_left =
      strtoull(arg(argc, argv, "--formation-ms-left", "30000").c_str(), nullptr, 10);
  std::shared_ptr<TlsCredentials> creds;
  Status s = TlsCredentials::create_self_signed("nexar-seed", &creds);
  SocketAddress addr;
  if (s) s = SocketAddress::parse(listen, &addr);
  if (!s) {
    fprintf(stderr, "%s\n", s.message.c_str());
    return 2;
  }
  QuicEndpoint ep(&loop, &h, 0, creds, join::kIdleTimeoutMs, 10000, join::kKeepAliveMs,
                  ConnectionPolicy::join());
  h.ep = &ep;
  if (!(s = ep.open(addr))) {
    fprintf(stderr, "%s\n", s.message.c_str());
    return 2;
  }
  printf("LISTENING %s\n", ep.local().to_string().c_str());
  fflush(stdout);
  loop.start();
  // Until the first victim has gone (or the time is up).
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!h.closed && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  loop.run_sync([&] { ep.shutdown(error(NEXAR_ERR_CLOSED, "fake seed done")); });
  loop.stop();
  fclose(out);
  return 0;
}

// ---- impostor ------------------------------------------------------------------------

// A joiner that holds its report of a grown mesh until the seed welcomes it
// again (a lost joiner was dropped), then sends that report late, under the
// rank it had then, and joins the new attempt honestly.
int report_stale_ready(const Config &cfg, const JoinTicket &first, gnutls_x509_privkey_t key,
                       const SocketAddress &adv, int fd, SeedClient &client,
                       const Status &first_mesh, const std::function<void()> &leave_first) {
  printf("PROBE_FIRST_MESH rank=%u %s\n", first.rank,
         first_mesh ? "formed" : first_mesh.message.c_str());
  fflush(stdout);
  SeedClient::Word word;
  const bool welcomed = client.next_word(now_ns() + 60000 * kNsPerMs, &word) &&
                        word.kind == SeedClient::Word::Welcome;
  leave_first();  // the next attempt uses the same socket
  if (!welcomed) {
    printf("PROBE_FAILED no second welcome\n");
    return 3;
  }
  client.report_ready(first.rank, first.cluster_id);
  printf("PROBE_STALE_READY rank=%u\n", first.rank);
  fflush(stdout);
  std::unique_ptr<Communicator> comm;
  const Status s = form_welcomed(cfg, word.welcome, key, adv, -1, fd, client, true, &comm);
  if (!s) {
    printf("PROBE_FAILED second mesh: %s\n", s.message.c_str());
    return 3;
  }
  printf("PROBE_JOINED rank=%u size=%u\n", comm->rank(), comm->size());
  fflush(stdout);
  // Stay in the world (the test ends this process).
  std::this_thread::sleep_for(std::chrono::seconds(120));
  return 0;
}

int impostor(int argc, char **argv) {
  Config cfg;
  cfg.seed_address = arg(argc, argv, "--seed");
  cfg.cluster_token = arg(argc, argv, "--token");
  cfg.rank = atoi(arg(argc, argv, "--rank").c_str());
  cfg.elastic = cfg.rank < 0;  // a joiner: only an elastic world takes one
  cfg.join_timeout_ms = 60000;
  cfg.connect_timeout_ms = 20000;
  const uint32_t target_rank = static_cast<uint32_t>(atoi(arg(argc, argv, "--target").c_str()));
  const std::string what = arg(argc, argv, "--attack");
  const std::string done_file = arg(argc, argv, "--done-file", "");

  // An honest join, step by step (cluster/join.cpp), keeping the pieces.
  SocketAddress seed, bound, adv;
  ListenChoice choice;
  int fd = -1;
  X509Key key;
  std::string csr;
  Status s = SocketAddress::parse(cfg.seed_address, &seed);
  if (s) s = choose_listen_address(cfg, seed, &choice);
  if (s) s = bind_udp(choice.bind, &fd, &bound);
  if (s) s = advertised_address(cfg, bound, seed, &adv);
  if (s) s = generate_key(&key);
  if (s) s = make_csr_pem(key.get(), &csr);
  if (!s) {
    printf("PROBE_FAILED %s\n", s.message.c_str());
    return 3;
  }
  SeedClient client(cfg, cfg.cluster_token);
  wire::JoinRequest req;
  req.protocol_version = join::kProtocolVersion;
  req.rank = cfg.rank;
  req.advertise_address = adv.to_string();
  req.csr_pem = csr;
  req.host_name = "probe";
  req.pid = static_cast<uint32_t>(getpid());
  SocketAddress local = bound;
  reinterpret_cast<sockaddr_in *>(&local.storage)->sin_port = 0;
  wire::Welcome w;
  JoinTicket t;
  s = client.join(seed, local, req, &w);
  const bool grows = s && client.joins_running_world();
  if (grows) client.settle();
  if (s) s = accept_welcome(w, key.get(), adv, cfg.rank, &t);
  if (!s) {
    printf("PROBE_FAILED %s\n", s.message.c_str());
    return 3;
  }
  if (what == "die-after-welcome") {
    // A crash between the welcome and the mesh: no goodbye to anyone.
    printf("PROBE_DYING rank=%u\n", t.rank);
    fflush(stdout);
    _exit(9);
  }
  int32_t status = 0, blamed = 0;
  if (sscanf(what.c_str(), "report-failure:%d:%d", &status, &blamed) == 2) {
    client.report_error(error(status, "the probe says its mesh failed", blamed));
    client.close();
    printf("PROBE_REPORTED rank=%u\n", t.rank);
    return 0;
  }
  auto rank_client =
      make_client(Client::Identity{t.rank, t.world_size, t.cluster_id}, cfg, t.creds);
  // On a copy: fd stays bound for the seed's next welcome (stale-ready).
  s = rank_client->start_on(::dup(fd));
  // As a worker does: the seed checks every rank's graph before anyone dials
  // (at formation; a grow's world keeps the graph it had).
  if (s && !grows)
    s = client.agree_topology(wire::TopologyDigest{t.rank, rank_client->topology().digest(),
                                                   rank_client->topology().name()},
                              now_ns() + cfg.connect_timeout_ms * kNsPerMs);
  std::unique_ptr<MeshFormation> mesh;
  if (s) mesh = std::make_unique<MeshFormation>(rank_client);
  if (s) s = mesh->start(t.peers);
  if (s) s = mesh->wait();
  if (what == "stale-ready")
    return report_stale_ready(cfg, t, key.get(), adv, fd, client, s, [&] {
      mesh.reset();
      rank_client->shutdown();
    });
  if (!s) {
    printf("PROBE_FAILED mesh: %s\n", s.message.c_str());
    return 3;
  }
  if (what == "die-after-mesh") {
    // Lost between its mesh and its report: the others may have reported.
    printf("PROBE_DYING_FORMED rank=%u\n", t.rank);
    fflush(stdout);
    _exit(9);
  }
  client.report_ready(t.rank, t.cluster_id);
  client.close();
  printf("PROBE_JOINED rank=%u size=%u ca=%s\n", t.rank, t.world_size, t.ca_fingerprint.c_str());
  fflush(stdout);

  // The attacks (hostile_peer.h), one after the other, separated by commas.
  const nexar_probe::AttackTarget target{
      t.peers[target_rank],           target_rank, t.rank, t.cluster_id, t.world_size, t.creds,
      arg(argc, argv, "--ca-dir", "")};
  for (std::string rest = what; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string one = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    if (one != "none" && !nexar_probe::hostile_attack(one, target))
      printf("PROBE_FAILED unknown attack %s\n", one.c_str());
  }
  if (!done_file.empty()) {
    int f = open(done_file.c_str(), O_CREAT | O_WRONLY, 0644);
    if (f >= 0) close(f);
  }
  // Stay in the world (the test ends this process).
  std::this_thread::sleep_for(std::chrono::seconds(120));
  return 0;
}

// ---- join clients ------------------------------------------------------------------

// The seed's address (--seed), a local loopback address and anonymous
// credentials for a join client; false (said on stdout) when any fails.
bool join_client_setup(int argc, char **argv, SocketAddress *seed, SocketAddress *local,
                       std::shared_ptr<TlsCredentials> *creds) {
  Status s = SocketAddress::parse(arg(argc, argv, "--seed"), seed);
  if (s) s = SocketAddress::parse("127.0.0.1:0", local);
  if (s) s = TlsCredentials::create_anonymous(creds);
  if (!s) printf("PROBE_FAILED %s\n", s.message.c_str());
  return s.ok();
}

// ---- forged worker -------------------------------------------------------------------

// Ignores the seed's proof and answers with a made-up one.
struct Forger : ConnectionHandler {
  QuicEndpoint *ep = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  std::string result;
  std::string seed_windows;
  void on_handshake_done(QuicConnection *c, const NodeIdentity &) override {
    std::lock_guard<std::mutex> g(mu);
    seed_windows = windows(c);
  }
  void on_control(QuicConnection *c, std::span<const uint8_t> m) override {
    wire::DecodeResult r = wire::decode_control(m);
    if (!r) return;
    if (std::holds_alternative<wire::JoinChallenge>(*r.message)) {
      X509Key key;
      std::string csr;
      generate_key(&key);
      make_csr_pem(key.get(), &csr);
      wire::JoinRequest req;
      req.protocol_version = join::kProtocolVersion;
      req.worker_proof.resize(join::kProofLen);
      gnutls_rnd(GNUTLS_RND_NONCE, req.worker_proof.data(), req.worker_proof.size());
      req.advertise_address = "127.0.0.1:9";
      req.csr_pem = csr;
      req.host_name = "forger";
      send_control(c, req);
      return;
    }
    std::lock_guard<std::mutex> g(mu);
    if (auto *e = std::get_if<wire::JoinError>(&*r.message))
      result = format("REFUSED status=%d %s", e->status, e->reason.c_str());
    else if (std::holds_alternative<wire::JoinAdmitted>(*r.message))
      result = "ADMITTED";
    cv.notify_all();
  }
  MessageSink *on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) override {
    c->close(1, error(NEXAR_ERR_PROTOCOL, "data"));
    return nullptr;
  }
  void on_closed(QuicConnection *c, const Status &why) override {
    {
      std::lock_guard<std::mutex> g(mu);
      if (result.empty()) result = "CLOSED " + why.message;
      cv.notify_all();
    }
    ep->retire(c);
  }
};

int forged_worker(int argc, char **argv) {
  SocketAddress seed, local;
  std::shared_ptr<TlsCredentials> creds;
  if (!join_client_setup(argc, argv, &seed, &local, &creds)) return 3;
  Status s;
  EventLoop loop(-1);
  Forger f;
  QuicEndpoint ep(&loop, &f, 0, creds, 5000, 5000, 1000, ConnectionPolicy::join());
  f.ep = &ep;
  if (!(s = ep.open(local))) return 3;
  loop.start();
  loop.run_sync([&] {
    QuicConnection *c = nullptr;
    s = ep.connect(seed, UINT32_MAX, &c);
  });
  {
    std::unique_lock<std::mutex> g(f.mu);
    f.cv.wait_for(g, std::chrono::seconds(15), [&] { return !f.result.empty(); });
    printf("%s\n", f.result.empty() ? "NO ANSWER" : f.result.c_str());
    printf("SEED_WINDOWS %s\n", f.seed_windows.c_str());
  }
  loop.run_sync([&] { ep.shutdown(error(NEXAR_ERR_CLOSED, "done")); });
  loop.stop();
  return 0;
}

// ---- silent workers ------------------------------------------------------------------

// Completes join handshakes and never answers a challenge.
struct Silent : ConnectionHandler {
  QuicEndpoint *ep = nullptr;
  std::atomic<int> handshakes{0}, challenged{0}, closed{0};
  void on_handshake_done(QuicConnection *, const NodeIdentity &) override { ++handshakes; }
  void on_control(QuicConnection *, std::span<const uint8_t> m) override {
    wire::DecodeResult r = wire::decode_control(m);
    if (r && std::holds_alternative<wire::JoinChallenge>(*r.message)) ++challenged;
  }
  MessageSink *on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) override {
    c->close(1, error(NEXAR_ERR_PROTOCOL, "data"));
    return nullptr;
  }
  void on_closed(QuicConnection *c, const Status &) override {
    ++closed;
    ep->retire(c);
  }
};

int silent_workers(int argc, char **argv) {
  SocketAddress seed, local;
  std::shared_ptr<TlsCredentials> creds;
  if (!join_client_setup(argc, argv, &seed, &local, &creds)) return 3;
  Status s;
  const int count = atoi(arg(argc, argv, "--count").c_str());
  const double seconds = atof(arg(argc, argv, "--seconds", "30").c_str());
  EventLoop loop(-1);
  Silent h;
  QuicEndpoint ep(&loop, &h, 0, creds, join::kIdleTimeoutMs, 10000, join::kKeepAliveMs,
                  ConnectionPolicy::join());
  h.ep = &ep;
  if (!(s = ep.open(local))) return 3;
  loop.start();
  loop.run_sync([&] {
    for (int i = 0; i < count && s; ++i) {
      QuicConnection *c = nullptr;
      s = ep.connect(seed, UINT32_MAX, &c);
    }
  });
  if (!s) {
    printf("PROBE_FAILED %s\n", s.message.c_str());
    return 3;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  bool ready = false;
  while (std::chrono::steady_clock::now() < until && h.closed < count) {
    if (!ready && h.challenged == count) {
      printf("READY handshakes=%d challenged=%d\n", h.handshakes.load(), h.challenged.load());
      ready = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  printf("DONE handshakes=%d challenged=%d closed=%d\n", h.handshakes.load(), h.challenged.load(),
         h.closed.load());
  loop.run_sync([&] { ep.shutdown(error(NEXAR_ERR_CLOSED, "done")); });
  loop.stop();
  return 0;
}

// ---- initial flood -------------------------------------------------------------------

// Handshakes that never finish: nothing to do but let the endpoint retire them.
struct Stalled : ConnectionHandler {
  QuicEndpoint *ep = nullptr;
  std::atomic<int> refused_token{0};
  void on_handshake_done(QuicConnection *, const NodeIdentity &) override {}
  void on_control(QuicConnection *, std::span<const uint8_t>) override {}
  MessageSink *on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) override {
    c->close(1, error(NEXAR_ERR_PROTOCOL, "data"));
    return nullptr;
  }
  void on_closed(QuicConnection *c, const Status &why) override {
    if (why.message.find("transport error 0xb)") != std::string::npos) ++refused_token;
    ep->retire(c);
  }
};

// The connection ID a long-header packet names (dcid or scid), as a key.
std::string long_header_cid(const UdpSocket::Datagram &d, size_t off, size_t len, bool dcid) {
  ngtcp2_version_cid vc;
  if (len == 0 || !(d.data[off] & 0x80) ||
      ngtcp2_pkt_decode_version_cid(&vc, d.data + off, len, 16) != 0)
    return {};
  const uint8_t *cid = dcid ? vc.dcid : vc.scid;
  return std::string(reinterpret_cast<const char *>(cid), dcid ? vc.dcidlen : vc.scidlen);
}

// Calls fn(datagram, offset, length) for each packet of what receive_batch
// read (GRO may have coalesced several into one datagram).
template <class Fn>
void each_packet(const std::vector<UdpSocket::Datagram> &got, Fn fn) {
  for (const auto &d : got)
    for (size_t off = 0; off < d.len; off += d.segment_size) {
      const size_t len = std::min(d.segment_size, d.len - off);
      fn(d, off, len);
    }
}

int initial_flood(int argc, char **argv) {
  SocketAddress seed, local;
  std::shared_ptr<TlsCredentials> creds;
  if (!join_client_setup(argc, argv, &seed, &local, &creds)) return 3;
  const int count = atoi(arg(argc, argv, "--count").c_str());
  const bool move = flag(argc, argv, "--move-after-retry");
  const bool answer_retry = move || flag(argc, argv, "--answer-retry");
  const double seconds = atof(arg(argc, argv, "--seconds", "6").c_str());
  const double report_after = atof(arg(argc, argv, "--report-after", "1").c_str());
  // The clients dial the relay's front socket; it sends their packets on from
  // one of its back sockets, chosen by the client's connection ID.
  constexpr size_t kBack = 64;
  UdpSocket front;
  std::array<UdpSocket, kBack> back;
  Status s = front.bind(local);
  for (size_t i = 0; i < kBack && s; ++i)
    s = back[i].bind(local);
  EventLoop loop(-1);
  Stalled h;
  // The clients outlive the flood and keep retransmitting their Initials:
  // the seed's half-open connections then live at least 6 s (its 3 s idle
  // timeout after the client's retransmission at about 3 s), longer than it
  // takes to report.
  QuicEndpoint ep(&loop, &h, 0, creds, 30000, 30000, join::kKeepAliveMs, ConnectionPolicy::join());
  h.ep = &ep;
  if (s) s = ep.open(local);
  if (!s) {
    printf("PROBE_FAILED %s\n", s.message.c_str());
    return 3;
  }
  loop.start();
  // The endpoint's bounds, so that the tests need not copy them.
  printf("LIMITS retry_above=%zu max_pending=%zu\n", QuicEndpoint::kRetryAbove,
         QuicEndpoint::kMaxPendingHandshakes);
  std::unordered_set<std::string> sent, retried, admitted, answered;
  std::vector<UdpSocket::Datagram> got;
  auto relay = [&] {
    pollfd fds[kBack + 1];
    fds[0] = {front.fd(), POLLIN, 0};
    for (size_t i = 0; i < kBack; ++i)
      fds[i + 1] = {back[i].fd(), POLLIN, 0};
    if (poll(fds, kBack + 1, 5) <= 0) return;
    while (front.receive_batch(got) > 0)
      each_packet(got, [&](const UdpSocket::Datagram &d, size_t off, const size_t &len) {
        const std::string scid = long_header_cid(d, off, len, false);
        if (scid.empty()) return;
        sent.insert(scid);
        // An Initial with a token answers a Retry. (A client that had the
        // seed's own Initial first ignores the Retry.)
        ngtcp2_pkt_hd hd;
        const bool token = ngtcp2_accept(&hd, d.data + off, len) == 0 &&
                           hd.type == NGTCP2_PKT_INITIAL && hd.token.len > 0;
        if (token) answered.insert(scid);
        const size_t via = std::hash<std::string>{}(scid) + (move && token);
        size_t n = 0;
        back[via % kBack].send_packets(seed, d.data + off, &len, 1, &n);
      });
    for (auto &b : back)
      while (b.receive_batch(got) > 0)
        each_packet(got, [&](const UdpSocket::Datagram &d, size_t off, const size_t &len) {
          const std::string client = long_header_cid(d, off, len, true);
          if (client.empty()) return;
          const int type = (d.data[off] & 0x30) >> 4;  // QUIC v1 long-header types
          // An Initial is the seed's first flight, except after a moved
          // client's Retry: then it carries the seed's CONNECTION_CLOSE.
          if (type == 0 && !(move && retried.count(client))) admitted.insert(client);
          if (type == 3) retried.insert(client);  // Retry
          size_t n = 0;
          if ((answer_retry && type == 3) || move)
            front.send_packets(ep.local(), d.data + off, &len, 1, &n);
        });
  };
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  auto all_sent = end;  // when the last connection's first Initial went out
  int started = 0;
  bool said = false;
  while (std::chrono::steady_clock::now() < end) {
    // A batch of connections per round, so the sockets' buffers keep up.
    if (started < count)
      loop.run_sync([&] {
        for (int i = 0; i < 128 && started < count && s; ++i, ++started) {
          QuicConnection *c = nullptr;
          s = ep.connect(front.local(), UINT32_MAX, &c);
        }
      });
    if (!s) {
      printf("PROBE_FAILED %s\n", s.message.c_str());
      return 3;
    }
    relay();
    if (all_sent == end && sent.size() == static_cast<size_t>(count))
      all_sent = std::chrono::steady_clock::now();
    if (!said && all_sent != end &&
        std::chrono::steady_clock::now() - all_sent > std::chrono::duration<double>(report_after)) {
      printf("FLOODING sent=%zu retried=%zu admitted=%zu\n", sent.size(), retried.size(),
             admitted.size());
      said = true;
    }
    // With --move-after-retry, done once every retried connection has its
    // answer (a lost one is retransmitted, which takes longer under load).
    if (move && said && !answered.empty() &&
        h.refused_token.load() == static_cast<int>(answered.size()))
      break;
  }
  printf("DONE sent=%zu retried=%zu admitted=%zu answered_retry=%zu refused_token=%d\n",
         sent.size(), retried.size(), admitted.size(), answered.size(), h.refused_token.load());
  // Nothing more reaches the seed: its half-open connections time out.
  loop.run_sync([&] { ep.shutdown(error(NEXAR_ERR_CLOSED, "done")); });
  loop.stop();
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc >= 2 && !strcmp(argv[1], "fake-seed")) return fake_seed(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "impostor")) return impostor(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "forged-worker")) return forged_worker(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "silent-workers")) return silent_workers(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "initial-flood")) return initial_flood(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "slow-joiner")) return nexar_probe::slow_joiner(argc, argv);
  fprintf(stderr,
          "usage: nexar-cluster-probe "
          "fake-seed|impostor|forged-worker|silent-workers|initial-flood|slow-joiner ...\n");
  return 2;
}
