// Relay: messages between ranks that have no direct connection (sparse
// topologies, client/topology.h). The upstream name for the receive side is
// RelayDeliveries; here one object per engine does both sides (loop thread).
//
// Origin: a message to a non-neighbour is cut into chunks of at most
// kRelayChunkBytes, each sent as a relay frame (frame.h) to the next hop on
// the static route, all on one relay stream per (origin, destination), so a
// flow keeps its order at every hop. Small messages (kEagerBytes) are copied
// and complete at once, as direct ones do; larger ones are sent from the
// caller's memory and complete when the next hop has acknowledged every chunk
// AND the destination has acknowledged the whole message (an end-to-end Ack
// relayed back): the same meaning as a direct send, whose completion says
// the destination's transport has every byte.
//
// Intermediate: each chunk is checked (destination inside the world and not
// this rank's own, the sender is the rank the route says it comes from, ttl
// not exhausted) and forwarded as soon as it is complete. Chunks received
// from one neighbour and not yet acknowledged by the next hop are bounded by
// kRelayBudgetBytes; past it that neighbour's QUIC credit is withheld, so a
// slow next hop slows the origin instead of growing memory here (the bound is
// the budget plus the relay streams' receive windows already granted). A chunk that
// cannot be forwarded (next hop lost) is dropped and the origin told (Nack).
//
// Destination: the chunks of a flow stream into the mailbox (or RPC hub)
// exactly as a direct message from the origin would: same match key, same
// size and check semantics, same unexpected-data budget.
//
// Failure: when a rank is lost (its connection here, a RankLost notice from
// a rank next to it, or a failure notice) every route is recomputed around
// it (Topology::remove), so later messages take a detour. Relayed sends whose
// route ran through it fail at once with NEXAR_ERR_PEER_FAILED naming it
// (their chunks may have died there); ranks the failures cut off are failed
// as unreachable (a partition). The ranks next to the lost one tell every
// other rank (RankLost notice) so waits on it fail everywhere.
// Malformed or misrouted relay frames are counted, logged and dropped; the
// connection and other flows carry on.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "client/withheld_credit.h"
#include "core/buffer_pool.h"
#include "core/status.h"
#include "transport/frame.h"
#include "transport/quic_connection.h"

namespace nexar {

class Client;
class RelaySink;

// Bytes received from one neighbour for forwarding and not yet acknowledged
// by the next hop; beyond this that neighbour's QUIC credit is withheld.
constexpr uint64_t kRelayBudgetBytes = 16ull << 20;

// The origin side of one relayed send that waits for the destination's Ack.
class RelayWaiter {
 public:
  virtual ~RelayWaiter() = default;
  virtual void on_relay_result(const Status &s) = 0;
};

class Relay {
 public:
  explicit Relay(Client &client);
  ~Relay();
  Relay(const Relay &) = delete;
  Relay &operator=(const Relay &) = delete;

  // ---- origin ----
  // The connection to the next hop towards world rank dest, or nullptr (the
  // route is lost; *why says how).
  QuicConnection *route(uint32_t dest, Status *why) const;
  // Queues a message to dest on c (from route()) in chunks. With listener,
  // the chunks reference payload and each reports to listener when the next
  // hop acknowledged it (items receives their handles, in order); without,
  // payload is copied. want_ack_id != 0 asks the destination to acknowledge.
  void send(QuicConnection *c, uint32_t dest, const wire::FrameHeader &inner,
            const uint8_t *payload, SendListener *listener, uint64_t want_ack_id,
            std::vector<QuicConnection::SendItem *> *items);
  // A fresh send id whose Ack (or failure) goes to w; unwatch before w dies.
  uint64_t watch(RelayWaiter *w, uint32_t dest, uint32_t next_hop);
  void unwatch(uint64_t send_id);
  // A control message (Abort, CollectiveMismatch) for a non-neighbour.
  void send_control(uint32_t dest, const std::vector<uint8_t> &encoded);

  // ---- frames from the network ----
  MessageSink *on_frame(QuicConnection *c, int64_t stream_id, const wire::FrameHeader &h);

  // A neighbour's connection became ready: frames waiting for it go out.
  void on_neighbour_ready(uint32_t rank);

  // ---- failures ----
  // The connection to neighbour `rank` is gone.
  void on_neighbour_lost(uint32_t rank, const QuicConnection *c, const Status &why);
  // Rank `lost` is gone (told by a rank next to it, or found here).
  void on_rank_lost(uint32_t lost, const Status &why);

  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_forwarded() const { return bytes_forwarded_; }
  uint64_t frames_dropped() const { return dropped_; }
  uint64_t bytes_held() const {
    uint64_t n = 0;
    for (const auto &[rank, h] : holds_)
      n += h.bytes;
    return n;
  }

 private:
  friend class RelaySink;
  struct Watch {
    RelayWaiter *waiter;
    uint32_t dest;
    uint32_t next_hop;
  };
  // A message streaming in from an origin (destination side).
  struct Flow {
    MessageSink *sink = nullptr;
    uint64_t remaining = 0;
    uint64_t send_id = 0;
    bool want_ack = false;
    const QuicConnection *conn = nullptr;
  };
  // Relayed bytes held for one neighbour (intermediate side).
  struct Hold {
    uint64_t bytes = 0;
    WithheldCredit credit;
  };
  class Forwarded;
  // A frame for a neighbour whose connection is still forming (a rank that
  // joined through the seed may hear from the others before its own mesh is
  // complete). Bounded by the holds: forwarded chunks count against their
  // sender's budget.
  struct Parked {
    OutgoingMessage msg;
    uint64_t key;
    wire::RelayPrefix prefix;
  };

  // Queues m to the next hop towards dest (or parks it); false if that hop is lost.
  bool emit(uint32_t dest, OutgoingMessage m, uint64_t key, const wire::RelayPrefix &p,
            Status *why);

  // A prefix from this rank to dest (flags left to the caller).
  wire::RelayPrefix prefix_to(uint32_t dest, uint8_t kind, uint64_t send_id, uint64_t total) const;
  void send_notice(uint32_t dest, uint8_t kind, uint64_t send_id, uint64_t total);
  void forward(uint32_t from, const wire::FrameHeader &h, const wire::RelayPrefix &p,
               PooledBuf chunk);
  void release(uint32_t from, uint64_t bytes);
  void finish_notice(uint32_t from, const wire::RelayPrefix &p, const wire::FrameHeader &h,
                     std::vector<uint8_t> body);
  void fail_watches(const Status &why, bool (*match)(const Watch &, uint32_t), uint32_t arg);
  void drop_sink(RelaySink *s);
  // Whether the route from `from` to `to` goes through r (to itself counts).
  bool passes(uint32_t from, uint32_t to, uint32_t r) const;

  Client &client_;
  uint64_t next_send_id_ = 1;
  std::unordered_map<uint64_t, Watch> watches_;
  std::unordered_map<uint32_t, Flow> flows_;                  // by origin
  std::unordered_map<uint32_t, Hold> holds_;                  // by neighbour
  std::unordered_map<uint32_t, std::vector<Parked>> parked_;  // by next hop
  std::unordered_map<RelaySink *, std::unique_ptr<RelaySink>> sinks_;
  std::vector<bool> lost_;  // ranks already reported lost
  bool rerouted_ = false;   // some rank was lost: routes changed
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_forwarded_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace nexar
