// The C ABI's opaque handles and the glue every entry point shares: the only
// place that knows both the C types and the C++ core. Nothing thrown inside
// the library crosses this boundary.
#pragma once

#include <memory>
#include <new>
#include <string>

#include "client/communicator.h"
#include "nexar.h"

struct nexar_comm {
  std::unique_ptr<nexar::Communicator> impl;
};

namespace nexar::capi {

// Records the message for nexar_last_error_message() and returns the code.
nexar_status_t fail(const Status &s);
nexar_status_t fail(nexar_status_t code, const std::string &message);
// Clears the thread's last error and returns NEXAR_OK.
nexar_status_t ok();
const char *last_error();

// Runs fn, turning any escaping exception into a status.
template <class Fn>
nexar_status_t guarded(const char *what, Fn &&fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc &) {
    return fail(NEXAR_ERR_NO_MEMORY, std::string(what) + ": out of memory");
  } catch (const std::exception &e) {
    return fail(NEXAR_ERR_INTERNAL, std::string(what) + ": internal error: " + e.what());
  } catch (...) {
    return fail(NEXAR_ERR_INTERNAL, std::string(what) + ": internal error");
  }
}

// Submits an operation: an error means done will never run.
inline nexar_status_t submit(nexar_comm_t *comm, const char *name, Communicator::Body body,
                             nexar_done_fn done, void *user_data) {
  Status s = comm->impl->submit(name, std::move(body), done, user_data);
  return s.ok() ? ok() : fail(s);
}

}  // namespace nexar::capi
