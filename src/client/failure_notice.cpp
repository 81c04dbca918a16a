#include "client/failure_notice.h"

#include "client/client.h"
#include "core/log.h"

namespace nexar {

void announce_failure(Client &client, uint32_t world_rank, const Status &why) {
  const wire::PeerFailed notice{world_rank, why.code == NEXAR_OK ? NEXAR_ERR_PEER_FAILED : why.code,
                                why.message};
  const uint32_t me = client.identity().rank;
  for (uint32_t r = 0; r < client.identity().world_size; ++r)
    if (r != me && r != world_rank && !client.liveness().failure(r)) client.send_control(r, notice);
}

void on_failure_notice(Client &client, uint32_t from, const wire::PeerFailed &m) {
  const uint32_t me = client.identity().rank;
  if (m.rank >= client.identity().world_size || m.rank == me || m.rank == from) return;
  if (client.liveness().failure(m.rank)) return;
  const Status s =
      error(m.status < 0 ? m.status : NEXAR_ERR_PEER_FAILED,
            format("rank %u failed (declared by rank %u: %s)", m.rank, from, m.reason.c_str()),
            static_cast<int32_t>(m.rank));
  LOG_WARN("%s", s.message.c_str());
  client.declare_failed(m.rank, s);
  // Fail-stop: a peer the others declared failed is cut off here too.
  if (QuicConnection *c = client.peer(m.rank).connection(); c && !c->closed())
    c->close(kDeclaredFailedCloseCode, s);
}

}  // namespace nexar
