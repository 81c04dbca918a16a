// Version, status strings, last error, dtype sizes.
#include <cstddef>

#include "capi/handles.h"
#include "core/dtype.h"

namespace nexar::capi {
namespace {

// The thread's record behind nexar_last_error and nexar_last_error_message.
// A success resets the fields but keeps the message's storage, so a message
// pointer handed out stays valid until the thread's next failing call.
struct LastError {
  bool failed = false;
  nexar_status_t status = NEXAR_OK;
  int32_t failed_rank = -1;
  uint64_t op_seq = 0;
  std::string message;
};
thread_local LastError t_last;

}  // namespace

nexar_status_t fail(const Status &s, uint64_t op_seq) {
  t_last.failed = true;
  t_last.status = s.code;
  t_last.failed_rank = s.failed_rank;
  t_last.op_seq = op_seq;
  t_last.message = s.message;
  return s.code;
}
nexar_status_t fail(nexar_status_t code, const std::string &message) {
  return fail(Status(code, message));
}
nexar_status_t ok() {
  t_last.failed = false;
  t_last.status = NEXAR_OK;
  t_last.failed_rank = -1;
  t_last.op_seq = 0;
  return NEXAR_OK;
}
const char *last_error() {
  return t_last.failed ? t_last.message.c_str() : "";
}
nexar_completion_t last_error_completion() {
  nexar_completion_t c;
  c.struct_size = sizeof c;
  c.status = t_last.status;
  c.failed_rank = t_last.failed_rank;
  c.op_seq = t_last.op_seq;
  c.message = last_error();
  return c;
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
    case NEXAR_ERR_REVOKED:
      return "NEXAR_ERR_REVOKED: the communicator was revoked";
    case NEXAR_ERR_EXCLUDED:
      return "NEXAR_ERR_EXCLUDED: the peers declared this process failed and removed it";
    default:
      return "NEXAR_ERR_UNKNOWN: unknown status code";
  }
}

NEXAR_API const char *nexar_last_error_message(void) {
  return nexar::capi::last_error();
}

// Reads the record without touching it: a refused query must not overwrite
// the failure it was asked about.
NEXAR_API nexar_status_t nexar_last_error(nexar_completion_t *info) {
  constexpr size_t kMinSize = offsetof(nexar_completion_t, status) + sizeof(nexar_status_t);
  if (!info || info->struct_size < kMinSize) return NEXAR_ERR_INVALID_ARGUMENT;
  const nexar_completion_t full = nexar::capi::last_error_completion();
  const size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
  auto fits = [n](size_t offset, size_t size) { return offset + size <= n; };
  info->struct_size = n;
  info->status = full.status;
  if (fits(offsetof(nexar_completion_t, failed_rank), sizeof full.failed_rank))
    info->failed_rank = full.failed_rank;
  if (fits(offsetof(nexar_completion_t, op_seq), sizeof full.op_seq)) info->op_seq = full.op_seq;
  if (fits(offsetof(nexar_completion_t, message), sizeof full.message))
    info->message = full.message;
  return NEXAR_OK;
}

NEXAR_API size_t nexar_dtype_size(nexar_dtype_t dtype) {
  return nexar::dtype_size(dtype);
}

}  // extern "C"
