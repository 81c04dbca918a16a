// Which process an object of nexar belongs to. A child forked after the
// library loaded holds a copy of its parent's communicators, engines and
// sockets, but none of their threads: it must neither use nor destroy them
// (a destroy would join threads that do not exist, a send would speak on the
// parent's connections). Objects remember the process they were made in.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace nexar {

// 0 in the process that loaded the library, one more in each child forked
// since (pthread_atfork); a relaxed load.
uint64_t fork_generation();

// Held by an object: the process that made it.
class MadeInProcess {
 public:
  MadeInProcess();
  bool in_forked_child() const { return fork_generation() != generation_; }
  // In a forked child, the error for what (an operation) on object (what
  // it is, e.g. "rank 3's communicator"): NEXAR_ERR_CLOSED naming both
  // processes; else ok.
  Status refuse_in_forked_child(const char *what, const std::string &object) const;

 private:
  uint64_t generation_;
  int pid_;
};

}  // namespace nexar
