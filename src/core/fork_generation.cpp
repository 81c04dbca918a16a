#include "core/fork_generation.h"

#include <pthread.h>

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

}  // namespace nexar
