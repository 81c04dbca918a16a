#include "client/relay.h"

#include <algorithm>
#include <cstring>

#include "client/client.h"
#include "core/log.h"

namespace nexar {
namespace {

unsigned long long ull(uint64_t v) {
  return static_cast<unsigned long long>(v);
}

// One relay stream per (origin, destination): a flow never reorders.
uint64_t flow_key(uint32_t origin, uint32_t dest) {
  return (uint64_t{origin} * 0x9E3779B97F4A7C15ull) ^ (uint64_t{dest} * 0xC2B2AE3D27D4EB4Full);
}

Status lost_notice(uint32_t origin, uint32_t lost) {
  return error(NEXAR_ERR_PEER_FAILED,
               format("rank %u lost its connection to rank %u", origin, lost),
               static_cast<int32_t>(lost));
}

}  // namespace

// Tells the relay when the next hop acknowledged a forwarded chunk (or the
// connection died with it), so the sender's held bytes are released.
class Relay::Forwarded : public SendListener {
 public:
  Forwarded(Relay *relay, uint32_t from, uint64_t bytes)
      : relay_(relay), from_(from), bytes_(bytes) {}
  void on_send_done(const Status &) override {
    relay_->release(from_, bytes_);
    delete this;
  }

 private:
  Relay *relay_;
  uint32_t from_;
  uint64_t bytes_;
};

// One relay frame arriving from a neighbour.
class RelaySink : public MessageSink {
 public:
  RelaySink(Relay *relay, QuicConnection *c, int64_t sid, const wire::FrameHeader &h)
      : relay_(relay), conn_(c), sid_(sid), h_(h), from_(c->expected_peer_rank()) {}

  size_t write(const uint8_t *data, size_t len) override {
    size_t credit = 0;
    if (fill_ < wire::kRelayPrefixSize) {
      const size_t k = std::min(len, wire::kRelayPrefixSize - fill_);
      memcpy(prefix_ + fill_, data, k);
      fill_ += k;
      data += k;
      len -= k;
      credit += k;
      if (fill_ == wire::kRelayPrefixSize) decide();
    }
    if (len == 0) return credit;
    switch (mode_) {
      case Mode::Drop:
        return credit + len;
      case Mode::Forward: {
        const size_t old = chunk_.size();
        chunk_.resize(old + len);
        memcpy(chunk_.data() + old, data, len);
        Relay::Hold &hold = relay_->holds_[from_];
        hold.bytes += len;
        if (hold.bytes <= kRelayBudgetBytes) return credit + len;
        hold.credit.add(conn_, sid_, len);  // the sender waits for the next hop
        return credit;
      }
      case Mode::Deliver: {
        auto it = relay_->flows_.find(prefix_data_.origin);
        if (it == relay_->flows_.end() || it->second.sink == nullptr) return credit + len;
        it->second.remaining -= len;
        return credit + it->second.sink->write(data, len);
      }
      case Mode::Notice:
        body_.insert(body_.end(), data, data + len);
        return credit + len;
    }
    return credit + len;
  }

  void finish(bool ok) override {
    Relay *relay = relay_;
    if (fill_ < wire::kRelayPrefixSize && ok)
      drop(format("frame of %llu bytes is shorter than the relay prefix", ull(h_.length)));
    if (mode_ == Mode::Forward) {
      if (ok)
        relay->forward(from_, h_, prefix_data_, std::move(chunk_));
      else
        relay->release(from_, chunk_.size());
    } else if (mode_ == Mode::Deliver) {
      auto it = relay->flows_.find(prefix_data_.origin);
      if (it != relay->flows_.end()) {
        Relay::Flow &f = it->second;
        if (!ok || ((prefix_data_.flags & wire::kRelayLast) && f.remaining != 0)) {
          if (ok)
            LOG_WARN("relay: rank %u's message ended %llu bytes short; dropped",
                     prefix_data_.origin, ull(f.remaining));
          MessageSink *s = std::exchange(f.sink, nullptr);
          relay->flows_.erase(it);
          if (s) s->finish(false);
        } else if (prefix_data_.flags & wire::kRelayLast) {
          const bool ack = f.want_ack;
          const uint64_t id = f.send_id;
          MessageSink *s = std::exchange(f.sink, nullptr);
          relay->flows_.erase(it);
          if (s) s->finish(true);
          if (ack) relay->send_notice(prefix_data_.origin, wire::kRelayAck, id, 0);
        }
      }
    } else if (mode_ == Mode::Notice && ok) {
      relay->finish_notice(from_, prefix_data_, h_, std::move(body_));
    }
    relay->drop_sink(this);
  }

