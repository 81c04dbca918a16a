#include "client/peer_router.h"

#include <algorithm>

#include "client/client.h"
#include "client/failure_notice.h"
#include "client/stall_exchange.h"
#include "core/host.h"
#include "core/log.h"

namespace nexar {
namespace {
constexpr uint16_t kProtocolVersion = 1;
}  // namespace

MessageSink *PeerRouter::deliver(uint32_t origin, QuicConnection *c, int64_t stream_id,
                                 const wire::FrameHeader &h) {
  if (h.kind == wire::FrameKind::RpcRequest || h.kind == wire::FrameKind::RpcResponse) {
    RpcLanes *rpc = client_.rpc_lanes();
    if (!rpc) return nullptr;
    return h.kind == wire::FrameKind::RpcRequest ? rpc->on_request(origin, c, stream_id, h)
                                                 : rpc->on_response(origin, h);
  }
  MsgKey key{origin, static_cast<uint8_t>(h.kind), h.comm_id, h.tag};
  return client_.mailbox().on_message(key, h.length, h.check, c, stream_id);
}

MessageSink *PeerRouter::on_message(QuicConnection *c, int64_t stream_id,
                                    const wire::FrameHeader &h) {
  if (h.kind == wire::FrameKind::Relay) return client_.relay().on_frame(c, stream_id, h);
  return deliver(c->expected_peer_rank(), c, stream_id, h);
}

void PeerRouter::on_relayed_control(uint32_t origin, std::span<const uint8_t> message) {
  wire::DecodeResult r = wire::decode_control(message);
  if (!r) {
    LOG_WARN("relay: malformed control message from rank %u dropped: %s", origin, r.error.c_str());
    return;
  }
  if (const auto *a = std::get_if<wire::Abort>(&*r.message))
    client_.comms().on_notice(origin, *a);
  else if (const auto *m = std::get_if<wire::CollectiveMismatch>(&*r.message))
    client_.comms().on_notice(origin, *m);
  else if (!on_failure_control(origin, *r.message))
    LOG_WARN("relay: rank %u relayed a control message that only travels directly; dropped",
             origin);
}

void PeerRouter::on_control(QuicConnection *c, std::span<const uint8_t> message) {
  wire::DecodeResult r = wire::decode_control(message);
  if (!r) {
    c->violation(error(NEXAR_ERR_PROTOCOL, format("malformed control message from rank %u: %s",
                                                  c->expected_peer_rank(), r.error.c_str())));
    return;
  }
  const uint32_t from = c->expected_peer_rank();
  // The handshake closed connections whose certificate names a rank outside
  // the world; a peer index from the network is still checked where it is used.
  if (from >= client_.identity().world_size) {
    c->close(1, error(NEXAR_ERR_PROTOCOL,
                      format("control message from rank %u, outside the world", from)));
    return;
  }
  std::visit(
      [&](const auto &m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, wire::Hello>) {
          on_hello(c, m);
        } else if constexpr (std::is_same_v<T, wire::HelloAck>) {
          if (client_.peer(from).connection() == c && m.rank == from)
            client_.shm().on_hello_done(from, c);
        } else if constexpr (std::is_same_v<T, wire::TopologyDigest>) {
          on_topology(c, m);  // from the rank the certificate names
        } else if constexpr (std::is_same_v<T, wire::ShmOffer>) {
          if (client_.peer(from).connection() == c) client_.shm().on_offer(from, m);
        } else if constexpr (std::is_same_v<T, wire::Abort> ||
                             std::is_same_v<T, wire::CollectiveMismatch>) {
          client_.comms().on_notice(from, m);
        } else if constexpr (std::is_same_v<T, wire::StallQuery>) {
          on_stall_query(client_, from, m);
        } else if constexpr (std::is_same_v<T, wire::StallAnswer>) {
          on_stall_answer(client_, from, m);
        } else if constexpr (std::is_same_v<T, wire::Goodbye>) {
          LOG_DEBUG("rank %u said goodbye", from);
        } else {
          // Heartbeats and the join messages carry nothing this client acts on.
          on_failure_control(from, *r.message);
        }
      },
      *r.message);
}

bool PeerRouter::on_failure_control(uint32_t from, const wire::ControlMessage &m) {
  if (const auto *f = std::get_if<wire::PeerFailed>(&m))
    on_failure_notice(client_, from, *f);
  else if (const auto *l = std::get_if<wire::CommLeft>(&m))
    client_.comms().on_notice(from, *l);
  else if (const auto *v = std::get_if<wire::Revoke>(&m))
    client_.comms().on_notice(from, *v);
  else if (const auto *a = std::get_if<wire::AgreeMsg>(&m))
    client_.comms().on_notice(from, *a);
  else
    return false;
  return true;
}

