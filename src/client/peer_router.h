// PeerRouter: the receive side of a client (the upstream name). Every frame
// and control message from a peer passes here and goes to its lane's
// consumer: point-to-point and collective messages to the mailbox, RPC
// requests and responses to the RPC lanes, relay frames to the relay, control
// messages to the handshake (Hello) or the communicators (Abort,
// CollectiveMismatch). Relayed messages come back through deliver() once the
// relay has unwrapped them, so a message is routed the same way whichever path
// it took. Loop thread only.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_set>

#include "transport/codec.h"
#include "transport/quic_connection.h"

namespace nexar {

class Client;

class PeerRouter : public ConnectionHandler {
 public:
  explicit PeerRouter(Client &client) : client_(client) {}

  // Where the payload of a message from world rank `origin` goes (for a
  // relayed message, c is the last hop, whose credit its consumer withholds).
  MessageSink *deliver(uint32_t origin, QuicConnection *c, int64_t stream_id,
                       const wire::FrameHeader &h);
  // A control message relayed from origin (Abort, CollectiveMismatch).
  void on_relayed_control(uint32_t origin, std::span<const uint8_t> message);

  // ConnectionHandler
  void on_handshake_done(QuicConnection *c, const NodeIdentity &peer) override;
  void on_control(QuicConnection *c, std::span<const uint8_t> message) override;
  MessageSink *on_message(QuicConnection *c, int64_t stream_id,
                          const wire::FrameHeader &h) override;
  void on_closed(QuicConnection *c, const Status &why) override;

 private:
  // The first control message on a connection a peer dialled: checked
  // against the rank its certificate names before anything else flows.
  void on_hello(QuicConnection *c, const wire::Hello &h);
  // Failure notices, leave, revoke and agreement messages (direct or
  // relayed); false for other messages.
  bool on_failure_control(uint32_t from, const wire::ControlMessage &m);
  // The mesh graph's digest: from the dialler before its Hello, from the
  // listener before its ShmOffer (the pair is ready only after both), so
  // ranks with different graphs fail formation saying so and never route.
  void send_topology(QuicConnection *c);
  void on_topology(QuicConnection *c, const wire::TopologyDigest &d);

  Client &client_;
  // Connections peers dialled that have not said their Hello yet: at most
  // kMaxAwaitingHello per rank, or a member could hold any number of
  // authenticated connections open (each with its windows and TLS state).
  static constexpr size_t kMaxAwaitingHello = 4;
  std::unordered_set<QuicConnection *> awaiting_hello_;
};

}  // namespace nexar
