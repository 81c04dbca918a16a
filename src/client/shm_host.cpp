#include "client/shm_host.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "client/client.h"
#include "client/shm_wait.h"
#include "core/clock.h"
#include "core/log.h"
#include "transport/process_memory.h"
#include "transport/shm_socket.h"

namespace nexar {
namespace {

constexpr uint64_t kRingBytes = 2ull << 20;
constexpr uint32_t kPacketMagic = 0x4853584e;  // "NXSH"
constexpr size_t kProofBytes = 32;
constexpr size_t kHelloBytes = 4 + 4 + 4 + 8 + kProofBytes;  // parse_hello
constexpr uint8_t kAck = 'K';
constexpr size_t kMaxStrangers = 64;
constexpr uint64_t kMaxSetupMs = 10000;
constexpr std::string_view kExporterLabel = "EXPORTER-nexar-shm";

// Boot id, network namespace and uid: two ranks share memory only if all match.
std::string read_host_key() {
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  struct stat ns;
  const unsigned long long netns =
      stat("/proc/self/ns/net", &ns) == 0 ? static_cast<unsigned long long>(ns.st_ino) : 0;
  if (boot.empty() || netns == 0) return {};
  return format("%s/%llu/%u", boot.c_str(), netns, static_cast<unsigned>(getuid()));
}

struct HelloPacket {
  uint32_t rank = 0;
  uint64_t slot = 0;
  std::string proof;
};

bool parse_hello(const std::vector<uint8_t> &b, HelloPacket *out) {
  wire::ByteReader r(b);
  uint32_t magic = 0, version = 0;
  std::span<const uint8_t> proof;
  if (!r.u32(magic) || !r.u32(version) || !r.u32(out->rank) || !r.u64(out->slot) ||
      !r.raw(kProofBytes, proof) || !r.at_end() || magic != kPacketMagic || version != kShmVersion)
    return false;
  out->proof.assign(proof.begin(), proof.end());
  return true;
}

}  // namespace

// One same-host peer's setup, then its channel.
struct ShmHost::Pairing {
  ShmHost *host = nullptr;
  uint32_t peer = 0;
  QuicConnection *conn = nullptr;
  bool hello_done = false;
  bool offer_in = false;
  wire::ShmOffer offer;
  enum class Step { Waiting, Dialled, AwaitDial, AwaitAck, Done } step = Step::Waiting;
  int64_t slot = -1;  // of this rank's segment, reserved by offer_for
  UniqueFd sock;
  PeerShmSegment peer_segment;
  ev_io io;  // the socket during setup (channel_set_ watches it after)
  ev_timer timer;
  bool timer_armed = false;
  std::unique_ptr<ShmChannel> channel;
  UniqueFd process;  // the peer's process, while the channel is open
};

// channel_set_'s events: a peer's socket (its world rank), or its process.
constexpr uint64_t kProcessEvent = uint64_t{1} << 32;

// A connection to the socket that has not said which rank it is yet.
struct ShmHost::Stranger {
  ShmHost *host = nullptr;
  UniqueFd sock;
  ev_io io;
  uint64_t since_ns = 0;
};

ShmHost::ShmHost(Client &client) : client_(client), symmetric_(client.identity().rank) {
  ev_init(&listener_io_, &ShmHost::on_listener_ready);
  listener_io_.data = this;
}

ShmHost::~ShmHost() {
  struct ev_loop *loop = client_.loop().raw();
  if (channel_set_.valid()) client_.loop().unwatch_doorbell();
  ev_io_stop(loop, &listener_io_);
  for (auto &s : strangers_)
    ev_io_stop(loop, &s->io);
  for (auto &p : pairs_) {
    if (!p) continue;
    ev_io_stop(loop, &p->io);
    if (p->timer_armed) client_.loop().stop_timer(&p->timer);
  }
}

void ShmHost::start() {
  const Config &cfg = client_.config();
  if (cfg.shm == NEXAR_SHM_OFF || client_.identity().world_size < 2) return;
  Status s;
  host_key_ = read_host_key();
  if (host_key_.empty()) s = error(NEXAR_ERR_UNSUPPORTED, "cannot read the boot id or namespace");
  if (s) {
    const ShmGeometry g =
        ShmGeometry::fit(cfg.shm_max_bytes, kRingBytes, client_.identity().world_size - 1);
    s = OwnShmSegment::create(client_.identity().rank, g, &segment_);
    slot_used_.assign(g.slot_count, false);
  }
  if (s) s = shm_listen(&listener_, &socket_name_);
  if (s) {
    channel_set_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
    if (!channel_set_.valid())
      s = error(NEXAR_ERR_INTERNAL, format("epoll_create1: %s", strerror(errno)));
  }
  if (!s) {
    // With NEXAR_SHM=require, the first same-host peer fails formation (decide).
    unavailable_ = s;
    if (cfg.shm != NEXAR_SHM_REQUIRE)
      LOG_INFO("same-host shared memory is off for rank %u: %s", client_.identity().rank,
               s.message.c_str());
    return;
  }
  client_.loop().watch_io(&listener_io_, listener_.get(), EV_READ);
  client_.loop().watch_doorbell(channel_set_.get(), [this] { on_doorbell(); });
  symmetric_.use_heap(segment_.heap(), segment_.heap_bytes());
  client_.loop().add_before_sleep([this] { return before_sleep(); });
  enabled_ = true;
}

ShmHost::Pairing &ShmHost::pairing(uint32_t peer) {
  if (pairs_.size() <= peer) pairs_.resize(peer + 1);
  if (!pairs_[peer]) {
    auto p = std::make_unique<Pairing>();
    p->host = this;
    p->peer = peer;
    ev_init(&p->io, &ShmHost::on_pairing_ready);
    p->io.data = p.get();
    ev_init(&p->timer, &ShmHost::on_timer);
    p->timer.data = p.get();
    pairs_[peer] = std::move(p);
  }
  return *pairs_[peer];
}

void ShmHost::release_slot(int64_t slot) {
  if (slot >= 0 && static_cast<size_t>(slot) < slot_used_.size()) slot_used_[slot] = false;
}

wire::ShmOffer ShmHost::offer_for(uint32_t peer) {
  wire::ShmOffer o;
  o.host_key = host_key_;
  o.pid = static_cast<uint32_t>(getpid());
  o.socket_name = socket_name_;
  if (!enabled_) return o;
  Pairing &p = pairing(peer);
  if (p.slot < 0)
    for (size_t i = 0; i < slot_used_.size(); ++i)
      if (!slot_used_[i]) {
        slot_used_[i] = true;
        p.slot = static_cast<int64_t>(i);
        break;
      }
  o.enabled = p.slot >= 0 ? 1 : 0;
  return o;
}

void ShmHost::on_hello_done(uint32_t peer, QuicConnection *c) {
  Pairing &p = pairing(peer);
  p.conn = c;
  p.hello_done = true;
  decide(p);
}

void ShmHost::on_offer(uint32_t peer, const wire::ShmOffer &offer) {
  Pairing &p = pairing(peer);
  if (p.offer_in) return;  // one per connection
  p.offer = offer;
  p.offer_in = true;
  decide(p);
}

void ShmHost::on_connection_lost(uint32_t peer) {
  if (peer >= pairs_.size() || !pairs_[peer]) return;
  Pairing &p = *pairs_[peer];
  if (p.step == Pairing::Step::Done) return;
  end_setup(p);
  release_slot(std::exchange(p.slot, -1));
  p.step = Pairing::Step::Done;
}

void ShmHost::decide(Pairing &p) {
  if (!p.hello_done || !p.offer_in || p.step != Pairing::Step::Waiting) return;
  const bool same_host = !host_key_.empty() && p.offer.host_key == host_key_;
  if (!same_host || !enabled_ || p.slot < 0 || !p.offer.enabled) {
    Status why;
    if (same_host && !unavailable_.ok())
      why = unavailable_;
    else if (same_host)
      why = error(NEXAR_ERR_UNSUPPORTED, !enabled_ || p.slot < 0
                                             ? "shared memory is off or over budget on this rank"
                                             : "shared memory is off or over budget on the peer");
    fall_back(p, why);
    return;
  }
  const uint64_t ms = std::min(client_.config().connect_timeout_ms, kMaxSetupMs);
  const uint64_t now = now_ns();
  client_.loop().arm_timer(&p.timer, now + ms * kNsPerMs, now);
  p.timer_armed = true;
  if (client_.identity().rank > p.peer)
    dial(p);
  else
    p.step = Pairing::Step::AwaitDial;
}

std::string ShmHost::proof(const Pairing &p, std::string_view role) const {
  uint8_t secret[32];
  if (!p.conn || !p.conn->export_keying_material(kExporterLabel, secret, sizeof secret)) return {};
  const uint32_t me = client_.identity().rank;
  std::vector<uint8_t> msg;
  wire::ByteWriter w(msg);
  w.str(role);
  w.u32(std::min(me, p.peer));
  w.u32(std::max(me, p.peer));
  uint8_t mac[kProofBytes];
  if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, secret, sizeof secret, msg.data(), msg.size(), mac) < 0)
    return {};
  return std::string(reinterpret_cast<const char *>(mac), sizeof mac);
}

