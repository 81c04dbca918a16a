// Small blocking collectives on shared memory, run on the calling thread at
// once: no command, no operation on the heap, no coroutine. The caller takes
// its engine's loop (the loop thread sleeps in epoll, or a spinning one is
// asked to), runs the collective's steps (ShmOneTicket) and polls the
// members' counters between them, as a coroutine's wait does before it
// sleeps. A member still late after that poll makes the rest go on as a
// usual operation, whose waits sleep until rung; the caller waits for it as
// for any blocking call.
#pragma once

#include <cstdint>

#include "collective/coll.h"

namespace nexar {

// Runs collective kind, a blocking call of the C ABI named name, this way if
// it takes one ticket of the communicator's shared-memory area and the
// communicator can run it at once (Communicator::run_inline_collective).
// False if it did not run (the caller submits it as usual); else its status
// in *status and its operation number in *seq.
bool shm_run_inline(Communicator &comm, const char *name, CollKind kind, const CollArgs &args,
                    Status *status, uint64_t *seq);

}  // namespace nexar
