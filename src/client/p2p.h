// Point-to-point operations: tagged messages matched on (source, tag).
#pragma once

#include <cstddef>
#include <cstdint>

#include "client/communicator.h"

namespace nexar {

Task<Status> p2p_send(Communicator *comm, OpContext *op, const void *buf, size_t bytes,
                      uint32_t dest, uint32_t tag);
Task<Status> p2p_recv(Communicator *comm, OpContext *op, void *buf, size_t bytes, uint32_t src,
                      uint32_t tag);

}  // namespace nexar