std::vector<uint8_t> ShmHost::hello_packet(const Pairing &p, std::string_view role) const {
  std::vector<uint8_t> b;
  wire::ByteWriter w(b);
  w.u32(kPacketMagic);
  w.u32(kShmVersion);
  w.u32(client_.identity().rank);
  w.u64(static_cast<uint64_t>(p.slot));
  std::string mac = proof(p, role);
  mac.resize(kProofBytes);  // zeros if there is no session: it cannot match
  w.raw({reinterpret_cast<const uint8_t *>(mac.data()), mac.size()});
  return b;
}

Status ShmHost::check_credentials(int sock, const Pairing &p) const {
  uint32_t uid = 0, pid = 0;
  Status s = shm_peer_credentials(sock, &uid, &pid);
  if (!s) return s;
  if (uid != static_cast<uint32_t>(getuid()) || pid != p.offer.pid)
    return error(NEXAR_ERR_AUTH, format("the socket's peer (uid %u, pid %u) is not rank %u "
                                        "(pid %u)",
                                        uid, pid, p.peer, p.offer.pid));
  return {};
}

void ShmHost::dial(Pairing &p) {
  Status s = shm_connect(p.offer.socket_name, &p.sock);
  if (s) s = check_credentials(p.sock.get(), p);
  if (s) s = shm_send_packet(p.sock.get(), hello_packet(p, "dialler"), segment_.fd());
  if (!s) {
    fall_back(p, s);
    return;
  }
  p.step = Pairing::Step::Dialled;
  client_.loop().watch_io(&p.io, p.sock.get(), EV_READ);
}

