#include "hostile_peer.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "cluster/join_protocol.h"
#include "core/clock.h"
#include "transport/codec.h"
#include "transport/quic_endpoint.h"

using namespace nexar;

namespace nexar_probe {

namespace {

std::string arg(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return def;
}

// One attacking connection and its own loop: what the victim did with it.
struct Link : ConnectionHandler {
  EventLoop loop{-1};
  std::unique_ptr<QuicEndpoint> ep;
  std::mutex mu;
  std::condition_variable cv;
  QuicConnection *conn = nullptr;
  bool up = false, acked = false, closed = false;
  std::string why;
  // Run on the loop thread once the handshake is done (this side's view).
  std::function<void(QuicConnection *)> on_up;

  void on_handshake_done(QuicConnection *c, const NodeIdentity &) override {
    {
      std::lock_guard<std::mutex> g(mu);
      up = true;
      conn = c;
      cv.notify_all();
    }
    if (on_up) on_up(c);
  }
  void on_control(QuicConnection *, std::span<const uint8_t> m) override {
    wire::DecodeResult r = wire::decode_control(m);
    if (r && std::holds_alternative<wire::HelloAck>(*r.message)) {
      std::lock_guard<std::mutex> g(mu);
      acked = true;
      cv.notify_all();
    }
  }
  MessageSink *on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) override {
    c->close(1, error(NEXAR_ERR_PROTOCOL, "data"));
    return nullptr;
  }
  void on_closed(QuicConnection *c, const Status &w) override {
    {
      std::lock_guard<std::mutex> g(mu);
      closed = true;
      conn = nullptr;
      why = w.message;
      cv.notify_all();
    }
    ep->retire(c);
  }

