// Failure notices between ranks. A rank that declares a peer failed on its
// own (silence past the heartbeat timeout, a lost connection) tells every
// other rank, so every survivor names that peer, not whichever survivor
// happened to leave first; a rank told so closes its own connection to the
// peer, which a peer that was only frozen finds when it wakes. Loop thread.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "transport/codec.h"
#include "transport/quic_connection.h"  // kDeclaredFailedCloseCode

namespace nexar {

class Client;

// Tells every other rank that world_rank failed, and why.
void announce_failure(Client &client, uint32_t world_rank, const Status &why);
// Rank `from` declared m.rank failed.
void on_failure_notice(Client &client, uint32_t from, const wire::PeerFailed &m);

}  // namespace nexar