void ShmHost::on_listener_ready(struct ev_loop *, ev_io *w, int) {
  static_cast<ShmHost *>(w->data)->on_listener_io();
}

void ShmHost::on_pairing_ready(struct ev_loop *, ev_io *w, int) {
  auto *p = static_cast<Pairing *>(w->data);
  p->host->on_pairing_io(*p);
}

void ShmHost::on_stranger_ready(struct ev_loop *, ev_io *w, int) {
  auto *s = static_cast<Stranger *>(w->data);
  s->host->on_stranger_io(*s);
}

void ShmHost::on_timer(struct ev_loop *, ev_timer *w, int) {
  auto *p = static_cast<Pairing *>(w->data);
  p->timer_armed = false;
  if (p->step == Pairing::Step::Done) return;
  p->host->fall_back(*p, error(NEXAR_ERR_TIMEOUT, "setting up the pair timed out"));
}

void ShmHost::on_listener_io() {
  const uint64_t now = now_ns();
  for (;;) {
    UniqueFd fd = shm_accept(listener_.get());
    if (!fd.valid()) return;
    // Strangers that never spoke are dropped before a new one counts.
    for (size_t i = 0; i < strangers_.size();)
      if (now - strangers_[i]->since_ns > kMaxSetupMs * kNsPerMs)
        drop_stranger(strangers_[i].get());
      else
        ++i;
    if (strangers_.size() >= kMaxStrangers) continue;  // closed: fd goes out of scope
    auto s = std::make_unique<Stranger>();
    s->host = this;
    s->sock = std::move(fd);
    s->since_ns = now;
    ev_init(&s->io, &ShmHost::on_stranger_ready);
    s->io.data = s.get();
    client_.loop().watch_io(&s->io, s->sock.get(), EV_READ);
    strangers_.push_back(std::move(s));
  }
}

void ShmHost::drop_stranger(Stranger *s) {
  ev_io_stop(client_.loop().raw(), &s->io);
  std::erase_if(strangers_, [s](const auto &x) { return x.get() == s; });
}

