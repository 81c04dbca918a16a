// RpcHub: one client's RPC lanes (loop thread only unless noted).
//
// Caller side: nexar_rpc_call is an operation of its communicator. It takes a
// slot in the window of calls in flight to its target (kCallWindow), registers
// a waiter under a fresh request id, sends the request on the RPC request
// lane and waits, bounded by rpc_timeout_ms, for the response with that id on
// the RPC response lane. The waiter leaves the table when the call ends for
// any reason (response, timeout, abort, destroy, peer loss); a response that
// finds no waiter is dropped and counted.
//
// Callee side: a request is read into memory, then its communicator's handler
// runs where that communicator's callbacks run (never on this thread), and
// the reply goes back on the RPC response lane. Requests waiting for their
// handler are bounded per peer: past kServeBudgetBytes the peer's QUIC credit
// is withheld until handlers catch up, and past kServeMaxQueued requests (more
// than an honest caller's window) requests are refused with an error reply.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "client/rpc_lanes.h"
#include "client/withheld_credit.h"
#include "core/status.h"
#include "engine/task.h"
#include "engine/wait.h"
#include "rpc/registry.h"
#include "rpc/reply.h"
#include "transport/frame.h"

namespace nexar {

class Client;
class Communicator;

namespace rpc {

constexpr uint32_t kCallWindow = 1024;               // calls in flight per target rank
constexpr uint64_t kServeBudgetBytes = 16ull << 20;  // queued request bytes per peer
constexpr uint32_t kServeMaxQueued = 4096;           // queued requests per peer

class ResponseWait;
class SlotWait;
class RequestSink;
class ResponseSink;
struct Job;

// The RPC lanes of a client (client/rpc_lanes.h): cluster/mesh.h installs one
// in every client it makes.
class RpcHub : public RpcLanes {
 public:
  explicit RpcHub(Client &client);
  ~RpcHub() override;
  // The hub installed in this client.
  static RpcHub &of(Client &client);
  RpcHub(const RpcHub &) = delete;
  RpcHub &operator=(const RpcHub &) = delete;

  // The handlers of a communicator (any thread); created when asked to.
  std::shared_ptr<RpcRegistry> registry(const Communicator *comm, bool create);
  // The communicator is going away (its handlers with it).
  void drop_comm(const Communicator *comm) override;

  // The body of nexar_rpc_call (comm ranks; *out is set on success).
  Task<Status> call(Communicator *comm, OpContext *op, uint32_t target, uint32_t fn_id,
                    const void *request, uint64_t request_len, nexar_rpc_response **out);

  // Frames from the network.
  // `from` is the world rank that made the frame (for a relayed frame, its
  // origin; c is then the last hop, whose credit the sink withholds).
  MessageSink *on_request(uint32_t from, QuicConnection *c, int64_t stream_id,
                          const wire::FrameHeader &h) override;
  MessageSink *on_response(uint32_t from, const wire::FrameHeader &h) override;
  // Every call waiting on this world rank fails with s.
  void fail_peer(uint32_t world_rank, const Status &s) override;
  // The connection is going away: withheld credit is no longer returned to it.
  void forget_connection(const QuicConnection *c) override;
  void add_stats(nexar_stats_t *out) const override;

 private:
  friend class ResponseWait;
  friend class SlotWait;
  friend class RequestSink;
  friend class ResponseSink;
  friend struct Job;

  struct PeerLoad {
    uint64_t queued_bytes = 0;  // complete requests waiting for or in their handler
    uint32_t queued = 0;
    WithheldCredit credit;  // while over()
    bool over() const { return queued_bytes > kServeBudgetBytes; }
  };
  struct Window {
    uint32_t in_flight = 0;
    std::deque<SlotWait *> waiting;
  };

  // A complete request from world rank `from` (nullptr conn: a local call).
  void dispatch(uint32_t from, const wire::FrameHeader &h, std::vector<uint8_t> request);
  // The request was served (or refused): release its load and answer it.
  void answer(uint32_t from, const wire::FrameHeader &h, Status s, PooledBuf reply,
              uint64_t request_bytes);
  void release_slot(uint32_t world_rank);
  void drop_sink(MessageSink *s);

  Client &client_;
  std::mutex registries_mu_;
  std::unordered_map<const Communicator *, std::shared_ptr<RpcRegistry>> registries_;
  uint64_t next_req_id_ = 1;
  std::unordered_map<uint64_t, ResponseWait *> waiters_;
  std::unordered_map<uint32_t, Window> windows_;
  std::unordered_map<uint32_t, PeerLoad> load_;
  std::unordered_map<MessageSink *, std::unique_ptr<MessageSink>> sinks_;
  uint64_t served_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace rpc
}  // namespace nexar