 private:
  enum class Mode { Drop, Forward, Deliver, Notice };

  void drop(const std::string &why) {
    mode_ = Mode::Drop;
    ++relay_->dropped_;
    LOG_WARN("relay: dropped a frame from rank %u: %s", from_, why.c_str());
  }

  // The prefix is in: check it and choose what happens to the chunk.
  void decide() {
    wire::RelayPrefix &p = prefix_data_;
    Status s = wire::decode_relay_prefix(prefix_, &p);
    if (!s) return drop(s.message);
    Client &e = relay_->client_;
    const uint32_t me = e.identity().rank;
    const uint32_t world = e.identity().world_size;
    const Topology &topo = e.topology();
    const uint64_t chunk = h_.length - wire::kRelayPrefixSize;
    if (p.origin >= world || p.dest >= world)
      return drop(format("origin %u or destination %u is outside the world of %u", p.origin, p.dest,
                         world));
    if (p.origin == me) return drop(format("it came back to its origin (a loop), for %u", p.dest));
    if (p.ttl == 0)
      return drop(format("its hop limit ran out on the way from %u to %u", p.origin, p.dest));
    // A loss announced on the way or here: this rank reroutes before judging
    // the route, which the announcing rank already chose round the lost one.
    if (p.inner_kind == wire::kRelayRankLost && p.total < world && p.total != me)
      relay_->on_rank_lost(static_cast<uint32_t>(p.total),
                           lost_notice(p.origin, static_cast<uint32_t>(p.total)));
    // The route from origin to dest must run through the sender, then here.
    bool on_route = false;
    for (uint32_t cur = p.origin, hops = 0; cur != p.dest && hops <= world; ++hops) {
      const uint32_t next = topo.next_hop(cur, p.dest);
      if (cur == from_ && next == me) on_route = true;
      cur = next;
    }
    // After a failure, ranks learn of it at slightly different times and
    // their routes differ for a moment: a frame from a neighbour that this
    // rank can carry on is forwarded (the hop limit still ends any loop),
    // and the destination takes what reached it.
    if (!on_route && (p.dest == me || relay_->rerouted_) && topo.next_hop(me, p.dest) < world)
      on_route = true;
    if (!on_route) {
      // A send waiting for its Ack hears why instead of waiting for its
      // timeout (the routes may be changing after a failure).
      if (p.send_id != 0 && (p.flags & wire::kRelayWantAck) && p.inner_kind < wire::kRelayAck)
        relay_->send_notice(p.origin, wire::kRelayNack, p.send_id, me);
      return drop(format("rank %u is not on the route from %u to %u through this rank", from_,
                         p.origin, p.dest));
    }
    if (p.dest != me) {
      mode_ = Mode::Forward;
      chunk_ = e.pool().checkout(static_cast<size_t>(chunk));
      chunk_.resize(0);
      return;
    }
    const uint8_t kind = p.inner_kind;
    if (kind == wire::kRelayAck || kind == wire::kRelayNack || kind == wire::kRelayRankLost) {
      if (chunk != 0) return drop("a relay notice carries a payload");
      mode_ = Mode::Notice;
      return;
    }
    if (kind == static_cast<uint8_t>(wire::FrameKind::Control)) {
      if ((p.flags & (wire::kRelayFirst | wire::kRelayLast)) !=
              (wire::kRelayFirst | wire::kRelayLast) ||
          p.total != chunk || chunk > wire::kMaxControlBytes)
        return drop("a relayed control message must fit one chunk");
      mode_ = Mode::Notice;
      body_.reserve(static_cast<size_t>(chunk));
      return;
    }
    auto it = relay_->flows_.find(p.origin);
    if (p.flags & wire::kRelayFirst) {
      if (it != relay_->flows_.end()) {
        LOG_WARN("relay: rank %u started a message before finishing the last one; dropped it",
                 p.origin);
        MessageSink *old = std::exchange(it->second.sink, nullptr);
        relay_->flows_.erase(it);
        if (old) old->finish(false);
      }
      if (chunk > p.total) return drop("the first chunk is longer than its message");
      wire::FrameHeader inner;
      inner.kind = static_cast<wire::FrameKind>(kind);
      inner.comm_id = h_.comm_id;
      inner.tag = h_.tag;
      inner.length = p.total;
      inner.check = h_.check;
      Relay::Flow f;
      f.remaining = p.total;
      f.send_id = p.send_id;
      f.want_ack = (p.flags & wire::kRelayWantAck) != 0;
      f.conn = conn_;
      auto [slot, fresh] = relay_->flows_.emplace(p.origin, f);
      (void)fresh;
      slot->second.sink = e.router().deliver(p.origin, conn_, sid_, inner);
      mode_ = Mode::Deliver;
      return;
    }
    if (it == relay_->flows_.end() || it->second.conn != conn_)
      return drop(format("a chunk of a message from rank %u that never started", p.origin));
    if (chunk > it->second.remaining) {
      MessageSink *old = std::exchange(it->second.sink, nullptr);
      relay_->flows_.erase(it);
      if (old) old->finish(false);
      return drop(format("a chunk overruns the message from rank %u", p.origin));
    }
    mode_ = Mode::Deliver;
  }

