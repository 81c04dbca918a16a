// One step of a polling loop. A rank that polls gives its core away
// (sched_yield) only when a peer it waits for may need that core: when the
// ranks of its host may outnumber the cores, or when the peer last ran on
// this very core. Otherwise it pauses the core briefly: sched_yield hands
// the core to any other runnable thread, even a niced one, for up to a
// scheduler tick, which is milliseconds against the microseconds a peer
// takes to publish.
#pragma once

#include <sched.h>

#include <cstdint>

namespace nexar {

// The CPUs this host's ranks may share, read once: this process's affinity
// mask, unless that is a single CPU (a rank bound to a core, as nexar-run
// --bind-to core does, whose peers have cores of their own), then the CPUs
// online.
uint32_t usable_cpus();

// Whether ranks_here polling ranks may outnumber the cores they share.
inline bool outnumbered(uint32_t ranks_here) {
  return ranks_here > usable_cpus();
}

inline void spin_step(bool give_core) {
  if (give_core) {
    sched_yield();
  } else {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }
}

}  // namespace nexar
