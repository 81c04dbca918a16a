// The two primitives every operation is built from: send a message to a peer
// and receive one, as awaitables bounded by a deadline and tied to their
// operation (so abort, destroy or a sibling's failure ends them at once).
#pragma once

#include <cstdint>

#include "client/communicator.h"
#include "client/mailbox.h"
#include "client/peer_connection.h"
#include "client/relay.h"
#include "engine/task.h"
#include "engine/wait.h"
#include "transport/quic_connection.h"

namespace nexar {

// When a send completes.
enum class SendCompletion {
  // When the peer's transport acknowledged every byte: what nexar_send
  // promises (include/nexar.h), so a sender learns of a peer lost before it.
  Acknowledged,
  // Messages up to kEagerBytes are copied and complete at once, while the
  // connection has less than kEagerQueueLimit queued; larger ones complete
  // when acknowledged. For messages whose operation completes on a later
  // event anyway (a collective's, which confirms send-only ranks with a
  // "done" frame; an RPC request, which waits for its response): waiting for
  // the acknowledgement would only add a round trip.
  Copied,
};
// The largest message SendCompletion::Copied copies.
constexpr uint64_t kEagerBytes = 64 << 10;
// Eager copies stop once this much is queued on a connection (back-pressure).
constexpr uint64_t kEagerQueueLimit = 8ull << 20;

// To a rank that is not a neighbour (sparse topology) the message is relayed
// (client/relay.h) with the same completion meaning as a direct send: copied
// small messages complete at once; the others complete when the next hop
// acknowledged every chunk and the destination the whole message.
class SendWait : public Wait, public SendListener, public RelayWaiter {
 public:
  SendWait(Client &client, OpContext *op, uint64_t deadline_ns, uint32_t world_peer,
           int32_t user_rank, const wire::FrameHeader &h, const void *payload, const char *what,
           SendCompletion completion);
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
  Status await_resume() { return result(); }
  void on_send_done(const Status &s) override;
  void on_relay_result(const Status &s) override;

 protected:
  void detach() override;
  std::string timeout_message() const override;

 private:
  Client &client_;
  uint32_t world_peer_;
  int32_t user_rank_;
  wire::FrameHeader header_;
  const uint8_t *payload_;
  const char *what_;
  SendCompletion completion_;
  QuicConnection *conn_ = nullptr;
  QuicConnection::SendItem *item_ = nullptr;
  // A send through the same-host channel, and its queued message.
  ShmChannel *shm_ = nullptr;
  ShmSendItem *shm_item_ = nullptr;

  // Relayed sends (zero-copy): chunks in flight to the next hop, in order.
  bool relayed_ = false;
  bool relay_started_ = false;
  std::vector<QuicConnection::SendItem *> chunks_;
  size_t chunks_done_ = 0;
  uint64_t send_id_ = 0;  // waiting for the destination's Ack while != 0
  // The rest of await_ready for a relayed send (conn_ is the first hop).
  bool relay_start();
  // The rest of await_ready for a send through shared memory.
  bool shm_start(ShmChannel *ch);
  // Whether this send is copied now and completes at once (Copied, small
  // enough, and the connection's queue under kEagerQueueLimit).
  bool copies(const QuicConnection &c) const;
  void relay_fail(const Status &s);
  void maybe_finish_relayed();
};

// The operation a message belongs to: its communicator, its context (abort,
// destroy or a sibling's failure end its waits at once) and its deadline.
struct OpScope {
  Communicator *comm;
  OpContext *op;
  uint64_t deadline_ns;
};

// Which message (MPI's word): the peer (a rank of the communicator), the
// receiver's match key (kind and tag), the check that travels with it (a
// receive expecting another value fails with NEXAR_ERR_MISMATCH; 0 for
// point-to-point) and what it is part of, for error messages.
struct Envelope {
  uint32_t peer;
  wire::FrameKind kind;
  uint64_t tag;
  uint32_t check;
  const char *what;
};

// Sends len bytes of data to e.peer.
Task<Status> send_to(OpScope scope, Envelope e, const void *data, uint64_t len,
                     SendCompletion completion);
// Receives exactly len bytes from e.peer into data (combined with what is
// there as it arrives when combine.own is set).
Task<Status> recv_from(OpScope scope, Envelope e, void *data, uint64_t len,
                       CombineOnArrival combine = {});

}  // namespace nexar
