// The exits of nexar-run's ranks, in the order they happened.
//
// A rank that fails takes the others down within milliseconds: they see its
// shared-memory channel or connection hang up and fail too. Reaping ranks in
// rank order on the next pass of the watch loop would then often name one of
// those instead of the first. A SIGCHLD handler reaps each child as it exits
// and records it, so the watch loop sees exits in the order they came.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace nexar_run {

struct ChildExit {
  pid_t pid = -1;
  int status = 0;  // as waitpid reports it
};

// Installs the SIGCHLD handler: every exited child is reaped and recorded,
// then one byte goes to wake_fd (a non-blocking pipe) to wake a poll loop.
// Call once, before the first fork.
void record_child_exits(int wake_fd);

// The next exit recorded and not yet taken; false when there is none.
bool next_child_exit(ChildExit *out);

}  // namespace nexar_run
