#include "client/p2p.h"

#include "client/transfer.h"
#include "core/clock.h"

namespace nexar {

Task<Status> p2p_send(Communicator *comm, OpContext *op, const void *buf, size_t bytes,
                      uint32_t dest, uint32_t tag) {
  const uint64_t deadline = now_ns() + comm->config().p2p_timeout_ms * kNsPerMs;
  co_return co_await send_to({comm, op, deadline},
                             {dest, wire::FrameKind::P2P, tag, 0, "nexar_send"}, buf, bytes,
                             SendCompletion::Acknowledged);
}

Task<Status> p2p_recv(Communicator *comm, OpContext *op, void *buf, size_t bytes, uint32_t src,
                      uint32_t tag) {
  const uint64_t deadline = now_ns() + comm->config().p2p_timeout_ms * kNsPerMs;
  co_return co_await recv_from({comm, op, deadline},
                               {src, wire::FrameKind::P2P, tag, 0, "nexar_recv"}, buf, bytes);
}

}  // namespace nexar
