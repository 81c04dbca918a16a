#include "core/fork_generation.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace nexar {
namespace {

std::atomic<uint64_t> generation{0};

// The child runs this alone, right after the fork.
void on_fork_child() {
  generation.fetch_add(1, std::memory_order_relaxed);
}

// At load: a fork before the first communicator is then counted too.
const int registered = pthread_atfork(nullptr, nullptr, on_fork_child);

}  // namespace

uint64_t fork_generation() {
  (void)registered;
  return generation.load(std::memory_order_relaxed);
}

MadeInProcess::MadeInProcess() : generation_(fork_generation()), pid_(static_cast<int>(getpid())) {}

Status MadeInProcess::refuse_in_forked_child(const char *what, const std::string &object) const {
  if (!in_forked_child()) return Status();
  return error(NEXAR_ERR_CLOSED,
               format("%s: %s belongs to process %d, and this process (%d) was forked from it "
                      "after it was made: a child cannot use it (make a new one in the child)",
                      what, object.c_str(), pid_, static_cast<int>(getpid())));
}

}  // namespace nexar