void ShmHost::on_stranger_io(Stranger &s) {
  std::vector<uint8_t> packet;
  UniqueFd fd;
  std::string why;
  const ShmRecv r = shm_recv_packet(s.sock.get(), kHelloBytes, &packet, &fd, &why);
  if (r == ShmRecv::WouldBlock) return;
  uint32_t rank = UINT32_MAX;
  Status st = r == ShmRecv::Packet
                  ? admit(s, packet, std::move(fd), &rank)
                  : error(NEXAR_ERR_PROTOCOL, why.empty() ? "hung up before its hello" : why);
  if (st) {
    Pairing &p = *pairs_[rank];
    p.sock = std::move(s.sock);
    drop_stranger(&s);
    p.step = Pairing::Step::AwaitAck;
    client_.loop().watch_io(&p.io, p.sock.get(), EV_READ);
    return;
  }
  LOG_DEBUG("rank %u refused a same-host connection: %s", client_.identity().rank,
            st.message.c_str());
  drop_stranger(&s);
  // A rank that is waiting for its dialler gives up on the pair too.
  if (rank < pairs_.size() && pairs_[rank] && pairs_[rank]->step == Pairing::Step::AwaitDial)
    fall_back(*pairs_[rank], st);
}

Status ShmHost::admit(Stranger &s, const std::vector<uint8_t> &packet, UniqueFd fd,
                      uint32_t *rank) {
  HelloPacket h;
  if (!parse_hello(packet, &h)) return error(NEXAR_ERR_PROTOCOL, "a malformed hello packet");
  if (h.rank >= pairs_.size() || !pairs_[h.rank] ||
      pairs_[h.rank]->step != Pairing::Step::AwaitDial)
    return error(NEXAR_ERR_PROTOCOL, format("no pair with rank %u is waiting", h.rank));
  *rank = h.rank;
  Pairing &p = *pairs_[h.rank];
  Status st = check_credentials(s.sock.get(), p);
  if (!st) return st;
  const std::string expected = proof(p, "dialler");
  if (expected.size() != kProofBytes ||
      gnutls_memcmp(expected.data(), h.proof.data(), kProofBytes) != 0)
    return error(NEXAR_ERR_AUTH, format("rank %u's proof does not match its QUIC session", h.rank));
  if (!fd.valid()) return error(NEXAR_ERR_PROTOCOL, "no segment came with the hello");
  if (!(st = PeerShmSegment::map(std::move(fd), p.peer, h.slot, &p.peer_segment))) return st;
  return shm_send_packet(s.sock.get(), hello_packet(p, "listener"), segment_.fd());
}

Status ShmHost::check_reply(Pairing &p, const std::vector<uint8_t> &packet, UniqueFd fd) {
  HelloPacket h;
  if (!parse_hello(packet, &h) || h.rank != p.peer)
    return error(NEXAR_ERR_PROTOCOL, "a malformed answer");
  const std::string expected = proof(p, "listener");
  if (expected.size() != kProofBytes ||
      gnutls_memcmp(expected.data(), h.proof.data(), kProofBytes) != 0)
    return error(NEXAR_ERR_AUTH, "the answer's proof does not match the QUIC session");
  if (!fd.valid()) return error(NEXAR_ERR_PROTOCOL, "no segment came with the answer");
  Status st = PeerShmSegment::map(std::move(fd), p.peer, h.slot, &p.peer_segment);
  if (!st) return st;
  const uint8_t ack = kAck;
  return shm_send_packet(p.sock.get(), {&ack, 1});
}

void ShmHost::on_pairing_io(Pairing &p) {
  // Setup only: once Done, a channel's socket rings the doorbell instead.
  if (p.step == Pairing::Step::Done) return;
  std::vector<uint8_t> packet;
  UniqueFd fd;
  std::string why;
  const ShmRecv r = shm_recv_packet(p.sock.get(), kHelloBytes, &packet, &fd, &why);
  if (r == ShmRecv::WouldBlock) return;
  Status st;
  if (r != ShmRecv::Packet)
    st = error(NEXAR_ERR_PROTOCOL, why.empty() ? "the peer gave up on the pair" : why);
  else if (p.step == Pairing::Step::Dialled)
    st = check_reply(p, packet, std::move(fd));
  else if (p.step != Pairing::Step::AwaitAck || packet.size() != 1 || packet[0] != kAck)
    st = error(NEXAR_ERR_PROTOCOL, "an unexpected packet during setup");
  if (st)
    establish(p);
  else
    fall_back(p, st);
}

