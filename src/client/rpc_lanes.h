// RpcLanes: how the hub sees the RPC layer above it. The PeerRouter hands it
// the frames of the two RPC lanes (requests, responses); the client tells it
// of lost peers, closing connections and destroyed communicators. rpc/
// implements it (rpc::RpcHub); the hub never includes rpc/.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "nexar.h"
#include "transport/quic_connection.h"

namespace nexar {

class Communicator;

class RpcLanes {
 public:
  virtual ~RpcLanes() = default;
  // Where a request's payload goes. `from` is the world rank that made the
  // frame (for a relayed frame, its origin; c is then the last hop).
  virtual MessageSink *on_request(uint32_t from, QuicConnection *c, int64_t stream_id,
                                  const wire::FrameHeader &h) = 0;
  virtual MessageSink *on_response(uint32_t from, const wire::FrameHeader &h) = 0;
  // Every call waiting on this world rank fails with s.
  virtual void fail_peer(uint32_t world_rank, const Status &s) = 0;
  // The connection is going away: withheld credit is no longer returned to it.
  virtual void forget_connection(const QuicConnection *c) = 0;
  // The communicator is going away (its handlers with it).
  virtual void drop_comm(const Communicator *comm) = 0;
  // Adds the RPC counters (requests served, responses dropped).
  virtual void add_stats(nexar_stats_t *out) const = 0;
};

}  // namespace nexar