  // Dials the target; before_hello runs on the new connection before its
  // first packet is written (the TLS session can still be changed).
  Status dial(const AttackTarget &t, std::shared_ptr<TlsCredentials> creds, ConnectionPolicy policy,
              const std::function<void(QuicConnection *)> &before_hello = {}) {
    ep = std::make_unique<QuicEndpoint>(&loop, this, t.cluster_id, std::move(creds), 5000, 5000,
                                        1000, policy);
    SocketAddress local;
    SocketAddress::parse("127.0.0.1:0", &local);
    Status s = ep->open(local);
    loop.start();
    if (s)
      loop.run_sync([&] {
        QuicConnection *c = nullptr;
        s = ep->connect(t.addr, t.rank, &c);
        if (s && before_hello) before_hello(c);
      });
    return s;
  }
  // Until the victim acknowledged a hello or closed (or `seconds` passed).
  void wait_verdict(double seconds) {
    std::unique_lock<std::mutex> g(mu);
    cv.wait_for(g, std::chrono::duration<double>(seconds), [&] { return acked || closed; });
  }
  std::string verdict(const std::string &name) {
    std::lock_guard<std::mutex> g(mu);
    if (acked) return "ATTACK " + name + " ACCEPTED";
    if (closed) return "ATTACK " + name + " REFUSED " + why;
    return "ATTACK " + name + " ACCEPTED (still open)";
  }
  ~Link() override {
    if (ep) loop.run_sync([&] { ep->shutdown(error(NEXAR_ERR_CLOSED, "attack over")); });
    loop.stop();
  }
};

// Hello claiming `rank` (an honest peer claims the rank its certificate names).
void say_hello(QuicConnection *c, const AttackTarget &t, uint32_t rank) {
  c->send_control(wire::Hello{1, t.cluster_id, rank, t.world_size, "hostile"});
}

// ---- certificates outside their validity -------------------------------------------------

struct Pem {
  std::string text;
  gnutls_datum_t datum() {
    return {reinterpret_cast<unsigned char *>(text.data()), static_cast<unsigned>(text.size())};
  }
};

bool read_pem(const std::string &path, Pem *out) {
  std::ifstream f(path);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out->text = ss.str();
  return true;
}

// A leaf for t.own_rank with the cluster's names, signed by the cluster's own
// CA, valid from `from` to `until` only.
Status leaf_with_validity(const AttackTarget &t, time_t from, time_t until,
                          std::shared_ptr<TlsCredentials> *out) {
  Pem ca_pem, key_pem;
  if (!read_pem(t.ca_dir + "/ca.pem", &ca_pem) || !read_pem(t.ca_dir + "/ca-key.pem", &key_pem))
    return error(NEXAR_ERR_IO, "cannot read the CA from " + t.ca_dir);
  X509Cert ca;
  Status s = cert_from_pem(ca_pem.text, &ca);
  if (!s) return s;
  gnutls_x509_privkey_t raw_ca_key = nullptr;
  gnutls_x509_privkey_init(&raw_ca_key);
  X509Key ca_key(raw_ca_key);
  gnutls_datum_t kd = key_pem.datum();
  if (gnutls_x509_privkey_import2(raw_ca_key, &kd, GNUTLS_X509_FMT_PEM, nullptr, 0) < 0)
    return error(NEXAR_ERR_TLS, "cannot import the CA key");
  X509Key key;
  if (!(s = generate_key(&key))) return s;
  gnutls_x509_crt_t raw_leaf = nullptr;
  gnutls_x509_crt_init(&raw_leaf);
  X509Cert leaf(raw_leaf);
  const std::string cn = format("nexar-rank-%u", t.own_rank);
  const std::string org = format("nexar-cluster-%016" PRIx64, t.cluster_id);
  const uint8_t serial[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x08};
  int rc = 0;
  auto check = [&](int r) {
    if (rc >= 0) rc = r;
  };
  check(gnutls_x509_crt_set_version(raw_leaf, 3));
  check(gnutls_x509_crt_set_serial(raw_leaf, serial, sizeof serial));
  check(gnutls_x509_crt_set_activation_time(raw_leaf, from));
  check(gnutls_x509_crt_set_expiration_time(raw_leaf, until));
  check(gnutls_x509_crt_set_dn_by_oid(raw_leaf, GNUTLS_OID_X520_COMMON_NAME, 0, cn.data(),
                                      static_cast<unsigned>(cn.size())));
  check(gnutls_x509_crt_set_dn_by_oid(raw_leaf, GNUTLS_OID_X520_ORGANIZATION_NAME, 0, org.data(),
                                      static_cast<unsigned>(org.size())));
  check(gnutls_x509_crt_set_key(raw_leaf, key.get()));
  check(gnutls_x509_crt_set_basic_constraints(raw_leaf, 0, -1));
  check(gnutls_x509_crt_set_key_usage(raw_leaf, GNUTLS_KEY_DIGITAL_SIGNATURE));
  check(gnutls_x509_crt_set_key_purpose_oid(raw_leaf, GNUTLS_KP_TLS_WWW_SERVER, 0));
  check(gnutls_x509_crt_set_key_purpose_oid(raw_leaf, GNUTLS_KP_TLS_WWW_CLIENT, 0));
  check(gnutls_x509_crt_sign2(raw_leaf, ca.get(), raw_ca_key, GNUTLS_DIG_SHA256, 0));
  if (rc < 0) return error(NEXAR_ERR_TLS, gnutls_strerror(rc));
  return TlsCredentials::create(ca.get(), raw_leaf, key.get(), out);
}

// ---- raw stream writes ---------------------------------------------------------------------

// Writes bytes on stream sid straight through ngtcp2, past nexar's lanes
// (optionally finishing the stream); the bytes ngtcp2 took.
size_t write_raw(QuicEndpoint &ep, QuicConnection *c, int64_t sid, const uint8_t *p, size_t n,
                 bool fin) {
  ngtcp2_vec v{const_cast<uint8_t *>(p), n};
  ngtcp2_pkt_info pi{};
  ngtcp2_ssize taken = -1;
  uint8_t buf[1500];
  const ngtcp2_ssize w = ngtcp2_conn_writev_stream(c->raw(), nullptr, &pi, buf, 1200, &taken,
                                                   fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0, sid, &v,
                                                   n ? 1 : 0, now_ns());
  if (w > 0) {
    size_t size = static_cast<size_t>(w);
    ep.transmit(c->remote(), buf, &size, 1);
  }
  return taken > 0 ? static_cast<size_t>(taken) : 0;
}

// ---- the attacks ---------------------------------------------------------------------------

void handshake_attack(const std::string &name, const AttackTarget &t,
                      std::shared_ptr<TlsCredentials> creds, ConnectionPolicy policy,
                      const std::function<void(QuicConnection *)> &before_hello = {},
                      uint32_t claim = UINT32_MAX) {
  Link link;
  link.on_up = [&](QuicConnection *c) {
    say_hello(c, t, claim == UINT32_MAX ? t.own_rank : claim);
  };
  Status s = link.dial(t, std::move(creds), policy, before_hello);
  if (!s) {
    printf("ATTACK %s ERROR %s\n", name.c_str(), s.message.c_str());
    return;
  }
  link.wait_verdict(10);
  printf("%s\n", link.verdict(name).c_str());
}

// Stream after stream, each finished after its lane byte.
void finish_streams(const AttackTarget &t) {
  Link link;
  if (Status s = link.dial(t, t.creds, ConnectionPolicy::mesh()); !s) {
    printf("ATTACK finish-streams ERROR %s\n", s.message.c_str());
    return;
  }
  {
    std::unique_lock<std::mutex> g(link.mu);
    link.cv.wait_for(g, std::chrono::seconds(10), [&] { return link.up || link.closed; });
  }
  constexpr int kStreams = 2000;
  int finished = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (finished < kStreams && std::chrono::steady_clock::now() < end) {
    bool closed = false;
    link.loop.run_sync([&] {
      QuicConnection *c = link.conn;
      if (!c || c->closed()) {
        closed = true;
        return;
      }
      const uint8_t lane = static_cast<uint8_t>(wire::Lane::Data);
      for (int64_t sid; finished < kStreams;) {
        if (ngtcp2_conn_open_uni_stream(c->raw(), &sid, nullptr) != 0) break;  // at the limit
        write_raw(*link.ep, c, sid, &lane, 1, true);
        ++finished;
      }
    });
    if (closed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  link.wait_verdict(5);
  std::string v = link.verdict("finish-streams");
  printf("%s streams=%d\n", v.c_str(), finished);
}

// A read-only view of `bytes` zero bytes that costs no memory.
struct ZeroPages {
  void *p = MAP_FAILED;
  size_t n = 0;
  explicit ZeroPages(size_t bytes) : n(bytes) {
    p = mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  ~ZeroPages() {
    if (p != MAP_FAILED) munmap(p, n);
  }
  const uint8_t *data() const { return static_cast<const uint8_t *>(p); }
};

// One P2P frame whose header says `length`, its payload zeros.
void long_frame(const std::string &name, const AttackTarget &t, uint64_t length) {
  ZeroPages zeros(length + 4096);
  if (zeros.p == MAP_FAILED) {
    printf("ATTACK %s ERROR mmap: %s\n", name.c_str(), strerror(errno));
    return;
  }
  Link link;
  SendItem *item = nullptr;
  link.on_up = [&](QuicConnection *c) {
    OutgoingMessage m;
    m.header.kind = wire::FrameKind::P2P;
    m.header.comm_id = 0x5eed;
    m.header.tag = 0xbad;
    m.header.length = length;
    m.payload = zeros.data();
    item = c->send(std::move(m), false, 0);
  };
  if (Status s = link.dial(t, t.creds, ConnectionPolicy::mesh()); !s) {
    printf("ATTACK %s ERROR %s\n", name.c_str(), s.message.c_str());
    return;
  }
  // What the victim let in: the bytes written stop growing (or it closed).
  uint64_t written = 0, last = UINT64_MAX;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int still = 0;
  while (std::chrono::steady_clock::now() < end && still < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    bool closed = false;
    link.loop.run_sync([&] {
      closed = link.conn == nullptr;
      if (!closed && item) written = item->written;
    });
    if (closed) break;
    still = written == last && written > 0 ? still + 1 : 0;
    last = written;
  }
  {
    std::lock_guard<std::mutex> g(link.mu);
    if (link.closed) {
      printf("ATTACK %s REFUSED %s written=%" PRIu64 "\n", name.c_str(), link.why.c_str(), written);
      return;
    }
  }
  printf("ATTACK %s CONTAINED written=%" PRIu64 "\n", name.c_str(), written);
}

// Many connections with the valid certificate, none of which says hello.
struct Crowd : ConnectionHandler {
  QuicEndpoint *ep = nullptr;
  std::atomic<int> up{0}, closed{0};
  void on_handshake_done(QuicConnection *, const NodeIdentity &) override { ++up; }
  void on_control(QuicConnection *, std::span<const uint8_t>) override {}
  MessageSink *on_message(QuicConnection *c, int64_t, const wire::FrameHeader &) override {
    c->close(1, error(NEXAR_ERR_PROTOCOL, "data"));
    return nullptr;
  }
  void on_closed(QuicConnection *c, const Status &) override {
    ++closed;
    ep->retire(c);
  }
};

void many_connections(const AttackTarget &t, int count) {
  EventLoop loop(-1);
  Crowd crowd;
  QuicEndpoint ep(&loop, &crowd, t.cluster_id, t.creds, 5000, 5000, 1000, ConnectionPolicy::mesh());
  crowd.ep = &ep;
  SocketAddress local;
  SocketAddress::parse("127.0.0.1:0", &local);
  Status s = ep.open(local);
  loop.start();
  if (s)
    loop.run_sync([&] {
      for (int i = 0; i < count && s; ++i) {
        QuicConnection *c = nullptr;
        s = ep.connect(t.addr, t.rank, &c);
      }
    });
  if (!s) {
    printf("ATTACK connections ERROR %s\n", s.message.c_str());
  } else {
    // Until every connection is up and the victim has closed what it will.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    int settled = 0, last = -1;
    while (std::chrono::steady_clock::now() < end && settled < 20) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int now_closed = crowd.closed.load();
      settled = crowd.up.load() == count && now_closed == last ? settled + 1 : 0;
      last = now_closed;
    }
    printf("ATTACK connections %s opened=%d closed=%d\n",
           crowd.closed.load() > 0 ? "REFUSED" : "ACCEPTED", crowd.up.load(), crowd.closed.load());
  }
  loop.run_sync([&] { ep.shutdown(error(NEXAR_ERR_CLOSED, "attack over")); });
  loop.stop();
}

}  // namespace

bool hostile_attack(const std::string &what, const AttackTarget &t) {
  const time_t now = time(nullptr);
  if (what == "other-ca") {
    // Same names (this cluster, this rank), another CA.
    std::unique_ptr<ClusterCa> fake;
    X509Key key;
    X509Cert cert;
    std::shared_ptr<TlsCredentials> creds;
    Status s = ClusterCa::generate(t.cluster_id, &fake);
    if (s) s = generate_key(&key);
    if (s) s = fake->issue_node_cert(t.own_rank, key.get(), &cert);
    if (s) s = TlsCredentials::create(fake->cert(), cert.get(), key.get(), &creds);
    if (!s) {
      printf("ATTACK %s ERROR %s\n", what.c_str(), s.message.c_str());
      return true;
    }
    // The attacker does not check the victim: only the victim's check matters here.
    handshake_attack(what, t, creds, ConnectionPolicy{false, "nexar/1"});
  } else if (what.rfind("claim-rank:", 0) == 0) {
    const auto claim = static_cast<uint32_t>(atoi(what.c_str() + 11));
    handshake_attack(what, t, t.creds, ConnectionPolicy::mesh(), {}, claim);
  } else if (what == "expired" || what == "not-yet-valid") {
    std::shared_ptr<TlsCredentials> creds;
    const bool expired = what == "expired";
    Status s = leaf_with_validity(t, expired ? now - 7200 : now + 3600,
                                  expired ? now - 3600 : now + 7200, &creds);
    if (!s) {
      printf("ATTACK %s ERROR %s\n", what.c_str(), s.message.c_str());
      return true;
    }
    handshake_attack(what, t, creds, ConnectionPolicy::mesh());
  } else if (what == "wrong-alpn") {
    handshake_attack(what, t, t.creds, ConnectionPolicy{true, "nexar/0"});
  } else if (what == "chacha20") {
    handshake_attack(what, t, t.creds, ConnectionPolicy::mesh(), [](QuicConnection *c) {
      auto session = static_cast<gnutls_session_t>(ngtcp2_conn_get_tls_native_handle(c->raw()));
      const int rc =
          gnutls_priority_set_direct(session,
                                     "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+CHACHA20-POLY1305:"
                                     "%DISABLE_TLS13_COMPAT_MODE",
                                     nullptr);
      if (rc < 0) printf("PROBE_FAILED priority: %s\n", gnutls_strerror(rc));
    });
  } else if (what == "finish-streams") {
    finish_streams(t);
  } else if (what == "length-over-limit") {
    long_frame(what, t, wire::kMaxMessageBytes + 1);
  } else if (what == "length-4g") {
    long_frame(what, t, wire::kMaxMessageBytes);
  } else if (what == "connections") {
    many_connections(t, 64);
  } else {
    return false;
  }
  fflush(stdout);
  return true;
}

// ---- slow joiner ---------------------------------------------------------------------------

int slow_joiner(int argc, char **argv) {
  SocketAddress seed, local;
  std::shared_ptr<TlsCredentials> creds;
  Status s = SocketAddress::parse(arg(argc, argv, "--seed", ""), &seed);
  if (s) s = SocketAddress::parse("127.0.0.1:0", &local);
  if (s) s = TlsCredentials::create_anonymous(&creds);
  if (!s) {
    printf("PROBE_FAILED %s\n", s.message.c_str());
    return 3;
  }
  const double seconds = atof(arg(argc, argv, "--seconds", "20").c_str());
  // A JoinRequest frame on a control stream of its own, a byte at a time.
  wire::JoinRequest req;
  req.protocol_version = join::kProtocolVersion;
  req.worker_proof.assign(join::kProofLen, 0x5a);
  req.host_name = std::string(4000, 's');
  const std::vector<uint8_t> body = wire::encode_control(req);
  std::vector<uint8_t> bytes(1 + wire::kFrameHeaderSize);
  bytes[0] = static_cast<uint8_t>(wire::Lane::Control);
  wire::FrameHeader h;
  h.kind = wire::FrameKind::Control;
  h.length = body.size();
  wire::encode_frame_header(h, bytes.data() + 1);
  bytes.insert(bytes.end(), body.begin(), body.end());

  Link link;
  AttackTarget seed_target;
  seed_target.addr = seed;
  seed_target.rank = UINT32_MAX;
  if (!(s = link.dial(seed_target, creds, ConnectionPolicy::join()))) {
    printf("PROBE_FAILED %s\n", s.message.c_str());
    return 3;
  }
  {
    std::unique_lock<std::mutex> g(link.mu);
    link.cv.wait_for(g, std::chrono::seconds(10), [&] { return link.up || link.closed; });
  }
  int64_t sid = -1;
  size_t sent = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  bool closed = false;
  while (!closed && sent < bytes.size() && std::chrono::steady_clock::now() < end) {
    link.loop.run_sync([&] {
      QuicConnection *c = link.conn;
      if (!c || c->closed()) {
        closed = true;
        return;
      }
      if (sid < 0 && ngtcp2_conn_open_uni_stream(c->raw(), &sid, nullptr) != 0) return;
      sent += write_raw(*link.ep, c, sid, bytes.data() + sent, 1, false);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> g(link.mu);
  if (link.closed)
    printf("SLOW sent=%zu of=%zu after=%.1f CLOSED %s\n", sent, bytes.size(), took,
           link.why.c_str());
  else
    printf("SLOW sent=%zu of=%zu after=%.1f NOT_CLOSED\n", sent, bytes.size(), took);
  return 0;
}

}  // namespace nexar_probe
