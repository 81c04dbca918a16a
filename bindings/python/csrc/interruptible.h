// A blocking operation on the main thread while SIGINT has a handler of the
// program's own (otherwise ctrl_c.h's blocking path): submitted
// asynchronously, waited for in slices (GIL released) between which Python's
// signal handlers run; when one raises, the communicator is aborted (its
// peers are told) and the exception propagates.
#pragma once

#include <nexar.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

namespace nexar_py {

// The outcome of one blocking operation, on the waiting thread's stack.
struct BlockingCall {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  nexar_status_t status = NEXAR_OK;
  int32_t failed_rank = -1;
  std::string message;

  static void on_done(void *self, const nexar_completion_t *c) {
    auto *b = static_cast<BlockingCall *>(self);
    std::lock_guard<std::mutex> g(b->mu);
    b->status = c->status;
    b->failed_rank = c->failed_rank;
    b->message = c->message;
    b->done = true;
    b->cv.notify_one();
  }

  // True once done, false after `slice` without completion.
  bool wait_for(std::chrono::milliseconds slice) {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_for(g, slice, [&] { return done; });
  }
};

// How long a blocking call waits between two looks at Python's signals:
// Ctrl-C takes effect within this (plus the abort).
inline constexpr std::chrono::milliseconds kSignalSlice{50};

}  // namespace nexar_py