void ShmHost::end_setup(Pairing &p) {
  if (p.timer_armed) client_.loop().stop_timer(&p.timer);
  p.timer_armed = false;
  ev_io_stop(client_.loop().raw(), &p.io);
}

void ShmHost::establish(Pairing &p) {
  end_setup(p);
  p.channel = std::make_unique<ShmChannel>(
      static_cast<ShmChannelHandler &>(*this), p.peer, std::move(p.sock), segment_,
      static_cast<uint64_t>(p.slot), std::move(p.peer_segment));
  p.step = Pairing::Step::Done;
  open_.push_back(p.channel.get());
  ++pairs_up_;
  // Its socket rings the doorbell a blocking caller waits on (see
  // on_doorbell): a reply over shared memory wakes that caller alone.
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = p.peer;
  if (epoll_ctl(channel_set_.get(), EPOLL_CTL_ADD, p.channel->socket(), &ev) != 0)
    p.channel->fail(
        error(NEXAR_ERR_INTERNAL, format("cannot watch the channel to rank %u: epoll_ctl: %s",
                                         p.peer, strerror(errno))),
        false);
  // The peer's process too: its socket hangs up at its death only if no
  // child of it holds the socket. Without pidfds, the socket alone tells.
  p.process = watch_process(p.offer.pid);
  ev.data.u64 = kProcessEvent | p.peer;
  if (p.process.valid() && epoll_ctl(channel_set_.get(), EPOLL_CTL_ADD, p.process.get(), &ev) != 0)
    p.process = UniqueFd();
  LOG_DEBUG("rank %u reaches rank %u through shared memory", client_.identity().rank, p.peer);
  client_.peer_ready(p.peer, p.conn);
}

void ShmHost::fall_back(Pairing &p, const Status &why) {
  end_setup(p);
  p.sock = UniqueFd();
  p.peer_segment = PeerShmSegment();
  release_slot(std::exchange(p.slot, -1));
  p.step = Pairing::Step::Done;
  if (!why.ok()) {
    if (client_.config().shm == NEXAR_SHM_REQUIRE) {
      client_.fail_formation(
          error(why.code,
                format("rank %u: NEXAR_SHM=require, but rank %u on this host cannot use "
                       "shared memory: %s",
                       client_.identity().rank, p.peer, why.message.c_str()),
                static_cast<int32_t>(p.peer)));
      return;
    }
    if (!std::exchange(logged_fallback_, true))
      LOG_INFO("rank %u reaches rank %u on this host over QUIC, not shared memory: %s",
               client_.identity().rank, p.peer, why.message.c_str());
  }
  if (p.conn) client_.peer_ready(p.peer, p.conn);
}

void ShmHost::on_doorbell() {
  epoll_event ready[16];
  int n;
  do {
    n = epoll_wait(channel_set_.get(), ready, 16, 0);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = ready[i].data.u64;
      const auto peer = static_cast<uint32_t>(tag);
      if (peer >= pairs_.size() || !pairs_[peer] || !pairs_[peer]->channel) continue;
      if (tag & kProcessEvent) {
        pairs_[peer]->channel->on_peer_process_ended();
        // Readable for good now, even if the channel had closed already (this
        // rank left it): out of the set.
        pairs_[peer]->process = UniqueFd();
      } else {
        pairs_[peer]->channel->on_socket_ready();
      }
    }
  } while (n == 16);
}

ShmChannel *ShmHost::channel(uint32_t peer) const {
  if (peer >= pairs_.size() || !pairs_[peer]) return nullptr;
  ShmChannel *c = pairs_[peer]->channel.get();
  return c && !c->closed() ? c : nullptr;
}

uint32_t ShmHost::peer_pid(uint32_t peer) const {
  return channel(peer) ? pairs_[peer]->offer.pid : 0;
}

bool ShmHost::peer_process_ended(uint32_t peer) const {
  return !channel(peer) || !pairs_[peer]->process.valid() || process_ended(pairs_[peer]->process);
}

std::string ShmHost::host_key_of(uint32_t peer) const {
  if (peer == client_.identity().rank) return host_key_;
  if (peer >= pairs_.size() || !pairs_[peer] || !pairs_[peer]->offer_in) return {};
  return pairs_[peer]->offer.host_key;
}

