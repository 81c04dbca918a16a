// Status: the result of an internal operation, carried to the C ABI completion.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "nexar.h"

namespace nexar {

struct Status {
  nexar_status_t code = NEXAR_OK;
  int32_t failed_rank = -1;  // the rank that failed or did not answer, -1 if none
  std::string message;

  Status() = default;
  Status(nexar_status_t c, std::string msg, int32_t rank = -1)
      : code(c), failed_rank(rank), message(std::move(msg)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code == NEXAR_OK; }
  explicit operator bool() const { return ok(); }
};

// Formats a message printf-style (used for error messages and log lines).
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

inline Status error(nexar_status_t code, std::string msg, int32_t rank = -1) {
  return Status(code, std::move(msg), rank);
}

// Whether a status a peer sent is one of nexar.h's failures: anything else
// is the peer's protocol error, never handed to a caller as it is.
// NEXAR_ERR_RPC_FAILED is the last code nexar.h defines (nexar_status_str
// names the same range): a new code moves this bound.
inline bool is_known_error(int32_t code) {
  return code < 0 && code >= NEXAR_ERR_RPC_FAILED;
}

}  // namespace nexar
