#include "core/spin.h"

#include <unistd.h>

namespace nexar {

uint32_t usable_cpus() {
  static const uint32_t n = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 1)
      return static_cast<uint32_t>(CPU_COUNT(&set));
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? static_cast<uint32_t>(online) : 1u;
  }();
  return n;
}

}  // namespace nexar
