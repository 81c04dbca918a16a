// PeerConnection: the send side of one peer (the upstream name). It is the one
// place that decides how bytes reach that peer: over the direct QUIC
// connection when the topology makes it a neighbour, or relayed through the
// next hop of its route (client/relay.h). Loop thread only.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "transport/codec.h"
#include "transport/quic_connection.h"
#include "transport/shm_channel.h"

namespace nexar {

class Client;

class PeerConnection {
 public:
  PeerConnection(Client &client, uint32_t world_rank, bool direct);

  uint32_t rank() const { return rank_; }
  // Whether this rank has (or had) a direct connection to the peer.
  bool direct() const { return direct_; }
  // Why the peer is gone, or nullptr (the client's liveness record).
  const Status *failure() const;

  // ---- the direct connection's life (formation and the router) ----
  // The connection to the peer, dialled or accepted, ready or not yet.
  QuicConnection *connection() const { return conn_; }
  void attach(QuicConnection *c) { conn_ = c; }
  // The peer said hello: messages may flow. False if it already had.
  bool set_ready();
  bool ready() const { return ready_; }
  // A neighbour whose connection is not ready yet and has not failed.
  bool forming() const;
  // The connection closed; returns whether it had been ready.
  bool detach();

  // The direct connection once ready and open, else nullptr.
  QuicConnection *direct_connection() const;

  // ---- sending ----
  // The connection a message to this peer is written on now: the ready
  // direct connection, or the connection to the next hop of its relay route.
  // nullptr if there is none (*why says why when the relay knows).
  QuicConnection *route(Status *why) const;
  // The same-host channel to the peer while it is open and the peer alive
  // (then every payload goes there instead of route()), else null.
  ShmChannel *shm() const;
  // Sends a message that owns its payload (msg.owned); false if there is no
  // way there now.
  bool send_owned(OutgoingMessage msg, uint64_t key);
  // A control message (relayed when the peer is no neighbour: only Abort and
  // CollectiveMismatch travel that way).
  void send_control(const wire::ControlMessage &m);

 private:
  Client &client_;
  uint32_t rank_;
  bool direct_;
  QuicConnection *conn_ = nullptr;
  bool ready_ = false;
};

}  // namespace nexar