void PeerRouter::on_handshake_done(QuicConnection *c, const NodeIdentity &peer) {
  const Client::Identity &me = client_.identity();
  if (peer.rank >= me.world_size || peer.rank == me.rank) {
    c->refuse(error(NEXAR_ERR_AUTH, format("certificate names rank %u, outside this world of %u",
                                           peer.rank, me.world_size)));
    return;
  }
  // The client speaks first; the server answers once the hello matches the
  // rank its certificate names.
  if (client_.peer(peer.rank).connection() != c) {
    size_t same_rank = 0;
    for (QuicConnection *a : awaiting_hello_)
      if (a->expected_peer_rank() == peer.rank) ++same_rank;
    if (same_rank >= kMaxAwaitingHello) {
      c->refuse(
          error(NEXAR_ERR_AUTH, format("rank %u already has %zu connections waiting to say hello",
                                       peer.rank, same_rank)));
      return;
    }
    awaiting_hello_.insert(c);
  } else {
    // The graph's digest first: a rank with another graph may refuse the
    // hello (not its neighbour), and the digest says why.
    send_topology(c);
    c->send_control(
        wire::Hello{kProtocolVersion, me.cluster_id, me.rank, me.world_size, host_name()});
    c->send_control(client_.shm().offer_for(peer.rank));
  }
}

void PeerRouter::on_hello(QuicConnection *c, const wire::Hello &h) {
  awaiting_hello_.erase(c);
  const Client::Identity &me = client_.identity();
  const uint32_t cert_rank = c->expected_peer_rank();
  Status s;
  if (h.protocol_version != kProtocolVersion)
    s = error(NEXAR_ERR_PROTOCOL, format("rank %u speaks protocol %u, this node %u", h.rank,
                                         h.protocol_version, kProtocolVersion));
  else if (h.rank != cert_rank || h.rank >= me.world_size)
    s = error(NEXAR_ERR_AUTH,
              format("peer claims rank %u but its certificate names rank %u", h.rank, cert_rank));
  else if (h.cluster_id != me.cluster_id || h.world_size != me.world_size)
    s = error(NEXAR_ERR_AUTH, format("rank %u belongs to another cluster or world size (%u)",
                                     h.rank, h.world_size));
  else if (!client_.peer(h.rank).direct())
    s = error(NEXAR_ERR_PROTOCOL, format("rank %u is not a neighbour of rank %u in the %s topology",
                                         h.rank, me.rank, client_.topology().name().c_str()));
  else if (h.rank <= me.rank)
    s = error(NEXAR_ERR_PROTOCOL,
              format("rank %u connected to rank %u; lower ranks never connect", h.rank, me.rank));
  else if (client_.peer(h.rank).connection() && client_.peer(h.rank).connection() != c)
    s = error(NEXAR_ERR_AUTH, format("a second connection claims rank %u", h.rank));
  if (!s) {
    c->refuse(s);
    return;
  }
  client_.peer(h.rank).attach(c);
  c->send_control(wire::HelloAck{me.rank});
  send_topology(c);
  c->send_control(client_.shm().offer_for(h.rank));
  client_.shm().on_hello_done(h.rank, c);
}

void PeerRouter::on_closed(QuicConnection *c, const Status &why) {
  awaiting_hello_.erase(c);
  client_.connection_closed(c, why);
}

void PeerRouter::send_topology(QuicConnection *c) {
  const Topology &t = client_.topology();
  c->send_control(wire::TopologyDigest{client_.identity().rank, t.digest(), t.name()});
}

void PeerRouter::on_topology(QuicConnection *c, const wire::TopologyDigest &d) {
  const Topology &t = client_.topology();
  const uint32_t me = client_.identity().rank;
  if (d.digest == t.digest() && d.rank == c->expected_peer_rank()) return;
  // The peer's ShmOffer follows this message, so the pair is not ready yet:
  // formation fails instead of running with routes that disagree.
  Status s = error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("ranks %u and %u disagree on the mesh topology: rank %u uses %s "
                          "(digest %016llx), rank %u uses %s (digest %016llx); every rank must "
                          "describe the same graph",
                          std::min(me, d.rank), std::max(me, d.rank), me, t.name().c_str(),
                          static_cast<unsigned long long>(t.digest()), d.rank, d.name.c_str(),
                          static_cast<unsigned long long>(d.digest)),
                   static_cast<int32_t>(d.rank));
  LOG_WARN("%s", s.message.c_str());
  client_.fail_formation(s);
  c->close(1, s);
}

}  // namespace nexar
