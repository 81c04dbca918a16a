// Which process an object of nexar belongs to. A child forked after the
// library loaded holds a copy of its parent's communicators, engines and
// sockets, but none of their threads: it must neither use nor destroy them
// (a destroy would join threads that do not exist, a send would speak on the
// parent's connections). Objects remember the generation they were made in.
#pragma once

#include <cstdint>

namespace nexar {

// 0 in the process that loaded the library, one more in each child forked
// since (pthread_atfork); a relaxed load.
uint64_t fork_generation();

}  // namespace nexar