bool ShmHost::has_queued() const {
  for (ShmChannel *c : open_)
    if (!c->closed() && c->queued_bytes() > 0) return true;
  return false;
}

void ShmHost::leave_all(const Status &s) {
  for (ShmChannel *c : open_)
    c->leave(s);
}

void ShmHost::cut_off(uint32_t peer, const Status &why) {
  if (ShmChannel *c = channel(peer)) c->leave(why, true);
}

void ShmHost::peer_vanished(uint32_t peer) {
  // Posted: the operation that saw it is still running, and the death fails
  // every pending operation with peer, that one included. (The loop stops
  // before this host goes.)
  client_.loop().post([this, peer] {
    if (ShmChannel *c = channel(peer)) c->on_peer_process_ended();
  });
}

void ShmHost::add_stats(nexar_stats_t *out) const {
  out->shm_pairs = 0;
  out->shm_bytes_sent = 0;
  out->shm_bytes_received = 0;
  out->shm_collectives = collectives_;
  out->shm_bytes_by_reference = coll_bytes_by_reference_;
  out->shm_bytes_read_directly = bytes_read_directly_;
  for (ShmChannel *c : open_) {
    if (!c->closed()) ++out->shm_pairs;
    out->shm_bytes_sent += c->bytes_sent();
    out->shm_bytes_received += c->bytes_received();
    out->shm_bytes_by_reference += c->bytes_by_reference();
    out->messages_sent += c->messages_sent();
    out->messages_received += c->messages_received();
  }
}

MessageSink *ShmHost::on_shm_frame(ShmChannel *ch, const wire::FrameHeader &h) {
  return client_.router().deliver(ch->peer_rank(), nullptr, -1, h);
}

void ShmHost::on_shm_closed(ShmChannel *ch, const Status &why, bool left) {
  // A hung-up socket stays readable: it must not ring the doorbell again.
  if (ch->socket() >= 0) epoll_ctl(channel_set_.get(), EPOLL_CTL_DEL, ch->socket(), nullptr);
  pairs_[ch->peer_rank()]->process = UniqueFd();  // out of the set, too
  client_.shm_peer_lost(ch->peer_rank(), why, left);
}

EventLoop *ShmHost::loop() const {
  return &client_.loop();
}

uint8_t *ShmHost::allocate_shared(uint64_t bytes, uint64_t *offset) {
  if (!enabled_) return nullptr;
  auto *p = static_cast<uint8_t *>(symmetric_.allocate_shared(bytes));
  if (p) *offset = static_cast<uint64_t>(p - segment_.heap());
  return p;
}

void ShmHost::release_shared(uint8_t *p) {
  (void)symmetric_.release(p);
}

void ShmHost::ring(uint32_t peer) {
  if (ShmChannel *c = channel(peer)) c->ring_peer();
}

void ShmHost::remove_waiter(ShmCondition *w) {
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it)
    if (*it == w) {
      waiters_.erase(it);
      return;
    }
}

bool ShmHost::poll_waiters() {
  bool any = false;
  // poll() may finish a condition, which unregisters it: walk a copy.
  for (ShmCondition *w : std::vector<ShmCondition *>(waiters_))
    any |= w->poll();
  return any;
}

bool ShmHost::before_sleep() {
  if (open_.empty()) return false;
  ShmSegmentHeader *h = segment_.header();
  for (;;) {
    if (h->sleep_seq & 1) shm_store(&h->sleep_seq, h->sleep_seq + 1);  // awake
    // A few rounds of at most 1 MiB per channel, so the rest of the loop
    // (QUIC, timers, commands) gets its turn during a long stream.
    bool moved = true;
    for (int round = 0; moved && round < 8; ++round) {
      moved = false;
      for (ShmChannel *c : open_)
        moved |= c->progress(1u << 20);
    }
    moved |= poll_waiters();
    if (moved) return true;  // the loop's pass calls again, and does not sleep while it moves
    // About to sleep: say so, then look once more. A peer publishes, then
    // reads this word; this side writes the word, then reads the counters.
    shm_store(&h->sleep_seq, h->sleep_seq + 1);
    bool work = false;
    for (ShmChannel *c : open_)
      work |= c->has_work();
    work |= poll_waiters();
    if (!work) return false;
  }
}

}  // namespace nexar
