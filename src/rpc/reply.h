// The C ABI's RPC objects: what a handler fills (nexar_rpc_reply) and what a
// caller receives (nexar_rpc_response). Defined here so the RPC engine code
// and the C entry points share them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer_pool.h"

// Filled by a handler on the completion thread; handed to the loop thread
// afterwards, which sends it (the buffer goes into QUIC without a copy).
struct nexar_rpc_reply {
  nexar::PooledBuf data;
  std::string error;
};

struct nexar_rpc_response {
  std::vector<uint8_t> bytes;
};

namespace nexar::rpc {
// Longest handler error message carried back to the caller.
constexpr size_t kMaxErrorMessage = 4096;
}  // namespace nexar::rpc