  Relay *relay_;
  QuicConnection *conn_;
  int64_t sid_;
  wire::FrameHeader h_;
  uint32_t from_;
  uint8_t prefix_[wire::kRelayPrefixSize];
  size_t fill_ = 0;
  wire::RelayPrefix prefix_data_;
  Mode mode_ = Mode::Drop;
  PooledBuf chunk_;
  std::vector<uint8_t> body_;
};

Relay::Relay(Client &client) : client_(client), lost_(client.identity().world_size, false) {}

Relay::~Relay() {
  for (auto &[hop, list] : parked_)
    for (Parked &x : list)
      if (x.msg.listener) x.msg.listener->on_send_done(Status(NEXAR_ERR_CLOSED, "shut down"));
}

QuicConnection *Relay::route(uint32_t dest, Status *why) const {
  const uint32_t me = client_.identity().rank;
  const uint32_t hop = client_.topology().next_hop(me, dest);
  if (hop >= client_.identity().world_size) {
    if (why)
      *why = error(NEXAR_ERR_PEER_FAILED,
                   format("rank %u is unreachable from rank %u: no route in the %s topology", dest,
                          me, client_.topology().name().c_str()),
                   static_cast<int32_t>(dest));
    return nullptr;
  }
  QuicConnection *c = client_.peer(hop).direct_connection();
  if (!c && why) {
    const Status *dead = client_.peer(hop).failure();
    *why = error(NEXAR_ERR_PEER_FAILED,
                 format("rank %u is unreachable from rank %u: rank %u, the next hop on its "
                        "route, is lost%s%s",
                        dest, me, hop, dead ? ": " : "", dead ? dead->message.c_str() : ""),
                 static_cast<int32_t>(dest));
  }
  return c;
}

void Relay::send(QuicConnection *c, uint32_t dest, const wire::FrameHeader &inner,
                 const uint8_t *payload, SendListener *listener, uint64_t want_ack_id,
                 std::vector<QuicConnection::SendItem *> *items) {
  const uint32_t me = client_.identity().rank;
  wire::RelayPrefix p =
      prefix_to(dest, static_cast<uint8_t>(inner.kind), want_ack_id, inner.length);
  uint64_t off = 0;
  do {
    const uint64_t n = std::min(wire::kRelayChunkBytes, inner.length - off);
    p.flags = static_cast<uint8_t>((off == 0 ? wire::kRelayFirst : 0) |
                                   (off + n == inner.length ? wire::kRelayLast : 0) |
                                   (want_ack_id ? wire::kRelayWantAck : 0));
    OutgoingMessage m;
    m.header = inner;
    m.header.kind = wire::FrameKind::Relay;
    m.header.length = wire::kRelayPrefixSize + n;
    wire::encode_relay_prefix(p, m.prefix);
    if (listener) {
      m.payload = payload + off;
      m.listener = listener;
    } else {
      PooledBuf copy = client_.pool().checkout(static_cast<size_t>(n));
      if (n) memcpy(copy.data(), payload + off, static_cast<size_t>(n));
      m.payload = copy.data();
      m.owned = std::move(copy);
    }
    QuicConnection::SendItem *item = c->send(std::move(m), false, flow_key(me, dest));
    if (items) items->push_back(item);
    off += n;
  } while (off < inner.length);
  bytes_sent_ += inner.length;
}

uint64_t Relay::watch(RelayWaiter *w, uint32_t dest, uint32_t next_hop) {
  const uint64_t id = next_send_id_++;
  watches_.emplace(id, Watch{w, dest, next_hop});
  return id;
}

void Relay::unwatch(uint64_t send_id) {
  watches_.erase(send_id);
}

void Relay::send_control(uint32_t dest, const std::vector<uint8_t> &encoded) {
  QuicConnection *c = route(dest, nullptr);
  if (!c) return;
  wire::FrameHeader h;
  h.kind = wire::FrameKind::Control;
  h.length = encoded.size();
  send(c, dest, h, encoded.data(), nullptr, 0, nullptr);
}

wire::RelayPrefix Relay::prefix_to(uint32_t dest, uint8_t kind, uint64_t send_id,
                                   uint64_t total) const {
  wire::RelayPrefix p;
  p.origin = client_.identity().rank;
  p.dest = dest;
  p.ttl = static_cast<uint8_t>(std::min<uint32_t>(255, client_.identity().world_size));
  p.inner_kind = kind;
  p.send_id = send_id;
  p.total = total;
  return p;
}

void Relay::send_notice(uint32_t dest, uint8_t kind, uint64_t send_id, uint64_t total) {
  wire::RelayPrefix p = prefix_to(dest, kind, send_id, total);
  p.flags = wire::kRelayFirst | wire::kRelayLast;
  OutgoingMessage m;
  m.header.kind = wire::FrameKind::Relay;
  m.header.length = wire::kRelayPrefixSize;
  wire::encode_relay_prefix(p, m.prefix);
  Status why;
  if (!emit(dest, std::move(m), flow_key(p.origin, dest), p, &why))
    LOG_DEBUG("relay: notice %u for rank %u not sent: %s", kind, dest, why.message.c_str());
}

bool Relay::emit(uint32_t dest, OutgoingMessage m, uint64_t key, const wire::RelayPrefix &p,
                 Status *why) {
  const uint32_t hop = client_.topology().next_hop(client_.identity().rank, dest);
  if (hop >= client_.identity().world_size) {
    route(dest, why);
    if (m.listener) m.listener->on_send_done(*why);
    return false;
  }
  if (QuicConnection *c = client_.peer(hop).direct_connection()) {
    c->send(std::move(m), false, key);
    return true;
  }
  if (client_.peer(hop).forming()) {
    parked_[hop].push_back(Parked{std::move(m), key, p});
    return true;
  }
  route(dest, why);
  if (m.listener) m.listener->on_send_done(*why);
  return false;
}

void Relay::on_neighbour_ready(uint32_t rank) {
  auto it = parked_.find(rank);
  if (it == parked_.end()) return;
  std::vector<Parked> parked = std::move(it->second);
  parked_.erase(it);
  QuicConnection *c = client_.peer(rank).direct_connection();
  for (Parked &x : parked)
    c->send(std::move(x.msg), false, x.key);
}

MessageSink *Relay::on_frame(QuicConnection *c, int64_t stream_id, const wire::FrameHeader &h) {
  auto sink = std::make_unique<RelaySink>(this, c, stream_id, h);
  RelaySink *raw = sink.get();
  sinks_.emplace(raw, std::move(sink));
  return raw;
}

void Relay::drop_sink(RelaySink *s) {
  sinks_.erase(s);
}

void Relay::forward(uint32_t from, const wire::FrameHeader &h, const wire::RelayPrefix &p,
                    PooledBuf chunk) {
  const uint64_t n = chunk.size();
  wire::RelayPrefix q = p;
  --q.ttl;
  OutgoingMessage m;
  m.header = h;
  wire::encode_relay_prefix(q, m.prefix);
  m.payload = chunk.data();
  m.owned = std::move(chunk);
  m.listener = new Forwarded(this, from, n);
  Status why;
  if (!emit(p.dest, std::move(m), flow_key(p.origin, p.dest), q, &why)) {
    ++dropped_;                           // its listener released the held bytes
    if (p.inner_kind >= wire::kRelayAck)  // notices: expected while ranks leave
      LOG_DEBUG("relay: cannot forward rank %u's notice: %s", p.origin, why.message.c_str());
    else
      LOG_WARN("relay: cannot forward rank %u's message: %s", p.origin, why.message.c_str());
    if (p.send_id != 0 && (p.flags & wire::kRelayWantAck))
      send_notice(p.origin, wire::kRelayNack, p.send_id,
                  client_.topology().next_hop(client_.identity().rank, p.dest));
    return;
  }
  bytes_forwarded_ += n;
}

void Relay::release(uint32_t from, uint64_t bytes) {
  auto it = holds_.find(from);
  if (it == holds_.end()) return;
  Hold &h = it->second;
  h.bytes -= std::min(h.bytes, bytes);
  if (h.bytes > kRelayBudgetBytes) return;
  h.credit.release();
  if (h.bytes == 0) holds_.erase(it);
}

void Relay::finish_notice(uint32_t from, const wire::RelayPrefix &p, const wire::FrameHeader &,
                          std::vector<uint8_t> body) {
  if (p.inner_kind == static_cast<uint8_t>(wire::FrameKind::Control)) {
    client_.router().on_relayed_control(p.origin, body);
    return;
  }
  if (p.inner_kind == wire::kRelayRankLost) {
    if (p.total >= client_.identity().world_size) return;
    const auto lost = static_cast<uint32_t>(p.total);
    if (lost != client_.identity().rank) on_rank_lost(lost, lost_notice(p.origin, lost));
    return;
  }
  auto it = watches_.find(p.send_id);
  if (it == watches_.end()) return;  // the send already ended
  if (p.inner_kind == wire::kRelayAck && it->second.dest != p.origin) {
    ++dropped_;
    LOG_WARN("relay: rank %u (via %u) acknowledged send %llu, which went to rank %u; dropped",
             p.origin, from, ull(p.send_id), it->second.dest);
    return;
  }
  Watch w = it->second;
  watches_.erase(it);
  if (p.inner_kind == wire::kRelayAck) {
    w.waiter->on_relay_result(Status());
  } else {
    w.waiter->on_relay_result(
        error(NEXAR_ERR_PEER_FAILED,
              format("the message to rank %u did not get through: rank %u on its route could "
                     "not pass it on towards rank %llu (a rank on the route was lost, or routes "
                     "were changing after a failure)",
                     w.dest, p.origin, ull(p.total)),
              static_cast<int32_t>(w.dest)));
  }
}

void Relay::fail_watches(const Status &why, bool (*match)(const Watch &, uint32_t), uint32_t arg) {
  std::vector<std::pair<uint64_t, Watch>> victims;
  for (auto &[id, w] : watches_)
    if (match(w, arg)) victims.emplace_back(id, w);
  for (auto &[id, w] : victims) {
    watches_.erase(id);
    Status s = why;
    s.failed_rank = static_cast<int32_t>(w.dest);
    w.waiter->on_relay_result(s);
  }
}

bool Relay::passes(uint32_t from, uint32_t to, uint32_t r) const {
  const uint32_t world = client_.identity().world_size;
  for (uint32_t cur = from, hops = 0; cur != to && hops <= world; ++hops) {
    cur = client_.topology().next_hop(cur, to);
    if (cur == r) return true;
  }
  return false;
}

void Relay::on_neighbour_lost(uint32_t rank, const QuicConnection *c, const Status &why) {
  holds_.erase(rank);
  // Messages streaming in through that connection will never end.
  std::vector<MessageSink *> cut;
  for (auto it = flows_.begin(); it != flows_.end();) {
    if (it->second.conn == c) {
      if (it->second.sink) cut.push_back(it->second.sink);
      it = flows_.erase(it);
    } else {
      ++it;
    }
  }
  for (MessageSink *s : cut)
    s->finish(false);
  // Frames parked for it will never go.
  auto pit = parked_.find(rank);
  if (pit != parked_.end()) {
    std::vector<Parked> parked = std::move(pit->second);
    parked_.erase(pit);
    const uint32_t self = client_.identity().rank;
    for (Parked &x : parked) {
      ++dropped_;
      if (x.msg.listener) x.msg.listener->on_send_done(why);
      if (x.prefix.send_id != 0 && (x.prefix.flags & wire::kRelayWantAck) &&
          x.prefix.origin != self)
        send_notice(x.prefix.origin, wire::kRelayNack, x.prefix.send_id, rank);
    }
  }
  if (!client_.topology().sparse()) return;
  on_rank_lost(rank, why);  // routes go round it from here on
  // Everyone else hears of it, on the new routes.
  const uint32_t me = client_.identity().rank;
  for (uint32_t d = 0; d < client_.identity().world_size; ++d)
    if (d != me && !lost_[d] && client_.topology().distance(me, d) != Topology::kUnreachable)
      send_notice(d, wire::kRelayRankLost, 0, rank);
}

void Relay::on_rank_lost(uint32_t lost, const Status &why) {
  if (!client_.topology().sparse() || lost >= lost_.size() || lost_[lost]) return;
  lost_[lost] = true;
  rerouted_ = true;
  const uint32_t me = client_.identity().rank;
  const uint32_t world = client_.identity().world_size;
  // Relayed sends whose route ran through it: their chunks may have died
  // there, so they fail naming it (never lost silently). Found on the old
  // routes, before they change.
  std::vector<std::pair<uint64_t, Watch>> cut;
  for (auto &[id, w] : watches_)
    if (w.dest == lost || w.next_hop == lost || passes(me, w.dest, lost)) cut.emplace_back(id, w);
  client_.reroute_around(lost);
  for (auto &[id, w] : cut) {
    if (!watches_.erase(id)) continue;
    w.waiter->on_relay_result(
        error(NEXAR_ERR_PEER_FAILED,
              w.dest == lost
                  ? format("relayed send to rank %u: it was lost: %s", lost, why.message.c_str())
                  : format("relayed send to rank %u: rank %u, a relay on its route, was lost while "
                           "the message was on the way (later sends take a route around it): %s",
                           w.dest, lost, why.message.c_str()),
              static_cast<int32_t>(w.dest)));
  }
  // Ranks the failures cut off from this one: a partition.
  std::string gone;
  for (uint32_t r = 0; r < world; ++r)
    if (lost_[r]) {
      if (!gone.empty()) gone += ',';
      gone += std::to_string(r);
    }
  for (uint32_t d = 0; d < world; ++d) {
    if (d == me || lost_[d] || client_.topology().distance(me, d) != Topology::kUnreachable)
      continue;
    Status s = error(NEXAR_ERR_PEER_FAILED,
                     format("rank %u is unreachable from rank %u: the mesh is partitioned, "
                            "every route between them ran through lost rank(s) %s",
                            d, me, gone.c_str()),
                     static_cast<int32_t>(d));
    fail_watches(
        s, [](const Watch &w, uint32_t r) { return w.dest == r; }, d);
    client_.fail_unreachable(d, s);
  }
  if (!client_.topology().is_neighbour(me, lost)) client_.fail_unreachable(lost, why);
}

}  // namespace nexar
