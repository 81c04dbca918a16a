// An in-process world: N ranks, each with its own engine (event loop thread,
// UDP socket on 127.0.0.1, completion thread), joined by a full mesh of real
// mutually-authenticated QUIC connections, exactly as N processes would be.
#pragma once

#include <memory>
#include <vector>

#include "client/communicator.h"
#include "core/config.h"

namespace nexar {

Status bootstrap_local(uint32_t world_size, const Config &cfg,
                       std::vector<std::unique_ptr<Communicator>> *out);

}  // namespace nexar
