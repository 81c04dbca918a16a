// The C ABI's opaque handles and the glue every entry point shares: the only
// place that knows both the C types and the C++ core. Nothing thrown inside
// the library crosses this boundary.
#pragma once

#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "client/communicator.h"
#include "nexar.h"
#include "transport/frame.h"

namespace nexar {
class ElasticLink;
}

namespace nexar::capi {
// The application's failure callback (nexar_comm_set_failure_callback), read
// where the communicator's callbacks run. Released after impl, whose
// destruction waits for those callbacks.
struct FailureHook {
  std::mutex mu;
  nexar_failure_fn fn = nullptr;
  void *user_data = nullptr;
};
// A thread joined when it goes away.
struct JoinedThread {
  std::thread thread;
  JoinedThread() = default;
  JoinedThread(JoinedThread &&) = default;
  JoinedThread &operator=(JoinedThread &&) = default;
  ~JoinedThread() { join(); }
  void join() {
    if (thread.joinable()) thread.join();
  }
};
}  // namespace nexar::capi

struct nexar_comm {
  nexar_comm() = default;
  explicit nexar_comm(std::unique_ptr<nexar::Communicator> c) : impl(std::move(c)) {}
  std::unique_ptr<nexar::Communicator> impl;
  std::unique_ptr<nexar::capi::FailureHook> failure_hook =
      std::make_unique<nexar::capi::FailureHook>();
  // The elastic seed's link (nexar_comm_pending_joins, nexar_comm_grow), shared
  // with the communicators shrunk or grown from this one; null when not elastic.
  std::shared_ptr<nexar::ElasticLink> elastic;
  uint64_t grows = 0;  // grows started on this communicator (the same at every member)
  // A grow with a completion callback runs on this thread. Last: joined
  // before the communicator goes away.
  nexar::capi::JoinedThread grow_thread;
};

namespace nexar::capi {

// Records the failure as this thread's last error (nexar_last_error,
// nexar_last_error_message) and returns its code. op_seq is the number the
// failed operation was given, 0 when it got none.
nexar_status_t fail(const Status &s, uint64_t op_seq = 0);
nexar_status_t fail(nexar_status_t code, const std::string &message);
// Clears the thread's last error and returns NEXAR_OK.
nexar_status_t ok();
// The last error's message ("" after a success).
const char *last_error();
// The last error as a completion (status NEXAR_OK, failed_rank -1 after a
// success); its message is last_error().
nexar_completion_t last_error_completion();

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

// What every entry point on a communicator checks first: comm set, and not a
// communicator a forked child inherited (it cannot be used there:
// Communicator::refuse_in_forked_child).
inline nexar_status_t check_comm(const nexar_comm_t *comm, const char *what) {
  if (!comm) return fail(NEXAR_ERR_INVALID_ARGUMENT, std::string(what) + ": comm is NULL");
  if (Status no = comm->impl->refuse_in_forked_child(what); !no.ok()) return fail(no);
  return NEXAR_OK;
}

// The checks of an entry point that sends bytes to one rank (p2p, RPC), made
// before anything is queued: comm set, buf set unless bytes is 0, the 4 GiB
// message limit, peer inside the communicator.
inline nexar_status_t check_message(nexar_comm_t *comm, const void *buf, size_t bytes,
                                    uint32_t peer, const char *what) {
  if (nexar_status_t no = check_comm(comm, what)) return no;
  if (!buf && bytes > 0)
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                format("%s: buffer is NULL but bytes is %zu", what, bytes));
  if (bytes > wire::kMaxMessageBytes)
    return fail(NEXAR_ERR_INVALID_ARGUMENT,
                format("%s: %zu bytes exceeds the 4 GiB message limit", what, bytes));
  if (peer >= comm->impl->size())
    return fail(NEXAR_ERR_INVALID_RANK,
                format("%s: rank %u is outside the communicator of %u ranks", what, peer,
                       comm->impl->size()));
  return NEXAR_OK;
}

// Submits an operation: an error means done will never run. A blocking call
// (done == NULL) that fails records the operation's number with its failure.
inline nexar_status_t submit(nexar_comm_t *comm, const char *name, Communicator::Body body,
                             nexar_done_fn done, void *user_data) {
  uint64_t seq = 0;
  Status s = comm->impl->submit(name, std::move(body), done, user_data, &seq);
  return s.ok() ? ok() : fail(s, seq);
}

// The same for a collective (numbered in issue order on every rank).
inline nexar_status_t submit_collective(nexar_comm_t *comm, const char *name,
                                        Communicator::Body body, nexar_done_fn done,
                                        void *user_data) {
  uint64_t seq = 0;
  Status s = comm->impl->submit_collective(name, std::move(body), done, user_data, &seq);
  return s.ok() ? ok() : fail(s, seq);
}

}  // namespace nexar::capi
