// Ctrl-C during a blocking call on the C ABI's own blocking path.
//
// A blocking call with done == NULL is the fastest way through nexar: the
// calling thread runs the operation itself, with no hand-off between threads
// (each hand-off costs a thread wake-up, tens of microseconds here, more than
// a small collective takes). But it waits inside the C library, where
// Python's signal handlers cannot run. So on the main thread, while Python's
// own KeyboardInterrupt handler is installed, a C-level SIGINT handler
// (chained in front of Python's) wakes the "nexar-sigint" thread, which
// aborts the communicator of the call in progress; the call returns, and the
// caller raises KeyboardInterrupt. A SIGINT handler of the user's keeps the
// sliced wait (interruptible.h), which runs it as Python does.
#pragma once

#include <nexar.h>

namespace nexar_py {

// GIL held. True when a blocking call on this thread may take the C ABI's
// blocking path; *abort_on_ctrl_c then says whether a Ctrl-C must abort it
// (the main thread: Python delivers signals to no other).
bool blocking_path_allowed(bool *abort_on_ctrl_c);

// GIL released. While alive, a Ctrl-C aborts h (when armed).
class AbortOnCtrlC {
 public:
  AbortOnCtrlC(nexar_comm_t *h, bool armed);
  ~AbortOnCtrlC();
  AbortOnCtrlC(const AbortOnCtrlC &) = delete;
  AbortOnCtrlC &operator=(const AbortOnCtrlC &) = delete;

 private:
  bool armed_;
};

}  // namespace nexar_py
