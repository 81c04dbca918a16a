// Version, status strings, last error, dtype sizes.
#include "capi/handles.h"
#include "core/dtype.h"

namespace nexar::capi {
namespace {
thread_local std::string t_last_error;
}

nexar_status_t fail(const Status &s) {
  t_last_error = s.message;
  return s.code;
}
nexar_status_t fail(nexar_status_t code, const std::string &message) {
  t_last_error = message;
  return code;
}
nexar_status_t ok() {
  t_last_error.clear();
  return NEXAR_OK;
}
const char *last_error() {
  return t_last_error.c_str();
}

}  // namespace nexar::capi

extern "C" {

NEXAR_API uint32_t nexar_version(void) {
  return NEXAR_VERSION_NUMBER;
}
NEXAR_API const char *nexar_version_string(void) {
  return NEXAR_VERSION_STRING;
}

NEXAR_API const char *nexar_status_str(nexar_status_t status) {
  switch (status) {
    case NEXAR_OK:
      return "NEXAR_OK: success";
    case NEXAR_ERR_INVALID_ARGUMENT:
      return "NEXAR_ERR_INVALID_ARGUMENT: invalid argument";
    case NEXAR_ERR_INVALID_RANK:
      return "NEXAR_ERR_INVALID_RANK: rank outside the communicator";
    case NEXAR_ERR_SIZE_MISMATCH:
      return "NEXAR_ERR_SIZE_MISMATCH: message and buffer sizes differ";
    case NEXAR_ERR_TIMEOUT:
      return "NEXAR_ERR_TIMEOUT: operation timed out";
    case NEXAR_ERR_PEER_FAILED:
      return "NEXAR_ERR_PEER_FAILED: a peer failed or disconnected";
    case NEXAR_ERR_ABORTED:
      return "NEXAR_ERR_ABORTED: the communicator was aborted";
    case NEXAR_ERR_CLOSED:
      return "NEXAR_ERR_CLOSED: the communicator is closed";
    case NEXAR_ERR_MISMATCH:
      return "NEXAR_ERR_MISMATCH: ranks issued different collectives";
    case NEXAR_ERR_TLS:
      return "NEXAR_ERR_TLS: TLS failure";
    case NEXAR_ERR_AUTH:
      return "NEXAR_ERR_AUTH: authentication failed";
    case NEXAR_ERR_PROTOCOL:
      return "NEXAR_ERR_PROTOCOL: protocol violation";
    case NEXAR_ERR_NO_MEMORY:
      return "NEXAR_ERR_NO_MEMORY: out of memory";
    case NEXAR_ERR_IO:
      return "NEXAR_ERR_IO: I/O error";
    case NEXAR_ERR_UNSUPPORTED:
      return "NEXAR_ERR_UNSUPPORTED: not supported";
    case NEXAR_ERR_NOT_FOUND:
      return "NEXAR_ERR_NOT_FOUND: not found";
    case NEXAR_ERR_WOULD_DEADLOCK:
      return "NEXAR_ERR_WOULD_DEADLOCK: blocking call from inside a completion callback";
    case NEXAR_ERR_INTERNAL:
      return "NEXAR_ERR_INTERNAL: internal error";
    case NEXAR_ERR_RPC_NOT_REGISTERED:
      return "NEXAR_ERR_RPC_NOT_REGISTERED: no RPC handler for that function on the target rank";
    case NEXAR_ERR_RPC_FAILED:
      return "NEXAR_ERR_RPC_FAILED: the RPC handler on the target rank returned an error";
    default:
      return "NEXAR_ERR_UNKNOWN: unknown status code";
  }
}

NEXAR_API const char *nexar_last_error_message(void) {
  return nexar::capi::last_error();
}

NEXAR_API size_t nexar_dtype_size(nexar_dtype_t dtype) {
  return nexar::dtype_size(dtype);
}

}  // extern "C"
